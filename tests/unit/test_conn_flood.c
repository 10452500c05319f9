/* test_conn_flood.c -- a listener of proto/conn.c under a flood of silent,
 * unauthenticated connections (half-open peers that never speak): the real
 * peer, which holds the secret, must always get in, through
 * hp_conn_accept_tracked() (horarun's rendezvous) and through the older
 * hp_conn_refuse_flood() + hp_conn_accept() (horad's mesh listener). All on
 * 127.0.0.1. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "common.h"
#include "conn.h"
#include "testlib.h"

#define NFLOOD 200

static const unsigned char secret[HP_SECRET_LEN] = {1, 2, 3, 4, 5};

struct server {
  uv_loop_t loop;
  uv_tcp_t tcp;
  int port;
  int legacy;            /* hp_conn_refuse_flood() + hp_conn_accept() */
  struct hp_conn *conns; /* every accepted connection */
  int accepted, dropped, authed_in, authed_out;
  uv_timer_t deadline;
  int timed_out;
};

static int on_frame(struct hp_conn *c, const struct hp_frame_hdr *h,
                    unsigned char *p, int *keep) {
  (void)c, (void)h, (void)p, (void)keep;
  return 0;
}

static void on_server_auth(struct hp_conn *c) {
  struct server *s = c->data;
  s->authed_in++;
}

static void on_server_close(struct hp_conn *c, const char *why) {
  struct server *s = c->data;
  if (strstr(why, "dropped for a newer connection")) s->dropped++;
}

static const struct hp_conn_cb server_cb = {.on_auth = on_server_auth,
                                            .on_frame = on_frame,
                                            .on_close = on_server_close};

static void on_client_auth(struct hp_conn *c) {
  struct server *s = c->data;
  s->authed_out++;
}

static void on_client_close(struct hp_conn *c, const char *why) {
  (void)c, (void)why;
}

static const struct hp_conn_cb client_cb = {.on_auth = on_client_auth,
                                            .on_frame = on_frame,
                                            .on_close = on_client_close};

static void on_connection(uv_stream_t *server, int status) {
  struct server *s = server->data;
  struct hp_conn *c;
  if (status < 0) return;
  if (s->legacy) {
    CHECK_EQ_INT(hp_conn_refuse_flood(server, s->conns), 0);
    if (hp_conn_accept(server, secret, HP_AUTH_MESH, &server_cb, s, &c) == 0) {
      hp_conn_track(c, &s->conns);
      s->accepted++;
    }
  } else if (hp_conn_accept_tracked(server, secret, HP_AUTH_MESH, &server_cb, s,
                                    &s->conns, &c) == 0) {
    s->accepted++;
  }
}

static void on_deadline(uv_timer_t *t) {
  struct server *s = t->data;
  s->timed_out = 1;
}

static void server_open(struct server *s, int legacy) {
  memset(s, 0, sizeof *s);
  s->legacy = legacy;
  CHECK_EQ_INT(uv_loop_init(&s->loop), 0);
  uv_tcp_init(&s->loop, &s->tcp);
  s->tcp.data = s;
  struct sockaddr_storage ss;
  CHECK_EQ_INT(hp_addr_parse("127.0.0.1", 0, &ss), 0);
  CHECK_EQ_INT(uv_tcp_bind(&s->tcp, (struct sockaddr *)&ss, 0), 0);
  CHECK_EQ_INT(uv_listen((uv_stream_t *)&s->tcp, 511, on_connection), 0);
  int len = sizeof ss;
  uv_tcp_getsockname(&s->tcp, (struct sockaddr *)&ss, &len);
  s->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
  uv_timer_init(&s->loop, &s->deadline);
  s->deadline.data = s;
}

/* n silent connections, connected (the kernel completes them) before the
 * loop has accepted any; their fds go into fds. With `hello`, each sends
 * the first 4 bytes of a frame (a peer that has begun and then stalls). */
static void flood(const struct server *s, int *fds, int n, int hello) {
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(s->port)};
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  for (int i = 0; i < n; i++) {
    fds[i] = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fds[i] >= 0);
    CHECK_EQ_INT(connect(fds[i], (struct sockaddr *)&sa, sizeof sa), 0);
    if (hello) CHECK_EQ_INT(write(fds[i], "HORA", 4), 4);
  }
}

