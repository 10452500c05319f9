/* test_conn_local.c -- proto/conn.c's connection over a socketpair
 * (hp_conn_open_local): horad's control connection when horarun started
 * it on its own machine. Frames go both ways at once, with no handshake,
 * large ones too; the peer's close and bad data end it with the reason,
 * and bad data is told apart; a TCP connection still needs the
 * handshake before any frame reaches its owner. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "common.h"
#include "conn.h"
#include "testlib.h"

struct end {
  struct hp_conn *c;
  int frames, authed, closed, bad_data;
  uint16_t types[8];
  size_t lens[8];
  char first_text[64];
  char why[256];
  int peer_local;
};

static int on_frame(struct hp_conn *c, const struct hp_frame_hdr *h,
                    unsigned char *p, int *keep) {
  struct end *e = c->data;
  (void)keep;
  if (e->frames < 8) {
    e->types[e->frames] = h->type;
    e->lens[e->frames] = h->len;
  }
  if (h->type == HP_MSG_FAULT && !e->first_text[0]) {
    char *t = hp_dec_text(p, h->len);
    hc_fmt(e->first_text, sizeof e->first_text, "%s", t ? t : "(bad)");
    free(t);
  }
  e->frames++;
  return 0;
}

static void on_auth(struct hp_conn *c) {
  struct end *e = c->data;
  e->authed++;
}

static void on_close(struct hp_conn *c, const char *why) {
  struct end *e = c->data;
  e->closed++;
  e->bad_data = c->bad_data;
  e->peer_local = c->local;
  hc_fmt(e->why, sizeof e->why, "%s", why);
  e->c = NULL;
}

static const struct hp_conn_cb cb = {
    .on_auth = on_auth, .on_frame = on_frame, .on_close = on_close};

static void run_until(uv_loop_t *loop, int *flag, int want) {
  for (int i = 0; i < 100000 && *flag < want; i++)
    uv_run(loop, UV_RUN_ONCE);
}

static void test_frames_both_ways(void) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  int sv[2];
  CHECK_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  struct end a = {0}, b = {0};
  CHECK_EQ_INT(hp_conn_open_local(&loop, sv[0], "a's end", &cb, &a, &a.c), 0);
  CHECK_EQ_INT(hp_conn_open_local(&loop, sv[1], "b's end", &cb, &b, &b.c), 0);
  CHECK(a.c && a.c->local && a.c->authed);
  CHECK_EQ_STR(a.c->peer, "a's end");
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_text(&w, HP_MSG_FAULT, "hello");
  hp_frame_begin(&w, HP_MSG_HEARTBEAT, 0);
  hp_frame_end(&w);
  size_t big = 3u << 20; /* several reads' worth */
  char *text = malloc(big + 1);
  CHECK(text != NULL);
  memset(text, 'x', big);
  text[big] = '\0';
  hp_enc_text(&w, HP_MSG_ABORT, text);
  CHECK_EQ_INT(hp_conn_send(a.c, &w), 0);
  CHECK_EQ_INT(w.len, 0);
  hp_enc_text(&w, HP_MSG_READY, "1.0");
  CHECK_EQ_INT(hp_conn_send(b.c, &w), 0);
  run_until(&loop, &b.frames, 3);
  run_until(&loop, &a.frames, 1);
  CHECK_EQ_INT(b.frames, 3);
  CHECK_EQ_INT(b.types[0], HP_MSG_FAULT);
  CHECK_EQ_STR(b.first_text, "hello");
  CHECK_EQ_INT(b.types[1], HP_MSG_HEARTBEAT);
  CHECK_EQ_INT(b.types[2], HP_MSG_ABORT);
  CHECK(b.lens[2] >= big);
  CHECK_EQ_INT(a.frames, 1);
  CHECK_EQ_INT(a.types[0], HP_MSG_READY);
  CHECK_EQ_INT(a.authed + b.authed, 0); /* no handshake, no on_auth */
  /* a closes once its frames are sent: b hears the close, no bad data */
  hp_enc_text(&w, HP_MSG_DONE, "");
  CHECK_EQ_INT(hp_conn_send(a.c, &w), 0);
  hp_conn_close_when_sent(a.c);
  run_until(&loop, &b.closed, 1);
  run_until(&loop, &a.closed, 1);
  CHECK_EQ_INT(b.frames, 4);
  CHECK_EQ_INT(b.types[3], HP_MSG_DONE);
  CHECK_EQ_INT(a.closed, 1);
  CHECK_EQ_STR(a.why, "closed");
  CHECK_EQ_INT(b.closed, 1);
  CHECK_EQ_STR(b.why, "connection closed by the peer");
  CHECK_EQ_INT(b.bad_data, 0);
  CHECK_EQ_INT(b.peer_local, 1);
  hp_wbuf_free(&w);
  free(text);
  uv_run(&loop, UV_RUN_NOWAIT);
  CHECK_EQ_INT(uv_loop_close(&loop), 0);
}

