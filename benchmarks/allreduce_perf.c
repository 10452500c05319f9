/* allreduce_perf.c -- hora's allreduce benchmark, in the style of
 * nccl-tests' all_reduce_perf.
 *
 *   horarun -np 4 build/benchmarks/allreduce_perf -b 8 -e 64M -f 2
 *
 * For each size of the sweep every rank runs -w warm-up and -n timed
 * allreduces of the same name ("perf.<bytes>"), one after the other. The
 * time of a size is the mean time per iteration, the maximum over ranks
 * (reduced with hora_allreduce(HORA_MAX), as nccl-tests reduces its own).
 * algbw = bytes / time, busbw = algbw * 2 (n-1) / n. With -c 1, one more
 * allreduce after the timed ones runs on freshly filled buffers whose exact
 * result is known (small integers, see fill_pattern()), and #wrong counts
 * the mismatching elements summed over ranks. Rank 0 prints the table; the
 * exit status is non-zero when anything was wrong or a hora call failed. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hora.h"

/* Every fill pattern is periodic in the element index with this period
 * (the lcm of the moduli used below), so one period is computed per size
 * and tiled over the buffer. */
#define PERIOD 210

struct opts {
  size_t minb, maxb;
  long factor;
  int iters, warmup;
  hora_dtype_t dtype;
  hora_op_t op;
  int check, arena, inplace;
};

/* ---- options ------------------------------------------------------------ */

static void usage(FILE *f) {
  fprintf(f,
          "usage: allreduce_perf [-b minbytes] [-e maxbytes] [-f factor]\n"
          "                      [-n iters] [-w warmup] [-d dtype] [-o op]\n"
          "                      [-c 0|1] [-a 0|1] [-i 0|1]\n"
          "  -b  smallest size in bytes (K/M/G suffixes), default 8\n"
          "  -e  largest size in bytes, default 64M\n"
          "  -f  multiply the size by this factor each step, default 2\n"
          "  -n  timed iterations per size, default 20\n"
          "  -w  warm-up iterations per size, default 5\n"
          "  -d  uint8 int8 int16 int32 int64 float16 bfloat16 float32\n"
          "      float64, default float32\n"
          "  -o  sum avg min max prod, default sum\n"
          "  -c  check the result of one extra iteration, default 1\n"
          "  -a  1: buffers from hora_alloc (zero copy, default); 0: malloc\n"
          "  -i  1: in place (default); 0: separate send and receive buffer\n");
}

/* Parses "64M", "1G", "4096" (binary multiples, as nccl-tests does). */
static int parse_size(const char *s, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s || errno != 0 || *s == '-') return -1;
  unsigned long long mul = 1;
  switch (*end) {
  case 'G':
  case 'g':
    mul = 1ull << 30;
    end++;
    break;
  case 'M':
  case 'm':
    mul = 1ull << 20;
    end++;
    break;
  case 'K':
  case 'k':
    mul = 1ull << 10;
    end++;
    break;
  default:
    break;
  }
  if (*end == 'B' || *end == 'b') end++;
  if (*end != '\0' || (mul > 1 && v > UINT64_MAX / mul)) return -1;
  *out = (size_t)(v * mul);
  return 0;
}