/* Runs the loop until the real peer has authenticated, or 5 s. */
static void run_until_authed(struct server *s) {
  uv_timer_start(&s->deadline, on_deadline, 5000, 0);
  while (!s->timed_out && !(s->authed_in && s->authed_out))
    uv_run(&s->loop, UV_RUN_ONCE);
  uv_timer_stop(&s->deadline);
}

static unsigned strangers(const struct server *s) {
  unsigned n = 0;
  for (const struct hp_conn *k = s->conns; k; k = k->next)
    n += !k->authed && !k->closing;
  return n;
}

static void server_close(struct server *s, int *fds, int n) {
  for (int i = 0; i < n; i++)
    close(fds[i]);
  hp_conn_close_all(&s->conns, "done");
  uv_close((uv_handle_t *)&s->tcp, NULL);
  uv_close((uv_handle_t *)&s->deadline, NULL);
  while (uv_run(&s->loop, UV_RUN_NOWAIT)) {
  }
  CHECK(s->conns == NULL);
  CHECK_EQ_INT(uv_loop_close(&s->loop), 0);
}

static void real_peer_gets_in(int legacy, int hello) {
  struct server s;
  int fds[NFLOOD];
  server_open(&s, legacy);
  flood(&s, fds, NFLOOD, hello);
  /* the listener takes in the whole flood first */
  while (s.accepted < NFLOOD)
    uv_run(&s.loop, UV_RUN_ONCE);
  unsigned held = strangers(&s);
  CHECK(held <= (legacy ? HP_UNAUTH_MAX : HP_UNAUTH_PER_SOURCE));
  CHECK(s.dropped + (int)held >= NFLOOD - 1);
  /* then the real peer, from the same address as the flood */
  struct sockaddr_storage ss;
  struct hp_conn *c;
  hp_addr_parse("127.0.0.1", s.port, &ss);
  CHECK_EQ_INT(hp_conn_connect(&s.loop, (struct sockaddr *)&ss, secret,
                               HP_AUTH_MESH, &client_cb, &s, &c),
               0);
  run_until_authed(&s);
  CHECK_EQ_INT(s.timed_out, 0);
  CHECK_EQ_INT(s.authed_in, 1);
  CHECK_EQ_INT(s.authed_out, 1);
  hp_conn_close(c, "done");
  server_close(&s, fds, NFLOOD);
}

static void test_accept_tracked(void) {
  real_peer_gets_in(0, 0);
}
static void test_accept_tracked_talkers(void) {
  real_peer_gets_in(0, 1);
}
static void test_refuse_flood(void) {
  real_peer_gets_in(1, 0);
}

/* The silent go first: a stranger that has begun its handshake outlives
 * the silent ones accepted after it. */
static void test_silent_first(void) {
  struct server s;
  int fds[HP_UNAUTH_PER_SOURCE + 8];
  server_open(&s, 0);
  flood(&s, fds, 1, 1); /* the oldest, talking */
  while (s.accepted < 1)
    uv_run(&s.loop, UV_RUN_ONCE);
  while (!s.conns->heard)
    uv_run(&s.loop, UV_RUN_ONCE);
  struct hp_conn *talker = s.conns;
  flood(&s, fds + 1, HP_UNAUTH_PER_SOURCE + 7, 0);
  while (s.accepted < HP_UNAUTH_PER_SOURCE + 8)
    uv_run(&s.loop, UV_RUN_ONCE);
  int found = 0;
  for (struct hp_conn *k = s.conns; k; k = k->next)
    found |= k == talker && !k->closing;
  CHECK(found);
  CHECK_EQ_INT(strangers(&s), HP_UNAUTH_PER_SOURCE);
  server_close(&s, fds, HP_UNAUTH_PER_SOURCE + 8);
}

int main(void) {
  RUN(test_accept_tracked);
  RUN(test_accept_tracked_talkers);
  RUN(test_refuse_flood);
  RUN(test_silent_first);
  TL_EXIT();
}
