/* mesh.c -- the TCP links between the daemons of a multi-host job.
 *
 * Each daemon links to every other (a full mesh: a process set's ring
 * runs among its own hosts, and alltoall exchanges between every pair);
 * host 0 relays news of failures, and each communicator's first host
 * coordinates its negotiation. Of a pair, the higher host index connects and
 * the lower accepts, so each pair has one connection, used both ways. Every
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
#define HC_LOG_SUB HC_SUB_MESH
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdlib.h>
#include <string.h>

#include "../daemon.h"
#include "../timeline.h"

#define HB_MIN_MS 50
#define CLOSE_GRACE_MS 2000 /* queued goodbyes have this long to go out */

static struct hd_job *conn_daemon(struct hp_conn *c) { return c->data; }


static int host_of(struct hd_job *job, struct hp_conn *c) {
  for (uint32_t i = 0; job->peers && i < job->desc.nhosts; i++)
    if (job->peers[i].c == c) return (int)i;
  return -1;
}

struct hp_conn *hd_mesh_conn(struct hd_job *job, int host) {
  if (!job->peers || host < 0 || (uint32_t)host >= job->desc.nhosts)
    return NULL;
  struct hd_peer *p = &job->peers[host];
  return p->lost || !p->c || p->c->closing ? NULL : p->c;
}

int hd_mesh_send(struct hd_job *job, int host, struct hp_wbuf *w) {
  struct hp_conn *c = hd_mesh_conn(job, host);
  if (!c) {
    hp_wbuf_reset(w);
    return -1;
  }
  return hp_conn_send(c, w);
}

/* ---- failures ------------------------------------------------------------ */

static void relay_left(struct hd_job *job, int from);

/* Makes `msg` the reason every pending and later operation fails. */
static void set_gone(struct hd_job *job, int rank, const char *msg) {
  /* a failure while the job waits for a rank started again ends it */
  if (job->gone_rank != -1 && !job->restart_gone) return;
  hd_restart_gone_msg(job, msg);
  if (!job->restart_gone) job->gone_rank = rank; /* (else the crash's) */
  job->restart_gone = 0;
  hd_fail_all(job);
}

/* Spreads m: the coordinator reaches every host (but `skip`, where it came
 * from); the others tell the coordinator, which passes it on. */
static void send_gone(struct hd_job *job, const struct hp_rank_gone *m,
                      int skip) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  for (uint32_t i = 0; i < job->desc.nhosts; i++) {
    if (i == job->desc.host_index || (int)i == skip) continue;
    if (job->desc.host_index != 0 && i != 0) continue;
    hp_enc_rank_gone(&w, m);
    hd_mesh_send(job, (int)i, &w);
  }
  hp_wbuf_free(&w);
}

static void announce(struct hd_job *job, int rank, int host, int restart,
                     const char *msg) {
  if (!job->multi || !job->peers) return;
  if (rank < 0 && !job->left_msg[0]) /* our own undecided ones, too */
    hc_fmt(job->left_msg, sizeof job->left_msg, "%s", msg);
  struct hp_rank_gone m = {.rank = rank, .host = host,
                           .restart = (uint8_t)restart};
  hc_fmt(m.msg, sizeof m.msg, "%s", msg);
  send_gone(job, &m, -1);
}

void hd_mesh_announce_gone(struct hd_job *job, int rank, int host,
                           const char *msg) {
  announce(job, rank, host, 0, msg);
}

void hd_mesh_announce_restart(struct hd_job *job, int rank, int host,
                              const char *msg) {
  announce(job, rank, host, 1, msg);
}

/* Tells horarun that this daemon lost its link to host. */
static void report_lost(struct hd_job *job, int host, const char *why) {
  struct hp_peer_lost m = {.host = job->peers[host].orig};
  hc_fmt(m.msg, sizeof m.msg, "%s", why);
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_peer_lost(&w, &m);
  hd_control_send(job, &w);
  hp_wbuf_free(&w);
}

