/* job.c -- horarun's event loop: one control socket per horad, the stop
 * signals, SIGCHLD and the start timeout, all on libuv.
 *
 * Life of a job: start horad, send it the JOB at once (it need not be READY
 * yet), print OUTPUT as it comes, and on the first failed rank (or ^C) send
 * ABORT and keep printing until horad says DONE and exits. A horad is
 * "finished" when it has been reaped and its socket is closed; the loop
 * ends when every horad is finished. Nothing here sleeps or polls. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "auth.h"
#include "blame.h"
#include "common.h"
#include "conn.h"
#include "job.h"
#include "slurm.h"
#include "msg.h"
#include "output.h"
#include "remote.h"
#include "spawn.h"
#include "straggler.h"

#define HR_MAX_ARGS ((int)HP_MAX_ARGS) /* strings per argv / envp */
#define DRAIN_MS 1000      /* horad reaped: its socket has this long to close */
#define REAP_EXTRA_MS 5000 /* socket closed: horad has kill_grace + this */
#define TAIL_LINES 8       /* lines of ssh's output kept for messages */

static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP};
#define NSTOP ((int)HC_ARRAY_SIZE(stop_signals))

struct hr_job;

struct hr_daemon {
  struct hr_job *job;
  int host;         /* index into the layout's hosts */
  const char *name; /* the host as messages name it */
  pid_t pid;
  /* its control connection: the socketpair of a horad on this machine, the
   * TCP connection a horad started over ssh made (once it said REGISTER);
   * NULL before and once closed */
  struct hp_conn *conn;
  uv_timer_t timer; /* drain or reap grace, see on_daemon_timer() */
  int started, ctl_open, ctl_closing;
  int ready, done, reaped, finished;
  int quiet;  /* its failure was reported: no "exited unexpectedly" */
  int job_sent; /* its JOB is on the way: it has ranks to run */
  int announced; /* host updates sent to it (HP_MSG_HOSTS_UPDATED) */
  int killed; /* horarun sent it SIGKILL after the reap grace */
  int left_out; /* an elastic job re-formed without it (reform()) */
  int drop;     /* to be left out by the next reform() (drop_none()) */
  int died;     /* its horad exited while the job ran: a link lost to it
                   is its doing (blame_verdict) */
  uint32_t reformed; /* the last re-forming it said took there */
  int wstatus;
  /* multi-host */
  int remote;           /* started over ssh: pid is ssh's, control is TCP */
  int registered;       /* said REGISTER */
  uint16_t mesh_port;
  char mesh_addr[64]; /* where the other daemons reach it */
  uv_pipe_t err;      /* ssh's stdout and stderr */
  int err_open;
  char line[512]; /* a partial line of it */
  size_t linelen;
  char tail[TAIL_LINES][512]; /* its last lines */
  int ntail;
  /* who lost it, and how horarun's own link to it has been (blame.h) */
  int lost_seen;
  char lost_why[460]; /* the first reason a daemon gave for losing it */
  char own_why[300];  /* or horarun, when no daemon did */
  int watched;
  uint32_t retrans;
  uint64_t trouble_ns;
};

struct hr_job {
  uv_loop_t loop;
  const struct hr_opts *o;
  const struct hr_layout *l;
  char **envp;
  size_t envc;
  const char *horad;
  struct hr_out *out;
  struct hr_daemon *d;
  size_t nd;
  uv_signal_t sig[NSTOP];
  int sig_on[NSTOP];
  uv_signal_t sigchld;
  uv_timer_t start_timer;
  uv_timer_t stop_timer; /* ABORT sent: horad has reap_ms to end the job */
  int start_timeout; /* seconds; <= 0: none */
  unsigned reap_ms;  /* see REAP_EXTRA_MS */
  int interrupted;   /* the first stop signal */
  int told_again;    /* the second one was answered */
  int stopping;      /* ABORT sent */
  int closing;       /* the loop's handles are being closed */
  int exit_code;     /* -1 until the cause of the end is known */
  char me[256];      /* gethostname() */
  char cwd[4096];
  char readbuf[65536];
  /* multi-host */
  int multi; /* more than one host: rendezvous, mesh */
  unsigned char secret[HP_SECRET_LEN];
  uv_tcp_t rdv; /* the rendezvous listener */
  int rdv_open;
  int rdv_port;
  int jobs_sent;
  uv_timer_t hb_timer;
  uint64_t hb_timeout_ns;
  char last_fault[512];
  /* the first rank that exited 0 without initialising hora: when other
   * ranks then fail, it is the cause */
  int noinit_rank;
  const char *noinit_host;
  int failure_seen; /* the first failed rank was reported */
  /* a lost link: whom to blame is decided from every daemon's word */
  struct hr_blame blame;
  int self; /* horarun's node in blame */
  int here; /* the daemon on this machine, or -1 (hr_blame_init) */
  uv_timer_t blame_timer;
  int blaming; /* a link was lost; the verdict waits (blame_timer) */
  int blamed;  /* the verdict was given */
  int link_lost; /* a node said it lost a link */
  /* the first rank failure while the verdict waits */
  int deferred, deferred_rank, deferred_status;
  const char *deferred_host;
  char deferred_what[1024];
  struct hp_conn *conns; /* every rendezvous connection, also unproven */
  unsigned nrejected;    /* strangers turned away (logging is thinned) */
  struct hp_late_rank *late; /* by rank: the daemons' LATENESS, merged */
  struct hr_job_outcome *outcome; /* the caller's, or NULL */
  uv_timer_t hosts_timer; /* watches outcome->hosts_changed */
  int announced;          /* host updates found so far (some sent) */
  /* re-forming in place (reform()): the last one sent, and whether every
   * kept host has said it took (until then a failure ends the job); the
   * ranks' numbers now (slot_of[rank] is its number as the job started,
   * which messages from horad keep using) */
  uint32_t reforms;
  int reforming;
  uint64_t reform_t0;
  int np_now;
  int32_t *slot_of;
};

/* The end of the job is blamed on layout host h (an elastic job leaves it
 * out of its next start). */
static void blame_host(struct hr_job *j, int h, int level) {
  if (j->outcome && j->outcome->culprit && h >= 0 &&
      (size_t)h < j->l->nhosts && j->outcome->culprit[h] < level)
    j->outcome->culprit[h] = level;
}

static void check_daemon(struct hr_daemon *d);

static void set_exit(struct hr_job *j, int code) {
  if (j->exit_code < 0) j->exit_code = code;
}

/* ---- sending ------------------------------------------------------------ */

/* Queues the frames in w (taken, also on error: w is left empty). A lost
 * ABORT is fine: horad stops when its connection goes. Returns 0 or -1. */
static int send_frames(struct hr_daemon *d, struct hp_wbuf *w) {
  int rc = d->conn && !d->ctl_closing ? hp_conn_send(d->conn, w) : -1;
  hp_wbuf_free(w);
  return rc < 0 ? -1 : 0;
}

static void send_text(struct hr_daemon *d, uint16_t type, const char *text) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_text(&w, type, text);
  send_frames(d, &w);
}

/* Sends the JOB. Returns 0 or a UV_E* code (UV_E2BIG: over the frame
 * limit). */
static int send_job(struct hr_job *j, struct hr_daemon *d) {
  const struct hr_host *h = &j->l->hosts[d->host];
  struct hp_job_rank *ranks = calloc((size_t)h->nranks, sizeof *ranks);
  if (!ranks) return UV_ENOMEM;
  for (int i = 0; i < h->nranks; i++) {
    const struct hr_rank *k = &j->l->ranks[h->first_rank + i];
    ranks[i] = (struct hp_job_rank){k->rank, k->local_rank, k->cross_rank,
                                    k->cross_size};
  }
  struct hp_job_host *hosts = calloc(j->nd, sizeof *hosts);
  if (!hosts) {
    free(ranks);
    return UV_ENOMEM;
  }
  for (size_t i = 0; i < j->nd; i++) {
    const struct hr_host *hi = &j->l->hosts[j->d[i].host];
    hosts[i] = (struct hp_job_host){.name = (char *)j->d[i].name,
                                    .addr = j->d[i].mesh_addr,
                                    .port = j->d[i].mesh_port,
                                    .first_rank = hi->first_rank,
                                    .nranks = hi->nranks};
  }
  struct hp_job m = {.size = j->l->np,
                     .local_size = h->nranks,
                     .nlocal = (uint32_t)h->nranks,
                     .ranks = ranks,
                     .host_index = (uint32_t)(d - j->d),
                     .nhosts = (uint32_t)j->nd,
                     .hosts = hosts,
                     .hostname = (char *)d->name,
                     .cwd = j->cwd,
                     .argc = (uint32_t)j->o->nprog,
                     .argv = j->o->prog,
                     .envc = (uint32_t)j->envc,
                     .envp = j->envp};
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_job(&w, &m);
  free(ranks);
  free(hosts);
  int rc = w.err ? UV_ENOMEM : w.len == 0 ? UV_E2BIG : 0;
  if (send_frames(d, &w) < 0 && rc == 0) rc = UV_EPIPE;
  d->job_sent = rc == 0;
  return rc;
}

/* A horad that has not ended the job long after ABORT is stuck: kill it
 * (its ranks die with it, PR_SET_PDEATHSIG) so horarun never hangs. */
static void on_stop_timer(uv_timer_t *t) {
  struct hr_job *j = t->data;
  for (size_t i = 0; i < j->nd; i++) {
    struct hr_daemon *d = &j->d[i];
    if (d->done || d->reaped || !d->started || d->pid <= 0) continue;
    hr_say(j->out,
           "error: horad on host %s did not stop the job within %.1f s; "
           "killing it",
           d->name, j->reap_ms / 1000.0);
    d->killed = d->quiet = 1;
    set_exit(j, HR_EXIT_LAUNCHER);
    kill(-d->pid, SIGKILL); /* its session: it called setsid() */
    kill(d->pid, SIGKILL);
  }
}

