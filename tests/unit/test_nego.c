/* test_nego.c -- horad's negotiation on one host, without processes: the
 * daemon is built in the test (daemon_fixture.h), the test plays its
 * ranks. Names in any order, readiness, duplicate names, metadata
 * mismatches, bad entries, HORA_MAX_PENDING, unknown sets and
 * non-members, the stall inspector, the ring path, and the failure path
 * (hd_fail_all). */
#include "daemon_fixture.h"

static uint64_t next_id = 1;

static int32_t *i32(struct fx *f, int i, uint64_t off) {
  return fx_arena(f, i, off);
}

/* An int32 SUM allreduce of n elements at arena byte `off`, holding
 * base, base + 1, ... */
static struct hp_sqe ar(struct fx *f, int i, const char *name, uint64_t off,
                        int n, int32_t base) {
  struct hp_sqe e = fx_sqe(next_id++, HORA_COLL_ALLREDUCE, HORA_INT32, HORA_SUM,
                           (uint64_t)n, name);
  fx_in(f, i, &e, off);
  for (int k = 0; k < n; k++)
    i32(f, i, off)[k] = base + k;
  return e;
}

static int total_pending(struct fx *f) {
  int n = 0;
  for (int i = 0; i < f->job.nlocal; i++)
    n += (int)fx_pending(&f->job, i);
  return n;
}

/* ---- readiness ----------------------------------------------------------- */

/* Three ranks submit three names in three different orders: each runs
 * when its last member submits it, never before, with the right sums. */
static void test_orders(void) {
  struct fx f;
  fx_init1(&f, 3);
  const char *names[3] = {"grad.a", "grad.b", "grad.c"};
  const int order[3][3] = {{0, 1, 2}, {2, 0, 1}, {1, 2, 0}};
  uint64_t ids[3][3];
  int nsub[3] = {0, 0, 0};
  int ran = 0;
  for (int s = 0; s < 3; s++)
    for (int r = 0; r < 3; r++) {
      int k = order[r][s];
      struct hp_sqe e =
          ar(&f, r, names[k], 64u * (uint64_t)k, 4, (r + 1) * (k + 1) * 10);
      ids[r][k] = e.id;
      fx_submit(&f, r, &e);
      if (++nsub[k] < 3) {
        for (int q = 0; q < 3; q++)
          EXPECT_NONE(&f, q);
        struct hd_tensor *t = fx_find(f.job.comms[0], names[k]);
        CHECK(t != NULL);
        if (t) CHECK_EQ_INT(t->nsubmitted, nsub[k]);
        continue;
      }
      ran++;
      for (int q = 0; q < 3; q++) {
        EXPECT_DONE(&f, q, ids[q][k], 0);
        for (int j = 0; j < 4; j++) /* sum over ranks of (r+1)(k+1)10 + j */
          CHECK_EQ_INT(i32(&f, q, 64u * (uint64_t)k)[j], 60 * (k + 1) + 3 * j);
      }
    }
  CHECK_EQ_INT(ran, 3);
  CHECK_EQ_INT(f.job.comms[0]->ntensors, 0);
  CHECK_EQ_INT(total_pending(&f), 0);
  fx_free(&f);
}

/* A name in flight on a rank cannot be submitted again there; the first
 * one is not disturbed, and once it ran the name is free again. */
static void test_dupname(void) {
  struct fx f;
  fx_init1(&f, 2);
  struct hp_sqe a = ar(&f, 0, "w", 0, 2, 1);
  fx_submit(&f, 0, &a);
  struct hp_sqe again = ar(&f, 0, "w", 256, 2, 5);
  fx_submit(&f, 0, &again);
  EXPECT_MSG(&f, 0, again.id, HORA_EDUPNAME, "rank 0", "'w'",
             "names of pending operations must be unique");
  EXPECT_NONE(&f, 1);
  CHECK_EQ_INT(fx_pending(&f.job, 0), 1);
  struct hp_sqe b = ar(&f, 1, "w", 0, 2, 10);
  fx_submit(&f, 1, &b);
  EXPECT_DONE(&f, 0, a.id, 0);
  EXPECT_DONE(&f, 1, b.id, 0);
  CHECK_EQ_INT(i32(&f, 0, 0)[0], 11);
  CHECK_EQ_INT(i32(&f, 0, 0)[1], 13);
  CHECK_EQ_INT(i32(&f, 0, 256)[0], 5); /* the refused one was not touched */
  /* a rank whose tensor has no bytes (no place) matches a GPU rank's */
  struct hp_sqe g0 = ar(&f, 0, "dev0", 0, 2, 1), g1 = ar(&f, 1, "dev0", 0, 2, 2);
  g0.flags |= HP_F_DEVICE;
  fx_submit(&f, 0, &g0);
  fx_submit(&f, 1, &g1);
  EXPECT_DONE(&f, 0, g0.id, 0);
  EXPECT_DONE(&f, 1, g1.id, 0);
  /* the name is free again */
  struct hp_sqe c = ar(&f, 0, "w", 0, 2, 0);
  fx_submit(&f, 0, &c);
  EXPECT_NONE(&f, 0);
  struct hp_sqe job = ar(&f, 1, "w", 0, 2, 0);
  fx_submit(&f, 1, &job);
  EXPECT_DONE(&f, 0, c.id, 0);
  EXPECT_DONE(&f, 1, job.id, 0);
  CHECK_EQ_INT(total_pending(&f), 0);
  fx_free(&f);
}

/* ---- mismatches ---------------------------------------------------------- */

/* Submits e0 on rank 0 (nothing happens) and e1 on rank 1; both must fail
 * with HORA_EMISMATCH and the words; the daemon forgets the tensor. */
#define MISMATCH(f, e0, e1, ...)                                               \
  do {                                                                         \
    fx_submit(f, 0, &(e0));                                                    \
    EXPECT_NONE(f, 0);                                                         \
    fx_submit(f, 1, &(e1));                                                    \
    EXPECT_MSG(f, 0, (e0).id, HORA_EMISMATCH, __VA_ARGS__);                    \
    EXPECT_MSG(f, 1, (e1).id, HORA_EMISMATCH, __VA_ARGS__);                    \
    CHECK_EQ_INT((f)->job.comms[0]->ntensors, 0);                              \
    CHECK_EQ_INT(total_pending(f), 0);                                         \
  } while (0)

static struct hp_sqe sq(int coll, int dtype, int op, uint64_t count,
                        const char *name) {
  return fx_sqe(next_id++, coll, dtype, op, count, name);
}

