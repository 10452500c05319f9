/* test_metrics.c -- horad's metrics (daemon/metrics.c): the HTTP request
 * parser, the Prometheus text of a job's operations and of each rank's
 * lateness (one host, and at a coordinator from other hosts' NEGO_READY
 * offsets), the log-linear histogram, the LATENESS frame, horarun's
 * straggler rule and HORA_LOG's syntax. */
#include <time.h>

#include "daemon_fixture.h"
#include "lhist.h"
#include "metrics.h"
#include "straggler.h"

static uint64_t next_id = 1;

static int http(const char *req, int *head) {
  return hd_http_request(req, strlen(req), 4096, head);
}

static void test_http(void) {
  int head;
  CHECK_EQ_INT(http("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", &head), 200);
  CHECK_EQ_INT(head, 0);
  CHECK_EQ_INT(http("GET /metrics?x=1 HTTP/1.0\n\n", &head), 200);
  CHECK_EQ_INT(http("HEAD /metrics HTTP/1.1\r\n\r\n", &head), 200);
  CHECK_EQ_INT(head, 1);
  CHECK_EQ_INT(http("GET / HTTP/1.1\r\n\r\n", &head), 404);
  CHECK_EQ_INT(http("GET /metricsx HTTP/1.1\r\n\r\n", &head), 404);
  CHECK_EQ_INT(http("POST /metrics HTTP/1.1\r\n", &head), 405);
  CHECK_EQ_INT(http("GET /metrics HTTP/2.0\r\n", &head), 505);
  CHECK_EQ_INT(http("\x16\x03\x01garbage\n", &head), 400);
  CHECK_EQ_INT(http("get /metrics HTTP/1.1\r\n", &head), 400);
  CHECK_EQ_INT(http("GET metrics HTTP/1.1\r\n", &head), 400);
  CHECK_EQ_INT(http("GET  /metrics HTTP/1.1\r\n", &head), 400);
  CHECK_EQ_INT(http("GET /metrics\r\n", &head), 400);
  CHECK_EQ_INT(http("\r\n", &head), 400);
  /* not complete yet */
  CHECK_EQ_INT(http("", &head), 0);
  CHECK_EQ_INT(http("GET /metr", &head), 0);
  CHECK_EQ_INT(http("GET /metrics HTTP/1.1\r\nHost: x\r\n", &head), 0);
  CHECK_EQ_INT(http("GET /metrics HTTP/1.1\r\nHost: x\r\n\r", &head), 0);
  /* too long */
  char big[4096];
  memset(big, 'A', sizeof big);
  CHECK_EQ_INT(hd_http_request(big, sizeof big, sizeof big, &head), 431);
  memcpy(big, "GET /metrics HTTP/1.1\r\nX: ", 26);
  CHECK_EQ_INT(hd_http_request(big, sizeof big, sizeof big, &head), 431);
  /* every prefix of a good request waits; random bytes from the letters
   * of requests get one of the answers (ASan: nothing read past them) */
  const char *good = "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n";
  for (size_t n = 0; n < strlen(good); n++) {
    char *cut = malloc(n + 1);
    memcpy(cut, good, n);
    CHECK_EQ_INT(hd_http_request(cut, n, 4096, &head), 0);
    free(cut);
  }
  static const char abc[] = "GET /metricsHP1.0\r\n :?";
  unsigned seed = 12345;
  int odd = 0;
  for (int k = 0; k < 20000; k++) {
    size_t n = (seed = seed * 1103515245u + 12345u) >> 16 & 63;
    char *b = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++)
      b[i] = abc[((seed = seed * 1103515245u + 12345u) >> 16) %
                 (sizeof abc - 1)];
    int st = hd_http_request(b, n, 48, &head);
    odd += st != 0 && st != 200 && st != 400 && st != 404 && st != 405 &&
           st != 431 && st != 505;
    free(b);
  }
  CHECK_EQ_INT(odd, 0);
}

