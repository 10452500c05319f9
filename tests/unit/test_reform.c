/* test_reform.c -- a daemon re-forming an elastic job in place (reform.c):
 * horarun's REFORM applied (hosts left out, ranks numbered anew, the
 * global set rebuilt), the links fenced, and every REFORM that does not
 * fit the job refused: the job is torn down, and nothing of it changed. */
#include "daemon_fixture.h"

static char torn[512];
static int ntorn;

static void record_teardown(struct hd_job *job, const char *reason,
                            int delay_ms) {
  (void)job;
  (void)delay_ms;
  ntorn++;
  hc_fmt(torn, sizeof torn, "%s", reason);
}

static struct hd_upcalls up;

/* Three hosts of two ranks each, seen from host 2 (ranks 4 and 5): the
 * description as a JOB leaves it (malloc'd, as apply() replaces it). */
static void setup(struct fx *f) {
  int per[3] = {2, 2, 2};
  fx_init(f, 3, per, 2);
  struct hd_job *job = &f->job;
  struct hp_job_host *h = calloc(3, sizeof *h);
  for (int i = 0; i < 3; i++) {
    h[i] = f->hosts[i];
    h[i].name = strdup(f->hosts[i].name);
    h[i].addr = strdup(f->hosts[i].addr);
  }
  job->desc.hosts = h;
  job->desc.ranks = calloc(2, sizeof *job->desc.ranks);
  for (int i = 0; i < 2; i++) job->desc.ranks[i] = f->ranks[i].info;
  for (int i = 0; i < 3; i++) job->peers[i].orig = (uint32_t)i;
  job->orig_nhosts = 3;
  up = hd_job_upcalls;
  up.teardown = record_teardown;
  job->up = &up;
  ntorn = 0;
  torn[0] = '\0';
}

static void teardown_fx(struct fx *f) {
  struct hd_job *job = &f->job;
  for (uint32_t i = 0; i < job->desc.nhosts; i++) {
    free(job->desc.hosts[i].name);
    free(job->desc.hosts[i].addr);
  }
  free(job->desc.hosts);
  free(job->desc.ranks);
  fx_free(f);
}

/* Sends host `me` of f the REFORM keeping old hosts old[0..n) with two
 * ranks each. */
static void send_reform(struct fx *f, uint32_t number, const uint32_t *old,
                        uint32_t n, uint32_t me) {
  int32_t first[3], nr[3];
  struct hp_job_rank rk[2];
  for (uint32_t i = 0; i < n; i++) {
    first[i] = (int32_t)(2 * i);
    nr[i] = 2;
  }
  for (int r = 0; r < 2; r++)
    rk[r] = (struct hp_job_rank){(int32_t)(2 * me) + r, r, (int32_t)me,
                                 (int32_t)n};
  struct hp_reform m = {.number = number, .host_index = me, .nhosts = n,
                        .size = (int32_t)(2 * n), .old_index = (uint32_t *)old,
                        .first_rank = first, .nranks = nr, .nlocal = 2,
                        .ranks = rk};
  hc_fmt(m.why, sizeof m.why, "host h1 is left out: it was lost");
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_reform(&w, &m);
  hd_reform_frame(&f->job, w.data + HP_FRAME_HDR, w.len - HP_FRAME_HDR);
  hp_wbuf_free(&w);
}

/* The job is as it started: three hosts, this one host 2. */
static void check_unchanged(struct fx *f) {
  struct hd_job *job = &f->job;
  CHECK_EQ_INT(job->desc.nhosts, 3);
  CHECK_EQ_INT(job->desc.host_index, 2);
  CHECK_EQ_INT(job->desc.size, 6);
  CHECK_EQ_INT(f->ranks[0].info.rank, 4);
  CHECK_EQ_INT(job->reforms, 0);
  CHECK(!job->reform_quiet);
}

