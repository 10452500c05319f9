/* it_fast.c -- the fast path for small operations (one host). Each mode
 * prints "rank R: fast MODE: N checks, F failures".
 *
 *   check    every dtype x op, with and without scale factors, counts 1 to
 *            4 KiB, and broadcasts from each root: the result of an
 *            operation under a repeated name (the fast path, once learnt)
 *            equals, bit for bit, that of the same operation under a
 *            fresh name (always horad), on the same input
 *   sets     the same in process sets {0,1,2} and {1,3} (4 ranks), each
 *            rank in the sets it is a member of
 *   order    learnt operations submitted asynchronously in a different
 *            order on each rank, and 700 at once (more than the slots)
 *   burst    200 learnt operations submitted asynchronously at once, in
 *            the same order on every rank, then waited for (a training
 *            step's small gradients): each has a slot of its own (horad
 *            gives them), so none meets another there and none is given
 *            back to horad
 *   threads  4 threads of each rank, each with its own names, at once
 *   skew     rank 1 comes 5 ms late to each (longer than the wait limit)
 *   mismatch rank 1 gives a learnt name another count: horad's error on
 *            every rank, then the job goes on
 *   dup      rank 0 submits a learnt name twice while the first is in
 *            flight (the others come 50 ms later, once): the second
 *            fails with HORA_EDUPNAME, the first completes
 *   join     rank 0 joins while the others go on with learnt operations:
 *            its part is the neutral one
 *   diverge  rank 1 keeps out of the fast path (HORA_FAST_PATH_DISABLE=1
 *            in its environment only): rank 0 leaves it after the wait
 *            limit (later ones find its tombstone and go to horad at
 *            once); and a learnt operation that rank 0 submits and does
 *            not wait for while it waits on another, which rank 1
 *            submits only after the first
 *   kill     rank 1 exits (code 3) while rank 0 waits on the fast path
 * With IT_HOLD=PATH the job then stays alive while a test reads horad's
 * metrics (it_hold.h).
 * Usage: it_fast MODE [ROUNDS] */
#include <hora.h>

#include "it_hold.h"
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int rank, size, checks, failures;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    checks++;                                                                  \
    if (!(cond)) {                                                             \
      failures++;                                                              \
      printf("rank %d: ", rank);                                               \
      printf(__VA_ARGS__);                                                     \
      printf("\n");                                                            \
    }                                                                          \
  } while (0)

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) != 0) {}
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* n elements of dtype dt, some of each sign; float16/bfloat16 finite */
static void fill(void *p, size_t n, hora_dtype_t dt) {
  for (size_t k = 0; k < n; k++) {
    uint64_t x = next();
    int v = (int)(x % 41) - 20;
    switch (dt) {
    case HORA_UINT8: ((uint8_t *)p)[k] = (uint8_t)x; break;
    case HORA_INT8: ((int8_t *)p)[k] = (int8_t)v; break;
    case HORA_INT16: ((int16_t *)p)[k] = (int16_t)(v * 100); break;
    case HORA_INT32: ((int32_t *)p)[k] = (int32_t)(x >> 40) - (1 << 23); break;
    case HORA_INT64: ((int64_t *)p)[k] = (int64_t)(x >> 4) - (1ll << 59); break;
    case HORA_FLOAT16:
      ((uint16_t *)p)[k] = (uint16_t)((x & 0x8000) | ((10 + x % 11) << 10) |
                                      ((x >> 20) & 0x3ff));
      break;
    case HORA_BFLOAT16:
      ((uint16_t *)p)[k] = (uint16_t)((x & 0x8000) | ((120 + x % 11) << 7) |
                                      ((x >> 20) & 0x7f));
      break;
    case HORA_FLOAT32: ((float *)p)[k] = (float)v / 7.0f; break;
    default: ((double *)p)[k] = (double)v / 7.0; break;
    }
  }
}

static const char *opname[] = {"avg", "sum", "min", "max", "prod"};
static int set_id; /* the process set of check_allreduce / check_broadcast */

/* One allreduce both ways on the same input: the repeated name's result
 * (ROUNDS times: the first learns it) against a fresh name's. */
