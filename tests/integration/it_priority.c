/* it_priority.c -- hora_request_t.priority: a late operation of higher
 * priority overtakes queued ones of lower priority.
 *   it_priority prio|fifo|split|nosplit|inarena|fifoarena [N [MIB [KIB]]]
 * After a barrier, every rank submits N allreduces 'low.K' of MIB MiB
 * (default 8 of 8)
 * from its own memory (streamed through the staging areas, so that they
 * queue behind one another), then one more, 'high', of priority 10 (prio)
 * or 0 (fifo), waits for 'high' and counts how many of the 'low' ones
 * had completed by then; then it waits for the rest and checks every
 * result. split and nosplit: the same, but 'high' is small (1 KiB, in
 * the arena), of priority 10 (split: on one host it runs between the
 * chunks of a streamed 'low' one) or 0. inarena and fifoarena: as split
 * and nosplit, every buffer from hora_alloc (reduced where it lies, a
 * chunk at a time on one host), and 'high' submitted 1 ms after the 'low'
 * ones, while they run; KIB sets the size of 'high' there (default 1: across
 * hosts its result comes with the decision; larger, it runs round the
 * ring beside the large one). It prints "rank R: high done with K of N low
 * done, T ms after it was submitted" and
 * "rank R: priority: C checks, F failures". With IT_PRIORITY_DIE set, the
 * last rank exits 8 ms after submitting 'high' (while it runs). */
#include <hora.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
  const char *arg[4] = {"prio", "8", "8", "1"};
  for (int i = 1, k = 0; i < argc; i++) /* the tests' --marker=... aside */
    if (strncmp(argv[i], "--", 2) && k < 4) arg[k++] = argv[i];
  const char *mode = arg[0];
  int n = atoi(arg[1]);
  size_t mib = (size_t)atoi(arg[2]), kib = (size_t)atoi(arg[3]);
  int arena = !strcmp(mode, "inarena") || !strcmp(mode, "fifoarena");
  int small = arena || !strcmp(mode, "split") || !strcmp(mode, "nosplit");
  int urgent = !strcmp(mode, "prio") || !strcmp(mode, "split") ||
               !strcmp(mode, "inarena");
  if (n < 1 || n > 64 || mib < 1 || kib < 1 || kib > 65536 ||
      (!small && strcmp(mode, "prio") && strcmp(mode, "fifo"))) {
    fprintf(stderr, "usage: it_priority prio|fifo|split|nosplit|inarena|"
                    "fifoarena [N [MIB [KIB]]]\n");
    return 2;
  }
  if (hora_init() != 0) return 1;
  int rank = hora_rank(), size = hora_size();
  size_t count = mib << 18; /* float32 elements */
  float *buf[65];
  int64_t h[65];
  int checks = 0, failures = 0;
  size_t cnt[65];
  for (int k = 0; k <= n; k++) {
    cnt[k] = k == n && small ? kib * 256 : count;
    buf[k] = arena ? hora_alloc(cnt[k] * sizeof(float))
                   : malloc(cnt[k] * sizeof(float));
    if (!buf[k]) return 1;
    for (size_t i = 0; i < cnt[k]; i++) buf[k][i] = (float)(k + 1);
  }
  hora_barrier(); /* the ranks submit together */
  struct timespec t0 = {0, 0};
  for (int k = 0; k <= n; k++) {
    char name[32];
    if (k < n) snprintf(name, sizeof name, "low.%d", k);
    else snprintf(name, sizeof name, "high");
    if (k == n && arena) { /* the 'low' ones run by now */
      struct timespec ms = {0, 1000000};
      nanosleep(&ms, NULL);
    }
    if (k == n) clock_gettime(CLOCK_MONOTONIC, &t0);
    hora_request_t q = {.coll = HORA_COLL_ALLREDUCE, .name = name,
                        .sendbuf = buf[k], .recvbuf = buf[k],
                        .count = cnt[k], .dtype = HORA_FLOAT32,
                        .op = HORA_SUM, .priority = k == n && urgent ? 10 : 0};
    int rc = hora_submit(&q, &h[k]);
    if (rc < 0) {
      printf("rank %d: submit %s: %s\n", rank, name, hora_last_error());
      return 1;
    }
  }
  if (getenv("IT_PRIORITY_DIE") && rank == size - 1) {
    /* lost while 'high' and the 'low' ones run: the others' fail */
    struct timespec ms = {0, 8000000};
    nanosleep(&ms, NULL);
    _exit(9);
  }
  int rc = hora_wait(h[n]), done_before = 0;
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double high_ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
                   (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  checks++;
  if (rc < 0) {
    failures++;
    printf("rank %d: FAIL high: %s\n", rank, hora_last_error());
  }
  int done[64] = {0};
  for (int k = 0; k < n; k++) {
    rc = hora_test(h[k], &done[k]); /* done: the handle is released */
    if (rc < 0) {
      failures++;
      printf("rank %d: FAIL test low.%d: %s\n", rank, k, hora_last_error());
    }
    done_before += done[k] != 0;
  }
  printf("rank %d: high done with %d of %d low done, %.1f ms after it was "
         "submitted\n", rank, done_before, n, high_ms);
  for (int k = 0; k < n; k++) {
    checks++;
    if (!done[k] && hora_wait(h[k]) < 0) {
      failures++;
      printf("rank %d: FAIL low.%d: %s\n", rank, k, hora_last_error());
    }
  }
  for (int k = 0; k <= n; k++) {
    float want = (float)((k + 1) * size);
    size_t bad = 0;
    for (size_t i = 0; i < cnt[k]; i++) bad += buf[k][i] != want;
    checks++;
    if (bad) {
      failures++;
      printf("rank %d: FAIL %s %d: %zu elements differ from %g\n", rank,
             k < n ? "low" : "high", k, bad, want);
    }
    if (arena) hora_free(buf[k]);
    else free(buf[k]);
  }
  printf("rank %d: priority: %d checks, %d failures\n", rank, checks,
         failures);
  fflush(stdout);
  hora_shutdown();
  return failures ? 3 : 0;
}
