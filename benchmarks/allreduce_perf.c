/* allreduce_perf.c -- hora's collective benchmark, in the style of
 * nccl-tests' all_reduce_perf (and its all_gather_perf, alltoall_perf,
 * reduce_scatter_perf, broadcast_perf: -c picks the collective).
 *
 *   horarun -np 4 build/benchmarks/allreduce_perf -b 8 -e 64M -f 2
 *   horarun -np 2 build/benchmarks/allreduce_perf -c allgather -e 64M
 *
 * Sizes follow nccl-tests: a row's size is what one rank sends for
 * allreduce and broadcast, and the whole array (n blocks of count
 * elements) for allgather (what each rank receives), alltoall (what each
 * rank sends and receives) and reducescatter (what each rank sends).
 * For each size of the sweep every rank runs -w warm-up and -n timed
 * operations of the same name ("perf.<coll>.<bytes>"), one after the
 * other. The time of a size is the mean time per iteration, the maximum
 * over ranks (reduced with hora_allreduce(HORA_MAX), as nccl-tests reduces
 * its own). algbw = size / time; busbw = algbw * 2 (n-1) / n for
 * allreduce, (n-1) / n for allgather, alltoall and reducescatter, 1 for
 * broadcast. With -C 1, one more operation after the timed ones runs on
 * freshly filled buffers whose exact result is known (small integers, see
 * pattern() and data()), and #wrong counts the mismatching elements summed
 * over ranks. Rank 0 prints the table; the exit status is non-zero when
 * anything was wrong or a hora call failed.
 *
 * --sets K splits the job into K process sets of consecutive ranks (n/K
 * each) and runs the collective on each set: every row is timed once for
 * each set alone (the others wait) and once with all sets at once, and
 * shows both times and their ratio (1: the sets do not slow each other
 * down; K: as if they ran one after the other). */
#include <errno.h>
#include <getopt.h>
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
  hora_coll_t coll;
  hora_dtype_t dtype;
  hora_op_t op;
  int root;
  int check, arena, inplace;
  int sets; /* --sets K: K disjoint process sets (0: the global set) */
};

/* The process set the collectives run on, and the broadcast root as a
 * global rank (--sets: -r is a rank of the set). */
static int g_pset, g_root;

/* ---- options ------------------------------------------------------------ */

static void usage(FILE *f) {
  fprintf(
      f, "usage: allreduce_perf [-c collective] [-b minbytes] [-e maxbytes]\n"
         "                      [-f factor] [-n iters] [-w warmup] [-d dtype]\n"
         "                      [-o op] [-r root] [-C 0|1] [-a 0|1] [-i 0|1]\n"
         "                      [--sets K]\n"
         "  -c  allreduce allgather alltoall reducescatter broadcast,\n"
         "      default allreduce\n"
         "  -b  smallest size in bytes (K/M/G suffixes), default 8\n"
         "  -e  largest size in bytes, default 64M\n"
         "  -f  multiply the size by this factor each step, default 2\n"
         "  -n  timed iterations per size, default 20\n"
         "  -w  warm-up iterations per size, default 5\n"
         "  -d  uint8 int8 int16 int32 int64 float16 bfloat16 float32\n"
         "      float64, default float32\n"
         "  -o  sum avg min max prod, default sum (allreduce, reducescatter)\n"
         "  -r  broadcast root, default 0\n"
         "  -C  check the result of one extra iteration, default 1\n"
         "  -a  1: buffers from hora_alloc (zero copy, default); 0: malloc\n"
         "  -i  1: in place (default); 0: separate send and receive buffer\n"
         "  --sets K  K process sets of n/K consecutive ranks, each running\n"
         "      the collective on its own: each row timed for one set alone\n"
         "      and for all sets at once (-r: a rank of the set)\n"
         "  Sizes are per rank for allreduce and broadcast, of the whole\n"
         "  array (n x count) for allgather, alltoall and reducescatter.\n");
}