static void test_mismatch(void) {
  struct fx f;
  fx_init1(&f, 2);
  struct hp_sqe a, b;

  a = sq(HORA_COLL_ALLREDUCE, HORA_FLOAT32, HORA_SUM, 4, "dt");
  b = sq(HORA_COLL_ALLREDUCE, HORA_FLOAT64, HORA_SUM, 4, "dt");
  fx_in(&f, 0, &a, 0);
  fx_in(&f, 1, &b, 0);
  MISMATCH(&f, a, b, "Mismatched data types on tensor 'dt'",
           "rank 0 had type float32", "rank 1 had type float64");

  a = sq(HORA_COLL_ALLREDUCE, HORA_INT32, HORA_SUM, 4, "op");
  b = sq(HORA_COLL_ALLREDUCE, HORA_INT32, HORA_MAX, 4, "op");
  fx_in(&f, 0, &a, 0);
  fx_in(&f, 1, &b, 0);
  MISMATCH(&f, a, b, "Mismatched reduction operations on tensor 'op'",
           "rank 0 asked for sum", "rank 1 asked for max");

  /* one rank asks for 16-bit values between hosts; fx_in sets the flags */
  a = sq(HORA_COLL_ALLREDUCE, HORA_FLOAT16, HORA_SUM, 4, "w16");
  b = sq(HORA_COLL_ALLREDUCE, HORA_FLOAT16, HORA_SUM, 4, "w16");
  fx_in(&f, 0, &a, 0);
  fx_in(&f, 1, &b, 0);
  b.flags |= HP_F_WIRE16;
  MISMATCH(&f, a, b, "Mismatched compression on tensor 'w16'",
           "rank 1 sends it between hosts in 16 bits", "rank 0 does not");

  /* one rank's tensor lies in GPU memory, the other's in host memory */
  a = sq(HORA_COLL_ALLREDUCE, HORA_FLOAT32, HORA_SUM, 4, "dev");
  b = sq(HORA_COLL_ALLREDUCE, HORA_FLOAT32, HORA_SUM, 4, "dev");
  fx_in(&f, 0, &a, 0);
  fx_in(&f, 1, &b, 0);
  a.flags |= HP_F_DEVICE;
  b.flags |= HP_F_HOSTMEM;
  MISMATCH(&f, a, b, "Mismatched allreduce CPU/GPU device selection on "
           "tensor 'dev'", "rank 0 specified device GPU",
           "rank 1 specified device CPU");

  /* the same number of elements in another shape */
  const int64_t s2[2] = {17, 1311}, s3[3] = {17, 23, 57};
  a = sq(HORA_COLL_ALLREDUCE, HORA_FLOAT32, HORA_SUM, 17 * 1311, "sh");
  b = sq(HORA_COLL_ALLREDUCE, HORA_FLOAT32, HORA_SUM, 17 * 23 * 57, "sh");
  fx_shape(&a, 2, s2);
  fx_shape(&b, 3, s3);
  fx_in(&f, 0, &a, 0);
  fx_in(&f, 1, &b, 0);
  MISMATCH(&f, a, b, "Mismatched allreduce tensor shapes on tensor 'sh'",
           "rank 0 sent a tensor of shape [17, 1311]",
           "rank 1 sent a tensor of shape [17, 23, 57]");

  a = sq(HORA_COLL_BROADCAST, HORA_INT8, 0, 8, "root");
  b = sq(HORA_COLL_BROADCAST, HORA_INT8, 0, 8, "root");
  a.root = 0;
  b.root = 1;
  fx_in(&f, 0, &a, 0);
  fx_in(&f, 1, &b, 0);
  MISMATCH(&f, a, b, "Mismatched broadcast root ranks on tensor 'root'",
           "rank 0 gave root 0", "rank 1 gave root 1");

  a = sq(HORA_COLL_ALLREDUCE, HORA_FLOAT32, HORA_SUM, 4, "pre");
  b = sq(HORA_COLL_ALLREDUCE, HORA_FLOAT32, HORA_SUM, 4, "pre");
  a.prescale = 2;
  b.prescale = 3;
  fx_in(&f, 0, &a, 0);
  fx_in(&f, 1, &b, 0);
  MISMATCH(&f, a, b,
           "Mismatched prescale and/or postscale factors on tensor "
           "'pre'",
           "rank 0 gave 2 and 1", "rank 1 gave 3 and 1");

  a = sq(HORA_COLL_REDUCESCATTER, HORA_FLOAT32, HORA_SUM, 4, "post");
  b = sq(HORA_COLL_REDUCESCATTER, HORA_FLOAT32, HORA_SUM, 4, "post");
  a.postscale = 0.5;
  fx_in(&f, 0, &a, 0);
  fx_in(&f, 1, &b, 0);
  fx_out(&f, 0, &a, 64, 2);
  fx_out(&f, 1, &b, 64, 2);
  MISMATCH(&f, a, b, "Mismatched prescale and/or postscale factors",
           "rank 0 gave 1 and 0.5", "rank 1 gave 1 and 1");

  /* allgatherv: every member must pass the same receive counts */
  const int64_t c0[2] = {3, 5}, c1[2] = {3, 4};
  a = sq(HORA_COLL_ALLGATHER, HORA_INT32, 0, 3, "ag");
  b = sq(HORA_COLL_ALLGATHER, HORA_INT32, 0, 4, "ag");
  fx_in(&f, 0, &a, 0);
  fx_in(&f, 1, &b, 0);
  fx_out(&f, 0, &a, 64, 8);
  fx_out(&f, 1, &b, 64, 8);
  fx_aux(&f, 0, &a, 256, c0, 2);
  fx_aux(&f, 1, &b, 256, c1, 2);
  MISMATCH(&f, a, b, "Mismatched allgather sizes on tensor 'ag'",
           "rank 0 and rank 1");

  /* allgather: every dimension but the first must agree */
  const int64_t t0[2] = {2, 3}, t1[2] = {2, 4}, t2[2] = {5, 3};
  a = sq(HORA_COLL_ALLGATHER, HORA_INT32, 0, 6, "tail");
  b = sq(HORA_COLL_ALLGATHER, HORA_INT32, 0, 8, "tail");
  fx_shape(&a, 2, t0);
  fx_shape(&b, 2, t1);
  fx_in(&f, 0, &a, 0);
  fx_in(&f, 1, &b, 0);
  fx_out(&f, 0, &a, 64, 16);
  fx_out(&f, 1, &b, 64, 16);
  MISMATCH(&f, a, b, "rank 0 sent a tensor of shape [2, 3]",
           "rank 1 sent a tensor of shape [2, 4]",
           "only the first dimension may differ");
  /* ...but the first may (with receive counts that say so) */
  const int64_t c2[2] = {6, 15};
  a = sq(HORA_COLL_ALLGATHER, HORA_INT32, 0, 6, "tail2");
  b = sq(HORA_COLL_ALLGATHER, HORA_INT32, 0, 15, "tail2");
  fx_shape(&a, 2, t0);
  fx_shape(&b, 2, t2);
  fx_in(&f, 0, &a, 0);
  fx_in(&f, 1, &b, 0);
  fx_out(&f, 0, &a, 128, 21);
  fx_out(&f, 1, &b, 128, 21);
  fx_aux(&f, 0, &a, 256, c2, 2);
  fx_aux(&f, 1, &b, 256, c2, 2);
  fx_submit(&f, 0, &a);
  fx_submit(&f, 1, &b);
  EXPECT_DONE(&f, 0, a.id, 0);
  EXPECT_DONE(&f, 1, b.id, 0);

  a = sq(HORA_COLL_ALLREDUCE, HORA_INT32, HORA_SUM, 4, "co");
  b = sq(HORA_COLL_BROADCAST, HORA_INT32, 0, 4, "co");
  fx_in(&f, 0, &a, 0);
  fx_in(&f, 1, &b, 0);
  MISMATCH(&f, a, b, "Mismatched operations on tensor 'co'",
           "rank 0 did an allreduce", "rank 1 did a broadcast");

  /* alltoallv: rank 0 sends 2 elements to rank 1, which expects 3 */
  const int64_t x0[4] = {1, 2, 1, 1}, x1[4] = {1, 1, 3, 1};
  a = sq(HORA_COLL_ALLTOALL, HORA_INT32, 0, 3, "a2a");
  b = sq(HORA_COLL_ALLTOALL, HORA_INT32, 0, 2, "a2a");
  fx_in(&f, 0, &a, 0);
  fx_in(&f, 1, &b, 0);
  fx_out(&f, 0, &a, 64, 2);
  fx_out(&f, 1, &b, 64, 5);
  fx_aux(&f, 0, &a, 256, x0, 4);
  fx_aux(&f, 1, &b, 256, x1, 4);
  MISMATCH(&f, a, b, "Mismatched alltoall splits on tensor 'a2a'",
           "rank 0 sends 2 elements to rank 1, which expects 3");

  a = sq(HORA_COLL_REDUCESCATTER, HORA_INT32, HORA_SUM, 4, "rsop");
  b = sq(HORA_COLL_REDUCESCATTER, HORA_INT32, HORA_MIN, 4, "rsop");
  fx_in(&f, 0, &a, 0);
  fx_in(&f, 1, &b, 0);
  fx_out(&f, 0, &a, 64, 2);
  fx_out(&f, 1, &b, 64, 2);
  MISMATCH(&f, a, b, "Mismatched reduction operations on tensor 'rsop'",
           "rank 0 asked for sum", "rank 1 asked for min");

  /* prescale 0 means 1: that is no mismatch */
  a = sq(HORA_COLL_ALLREDUCE, HORA_FLOAT32, HORA_SUM, 4, "zero");
  b = sq(HORA_COLL_ALLREDUCE, HORA_FLOAT32, HORA_SUM, 4, "zero");
  a.prescale = 0;
  b.prescale = 1;
  fx_in(&f, 0, &a, 0);
  fx_in(&f, 1, &b, 0);
  fx_submit(&f, 0, &a);
  fx_submit(&f, 1, &b);
  EXPECT_DONE(&f, 0, a.id, 0);
  EXPECT_DONE(&f, 1, b.id, 0);

  /* and the daemon goes on */
  a = ar(&f, 0, "after", 0, 3, 1);
  b = ar(&f, 1, "after", 0, 3, 1);
  fx_submit(&f, 1, &b);
  fx_submit(&f, 0, &a);
  EXPECT_DONE(&f, 0, a.id, 0);
  EXPECT_DONE(&f, 1, b.id, 0);
  CHECK_EQ_INT(i32(&f, 1, 0)[2], 6);
  fx_free(&f);
}

