/* test_deadlock.c -- deadlock detection's messages between hosts
 * (daemon/deadlock.c), without processes or links: what host 0 makes of
 * the other hosts' REPORTs, and that no frame a peer sends (garbage,
 * truncated, out of range, from the wrong host) does more than drop it
 * with a reason. The verdicts themselves run in real jobs:
 * tests/integration/deadlock.sh, tests/multihost/deadlock.sh. */
#include "daemon_fixture.h"

/* A REPORT of `host` whose ranks waits[i] wait on tensors[i] of the
 * global set, each submitted by the ranks listed (-1 ends a list). */
static void report(struct hp_wbuf *w, uint32_t host, int nr,
                   const int32_t *ranks, const char *const *names, int nt,
                   const char *const *tnames, const int32_t *const *subs) {
  hp_put_u8(w, 1); /* DL_REPORT */
  hp_put_u32(w, host);
  hp_put_u8(w, 1);
  hp_put_u32(w, (uint32_t)nr);
  for (int i = 0; i < nr; i++) {
    hp_put_u32(w, (uint32_t)ranks[i]);
    hp_put_u8(w, 1);
    hp_put_u32(w, 0);
    hp_put_str(w, names[i]);
    hp_put_u8(w, HORA_COLL_ALLREDUCE);
    hp_put_u8(w, HORA_FLOAT32);
    hp_put_u64(w, 16);
  }
  hp_put_u32(w, (uint32_t)nt);
  for (int i = 0; i < nt; i++) {
    hp_put_u32(w, 0);
    hp_put_u8(w, 0);
    hp_put_str(w, tnames[i]);
    int n = 0;
    while (subs[i][n] >= 0) n++;
    hp_put_u32(w, (uint32_t)n);
    for (int k = 0; k < n; k++) hp_put_u32(w, (uint32_t)subs[i][k]);
  }
  hp_put_u32(w, 0);
}

static int frame(struct fx *f, int from, const struct hp_wbuf *w, char *why) {
  why[0] = '\0';
  return hd_deadlock_frame(&f->job, from, w->data, w->len, why, 200);
}

/* Host 0 of {0: ranks 0-1, 1: ranks 2-3}, with the detector on. */
static void setup(struct fx *f, uv_loop_t *loop, int me) {
  const int per[2] = {2, 2};
  fx_init(f, 2, per, me);
  f->daemon.loop = loop;
  f->job.have_job = 1;
  CHECK_EQ_INT(hd_deadlock_init(&f->job), 0);
  CHECK(f->job.dl != NULL);
}

static void teardown(struct fx *f, uv_loop_t *loop) {
  hd_deadlock_close(&f->job);
  uv_run(loop, UV_RUN_DEFAULT); /* the close callbacks free the detector */
  CHECK(f->job.dl == NULL);
  free(f->job.late_fault);
  fx_free(f);
}

