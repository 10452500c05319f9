/* mpi_allreduce_perf.c -- the peer of allreduce_perf: the same sweep, the
 * same collectives (-c), the same check and the same columns, over
 * OpenMPI's MPI_Allreduce, MPI_Allgather, MPI_Alltoall,
 * MPI_Reduce_scatter_block and MPI_Bcast, so the two tables can be set side
 * by side (benchmarks/run.sh).
 *
 *   mpicc -O2 -std=c11 -D_GNU_SOURCE mpi_allreduce_perf.c -o mpi_allreduce_perf
 *   mpirun --allow-run-as-root --oversubscribe -np 2 ./mpi_allreduce_perf
 *
 * Options as allreduce_perf: -c -b -e -f -n -w -d -o -r -C -i; -a is
 * accepted and ignored (buffers always come from malloc). Sizes as
 * allreduce_perf (nccl-tests): per rank for allreduce and broadcast, the
 * whole array of n blocks for the others. MPI has no float16/bfloat16 and
 * no average: -o avg is MPI_SUM followed by a division on every rank,
 * inside the timed region, which is what a runtime built on MPI does. In
 * place (-i 1, the default) passes MPI_IN_PLACE: allgather's block is then
 * in its place in the output, reducescatter's input is the whole receive
 * buffer and its result the first block; MPI_Bcast has one buffer.
 * --sets K as allreduce_perf's: MPI_Comm_split into K communicators of
 * n/K consecutive ranks, each row timed for one alone and for all at
 * once. Kept free of hora's headers on purpose: it builds with nothing
 * but mpicc. */
#include <errno.h>
#include <getopt.h>
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
enum coll { C_ALLREDUCE, C_ALLGATHER, C_ALLTOALL, C_REDUCESCATTER, C_BCAST };

/* -c's names, with nccl-tests' spellings as aliases. */
static const struct {
  const char *name, *alias;
} colls[] = {{"allreduce", "all_reduce"},
             {"allgather", "all_gather"},
             {"alltoall", "all_to_all"},
             {"reducescatter", "reduce_scatter"},
             {"broadcast", "bcast"}};

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
  enum coll coll;
  enum dtype dtype;
  enum op op;
  int root;
  int check, inplace;
  int sets; /* --sets K: K communicators of consecutive ranks (0: world) */
};

/* The communicator the collectives run on (--sets: this rank's). */
static MPI_Comm g_comm;

/* ---- options ------------------------------------------------------------ */

static void usage(FILE *f) {
  fprintf(f,
          "usage: mpi_allreduce_perf [-c collective] [-b minbytes]\n"
          "                          [-e maxbytes] [-f factor] [-n iters]\n"
          "                          [-w warmup] [-d dtype] [-o op] [-r root]\n"
          "                          [-C 0|1] [-i 0|1] [-a 0|1] [--sets K]\n"
          "  -c  allreduce allgather alltoall reducescatter broadcast\n"
          "      (default allreduce)\n"
          "  -d  uint8 int8 int16 int32 int64 float32 float64 (default "
          "float32)\n"
          "  -o  sum avg min max prod (default sum; avg = sum, then divide)\n"
          "  -a  accepted for compatibility with allreduce_perf; ignored\n"
          "  other options and defaults as allreduce_perf\n");
}

static int parse_coll(const char *s, enum coll *out) {
  for (size_t i = 0; i < sizeof colls / sizeof colls[0]; i++)
    if (strcmp(s, colls[i].name) == 0 || strcmp(s, colls[i].alias) == 0) {
      *out = (enum coll)i;
      return 0;
    }
  return -1;
}

static int has_op(enum coll c) {
  return c == C_ALLREDUCE || c == C_REDUCESCATTER;
}

