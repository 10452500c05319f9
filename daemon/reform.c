/* reform.c -- an elastic job re-formed in place: horarun leaves out the
 * hosts a failure is blamed on, and the daemons of the others go on with
 * the ranks they have, numbered anew, without starting any process again.
 *
 * When a rank or a host is lost in a reformable job (horarun's elastic
 * jobs, elastic_in_place), what runs fails on every rank as before, but
 * the ranks that call hora_init() again (hora.elastic.run's reset) wait
 * for horarun's word instead of the job ending: a REFORM, or an ABORT.
 * horarun decides once, from every daemon's word and its own (which hosts
 * to blame, whether enough ranks are left), and sends each kept host its
 * REFORM: the kept hosts in order, their ranks' new numbers.
 *
 * Each kept daemon then makes the job the smaller one: its peers and host
 * list without the left-out hosts (their links closed), its ranks'
 * numbers, fresh communicators; and it sends every kept peer a FENCE over
 * their link. What a peer sent before its FENCE belongs to the job before
 * the re-forming and is dropped; until the next session only SESSION
 * frames pass. Once the REFORM is in, every kept peer's FENCE is in and
 * every local rank is back, the host asks for the next session as after
 * any hora_shutdown()/hora_init() (session.c), the new host 0 starts it,
 * and each rank's hora_init() returns with its new rank and size. The
 * FENCEs carry each host's session count, so every host numbers the new
 * session alike.
 *
 * horad tells horarun of ranks and hosts by the numbers the job started
 * with (struct hd_rank's slot, struct hd_peer's orig), which never change.
 * A REFORM that does not come within the wait (hd_reform_wait_ms) ends
 * it: the ranks' hora_init() fails, as without re-forming. A kept host lost before the
 * new session starts makes the wait begin again (hd_session_cancel), and
 * horarun sends the next REFORM (its number one higher): it is applied
 * to the job as the last one left it, FENCEs of the earlier one counting
 * for nothing. */
#define HC_LOG_SUB HC_SUB_SESSION
#include <stdlib.h>
#include <string.h>

#include "daemon.h"

#define REFORM_WAIT_MS 30000 /* see hd_reform_wait_ms */

uint64_t hd_reform_wait_ms(const struct hd_job *job) {
  /* 30 s, or --elastic-timeout when shorter (at least 1 s)... */
  long et = HC_MAX(1L, (long)hk_int(&job->knobs, elastic_timeout));
  uint64_t ms = HC_MIN((uint64_t)REFORM_WAIT_MS, (uint64_t)et * 1000u);
  /* ...but never so short that horarun, which may learn of a lost host
   * only when its heartbeats stop, could not have answered */
  return HC_MAX(ms, 4 * job->hb_timeout_ns / 1000000u);
}

static void on_reform_timer(uv_timer_t *t) {
  struct hd_job *job = t->data;
  if (!job->reform_wait) return;
  job->reform_wait = 0;
  hc_warn("horarun did not re-form the job in time; the ranks waiting in "
          "hora_init() fail");
  hd_local_drop_rejoins(job, "horarun did not re-form the job in time");
}

void hd_reform_hold(struct hd_job *job) {
  if (job->reform_wait || !job->reform_timer.loop) return;
  job->reform_wait = 1;
  uv_timer_start(&job->reform_timer, on_reform_timer, hd_reform_wait_ms(job),
                 0);
  hc_debug("a rank or host is lost: the ranks wait for horarun to re-form "
           "the job");
}

static int all_fenced(const struct hd_job *job) {
  for (uint32_t i = 0; i < job->desc.nhosts; i++)
    if (i != job->desc.host_index && job->peers[i].fence != job->reforms)
      return 0;
  return 1;
}

int hd_reform_pending(const struct hd_job *job) {
  if (job->reform_wait) return 1;
  return job->reform_quiet && !all_fenced(job);
}

int hd_reform_drops(const struct hd_job *job, uint16_t type) {
  /* before a peer's FENCE: the old job's; after it: the peer is quiet too */
  return job->reform_quiet && type != HP_MSG_HEARTBEAT &&
         type != HP_MSG_SESSION;
}

void hd_reform_fence(struct hd_job *job, int from, uint32_t number,
                     uint32_t session) {
  if (from < 0 || (uint32_t)from >= job->desc.nhosts) return;
  job->peers[from].fence = number;
  if (session > job->reform_session) job->reform_session = session;
  hc_debug("host %d has re-formed the job (%u)", from, number);
  if (job->reform_quiet && all_fenced(job) && hd_local_all_back(job))
    job->up->session_back(job);
}

/* The index of the job's host that was host `orig` when it started (this
 * one included), or -1. */
static int host_of_orig(const struct hd_job *job, uint32_t orig) {
  for (uint32_t k = 0; k < job->desc.nhosts; k++)
    if (job->peers[k].orig == orig) return (int)k;
  return -1;
}