/* Sends ABORT to every horad still running the job (once). */
static void stop_job(struct hr_job *j, const char *reason) {
  if (j->stopping) return;
  j->stopping = 1;
  for (size_t i = 0; i < j->nd; i++) {
    struct hr_daemon *d = &j->d[i];
    if (d->remote && d->started && !d->registered && !d->reaped) {
      d->quiet = 1;
      kill(-d->pid, SIGTERM); /* an ssh still connecting: nothing to stop */
      continue;
    }
    if (!d->done) send_text(d, HP_MSG_ABORT, reason);
  }
  uv_timer_start(&j->stop_timer, on_stop_timer, j->reap_ms + 500, 0);
}

/* ---- messages from horad ----------------------------------------------- */

static void close_ctl(struct hr_daemon *d);

static void protocol_error(struct hr_daemon *d, const char *what) {
  struct hr_job *j = d->job;
  if (!d->quiet)
    hr_say(j->out,
           "error: protocol error from horad on host %s: %s; stopping the "
           "job",
           d->name, what);
  d->quiet = 1;
  set_exit(j, HR_EXIT_LAUNCHER);
  stop_job(j, "protocol error");
  close_ctl(d); /* horad tears the job down when its socket closes */
}

/* 1 when `rank` is one of this horad's ranks. */
static int own_rank(const struct hr_daemon *d, int32_t rank) {
  const struct hr_layout *l = d->job->l;
  return rank >= 0 && rank < l->np && l->ranks[rank].host == d->host;
}

static void on_ready(struct hr_daemon *d, const unsigned char *p, size_t n) {
  struct hr_job *j = d->job;
  char *version = hp_dec_text(p, n);
  if (!version) {
    protocol_error(d, "bad READY message");
    return;
  }
  d->ready = 1;
  if (j->o->verbose)
    hr_say(j->out, "horad on host %s is up (pid %d, version %s)", d->name,
           (int)d->pid, version);
  free(version);
  int all = 1;
  for (size_t i = 0; i < j->nd; i++)
    all &= j->d[i].ready | !j->d[i].started;
  if (all) uv_timer_stop(&j->start_timer);
}

static void check_reader(struct hr_job *j) {
  if (!hr_out_reader_gone(j->out) || j->stopping) return;
  set_exit(j, 128 + SIGPIPE); /* what a shell pipeline's writer gets */
  stop_job(j, "horarun's output was closed");
}

static void on_output(struct hr_daemon *d, const unsigned char *p, size_t n) {
  struct hp_output m;
  if (hp_dec_output(p, n, &m) < 0 || !own_rank(d, m.rank)) {
    protocol_error(d, "bad OUTPUT message");
    return;
  }
  hr_out_data(d->job->out, m.rank, m.stream, m.data, m.len);
  check_reader(d->job);
}

/* "exited with code 3", "was killed by signal SIGKILL", ... */
static void describe_exit(const struct hr_job *j, const struct hp_exit *m,
                          char *buf, size_t len) {
  const char *prog = j->o->prog[0], *why;
  switch (m->how) {
  case HP_EXIT_CODE: /* a joined rank's code is its launcher's: why */
    if (m->msg && *m->msg) hc_fmt(buf, len, "%s", m->msg);
    else hc_fmt(buf, len, "exited with code %d", m->code);
    break;
  case HP_EXIT_SIGNAL: /* ... or horad ended it, and says why */
    if (m->msg && *m->msg) hc_fmt(buf, len, "%s", m->msg);
    else hc_fmt(buf, len, "was killed by signal %s", hc_signal_name(m->code));
    break;
  default:
    why = m->msg && *m->msg ? m->msg : strerror(m->code);
    if (strstr(why, prog))
      hc_fmt(buf, len, "could not be started: %s", why);
    else
      hc_fmt(buf, len, "could not be started: %s: %s", prog, why);
  }
}

/* horarun's exit status for a failed rank, the way a shell reports it. */
static int failure_status(const struct hp_exit *m) {
  switch (m->how) {
  case HP_EXIT_CODE:
    return m->code > 0 && m->code < 256 ? m->code : 1;
  case HP_EXIT_SIGNAL:
    return 128 + (m->code & 0x7f);
  default:
    return m->code == ENOENT ? 127 : 126;
  }
}

static void drop_none(struct hr_job *j);
static int can_reform(const struct hr_job *j, int again);
static int reform(struct hr_job *j, const char *why);

/* The first failure: the one the job is remembered by. An elastic job in
 * place leaves the rank's host out instead, and goes on. */
static void first_failure(struct hr_job *j, int rank, const char *host,
                          const char *what, int status) {
  drop_none(j);
  for (size_t i = 0; rank >= 0 && rank < j->l->np && i < j->nd; i++)
    j->d[i].drop = j->d[i].host == j->l->ranks[rank].host;
  /* (a rank that fails while the job re-forms fails its reset: the job
   * ends as without re-forming) */
  if (can_reform(j, 0)) {
    char why[1200];
    hr_say(j->out, "rank %d on host %s %s", rank, host, what);
    hr_out_print_tail(j->out, rank);
    hc_fmt(why, sizeof why, "rank %d on host %s %s", rank, host, what);
    if (reform(j, why)) return;
  }
  j->failure_seen = 1;
  /* (while the job re-forms, the ranks that fail are its victims: a
   * program that does not go on through hvd.elastic.run) */
  if (rank >= 0 && rank < j->l->np && !j->reforming)
    blame_host(j, j->l->ranks[rank].host, HR_BLAME_RANK);
  hr_say(j->out, "rank %d on host %s %s", rank, host, what);
  hr_out_print_tail(j->out, rank);
  set_exit(j, status);
  char reason[1200];
  hc_fmt(reason, sizeof reason, "rank %d %s", rank, what);
  stop_job(j, reason);
}

static int links_failing(struct hr_job *j);
static void blame_open(struct hr_job *j);

#define NOINIT_WHAT                                                            \
  "exited with code 0 without initialising hora (it never called hora_init)"

/* A rank that ended well, but without ever initialising hora: harmless in
 * a job that does not use hora, the cause of what fails in one that does
 * (the others wait for it in collectives). */
static void noinit_exit(struct hr_daemon *d, const struct hp_exit *m,
                        const char *what) {
  struct hr_job *j = d->job;
  if (j->noinit_rank < 0) {
    j->noinit_rank = m->rank;
    j->noinit_host = d->name;
  }
  if (j->failure_seen && !j->interrupted)
    /* its report came after the failure it caused */
    hr_say(j->out, "rank %d on host %s %s: the failure above may come from "
           "it", m->rank, d->name, NOINIT_WHAT);
  else if (j->o->verbose)
    hr_say(j->out, "rank %d on host %s %s", m->rank, d->name, what);
}

/* Announces host updates another thread found (outcome->hosts_changed)
 * to every horad, each as soon as it has its job (one that registers
 * later is told at a later tick). */
static void on_hosts_timer(uv_timer_t *t) {
  struct hr_job *j = t->data;
  int n = atomic_load(&j->outcome->hosts_changed);
  if (j->stopping) return;
  if (n > j->announced && j->o->verbose)
    hr_say(j->out, "elastic: host update %d found", n);
  if (n > j->announced) j->announced = n;
  for (size_t i = 0; i < j->nd; i++) {
    struct hr_daemon *d = &j->d[i];
    if (!d->ctl_open || !d->job_sent || d->done || d->left_out) continue;
    for (; d->announced < n; d->announced++) {
      struct hp_wbuf w;
      hp_wbuf_init(&w);
      hp_frame_begin(&w, HP_MSG_HOSTS_UPDATED, 0);
      hp_frame_end(&w);
      send_frames(d, &w);
    }
  }
}

static void on_rank_exit(struct hr_daemon *d, const unsigned char *p,
                         size_t n) {
  struct hr_job *j = d->job;
  struct hp_exit m;
  if (hp_dec_exit(p, n, &m) < 0 || !own_rank(d, m.rank)) {
    free(m.msg);
    {
      protocol_error(d, "bad EXIT message");
      return;
    }
  }
  char what[1024];
  describe_exit(j, &m, what, sizeof what);
  if (d->left_out) { /* its host was left out: what it does is no news */
    hr_out_end_rank(j->out, m.rank);
    if (j->o->verbose)
      hr_say(j->out, "rank %d on host %s (left out) %s", m.rank, d->name,
             what);
    free(m.msg);
    return;
  }
  if (m.restart) { /* --restart-failed-ranks: not its end */
    hr_out_flush_rank(j->out, m.rank);
    hr_say(j->out, "rank %d on host %s %s: horad starts it again (restart "
           "%u of %ld)", m.rank, d->name, what, m.restart,
           (long)hr_opts_knob_num(j->o, "restart_failed_ranks"));
    free(m.msg);
    return;
  }
  hr_out_end_rank(j->out, m.rank);
  int failed = m.how != HP_EXIT_CODE || m.code != 0;
  if (failed && j->announced && m.how == HP_EXIT_CODE &&
      m.code == HR_EXIT_RESTART && !j->stopping) {
    /* it leaves for the next start, on the updated hosts */
    j->outcome->restart = 1;
    failed = 0;
    if (j->o->verbose)
      hr_say(j->out, "rank %d on host %s left for the next start", m.rank,
             d->name);
  }
  if (!failed && m.noinit) {
    noinit_exit(d, &m, what);
  } else if (failed && !j->stopping && (j->blaming || links_failing(j))) {
    /* most likely a victim of a failing link (the news of a lost host can
     * reach the ranks before horarun): the verdict names the cause */
    if (!j->deferred) {
      j->deferred = 1;
      j->deferred_rank = m.rank;
      j->deferred_host = d->name;
      j->deferred_status = failure_status(&m);
      hc_fmt(j->deferred_what, sizeof j->deferred_what, "%s", what);
    }
    blame_open(j);
  } else if (failed && !j->stopping && j->noinit_rank >= 0) {
    /* The ranks that used hora could not go on without it: name it. */
    hr_say(j->out, "error: rank %d on host %s %s, so the other ranks could "
           "not go on; stopping the job", j->noinit_rank, j->noinit_host,
           NOINIT_WHAT);
    hr_say(j->out, "rank %d on host %s %s", m.rank, d->name, what);
    hr_out_print_tail(j->out, m.rank);
    j->failure_seen = 1;
    set_exit(j, HR_EXIT_LAUNCHER);
    char reason[300];
    hc_fmt(reason, sizeof reason, "rank %d %s", j->noinit_rank, NOINIT_WHAT);
    stop_job(j, reason);
  } else if (failed && !j->stopping) {
    first_failure(j, m.rank, d->name, what, failure_status(&m));
  } else if (j->o->verbose) {
    hr_say(j->out, "rank %d on host %s %s", m.rank, d->name, what);
  }
  free(m.msg);
  check_reader(j);
}