static int parse_int(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end != '\0' || errno != 0 || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

static int parse_dtype(const char *s, hora_dtype_t *out) {
  static const struct {
    const char *alias;
    hora_dtype_t dtype;
  } aliases[] = {{"float", HORA_FLOAT32}, {"double", HORA_FLOAT64},
                 {"half", HORA_FLOAT16},  {"bf16", HORA_BFLOAT16},
                 {"int", HORA_INT32},     {"char", HORA_INT8}};
  for (int d = 0; d < HORA_DTYPE_COUNT; d++)
    if (strcmp(s, hora_dtype_name((hora_dtype_t)d)) == 0) {
      *out = (hora_dtype_t)d;
      return 0;
    }
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
    if (strcmp(s, aliases[i].alias) == 0) {
      *out = aliases[i].dtype;
      return 0;
    }
  return -1;
}

/* nccl-tests' short names: sum, prod, max, min, avg. */
static const char *op_short(hora_op_t op) {
  static const char *const names[HORA_OP_COUNT] = {"avg", "sum", "min", "max",
                                                   "prod"};
  return names[op];
}

static int parse_op(const char *s, hora_op_t *out) {
  for (int o = 0; o < HORA_OP_COUNT; o++)
    if (strcmp(s, op_short((hora_op_t)o)) == 0 ||
        strcmp(s, hora_op_name((hora_op_t)o)) == 0) {
      *out = (hora_op_t)o;
      return 0;
    }
  return -1;
}

static int parse_opts(int argc, char **argv, struct opts *o) {
  *o = (struct opts){.minb = 8,
                     .maxb = 64u << 20,
                     .factor = 2,
                     .iters = 20,
                     .warmup = 5,
                     .dtype = HORA_FLOAT32,
                     .op = HORA_SUM,
                     .check = 1,
                     .arena = 1,
                     .inplace = 1};
  int c;
  long v;
  while ((c = getopt(argc, argv, "b:e:f:n:w:d:o:c:a:i:h")) != -1) {
    int bad = 0;
    switch (c) {
    case 'b':
      bad = parse_size(optarg, &o->minb);
      break;
    case 'e':
      bad = parse_size(optarg, &o->maxb);
      break;
    case 'f':
      bad = parse_int(optarg, 2, 1 << 20, &o->factor);
      break;
    case 'n':
      bad = parse_int(optarg, 1, 1 << 30, &v);
      o->iters = (int)v;
      break;
    case 'w':
      bad = parse_int(optarg, 0, 1 << 30, &v);
      o->warmup = (int)v;
      break;
    case 'd':
      bad = parse_dtype(optarg, &o->dtype);
      break;
    case 'o':
      bad = parse_op(optarg, &o->op);
      break;
    case 'c':
      bad = parse_int(optarg, 0, 1, &v);
      o->check = (int)v;
      break;
    case 'a':
      bad = parse_int(optarg, 0, 1, &v);
      o->arena = (int)v;
      break;
    case 'i':
      bad = parse_int(optarg, 0, 1, &v);
      o->inplace = (int)v;
      break;
    case 'h':
      usage(stdout);
      exit(0);
    default:
      usage(stderr);
      return -1;
    }
    if (bad) {
      fprintf(stderr, "allreduce_perf: bad value for -%c: %s\n", c, optarg);
      usage(stderr);
      return -1;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "allreduce_perf: unexpected argument: %s\n", argv[optind]);
    return -1;
  }
  if (o->minb == 0 || o->maxb < o->minb) {
    fprintf(stderr, "allreduce_perf: need 0 < minbytes <= maxbytes\n");
    return -1;
  }
  return 0;
}

/* ---- element access ------------------------------------------------------ */

static uint16_t float_to_half(float f) { /* round to nearest even */
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) /* inf or NaN */
    return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflow */
  if (ax < 0x38800000u) { /* subnormal half, or zero */
    float a;
    memcpy(&a, &ax, 4);
    return (uint16_t)(sign | (uint32_t)rintf(a * 16777216.0f)); /* exact */
  }
  uint32_t m = ax + 0xc8000fffu + ((ax >> 13) & 1u); /* rebias, round */
  return (uint16_t)(sign | (m >> 13));
}