static void host_lost(struct hd_job *job, int host, const char *why) {
  struct hd_peer *p = &job->peers[host];
  if (p->lost) return;
  p->lost = 1;
  p->trouble_ns = hc_now_ns();
  if (p->c) hp_conn_close(p->c, why);
  if (p->left || job->aborting || job->done_sent) return;
  /* Only this link is known to have failed, not which end is the cause
   * (horarun decides that): both are named. */
  char name[300], me[300], msg[HP_MSG_MAX + 1];
  hd_host_name(job, host, name, sizeof name);
  hd_host_name(job, (int)job->desc.host_index, me, sizeof me);
  hc_fmt(msg, sizeof msg, "%s lost its link to %s: %s", me, name, why);
  hc_error("%s [H2001]", msg);
  report_lost(job, host, why);
  set_gone(job, job->desc.hosts[host].first_rank, msg);
  hd_mesh_announce_gone(job, job->desc.hosts[host].first_rank, host, msg);
  job->up->session_cancel(job);
}

static void on_rank_gone(struct hd_job *job, int from,
                         const struct hp_rank_gone *m) {
  if (m->rank < 0) { /* ranks that ended cleanly (see relay_left) */
    if (m->host < 0 || (uint32_t)m->host >= job->desc.nhosts) return;
    if (!job->left_msg[0])
      hc_fmt(job->left_msg, sizeof job->left_msg, "%s", m->msg);
    if (!job->peers[m->host].left) {
      job->peers[m->host].left = 1;
      hd_fail_undecided(job, from, m->host, m->msg);
    }
    return;
  }
  /* news of a rank started again: what runs fails, but the next session
   * may start; any other news ends that wait too */
  int fresh = job->gone_rank == -1 || (job->restart_gone && !m->restart);
  if (!m->restart) job->up->session_cancel(job);
  if (!fresh) return;
  set_gone(job, m->rank, m->msg);
  job->restart_gone = m->restart;
  /* The coordinator passes news from one host to all the others. */
  if (job->desc.host_index == 0) send_gone(job, m, from);
}

/* The coordinator tells every other host that `from` has left (a
 * RANK_GONE with rank -1: nothing running fails, only what waits for a
 * decision). */
static void relay_left(struct hd_job *job, int from) {
  struct hp_rank_gone m = {.rank = -1, .host = from};
  hc_fmt(m.msg, sizeof m.msg, "%s", job->left_msg);
  send_gone(job, &m, from);
}

/* ---- frames -------------------------------------------------------------- */

