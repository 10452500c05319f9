/* test_msg.c -- the framed message codecs of proto/msg.h: round trips of
 * every message, the stream decoder (byte by byte, whole, truncated),
 * malformed headers and payloads, absurd counts, and a fixed-seed fuzz loop
 * over every decoder (run it under ASan: it must not crash or leak). */
#include <stdint.h>

#include "common.h"
#include "msg.h"
#include "shm.h"
#include "testlib.h"

/* ---- helpers ------------------------------------------------------------- */

static uint64_t rng = 0x853c49e6748fea9bull;
static uint32_t rnd(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng >> 33);
}

/* Checks the header of the one frame in w and returns its payload. */
static const unsigned char *one_frame(const struct hp_wbuf *w, uint16_t type,
                                      size_t *n) {
  struct hp_frame_hdr h;
  char why[128] = "";
  CHECK(w->err == 0);
  CHECK(w->len >= HP_FRAME_HDR);
  if (w->len < HP_FRAME_HDR) return NULL;
  CHECK_EQ_INT(hp_frame_parse(w->data, &h, why, sizeof why), 0);
  CHECK_EQ_INT(h.magic, HP_FRAME_MAGIC);
  CHECK_EQ_INT(h.version, HP_PROTO_VERSION);
  CHECK_EQ_INT(h.type, type);
  CHECK_EQ_INT(h.len, w->len - HP_FRAME_HDR);
  *n = h.len;
  return w->data + HP_FRAME_HDR;
}

static void put_le32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

/* ---- samples of every message -------------------------------------------- */

static char *argv_s[] = {"python3", "train.py", "--lr=0.1", "", "ünïcødé"};
static char *envp_s[] = {"HORA_RANK=3", "PATH=/usr/bin:/bin", "EMPTY="};
static struct hp_job_rank ranks_s[] = {
    {4, 0, 1, 2}, {5, 1, 1, 2}, {6, 2, 1, 2}};

static struct hp_job_host hosts_s[] = {{"node-a", "169.254.1.1", 4000, 0, 4},
                                       {"node-b", "169.254.1.2", 4001, 4, 4}};

static struct hp_job sample_job(void) {
  struct hp_job j = {0};
  j.host_index = 1;
  j.nhosts = 2;
  j.hosts = hosts_s;
  j.size = 8;
  j.local_size = 4;
  j.nlocal = 3;
  j.ranks = ranks_s;
  j.hostname = "node-b.example";
  j.cwd = "/home/u/work dir";
  j.argc = 5;
  j.argv = argv_s;
  j.envc = 3;
  j.envp = envp_s;
  return j;
}

/* Appends one frame of each message type to w. */
static int enc_all(struct hp_wbuf *w) {
  struct hp_hello he = {3, 4242, "0123456789abcdef0123456789abcdef",
                        HP_SHM_VERSION};
  hp_enc_hello(w, &he);
  struct hp_welcome we = {3, 8, 3, 4, 0, 2, 999, 1ull << 40, "host-a", 0};
  hp_enc_welcome(w, &we);
  struct hp_job j = sample_job();
  hp_enc_job(w, &j);
  struct hp_exit ex = {5, HP_EXIT_SIGNAL, 9, "killed by SIGKILL", 0, 0};
  hp_enc_exit(w, &ex);
  static const unsigned char bytes[] = {'o', 'k', 0, '\n', 0xff};
  struct hp_output out = {6, 2, bytes, sizeof bytes};
  hp_enc_output(w, &out);
  hp_enc_text(w, HP_MSG_ABORT, "rank 5 on host b: exited with code 1");
  hp_enc_text(w, HP_MSG_BYE, NULL);
  hp_enc_text(w, HP_MSG_DONE, "");
  return 8; /* frames */
}

static const uint16_t all_types[] = {HP_MSG_HELLO, HP_MSG_WELCOME, HP_MSG_JOB,
                                     HP_MSG_EXIT,  HP_MSG_OUTPUT,  HP_MSG_ABORT,
                                     HP_MSG_BYE,   HP_MSG_DONE};

/* ---- primitives ---------------------------------------------------------- */

static void test_wbuf_rbuf(void) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_put_u8(&w, 0xab);
  hp_put_u16(&w, 0x1234);
  hp_put_u32(&w, 0x01020304);
  hp_put_u64(&w, 0x1122334455667788ull);
  hp_put_str(&w, "hi");
  hp_put_str(&w, NULL);
  static const unsigned char want[] = {0xab, 0x34, 0x12, 0x04, 0x03, 0x02, 0x01,
                                       0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22,
                                       0x11, 2,    0,    0,    0,    'h',  'i',
                                       0,    0,    0,    0};
  CHECK_EQ_INT(w.len, sizeof want);
  CHECK(w.len == sizeof want && !memcmp(w.data, want, sizeof want));
  struct hp_rbuf r;
  hp_rbuf_init(&r, w.data, w.len);
  CHECK_EQ_INT(hp_get_u8(&r), 0xab);
  CHECK_EQ_INT(hp_get_u16(&r), 0x1234);
  CHECK_EQ_INT(hp_get_u32(&r), 0x01020304);
  CHECK(hp_get_u64(&r) == 0x1122334455667788ull);
  char *s = hp_get_str(&r, 10);
  CHECK_EQ_STR(s, "hi");
  free(s);
  s = hp_get_str(&r, 10);
  CHECK_EQ_STR(s, "");
  free(s);
  CHECK_EQ_INT(r.err, 0);
  CHECK_EQ_INT(r.off, r.len);
  /* reading past the end: zero values, a sticky error */
  CHECK_EQ_INT(hp_get_u8(&r), 0);
  CHECK(r.err != 0);
  CHECK_EQ_INT(hp_get_u32(&r), 0);
  /* a string over its limit, a string holding a NUL */
  hp_wbuf_reset(&w);
  hp_put_str(&w, "abcdef");
  hp_rbuf_init(&r, w.data, w.len);
  CHECK(hp_get_str(&r, 5) == NULL);
  CHECK(r.err != 0);
  hp_wbuf_reset(&w);
  hp_put_bytes(&w, "a\0b", 3);
  hp_rbuf_init(&r, w.data, w.len);
  CHECK(hp_get_str(&r, 100) == NULL);
  hp_rbuf_init(&r, w.data, w.len);
  size_t n = 0;
  const unsigned char *p = hp_get_bytes(&r, &n);
  CHECK(p != NULL && n == 3 && p[1] == 0); /* bytes may hold NUL */
  /* a length that points past the end */
  unsigned char lie[6] = {0};
  put_le32(lie, 3);
  hp_rbuf_init(&r, lie, sizeof lie);
  CHECK(hp_get_bytes(&r, &n) == NULL && n == 0 && r.err);
  put_le32(lie, UINT32_MAX);
  hp_rbuf_init(&r, lie, sizeof lie);
  CHECK(hp_get_str(&r, SIZE_MAX) == NULL && r.err);
  hp_wbuf_free(&w);
}

static void test_frame_header(void) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_frame_begin(&w, HP_MSG_READY, 0xdeadbeef);
  hp_put_u32(&w, 7);
  CHECK_EQ_INT(hp_frame_end(&w), 0);
  CHECK_EQ_INT(w.len, HP_FRAME_HDR + 4);
  CHECK(!memcmp(w.data, "HORA", 4)); /* the magic reads as text */
  struct hp_frame_hdr h;
  char why[128];
  CHECK_EQ_INT(hp_frame_parse(w.data, &h, why, sizeof why), 0);
  CHECK_EQ_INT(h.type, HP_MSG_READY);
  CHECK_EQ_INT(h.len, 4);
  CHECK(h.reqid == 0xdeadbeefu);
  /* A payload over HP_FRAME_MAX is refused and the frame taken back. */
  size_t before = w.len;
  unsigned char *big = calloc(1, HP_FRAME_MAX + 1);
  hp_frame_begin(&w, HP_MSG_OUTPUT, 1);
  hp_put_bytes(&w, big, HP_FRAME_MAX); /* + 4 length bytes: over */
  CHECK_EQ_INT(hp_frame_end(&w), HORA_EINVAL);
  CHECK_EQ_INT(w.len, before);
  CHECK_EQ_INT(w.err, HORA_EINVAL); /* sticky until the caller clears it */
  w.err = 0;
  /* The largest payload that fits is accepted. */
  hp_frame_begin(&w, HP_MSG_OUTPUT, 1);
  hp_put_bytes(&w, big, HP_FRAME_MAX - 4);
  CHECK_EQ_INT(hp_frame_end(&w), 0);
  CHECK_EQ_INT(w.len, before + HP_FRAME_HDR + HP_FRAME_MAX);
  /* An encoder given too much data leaves nothing behind (hp_enc_* return
   * void, so the caller can only see it in w.len). */
  hp_wbuf_reset(&w);
  struct hp_output o = {0, 1, big, HP_FRAME_MAX + 1};
  hp_enc_output(&w, &o);
  CHECK_EQ_INT(w.len, 0);
  free(big);
  hp_wbuf_free(&w);
}