/* Three ranks: the odd one out is the last; every rank fails, the
 * message names the first submitter and the odd one. */
static void test_mismatch_three(void) {
  struct fx f;
  fx_init1(&f, 3);
  struct hp_sqe e[3];
  for (int r = 0; r < 3; r++) {
    e[r] = sq(HORA_COLL_ALLREDUCE, r == 2 ? HORA_INT64 : HORA_INT32, HORA_SUM,
              4, "odd");
    fx_in(&f, r, &e[r], 0);
  }
  fx_submit(&f, 1, &e[1]);
  fx_submit(&f, 0, &e[0]);
  for (int r = 0; r < 3; r++)
    EXPECT_NONE(&f, r);
  fx_submit(&f, 2, &e[2]);
  for (int r = 0; r < 3; r++)
    EXPECT_MSG(&f, r, e[r].id, HORA_EMISMATCH, "rank 1 had type int32",
               "rank 2 had type int64");
  CHECK_EQ_INT(total_pending(&f), 0);
  fx_free(&f);
}

/* BUG (negotiate.c fill_meta): an allgather without receive counts means
 * "count from every member", but ranks that send different counts are
 * not told apart (the implied counts are hashed as an empty array), and
 * the engine then copies with the first submitter's counts: here rank 1
 * (first) sends 5 and rank 0 sends 3, so rank 0's 3-element input is read
 * as 5 elements and its 6-element output gets 10. Expected: both fail
 * with HORA_EMISMATCH (and nothing is written). */
static void test_bug_allgather_implied_counts(void) {
  struct fx f;
  fx_init1(&f, 2);
  struct hp_sqe a = sq(HORA_COLL_ALLGATHER, HORA_INT32, 0, 3, "agc");
  struct hp_sqe b = sq(HORA_COLL_ALLGATHER, HORA_INT32, 0, 5, "agc");
  fx_in(&f, 0, &a, 0);
  fx_in(&f, 1, &b, 0);
  fx_out(&f, 0, &a, 1024, 6);
  fx_out(&f, 1, &b, 1024, 10);
  for (int k = 0; k < 16; k++) {
    i32(&f, 0, 1024)[k] = -1; /* output and beyond */
    i32(&f, 1, 1024)[k] = -1;
  }
  fx_submit(&f, 1, &b);
  fx_submit(&f, 0, &a);
  EXPECT_MSG(&f, 0, a.id, HORA_EMISMATCH, "agc");
  EXPECT_MSG(&f, 1, b.id, HORA_EMISMATCH, "agc");
  /* rank 0 said its output holds 6 elements: nothing beyond may change */
  for (int k = 6; k < 16; k++)
    CHECK_EQ_INT(i32(&f, 0, 1024)[k], -1);
  fx_free(&f);
}

/* ---- bad entries -----------------------------------------------------------
 */

#define BAD(f, e, ...)                                                         \
  do {                                                                         \
    fx_submit(f, 0, &(e));                                                     \
    EXPECT_MSG(f, 0, (e).id, HORA_EINVAL, "rank 0: bad", __VA_ARGS__);         \
    CHECK_EQ_INT((f)->job.comms[0]->ntensors, 0);                              \
    CHECK_EQ_INT(total_pending(f), 0);                                         \
  } while (0)

