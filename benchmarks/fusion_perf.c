/* fusion_perf -- many small allreduces at once, as a training step sends
 * its gradients: each step submits T float32 SUM allreduces (-A:
 * allgathers; -R: reducescatters) of B bytes each (or of the sizes a file lists, one byte
 * count per line, submitted last line first, as backward produces a
 * model's gradients; async, every rank in the same order) and waits for
 * all of them.
 * Prints the time per step (median of the timed steps, the slowest rank's)
 * and checks one more step's results (-c: every step's). -g B adds to each
 * step an allgather of B bytes from each rank. Run it with tensor fusion
 * on (the default) and off (HOROVOD_FUSION_THRESHOLD=0) to see what fusion
 * buys; benchmarks/fusion.sh does that across two hosts.
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

/* the allgather of -g: each rank's block, and everyone's */
static float *gin, *gout;
static size_t gcount;
/* -A: the T tensors are allgathers; gathered[j]: tensor j's output */
static int gather_all;
static float **gathered;
/* -R: the T tensors are reducescatters; scattered[j]: this rank's block of
 * tensor j, elements [first[j], first[j] + rows[j]) of the sum */
static int scatter_all;
static float **scattered;
static size_t *first, *rows;

static int step(int t, float *const *buf, const size_t *count, int64_t *h) {
  char name[32];
  int64_t gh = -1;
  hora_request_t g = {.coll = HORA_COLL_ALLGATHER, .name = "fusion.gather",
                      .sendbuf = gin, .recvbuf = gout, .count = gcount,
                      .recv_count = gcount * (size_t)hora_size(),
                      .dtype = HORA_FLOAT32};
  if (gcount && hora_submit(&g, &gh) < 0) {
    fprintf(stderr, "fusion_perf: allgather: %s\n", hora_last_error());
    return -1;
  }
  for (int j = t - 1; j >= 0; j--) {
    snprintf(name, sizeof name, "fusion.%d", j);
    int rc;
    if (gather_all) {
      hora_request_t q = {.coll = HORA_COLL_ALLGATHER, .name = name,
                          .sendbuf = buf[j], .recvbuf = gathered[j],
                          .count = count[j],
                          .recv_count = count[j] * (size_t)hora_size(),
                          .dtype = HORA_FLOAT32};
      rc = hora_submit(&q, &h[j]);
    } else if (scatter_all) {
      hora_request_t q = {.coll = HORA_COLL_REDUCESCATTER, .name = name,
                          .sendbuf = buf[j], .recvbuf = scattered[j],
                          .count = count[j], .recv_count = rows[j],
                          .dtype = HORA_FLOAT32, .op = HORA_SUM};
      rc = hora_submit(&q, &h[j]);
    } else {
      rc = hora_allreduce_async(name, buf[j], buf[j], count[j], HORA_FLOAT32,
                                HORA_SUM, &h[j]);
    }
    if (rc < 0) {
      fprintf(stderr, "fusion_perf: %s %s: %s\n",
              gather_all ? "allgather" : scatter_all ? "reducescatter"
                                                     : "allreduce",
              name, hora_last_error());
      return -1;
    }
  }
  int bad = 0;
  for (int j = 0; j < t; j++)
    if (hora_wait(h[j]) < 0 && !bad++)
      fprintf(stderr, "fusion_perf: wait: %s\n", hora_last_error());
  if (gh >= 0 && hora_wait(gh) < 0 && !bad++)
    fprintf(stderr, "fusion_perf: wait: %s\n", hora_last_error());
  return bad ? -1 : 0;
}

/* Inputs whose results check() knows: tensor j of rank r holds r + j + k
 * at k (the sum: n(n-1)/2 + n(j + k)); rank r's allgather block r*1000 +
 * k % 11 + s (s: the step, so that a stale block shows). */
static void fill(int t, float *const *buf, const size_t *count, int rank,
                 long s) {
  for (long j = 0; j < t; j++)
    for (size_t k = 0; k < count[j]; k++)
      buf[j][k] = (float)(rank + j + (long)(k % 7));
  for (long j = 0; gather_all && j < t; j++)
    for (size_t k = 0; k < count[j] * (size_t)hora_size(); k++)
      gathered[j][k] = -1;
  for (long j = 0; scatter_all && j < t; j++)
    for (size_t k = 0; k < rows[j]; k++) scattered[j][k] = -1;
  for (size_t k = 0; k < gcount; k++)
    gin[k] = (float)(rank * 1000 + (long)(k % 11) + s % 5);
  for (size_t k = 0; gcount && k < gcount * (size_t)hora_size(); k++)
    gout[k] = -1;
}

static long long check(int t, float *const *buf, const size_t *count, int n,
                       long s) {
  long long wrong = 0;
  for (long j = 0; scatter_all && j < t; j++)
    for (size_t k = 0; k < rows[j]; k++) {
      size_t g = first[j] + k; /* its place in the whole sum */
      double want = (double)n * (n - 1) / 2 + (double)n * (j + (long)(g % 7));
      wrong += scattered[j][k] != (float)want;
    }
  for (long j = 0; !scatter_all && j < t; j++)
    for (size_t k = 0; k < count[j]; k++) {
      if (gather_all) { /* rank r's block holds r + j + k % 7 */
        for (int r = 0; r < n; r++)
          wrong += gathered[j][(size_t)r * count[j] + k] !=
                   (float)(r + j + (long)(k % 7));
        continue;
      }
      double want = (double)n * (n - 1) / 2 + (double)n * (j + (long)(k % 7));
      wrong += buf[j][k] != (float)want;
    }
  for (int r = 0; r < n; r++)
    for (size_t k = 0; k < gcount; k++)
      wrong += gout[(size_t)r * gcount + k] !=
               (float)(r * 1000 + (long)(k % 11) + s % 5);
  return wrong;
}