/* ---- round trips --------------------------------------------------------- */

static void test_hello_welcome(void) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  struct hp_hello he = {-1, INT32_MAX, "ffffffffffffffffffffffffffffffff",
                        HP_SHM_VERSION + 7};
  hp_enc_hello(&w, &he);
  size_t n;
  const unsigned char *p = one_frame(&w, HP_MSG_HELLO, &n);
  struct hp_hello he2;
  CHECK_EQ_INT(hp_dec_hello(p, n, &he2), 0);
  CHECK_EQ_INT(he2.rank, -1);
  CHECK_EQ_INT(he2.pid, INT32_MAX);
  CHECK_EQ_STR(he2.token, he.token);
  CHECK_EQ_INT(he2.shm_version, HP_SHM_VERSION + 7);
  /* a token one longer than HP_TOKEN_LEN does not fit */
  hp_wbuf_reset(&w);
  hp_frame_begin(&w, HP_MSG_HELLO, 0);
  hp_put_u32(&w, 0);
  hp_put_u32(&w, 0);
  hp_put_str(&w, "0123456789abcdef0123456789abcdef0");
  hp_frame_end(&w);
  p = one_frame(&w, HP_MSG_HELLO, &n);
  CHECK_EQ_INT(hp_dec_hello(p, n, &he2), HORA_EPROTO);

  /* a refusal: a status (negative) and why */
  hp_wbuf_reset(&w);
  struct hp_refuse rf = {HORA_EVERSION, "rank 3 uses another release"}, rf2;
  hp_enc_refuse(&w, &rf);
  p = one_frame(&w, HP_MSG_REFUSE, &n);
  CHECK_EQ_INT(hp_dec_refuse(p, n, &rf2), 0);
  CHECK_EQ_INT(rf2.status, HORA_EVERSION);
  CHECK_EQ_STR(rf2.msg, rf.msg);
  hp_wbuf_reset(&w);
  rf.status = 0; /* not an error */
  hp_enc_refuse(&w, &rf);
  p = one_frame(&w, HP_MSG_REFUSE, &n);
  CHECK_EQ_INT(hp_dec_refuse(p, n, &rf2), HORA_EPROTO);

  hp_wbuf_reset(&w);
  struct hp_welcome we = {1, 2, 3, 4, 5, 6, 7, UINT64_MAX - 1, "", 0};
  memset(we.hostname, 'h', 255);
  we.hostname[255] = '\0';
  hp_enc_welcome(&w, &we);
  p = one_frame(&w, HP_MSG_WELCOME, &n);
  struct hp_welcome we2;
  CHECK_EQ_INT(hp_dec_welcome(p, n, &we2), 0);
  CHECK(we2.rank == 1 && we2.size == 2 && we2.local_rank == 3 &&
        we2.local_size == 4 && we2.cross_rank == 5 && we2.cross_size == 6 &&
        we2.daemon_pid == 7 && we2.shm_size == UINT64_MAX - 1);
  CHECK_EQ_STR(we2.hostname, we.hostname);
  hp_wbuf_free(&w);
}

static void test_job(void) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  struct hp_job j = sample_job();
  hp_enc_job(&w, &j);
  size_t n;
  const unsigned char *p = one_frame(&w, HP_MSG_JOB, &n);
  struct hp_job d;
  CHECK_EQ_INT(hp_dec_job(p, n, &d), 0);
  CHECK(d.size == 8 && d.local_size == 4 && d.nlocal == 3);
  for (uint32_t i = 0; i < 3 && d.ranks; i++)
    CHECK(!memcmp(&d.ranks[i], &ranks_s[i], sizeof ranks_s[i]));
  CHECK_EQ_STR(d.hostname, j.hostname);
  CHECK_EQ_STR(d.cwd, j.cwd);
  CHECK_EQ_INT(d.argc, 5);
  CHECK_EQ_INT(d.envc, 3);
  for (uint32_t i = 0; i < d.argc && i < 5; i++)
    CHECK_EQ_STR(d.argv[i], argv_s[i]);
  for (uint32_t i = 0; i < d.envc && i < 3; i++)
    CHECK_EQ_STR(d.envp[i], envp_s[i]);
  CHECK(d.argv[d.argc] == NULL); /* NULL-terminated, ready for execve */
  CHECK(d.envp[d.envc] == NULL);
  hp_job_free(&d);
  CHECK(d.argv == NULL && d.ranks == NULL);
  hp_job_free(&d); /* twice is harmless */
  /* no local ranks and no environment */
  hp_wbuf_reset(&w);
  j.nlocal = 0;
  j.envc = 0;
  j.envp = NULL;
  hp_enc_job(&w, &j);
  p = one_frame(&w, HP_MSG_JOB, &n);
  CHECK_EQ_INT(hp_dec_job(p, n, &d), 0);
  CHECK(d.nlocal == 0 && d.envc == 0 && d.envp && d.envp[0] == NULL);
  hp_job_free(&d);
  hp_wbuf_free(&w);
}

/* A job whose fields break its invariants is refused. */
static void test_job_invalid(void) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  struct hp_job_rank bad_ranks[] = {{8, 0, 0, 1}};
  for (int c = 0; c < 7; c++) {
    struct hp_job j = sample_job();
    switch (c) {
    case 0:
      j.size = 0;
      break;
    case 1:
      j.local_size = -1;
      break;
    case 2:
      j.argc = 0;
      break;
    case 3:
      j.size = 2;
      break; /* nlocal 3 > size */
    case 4:
      j.ranks = bad_ranks;
      j.nlocal = 1;
      break; /* rank == size */
    case 5:
      ranks_s[1].cross_rank = 2;
      break; /* >= cross_size */
    default:
      ranks_s[2].local_rank = 4;
      break; /* >= local_size */
    }
    hp_wbuf_reset(&w);
    hp_enc_job(&w, &j);
    ranks_s[1].cross_rank = 1;
    ranks_s[2].local_rank = 2;
    size_t n;
    const unsigned char *p = one_frame(&w, HP_MSG_JOB, &n);
    struct hp_job d;
    int rc = hp_dec_job(p, n, &d);
    if (rc != HORA_EPROTO) TL_FAIL("invalid job case %d: rc %d", c, rc);
    hp_job_free(&d);
  }
  hp_wbuf_free(&w);
}

