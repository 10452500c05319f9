/* test_engine_cpu.c -- the CPU engine on one host, through horad's own
 * negotiation (daemon_fixture.h: the daemon is built in the test, the
 * test plays the ranks): allreduce (dtypes, ops, scale factors, the
 * reduction threads, streamed through the staging areas), broadcast,
 * allgather, alltoall, reducescatter, join (neutral contributions, the
 * last rank) and process sets (ids, duplicates, removal). Results are
 * read from the ranks' arenas, statuses from their completion rings. */
#include <math.h>

#include "daemon_fixture.h"

static uint64_t next_id = 1;

#define AT(f, i, type, off) ((type *)fx_arena(f, i, off))

static struct hp_sqe op_sqe(int coll, int dtype, int op, uint64_t count,
                            const char *name) {
  return fx_sqe(next_id++, coll, dtype, op, count, name);
}

/* Submits e[r] on every rank in the given order; the last submission
 * completes all with status 0. */
static void run_all(struct fx *f, struct hp_sqe *e, int n, const int *order) {
  for (int k = 0; k < n; k++) {
    int r = order ? order[k] : k;
    fx_submit(f, r, &e[r]);
    if (k < n - 1)
      for (int q = 0; q < n; q++)
        EXPECT_NONE(f, q);
  }
  for (int r = 0; r < n; r++)
    EXPECT_DONE(f, r, e[r].id, 0);
}

/* ---- allreduce and broadcast ------------------------------------------- */

static void test_allreduce_types(void) {
  struct fx f;
  fx_init1(&f, 3);
  struct hp_sqe e[3];
  const int rev[3] = {2, 0, 1};

  for (int r = 0; r < 3; r++) { /* float32 SUM */
    e[r] = op_sqe(HORA_COLL_ALLREDUCE, HORA_FLOAT32, HORA_SUM, 5, "f32");
    fx_in(&f, r, &e[r], 0);
    for (int k = 0; k < 5; k++)
      AT(&f, r, float, 0)[k] = (float)(r + 1) * 0.5f + (float)k;
  }
  run_all(&f, e, 3, rev);
  for (int r = 0; r < 3; r++)
    for (int k = 0; k < 5; k++)
      CHECK(AT(&f, r, float, 0)[k] == 3.0f + 3.0f * (float)k);

  for (int r = 0; r < 3; r++) { /* int32 MIN and MAX */
    e[r] = op_sqe(HORA_COLL_ALLREDUCE, HORA_INT32, HORA_MIN, 3, "min");
    fx_in(&f, r, &e[r], 64);
    int32_t *p = AT(&f, r, int32_t, 64);
    p[0] = 10 - r;
    p[1] = r == 1 ? -7 : 3;
    p[2] = INT32_MAX - r;
  }
  run_all(&f, e, 3, NULL);
  for (int r = 0; r < 3; r++) {
    CHECK_EQ_INT(AT(&f, r, int32_t, 64)[0], 8);
    CHECK_EQ_INT(AT(&f, r, int32_t, 64)[1], -7);
    CHECK_EQ_INT(AT(&f, r, int32_t, 64)[2], INT32_MAX - 2);
  }
  for (int r = 0; r < 3; r++) {
    e[r] = op_sqe(HORA_COLL_ALLREDUCE, HORA_INT32, HORA_MAX, 2, "max");
    fx_in(&f, r, &e[r], 64);
    AT(&f, r, int32_t, 64)[0] = -10 - r;
    AT(&f, r, int32_t, 64)[1] = r * 100;
  }
  run_all(&f, e, 3, rev);
  for (int r = 0; r < 3; r++) {
    CHECK_EQ_INT(AT(&f, r, int32_t, 64)[0], -10);
    CHECK_EQ_INT(AT(&f, r, int32_t, 64)[1], 200);
  }

  /* float64 AVERAGE with prescale 2 and postscale 3: 2 * avg * 3 */
  for (int r = 0; r < 3; r++) {
    e[r] = op_sqe(HORA_COLL_ALLREDUCE, HORA_FLOAT64, HORA_AVERAGE, 4, "avg");
    e[r].prescale = 2;
    e[r].postscale = 3;
    fx_in(&f, r, &e[r], 128);
    for (int k = 0; k < 4; k++)
      AT(&f, r, double, 128)[k] = r + 1 + k;
  }
  run_all(&f, e, 3, NULL);
  for (int r = 0; r < 3; r++)
    for (int k = 0; k < 4; k++)
      CHECK(AT(&f, r, double, 128)[k] == 12.0 + 6.0 * k);

  for (int r = 0; r < 3; r++) { /* int64 PRODUCT */
    e[r] = op_sqe(HORA_COLL_ALLREDUCE, HORA_INT64, HORA_PRODUCT, 2, "prod");
    fx_in(&f, r, &e[r], 192);
    AT(&f, r, int64_t, 192)[0] = r + 2;
    AT(&f, r, int64_t, 192)[1] = -(int64_t)1000000 * (r + 1);
  }
  run_all(&f, e, 3, NULL);
  for (int r = 0; r < 3; r++) {
    CHECK_EQ_INT(AT(&f, r, int64_t, 192)[0], 24);
    CHECK_EQ_INT(AT(&f, r, int64_t, 192)[1], -6000000000000000000ll);
  }

  for (int r = 0; r < 3; r++) { /* uint8 SUM wraps */
    e[r] = op_sqe(HORA_COLL_ALLREDUCE, HORA_UINT8, HORA_SUM, 3, "u8");
    fx_in(&f, r, &e[r], 256 + (uint64_t)r); /* any alignment will do */
    uint8_t *p = AT(&f, r, uint8_t, 256 + (uint64_t)r);
    p[0] = 200;
    p[1] = (uint8_t)(r * 100);
    p[2] = 1;
  }
  run_all(&f, e, 3, NULL);
  for (int r = 0; r < 3; r++) {
    uint8_t *p = AT(&f, r, uint8_t, 256 + (uint64_t)r);
    CHECK_EQ_INT(p[0], (600 % 256));
    CHECK_EQ_INT(p[1], (300 % 256));
    CHECK_EQ_INT(p[2], 3);
  }

  for (int r = 0; r < 3; r++) { /* float16: 1 + 2 + 3 = 6 */
    e[r] = op_sqe(HORA_COLL_ALLREDUCE, HORA_FLOAT16, HORA_SUM, 1, "f16");
    fx_in(&f, r, &e[r], 320);
    AT(&f, r, uint16_t, 320)[0] = r == 0 ? 0x3c00 : r == 1 ? 0x4000 : 0x4200;
  }
  run_all(&f, e, 3, NULL);
  for (int r = 0; r < 3; r++)
    CHECK_EQ_INT(AT(&f, r, uint16_t, 320)[0], 0x4600);

  /* count 0 completes */
  for (int r = 0; r < 3; r++) {
    e[r] = op_sqe(HORA_COLL_ALLREDUCE, HORA_FLOAT32, HORA_SUM, 0, "empty");
    fx_in(&f, r, &e[r], 0);
  }
  run_all(&f, e, 3, NULL);
  fx_free(&f);
}