static void check_allreduce(hora_dtype_t dt, hora_op_t op, size_t n,
                            double pre, double post, int rounds) {
  size_t es = hora_dtype_size(dt), bytes = n * es;
  unsigned char in[4096], a[4096], b[4096];
  char name[96];
  snprintf(name, sizeof name, "chk.%s.%s.%zu.%g.%d", hora_dtype_name(dt),
           opname[op], n, pre, set_id);
  for (int i = 0; i < rounds; i++) {
    fill(in, n, dt);
    hora_request_t q = {.coll = HORA_COLL_ALLREDUCE, .name = name,
                        .sendbuf = in, .recvbuf = a, .count = n, .dtype = dt,
                        .op = op, .prescale = pre, .postscale = post,
                        .process_set = set_id};
    int64_t h;
    int rc = hora_submit(&q, &h);
    if (rc == 0) rc = hora_wait(h);
    hora_request_t f = q;
    f.name = NULL; /* a new name each time: horad */
    f.recvbuf = b;
    int rc2 = hora_submit(&f, &h);
    if (rc2 == 0) rc2 = hora_wait(h);
    CHECK(rc == 0 && rc2 == 0 && memcmp(a, b, bytes) == 0,
          "%s round %d: rc %d/%d, results differ", name, i, rc, rc2);
  }
}

static void check_broadcast(hora_dtype_t dt, size_t n, int root, int rounds) {
  size_t es = hora_dtype_size(dt), bytes = n * es;
  unsigned char want[4096], a[4096];
  char name[96];
  snprintf(name, sizeof name, "bc.%s.%zu.%d.%d", hora_dtype_name(dt), n, root,
           set_id);
  for (int i = 0; i < rounds; i++) {
    fill(want, n, dt); /* every rank draws the same sequence */
    if (rank == root) memcpy(a, want, bytes);
    else memset(a, 0x5a, bytes);
    hora_request_t q = {.coll = HORA_COLL_BROADCAST, .name = name,
                        .sendbuf = a, .count = n, .dtype = dt,
                        .root_rank = root, .process_set = set_id};
    int64_t h;
    int rc = hora_submit(&q, &h);
    if (rc == 0) rc = hora_wait(h);
    CHECK(rc == 0 && memcmp(a, want, bytes) == 0, "%s round %d: rc %d, wrong "
          "data", name, i, rc);
  }
}

static void mode_check(int rounds) {
  static const size_t counts[] = {1, 7, 100};
  for (int d = 0; d < HORA_DTYPE_COUNT; d++)
    for (int op = 0; op < HORA_OP_ELEMENTWISE; op++)
      for (size_t c = 0; c < sizeof counts / sizeof *counts + 1; c++) {
        hora_dtype_t dt = (hora_dtype_t)d;
        size_t n = c < 3 ? counts[c] : 4096 / hora_dtype_size(dt);
        /* each rank its own inputs, every rank the same sequence of
         * shapes */
        rng = 88172645463325252ull + (uint64_t)rank * 7919 + c;
        check_allreduce(dt, (hora_op_t)op, n, 1.0, 1.0, rounds);
        if (op == HORA_SUM || op == HORA_AVERAGE)
          check_allreduce(dt, (hora_op_t)op, n, 0.5, 3.0, rounds);
      }
  for (int d = 0; d < HORA_DTYPE_COUNT; d++)
    for (int root = 0; root < size; root++) {
      rng = 12345 + (uint64_t)d * 31 + (uint64_t)root;
      check_broadcast((hora_dtype_t)d, 4096 / hora_dtype_size((hora_dtype_t)d),
                      root, rounds);
    }
}

/* Process sets {0,1,2} and {1,3} (4 ranks): in each a rank is a member
 * of, allreduces of some dtypes, every op, with and without scale factors,
 * against horad's, and broadcasts from each member. */
static void mode_sets(int rounds) {
  static const int a[] = {0, 1, 2}, b[] = {1, 3};
  static const hora_dtype_t dts[] = {HORA_FLOAT32, HORA_INT32, HORA_FLOAT16,
                                     HORA_FLOAT64};
  int ida = hora_process_set_add(a, 3), idb = hora_process_set_add(b, 2);
  CHECK(ida > 0 && idb > 0, "process sets: %d %d (%s)", ida, idb,
        hora_last_error());
  const int *sets[2] = {a, b}, nset[2] = {3, 2}, ids[2] = {ida, idb};
  for (int k = 0; k < 2 && ida > 0 && idb > 0; k++) {
    int member = 0;
    for (int i = 0; i < nset[k]; i++) member |= sets[k][i] == rank;
    if (!member) continue;
    set_id = ids[k];
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
      for (int op = 0; op < HORA_OP_ELEMENTWISE; op++) {
        size_t n = d == 0 ? 1000 : 33;
        rng = 88172645463325252ull + (uint64_t)rank * 7919 + d;
        check_allreduce(dts[d], (hora_op_t)op, n, 1.0, 1.0, rounds);
        if (op == HORA_AVERAGE)
          check_allreduce(dts[d], (hora_op_t)op, n, 0.5, 3.0, rounds);
      }
    for (int i = 0; i < nset[k]; i++) {
      rng = 4242 + (uint64_t)i;
      check_broadcast(HORA_INT64, 100, sets[k][i], rounds);
    }
  }
  set_id = 0;
  if (ida > 0) hora_process_set_remove(ida);
  if (idb > 0) hora_process_set_remove(idb);
}