static void test_lhist(void) {
  uint64_t v[] = {0, 1, 7, 8, 9, 15, 16, 17, 1000, 999999, 1000000,
                  123456789, 1ull << 40, UINT64_MAX};
  for (size_t k = 0; k < HC_ARRAY_SIZE(v); k++) {
    unsigned i = hc_lhist_index(v[k]);
    CHECK(i < HC_LHIST_N);
    CHECK(hc_lhist_lower(i) <= v[k]);
    CHECK(v[k] < hc_lhist_upper(i) || hc_lhist_upper(i) == UINT64_MAX);
  }
  for (unsigned i = 24; i + 1 < HC_LHIST_N; i++)
    CHECK_EQ_INT(hc_lhist_upper(i), hc_lhist_lower(i + 1));
  uint64_t h[HC_LHIST_N] = {0};
  h[hc_lhist_index(0)] += 3;
  h[hc_lhist_index(12000000)] += 5; /* 12 ms */
  uint64_t med = hc_lhist_median(h, 8);
  CHECK(med > 11250000 && med < 12750000);
}

static void test_lateness_frame(void) {
  static struct hp_late_rank v[2];
  memset(v, 0, sizeof v);
  v[0].rank = 3;
  v[0].ops = 10;
  v[0].last = 9;
  v[0].hist[5] = 4;
  v[0].hist[300] = 6;
  v[1].rank = 0;
  v[1].ops = 1;
  v[1].hist[0] = 1;
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_lateness(&w, v, 2);
  CHECK(!w.err);
  struct hp_frame_hdr h;
  char why[128];
  CHECK_EQ_INT(hp_frame_parse(w.data, &h, why, sizeof why), 0);
  CHECK_EQ_INT(h.type, HP_MSG_LATENESS);
  const unsigned char *p = w.data + HP_FRAME_HDR;
  struct hp_late_rank *out;
  uint32_t n;
  CHECK_EQ_INT(hp_dec_lateness(p, h.len, &out, &n), 0);
  CHECK_EQ_INT(n, 2);
  if (n == 2) {
    CHECK_EQ_INT(out[0].rank, 3);
    CHECK_EQ_INT(out[0].last, 9);
    CHECK_EQ_INT(out[0].hist[300], 6);
    CHECK_EQ_INT(out[1].hist[0], 1);
  }
  free(out);
  /* every truncation is refused */
  for (size_t k = 0; k < h.len; k++)
    CHECK(hp_dec_lateness(p, k, &out, &n) < 0);
  /* counts that do not add up, last past ops */
  unsigned char *q = malloc(h.len);
  memcpy(q, p, h.len);
  q[4 + 4 + 8] = 11; /* rank 3's last: 11 > 10 ops */
  CHECK(hp_dec_lateness(q, h.len, &out, &n) < 0);
  memcpy(q, p, h.len);
  q[4 + 4] = 11; /* its ops: 11, its histogram holds 10 */
  CHECK(hp_dec_lateness(q, h.len, &out, &n) < 0);
  free(q);
  hp_wbuf_free(&w);
}

/* NEGO_READY's arrival offsets travel whole; a count the frame cannot
 * hold is refused. */
static void test_ready_arrivals(void) {
  struct hp_nego_ready m, o;
  memset(&m, 0, sizeof m);
  snprintf(m.name, sizeof m.name, "grad");
  unsigned char b[24];
  for (uint32_t i = 0; i < 3; i++) hp_arrive_store(b, i, 1000 * i + 7);
  hp_arrive_store(b, 2, UINT64_MAX);
  m.narrive = 3;
  m.arrive = b;
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_nego_ready(&w, &m);
  const unsigned char *p = w.data + HP_FRAME_HDR;
  size_t n = w.len - HP_FRAME_HDR;
  CHECK_EQ_INT(hp_dec_nego_ready(p, n, &o), 0);
  CHECK_EQ_INT(o.narrive, 3);
  CHECK(hp_nego_ready_before(&o, 0) == 7);
  CHECK(hp_nego_ready_before(&o, 1) == 1007);
  CHECK(hp_nego_ready_before(&o, 2) == UINT64_MAX);
  CHECK(hp_nego_ready_before(&o, 3) == UINT64_MAX); /* past the end */
  /* the frame ends with the count, the offsets and the (empty) data of a
   * small allreduce's part: 4 + 24 + 4 bytes */
  CHECK(hp_dec_nego_ready(p, n - 1, &o) < 0);
  CHECK(hp_dec_nego_ready(p, n - 4 - 24, &o) < 0); /* count, no offsets */
  unsigned char *q = malloc(n);
  memcpy(q, p, n);
  q[n - 4 - 24 - 4] = 4; /* one more offset than the frame holds */
  CHECK(hp_dec_nego_ready(q, n, &o) < 0);
  free(q);
  hp_wbuf_free(&w);
  m.narrive = 0; /* none */
  hp_wbuf_init(&w);
  hp_enc_nego_ready(&w, &m);
  CHECK_EQ_INT(hp_dec_nego_ready(w.data + HP_FRAME_HDR,
                                 w.len - HP_FRAME_HDR, &o), 0);
  CHECK_EQ_INT(o.narrive, 0);
  hp_wbuf_free(&w);
}