/* A daemon's word to horarun about its links. */
static void test_links(void) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  struct hp_peer_lost pl = {7, "no heartbeat for 3.0 s"}, pl2;
  hp_enc_peer_lost(&w, &pl);
  size_t n;
  const unsigned char *p = one_frame(&w, HP_MSG_PEER_LOST, &n);
  CHECK_EQ_INT(hp_dec_peer_lost(p, n, &pl2), 0);
  CHECK_EQ_INT(pl2.host, 7);
  CHECK_EQ_STR(pl2.msg, pl.msg);
  CHECK_EQ_INT(hp_dec_peer_lost(p, n - 1, &pl2), HORA_EPROTO);
  /* heartbeats: empty, or a list of hosts */
  uint32_t got[4], k = 99;
  hp_wbuf_reset(&w);
  hp_enc_heartbeat(&w, NULL, 0);
  p = one_frame(&w, HP_MSG_HEARTBEAT, &n);
  CHECK_EQ_INT(n, 0);
  CHECK_EQ_INT(hp_dec_heartbeat(p, n, got, 4, &k), 0);
  CHECK_EQ_INT(k, 0);
  const uint32_t list[3] = {0, 2, 5};
  hp_wbuf_reset(&w);
  hp_enc_heartbeat(&w, list, 3);
  p = one_frame(&w, HP_MSG_HEARTBEAT, &n);
  CHECK_EQ_INT(hp_dec_heartbeat(p, n, got, 4, &k), 0);
  CHECK(k == 3 && got[0] == 0 && got[1] == 2 && got[2] == 5);
  CHECK_EQ_INT(hp_dec_heartbeat(p, n, got, 2, &k), HORA_EPROTO); /* > max */
  CHECK_EQ_INT(hp_dec_heartbeat(p, n - 2, got, 4, &k), HORA_EPROTO);
  CHECK_EQ_INT(k, 0);
  hp_wbuf_free(&w);
}

static void test_exit_output_text(void) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  struct hp_exit ex = {-7, HP_EXIT_SPAWN, 2, NULL, 0, 0};
  hp_enc_exit(&w, &ex);
  size_t n;
  const unsigned char *p = one_frame(&w, HP_MSG_EXIT, &n);
  struct hp_exit ex2;
  CHECK_EQ_INT(hp_dec_exit(p, n, &ex2), 0);
  CHECK(ex2.rank == -7 && ex2.how == HP_EXIT_SPAWN && ex2.code == 2);
  CHECK_EQ_STR(ex2.msg, ""); /* NULL travels as "" */
  CHECK_EQ_INT(ex2.noinit, 0);
  free(ex2.msg);
  /* a rank that never initialised hora says so */
  hp_wbuf_reset(&w);
  struct hp_exit exn = {4, HP_EXIT_CODE, 0, NULL, 1, 0};
  hp_enc_exit(&w, &exn);
  p = one_frame(&w, HP_MSG_EXIT, &n);
  CHECK_EQ_INT(hp_dec_exit(p, n, &ex2), 0);
  CHECK(ex2.rank == 4 && ex2.how == HP_EXIT_CODE && ex2.noinit == 1);
  free(ex2.msg);
  hp_wbuf_reset(&w);
  exn.noinit = 2;
  hp_enc_exit(&w, &exn); /* encoded as 1 */
  p = one_frame(&w, HP_MSG_EXIT, &n);
  CHECK_EQ_INT(hp_dec_exit(p, n, &ex2), 0);
  CHECK_EQ_INT(ex2.noinit, 1);
  free(ex2.msg);
  unsigned char bad[64];
  memcpy(bad, p, n);
  bad[n - 5] = 2; /* neither 0 nor 1 (the restart count follows) */
  CHECK_EQ_INT(hp_dec_exit(bad, n, &ex2), HORA_EPROTO);
  /* a rank that horad starts again (--restart-failed-ranks) */
  hp_wbuf_reset(&w);
  struct hp_exit exr = {3, HP_EXIT_SIGNAL, 9, "x", 0, 2};
  hp_enc_exit(&w, &exr);
  p = one_frame(&w, HP_MSG_EXIT, &n);
  CHECK_EQ_INT(hp_dec_exit(p, n, &ex2), 0);
  CHECK(ex2.rank == 3 && ex2.how == HP_EXIT_SIGNAL && ex2.restart == 2);
  CHECK_EQ_STR(ex2.msg, "x");
  free(ex2.msg);
  CHECK_EQ_INT(hp_dec_exit(p, n - 4, &ex2), HORA_EPROTO); /* cut short */
  /* RANK_GONE: a restart, or not; nothing else */
  hp_wbuf_reset(&w);
  struct hp_rank_gone g = {.rank = 5, .host = 1, .restart = 1}, g2;
  snprintf(g.msg, sizeof g.msg, "rank 5 crashed");
  hp_enc_rank_gone(&w, &g);
  p = one_frame(&w, HP_MSG_RANK_GONE, &n);
  CHECK_EQ_INT(hp_dec_rank_gone(p, n, &g2), 0);
  CHECK(g2.rank == 5 && g2.host == 1 && g2.restart == 1);
  CHECK_EQ_STR(g2.msg, "rank 5 crashed");
  memcpy(bad, p, n);
  bad[8] = 7;
  CHECK_EQ_INT(hp_dec_rank_gone(bad, n, &g2), HORA_EPROTO);
  /* how out of range */
  hp_wbuf_reset(&w);
  ex.how = 3;
  hp_enc_exit(&w, &ex);
  p = one_frame(&w, HP_MSG_EXIT, &n);
  CHECK_EQ_INT(hp_dec_exit(p, n, &ex2), HORA_EPROTO);
  CHECK(ex2.msg == NULL);

  hp_wbuf_reset(&w);
  unsigned char data[300];
  for (size_t i = 0; i < sizeof data; i++)
    data[i] = (unsigned char)i;
  struct hp_output o = {1, 1, data, sizeof data}, o2;
  hp_enc_output(&w, &o);
  p = one_frame(&w, HP_MSG_OUTPUT, &n);
  CHECK_EQ_INT(hp_dec_output(p, n, &o2), 0);
  CHECK(o2.rank == 1 && o2.stream == 1 && o2.len == sizeof data);
  CHECK(o2.data && !memcmp(o2.data, data, sizeof data));
  CHECK(o2.data >= p && o2.data < p + n);         /* points into the payload */
  for (int stream = 0; stream < 4; stream += 3) { /* 0 and 3 are invalid */
    hp_wbuf_reset(&w);
    o.stream = (uint8_t)stream;
    hp_enc_output(&w, &o);
    p = one_frame(&w, HP_MSG_OUTPUT, &n);
    CHECK_EQ_INT(hp_dec_output(p, n, &o2), HORA_EPROTO);
  }
  hp_wbuf_reset(&w);
  o.stream = 2;
  o.len = 0;
  hp_enc_output(&w, &o);
  p = one_frame(&w, HP_MSG_OUTPUT, &n);
  CHECK_EQ_INT(hp_dec_output(p, n, &o2), 0);
  CHECK_EQ_INT(o2.len, 0);

  hp_wbuf_reset(&w);
  hp_enc_text(&w, HP_MSG_ABORT, "stop: rank 3 failed");
  p = one_frame(&w, HP_MSG_ABORT, &n);
  char *t = hp_dec_text(p, n);
  CHECK_EQ_STR(t, "stop: rank 3 failed");
  free(t);
  hp_wbuf_reset(&w);
  hp_enc_text(&w, HP_MSG_BYE, NULL);
  p = one_frame(&w, HP_MSG_BYE, &n);
  CHECK_EQ_INT(n, 4); /* an empty string, not an empty payload */
  t = hp_dec_text(p, n);
  CHECK_EQ_STR(t, "");
  free(t);
  hp_wbuf_free(&w);
}

/* ---- malformed payloads -------------------------------------------------- */

/* Decodes payload p[0..n) as message `type`; returns the decoder's result
 * (hp_dec_text: 0 or HORA_EPROTO) and frees what it made. */
static int dec_any(uint16_t type, const unsigned char *p, size_t n) {
  int rc;
  switch (type) {
  case HP_MSG_HELLO: {
    struct hp_hello m;
    return hp_dec_hello(p, n, &m);
  }
  case HP_MSG_WELCOME: {
    struct hp_welcome m;
    return hp_dec_welcome(p, n, &m);
  }
  case HP_MSG_JOB: {
    struct hp_job m;
    rc = hp_dec_job(p, n, &m);
    hp_job_free(&m);
    return rc;
  }
  case HP_MSG_EXIT: {
    struct hp_exit m;
    rc = hp_dec_exit(p, n, &m);
    free(m.msg);
    return rc;
  }
  case HP_MSG_OUTPUT: {
    struct hp_output m;
    rc = hp_dec_output(p, n, &m);
    if (rc == 0 && m.len && (m.data < p || m.data + m.len > p + n)) return -1;
    return rc;
  }
  default: {
    char *s = hp_dec_text(p, n);
    rc = s ? 0 : HORA_EPROTO;
    free(s);
    return rc;
  }
  }
}

