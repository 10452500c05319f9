/* session.c -- a new session across hosts: hora_init() after
 * hora_shutdown() is collective, as in Horovod, so the job starts again
 * only once every rank of it is back.
 *
 * A host whose ranks are all back tells host 0 (SESSION, phase BACK).
 * Host 0, once every host is back (itself included), starts its own new
 * session and tells every other host to start theirs (phase START); each
 * then welcomes its ranks. What a host sends in the new session is
 * therefore ordered after what the old one sent: its BACK went to host 0
 * after everything of the old session there, host 0's START reaches each
 * host before any decision of the new session, and no host exchanges data
 * for an operation before host 0 has decided it, which needs every host's
 * word of the new session. */
#define HC_LOG_SUB HC_SUB_SESSION
#include <stdlib.h>
#include <string.h>

#include "daemon.h"

static void send_session(struct hd_job *job, int host, uint32_t number,
                         uint32_t phase) {
  struct hp_session m = {.number = number, .phase = phase};
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_session(&w, &m);
  hd_mesh_send(job, host, &w);
  hp_wbuf_free(&w);
}

/* Host 0: `host`'s ranks are back for session `number`. */
static void host_back(struct hd_job *job, int host, uint32_t number) {
  uint32_t n = job->desc.nhosts;
  /* re-formed: the host asking may know a higher session count than
   * ours yet (every host's FENCE has not reached us) */
  if (job->reform_quiet ? number <= job->session
                        : number != job->session + 1) {
    hc_warn_rl("host %d asked for session %u, but the next one is %u; "
               "ignored", host, number, job->session + 1);
    return;
  }
  if (!job->sess_back && !(job->sess_back = calloc(n, 1))) {
    hc_error("out of memory starting a new session; stopping");
    hd_teardown(job, "horad is out of memory", 0);
    return;
  }
  if (job->sess_back[host]) return;
  job->sess_back[host] = 1;
  if (++job->sess_nback < (int)n) return;
  hc_debug("every host's ranks are back: session %u starts", number);
  memset(job->sess_back, 0, n);
  job->sess_nback = 0;
  for (uint32_t i = 1; i < n; i++)
    send_session(job, (int)i, number, HP_SESSION_START);
  hd_new_session(job);
}

void hd_session_back(struct hd_job *job) {
  /* an elastic job being re-formed asks once the REFORM and every kept
   * host's FENCE are in (reform.c calls again), numbering the session
   * after the highest count any host had */
  if (hd_reform_pending(job)) return;
  if (job->reform_quiet && job->reform_session > job->session)
    job->session = job->reform_session;
  hc_debug("every local rank is back: asking for session %u", job->session + 1);
  if (job->desc.host_index == 0) host_back(job, 0, job->session + 1);
  else send_session(job, 0, job->session + 1, HP_SESSION_BACK);
}

int hd_session_frame(struct hd_job *job, int from, const unsigned char *p,
                     size_t len, char *why, size_t whylen) {
  struct hp_session m;
  if (hp_dec_session(p, len, &m) < 0) {
    hc_fmt(why, whylen, "bad SESSION message");
    return -1;
  }
  if (m.phase == HP_SESSION_FENCE) {
    hd_reform_fence(job, from, m.number, m.session);
    return 0;
  }
  /* re-formed: a peer's word before its FENCE was for the old job */
  if (job->reform_quiet && job->peers[from].fence != job->reforms)
    return 0;
  if (m.phase == HP_SESSION_BACK) {
    if (job->desc.host_index != 0) {
      hc_fmt(why, whylen, "SESSION BACK to a host that is not host 0");
      return -1;
    }
    host_back(job, from, m.number);
    return 0;
  }
  if (from != 0) {
    hc_fmt(why, whylen, "SESSION START from host %d, not host 0", from);
    return -1;
  }
  if (m.number != job->session + 1 || !hd_local_all_back(job)) {
    /* our ranks went away meanwhile (the job is failing) */
    hc_warn_rl("host 0 started session %u, which this host's ranks are not "
               "all waiting for; ignored", m.number);
    return 0;
  }
  hd_new_session(job);
  return 0;
}

void hd_session_cancel(struct hd_job *job) {
  /* a reformable job's ranks wait for horarun to re-form it */
  if (job->reformable && !job->aborting) hd_reform_hold(job);
  else hd_local_drop_rejoins(job, NULL);
  for (int i = 0; job->ranks && i < job->nlocal; i++)
    job->ranks[i].restarting = 0; /* its program ends as it comes */
  if (job->sess_back) memset(job->sess_back, 0, job->desc.nhosts);
  job->sess_nback = 0;
}

void hd_session_free(struct hd_job *job) {
  free(job->sess_back);
  job->sess_back = NULL;
  job->sess_nback = 0;
}
