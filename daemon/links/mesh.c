/* mesh.c -- the TCP links between the daemons of a multi-host job.
 *
 * Each daemon links to every other (a full mesh: a process set's ring
 * runs among its own hosts, and alltoall exchanges between every pair);
 * host 0 relays news of failures, and each communicator's first host
 * coordinates its negotiation. Of a pair, the higher host index connects and the
 * lower accepts, so each pair has one connection, used both ways. Every
 * connection starts with the handshake of auth.h, then PEER_HELLO says
 * which host is calling. Heartbeats flow on every link (and on the TCP
 * control connection to horarun); a link that breaks or falls silent for
 * the heartbeat timeout makes its host "lost": whatever waits on it fails
 * at once on every rank, naming the host, and horarun is told
 * (PEER_LOST). Which host is the cause only horarun can tell, from every
 * daemon's word: a cut or lossy host looks lost from here and everything
 * else looks lost from there. So each heartbeat to horarun also lists
 * the hosts whose links have been in trouble lately (retransmissions,
 * silences, a loss): the host in trouble with everyone is the culprit. */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdlib.h>
#include <string.h>

#include "../daemon.h"

#define HB_MIN_MS 50
#define CLOSE_GRACE_MS 2000 /* queued goodbyes have this long to go out */

static struct hd_daemon *conn_daemon(struct hp_conn *c) { return c->data; }


static int host_of(struct hd_daemon *d, struct hp_conn *c) {
  for (uint32_t i = 0; d->peers && i < d->job.nhosts; i++)
    if (d->peers[i].c == c) return (int)i;
  return -1;
}

struct hp_conn *hd_mesh_conn(struct hd_daemon *d, int host) {
  if (!d->peers || host < 0 || (uint32_t)host >= d->job.nhosts) return NULL;
  struct hd_peer *p = &d->peers[host];
  return p->lost || !p->c || p->c->closing ? NULL : p->c;
}

int hd_mesh_send(struct hd_daemon *d, int host, struct hp_wbuf *w) {
  struct hp_conn *c = hd_mesh_conn(d, host);
  if (!c) {
    hp_wbuf_reset(w);
    return -1;
  }
  return hp_conn_send(c, w);
}

/* ---- failures ------------------------------------------------------------ */

static void relay_left(struct hd_daemon *d, int from);

/* Makes `msg` the reason every pending and later operation fails. */
static void set_gone(struct hd_daemon *d, int rank, const char *msg) {
  if (d->gone_rank != -1) return;
  d->gone_rank = rank;
  hc_fmt(d->gone_msg, sizeof d->gone_msg, "%s", msg);
  hd_fail_all(d);
}

/* Spreads m: the coordinator reaches every host (but `skip`, where it came
 * from); the others tell the coordinator, which passes it on. */
static void send_gone(struct hd_daemon *d, const struct hp_rank_gone *m,
                      int skip) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  for (uint32_t i = 0; i < d->job.nhosts; i++) {
    if (i == d->job.host_index || (int)i == skip) continue;
    if (d->job.host_index != 0 && i != 0) continue;
    hp_enc_rank_gone(&w, m);
    hd_mesh_send(d, (int)i, &w);
  }
  hp_wbuf_free(&w);
}

void hd_mesh_announce_gone(struct hd_daemon *d, int rank, int host,
                           const char *msg) {
  if (!d->multi || !d->peers) return;
  if (rank < 0 && !d->left_msg[0]) /* our own undecided ones, too */
    hc_fmt(d->left_msg, sizeof d->left_msg, "%s", msg);
  struct hp_rank_gone m = {.rank = rank, .host = host};
  hc_fmt(m.msg, sizeof m.msg, "%s", msg);
  send_gone(d, &m, -1);
}

/* Tells horarun that this daemon lost its link to host. */
static void report_lost(struct hd_daemon *d, int host, const char *why) {
  struct hp_peer_lost m = {.host = (uint32_t)host};
  hc_fmt(m.msg, sizeof m.msg, "%s", why);
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_peer_lost(&w, &m);
  hd_control_send(d, &w);
  hp_wbuf_free(&w);
}