/* Big enough to be split across the reduction threads. */
static void test_allreduce_parallel(void) {
  struct fx f;
  fx_init1(&f, 3);
  const uint64_t n = 160000; /* 640 kB of float32 */
  struct hp_sqe e[3];
  for (int r = 0; r < 3; r++) {
    e[r] = op_sqe(HORA_COLL_ALLREDUCE, HORA_FLOAT32, HORA_SUM, n, "big");
    fx_in(&f, r, &e[r], 0);
    float *p = AT(&f, r, float, 0);
    for (uint64_t k = 0; k < n; k++)
      p[k] = (float)((k % 1000) * (uint64_t)(r + 1));
  }
  run_all(&f, e, 3, NULL);
  uint64_t bad = 0;
  for (int r = 0; r < 3; r++) {
    float *p = AT(&f, r, float, 0);
    for (uint64_t k = 0; k < n; k++)
      bad += p[k] != (float)(6 * (k % 1000));
  }
  CHECK_EQ_INT(bad, 0);
  fx_free(&f);
}

/* An allreduce larger than a chunk runs a chunk at a time, back to the loop
 * after each (job->resume): a small one of higher priority submitted
 * meanwhile runs between two chunks; a rank lost in the middle fails the
 * large one on every rank, and nothing is left to resume. */
static void test_allreduce_pieces(void) {
  struct fx f;
  fx_init1(&f, 3);
  const uint64_t n = 4 * FX_CHUNK; /* float32: 16 chunks */
  struct hp_sqe e[3], u[3];
  for (int round = 0; round < 2; round++) {
    for (int r = 0; r < 3; r++) {
      e[r] = op_sqe(HORA_COLL_ALLREDUCE, HORA_FLOAT32, HORA_SUM, n, "big");
      fx_in(&f, r, &e[r], 0);
      for (uint64_t k = 0; k < n; k++)
        AT(&f, r, float, 0)[k] = (float)(r + 1);
      hd_submit(&f.ranks[r], &e[r]);
    }
    hd_run_ready(&f.job); /* the first chunk */
    CHECK(f.job.resume);
    for (int r = 0; r < 3; r++)
      EXPECT_NONE(&f, r);
    for (int r = 0; r < 3; r++) {
      u[r] = op_sqe(HORA_COLL_ALLREDUCE, HORA_INT32, HORA_SUM, 4, "urgent");
      u[r].priority = 10;
      fx_in(&f, r, &u[r], 4 * n + 64);
      hd_submit(&f.ranks[r], &u[r]);
    }
    hd_run_ready(&f.job); /* the second chunk, then the urgent one */
    for (int r = 0; r < 3; r++)
      EXPECT_DONE(&f, r, u[r].id, 0);
    CHECK(f.job.resume);
    if (round == 0) { /* the rest, right */
      fx_run(&f);
      uint64_t bad = 0;
      for (int r = 0; r < 3; r++) {
        EXPECT_DONE(&f, r, e[r].id, 0);
        for (uint64_t k = 0; k < n; k++) bad += AT(&f, r, float, 0)[k] != 6.0f;
      }
      CHECK_EQ_INT(bad, 0);
      CHECK(!f.job.resume);
    } else { /* rank 1 lost between two chunks */
      f.job.gone_rank = 1;
      hc_fmt(f.job.gone_msg, sizeof f.job.gone_msg, "rank 1 was killed");
      hd_fail_all(&f.job);
      for (int r = 0; r < 3; r++)
        EXPECT_MSG(&f, r, e[r].id, HORA_EPEERGONE, "rank 1 was killed");
      fx_run(&f);
      CHECK(!f.job.resume);
      for (int r = 0; r < 3; r++)
        EXPECT_NONE(&f, r);
    }
  }
  fx_free(&f);
}

static void test_broadcast(void) {
  struct fx f;
  fx_init1(&f, 3);
  struct hp_sqe e[3];
  for (int r = 0; r < 3; r++) {
    e[r] = op_sqe(HORA_COLL_BROADCAST, HORA_INT16, 0, 5, "bc");
    e[r].root = 1;
    fx_in(&f, r, &e[r], 64);
    for (int k = 0; k < 5; k++)
      AT(&f, r, int16_t, 64)[k] = (int16_t)(r * 1000 + k);
  }
  run_all(&f, e, 3, NULL);
  for (int r = 0; r < 3; r++)
    for (int k = 0; k < 5; k++)
      CHECK_EQ_INT(AT(&f, r, int16_t, 64)[k], 1000 + k);
  fx_free(&f);
}

/* ---- streamed through the staging areas ---------------------------------- */

/* Plays the ranks of a streamed operation: answers every copy request
 * from src[r] / into dst[r] (NULL: the rank's data are in its arena) and
 * checks the requests; returns when nothing moves. done[r] counts DONEs. */