static void test_bad_entries(void) {
  struct fx f;
  fx_init1(&f, 2);
  const uint64_t arena = f.ranks[0].layout.arena_size;
  struct hp_sqe e;

  e = sq(0, HORA_INT32, HORA_SUM, 4, "bad");
  BAD(&f, e, "unknown collective 0");
  e = sq(42, HORA_INT32, HORA_SUM, 4, "bad");
  BAD(&f, e, "unknown collective 42");
  e = sq(HORA_COLL_ALLREDUCE, HORA_DTYPE_COUNT, HORA_SUM, 4, "bad");
  BAD(&f, e, "unknown data type 9");
  e = sq(HORA_COLL_ALLREDUCE, 200, HORA_SUM, 4, "bad");
  BAD(&f, e, "unknown data type 200");
  e = sq(HORA_COLL_ALLREDUCE, HORA_INT32, HORA_OP_COUNT, 4, "bad");
  fx_in(&f, 0, &e, 0);
  BAD(&f, e, "unknown reduction operation 6");
  e = sq(HORA_COLL_ALLREDUCE, HORA_INT32, HORA_SUM, 4, "bad");
  e.ndims = 9;
  BAD(&f, e, "9 dimensions (at most 8)");
  const int64_t sh[3] = {2, 3, 1}, neg[2] = {2, -3};
  e = sq(HORA_COLL_ALLREDUCE, HORA_INT32, HORA_SUM, 7, "bad");
  fx_shape(&e, 3, sh);
  BAD(&f, e, "its shape has 6 elements, but it sends 7");
  e = sq(HORA_COLL_ALLREDUCE, HORA_INT32, HORA_SUM, 6, "bad");
  fx_shape(&e, 2, neg);
  BAD(&f, e, "dimension 1 of the shape is -3");
  e = sq(HORA_COLL_ALLREDUCE, HORA_INT32, HORA_SUM, UINT64_MAX / 8, "bad");
  BAD(&f, e, "too large");

  /* buffers: past the end, before the arena, wrapping, misaligned */
  e = sq(HORA_COLL_ALLREDUCE, HORA_FLOAT32, HORA_SUM, 4, "bad");
  fx_in(&f, 0, &e, arena - 8);
  BAD(&f, e, "buffer", "lies outside the arena");
  e = sq(HORA_COLL_ALLREDUCE, HORA_FLOAT32, HORA_SUM, 4, "bad");
  e.flags = HP_F_RESIDENT;
  e.offset = f.ranks[0].layout.staging_off; /* the daemon's, not the rank's */
  BAD(&f, e, "lies outside the arena");
  e = sq(HORA_COLL_ALLREDUCE, HORA_FLOAT32, HORA_SUM, 4, "bad");
  e.flags = HP_F_RESIDENT;
  e.offset = UINT64_MAX - 7;
  BAD(&f, e, "lies outside the arena");
  e = sq(HORA_COLL_ALLREDUCE, HORA_FLOAT32, HORA_SUM, 4, "bad");
  fx_in(&f, 0, &e, 2);
  BAD(&f, e, "buffer offset", "is not aligned to its float32 elements");
  /* exactly at the end is fine */
  e = ar(&f, 0, "edge", arena - 16, 4, 1);
  fx_submit(&f, 0, &e);
  EXPECT_NONE(&f, 0);
  struct hp_sqe e1 = ar(&f, 1, "edge", 0, 4, 1);
  fx_submit(&f, 1, &e1);
  EXPECT_DONE(&f, 0, e.id, 0);
  EXPECT_DONE(&f, 1, e1.id, 0);
  CHECK_EQ_INT(i32(&f, 0, arena - 16)[3], 8);

  e = sq(HORA_COLL_BROADCAST, HORA_INT32, 0, 4, "bad");
  e.root = 2;
  BAD(&f, e, "root rank 2 is out of range [0, 2)");
  e = sq(HORA_COLL_BROADCAST, HORA_INT32, 0, 4, "bad");
  e.root = -1;
  BAD(&f, e, "root rank -1 is out of range");

  /* outputs */
  e = sq(HORA_COLL_ALLGATHER, HORA_INT32, 0, 4, "bad");
  fx_in(&f, 0, &e, 0);
  BAD(&f, e, "no output buffer");
  e = sq(HORA_COLL_ALLGATHER, HORA_INT32, 0, 4, "bad");
  fx_out(&f, 0, &e, 64, 8);
  BAD(&f, e, "its input must lie in the arena");
  e = sq(HORA_COLL_ALLGATHER, HORA_INT32, 0, 4, "bad");
  fx_in(&f, 0, &e, 0);
  fx_out(&f, 0, &e, 64, 7);
  BAD(&f, e, "its output holds 7 elements, but 8 arrive");
  e = sq(HORA_COLL_ALLGATHER, HORA_INT32, 0, 4, "bad");
  fx_in(&f, 0, &e, 0);
  fx_out(&f, 0, &e, arena - 16, 8);
  BAD(&f, e, "output", "lies outside the arena");
  e = sq(HORA_COLL_ALLGATHER, HORA_INT32, 0, 4, "bad");
  fx_in(&f, 0, &e, 0);
  fx_out(&f, 0, &e, 66, 8);
  BAD(&f, e, "output offset", "is not aligned to its int32 elements");
  const int64_t rc3[3] = {4, 4, 4}, rcw[2] = {3, 4};
  e = sq(HORA_COLL_ALLGATHER, HORA_INT32, 0, 4, "bad");
  fx_in(&f, 0, &e, 0);
  fx_out(&f, 0, &e, 64, 12);
  fx_aux(&f, 0, &e, 512, rc3, 3);
  BAD(&f, e, "3 receive counts for a set of 2 ranks");
  e = sq(HORA_COLL_ALLGATHER, HORA_INT32, 0, 4, "bad");
  fx_in(&f, 0, &e, 0);
  fx_out(&f, 0, &e, 64, 8);
  fx_aux(&f, 0, &e, 512, rcw, 2);
  BAD(&f, e, "it sends 4 elements, but its receive counts say 3");
  const int64_t rcbig[2] = {4, 100};
  e = sq(HORA_COLL_ALLGATHER, HORA_INT32, 0, 4, "bad");
  fx_in(&f, 0, &e, 0);
  fx_out(&f, 0, &e, 64, 8);
  fx_aux(&f, 0, &e, 512, rcbig, 2);
  BAD(&f, e, "its output holds 8 elements, but 104 arrive");

  /* alltoall splits */
  const int64_t sneg[4] = {2, -1, 1, 1}, ssum[4] = {1, 2, 2, 2},
                sbig[4] = {2, 2, 3, 3};
  e = sq(HORA_COLL_ALLTOALL, HORA_INT32, 0, 4, "bad");
  fx_in(&f, 0, &e, 0);
  fx_out(&f, 0, &e, 64, 8);
  fx_aux(&f, 0, &e, 512, sneg, 4);
  BAD(&f, e, "entry 1 of its array is -1");
  e = sq(HORA_COLL_ALLTOALL, HORA_INT32, 0, 4, "bad");
  fx_in(&f, 0, &e, 0);
  fx_out(&f, 0, &e, 64, 8);
  fx_aux(&f, 0, &e, 512, ssum, 4);
  BAD(&f, e, "its splits add up to 3 elements, but it sends 4");
  e = sq(HORA_COLL_ALLTOALL, HORA_INT32, 0, 4, "bad");
  fx_in(&f, 0, &e, 0);
  fx_out(&f, 0, &e, 64, 5);
  fx_aux(&f, 0, &e, 512, sbig, 4);
  BAD(&f, e, "its output holds 5 elements, but 6 arrive");
  e = sq(HORA_COLL_ALLTOALL, HORA_INT32, 0, 4, "bad");
  fx_in(&f, 0, &e, 0);
  fx_out(&f, 0, &e, 64, 8);
  fx_aux(&f, 0, &e, 512, sbig, 3);
  BAD(&f, e, "3 split entries for a set of 2 ranks");
  e = sq(HORA_COLL_ALLTOALL, HORA_INT32, 0, 5, "bad");
  fx_in(&f, 0, &e, 0);
  fx_out(&f, 0, &e, 64, 8);
  BAD(&f, e, "5 elements do not split evenly among 2 ranks");
  e = sq(HORA_COLL_ALLTOALL, HORA_INT32, 0, 4, "bad");
  fx_in(&f, 0, &e, 0);
  fx_out(&f, 0, &e, 64, 8);
  e.flags |= HP_F_AUX;
  e.aux_count = 4;
  e.aux_offset =
      fx_aoff(&f, 0, arena - 16); /* 32 bytes from 16 before the end */
  BAD(&f, e, "array", "lies outside the arena");

  /* reducescatter: 5 rows of 2 over 2 ranks: member 0 gets 3 rows */
  const int64_t rs[2] = {5, 2};
  e = sq(HORA_COLL_REDUCESCATTER, HORA_FLOAT64, HORA_SUM, 10, "bad");
  fx_shape(&e, 2, rs);
  fx_in(&f, 0, &e, 0);
  fx_out(&f, 0, &e, 128, 5);
  BAD(&f, e, "its output holds 5 elements, but 6 arrive");
  e = sq(HORA_COLL_REDUCESCATTER, HORA_FLOAT64, 7, 10, "bad");
  fx_in(&f, 0, &e, 0);
  fx_out(&f, 0, &e, 128, 5);
  BAD(&f, e, "unknown reduction operation 7");

  /* process sets */
  const int64_t unsorted[2] = {1, 0}, range[2] = {0, 2}, dup[2] = {1, 1};
  e = sq(HORA_COLL_PS_ADD, 0, 0, 0, "bad");
  fx_aux(&f, 0, &e, 512, unsorted, 2);
  BAD(&f, e, "process set ranks must be sorted, distinct and in [0, 2)");
  e = sq(HORA_COLL_PS_ADD, 0, 0, 0, "bad");
  fx_aux(&f, 0, &e, 512, range, 2);
  BAD(&f, e, "must be sorted, distinct");
  e = sq(HORA_COLL_PS_ADD, 0, 0, 0, "bad");
  fx_aux(&f, 0, &e, 512, dup, 2);
  BAD(&f, e, "must be sorted, distinct");
  e = sq(HORA_COLL_PS_ADD, 0, 0, 0, "bad");
  BAD(&f, e, "a process set needs 1 to 2 ranks, not 0");

  /* a refused entry leaves the pending one of that name alone */
  struct hp_sqe p1 = ar(&f, 1, "same", 0, 2, 7);
  fx_submit(&f, 1, &p1);
  e = sq(HORA_COLL_ALLREDUCE, HORA_DTYPE_COUNT, HORA_SUM, 2, "same");
  fx_submit(&f, 0, &e);
  EXPECT_MSG(&f, 0, e.id, HORA_EINVAL, "unknown data type");
  EXPECT_NONE(&f, 1);
  struct hp_sqe p0 = ar(&f, 0, "same", 0, 2, 1);
  fx_submit(&f, 0, &p0);
  EXPECT_DONE(&f, 0, p0.id, 0);
  EXPECT_DONE(&f, 1, p1.id, 0);
  CHECK_EQ_INT(i32(&f, 1, 0)[1], 10);
  CHECK_EQ_INT(total_pending(&f), 0);
  fx_free(&f);
}