static void test_straggler(void) {
  static struct hp_late_rank acc[4], v[4];
  memset(acc, 0, sizeof acc);
  memset(v, 0, sizeof v);
  int pct;
  unsigned long long med;
  for (int r = 0; r < 4; r++) {
    v[r].rank = r;
    v[r].ops = 30;
    v[r].last = r == 3 ? 26 : 1;
    v[r].hist[hc_lhist_index(r == 3 ? 12000000 : 1000)] = 30;
  }
  char why[128];
  CHECK_EQ_INT(hr_late_merge(acc, 4, v, 4, why, sizeof why), 0);
  CHECK_EQ_INT(hr_straggler(acc, 4, &pct, &med), 3);
  CHECK_EQ_INT(pct, 86);
  CHECK(med > 11000000 && med < 13000000);
  /* too few operations */
  memset(acc, 0, sizeof acc);
  for (int r = 0; r < 4; r++) {
    v[r].ops = 19;
    v[r].last = r == 3 ? 19 : 0;
    memset(v[r].hist, 0, sizeof v[r].hist);
    v[r].hist[hc_lhist_index(r == 3 ? 12000000 : 0)] = 19;
  }
  hr_late_merge(acc, 4, v, 4, why, sizeof why);
  CHECK_EQ_INT(hr_straggler(acc, 4, &pct, &med), -1);
  /* two daemons' halves add up to enough */
  hr_late_merge(acc, 4, v, 4, why, sizeof why);
  CHECK_EQ_INT(hr_straggler(acc, 4, &pct, &med), 3);
  /* last often, but by less than a millisecond */
  memset(acc, 0, sizeof acc);
  for (int r = 0; r < 4; r++) {
    memset(v[r].hist, 0, sizeof v[r].hist);
    v[r].hist[hc_lhist_index(r == 3 ? 200000 : 0)] = 19;
  }
  hr_late_merge(acc, 4, v, 4, why, sizeof why);
  hr_late_merge(acc, 4, v, 4, why, sizeof why);
  CHECK_EQ_INT(hr_straggler(acc, 4, &pct, &med), -1);
  /* last in fewer than half */
  memset(acc, 0, sizeof acc);
  for (int r = 0; r < 4; r++) {
    v[r].ops = 40;
    v[r].last = r == 3 ? 19 : 7;
    memset(v[r].hist, 0, sizeof v[r].hist);
    v[r].hist[hc_lhist_index(5000000)] = 40;
  }
  hr_late_merge(acc, 4, v, 4, why, sizeof why);
  CHECK_EQ_INT(hr_straggler(acc, 4, &pct, &med), -1);
  v[0].rank = 4;
  CHECK(hr_late_merge(acc, 4, v, 1, why, sizeof why) < 0);
}

