/* it_late.c -- a job with a straggler: OPS allreduces of COUNT float32s
 * (checked) and one broadcast of 10 int32s, rank SLOW sleeping DELAY_MS
 * before each allreduce. With IT_LATE_HOLD=PATH, rank 0 then writes
 * PATH.done and every rank waits (30 s at most) for PATH.go, so that a
 * test can scrape every horad's metrics while the job is alive.
 * Usage: it_late OPS SLOW DELAY_MS COUNT [ignored...] */
#include <hora.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {}
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: it_late OPS SLOW DELAY_MS COUNT\n");
    return 2;
  }
  int ops = atoi(argv[1]), slow = atoi(argv[2]), delay = atoi(argv[3]);
  size_t count = (size_t)atol(argv[4]);
  if (hora_init() != 0) return 1;
  int r = hora_rank(), n = hora_size(), bad = 0;
  float *x = malloc(count * sizeof *x);
  if (!x) return 1;
  for (int i = 0; i < ops; i++) {
    char name[32];
    snprintf(name, sizeof name, "late.%d", i);
    for (size_t k = 0; k < count; k++) x[k] = (float)(r + i);
    if (r == slow) sleep_ms(delay);
    int rc = hora_allreduce(name, x, x, count, HORA_FLOAT32, HORA_SUM);
    float want = (float)(n * (n - 1) / 2 + n * i);
    if (rc != 0 || x[0] != want || x[count - 1] != want) {
      printf("rank %d: allreduce %d: rc %d got %g want %g\n", r, i, rc,
             (double)x[0], (double)want);
      bad = 1;
    }
  }
  int b[10];
  for (int k = 0; k < 10; k++) b[k] = r == 0 ? k : -1;
  if (hora_broadcast("late.bcast", b, 10, HORA_INT32, 0) != 0 || b[9] != 9) {
    printf("rank %d: broadcast failed\n", r);
    bad = 1;
  }
  const char *hold = getenv("IT_LATE_HOLD");
  if (hold) {
    char path[4096];
    snprintf(path, sizeof path, "%s.done", hold);
    FILE *f = r == 0 ? fopen(path, "w") : NULL;
    if (f) fclose(f);
    snprintf(path, sizeof path, "%s.go", hold);
    for (int t = 0; t < 3000 && access(path, F_OK) != 0; t++) sleep_ms(10);
  }
  printf("rank %d: %s\n", r, bad ? "FAILED" : "ok");
  free(x);
  hora_shutdown();
  return bad;
}
