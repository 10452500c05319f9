/* report.c -- what horad tells horarun: the ranks' exits (a victim's
 * held back a moment so the culprit is named first), DONE, FAULT and the
 * frames of the layers above, over the one control connection. Below
 * spawning, the mesh and control.c, which all report through it. */
#define HC_LOG_SUB HC_SUB_CTL
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "metrics.h"
#include "timeline.h"

/* Takes the frames in w (the buffer is moved, w is left empty). With
 * `last`, the connection closes once they are sent, and horad ends. */
static void ctl_send(struct hd_job *job, struct hp_wbuf *w, int last) {
  if (!job->ctl_conn) { /* gone */
    hp_wbuf_reset(w);
    if (last) job->up->close_all(job);
    return;
  }
  if (hp_conn_send(job->ctl_conn, w) < 0) hp_wbuf_reset(w);
  if (last) {
    job->ctl_closing = 1;
    hp_conn_close_when_sent(job->ctl_conn); /* on_ctl_close() goes on */
  }
}

void hd_control_send(struct hd_job *job, struct hp_wbuf *w) {
  ctl_send(job, w, 0);
}

#define VICTIM_HOLD_MS 1000

static void on_victim_timer(uv_timer_t *t) {
  struct hd_job *job = t->data;
  for (int i = 0; i < job->nlocal; i++)
    if (job->ranks[i].exit_held && !job->ranks[i].reported)
      hd_send_exit(job, &job->ranks[i]);
}

/* A rank of this host that fails after a rank of another host was gone is
 * most likely its victim: its exit waits a little, so that horarun hears
 * of the culprit first and names it (the culprit's host may be slower to
 * report it than the news of it travelled here). So does one that fails
 * after a crashed rank's restart began, on its host too: the crash's exit
 * goes to horarun only once the restart is ended or under way. */
static int hold_exit(struct hd_job *job, struct hd_rank *r) {
  int failed = r->exit_how != HP_EXIT_CODE || r->exit_code != 0;
  if (!failed || r->exit_held || !job->multi || !job->victim_timer.loop ||
      job->gone_rank < 0 || job->gone_rank == r->info.rank)
    return 0;
  for (int i = 0; !job->restart_ended && i < job->nlocal; i++)
    if (job->ranks[i].info.rank == job->gone_rank) return 0; /* ours: known */
  r->exit_held = 1;
  if (!uv_is_active((uv_handle_t *)&job->victim_timer))
    uv_timer_start(&job->victim_timer, on_victim_timer, VICTIM_HOLD_MS, 0);
  return 1;
}

/* An EXIT for r: its end, or (restart k > 0) that it is started again. */
static void send_exit_msg(struct hd_job *job, const struct hd_rank *r,
                          uint32_t restart) {
  struct hp_exit m = {.rank = r->slot,
                      .how = (uint8_t)r->exit_how,
                      .code = r->exit_code,
                      .msg = r->spawn_msg,
                      .noinit = (uint8_t)r->noinit,
                      .restart = restart};
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_exit(&w, &m);
  ctl_send(job, &w, 0);
  hp_wbuf_free(&w);
}

void hd_send_exit(struct hd_job *job, struct hd_rank *r) {
  if (r->reported || hold_exit(job, r)) return;
  r->reported = 1;
  job->nexited++;
  send_exit_msg(job, r, 0);
  hd_maybe_done(job);
}

void hd_send_restart(struct hd_job *job, struct hd_rank *r) {
  send_exit_msg(job, r, (uint32_t)r->restarts);
}

void hd_maybe_done(struct hd_job *job) {
  if (job->done_sent || !job->have_job || job->nexited < job->nlocal) return;
  /* the timeline's last events reach host 0's file first (timeline.c
   * calls this again once they have) */
  if (hd_tl_hold_done(job)) return;
  job->done_sent = 1;
  if (job->late_fault) { /* before the end: horarun must hear it */
    hd_control_fault(job, job->late_fault);
    free(job->late_fault);
    job->late_fault = NULL;
  }
  hc_debug("every local rank has ended; closing");
  hd_metrics_report(job);
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_text(&w, HP_MSG_DONE, "");
  ctl_send(job, &w, 1);
  hp_wbuf_free(&w);
}

void hd_control_fault(struct hd_job *job, const char *msg) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_text(&w, HP_MSG_FAULT, msg);
  ctl_send(job, &w, 0);
  hp_wbuf_free(&w);
}

