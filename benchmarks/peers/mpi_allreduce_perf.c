/* mpi_allreduce_perf.c -- the peer of allreduce_perf: the same sweep, the
 * same check and the same columns, over MPI_Allreduce (OpenMPI), so the two
 * tables can be set side by side (benchmarks/run.sh).
 *
 *   mpicc -O2 -std=c11 -D_GNU_SOURCE mpi_allreduce_perf.c -o mpi_allreduce_perf
 *   mpirun --allow-run-as-root --oversubscribe -np 2 ./mpi_allreduce_perf
 *
 * Options as allreduce_perf: -b -e -f -n -w -d -o -c -i; -a is accepted and
 * ignored (buffers always come from malloc). MPI has no float16/bfloat16
 * and no average: -o avg is MPI_SUM followed by a division on every rank,
 * inside the timed region, which is what a runtime built on MPI does.
 * In place (-i 1, the default) passes MPI_IN_PLACE. Kept free of hora's
 * headers on purpose: it builds with nothing but mpicc. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

#define PERIOD 210 /* lcm of the pattern moduli; see pattern() */

enum dtype {
  D_UINT8,
  D_INT8,
  D_INT16,
  D_INT32,
  D_INT64,
  D_FLOAT32,
  D_FLOAT64,
  D_COUNT
};
enum op { O_AVG, O_SUM, O_MIN, O_MAX, O_PROD, O_COUNT };

static const struct {
  const char *name;
  size_t size;
} dtypes[D_COUNT] = {{"uint8", 1}, {"int8", 1},    {"int16", 2},  {"int32", 4},
                     {"int64", 8}, {"float32", 4}, {"float64", 8}};
static const char *const op_names[O_COUNT] = {"avg", "sum", "min", "max",
                                              "prod"};

static MPI_Datatype mpi_dtype(enum dtype d) {
  switch (d) {
  case D_UINT8:
    return MPI_UINT8_T;
  case D_INT8:
    return MPI_INT8_T;
  case D_INT16:
    return MPI_INT16_T;
  case D_INT32:
    return MPI_INT32_T;
  case D_INT64:
    return MPI_INT64_T;
  case D_FLOAT32:
    return MPI_FLOAT;
  default:
    return MPI_DOUBLE;
  }
}

static MPI_Op mpi_op(enum op o) {
  switch (o) {
  case O_MIN:
    return MPI_MIN;
  case O_MAX:
    return MPI_MAX;
  case O_PROD:
    return MPI_PROD;
  default:
    return MPI_SUM; /* avg: sum, then divide */
  }
}

struct opts {
  size_t minb, maxb;
  long factor;
  int iters, warmup;
  enum dtype dtype;
  enum op op;
  int check, inplace;
};

/* ---- options ------------------------------------------------------------ */

static void usage(FILE *f) {
  fprintf(f,
          "usage: mpi_allreduce_perf [-b minbytes] [-e maxbytes] [-f factor]\n"
          "                          [-n iters] [-w warmup] [-d dtype]\n"
          "                          [-o op] [-c 0|1] [-i 0|1] [-a 0|1]\n"
          "  -d  uint8 int8 int16 int32 int64 float32 float64 (default "
          "float32)\n"
          "  -o  sum avg min max prod (default sum; avg = sum, then divide)\n"
          "  -a  accepted for compatibility with allreduce_perf; ignored\n"
          "  other options and defaults as allreduce_perf\n");
}

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

static int parse_dtype(const char *s, enum dtype *out) {
  for (int d = 0; d < D_COUNT; d++)
    if (strcmp(s, dtypes[d].name) == 0) {
      *out = (enum dtype)d;
      return 0;
    }
  if (strcmp(s, "float") == 0)
    *out = D_FLOAT32;
  else if (strcmp(s, "double") == 0)
    *out = D_FLOAT64;
  else if (strcmp(s, "int") == 0)
    *out = D_INT32;
  else
    return -1;
  return 0;
}

static int parse_op(const char *s, enum op *out) {
  for (int o = 0; o < O_COUNT; o++)
    if (strcmp(s, op_names[o]) == 0) {
      *out = (enum op)o;
      return 0;
    }
  if (strcmp(s, "average") == 0)
    *out = O_AVG;
  else if (strcmp(s, "product") == 0)
    *out = O_PROD;
  else
    return -1;
  return 0;
}