/* The collectives -c takes, with nccl-tests' spellings as aliases. */
static const struct {
  const char *name, *alias;
  hora_coll_t coll;
} colls[] = {{"allreduce", "all_reduce", HORA_COLL_ALLREDUCE},
             {"allgather", "all_gather", HORA_COLL_ALLGATHER},
             {"alltoall", "all_to_all", HORA_COLL_ALLTOALL},
             {"reducescatter", "reduce_scatter", HORA_COLL_REDUCESCATTER},
             {"broadcast", "bcast", HORA_COLL_BROADCAST}};

static const char *coll_name(hora_coll_t c) {
  for (size_t i = 0; i < sizeof colls / sizeof colls[0]; i++)
    if (colls[i].coll == c) return colls[i].name;
  return "?";
}

static int parse_coll(const char *s, hora_coll_t *out) {
  for (size_t i = 0; i < sizeof colls / sizeof colls[0]; i++)
    if (strcmp(s, colls[i].name) == 0 || strcmp(s, colls[i].alias) == 0) {
      *out = colls[i].coll;
      return 0;
    }
  return -1;
}

/* Whether the collective reduces (takes -o). */
static int has_op(hora_coll_t c) {
  return c == HORA_COLL_ALLREDUCE || c == HORA_COLL_REDUCESCATTER;
}

/* Whether a row's size is the whole array of n blocks (nccl-tests). */
static int is_blocked(hora_coll_t c) {
  return c == HORA_COLL_ALLGATHER || c == HORA_COLL_ALLTOALL ||
         c == HORA_COLL_REDUCESCATTER;
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
  static const char *const names[HORA_OP_ELEMENTWISE] = {"avg", "sum",
                                                         "min", "max", "prod"};
  return names[op];
}