static void host_lost(struct hd_daemon *d, int host, const char *why) {
  struct hd_peer *p = &d->peers[host];
  if (p->lost) return;
  p->lost = 1;
  p->trouble_ns = hc_now_ns();
  if (p->c) hp_conn_close(p->c, why);
  if (p->left || d->aborting || d->done_sent) return;
  /* Only this link is known to have failed, not which end is the cause
   * (horarun decides that): both are named. */
  char name[300], me[300], msg[HP_MSG_MAX + 1];
  hd_host_name(d, host, name, sizeof name);
  hd_host_name(d, (int)d->job.host_index, me, sizeof me);
  hc_fmt(msg, sizeof msg, "%s lost its link to %s: %s", me, name, why);
  hc_error("%s", msg);
  report_lost(d, host, why);
  set_gone(d, d->job.hosts[host].first_rank, msg);
  hd_mesh_announce_gone(d, d->job.hosts[host].first_rank, host, msg);
  d->up->session_cancel(d);
}

static void on_rank_gone(struct hd_daemon *d, int from,
                         const struct hp_rank_gone *m) {
  if (m->rank < 0) { /* ranks that ended cleanly (see relay_left) */
    if (m->host < 0 || (uint32_t)m->host >= d->job.nhosts) return;
    if (!d->left_msg[0]) hc_fmt(d->left_msg, sizeof d->left_msg, "%s", m->msg);
    if (!d->peers[m->host].left) {
      d->peers[m->host].left = 1;
      hd_fail_undecided(d, from, m->host, m->msg);
    }
    return;
  }
  int fresh = d->gone_rank == -1;
  set_gone(d, m->rank, m->msg);
  d->up->session_cancel(d);
  /* The coordinator passes news from one host to all the others. */
  if (fresh && d->job.host_index == 0) send_gone(d, m, from);
}

/* The coordinator tells every other host that `from` has left (a
 * RANK_GONE with rank -1: nothing running fails, only what waits for a
 * decision). */
static void relay_left(struct hd_daemon *d, int from) {
  struct hp_rank_gone m = {.rank = -1, .host = from};
  hc_fmt(m.msg, sizeof m.msg, "%s", d->left_msg);
  send_gone(d, &m, from);
}

/* ---- frames -------------------------------------------------------------- */

static int peer_frame(struct hd_daemon *d, int from, struct hp_conn *c,
                      const struct hp_frame_hdr *h, unsigned char *p,
                      int *keep) {
  switch (h->type) {
  case HP_MSG_HEARTBEAT:
    return 0;
  case HP_MSG_BYE: {
    /* Every rank there has ended: what was decided runs to its end (that
     * host sent all it had to send before this), nothing new can start.
     * A host torn down by horarun says why; the cause reaches us on its
     * own (RANK_GONE, our heartbeats, horarun's ABORT). */
    char *why = hp_dec_text(p, h->len);
    d->peers[from].left = 1;
    if (why && !why[0]) {
      char name[300], msg[HP_MSG_MAX + 1];
      hd_host_name(d, from, name, sizeof name);
      hc_fmt(msg, sizeof msg, "the ranks of %s have ended", name);
      if (!d->left_msg[0]) hc_fmt(d->left_msg, sizeof d->left_msg, "%s", msg);
      hd_fail_undecided(d, from, from, msg);
      /* hosts not linked to it hear it from the coordinator */
      if (d->job.host_index == 0) relay_left(d, from);
    }
    free(why);
    return 0;
  }
  case HP_MSG_NEGO_READY: {
    struct hp_nego_ready m;
    if (hp_dec_nego_ready(p, h->len, &m) < 0) break;
    struct hd_comm *cm = hd_comm_get(d, m.comm);
    if (cm && cm->removed) return 0;
    if (!cm && m.comm >= d->ncomms) { /* added there, not here yet */
      if (hd_coord_hold(d, from, &m, c->why, sizeof c->why) == 0) return 0;
      return -1; /* host_lost() says it, naming the host */
    }
    int pos = -1;
    for (int k = 0; cm && k < cm->nhosts; k++)
      if (cm->hosts[k] == from) pos = k;
    if (!cm || cm->me != 0 || pos <= 0) break; /* we do not coordinate it */
    hd_coord_ready(cm, pos, &m);
    return 0;
  }
  case HP_MSG_NEGO_DECIDE: {
    struct hp_nego_decide m;
    if (hp_dec_nego_decide(p, h->len, &m) < 0) break;
    struct hd_comm *cm = hd_comm_get(d, m.comm);
    if (cm && cm->removed) return 0;
    if (!cm || cm->nhosts < 2 || cm->hosts[0] != from) break;
    hd_decide(d, &m);
    return 0;
  }
  case HP_MSG_NEGO_PLAN: {
    struct hp_nego_decide *v;
    uint32_t n;
    if (hp_dec_nego_plan(p, h->len, &v, &n) < 0) break;
    struct hd_comm *cm = hd_comm_get(d, v[0].comm);
    int ok = cm && !cm->removed && cm->nhosts > 1 && cm->hosts[0] == from;
    if (ok) hd_decide_plan(d, v, n);
    free(v);
    if (!ok && !(cm && cm->removed)) break;
    return 0;
  }
  case HP_MSG_XDATA:
    if (hd_xcoll_data(d, from, p, h->len, c->placed, keep, c->why,
                      sizeof c->why) < 0)
      return -1;
    return 0;
  case HP_MSG_DATA:
    if (hd_xhost_data(d, from, p, h->len, c->placed, keep, c->why,
                      sizeof c->why) < 0)
      return -1;
    return 0;
  case HP_MSG_SESSION:
    return d->up->session_frame(d, from, p, h->len, c->why, sizeof c->why);
  case HP_MSG_RANK_GONE: {
    struct hp_rank_gone m;
    if (hp_dec_rank_gone(p, h->len, &m) < 0) break;
    on_rank_gone(d, from, &m);
    return 0;
  }
  default:
    break;
  }
  hc_fmt(c->why, sizeof c->why, "bad or unexpected message (type %u)",
         h->type);
  return -1;
}