/* ---- limits, sets, members --------------------------------------------- */


static void test_sets_and_members(void) {
  struct fx f;
  fx_init1(&f, 3);
  const int32_t m01[2] = {0, 1};
  struct hd_comm *s = hd_comm_new(&f.job, m01, 2);
  CHECK(s != NULL);
  if (!s) return;
  CHECK_EQ_INT(s->id, 1);
  struct hp_sqe e = ar(&f, 0, "s", 0, 1, 1);
  e.comm = 7;
  fx_submit(&f, 0, &e);
  EXPECT_MSG(&f, 0, e.id, HORA_ENOSET, "process set 7 does not exist");
  e = ar(&f, 2, "s", 0, 1, 1);
  e.comm = 1;
  fx_submit(&f, 2, &e);
  EXPECT_MSG(&f, 2, e.id, HORA_ENOTMEMBER,
             "rank 2 is not a member of process set 1");
  CHECK_EQ_INT(total_pending(&f), 0);
  /* the members run it without rank 2; the global set is not involved */
  struct hp_sqe a = ar(&f, 0, "s", 0, 1, 5), b = ar(&f, 1, "s", 0, 1, 6);
  a.comm = b.comm = 1;
  fx_submit(&f, 0, &a);
  EXPECT_NONE(&f, 0);
  fx_submit(&f, 1, &b);
  EXPECT_DONE(&f, 0, a.id, 0);
  EXPECT_DONE(&f, 1, b.id, 0);
  CHECK_EQ_INT(i32(&f, 0, 0)[0], 11);
  EXPECT_NONE(&f, 2);
  /* the same name on another set is another operation */
  a = ar(&f, 0, "s", 0, 1, 1);
  a.comm = 1;
  struct hp_sqe g = ar(&f, 0, "s", 64, 1, 1);
  fx_submit(&f, 0, &a);
  fx_submit(&f, 0, &g);
  EXPECT_NONE(&f, 0);
  CHECK(fx_find(f.job.comms[0], "s") != NULL);
  CHECK(fx_find(s, "s") != NULL);
  /* a removed set refuses new operations */
  s->removed = 1;
  e = ar(&f, 1, "t", 0, 1, 1);
  e.comm = 1;
  fx_submit(&f, 1, &e);
  EXPECT_MSG(&f, 1, e.id, HORA_ENOSET,
             "process set 1 does not exist any more (it was removed)");
  fx_free(&f);
}

/* ---- the stall inspector ------------------------------------------------- */

static void test_stall(void) {
  struct fx f;
  fx_init1(&f, 3);
  struct hp_sqe a = ar(&f, 0, "late", 0, 1, 1), b = ar(&f, 2, "late", 0, 1, 1);
  fx_submit(&f, 0, &a);
  fx_submit(&f, 2, &b);
  f.job.stall_warn_ns = 1;
  hd_check_stalls(&f.job); /* warns only */
  for (int r = 0; r < 3; r++)
    EXPECT_NONE(&f, r);
  struct hd_tensor *t = fx_find(f.job.comms[0], "late");
  CHECK(t && t->stall_warned);
  f.job.stall_fail_ns = 1;
  hd_check_stalls(&f.job);
  EXPECT_MSG(&f, 0, a.id, HORA_ESTALL, "allreduce 'late' stalled",
             "rank(s) 1 never submitted it");
  EXPECT_MSG(&f, 2, b.id, HORA_ESTALL, "rank(s) 1 never submitted it");
  EXPECT_NONE(&f, 1);
  CHECK_EQ_INT(f.job.comms[0]->ntensors, 0);
  CHECK_EQ_INT(total_pending(&f), 0);
  fx_free(&f);
}

/* ---- the ring path ------------------------------------------------------- */

/* Entries pushed into the ranks' submission rings reach hd_submit through
 * hd_poll_rings, which runs what became ready. */
static void test_ring_path(void) {
  struct fx f;
  fx_init1(&f, 2);
  for (int r = 0; r < 2; r++) {
    struct hp_sqe e = ar(&f, r, "ring", 0, 3, 10 * r);
    e.id = 500 + (uint64_t)r;
    void *slot = hp_ring_reserve(&f.sq[r]);
    CHECK(slot != NULL);
    if (!slot) return;
    memcpy(slot, &e, sizeof e);
    hp_ring_commit(&f.sq[r]);
  }
  CHECK_EQ_INT(hd_poll_rings(&f.job), 2);
  EXPECT_DONE(&f, 0, 500, 0);
  EXPECT_DONE(&f, 1, 501, 0);
  CHECK_EQ_INT(i32(&f, 0, 0)[2], 14);
  CHECK_EQ_INT(i32(&f, 1, 0)[0], 10);
  CHECK_EQ_INT(hd_poll_rings(&f.job), 0);
  fx_free(&f);
}

/* ---- the failure path ---------------------------------------------------- */

/* Every pending operation of every communicator fails with the reason,
 * once, on the ranks that submitted it; later submissions fail at once. */