static void end_host_ranks(struct hr_daemon *d) {
  const struct hr_host *h = &d->job->l->hosts[d->host];
  for (int i = 0; i < h->nranks; i++)
    hr_out_end_rank(d->job->out, h->first_rank + i);
}

/* The numeric address of a TCP connection's peer (peer=1) or own end; -1
 * for a socketpair. */
static int sock_ip(const struct hp_conn *c, int peer, char *buf, size_t len) {
  struct sockaddr_storage ss;
  int n = sizeof ss;
  if (!c || c->local) return -1;
  const uv_tcp_t *t = &c->tcp;
  int rc = peer ? uv_tcp_getpeername(t, (struct sockaddr *)&ss, &n)
                : uv_tcp_getsockname(t, (struct sockaddr *)&ss, &n);
  if (rc < 0) return -1;
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, buf,
              (socklen_t)len);
  } else {
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr))
      inet_ntop(AF_INET, &s6->sin6_addr.s6_addr[12], buf, (socklen_t)len);
    else
      inet_ntop(AF_INET6, &s6->sin6_addr, buf, (socklen_t)len);
    if (s6->sin6_scope_id && IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr)) {
      size_t k = strlen(buf);
      hc_fmt(buf + k, len - k, "%%%u", s6->sin6_scope_id);
    }
  }
  return 0;
}

/* Every host has registered: each learns where the others are. */
static void send_jobs(struct hr_job *j) {
  char seen[64] = "";
  for (size_t i = 0; i < j->nd && !seen[0]; i++)
    sock_ip(j->d[i].conn, 0, seen, sizeof seen);
  for (size_t i = 0; i < j->nd; i++) {
    struct hr_daemon *d = &j->d[i];
    /* horad on this machine: the others reach it where they reach us */
    if (!d->mesh_addr[0]) hc_fmt(d->mesh_addr, sizeof d->mesh_addr, "%s", seen);
  }
  j->jobs_sent = 1;
  for (size_t i = 0; i < j->nd; i++) {
    struct hr_daemon *d = &j->d[i];
    if (d->done || !d->ctl_open) continue;
    int rc = send_job(j, d);
    if (rc < 0) {
      hr_say(j->out, "error: cannot send the job to horad on host %s: %s",
             d->name, uv_strerror(rc));
      set_exit(j, HR_EXIT_LAUNCHER);
      stop_job(j, "cannot send the job");
      return;
    }
  }
}

static void on_register(struct hr_daemon *d, const unsigned char *p,
                        size_t n) {
  struct hr_job *j = d->job;
  struct hp_register m;
  if (!j->multi || d->registered || hp_dec_register(p, n, &m) < 0 ||
      m.host_index != (uint32_t)(d - j->d)) {
    protocol_error(d, "bad REGISTER message");
    return;
  }
  d->registered = 1;
  d->mesh_port = m.mesh_port;
  if (j->stopping) { /* too late: nothing to run */
    send_text(d, HP_MSG_ABORT, "the job is stopping");
    return;
  }
  if (m.mesh_addr[0])
    hc_fmt(d->mesh_addr, sizeof d->mesh_addr, "%s", m.mesh_addr);
  else
    sock_ip(d->conn, 1, d->mesh_addr, sizeof d->mesh_addr);
  if (j->o->verbose)
    hr_say(j->out, "host %s: horad registered, mesh port %u (%s, pid %d)",
           d->name, m.mesh_port, m.hostname, (int)m.pid);
  for (size_t i = 0; i < j->nd; i++)
    if (!j->d[i].registered) return;
  if (!j->stopping && !j->jobs_sent) send_jobs(j);
}

/* ---- whom to blame for a lost link (blame.h) ------------------------------ */

/* "host h2 (rank 1)", "host h2 (ranks 2-3)" */
static void host_label(const struct hr_job *j, int i, char *buf, size_t len) {
  const struct hr_host *h = &j->l->hosts[j->d[i].host];
  if (h->nranks == 1)
    hc_fmt(buf, len, "host %s (rank %d)", j->d[i].name, h->first_rank);
  else
    hc_fmt(buf, len, "host %s (ranks %d-%d)", j->d[i].name, h->first_rank,
           h->first_rank + h->nranks - 1);
}

/* The labels of hosts who[0..n) into buf, after `prefix`: "A, B and C". */
static void host_list(const struct hr_job *j, const int *who, int n,
                      const char *prefix, char *buf, size_t len) {
  char name[300];
  size_t k = (size_t)snprintf(buf, len, "%s", prefix);
  for (int i = 0; i < n; i++) {
    host_label(j, who[i], name, sizeof name);
    k += (size_t)snprintf(buf + HC_MIN(k, len - 1), len - HC_MIN(k, len - 1),
                          "%s%s", i == 0 ? "" : i == n - 1 ? " and " : ", ",
                          name);
  }
}

/* A node's name in messages: a host, or horarun. */
static const char *node_name(const struct hr_job *j, int node) {
  return node < (int)j->nd ? j->d[node].name : "horarun";
}

/* The daemons' heartbeat timeout (horarun's own is 1.5 times as long). */
static uint64_t daemon_hb_ns(const struct hr_job *j) {
  return (uint64_t)((double)j->hb_timeout_ns / 1.5);
}

/* What horarun's own TCP links to the hosts have been like lately. */
static void blame_watch_self(struct hr_job *j, uint64_t now) {
  uint64_t hb = daemon_hb_ns(j);
  for (size_t i = 0; i < j->nd; i++) {
    struct hr_daemon *d = &j->d[i];
    struct hp_conn *c = d->conn;
    uint32_t total;
    if (c && !c->closing && hp_conn_retrans(c, &total) == 0) {
      if (d->watched && total != d->retrans) d->trouble_ns = now;
      d->retrans = total;
      d->watched = 1;
    }
    if (c && !c->closing && !d->done && now - c->last_rx > hb / 2)
      d->trouble_ns = now;
    hr_blame_trouble_one(&j->blame, j->self, (int)i,
                         !d->left_out && d->trouble_ns &&
                             now - d->trouble_ns < 2 * hb);
  }
}

/* The hosts whose horad exited while the job ran, into out (at most max),
 * when every lost link has one of them at an end: their deaths explain
 * what the others lost. Returns how many, or 0 (none died, or a link
 * between living nodes was lost too). */
static int dead_explain(const struct hr_job *j, int *out, int max) {
  int nodes = j->blame.nodes, n = 0;
  for (int a = 0; a < nodes; a++)
    for (int b = 0; b < nodes; b++)
      if (j->blame.lost && j->blame.lost[a * nodes + b] &&
          !(a < (int)j->nd && j->d[a].died) &&
          !(b < (int)j->nd && j->d[b].died))
        return 0;
  for (size_t i = 0; i < j->nd && n < max; i++)
    if (j->d[i].died && !j->d[i].left_out) out[n++] = (int)i;
  return n;
}

/* The verdict: names the host (or the hosts, when the evidence cannot
 * tell them apart) whose links failed, and stops the job. */
