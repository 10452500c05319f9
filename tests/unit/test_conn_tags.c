/* test_conn_tags.c -- the tags of proto/conn.c's frames after the
 * handshake, against a man in the middle: a relay thread between two
 * connections on loopback TCP that lets the handshake through, then
 * alters, replays, drops or reorders the connector's tagged frames.
 * Untouched frames all arrive; every change ends the connection as bad
 * data, before the changed frame reaches its owner; a DATA frame's data
 * is covered only with hp_conn_set_integrity() (its own header, which
 * says where the data goes, always is); with hp_conn_set_encrypt()
 * no payload crosses in the clear, and changes are caught alike. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "common.h"
#include "conn.h"
#include "testlib.h"

enum mode { PASS, FLIP_PAYLOAD, FLIP_TAG, FLIP_HEADER, REPLAY, DROP, SWAP,
            FLIP_DATA, FLIP_DATA_HDR };

#define NFRAMES 4 /* the connector sends these after the handshake */

struct end {
  struct hp_conn *c;
  int frames, authed, closed, bad_data;
  char texts[NFRAMES + 2][32];
  char why[256];
};

static int on_frame(struct hp_conn *c, const struct hp_frame_hdr *h,
                    unsigned char *p, int *keep) {
  struct end *e = c->data;
  (void)keep;
  if (e->frames < NFRAMES + 2) {
    size_t n = HC_MIN((size_t)h->len, sizeof e->texts[0] - 1);
    if (h->type == HP_MSG_DATA) {
      int same = 1; /* the blob's pattern (see run_as) */
      for (size_t i = HP_DATA_HDR_LEN; i < h->len; i++)
        same &= p[i] == (unsigned char)((i - HP_DATA_HDR_LEN) * 7);
      hc_fmt(e->texts[e->frames], sizeof e->texts[0], "data %u%s", h->len,
             same ? "" : " changed");
    } else {
      memcpy(e->texts[e->frames], p + 4, n > 4 ? n - 4 : 0);
      e->texts[e->frames][n > 4 ? n - 4 : 0] = '\0';
    }
  }
  e->frames++;
  return 0;
}

static void on_auth(struct hp_conn *c) { ((struct end *)c->data)->authed++; }

static void on_close(struct hp_conn *c, const char *why) {
  struct end *e = c->data;
  e->closed++;
  e->bad_data = c->bad_data;
  hc_fmt(e->why, sizeof e->why, "%s", why);
  e->c = NULL;
}

static const struct hp_conn_cb cb = {
    .on_auth = on_auth, .on_frame = on_frame, .on_close = on_close};

/* ---- the relay ---------------------------------------------------------- */

struct relay {
  int lfd, port, to_port;
  enum mode mode;
  int integrity_tag; /* (the frames carry tags from the 3rd c2s frame on) */
};