int main(int argc, char **argv) {
  long t = 100, bytes = 4096, iters = 50, warmup = 10;
  const char *sizes = NULL;
  int c;
  int every = 0;
  while ((c = getopt(argc, argv, "t:b:n:w:S:g:cARh")) != -1) {
    switch (c) {
    case 'A': gather_all = 1; break;
    case 'R': scatter_all = 1; break;
    case 'c': every = 1; break;
    case 'g': gcount = ELEMS((size_t)num(optarg, "-g")); break;
    case 't': t = num(optarg, "-t"); break;
    case 'b': bytes = num(optarg, "-b"); break;
    case 'n': iters = num(optarg, "-n"); break;
    case 'w': warmup = num(optarg, "-w"); break;
    case 'S': sizes = optarg; break;
    default:
      fprintf(c == 'h' ? stdout : stderr,
              "usage: fusion_perf [-t tensors] [-b bytes each] [-S sizes-file] "
              "[-n steps] [-w warm-up steps] [-g allgather bytes] [-c] [-A | -R]\n"
              "  defaults: -t 100 -b 4K -n 50 -w 10; -S: one byte count per "
              "line (instead of -t, -b); -g: an allgather of that many bytes "
              "per rank in each step too; -c: every step's results checked, "
              "not only the last one's; -A: the tensors are allgathers (each "
              "rank sends the bytes given), not allreduces; -R: they are "
              "reducescatters (each rank gets its block of the sum)\n");
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
  if (gather_all && !(gathered = calloc((size_t)t, sizeof *gathered)))
    return 1;
  for (long j = 0; gather_all && j < t; j++)
    if (!(gathered[j] = hora_alloc(count[j] * sizeof(float) * (size_t)n))) {
      fprintf(stderr, "fusion_perf: hora_alloc: %s\n", hora_last_error());
      return 1;
    }
  if (gather_all && scatter_all) {
    fprintf(stderr, "fusion_perf: -A and -R together\n");
    return 2;
  }
  if (scatter_all &&
      (!(scattered = calloc((size_t)t, sizeof *scattered)) ||
       !(first = calloc((size_t)t, sizeof *first)) ||
       !(rows = calloc((size_t)t, sizeof *rows))))
    return 1;
  for (long j = 0; scatter_all && j < t; j++) {
    for (int r = 0; r < rank; r++)
      first[j] += hora_reducescatter_rows(count[j], n, r);
    rows[j] = hora_reducescatter_rows(count[j], n, rank);
    if (!(scattered[j] = hora_alloc(rows[j] ? rows[j] * sizeof(float) : 1))) {
      fprintf(stderr, "fusion_perf: hora_alloc: %s\n", hora_last_error());
      return 1;
    }
  }
  if (gcount && (!(gin = hora_alloc(gcount * sizeof(float))) ||
                 !(gout = hora_alloc(gcount * sizeof(float) * (size_t)n)))) {
    fprintf(stderr, "fusion_perf: hora_alloc: %s\n", hora_last_error());
    return 1;
  }
  long long wrong = 0;
  for (long i = 0; i < warmup; i++) {
    if (every) fill((int)t, buf, count, rank, i);
    if (step((int)t, buf, count, h) < 0) return 1;
    if (every) wrong += check((int)t, buf, count, n, i);
  }
  for (long i = 0; i < iters; i++) {
    if (every) fill((int)t, buf, count, rank, i);
    hora_barrier();
    double t0 = now_us();
    if (step((int)t, buf, count, h) < 0) return 1;
    us[i] = now_us() - t0;
    if (every) wrong += check((int)t, buf, count, n, i);
    /* the slowest rank's time: one allreduce of the step times */
    float v = (float)us[i];
    hora_allreduce("fusion.time", &v, &v, 1, HORA_FLOAT32, HORA_MAX);
    us[i] = v;
  }
  /* one more step, checked */
  fill((int)t, buf, count, rank, iters);
  if (step((int)t, buf, count, h) < 0) return 1;
  wrong += check((int)t, buf, count, n, iters);
  qsort(us, (size_t)iters, sizeof *us, cmp);
  if (rank == 0)
    printf("fusion_perf: %d ranks, %ld tensors (%zu bytes in all) float32 "
           "%s: %.1f us per step (median of %ld), %.2f us per tensor, "
           "#wrong %lld\n",
           n, t, total,
           gather_all ? "allgather" : scatter_all ? "reducescatter" : "sum",
           us[iters / 2],
           iters, us[iters / 2] / (double)t, wrong);
  else if (wrong)
    printf("fusion_perf: rank %d: #wrong %lld\n", rank, wrong);
  for (long j = 0; j < t; j++) {
    hora_free(buf[j]);
    if (gather_all) hora_free(gathered[j]);
    if (scatter_all) hora_free(scattered[j]);
  }
  free(gathered);
  free(scattered);
  free(first);
  free(rows);
  if (gcount) {
    hora_free(gin);
    hora_free(gout);
  }
  free(buf);
  free(h);
  free(us);
  free(count);
  hora_shutdown();
  return wrong ? 1 : 0;
}