static void test_reports_checked(void) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  struct fx f;
  setup(&f, &loop, 0);
  char why[200];
  struct hp_wbuf w;
  hp_wbuf_init(&w);

  /* a good one: rank 2 waits on 'b', which ranks 2-3 submitted */
  const int32_t r2[] = {2};
  const char *const b[] = {"b"};
  const int32_t s23[] = {2, 3, -1};
  const int32_t *const subs[] = {s23};
  report(&w, 1, 1, r2, b, 1, b, subs);
  CHECK_EQ_INT(frame(&f, 1, &w, why), 0);

  /* every prefix of it is a bad report, said so, nothing more */
  for (size_t n = 0; n < w.len; n++) {
    struct hp_wbuf t = {.data = w.data, .len = n};
    CHECK_EQ_INT(frame(&f, 1, &t, why), -1);
    CHECK(strstr(why, "bad deadlock") != NULL);
  }
  /* a byte more */
  hp_put_u8(&w, 0);
  CHECK_EQ_INT(frame(&f, 1, &w, why), -1);

  /* a rank beyond the job, twice the same rank, a submitter beyond it */
  const int32_t r9[] = {9}, r22[] = {2, 2};
  const char *const bb[] = {"b", "b"};
  const int32_t s9[] = {9, -1};
  const int32_t *const bad_subs[] = {s9};
  hp_wbuf_reset(&w);
  report(&w, 1, 1, r9, b, 1, b, subs);
  CHECK_EQ_INT(frame(&f, 1, &w, why), -1);
  hp_wbuf_reset(&w);
  report(&w, 1, 2, r22, bb, 1, b, subs);
  CHECK_EQ_INT(frame(&f, 1, &w, why), -1);
  hp_wbuf_reset(&w);
  report(&w, 1, 1, r2, b, 1, b, bad_subs);
  CHECK_EQ_INT(frame(&f, 1, &w, why), -1);

  /* a REPORT from host 0 to itself, an unknown kind, random bytes */
  hp_wbuf_reset(&w);
  report(&w, 0, 1, r2, b, 1, b, subs);
  CHECK_EQ_INT(frame(&f, 0, &w, why), -1);
  unsigned char junk[64];
  unsigned seed = 7;
  for (int round = 0; round < 2000; round++) {
    size_t n = (size_t)(rand_r(&seed) % sizeof junk);
    for (size_t i = 0; i < n; i++) junk[i] = (unsigned char)rand_r(&seed);
    if (round & 1 && n) junk[0] = (unsigned char)(1 + round % 4);
    (void)hd_deadlock_frame(&f.job, 1, junk, n, why, sizeof why);
  }
  /* an ACK for no probe, a FOUND not from host 0: nothing happens */
  hp_wbuf_reset(&w);
  hp_put_u8(&w, 3);
  hp_put_u32(&w, 12345);
  hp_put_u8(&w, 1);
  CHECK_EQ_INT(frame(&f, 1, &w, why), 0);
  CHECK_EQ_INT(f.job.gone_rank, -1);
  hp_wbuf_free(&w);
  teardown(&f, &loop);
  uv_loop_close(&loop);
}

/* On host 1: only host 0's PROBE and FOUND are taken, well formed. */
static void test_found_only_from_host0(void) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  struct fx f;
  setup(&f, &loop, 1);
  char why[200];
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  unsigned char in[4] = {1, 1, 1, 1};
  hp_put_u8(&w, 4); /* DL_FOUND */
  hp_put_u8(&w, 1);
  hp_put_str(&w, "deadlock: test");
  hp_put_bytes(&w, in, 3); /* not the job's size */
  CHECK_EQ_INT(frame(&f, 0, &w, why), -1);
  hp_wbuf_reset(&w);
  hp_put_u8(&w, 4);
  hp_put_u8(&w, 1);
  hp_put_str(&w, "deadlock: test");
  hp_put_bytes(&w, in, 4);
  CHECK_EQ_INT(frame(&f, 0, &w, why), 0); /* from host 0: carried out */
  CHECK_EQ_INT(f.job.gone_rank, HD_GONE_DEADLOCK);
  CHECK(strstr(f.job.gone_msg, "deadlock: test") != NULL);
  hp_wbuf_free(&w);
  teardown(&f, &loop);

  setup(&f, &loop, 1);
  hp_wbuf_init(&w);
  hp_put_u8(&w, 4);
  hp_put_u8(&w, 1);
  hp_put_str(&w, "deadlock: test");
  hp_put_bytes(&w, in, 4);
  /* FOUND from host 0 but cut short, and a REPORT to host 1: refused */
  CHECK_EQ_INT(hd_deadlock_frame(&f.job, 0, w.data, 1, why, sizeof why), -1);
  hp_wbuf_reset(&w);
  const int32_t r0[] = {0};
  const char *const a[] = {"a"};
  const int32_t s0[] = {0, -1};
  const int32_t *const subs[] = {s0};
  report(&w, 0, 1, r0, a, 1, a, subs);
  CHECK_EQ_INT(frame(&f, 0, &w, why), -1);
  hp_wbuf_free(&w);
  CHECK_EQ_INT(f.job.gone_rank, -1);
  teardown(&f, &loop);
  uv_loop_close(&loop);
}

int main(void) {
  hc_log_init("test_deadlock", HC_FATAL);
  RUN(test_reports_checked);
  RUN(test_found_only_from_host0);
  TL_EXIT();
}