/* Returns 0, or 1 after printing why (rank 0 only prints). */
static int parse_opts(int argc, char **argv, struct opts *o, int rank) {
  *o = (struct opts){.minb = 8,
                     .maxb = 64u << 20,
                     .factor = 2,
                     .iters = 20,
                     .warmup = 5,
                     .dtype = D_FLOAT32,
                     .op = O_SUM,
                     .check = 1,
                     .inplace = 1};
  int c;
  long v;
  FILE *err = rank == 0 ? stderr : NULL;
  opterr = rank == 0;
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
      break;
    case 'i':
      bad = parse_int(optarg, 0, 1, &v);
      o->inplace = (int)v;
      break;
    case 'h':
      if (err) usage(stdout);
      return 1;
    default:
      if (err) usage(stderr);
      return 1;
    }
    if (bad) {
      if (err) {
        fprintf(err, "mpi_allreduce_perf: bad value for -%c: %s%s\n", c, optarg,
                c == 'd' ? " (MPI has no float16/bfloat16)" : "");
        usage(err);
      }
      return 1;
    }
  }
  if (optind < argc || o->minb == 0 || o->maxb < o->minb) {
    if (err)
      fprintf(err, "mpi_allreduce_perf: need 0 < minbytes <= maxbytes "
                   "and no extra arguments\n");
    return 1;
  }
  return 0;
}

/* ---- the check pattern (as in allreduce_perf.c) ---------------------------
 */

static void store(enum dtype d, void *buf, size_t i, int64_t v) {
  switch (d) {
  case D_UINT8:
    ((uint8_t *)buf)[i] = (uint8_t)v;
    break;
  case D_INT8:
    ((int8_t *)buf)[i] = (int8_t)v;
    break;
  case D_INT16:
    ((int16_t *)buf)[i] = (int16_t)v;
    break;
  case D_INT32:
    ((int32_t *)buf)[i] = (int32_t)v;
    break;
  case D_INT64:
    ((int64_t *)buf)[i] = v;
    break;
  case D_FLOAT32:
    ((float *)buf)[i] = (float)v;
    break;
  default:
    ((double *)buf)[i] = (double)v;
    break;
  }
}

static double load(enum dtype d, const void *buf, size_t i) {
  switch (d) {
  case D_UINT8:
    return ((const uint8_t *)buf)[i];
  case D_INT8:
    return ((const int8_t *)buf)[i];
  case D_INT16:
    return ((const int16_t *)buf)[i];
  case D_INT32:
    return ((const int32_t *)buf)[i];
  case D_INT64:
    return (double)((const int64_t *)buf)[i];
  case D_FLOAT32:
    return ((const float *)buf)[i];
  default:
    return ((const double *)buf)[i];
  }
}

/* Small integers whose exact result fits every dtype; see the comment above
 * pattern() in allreduce_perf.c for why each op uses what it does. */
static int64_t pattern(enum op op, enum dtype d, int r, int n, long i) {
  int sig = d != D_UINT8;
  switch (op) {
  case O_SUM:
    return sig ? (i + 3 * r) % 5 - 2 : (i + 3 * r) % 3;
  case O_AVG: {
    int64_t c = sig ? i % 5 - 2 : 2 + i % 3;
    int64_t dv = 1 + (i + r / 2) % 2;
    if (r % 2 == 0 && r + 1 < n) return c + dv;
    if (r % 2 == 1) return c - dv;
    return c;
  }
  case O_MIN:
  case O_MAX:
    return sig ? (5 * i + 3 * r) % 7 - 3 : (5 * i + 3 * r) % 7;
  default: /* O_PROD */
    if (r < 6 && (i + r) % 3 == 0) return 2;
    if (sig && (i + 2 * r) % 5 == 1) return -1;
    return 1;
  }
}

static int64_t expected(enum op op, enum dtype d, int n, long i) {
  int64_t acc = pattern(op, d, 0, n, i);
  for (int r = 1; r < n; r++) {
    int64_t v = pattern(op, d, r, n, i);
    switch (op) {
    case O_SUM:
    case O_AVG:
      acc += v;
      break;
    case O_MIN:
      acc = v < acc ? v : acc;
      break;
    case O_MAX:
      acc = v > acc ? v : acc;
      break;
    default:
      acc *= v;
      break;
    }
  }
  return op == O_AVG ? acc / n : acc;
}

