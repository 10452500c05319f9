/* test_timeline.c -- the timeline (daemon/timeline.c): the JSON writer
 * leaves a document that parses after every flush, tensor names are
 * escaped (quotes, backslashes, control characters, bytes that are no
 * UTF-8), rank 0's start/stop requests, other hosts' TIMELINE frames
 * merged into host 0's file on their host's thread, and malformed frames
 * refused with a reason (never a crash). */
#include <fcntl.h>
#include <unistd.h>

#include "daemon_fixture.h"
#include "timeline.h"

/* ---- a strict JSON validator --------------------------------------------- */

struct js {
  const char *p, *end;
  int depth;
};

static void ws(struct js *s) {
  while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\t' ||
                           *s->p == '\r'))
    s->p++;
}

static int lit(struct js *s, const char *w) {
  size_t n = strlen(w);
  if ((size_t)(s->end - s->p) < n || memcmp(s->p, w, n)) return 0;
  s->p += n;
  return 1;
}

static int utf8_ok(const unsigned char *p, const unsigned char *end,
                   int *len) {
  unsigned c = p[0];
  int n = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef
                                                      ? 3
                                                  : c >= 0xf0 && c <= 0xf4
                                                      ? 4
                                                      : 0;
  if (!n || end - p < n) return 0;
  for (int i = 1; i < n; i++)
    if ((p[i] & 0xc0) != 0x80) return 0;
  *len = n;
  return 1;
}

static int str(struct js *s) {
  if (s->p >= s->end || *s->p != '"') return 0;
  s->p++;
  while (s->p < s->end && *s->p != '"') {
    unsigned char c = (unsigned char)*s->p;
    if (c < 0x20) return 0;
    if (c == '\\') {
      s->p++;
      if (s->p >= s->end) return 0;
      if (*s->p == 'u') {
        for (int i = 1; i <= 4; i++)
          if (s->p + i >= s->end ||
              !strchr("0123456789abcdefABCDEF", s->p[i]))
            return 0;
        s->p += 5;
      } else if (strchr("\"\\/bfnrt", *s->p)) {
        s->p++;
      } else {
        return 0;
      }
      continue;
    }
    int n;
    if (!utf8_ok((const unsigned char *)s->p, (const unsigned char *)s->end,
                 &n))
      return 0;
    s->p += n;
  }
  if (s->p >= s->end) return 0;
  s->p++;
  return 1;
}

static int value(struct js *s);

static int number(struct js *s) {
  const char *b = s->p;
  if (s->p < s->end && *s->p == '-') s->p++;
  while (s->p < s->end && (strchr("0123456789.eE+-", *s->p))) s->p++;
  return s->p > b;
}

static int container(struct js *s, char open, char close, int obj) {
  if (*s->p != open) return 0;
  s->p++;
  if (++s->depth > 64) return 0;
  ws(s);
  if (s->p < s->end && *s->p == close) {
    s->p++;
    s->depth--;
    return 1;
  }
  for (;;) {
    ws(s);
    if (obj) {
      if (!str(s)) return 0;
      ws(s);
      if (s->p >= s->end || *s->p != ':') return 0;
      s->p++;
      ws(s);
    }
    if (!value(s)) return 0;
    ws(s);
    if (s->p >= s->end) return 0;
    if (*s->p == ',') {
      s->p++;
      continue;
    }
    if (*s->p != close) return 0;
    s->p++;
    s->depth--;
    return 1;
  }
}

static int value(struct js *s) {
  ws(s);
  if (s->p >= s->end) return 0;
  switch (*s->p) {
  case '{': return container(s, '{', '}', 1);
  case '[': return container(s, '[', ']', 0);
  case '"': return str(s);
  case 't': return lit(s, "true");
  case 'f': return lit(s, "false");
  case 'n': return lit(s, "null");
  default: return number(s);
  }
}

/* 1 when text is one JSON document. */
static int json_valid(const char *text, size_t n) {
  struct js s = {text, text + n, 0};
  if (!value(&s)) return 0;
  ws(&s);
  return s.p == s.end;
}

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = malloc(1 << 22);
  *n = fread(buf, 1, (1 << 22) - 1, f);
  buf[*n] = '\0';
  fclose(f);
  return buf;
}

static size_t count(const char *hay, const char *needle) {
  size_t k = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) k++;
  return k;
}

static char dir[] = "/tmp/hora-test-timeline-XXXXXX";

/* ---- the writer ---------------------------------------------------------- */