/* Every strict prefix of every valid payload is an error, and so is the
 * payload with a trailing byte. Payloads are copied to exact-size heap
 * blocks so that ASan sees any read past the end. */
/* SESSION: a round trip, a phase out of range, a truncated one. */
static void test_session(void) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  struct hp_session m = {.number = 7, .phase = HP_SESSION_START}, m2;
  hp_enc_session(&w, &m);
  size_t n;
  const unsigned char *p = one_frame(&w, HP_MSG_SESSION, &n);
  CHECK_EQ_INT(hp_dec_session(p, n, &m2), 0);
  CHECK(m2.number == 7 && m2.phase == HP_SESSION_START);
  CHECK_EQ_INT(hp_dec_session(p, n - 1, &m2), HORA_EPROTO);
  hp_wbuf_reset(&w); /* a FENCE carries the sender's session count */
  m = (struct hp_session){.number = 2, .phase = HP_SESSION_FENCE,
                          .session = 9};
  hp_enc_session(&w, &m);
  p = one_frame(&w, HP_MSG_SESSION, &n);
  CHECK_EQ_INT(hp_dec_session(p, n, &m2), 0);
  CHECK(m2.number == 2 && m2.phase == HP_SESSION_FENCE && m2.session == 9);
  hp_wbuf_reset(&w);
  m.phase = 4;
  hp_enc_session(&w, &m);
  p = one_frame(&w, HP_MSG_SESSION, &n);
  CHECK_EQ_INT(hp_dec_session(p, n, &m2), HORA_EPROTO);
  hp_wbuf_free(&w);
}

/* REFORM: a round trip; every prefix and a trailing byte refused; each
 * numbering that does not add up refused (the daemon acts on none). */
static void enc_reform(struct hp_wbuf *w, uint32_t host_index,
                       const uint32_t *old, const int32_t *first,
                       const int32_t *nr, uint32_t nhosts, int32_t size,
                       const struct hp_job_rank *rk, uint32_t nlocal) {
  struct hp_reform m = {.number = 1,
                        .host_index = host_index,
                        .nhosts = nhosts,
                        .size = size,
                        .old_index = (uint32_t *)old,
                        .first_rank = (int32_t *)first,
                        .nranks = (int32_t *)nr,
                        .nlocal = nlocal,
                        .ranks = (struct hp_job_rank *)rk};
  hc_fmt(m.why, sizeof m.why, "host h2 is left out: it was lost");
  hp_enc_reform(w, &m);
}

static int dec_reform_copy(const unsigned char *p, size_t n) {
  unsigned char *c = malloc(n ? n : 1);
  memcpy(c, p, n);
  struct hp_reform m;
  int rc = hp_dec_reform(c, n, &m);
  if (rc == 0) hp_reform_free(&m);
  free(c);
  return rc;
}

static void test_reform(void) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  /* hosts 0, 2 and 3 of four kept, 2 ranks each; this is the second */
  const uint32_t old[] = {0, 2, 3};
  const int32_t first[] = {0, 2, 4}, nr[] = {2, 2, 2};
  const struct hp_job_rank rk[] = {{2, 0, 1, 3}, {3, 1, 1, 3}};
  enc_reform(&w, 1, old, first, nr, 3, 6, rk, 2);
  size_t n;
  const unsigned char *p = one_frame(&w, HP_MSG_REFORM, &n);
  struct hp_reform m;
  CHECK_EQ_INT(hp_dec_reform(p, n, &m), 0);
  CHECK(m.number == 1 && m.host_index == 1 && m.nhosts == 3 && m.size == 6);
  CHECK(m.old_index[2] == 3 && m.first_rank[2] == 4 && m.nranks[1] == 2);
  CHECK(m.nlocal == 2 && m.ranks[1].rank == 3 && m.ranks[1].cross_rank == 1);
  CHECK_EQ_STR(m.why, "host h2 is left out: it was lost");
  hp_reform_free(&m);
  for (size_t k = 0; k < n; k++)
    CHECK_EQ_INT(dec_reform_copy(p, k), HORA_EPROTO);
  unsigned char *longer = malloc(n + 1);
  memcpy(longer, p, n);
  longer[n] = 0;
  CHECK_EQ_INT(dec_reform_copy(longer, n + 1), HORA_EPROTO);
  free(longer);
  /* numberings that do not add up */
  const uint32_t unordered[] = {0, 3, 2};
  const int32_t gap[] = {0, 3, 4}, zero[] = {2, 0, 4};
  const struct hp_job_rank notmine[] = {{0, 0, 0, 3}, {1, 1, 0, 3}},
                           badcross[] = {{2, 0, 3, 3}, {3, 1, 1, 3}};
  struct {
    const uint32_t *old;
    const int32_t *first, *nr;
    int32_t size;
    const struct hp_job_rank *rk;
    uint32_t nlocal;
  } bad[] = {{unordered, first, nr, 6, rk, 2}, {old, gap, nr, 6, rk, 2},
             {old, first, zero, 6, rk, 2},     {old, first, nr, 7, rk, 2},
             {old, first, nr, 6, notmine, 2},  {old, first, nr, 6, badcross, 2},
             {old, first, nr, 6, rk, 1}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    hp_wbuf_reset(&w);
    enc_reform(&w, 1, bad[i].old, bad[i].first, bad[i].nr, 3, bad[i].size,
               bad[i].rk, bad[i].nlocal);
    p = one_frame(&w, HP_MSG_REFORM, &n);
    if (dec_reform_copy(p, n) != HORA_EPROTO)
      CHECK(!"a REFORM whose numbering does not add up was taken");
  }
  /* the daemon's answer: a re-forming's number, never 0 */
  hp_wbuf_reset(&w);
  hp_enc_reformed(&w, 3);
  p = one_frame(&w, HP_MSG_REFORM, &n);
  uint32_t k;
  CHECK_EQ_INT(hp_dec_reformed(p, n, &k), 0);
  CHECK_EQ_INT(k, 3);
  CHECK_EQ_INT(hp_dec_reformed(p, n - 1, &k), HORA_EPROTO);
  hp_wbuf_reset(&w);
  hp_enc_reformed(&w, 0);
  p = one_frame(&w, HP_MSG_REFORM, &n);
  CHECK_EQ_INT(hp_dec_reformed(p, n, &k), HORA_EPROTO);
  hp_wbuf_free(&w);
}

static void test_truncated_trailing(void) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  int frames = enc_all(&w);
  size_t off = 0;
  for (int f = 0; f < frames; f++) {
    struct hp_frame_hdr h;
    char why[64];
    CHECK_EQ_INT(hp_frame_parse(w.data + off, &h, why, sizeof why), 0);
    const unsigned char *pl = w.data + off + HP_FRAME_HDR;
    for (size_t k = 0; k < h.len; k++) {
      unsigned char *cp = malloc(k ? k : 1);
      memcpy(cp, pl, k);
      int rc = dec_any(h.type, cp, k);
      if (rc != HORA_EPROTO)
        TL_FAIL("type %u: prefix %zu of %u gives %d", h.type, k, h.len, rc);
      free(cp);
    }
    unsigned char *cp = malloc(h.len + 1);
    memcpy(cp, pl, h.len);
    CHECK_EQ_INT(dec_any(h.type, cp, h.len), 0);
    cp[h.len] = 0;
    int rc = dec_any(h.type, cp, h.len + 1);
    if (rc != HORA_EPROTO)
      TL_FAIL("type %u: trailing byte gives %d", h.type, rc);
    free(cp);
    off += HP_FRAME_HDR + h.len;
  }
  CHECK_EQ_INT(off, w.len);
  hp_wbuf_free(&w);
}