static void blame_verdict(struct hr_job *j) {
  if (!j->blaming) return;
  j->blaming = 0;
  uv_timer_stop(&j->blame_timer);
  if (!j->link_lost && !links_failing(j)) {
    /* opened for a rank's failure, but no link failed after all */
    if (j->deferred)
      first_failure(j, j->deferred_rank, j->deferred_host, j->deferred_what,
                    j->deferred_status);
    return;
  }
  j->blamed = 1;
  blame_watch_self(j, hc_now_ns());
  int who[8], clear;
  /* horads that exited explain the links lost to them (several hosts
   * may go at once); else the links' evidence decides */
  int dead = dead_explain(j, who, 8);
  int n = dead ? dead : hr_blame_decide(&j->blame, who, 8, &clear);
  char msg[1400], name[300], reason[400];
  if (dead > 1) {
    char list[1200];
    host_list(j, who, n, "", list, sizeof list);
    hc_fmt(msg, sizeof msg, "%s are lost: their horads exited", list);
  } else if (n == 1) {
    int c = who[0], nodes = j->blame.nodes;
    struct hr_daemon *d = &j->d[c];
    host_label(j, c, name, sizeof name);
    /* who lost it; else whom it lost; else its links are in trouble */
    size_t k = 0;
    const char *why = NULL;
    reason[0] = '\0';
    for (int a = 0; a < nodes; a++)
      if (a != c && j->blame.lost[a * nodes + c])
        k += (size_t)snprintf(reason + k, sizeof reason - HC_MIN(k, sizeof reason),
                              "%s%s%s", k ? ", " : "", a < (int)j->nd ? "host " : "",
                              node_name(j, a));
    if (k) {
      why = d->lost_seen ? d->lost_why : d->own_why;
      hc_fmt(msg, sizeof msg, "%s is lost: %s (%s lost it)", name, why, reason);
    } else {
      for (int a = 0; a < nodes; a++)
        if (a != c && j->blame.lost[c * nodes + a]) {
          k += (size_t)snprintf(reason + k,
                                sizeof reason - HC_MIN(k, sizeof reason),
                                "%s%s%s", k ? ", " : "",
                                a < (int)j->nd ? "host " : "", node_name(j, a));
          if (!why && a < (int)j->nd && j->d[a].lost_seen) why = j->d[a].lost_why;
        }
      if (k)
        hc_fmt(msg, sizeof msg, "%s is lost: it lost its links to %s (%s)",
               name, reason, why ? why : "lost");
      else
        hc_fmt(msg, sizeof msg, "%s is lost: its links to the other hosts "
               "fail (retransmissions, silences)", name);
    }
  } else if (n > 1) {
    char list[1200];
    const char *why = NULL;
    for (int i = 0; i < n && !why; i++)
      why = j->d[who[i]].lost_seen ? j->d[who[i]].lost_why
            : j->d[who[i]].own_why[0] ? j->d[who[i]].own_why : NULL;
    host_list(j, who, n, "the links between ", list, sizeof list);
    hc_fmt(msg, sizeof msg, "%s failed: %s (which of them is the cause "
           "cannot be told)", list, why ? why : "lost");
  } else {
    hc_fmt(msg, sizeof msg, "a link between the hosts was lost");
  }
  /* an elastic job in place goes on without the hosts named */
  drop_none(j);
  for (int i = 0; i < n; i++)
    if (who[i] < (int)j->nd) j->d[who[i]].drop = 1;
  if (can_reform(j, 1)) {
    hr_say(j->out, "elastic: %s", msg);
    if (j->deferred && j->o->verbose)
      hr_say(j->out, "meanwhile rank %d on host %s %s", j->deferred_rank,
             j->deferred_host, j->deferred_what);
    if (reform(j, msg)) return;
  }
  for (int i = 0; i < n; i++)
    if (who[i] < (int)j->nd) blame_host(j, j->d[who[i]].host, HR_BLAME_HOST);
  hr_say(j->out, "error: %s", msg);
  if (j->deferred && j->o->verbose)
    hr_say(j->out, "meanwhile rank %d on host %s %s", j->deferred_rank,
           j->deferred_host, j->deferred_what);
  set_exit(j, HR_EXIT_LAUNCHER);
  stop_job(j, msg);
}

static void on_blame_timer(uv_timer_t *t) { blame_verdict(t->data); }

/* Links in trouble enough to blame a host for what fails now: one whose
 * links to two other nodes failed. */
static int links_failing(struct hr_job *j) {
  if (!j->multi || j->blamed || !j->blame.lost) return 0;
  blame_watch_self(j, hc_now_ns());
  int who[1], clear;
  if (hr_blame_decide(&j->blame, who, 1, &clear) < 1) return 0;
  return hr_blame_score(&j->blame, who[0]) >= 2;
}

/* The verdict waits a little for every node's word: half the daemons'
 * heartbeat timeout. */
static void blame_open(struct hr_job *j) {
  if (j->blaming || j->blamed || !j->multi) return;
  j->blaming = 1;
  uv_timer_start(&j->blame_timer, on_blame_timer,
                 HC_MAX(300, daemon_hb_ns(j) / 2000000), 0);
}

/* New evidence: gives the verdict once it is beyond doubt. */
static void blame_check(struct hr_job *j) {
  if (!j->blaming) return;
  blame_watch_self(j, hc_now_ns());
  int who[1], clear;
  hr_blame_decide(&j->blame, who, 1, &clear);
  if (clear) blame_verdict(j);
}

/* Node `from` lost its link to host `to`, saying why. The verdict waits
 * a little for the others' word: half the daemons' heartbeat timeout. */
static void note_lost(struct hr_job *j, int from, int to, const char *why) {
  if (!j->multi || to < 0 || to >= (int)j->nd || j->d[to].left_out ||
      (from < (int)j->nd && j->d[from].left_out))
    return;
  struct hr_daemon *d = &j->d[to];
  hr_blame_lost(&j->blame, from, to);
  j->link_lost = 1;
  if (from == j->self && from == (int)j->nd) {
    if (!d->own_why[0]) hc_fmt(d->own_why, sizeof d->own_why, "%s", why);
  } else if (!d->lost_seen) {
    d->lost_seen = 1;
    hc_fmt(d->lost_why, sizeof d->lost_why, "%s", why);
  }
  if (j->blamed || j->closing || (j->stopping && !j->blaming)) return;
  blame_open(j);
  blame_check(j);
}

static void on_peer_lost(struct hr_daemon *d, const unsigned char *p,
                         size_t n) {
  struct hr_job *j = d->job;
  struct hp_peer_lost m;
  int me = (int)(d - j->d);
  if (!j->multi || hp_dec_peer_lost(p, n, &m) < 0 || m.host >= j->nd ||
      (int)m.host == me) {
    protocol_error(d, "bad PEER_LOST message");
    return;
  }
  if (d->left_out || j->d[m.host].left_out) return; /* no news */
  if (j->o->verbose) {
    char name[300];
    host_label(j, (int)m.host, name, sizeof name);
    hr_say(j->out, "host %s lost its link to %s: %s", d->name, name, m.msg);
  }
  note_lost(j, me, (int)m.host, m.msg);
}

/* A daemon's heartbeat lists the hosts its links have been in trouble
 * with lately. */
static void on_heartbeat(struct hr_daemon *d, const unsigned char *p,
                         size_t n) {
  struct hr_job *j = d->job;
  uint32_t list[HP_TROUBLE_MAX];
  int to[HP_TROUBLE_MAX];
  uint32_t k;
  if (hp_dec_heartbeat(p, n, list, HP_TROUBLE_MAX, &k) < 0) {
    protocol_error(d, "bad HEARTBEAT message");
    return;
  }
  if (!j->multi || !j->blame.lost || d->left_out) return;
  uint32_t nto = 0;
  for (uint32_t i = 0; i < k; i++) {
    if (list[i] > j->nd) {
      protocol_error(d, "bad HEARTBEAT message");
      return;
    }
    if (list[i] < j->nd && j->d[list[i]].left_out) continue;
    to[nto++] = list[i] == j->nd ? j->self : (int)list[i];
  }
  hr_blame_trouble(&j->blame, (int)(d - j->d), to, (int)nto);
  blame_check(j);
}

static void on_fault(struct hr_daemon *d, const unsigned char *p, size_t n) {
  struct hr_job *j = d->job;
  char *msg = hp_dec_text(p, n);
  if (!msg) {
    protocol_error(d, "bad FAULT message");
    return;
  }
  if (d->left_out) { /* its host was left out */
    free(msg);
    return;
  }
  if (strcmp(msg, j->last_fault)) {
    hr_say(j->out, "error: %s", msg);
    hc_fmt(j->last_fault, sizeof j->last_fault, "%s", msg);
  }
  set_exit(j, HR_EXIT_LAUNCHER);
  stop_job(j, msg);
  free(msg);
}

static void on_lateness(struct hr_daemon *d, const unsigned char *p,
                        size_t n) {
  struct hr_job *j = d->job;
  struct hp_late_rank *v;
  uint32_t k;
  char why[160];
  if (hp_dec_lateness(p, n, &v, &k) < 0) {
    protocol_error(d, "bad LATENESS message");
    return;
  }
  if (!j->late && !(j->late = calloc((size_t)j->l->np, sizeof *j->late))) {
    free(v);
    return; /* the summary is not worth failing the job */
  }
  for (uint32_t i = 0; j->slot_of && i < k; i++) /* ranks numbered anew */
    if (v[i].rank >= 0 && v[i].rank < j->np_now)
      v[i].rank = j->slot_of[v[i].rank];
  if (hr_late_merge(j->late, j->l->np, v, k, why, sizeof why) < 0)
    protocol_error(d, why);
  free(v);
}

static const char *host_display(const struct hr_job *j, int h);

/* The end of the job: names the rank that was late most of the time. */
static void straggler_summary(struct hr_job *j) {
  int pct;
  unsigned long long med;
  int r = j->late ? hr_straggler(j->late, j->l->np, &pct, &med) : -1;
  if (r < 0) return;
  char behind[32];
  double ms = (double)med / 1e6;
  if (ms < 10) hc_fmt(behind, sizeof behind, "%.1f ms", ms);
  else if (ms < 1000) hc_fmt(behind, sizeof behind, "%.0f ms", ms);
  else hc_fmt(behind, sizeof behind, "%.1f s", ms / 1000);
  hr_say(j->out, "rank %d (host %s) was last to submit in %d %% of "
         "operations, median %s behind the first", r,
         host_display(j, j->l->ranks[r].host), pct, behind);
}

/* ---- re-forming an elastic job in place --------------------------------- */

static void drop_none(struct hr_job *j) {
  for (size_t i = 0; i < j->nd; i++) j->d[i].drop = 0;
}

/* 1 when the job may go on without the daemons marked `drop` (at least
 * one): an elastic job in place (outcome->in_place), not stopping, every
 * other host's horad running the job, at least --min-np ranks on them,
 * and a reset left. With `again`, also in the middle of a re-forming (a
 * host lost meanwhile: the daemons kept take the next REFORM instead,
 * their ranks still waiting in hora_init()). */