static void test_fail_all(void) {
  struct fx f;
  fx_init1(&f, 3);
  const int32_t m12[2] = {1, 2};
  struct hd_comm *s = hd_comm_new(&f.job, m12, 2);
  CHECK(s != NULL);
  if (!s) return;
  struct hp_sqe x0 = ar(&f, 0, "x", 0, 4, 1), x1 = ar(&f, 1, "x", 0, 4, 1);
  fx_submit(&f, 0, &x0);
  fx_submit(&f, 1, &x1);
  struct hp_sqe y = ar(&f, 1, "y", 64, 4, 1);
  y.comm = 1;
  fx_submit(&f, 1, &y);
  /* a streamed allreduce that is running: waits for rank 1's copy */
  struct hp_sqe z[3];
  for (int r = 0; r < 3; r++) {
    z[r] = sq(HORA_COLL_ALLREDUCE, HORA_FLOAT32, HORA_SUM, 3000, "z");
    if (r != 1) fx_in(&f, r, &z[r], 4096);
    fx_submit(&f, r, &z[r]);
  }
  struct hp_cqe c;
  int copies = 0, strays = 0;
  while (fx_pop(&f, 1, &c)) {
    if (c.kind == HP_CQ_COPY_IN && c.id == z[1].id)
      copies++;
    else
      strays++;
  }
  CHECK(copies >= 1);
  CHECK_EQ_INT(strays, 0);
  CHECK(f.job.comms[0]->plan_head != NULL);
  CHECK(f.ranks[1].staging_owner != NULL);
  for (int r = 0; r < 3; r++)
    EXPECT_NONE(&f, r);

  f.job.gone_rank = 2;
  hc_fmt(f.job.gone_msg, sizeof f.job.gone_msg,
         "rank 2 on h0 exited with code 3");
  hd_fail_all(&f.job);
  /* in any order: each submitted operation once, nothing else */
  struct {
    int rank;
    uint64_t id;
    const char *what;
    int got;
  } want[] = {{0, x0.id, "allreduce 'x' cannot complete", 0},
              {1, x1.id, "allreduce 'x' cannot complete", 0},
              {1, y.id, "allreduce 'y' cannot complete", 0},
              {0, z[0].id, "allreduce 'z' cannot complete", 0},
              {1, z[1].id, "allreduce 'z' cannot complete", 0},
              {2, z[2].id, "allreduce 'z' cannot complete", 0}};
  int other = 0;
  for (int r = 0; r < 3; r++)
    while (fx_pop(&f, r, &c)) {
      int k = 0, n = (int)(sizeof want / sizeof want[0]);
      while (k < n && (want[k].rank != r || want[k].id != c.id))
        k++;
      if (k == n || c.kind != HP_CQ_DONE || c.status != HORA_EPEERGONE ||
          !strstr(c.msg, want[k].what) ||
          !strstr(c.msg, ": rank 2 on h0 exited with code 3")) {
        fprintf(stderr, "unexpected: rank %d id %llu kind %u status %d %s\n", r,
                (unsigned long long)c.id, c.kind, c.status, c.msg);
        other++;
        continue;
      }
      want[k].got++;
    }
  for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
    CHECK_EQ_INT(want[k].got, 1);
  CHECK_EQ_INT(other, 0);
  CHECK_EQ_INT(f.job.comms[0]->ntensors, 0);
  CHECK_EQ_INT(s->ntensors, 0);
  CHECK(f.job.comms[0]->plan_head == NULL);
  CHECK(f.ranks[1].staging_owner == NULL);
  CHECK_EQ_INT(total_pending(&f), 0);
  /* a late chunk event for the failed operation is ignored */
  struct hp_sqe ev = z[1];
  ev.kind = HP_SQ_CHUNK_READY;
  ev.chunk = 0;
  hd_chunk_event(&f.ranks[1], &ev);
  hd_run_ready(&f.job);
  EXPECT_NONE(&f, 1);
  /* later submissions fail at once, on any set */
  struct hp_sqe late = ar(&f, 0, "late", 0, 4, 1);
  fx_submit(&f, 0, &late);
  EXPECT_MSG(&f, 0, late.id, HORA_EPEERGONE, "allreduce 'late' cannot run",
             "rank 2 on h0 exited with code 3");
  late = ar(&f, 2, "late", 0, 4, 1);
  late.comm = 1;
  fx_submit(&f, 2, &late);
  EXPECT_MSG(&f, 2, late.id, HORA_EPEERGONE, "cannot run");
  CHECK_EQ_INT(total_pending(&f), 0);
  /* a job being stopped says so */
  f.job.gone_rank = -2;
  late = ar(&f, 1, "stop", 0, 4, 1);
  fx_submit(&f, 1, &late);
  EXPECT_DONE(&f, 1, late.id, HORA_ESHUTDOWN);
  fx_free(&f);
}

static void test_shutdown_status(void) {
  struct fx f;
  fx_init1(&f, 2);
  struct hp_sqe a = ar(&f, 0, "a", 0, 1, 1);
  fx_submit(&f, 0, &a);
  f.job.gone_rank = -2;
  hc_fmt(f.job.gone_msg, sizeof f.job.gone_msg, "the job is stopping: ctrl-c");
  hd_fail_all(&f.job);
  EXPECT_MSG(&f, 0, a.id, HORA_ESHUTDOWN, "'a' cannot complete",
             "the job is stopping: ctrl-c");
  EXPECT_NONE(&f, 1);
  fx_free(&f);
}

/* A rank being started again (--restart-failed-ranks): what runs meanwhile
 * fails naming its crash; once another failure ends that wait, the crash
 * stays the job's cause, and later operations name it first, then what
 * ended the restart. */
static void test_restart_abandoned(void) {
  struct fx f;
  fx_init1(&f, 3);
  f.job.gone_rank = 2;
  f.job.restart_gone = 1;
  hc_fmt(f.job.gone_msg, sizeof f.job.gone_msg,
         "rank 2 on h0 was killed by signal SIGKILL" HD_RESTART_SAYS
         " (restart 1 of 1)");
  struct hp_sqe a = ar(&f, 0, "a", 0, 4, 1);
  fx_submit(&f, 0, &a);
  EXPECT_MSG(&f, 0, a.id, HORA_EPEERGONE, "allreduce 'a' cannot run",
             ": rank 2 on h0 was killed by signal SIGKILL; horad starts it "
             "again (restart 1 of 1)");
  hd_restart_abandon(&f.job, 1, "rank 1 on h0 exited with code 3");
  CHECK_EQ_INT(f.job.restart_gone, 0);
  CHECK_EQ_INT(f.job.restart_ended, 1);
  CHECK_EQ_INT(f.job.gone_rank, 2); /* the crash stays the cause */
  struct hp_sqe b = ar(&f, 0, "b", 0, 4, 1);
  fx_submit(&f, 0, &b);
  const char *msg =
      EXPECT_MSG(&f, 0, b.id, HORA_EPEERGONE, "allreduce 'b' cannot run",
                 ": rank 2 on h0 was killed by signal SIGKILL; not started "
                 "again: rank 1 on h0 exited with code 3");
  CHECK(!strstr(msg, HD_RESTART_SAYS));
  /* a failure with no restart pending is said as it is */
  hd_restart_gone_msg(&f.job, "host h1 is lost");
  CHECK_EQ_STR(f.job.gone_msg, "host h1 is lost");
  EXPECT_NONE(&f, 1);
  fx_free(&f);
}