/* What is not hora's framing ends the connection, as bad data. */
static void bad_case(const void *bytes, size_t n, const char *want) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  int sv[2];
  CHECK_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  struct end b = {0};
  CHECK_EQ_INT(hp_conn_open_local(&loop, sv[1], "peer", &cb, &b, &b.c), 0);
  CHECK_EQ_INT(write(sv[0], bytes, n), (ssize_t)n);
  run_until(&loop, &b.closed, 1);
  CHECK_EQ_INT(b.closed, 1);
  CHECK_EQ_INT(b.frames, 0);
  CHECK_EQ_INT(b.bad_data, 1);
  if (!strstr(b.why, want)) TL_FAIL("closed with '%s', not '%s'", b.why, want);
  close(sv[0]);
  uv_run(&loop, UV_RUN_NOWAIT);
  CHECK_EQ_INT(uv_loop_close(&loop), 0);
}

static void test_bad_data(void) {
  bad_case("garbage, not a frame", 20, "bad magic (not a hora peer)");
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_text(&w, HP_MSG_FAULT, "x");
  w.data[4] ^= 0xff; /* the version */
  bad_case(w.data, w.len, "bad frame");
  hp_wbuf_free(&w);
}

/* Over TCP nothing but the handshake reaches the owner first: a control
 * frame from a peer that has not proven the secret ends the connection. */
static struct end server_end;
static const unsigned char secret[HP_SECRET_LEN] = {9, 8, 7};

static void on_connection(uv_stream_t *server, int status) {
  struct hp_conn *c;
  if (status == 0 &&
      hp_conn_accept(server, secret, HP_AUTH_CONTROL, &cb, &server_end, &c) ==
          0)
    server_end.c = c;
}

static void test_tcp_needs_handshake(void) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  uv_tcp_t l;
  uv_tcp_init(&loop, &l);
  struct sockaddr_storage ss;
  hp_addr_parse("127.0.0.1", 0, &ss);
  CHECK_EQ_INT(uv_tcp_bind(&l, (struct sockaddr *)&ss, 0), 0);
  CHECK_EQ_INT(uv_listen((uv_stream_t *)&l, 8, on_connection), 0);
  int len = sizeof ss;
  uv_tcp_getsockname(&l, (struct sockaddr *)&ss, &len);
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK_EQ_INT(connect(s, (struct sockaddr *)&ss, sizeof(struct sockaddr_in)),
               0);
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_text(&w, HP_MSG_ABORT, "stop");
  CHECK_EQ_INT(write(s, w.data, w.len), (ssize_t)w.len);
  hp_wbuf_free(&w);
  run_until(&loop, &server_end.closed, 1);
  CHECK_EQ_INT(server_end.closed, 1);
  CHECK_EQ_INT(server_end.frames, 0);
  CHECK_EQ_INT(server_end.bad_data, 1);
  CHECK_EQ_INT(server_end.peer_local, 0);
  CHECK(strstr(server_end.why, "before authentication") != NULL);
  close(s);
  uv_close((uv_handle_t *)&l, NULL);
  uv_run(&loop, UV_RUN_NOWAIT);
  CHECK_EQ_INT(uv_loop_close(&loop), 0);
}

int main(void) {
  hc_log_init("test_conn_local", HC_FATAL);
  RUN(test_frames_both_ways);
  RUN(test_bad_data);
  RUN(test_tcp_needs_handshake);
  TL_EXIT();
}