static void drive_stream(struct fx *f, int n, const uint64_t *ids,
                         void *const *src, void *const *dst, size_t es,
                         uint64_t count, int *done) {
  uint64_t copied_out[FX_MAX_LOCAL][64];
  memset(copied_out, 0, sizeof copied_out);
  for (int iter = 0; iter < 100000; iter++) {
    int moved = 0;
    for (int r = 0; r < n; r++) {
      struct hd_rank *rk = fx_rank(f, r);
      struct hp_cqe c;
      while (fx_pop(f, r, &c)) {
        moved = 1;
        if (c.kind == HP_CQ_DONE) {
          CHECK_EQ_INT(c.id, ids[r]);
          CHECK_EQ_INT(c.status, 0);
          done[r]++;
          continue;
        }
        CHECK_EQ_INT(c.id, ids[r]);
        CHECK(c.elem_off + c.elem_count <= count);
        CHECK(c.elem_count * es <= rk->layout.chunk_size);
        CHECK_EQ_INT(c.staging_off, rk->layout.staging_off +
                                        (c.chunk & 1) * rk->layout.chunk_size);
        CHECK(c.chunk < 64);
        if (c.elem_off + c.elem_count > count || c.chunk >= 64) return;
        unsigned char *stage = rk->shm + c.staging_off;
        struct hp_sqe ev;
        memset(&ev, 0, sizeof ev);
        ev.id = c.id;
        ev.chunk = c.chunk;
        if (c.kind == HP_CQ_COPY_IN) {
          /* the slot must not still hold a chunk to be copied out */
          if (c.chunk >= 2 && dst[r]) CHECK(copied_out[r][c.chunk - 2]);
          CHECK(src[r] != NULL);
          if (!src[r]) return;
          memcpy(stage, (unsigned char *)src[r] + c.elem_off * es,
                 c.elem_count * es);
          ev.kind = HP_SQ_CHUNK_READY;
        } else {
          CHECK_EQ_INT(c.kind, HP_CQ_COPY_OUT);
          CHECK(dst[r] != NULL);
          if (!dst[r]) return;
          memcpy((unsigned char *)dst[r] + c.elem_off * es, stage,
                 c.elem_count * es);
          copied_out[r][c.chunk]++;
          ev.kind = HP_SQ_CHUNK_DONE;
        }
        hd_chunk_event(rk, &ev);
        hd_run_ready(&f->job);
        hd_flush_wakeups(&f->job);
      }
    }
    if (!moved) return;
  }
}

static void test_allreduce_streamed(void) {
  struct fx f;
  fx_init1(&f, 3);
  const uint64_t n = 2500; /* float32: 1024 per 4 kB chunk, 3 chunks */
  float *src[3] = {NULL, malloc(n * 4), malloc(n * 4)};
  float *dst[3] = {NULL, malloc(n * 4), malloc(n * 4)};
  struct hp_sqe e[3];
  uint64_t ids[3];
  for (int r = 0; r < 3; r++) {
    e[r] = op_sqe(HORA_COLL_ALLREDUCE, HORA_FLOAT32, HORA_SUM, n, "stream");
    ids[r] = e[r].id;
    float *p = r == 0 ? AT(&f, 0, float, 0) : src[r];
    for (uint64_t k = 0; k < n; k++)
      p[k] = (float)(k * (uint64_t)(r + 1));
    if (r == 0)
      fx_in(&f, 0, &e[0], 0); /* one rank's data lie in its arena */
    else
      memset(dst[r], 0xff, n * 4);
  }
  for (int r = 0; r < 3; r++)
    fx_submit(&f, r, &e[r]);
  int done[3] = {0, 0, 0};
  drive_stream(&f, 3, ids, (void *const *)src, (void *const *)dst, 4, n, done);
  for (int r = 0; r < 3; r++)
    CHECK_EQ_INT(done[r], 1);
  uint64_t bad = 0;
  for (uint64_t k = 0; k < n; k++) {
    float want = (float)(6 * k);
    bad += AT(&f, 0, float, 0)[k] != want;
    bad += dst[1][k] != want;
    bad += dst[2][k] != want;
    bad += src[1][k] != (float)(2 * k); /* inputs stay as they were */
  }
  CHECK_EQ_INT(bad, 0);
  for (int r = 0; r < 3; r++)
    CHECK(f.ranks[r].staging_owner == NULL);
  CHECK_EQ_INT(f.job.comms[0]->ntensors, 0);

  /* a streamed broadcast: the root's data in its arena, rank 2's output
   * through staging */
  for (int r = 0; r < 3; r++) {
    e[r] = op_sqe(HORA_COLL_BROADCAST, HORA_FLOAT32, 0, n, "sbc");
    e[r].root = 0;
    ids[r] = e[r].id;
  }
  for (uint64_t k = 0; k < n; k++) {
    AT(&f, 0, float, 0)[k] = (float)k + 0.25f;
    AT(&f, 1, float, 0)[k] = -1;
  }
  fx_in(&f, 0, &e[0], 0);
  fx_in(&f, 1, &e[1], 0);
  memset(dst[2], 0, n * 4);
  float *bsrc[3] = {NULL, NULL, NULL}, *bdst[3] = {NULL, NULL, dst[2]};
  for (int r = 0; r < 3; r++)
    fx_submit(&f, r, &e[r]);
  memset(done, 0, sizeof done);
  drive_stream(&f, 3, ids, (void *const *)bsrc, (void *const *)bdst, 4, n,
               done);
  for (int r = 0; r < 3; r++)
    CHECK_EQ_INT(done[r], 1);
  bad = 0;
  for (uint64_t k = 0; k < n; k++) {
    bad += AT(&f, 1, float, 0)[k] != (float)k + 0.25f;
    bad += dst[2][k] != (float)k + 0.25f;
  }
  CHECK_EQ_INT(bad, 0);
  for (int r = 1; r < 3; r++) {
    free(src[r]);
    free(dst[r]);
  }
  fx_free(&f);
}

/* ---- allgather, alltoall, reducescatter -------------------------------- */