static void check_up(struct hd_daemon *d) {
  if (d->mesh_up || !d->have_job || d->peers_up < d->peers_needed) return;
  d->mesh_up = 1;
  hc_debug("mesh up: %d links", d->peers_up);
  d->up->job_go(d);
}

/* Binds an authenticated connection that said PEER_HELLO to its host. */
static int bind_peer(struct hd_daemon *d, struct hp_conn *c, uint32_t idx,
                     uint32_t nhosts) {
  if (nhosts != d->job.nhosts || idx >= nhosts ||
      idx <= d->job.host_index || !d->peers[idx].needed || d->peers[idx].c) {
    hc_fmt(c->why, sizeof c->why,
           "unexpected PEER_HELLO (host %u of %u)", idx, nhosts);
    return -1;
  }
  d->peers[idx].c = c;
  d->peers[idx].up = 1;
  /* The caller counts the link only once it hears this: before, we could
   * not have understood anything but heartbeats. */
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_peer_hello(&w, d->job.host_index, d->job.nhosts);
  hp_conn_send(c, &w);
  hp_wbuf_free(&w);
  d->peers_up++;
  check_up(d);
  return 0;
}

static int early_index(struct hd_daemon *d, struct hp_conn *c) {
  for (size_t i = 0; i < d->nearly; i++)
    if (d->early[i] == c) return (int)i;
  return -1;
}

static int on_mesh_frame(struct hp_conn *c, const struct hp_frame_hdr *h,
                         unsigned char *p, int *keep) {
  struct hd_daemon *d = conn_daemon(c);
  int from = host_of(d, c);
  if (from >= 0 && d->peers[from].up) return peer_frame(d, from, c, h, p, keep);
  uint32_t idx, nhosts;
  if (from >= 0) { /* we called: its PEER_HELLO says it is ready */
    if (h->type == HP_MSG_HEARTBEAT) return 0;
    if (h->type != HP_MSG_PEER_HELLO ||
        hp_dec_peer_hello(p, h->len, &idx, &nhosts) < 0 ||
        idx != (uint32_t)from || nhosts != d->job.nhosts) {
      hc_fmt(c->why, sizeof c->why, "expected PEER_HELLO, got type %u",
             h->type);
      return -1;
    }
    d->peers[from].up = 1;
    d->peers_up++;
    check_up(d);
    return 0;
  }
  if (early_index(d, c) >= 0) { /* waiting for our JOB */
    if (h->type == HP_MSG_HEARTBEAT) return 0;
    hc_fmt(c->why, sizeof c->why, "message type %u before the link is up",
           h->type);
    return -1;
  }
  /* An accepted connection says who it is first. */
  if (h->type != HP_MSG_PEER_HELLO ||
      hp_dec_peer_hello(p, h->len, &idx, &nhosts) < 0) {
    hc_fmt(c->why, sizeof c->why, "expected PEER_HELLO, got type %u",
           h->type);
    return -1;
  }
  if (!d->have_job) { /* it got its JOB before us: wait for ours */
    struct hp_conn **e = realloc(d->early, (d->nearly + 1) * sizeof *e);
    if (!e) return -1;
    d->early = e;
    uint64_t *v = realloc(d->early_hello, (d->nearly + 1) * sizeof *v);
    if (!v) return -1;
    d->early_hello = v;
    d->early_hello[d->nearly] = (uint64_t)idx << 32 | nhosts;
    d->early[d->nearly++] = c;
    return 0;
  }
  return bind_peer(d, c, idx, nhosts);
}