/* Host 1 left out: this host is host 1 of 2, its ranks 2 and 3 of 4. */
static void test_applied(void) {
  struct fx f;
  setup(&f);
  struct hd_job *job = &f.job;
  const uint32_t old[] = {0, 2};
  send_reform(&f, 1, old, 2, 1);
  CHECK_EQ_INT(ntorn, 0);
  CHECK_EQ_INT(job->reforms, 1);
  CHECK_EQ_INT(job->desc.nhosts, 2);
  CHECK_EQ_INT(job->desc.host_index, 1);
  CHECK_EQ_INT(job->desc.size, 4);
  CHECK_EQ_STR(job->desc.hosts[1].name, "h2");
  CHECK_EQ_INT(job->desc.hosts[1].first_rank, 2);
  CHECK_EQ_INT(job->peers[0].orig, 0);
  CHECK_EQ_INT(job->peers[1].orig, 2);
  CHECK_EQ_INT(f.ranks[0].info.rank, 2);
  CHECK_EQ_INT(f.ranks[1].info.rank, 3);
  CHECK_EQ_INT(f.ranks[1].info.cross_size, 2);
  CHECK_EQ_INT(job->desc.ranks[1].rank, 3);
  /* the global set is the re-formed job's */
  struct hd_comm *c = hd_comm_get(job, 0);
  CHECK(c && c->size == 4 && c->nhosts == 2 && c->me == 1 && c->nlocal == 2);
  /* until host 0's FENCE, nothing but SESSION frames passes, and no new
   * session is asked for */
  CHECK(job->reform_quiet);
  CHECK(hd_reform_pending(job));
  CHECK(hd_reform_drops(job, HP_MSG_NEGO_READY));
  CHECK(hd_reform_drops(job, HP_MSG_DATA));
  CHECK(!hd_reform_drops(job, HP_MSG_SESSION));
  CHECK(!hd_reform_drops(job, HP_MSG_HEARTBEAT));
  hd_reform_fence(job, 0, 1, 7);
  CHECK(!hd_reform_pending(job));
  CHECK_EQ_INT(job->reform_session, 7); /* the highest count said */
  /* the same REFORM again does not fit any more */
  send_reform(&f, 1, old, 2, 1);
  CHECK_EQ_INT(ntorn, 1);
  CHECK(strstr(torn, "REFORM number 1, but the next one is 2") != NULL);
  teardown_fx(&f);
}

/* A host lost while the job re-forms: the wait begins again, and the next
 * REFORM is applied to the job as the first left it. Host 1 left out,
 * then host 0 (before the new session): this host is host 0 of 1. */
