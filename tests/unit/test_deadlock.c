/* test_deadlock.c -- deadlock detection's messages between hosts
 * (daemon/deadlock.c), without processes or links: what host 0 makes of
 * the other hosts' REPORTs, and that no frame a peer sends (garbage,
 * truncated, out of range, from the wrong host) does more than drop it
 * with a reason; host 0's verdict from its ranks' waits and another
 * host's report (a deadlock once confirmed; none when a rank that could
 * submit is not waiting, or when a tensor lacks nobody). Real jobs:
 * tests/integration/deadlock.sh, tests/multihost/deadlock.sh. */
#include "daemon_fixture.h"
#include "metrics.h"

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

/* Local rank i submits allreduce `name` (4 floats, in its arena) as id
 * and waits on it. */
static void submit_and_wait(struct fx *f, int i, uint64_t id,
                            const char *name) {
  struct hp_sqe e = fx_sqe(id, HORA_COLL_ALLREDUCE, HORA_FLOAT32, HORA_SUM, 4,
                           name);
  fx_in(f, i, &e, 0);
  fx_submit(f, i, &e);
  struct hp_shm_hdr *h = f->ranks[i].hdr;
  atomic_store(&h->wait_threads, 1);
  atomic_store(&h->wait_ids[0], id);
  atomic_store(&h->waiting, 1);
  atomic_fetch_add(&h->wait_gen, 1);
}

/* Runs the detector's timer for about ms milliseconds. */
static void run_for(uv_loop_t *loop, int ms) {
  uint64_t end = uv_now(loop) + (uint64_t)ms;
  while (uv_now(loop) < end) {
    uv_run(loop, UV_RUN_ONCE);
    uv_update_time(loop);
  }
}

/* Host 0's verdict from its own ranks and host 1's report: a deadlock
 * once host 1 confirms (ACK); none when a tensor lacks only a rank that
 * does not wait, or lacks nobody. */
static void verdict_case(int kind) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  struct fx f;
  setup(&f, &loop, 0);
  f.daemon.jobs = &f.job; /* what the fixture leaves out */
  CHECK_EQ_INT(hd_metrics_job(&f.job), 0);
  char why[200];
  submit_and_wait(&f, 0, 11, "a");
  submit_and_wait(&f, 1, 12, "a");
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  const int32_t both[] = {2, 3}, two[] = {2};
  const char *const bb[] = {"b", "b"}, *const aa[] = {"a", "a"};
  const int32_t s23[] = {2, 3, -1}, s2[] = {2, -1};
  const int32_t *const subs23[] = {s23}, *const subs2[] = {s2};
  if (kind == 0) /* ranks 2-3 wait on 'b', which only they submitted */
    report(&w, 1, 2, both, bb, 1, bb, subs23);
  else if (kind == 1) /* rank 2 waits on 'b'; rank 3 is busy, not waiting */
    report(&w, 1, 1, two, bb, 1, bb, subs2);
  else /* ranks 2-3 submitted 'a' too: it is ready, not stuck */
    report(&w, 1, 2, both, aa, 1, aa, subs23);
  CHECK_EQ_INT(frame(&f, 1, &w, why), 0);
  run_for(&loop, 350); /* the same set twice: a PROBE (dropped here) */
  CHECK_EQ_INT(f.job.gone_rank, -1);
  hp_wbuf_reset(&w);
  hp_put_u8(&w, 3); /* DL_ACK: host 1 still finds what it reported */
  hp_put_u32(&w, 1);
  hp_put_u8(&w, 1);
  CHECK_EQ_INT(frame(&f, 1, &w, why), 0);
  if (kind == 0) {
    CHECK_EQ_INT(f.job.gone_rank, HD_GONE_DEADLOCK);
    CHECK(f.job.late_fault != NULL);
    CHECK(f.job.late_fault &&
          strstr(f.job.late_fault,
                 "deadlock: rank 0 waits on allreduce 'a' (16 B float32), "
                 "submitted by ranks 0-1; rank 1 waits on allreduce 'a' (16 B "
                 "float32), submitted by ranks 0-1; rank 2 waits on allreduce "
                 "'b' (16 B float32), submitted by ranks 2-3; rank 3 waits on "
                 "allreduce 'b' (16 B float32), submitted by ranks 2-3.") ==
              f.job.late_fault);
    run_for(&loop, 400); /* the stacks' moment, then every wait fails */
    EXPECT_MSG(&f, 0, 11, HORA_EDEADLOCK, "allreduce 'a' cannot complete: "
               "deadlock: rank 0 waits on allreduce 'a'");
    EXPECT_DONE(&f, 1, 12, HORA_EDEADLOCK);
    size_t len;
    char *text = hd_metrics_render(&f.daemon, &len);
    CHECK(text && strstr(text, "hora_deadlocks_total{host=\"h0\"} 1\n"));
    free(text);
  } else {
    CHECK_EQ_INT(f.job.gone_rank, -1);
    CHECK(f.job.late_fault == NULL);
    EXPECT_NONE(&f, 0);
  }
  hp_wbuf_free(&w);
  hd_metrics_free(&f.job);
  teardown(&f, &loop);
  uv_loop_close(&loop);
}

static void test_verdict_deadlock(void) { verdict_case(0); }
static void test_verdict_rank_not_waiting(void) { verdict_case(1); }
static void test_verdict_ready_tensor(void) { verdict_case(2); }

int main(void) {
  hc_log_init("test_deadlock", HC_FATAL);
  RUN(test_reports_checked);
  RUN(test_found_only_from_host0);
  RUN(test_verdict_deadlock);
  RUN(test_verdict_rank_not_waiting);
  RUN(test_verdict_ready_tensor);
  TL_EXIT();
}