/* n learnt float64 sums, submitted in rank-dependent order */
static void async_many(int n, int rounds, const char *tag, int same) {
  double *v = malloc((size_t)n * 8);
  int64_t *h = malloc((size_t)n * sizeof *h);
  for (int i = 0; i < rounds; i++) {
    for (int k = 0; k < n; k++) {
      /* rank 0 in order, rank 1 backwards, others from the middle; or
       * all in order (same) */
      int t = same || rank == 0 ? k : rank == 1 ? n - 1 - k : (k + n / 2) % n;
      char name[64];
      snprintf(name, sizeof name, "%s.%d", tag, t);
      v[t] = rank + t + 1000.0 * i;
      int rc = hora_allreduce_async(name, &v[t], &v[t], 1, HORA_FLOAT64,
                                    HORA_SUM, &h[t]);
      CHECK(rc == 0, "submit %s: %s", name, hora_last_error());
    }
    for (int t = 0; t < n; t++) {
      int rc = hora_wait(h[t]);
      double want = size * (size - 1) / 2.0 + size * (t + 1000.0 * i);
      CHECK(rc == 0 && v[t] == want, "%s.%d round %d: rc %d got %g want %g",
            tag, t, i, rc, v[t], want);
    }
  }
  free(v);
  free(h);
}

static void sum1(const char *name, double x, double want) {
  int rc = hora_allreduce(name, &x, &x, 1, HORA_FLOAT64, HORA_SUM);
  CHECK(rc == 0 && x == want, "%s: rc %d (%s) got %g want %g", name, rc,
        rc ? hora_last_error() : "", x, want);
}

/* threads: each of 4 threads of every rank runs its own learnt names
 * (one thread's names meet another's at some slots) */