static void test_json_str(void) {
  char b[128];
  hd_tl_json_str(b, sizeof b, "plain");
  CHECK_EQ_STR(b, "\"plain\"");
  hd_tl_json_str(b, sizeof b, "q\"b\\n\nt\tc\x01\x1f del\x7f");
  CHECK_EQ_STR(b, "\"q\\\"b\\\\n\\u000at\\u0009c\\u0001\\u001f del\\u007f\"");
  /* UTF-8 passes, a byte that is none becomes its code point */
  hd_tl_json_str(b, sizeof b, "caf\xc3\xa9 \xff \xc3( \xe2\x82\xac");
  CHECK_EQ_STR(b, "\"caf\xc3\xa9 \\u00ff \\u00c3( \xe2\x82\xac\"");
  /* overlong and surrogate encodings are not UTF-8 */
  hd_tl_json_str(b, sizeof b, "\xc0\xaf\xed\xa0\x80");
  CHECK_EQ_STR(b, "\"\\u00c0\\u00af\\u00ed\\u00a0\\u0080\"");
  /* a short buffer: the length it needs, and a terminated prefix */
  char s[6];
  CHECK_EQ_INT(hd_tl_json_str(s, sizeof s, "abcdefgh"), 10);
  CHECK_EQ_STR(s, "\"abcd");
  CHECK_EQ_INT(hd_tl_json_str(NULL, 0, "\""), 4);
  CHECK(json_valid(b, strlen(b)));
}

