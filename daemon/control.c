/* control.c -- horad's connection to horarun: the job, output, exits.
 *
 * One framed connection (struct hp_conn, conn.h) whatever carries it: on
 * horarun's own machine the socketpair horarun made (--control-fd); on
 * another host a TCP connection horad opens back to horarun's rendezvous
 * port, authenticated with the job secret (auth.h) before any frame is
 * acted on. In a multi-host job horad first says REGISTER (its host index
 * and mesh port); horarun answers with the JOB once every host has
 * registered. */
#define HC_LOG_SUB HC_SUB_CTL
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autotune.h"
#include "daemon.h"
#include "metrics.h"
#include "timeline.h"

static void close_everything(struct hd_job *job);
static void job_go(struct hd_job *job);

static void close_everything(struct hd_job *job) {
  if (job->ctl_conn) {
    job->ctl_closing = 1; /* no news: horad is ending */
    hp_conn_close(job->ctl_conn, "closing");
  }
  hd_mesh_close(job, 1);
  hd_spawn_close(job);
  hd_local_close(job);
  hd_rings_close(job);
  if (job->daemon->job_ended) job->daemon->job_ended(job->daemon, job);
}

static void send_ready(struct hd_job *job) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_text(&w, HP_MSG_READY, hora_version());
  hd_control_send(job, &w);
  hp_wbuf_free(&w);
}

/* The job's knobs (HORA_*, HOROVOD_*) come in its environment: parsed
 * once into job->knobs, over the defaults and horad's command line. Returns
 * 0, or -1 (reported) when one holds a bad value. */
static int take_job_knobs(struct hd_job *job) {
  char why[512];
  if (hc_knobs_parse_env(&job->knobs, job->desc.envp, job->desc.envc,
                         "the job's environment", why, sizeof why) < 0) {
    hc_error("%s; stopping", why);
    return -1;
  }
  int lvl = hc_parse_level(hk_str(&job->knobs, log_level));
  if (lvl >= 0) hc_log_set_level((enum hc_level)lvl);
  if (hk_given(&job->knobs, log)) hc_log_apply_spec(hk_str(&job->knobs, log));
  return hd_metrics_job(job);
}

static void job_go(struct hd_job *job) {
  if (hd_rings_init(job) < 0 || hd_local_listen(job) < 0) {
    hc_error("cannot set up the job's local socket; stopping");
    /* Report every rank as not started so horarun can name the cause. */
  }
  send_ready(job);
  hd_tl_init(job);
  hd_at_init(job);
  hd_spawn_all(job);
  if (job->ranks && hd_comms_init(job) < 0) {
    hc_error("out of memory setting up the job's communicators; stopping");
    hd_teardown(job, "horad is out of memory", 0);
  }
}

static void start_job(struct hd_job *job) {
  job->have_job = 1;
  job->nlocal = (int)job->desc.nlocal;
  if (take_job_knobs(job) < 0) {
    close_everything(job);
    return;
  }
  if (job->desc.nhosts > 1) {
    job->multi = 1;
    /* horarun's elastic job: a loss waits for its REFORM (reform.c) */
    job->reformable =
        (hk_int(&job->knobs, min_np) > 0 || hk_int(&job->knobs, max_np) > 0 ||
         hk_given(&job->knobs, host_discovery_script)) &&
        hk_int(&job->knobs, elastic_in_place) == 1;
    if (!job->boot) { /* the secret comes only on the bootstrap line */
      hc_error("a multi-host job needs --bootstrap (the job secret); "
               "stopping");
      close_everything(job);
      return;
    }
    if (job->desc.host_index != (uint32_t)job->boot_host) {
      hc_error("the job is for host %u, but this is host %d; stopping",
               job->desc.host_index, job->boot_host);
      close_everything(job);
      return;
    }
    job->mesh_start_ns = hc_now_ns();
    if (hd_mesh_start(job) < 0) {
      hc_error("cannot connect to the other daemons; stopping");
      /* spawn nothing: report the ranks as not started */
    }
    return; /* job_go() once every link is up */
  }
  job_go(job);
}

void hd_control_stop(struct hd_job *job, const char *why) {
  if (!job->ranks) /* nothing started yet */
    close_everything(job);
  else
    hd_teardown(job, why, 0);
}