static void test_allgather(void) {
  struct fx f;
  fx_init1(&f, 3);
  struct hp_sqe e[3];
  const int64_t counts[3] = {2, 3, 1};
  for (int r = 0; r < 3; r++) {
    e[r] =
        op_sqe(HORA_COLL_ALLGATHER, HORA_INT16, 0, (uint64_t)counts[r], "agv");
    fx_in(&f, r, &e[r], 0);
    fx_out(&f, r, &e[r], 64, 8); /* room for more than arrives */
    fx_aux(&f, r, &e[r], 512, counts, 3);
    for (int k = 0; k < counts[r]; k++)
      AT(&f, r, int16_t, 0)[k] = (int16_t)(10 * r + k);
    for (int k = 0; k < 8; k++)
      AT(&f, r, int16_t, 64)[k] = -1;
  }
  const int order[3] = {1, 2, 0};
  run_all(&f, e, 3, order);
  const int16_t want[8] = {0, 1, 10, 11, 12, 20, -1, -1};
  for (int r = 0; r < 3; r++)
    for (int k = 0; k < 8; k++)
      CHECK_EQ_INT(AT(&f, r, int16_t, 64)[k], want[k]);

  /* equal counts, 2-D rows, no receive counts */
  const int64_t shape[2] = {1, 2};
  for (int r = 0; r < 3; r++) {
    e[r] = op_sqe(HORA_COLL_ALLGATHER, HORA_FLOAT64, 0, 2, "ag");
    fx_shape(&e[r], 2, shape);
    fx_in(&f, r, &e[r], 1024);
    fx_out(&f, r, &e[r], 2048, 6);
    AT(&f, r, double, 1024)[0] = r;
    AT(&f, r, double, 1024)[1] = r + 0.5;
  }
  run_all(&f, e, 3, NULL);
  for (int r = 0; r < 3; r++)
    for (int k = 0; k < 6; k++)
      CHECK(AT(&f, r, double, 2048)[k] == (k / 2) + (k % 2) * 0.5);
  fx_free(&f);
}

static void test_alltoall(void) {
  struct fx f;
  fx_init1(&f, 3);
  struct hp_sqe e[3];
  /* rank i sends i + j + 1 elements to rank j: 100 i + 10 j + index */
  for (int i = 0; i < 3; i++) {
    int64_t aux[6];
    uint64_t n = 0, m = 0;
    for (int j = 0; j < 3; j++) {
      aux[j] = i + j + 1;
      aux[3 + j] = j + i + 1; /* from j: what j sends to i */
      for (int k = 0; k < aux[j]; k++)
        AT(&f, i, int32_t, 0)[n++] = 100 * i + 10 * j + k;
      m += (uint64_t)aux[3 + j];
    }
    e[i] = op_sqe(HORA_COLL_ALLTOALL, HORA_INT32, 0, n, "a2av");
    fx_in(&f, i, &e[i], 0);
    fx_out(&f, i, &e[i], 256, m);
    fx_aux(&f, i, &e[i], 512, aux, 6);
  }
  run_all(&f, e, 3, NULL);
  for (int j = 0; j < 3; j++) {
    int p = 0;
    for (int i = 0; i < 3; i++)
      for (int k = 0; k < i + j + 1; k++)
        CHECK_EQ_INT(AT(&f, j, int32_t, 256)[p++], 100 * i + 10 * j + k);
  }
  /* equal splits */
  for (int i = 0; i < 3; i++) {
    e[i] = op_sqe(HORA_COLL_ALLTOALL, HORA_UINT8, 0, 6, "a2a");
    fx_in(&f, i, &e[i], 1024);
    fx_out(&f, i, &e[i], 1100, 6);
    for (int k = 0; k < 6; k++)
      AT(&f, i, uint8_t, 1024)[k] = (uint8_t)(16 * i + k);
  }
  run_all(&f, e, 3, NULL);
  for (int j = 0; j < 3; j++)
    for (int k = 0; k < 6; k++) /* 2 from each i: its elements 2j, 2j+1 */
      CHECK_EQ_INT(AT(&f, j, uint8_t, 1100)[k], 16 * (k / 2) + 2 * j + k % 2);
  fx_free(&f);
}

static void test_reducescatter(void) {
  struct fx f;
  fx_init1(&f, 3);
  struct hp_sqe e[3];
  /* 7 rows of 2 over 3 members: rows 0-2, 3-4, 5-6 */
  const int64_t shape[2] = {7, 2};
  const uint64_t first[3] = {0, 3, 5}, rows[3] = {3, 2, 2};
  for (int r = 0; r < 3; r++) {
    e[r] = op_sqe(HORA_COLL_REDUCESCATTER, HORA_FLOAT32, HORA_SUM, 14, "rs");
    fx_shape(&e[r], 2, shape);
    fx_in(&f, r, &e[r], 0);
    fx_out(&f, r, &e[r], 128, rows[r] * 2);
    for (int k = 0; k < 14; k++)
      AT(&f, r, float, 0)[k] = (float)(100 * r + k);
    for (int k = 0; k < 8; k++)
      AT(&f, r, float, 128)[k] = -1;
  }
  run_all(&f, e, 3, NULL);
  for (int r = 0; r < 3; r++) {
    for (uint64_t k = 0; k < rows[r] * 2; k++)
      CHECK(AT(&f, r, float, 128)[k] == (float)(300 + 3 * (first[r] * 2 + k)));
    CHECK(AT(&f, r, float, 128)[rows[r] * 2] == -1); /* nothing beyond */
  }
  /* int32 AVERAGE with postscale 2; 1-D: 4 elements, blocks 2, 1, 1 */
  for (int r = 0; r < 3; r++) {
    e[r] =
        op_sqe(HORA_COLL_REDUCESCATTER, HORA_INT32, HORA_AVERAGE, 4, "rsavg");
    e[r].postscale = 2;
    fx_in(&f, r, &e[r], 256);
    fx_out(&f, r, &e[r], 320, r == 0 ? 2 : 1);
    for (int k = 0; k < 4; k++)
      AT(&f, r, int32_t, 256)[k] = 30 * r + k;
  }
  run_all(&f, e, 3, NULL);
  /* sum 90 + 3k, / 3 = 30 + k, * 2 */
  CHECK_EQ_INT(AT(&f, 0, int32_t, 320)[0], 60);
  CHECK_EQ_INT(AT(&f, 0, int32_t, 320)[1], 62);
  CHECK_EQ_INT(AT(&f, 1, int32_t, 320)[0], 64);
  CHECK_EQ_INT(AT(&f, 2, int32_t, 320)[0], 66);
  fx_free(&f);
}

