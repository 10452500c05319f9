/* it_xcoll.c -- a rank of the tests of allgather, alltoall, reducescatter,
 * prescale/postscale, shapes, process sets and join.
 *
 *   it_xcoll colls [-x N]   every dtype (and op) of allgather (equal and
 *                           per-rank counts), alltoall (equal and uneven
 *                           splits; in place, on every rank or on some,
 *                           up to 3 MiB blocks), reducescatter; allreduce with scale
 *                           factors; a shape mismatch; a set of 1 rank
 *   it_xcoll sets [-x N]    process sets: add, collectives on a set of
 *                           the even ranks and one of the odd ranks at
 *                           once (disjoint sets in flight together), a
 *                           set of some ranks, non-members refused,
 *                           duplicates refused, remove, a removed id
 *                           refused; a set of the last host's ranks
 *   it_xcoll join [-x N]    join: each rank joins after a different
 *                           number of rounds of allreduces (every op),
 *                           allgather, alltoall and reducescatter; the
 *                           others' results count the joined ranks as
 *                           neutral (receive counts that expect data
 *                           from a joined rank are refused), and join
 *                           returns the last rank to join
 *   it_xcoll agburst [-x N] 5 rounds of 40 asynchronous allgathers at once
 *                           (every dtype, counts per rank and tensor, some
 *                           0), waited last first: across hosts runs of
 *                           them are fused
 *   it_xcoll agarena [-x N] the same, one dtype a round, each round's
 *                           inputs carved one after the other from one
 *                           hora_alloc block: the fused runs read them
 *                           there
 *   it_xcoll rsburst [-x N] 5 rounds of 30 asynchronous reducescatters at
 *                           once (runs of 10 alike in dtype and op, uneven
 *                           rows), waited last first: across hosts the
 *                           runs are fused
 *   it_xcoll groups [-x N]  grouped operations (hora_submit_group): mixed
 *                           allreduce groups, two in flight, allgather and
 *                           reducescatter groups, a group on a set, a
 *                           grouping mismatch, a group refused whole
 *
 * Every rank computes what it expects; a failure prints
 * "rank R: FAIL <what>" and the exit status is 1. */
#include <hora.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size, failures, checks;

#define FAIL(...)                                                              \
  do {                                                                         \
    printf("rank %d: FAIL ", rank);                                            \
    printf(__VA_ARGS__);                                                       \
    printf("\n");                                                              \
    failures++;                                                                \
  } while (0)

#define OK(rc, what)                                                           \
  do {                                                                         \
    int rc_ = (rc);                                                            \
    if (rc_ < 0) FAIL("%s: %s (%s)", what, hora_err_name(rc_),                 \
                      hora_last_error());                                      \
  } while (0)

static float h2f(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  float v = e ? ldexpf(1.0f + m / 1024.0f, e - 15) : ldexpf(m / 1024.0f, -14);
  return (h & 0x8000) ? -v : v;
}

static uint16_t f2h(float f) { /* exact for the small values used here */
  if (f == 0) return 0;
  uint16_t s = f < 0 ? 0x8000 : 0;
  f = fabsf(f);
  int e;
  float m = frexpf(f, &e); /* f = m * 2^e, m in [0.5, 1) */
  int he = e - 1 + 15;
  int hm = (int)lrintf((m * 2 - 1) * 1024);
  if (hm == 1024) {
    hm = 0;
    he++;
  }
  return (uint16_t)(s | (he << 10) | hm);
}