static void on_mesh_close(struct hp_conn *c, const char *why) {
  struct hd_daemon *d = conn_daemon(c);
  int e = early_index(d, c);
  if (e >= 0) {
    d->nearly--;
    d->early[e] = d->early[d->nearly];
    d->early_hello[e] = d->early_hello[d->nearly];
  }
  if (!d->mesh_conns && d->close_timer.loop &&
      uv_is_active((uv_handle_t *)&d->close_timer)) {
    uv_timer_stop(&d->close_timer); /* every goodbye went out */
    uv_close((uv_handle_t *)&d->close_timer, NULL);
  }
  int host = host_of(d, c);
  if (host < 0) {
    /* one line per stranger, thinned out when they come in floods */
    unsigned n = ++d->nrejected;
    if (n <= 20 || n % 100 == 0)
      hc_warn("%s a connection from %s: %s%s",
              c->authed ? "dropped" : "rejected", c->peer, why,
              n == 20 ? " (from now on one line per 100)" : "");
    return;
  }
  if (!d->peers[host].lost) host_lost(d, host, why);
  d->peers[host].c = NULL;
}

/* DATA and XDATA go straight into the running operation's buffers when
 * they can. */
static void *mesh_place(struct hp_conn *c, const struct hp_frame_hdr *h,
                        const unsigned char *pre) {
  struct hd_daemon *d = conn_daemon(c);
  int from = host_of(d, c);
  if (from < 0) return NULL;
  return h->type == HP_MSG_XDATA ? hd_xcoll_place(d, from, pre, h->len)
                                 : hd_xhost_place(d, from, pre, h->len);
}

static void set_place(struct hp_conn *c) {
  hp_conn_set_place(c, HP_MSG_DATA, HP_DATA_HDR_LEN, mesh_place);
  hp_conn_set_place(c, HP_MSG_XDATA, HP_XDATA_HDR_LEN, mesh_place);
}

static void on_connected_auth(struct hp_conn *c) {
  struct hd_daemon *d = conn_daemon(c);
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_peer_hello(&w, d->job.host_index, d->job.nhosts);
  hp_conn_send(c, &w);
  hp_wbuf_free(&w);
  /* up once it answers (on_mesh_frame) */
}

static const struct hp_conn_cb accept_cb = {
    .on_frame = on_mesh_frame, .on_close = on_mesh_close};
static const struct hp_conn_cb connect_cb = {.on_auth = on_connected_auth,
                                             .on_frame = on_mesh_frame,
                                             .on_close = on_mesh_close};

static void on_mesh_connection(uv_stream_t *server, int status) {
  struct hd_daemon *d = server->data;
  struct hp_conn *c;
  if (status < 0) return;
  /* strangers in their handshake make room for newer connections: they
   * never keep the real daemons out */
  if (hp_conn_accept_tracked(server, d->secret, HP_AUTH_MESH, &accept_cb, d,
                             &d->mesh_conns, &c) < 0)
    hc_warn("cannot accept a mesh connection");
  else
    set_place(c);
}

/* ---- heartbeats ------------------------------------------------------- */

/* Notes trouble on the link c of p: retransmissions since the last tick,
 * or a silence of half the heartbeat timeout. */
static void watch_link(struct hd_daemon *d, struct hd_peer *p,
                       struct hp_conn *c, uint64_t now) {
  uint32_t total;
  if (hp_conn_retrans(c, &total) == 0) {
    if (p->watched && total != p->retrans) p->trouble_ns = now;
    p->retrans = total;
    p->watched = 1;
  }
  if (c->heard && !c->paused && now - c->last_rx > d->hb_timeout_ns / 2)
    p->trouble_ns = now;
}

/* The heartbeat to horarun: the hosts (and, as index nhosts, horarun)
 * whose links have been in trouble within twice the heartbeat timeout. */