/* ---- groups and plans ---------------------------------------------------- */

static struct hp_sqe in_group(struct hp_sqe e, uint64_t key, uint32_t n,
                              uint32_t idx) {
  e.group = key;
  e.group_n = n;
  e.group_idx = idx;
  return e;
}

/* A group of three runs only when all three are ready on every rank, as
 * one plan of three tensors, each with its right sum; an ungrouped
 * operation submitted meanwhile does not wait for the group. */
static void test_group_runs_whole(void) {
  struct fx f;
  fx_init1(&f, 2);
  struct hd_comm *c = f.job.comms[0];
  const char *names[3] = {"g.0", "g.1", "g.2"};
  struct hp_sqe e[2][3];
  for (int r = 0; r < 2; r++)
    for (int k = 0; k < 3; k++)
      e[r][k] = in_group(ar(&f, r, names[k], 64u * (uint64_t)k, 4,
                            (r + 1) * 100 + k * 10),
                         77, 3, (uint32_t)k);
  /* every rank submits members 0 and 2; 1 only from rank 0 */
  for (int r = 0; r < 2; r++) {
    fx_submit(&f, r, &e[r][0]);
    fx_submit(&f, r, &e[r][2]);
  }
  fx_submit(&f, 0, &e[0][1]);
  struct hd_tensor *t0 = fx_find(c, "g.0"), *t2 = fx_find(c, "g.2");
  CHECK(t0 && t0->held && !t0->queued);
  CHECK(t2 && t2->held && !t2->queued);
  CHECK(c->plan_head == NULL);
  for (int r = 0; r < 2; r++)
    EXPECT_NONE(&f, r);
  /* an ungrouped one runs at once */
  struct hp_sqe z0 = ar(&f, 0, "z", 512, 2, 1), z1 = ar(&f, 1, "z", 512, 2, 2);
  fx_submit(&f, 0, &z0);
  fx_submit(&f, 1, &z1);
  EXPECT_DONE(&f, 0, z0.id, 0);
  EXPECT_DONE(&f, 1, z1.id, 0);
  /* the last member: the three run, in group order */
  fx_submit(&f, 1, &e[1][1]);
  for (int r = 0; r < 2; r++)
    for (int k = 0; k < 3; k++) {
      EXPECT_DONE(&f, r, e[r][k].id, 0);
      for (int j = 0; j < 4; j++) /* 100+10k+j + 200+10k+j */
        CHECK_EQ_INT(i32(&f, r, 64u * (uint64_t)k)[j], 300 + 20 * k + 2 * j);
    }
  CHECK_EQ_INT(c->ntensors, 0);
  CHECK(c->groups == NULL && c->plan_head == NULL);
  CHECK_EQ_INT(total_pending(&f), 0);
  fx_free(&f);
}

/* A grouped tensor against an ungrouped one of the same name: the whole
 * group fails on every rank with Horovod-style words, nothing stays held,
 * and the names are free again. */
static void test_group_mismatch(void) {
  struct fx f;
  fx_init1(&f, 2);
  struct hd_comm *c = f.job.comms[0];
  struct hp_sqe a0 = in_group(ar(&f, 0, "m.a", 0, 2, 1), 5, 2, 0);
  struct hp_sqe b0 = in_group(ar(&f, 0, "m.b", 64, 2, 1), 5, 2, 1);
  struct hp_sqe a1 = ar(&f, 1, "m.a", 0, 2, 1);
  struct hp_sqe b1 = ar(&f, 1, "m.b", 64, 2, 1);
  fx_submit(&f, 0, &a0);
  fx_submit(&f, 0, &b0);
  fx_submit(&f, 1, &a1);
  EXPECT_NONE(&f, 0);
  EXPECT_NONE(&f, 1);
  fx_submit(&f, 1, &b1);
  for (int r = 0; r < 2; r++) {
    EXPECT_MSG(&f, r, r ? a1.id : a0.id, HORA_EMISMATCH,
               "Mismatched grouping of tensor 'm.a'",
               "as tensor 0 of a group of 2", "rank 1 alone",
               "the whole group of 2 tensors fails");
    EXPECT_MSG(&f, r, r ? b1.id : b0.id, HORA_EMISMATCH,
               "Mismatched grouping of tensor 'm.a'");
  }
  CHECK_EQ_INT(c->ntensors, 0);
  CHECK(c->groups == NULL);
  /* the rank that submits alone comes first: the same, with the words
   * naming each rank's own way */
  a0 = in_group(ar(&f, 0, "n.a", 0, 2, 1), 6, 2, 0);
  b0 = in_group(ar(&f, 0, "n.b", 64, 2, 1), 6, 2, 1);
  a1 = ar(&f, 1, "n.a", 0, 2, 1);
  b1 = ar(&f, 1, "n.b", 64, 2, 1);
  fx_submit(&f, 1, &a1);
  fx_submit(&f, 1, &b1);
  fx_submit(&f, 0, &a0);
  EXPECT_NONE(&f, 0);
  EXPECT_NONE(&f, 1);
  fx_submit(&f, 0, &b0);
  for (int r = 0; r < 2; r++) {
    EXPECT_MSG(&f, r, r ? a1.id : a0.id, HORA_EMISMATCH,
               "Mismatched grouping of tensor 'n.a': rank 1 submitted it "
               "alone, but rank 0 as tensor 0 of a group of 2");
    EXPECT_MSG(&f, r, r ? b1.id : b0.id, HORA_EMISMATCH, "'n.a'");
  }
  CHECK_EQ_INT(c->ntensors, 0);
  CHECK(c->groups == NULL);
  CHECK_EQ_INT(total_pending(&f), 0);
  fx_free(&f);
}

/* A rank withdraws the members it submitted of a group it could not
 * submit whole (HP_SQ_CANCEL): they complete with HORA_ECANCELED, the
 * other rank's submissions still wait, and the names can be used again. */