/* Strings with an embedded NUL are refused wherever a string is read. */
static void test_embedded_nul(void) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  /* hello token */
  hp_put_u32(&w, 1);
  hp_put_u32(&w, 2);
  hp_put_bytes(&w, "abc\0def", 7);
  CHECK_EQ_INT(dec_any(HP_MSG_HELLO, w.data, w.len), HORA_EPROTO);
  /* job argv[1] */
  hp_wbuf_reset(&w);
  struct hp_job j = sample_job();
  hp_enc_job(&w, &j);
  size_t n;
  const unsigned char *p = one_frame(&w, HP_MSG_JOB, &n);
  unsigned char *cp = malloc(n);
  memcpy(cp, p, n);
  unsigned char *hit = memmem(cp, n, "train.py", 8);
  CHECK(hit != NULL);
  if (hit) hit[3] = 0;
  CHECK_EQ_INT(dec_any(HP_MSG_JOB, cp, n), HORA_EPROTO);
  free(cp);
  /* exit message, text, welcome hostname */
  hp_wbuf_reset(&w);
  hp_put_u32(&w, 1);
  hp_put_u8(&w, 0);
  hp_put_u32(&w, 0);
  hp_put_bytes(&w, "x\0", 2);
  CHECK_EQ_INT(dec_any(HP_MSG_EXIT, w.data, w.len), HORA_EPROTO);
  hp_wbuf_reset(&w);
  hp_put_bytes(&w, "\0", 1);
  CHECK_EQ_INT(dec_any(HP_MSG_ABORT, w.data, w.len), HORA_EPROTO);
  hp_wbuf_reset(&w);
  for (int i = 0; i < 7; i++)
    hp_put_u32(&w, 0);
  hp_put_u64(&w, 0);
  hp_put_bytes(&w, "ho\0st", 5);
  CHECK_EQ_INT(dec_any(HP_MSG_WELCOME, w.data, w.len), HORA_EPROTO);
  hp_wbuf_free(&w);
}

/* A job header followed by `rest` bytes of zeros, with the given counts. */
static int job_with_counts(uint32_t nlocal, uint32_t argc, uint32_t envc,
                           size_t rest) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_put_u32(&w, 4);
  hp_put_u32(&w, 4);
  hp_put_u32(&w, nlocal);
  for (size_t i = 0; i < rest; i++)
    hp_put_u8(&w, 0);
  if (nlocal == 0) {
    w.len = 12;
    hp_put_str(&w, "h");
    hp_put_str(&w, "/");
    hp_put_u32(&w, argc);
    hp_put_str(&w, "a");
    hp_put_u32(&w, envc);
    if (envc == 0) { /* one host: this one, holding all 4 ranks */
      hp_put_u32(&w, 0);
      hp_put_u32(&w, 1);
      hp_put_str(&w, "h");
      hp_put_str(&w, "");
      hp_put_u16(&w, 0);
      hp_put_u32(&w, 0);
      hp_put_u32(&w, 4);
    }
  }
  unsigned char *cp = malloc(w.len);
  memcpy(cp, w.data, w.len);
  int rc = dec_any(HP_MSG_JOB, cp, w.len);
  free(cp);
  hp_wbuf_free(&w);
  return rc;
}

static void test_absurd_counts(void) {
  CHECK_EQ_INT(job_with_counts(1u << 31, 1, 0, 64), HORA_EPROTO);
  CHECK_EQ_INT(job_with_counts(UINT32_MAX, 1, 0, 64), HORA_EPROTO);
  CHECK_EQ_INT(job_with_counts(65537, 1, 0, 65537 * 16), HORA_EPROTO);
  CHECK_EQ_INT(job_with_counts(1000, 1, 0, 100), HORA_EPROTO); /* short */
  CHECK_EQ_INT(job_with_counts(0, 1, 0, 0), 0);                /* sane */
  CHECK_EQ_INT(job_with_counts(0, UINT32_MAX, 0, 0), HORA_EPROTO);
  CHECK_EQ_INT(job_with_counts(0, 1u << 31, 0, 0), HORA_EPROTO);
  CHECK_EQ_INT(job_with_counts(0, 2, 0, 0), HORA_EPROTO); /* 1 of 2 present */
  CHECK_EQ_INT(job_with_counts(0, 1, UINT32_MAX, 0), HORA_EPROTO);
  CHECK_EQ_INT(job_with_counts(0, 1, 4097, 0), HORA_EPROTO);
  /* more hosts than bytes left, and a host index past the hosts */
  {
    struct hp_job j = sample_job();
    j.host_index = 2;
    struct hp_wbuf w;
    hp_wbuf_init(&w);
    hp_enc_job(&w, &j);
    CHECK_EQ_INT(dec_any(HP_MSG_JOB, w.data + HP_FRAME_HDR,
                         w.len - HP_FRAME_HDR),
                 HORA_EPROTO);
    hp_wbuf_free(&w);
  }
  /* A string length beyond the payload, everywhere one is read. */
  unsigned char lie[8];
  put_le32(lie, UINT32_MAX);
  put_le32(lie + 4, 0);
  CHECK_EQ_INT(dec_any(HP_MSG_ABORT, lie, 8), HORA_EPROTO);
  struct hp_output o;
  unsigned char out[9] = {0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff};
  CHECK_EQ_INT(hp_dec_output(out, sizeof out, &o), HORA_EPROTO);
}

/* ---- the stream decoder -------------------------------------------------- */

/* Pulls every ready frame out of d into types[]; returns how many, or the
 * error code. */
static int drain(struct hp_decoder *d, uint16_t *types, int max,
                 const unsigned char *const *want, const uint32_t *wantlen,
                 int *got) {
  struct hp_frame_hdr h;
  const unsigned char *pl;
  char why[128];
  for (;;) {
    int rc = hp_decoder_next(d, &h, &pl, why, sizeof why);
    if (rc <= 0) return rc;
    if (*got >= max) return -1;
    types[*got] = h.type;
    if (h.len != wantlen[*got] || memcmp(pl, want[*got], h.len))
      TL_FAIL("frame %d: payload differs", *got);
    (*got)++;
  }
}

/* Feeds the frames of enc_all() in chunks of `chunk` bytes (0: random). */
static void feed_stream(size_t chunk) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  int frames = enc_all(&w);
  enc_all(&w); /* twice: 16 frames back to back */
  frames *= 2;
  const unsigned char *want[16];
  uint32_t wantlen[16];
  size_t off = 0;
  for (int f = 0; f < frames; f++) {
    struct hp_frame_hdr h;
    char why[64];
    hp_frame_parse(w.data + off, &h, why, sizeof why);
    want[f] = w.data + off + HP_FRAME_HDR;
    wantlen[f] = h.len;
    off += HP_FRAME_HDR + h.len;
  }
  struct hp_decoder d;
  hp_decoder_init(&d);
  uint16_t types[16];
  int got = 0, rc = 0;
  for (size_t at = 0; at < w.len && rc == 0;) {
    size_t k = chunk ? chunk : 1 + rnd() % 97;
    if (k > w.len - at) k = w.len - at;
    CHECK_EQ_INT(hp_decoder_feed(&d, w.data + at, k), 0);
    at += k;
    rc = drain(&d, types, 16, want, wantlen, &got);
  }
  CHECK_EQ_INT(rc, 0);
  CHECK_EQ_INT(got, frames);
  for (int f = 0; f < got; f++)
    CHECK_EQ_INT(types[f], all_types[f % 8]);
  hp_decoder_free(&d);
  hp_wbuf_free(&w);
}

static void test_decoder_stream(void) {
  feed_stream(1);
  feed_stream(3);
  feed_stream(16);
  feed_stream(0);
  feed_stream(1u << 20); /* all in one go */
}