static void put(int dt, void *b, size_t i, double v) {
  switch (dt) {
  case HORA_UINT8: ((uint8_t *)b)[i] = (uint8_t)v; break;
  case HORA_INT8: ((int8_t *)b)[i] = (int8_t)v; break;
  case HORA_INT16: ((int16_t *)b)[i] = (int16_t)v; break;
  case HORA_INT32: ((int32_t *)b)[i] = (int32_t)v; break;
  case HORA_INT64: ((int64_t *)b)[i] = (int64_t)v; break;
  case HORA_FLOAT16: ((uint16_t *)b)[i] = f2h((float)v); break;
  case HORA_BFLOAT16: {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    ((uint16_t *)b)[i] = (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
    break;
  }
  case HORA_FLOAT32: ((float *)b)[i] = (float)v; break;
  default: ((double *)b)[i] = v;
  }
}

static double get(int dt, const void *b, size_t i) {
  switch (dt) {
  case HORA_UINT8: return ((const uint8_t *)b)[i];
  case HORA_INT8: return ((const int8_t *)b)[i];
  case HORA_INT16: return ((const int16_t *)b)[i];
  case HORA_INT32: return ((const int32_t *)b)[i];
  case HORA_INT64: return (double)((const int64_t *)b)[i];
  case HORA_FLOAT16: return h2f(((const uint16_t *)b)[i]);
  case HORA_BFLOAT16: {
    uint32_t u = (uint32_t)((const uint16_t *)b)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  case HORA_FLOAT32: return ((const float *)b)[i];
  default: return ((const double *)b)[i];
  }
}

static int is_int(int dt) { return dt <= HORA_INT64; }

static int close_to(int dt, double want, double got) {
  if (is_int(dt)) return want == got;
  double tol = dt == HORA_FLOAT16 || dt == HORA_BFLOAT16 ? 1e-2 : 1e-6;
  return fabs(want - got) <= tol * fmax(1.0, fabs(want));
}

/* Input of rank r, element i, for op (products stay small). */
static double val(int op, int r, size_t i) {
  if (op == HORA_PRODUCT) return (double)((r + (int)i) % 2 + 1);
  return (double)((r * 7 + (int)i * 3) % 11 + 1);
}

static double reduce_ref(int dt, int op, const int *ranks, int n, size_t i,
                         int divisor) {
  double acc = val(op, ranks[0], i);
  for (int k = 1; k < n; k++) {
    double v = val(op, ranks[k], i);
    switch (op) {
    case HORA_MIN: acc = fmin(acc, v); break;
    case HORA_MAX: acc = fmax(acc, v); break;
    case HORA_PRODUCT: acc *= v; break;
    default: acc += v;
    }
  }
  if (op == HORA_AVERAGE) acc = is_int(dt) ? trunc(acc / divisor) : acc / divisor;
  return acc;
}

static void check_vals(const char *what, int dt, const void *buf, size_t n,
                       double (*want)(size_t, void *), void *arg) {
  for (size_t i = 0; i < n; i++) {
    checks++;
    double w = want(i, arg), g = get(dt, buf, i);
    if (!close_to(dt, w, g)) {
      FAIL("%s %s element %zu: expected %g, got %g", what, hora_dtype_name(dt),
           i, w, g);
      return;
    }
  }
}

/* ---- colls ------------------------------------------------------------- */

struct agarg { int dt; const int64_t *counts; };
static double ag_want(size_t i, void *a) {
  const struct agarg *x = a;
  size_t off = 0;
  for (int r = 0; r < size; r++) {
    if (i < off + (size_t)x->counts[r]) return (double)((r * 5 + (int)(i - off)) % 9);
    off += (size_t)x->counts[r];
  }
  return -1;
}

static void test_allgather(int dt, int uneven) {
  size_t es = hora_dtype_size(dt);
  int64_t *counts = malloc((size_t)size * sizeof *counts);
  size_t total = 0;
  for (int r = 0; r < size; r++) {
    counts[r] = uneven ? (r * 3 + 1) % 5 : 6; /* 0 elements for some */
    total += (size_t)counts[r];
  }
  size_t mine = (size_t)counts[rank];
  void *in = uneven ? hora_alloc(mine * es + 1) : malloc(mine * es + 1);
  void *out = malloc(total * es + 1);
  for (size_t i = 0; i < mine; i++) put(dt, in, i, (double)((rank * 5 + (int)i) % 9));
  char name[64];
  snprintf(name, sizeof name, "ag.%d.%d", dt, uneven);
  int rc = uneven ? hora_allgatherv(name, in, mine, out, counts, dt)
                  : hora_allgather(name, in, mine, out, dt);
  OK(rc, name);
  struct agarg a = {dt, counts};
  if (rc >= 0) check_vals(name, dt, out, total, ag_want, &a);
  if (uneven) hora_free(in);
  else free(in);
  free(out);
  free(counts);
}

/* alltoall: rank s sends to rank d (s + d) % 3 + (uneven ? d % 2 : 1)
 * elements... equal: 2 to each. Element k of s's block for d is
 * s * 100 + d * 10 + k (mod 120 for int8). */
static int64_t a2a_n(int s, int d, int uneven) {
  return uneven ? (s + 2 * d) % 3 : 2;
}
static double a2a_v(int s, int d, int k) { return (double)((s * 17 + d * 5 + k) % 100); }

/* What an alltoall delivered: rp[s] elements from each rank s, in rank
 * order, element k of them a2a_v(s, rank, k). */
static void check_a2a(const char *name, int dt, const void *out,
                      const int64_t *rp) {
  size_t o = 0;
  for (int s = 0; s < size; s++)
    for (int k = 0; k < rp[s]; k++, o++) {
      checks++;
      if (get(dt, out, o) != a2a_v(s, rank, k)) {
        FAIL("%s from rank %d element %d: expected %g, got %g", name, s, k,
             a2a_v(s, rank, k), get(dt, out, o));
        return;
      }
    }
}

static void test_alltoall(int dt, int uneven) {
  size_t es = hora_dtype_size(dt);
  int64_t *sp = malloc((size_t)size * 8), *rp = malloc((size_t)size * 8);
  size_t sn = 0, rn = 0;
  for (int d = 0; d < size; d++) {
    sp[d] = a2a_n(rank, d, uneven);
    rp[d] = a2a_n(d, rank, uneven);
    sn += (size_t)sp[d];
    rn += (size_t)rp[d];
  }
  void *in = malloc(sn * es + 1), *out = hora_alloc(rn * es + 1);
  size_t o = 0;
  for (int d = 0; d < size; d++)
    for (int k = 0; k < sp[d]; k++) put(dt, in, o++, a2a_v(rank, d, k));
  char name[64];
  snprintf(name, sizeof name, "a2a.%d.%d", dt, uneven);
  int rc = uneven ? hora_alltoallv(name, in, sp, out, rp, dt)
                  : hora_alltoall(name, in, sn, out, dt);
  OK(rc, name);
  if (rc >= 0) check_a2a(name, dt, out, rp);
  free(in);
  hora_free(out);
  free(sp);
  free(rp);
}

/* alltoall in place: one buffer for input and output, which needs as
 * much from each rank as goes to it: rank s sends n(s, d) = n(d, s)
 * elements to rank d (uneven: (s + d) % 3 + 1, else 2; big: about 3 MiB
 * per block, several frames across hosts). mixed: only the even ranks
 * are in place, the others use a second buffer. */
static int64_t a2a_sym(int s, int d, int kind) {
  return kind == 2 ? (3 << 18) + (s + d) % 3 : kind == 1 ? (s + d) % 3 + 1 : 2;
}

static void test_alltoall_inplace(int dt, int kind, int mixed) {
  size_t es = hora_dtype_size(dt);
  int64_t *sp = malloc((size_t)size * 8);
  size_t sn = 0;
  for (int d = 0; d < size; d++) sn += (size_t)(sp[d] = a2a_sym(rank, d, kind));
  int here = !mixed || rank % 2 == 0;
  void *buf = hora_alloc(sn * es + 1), *out = here ? buf : hora_alloc(sn * es + 1);
  if (!buf || !out) {
    FAIL("alltoall in place: hora_alloc of %zu bytes", sn * es);
    return;
  }
  size_t o = 0;
  for (int d = 0; d < size; d++)
    for (int k = 0; k < sp[d]; k++) put(dt, buf, o++, a2a_v(rank, d, k));
  char name[64];
  snprintf(name, sizeof name, "a2a.ip.%d.%d.%d", dt, kind, mixed);
  int rc = kind ? hora_alltoallv(name, buf, sp, out, sp, dt)
                : hora_alltoall(name, buf, sn, out, dt);
  OK(rc, name);
  if (rc >= 0) check_a2a(name, dt, out, sp);
  if (out != buf) hora_free(out);
  hora_free(buf);
  free(sp);
}

struct rsarg { int dt, op; size_t first, row; int *all; };
static double rs_want(size_t i, void *a) {
  const struct rsarg *x = a;
  return reduce_ref(x->dt, x->op, x->all, size, x->first * x->row + i, size);
}

static void test_reducescatter(int dt, int op, size_t rows, size_t row) {
  size_t es = hora_dtype_size(dt), n = rows * row;
  void *in = malloc(n * es + 1);
  for (size_t i = 0; i < n; i++) put(dt, in, i, val(op, rank, i));
  size_t mine = hora_reducescatter_rows(rows, size, rank), first = 0;
  for (int r = 0; r < rank; r++) first += hora_reducescatter_rows(rows, size, r);
  void *out = malloc(mine * row * es + 1);
  int64_t shape[2] = {(int64_t)rows, (int64_t)row};
  char name[64];
  snprintf(name, sizeof name, "rs.%d.%d.%zu", dt, op, rows);
  hora_request_t q = {.coll = HORA_COLL_REDUCESCATTER, .name = name,
                      .sendbuf = in, .recvbuf = out, .count = n, .dtype = dt,
                      .op = op, .ndims = 2, .shape = shape};
  int64_t h;
  int rc = hora_submit(&q, &h);
  if (rc >= 0) rc = hora_wait(h);
  OK(rc, name);
  int *all = malloc((size_t)size * sizeof *all);
  for (int r = 0; r < size; r++) all[r] = r;
  struct rsarg a = {dt, op, first, row, all};
  if (rc >= 0) check_vals(name, dt, out, mine * row, rs_want, &a);
  free(all);
  free(in);
  free(out);
}

struct scarg { int dt; double pre, post; int *all; };
static double sc_want(size_t i, void *a) {
  const struct scarg *x = a;
  double s = 0;
  for (int r = 0; r < size; r++) {
    double v = val(HORA_SUM, r, i) * x->pre;
    s += is_int(x->dt) ? trunc(v) : v;
  }
  s *= x->post;
  return is_int(x->dt) ? trunc(s) : s;
}

static void test_scale(int dt) {
  size_t es = hora_dtype_size(dt), n = 37;
  void *buf = hora_alloc(n * es);
  for (size_t i = 0; i < n; i++) put(dt, buf, i, val(HORA_SUM, rank, i));
  char name[64];
  snprintf(name, sizeof name, "scale.%d", dt);
  hora_request_t q = {.coll = HORA_COLL_ALLREDUCE, .name = name, .sendbuf = buf,
                      .recvbuf = buf, .count = n, .dtype = dt, .op = HORA_SUM,
                      .prescale = 2.0, .postscale = 0.5};
  int64_t h;
  int rc = hora_submit(&q, &h);
  if (rc >= 0) rc = hora_wait(h);
  OK(rc, name);
  struct scarg a = {dt, 2.0, 0.5, NULL};
  if (rc >= 0) check_vals(name, dt, buf, n, sc_want, &a);
  hora_free(buf);
}

static void test_shape_mismatch(void) {
  float buf[17 * 6];
  memset(buf, 0, sizeof buf);
  int64_t s1[2] = {17, 6}, s2[3] = {17, 2, 3};
  hora_request_t q = {.coll = HORA_COLL_ALLREDUCE, .name = "shape",
                      .sendbuf = buf, .recvbuf = buf, .count = 17 * 6,
                      .dtype = HORA_FLOAT32, .op = HORA_SUM,
                      .ndims = rank == 0 ? 2 : 3, .shape = rank == 0 ? s1 : s2};
  int64_t h;
  int rc = hora_submit(&q, &h);
  if (rc >= 0) rc = hora_wait(h);
  checks++;
  if (size > 1 && (rc != HORA_EMISMATCH || !strstr(hora_last_error(), "shape")))
    FAIL("shape mismatch: got %s: %s", hora_err_name(rc), hora_last_error());
  /* the job goes on */
  OK(hora_allreduce("after.shape", buf, buf, 4, HORA_FLOAT32, HORA_SUM),
     "after shape mismatch");
}

static int run_colls(void) {
  for (int dt = 0; dt < HORA_DTYPE_COUNT; dt++) {
    test_allgather(dt, 0);
    test_allgather(dt, 1);
    test_alltoall(dt, 0);
    test_alltoall(dt, 1);
    for (int kind = 0; kind < 2; kind++)
      for (int mixed = 0; mixed < 2; mixed++)
        test_alltoall_inplace(dt, kind, mixed);
    for (int op = 0; op < HORA_OP_ELEMENTWISE; op++) {
      test_reducescatter(dt, op, 7, 3);           /* remainder rows */
      test_reducescatter(dt, op, (size_t)size * 1000 + 1, 5);
    }
    test_scale(dt);
  }
  test_shape_mismatch();
  test_alltoall_inplace(HORA_FLOAT32, 2, 0);
  test_alltoall_inplace(HORA_INT8, 2, 1);
  /* allgather of about 1.5 MiB per rank: several frames across hosts */
  size_t n = (3u << 19) / 4 + 3;
  float *in = malloc(n * 4), *out = malloc(n * 4 * (size_t)size);
  for (size_t i = 0; i < n; i++) in[i] = (float)(rank * 1000 + (int)(i % 997));
  OK(hora_allgather("ag.big", in, n, out, HORA_FLOAT32), "ag.big");
  for (int r = 0; r < size; r++)
    for (size_t i = 0; i < n; i += 101) {
      checks++;
      if (out[(size_t)r * n + i] != (float)(r * 1000 + (int)(i % 997))) {
        FAIL("ag.big rank %d element %zu", r, i);
        r = size;
        break;
      }
    }
  free(in);
  free(out);
  return 0;
}

/* ---- sets ---------------------------------------------------------------- */

static void sum_on_set(int set, const int *ranks, int n, const char *name,
                       size_t count) {
  float *buf = malloc(count * sizeof *buf);
  for (size_t i = 0; i < count; i++) buf[i] = (float)(rank + 1) * (float)(i % 13);
  hora_request_t q = {.coll = HORA_COLL_ALLREDUCE, .name = name, .sendbuf = buf,
                      .recvbuf = buf, .count = count, .dtype = HORA_FLOAT32,
                      .op = HORA_SUM, .process_set = set};
  int64_t h;
  int rc = hora_submit(&q, &h);
  if (rc >= 0) rc = hora_wait(h);
  OK(rc, name);
  float s = 0;
  for (int k = 0; k < n; k++) s += (float)(ranks[k] + 1);
  for (size_t i = 0; rc >= 0 && i < count; i++) {
    checks++;
    if (buf[i] != s * (float)(i % 13)) {
      FAIL("%s element %zu: expected %g, got %g", name, i, s * (float)(i % 13),
           buf[i]);
      break;
    }
  }
  free(buf);
}

static int run_sets(void) {
  int even[64], odd[64], ne = 0, no = 0;
  if (size < 2) return 0; /* a set of one rank would be the global set */
  for (int r = 0; r < size && r < 64; r++) {
    if (r % 2) odd[no++] = r;
    else even[ne++] = r;
  }
  int se = hora_process_set_add(even, ne);
  int so = no ? hora_process_set_add(odd, no) : -1;
  checks++;
  if (se < 1 || (no && so != se + 1))
    FAIL("process set ids %d, %d (%s)", se, so, hora_last_error());
  checks++;
  if (hora_process_set_size(se) != ne) FAIL("size of the even set");
  int mine = rank % 2 ? so : se;
  checks++;
  if (hora_process_set_rank(mine) != rank / 2) FAIL("rank in my set");
  checks++;
  if (hora_process_set_rank(rank % 2 ? se : so) != HORA_ENOTMEMBER && no)
    FAIL("rank in the other set: %s", hora_last_error());
  /* both sets busy at once: several async operations each */
  for (int round = 0; round < 3; round++) {
    char name[64];
    snprintf(name, sizeof name, "set.%d", round);
    if (rank % 2) sum_on_set(so, odd, no, name, 1000 + (size_t)round * 50000);
    else sum_on_set(se, even, ne, name, 1000 + (size_t)round * 50000);
  }
  /* the other collectives on a set */
  if (rank % 2 == 0) {
    int64_t in[3] = {rank, rank * 2, rank * 3}, out[3 * 64];
    hora_request_t q = {.coll = HORA_COLL_ALLGATHER, .name = "set.ag",
                        .sendbuf = in, .recvbuf = out, .count = 3,
                        .dtype = HORA_INT64, .process_set = se};
    int64_t h;
    int rc = hora_submit(&q, &h);
    if (rc >= 0) rc = hora_wait(h);
    OK(rc, "set.ag");
    for (int k = 0; rc >= 0 && k < ne; k++) {
      checks++;
      if (out[3 * k + 1] != even[k] * 2) FAIL("set.ag member %d", k);
    }
    float b[5] = {0};
    if (rank == even[ne - 1]) for (int i = 0; i < 5; i++) b[i] = 42 + (float)i;
    hora_request_t bq = {.coll = HORA_COLL_BROADCAST, .name = "set.bc",
                         .sendbuf = b, .recvbuf = b, .count = 5,
                         .dtype = HORA_FLOAT32, .root_rank = even[ne - 1],
                         .process_set = se};
    rc = hora_submit(&bq, &h);
    if (rc >= 0) rc = hora_wait(h);
    OK(rc, "set.bc");
    checks++;
    if (rc >= 0 && b[4] != 46) FAIL("set.bc: got %g", b[4]);
    /* a root outside the set */
    if (size > 1) {
      bq.root_rank = 1;
      bq.name = "set.badroot";
      rc = hora_submit(&bq, &h);
      if (rc >= 0) rc = hora_wait(h);
      checks++;
      if (rc != HORA_EINVAL) FAIL("broadcast root outside the set: %s", hora_err_name(rc));
    }
  } else {
    /* not a member of the even set */
    float b[2];
    hora_request_t q = {.coll = HORA_COLL_ALLREDUCE, .name = "nm", .sendbuf = b,
                        .recvbuf = b, .count = 2, .dtype = HORA_FLOAT32,
                        .op = HORA_SUM, .process_set = se};
    int64_t h;
    int rc = hora_submit(&q, &h);
    checks++;
    if (rc != HORA_ENOTMEMBER) FAIL("non-member: %s", hora_err_name(rc));
  }
  /* a duplicate is refused, on every rank */
  int dup = hora_process_set_add(even, ne);
  checks++;
  if (dup != HORA_EEXIST) FAIL("duplicate set: %d (%s)", dup, hora_last_error());
  /* the ranks of the last host (or just the last rank) */
  int last = size - 1, sl = se;
  if (size > 2) { /* with 2, {1} is the odd set */
    sl = hora_process_set_add(&last, 1);
    checks++;
    if (sl < 1) FAIL("set of the last rank: %s", hora_last_error());
    if (rank == last) sum_on_set(sl, &last, 1, "last.alone", 77);
  }
  if (size == 2) sl = so;
  /* remove, and the id is refused afterwards */
  OK(hora_process_set_remove(se), "remove");
  if (rank % 2 == 0) {
    float b[2];
    hora_request_t q = {.coll = HORA_COLL_ALLREDUCE, .name = "gone", .sendbuf = b,
                        .recvbuf = b, .count = 2, .dtype = HORA_FLOAT32,
                        .op = HORA_SUM, .process_set = se};
    int64_t h;
    int rc = hora_submit(&q, &h);
    checks++;
    if (rc != HORA_ENOSET) FAIL("removed set: %s", hora_err_name(rc));
  }
  int se2 = hora_process_set_add(even, ne); /* again: a new id */
  checks++;
  if (se2 <= sl) FAIL("re-added set got id %d", se2);
  checks++;
  if (hora_process_set_remove(0) != HORA_ENOSET) FAIL("removing the global set");
  OK(hora_barrier(), "barrier");
  return 0;
}

/* ---- join ------------------------------------------------------------------ */

/* Round k of the others' collectives while ranks 0 .. k-1 have joined:
 * allgather (a joined rank sends nothing, and receive counts that expect
 * something of it are refused), alltoall (a joined rank sends nothing and
 * drops what it is sent), reducescatter (joined ranks add zeros). */
static void join_round(int k) {
  int n = size;
  char name[64];
  int64_t *cnt = malloc((size_t)n * 8), *sp = malloc((size_t)n * 8),
          *rp = malloc((size_t)n * 8);
  size_t total = 0, sn = 0, rn = 0;
  for (int r = 0; r < n; r++) {
    cnt[r] = r >= k ? r + 1 : 0;
    total += (size_t)cnt[r];
  }
  float *in = malloc((size_t)(rank + 1) * 4), *out = malloc((total + 1) * 4);
  for (int i = 0; i <= rank; i++) in[i] = (float)(rank * 10 + i);
  snprintf(name, sizeof name, "jag.%d", k);
  int rc = hora_allgatherv(name, in, (size_t)rank + 1, out, cnt, HORA_FLOAT32);
  OK(rc, name);
  for (int r = 0, o = 0; rc >= 0 && r < n; r++)
    for (int i = 0; i < cnt[r]; i++, o++) {
      checks++;
      if (out[o] != (float)(r * 10 + i)) {
        FAIL("%s element %d: expected %d, got %g", name, o, r * 10 + i,
             (double)out[o]);
        r = n;
        break;
      }
    }
  if (k > 0) { /* counts that expect elements from the joined ranks */
    size_t all = 0;
    for (int r = 0; r < n; r++) all += (size_t)(cnt[r] = r + 1);
    float *big = malloc((all + 1) * 4);
    snprintf(name, sizeof name, "jagbad.%d", k);
    rc = hora_allgatherv(name, in, (size_t)rank + 1, big, cnt, HORA_FLOAT32);
    checks++;
    if (rc != HORA_EINVAL || !strstr(hora_last_error(), "joined"))
      FAIL("%s: expected HORA_EINVAL naming the joined ranks, got %s (%s)",
           name, hora_err_name(rc), hora_last_error());
    free(big);
  }
  free(in);
  free(out);

  /* alltoall: s sends d (s + d) % 3 + 1 elements, s * 100 + d * 10 + j */
  for (int r = 0; r < n; r++) {
    sp[r] = (rank + r) % 3 + 1;
    rp[r] = r >= k ? (r + rank) % 3 + 1 : 0;
    sn += (size_t)sp[r];
    rn += (size_t)rp[r];
  }
  float *a = malloc((sn + 1) * 4), *b = malloc((rn + 1) * 4);
  for (int d = 0, o = 0; d < n; d++)
    for (int j = 0; j < sp[d]; j++) a[o++] = (float)(rank * 100 + d * 10 + j);
  snprintf(name, sizeof name, "ja2a.%d", k);
  rc = hora_alltoallv(name, a, sp, b, rp, HORA_FLOAT32);
  OK(rc, name);
  for (int s2 = 0, o = 0; rc >= 0 && s2 < n; s2++)
    for (int j = 0; j < rp[s2]; j++, o++) {
      checks++;
      if (b[o] != (float)(s2 * 100 + rank * 10 + j)) {
        FAIL("%s element %d: expected %d, got %g", name, o,
             s2 * 100 + rank * 10 + j, (double)b[o]);
        s2 = n;
        break;
      }
    }
  free(a);
  free(b);

  /* reducescatter of 2n + 1 elements: the sum of the ranks still in */
  size_t count = (size_t)(2 * n + 1), first = 0;
  for (int r = 0; r < rank; r++) first += hora_reducescatter_rows(count, n, r);
  size_t mine = hora_reducescatter_rows(count, n, rank);
  float *x = malloc((count + 1) * 4), *y = malloc((mine + 1) * 4);
  for (size_t i = 0; i < count; i++) x[i] = (float)(rank + 1 + (int)i);
  snprintf(name, sizeof name, "jrs.%d", k);
  rc = hora_reducescatter(name, x, count, y, HORA_FLOAT32, HORA_SUM);
  OK(rc, name);
  for (size_t i = 0; rc >= 0 && i < mine; i++) {
    double w = 0;
    for (int r = k; r < n; r++) w += r + 1 + (double)(first + i);
    checks++;
    if (y[i] != (float)w) {
      FAIL("%s element %zu: expected %g, got %g", name, i, w, (double)y[i]);
      break;
    }
  }
  free(x);
  free(y);
  free(cnt);
  free(sp);
  free(rp);
}

static int run_join(void) {
  /* rank r runs r + 1 rounds of allreduces (every op), then joins; the
   * others go on with r's contribution neutral */
  int rounds = rank + 1;
  for (int k = 0; k < rounds; k++) {
    for (int op = 0; op < HORA_OP_ELEMENTWISE; op++) {
      int dt = HORA_FLOAT32;
      double buf[9];
      float f[9];
      for (int i = 0; i < 9; i++) f[i] = (float)val(op, rank, (size_t)i);
      char name[64];
      snprintf(name, sizeof name, "j.%d.%d", k, op);
      OK(hora_allreduce(name, f, f, 9, dt, op), name);
      /* ranks still in: those with more rounds than k */
      int in[64], n = 0;
      for (int r = 0; r < size && r < 64; r++)
        if (r + 1 > k) in[n++] = r;
      for (int i = 0; i < 9; i++) {
        double w = reduce_ref(dt, op, in, n, (size_t)i, size);
        buf[i] = w;
        checks++;
        if (!close_to(dt, w, f[i])) {
          FAIL("%s element %d with %d ranks joined: expected %g, got %g", name,
               i, size - n, w, (double)f[i]);
          break;
        }
      }
      (void)buf;
    }
    join_round(k);
  }
  int last = hora_join();
  checks++;
  if (last != size - 1) FAIL("join returned %d, expected %d (%s)", last,
                             size - 1, hora_last_error());
  /* and again, in the other order */
  if (rank == 0) {
    float f[3] = {1, 2, 3};
    OK(hora_allreduce("j2", f, f, 3, HORA_FLOAT32, HORA_SUM), "j2");
    checks++;
    if (f[2] != 3) FAIL("j2: %g", f[2]);
  }
  last = hora_join();
  checks++;
  if (last != 0) FAIL("second join returned %d, expected 0", last);
  return 0;
}

/* ---- groups -------------------------------------------------------------- */

static hora_request_t ar_req(const char *name, void *buf, size_t n,
                             hora_dtype_t dt) {
  hora_request_t q = {0};
  q.coll = HORA_COLL_ALLREDUCE;
  q.name = name;
  q.sendbuf = buf;
  q.recvbuf = buf;
  q.count = n;
  q.dtype = dt;
  q.op = HORA_SUM;
  return q;
}

static void wait_all(const int64_t *h, int n, int want, const char *what) {
  for (int i = 0; i < n; i++) {
    int rc = hora_wait(h[i]);
    checks++;
    if (want == 0 && rc < 0)
      FAIL("%s: request %d: %s (%s)", what, i, hora_err_name(rc),
           hora_last_error());
    if (want < 0 && rc != want)
      FAIL("%s: request %d returned %d (%s), expected %s", what, i, rc,
           hora_last_error(), hora_err_name(want));
  }
}

/* Grouped operations (hora_submit_group): allreduce groups of mixed
 * dtypes and sizes, two groups in flight at once, an allgather group with
 * per-rank counts, a reducescatter group, a group on a process set; a
 * grouping mismatch fails the whole group on every rank; a group one of
 * whose requests is bad is refused whole and leaves no name behind. */
static int run_groups(void) {
  enum { NF = 1000, NI = 7, ND = 300 };
  float *f = malloc(NF * sizeof *f);
  int32_t *i32 = malloc(NI * sizeof *i32);
  double *d = malloc(ND * sizeof *d);
  int64_t one;
  int64_t h[8];
  char names[8][64];
  long long tri = (long long)size * (size + 1) / 2; /* sum of rank+1 */
  for (int it = 0; it < 10; it++) {
    for (int k = 0; k < NF; k++) f[k] = (float)(rank + 1) * (float)(k % 13);
    for (int k = 0; k < NI; k++) i32[k] = (rank + 1) * (k + it);
    for (int k = 0; k < ND; k++) d[k] = (rank + 1) * 0.5 * k;
    one = rank + 1;
    hora_request_t q[4];
    snprintf(names[0], 64, "g%d.f", it);
    snprintf(names[1], 64, "g%d.i", it);
    snprintf(names[2], 64, "g%d.d", it);
    snprintf(names[3], 64, "g%d.one", it);
    q[0] = ar_req(names[0], f, NF, HORA_FLOAT32);
    q[1] = ar_req(names[1], i32, NI, HORA_INT32);
    q[2] = ar_req(names[2], d, ND, HORA_FLOAT64);
    q[3] = ar_req(names[3], &one, 1, HORA_INT64);
    /* a second group in flight at the same time */
    int64_t x[3] = {rank, rank * 2, rank * 3}, y[2] = {1, 1};
    snprintf(names[4], 64, "h%d.x", it);
    snprintf(names[5], 64, "h%d.y", it);
    hora_request_t r2[2] = {ar_req(names[4], x, 3, HORA_INT64),
                            ar_req(names[5], y, 2, HORA_INT64)};
    OK(hora_submit_group(q, 4, h), "submit group of 4");
    OK(hora_submit_group(r2, 2, h + 4), "submit group of 2");
    wait_all(h, 6, 0, "allreduce groups");
    for (int k = 0; k < NF; k++)
      if (f[k] != (float)tri * (float)(k % 13)) {
        FAIL("group float32[%d] = %g, expected %g", k, f[k],
             (double)tri * (k % 13));
        break;
      }
    for (int k = 0; k < NI; k++)
      if (i32[k] != tri * (k + it)) {
        FAIL("group int32[%d] = %d", k, i32[k]);
        break;
      }
    for (int k = 0; k < ND; k++)
      if (d[k] != tri * 0.5 * k) {
        FAIL("group float64[%d] = %g", k, d[k]);
        break;
      }
    if (one != tri) FAIL("group int64 = %lld", (long long)one);
    long long rs = (long long)size * (size - 1) / 2;
    if (x[0] != rs || x[1] != 2 * rs || x[2] != 3 * rs || y[0] != size ||
        y[1] != size)
      FAIL("second group: %lld %lld %lld %lld %lld", (long long)x[0],
           (long long)x[1], (long long)x[2], (long long)y[0], (long long)y[1]);
    checks += 5;
  }

  /* allgather: rank r sends r + 1 elements of each of two tensors */
  {
    int64_t cnt[64], send[2][64], *recv[2];
    long long total = 0;
    for (int m = 0; m < size && m < 64; m++) {
      cnt[m] = m + 1;
      total += m + 1;
    }
    hora_request_t q[2];
    for (int t = 0; t < 2; t++) {
      for (int k = 0; k <= rank; k++) send[t][k] = 1000 * t + 10 * rank + k;
      recv[t] = calloc((size_t)total, sizeof *recv[t]);
      memset(&q[t], 0, sizeof q[t]);
      q[t].coll = HORA_COLL_ALLGATHER;
      q[t].name = t ? "ag.b" : "ag.a";
      q[t].sendbuf = send[t];
      q[t].recvbuf = recv[t];
      q[t].count = (size_t)rank + 1;
      q[t].recv_count = (size_t)total;
      q[t].dtype = HORA_INT64;
      q[t].recv_counts = cnt;
    }
    OK(hora_submit_group(q, 2, h), "submit allgather group");
    wait_all(h, 2, 0, "allgather group");
    for (int t = 0; t < 2; t++) {
      long long at = 0;
      for (int m = 0; m < size; m++)
        for (int k = 0; k <= m; k++, at++)
          if (recv[t][at] != 1000 * t + 10 * m + k) {
            FAIL("allgather group %d: element %lld = %lld", t, at,
                 (long long)recv[t][at]);
            m = size;
            break;
          }
      free(recv[t]);
    }
    checks++;
  }

  /* reducescatter: 2 tensors of size * 3 + 1 rows */
  {
    int rows = size * 3 + 1;
    float *in[2], *out[2];
    hora_request_t q[2];
    int64_t shape[1] = {rows};
    int mine = hora_reducescatter_rows(rows, size, rank), first = 0;
    for (int m = 0; m < rank; m++) first += hora_reducescatter_rows(rows, size, m);
    for (int t = 0; t < 2; t++) {
      in[t] = malloc((size_t)rows * sizeof(float));
      out[t] = calloc((size_t)mine + 1, sizeof(float));
      for (int k = 0; k < rows; k++) in[t][k] = (float)((rank + 1) * (k + t));
      memset(&q[t], 0, sizeof q[t]);
      q[t].coll = HORA_COLL_REDUCESCATTER;
      q[t].name = t ? "rs.b" : "rs.a";
      q[t].sendbuf = in[t];
      q[t].recvbuf = out[t];
      q[t].count = (size_t)rows;
      q[t].recv_count = (size_t)mine;
      q[t].dtype = HORA_FLOAT32;
      q[t].op = HORA_SUM;
      q[t].ndims = 1;
      q[t].shape = shape;
    }
    OK(hora_submit_group(q, 2, h), "submit reducescatter group");
    wait_all(h, 2, 0, "reducescatter group");
    for (int t = 0; t < 2; t++) {
      for (int k = 0; k < mine; k++)
        if (out[t][k] != (float)(tri * (first + k + t))) {
          FAIL("reducescatter group %d: row %d = %g", t, k, out[t][k]);
          break;
        }
      free(in[t]);
      free(out[t]);
    }
    checks++;
  }

  /* a group on the set of even ranks */
  if (size >= 2) {
    int ev[64], nev = 0;
    for (int m = 0; m < size && nev < 64; m += 2) ev[nev++] = m;
    int ps = hora_process_set_add(ev, nev);
    OK(ps, "add the even set");
    if (ps > 0 && rank % 2 == 0) {
      int64_t a = rank, b = 1;
      hora_request_t q[2] = {ar_req("ps.a", &a, 1, HORA_INT64),
                             ar_req("ps.b", &b, 1, HORA_INT64)};
      q[0].process_set = q[1].process_set = ps;
      OK(hora_submit_group(q, 2, h), "submit group on a set");
      wait_all(h, 2, 0, "group on a set");
      long long want = 0;
      for (int k = 0; k < nev; k++) want += ev[k];
      checks++;
      if (a != want || b != nev)
        FAIL("group on the even set: %lld %lld", (long long)a, (long long)b);
    }
    if (ps > 0) OK(hora_process_set_remove(ps), "remove the even set");
  }

  /* rank 0 groups two tensors the others submit one by one */
  if (size >= 2) {
    int64_t a = 1, b = 2;
    hora_request_t q[2] = {ar_req("mm.a", &a, 1, HORA_INT64),
                           ar_req("mm.b", &b, 1, HORA_INT64)};
    if (rank == 0) {
      OK(hora_submit_group(q, 2, h), "submit mismatched group");
    } else {
      OK(hora_submit(&q[0], &h[0]), "submit mm.a");
      OK(hora_submit(&q[1], &h[1]), "submit mm.b");
    }
    for (int i = 0; i < 2; i++) {
      int rc = hora_wait(h[i]);
      checks++;
      if (rc != HORA_EMISMATCH || !strstr(hora_last_error(), "grouping"))
        FAIL("mismatched group: request %d returned %d (%s), expected "
             "EMISMATCH about the grouping", i, rc, hora_last_error());
    }
  }

  /* a group whose second request is bad is refused whole: its first
   * name is free at once */
  {
    int64_t a = rank, b = 0;
    hora_request_t q[2] = {ar_req("cx.a", &a, 1, HORA_INT64),
                           ar_req("cx.b", &b, 1, HORA_INT64)};
    q[1].dtype = (hora_dtype_t)99;
    int rc = hora_submit_group(q, 2, h);
    checks++;
    if (rc != HORA_EINVAL || !strstr(hora_last_error(), "dtype"))
      FAIL("bad group: %d (%s), expected EINVAL about the dtype", rc,
           hora_last_error());
    OK(hora_submit(&q[0], &h[0]), "cx.a alone after the refused group");
    wait_all(h, 1, 0, "cx.a alone");
    checks++;
    if (a != (long long)size * (size - 1) / 2) FAIL("cx.a = %lld", (long long)a);
  }
  free(f);
  free(i32);
  free(d);
  return 0;
}

/* ---- agburst --------------------------------------------------------------
 *
 * Rounds of 40 asynchronous allgathers at once (every dtype in turn, counts
 * that differ per rank and tensor, some 0), in the same order on every
 * rank, waited for last first: the coordinator fuses runs of them, which
 * every host packs into one exchange and unpacks; each tensor's values
 * name it, so a part unpacked into the wrong tensor shows. */
static int64_t agb_count(int j, int r) { return (j * 7 + r * 3) % 6; }
static double agb_val(int j, int r, size_t i) {
  return (double)((j * 3 + r * 5 + (int)i) % 9);
}
struct agbarg { int j; };
static double agb_want(size_t i, void *a) {
  int j = ((const struct agbarg *)a)->j;
  size_t off = 0;
  for (int r = 0; r < size; r++) {
    size_t n = (size_t)agb_count(j, r);
    if (i < off + n) return agb_val(j, r, i - off);
    off += n;
  }
  return -1;
}

/* The data type of allgather j in round `round`: every type in turn; in
 * the arena, one type a round, so that each tensor carved after another
 * stays aligned. */
static int agb_dtype(int j, int round, int arena) {
  return (arena ? round : j + round) % HORA_DTYPE_COUNT;
}

/* arena: each round's inputs carved one after the other from one
 * hora_alloc block, as the fused run's block lays them out */
static int run_agburst(int rounds, int arena) {
  enum { N = 40 };
  void *in[N], *out[N];
  int64_t h[N], *counts[N];
  size_t total[N];
  for (int round = 0; round < rounds; round++) {
    unsigned char *block = NULL;
    if (arena) {
      size_t all = 1;
      for (int j = 0; j < N; j++)
        all += (size_t)agb_count(j, rank) *
               hora_dtype_size(agb_dtype(j, round, arena));
      if (!(block = hora_alloc(all))) {
        FAIL("agarena: hora_alloc of %zu bytes", all);
        return 1;
      }
    }
    unsigned char *at = block;
    for (int j = 0; j < N; j++) {
      int dt = agb_dtype(j, round, arena);
      size_t es = hora_dtype_size(dt);
      counts[j] = malloc((size_t)size * sizeof *counts[j]);
      total[j] = 0;
      for (int r = 0; r < size; r++)
        total[j] += (size_t)(counts[j][r] = agb_count(j, r));
      size_t mine = (size_t)counts[j][rank];
      in[j] = arena ? at : malloc(mine * es + 1);
      at += mine * es;
      out[j] = malloc(total[j] * es + 1);
      for (size_t i = 0; i < mine; i++) put(dt, in[j], i, agb_val(j, rank, i));
      hora_request_t q = {.coll = HORA_COLL_ALLGATHER, .sendbuf = in[j],
                          .recvbuf = out[j], .count = mine,
                          .recv_count = total[j], .recv_counts = counts[j],
                          .dtype = (hora_dtype_t)dt};
      char name[64];
      snprintf(name, sizeof name, "agb.%d", j);
      q.name = name;
      int rc = hora_submit(&q, &h[j]);
      OK(rc, name);
    }
    for (int j = N - 1; j >= 0; j--) {
      int rc = hora_wait(h[j]);
      char name[64];
      snprintf(name, sizeof name, "agb.%d round %d", j, round);
      OK(rc, name);
      struct agbarg a = {j};
      if (rc >= 0)
        check_vals(name, agb_dtype(j, round, arena), out[j], total[j],
                   agb_want, &a);
      if (!arena) free(in[j]);
      free(out[j]);
      free(counts[j]);
    }
    hora_free(block);
  }
  return 0;
}

/* ---- rsburst --------------------------------------------------------------
 *
 * Rounds of 30 asynchronous reducescatters at once (runs of 10 alike in
 * dtype and op: SUM, AVERAGE, MAX; rows that do not divide evenly, some
 * fewer than the ranks), waited for last first: the coordinator fuses the
 * runs, which every host packs member-major into one reducescatter. Each
 * tensor's inputs are shifted by its index, so that a block unpacked into
 * the wrong tensor shows. */
struct rsbarg { int dt, op; size_t first, row, shift; int *all; };
static double rsb_want(size_t i, void *a) {
  const struct rsbarg *x = a;
  return reduce_ref(x->dt, x->op, x->all, size,
                    x->first * x->row + i + x->shift, size);
}

static int run_rsburst(int rounds) {
  enum { N = 30 };
  static const int dts[] = {HORA_FLOAT32, HORA_INT32, HORA_FLOAT64};
  static const int ops[] = {HORA_SUM, HORA_AVERAGE, HORA_MAX};
  void *in[N], *out[N];
  int64_t h[N], shape[N][2];
  int *all = malloc((size_t)size * sizeof *all);
  for (int r = 0; r < size; r++) all[r] = r;
  for (int round = 0; round < rounds; round++) {
    for (int j = 0; j < N; j++) {
      int dt = dts[(j / 10 + round) % 3], op = ops[(j / 10 + 2 * round) % 3];
      size_t rows = (size_t)(j % 7) + 1, row = (size_t)(j % 3) + 1;
      size_t es = hora_dtype_size(dt), n = rows * row;
      size_t mine = hora_reducescatter_rows(rows, size, rank);
      in[j] = malloc(n * es + 1);
      out[j] = malloc(mine * row * es + 1);
      for (size_t i = 0; i < n; i++)
        put(dt, in[j], i, val(op, rank, i + 13 * (size_t)j));
      shape[j][0] = (int64_t)rows;
      shape[j][1] = (int64_t)row;
      char name[64];
      snprintf(name, sizeof name, "rsb.%d", j);
      hora_request_t q = {.coll = HORA_COLL_REDUCESCATTER, .name = name,
                          .sendbuf = in[j], .recvbuf = out[j], .count = n,
                          .dtype = (hora_dtype_t)dt, .op = (hora_op_t)op,
                          .ndims = 2, .shape = shape[j]};
      OK(hora_submit(&q, &h[j]), name);
    }
    for (int j = N - 1; j >= 0; j--) {
      int dt = dts[(j / 10 + round) % 3], op = ops[(j / 10 + 2 * round) % 3];
      size_t rows = (size_t)(j % 7) + 1, row = (size_t)(j % 3) + 1;
      size_t mine = hora_reducescatter_rows(rows, size, rank), first = 0;
      for (int r = 0; r < rank; r++)
        first += hora_reducescatter_rows(rows, size, r);
      char name[64];
      snprintf(name, sizeof name, "rsb.%d round %d", j, round);
      int rc = hora_wait(h[j]);
      OK(rc, name);
      struct rsbarg a = {dt, op, first, row, 13 * (size_t)j, all};
      if (rc >= 0) check_vals(name, dt, out[j], mine * row, rsb_want, &a);
      free(in[j]);
      free(out[j]);
    }
  }
  free(all);
  return 0;
}

int main(int argc, char **argv) {
  int want = -1;
  const char *mode = argc > 1 ? argv[1] : "colls";
  for (int i = 2; i < argc; i++)
    if (!strcmp(argv[i], "-x") && i + 1 < argc) want = atoi(argv[++i]);
  int rc = hora_init();
  if (rc < 0) {
    fprintf(stderr, "hora_init: %s\n", hora_last_error());
    return 1;
  }
  rank = hora_rank();
  size = hora_size();
  if (want >= 0 && size != want) {
    fprintf(stderr, "size %d, expected %d\n", size, want);
    return 1;
  }
  if (!strcmp(mode, "colls")) run_colls();
  else if (!strcmp(mode, "sets")) run_sets();
  else if (!strcmp(mode, "join")) run_join();
  else if (!strcmp(mode, "groups")) run_groups();
  else if (!strcmp(mode, "agburst")) run_agburst(5, 0);
  else if (!strcmp(mode, "agarena")) run_agburst(5, 1);
  else if (!strcmp(mode, "rsburst")) run_rsburst(5);
  else {
    fprintf(stderr,
            "usage: it_xcoll colls|sets|join|groups|agburst|agarena|rsburst "
            "[-x N]\n");
    return 2;
  }
  printf("rank %d of %d: %s: %d checks, %d failures\n", rank, size, mode, checks,
         failures);
  hora_shutdown();
  return failures ? 1 : 0;
}
