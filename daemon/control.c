/* control.c -- horad's connection to horarun: the job, output, exits.
 *
 * One framed connection (struct hp_conn, conn.h) whatever carries it: on
 * horarun's own machine the socketpair horarun made (--control-fd); on
 * another host a TCP connection horad opens back to horarun's rendezvous
 * port, authenticated with the job secret (auth.h) before any frame is
 * acted on. In a multi-host job horad first says REGISTER (its host index
 * and mesh port); horarun answers with the JOB once every host has
 * registered. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"

static void close_everything(struct hd_daemon *d);
static void job_go(struct hd_daemon *d);

static void close_everything(struct hd_daemon *d) {
  if (d->ctl_conn) {
    d->ctl_closing = 1; /* no news: horad is ending */
    hp_conn_close(d->ctl_conn, "closing");
  }
  hd_mesh_close(d, 1);
  hd_spawn_close(d);
  hd_local_close(d);
  hd_rings_close(d);
}

static void send_ready(struct hd_daemon *d) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_text(&w, HP_MSG_READY, hora_version());
  hd_control_send(d, &w);
  hp_wbuf_free(&w);
}

/* The job's knobs (HORA_*, HOROVOD_*) come in its environment: parsed
 * once into d->knobs, over the defaults and horad's command line. Returns
 * 0, or -1 (reported) when one holds a bad value. */
static int take_job_knobs(struct hd_daemon *d) {
  char why[512];
  if (hc_knobs_parse_env(&d->knobs, d->job.envp, d->job.envc,
                         "the job's environment", why, sizeof why) < 0) {
    hc_error("%s; stopping", why);
    return -1;
  }
  int lvl = hc_parse_level(hk_str(&d->knobs, log_level));
  if (lvl >= 0) hc_log_set_level((enum hc_level)lvl);
  return 0;
}

static void job_go(struct hd_daemon *d) {
  if (hd_rings_init(d) < 0 || hd_local_listen(d) < 0) {
    hc_error("cannot set up the job's local socket; stopping");
    /* Report every rank as not started so horarun can name the cause. */
  }
  send_ready(d);
  hd_spawn_all(d);
  if (d->ranks && hd_comms_init(d) < 0) {
    hc_error("out of memory setting up the job's communicators; stopping");
    hd_teardown(d, "horad is out of memory", 0);
  }
}

static void start_job(struct hd_daemon *d) {
  d->have_job = 1;
  d->nlocal = (int)d->job.nlocal;
  if (take_job_knobs(d) < 0) {
    close_everything(d);
    return;
  }
  if (d->job.nhosts > 1) {
    d->multi = 1;
    if (!d->boot) { /* the secret comes only on the bootstrap line */
      hc_error("a multi-host job needs --bootstrap (the job secret); "
               "stopping");
      close_everything(d);
      return;
    }
    if (d->job.host_index != (uint32_t)d->boot_host) {
      hc_error("the job is for host %u, but this is host %d; stopping",
               d->job.host_index, d->boot_host);
      close_everything(d);
      return;
    }
    if (hd_mesh_start(d) < 0) {
      hc_error("cannot connect to the other daemons; stopping");
      /* spawn nothing: report the ranks as not started */
    }
    return; /* job_go() once every link is up */
  }
  job_go(d);
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
    if (!d->ranks) /* nothing started yet */
      close_everything(d);
    else
      /* A rank that failed, or another host, may be the cause: give the
       * ranks half a second to report the errors they got. */
      hd_teardown(d, why ? why : "aborted by horarun",
                  d->gone_rank >= 0 || d->multi ? 500 : 0);
    free(why);
  } else if (h->type == HP_MSG_HEARTBEAT) {
    /* nothing to do: arriving refreshed the connection's last_rx */
  } else {
    hc_warn_rl("unexpected message type %u from horarun; ignored", h->type);
  }
}

static void send_register(struct hd_daemon *d) {
  struct hp_register m = {.host_index = (uint32_t)d->boot_host,
                          .mesh_port = d->mesh_port,
                          .pid = (int32_t)getpid()};
  hc_fmt(m.hostname, sizeof m.hostname, "%s", d->hostname);
  hc_fmt(m.mesh_addr, sizeof m.mesh_addr, "%s", d->mesh_addr);
  hc_fmt(m.version, sizeof m.version, "%s", hora_version());
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_register(&w, &m);
  hd_control_send(d, &w);
  hp_wbuf_free(&w);
}

/* ---- the connection: a socketpair or TCP, one hp_conn ------------------- */

/* The connection is up (over TCP: authenticated). */
static void ctl_up(struct hd_daemon *d) {
  if (d->boot) send_register(d);
}

static void on_ctl_auth(struct hp_conn *c) {
  hc_debug("authenticated to horarun at %s", c->peer);
  ctl_up(c->data);
}

static int on_ctl_frame(struct hp_conn *c, const struct hp_frame_hdr *h,
                        unsigned char *p, int *keep) {
  struct hd_daemon *d = c->data;
  (void)keep;
  handle_frame(d, h, p);
  return 0;
}

static void on_ctl_close(struct hp_conn *c, const char *why) {
  struct hd_daemon *d = c->data;
  d->ctl_conn = NULL;
  if (d->done_sent || d->ctl_closing) {
    close_everything(d);
    return;
  }
  hc_error("connection to horarun (%s): %s", c->peer, why);
  if (!d->have_job || !d->ranks) {
    close_everything(d);
    return;
  }
  char reason[300];
  hc_fmt(reason, sizeof reason, "the connection to horarun was lost (%s)",
         why);
  hd_teardown(d, reason, 0);
}

static const struct hp_conn_cb ctl_cb = {
    .on_auth = on_ctl_auth, .on_frame = on_ctl_frame, .on_close = on_ctl_close};

/* horarun started this horad on its own machine: fd is the socketpair. */
int hd_control_open(struct hd_daemon *d, int fd) {
  char peer[32];
  hc_fmt(peer, sizeof peer, "control fd %d", fd);
  int rc = hp_conn_open_local(d->loop, fd, peer, &ctl_cb, d, &d->ctl_conn);
  if (rc < 0) {
    hc_error("cannot use control fd %d: %s", fd, uv_strerror(rc));
    return HORA_EINVAL;
  }
  ctl_up(d);
  return 0;
}

/* A horad started over ssh calls horarun back. */
int hd_control_connect(struct hd_daemon *d, const char *addr, int port) {
  struct sockaddr_storage ss;
  if (hp_addr_parse(addr, port, &ss) < 0) {
    hc_error("bad address of horarun: '%s'", addr);
    return HORA_EINVAL;
  }
  int rc = hp_conn_connect(d->loop, (struct sockaddr *)&ss, d->secret,
                           HP_AUTH_CONTROL, &ctl_cb, d, &d->ctl_conn);
  if (rc < 0) {
    hc_error("cannot connect to horarun at %s port %d: %s", addr, port,
             uv_strerror(rc));
    return HORA_EIO;
  }
  return 0;
}

/* What the layers below reach up through (daemon.h, struct hd_upcalls). */
const struct hd_upcalls hd_job_upcalls = {
    .teardown = hd_spawn_teardown,
    .close_all = close_everything,
    .job_go = job_go,
    .decide = hd_decide_plan,
    .session_back = hd_session_back,
    .session_frame = hd_session_frame,
    .session_cancel = hd_session_cancel,
};