static int parse_op(const char *s, hora_op_t *out) {
  for (int o = 0; o < HORA_OP_ELEMENTWISE; o++)
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
                     .coll = HORA_COLL_ALLREDUCE,
                     .dtype = HORA_FLOAT32,
                     .op = HORA_SUM,
                     .root = 0,
                     .check = 1,
                     .arena = 1,
                     .inplace = 1};
  int c;
  long v;
  static const struct option longs[] = {{"sets", required_argument, NULL, 'S'},
                                        {"help", no_argument, NULL, 'h'},
                                        {NULL, 0, NULL, 0}};
  while ((c = getopt_long(argc, argv, "b:e:f:n:w:d:o:c:C:r:a:i:h", longs,
                          NULL)) != -1) {
    int bad = 0;
    switch (c) {
    case 'S':
      bad = parse_int(optarg, 1, 1 << 16, &v);
      o->sets = (int)v;
      break;
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
      bad = parse_coll(optarg, &o->coll);
      if (bad && (strcmp(optarg, "0") == 0 || strcmp(optarg, "1") == 0))
        fprintf(stderr,
                "allreduce_perf: -c names the collective now; the "
                "check is -C %s\n",
                optarg);
      break;
    case 'C':
      bad = parse_int(optarg, 0, 1, &v);
      o->check = (int)v;
      break;
    case 'r':
      bad = parse_int(optarg, 0, 1 << 30, &v);
      o->root = (int)v;
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
    if (bad && c == 'S') {
      fprintf(stderr, "allreduce_perf: bad value for --sets: %s\n", optarg);
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

/* The data of the collectives that move without reducing (allgather,
 * alltoall, broadcast): element i of what rank r sends to member j,
 *   (11 i + 13 r + 17 j) mod 210, less 105 for signed types,
 * in [-105, 104] (uint8 [0, 209]): exact in every dtype (bfloat16 holds
 * integers up to 256), with period 210 in i, and different for two ranks
 * or two destinations (up to 105 apart), so a block put in the wrong place
 * or shifted is counted. POISON is outside that range and outside every
 * reduction's result: receive buffers are filled with it before the
 * checked iteration, so an output left unwritten is counted too. */
static int64_t data(hora_dtype_t d, int r, int j, long i) {
  int64_t v =
      (11 * (i % PERIOD) + 13 * (r % PERIOD) + 17 * (j % PERIOD)) % PERIOD;
  return is_signed(d) ? v - 105 : v;
}

static int64_t poison(hora_dtype_t d) {
  return is_signed(d) ? 120 : 250;
}

/* What a buffer holds: a rank's input of a reduction (PAT_IN), the exact
 * result of a reduction (PAT_OUT), data(r, j, .) (PAT_DATA) or POISON. */
enum { PAT_IN, PAT_OUT, PAT_DATA, PAT_POISON };
struct pat {
  int kind, r, j;
};

static int64_t pat_value(const struct opts *o, int n, struct pat p, long i) {
  switch (p.kind) {
  case PAT_IN:
    return pattern(o->op, o->dtype, p.r, n, i);
  case PAT_OUT:
    return expected(o->op, o->dtype, n, i);
  case PAT_DATA:
    return data(o->dtype, p.r, p.j, i);
  default:
    return poison(o->dtype);
  }
}

/* Fills count elements of buf with p: one period is built in `period`
 * (PERIOD elements), then copied over and over. */
static void fill(void *buf, size_t count, const struct opts *o, int n,
                 struct pat p, void *period) {
  size_t tsize = hora_dtype_size(o->dtype);
  for (long i = 0; i < PERIOD; i++)
    store(o->dtype, period, (size_t)i, pat_value(o, n, p, i));
  for (size_t i = 0; i < count; i += PERIOD) {
    size_t k = count - i < PERIOD ? count - i : PERIOD;
    memcpy((char *)buf + i * tsize, period, k * tsize);
  }
}

/* Elements of buf[0, count) that differ from p's elements [off, off +
 * count). */
static long long count_wrong(const void *buf, size_t count, size_t off,
                             const struct opts *o, int n, struct pat p) {
  double want[PERIOD];
  for (long i = 0; i < PERIOD; i++)
    want[i] = (double)pat_value(o, n, p, (long)((off + (size_t)i) % PERIOD));
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

/* Prints "#  Rank r Pid p on host" for every rank, put together with an
 * allgather of one fixed-size line per rank. */
#define INFO_LEN 96
static int print_ranks(int rank, int n) {
  char line[INFO_LEN], *all = calloc((size_t)n, INFO_LEN);
  char host[64] = "?";
  if (!all) return HORA_ENOMEM;
  gethostname(host, sizeof host - 1);
  memset(line, 0, sizeof line);
  snprintf(line, sizeof line, "#  Rank %3d Pid %7d on %12.40s local rank %2d",
           rank, (int)getpid(), host, hora_local_rank());
  int rc = hora_allgather("perf.ranks", line, INFO_LEN, all, HORA_UINT8);
  if (rc < 0) {
    free(all);
    return fail("hora_allgather", "perf.ranks", rc);
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

/* In place, whatever -i says: hora_broadcast and MPI_Bcast have one
 * buffer. */
static int inplace(const struct opts *o) {
  return o->inplace || o->coll == HORA_COLL_BROADCAST;
}

static const char *redop(const struct opts *o) {
  return has_op(o->coll) ? op_short(o->op) : "none";
}

static void print_header(const struct opts *o, int n) {
  printf("# hora allreduce_perf -c %s, hora %s\n", coll_name(o->coll),
         hora_version());
  printf("# ranks %d (local %d, nodes %d) minBytes %zu maxBytes %zu "
         "step: %ld(factor) warmup iters: %d iters: %d validation: %d\n",
         n, hora_local_size(), hora_cross_size(), o->minb, o->maxb, o->factor,
         o->warmup, o->iters, o->check);
  printf("# collective %s dtype %s redop %s", coll_name(o->coll),
         hora_dtype_name(o->dtype), redop(o));
  if (o->coll == HORA_COLL_BROADCAST)
    printf(" root %d%s", o->root, o->sets ? " of each set" : "");
  printf(" buffers %s %s\n", o->arena ? "hora_alloc (zero copy)" : "malloc",
         inplace(o) ? "in-place" : "out-of-place");
  if (o->sets)
    printf("# sets %d of %d ranks each, each running the collective on its "
           "own; size, count, busbw: per set; together/alone: the time of all "
           "sets at once over that of one set alone\n",
           o->sets, n / o->sets);
  if (is_blocked(o->coll))
    printf("# size: the whole array, n x count elements; count: elements per "
           "block; busbw = algbw x (n-1)/n\n");
  else if (o->coll == HORA_COLL_BROADCAST)
    printf("# size: bytes broadcast; busbw = algbw\n");
  else
    printf("# size: bytes per rank; busbw = algbw x 2(n-1)/n\n");
}

static void print_columns(const struct opts *o) {
  printf("#\n");
  if (o->sets) {
    printf("# %58s  %30s\n", "one set alone (the slowest set)",
           "all sets at once");
    printf("# %10s  %12s  %8s  %6s  %8s  %7s  %7s  %8s  %7s  %7s  %6s  %8s\n",
           "size", "count", "type", "redop", "time", "algbw", "busbw", "time",
           "algbw", "busbw", "#wrong", "together");
    printf("# %10s  %12s  %8s  %6s  %8s  %7s  %7s  %8s  %7s  %7s  %6s  %8s\n",
           "(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", "(us)",
           "(GB/s)", "(GB/s)", "", "/alone");
    fflush(stdout);
    return;
  }
  printf("# %58s\n", inplace(o) ? "in-place" : "out-of-place");
  printf("# %10s  %12s  %8s  %6s  %8s  %7s  %7s  %6s\n", "size", "count",
         "type", "redop", "time", "algbw", "busbw", "#wrong");
  printf("# %10s  %12s  %8s  %6s  %8s  %7s  %7s  %6s\n", "(B)", "(elements)",
         "", "", "(us)", "(GB/s)", "(GB/s)", "");
  fflush(stdout);
}

/* One row: count elements per rank (allreduce, broadcast) or per block
 * (the others, n blocks); send and recv, the elements each rank sends and
 * receives; bytes, the size column and algbw's numerator. */
struct row {
  size_t count, send, recv, bytes;
};

static struct row row_of(const struct opts *o, size_t size, int n) {
  size_t tsize = hora_dtype_size(o->dtype);
  struct row w;
  size_t per = is_blocked(o->coll) ? size / tsize / (size_t)n : size / tsize;
  w.count = per ? per : 1; /* sizes below one element: one */
  size_t all = w.count * (size_t)n;
  switch (o->coll) {
  case HORA_COLL_ALLGATHER:
    w.send = w.count;
    w.recv = all;
    break;
  case HORA_COLL_ALLTOALL:
    w.send = w.recv = all;
    break;
  case HORA_COLL_REDUCESCATTER:
    w.send = all;
    w.recv = w.count;
    break;
  default:
    w.send = w.recv = w.count;
    break;
  }
  w.bytes = (is_blocked(o->coll) ? all : w.count) * tsize;
  return w;
}

static double bus_factor(const struct opts *o, int n) {
  switch (o->coll) {
  case HORA_COLL_ALLREDUCE:
    return 2.0 * (n - 1) / n;
  case HORA_COLL_BROADCAST:
    return 1.0;
  default:
    return (double)(n - 1) / n;
  }
}

struct bufs {
  void *a, *b; /* a: the larger side, or the only buffer in place */
  unsigned char period[PERIOD * 8];
};

/* Where a row's send and receive buffers lie. In place, as nccl-tests
 * lays them out: allgather sends from its own block of the output,
 * reducescatter receives into its own block of the input, the others use
 * one buffer for both. */
static void place(const struct opts *o, const struct row *w, struct bufs *b,
                  int rank, void **send, void **recv) {
  size_t blk = w->count * hora_dtype_size(o->dtype) * (size_t)rank;
  int rs = o->coll == HORA_COLL_REDUCESCATTER;
  if (inplace(o)) {
    *send = *recv = b->a;
    if (o->coll == HORA_COLL_ALLGATHER) *send = (char *)b->a + blk;
    if (rs) *recv = (char *)b->a + blk;
  } else {
    *send = rs ? b->a : b->b; /* reducescatter sends more than it gets */
    *recv = rs ? b->b : b->a;
  }
}

/* One operation of the row. */
static int run_one(const char *name, const struct opts *o, const struct row *w,
                   void *send, void *recv) {
  int rc;
  const char *fn;
  if (g_pset) { /* --sets: the same calls, on this rank's set */
    hora_request_t q = {.coll = o->coll, .name = name, .sendbuf = send,
                        .recvbuf = recv, .count = w->send, .dtype = o->dtype,
                        .op = o->op, .root_rank = g_root,
                        .process_set = g_pset};
    if (o->coll == HORA_COLL_BROADCAST) q.sendbuf = recv;
    int64_t h;
    rc = hora_submit(&q, &h);
    if (rc >= 0) rc = hora_wait(h);
    return rc < 0 ? fail("hora_submit", name, rc) : 0;
  }
  switch (o->coll) {
  case HORA_COLL_BROADCAST:
    fn = "hora_broadcast";
    rc = hora_broadcast(name, recv, w->count, o->dtype, o->root);
    break;
  case HORA_COLL_ALLGATHER:
    fn = "hora_allgather";
    rc = hora_allgather(name, send, w->send, recv, o->dtype);
    break;
  case HORA_COLL_ALLTOALL:
    fn = "hora_alltoall";
    rc = hora_alltoall(name, send, w->send, recv, o->dtype);
    break;
  case HORA_COLL_REDUCESCATTER:
    fn = "hora_reducescatter";
    rc = hora_reducescatter(name, send, w->send, recv, o->dtype, o->op);
    break;
  default:
    fn = "hora_allreduce";
    rc = hora_allreduce(name, send, recv, w->count, o->dtype, o->op);
    break;
  }
  return rc < 0 ? fail(fn, name, rc) : 0;
}

/* Runs `k` operations of `name` back to back. */
static int run_iters(const char *name, const struct opts *o,
                     const struct row *w, void *send, void *recv, int k) {
  for (int it = 0; it < k; it++) {
    int rc = run_one(name, o, w, send, recv);
    if (rc < 0) return rc;
  }
  return 0;
}

/* Fills this rank's input of the row: a reduction's pattern(), data(rank,
 * 0, .) for allgather and broadcast (only the root's survives), and for
 * alltoall data(rank, j, .) in the block for member j. */
static void fill_input(const struct opts *o, const struct row *w,
                       struct bufs *b, void *send, int rank, int n) {
  size_t tsize = hora_dtype_size(o->dtype);
  if (has_op(o->coll)) {
    fill(send, w->send, o, n, (struct pat){PAT_IN, rank, 0}, b->period);
  } else if (o->coll == HORA_COLL_ALLTOALL) {
    for (int j = 0; j < n; j++)
      fill((char *)send + (size_t)j * w->count * tsize, w->count, o, n,
           (struct pat){PAT_DATA, rank, j}, b->period);
  } else {
    fill(send, w->send, o, n, (struct pat){PAT_DATA, rank, 0}, b->period);
  }
}

/* The checked iteration: poisons what only the output holds, fills the
 * input, runs once and counts this rank's wrong elements. */
static int check_row(const char *name, const struct opts *o,
                     const struct row *w, struct bufs *b, int rank, int n,
                     long long *wrong) {
  size_t tsize = hora_dtype_size(o->dtype);
  void *send, *recv;
  place(o, w, b, rank, &send, &recv);
  if (!inplace(o) || o->coll == HORA_COLL_ALLGATHER)
    fill(recv, w->recv, o, n, (struct pat){PAT_POISON, 0, 0}, b->period);
  fill_input(o, w, b, send, rank, n);
  int rc = run_one(name, o, w, send, recv);
  if (rc < 0) return rc;
  long long bad = 0;
  switch (o->coll) {
  case HORA_COLL_ALLREDUCE:
    bad = count_wrong(recv, w->recv, 0, o, n, (struct pat){PAT_OUT, 0, 0});
    break;
  case HORA_COLL_REDUCESCATTER: /* block `rank` of the reduction */
    bad = count_wrong(recv, w->recv, w->count * (size_t)rank, o, n,
                      (struct pat){PAT_OUT, 0, 0});
    break;
  case HORA_COLL_BROADCAST:
    bad =
        count_wrong(recv, w->recv, 0, o, n, (struct pat){PAT_DATA, o->root, 0});
    break;
  default: /* allgather: block m from m; alltoall: from m, for rank */
    for (int m = 0; m < n; m++)
      bad += count_wrong(
          (char *)recv + (size_t)m * w->count * tsize, w->count, 0, o, n,
          (struct pat){PAT_DATA, m, o->coll == HORA_COLL_ALLTOALL ? rank : 0});
    break;
  }
  *wrong = bad;
  return 0;
}

/* The sweep: minb, minb * f, ... up to maxb; 0 after the last size. */
static size_t next_size(const struct opts *o, size_t size) {
  return size > o->maxb / (size_t)o->factor ? 0 : size * (size_t)o->factor;
}

static void row_name(char *buf, size_t cap, const char *what,
                     const struct opts *o, const struct row *w) {
  snprintf(buf, cap, "perf.%s%s.%zu", what, coll_name(o->coll), w->bytes);
}

/* One row of the table. *wrong gets the mismatches over all ranks (0 with
 * -C 0), *busbw the bus bandwidth. */
static int bench_size(const struct row *w, const struct opts *o, struct bufs *b,
                      int rank, int n, long long *wrong, double *busbw) {
  char name[80], tname[80], wname[80];
  row_name(name, sizeof name, "", o, w);
  row_name(tname, sizeof tname, "time.", o, w);
  row_name(wname, sizeof wname, "wrong.", o, w);
  void *send, *recv;
  place(o, w, b, rank, &send, &recv);
  int rc;

  fill_input(o, w, b, send, rank, n);
  if ((rc = run_iters(name, o, w, send, recv, o->warmup)) < 0) return rc;
  if ((rc = hora_barrier()) < 0) return fail("hora_barrier", NULL, rc);
  double t0 = now_us();
  if ((rc = run_iters(name, o, w, send, recv, o->iters)) < 0) return rc;
  double t = (now_us() - t0) / o->iters;
  if ((rc = hora_allreduce(tname, &t, &t, 1, HORA_FLOAT64, HORA_MAX)) < 0)
    return fail("hora_allreduce", tname, rc);

  long long nwrong = 0;
  if (o->check) {
    if ((rc = check_row(name, o, w, b, rank, n, &nwrong)) < 0) return rc;
    int64_t wsum = nwrong;
    if ((rc = hora_allreduce(wname, &wsum, &wsum, 1, HORA_INT64, HORA_SUM)) < 0)
      return fail("hora_allreduce", wname, rc);
    nwrong = wsum;
  }

  double algbw = (double)w->bytes / t / 1e3; /* bytes/us -> GB/s */
  *busbw = algbw * bus_factor(o, n);
  *wrong = nwrong;
  if (rank == 0) {
    char wbuf[24] = "N/A";
    if (o->check) snprintf(wbuf, sizeof wbuf, "%lld", nwrong);
    printf("  %10zu  %12zu  %8s  %6s  %8.2f  %7.2f  %7.2f  %6s\n", w->bytes,
           w->count, hora_dtype_name(o->dtype), redop(o), t, algbw, *busbw,
           wbuf);
    fflush(stdout);
  }
  return 0;
}

/* --sets: one row, timed for each set alone (the others wait in the next
 * global call) and for all sets at once; srank and sn are this rank's
 * place in its set and the set's size, my the set's index. The time of
 * "alone" is the slowest set's (each the maximum over its ranks), that
 * of "together" the maximum over all ranks; the check runs together. */
static int bench_sets(const struct row *w, const struct opts *o, struct bufs *b,
                      int srank, int sn, int my, long long *wrong,
                      double *busbw) {
  char name[80], tname[80], wname[80];
  row_name(name, sizeof name, "", o, w);
  void *send, *recv;
  place(o, w, b, srank, &send, &recv);
  int rc;
  fill_input(o, w, b, send, srank, sn);
  if ((rc = run_iters(name, o, w, send, recv, o->warmup)) < 0) return rc;
  double alone = 0, together;
  for (int s = 0; s < o->sets; s++) {
    double t = 0;
    if ((rc = hora_barrier()) < 0) return fail("hora_barrier", NULL, rc);
    if (my == s) {
      double t0 = now_us();
      if ((rc = run_iters(name, o, w, send, recv, o->iters)) < 0) return rc;
      t = (now_us() - t0) / o->iters;
    }
    snprintf(tname, sizeof tname, "perf.sets.alone.%d.%zu", s, w->bytes);
    if ((rc = hora_allreduce(tname, &t, &t, 1, HORA_FLOAT64, HORA_MAX)) < 0)
      return fail("hora_allreduce", tname, rc);
    if (t > alone) alone = t;
  }
  if ((rc = hora_barrier()) < 0) return fail("hora_barrier", NULL, rc);
  double t0 = now_us();
  if ((rc = run_iters(name, o, w, send, recv, o->iters)) < 0) return rc;
  together = (now_us() - t0) / o->iters;
  snprintf(tname, sizeof tname, "perf.sets.together.%zu", w->bytes);
  if ((rc = hora_allreduce(tname, &together, &together, 1, HORA_FLOAT64,
                           HORA_MAX)) < 0)
    return fail("hora_allreduce", tname, rc);

  long long nwrong = 0;
  if (o->check) {
    if ((rc = check_row(name, o, w, b, srank, sn, &nwrong)) < 0) return rc;
    int64_t wsum = nwrong;
    snprintf(wname, sizeof wname, "perf.sets.wrong.%zu", w->bytes);
    if ((rc = hora_allreduce(wname, &wsum, &wsum, 1, HORA_INT64, HORA_SUM)) < 0)
      return fail("hora_allreduce", wname, rc);
    nwrong = wsum;
  }
  double f = bus_factor(o, sn);
  double abw = (double)w->bytes / alone / 1e3, tbw = (double)w->bytes / together / 1e3;
  *busbw = tbw * f;
  *wrong = nwrong;
  if (hora_rank() == 0) {
    char wbuf[24] = "N/A";
    if (o->check) snprintf(wbuf, sizeof wbuf, "%lld", nwrong);
    printf("  %10zu  %12zu  %8s  %6s  %8.2f  %7.2f  %7.2f  %8.2f  %7.2f  %7.2f  "
           "%6s  %8.2f\n",
           w->bytes, w->count, hora_dtype_name(o->dtype), redop(o), alone, abw,
           abw * f, together, tbw, tbw * f, wbuf, together / alone);
    fflush(stdout);
  }
  return 0;
}

/* Runs -w operations at every size of the sweep before any is timed, as
 * recent nccl-tests do, so that whatever a runtime sets up on the first use
 * of a size (connections, protocol switches, the buffers' pages) is out of
 * the way; the timed loop of each size gets -w more right before it. */
static int warm_up(const struct opts *o, struct bufs *b, int rank, int n) {
  char name[80];
  for (size_t size = o->minb; size; size = next_size(o, size)) {
    struct row w = row_of(o, size, n);
    void *send, *recv;
    place(o, &w, b, rank, &send, &recv);
    fill_input(o, &w, b, send, rank, n);
    row_name(name, sizeof name, "", o, &w);
    int rc = run_iters(name, o, &w, send, recv, o->warmup);
    if (rc < 0) return rc;
  }
  return 0;
}

/* The largest row's buffers: a holds the larger side (in place, the only
 * buffer), b the other side out of place. */
static int alloc_bufs(const struct opts *o, struct bufs *b, int n) {
  struct row w = row_of(o, o->minb, n);
  for (size_t size = o->minb; size; size = next_size(o, size))
    w = row_of(o, size, n);
  size_t tsize = hora_dtype_size(o->dtype);
  size_t abytes = (w.send > w.recv ? w.send : w.recv) * tsize;
  size_t bbytes = inplace(o) ? 0 : (w.send < w.recv ? w.send : w.recv) * tsize;
  b->b = NULL;
  b->a = o->arena ? hora_alloc(abytes) : malloc(abytes);
  if (b->a && bbytes) b->b = o->arena ? hora_alloc(bbytes) : malloc(bbytes);
  if (!b->a || (bbytes && !b->b)) {
    if (o->arena)
      fprintf(stderr,
              "allreduce_perf: rank %d: hora_alloc of %zu%s bytes failed: "
              "%s\nallreduce_perf: raise the arena (HORA_ARENA_SIZE, horarun "
              "--arena-size), lower -e, or use -a 0\n",
              hora_rank(), abytes, bbytes ? " + more" : "",
              hora_last_error()[0] ? hora_last_error() : "arena full");
    else
      fprintf(stderr,
              "allreduce_perf: rank %d: malloc of %zu + %zu bytes "
              "failed\n",
              hora_rank(), abytes, bbytes);
    return HORA_ENOMEM;
  }
  return 0;
}

static void free_bufs(const struct opts *o, struct bufs *b) {
  if (o->arena) {
    hora_free(b->a);
    hora_free(b->b);
  } else {
    free(b->a);
    free(b->b);
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
  if (o.sets && (n % o.sets || n / o.sets < 1)) {
    if (rank == 0)
      fprintf(stderr, "allreduce_perf: --sets %d: the job's %d ranks do not "
              "split into %d sets of the same size\n", o.sets, n, o.sets);
    hora_shutdown();
    return 2;
  }
  int sn = o.sets ? n / o.sets : n; /* ranks per set */
  if (o.sets && sn > 4096) {
    if (rank == 0)
      fprintf(stderr, "allreduce_perf: --sets: at most 4096 ranks a set\n");
    hora_shutdown();
    return 2;
  }
  if (o.coll == HORA_COLL_BROADCAST && o.root >= sn) {
    if (rank == 0)
      fprintf(stderr, "allreduce_perf: -r %d: the %s has %d ranks\n", o.root,
              o.sets ? "set" : "job", sn);
    hora_shutdown();
    return 2;
  }
  /* The rank lines come first: their allgather needs a little room in
   * the arena, which the buffers may fill. */
  if (rank == 0) print_header(&o, n);
  if (print_ranks(rank, n) < 0) {
    hora_shutdown();
    return 1;
  }
  /* --sets: every rank adds every set, in the same order; this rank's
   * collectives then run on its own. */
  int my = 0, srank = rank;
  for (int s = 0; s < o.sets; s++) {
    static int ranks[4096];
    for (int i = 0; i < sn; i++) ranks[i] = s * sn + i;
    int id = hora_process_set_add(ranks, sn);
    if (id < 0) {
      fail("hora_process_set_add", NULL, id);
      hora_shutdown();
      return 1;
    }
    if (rank / sn == s) {
      my = s;
      g_pset = id;
      g_root = s * sn + o.root;
      srank = hora_process_set_rank(id);
    }
    if (rank == 0)
      printf("# set %d: process set %d, ranks %d-%d\n", s, id, s * sn,
             s * sn + sn - 1);
  }
  struct bufs b;
  if (alloc_bufs(&o, &b, sn) < 0) {
    hora_shutdown();
    return 1;
  }
  if (rank == 0) print_columns(&o);

  long long total_wrong = 0;
  double bw_sum = 0;
  int rows = 0;
  if ((rc = warm_up(&o, &b, srank, sn)) < 0) goto out;
  size_t prev = 0;
  for (size_t size = o.minb; size; size = next_size(&o, size)) {
    long long wrong = 0;
    double busbw = 0;
    struct row w = row_of(&o, size, sn);
    if (w.count == prev) continue; /* sizes below one element */
    prev = w.count;
    rc = o.sets ? bench_sets(&w, &o, &b, srank, sn, my, &wrong, &busbw)
                : bench_size(&w, &o, &b, rank, n, &wrong, &busbw);
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