static int peer_frame(struct hd_job *job, int from, struct hp_conn *c,
                      const struct hp_frame_hdr *h, unsigned char *p,
                      int *keep) {
  if (hd_reform_drops(job, h->type)) return 0; /* of the old job */
  switch (h->type) {
  case HP_MSG_HEARTBEAT:
    return 0;
  case HP_MSG_BYE: {
    /* Every rank there has ended: what was decided runs to its end (that
     * host sent all it had to send before this), nothing new can start.
     * A host torn down by horarun says why; the cause reaches us on its
     * own (RANK_GONE, our heartbeats, horarun's ABORT). */
    char *why = hp_dec_text(p, h->len);
    job->peers[from].left = 1;
    if (why && !why[0]) {
      char name[300], msg[HP_MSG_MAX + 1];
      hd_host_name(job, from, name, sizeof name);
      hc_fmt(msg, sizeof msg, "the ranks of %s have ended", name);
      if (!job->left_msg[0])
        hc_fmt(job->left_msg, sizeof job->left_msg, "%s", msg);
      hd_fail_undecided(job, from, from, msg);
      /* hosts not linked to it hear it from the coordinator */
      if (job->desc.host_index == 0) relay_left(job, from);
    }
    free(why);
    return 0;
  }
  case HP_MSG_NEGO_READY: {
    struct hp_nego_ready m;
    if (hp_dec_nego_ready(p, h->len, &m) < 0) break;
    struct hd_comm *cm = hd_comm_get(job, m.comm);
    if (cm && cm->removed) return 0;
    if (!cm && m.comm >= job->ncomms) { /* added there, not here yet */
      if (hd_coord_hold(job, from, &m, c->why, sizeof c->why) == 0) return 0;
      return -1; /* host_lost() says it, naming the host */
    }
    int pos = -1;
    for (int k = 0; cm && k < cm->nhosts; k++)
      if (cm->hosts[k] == from) pos = k;
    if (!cm || cm->me != 0 || pos <= 0) break; /* we do not coordinate it */
    if (hd_coord_ready_from(cm, pos, &m) < 0) {
      hc_fmt(c->why, sizeof c->why, "a NEGO_READY names operation number "
             "%u of process set %u, which that host never numbered",
             m.cid, m.comm);
      return -1;
    }
    return 0;
  }
  case HP_MSG_NEGO_DECIDE: {
    struct hp_nego_decide m;
    if (hp_dec_nego_decide(p, h->len, &m) < 0) break;
    struct hd_comm *cm = hd_comm_get(job, m.comm);
    if (cm && cm->removed) return 0;
    if (!cm || cm->nhosts < 2 || cm->hosts[0] != from) break;
    if (hd_decide_resolve(cm, &m, 1) < 0) {
      hc_fmt(c->why, sizeof c->why, "a NEGO_DECIDE names operation number "
             "%u of process set %u, which the coordinator never numbered",
             m.cid, m.comm);
      return -1;
    }
    hd_decide(job, &m);
    return 0;
  }
  case HP_MSG_NEGO_PLAN: {
    struct hp_nego_decide *v;
    uint32_t n;
    if (hp_dec_nego_plan(p, h->len, &v, &n) < 0) break;
    struct hd_comm *cm = hd_comm_get(job, v[0].comm);
    int ok = cm && !cm->removed && cm->nhosts > 1 && cm->hosts[0] == from;
    if (ok && hd_decide_resolve(cm, v, n) < 0) {
      hc_fmt(c->why, sizeof c->why, "a NEGO_PLAN names an operation of "
             "process set %u by a number the coordinator never gave",
             v[0].comm);
      free(v);
      return -1;
    }
    if (ok) hd_decide_plan(job, v, n);
    free(v);
    if (!ok && !(cm && cm->removed)) break;
    return 0;
  }
  case HP_MSG_XDATA:
    if (hd_xcoll_data(job, from, p, h->len, c->placed, keep, c->why,
                      sizeof c->why) < 0)
      return -1;
    return 0;
  case HP_MSG_DATA:
    if (hd_xhost_data(job, from, p, h->len, c->placed, keep, c->why,
                      sizeof c->why) < 0)
      return -1;
    return 0;
  case HP_MSG_SESSION:
    return job->up->session_frame(job, from, p, h->len, c->why, sizeof c->why);
  case HP_MSG_DEADLOCK:
    return job->up->deadlock_frame(job, from, p, h->len, c->why,
                                   sizeof c->why);
  case HP_MSG_TIMELINE:
    return hd_tl_frame(job, from, p, h->len, c->why, sizeof c->why);
  case HP_MSG_RANK_GONE: {
    struct hp_rank_gone m;
    if (hp_dec_rank_gone(p, h->len, &m) < 0) break;
    on_rank_gone(job, from, &m);
    return 0;
  }
  default:
    break;
  }
  hc_fmt(c->why, sizeof c->why, "bad or unexpected message (type %u)",
         h->type);
  return -1;
}

static void check_up(struct hd_job *job) {
  if (job->mesh_up || !job->have_job || job->peers_up < job->peers_needed)
    return;
  job->mesh_up = 1;
  hc_debug("mesh up: %d links in %.2f ms", job->peers_up,
           (double)(hc_now_ns() - job->mesh_start_ns) / 1e6);
  job->up->job_go(job);
}

/* Binds an authenticated connection that said PEER_HELLO to its host. */
static int bind_peer(struct hd_job *job, struct hp_conn *c, uint32_t idx,
                     uint32_t nhosts) {
  if (nhosts != job->desc.nhosts || idx >= nhosts ||
      idx <= job->desc.host_index || !job->peers[idx].needed ||
      job->peers[idx].c) {
    hc_fmt(c->why, sizeof c->why,
           "unexpected PEER_HELLO (host %u of %u)", idx, nhosts);
    return -1;
  }
  job->peers[idx].c = c;
  job->peers[idx].up = 1;
  /* The caller counts the link only once it hears this: before, we could
   * not have understood anything but heartbeats. */
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_peer_hello(&w, job->desc.host_index, job->desc.nhosts);
  hp_conn_send(c, &w);
  hp_wbuf_free(&w);
  job->peers_up++;
  check_up(job);
  return 0;
}

static int early_index(struct hd_job *job, struct hp_conn *c) {
  for (size_t i = 0; i < job->nearly; i++)
    if (job->early[i] == c) return (int)i;
  return -1;
}

