/* control.c -- horad's connection to horarun: the job, output, exits. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"

struct ctl_write {
  uv_write_t req;
  struct hp_wbuf buf;
  struct hd_daemon *d;
  int last;
};

static void close_everything(struct hd_daemon *d);

static void on_ctl_write(uv_write_t *req, int status) {
  struct ctl_write *w = (struct ctl_write *)req;
  struct hd_daemon *d = w->d;
  int last = w->last;
  hp_wbuf_free(&w->buf);
  free(w);
  if (status < 0 && status != UV_ECANCELED)
    hc_debug("write to horarun failed: %s", uv_strerror(status));
  if (last) close_everything(d);
}

/* Takes the frames in w (the buffer is moved, w is left empty). */
static void ctl_send(struct hd_daemon *d, struct hp_wbuf *w, int last) {
  if (!d->ctl_open || w->err || !w->len) {
    hp_wbuf_reset(w);
    if (last) close_everything(d);
    return;
  }
  struct ctl_write *cw = calloc(1, sizeof *cw);
  if (!cw) {
    hp_wbuf_reset(w);
    return;
  }
  cw->buf = *w;
  cw->d = d;
  cw->last = last;
  hp_wbuf_init(w);
  uv_buf_t b = uv_buf_init((char *)cw->buf.data, (unsigned)cw->buf.len);
  int rc = uv_write(&cw->req, (uv_stream_t *)&d->ctl, &b, 1, on_ctl_write);
  if (rc < 0) {
    hp_wbuf_free(&cw->buf);
    free(cw);
    if (last) close_everything(d);
  }
}

void hd_control_send(struct hd_daemon *d, struct hp_wbuf *w) {
  ctl_send(d, w, 0);
}

void hd_send_exit(struct hd_daemon *d, struct hd_rank *r) {
  if (r->reported) return;
  r->reported = 1;
  d->nexited++;
  struct hp_exit m = {.rank = r->info.rank,
                      .how = (uint8_t)r->exit_how,
                      .code = r->exit_code,
                      .msg = r->spawn_msg};
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

static void on_closed(uv_handle_t *h) { (void)h; }

static void close_handle(uv_handle_t *h) {
  if (h->loop && !uv_is_closing(h)) uv_close(h, on_closed);
}

static void close_everything(struct hd_daemon *d) {
  if (d->ctl_open) {
    d->ctl_open = 0;
    close_handle((uv_handle_t *)&d->ctl);
  }
  hp_decoder_free(&d->ctl_dec);
  hd_spawn_close(d);
  hd_local_close(d);
  hd_rings_close(d);
}

static void start_job(struct hd_daemon *d) {
  d->have_job = 1;
  d->nlocal = (int)d->job.nlocal;
  if (hd_rings_init(d) < 0 || hd_local_listen(d) < 0) {
    hc_error("cannot set up the job's local socket; stopping");
    /* Report every rank as not started so horarun can name the cause. */
  }
  hd_spawn_all(d);
}

static void handle_frame(struct hd_daemon *d, const struct hp_frame_hdr *h,
                         const unsigned char *p) {
  if (h->type == HP_MSG_JOB && !d->have_job) {
    int rc = hp_dec_job(p, h->len, &d->job);
    if (rc < 0) {
      hc_error("malformed job description from horarun: %s",
               hora_strerror(rc));
      hp_job_free(&d->job);
      close_everything(d);
      return;
    }
    start_job(d);
  } else if (h->type == HP_MSG_ABORT) {
    char *why = hp_dec_text(p, h->len);
    hd_teardown(d, why ? why : "aborted by horarun", d->gone_rank >= 0 ? 500 : 0);
    free(why);
  } else {
    hc_warn("unexpected message type %u from horarun; ignored", h->type);
  }
}

static void on_alloc(uv_handle_t *h, size_t size, uv_buf_t *buf) {
  static char slab[65536];
  (void)h;
  (void)size;
  *buf = uv_buf_init(slab, sizeof slab);
}

static void on_ctl_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  struct hd_daemon *d = s->data;
  if (n < 0) {
    if (n != UV_EOF) hc_warn("horarun connection: %s", uv_strerror((int)n));
    d->ctl_open = 0;
    close_handle((uv_handle_t *)&d->ctl);
    if (!d->done_sent) {
      if (!d->have_job) {
        close_everything(d);
        return;
      }
      hd_teardown(d, "the connection to horarun was lost", 0);
    }
    return;
  }
  if (n == 0) return;
  if (hp_decoder_feed(&d->ctl_dec, buf->base, (size_t)n) < 0) return;
  for (;;) {
    struct hp_frame_hdr h;
    const unsigned char *p;
    char why[160];
    int rc = hp_decoder_next(&d->ctl_dec, &h, &p, why, sizeof why);
    if (rc == 0) break;
    if (rc < 0) {
      hc_error("bad data from horarun (%s); stopping the job", why);
      uv_read_stop(s);
      hd_teardown(d, "protocol error on the launcher connection", 0);
      return;
    }
    handle_frame(d, &h, p);
    if (!d->ctl_open) break;
  }
}

int hd_control_open(struct hd_daemon *d, int fd) {
  hp_decoder_init(&d->ctl_dec);
  int rc = uv_pipe_init(d->loop, &d->ctl, 0);
  if (rc == 0) rc = uv_pipe_open(&d->ctl, fd);
  if (rc < 0) {
    hc_error("cannot use control fd %d: %s", fd, uv_strerror(rc));
    return HORA_EINVAL;
  }
  d->ctl_open = 1;
  d->ctl.data = d;
  uv_read_start((uv_stream_t *)&d->ctl, on_alloc, on_ctl_read);
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_text(&w, HP_MSG_READY, hora_version());
  ctl_send(d, &w, 0);
  hp_wbuf_free(&w);
  return 0;
}