static void fill(void *buf, size_t count, const struct opts *o, int rank, int n,
                 void *period) {
  size_t tsize = dtypes[o->dtype].size;
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

/* MPI has no average: divide the sum by n in place, as an MPI-based
 * runtime would (C division for integers, toward zero). */
static void divide(void *buf, size_t count, enum dtype d, int n) {
  for (size_t i = 0; i < count; i++) {
    switch (d) {
    case D_UINT8:
      ((uint8_t *)buf)[i] = (uint8_t)(((uint8_t *)buf)[i] / n);
      break;
    case D_INT8:
      ((int8_t *)buf)[i] /= n;
      break;
    case D_INT16:
      ((int16_t *)buf)[i] /= n;
      break;
    case D_INT32:
      ((int32_t *)buf)[i] /= n;
      break;
    case D_INT64:
      ((int64_t *)buf)[i] /= n;
      break;
    case D_FLOAT32:
      ((float *)buf)[i] /= (float)n;
      break;
    default:
      ((double *)buf)[i] /= n;
      break;
    }
  }
}

static int allreduce(void *send, void *recv, size_t count, const struct opts *o,
                     int n) {
  int rc = MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count,
                         mpi_dtype(o->dtype), mpi_op(o->op), MPI_COMM_WORLD);
  if (rc == MPI_SUCCESS && o->op == O_AVG) divide(recv, count, o->dtype, n);
  return rc;
}