static void test_group_cancel(void) {
  struct fx f;
  fx_init1(&f, 2);
  struct hd_comm *c = f.job.comms[0];
  struct hp_sqe a0 = in_group(ar(&f, 0, "k.a", 0, 2, 1), 9, 3, 0);
  struct hp_sqe b0 = in_group(ar(&f, 0, "k.b", 64, 2, 1), 9, 3, 1);
  struct hp_sqe a1 = in_group(ar(&f, 1, "k.a", 0, 2, 1), 9, 3, 0);
  fx_submit(&f, 1, &a1);
  fx_submit(&f, 0, &a0);
  fx_submit(&f, 0, &b0);
  struct hp_sqe x = a0;
  x.kind = HP_SQ_CANCEL;
  hd_cancel(fx_rank(&f, 0), &x);
  x = b0;
  x.kind = HP_SQ_CANCEL;
  hd_cancel(fx_rank(&f, 0), &x);
  EXPECT_MSG(&f, 0, a0.id, HORA_ECANCELED, "rank 0 withdrew allreduce 'k.a'");
  EXPECT_MSG(&f, 0, b0.id, HORA_ECANCELED, "rank 0 withdrew allreduce 'k.b'");
  EXPECT_NONE(&f, 1);
  struct hd_tensor *t = fx_find(c, "k.a");
  CHECK(t && t->nsubmitted == 1 && !t->held);
  CHECK(fx_find(c, "k.b") == NULL);
  /* a cancel of something not waiting in a group is ignored */
  struct hp_sqe stray = ar(&f, 0, "k.none", 0, 2, 1);
  stray.kind = HP_SQ_CANCEL;
  hd_cancel(fx_rank(&f, 0), &stray);
  EXPECT_NONE(&f, 0);
  /* rank 0 submits the group again, whole */
  struct hp_sqe g0[3], g1[2];
  const char *nm[3] = {"k.a", "k.b", "k.c"};
  for (int k = 0; k < 3; k++)
    g0[k] = in_group(ar(&f, 0, nm[k], 64u * (uint64_t)k, 2, 1), 9, 3,
                     (uint32_t)k);
  for (int k = 0; k < 2; k++)
    g1[k] = in_group(ar(&f, 1, nm[k + 1], 64u * (uint64_t)(k + 1), 2, 1), 9,
                     3, (uint32_t)(k + 1));
  for (int k = 0; k < 3; k++)
    fx_submit(&f, 0, &g0[k]);
  for (int k = 0; k < 2; k++)
    fx_submit(&f, 1, &g1[k]);
  for (int k = 0; k < 3; k++)
    EXPECT_DONE(&f, 0, g0[k].id, 0);
  EXPECT_DONE(&f, 1, a1.id, 0);
  for (int k = 0; k < 2; k++)
    EXPECT_DONE(&f, 1, g1[k].id, 0);
  CHECK_EQ_INT(c->ntensors, 0);
  CHECK(c->groups == NULL);
  CHECK_EQ_INT(total_pending(&f), 0);
  fx_free(&f);
}

/* The cancel race of two ranks of a host: rank 0 withdraws its grouped
 * 'r' and submits 'r' alone before rank 1's grouped 'r' (which joins the
 * tensor and its group) is withdrawn; once rank 1 submits 'r' alone too,
 * it runs -- it is in no group any more. */
static void test_group_cancel_race(void) {
  struct fx f;
  fx_init1(&f, 2);
  struct hd_comm *c = f.job.comms[0];
  struct hp_sqe g0 = in_group(ar(&f, 0, "r", 0, 2, 1), 21, 2, 0);
  struct hp_sqe g1 = in_group(ar(&f, 1, "r", 0, 2, 1), 21, 2, 0);
  struct hp_sqe x;
  fx_submit(&f, 0, &g0);
  x = g0;
  x.kind = HP_SQ_CANCEL;
  hd_cancel(fx_rank(&f, 0), &x);
  EXPECT_MSG(&f, 0, g0.id, HORA_ECANCELED, "withdrew");
  struct hp_sqe a0 = ar(&f, 0, "r", 0, 2, 1);
  fx_submit(&f, 0, &a0);
  fx_submit(&f, 1, &g1);
  x = g1;
  x.kind = HP_SQ_CANCEL;
  hd_cancel(fx_rank(&f, 1), &x);
  EXPECT_MSG(&f, 1, g1.id, HORA_ECANCELED, "withdrew");
  struct hd_tensor *t = fx_find(c, "r");
  CHECK(t && !t->group && t->meta.group_n == 0);
  struct hp_sqe a1 = ar(&f, 1, "r", 0, 2, 1);
  fx_submit(&f, 1, &a1);
  EXPECT_DONE(&f, 0, a0.id, 0);
  EXPECT_DONE(&f, 1, a1.id, 0);
  CHECK_EQ_INT(c->ntensors, 0);
  CHECK(c->groups == NULL);
  CHECK_EQ_INT(total_pending(&f), 0);
  fx_free(&f);
}

/* Groups that cannot be: a barrier in a group, an index past the size, two
 * tensors with one place, sizes that differ. Refused at once. */
static void test_group_bad(void) {
  struct fx f;
  fx_init1(&f, 2);
  struct hp_sqe b = in_group(sq(HORA_COLL_BARRIER, 0, 0, 0, "bar"), 1, 2, 0);
  fx_submit(&f, 0, &b);
  EXPECT_MSG(&f, 0, b.id, HORA_EINVAL, "a barrier cannot be part of a group");
  struct hp_sqe o = in_group(ar(&f, 0, "o", 0, 2, 1), 1, 2, 2);
  fx_submit(&f, 0, &o);
  EXPECT_MSG(&f, 0, o.id, HORA_EINVAL, "tensor 2 of a group of 2");
  struct hp_sqe p = in_group(ar(&f, 0, "p", 0, 2, 1), 3, 2, 0);
  struct hp_sqe q = in_group(ar(&f, 0, "q", 64, 2, 1), 3, 2, 0);
  struct hp_sqe r = in_group(ar(&f, 0, "r", 128, 2, 1), 3, 4, 1);
  fx_submit(&f, 0, &p);
  fx_submit(&f, 0, &q);
  fx_submit(&f, 0, &r);
  EXPECT_MSG(&f, 0, q.id, HORA_EINVAL, "has that place");
  EXPECT_MSG(&f, 0, r.id, HORA_EINVAL, "a group of another size");
  EXPECT_NONE(&f, 0);
  CHECK_EQ_INT(f.job.comms[0]->ntensors, 1);
  hd_fail_all(&f.job); /* the failure path frees a group being assembled */
  fx_free(&f);
}

/* The stall inspector fails a group whose member some rank never
 * submits: the members held for it fail too, naming the culprit. */
static void test_group_stall(void) {
  struct fx f;
  fx_init1(&f, 2);
  f.job.stall_fail_ns = 1;
  struct hp_sqe a0 = in_group(ar(&f, 0, "s.a", 0, 2, 1), 4, 2, 0);
  struct hp_sqe b0 = in_group(ar(&f, 0, "s.b", 64, 2, 1), 4, 2, 1);
  struct hp_sqe a1 = in_group(ar(&f, 1, "s.a", 0, 2, 1), 4, 2, 0);
  fx_submit(&f, 0, &a0);
  fx_submit(&f, 0, &b0);
  fx_submit(&f, 1, &a1);
  hd_check_stalls(&f.job);
  EXPECT_MSG(&f, 0, a0.id, HORA_ESTALL, "grouped with tensor 's.b'",
             "'s.b' stalled", "rank(s) 1 never submitted it");
  EXPECT_MSG(&f, 0, b0.id, HORA_ESTALL, "'s.b' stalled", "rank(s) 1");
  EXPECT_MSG(&f, 1, a1.id, HORA_ESTALL, "grouped with tensor 's.b'");
  CHECK_EQ_INT(f.job.comms[0]->ntensors, 0);
  CHECK(f.job.comms[0]->groups == NULL);
  fx_free(&f);
}

int main(void) {
  hc_log_init("test_nego", HC_FATAL);
  RUN(test_orders);
  RUN(test_dupname);
  RUN(test_mismatch);
  RUN(test_mismatch_three);
  RUN(test_bug_allgather_implied_counts);
  RUN(test_bad_entries);
  RUN(test_sets_and_members);
  RUN(test_stall);
  RUN(test_ring_path);
  RUN(test_fail_all);
  RUN(test_shutdown_status);
  RUN(test_group_runs_whole);
  RUN(test_restart_abandoned);
  RUN(test_group_mismatch);
  RUN(test_group_cancel);
  RUN(test_group_cancel_race);
  RUN(test_group_bad);
  RUN(test_group_stall);
  TL_EXIT();
}