static int on_mesh_frame(struct hp_conn *c, const struct hp_frame_hdr *h,
                         unsigned char *p, int *keep) {
  struct hd_job *job = conn_daemon(c);
  int from = host_of(job, c);
  if (from >= 0 && job->peers[from].up)
    return peer_frame(job, from, c, h, p, keep);
  uint32_t idx, nhosts;
  if (from >= 0) { /* we called: its PEER_HELLO says it is ready */
    if (h->type == HP_MSG_HEARTBEAT) return 0;
    if (h->type != HP_MSG_PEER_HELLO ||
        hp_dec_peer_hello(p, h->len, &idx, &nhosts) < 0 ||
        idx != (uint32_t)from || nhosts != job->desc.nhosts) {
      hc_fmt(c->why, sizeof c->why, "expected PEER_HELLO, got type %u",
             h->type);
      return -1;
    }
    job->peers[from].up = 1;
    job->peers_up++;
    check_up(job);
    return 0;
  }
  if (early_index(job, c) >= 0) { /* waiting for our JOB */
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
  if (!job->have_job) { /* it got its JOB before us: wait for ours */
    struct hp_conn **e = realloc(job->early, (job->nearly + 1) * sizeof *e);
    if (!e) return -1;
    job->early = e;
    uint64_t *v = realloc(job->early_hello, (job->nearly + 1) * sizeof *v);
    if (!v) return -1;
    job->early_hello = v;
    job->early_hello[job->nearly] = (uint64_t)idx << 32 | nhosts;
    job->early[job->nearly++] = c;
    return 0;
  }
  return bind_peer(job, c, idx, nhosts);
}

static void on_mesh_close(struct hp_conn *c, const char *why) {
  struct hd_job *job = conn_daemon(c);
  int e = early_index(job, c);
  if (e >= 0) {
    job->nearly--;
    job->early[e] = job->early[job->nearly];
    job->early_hello[e] = job->early_hello[job->nearly];
  }
  if (!job->mesh_conns && job->close_timer.loop &&
      uv_is_active((uv_handle_t *)&job->close_timer)) {
    uv_timer_stop(&job->close_timer); /* every goodbye went out */
    uv_close((uv_handle_t *)&job->close_timer, NULL);
  }
  int host = host_of(job, c);
  if (host < 0) {
    /* one line per stranger, thinned out when they come in floods */
    unsigned n = ++job->nrejected;
    if (n <= 20 || n % 100 == 0)
      hc_warn("%s a connection from %s: %s%s [H2002]",
              c->authed ? "dropped" : "rejected", c->peer, why,
              n == 20 ? " (from now on one line per 100)" : "");
    return;
  }
  if (!job->peers[host].lost) host_lost(job, host, why);
  job->peers[host].c = NULL;
}

/* DATA and XDATA go straight into the running operation's buffers when
 * they can. */
static void *mesh_place(struct hp_conn *c, const struct hp_frame_hdr *h,
                        const unsigned char *pre) {
  struct hd_job *job = conn_daemon(c);
  int from = host_of(job, c);
  if (from < 0 || job->reform_quiet) return NULL;
  return h->type == HP_MSG_XDATA ? hd_xcoll_place(job, from, pre, h->len)
                                 : hd_xhost_place(job, from, pre, h->len);
}

static void set_place(struct hp_conn *c) {
  hp_conn_set_integrity(c, conn_daemon(c)->wire_integrity);
  hp_conn_set_encrypt(c, conn_daemon(c)->wire_encrypt);
  if (conn_daemon(c)->wire_encrypt)
    hc_debug("link %s: every frame encrypted (--wire-encrypt)", c->peer);
  else if (conn_daemon(c)->wire_integrity)
    hc_debug("link %s: the data frames' tags cover their data "
             "(--wire-integrity)", c->peer);
  hp_conn_set_place(c, HP_MSG_DATA, HP_DATA_HDR_LEN, mesh_place);
  hp_conn_set_place(c, HP_MSG_XDATA, HP_XDATA_HDR_LEN, mesh_place);
}

static void on_connected_auth(struct hp_conn *c) {
  struct hd_job *job = conn_daemon(c);
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_peer_hello(&w, job->desc.host_index, job->desc.nhosts);
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
  struct hd_job *job = server->data;
  struct hp_conn *c;
  if (status < 0) return;
  /* strangers in their handshake make room for newer connections: they
   * never keep the real daemons out */
  if (hp_conn_accept_tracked(server, job->secret, HP_AUTH_MESH, &accept_cb, job,
                             &job->mesh_conns, &c) < 0)
    hc_warn("cannot accept a mesh connection");
  else
    set_place(c);
}

/* ---- heartbeats ------------------------------------------------------- */

/* Notes trouble on the link c of p: retransmissions since the last tick,
 * or a silence of half the heartbeat timeout. */
static void watch_link(struct hd_job *job, struct hd_peer *p,
                       struct hp_conn *c, uint64_t now) {
  uint32_t total;
  if (hp_conn_retrans(c, &total) == 0) {
    if (p->watched && total != p->retrans) p->trouble_ns = now;
    p->retrans = total;
    p->watched = 1;
  }
  if (c->heard && !c->paused && now - c->last_rx > job->hb_timeout_ns / 2)
    p->trouble_ns = now;
}

/* The heartbeat to horarun: the hosts (and, as index nhosts, horarun)
 * whose links have been in trouble within twice the heartbeat timeout. */
static void ctl_heartbeat(struct hd_job *job, struct hp_wbuf *w,
                          uint64_t now) {
  uint32_t list[HP_TROUBLE_MAX], n = 0;
  uint64_t recent = 2 * job->hb_timeout_ns;
  for (uint32_t i = 0; job->peers && i < job->desc.nhosts && n < HP_TROUBLE_MAX;
       i++) {
    const struct hd_peer *p = &job->peers[i];
    if (p->trouble_ns && now - p->trouble_ns < recent) list[n++] = p->orig;
  }
  /* (by the hosts' indices as the job started: horarun's) */
  if (job->have_job && job->ctl_link.trouble_ns &&
      now - job->ctl_link.trouble_ns < recent && n < HP_TROUBLE_MAX)
    list[n++] = job->orig_nhosts;
  hp_enc_heartbeat(w, list, n);
}

static void on_hb_timer(uv_timer_t *t) {
  struct hd_job *job = t->data;
  uint64_t now = hc_now_ns();
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  for (uint32_t i = 0; job->peers && i < job->desc.nhosts; i++) {
    struct hd_peer *p = &job->peers[i];
    if (!p->c || p->lost || p->c->closing) continue;
    if (!p->c->authed) continue;
    if (p->up) watch_link(job, p, p->c, now);
    /* a link not up yet waits for the other's JOB (the start timeout
     * covers it); a paused one is silent because we stopped reading */
    if (p->up && !p->c->paused && now - p->c->last_rx > job->hb_timeout_ns) {
      char why[96];
      hc_fmt(why, sizeof why, "no heartbeat for %.1f s",
             (double)(now - p->c->last_rx) / 1e9);
      host_lost(job, (int)i, why);
      continue;
    }
    hp_frame_begin(&w, HP_MSG_HEARTBEAT, 0);
    hp_frame_end(&w);
    hp_conn_send(p->c, &w);
  }
  for (size_t i = 0; i < job->nearly; i++) { /* callers waiting for our JOB */
    hp_frame_begin(&w, HP_MSG_HEARTBEAT, 0);
    hp_frame_end(&w);
    hp_conn_send(job->early[i], &w);
  }
  /* horarun over TCP (a socketpair's end closes when horarun dies) */
  struct hp_conn *c = job->ctl_conn;
  if (c && !c->local && c->authed && !c->closing && !job->ctl_closing) {
    watch_link(job, &job->ctl_link, c, now);
    if (now - c->last_rx > job->hb_timeout_ns) {
      char why[128];
      hc_fmt(why, sizeof why, "lost contact with horarun: no heartbeat for "
             "%.1f s", (double)(now - c->last_rx) / 1e9);
      hp_conn_close(c, why);
    } else {
      ctl_heartbeat(job, &w, now);
      hp_conn_send(c, &w);
    }
  }
  hp_wbuf_free(&w);
}

/* ---- setting up -------------------------------------------------------- */

int hd_iface_addr(const char *name, char *buf, size_t len) {
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

int hd_mesh_listen(struct hd_job *job) {
  struct sockaddr_storage ss;
  if (job->daemon->iface[0]) { /* "eth0,ib0": the first one this host has */
    char list[sizeof job->daemon->iface], *save = NULL, *name;
    hc_fmt(list, sizeof list, "%s", job->daemon->iface);
    int found = 0;
    for (name = strtok_r(list, ",", &save); name && !found;
         name = strtok_r(NULL, ",", &save))
      found = hd_iface_addr(name, job->mesh_addr, sizeof job->mesh_addr) == 0;
    if (!found) {
      hc_error("no network interface of '%s' has an address on this host",
               job->daemon->iface);
      return HORA_EINVAL;
    }
    hp_addr_parse(job->mesh_addr, 0, &ss);
  } else {
    hp_addr_parse("::", 0, &ss);
  }
  uv_tcp_init(job->daemon->loop, &job->mesh_listener);
  job->mesh_listener.data = job;
  job->mesh_listener.data = job;
  job->mesh_listening = 1;
  int rc = uv_tcp_bind(&job->mesh_listener, (struct sockaddr *)&ss, 0);
  if (rc < 0 && !job->daemon->iface[0]) { /* no IPv6 here */
    hp_addr_parse("0.0.0.0", 0, &ss);
    rc = uv_tcp_bind(&job->mesh_listener, (struct sockaddr *)&ss, 0);
  }
  if (rc == 0)
    rc = uv_listen((uv_stream_t *)&job->mesh_listener, 128, on_mesh_connection);
  if (rc < 0) {
    hc_error("cannot listen for the other daemons: %s", uv_strerror(rc));
    return HORA_EIO;
  }
  int len = sizeof ss;
  uv_tcp_getsockname(&job->mesh_listener, (struct sockaddr *)&ss, &len);
  job->mesh_port = ntohs(ss.ss_family == AF_INET
                           ? ((struct sockaddr_in *)&ss)->sin_port
                           : ((struct sockaddr_in6 *)&ss)->sin6_port);
  /* Heartbeats to horarun start now, before the JOB: a host waiting for
   * a slower one must not look lost, and must notice horarun go quiet. */
  job->hb_timeout_ns =
      (uint64_t)(HC_MAX(0.2, hk_double(&job->knobs, heartbeat_timeout)) * 1e9);
  uint64_t every = HC_MAX((uint64_t)HB_MIN_MS, job->hb_timeout_ns / 6000000u);
  uv_timer_init(job->daemon->loop, &job->hb_timer);
  job->hb_timer.data = job;
  uv_timer_init(job->daemon->loop, &job->victim_timer);
  job->victim_timer.data = job;
  uv_timer_start(&job->hb_timer, on_hb_timer, every, every);
  uv_timer_init(job->daemon->loop, &job->close_timer);
  job->close_timer.data = job;
  return 0;
}

/* A full mesh: process sets of any hosts run rings among them, and
 * alltoall exchanges between every pair. */
static int link_needed(int a, int b, int n) {
  (void)n;
  return a != b;
}

int hd_mesh_start(struct hd_job *job) {
  int n = (int)job->desc.nhosts, me = (int)job->desc.host_index;
  job->peers = calloc((size_t)n, sizeof *job->peers);
  if (!job->peers) return HORA_ENOMEM;
  job->orig_nhosts = (uint32_t)n;
  for (int i = 0; i < n; i++) job->peers[i].orig = (uint32_t)i;
  job->link = &hd_link_tcp;
  /* the job's knobs came with the JOB: read the timeout again */
  job->hb_timeout_ns =
      (uint64_t)(HC_MAX(0.2, hk_double(&job->knobs, heartbeat_timeout)) * 1e9);
  uint64_t every = HC_MAX((uint64_t)HB_MIN_MS, job->hb_timeout_ns / 6000000u);
  uv_timer_start(&job->hb_timer, on_hb_timer, every, every);
  for (int i = 0; i < n; i++) {
    if (!link_needed(me, i, n)) continue;
    job->peers[i].needed = 1;
    job->peers_needed++;
    if (i > me) continue; /* it calls us */
    struct sockaddr_storage ss;
    const struct hp_job_host *h = &job->desc.hosts[i];
    char name[300];
    hd_host_name(job, i, name, sizeof name);
    if (hp_addr_parse(h->addr, h->port, &ss) < 0) {
      char why[160];
      hc_fmt(why, sizeof why, "bad address '%s'", h->addr);
      job->peers[i].lost = 1;
      hd_control_fault(job, why);
      return HORA_EINVAL;
    }
    int rc =
        hp_conn_connect(job->daemon->loop, (struct sockaddr *)&ss, job->secret,
                        HP_AUTH_MESH, &connect_cb, job, &job->peers[i].c);
    if (rc == 0) {
      hp_conn_track(job->peers[i].c, &job->mesh_conns);
      set_place(job->peers[i].c);
    }
    if (rc < 0) {
      char why[300];
      hc_fmt(why, sizeof why, "cannot connect to %s at %s port %u: %s", name,
             h->addr, h->port, uv_strerror(rc));
      hd_control_fault(job, why);
      return HORA_EIO;
    }
  }
  /* peers that called before our JOB came */
  while (job->nearly) {
    struct hp_conn *c = job->early[--job->nearly];
    uint64_t v = job->early_hello[job->nearly];
    if (bind_peer(job, c, (uint32_t)(v >> 32), (uint32_t)v) < 0)
      hp_conn_close(c, c->why);
  }
  check_up(job);
  return 0;
}

static void on_close_timer(uv_timer_t *t) {
  struct hd_job *job = t->data;
  hp_conn_close_all(&job->mesh_conns, "its goodbye was not taken in time");
  uv_close((uv_handle_t *)t, NULL);
}

void hd_mesh_close(struct hd_job *job, int graceful) {
  if (job->mesh_listening) {
    job->mesh_listening = 0;
    uv_close((uv_handle_t *)&job->mesh_listener, NULL);
  }
  if (job->hb_timer.loop && !uv_is_closing((uv_handle_t *)&job->hb_timer))
    uv_close((uv_handle_t *)&job->hb_timer, NULL);
  if (job->victim_timer.loop &&
      !uv_is_closing((uv_handle_t *)&job->victim_timer))
    uv_close((uv_handle_t *)&job->victim_timer, NULL);
  /* A peer that stops reading must not keep this horad alive. */
  if (job->close_timer.loop &&
      !uv_is_closing((uv_handle_t *)&job->close_timer)) {
    if (graceful && job->mesh_conns &&
        !uv_is_active((uv_handle_t *)&job->close_timer))
      uv_timer_start(&job->close_timer, on_close_timer, CLOSE_GRACE_MS, 0);
    else if (!graceful || !job->mesh_conns)
      uv_close((uv_handle_t *)&job->close_timer, NULL);
  }
  while (job->nearly)
    hp_conn_close(job->early[--job->nearly], "horad is closing");
  for (uint32_t i = 0; job->peers && i < job->desc.nhosts; i++) {
    struct hd_peer *p = &job->peers[i];
    if (!p->c || p->c->closing) continue;
    if (graceful && !p->lost) {
      struct hp_wbuf w;
      hp_wbuf_init(&w);
      hp_enc_text(&w, HP_MSG_BYE, job->aborting ? "torn down" : "");
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
  for (struct hp_conn *c = job->mesh_conns; c; c = c->next)
    if (!c->close_when_sent) hp_conn_close(c, "horad is closing");
}

/* ---- the link interface of the cross-host algorithms ------------------- */

static int tcp_send(struct hd_job *job, int host, const void *hdr,
                    size_t hdrlen, const void *p, size_t n,
                    void (*done)(void *, int), void *arg) {
  struct hp_conn *c = hd_mesh_conn(job, host);
  if (!c) return -1;
  hp_conn_send_zc(c, hdr, hdrlen, p, n, done, arg); /* done always comes */
  return 0;
}

static void tcp_pause(struct hd_job *job, int host) {
  struct hp_conn *c = hd_mesh_conn(job, host);
  if (c) hp_conn_pause(c);
}

static void tcp_resume(struct hd_job *job, int host) {
  struct hp_conn *c = hd_mesh_conn(job, host);
  if (c) hp_conn_resume(c);
}

static int tcp_paused(struct hd_job *job, int host) {
  struct hp_conn *c = hd_mesh_conn(job, host);
  return c && c->paused;
}

static void tcp_unplace(struct hd_job *job, int host) {
  struct hp_conn *c = hd_mesh_conn(job, host);
  if (c) hp_conn_unplace(c);
}

static void tcp_drop(struct hd_job *job, int host, const char *why) {
  struct hp_conn *c = hd_mesh_conn(job, host);
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