static void test_log_spec(void) {
  char why[256];
  CHECK_EQ_INT(hc_log_check_spec("mesh:debug,engine:info", why, sizeof why),
               0);
  CHECK_EQ_INT(hc_log_check_spec("debug", why, sizeof why), 0);
  CHECK_EQ_INT(hc_log_check_spec("error,nego:TRACE", why, sizeof why), 0);
  CHECK(hc_log_check_spec("", why, sizeof why) < 0);
  CHECK(hc_log_check_spec("mesh:loud", why, sizeof why) < 0);
  CHECK(strstr(why, "unknown level 'loud'") != NULL);
  CHECK(hc_log_check_spec("disk:debug", why, sizeof why) < 0);
  CHECK(strstr(why, "unknown subsystem 'disk'") != NULL);
  CHECK(hc_log_check_spec("mesh:debug,,info", why, sizeof why) < 0);
  enum hc_level saved = hc_log_level();
  CHECK_EQ_INT(hc_log_apply_spec("error,mesh:debug,engine:info"), 0);
  CHECK_EQ_INT(hc_log_levels[HC_SUB_MESH], HC_DEBUG);
  CHECK_EQ_INT(hc_log_levels[HC_SUB_ENGINE], HC_INFO);
  CHECK_EQ_INT(hc_log_levels[HC_SUB_NEGO], HC_ERROR);
  CHECK(hc_log_apply_spec("mesh:warning,x:y") < 0); /* nothing changed */
  CHECK_EQ_INT(hc_log_levels[HC_SUB_MESH], HC_DEBUG);
  /* the knob's check is the same */
  const struct hc_param *p = hc_param_find("log");
  CHECK(p && hc_param_check(p, "ctl:info", why, sizeof why) == 0);
  CHECK(p && hc_param_check(p, "ctl:nope", why, sizeof why) < 0);
  hc_log_set_level(saved);
}

static void sleep_ms(int ms) {
  struct timespec ts = {0, ms * 1000000L};
  nanosleep(&ts, NULL);
}

/* The value of the series that line starts with in text, or -1. */
static double value_of(const char *text, const char *series) {
  size_t n = strlen(series);
  for (const char *p = text; (p = strstr(p, series)); p++)
    if ((p == text || p[-1] == '\n') && p[n] == ' ')
      return strtod(p + n + 1, NULL);
  return -1;
}

static struct hp_sqe allreduce(struct fx *f, int r, const char *name,
                               uint64_t count) {
  struct hp_sqe e = fx_sqe(next_id++, HORA_COLL_ALLREDUCE, HORA_FLOAT32,
                           HORA_SUM, count, name);
  fx_in(f, r, &e, 0);
  return e;
}

/* One host of three ranks: rank 2 submits 3 ms after the others. */
static void test_render_one_host(void) {
  struct fx f;
  fx_init1(&f, 3);
  f.daemon.jobs = &f.job; /* what the fixture leaves out */
  CHECK_EQ_INT(hd_metrics_job(&f.job), 0);
  for (int k = 0; k < 4; k++) {
    char name[16];
    snprintf(name, sizeof name, "t%d", k);
    for (int r = 0; r < 3; r++) {
      if (r == 2) sleep_ms(3);
      struct hp_sqe e = allreduce(&f, r, name, 16);
      fx_submit(&f, r, &e);
    }
  }
  struct hp_sqe b = fx_sqe(next_id++, HORA_COLL_BARRIER, 0, 0, 0, "b");
  for (int r = 0; r < 3; r++) fx_submit(&f, r, &b);
  size_t len;
  char *text = hd_metrics_render(&f.daemon, &len);
  CHECK(text && strlen(text) == len);
  if (!text) return;
  CHECK_EQ_INT(value_of(text, "hora_operations_total{host=\"h0\","
                              "collective=\"allreduce\",dtype=\"float32\","
                              "comm=\"0\"}"), 4);
  CHECK_EQ_INT(value_of(text, "hora_operation_bytes_total{host=\"h0\","
                              "collective=\"allreduce\",dtype=\"float32\","
                              "comm=\"0\"}"), 4 * 16 * 4);
  CHECK_EQ_INT(value_of(text, "hora_operations_total{host=\"h0\","
                              "collective=\"barrier\",dtype=\"none\","
                              "comm=\"0\"}"), 1);
  CHECK_EQ_INT(value_of(text, "hora_operation_latency_seconds_count{host="
                              "\"h0\",collective=\"allreduce\"}"), 4);
  /* each took 3 ms at least, from the first submission */
  CHECK_EQ_INT(value_of(text, "hora_operation_latency_seconds_bucket{host="
                              "\"h0\",collective=\"allreduce\",le=\"0.0025\""
                              "}"), 0);
  CHECK_EQ_INT(value_of(text, "hora_lateness_operations_total{host=\"h0\"}"),
               5);
  CHECK_EQ_INT(value_of(text, "hora_rank_last_total{host=\"h0\",rank=\"2\","
                              "rank_host=\"h0\"}"), 5); /* and the barrier */
  CHECK_EQ_INT(value_of(text, "hora_rank_lateness_seconds_bucket{host=\"h0\""
                              ",rank=\"2\",rank_host=\"h0\",le=\"0.0025\"}"),
               1); /* the barrier */
  CHECK_EQ_INT(value_of(text, "hora_rank_lateness_seconds_count{host=\"h0\","
                              "rank=\"2\",rank_host=\"h0\"}"), 5);
  CHECK(value_of(text, "hora_deadlocks_total{host=\"h0\"}") == 0);
  CHECK(value_of(text, "hora_fused_collectives_total{host=\"h0\"}") == 0);
  hd_metrics_deadlock(&f.job);
  hd_metrics_stall(&f.job, 0);
  hd_metrics_fused(&f.job, 7);
  hd_metrics_fused(&f.job, 2);
  free(text);
  text = hd_metrics_render(&f.daemon, &len);
  CHECK(value_of(text, "hora_fused_collectives_total{host=\"h0\"}") == 2);
  CHECK(value_of(text, "hora_fused_tensors_total{host=\"h0\"}") == 9);
  CHECK(value_of(text, "hora_deadlocks_total{host=\"h0\"}") == 1);
  CHECK(value_of(text, "hora_stall_warnings_total{host=\"h0\"}") == 1);
  /* every line is a comment or NAME{labels} VALUE */
  for (char *p = text; *p;) {
    char *nl = strchr(p, '\n');
    CHECK(nl != NULL);
    if (!nl) break;
    if (*p != '#') {
      char *sp = memchr(p, ' ', (size_t)(nl - p));
      CHECK(sp && sp[-1] == '}' && memchr(p, '{', (size_t)(sp - p)));
    }
    p = nl + 1;
  }
  free(text);
  hd_metrics_free(&f.job);
  fx_free(&f);
}