static int is_blocked(enum coll c) {
  return c == C_ALLGATHER || c == C_ALLTOALL || c == C_REDUCESCATTER;
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
                     .coll = C_ALLREDUCE,
                     .dtype = D_FLOAT32,
                     .op = O_SUM,
                     .root = 0,
                     .check = 1,
                     .inplace = 1};
  int c;
  long v;
  FILE *err = rank == 0 ? stderr : NULL;
  opterr = rank == 0;
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
      if (bad && err && (strcmp(optarg, "0") == 0 || strcmp(optarg, "1") == 0))
        fprintf(err,
                "mpi_allreduce_perf: -c names the collective now; the "
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

/* Data of the collectives that do not reduce, and the poison put in
 * receive buffers before the checked iteration: as data() and poison() in
 * allreduce_perf.c. */
static int64_t data(enum dtype d, int r, int j, long i) {
  int64_t v =
      (11 * (i % PERIOD) + 13 * (r % PERIOD) + 17 * (j % PERIOD)) % PERIOD;
  return d != D_UINT8 ? v - 105 : v;
}

static int64_t poison(enum dtype d) {
  return d != D_UINT8 ? 120 : 250;
}

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

static void fill(void *buf, size_t count, const struct opts *o, int n,
                 struct pat p, void *period) {
  size_t tsize = dtypes[o->dtype].size;
  for (long i = 0; i < PERIOD; i++)
    store(o->dtype, period, (size_t)i, pat_value(o, n, p, i));
  for (size_t i = 0; i < count; i += PERIOD) {
    size_t k = count - i < PERIOD ? count - i : PERIOD;
    memcpy((char *)buf + i * tsize, period, k * tsize);
  }
}

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

static int inplace(const struct opts *o) {
  return o->inplace || o->coll == C_BCAST;
}

static const char *redop(const struct opts *o) {
  return has_op(o->coll) ? op_names[o->op] : "none";
}

/* A row, as in allreduce_perf.c: count elements per rank (allreduce,
 * broadcast) or per block; send, recv: elements sent and received. */
struct row {
  size_t count, send, recv, bytes;
};

static struct row row_of(const struct opts *o, size_t size, int n) {
  size_t tsize = dtypes[o->dtype].size;
  struct row w;
  size_t per = is_blocked(o->coll) ? size / tsize / (size_t)n : size / tsize;
  w.count = per ? per : 1;
  size_t all = w.count * (size_t)n;
  switch (o->coll) {
  case C_ALLGATHER:
    w.send = w.count;
    w.recv = all;
    break;
  case C_ALLTOALL:
    w.send = w.recv = all;
    break;
  case C_REDUCESCATTER:
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
  case C_ALLREDUCE:
    return 2.0 * (n - 1) / n;
  case C_BCAST:
    return 1.0;
  default:
    return (double)(n - 1) / n;
  }
}

struct bufs {
  void *a, *b; /* a: the larger side, or the only buffer in place */
  unsigned char period[PERIOD * 8];
};

/* Where a row's input and output lie. In place (MPI_IN_PLACE): allgather's
 * input is its block of the output; reducescatter's input is the whole
 * buffer and its result the first block; the others share one buffer. */
static void place(const struct opts *o, const struct row *w, struct bufs *b,
                  int rank, void **send, void **recv) {
  size_t blk = w->count * dtypes[o->dtype].size * (size_t)rank;
  int rs = o->coll == C_REDUCESCATTER;
  if (inplace(o)) {
    *send = *recv = b->a;
    if (o->coll == C_ALLGATHER) *send = (char *)b->a + blk;
  } else {
    *send = rs ? b->a : b->b;
    *recv = rs ? b->b : b->a;
  }
}

static const char *call_name(const struct opts *o) {
  static const char *const names[] = {"MPI_Allreduce", "MPI_Allgather",
                                      "MPI_Alltoall",
                                      "MPI_Reduce_scatter_block", "MPI_Bcast"};
  return names[o->coll];
}

static int run_one(const struct opts *o, const struct row *w, void *send,
                   void *recv, int n) {
  MPI_Datatype t = mpi_dtype(o->dtype);
  void *in = inplace(o) ? MPI_IN_PLACE : send;
  int c = (int)w->count, rc;
  switch (o->coll) {
  case C_BCAST:
    return MPI_Bcast(recv, c, t, o->root, g_comm);
  case C_ALLGATHER:
    return MPI_Allgather(in, inplace(o) ? 0 : c,
                         inplace(o) ? MPI_DATATYPE_NULL : t, recv, c, t,
                         g_comm);
  case C_ALLTOALL:
    return MPI_Alltoall(in, inplace(o) ? 0 : c,
                        inplace(o) ? MPI_DATATYPE_NULL : t, recv, c, t,
                        g_comm);
  case C_REDUCESCATTER:
    rc =
        MPI_Reduce_scatter_block(in, recv, c, t, mpi_op(o->op), g_comm);
    break;
  default:
    rc = MPI_Allreduce(in, recv, c, t, mpi_op(o->op), g_comm);
    break;
  }
  if (rc == MPI_SUCCESS && o->op == O_AVG) divide(recv, w->count, o->dtype, n);
  return rc;
}

static int run_iters(const struct opts *o, const struct row *w, void *send,
                     void *recv, int n, int k) {
  for (int it = 0; it < k; it++) {
    int rc = run_one(o, w, send, recv, n);
    if (rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

static void fill_input(const struct opts *o, const struct row *w,
                       struct bufs *b, void *send, int rank, int n) {
  size_t tsize = dtypes[o->dtype].size;
  if (has_op(o->coll)) {
    fill(send, w->send, o, n, (struct pat){PAT_IN, rank, 0}, b->period);
  } else if (o->coll == C_ALLTOALL) {
    for (int j = 0; j < n; j++)
      fill((char *)send + (size_t)j * w->count * tsize, w->count, o, n,
           (struct pat){PAT_DATA, rank, j}, b->period);
  } else {
    fill(send, w->send, o, n, (struct pat){PAT_DATA, rank, 0}, b->period);
  }
}

static int check_row(const struct opts *o, const struct row *w, struct bufs *b,
                     int rank, int n, long long *wrong) {
  size_t tsize = dtypes[o->dtype].size;
  void *send, *recv;
  place(o, w, b, rank, &send, &recv);
  if (!inplace(o) || o->coll == C_ALLGATHER)
    fill(recv, w->recv, o, n, (struct pat){PAT_POISON, 0, 0}, b->period);
  fill_input(o, w, b, send, rank, n);
  int rc = run_one(o, w, send, recv, n);
  if (rc != MPI_SUCCESS) return rc;
  long long bad = 0;
  switch (o->coll) {
  case C_ALLREDUCE:
    bad = count_wrong(recv, w->recv, 0, o, n, (struct pat){PAT_OUT, 0, 0});
    break;
  case C_REDUCESCATTER:
    bad = count_wrong(recv, w->recv, w->count * (size_t)rank, o, n,
                      (struct pat){PAT_OUT, 0, 0});
    break;
  case C_BCAST:
    bad =
        count_wrong(recv, w->recv, 0, o, n, (struct pat){PAT_DATA, o->root, 0});
    break;
  default:
    for (int m = 0; m < n; m++)
      bad += count_wrong(
          (char *)recv + (size_t)m * w->count * tsize, w->count, 0, o, n,
          (struct pat){PAT_DATA, m, o->coll == C_ALLTOALL ? rank : 0});
    break;
  }
  *wrong = bad;
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
  printf("# mpi allreduce_perf -c %s (%s), %s\n", colls[o->coll].name,
         call_name(o), lib);
  printf("# ranks %d minBytes %zu maxBytes %zu step: %ld(factor) warmup "
         "iters: %d iters: %d validation: %d\n",
         n, o->minb, o->maxb, o->factor, o->warmup, o->iters, o->check);
  printf("# collective %s dtype %s redop %s%s", colls[o->coll].name,
         dtypes[o->dtype].name, redop(o),
         has_op(o->coll) && o->op == O_AVG ? " (MPI_SUM + divide)" : "");
  if (o->coll == C_BCAST)
    printf(" root %d%s", o->root, o->sets ? " of each set" : "");
  printf(" buffers malloc %s\n",
         inplace(o) ? "in-place (MPI_IN_PLACE)" : "out-of-place");
  if (o->sets)
    printf("# sets %d of %d ranks each (MPI_Comm_split), each running the "
           "collective on its own; size, count, busbw: per set; "
           "together/alone: the time of all sets at once over that of one "
           "set alone\n",
           o->sets, n / o->sets);
  if (is_blocked(o->coll))
    printf("# size: the whole array, n x count elements; count: elements per "
           "block; busbw = algbw x (n-1)/n\n");
  else if (o->coll == C_BCAST)
    printf("# size: bytes broadcast; busbw = algbw\n");
  else
    printf("# size: bytes per rank; busbw = algbw x 2(n-1)/n\n");
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

/* The sweep: minb, minb * f, ... up to maxb; 0 after the last size. */
static size_t next_size(const struct opts *o, size_t size) {
  return size > o->maxb / (size_t)o->factor ? 0 : size * (size_t)o->factor;
}

/* -w operations at every size before any is timed, as in allreduce_perf. */
static int warm_up(const struct opts *o, struct bufs *b, int rank, int n) {
  for (size_t size = o->minb; size; size = next_size(o, size)) {
    struct row w = row_of(o, size, n);
    void *send, *recv;
    place(o, &w, b, rank, &send, &recv);
    fill_input(o, &w, b, send, rank, n);
    int rc = run_iters(o, &w, send, recv, n, o->warmup);
    if (rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

static int bench_size(const struct row *w, const struct opts *o, struct bufs *b,
                      int rank, int n, long long *wrong, double *busbw) {
  void *send, *recv;
  place(o, w, b, rank, &send, &recv);
  int rc;

  fill_input(o, w, b, send, rank, n);
  if ((rc = run_iters(o, w, send, recv, n, o->warmup)) != MPI_SUCCESS)
    return rc;
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  if ((rc = run_iters(o, w, send, recv, n, o->iters)) != MPI_SUCCESS) return rc;
  double t = (MPI_Wtime() - t0) * 1e6 / o->iters;
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

  long long nwrong = 0;
  if (o->check) {
    if ((rc = check_row(o, w, b, rank, n, &nwrong)) != MPI_SUCCESS) return rc;
    MPI_Allreduce(MPI_IN_PLACE, &nwrong, 1, MPI_LONG_LONG, MPI_SUM,
                  MPI_COMM_WORLD);
  }

  double algbw = (double)w->bytes / t / 1e3; /* bytes/us -> GB/s */
  *busbw = algbw * bus_factor(o, n);
  *wrong = nwrong;
  if (rank == 0) {
    char wbuf[24] = "N/A";
    if (o->check) snprintf(wbuf, sizeof wbuf, "%lld", nwrong);
    printf("  %10zu  %12zu  %8s  %6s  %8.2f  %7.2f  %7.2f  %6s\n", w->bytes,
           w->count, dtypes[o->dtype].name, redop(o), t, algbw, *busbw, wbuf);
    fflush(stdout);
  }
  return MPI_SUCCESS;
}

/* --sets: as allreduce_perf's bench_sets(). */
static int bench_sets(const struct row *w, const struct opts *o, struct bufs *b,
                      int srank, int sn, int my, long long *wrong,
                      double *busbw) {
  void *send, *recv;
  place(o, w, b, srank, &send, &recv);
  int rc;
  fill_input(o, w, b, send, srank, sn);
  if ((rc = run_iters(o, w, send, recv, sn, o->warmup)) != MPI_SUCCESS)
    return rc;
  double alone = 0, together;
  for (int s = 0; s < o->sets; s++) {
    double t = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    if (my == s) {
      double t0 = MPI_Wtime();
      if ((rc = run_iters(o, w, send, recv, sn, o->iters)) != MPI_SUCCESS)
        return rc;
      t = (MPI_Wtime() - t0) * 1e6 / o->iters;
    }
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (t > alone) alone = t;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  if ((rc = run_iters(o, w, send, recv, sn, o->iters)) != MPI_SUCCESS) return rc;
  together = (MPI_Wtime() - t0) * 1e6 / o->iters;
  MPI_Allreduce(MPI_IN_PLACE, &together, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

  long long nwrong = 0;
  if (o->check) {
    if ((rc = check_row(o, w, b, srank, sn, &nwrong)) != MPI_SUCCESS) return rc;
    MPI_Allreduce(MPI_IN_PLACE, &nwrong, 1, MPI_LONG_LONG, MPI_SUM,
                  MPI_COMM_WORLD);
  }
  double f = bus_factor(o, sn);
  double abw = (double)w->bytes / alone / 1e3, tbw = (double)w->bytes / together / 1e3;
  *busbw = tbw * f;
  *wrong = nwrong;
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) {
    char wbuf[24] = "N/A";
    if (o->check) snprintf(wbuf, sizeof wbuf, "%lld", nwrong);
    printf("  %10zu  %12zu  %8s  %6s  %8.2f  %7.2f  %7.2f  %8.2f  %7.2f  %7.2f  "
           "%6s  %8.2f\n",
           w->bytes, w->count, dtypes[o->dtype].name, redop(o), alone, abw,
           abw * f, together, tbw, tbw * f, wbuf, together / alone);
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
  g_comm = MPI_COMM_WORLD;
  if (o.sets && n % o.sets) {
    if (rank == 0)
      fprintf(stderr, "mpi_allreduce_perf: --sets %d: the job's %d ranks do "
              "not split into %d sets of the same size\n", o.sets, n, o.sets);
    MPI_Finalize();
    return 2;
  }
  int sn = o.sets ? n / o.sets : n, my = o.sets ? rank / sn : 0, srank = rank;
  if (o.coll == C_BCAST && o.root >= sn) {
    if (rank == 0)
      fprintf(stderr, "mpi_allreduce_perf: -r %d: the %s has %d ranks\n",
              o.root, o.sets ? "set" : "job", sn);
    MPI_Finalize();
    return 2;
  }
  if (o.sets) {
    MPI_Comm_split(MPI_COMM_WORLD, my, rank, &g_comm);
    MPI_Comm_set_errhandler(g_comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(g_comm, &srank);
  }
  struct row big = row_of(&o, o.minb, sn);
  for (size_t size = o.minb; size; size = next_size(&o, size))
    big = row_of(&o, size, sn);
  if (big.count > (size_t)2147483647) {
    if (rank == 0) fprintf(stderr, "mpi_allreduce_perf: -e too large\n");
    MPI_Finalize();
    return 2;
  }
  size_t tsize = dtypes[o.dtype].size;
  size_t abytes = (big.send > big.recv ? big.send : big.recv) * tsize;
  size_t bbytes =
      inplace(&o) ? 0 : (big.send < big.recv ? big.send : big.recv) * tsize;
  struct bufs b;
  b.a = malloc(abytes);
  b.b = bbytes ? malloc(bbytes) : NULL;
  if (!b.a || (bbytes && !b.b)) {
    fprintf(stderr, "mpi_allreduce_perf: rank %d: out of memory\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (rank == 0) print_header(&o, n);
  print_ranks(rank, n);
  if (rank == 0) print_columns(&o);

  long long total_wrong = 0;
  double bw_sum = 0;
  int rows = 0;
  int rc = warm_up(&o, &b, srank, sn);
  size_t prev = 0;
  for (size_t size = o.minb; rc == MPI_SUCCESS && size;
       size = next_size(&o, size)) {
    struct row w = row_of(&o, size, sn);
    long long wrong = 0;
    double busbw = 0;
    if (w.count == prev) continue; /* sizes below one element */
    prev = w.count;
    rc = o.sets ? bench_sets(&w, &o, &b, srank, sn, my, &wrong, &busbw)
                : bench_size(&w, &o, &b, rank, n, &wrong, &busbw);
    total_wrong += wrong;
    bw_sum += busbw;
    rows++;
  }
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len;
    MPI_Error_string(rc, msg, &len);
    fprintf(stderr, "mpi_allreduce_perf: rank %d: %s failed: %s\n", rank,
            call_name(&o), msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (rank == 0) {
    printf("# Out of bounds values : %lld %s\n", total_wrong,
           total_wrong ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g \n#\n", rows ? bw_sum / rows : 0.0);
  }
  free(b.a);
  free(b.b);
  MPI_Finalize();
  return total_wrong ? 1 : 0;
}