/* Every prefix of a valid frame means "need more", never an error. */
static void test_decoder_prefixes(void) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  int frames = enc_all(&w);
  struct hp_frame_hdr h;
  const unsigned char *pl;
  char why[128];
  size_t off = 0;
  for (int f = 0; f < frames; f++) {
    hp_frame_parse(w.data + off, &h, why, sizeof why);
    size_t flen = HP_FRAME_HDR + h.len;
    for (size_t k = 1; k < flen; k++) { /* k = 0: test_decoder_empty */
      struct hp_decoder d;
      hp_decoder_init(&d);
      hp_decoder_feed(&d, w.data + off, k);
      int rc = hp_decoder_next(&d, &h, &pl, why, sizeof why);
      if (rc != 0) TL_FAIL("frame %d: prefix %zu gives %d (%s)", f, k, rc, why);
      /* the rest completes it */
      hp_decoder_feed(&d, w.data + off + k, flen - k);
      rc = hp_decoder_next(&d, &h, &pl, why, sizeof why);
      if (rc != 1) TL_FAIL("frame %d: completed after %zu gives %d", f, k, rc);
      CHECK_EQ_INT(hp_decoder_next(&d, &h, &pl, why, sizeof why), 0);
      hp_decoder_free(&d);
    }
    off += flen;
  }
  hp_wbuf_free(&w);
}

/* Feeds bytes to a fresh decoder; returns the first hp_decoder_next code. */
static int decode_bytes(const unsigned char *p, size_t n, char *why,
                        size_t whylen) {
  struct hp_decoder d;
  struct hp_frame_hdr h;
  const unsigned char *pl;
  hp_decoder_init(&d);
  hp_decoder_feed(&d, p, n);
  why[0] = '\0';
  int rc = hp_decoder_next(&d, &h, &pl, why, whylen);
  hp_decoder_free(&d);
  return rc;
}

static void test_decoder_bad(void) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_text(&w, HP_MSG_ABORT, "x");
  unsigned char f[64];
  size_t n = w.len;
  char why[128];
  memcpy(f, w.data, n);
  CHECK_EQ_INT(decode_bytes(f, n, why, sizeof why), 1);
  /* bad magic, also when only its first bytes have arrived */
  f[0] = 'X';
  CHECK_EQ_INT(decode_bytes(f, n, why, sizeof why), HORA_EPROTO);
  CHECK(strstr(why, "magic") != NULL);
  CHECK_EQ_INT(decode_bytes(f, 1, why, sizeof why), HORA_EPROTO);
  memcpy(f, "HOX", 3);
  CHECK_EQ_INT(decode_bytes(f, 3, why, sizeof why), HORA_EPROTO);
  CHECK_EQ_INT(decode_bytes(f, 2, why, sizeof why), 0);
  memcpy(f, "GET / HTTP/1.1\r\n", 16);
  CHECK_EQ_INT(decode_bytes(f, 16, why, sizeof why), HORA_EPROTO);
  /* bad version */
  memcpy(f, w.data, n);
  f[4] = (unsigned char)(HP_PROTO_VERSION + 1);
  CHECK_EQ_INT(decode_bytes(f, n, why, sizeof why), HORA_EPROTO);
  CHECK(strstr(why, "version") != NULL);
  f[4] = 0;
  CHECK_EQ_INT(decode_bytes(f, HP_FRAME_HDR, why, sizeof why), HORA_EPROTO);
  /* unknown types */
  static const uint16_t types[] = {0, HP_MSG_TYPE_MAX + 1, 0x100, 0xffff};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
    memcpy(f, w.data, n);
    f[6] = (unsigned char)types[i];
    f[7] = (unsigned char)(types[i] >> 8);
    CHECK_EQ_INT(decode_bytes(f, n, why, sizeof why), HORA_EPROTO);
    CHECK(strstr(why, "type") != NULL);
  }
  /* lengths: the limit is "need more", one over is an error */
  memcpy(f, w.data, n);
  put_le32(f + 8, HP_FRAME_MAX);
  CHECK_EQ_INT(decode_bytes(f, n, why, sizeof why), 0);
  put_le32(f + 8, HP_FRAME_MAX + 1);
  CHECK_EQ_INT(decode_bytes(f, n, why, sizeof why), HORA_EPROTO);
  CHECK(strstr(why, "length") != NULL);
  put_le32(f + 8, UINT32_MAX);
  CHECK_EQ_INT(decode_bytes(f, HP_FRAME_HDR, why, sizeof why), HORA_EPROTO);
  /* a tiny why buffer is still terminated */
  char tiny[4] = "zzz";
  memcpy(f, "XXXXXXXXXXXXXXXX", 16);
  CHECK_EQ_INT(decode_bytes(f, 16, tiny, sizeof tiny), HORA_EPROTO);
  CHECK(memchr(tiny, 0, sizeof tiny) != NULL);
  hp_wbuf_free(&w);
}

/* A good frame, then garbage: the good frame comes out first. */
static void test_decoder_good_then_bad(void) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_text(&w, HP_MSG_ABORT, "first");
  hp_put_bytes(&w, "garbage that is long enough", 27);
  struct hp_decoder d;
  struct hp_frame_hdr h;
  const unsigned char *pl;
  char why[128];
  hp_decoder_init(&d);
  hp_decoder_feed(&d, w.data, w.len);
  CHECK_EQ_INT(hp_decoder_next(&d, &h, &pl, why, sizeof why), 1);
  char *t = hp_dec_text(pl, h.len);
  CHECK_EQ_STR(t, "first");
  free(t);
  CHECK_EQ_INT(hp_decoder_next(&d, &h, &pl, why, sizeof why), HORA_EPROTO);
  hp_decoder_free(&d);
  hp_wbuf_free(&w);
}

/* A fresh decoder: no bytes, or zero bytes fed, means "need more". Its
 * buffer is still NULL here, which msg.c must not hand to memcpy/memcmp
 * (UBSan: null pointer passed as argument declared never null). */
static void test_decoder_empty(void) {
  struct hp_decoder d;
  struct hp_frame_hdr h;
  const unsigned char *pl;
  char why[64];
  hp_decoder_init(&d);
  CHECK_EQ_INT(hp_decoder_next(&d, &h, &pl, why, sizeof why), 0);
  CHECK_EQ_INT(hp_decoder_feed(&d, "", 0), 0);
  CHECK_EQ_INT(hp_decoder_next(&d, &h, &pl, why, sizeof why), 0);
  hp_decoder_free(&d);
}

/* ---- fuzz ---------------------------------------------------------------- */

/* Mutates buf[0..*n) in place (capacity cap): bit flips, byte sets, random
 * u32 lengths, truncation, insertion. */
static void mutate(unsigned char *buf, size_t *n, size_t cap) {
  int rounds = 1 + (int)(rnd() % 4);
  for (int r = 0; r < rounds; r++) {
    size_t len = *n;
    switch (rnd() % 6) {
    case 0:
      if (len) buf[rnd() % len] ^= (unsigned char)(1u << (rnd() % 8));
      break;
    case 1:
      if (len) buf[rnd() % len] = (unsigned char)rnd();
      break;
    case 2: /* a plausible-looking huge or small u32 */
      if (len >= 4) {
        static const uint32_t v[] = {
            0, 1, 0x7fffffff, 0x80000000, 0xffffffff, 0xfffffff0, 4096, 65536};
        put_le32(buf + rnd() % (len - 3), v[rnd() % 8]);
      }
      break;
    case 3:
      if (len) *n = rnd() % len;
      break;
    case 4:
      if (len < cap) {
        size_t at = rnd() % (len + 1);
        memmove(buf + at + 1, buf + at, len - at);
        buf[at] = (unsigned char)rnd();
        (*n)++;
      }
      break;
    default:
      if (len > 1) {
        size_t at = rnd() % len;
        memmove(buf + at, buf + at + 1, len - at - 1);
        (*n)--;
      }
      break;
    }
  }
}

/* NEGO_PLAN: decisions on a group round-trip in order; every strict
 * prefix, a count of 0 or beyond the frame, and a place outside the group
 * are refused (the count before anything is allocated). */
