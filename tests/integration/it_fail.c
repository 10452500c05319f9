/* it_fail.c -- ranks that fail, or that wait to be interrupted.
 *
 *   it_fail exit3 [VICTIM]      rank VICTIM (default 1) exits with 3 while
 *                               the others are blocked in an allreduce
 *   it_fail sigkill [VICTIM]    the same, but it kills itself with SIGKILL
 *   it_fail exit3sleep [VICTIM] rank VICTIM exits 3 while the others sleep
 *                               outside hora (horarun must stop them)
 *   it_fail noinit [VICTIM]     rank VICTIM exits 0 without ever calling
 *                               hora_init, while the others are blocked in
 *                               an allreduce
 *   it_fail loop                every rank loops on barrier + 50 ms sleep
 *                               (for SIGINT to horarun)
 *   it_fail blocked             rank 0 sleeps, the others are blocked in an
 *                               allreduce rank 0 never joins (for SIGINT)
 *
 * A surviving rank prints
 *   rank R: got HORA_EPEERGONE as expected: <message>
 * and exits 4 when the pending allreduce failed with HORA_EPEERGONE and a
 * message that names rank VICTIM; it exits 5 (with a FAIL line) when the
 * allreduce returned anything else. Every rank prints "rank R: ready" once
 * it is in position; with IT_FAIL_LINGER_MS set, a survivor waits that
 * long before it exits 4. Arguments starting with --marker= are ignored.
 * Loops give up (exit 9) after 120 s so a broken teardown cannot hang. */
#include <hora.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int rank_, size_;

/* IT_FAIL_LINGER_MS: a survivor waits that long before it exits (so that
 * what horad does meanwhile comes first). */
static void linger(void) {
  const char *ms = getenv("IT_FAIL_LINGER_MS");
  if (ms) usleep((useconds_t)atoi(ms) * 1000u);
}

static void survivor(int victim) {
  float x[1024];
  for (int i = 0; i < 1024; i++) x[i] = 1;
  printf("rank %d: ready, blocking in an allreduce\n", rank_);
  fflush(stdout);
  int rc = hora_allreduce("stuck", x, x, 1024, HORA_FLOAT32, HORA_SUM);
  char want[32];
  snprintf(want, sizeof want, "rank %d", victim);
  const char *msg = hora_last_error();
  if (rc == HORA_EPEERGONE && strstr(msg, want)) {
    printf("rank %d: got HORA_EPEERGONE as expected: %s\n", rank_, msg);
    /* and later calls fail at once too, they do not hang */
    rc = hora_allreduce("later", x, x, 16, HORA_FLOAT32, HORA_SUM);
    if (rc == 0)
      printf("rank %d: FAIL: an allreduce after the loss of rank %d "
             "succeeded\n", rank_, victim);
    else
      printf("rank %d: a later allreduce: %s: %s\n", rank_, hora_err_name(rc),
             hora_last_error());
    fflush(stdout);
    linger();
    exit(4);
  }
  printf("rank %d: FAIL: the blocked allreduce returned %d (%s), expected "
         "HORA_EPEERGONE naming \"%s\"; message: \"%s\"\n",
         rank_, rc, hora_err_name(rc), want, msg);
  fflush(stdout);
  exit(5);
}

int main(int argc, char **argv) {
  const char *args[4] = {0};
  int na = 0;
  for (int i = 1; i < argc && na < 4; i++)
    if (strncmp(argv[i], "--marker=", 9) != 0) args[na++] = argv[i];
  if (!args[0]) {
    fprintf(stderr, "usage: it_fail exit3|sigkill|exit3sleep|noinit|loop|"
                    "blocked [VICTIM]\n");
    return 2;
  }
  const char *mode = args[0];
  int victim = args[1] ? atoi(args[1]) : 1;
  const char *me = getenv("HORA_RANK");
  if (!strcmp(mode, "noinit") && me && atoi(me) == victim) {
    printf("rank %d: ready, leaving in 300 ms without hora_init\n", victim);
    fflush(stdout);
    usleep(300000); /* let the others block */
    return 0;
  }
  int rc = hora_init();
  if (rc != 0) {
    printf("FAIL: hora_init: %s\n", hora_last_error());
    return 1;
  }
  rank_ = hora_rank();
  size_ = hora_size();
  if (!strcmp(mode, "noinit")) survivor(victim);
  /* a working job first */
  float x[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  rc = hora_allreduce("warmup", x, x, 8, HORA_FLOAT32, HORA_SUM);
  if (rc != 0 || x[0] != (float)size_) {
    printf("rank %d: FAIL: warm-up allreduce: rc %d, %g: %s\n", rank_, rc,
           (double)x[0], hora_last_error());
    return 1;
  }
  hora_barrier();

  if (!strcmp(mode, "exit3") || !strcmp(mode, "sigkill")) {
    if (rank_ != victim) survivor(victim);
    printf("rank %d: ready, going away in 300 ms\n", rank_);
    fflush(stdout);
    usleep(300000); /* let the others block */
    if (!strcmp(mode, "exit3")) {
      printf("rank %d: exiting with status 3\n", rank_);
      fflush(stdout);
      _exit(3);
    }
    printf("rank %d: killing itself with SIGKILL\n", rank_);
    fflush(stdout);
    kill(getpid(), SIGKILL);
    pause();
    return 1;
  }
  if (!strcmp(mode, "exit3sleep")) {
    printf("rank %d: ready\n", rank_);
    fflush(stdout);
    if (rank_ == victim) {
      usleep(300000);
      printf("rank %d: exiting with status 3\n", rank_);
      fflush(stdout);
      _exit(3);
    }
    sleep(120); /* horarun has to end this */
    printf("rank %d: FAIL: still alive after 120 s\n", rank_);
    return 9;
  }
  if (!strcmp(mode, "loop")) {
    time_t t0 = time(NULL);
    printf("rank %d: ready, looping\n", rank_);
    fflush(stdout);
    while (time(NULL) - t0 < 120) {
      rc = hora_barrier();
      if (rc != 0) {
        printf("rank %d: barrier: %s: %s\n", rank_, hora_err_name(rc),
               hora_last_error());
        return 6;
      }
      usleep(50000);
    }
    printf("rank %d: FAIL: still looping after 120 s\n", rank_);
    return 9;
  }
  if (!strcmp(mode, "blocked")) {
    printf("rank %d: ready\n", rank_);
    fflush(stdout);
    if (rank_ == 0) {
      sleep(120);
      printf("rank %d: FAIL: still alive after 120 s\n", rank_);
      return 9;
    }
    rc = hora_allreduce("never", x, x, 8, HORA_FLOAT32, HORA_SUM);
    printf("rank %d: the blocked allreduce returned %s: %s\n", rank_,
           hora_err_name(rc), hora_last_error());
    return rc == 0 ? 9 : 6;
  }
  fprintf(stderr, "it_fail: unknown mode '%s'\n", mode);
  return 2;
}