/* Checks m against the job; why says what is wrong. */
static int check(const struct hd_job *job, const struct hp_reform *m,
                 char *why, size_t len) {
  if (!job->multi || !job->peers || !job->ranks) {
    hc_fmt(why, len, "a REFORM for a job on one host, or before it started");
    return -1;
  }
  if (m->number != job->reforms + 1) {
    hc_fmt(why, len, "REFORM number %u, but the next one is %u", m->number,
           job->reforms + 1);
    return -1;
  }
  if (m->nlocal != (uint32_t)job->nlocal ||
      m->old_index[m->host_index] != job->peers[job->desc.host_index].orig) {
    hc_fmt(why, len, "a REFORM whose host %u is not this host with its %d "
           "ranks", m->host_index, job->nlocal);
    return -1;
  }
  for (uint32_t i = 0; i < m->nhosts; i++) {
    if (host_of_orig(job, m->old_index[i]) < 0) {
      hc_fmt(why, len, "a REFORM keeps host %u, which the job no longer has",
             m->old_index[i]);
      return -1;
    }
  }
  return 0;
}

static void send_fence(struct hd_job *job, int host) {
  struct hp_session s = {.number = job->reforms,
                         .phase = HP_SESSION_FENCE,
                         .session = job->session};
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_session(&w, &s);
  hd_mesh_send(job, host, &w);
  hp_wbuf_free(&w);
}

/* Makes the job the one m describes. Returns 0, or -1 out of memory. */
static int apply(struct hd_job *job, const struct hp_reform *m) {
  uint32_t n = m->nhosts, oldn = job->desc.nhosts;
  struct hd_peer *peers = calloc(n, sizeof *peers);
  struct hp_job_host *hosts = calloc(n, sizeof *hosts);
  unsigned char *kept = calloc(oldn, 1);
  if (!peers || !hosts || !kept) {
    free(peers);
    free(hosts);
    free(kept);
    return -1;
  }
  for (uint32_t i = 0; i < n; i++) {
    int k = host_of_orig(job, m->old_index[i]); /* check() found each */
    kept[k] = 1;
    peers[i] = job->peers[k];
    hosts[i] = job->desc.hosts[k];
    hosts[i].first_rank = m->first_rank[i];
    hosts[i].nranks = m->nranks[i];
  }
  /* what the job leaves out: its links close, and then no longer name a
   * host of the job (mesh.c's host_of finds nothing for them) */
  struct hd_peer *old = job->peers;
  job->peers = peers;
  for (uint32_t k = 0; k < oldn; k++) {
    if (kept[k]) continue;
    free(job->desc.hosts[k].name);
    free(job->desc.hosts[k].addr);
    if (old[k].c && !old[k].c->closing)
      hp_conn_close(old[k].c, "its host was left out of the job");
  }
  free(old);
  free(kept);
  free(job->desc.hosts);
  job->desc.hosts = hosts;
  job->desc.nhosts = n;
  job->desc.host_index = m->host_index;
  job->desc.size = m->size;
  for (int i = 0; i < job->nlocal; i++) {
    job->desc.ranks[i] = m->ranks[i];
    job->ranks[i].info = m->ranks[i];
  }
  job->peers_needed = job->peers_up = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (i == m->host_index) continue;
    job->peers_needed++;
    job->peers_up += job->peers[i].up;
  }
  hd_session_free(job); /* host 0's count of hosts back was by old index */
  hd_deadlock_forget(job, oldn);
  /* what was decided or running failed already; fresh communicators
   * number no host the job no longer has */
  hd_fail_all(job);
  hd_comms_free(job);
  return hd_comms_init(job) < 0 ? -1 : 0;
}

void hd_reform_frame(struct hd_job *job, const unsigned char *p, size_t len) {
  struct hp_reform m;
  char why[300];
  int rc = hp_dec_reform(p, len, &m);
  if (rc < 0) {
    hc_error("malformed REFORM from horarun: %s; stopping",
             hora_strerror(rc));
    hd_teardown(job, "horarun sent a malformed REFORM", 0);
    return;
  }
  if (job->aborting) {
    hp_reform_free(&m);
    return;
  }
  if (check(job, &m, why, sizeof why) < 0) {
    hc_error("%s; stopping", why);
    hd_teardown(job, why, 0);
    hp_reform_free(&m);
    return;
  }
  hc_info("the job re-forms in place (%u): %s; this is host %u of %u, "
          "ranks %d-%d of %d", m.number, m.why, m.host_index, m.nhosts,
          m.first_rank[m.host_index],
          m.first_rank[m.host_index] + m.nranks[m.host_index] - 1, m.size);
  if (job->gone_rank == -1) { /* the failure has not reached us yet */
    job->gone_rank = job->desc.hosts[0].first_rank;
    hc_fmt(job->gone_msg, sizeof job->gone_msg, "the job re-forms: %s",
           m.why);
  }
  job->restart_gone = 0;
  if (apply(job, &m) < 0) {
    hp_reform_free(&m);
    hc_error("out of memory re-forming the job; stopping");
    hd_teardown(job, "horad is out of memory", 0);
    return;
  }
  job->reforms = m.number;
  job->reform_wait = 0;
  job->reform_quiet = 1;
  uv_timer_stop(&job->reform_timer);
  if (job->session > job->reform_session) job->reform_session = job->session;
  for (uint32_t i = 0; i < m.nhosts; i++)
    if (i != m.host_index) send_fence(job, (int)i);
  hp_reform_free(&m);
  if (hd_local_all_back(job)) job->up->session_back(job);
}