static void ctl_heartbeat(struct hd_daemon *d, struct hp_wbuf *w,
                          uint64_t now) {
  uint32_t list[HP_TROUBLE_MAX], n = 0;
  uint64_t recent = 2 * d->hb_timeout_ns;
  for (uint32_t i = 0; d->peers && i < d->job.nhosts && n < HP_TROUBLE_MAX;
       i++) {
    const struct hd_peer *p = &d->peers[i];
    if (p->trouble_ns && now - p->trouble_ns < recent) list[n++] = i;
  }
  if (d->have_job && d->ctl_link.trouble_ns &&
      now - d->ctl_link.trouble_ns < recent && n < HP_TROUBLE_MAX)
    list[n++] = d->job.nhosts;
  hp_enc_heartbeat(w, list, n);
}

static void on_hb_timer(uv_timer_t *t) {
  struct hd_daemon *d = t->data;
  uint64_t now = hc_now_ns();
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  for (uint32_t i = 0; d->peers && i < d->job.nhosts; i++) {
    struct hd_peer *p = &d->peers[i];
    if (!p->c || p->lost || p->c->closing) continue;
    if (!p->c->authed) continue;
    if (p->up) watch_link(d, p, p->c, now);
    /* a link not up yet waits for the other's JOB (the start timeout
     * covers it); a paused one is silent because we stopped reading */
    if (p->up && !p->c->paused && now - p->c->last_rx > d->hb_timeout_ns) {
      char why[96];
      hc_fmt(why, sizeof why, "no heartbeat for %.1f s",
             (double)(now - p->c->last_rx) / 1e9);
      host_lost(d, (int)i, why);
      continue;
    }
    hp_frame_begin(&w, HP_MSG_HEARTBEAT, 0);
    hp_frame_end(&w);
    hp_conn_send(p->c, &w);
  }
  for (size_t i = 0; i < d->nearly; i++) { /* callers waiting for our JOB */
    hp_frame_begin(&w, HP_MSG_HEARTBEAT, 0);
    hp_frame_end(&w);
    hp_conn_send(d->early[i], &w);
  }
  /* horarun over TCP (a socketpair's end closes when horarun dies) */
  struct hp_conn *c = d->ctl_conn;
  if (c && !c->local && c->authed && !c->closing && !d->ctl_closing) {
    watch_link(d, &d->ctl_link, c, now);
    if (now - c->last_rx > d->hb_timeout_ns) {
      char why[128];
      hc_fmt(why, sizeof why, "lost contact with horarun: no heartbeat for "
             "%.1f s", (double)(now - c->last_rx) / 1e9);
      hp_conn_close(c, why);
    } else {
      ctl_heartbeat(d, &w, now);
      hp_conn_send(c, &w);
    }
  }
  hp_wbuf_free(&w);
}

/* ---- setting up -------------------------------------------------------- */

/* The IPv4 (else IPv6) address of interface `name`, or -1. */
static int iface_addr(const char *name, char *buf, size_t len) {
  struct ifaddrs *ifs, *i;
  if (getifaddrs(&ifs) < 0) return -1;
  int found = -1;
  for (int fam = AF_INET; fam && found < 0;
       fam = fam == AF_INET ? AF_INET6 : 0) {
    for (i = ifs; i && found < 0; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != fam ||
          strcmp(i->ifa_name, name))
        continue;
      const void *a =
          fam == AF_INET
              ? (const void *)&((struct sockaddr_in *)i->ifa_addr)->sin_addr
              : (const void *)&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
      if (inet_ntop(fam, a, buf, (socklen_t)len)) found = 0;
      if (found == 0 && fam == AF_INET6 &&
          IN6_IS_ADDR_LINKLOCAL(
              &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr)) {
        size_t n = strlen(buf);
        hc_fmt(buf + n, len - n, "%%%u", if_nametoindex(name));
      }
    }
  }
  freeifaddrs(ifs);
  return found;
}

