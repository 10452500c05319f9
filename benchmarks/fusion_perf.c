/* fusion_perf -- many small allreduces at once, as a training step sends
 * its gradients: each step submits T float32 SUM allreduces of B bytes
 * each (or of the sizes a file lists, one byte count per line, submitted
 * last line first, as backward produces a model's gradients; async, every
 * rank in the same order) and waits for all of them.
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

/* Elements of a tensor of b bytes (at least 1). */
#define ELEMS(b) ((b) / sizeof(float) ? (b) / sizeof(float) : 1)

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

static int step(int t, float *const *buf, const size_t *count, int64_t *h) {
  char name[32];
  for (int j = t - 1; j >= 0; j--) {
    snprintf(name, sizeof name, "fusion.%d", j);
    int rc = hora_allreduce_async(name, buf[j], buf[j], count[j], HORA_FLOAT32,
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
  const char *sizes = NULL;
  int c;
  while ((c = getopt(argc, argv, "t:b:n:w:S:h")) != -1) {
    switch (c) {
    case 't': t = num(optarg, "-t"); break;
    case 'b': bytes = num(optarg, "-b"); break;
    case 'n': iters = num(optarg, "-n"); break;
    case 'w': warmup = num(optarg, "-w"); break;
    case 'S': sizes = optarg; break;
    default:
      fprintf(c == 'h' ? stdout : stderr,
              "usage: fusion_perf [-t tensors] [-b bytes each] [-S sizes-file] "
              "[-n steps] [-w warm-up steps]\n"
              "  defaults: -t 100 -b 4K -n 50 -w 10; -S: one byte count per "
              "line (instead of -t, -b)\n");
      return c == 'h' ? 0 : 2;
    }
  }
  size_t *count = NULL, total = 0;
  if (sizes) {
    FILE *f = fopen(sizes, "r");
    char line[64];
    long cap = 0;
    t = 0;
    for (int ln = 1; f && fgets(line, sizeof line, f); ln++) {
      line[strcspn(line, "\r\n")] = '\0';
      if (!line[0]) continue;
      if (t == cap) {
        cap = cap ? 2 * cap : 256;
        if (!(count = realloc(count, (size_t)cap * sizeof *count))) return 1;
      }
      char what[96];
      snprintf(what, sizeof what, "size at %s:%d", sizes, ln);
      count[t++] = ELEMS((size_t)num(line, what));
    }
    if (!f || !t) {
      fprintf(stderr, "fusion_perf: %s: %s\n", sizes,
              f ? "no sizes in it" : "cannot open it");
      return 2;
    }
    fclose(f);
  } else {
    if (!(count = calloc((size_t)t, sizeof *count))) return 1;
    for (long j = 0; j < t; j++) count[j] = ELEMS((size_t)bytes);
  }
  for (long j = 0; j < t; j++) total += count[j] * sizeof(float);
  if (hora_init() < 0) {
    fprintf(stderr, "fusion_perf: %s\n", hora_last_error());
    return 1;
  }
  int rank = hora_rank(), n = hora_size();
  float **buf = calloc((size_t)t, sizeof *buf);
  int64_t *h = calloc((size_t)t, sizeof *h);
  double *us = calloc((size_t)iters, sizeof *us);
  if (!buf || !h || !us) return 1;
  for (long j = 0; j < t; j++)
    if (!(buf[j] = hora_alloc(count[j] * sizeof(float)))) {
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
    for (size_t k = 0; k < count[j]; k++)
      buf[j][k] = (float)(rank + j + (long)(k % 7));
  if (step((int)t, buf, count, h) < 0) return 1;
  long long wrong = 0;
  for (long j = 0; j < t; j++)
    for (size_t k = 0; k < count[j]; k++) {
      double want = (double)n * (n - 1) / 2 + (double)n * (j + (long)(k % 7));
      wrong += buf[j][k] != (float)want;
    }
  qsort(us, (size_t)iters, sizeof *us, cmp);
  if (rank == 0)
    printf("fusion_perf: %d ranks, %ld tensors (%zu bytes in all) float32 "
           "sum: %.1f us per step (median of %ld), %.2f us per tensor, "
           "#wrong %lld\n",
           n, t, total, us[iters / 2], iters, us[iters / 2] / (double)t,
           wrong);
  else if (wrong)
    printf("fusion_perf: rank %d: #wrong %lld\n", rank, wrong);
  for (long j = 0; j < t; j++) hora_free(buf[j]);
  free(buf);
  free(h);
  free(us);
  free(count);
  hora_shutdown();
  return wrong ? 1 : 0;
}
