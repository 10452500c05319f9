/* fusion_perf -- many small allreduces at once, as a training step sends
 * its gradients: each step submits T float32 SUM allreduces of B bytes
 * each (async, every rank in the same order) and waits for all of them.
 * Prints the time per step (median of the timed steps, the slowest rank's)
 * and checks one more step's results. Run it with tensor fusion on (the
 * default) and off (HOROVOD_FUSION_THRESHOLD=0) to see what fusion buys;
 * benchmarks/fusion.sh does that across two hosts.
 *
 *   horarun -np 2 -H h1:1,h2:1 fusion_perf -t 100 -b 4K -n 50 */
#include <hora.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static long num(const char *s, const char *what) {
  char *end;
  long v = strtol(s, &end, 10);
  if (*end == 'K' || *end == 'k') v <<= 10, end++;
  else if (*end == 'M' || *end == 'm') v <<= 20, end++;
  if (*end || v <= 0) {
    fprintf(stderr, "fusion_perf: bad %s: %s\n", what, s);
    exit(2);
  }
  return v;
}

static int step(int t, float *const *buf, size_t count, int64_t *h) {
  char name[32];
  for (int j = 0; j < t; j++) {
    snprintf(name, sizeof name, "fusion.%d", j);
    int rc = hora_allreduce_async(name, buf[j], buf[j], count, HORA_FLOAT32,
                                  HORA_SUM, &h[j]);
    if (rc < 0) {
      fprintf(stderr, "fusion_perf: allreduce %s: %s\n", name,
              hora_last_error());
      return -1;
    }
  }
  int bad = 0;
  for (int j = 0; j < t; j++)
    if (hora_wait(h[j]) < 0 && !bad++)
      fprintf(stderr, "fusion_perf: wait: %s\n", hora_last_error());
  return bad ? -1 : 0;
}

int main(int argc, char **argv) {
  long t = 100, bytes = 4096, iters = 50, warmup = 10;
  int c;
  while ((c = getopt(argc, argv, "t:b:n:w:h")) != -1) {
    switch (c) {
    case 't': t = num(optarg, "-t"); break;
    case 'b': bytes = num(optarg, "-b"); break;
    case 'n': iters = num(optarg, "-n"); break;
    case 'w': warmup = num(optarg, "-w"); break;
    default:
      fprintf(c == 'h' ? stdout : stderr,
              "usage: fusion_perf [-t tensors] [-b bytes each] [-n steps] "
              "[-w warm-up steps]\n  defaults: -t 100 -b 4K -n 50 -w 10\n");
      return c == 'h' ? 0 : 2;
    }
  }
  if (hora_init() < 0) {
    fprintf(stderr, "fusion_perf: %s\n", hora_last_error());
    return 1;
  }
  int rank = hora_rank(), n = hora_size();
  size_t count = (size_t)bytes / sizeof(float);
  if (count == 0) count = 1;
  float **buf = calloc((size_t)t, sizeof *buf);
  int64_t *h = calloc((size_t)t, sizeof *h);
  double *us = calloc((size_t)iters, sizeof *us);
  if (!buf || !h || !us) return 1;
  for (long j = 0; j < t; j++)
    if (!(buf[j] = hora_alloc(count * sizeof(float)))) {
      fprintf(stderr, "fusion_perf: hora_alloc: %s\n", hora_last_error());
      return 1;
    }
  for (long i = 0; i < warmup; i++)
    if (step((int)t, buf, count, h) < 0) return 1;
  for (long i = 0; i < iters; i++) {
    hora_barrier();
    double t0 = now_us();
    if (step((int)t, buf, count, h) < 0) return 1;
    us[i] = now_us() - t0;
    /* the slowest rank's time: one allreduce of the step times */
    float v = (float)us[i];
    hora_allreduce("fusion.time", &v, &v, 1, HORA_FLOAT32, HORA_MAX);
    us[i] = v;
  }
  /* one more step, checked: tensor j of rank r holds r + j + k at k */
  for (long j = 0; j < t; j++)
    for (size_t k = 0; k < count; k++)
      buf[j][k] = (float)(rank + j + (long)(k % 7));
  if (step((int)t, buf, count, h) < 0) return 1;
  long long wrong = 0;
  for (long j = 0; j < t; j++)
    for (size_t k = 0; k < count; k++) {
      double want = (double)n * (n - 1) / 2 + (double)n * (j + (long)(k % 7));
      wrong += buf[j][k] != (float)want;
    }
  qsort(us, (size_t)iters, sizeof *us, cmp);
  if (rank == 0)
    printf("fusion_perf: %d ranks, %ld tensors x %zu bytes float32 sum: "
           "%.1f us per step (median of %ld), %.2f us per tensor, "
           "#wrong %lld\n",
           n, t, count * sizeof(float), us[iters / 2], iters,
           us[iters / 2] / (double)t, wrong);
  else if (wrong)
    printf("fusion_perf: rank %d: #wrong %lld\n", rank, wrong);
  hora_shutdown();
  return wrong ? 1 : 0;
}