static int can_reform(const struct hr_job *j, int again) {
  const struct hr_job_outcome *oc = j->outcome;
  if (!oc || !oc->in_place || !j->multi || j->stopping || j->interrupted ||
      (j->reforming && !again) || oc->resets_left == 0)
    return 0;
  int ranks = 0, hosts = 0, dropped = 0;
  for (size_t i = 0; i < j->nd; i++) {
    const struct hr_daemon *d = &j->d[i];
    if (d->left_out) continue;
    if (d->drop) {
      dropped++;
      continue;
    }
    if (!d->ready || !d->job_sent || !d->conn || d->ctl_closing || d->done ||
        d->reaped)
      return 0;
    ranks += j->l->hosts[d->host].nranks;
    hosts++;
  }
  return dropped > 0 && hosts > 0 && ranks >= oc->min_np;
}

/* Leaves the daemons marked `drop` out (they are told to stop) and sends
 * every other host its REFORM: the hosts kept, in order, their ranks
 * numbered anew from 0. Returns 1, or 0 when it cannot (can_reform(), or
 * out of memory): the caller ends the job. */
static int reform(struct hr_job *j, const char *why) {
  if (!can_reform(j, 1)) return 0;
  struct hr_job_outcome *oc = j->outcome;
  const struct hr_layout *l = j->l;
  uint32_t *old = calloc(j->nd, sizeof *old);
  int32_t *first = calloc(j->nd, sizeof *first);
  int32_t *nr = calloc(j->nd, sizeof *nr);
  int32_t *slot_of = calloc((size_t)l->np, sizeof *slot_of);
  struct hp_job_rank *rk = calloc((size_t)l->np, sizeof *rk);
  int ok = old && first && nr && slot_of && rk;
  uint32_t nk = 0;
  int32_t np = 0;
  for (size_t i = 0; ok && i < j->nd; i++) {
    const struct hr_daemon *d = &j->d[i];
    if (d->left_out || d->drop) continue;
    const struct hr_host *h = &l->hosts[d->host];
    old[nk] = (uint32_t)i;
    first[nk] = np;
    nr[nk] = h->nranks;
    for (int r = 0; r < h->nranks; r++) slot_of[np + r] = h->first_rank + r;
    np += h->nranks;
    nk++;
  }
  char left[600];
  size_t k = 0;
  left[0] = '\0';
  for (size_t i = 0; ok && i < j->nd; i++) {
    struct hr_daemon *d = &j->d[i];
    if (!d->drop || d->left_out) continue;
    d->left_out = d->quiet = 1;
    d->drop = 0;
    k += (size_t)snprintf(left + k, sizeof left - HC_MIN(k, sizeof left),
                          "%s%s", k ? ", " : "", d->name);
    if (!d->done) {
      char reason[600];
      hc_fmt(reason, sizeof reason, "the job goes on without this host: %s",
             why);
      send_text(d, HP_MSG_ABORT, reason);
    }
    if (oc->left_out) oc->left_out(oc->arg, d->name);
  }
  if (!ok) goto out;
  j->reforms++;
  oc->reforms++;
  if (oc->resets_left > 0) oc->resets_left--;
  for (uint32_t h = 0; h < nk; h++) {
    for (int32_t r = 0; r < nr[h]; r++) {
      int32_t cs = 0, cr = 0;
      for (uint32_t o = 0; o < nk; o++)
        if (nr[o] > r) {
          if (o < h) cr++;
          cs++;
        }
      rk[r] = (struct hp_job_rank){first[h] + r, r, cr, cs};
    }
    struct hp_reform m = {.number = j->reforms,
                          .host_index = h,
                          .nhosts = nk,
                          .size = np,
                          .old_index = old,
                          .first_rank = first,
                          .nranks = nr,
                          .nlocal = (uint32_t)nr[h],
                          .ranks = rk};
    hc_fmt(m.why, sizeof m.why, "%s is left out: %s", left, why);
    struct hp_wbuf w;
    hp_wbuf_init(&w);
    hp_enc_reform(&w, &m);
    send_frames(&j->d[old[h]], &w);
  }
  free(j->slot_of);
  j->slot_of = slot_of;
  slot_of = NULL;
  j->np_now = np;
  atomic_store(&oc->np_now, np);
  j->reforming = 1;
  j->reform_t0 = hc_now_ns();
  /* the next loss is judged on fresh evidence */
  uv_timer_stop(&j->blame_timer);
  j->blaming = j->blamed = j->link_lost = j->deferred = 0;
  hr_blame_free(&j->blame);
  if (hr_blame_init(&j->blame, (int)j->nd, j->here) == 0)
    j->self = hr_blame_self(&j->blame, j->here);
  for (size_t i = 0; i < j->nd; i++) {
    j->d[i].lost_seen = 0;
    j->d[i].own_why[0] = '\0';
  }
  hr_say(j->out, "elastic: host %s left out; the job goes on in place with "
         "%d rank(s) on %u host(s), numbered anew (re-forming %u)", left,
         np, nk, j->reforms);
out:
  free(old);
  free(first);
  free(nr);
  free(rk);
  free(slot_of);
  return ok;
}

/* A kept host's ranks are back in the re-formed job. */
static void on_reformed(struct hr_daemon *d, const unsigned char *p,
                        size_t n) {
  struct hr_job *j = d->job;
  uint32_t number;
  if (hp_dec_reformed(p, n, &number) < 0 || number > j->reforms) {
    protocol_error(d, "bad REFORM message");
    return;
  }
  if (d->left_out) return;
  d->reformed = number;
  if (!j->reforming || number != j->reforms) return;
  for (size_t i = 0; i < j->nd; i++)
    if (!j->d[i].left_out && j->d[i].reformed != j->reforms) return;
  j->reforming = 0;
  hr_say(j->out, "elastic: the job re-formed in place in %.2f s: %d rank(s) "
         "train on", (double)(hc_now_ns() - j->reform_t0) / 1e9, j->np_now);
}

static void dispatch(struct hr_daemon *d, const struct hp_frame_hdr *h,
                     const unsigned char *p) {
  switch (h->type) {
  case HP_MSG_REGISTER:
    on_register(d, p, h->len);
    break;
  case HP_MSG_FAULT:
    on_fault(d, p, h->len);
    break;
  case HP_MSG_HEARTBEAT:
    on_heartbeat(d, p, h->len);
    break;
  case HP_MSG_PEER_LOST:
    on_peer_lost(d, p, h->len);
    break;
  case HP_MSG_READY:
    on_ready(d, p, h->len);
    break;
  case HP_MSG_OUTPUT:
    on_output(d, p, h->len);
    break;
  case HP_MSG_EXIT:
    on_rank_exit(d, p, h->len);
    break;
  case HP_MSG_LATENESS:
    on_lateness(d, p, h->len);
    break;
  case HP_MSG_REFORM:
    on_reformed(d, p, h->len);
    break;
  case HP_MSG_DONE:
    d->done = 1;
    end_host_ranks(d);
    if (d->job->o->verbose)
      hr_say(d->job->out, "horad on host %s: every rank has ended", d->name);
    break;
  default: {
    char why[64];
    hc_fmt(why, sizeof why, "unexpected message type %u", h->type);
    protocol_error(d, why);
  }
  }
}

/* ---- the control connection ------------------------------------------- */

static void on_alloc_err(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  struct hr_daemon *d = h->data;
  (void)hint;
  *buf = uv_buf_init(d->job->readbuf, sizeof d->job->readbuf);
}

static void on_daemon_timer(uv_timer_t *t);

static void control_closed(struct hr_daemon *d) {
  d->ctl_open = 0;
  d->ctl_closing = 0;
  if (!d->reaped)
    uv_timer_start(&d->timer, on_daemon_timer, d->job->reap_ms, 0);
  check_daemon(d);
}

/* A horad's frames, over its socketpair or (once it said REGISTER) TCP. */
static int on_daemon_frame(struct hp_conn *c, const struct hp_frame_hdr *h,
                           unsigned char *p, int *keep) {
  (void)keep;
  dispatch(c->data, h, p);
  return 0;
}

static void on_daemon_close(struct hp_conn *c, const char *why) {
  struct hr_daemon *d = c->data;
  struct hr_job *j = d->job;
  if (!c->local && !d->done && !j->closing && j->blame.lost && !d->left_out) {
    hr_blame_lost(&j->blame, j->self, (int)(d - j->d));
    if (!d->own_why[0])
      hc_fmt(d->own_why, sizeof d->own_why, "its connection to horarun "
             "ended (%s)", why);
    blame_check(j);
  }
  d->conn = NULL;
  d->ctl_closing = 1; /* closed: nothing more to send or close */
  if (c->bad_data) protocol_error(d, why);
  control_closed(d);
}

static const struct hp_conn_cb daemon_conn_cb = {.on_frame = on_daemon_frame,
                                                 .on_close = on_daemon_close};

/* ---- the rendezvous: horads started over ssh call back ------------------- */

/* A rendezvous connection's data is the job until the peer says which
 * host it is (REGISTER); from then on it is that host's daemon, and its
 * callbacks are daemon_conn_cb. */
static int on_rdv_frame(struct hp_conn *c, const struct hp_frame_hdr *h,
                        unsigned char *p, int *keep) {
  struct hr_job *j = c->data;
  (void)keep;
  /* An authenticated horad says which host it is. */
  struct hp_register m;
  if (h->type != HP_MSG_REGISTER || hp_dec_register(p, h->len, &m) < 0) {
    hc_fmt(c->why, sizeof c->why, "expected REGISTER, got message type %u",
           h->type);
    return -1;
  }
  if (m.host_index >= j->nd || !j->d[m.host_index].remote ||
      j->d[m.host_index].conn || j->d[m.host_index].registered ||
      j->d[m.host_index].finished) {
    hc_fmt(c->why, sizeof c->why, "unexpected REGISTER for host #%u",
           m.host_index);
    return -1;
  }
  struct hr_daemon *d = &j->d[m.host_index];
  d->conn = c;
  d->ctl_open = 1;
  c->data = d;
  c->cb = &daemon_conn_cb;
  on_register(d, p, h->len);
  return 0;
}