/* A READY held until its set is added keeps its ranks' arrival times:
 * replayed later, its offsets have grown by the wait. */
static void test_hold(void) {
  struct hp_nego_ready m;
  memset(&m, 0, sizeof m);
  unsigned char b[16];
  hp_arrive_store(b, 0, 1000000); /* 1 ms before */
  hp_arrive_store(b, 1, UINT64_MAX);
  m.narrive = 2;
  m.arrive = b;
  unsigned char *kept = hd_metrics_hold(&m);
  CHECK(kept != NULL);
  CHECK(m.arrive == NULL); /* the frame's bytes are not kept */
  sleep_ms(5);
  hd_metrics_unhold(&m, kept);
  CHECK(m.arrive == kept);
  CHECK_EQ_INT(m.narrive, 2);
  uint64_t b0 = hp_nego_ready_before(&m, 0);
  CHECK(b0 >= 6000000 && b0 < 1000000000);
  CHECK(hp_nego_ready_before(&m, 1) == UINT64_MAX);
  free(kept);
  m.arrive = NULL; /* none to keep */
  m.narrive = 0;
  CHECK(hd_metrics_hold(&m) == NULL);
  hd_metrics_unhold(&m, NULL);
  CHECK_EQ_INT(m.narrive, 0);
}

/* The stall inspector's warnings and failures are counted. */
static void test_stalls(void) {
  struct fx f;
  fx_init1(&f, 2);
  f.daemon.jobs = &f.job;
  CHECK_EQ_INT(hd_metrics_job(&f.job), 0);
  f.job.stall_warn_ns = 1000000;  /* 1 ms */
  f.job.stall_fail_ns = 20000000; /* 20 ms */
  struct hp_sqe e = allreduce(&f, 0, "alone", 4);
  fx_submit(&f, 0, &e);
  sleep_ms(3);
  hd_check_stalls(&f.job);
  hd_check_stalls(&f.job); /* warned once */
  size_t len;
  char *text = hd_metrics_render(&f.daemon, &len);
  CHECK(value_of(text, "hora_stall_warnings_total{host=\"h0\"}") == 1);
  CHECK(value_of(text, "hora_stalled_operations_total{host=\"h0\"}") == 0);
  free(text);
  sleep_ms(20);
  hd_check_stalls(&f.job);
  text = hd_metrics_render(&f.daemon, &len);
  CHECK(value_of(text, "hora_stalled_operations_total{host=\"h0\"}") == 1);
  CHECK_EQ_INT(value_of(text, "hora_operation_failures_total{host=\"h0\","
                              "collective=\"allreduce\",dtype=\"float32\","
                              "comm=\"0\"}"), 1);
  free(text);
  hd_metrics_free(&f.job);
  fx_free(&f);
}