static void handle_frame(struct hd_job *job, const struct hp_frame_hdr *h,
                         const unsigned char *p) {
  if (h->type == HP_MSG_JOB && !job->have_job) {
    int rc = hp_dec_job(p, h->len, &job->desc);
    if (rc < 0) {
      hc_error("malformed job description from horarun: %s",
               hora_strerror(rc));
      hp_job_free(&job->desc);
      close_everything(job);
      return;
    }
    start_job(job);
  } else if (h->type == HP_MSG_ABORT) {
    char *why = hp_dec_text(p, h->len);
    if (!job->ranks) /* nothing started yet */
      close_everything(job);
    else
      /* A rank that failed, or another host, may be the cause: give the
       * ranks half a second to report the errors they got. */
      hd_teardown(job, why ? why : "aborted by horarun",
                  job->gone_rank >= 0 || job->multi ? 500 : 0);
    free(why);
  } else if (h->type == HP_MSG_HEARTBEAT) {
    /* nothing to do: arriving refreshed the connection's last_rx */
  } else if (h->type == HP_MSG_HOSTS_UPDATED && h->len == 0) {
    hd_local_hosts_updated(job);
  } else if (h->type == HP_MSG_REFORM && job->have_job) {
    hd_reform_frame(job, p, h->len);
  } else {
    hc_warn_rl("unexpected message type %u from horarun; ignored", h->type);
  }
}

static void send_register(struct hd_job *job) {
  struct hp_register m = {.host_index = (uint32_t)job->boot_host,
                          .mesh_port = job->mesh_port,
                          .pid = (int32_t)getpid()};
  hc_fmt(m.hostname, sizeof m.hostname, "%s", job->daemon->hostname);
  hc_fmt(m.mesh_addr, sizeof m.mesh_addr, "%s", job->mesh_addr);
  hc_fmt(m.version, sizeof m.version, "%s", hora_version());
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_register(&w, &m);
  hd_control_send(job, &w);
  hp_wbuf_free(&w);
}

/* ---- the connection: a socketpair or TCP, one hp_conn ------------------- */

/* The connection is up (over TCP: authenticated). */
static void ctl_up(struct hd_job *job) {
  if (job->boot) send_register(job);
}

static void on_ctl_auth(struct hp_conn *c) {
  hc_debug("authenticated to horarun at %s", c->peer);
  ctl_up(c->data);
}

static int on_ctl_frame(struct hp_conn *c, const struct hp_frame_hdr *h,
                        unsigned char *p, int *keep) {
  struct hd_job *job = c->data;
  (void)keep;
  handle_frame(job, h, p);
  return 0;
}

static void on_ctl_close(struct hp_conn *c, const char *why) {
  struct hd_job *job = c->data;
  job->ctl_conn = NULL;
  if (job->done_sent || job->ctl_closing) {
    close_everything(job);
    return;
  }
  hc_error("connection to horarun (%s): %s [H4001]", c->peer, why);
  if (!job->have_job || !job->ranks) {
    close_everything(job);
    return;
  }
  char reason[300];
  hc_fmt(reason, sizeof reason, "the connection to horarun was lost (%s)",
         why);
  hd_teardown(job, reason, 0);
}

static const struct hp_conn_cb ctl_cb = {
    .on_auth = on_ctl_auth, .on_frame = on_ctl_frame, .on_close = on_ctl_close};

/* horarun started this horad on its own machine: fd is the socketpair. */
int hd_control_open(struct hd_job *job, int fd) {
  char peer[32];
  hc_fmt(peer, sizeof peer, "control fd %d", fd);
  int rc = hp_conn_open_local(job->daemon->loop, fd, peer, &ctl_cb, job,
                              &job->ctl_conn);
  if (rc < 0) {
    hc_error("cannot use control fd %d: %s", fd, uv_strerror(rc));
    return HORA_EINVAL;
  }
  ctl_up(job);
  return 0;
}

/* A horad started over ssh calls horarun back. */
int hd_control_connect(struct hd_job *job, const char *addr, int port) {
  struct sockaddr_storage ss;
  if (hp_addr_parse(addr, port, &ss) < 0) {
    hc_error("bad address of horarun: '%s'", addr);
    return HORA_EINVAL;
  }
  int rc =
      hp_conn_connect(job->daemon->loop, (struct sockaddr *)&ss, job->secret,
                      HP_AUTH_CONTROL, &ctl_cb, job, &job->ctl_conn);
  if (rc == 0) hp_conn_set_encrypt(job->ctl_conn, job->wire_encrypt);
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
    .deadlock_frame = hd_deadlock_frame,
};