/* A connection that never said REGISTER has gone. */
static void on_rdv_close(struct hp_conn *c, const char *why) {
  struct hr_job *j = c->data;
  /* one line per stranger, thinned out when they come in floods */
  unsigned n = ++j->nrejected;
  if (n <= 20 || n % 100 == 0)
    hr_say(j->out, "%s a connection from %s: %s%s",
           c->authed ? "dropped" : "rejected", c->peer, why,
           n == 20 ? " (from now on one line per 100)" : "");
}

static const struct hp_conn_cb rdv_cb = {.on_frame = on_rdv_frame,
                                         .on_close = on_rdv_close};

static void on_rdv_connection(uv_stream_t *server, int status) {
  struct hr_job *j = server->data;
  struct hp_conn *c;
  if (status < 0 || j->closing) return;
  /* A flood of strangers makes room for this one (conn.h): a real horad
   * always gets in. */
  if (hp_conn_accept_tracked(server, j->secret, HP_AUTH_CONTROL, &rdv_cb, j,
                             &j->conns, &c) == 0)
    hp_conn_set_encrypt(c, hr_opts_knob_num(j->o, "wire_encrypt") != 0);
}

static int open_rendezvous(struct hr_job *j) {
  struct sockaddr_storage ss;
  uv_tcp_init(&j->loop, &j->rdv);
  j->rdv.data = j;
  j->rdv_open = 1;
  hp_addr_parse("::", 0, &ss);
  int rc = uv_tcp_bind(&j->rdv, (struct sockaddr *)&ss, 0);
  if (rc < 0) {
    hp_addr_parse("0.0.0.0", 0, &ss);
    rc = uv_tcp_bind(&j->rdv, (struct sockaddr *)&ss, 0);
  }
  if (rc == 0) rc = uv_listen((uv_stream_t *)&j->rdv, 128, on_rdv_connection);
  int len = sizeof ss;
  if (rc == 0) rc = uv_tcp_getsockname(&j->rdv, (struct sockaddr *)&ss, &len);
  if (rc < 0) {
    hr_say(j->out, "error: cannot listen for the hosts' daemons: %s",
           uv_strerror(rc));
    return -1;
  }
  j->rdv_port = ntohs(ss.ss_family == AF_INET
                          ? ((struct sockaddr_in *)&ss)->sin_port
                          : ((struct sockaddr_in6 *)&ss)->sin6_port);
  if (j->o->verbose) hr_say(j->out, "rendezvous on port %d", j->rdv_port);
  return 0;
}

/* Heartbeats to every horad over TCP; one silent for too long is lost. */
static void on_hb_timer(uv_timer_t *t) {
  struct hr_job *j = t->data;
  uint64_t now = hc_now_ns();
  blame_watch_self(j, now);
  for (size_t i = 0; i < j->nd; i++) {
    struct hr_daemon *d = &j->d[i];
    struct hp_conn *c = d->conn; /* TCP: a socketpair needs none */
    if (!c || c->local || c->closing || d->done || d->left_out) continue;
    if (now - c->last_rx > j->hb_timeout_ns) {
      char why[96];
      hc_fmt(why, sizeof why, "horarun heard no heartbeat for %.1f s",
             (double)(now - c->last_rx) / 1e9);
      d->quiet = 1;
      note_lost(j, j->self, (int)i, why);
      if (!j->blaming && !j->blamed) { /* the job stops for another cause */
        hr_say(j->out, "error: lost contact with host %s: no heartbeat for "
               "%.1f s", d->name, (double)(now - c->last_rx) / 1e9);
        set_exit(j, HR_EXIT_LAUNCHER);
        char reason[300];
        hc_fmt(reason, sizeof reason, "host %s is lost (no heartbeat)",
               d->name);
        stop_job(j, reason);
      }
      close_ctl(d);
      if (!d->reaped) { /* its ssh: it may wait for minutes */
        kill(-d->pid, SIGKILL);
        kill(d->pid, SIGKILL);
      }
      continue;
    }
    struct hp_wbuf w;
    hp_wbuf_init(&w);
    hp_frame_begin(&w, HP_MSG_HEARTBEAT, 0);
    hp_frame_end(&w);
    hp_conn_send(c, &w);
    hp_wbuf_free(&w);
  }
}

/* ---- ssh's output -------------------------------------------------------- */

static void line_done(struct hr_daemon *d) {
  struct hr_job *j = d->job;
  d->line[d->linelen] = '\0';
  if (d->linelen && d->line[d->linelen - 1] == '\r')
    d->line[--d->linelen] = '\0';
  if (d->linelen) {
    if (d->ntail == TAIL_LINES) {
      memmove(d->tail[0], d->tail[1], sizeof d->tail - sizeof d->tail[0]);
      d->ntail--;
    }
    memcpy(d->tail[d->ntail++], d->line, d->linelen + 1);
    /* horad's own log lines are news; ssh's are kept for a failure */
    if (j->o->verbose || !strncmp(d->line, "horad", 5))
      hr_say(j->out, "host %s: %s", d->name, d->line);
  }
  d->linelen = 0;
}

static void on_err_closed(uv_handle_t *h) {
  struct hr_daemon *d = h->data;
  d->err_open = 0;
  check_daemon(d);
}

static void close_err(struct hr_daemon *d) {
  if (!d->err_open || uv_is_closing((uv_handle_t *)&d->err)) return;
  if (d->linelen) line_done(d);
  uv_close((uv_handle_t *)&d->err, on_err_closed);
}

static void on_err_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  struct hr_daemon *d = s->data;
  if (n < 0) {
    close_err(d);
    return;
  }
  for (ssize_t i = 0; i < n; i++) {
    if (buf->base[i] == '\n') {
      line_done(d);
    } else if (d->linelen < sizeof d->line - 1) {
      d->line[d->linelen++] = buf->base[i];
    }
  }
}

/* Prints the last lines ssh (or the remote shell) wrote, indented. */
static void print_tail(struct hr_daemon *d) {
  for (int i = 0; i < d->ntail; i++)
    hr_say(d->job->out, "  %s", d->tail[i]);
}

static void close_ctl(struct hr_daemon *d) {
  if (!d->ctl_open || d->ctl_closing || !d->conn) return;
  d->ctl_closing = 1;
  hp_conn_close(d->conn, "closed by horarun"); /* on_daemon_close() */
}

static int reap(struct hr_daemon *d);

/* Drain: horad is reaped but its socket stayed open (a rank inherited it?)
 * -- stop reading. Reap grace: the socket closed but horad lives on -- kill
 * it, and look again a little later (SIGCHLD may be lost or blocked). */
static void on_daemon_timer(uv_timer_t *t) {
  struct hr_daemon *d = t->data;
  if (reap(d) || d->reaped) {
    close_ctl(d);
    close_err(d);
    return;
  }
  if (!d->killed)
    hr_say(d->job->out,
           "error: horad on host %s closed its socket but did not exit; "
           "killing it",
           d->name);
  d->killed = d->quiet = 1;
  set_exit(d->job, HR_EXIT_LAUNCHER);
  kill(d->pid, SIGKILL);
  uv_timer_start(&d->timer, on_daemon_timer, DRAIN_MS, 0);
}

/* ---- processes and signals ----------------------------------------------- */

static void describe_status(int st, char *buf, size_t len) {
  if (WIFEXITED(st))
    hc_fmt(buf, len, "code %d", WEXITSTATUS(st));
  else if (WIFSIGNALED(st))
    hc_fmt(buf, len, "signal %s", hc_signal_name(WTERMSIG(st)));
  else
    hc_fmt(buf, len, "status 0x%x", st);
}

