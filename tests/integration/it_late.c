/* it_late.c -- a job with a straggler: OPS allreduces of COUNT float32s
 * (checked) and one broadcast of 10 int32s, rank SLOW sleeping DELAY_MS
 * before each allreduce, then held alive with IT_HOLD=PATH (it_hold.h),
 * so that a test can scrape every horad's metrics while the job lives.
 * Usage: it_late OPS SLOW DELAY_MS COUNT [ignored...] */
#include <hora.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "it_hold.h"

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
  it_hold(r);
  printf("rank %d: %s\n", r, bad ? "FAILED" : "ok");
  free(x);
  hora_shutdown();
  return bad;
}