static int th_rounds;
static void *th_main(void *arg) {
  int t = (int)(intptr_t)arg, bad = 0;
  for (int i = 0; i < th_rounds; i++) {
    char name[32];
    snprintf(name, sizeof name, "th%d.%d", t, i % 40);
    double x[3] = {rank, i, t};
    int rc = hora_allreduce(name, x, x, 3, HORA_FLOAT64, HORA_SUM);
    if (rc != 0 || x[0] != size * (size - 1) / 2.0 || x[1] != (double)size * i ||
        x[2] != (double)size * t) {
      if (bad++ < 5)
        printf("rank %d: thread %d %s: rc %d got %g %g %g\n", rank, t, name,
               rc, x[0], x[1], x[2]);
    }
  }
  return (void *)(intptr_t)bad;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "check";
  int rounds = argc > 2 ? atoi(argv[2]) : 3;
  const char *rk = getenv("HORA_RANK");
  if (!strcmp(mode, "diverge") && rk && !strcmp(rk, "1"))
    setenv("HORA_FAST_PATH_DISABLE", "1", 1);
  if (hora_init() != 0) {
    fprintf(stderr, "hora_init: %s\n", hora_last_error());
    return 1;
  }
  rank = hora_rank();
  size = hora_size();
  double tri = size * (size - 1) / 2.0;
  if (!strcmp(mode, "check")) {
    mode_check(rounds);
  } else if (!strcmp(mode, "sets")) {
    mode_sets(rounds);
  } else if (!strcmp(mode, "order")) {
    async_many(8, rounds, "ord", 0);
    async_many(700, 2, "many", 0);
  } else if (!strcmp(mode, "burst")) {
    async_many(200, rounds, "burst", 1);
  } else if (!strcmp(mode, "threads")) {
    pthread_t th[4];
    th_rounds = rounds;
    for (int t = 0; t < 4; t++)
      pthread_create(&th[t], NULL, th_main, (void *)(intptr_t)t);
    for (int t = 0; t < 4; t++) {
      void *r;
      pthread_join(th[t], &r);
      checks += rounds;
      failures += (int)(intptr_t)r;
    }
  } else if (!strcmp(mode, "skew")) {
    double t0 = now_s();
    for (int i = 0; i < rounds; i++) {
      if (rank == 1) sleep_us(5000);
      sum1("skew", rank + i, tri + size * i);
    }
    printf("rank %d: skew took %.3f s\n", rank, now_s() - t0);
  } else if (!strcmp(mode, "mismatch")) {
    double x[2] = {1, 1};
    for (int i = 0; i < 3; i++) sum1("mm", rank, tri); /* learnt */
    int rc = hora_allreduce("mm", x, x, rank == 1 ? 2 : 1, HORA_FLOAT64,
                            HORA_SUM);
    CHECK(rc != 0 && strstr(hora_last_error(), "mm"),
          "a mismatched count must fail naming the tensor: rc %d (%s)", rc,
          hora_last_error());
    if (rc) printf("rank %d: mismatch error: %s\n", rank, hora_last_error());
    for (int i = 0; i < 3; i++) sum1("after", rank + i, tri + size * i);
  } else if (!strcmp(mode, "dup")) {
    for (int i = 0; i < 3; i++) sum1("d", rank, tri); /* learnt */
    double x = rank, y = rank;
    int64_t h1, h2;
    if (rank != 0) sleep_us(50000); /* rank 0's first 'd' is still open */
    int rc1 = hora_allreduce_async("d", &x, &x, 1, HORA_FLOAT64, HORA_SUM, &h1);
    if (rank == 0) {
      int rc2 = hora_allreduce_async("d", &y, &y, 1, HORA_FLOAT64, HORA_SUM, &h2);
      if (rc2 == 0) rc2 = hora_wait(h2);
      CHECK(rc2 == HORA_EDUPNAME && strstr(hora_last_error(), "'d'"),
            "a second 'd' in flight: rc %d (%s)", rc2, hora_last_error());
      if (rc2) printf("rank %d: dup error: %s\n", rank, hora_last_error());
    }
    if (rc1 == 0) rc1 = hora_wait(h1);
    CHECK(rc1 == 0 && x == tri, "the first 'd': rc %d got %g", rc1, x);
    for (int i = 0; i < 3; i++) sum1("d", rank + i, tri + size * i);
  } else if (!strcmp(mode, "join")) {
    for (int i = 0; i < 3; i++) sum1("j", rank, tri); /* learnt */
    if (rank == 0) {
      int last = hora_join();
      CHECK(last >= 0, "join: %s", hora_last_error());
    } else {
      sleep_us(20000); /* rank 0 is in join by now */
      for (int i = 0; i < rounds; i++) sum1("j", rank, tri); /* rank 0: 0 */
      hora_join();
    }
    for (int i = 0; i < 3; i++) sum1("j2", rank, tri);
  } else if (!strcmp(mode, "diverge")) {
    double t0 = now_s();
    for (int i = 0; i < rounds; i++) sum1("dv", rank + i, tri + size * i);
    /* learnt, never offered yet (no tombstone): only the progress
     * thread can take it off the fast path while rank 0 waits on
     * "other", which rank 1 submits only once "dv2" is done */
    sum1("dv2", rank, tri);
    double x = rank, y = rank;
    if (rank == 0) {
      int64_t h;
      CHECK(hora_allreduce_async("dv2", &x, &x, 1, HORA_FLOAT64, HORA_SUM,
                                 &h) == 0, "submit");
      sum1("other", 1, size);
      CHECK(hora_wait(h) == 0 && x == tri, "dv2 async: got %g", x);
    } else {
      sum1("dv2", y, tri);
      sum1("other", 1, size);
    }
    printf("rank %d: diverge took %.3f s\n", rank, now_s() - t0);
  } else if (!strcmp(mode, "kill")) {
    for (int i = 0; i < 3; i++) sum1("k", rank, tri); /* learnt */
    if (rank == 1) {
      fflush(stdout);
      sleep_us(200000);
      _exit(3);
    }
    double x = rank;
    int rc = hora_allreduce("k", &x, &x, 1, HORA_FLOAT64, HORA_SUM);
    printf("rank %d: kill: rc %d (%s)\n", rank, rc, hora_last_error());
    fflush(stdout);
  } else {
    fprintf(stderr, "it_fast: unknown mode %s\n", mode);
    return 2;
  }
  it_hold(rank);
  printf("rank %d: fast %s: %d checks, %d failures\n", rank, mode, checks,
         failures);
  fflush(stdout);
  hora_shutdown();
  return failures ? 1 : 0;
}