static void close_handle(uv_handle_t *h) {
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

/* Ends the loop once every horad is finished. */
static void check_all(struct hr_job *j) {
  for (size_t i = 0; i < j->nd; i++)
    if (!j->d[i].finished) return;
  if (j->closing) return;
  blame_verdict(j); /* every daemon has said what it will */
  j->closing = 1;
  hr_out_break(j->out);
  for (int i = 0; i < NSTOP; i++)
    if (j->sig_on[i]) close_handle((uv_handle_t *)&j->sig[i]);
  close_handle((uv_handle_t *)&j->sigchld);
  close_handle((uv_handle_t *)&j->start_timer);
  close_handle((uv_handle_t *)&j->stop_timer);
  close_handle((uv_handle_t *)&j->hosts_timer);
  if (j->multi) {
    close_handle((uv_handle_t *)&j->hb_timer);
    close_handle((uv_handle_t *)&j->blame_timer);
  }
  if (j->rdv_open) close_handle((uv_handle_t *)&j->rdv);
  hp_conn_close_all(&j->conns, "the job is over");
  for (size_t i = 0; i < j->nd; i++)
    close_handle((uv_handle_t *)&j->d[i].timer);
}

static void check_daemon(struct hr_daemon *d) {
  struct hr_job *j = d->job;
  if (d->finished || !d->reaped || d->ctl_open || d->err_open) return;
  d->finished = 1;
  uv_timer_stop(&d->timer);
  char st[64];
  describe_status(d->wstatus, st, sizeof st);
  if (d->remote && d->started && !d->registered && !d->quiet) {
    hr_say(j->out, "error: cannot start horad on host %s: %s exited with "
           "%s%s", d->name, hr_launcher_name(j->o->launch), st,
           d->ntail ? "; it said:" : "");
    blame_host(j, d->host, HR_BLAME_HOST);
    print_tail(d);
    set_exit(j, HR_EXIT_LAUNCHER);
    stop_job(j, "a horad could not be started");
  } else if (d->started && !d->done && !d->quiet &&
             (d->job_sent || !j->stopping)) {
    /* (One stopped before it had a job, because of another host, had
     * nothing to run: its exit is no news.) A link lost meanwhile was
     * most likely this: its verdict first. */
    hr_say(j->out, "error: horad on host %s exited unexpectedly (%s)", d->name,
           st);
    /* an elastic job in place may go on without it (the verdict, or
     * below, decides) */
    d->died = 1;
    for (size_t i = 0; i < j->nd; i++) /* (every horad gone so far) */
      j->d[i].drop = j->d[i].died && !j->d[i].left_out;
    int may = can_reform(j, 1);
    if (!may) {
      blame_host(j, d->host, HR_BLAME_HOST);
      set_exit(j, HR_EXIT_LAUNCHER);
    }
    char why[128];
    hc_fmt(why, sizeof why, "its horad exited (%s)", st);
    if (j->blaming) {
      /* the others' word is in: this is the one, unless they lost links
       * to other hosts too (which may be going as well: the verdict
       * waits for them, at most until the blame timer) */
      int who[8];
      note_lost(j, j->self, (int)(d - j->d), why);
      if (dead_explain(j, who, 8)) blame_verdict(j);
    } else if (j->multi && !j->blamed && !j->stopping) {
      /* the other hosts lose it too: let them say so (their ranks' errors
       * then name it) before the job is stopped */
      note_lost(j, j->self, (int)(d - j->d), why);
    }
    if (!j->blaming && !j->stopping && !d->left_out) {
      char msg[400];
      hc_fmt(msg, sizeof msg, "horad on host %s exited unexpectedly (%s)",
             d->name, st);
      if (!(may && reform(j, msg))) {
        blame_host(j, d->host, HR_BLAME_HOST);
        set_exit(j, HR_EXIT_LAUNCHER);
        stop_job(j, "a horad exited unexpectedly");
      }
    }
  } else if (d->started && j->o->verbose) {
    hr_say(j->out, "horad on host %s exited (%s)", d->name, st);
  }
  end_host_ranks(d);
  check_all(j);
}

/* Collects horad's status if it has exited. Returns 1 when it just did. */
static int reap(struct hr_daemon *d) {
  int st;
  if (!d->started || d->reaped || waitpid(d->pid, &st, WNOHANG) != d->pid)
    return 0;
  d->reaped = 1;
  d->wstatus = st;
  uv_timer_stop(&d->timer);
  if (d->ctl_open) uv_timer_start(&d->timer, on_daemon_timer, DRAIN_MS, 0);
  check_daemon(d);
  return 1;
}

static void on_sigchld(uv_signal_t *s, int signum) {
  struct hr_job *j = s->data;
  (void)signum;
  for (size_t i = 0; i < j->nd; i++)
    reap(&j->d[i]);
}

static void on_stop_signal(uv_signal_t *s, int signum) {
  struct hr_job *j = s->data;
  const char *name = hc_signal_name(signum);
  if (!j->interrupted) {
    j->interrupted = signum;
    if (j->stopping) {
      hr_say(j->out, "interrupted by %s; the job is already stopping", name);
    } else {
      hr_say(j->out, "interrupted by %s, stopping the job", name);
      set_exit(j, 128 + signum);
    }
    char reason[64];
    hc_fmt(reason, sizeof reason, "horarun was interrupted by %s", name);
    stop_job(j, reason);
  } else if (!j->told_again) {
    j->told_again = 1;
    hr_say(j->out,
           "%s again: still waiting for the ranks to end (horad "
           "kills what is left after its grace period)",
           name);
  }
}

static void on_start_timeout(uv_timer_t *t) {
  struct hr_job *j = t->data;
  /* Hosts that never registered are the cause; the others only waited
   * for them. */
  int unregistered = 0;
  for (size_t i = 0; i < j->nd; i++)
    unregistered |= j->d[i].started && !j->d[i].reaped && !j->d[i].registered &&
                    j->d[i].remote;
  for (size_t i = 0; i < j->nd; i++) {
    struct hr_daemon *d = &j->d[i];
    if (!d->started || d->reaped || d->ready) continue;
    if (unregistered && d->registered) {
      d->quiet = 1;
      continue; /* stopped by the ABORT below */
    }
    if (d->remote && !d->registered) {
      hr_say(j->out,
             "error: host %s: horad did not connect back within %d s "
             "(--start-timeout); %s %s",
             d->name, j->start_timeout, hr_launcher_name(j->o->launch),
             d->ntail ? "said:" : "said nothing");
      print_tail(d);
    } else if (j->multi && d->registered) {
      hr_say(j->out,
             "error: host %s: horad did not connect to the other hosts' "
             "daemons within %d s (--start-timeout)",
             d->name, j->start_timeout);
    } else {
      hr_say(j->out,
             "error: horad on host %s did not start within %d s "
             "(--start-timeout); stopping the job",
             d->name, j->start_timeout);
    }
    d->quiet = 1;
    blame_host(j, d->host, HR_BLAME_HOST);
    kill(-d->pid, SIGKILL); /* its session: it called setsid() */
    kill(d->pid, SIGKILL);
  }
  set_exit(j, HR_EXIT_LAUNCHER);
  stop_job(j, "start timeout");
}

/* ---- setting up ---------------------------------------------------------- */

static void start_failed(struct hr_job *j, struct hr_daemon *d,
                         const char *err) {
  hr_say(j->out, "error: host %s: %s", d->name, err);
  blame_host(j, d->host, HR_BLAME_HOST);
  d->reaped = 1;
  set_exit(j, HR_EXIT_LAUNCHER);
  stop_job(j, "a horad could not be started");
}

static void start_remote(struct hr_job *j, struct hr_daemon *d,
                         const char *line) {
  char err[1024];
  int fd = -1;
  const char *path = j->o->horad_path ? j->o->horad_path : j->horad;
  const struct hr_host *h = &j->l->hosts[d->host];
  char **argv = NULL, addr[128];
  if (j->o->launch == HR_LAUNCH_MPIRUN) {
    /* mpirun's processes know of no ssh connection: where horarun is,
     * as the host would reach it */
    if (hr_route_addr(h, addr, sizeof addr) < 0) {
      start_failed(j, d, "cannot find a route to it (does its name "
                         "resolve?)");
      return;
    }
    argv = hr_mpirun_argv(j->o, h, path, "--rendezvous", addr);
  } else if (j->o->launch == HR_LAUNCH_SRUN) {
    argv = hr_srun_argv(j->o, h, path, "--rendezvous");
  } else if (j->o->launch == HR_LAUNCH_SERVICE) {
    /* this machine's horad is the client; the service runs its own */
    argv = hr_service_argv(j->o, h, j->horad);
  } else {
    argv = hr_ssh_argv(j->o, h, path);
  }
  if (!argv) {
    hr_say(j->out, "error: out of memory");
    set_exit(j, HR_EXIT_LAUNCHER);
    stop_job(j, "out of memory");
    return;
  }
  if (j->o->verbose) {
    char cmd[4096];
    size_t n = 0;
    for (char **a = argv; *a && n < sizeof cmd - 1; a++)
      n += (size_t)snprintf(cmd + n, sizeof cmd - n, "%s%s", n ? " " : "", *a);
    hr_say(j->out, "starting horad on host %s: %s", d->name, cmd);
  }
  int rc = hr_spawn_ssh(argv, line, &d->pid, &fd, err, sizeof err);
  hr_strv_free(argv);
  if (rc < 0) {
    start_failed(j, d, err);
    return;
  }
  d->started = 1;
  uv_pipe_init(&j->loop, &d->err, 0);
  d->err.data = d;
  if (uv_pipe_open(&d->err, fd) < 0) {
    close(fd);
    return;
  }
  d->err_open = 1;
  uv_read_start((uv_stream_t *)&d->err, on_alloc_err, on_err_read);
}

static void start_daemon(struct hr_job *j, struct hr_daemon *d) {
  char err[1024], line[192];
  int fd = -1;
  if (j->multi)
    hr_boot_line(line, sizeof line, (int)(d - j->d),
                 d->remote ? j->rdv_port : 0, j->secret, sizeof j->secret,
                 (double)j->hb_timeout_ns / 1.5e9,
                 hr_opts_knob_num(j->o, "wire_integrity") != 0,
                 hr_opts_knob_num(j->o, "wire_encrypt") != 0);
  if (d->remote) {
    start_remote(j, d, line);
    memset(line, 0, sizeof line);
    return;
  }
  char *iface = j->multi ? hr_iface_arg(j->o, &j->l->hosts[d->host]) : NULL;
  /* through this machine's service too, where one listens */
  const char *svc = j->o->launch == HR_LAUNCH_SERVICE
                        ? hr_service_socket(j->o) : NULL;
  if (j->o->verbose)
    hr_say(j->out, "starting horad on host %s: %s%s%s%s --control-fd %d%s%s%s",
           d->name, j->horad, svc ? " --service-client " : "",
           svc ? svc : "", svc ? " --" : "", HR_CONTROL_FD,
           j->multi ? " --bootstrap" : "", iface ? " --iface " : "",
           iface ? iface : "");
  int rc = hr_spawn_local(j->horad, j->envp, j->multi ? line : NULL, iface,
                          svc, &d->pid, &fd, err, sizeof err);
  free(iface);
  memset(line, 0, sizeof line);
  if (rc < 0) {
    start_failed(j, d, err);
    return;
  }
  d->started = 1;
  rc = hp_conn_open_local(&j->loop, fd, "its socketpair", &daemon_conn_cb, d,
                          &d->conn);
  if (rc < 0) close(fd); /* not the connection's */
  else d->ctl_open = 1;
  if (rc == 0 && !j->multi) rc = send_job(j, d); /* multi: once registered */
  if (rc < 0) {
    hr_say(j->out, "error: cannot send the job to horad on host %s: %s",
           d->name, uv_strerror(rc));
    d->quiet = 1;
    set_exit(j, HR_EXIT_LAUNCHER);
    stop_job(j, "cannot send the job");
    close_ctl(d);
  }
}

/* The name messages use for host h: this machine's own name for local
 * hosts (what HORA_HOSTNAME says), else the name the user gave. */
static const char *host_display(const struct hr_job *j, int h) {
  return j->l->hosts[h].local ? j->me : j->l->hosts[h].name;
}

static void print_layout(struct hr_job *j) {
  const struct hr_layout *l = j->l;
  hr_say(j->out, "job: %d process%s of %s, in %s", l->np,
         l->np == 1 ? "" : "es", j->o->prog[0], j->cwd);
  const char *nodelist, *tasks, *step = getenv("SLURM_STEP_NODELIST");
  if (j->o->join && j->o->host_source == HR_HOSTS_NONE && step && *step)
    hr_say(j->out, "hosts: the Slurm step's, SLURM_STEP_NODELIST=%s "
           "SLURM_STEP_TASKS_PER_NODE=%s", step,
           getenv("SLURM_STEP_TASKS_PER_NODE") ?
           getenv("SLURM_STEP_TASKS_PER_NODE") : "(unset: 1 per node)");
  else if (j->o->host_source == HR_HOSTS_NONE &&
           hr_slurm_env(&nodelist, &tasks))
    hr_say(j->out, "hosts: the Slurm allocation's, SLURM_JOB_NODELIST=%s "
           "SLURM_TASKS_PER_NODE=%s", nodelist, tasks ? tasks : "(unset: 1 "
           "per node)");
  for (int r = 0; r < l->np; r++) {
    const struct hr_rank *k = &l->ranks[r];
    hr_say(j->out,
           "rank %d: host %s, local_rank %d of %d, cross_rank %d of "
           "%d",
           r, host_display(j, k->host), k->local_rank, k->local_size,
           k->cross_rank, k->cross_size);
  }
}

/* Installs the loop's signal and timer handles. */
static void watch_signals(struct hr_job *j) {
  sigset_t set; /* in case they came blocked: the loop needs them */
  sigemptyset(&set);
  for (int i = 0; i < NSTOP; i++)
    sigaddset(&set, stop_signals[i]);
  sigaddset(&set, SIGCHLD);
  sigprocmask(SIG_UNBLOCK, &set, NULL);
  signal(SIGPIPE, SIG_IGN); /* a gone reader is an EPIPE, not a death */
  signal(SIGCHLD, SIG_DFL); /* waitpid() must see horad */
  for (int i = 0; i < NSTOP; i++) {
    struct sigaction old;
    /* Like a shell's background job (or nohup), keep ignoring what we
     * were started ignoring. */
    if (sigaction(stop_signals[i], NULL, &old) == 0 &&
        old.sa_handler == SIG_IGN)
      continue;
    uv_signal_init(&j->loop, &j->sig[i]);
    j->sig[i].data = j;
    uv_signal_start(&j->sig[i], on_stop_signal, stop_signals[i]);
    j->sig_on[i] = 1;
  }
  uv_signal_init(&j->loop, &j->sigchld);
  j->sigchld.data = j;
  uv_signal_start(&j->sigchld, on_sigchld, SIGCHLD);
  uv_timer_init(&j->loop, &j->start_timer);
  j->start_timer.data = j;
  uv_timer_init(&j->loop, &j->stop_timer);
  j->stop_timer.data = j;
  uv_timer_init(&j->loop, &j->hosts_timer);
  j->hosts_timer.data = j;
  if (j->outcome) uv_timer_start(&j->hosts_timer, on_hosts_timer, 250, 250);
  if (j->start_timeout > 0)
    uv_timer_start(&j->start_timer, on_start_timeout,
                   (uint64_t)j->start_timeout * 1000, 0);
}

/* Fills in the job's fields that can fail; returns 0 or -1 (reported). */
static int job_init(struct hr_job *j) {
  if (gethostname(j->me, sizeof j->me) < 0)
    hc_fmt(j->me, sizeof j->me, "%s", "localhost");
  j->me[sizeof j->me - 1] = '\0';
  if (!getcwd(j->cwd, sizeof j->cwd)) {
    hr_say(NULL, "error: cannot get the current directory: %s",
           strerror(errno));
    return -1;
  }
  if (j->o->nprog > HR_MAX_ARGS || j->envc > HR_MAX_ARGS) {
    hr_say(NULL, "error: too many %s (%zu; at most %d)",
           j->envc > HR_MAX_ARGS ? "environment variables" : "arguments",
           HC_MAX(j->envc, (size_t)j->o->nprog), HR_MAX_ARGS);
    return -1;
  }
  char err[1024];
  struct hr_out_cfg cfg = {.np = j->l->np,
                           .prefix_timestamp = j->o->prefix_timestamp,
                           .dir = j->o->output_dir,
                           .out_fd = STDOUT_FILENO,
                           .err_fd = STDERR_FILENO};
  if (hr_out_new(&j->out, &cfg, err, sizeof err) < 0) {
    hr_say(NULL, "error: %s", err);
    return -1;
  }
  for (size_t i = 0; i < j->l->nhosts; i++)
    j->nd += j->l->hosts[i].nranks > 0;
  j->d = calloc(j->nd, sizeof *j->d);
  if (!j->d) {
    hr_say(NULL, "error: out of memory");
    return -1;
  }
  return 0;
}

int hr_job_run(const struct hr_opts *o, const struct hr_layout *l, char **envp,
               const char *horad, struct hr_job_outcome *out) {
  struct hr_job *j = calloc(1, sizeof *j);
  if (!j) return HR_EXIT_LAUNCHER;
  *j = (struct hr_job){
      .o = o, .l = l, .envp = envp, .horad = horad, .exit_code = -1,
      .noinit_rank = -1, .outcome = out};
  while (envp[j->envc])
    j->envc++;
  j->start_timeout = (int)hr_opts_knob_num(o, "start_timeout");
  double grace = hr_opts_knob_num(o, "kill_grace");
  j->reap_ms = (unsigned)(HC_MAX(grace, 0.0) * 1000) + REAP_EXTRA_MS;
  int rc = HR_EXIT_LAUNCHER;
  if (job_init(j) == 0 && uv_loop_init(&j->loop) == 0) {
    for (size_t i = 0, h = 0; h < l->nhosts; h++) {
      if (l->hosts[h].nranks == 0) continue;
      struct hr_daemon *d = &j->d[i++];
      *d = (struct hr_daemon){.job = j,
                              .host = (int)h,
                              .name = host_display(j, (int)h),
                              .remote = !l->hosts[h].local};
      uv_timer_init(&j->loop, &d->timer);
      d->timer.data = d;
    }
    watch_signals(j);
    if (o->verbose) print_layout(j);
    /* across hosts: several daemons, or one on another host (it connects
     * back over TCP, with the bootstrap line and heartbeats) */
    j->multi = j->nd > 1 || (j->nd == 1 && j->d[0].remote);
    if (j->multi) {
      double hb = HC_MAX(0.2, hr_opts_knob_num(o, "heartbeat_timeout"));
      /* A little later than the daemons: when a host goes quiet, its
       * peers' report (and their ranks' errors) should come first. */
      j->hb_timeout_ns = (uint64_t)(hb * 1.5e9);
      uint64_t every = HC_MAX(50, (uint64_t)(hb * 1000 / 6));
      uv_timer_init(&j->loop, &j->hb_timer);
      j->hb_timer.data = j;
      uv_timer_start(&j->hb_timer, on_hb_timer, every, every);
      uv_timer_init(&j->loop, &j->blame_timer);
      j->blame_timer.data = j;
      int here = -1; /* horarun's links are those of a host on this machine */
      for (size_t k = 0; k < j->nd && here < 0; k++)
        if (!j->d[k].remote) here = (int)k;
      j->here = here;
      if (hr_blame_init(&j->blame, (int)j->nd, here) < 0) {
        hr_say(j->out, "error: out of memory");
        set_exit(j, HR_EXIT_LAUNCHER);
      }
      j->self = hr_blame_self(&j->blame, here);
      if (hp_random(j->secret, sizeof j->secret) < 0 ||
          open_rendezvous(j) < 0) {
        hr_say(j->out, "error: cannot set up the rendezvous");
        set_exit(j, HR_EXIT_LAUNCHER);
        for (size_t k = 0; k < j->nd; k++) j->d[k].reaped = 1;
      }
    }
    for (size_t i = 0; i < j->nd && j->exit_code < 0; i++)
      start_daemon(j, &j->d[i]);
    for (size_t i = 0; i < j->nd; i++)
      if (!j->d[i].started) j->d[i].reaped = 1;
    for (size_t i = 0; i < j->nd; i++)
      check_daemon(&j->d[i]);
    uv_run(&j->loop, UV_RUN_DEFAULT);
    uv_loop_close(&j->loop);
    straggler_summary(j);
    rc = j->exit_code < 0 ? 0 : j->exit_code;
    if (out) out->interrupted = j->interrupted != 0;
  }
  free(j->d);
  free(j->late);
  free(j->slot_of);
  hr_blame_free(&j->blame);
  hr_out_free(j->out);
  memset(j->secret, 0, sizeof j->secret);
  free(j);
  return rc;
}