static void test_again(void) {
  struct fx f;
  setup(&f);
  struct hd_job *job = &f.job;
  uv_loop_t loop;
  uv_loop_init(&loop);
  uv_timer_init(&loop, &job->reform_timer);
  job->reform_timer.data = job;
  job->reformable = 1;
  const uint32_t keep02[] = {0, 2}, keep2[] = {2};
  send_reform(&f, 1, keep02, 2, 1);
  hd_reform_fence(job, 0, 1, 5);
  CHECK(!hd_reform_pending(job));
  /* host 0's link is lost (mesh.c's host_lost): the ranks wait again */
  hd_session_cancel(job);
  CHECK(job->reform_wait);
  CHECK(hd_reform_pending(job));
  send_reform(&f, 2, keep2, 1, 0);
  CHECK_EQ_INT(ntorn, 0);
  CHECK_EQ_INT(job->reforms, 2);
  CHECK(!job->reform_wait);
  CHECK(job->reform_quiet);
  CHECK_EQ_INT(job->desc.nhosts, 1);
  CHECK_EQ_INT(job->desc.host_index, 0);
  CHECK_EQ_INT(job->desc.size, 2);
  CHECK_EQ_STR(job->desc.hosts[0].name, "h2");
  CHECK_EQ_INT(job->peers[0].orig, 2);
  CHECK_EQ_INT(f.ranks[0].info.rank, 0);
  CHECK_EQ_INT(f.ranks[1].info.rank, 1);
  CHECK_EQ_INT(f.ranks[1].info.cross_size, 1);
  struct hd_comm *c = hd_comm_get(job, 0);
  CHECK(c && c->size == 2 && c->nhosts == 1 && c->me == 0);
  /* no peer left to fence: the new session may be asked for at once */
  CHECK(!hd_reform_pending(job));
  CHECK_EQ_INT(job->reform_session, 5);
  uv_close((uv_handle_t *)&job->reform_timer, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  teardown_fx(&f);
}

/* The ranks' wait for the REFORM: 30 s, or --elastic-timeout when shorter
 * (at least 1 s), never less than 4 heartbeat timeouts; when it passes,
 * the wait ends (its ranks' hora_init() fails) and a new session may be
 * asked for. */
static void test_wait(void) {
  struct fx f;
  setup(&f);
  struct hd_job *job = &f.job;
  char why[200];
  job->hb_timeout_ns = 5000000000ull; /* 5 s */
  CHECK_EQ_INT(hd_reform_wait_ms(job), 30000);
  job->hb_timeout_ns = 20000000000ull; /* 20 s: 4 of them */
  CHECK_EQ_INT(hd_reform_wait_ms(job), 80000);
  CHECK_EQ_INT(hk_set(&job->knobs, elastic_timeout, "3", why, sizeof why), 0);
  CHECK_EQ_INT(hd_reform_wait_ms(job), 80000);
  job->hb_timeout_ns = 500000000ull; /* 0.5 s */
  CHECK_EQ_INT(hd_reform_wait_ms(job), 3000);
  job->hb_timeout_ns = 200000000ull; /* 0.2 s */
  CHECK_EQ_INT(hk_set(&job->knobs, elastic_timeout, "0", why, sizeof why), 0);
  CHECK_EQ_INT(hd_reform_wait_ms(job), 1000);
  /* the wait, on a loop: it ends after its time, not before */
  uv_loop_t loop;
  uv_loop_init(&loop);
  uv_timer_init(&loop, &job->reform_timer);
  job->reform_timer.data = job;
  job->reformable = 1;
  hd_reform_hold(job);
  CHECK(job->reform_wait);
  CHECK(hd_reform_pending(job));
  uint64_t t0 = hc_now_ns();
  uv_run(&loop, UV_RUN_DEFAULT); /* until the timer has fired */
  uint64_t ms = (hc_now_ns() - t0) / 1000000u;
  if (ms < 900 || ms > 10000)
    TL_FAIL("the wait of 1000 ms ended after %llu ms", (unsigned long long)ms);
  CHECK(!job->reform_wait);
  CHECK(!hd_reform_pending(job));
  CHECK_EQ_INT(ntorn, 0); /* the job itself goes on to its end */
  uv_close((uv_handle_t *)&job->reform_timer, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  teardown_fx(&f);
}

static void test_refused(void) {
  struct fx f;
  const uint32_t keep02[] = {0, 2}, keep01[] = {0, 1}, keep27[] = {2, 7};
  struct {
    uint32_t number;
    const uint32_t *old;
    uint32_t me;
    const char *why;
  } bad[] = {
      {2, keep02, 1, "REFORM number 2, but the next one is 1"},
      {1, keep01, 1, "whose host 1 is not this host"},
      {1, keep27, 0, "keeps host 7, which the job no longer has"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setup(&f);
    send_reform(&f, bad[i].number, bad[i].old, 2, bad[i].me);
    CHECK_EQ_INT(ntorn, 1);
    if (!strstr(torn, bad[i].why))
      TL_FAIL("refusal %zu: '%s' does not say '%s'", i, torn, bad[i].why);
    check_unchanged(&f);
    teardown_fx(&f);
  }
  /* a payload cut short */
  setup(&f);
  static const unsigned char junk[] = {1, 0, 0, 0, 0, 0};
  hd_reform_frame(&f.job, junk, sizeof junk);
  CHECK_EQ_INT(ntorn, 1);
  CHECK(strstr(torn, "malformed REFORM") != NULL);
  check_unchanged(&f);
  teardown_fx(&f);
}

int main(void) {
  hc_log_init("test_reform", HC_FATAL);
  RUN(test_applied);
  RUN(test_again);
  RUN(test_wait);
  RUN(test_refused);
  TL_EXIT();
}