int hd_mesh_listen(struct hd_daemon *d) {
  struct sockaddr_storage ss;
  if (d->iface[0]) { /* "eth0,ib0": the first one this host has */
    char list[sizeof d->iface], *save = NULL, *name;
    hc_fmt(list, sizeof list, "%s", d->iface);
    int found = 0;
    for (name = strtok_r(list, ",", &save); name && !found;
         name = strtok_r(NULL, ",", &save))
      found = iface_addr(name, d->mesh_addr, sizeof d->mesh_addr) == 0;
    if (!found) {
      hc_error("no network interface of '%s' has an address on this host",
               d->iface);
      return HORA_EINVAL;
    }
    hp_addr_parse(d->mesh_addr, 0, &ss);
  } else {
    hp_addr_parse("::", 0, &ss);
  }
  uv_tcp_init(d->loop, &d->mesh_listener);
  d->mesh_listener.data = d;
  d->mesh_listener.data = d;
  d->mesh_listening = 1;
  int rc = uv_tcp_bind(&d->mesh_listener, (struct sockaddr *)&ss, 0);
  if (rc < 0 && !d->iface[0]) { /* no IPv6 here */
    hp_addr_parse("0.0.0.0", 0, &ss);
    rc = uv_tcp_bind(&d->mesh_listener, (struct sockaddr *)&ss, 0);
  }
  if (rc == 0)
    rc = uv_listen((uv_stream_t *)&d->mesh_listener, 128, on_mesh_connection);
  if (rc < 0) {
    hc_error("cannot listen for the other daemons: %s", uv_strerror(rc));
    return HORA_EIO;
  }
  int len = sizeof ss;
  uv_tcp_getsockname(&d->mesh_listener, (struct sockaddr *)&ss, &len);
  d->mesh_port = ntohs(ss.ss_family == AF_INET
                           ? ((struct sockaddr_in *)&ss)->sin_port
                           : ((struct sockaddr_in6 *)&ss)->sin6_port);
  /* Heartbeats to horarun start now, before the JOB: a host waiting for
   * a slower one must not look lost, and must notice horarun go quiet. */
  d->hb_timeout_ns =
      (uint64_t)(HC_MAX(0.2, hk_double(&d->knobs, heartbeat_timeout)) * 1e9);
  uint64_t every = HC_MAX((uint64_t)HB_MIN_MS, d->hb_timeout_ns / 6000000u);
  uv_timer_init(d->loop, &d->hb_timer);
  d->hb_timer.data = d;
  uv_timer_init(d->loop, &d->victim_timer);
  d->victim_timer.data = d;
  uv_timer_start(&d->hb_timer, on_hb_timer, every, every);
  uv_timer_init(d->loop, &d->close_timer);
  d->close_timer.data = d;
  return 0;
}

/* A full mesh: process sets of any hosts run rings among them, and
 * alltoall exchanges between every pair. */
static int link_needed(int a, int b, int n) {
  (void)n;
  return a != b;
}

int hd_mesh_start(struct hd_daemon *d) {
  int n = (int)d->job.nhosts, me = (int)d->job.host_index;
  d->peers = calloc((size_t)n, sizeof *d->peers);
  if (!d->peers) return HORA_ENOMEM;
  d->link = &hd_link_tcp;
  /* the job's knobs came with the JOB: read the timeout again */
  d->hb_timeout_ns =
      (uint64_t)(HC_MAX(0.2, hk_double(&d->knobs, heartbeat_timeout)) * 1e9);
  uint64_t every = HC_MAX((uint64_t)HB_MIN_MS, d->hb_timeout_ns / 6000000u);
  uv_timer_start(&d->hb_timer, on_hb_timer, every, every);
  for (int i = 0; i < n; i++) {
    if (!link_needed(me, i, n)) continue;
    d->peers[i].needed = 1;
    d->peers_needed++;
    if (i > me) continue; /* it calls us */
    struct sockaddr_storage ss;
    const struct hp_job_host *h = &d->job.hosts[i];
    char name[300];
    hd_host_name(d, i, name, sizeof name);
    if (hp_addr_parse(h->addr, h->port, &ss) < 0) {
      char why[160];
      hc_fmt(why, sizeof why, "bad address '%s'", h->addr);
      d->peers[i].lost = 1;
      hd_control_fault(d, why);
      return HORA_EINVAL;
    }
    int rc = hp_conn_connect(d->loop, (struct sockaddr *)&ss, d->secret,
                             HP_AUTH_MESH, &connect_cb, d, &d->peers[i].c);
    if (rc == 0) {
      hp_conn_track(d->peers[i].c, &d->mesh_conns);
      set_place(d->peers[i].c);
    }
    if (rc < 0) {
      char why[300];
      hc_fmt(why, sizeof why, "cannot connect to %s at %s port %u: %s", name,
             h->addr, h->port, uv_strerror(rc));
      hd_control_fault(d, why);
      return HORA_EIO;
    }
  }
  /* peers that called before our JOB came */
  while (d->nearly) {
    struct hp_conn *c = d->early[--d->nearly];
    uint64_t v = d->early_hello[d->nearly];
    if (bind_peer(d, c, (uint32_t)(v >> 32), (uint32_t)v) < 0)
      hp_conn_close(c, c->why);
  }
  check_up(d);
  return 0;
}