/* The coordinator (host 0 of three, one rank each) places the other
 * hosts' ranks by their READY's offsets. */
static void test_coord_arrivals(void) {
  struct fx f;
  const int per[3] = {1, 1, 1};
  fx_init(&f, 3, per, 0);
  f.daemon.jobs = &f.job; /* what the fixture leaves out */
  CHECK_EQ_INT(hd_metrics_job(&f.job), 0);
  struct hp_sqe b = fx_sqe(next_id++, HORA_COLL_BARRIER, 0, 0, 0, "b1");
  fx_submit(&f, 0, &b); /* rank 0, now */
  struct hd_comm *c = f.job.comms[0];
  struct hp_nego_ready m;
  memset(&m, 0, sizeof m);
  snprintf(m.name, sizeof m.name, "b1");
  m.coll = HORA_COLL_BARRIER;
  m.prescale = m.postscale = 1;
  unsigned char off[8];
  m.narrive = 1;
  m.arrive = off;
  hp_arrive_store(off, 0, 0); /* rank 1 submitted just now */
  m.rank = 1;
  sleep_ms(5);
  hd_coord_ready(c, 1, &m);
  hp_arrive_store(off, 0, 50000000); /* rank 2, 50 ms ago: the first */
  m.rank = 2;
  hd_coord_ready(c, 2, &m);
  hd_run_ready(&f.job);
  size_t len;
  char *text = hd_metrics_render(&f.daemon, &len);
  CHECK(text != NULL);
  if (!text) return;
  CHECK_EQ_INT(value_of(text, "hora_lateness_operations_total{host=\"h0\"}"),
               1);
  CHECK_EQ_INT(value_of(text, "hora_rank_last_total{host=\"h0\",rank=\"1\","
                              "rank_host=\"h1\"}"), 1);
  CHECK_EQ_INT(value_of(text, "hora_rank_last_total{host=\"h0\",rank=\"0\","
                              "rank_host=\"h0\"}"), 0);
  /* rank 2 was first: lateness 0; ranks 0 and 1 45-55 ms behind it */
  CHECK_EQ_INT(value_of(text, "hora_rank_lateness_seconds_bucket{host=\"h0\""
                              ",rank=\"2\",rank_host=\"h2\",le=\"1e-05\"}"),
               1);
  CHECK_EQ_INT(value_of(text, "hora_rank_lateness_seconds_bucket{host=\"h0\""
                              ",rank=\"0\",rank_host=\"h0\",le=\"0.025\"}"),
               0);
  CHECK_EQ_INT(value_of(text, "hora_rank_lateness_seconds_bucket{host=\"h0\""
                              ",rank=\"1\",rank_host=\"h1\",le=\"0.1\"}"),
               1);
  free(text);
  /* a READY whose offsets do not match the host's ranks leaves its ranks
   * out */
  b = fx_sqe(next_id++, HORA_COLL_BARRIER, 0, 0, 0, "b2");
  fx_submit(&f, 0, &b);
  snprintf(m.name, sizeof m.name, "b2");
  m.narrive = 0;
  hd_coord_ready(c, 1, &m);
  m.narrive = 1;
  hd_coord_ready(c, 2, &m);
  hd_run_ready(&f.job);
  text = hd_metrics_render(&f.daemon, &len);
  CHECK_EQ_INT(value_of(text, "hora_lateness_operations_total{host=\"h0\"}"),
               2);
  CHECK_EQ_INT(value_of(text, "hora_rank_lateness_seconds_count{host=\"h0\","
                              "rank=\"1\",rank_host=\"h1\"}"), 1);
  free(text);
  hd_metrics_free(&f.job);
  fx_free(&f);
}

int main(void) {
  hc_log_init("test_metrics", HC_FATAL);
  RUN(test_http);
  RUN(test_lhist);
  RUN(test_lateness_frame);
  RUN(test_ready_arrivals);
  RUN(test_straggler);
  RUN(test_log_spec);
  RUN(test_render_one_host);
  RUN(test_hold);
  RUN(test_stalls);
  RUN(test_coord_arrivals);
  TL_EXIT();
}
