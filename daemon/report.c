/* report.c -- what horad tells horarun: the ranks' exits (a victim's
 * held back a moment so the culprit is named first), DONE, FAULT and the
 * frames of the layers above, over the one control connection. Below
 * spawning, the mesh and control.c, which all report through it. */
#include <stdlib.h>
#include <string.h>

#include "daemon.h"

/* Takes the frames in w (the buffer is moved, w is left empty). With
 * `last`, the connection closes once they are sent, and horad ends. */
static void ctl_send(struct hd_daemon *d, struct hp_wbuf *w, int last) {
  if (!d->ctl_conn) { /* gone */
    hp_wbuf_reset(w);
    if (last) d->up->close_all(d);
    return;
  }
  if (hp_conn_send(d->ctl_conn, w) < 0) hp_wbuf_reset(w);
  if (last) {
    d->ctl_closing = 1;
    hp_conn_close_when_sent(d->ctl_conn); /* on_ctl_close() goes on */
  }
}

void hd_control_send(struct hd_daemon *d, struct hp_wbuf *w) {
  ctl_send(d, w, 0);
}

#define VICTIM_HOLD_MS 1000

static void on_victim_timer(uv_timer_t *t) {
  struct hd_daemon *d = t->data;
  for (int i = 0; i < d->nlocal; i++)
    if (d->ranks[i].exit_held && !d->ranks[i].reported)
      hd_send_exit(d, &d->ranks[i]);
}

/* A rank of this host that fails after a rank of another host was gone is
 * most likely its victim: its exit waits a little, so that horarun hears
 * of the culprit first and names it (the culprit's host may be slower to
 * report it than the news of it travelled here). */
static int hold_exit(struct hd_daemon *d, struct hd_rank *r) {
  int failed = r->exit_how != HP_EXIT_CODE || r->exit_code != 0;
  if (!failed || r->exit_held || !d->multi || !d->victim_timer.loop ||
      d->gone_rank < 0 || d->gone_rank == r->info.rank)
    return 0;
  for (int i = 0; i < d->nlocal; i++)
    if (d->ranks[i].info.rank == d->gone_rank) return 0; /* ours: known */
  r->exit_held = 1;
  if (!uv_is_active((uv_handle_t *)&d->victim_timer))
    uv_timer_start(&d->victim_timer, on_victim_timer, VICTIM_HOLD_MS, 0);
  return 1;
}

void hd_send_exit(struct hd_daemon *d, struct hd_rank *r) {
  if (r->reported || hold_exit(d, r)) return;
  r->reported = 1;
  d->nexited++;
  struct hp_exit m = {.rank = r->info.rank,
                      .how = (uint8_t)r->exit_how,
                      .code = r->exit_code,
                      .msg = r->spawn_msg,
                      .noinit = (uint8_t)r->noinit};
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_exit(&w, &m);
  ctl_send(d, &w, 0);
  hp_wbuf_free(&w);
  hd_maybe_done(d);
}

void hd_maybe_done(struct hd_daemon *d) {
  if (d->done_sent || !d->have_job || d->nexited < d->nlocal) return;
  d->done_sent = 1;
  hc_debug("every local rank has ended; closing");
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_text(&w, HP_MSG_DONE, "");
  ctl_send(d, &w, 1);
  hp_wbuf_free(&w);
}

void hd_control_fault(struct hd_daemon *d, const char *msg) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_text(&w, HP_MSG_FAULT, msg);
  ctl_send(d, &w, 0);
  hp_wbuf_free(&w);
}

