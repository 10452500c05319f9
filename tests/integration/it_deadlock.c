/* it_deadlock.c -- script mistakes that would hang a job, one per mode
 * (argv[1]); each rank prints what its wait returned and how long it took.
 *   order   rank 0 allreduces 'a' then 'b', the others 'b' then 'a'
 *   skip    the last rank skips allreduce 'loss' before the epoch's
 *           barrier-like allreduce 'epoch.end' the others reach after it
 *   names   rank 1 names its gradient 'grad_0', the others 'grad.0'
 *   threads two threads per rank, each waiting on a name of its own:
 *           every thread of every rank is stuck
 *   thread-exit  a second thread per rank allreduces 'y' (which completes)
 *           and ends; the main threads then wait on names of their own
 *   stop    the last rank stops itself (SIGSTOP) before its allreduce
 *   spin    the last rank loops forever before its allreduce
 *   busy    no deadlock: the last rank computes for a while (longer than
 *           the detector's confirmation) before it submits, while the
 *           others wait
 *   pset    ranks 0 and 1 deadlock in a process set of their own while
 *           the others go on in a set of their own (and linger 1 s once
 *           the job fails, so the deadlocked ranks' reports are printed)
 * Every wait that fails prints "rank R: NAME failed after S s: ERR: MSG". */
#include <hora.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int rank, size;

/* A blocking allreduce of 4 floats; 1 when it worked. */
static int reduce(const char *name) {
  float x[4] = {1, 1, 1, 1};
  double t0 = now();
  int rc = hora_allreduce(name, x, x, 4, HORA_FLOAT32, HORA_SUM);
  if (rc < 0) {
    printf("rank %d: %s failed after %.2f s: %s: %s\n", rank, name,
           now() - t0, hora_err_name(rc), hora_last_error());
    fflush(stdout);
    return 0;
  }
  printf("rank %d: %s = %g\n", rank, name, x[0]);
  fflush(stdout);
  return 1;
}

static void *thread_main(void *arg) {
  char name[32];
  if (arg) snprintf(name, sizeof name, "t.%d", rank);
  reduce(arg ? name : "y");
  return NULL;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "order";
  if (hora_init() != 0) return 1;
  rank = hora_rank();
  size = hora_size();
  int last = size - 1, ok = 1;
  if (!strcmp(mode, "order")) {
    ok = rank == 0 ? reduce("a") && reduce("b") : reduce("b") && reduce("a");
  } else if (!strcmp(mode, "skip")) {
    if (rank != last) ok = reduce("loss");
    ok = ok && reduce("epoch.end");
  } else if (!strcmp(mode, "names")) {
    ok = reduce(rank == 1 ? "grad_0" : "grad.0");
  } else if (!strcmp(mode, "threads") || !strcmp(mode, "thread-exit")) {
    int own = !strcmp(mode, "threads");
    pthread_t t;
    pthread_create(&t, NULL, thread_main, own ? &own : NULL);
    if (!own) pthread_join(t, NULL);
    char name[32];
    snprintf(name, sizeof name, "m.%d", rank);
    ok = reduce(name);
    if (own) pthread_join(t, NULL);
  } else if (!strcmp(mode, "stop")) {
    if (rank == last) raise(SIGSTOP);
    ok = reduce("after.stop");
  } else if (!strcmp(mode, "spin")) {
    if (rank == last)
      for (volatile unsigned long i = 0;; i++) {
      }
    ok = reduce("after.spin");
  } else if (!strcmp(mode, "busy")) {
    if (rank == last) usleep(1500000);
    ok = reduce("late");
  } else if (!strcmp(mode, "pset")) {
    int two[2] = {0, 1}, rest[64], n = 0;
    for (int i = 2; i < size && n < 64; i++) rest[n++] = i;
    int a = hora_process_set_add(two, 2);
    int b = n ? hora_process_set_add(rest, n) : 0;
    if (a < 0 || b < 0) return 2;
    float x = 1;
    const char *name = rank == 0 ? "p.a" : rank == 1 ? "p.b" : "p.other";
    for (int i = 0; i < (rank <= 1 ? 1 : 20) && ok; i++) {
      hora_request_t r = {.coll = HORA_COLL_ALLREDUCE, .name = name,
                          .sendbuf = &x, .recvbuf = &x, .count = 1,
                          .dtype = HORA_FLOAT32, .op = HORA_SUM,
                          .process_set = rank <= 1 ? a : b};
      int64_t h;
      double t0 = now();
      int rc = hora_submit(&r, &h);
      if (rc == 0) rc = hora_wait(h);
      if (rc < 0) {
        printf("rank %d: %s failed after %.2f s: %s: %s\n", rank, name,
               now() - t0, hora_err_name(rc), hora_last_error());
        ok = 0;
      }
      if (rank > 1) usleep(100000);
    }
    /* horarun ends the job at the first rank that exits with an error: the
     * ranks outside the deadlock, failed as the job fails, linger so that
     * the deadlocked ranks' own reports are printed before that */
    if (!ok && rank > 1) usleep(1000000);
  }
  printf("rank %d: end %s\n", rank, ok ? "ok" : "failed");
  fflush(stdout);
  hora_shutdown();
  return ok ? 0 : 3;
}