/* Decisions v[0..n) on float32 allreduces of comm, numbered from seq. */
static void plan_decides(struct hp_nego_decide *v, int n, uint32_t comm,
                         uint64_t seq) {
  memset(v, 0, (size_t)n * sizeof *v);
  for (int i = 0; i < n; i++) {
    v[i].comm = comm;
    v[i].seq = seq + (uint64_t)i;
    snprintf(v[i].name, sizeof v[i].name, "allreduce.grad.%d", i);
    v[i].meta.coll = HORA_COLL_ALLREDUCE;
    v[i].meta.dtype = HORA_FLOAT32;
    v[i].meta.count = 10u * (uint64_t)(i + 1);
    v[i].meta.prescale = v[i].meta.postscale = 1.0;
  }
}

static void test_nego_plan(void) {
  struct hp_nego_decide v[3];
  plan_decides(v, 3, 7, 100);
  for (int i = 0; i < 3; i++) {
    v[i].meta.group = 0xfeedull;
    v[i].meta.group_n = 3;
    v[i].meta.group_idx = (uint32_t)i;
  }
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_nego_plan(&w, v, 3);
  size_t n;
  const unsigned char *p = one_frame(&w, HP_MSG_NEGO_PLAN, &n);
  struct hp_nego_decide *out = NULL;
  uint32_t k = 0;
  CHECK_EQ_INT(hp_dec_nego_plan(p, n, &out, &k), 0);
  CHECK_EQ_INT(k, 3);
  for (uint32_t i = 0; out && i < 3; i++) {
    CHECK_EQ_INT(out[i].comm, 7);
    CHECK(out[i].seq == 100 + i);
    CHECK_EQ_STR(out[i].name, v[i].name);
    CHECK(out[i].meta.count == v[i].meta.count);
    CHECK(out[i].meta.group == 0xfeedull);
    CHECK_EQ_INT(out[i].meta.group_n, 3);
    CHECK_EQ_INT(out[i].meta.group_idx, i);
  }
  free(out);
  for (size_t cut = 0; cut < n; cut++) {
    unsigned char *b = malloc(cut ? cut : 1);
    memcpy(b, p, cut);
    out = NULL;
    CHECK(hp_dec_nego_plan(b, cut, &out, &k) < 0 && out == NULL);
    free(b);
  }
  /* the count: 0, and one the frame cannot hold */
  unsigned char *b = malloc(n);
  memcpy(b, p, n);
  uint32_t zero = 0, big = 4000;
  memcpy(b + 4, &zero, 4);
  CHECK(hp_dec_nego_plan(b, n, &out, &k) < 0);
  memcpy(b + 4, &big, 4);
  CHECK(hp_dec_nego_plan(b, n, &out, &k) < 0);
  free(b);
  /* a place outside its group */
  v[2].meta.group_idx = 3;
  hp_wbuf_reset(&w);
  hp_enc_nego_plan(&w, v, 3);
  p = one_frame(&w, HP_MSG_NEGO_PLAN, &n);
  CHECK(hp_dec_nego_plan(p, n, &out, &k) < 0);
  /* a single decision says the same about its group */
  hp_wbuf_reset(&w);
  hp_enc_nego_decide(&w, &v[2]);
  p = one_frame(&w, HP_MSG_NEGO_DECIDE, &n);
  struct hp_nego_decide one;
  CHECK(hp_dec_nego_decide(p, n, &one) < 0);
  v[2].meta.group_idx = 2;
  hp_wbuf_reset(&w);
  hp_enc_nego_decide(&w, &v[2]);
  p = one_frame(&w, HP_MSG_NEGO_DECIDE, &n);
  CHECK_EQ_INT(hp_dec_nego_decide(p, n, &one), 0);
  CHECK_EQ_INT(one.meta.group_idx, 2);
  hp_wbuf_free(&w);
}

/* Fusion marks: `fuse`, `algo` and the readiness flags round-trip in a
 * plan; a fused first decision, a fused lone NEGO_DECIDE, a mark other
 * than 0 or 1, a fused failure and an unknown algo bit are refused. */
static void test_nego_plan_fuse(void) {
  struct hp_nego_decide v[3];
  plan_decides(v, 3, 0, 5);
  for (int i = 0; i < 3; i++) {
    v[i].meta.flags = HP_NR_RESIDENT;
    v[i].fuse = i > 0;
    v[i].algo = (uint32_t)i; /* none, HP_DA_FLAT, HP_DA_NOCACHE */
  }
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_nego_plan(&w, v, 3);
  size_t n;
  const unsigned char *p = one_frame(&w, HP_MSG_NEGO_PLAN, &n);
  struct hp_nego_decide *out = NULL;
  uint32_t k = 0;
  CHECK_EQ_INT(hp_dec_nego_plan(p, n, &out, &k), 0);
  CHECK_EQ_INT(k, 3);
  for (uint32_t i = 0; out && i < 3; i++) {
    CHECK_EQ_INT(out[i].fuse, i > 0);
    CHECK_EQ_INT(out[i].algo, i);
    CHECK_EQ_INT(out[i].meta.flags, HP_NR_RESIDENT);
  }
  free(out);
  struct { int at; uint32_t fuse; int32_t status; uint32_t algo; } bad[] = {
      {0, 1, 0, 0}, {1, 2, 0, 0}, {2, 1, HORA_EMISMATCH, 0},
      {1, 1, 0, HP_DA_ALL + 1}};
  for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
    struct hp_nego_decide u[3];
    memcpy(u, v, sizeof u);
    u[bad[b].at].fuse = bad[b].fuse;
    u[bad[b].at].status = bad[b].status;
    if (bad[b].algo) u[bad[b].at].algo = bad[b].algo;
    hp_wbuf_reset(&w);
    hp_enc_nego_plan(&w, u, 3);
    p = one_frame(&w, HP_MSG_NEGO_PLAN, &n);
    out = NULL;
    CHECK(hp_dec_nego_plan(p, n, &out, &k) < 0 && out == NULL);
  }
  struct hp_nego_decide one;
  hp_wbuf_reset(&w);
  hp_enc_nego_decide(&w, &v[1]);
  p = one_frame(&w, HP_MSG_NEGO_DECIDE, &n);
  CHECK(hp_dec_nego_decide(p, n, &one) < 0);
  hp_wbuf_reset(&w);
  hp_enc_nego_decide(&w, &v[0]);
  p = one_frame(&w, HP_MSG_NEGO_DECIDE, &n);
  CHECK_EQ_INT(hp_dec_nego_decide(p, n, &one), 0);
  CHECK_EQ_INT(one.meta.flags, HP_NR_RESIDENT);
  /* NEGO_READY carries the flags too, and the priority (negative too) */
  struct hp_nego_ready r = v[2].meta, r2;
  snprintf(r.name, sizeof r.name, "%s", v[2].name);
  for (int32_t pr = -7; pr <= 7; pr += 7) {
    r.priority = pr;
    hp_wbuf_reset(&w);
    hp_enc_nego_ready(&w, &r);
    p = one_frame(&w, HP_MSG_NEGO_READY, &n);
    CHECK_EQ_INT(hp_dec_nego_ready(p, n, &r2), 0);
    CHECK_EQ_INT(r2.flags, HP_NR_RESIDENT);
    CHECK_EQ_INT(r2.priority, pr);
  }
  hp_wbuf_free(&w);
}

/* A small allreduce's part (NEGO_READY) and whole (NEGO_DECIDE, each
 * entry of a NEGO_PLAN, numbered in the response cache or not) round-trip
 * byte for byte; more than HP_STAR_MAX bytes, a length beyond the frame,
 * and data with a failure or a fused decision are refused. */