/* ---- join -----------------------------------------------------------------
 */

static void join_sqe(struct hp_sqe *e) {
  *e = op_sqe(HORA_COLL_JOIN, 0, 0, 0, "hora.join");
}

static void test_join(void) {
  struct fx f;
  fx_init1(&f, 3);
  struct hp_sqe e[3], j[3];
  /* what waits only for rank 2 runs when rank 2 joins */
  for (int r = 0; r < 2; r++) {
    e[r] = op_sqe(HORA_COLL_ALLREDUCE, HORA_INT32, HORA_SUM, 2, "early");
    fx_in(&f, r, &e[r], 0);
    AT(&f, r, int32_t, 0)[0] = r + 1;
    AT(&f, r, int32_t, 0)[1] = 10 * (r + 1);
    fx_submit(&f, r, &e[r]);
  }
  EXPECT_NONE(&f, 0);
  AT(&f, 2, int32_t, 0)[0] = 777; /* rank 2's arena: not to be touched */
  join_sqe(&j[2]);
  fx_submit(&f, 2, &j[2]);
  EXPECT_DONE(&f, 0, e[0].id, 0);
  EXPECT_DONE(&f, 1, e[1].id, 0);
  EXPECT_NONE(&f, 2);
  CHECK_EQ_INT(AT(&f, 0, int32_t, 0)[0], 3);
  CHECK_EQ_INT(AT(&f, 1, int32_t, 0)[1], 30);
  CHECK_EQ_INT(AT(&f, 2, int32_t, 0)[0], 777);

  /* neutral elements: AVERAGE still divides by 3 */
  struct {
    int dtype, op;
    double a[2], b[2], want[2];
  } cases[] = {
      {HORA_FLOAT64, HORA_AVERAGE, {3, 6}, {3, 0}, {2, 2}},
      {HORA_INT32, HORA_PRODUCT, {2, 3}, {4, -5}, {8, -15}},
      {HORA_INT32, HORA_MIN, {5, -1}, {7, -9}, {5, -9}},
      {HORA_INT32, HORA_MAX, {-5, -1}, {-7, -9}, {-5, -1}},
      {HORA_FLOAT32, HORA_MIN, {3.5, -2}, {1, 4}, {1, -2}},
      {HORA_FLOAT32, HORA_MAX, {-3.5, -2}, {-1, -4}, {-1, -2}},
      {HORA_INT64, HORA_MIN, {5, 6}, {7, 8}, {5, 6}},
      {HORA_UINT8, HORA_MIN, {5, 250}, {7, 251}, {5, 250}},
      {HORA_INT8, HORA_MAX, {-5, -100}, {-7, -128}, {-5, -100}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    char name[32];
    snprintf(name, sizeof name, "neutral.%zu", c);
    for (int r = 0; r < 2; r++) {
      e[r] = op_sqe(HORA_COLL_ALLREDUCE, cases[c].dtype, cases[c].op, 2, name);
      fx_in(&f, r, &e[r], 64);
      for (int k = 0; k < 2; k++) {
        double v = r ? cases[c].b[k] : cases[c].a[k];
        void *p =
            AT(&f, r, unsigned char, 64) + k * hora_dtype_size(cases[c].dtype);
        switch (cases[c].dtype) {
        case HORA_FLOAT64:
          *(double *)p = v;
          break;
        case HORA_FLOAT32:
          *(float *)p = (float)v;
          break;
        case HORA_INT64:
          *(int64_t *)p = (int64_t)v;
          break;
        case HORA_INT32:
          *(int32_t *)p = (int32_t)v;
          break;
        case HORA_INT8:
          *(int8_t *)p = (int8_t)v;
          break;
        default:
          *(uint8_t *)p = (uint8_t)v;
          break;
        }
      }
    }
    fx_submit(&f, 1, &e[1]);
    fx_submit(&f, 0, &e[0]);
    EXPECT_DONE(&f, 0, e[0].id, 0);
    EXPECT_DONE(&f, 1, e[1].id, 0);
    for (int r = 0; r < 2; r++)
      for (int k = 0; k < 2; k++) {
        void *p =
            AT(&f, r, unsigned char, 64) + k * hora_dtype_size(cases[c].dtype);
        double got;
        switch (cases[c].dtype) {
        case HORA_FLOAT64:
          got = *(double *)p;
          break;
        case HORA_FLOAT32:
          got = *(float *)p;
          break;
        case HORA_INT64:
          got = (double)*(int64_t *)p;
          break;
        case HORA_INT32:
          got = *(int32_t *)p;
          break;
        case HORA_INT8:
          got = *(int8_t *)p;
          break;
        default:
          got = *(uint8_t *)p;
          break;
        }
        if (got != cases[c].want[k])
          TL_FAIL("%s op %d rank %d [%d]: %g, want %g",
                  hora_dtype_name(cases[c].dtype), cases[c].op, r, k, got,
                  cases[c].want[k]);
        tl_checks++;
      }
  }

  /* a joined root cannot broadcast; another root can */
  for (int r = 0; r < 2; r++) {
    e[r] = op_sqe(HORA_COLL_BROADCAST, HORA_INT32, 0, 1, "bc2");
    e[r].root = 2;
    fx_in(&f, r, &e[r], 0);
    fx_submit(&f, r, &e[r]);
  }
  EXPECT_MSG(&f, 0, e[0].id, HORA_EINVAL, "broadcast 'bc2' cannot run",
             "its root rank 2 has joined");
  EXPECT_MSG(&f, 1, e[1].id, HORA_EINVAL, "its root rank 2 has joined");
  for (int r = 0; r < 2; r++) {
    e[r] = op_sqe(HORA_COLL_BROADCAST, HORA_INT32, 0, 1, "bc0");
    e[r].root = 0;
    fx_in(&f, r, &e[r], 0);
    AT(&f, r, int32_t, 0)[0] = r ? -1 : 42;
  }
  run_all(&f, e, 2, NULL);
  CHECK_EQ_INT(AT(&f, 1, int32_t, 0)[0], 42);

  /* allgather: a joined member sends nothing */
  const int64_t ok[3] = {2, 1, 0}, notok[3] = {2, 1, 1};
  for (int r = 0; r < 2; r++) {
    e[r] = op_sqe(HORA_COLL_ALLGATHER, HORA_INT32, 0, (uint64_t)ok[r], "agj");
    fx_in(&f, r, &e[r], 0);
    fx_out(&f, r, &e[r], 128, 3);
    fx_aux(&f, r, &e[r], 512, ok, 3);
    for (int k = 0; k < ok[r]; k++)
      AT(&f, r, int32_t, 0)[k] = 5 * r + k;
  }
  run_all(&f, e, 2, NULL);
  for (int r = 0; r < 2; r++) {
    CHECK_EQ_INT(AT(&f, r, int32_t, 128)[0], 0);
    CHECK_EQ_INT(AT(&f, r, int32_t, 128)[1], 1);
    CHECK_EQ_INT(AT(&f, r, int32_t, 128)[2], 5);
  }
  for (int r = 0; r < 2; r++) {
    e[r] =
        op_sqe(HORA_COLL_ALLGATHER, HORA_INT32, 0, (uint64_t)notok[r], "agj2");
    fx_in(&f, r, &e[r], 0);
    fx_out(&f, r, &e[r], 128, 4);
    fx_aux(&f, r, &e[r], 512, notok, 3);
    fx_submit(&f, r, &e[r]);
  }
  EXPECT_MSG(&f, 0, e[0].id, HORA_EINVAL, "allgather 'agj2': rank 2 has joined",
             "expect 1 elements from it");
  EXPECT_MSG(&f, 1, e[1].id, HORA_EINVAL, "rank 2 has joined");

  /* alltoall: what a joined member would have sent reads 0, whatever the
   * receive buffer held before; the rest lands as usual */
  for (int r = 0; r < 2; r++) {
    const int64_t sp[6] = {1, 1, 3, 1, 1, 2}; /* to 0, 1, 2; from 0, 1, 2 */
    e[r] = op_sqe(HORA_COLL_ALLTOALL, HORA_INT32, 0, 5, "a2aj");
    fx_in(&f, r, &e[r], 0);
    fx_out(&f, r, &e[r], 128, 4);
    fx_aux(&f, r, &e[r], 512, sp, 6);
    for (int k = 0; k < 5; k++)
      AT(&f, r, int32_t, 0)[k] = 10 * r + k;
    for (int k = 0; k < 6; k++)
      AT(&f, r, int32_t, 128)[k] = -7; /* garbage, and a guard past it */
  }
  run_all(&f, e, 2, NULL);
  for (int r = 0; r < 2; r++) {
    CHECK_EQ_INT(AT(&f, r, int32_t, 128)[0], r);      /* from rank 0 */
    CHECK_EQ_INT(AT(&f, r, int32_t, 128)[1], 10 + r); /* from rank 1 */
    CHECK_EQ_INT(AT(&f, r, int32_t, 128)[2], 0);      /* from rank 2 */
    CHECK_EQ_INT(AT(&f, r, int32_t, 128)[3], 0);
    CHECK_EQ_INT(AT(&f, r, int32_t, 128)[4], -7); /* beyond its output */
  }

  /* reducescatter with a neutral member: 3 rows, rank 2's block unused */
  for (int r = 0; r < 2; r++) {
    e[r] = op_sqe(HORA_COLL_REDUCESCATTER, HORA_INT32, HORA_SUM, 3, "rsj");
    fx_in(&f, r, &e[r], 0);
    fx_out(&f, r, &e[r], 128, 1);
    for (int k = 0; k < 3; k++)
      AT(&f, r, int32_t, 0)[k] = (k + 1) * (r ? 10 : 1);
  }
  run_all(&f, e, 2, NULL);
  CHECK_EQ_INT(AT(&f, 0, int32_t, 128)[0], 11);
  CHECK_EQ_INT(AT(&f, 1, int32_t, 128)[0], 22);

  /* the last rank to join: rank 0 submitted one more, then joins; rank 1
   * joins last: join returns 1 everywhere and the pending one runs with
   * two neutral members */
  e[0] = op_sqe(HORA_COLL_ALLREDUCE, HORA_INT32, HORA_SUM, 1, "last");
  fx_in(&f, 0, &e[0], 0);
  AT(&f, 0, int32_t, 0)[0] = 9;
  fx_submit(&f, 0, &e[0]);
  join_sqe(&j[0]);
  fx_submit(&f, 0, &j[0]);
  for (int r = 0; r < 3; r++)
    EXPECT_NONE(&f, r);
  join_sqe(&j[1]);
  fx_submit(&f, 1, &j[1]);
  int got_last = 0, got_join0 = 0;
  struct hp_cqe c;
  while (fx_pop(&f, 0, &c)) {
    if (c.id == e[0].id && c.status == 0)
      got_last++;
    else if (c.id == j[0].id && c.status == 1)
      got_join0++;
    else
      TL_FAIL("rank 0: id %llu status %d", (unsigned long long)c.id, c.status);
  }
  CHECK_EQ_INT(got_last, 1);
  CHECK_EQ_INT(got_join0, 1);
  CHECK_EQ_INT(AT(&f, 0, int32_t, 0)[0], 9);
  EXPECT_DONE(&f, 1, j[1].id, 1);
  EXPECT_DONE(&f, 2, j[2].id, 1);
  CHECK_EQ_INT(f.job.comms[0]->njoined, 0);

  /* afterwards every rank counts again */
  for (int r = 0; r < 3; r++) {
    e[r] = op_sqe(HORA_COLL_ALLREDUCE, HORA_INT32, HORA_SUM, 1, "again");
    fx_in(&f, r, &e[r], 0);
    AT(&f, r, int32_t, 0)[0] = 1;
  }
  run_all(&f, e, 3, NULL);
  CHECK_EQ_INT(AT(&f, 2, int32_t, 0)[0], 3);

  /* join on a process set is refused */
  const int32_t m01[2] = {0, 1};
  CHECK(hd_comm_new(&f.job, m01, 2) != NULL);
  join_sqe(&j[0]);
  j[0].comm = 1;
  fx_submit(&f, 0, &j[0]);
  EXPECT_MSG(&f, 0, j[0].id, HORA_EINVAL,
             "join runs on the global process set only");
  CHECK_EQ_INT(f.job.comms[1]->njoined, 0);
  fx_free(&f);
}

/* ---- process sets ------------------------------------------------------- */

static void ps_add(struct fx *f, struct hp_sqe *e, int r, const char *name,
                   const int64_t *ranks, uint64_t n) {
  *e = op_sqe(HORA_COLL_PS_ADD, 0, 0, 0, name);
  fx_aux(f, r, e, 4096, ranks, n);
}

static void ps_remove(struct hp_sqe *e, const char *name, int id) {
  *e = op_sqe(HORA_COLL_PS_REMOVE, 0, 0, 0, name);
  e->root = id;
}

/* Every rank submits e[r]; every rank gets status (and the words). */
#define ALL(f, e, n, status, ...)                                              \
  do {                                                                         \
    for (int r_ = 0; r_ < (n); r_++)                                           \
      fx_submit(f, r_, &(e)[r_]);                                              \
    for (int r_ = 0; r_ < (n); r_++)                                           \
      EXPECT_MSG(f, r_, (e)[r_].id, status, __VA_ARGS__);                      \
  } while (0)

static void test_process_sets(void) {
  struct fx f;
  fx_init1(&f, 3);
  struct hp_sqe e[3];
  const int64_t s02[2] = {0, 2}, s01[2] = {0, 1}, s12[2] = {1, 2},
                all[3] = {0, 1, 2};
  for (int r = 0; r < 3; r++)
    ps_add(&f, &e[r], r, "ps.1", s02, 2);
  ALL(&f, e, 3, 1, "");
  CHECK_EQ_INT(f.job.ncomms, 2);
  CHECK_EQ_INT(f.job.comms[1]->size, 2);
  CHECK_EQ_INT(f.job.comms[1]->members[1], 2);
  for (int r = 0; r < 3; r++)
    ps_add(&f, &e[r], r, "ps.2", s02, 2);
  ALL(&f, e, 3, HORA_EEXIST, "Attempted to add a duplicate process set",
      "process set 1 has the same ranks");
  for (int r = 0; r < 3; r++)
    ps_add(&f, &e[r], r, "ps.3", all, 3);
  ALL(&f, e, 3, HORA_EEXIST, "process set 0 has the same ranks");
  for (int r = 0; r < 3; r++)
    ps_add(&f, &e[r], r, "ps.4", r == 2 ? s12 : s01, 2);
  ALL(&f, e, 3, HORA_EMISMATCH, "Mismatched process sets",
      "asked to add different sets of ranks");
  for (int r = 0; r < 3; r++)
    ps_add(&f, &e[r], r, "ps.5", s12, 2);
  ALL(&f, e, 3, 2, "");
  CHECK_EQ_INT(f.job.ncomms, 3);

  /* set 1 = {0, 2} */
  struct hp_sqe a[3];
  for (int r = 0; r < 3; r += 2) {
    a[r] = op_sqe(HORA_COLL_ALLREDUCE, HORA_INT64, HORA_SUM, 1, "on1");
    a[r].comm = 1;
    fx_in(&f, r, &a[r], 0);
    AT(&f, r, int64_t, 0)[0] = r + 40;
  }
  fx_submit(&f, 2, &a[2]);
  EXPECT_NONE(&f, 2);
  fx_submit(&f, 0, &a[0]);
  EXPECT_DONE(&f, 0, a[0].id, 0);
  EXPECT_DONE(&f, 2, a[2].id, 0);
  CHECK_EQ_INT(AT(&f, 0, int64_t, 0)[0], 82);
  a[1] = op_sqe(HORA_COLL_ALLREDUCE, HORA_INT64, HORA_SUM, 1, "on1");
  a[1].comm = 1;
  fx_in(&f, 1, &a[1], 0);
  fx_submit(&f, 1, &a[1]);
  EXPECT_MSG(&f, 1, a[1].id, HORA_ENOTMEMBER, "not a member of process set 1");

  /* set 2 = {1, 2}: a pending operation fails when it is removed */
  a[1] = op_sqe(HORA_COLL_ALLREDUCE, HORA_INT64, HORA_SUM, 1, "pending");
  a[1].comm = 2;
  fx_in(&f, 1, &a[1], 0);
  fx_submit(&f, 1, &a[1]);
  EXPECT_NONE(&f, 1);
  CHECK_EQ_INT(fx_pending(&f.job, 1), 1);
  for (int r = 0; r < 3; r++)
    ps_remove(&e[r], "rm.2", 2);
  fx_submit(&f, 0, &e[0]);
  fx_submit(&f, 1, &e[1]);
  EXPECT_NONE(&f, 1);
  fx_submit(&f, 2, &e[2]);
  EXPECT_MSG(&f, 1, a[1].id, HORA_ENOSET, "process set 2 was removed");
  for (int r = 0; r < 3; r++)
    EXPECT_DONE(&f, r, e[r].id, 0);
  CHECK(f.job.comms[2]->removed);
  CHECK_EQ_INT(f.job.comms[2]->ntensors, 0);
  CHECK_EQ_INT(fx_pending(&f.job, 1), 0);
  a[2] = op_sqe(HORA_COLL_ALLREDUCE, HORA_INT64, HORA_SUM, 1, "later");
  a[2].comm = 2;
  fx_in(&f, 2, &a[2], 0);
  fx_submit(&f, 2, &a[2]);
  EXPECT_MSG(&f, 2, a[2].id, HORA_ENOSET, "any more (it was removed)");

  for (int r = 0; r < 3; r++)
    ps_remove(&e[r], "rm.2b", 2);
  ALL(&f, e, 3, HORA_ENOSET,
      "process set 2 cannot be removed: no such process set");
  for (int r = 0; r < 3; r++)
    ps_remove(&e[r], "rm.0", 0);
  ALL(&f, e, 3, HORA_ENOSET, "it is the global set");
  for (int r = 0; r < 3; r++)
    ps_remove(&e[r], "rm.9", 9);
  ALL(&f, e, 3, HORA_ENOSET, "process set 9 cannot be removed");
  for (int r = 0; r < 3; r++)
    ps_remove(&e[r], "rm.x", r == 0 ? 1 : 3);
  ALL(&f, e, 3, HORA_EMISMATCH,
      "rank 0 removes process set 1, but rank 1 "
      "removes process set 3");
  CHECK(!f.job.comms[1]->removed);

  /* ids are not reused; the removed set's ranks may come back */
  for (int r = 0; r < 3; r++)
    ps_add(&f, &e[r], r, "ps.6", s12, 2);
  ALL(&f, e, 3, 3, "");

  /* process sets are added and removed on the global set */
  ps_add(&f, &e[0], 0, "ps.7", s01, 2);
  e[0].comm = 1;
  fx_submit(&f, 0, &e[0]);
  EXPECT_MSG(&f, 0, e[0].id, HORA_EINVAL,
             "process sets are added by every rank of the job");
  ps_remove(&e[0], "rm.1", 1);
  e[0].comm = 1;
  fx_submit(&f, 0, &e[0]);
  EXPECT_MSG(&f, 0, e[0].id, HORA_EINVAL,
             "process_set_remove runs on the global process set only");

  /* not while a rank has joined */
  struct hp_sqe j[3];
  join_sqe(&j[2]);
  fx_submit(&f, 2, &j[2]);
  for (int r = 0; r < 2; r++)
    ps_add(&f, &e[r], r, "ps.8", s01, 2);
  ALL(&f, e, 2, HORA_EINVAL,
      "process_set_add cannot run while rank 2 has joined");
  for (int r = 0; r < 2; r++)
    ps_remove(&e[r], "rm.3", 3);
  ALL(&f, e, 2, HORA_EINVAL,
      "process_set_remove cannot run while rank 2 has joined");
  CHECK(!f.job.comms[3]->removed);
  for (int r = 0; r < 2; r++) {
    join_sqe(&j[r]);
    fx_submit(&f, r, &j[r]);
  }
  for (int r = 0; r < 3; r++)
    EXPECT_DONE(&f, r, j[r].id, 1);
  fx_free(&f);
}

/* BUG (negotiate.c hd_run_ready / free_tensor): a streamed operation that
 * waits for a rank's staging area (claim_staging) is only retried when
 * its communicator is progressed again. When the owner is an operation
 * of a communicator with a higher id, it finishes inside hd_run_ready's
 * loop after the waiting one was tried, and nothing tries that one again
 * until some rank submits something: ranks that all wait for it hang.
 * Here rank 1 streams A on set {0, 1} and then B on the global set. */
static void test_bug_staging_handover(void) {
  struct fx f;
  fx_init1(&f, 3);
  const int32_t m01[2] = {0, 1};
  struct hd_comm *s = hd_comm_new(&f.job, m01, 2);
  CHECK(s != NULL);
  if (!s) return;
  const uint64_t n = 1500; /* 2 chunks */
  float *src = malloc(n * 4), *out = malloc(n * 4);
  for (uint64_t k = 0; k < n; k++)
    src[k] = 1;
  struct hp_sqe a[2], b[3];
  for (int r = 0; r < 2; r++) {
    a[r] = op_sqe(HORA_COLL_ALLREDUCE, HORA_FLOAT32, HORA_SUM, n, "A");
    a[r].comm = s->id;
    if (r == 0) fx_in(&f, 0, &a[0], 0);
    fx_submit(&f, r, &a[r]);
  }
  for (int r = 0; r < 3; r++) {
    b[r] = op_sqe(HORA_COLL_ALLREDUCE, HORA_FLOAT32, HORA_SUM, n, "B");
    if (r != 1) fx_in(&f, r, &b[r], 8192);
    fx_submit(&f, r, &b[r]);
  }
  CHECK(f.ranks[1].staging_owner == fx_find(s, "A"));
  /* rank 1 serves A's copies only (B's would come after A's end) */
  int done_a = 0, b_started = 0;
  for (int iter = 0; iter < 1000; iter++) {
    struct hp_cqe c;
    int moved = 0;
    while (fx_pop(&f, 1, &c)) {
      moved = 1;
      if (c.id == b[1].id) {
        b_started = 1;
        continue;
      }
      if (c.kind == HP_CQ_DONE) {
        CHECK_EQ_INT(c.id, a[1].id);
        done_a++;
        continue;
      }
      struct hp_sqe ev;
      memset(&ev, 0, sizeof ev);
      ev.id = c.id;
      ev.chunk = c.chunk;
      unsigned char *stage = f.ranks[1].shm + c.staging_off;
      if (c.kind == HP_CQ_COPY_IN) {
        memcpy(stage, src + c.elem_off, c.elem_count * 4);
        ev.kind = HP_SQ_CHUNK_READY;
      } else {
        memcpy(out + c.elem_off, stage, c.elem_count * 4);
        ev.kind = HP_SQ_CHUNK_DONE;
      }
      /* as rings.c: the entry, then what is ready */
      hd_chunk_event(&f.ranks[1], &ev);
      hd_run_ready(&f.job);
      hd_flush_wakeups(&f.job);
    }
    if (!moved) break;
  }
  CHECK_EQ_INT(done_a, 1);
  EXPECT_DONE(&f, 0, a[0].id, 0);
  CHECK(fx_find(s, "A") == NULL);
  if (!b_started)
    TL_FAIL("B never asked rank 1 for a chunk after A released its staging "
            "area (it waits for an unrelated submission)");
  tl_checks++;
  free(src);
  free(out);
  fx_free(&f);
}

int main(void) {
  hc_log_init("test_engine_cpu", HC_FATAL);
  hd_pool_init(2);
  RUN(test_allreduce_types);
  RUN(test_allreduce_parallel);
  RUN(test_allreduce_pieces);
  RUN(test_broadcast);
  RUN(test_allreduce_streamed);
  RUN(test_allgather);
  RUN(test_alltoall);
  RUN(test_reducescatter);
  RUN(test_join);
  RUN(test_process_sets);
  RUN(test_bug_staging_handover);
  hd_pool_fini();
  TL_EXIT();
}