static void test_valid_after_each_flush(void) {
  char path[128], why[256];
  snprintf(path, sizeof path, "%s/each.json", dir);
  struct hd_tl_writer w;
  CHECK_EQ_INT(hd_tlw_open(&w, path, 1234567, why, sizeof why), 0);
  size_t n;
  char *text = slurp(path, &n);
  CHECK(text && json_valid(text, n));
  CHECK(text && strstr(text, "\"start_time_since_epoch_in_micros\": 1234567"));
  free(text);
  const char *names[] = {"grad.fc7", "q\"uote", "back\\slash", "new\nline",
                         "\x01\x02\x03", "caf\xc3\xa9", "bad\xff\xfe", ""};
  for (int i = 0; i < 200; i++) {
    const char *t = names[i % 8];
    hd_tlw_event(&w, t, i % 3, 'B', "NEGOTIATE_ALLREDUCE", i * 10, NULL);
    hd_tlw_event(&w, t, i % 3, 'X', "1", i * 10 + 1, NULL);
    hd_tlw_event(&w, t, i % 3, 'E', "", i * 10 + 2,
                 "\"dtype\": \"float32\", \"shape\": \"[3]\"");
    if (i % 50 == 7) hd_tlw_marker(&w, "CYCLE_START", i * 10, NULL);
    if (i % 3 == 0) {
      CHECK_EQ_INT(hd_tlw_flush(&w), 0);
      text = slurp(path, &n);
      CHECK(text && json_valid(text, n));
      free(text);
    }
  }
  CHECK_EQ_INT(hd_tlw_flush(&w), 0);
  CHECK_EQ_INT(hd_tlw_flush(&w), 0); /* nothing new: the same document */
  text = slurp(path, &n);
  CHECK(text && json_valid(text, n));
  /* one row per name: its name and sort index once */
  CHECK_EQ_INT(count(text, "\"process_name\""), 9);
  CHECK(strstr(text, "\"name\": \"q\\\"uote\"") != NULL);
  CHECK(strstr(text, "\"name\": \"new\\u000aline\"") != NULL);
  CHECK(strstr(text, "\"name\": \"bad\\u00ff\\u00fe\"") != NULL);
  CHECK_EQ_INT(count(text, "\"ph\": \"X\""), 200);
  CHECK_EQ_INT(count(text, "\"dur\": 0"), 200);
  CHECK_EQ_INT(count(text, "CYCLE_START"), 4);
  free(text);
  CHECK_EQ_INT(hd_tlw_close(&w), 0);
  /* a big batch flushes on its own, and stays valid */
  CHECK_EQ_INT(hd_tlw_open(&w, path, 1, why, sizeof why), 0);
  char big[300];
  memset(big, 'n', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  for (int i = 0; i < 3000; i++) {
    big[i % 250] = (char)('a' + i % 26);
    hd_tlw_event(&w, big, 0, 'B', "ALLREDUCE", i, NULL);
    hd_tlw_event(&w, big, 0, 'E', "", i, NULL);
  }
  text = slurp(path, &n);
  CHECK(n > 256u << 10); /* written before any flush */
  CHECK(text && json_valid(text, n));
  free(text);
  CHECK_EQ_INT(hd_tlw_close(&w), 0);
  text = slurp(path, &n);
  CHECK(text && json_valid(text, n));
  free(text);
  /* a file that cannot be made: why names it */
  snprintf(path, sizeof path, "%s/no/such/t.json", dir);
  CHECK(hd_tlw_open(&w, path, 1, why, sizeof why) < 0);
  CHECK(strstr(why, "no/such/t.json") != NULL);
}

/* ---- the job's timeline ------------------------------------------------- */

static struct hp_sqe tl_req(struct fx *f, int i, uint64_t id, int start,
                            const char *path) {
  struct hp_sqe e;
  memset(&e, 0, sizeof e);
  e.id = id;
  e.kind = HP_SQ_TIMELINE;
  e.flags = start ? 1u | 2u : 0u;
  if (start) {
    memcpy(fx_arena(f, i, 8192), path, strlen(path));
    e.flags |= HP_F_AUX;
    e.aux_offset = fx_aoff(f, i, 8192);
    e.aux_count = strlen(path);
  }
  return e;
}

/* A TIMELINE EVENTS frame's payload from another host. */
static void events_frame(struct hp_wbuf *w, uint32_t epoch, uint64_t dropped,
                         uint64_t ts, const char *tensor) {
  hp_wbuf_reset(w);
  hp_put_u8(w, 6); /* EVENTS */
  hp_put_u32(w, epoch);
  hp_put_u64(w, dropped);
  hp_put_u32(w, 3);
  const char ph[3] = {'B', 'X', 'E'};
  const char *nm[3] = {"NEGOTIATE_ALLREDUCE", "2", ""};
  for (int i = 0; i < 3; i++) {
    hp_put_u8(w, (uint8_t)ph[i]);
    hp_put_u64(w, ts + (uint64_t)i * 1000);
    hp_put_str(w, tensor);
    hp_put_str(w, nm[i]);
    hp_put_str(w, "");
  }
}

static void test_host0(void) {
  struct fx f;
  int per[2] = {2, 1};
  fx_init(&f, 2, per, 0);
  uv_loop_t loop;
  uv_loop_init(&loop);
  f.daemon.loop = &loop;
  struct hd_job *job = &f.job;
  char path[128], why[256];
  snprintf(path, sizeof path, "%s/host0.json", dir);
  /* rank 1's request does nothing; rank 0's opens the file */
  struct hp_sqe e = tl_req(&f, 1, 7, 1, path);
  hd_tl_request(fx_rank(&f, 1), &e);
  EXPECT_DONE(&f, 1, 7, 0);
  CHECK(access(path, F_OK) != 0);
  e = tl_req(&f, 0, 8, 1, path);
  hd_tl_request(fx_rank(&f, 0), &e);
  EXPECT_DONE(&f, 0, 8, 0);
  CHECK(access(path, F_OK) == 0);
  CHECK(hd_tl_on(job->tl));
  HD_TL_HOOK(job, hd_tl_cycle_(job)); /* rings.c's, a pass with work */
  /* a bad request: the name outside the arena */
  e = tl_req(&f, 0, 9, 1, path);
  e.aux_offset = 16;
  hd_tl_request(fx_rank(&f, 0), &e);
  EXPECT_MSG(&f, 0, 9, HORA_EINVAL, "bad timeline request");
  /* the local ranks' allreduce: negotiating, waiting for host 1 */
  for (int i = 0; i < 2; i++) {
    struct hp_sqe s = fx_sqe(100 + (uint64_t)i, HORA_COLL_ALLREDUCE,
                             HORA_FLOAT32, HORA_SUM, 4, "grad \"w\"");
    fx_submit(&f, i, &s);
  }
  /* host 1's events, in host 0's clock */
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  events_frame(&w, 1, 0, hc_now_ns(), "grad \"w\"");
  CHECK_EQ_INT(hd_tl_frame(job, 1, w.data, w.len, why, sizeof why), 0);
  events_frame(&w, 1, 5, hc_now_ns(), "other");
  CHECK_EQ_INT(hd_tl_frame(job, 1, w.data, w.len, why, sizeof why), 0);
  /* of another timeline: ignored */
  events_frame(&w, 9, 0, hc_now_ns(), "stale");
  CHECK_EQ_INT(hd_tl_frame(job, 1, w.data, w.len, why, sizeof why), 0);
  /* malformed ones are refused, saying so */
  events_frame(&w, 1, 0, hc_now_ns(), "x");
  for (size_t cut = 0; cut < w.len; cut += 3) {
    why[0] = '\0';
    CHECK(hd_tl_frame(job, 1, w.data, cut, why, sizeof why) < 0);
    CHECK(strstr(why, "TIMELINE") != NULL);
  }
  hp_put_u8(&w, 0); /* trailing byte */
  CHECK(hd_tl_frame(job, 1, w.data, w.len, why, sizeof why) < 0);
  events_frame(&w, 1, 0, hc_now_ns(), "x");
  w.data[1 + 4 + 8 + 4] = 'Q'; /* a phase that is none */
  CHECK(hd_tl_frame(job, 1, w.data, w.len, why, sizeof why) < 0);
  hp_wbuf_reset(&w);
  hp_put_u8(&w, 1); /* START, which only host 0 sends */
  hp_put_u32(&w, 2);
  hp_put_u8(&w, 0);
  CHECK(hd_tl_frame(job, 1, w.data, w.len, why, sizeof why) < 0);
  hp_wbuf_reset(&w);
  hp_put_u8(&w, 77);
  CHECK(hd_tl_frame(job, 1, w.data, w.len, why, sizeof why) < 0);
  /* random bytes: refused or taken, never a crash (ASan) */
  srand(7);
  for (int k = 0; k < 2000; k++) {
    unsigned char junk[64];
    size_t n = (size_t)(rand() % 64);
    for (size_t i = 0; i < n; i++) junk[i] = (unsigned char)rand();
    if (n) junk[0] = (unsigned char)(1 + rand() % 7);
    hd_tl_frame(job, 1, junk, n, why, sizeof why);
  }
  hp_wbuf_free(&w);
  /* rank 0 stops it: host 1 has no link here, so it ends at once */
  e = tl_req(&f, 0, 10, 0, NULL);
  hd_tl_request(fx_rank(&f, 0), &e);
  EXPECT_DONE(&f, 0, 10, 0);
  CHECK(!hd_tl_on(job->tl));
  size_t n;
  char *text = slurp(path, &n);
  CHECK(text && json_valid(text, n));
  CHECK(text && strstr(text, "\"name\": \"grad \\\"w\\\"\""));
  CHECK(text && strstr(text, "\"name\": \"NEGOTIATE_ALLREDUCE\", \"ts\""));
  /* host 1's events on thread 1, named by the host */
  CHECK(text && strstr(text, "\"tid\": 1, \"args\": {\"name\": \"host h1 "
                             "(rank 2)\"}"));
  CHECK(text && strstr(text, "\"ph\": \"X\", \"name\": \"2\""));
  CHECK(text && strstr(text, "EVENTS_DROPPED"));
  CHECK(text && !strstr(text, "stale"));
  CHECK(text && count(text, "CYCLE_START") >= 1);
  free(text);
  hd_tl_close(job);
  uv_run(&loop, UV_RUN_NOWAIT);
  hd_tl_free(job);
  fx_free(&f);
  uv_loop_close(&loop);
}

static void test_other_host(void) {
  struct fx f;
  int per[2] = {1, 2};
  fx_init(&f, 2, per, 1);
  uv_loop_t loop;
  uv_loop_init(&loop);
  f.daemon.loop = &loop;
  struct hd_job *job = &f.job;
  char why[256];
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  /* host 0 starts timeline 3 */
  hp_put_u8(&w, 1);
  hp_put_u32(&w, 3);
  hp_put_u8(&w, 1);
  CHECK(hd_tl_frame(job, 1, w.data, w.len, why, sizeof why) < 0); /* not 0 */
  CHECK_EQ_INT(hd_tl_frame(job, 0, w.data, w.len, why, sizeof why), 0);
  CHECK(hd_tl_on(job->tl));
  struct hp_sqe s = fx_sqe(5, HORA_COLL_ALLREDUCE, HORA_FLOAT32, HORA_SUM, 4,
                           "t");
  fx_submit(&f, 0, &s);
  /* a PONG: the clock sample */
  hp_wbuf_reset(&w);
  hp_put_u8(&w, 5);
  uint64_t now = hc_now_ns();
  hp_put_u64(&w, now - 1000);
  hp_put_u64(&w, now + 5000000);
  CHECK_EQ_INT(hd_tl_frame(job, 0, w.data, w.len, why, sizeof why), 0);
  /* one from the future is refused */
  hp_wbuf_reset(&w);
  hp_put_u8(&w, 5);
  hp_put_u64(&w, now + 60000000000ull);
  hp_put_u64(&w, now);
  CHECK(hd_tl_frame(job, 0, w.data, w.len, why, sizeof why) < 0);
  /* EVENTS and PING go to host 0, not here */
  events_frame(&w, 3, 0, now, "t");
  CHECK(hd_tl_frame(job, 0, w.data, w.len, why, sizeof why) < 0);
  hd_tl_flush(job); /* the batch is dropped: no link in the fixture */
  /* STOP */
  hp_wbuf_reset(&w);
  hp_put_u8(&w, 2);
  hp_put_u32(&w, 3);
  hp_put_u8(&w, 0);
  CHECK_EQ_INT(hd_tl_frame(job, 0, w.data, w.len, why, sizeof why), 0);
  CHECK(!hd_tl_on(job->tl));
  hp_wbuf_free(&w);
  hd_tl_close(job);
  uv_run(&loop, UV_RUN_NOWAIT);
  hd_tl_free(job);
  fx_free(&f);
  uv_loop_close(&loop);
}

int main(void) {
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  RUN(test_json_str);
  RUN(test_valid_after_each_flush);
  RUN(test_host0);
  RUN(test_other_host);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  TL_EXIT();
}