static int run_iters(void *send, void *recv, size_t count, const struct opts *o,
                     int n, int k) {
  for (int it = 0; it < k; it++) {
    int rc = allreduce(send, recv, count, o, n);
    if (rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

static void print_header(const struct opts *o, int n) {
  char lib[MPI_MAX_LIBRARY_VERSION_STRING];
  int len;
  MPI_Get_library_version(lib, &len);
  char *nl = strchr(lib, '\n');
  if (nl) *nl = '\0';
  char *comma = strchr(lib, ',');
  if (comma) *comma = '\0';
  printf("# mpi allreduce_perf, %s\n", lib);
  printf("# ranks %d minBytes %zu maxBytes %zu step: %ld(factor) warmup "
         "iters: %d iters: %d validation: %d\n",
         n, o->minb, o->maxb, o->factor, o->warmup, o->iters, o->check);
  printf("# dtype %s redop %s%s buffers malloc %s\n", dtypes[o->dtype].name,
         op_names[o->op], o->op == O_AVG ? " (MPI_SUM + divide)" : "",
         o->inplace ? "in-place (MPI_IN_PLACE)" : "out-of-place");
}

static void print_ranks(int rank, int n) {
  char line[96], *all = NULL;
  char host[MPI_MAX_PROCESSOR_NAME];
  int len;
  MPI_Get_processor_name(host, &len);
  memset(line, 0, sizeof line);
  snprintf(line, sizeof line, "#  Rank %3d Pid %7d on %12.40s", rank,
           (int)getpid(), host);
  if (rank == 0) all = malloc(sizeof line * (size_t)n);
  MPI_Gather(line, (int)sizeof line, MPI_CHAR, all, (int)sizeof line, MPI_CHAR,
             0, MPI_COMM_WORLD);
  if (rank == 0 && all) {
    printf("#\n# Using ranks\n");
    for (int r = 0; r < n; r++)
      printf("%s\n", all + (size_t)r * sizeof line);
  }
  free(all);
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

/* The sweep: minb, minb * f, ... up to maxb; 0 after the last size. */
static size_t next_size(const struct opts *o, size_t size) {
  return size > o->maxb / (size_t)o->factor ? 0 : size * (size_t)o->factor;
}

/* Elements in a row of `size` bytes: at least one. */
static size_t elements(const struct opts *o, size_t size) {
  size_t tsize = dtypes[o->dtype].size;
  return size / tsize ? size / tsize : 1;
}

/* -w allreduces at every size before any is timed, as in allreduce_perf. */
static int warm_up(const struct opts *o, void *sendb, void *recv, int rank,
                   int n) {
  unsigned char period[PERIOD * 8];
  void *send = o->inplace ? recv : sendb;
  size_t maxcount = 0;
  for (size_t size = o->minb; size; size = next_size(o, size))
    maxcount = elements(o, size);
  fill(send, maxcount, o, rank, n, period);
  for (size_t size = o->minb; size; size = next_size(o, size)) {
    int rc = run_iters(send, recv, elements(o, size), o, n, o->warmup);
    if (rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

static int bench_size(size_t count, const struct opts *o, void *sendb,
                      void *recv, int rank, int n, long long *wrong,
                      double *busbw) {
  unsigned char period[PERIOD * 8];
  size_t bytes = count * dtypes[o->dtype].size;
  void *send = o->inplace ? recv : sendb;
  int rc;

  fill(send, count, o, rank, n, period);
  if ((rc = run_iters(send, recv, count, o, n, o->warmup)) != MPI_SUCCESS)
    return rc;
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  if ((rc = run_iters(send, recv, count, o, n, o->iters)) != MPI_SUCCESS)
    return rc;
  double t = (MPI_Wtime() - t0) * 1e6 / o->iters;
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

  long long nwrong = 0;
  if (o->check) {
    fill(send, count, o, rank, n, period);
    if ((rc = run_iters(send, recv, count, o, n, 1)) != MPI_SUCCESS) return rc;
    nwrong = count_wrong(recv, count, o, n);
    MPI_Allreduce(MPI_IN_PLACE, &nwrong, 1, MPI_LONG_LONG, MPI_SUM,
                  MPI_COMM_WORLD);
  }

  double algbw = (double)bytes / t / 1e3; /* bytes/us -> GB/s */
  *busbw = algbw * 2.0 * (n - 1) / n;
  *wrong = nwrong;
  if (rank == 0) {
    char wbuf[24] = "N/A";
    if (o->check) snprintf(wbuf, sizeof wbuf, "%lld", nwrong);
    printf("  %10zu  %12zu  %8s  %6s  %8.2f  %7.2f  %7.2f  %6s\n", bytes, count,
           dtypes[o->dtype].name, op_names[o->op], t, algbw, *busbw, wbuf);
    fflush(stdout);
  }
  return MPI_SUCCESS;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  /* Errors come back as codes, so they can be printed and the job ended. */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  struct opts o;
  if (parse_opts(argc, argv, &o, rank)) {
    MPI_Finalize();
    return 2;
  }
  size_t tsize = dtypes[o.dtype].size;
  size_t bytes = o.maxb / tsize * tsize;
  if (bytes < tsize) bytes = tsize;
  if (bytes / tsize > (size_t)2147483647) {
    if (rank == 0) fprintf(stderr, "mpi_allreduce_perf: -e too large\n");
    MPI_Finalize();
    return 2;
  }
  void *recv = malloc(bytes), *send = o.inplace ? NULL : malloc(bytes);
  if (!recv || (!o.inplace && !send)) {
    fprintf(stderr, "mpi_allreduce_perf: rank %d: out of memory\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (rank == 0) print_header(&o, n);
  print_ranks(rank, n);
  if (rank == 0) print_columns(&o);

  long long total_wrong = 0;
  double bw_sum = 0;
  int rows = 0;
  int rc = warm_up(&o, send, recv, rank, n);
  size_t prev = 0;
  for (size_t size = o.minb; rc == MPI_SUCCESS && size;
       size = next_size(&o, size)) {
    size_t count = elements(&o, size);
    long long wrong = 0;
    double busbw = 0;
    if (count == prev) continue; /* sizes below one element */
    prev = count;
    rc = bench_size(count, &o, send, recv, rank, n, &wrong, &busbw);
    total_wrong += wrong;
    bw_sum += busbw;
    rows++;
  }
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len;
    MPI_Error_string(rc, msg, &len);
    fprintf(stderr, "mpi_allreduce_perf: rank %d: MPI_Allreduce failed: %s\n",
            rank, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (rank == 0) {
    printf("# Out of bounds values : %lld %s\n", total_wrong,
           total_wrong ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g \n#\n", rows ? bw_sum / rows : 0.0);
  }
  free(recv);
  free(send);
  MPI_Finalize();
  return total_wrong ? 1 : 0;
}