static void test_nego_star(void) {
  unsigned char part[HP_STAR_MAX + 1];
  for (size_t i = 0; i < sizeof part; i++) part[i] = (unsigned char)(i * 7 + 1);
  struct hp_nego_decide v[3];
  plan_decides(v, 3, 2, 40);
  struct hp_nego_ready r = v[0].meta, r2;
  snprintf(r.name, sizeof r.name, "%s", v[0].name);
  r.data = part;
  r.ndata = 40;
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  for (int use = 0; use < 2; use++) { /* whole, then by number */
    r.cref = use ? HP_CREF_USE : HP_CREF_NONE;
    hp_wbuf_reset(&w);
    hp_enc_nego_ready(&w, &r);
    size_t n;
    const unsigned char *p = one_frame(&w, HP_MSG_NEGO_READY, &n);
    CHECK_EQ_INT(hp_dec_nego_ready(p, n, &r2), 0);
    CHECK_EQ_INT(r2.ndata, 40);
    CHECK(r2.data && !memcmp(r2.data, part, 40));
    for (size_t cut = 0; cut < n; cut++)
      CHECK(hp_dec_nego_ready(p, cut, &r2) < 0);
  }
  r.cref = HP_CREF_NONE;
  r.ndata = HP_STAR_MAX; /* the most */
  hp_wbuf_reset(&w);
  hp_enc_nego_ready(&w, &r);
  size_t n;
  const unsigned char *p = one_frame(&w, HP_MSG_NEGO_READY, &n);
  CHECK_EQ_INT(hp_dec_nego_ready(p, n, &r2), 0);
  CHECK_EQ_INT(r2.ndata, HP_STAR_MAX);
  r.ndata = HP_STAR_MAX + 1; /* too many */
  hp_wbuf_reset(&w);
  hp_enc_nego_ready(&w, &r);
  p = one_frame(&w, HP_MSG_NEGO_READY, &n);
  CHECK(hp_dec_nego_ready(p, n, &r2) < 0);
  r.ndata = 8; /* with a failure */
  r.status = HORA_EMISMATCH;
  snprintf(r.msg, sizeof r.msg, "ranks disagree");
  hp_wbuf_reset(&w);
  hp_enc_nego_ready(&w, &r);
  p = one_frame(&w, HP_MSG_NEGO_READY, &n);
  CHECK(hp_dec_nego_ready(p, n, &r2) < 0);
  /* decisions: the first and last with a whole, one numbered */
  v[0].data = part;
  v[0].ndata = 12;
  v[2].data = part + 100;
  v[2].ndata = 4;
  v[2].cref = HP_CREF_USE;
  hp_wbuf_reset(&w);
  hp_enc_nego_plan(&w, v, 3);
  p = one_frame(&w, HP_MSG_NEGO_PLAN, &n);
  struct hp_nego_decide *out = NULL;
  uint32_t k = 0;
  CHECK_EQ_INT(hp_dec_nego_plan(p, n, &out, &k), 0);
  CHECK_EQ_INT(k, 3);
  if (out) {
    CHECK(out[0].ndata == 12 && !memcmp(out[0].data, part, 12));
    CHECK(out[1].ndata == 0 && out[1].data == NULL);
    CHECK(out[2].ndata == 4 && !memcmp(out[2].data, part + 100, 4));
  }
  free(out);
  hp_wbuf_reset(&w);
  hp_enc_nego_decide(&w, &v[0]);
  p = one_frame(&w, HP_MSG_NEGO_DECIDE, &n);
  struct hp_nego_decide one;
  CHECK_EQ_INT(hp_dec_nego_decide(p, n, &one), 0);
  CHECK(one.ndata == 12 && !memcmp(one.data, part, 12));
  /* a whole with a failure, or fused with the decision before it */
  struct hp_nego_decide u[3];
  memcpy(u, v, sizeof u);
  u[0].status = HORA_EMISMATCH;
  u[0].seq = UINT64_MAX;
  hp_wbuf_reset(&w);
  hp_enc_nego_plan(&w, u, 3);
  p = one_frame(&w, HP_MSG_NEGO_PLAN, &n);
  CHECK(hp_dec_nego_plan(p, n, &out, &k) < 0);
  memcpy(u, v, sizeof u);
  u[2].fuse = 1;
  hp_wbuf_reset(&w);
  hp_enc_nego_plan(&w, u, 3);
  p = one_frame(&w, HP_MSG_NEGO_PLAN, &n);
  CHECK(hp_dec_nego_plan(p, n, &out, &k) < 0);
  hp_wbuf_free(&w);
}

static void test_fuzz(void) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  int frames = enc_all(&w);
  const unsigned char *fp[8];
  uint32_t fl[8];
  size_t off = 0;
  for (int f = 0; f < frames; f++) {
    struct hp_frame_hdr h;
    char why[64];
    hp_frame_parse(w.data + off, &h, why, sizeof why);
    fp[f] = w.data + off;
    fl[f] = HP_FRAME_HDR + h.len;
    off += fl[f];
  }
  enum { CAP = 1024 };
  unsigned char buf[CAP];
  int ok = 0;
  struct hp_decoder d;
  hp_decoder_init(&d);
  for (int it = 0; it < 200000; it++) {
    size_t n;
    int f = (int)(rnd() % 8);
    if (rnd() % 8 == 0) { /* pure noise */
      n = rnd() % 200;
      for (size_t i = 0; i < n; i++)
        buf[i] = (unsigned char)rnd();
    } else {
      n = fl[f];
      memcpy(buf, fp[f], n);
      mutate(buf, &n, CAP);
    }
    /* Every payload decoder, on the bytes after the header. Copy into an
     * exact-size block so that ASan catches any over-read. */
    size_t pn = n > HP_FRAME_HDR ? n - HP_FRAME_HDR : n;
    unsigned char *pl = malloc(pn ? pn : 1);
    memcpy(pl, n > HP_FRAME_HDR ? buf + HP_FRAME_HDR : buf, pn);
    for (size_t t = 0; t < 8; t++)
      ok += dec_any(all_types[t], pl, pn) == 0;
    free(pl);
    /* The stream decoder, in two pieces; on error the peer is dropped.
     * (Zero-length feeds into a fresh decoder: test_decoder_empty.) */
    size_t cut = n ? rnd() % (n + 1) : 0;
    int rc = cut || d.buf ? hp_decoder_feed(&d, buf, cut) : 0;
    struct hp_frame_hdr h;
    const unsigned char *p;
    char why[96];
    while (rc == 0 && d.buf &&
           (rc = hp_decoder_next(&d, &h, &p, why, sizeof why)) == 1) {
      if (h.len > HP_FRAME_MAX || h.type == 0 || h.type > HP_MSG_TYPE_MAX)
        TL_FAIL("decoder accepted type %u len %u", h.type, h.len);
      rc = dec_any(h.type, p, h.len) == -1 ? -1 : 0;
    }
    if (rc == 0 && (n > cut || d.buf))
      rc = hp_decoder_feed(&d, buf + cut, n - cut);
    while (rc == 0 && d.buf &&
           (rc = hp_decoder_next(&d, &h, &p, why, sizeof why)) == 1)
      rc = dec_any(h.type, p, h.len) == -1 ? -1 : 0;
    if (rc == -1) TL_FAIL("output data outside its payload");
    if (rc < 0 || rnd() % 64 == 0) { /* drop the peer, or start over */
      hp_decoder_free(&d);
      hp_decoder_init(&d);
    }
  }
  hp_decoder_free(&d);
  hp_wbuf_free(&w);
  CHECK(ok > 1000); /* some mutations stay valid: the loop reached decoding */
  printf("fuzz: %d decodes succeeded\n", ok);
}

int main(void) {
  RUN(test_wbuf_rbuf);
  RUN(test_frame_header);
  RUN(test_hello_welcome);
  RUN(test_job);
  RUN(test_job_invalid);
  RUN(test_exit_output_text);
  RUN(test_links);
  RUN(test_session);
  RUN(test_reform);
  RUN(test_truncated_trailing);
  RUN(test_embedded_nul);
  RUN(test_absurd_counts);
  RUN(test_decoder_stream);
  RUN(test_decoder_prefixes);
  RUN(test_decoder_bad);
  RUN(test_decoder_good_then_bad);
  RUN(test_nego_plan);
  RUN(test_nego_plan_fuse);
  RUN(test_nego_star);
  RUN(test_fuzz);
  /* Last: while msg.c passes a NULL buffer to memcpy/memcmp, UBSan aborts
   * here, after the other results are out. */
  RUN(test_decoder_empty);
  TL_EXIT();
}