static void on_close_timer(uv_timer_t *t) {
  struct hd_daemon *d = t->data;
  hp_conn_close_all(&d->mesh_conns, "its goodbye was not taken in time");
  uv_close((uv_handle_t *)t, NULL);
}

void hd_mesh_close(struct hd_daemon *d, int graceful) {
  if (d->mesh_listening) {
    d->mesh_listening = 0;
    uv_close((uv_handle_t *)&d->mesh_listener, NULL);
  }
  if (d->hb_timer.loop && !uv_is_closing((uv_handle_t *)&d->hb_timer))
    uv_close((uv_handle_t *)&d->hb_timer, NULL);
  if (d->victim_timer.loop &&
      !uv_is_closing((uv_handle_t *)&d->victim_timer))
    uv_close((uv_handle_t *)&d->victim_timer, NULL);
  /* A peer that stops reading must not keep this horad alive. */
  if (d->close_timer.loop && !uv_is_closing((uv_handle_t *)&d->close_timer)) {
    if (graceful && d->mesh_conns && !uv_is_active((uv_handle_t *)&d->close_timer))
      uv_timer_start(&d->close_timer, on_close_timer, CLOSE_GRACE_MS, 0);
    else if (!graceful || !d->mesh_conns)
      uv_close((uv_handle_t *)&d->close_timer, NULL);
  }
  while (d->nearly)
    hp_conn_close(d->early[--d->nearly], "horad is closing");
  for (uint32_t i = 0; d->peers && i < d->job.nhosts; i++) {
    struct hd_peer *p = &d->peers[i];
    if (!p->c || p->c->closing) continue;
    if (graceful && !p->lost) {
      struct hp_wbuf w;
      hp_wbuf_init(&w);
      hp_enc_text(&w, HP_MSG_BYE, d->aborting ? "torn down" : "");
      hp_conn_send(p->c, &w);
      hp_wbuf_free(&w);
      p->left = 1; /* ours: its closing is no loss */
      p->lost = 1;
      hp_conn_close_when_sent(p->c);
    } else {
      p->lost = 1;
      hp_conn_close(p->c, "horad is closing");
    }
  }
  /* strangers still in their handshake, and anything else not a peer */
  for (struct hp_conn *c = d->mesh_conns; c; c = c->next)
    if (!c->close_when_sent) hp_conn_close(c, "horad is closing");
}

/* ---- the link interface of the cross-host algorithms ------------------- */

static int tcp_send(struct hd_daemon *d, int host, const void *hdr,
                    size_t hdrlen, const void *p, size_t n,
                    void (*done)(void *, int), void *arg) {
  struct hp_conn *c = hd_mesh_conn(d, host);
  if (!c) return -1;
  hp_conn_send_zc(c, hdr, hdrlen, p, n, done, arg); /* done always comes */
  return 0;
}

static void tcp_pause(struct hd_daemon *d, int host) {
  struct hp_conn *c = hd_mesh_conn(d, host);
  if (c) hp_conn_pause(c);
}

static void tcp_resume(struct hd_daemon *d, int host) {
  struct hp_conn *c = hd_mesh_conn(d, host);
  if (c) hp_conn_resume(c);
}

static int tcp_paused(struct hd_daemon *d, int host) {
  struct hp_conn *c = hd_mesh_conn(d, host);
  return c && c->paused;
}

static void tcp_unplace(struct hd_daemon *d, int host) {
  struct hp_conn *c = hd_mesh_conn(d, host);
  if (c) hp_conn_unplace(c);
}

static void tcp_drop(struct hd_daemon *d, int host, const char *why) {
  struct hp_conn *c = hd_mesh_conn(d, host);
  if (c) hp_conn_close(c, why);
}

const struct hd_link hd_link_tcp = {
    .name = "tcp",
    .send = tcp_send,
    .pause = tcp_pause,
    .resume = tcp_resume,
    .paused = tcp_paused,
    .unplace = tcp_unplace,
    .drop = tcp_drop,
    .send_frames = hd_mesh_send,
};