static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f,
           m = h & 0x3ffu, x;
  if (e == 0x1f) {
    x = sign | 0x7f800000u | (m << 13);
  } else if (e == 0) {
    float f = (float)m / 16777216.0f;
    return sign ? -f : f;
  } else {
    x = sign | ((e + 112) << 23) | (m << 13);
  }
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static uint16_t float_to_bf16(float f) { /* round to nearest even */
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static float bf16_to_float(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

/* Stores the small integer v as element i of buf. */
static void store(hora_dtype_t d, void *buf, size_t i, int64_t v) {
  switch (d) {
  case HORA_UINT8:
    ((uint8_t *)buf)[i] = (uint8_t)v;
    break;
  case HORA_INT8:
    ((int8_t *)buf)[i] = (int8_t)v;
    break;
  case HORA_INT16:
    ((int16_t *)buf)[i] = (int16_t)v;
    break;
  case HORA_INT32:
    ((int32_t *)buf)[i] = (int32_t)v;
    break;
  case HORA_INT64:
    ((int64_t *)buf)[i] = v;
    break;
  case HORA_FLOAT16:
    ((uint16_t *)buf)[i] = float_to_half((float)v);
    break;
  case HORA_BFLOAT16:
    ((uint16_t *)buf)[i] = float_to_bf16((float)v);
    break;
  case HORA_FLOAT32:
    ((float *)buf)[i] = (float)v;
    break;
  case HORA_FLOAT64:
    ((double *)buf)[i] = (double)v;
    break;
  default:
    break;
  }
}

/* Element i of buf as a double (exact for every value the check uses). */
static double load(hora_dtype_t d, const void *buf, size_t i) {
  switch (d) {
  case HORA_UINT8:
    return ((const uint8_t *)buf)[i];
  case HORA_INT8:
    return ((const int8_t *)buf)[i];
  case HORA_INT16:
    return ((const int16_t *)buf)[i];
  case HORA_INT32:
    return ((const int32_t *)buf)[i];
  case HORA_INT64:
    return (double)((const int64_t *)buf)[i];
  case HORA_FLOAT16:
    return half_to_float(((const uint16_t *)buf)[i]);
  case HORA_BFLOAT16:
    return bf16_to_float(((const uint16_t *)buf)[i]);
  case HORA_FLOAT32:
    return ((const float *)buf)[i];
  case HORA_FLOAT64:
    return ((const double *)buf)[i];
  default:
    return 0;
  }
}

/* ---- the check pattern ---------------------------------------------------
 * Each rank's element i is a small integer chosen so that the exact result
 * is representable in every dtype, whatever order the engine combines the
 * ranks in (float32 accumulation of small integers is exact), and uint8
 * values stay non-negative:
 *   sum   v = (i + 3r) mod 5 - 2: consecutive ranks cycle through the five
 *         residues, so |sum| <= 3 for any n (uint8: (i + 3r) mod 3, so
 *         sum <= n + 2, exact up to 253 ranks).
 *   avg   v = c(i) +/- d(i): ranks pair up, rank 2k adds d and rank 2k+1
 *         subtracts it (the last of an odd count adds nothing), so the sum
 *         is exactly n c(i) (|c| <= 2; uint8 c <= 4) and the average c(i),
 *         for integers and floats alike: the division is exact, so no
 *         rounding rule matters. bfloat16 holds the sum exactly up to 64
 *         ranks.
 *   min, max  v = (5i + 3r) mod 7 - 3 (uint8: without the -3).
 *   prod  v in {-1, 1, 2} (uint8 {1, 2}), where only ranks 0-5 may hold a
 *         2: |prod| <= 64 fits int8. */
static int is_signed(hora_dtype_t d) {
  return d != HORA_UINT8;
}

static int64_t pattern(hora_op_t op, hora_dtype_t d, int r, int n, long i) {
  int sig = is_signed(d);
  switch (op) {
  case HORA_SUM:
    return sig ? (i + 3 * r) % 5 - 2 : (i + 3 * r) % 3;
  case HORA_AVERAGE: {
    int64_t c = sig ? i % 5 - 2 : 2 + i % 3;
    int64_t dv = 1 + (i + r / 2) % 2;
    if (r % 2 == 0 && r + 1 < n) return c + dv;
    if (r % 2 == 1) return c - dv;
    return c;
  }
  case HORA_MIN:
  case HORA_MAX:
    return sig ? (5 * i + 3 * r) % 7 - 3 : (5 * i + 3 * r) % 7;
  case HORA_PRODUCT:
    if (r < 6 && (i + r) % 3 == 0) return 2;
    if (sig && (i + 2 * r) % 5 == 1) return -1;
    return 1;
  default:
    return 0;
  }
}

/* The exact result for element i over n ranks. */
static int64_t expected(hora_op_t op, hora_dtype_t d, int n, long i) {
  int64_t acc = pattern(op, d, 0, n, i);
  for (int r = 1; r < n; r++) {
    int64_t v = pattern(op, d, r, n, i);
    switch (op) {
    case HORA_SUM:
    case HORA_AVERAGE:
      acc += v;
      break;
    case HORA_MIN:
      acc = v < acc ? v : acc;
      break;
    case HORA_MAX:
      acc = v > acc ? v : acc;
      break;
    case HORA_PRODUCT:
      acc *= v;
      break;
    default:
      break;
    }
  }
  return op == HORA_AVERAGE ? acc / n : acc;
}

/* Fills count elements of buf with this rank's pattern: one period is built
 * in `period` (PERIOD elements), then copied over and over. */
static void fill(void *buf, size_t count, const struct opts *o, int rank, int n,
                 void *period) {
  size_t tsize = hora_dtype_size(o->dtype);
  for (long i = 0; i < PERIOD; i++)
    store(o->dtype, period, (size_t)i, pattern(o->op, o->dtype, rank, n, i));
  for (size_t i = 0; i < count; i += PERIOD) {
    size_t k = count - i < PERIOD ? count - i : PERIOD;
    memcpy((char *)buf + i * tsize, period, k * tsize);
  }
}

static long long count_wrong(const void *buf, size_t count,
                             const struct opts *o, int n) {
  double want[PERIOD];
  for (long i = 0; i < PERIOD; i++)
    want[i] = (double)expected(o->op, o->dtype, n, i);
  long long wrong = 0;
  for (size_t i = 0; i < count; i++)
    wrong += load(o->dtype, buf, i) != want[i % PERIOD];
  return wrong;
}

/* ---- the benchmark ---------------------------------------------------------
 */

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int fail(const char *what, const char *name, int rc) {
  fprintf(stderr, "allreduce_perf: rank %d: %s(%s) failed: %s: %s\n",
          hora_rank(), what, name ? name : "", hora_err_name(rc),
          hora_last_error()[0] ? hora_last_error() : hora_strerror(rc));
  return rc;
}

/* Prints "#  Rank r Pid p on host" for every rank. Without an allgather in
 * the API, each rank writes its line into its own slot of a zeroed buffer
 * and a uint8 SUM puts the slots together. */
#define INFO_LEN 96
static int print_ranks(int rank, int n) {
  char *all = calloc((size_t)n, INFO_LEN);
  char host[64] = "?";
  if (!all) return HORA_ENOMEM;
  gethostname(host, sizeof host - 1);
  snprintf(all + (size_t)rank * INFO_LEN, INFO_LEN,
           "#  Rank %3d Pid %7d on %12.40s local rank %2d", rank, (int)getpid(),
           host, hora_local_rank());
  int rc = hora_allreduce("perf.ranks", all, all, (size_t)n * INFO_LEN,
                          HORA_UINT8, HORA_SUM);
  if (rc < 0) {
    free(all);
    return fail("hora_allreduce", "perf.ranks", rc);
  }
  if (rank == 0) {
    printf("#\n# Using ranks\n");
    for (int r = 0; r < n; r++) {
      all[(size_t)r * INFO_LEN + INFO_LEN - 1] = '\0';
      printf("%s\n", all + (size_t)r * INFO_LEN);
    }
  }
  free(all);
  return 0;
}

static void print_header(const struct opts *o, int n) {
  printf("# hora allreduce_perf, hora %s\n", hora_version());
  printf("# ranks %d (local %d, nodes %d) minBytes %zu maxBytes %zu "
         "step: %ld(factor) warmup iters: %d iters: %d validation: %d\n",
         n, hora_local_size(), hora_cross_size(), o->minb, o->maxb, o->factor,
         o->warmup, o->iters, o->check);
  printf("# dtype %s redop %s buffers %s %s\n", hora_dtype_name(o->dtype),
         op_short(o->op), o->arena ? "hora_alloc (zero copy)" : "malloc",
         o->inplace ? "in-place" : "out-of-place");
}

static void print_columns(const struct opts *o) {
  printf("#\n");
  printf("# %58s\n", o->inplace ? "in-place" : "out-of-place");
  printf("# %10s  %12s  %8s  %6s  %8s  %7s  %7s  %6s\n", "size", "count",
         "type", "redop", "time", "algbw", "busbw", "#wrong");
  printf("# %10s  %12s  %8s  %6s  %8s  %7s  %7s  %6s\n", "(B)", "(elements)",
         "", "", "(us)", "(GB/s)", "(GB/s)", "");
  fflush(stdout);
}

/* Runs `k` allreduces of `name` back to back. */
static int run_iters(const char *name, void *send, void *recv, size_t count,
                     const struct opts *o, int k) {
  for (int it = 0; it < k; it++) {
    int rc = hora_allreduce(name, send, recv, count, o->dtype, o->op);
    if (rc < 0) return fail("hora_allreduce", name, rc);
  }
  return 0;
}

/* The sweep: minb, minb * f, ... up to maxb; 0 after the last size. */
static size_t next_size(const struct opts *o, size_t size) {
  return size > o->maxb / (size_t)o->factor ? 0 : size * (size_t)o->factor;
}

/* Elements in a row of `size` bytes: at least one. */
static size_t elements(const struct opts *o, size_t size) {
  size_t tsize = hora_dtype_size(o->dtype);
  return size / tsize ? size / tsize : 1;
}

struct bufs {
  void *send, *recv;
  unsigned char period[PERIOD * 8];
};

/* One row of the table. *wrong gets the mismatches over all ranks (0 with
 * -c 0), *busbw the bus bandwidth. */
static int bench_size(size_t count, const struct opts *o, struct bufs *b,
                      int rank, int n, long long *wrong, double *busbw) {
  size_t bytes = count * hora_dtype_size(o->dtype);
  char name[64], tname[64], wname[64];
  snprintf(name, sizeof name, "perf.%zu", bytes);
  snprintf(tname, sizeof tname, "perf.time.%zu", bytes);
  snprintf(wname, sizeof wname, "perf.wrong.%zu", bytes);
  void *send = o->inplace ? b->recv : b->send;
  int rc;

  fill(send, count, o, rank, n, b->period);
  if ((rc = run_iters(name, send, b->recv, count, o, o->warmup)) < 0) return rc;
  if ((rc = hora_barrier()) < 0) return fail("hora_barrier", NULL, rc);
  double t0 = now_us();
  if ((rc = run_iters(name, send, b->recv, count, o, o->iters)) < 0) return rc;
  double t = (now_us() - t0) / o->iters;
  if ((rc = hora_allreduce(tname, &t, &t, 1, HORA_FLOAT64, HORA_MAX)) < 0)
    return fail("hora_allreduce", tname, rc);

  long long nwrong = 0;
  if (o->check) {
    fill(send, count, o, rank, n, b->period);
    if ((rc = run_iters(name, send, b->recv, count, o, 1)) < 0) return rc;
    int64_t w = count_wrong(b->recv, count, o, n);
    if ((rc = hora_allreduce(wname, &w, &w, 1, HORA_INT64, HORA_SUM)) < 0)
      return fail("hora_allreduce", wname, rc);
    nwrong = w;
  }

  double algbw = (double)bytes / t / 1e3; /* bytes/us -> GB/s */
  *busbw = algbw * 2.0 * (n - 1) / n;
  *wrong = nwrong;
  if (rank == 0) {
    char wbuf[24] = "N/A";
    if (o->check) snprintf(wbuf, sizeof wbuf, "%lld", nwrong);
    printf("  %10zu  %12zu  %8s  %6s  %8.2f  %7.2f  %7.2f  %6s\n", bytes, count,
           hora_dtype_name(o->dtype), op_short(o->op), t, algbw, *busbw, wbuf);
    fflush(stdout);
  }
  return 0;
}

/* Runs -w allreduces at every size of the sweep before any is timed, as
 * recent nccl-tests do, so that whatever a runtime sets up on the first use
 * of a size (connections, protocol switches, the buffers' pages) is out of
 * the way; the timed loop of each size gets -w more right before it. */
static int warm_up(const struct opts *o, struct bufs *b, int rank, int n) {
  void *send = o->inplace ? b->recv : b->send;
  char name[64];
  size_t maxcount = 0;
  for (size_t size = o->minb; size; size = next_size(o, size))
    maxcount = elements(o, size);
  fill(send, maxcount, o, rank, n, b->period);
  for (size_t size = o->minb; size; size = next_size(o, size)) {
    size_t count = elements(o, size);
    snprintf(name, sizeof name, "perf.%zu", count * hora_dtype_size(o->dtype));
    int rc = run_iters(name, send, b->recv, count, o, o->warmup);
    if (rc < 0) return rc;
  }
  return 0;
}

static int alloc_bufs(const struct opts *o, struct bufs *b) {
  size_t tsize = hora_dtype_size(o->dtype);
  size_t bytes = o->maxb / tsize * tsize;
  if (bytes < tsize) bytes = tsize;
  b->send = NULL;
  b->recv = o->arena ? hora_alloc(bytes) : malloc(bytes);
  if (b->recv && !o->inplace)
    b->send = o->arena ? hora_alloc(bytes) : malloc(bytes);
  if (!b->recv || (!o->inplace && !b->send)) {
    if (o->arena)
      fprintf(stderr,
              "allreduce_perf: rank %d: hora_alloc of %s%zu bytes failed: "
              "%s\nallreduce_perf: raise the arena (HORA_ARENA_SIZE, horarun "
              "--arena-size), lower -e, or use -a 0\n",
              hora_rank(), o->inplace ? "" : "2 x ", bytes,
              hora_last_error()[0] ? hora_last_error() : "arena full");
    else
      fprintf(stderr, "allreduce_perf: rank %d: malloc of %s%zu bytes failed\n",
              hora_rank(), o->inplace ? "" : "2 x ", bytes);
    return HORA_ENOMEM;
  }
  return 0;
}

static void free_bufs(const struct opts *o, struct bufs *b) {
  if (o->arena) {
    hora_free(b->recv);
    hora_free(b->send);
  } else {
    free(b->recv);
    free(b->send);
  }
}

int main(int argc, char **argv) {
  struct opts o;
  if (parse_opts(argc, argv, &o) < 0) return 2;
  int rc = hora_init();
  if (rc < 0) {
    fail("hora_init", NULL, rc);
    return 1;
  }
  int rank = hora_rank(), n = hora_size();
  struct bufs b;
  if (alloc_bufs(&o, &b) < 0) {
    hora_shutdown();
    return 1;
  }
  if (rank == 0) print_header(&o, n);
  if (print_ranks(rank, n) < 0) goto out;
  if (rank == 0) print_columns(&o);

  long long total_wrong = 0;
  double bw_sum = 0;
  int rows = 0;
  if ((rc = warm_up(&o, &b, rank, n)) < 0) goto out;
  size_t prev = 0;
  for (size_t size = o.minb; size; size = next_size(&o, size)) {
    long long wrong = 0;
    double busbw = 0;
    size_t count = elements(&o, size);
    if (count == prev) continue; /* sizes below one element */
    prev = count;
    rc = bench_size(count, &o, &b, rank, n, &wrong, &busbw);
    if (rc < 0) goto out;
    total_wrong += wrong;
    bw_sum += busbw;
    rows++;
  }
  if (rank == 0) {
    printf("# Out of bounds values : %lld %s\n", total_wrong,
           total_wrong ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g \n#\n", rows ? bw_sum / rows : 0.0);
  }
  rc = total_wrong ? HORA_EIO : 0;

out:
  free_bufs(&o, &b);
  int src = hora_shutdown();
  if (src < 0 && rc == 0) rc = fail("hora_shutdown", NULL, src);
  return rc < 0 ? 1 : 0;
}