static int read_n(int fd, unsigned char *p, size_t n) {
  while (n) {
    ssize_t k = read(fd, p, n);
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static void write_n(int fd, const unsigned char *p, size_t n) {
  while (n) {
    ssize_t k = write(fd, p, n);
    if (k <= 0) return;
    p += k;
    n -= (size_t)k;
  }
}

/* One frame of the connector's (with its tag when `tagged`) into buf. */
static long read_frame(int fd, unsigned char *buf, size_t cap, int tagged) {
  if (read_n(fd, buf, HP_FRAME_HDR) < 0) return -1;
  size_t len = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 |
               (size_t)buf[11] << 24;
  size_t all = HP_FRAME_HDR + len + (tagged ? HP_FRAME_TAG : 0);
  if (all > cap || read_n(fd, buf + HP_FRAME_HDR, all - HP_FRAME_HDR) < 0)
    return -1;
  return (long)all;
}

static int g_plain_seen; /* the relay saw "frame " in a tagged frame */

static void *relay_main(void *arg) {
  struct relay *r = arg;
  int a = accept(r->lfd, NULL, NULL);
  int b = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)r->to_port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (a < 0 || b < 0 || connect(b, (struct sockaddr *)&sa, sizeof sa) < 0)
    return NULL;
  static unsigned char f[NFRAMES + 3][1 << 16];
  long n[NFRAMES + 3];
  int got = 0, sent_tagged = 0;
  unsigned char buf[1 << 16];
  struct pollfd pf[2] = {{.fd = a, .events = POLLIN}, {.fd = b, .events = POLLIN}};
  for (;;) {
    if (poll(pf, 2, 5000) <= 0) break;
    if (pf[1].revents) { /* the acceptor's side: as it is */
      ssize_t k = read(b, buf, sizeof buf);
      if (k <= 0) break;
      write_n(a, buf, (size_t)k);
    }
    if (pf[0].revents) { /* the connector's: frame by frame */
      int tagged = got >= 2; /* HELLO and PROOF carry none */
      long k = read_frame(a, f[got], sizeof f[got], tagged);
      if (k < 0) break;
      n[got] = k;
      if (!tagged) {
        write_n(b, f[got], (size_t)k);
        got++;
        continue;
      }
      int t = got - 2; /* its number among the tagged ones */
      got++;
      unsigned char *p = f[got - 1];
      if (memmem(p, (size_t)k, "frame ", 6)) g_plain_seen = 1;
      if (t == 1) {
        switch (r->mode) {
        case FLIP_PAYLOAD: p[HP_FRAME_HDR + 5] ^= 1; break;
        case FLIP_TAG: p[k - 1] ^= 0x80; break;
        case FLIP_HEADER: p[12] ^= 1; break; /* its request id */
        case FLIP_DATA: p[HP_FRAME_HDR + HP_DATA_HDR_LEN + 3] ^= 1; break;
        case FLIP_DATA_HDR: p[HP_FRAME_HDR + 5] ^= 1; break; /* where to */
        case DROP: continue;
        case SWAP: sent_tagged++; continue; /* after the next one */
        default: break;
        }
      }
      write_n(b, p, (size_t)k);
      if (r->mode == REPLAY && t == 1) write_n(b, p, (size_t)k);
      if (r->mode == SWAP && t == 2) write_n(b, f[got - 2], (size_t)n[got - 2]);
    }
  }
  close(a);
  close(b);
  (void)sent_tagged;
  return NULL;
}

/* ---- a connection through the relay --------------------------------------- */

static struct end *g_acc;
static unsigned char g_secret[HP_SECRET_LEN];
static int g_integrity, g_encrypt;

static void on_listen(uv_stream_t *server, int status) {
  struct hp_conn *c;
  if (status == 0 &&
      hp_conn_accept(server, g_secret, HP_AUTH_MESH, &cb, g_acc, &c) == 0) {
    g_acc->c = c;
    hp_conn_set_integrity(c, g_integrity);
    hp_conn_set_encrypt(c, g_encrypt);
  }
}

static void no_done(void *arg, int status) {
  (void)arg;
  (void)status;
}

/* Runs one connection in `mode`; the connector sends NFRAMES frames (the
 * second a DATA frame when data is set). Returns the acceptor's end. */
static struct end run_as(enum mode mode, int data, int integrity,
                         int encrypt) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  struct end acc = {0}, con = {0};
  g_acc = &acc;
  g_integrity = integrity;
  g_encrypt = encrypt;
  g_plain_seen = 0;
  hp_random(g_secret, sizeof g_secret);
  uv_tcp_t server;
  uv_tcp_init(&loop, &server);
  struct sockaddr_in sa;
  uv_ip4_addr("127.0.0.1", 0, &sa);
  uv_tcp_bind(&server, (struct sockaddr *)&sa, 0);
  uv_listen((uv_stream_t *)&server, 8, on_listen);
  struct sockaddr_storage ss;
  int sl = sizeof ss;
  uv_tcp_getsockname(&server, (struct sockaddr *)&ss, &sl);
  struct relay r = {.mode = mode};
  r.to_port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
  r.lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in rs = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t rl = sizeof rs;
  bind(r.lfd, (struct sockaddr *)&rs, sizeof rs);
  listen(r.lfd, 1);
  getsockname(r.lfd, (struct sockaddr *)&rs, &rl);
  pthread_t th;
  pthread_create(&th, NULL, relay_main, &r);
  CHECK_EQ_INT(hp_conn_connect(&loop, (struct sockaddr *)&rs, g_secret,
                               HP_AUTH_MESH, &cb, &con, &con.c),
               0);
  hp_conn_set_integrity(con.c, integrity);
  hp_conn_set_encrypt(con.c, encrypt);
  for (int i = 0; i < 100000 && !con.authed && !con.closed; i++)
    uv_run(&loop, UV_RUN_ONCE);
  CHECK_EQ_INT(con.authed, 1);
  static unsigned char blob[4096];
  for (size_t i = 0; i < sizeof blob; i++) blob[i] = (unsigned char)(i * 7);
  for (int k = 0; k < NFRAMES && con.c; k++) {
    if (data && k == 1) {
      /* a frame header of our own (the bytes msg.h describes), then a
       * DATA header of zeros; the blob goes without a copy */
      unsigned char hdr[HP_FRAME_HDR + HP_DATA_HDR_LEN];
      memset(hdr, 0, sizeof hdr);
      uint32_t len = HP_DATA_HDR_LEN + sizeof blob;
      memcpy(hdr, "HORA", 4);
      hdr[4] = (unsigned char)HP_PROTO_VERSION;
      hdr[6] = (unsigned char)HP_MSG_DATA;
      for (int i = 0; i < 4; i++) hdr[8 + i] = (unsigned char)(len >> (8 * i));
      hp_conn_send_zc(con.c, hdr, sizeof hdr, blob, sizeof blob, no_done, NULL);
      continue;
    }
    struct hp_wbuf w;
    hp_wbuf_init(&w);
    char t[32];
    hc_fmt(t, sizeof t, "frame %d", k);
    hp_enc_text(&w, HP_MSG_OUTPUT, t);
    hp_conn_send(con.c, &w);
  }
  for (int i = 0; i < 200000 && !acc.closed && acc.frames < NFRAMES; i++)
    uv_run(&loop, UV_RUN_ONCE);
  struct end out = acc; /* before we close it */
  out.c = NULL;
  if (con.c) hp_conn_close(con.c, "done");
  if (acc.c) hp_conn_close(acc.c, "done");
  uv_close((uv_handle_t *)&server, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  pthread_join(th, NULL);
  close(r.lfd);
  uv_loop_close(&loop);
  return out;
}

static struct end run(enum mode mode, int data, int integrity) {
  return run_as(mode, data, integrity, 0);
}

static void expect_cut(const char *what, struct end e) {
  CHECK(e.closed == 1 && e.bad_data);
  if (!strstr(e.why, "tag does not match"))
    TL_FAIL("%s: closed for '%s', not for its tag", what, e.why);
  /* the first frame came, the changed one never did */
  CHECK_EQ_INT(e.frames, 1);
  CHECK_EQ_STR(e.texts[0], "frame 0");
}

static void test_pass(void) {
  struct end e = run(PASS, 0, 0);
  CHECK_EQ_INT(e.frames, NFRAMES);
  CHECK_EQ_INT(e.closed, 0);
  CHECK_EQ_STR(e.texts[0], "frame 0");
  CHECK_EQ_STR(e.texts[3], "frame 3");
  e = run(PASS, 1, 1); /* a DATA frame, with integrity: all arrive */
  CHECK_EQ_INT(e.frames, NFRAMES);
  CHECK_EQ_STR(e.texts[1], "data 4120");
}

static void test_tampering(void) {
  expect_cut("a payload bit flipped", run(FLIP_PAYLOAD, 0, 0));
  expect_cut("a tag bit flipped", run(FLIP_TAG, 0, 0));
  expect_cut("a header bit flipped", run(FLIP_HEADER, 0, 0));
  /* a replayed frame: the first copy passes, the second does not */
  struct end e = run(REPLAY, 0, 0);
  CHECK(e.closed == 1 && e.bad_data && strstr(e.why, "tag does not match"));
  CHECK_EQ_INT(e.frames, 2);
  expect_cut("a frame dropped", run(DROP, 0, 0));
  expect_cut("two frames swapped", run(SWAP, 0, 0));
}

static void test_data_integrity(void) {
  /* without integrity the data is not covered: the flipped bit arrives */
  struct end e = run(FLIP_DATA, 1, 0);
  CHECK_EQ_INT(e.frames, NFRAMES);
  CHECK_EQ_INT(e.closed, 0);
  CHECK_EQ_STR(e.texts[1], "data 4120 changed");
  /* the DATA frame's own header is covered even so */
  e = run(FLIP_DATA_HDR, 1, 0);
  CHECK(e.closed == 1 && e.bad_data && strstr(e.why, "tag does not match"));
  CHECK_EQ_INT(e.frames, 1);
  /* with it, the frame is refused */
  e = run(FLIP_DATA, 1, 1);
  CHECK(e.closed == 1 && e.bad_data && strstr(e.why, "tag does not match"));
  CHECK_EQ_INT(e.frames, 1);
}

static void test_encrypt(void) {
  struct end e = run_as(PASS, 0, 0, 1);
  CHECK_EQ_INT(e.frames, NFRAMES);
  CHECK_EQ_INT(e.closed, 0);
  CHECK_EQ_STR(e.texts[0], "frame 0");
  CHECK_EQ_STR(e.texts[3], "frame 3");
  CHECK_EQ_INT(g_plain_seen, 0); /* nothing readable on the way */
  e = run(PASS, 0, 0);
  CHECK_EQ_INT(g_plain_seen, 1); /* (the relay would have seen it) */
  e = run_as(PASS, 1, 0, 1); /* a zero-copy DATA frame, encrypted */
  CHECK_EQ_INT(e.frames, NFRAMES);
  CHECK_EQ_STR(e.texts[1], "data 4120");
  expect_cut("encrypted: a payload bit flipped", run_as(FLIP_PAYLOAD, 0, 0, 1));
  expect_cut("encrypted: a header bit flipped", run_as(FLIP_HEADER, 0, 0, 1));
  expect_cut("encrypted: a frame dropped", run_as(DROP, 0, 0, 1));
  e = run_as(FLIP_DATA, 1, 0, 1); /* data is covered when encrypted */
  CHECK(e.closed == 1 && e.bad_data && strstr(e.why, "tag does not match"));
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  RUN(test_pass);
  RUN(test_tampering);
  RUN(test_data_integrity);
  RUN(test_encrypt);
  TL_EXIT();
}
