/* mh_loop.c -- a rank that keeps the job busy with allreduces (multi-host
 * tests: a host killed or cut off mid-job, strangers on the job's ports).
 *
 *   mh_loop [-t SECONDS] [-s COUNT] [-T LIMIT]
 *
 * Loops a float32 SUM allreduce of COUNT elements (default 65536) whose
 * result every rank checks exactly. Prints, on stdout:
 *   "rank R of N on HOST: running"           after the first good allreduce
 *   "rank R of N: K allreduces, F failures"  at a clean end (exit 0 when F
 *                                            is 0, else 1)
 *   "rank R: allreduce K failed: HORA_E...: <hora_last_error()>"
 *                                            when one fails (exit 3)
 * With -t, rank 0 decides when SECONDS have passed and every rank stops at
 * the same iteration (the decision travels in element 0 of the data);
 * without it the loop runs until an allreduce fails, or LIMIT seconds
 * (default 300: exit 9) so that a broken teardown cannot hang the tests.
 * Arguments starting with --marker= are ignored. */
#include <hora.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  int n = 0;
  for (int i = 0; i < argc; i++)
    if (strncmp(argv[i], "--marker=", 9) != 0) argv[n++] = argv[i];
  argc = n;
  argv[argc] = NULL;
  double seconds = 0, limit = 300;
  long count = 65536;
  int opt;
  while ((opt = getopt(argc, argv, "t:s:T:")) != -1) {
    switch (opt) {
    case 't': seconds = atof(optarg); break;
    case 's': count = atol(optarg); break;
    case 'T': limit = atof(optarg); break;
    default:
      fprintf(stderr, "usage: mh_loop [-t SECONDS] [-s COUNT] [-T LIMIT]\n");
      return 2;
    }
  }
  if (count < 2) count = 2;
  setvbuf(stdout, NULL, _IOLBF, 0);
  int rc = hora_init();
  if (rc) {
    printf("rank ?: hora_init failed: %s: %s\n", hora_err_name(rc),
           hora_last_error());
    return 3;
  }
  int rank = hora_rank(), size = hora_size();
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  float *x = hora_alloc((size_t)count * sizeof *x);
  if (!x) x = malloc((size_t)count * sizeof *x);
  if (!x) {
    printf("rank %d: out of memory\n", rank);
    return 3;
  }
  /* sum over ranks of (r + 1) * v = v * size * (size + 1) / 2, exact */
  const float tri = (float)size * (float)(size + 1) / 2.0f;
  double t0 = now_s();
  long k = 0, failures = 0;
  for (;; k++) {
    int stop = rank == 0 && seconds > 0 && now_s() - t0 >= seconds;
    x[0] = (float)stop;
    for (long j = 1; j < count; j++)
      x[j] = (float)(rank + 1) * (float)((j + k) % 13 + 1);
    rc = hora_allreduce("mh_loop", x, x, (size_t)count, HORA_FLOAT32, HORA_SUM);
    if (rc) {
      printf("rank %d: allreduce %ld failed: %s: %s\n", rank, k,
             hora_err_name(rc), hora_last_error());
      return 3;
    }
    long bad = 0;
    for (long j = 1; j < count; j++)
      if (x[j] != tri * (float)((j + k) % 13 + 1)) bad++;
    if (bad) {
      failures++;
      if (failures <= 5)
        printf("rank %d: FAIL: allreduce %ld: %ld of %ld elements wrong\n",
               rank, k, bad, count - 1);
    }
    if (k == 0) printf("rank %d of %d on %s: running\n", rank, size, host);
    if (x[0] != 0) break;
    if (now_s() - t0 > limit) {
      printf("rank %d: FAIL: still looping after %.0f s; giving up\n", rank,
             limit);
      return 9;
    }
  }
  printf("rank %d of %d: %ld allreduces, %ld failures\n", rank, size, k + 1,
         failures);
  hora_shutdown();
  return failures ? 1 : 0;
}
