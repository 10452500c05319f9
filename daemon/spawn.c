/* spawn.c -- starting the job's local ranks, forwarding their output,
 * reaping them and tearing the job down (SIGTERM, grace, SIGKILL, by
 * process group so nothing the ranks started is left behind). */
#define HC_LOG_SUB HC_SUB_SPAWN
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434 /* Linux 5.3, the same number everywhere */
#endif

#include "daemon.h"

static void fill_random_hex(char *out, size_t nhex) {
  unsigned char raw[64];
  size_t nraw = (nhex + 1) / 2;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  ssize_t got = fd >= 0 ? read(fd, raw, nraw) : -1;
  if (fd >= 0) close(fd);
  if (got != (ssize_t)nraw) /* not secret, only a guard against mix-ups */
    for (size_t i = 0; i < nraw; i++)
      raw[i] = (unsigned char)(rand() ^ (int)hc_now_ns());
  for (size_t i = 0; i < nhex; i++)
    out[i] = "0123456789abcdef"[(raw[i / 2] >> ((i & 1) * 4)) & 15];
  out[nhex] = '\0';
}

/* The value of KEY in the job's environment, or NULL. */
static const char *job_getenv(const struct hp_job *j, const char *key) {
  size_t k = strlen(key);
  for (uint32_t i = 0; i < j->envc; i++)
    if (!strncmp(j->envp[i], key, k) && j->envp[i][k] == '=')
      return j->envp[i] + k + 1;
  return NULL;
}

static int is_rank_var(const char *kv) {
  static const char *const names[] = {
      "RANK=", "SIZE=", "LOCAL_RANK=", "LOCAL_SIZE=", "CROSS_RANK=",
      "CROSS_SIZE=", "HOSTNAME=", "DAEMON_SOCKET=", "RANK_TOKEN=",
      "RANK_RESTARTS="};
  const char *rest = NULL;
  if (!strncmp(kv, "HORA_", 5)) rest = kv + 5;
  else if (!strncmp(kv, "HOROVOD_", 8)) rest = kv + 8;
  if (!rest) return 0;
  for (size_t i = 0; i < HC_ARRAY_SIZE(names); i++)
    if (!strncmp(rest, names[i], strlen(names[i]))) return 1;
  return 0;
}

/* Builds the environment of one rank: the job's, less stale rank variables,
 * plus this rank's identity under both HORA_ and HOROVOD_ names. */
static char **build_env(struct hd_job *job, struct hd_rank *r) {
  const struct hp_job *j = &job->desc;
  size_t n = j->envc + 24;
  char **env = calloc(n, sizeof *env);
  if (!env) return NULL;
  size_t k = 0;
  int have_unbuf = 0;
  for (uint32_t i = 0; i < j->envc; i++) {
    if (is_rank_var(j->envp[i])) continue;
    if (!strncmp(j->envp[i], "PYTHONUNBUFFERED=", 17)) have_unbuf = 1;
    env[k++] = strdup(j->envp[i]);
  }
  const struct {
    const char *name;
    long v;
  } ids[] = {{"RANK", r->info.rank},
             {"SIZE", j->size},
             {"LOCAL_RANK", r->info.local_rank},
             {"LOCAL_SIZE", j->local_size},
             {"CROSS_RANK", r->info.cross_rank},
             {"CROSS_SIZE", r->info.cross_size}};
  char tmp[512];
  for (size_t i = 0; i < HC_ARRAY_SIZE(ids); i++) {
    hc_fmt(tmp, sizeof tmp, "HORA_%s=%ld", ids[i].name, ids[i].v);
    env[k++] = strdup(tmp);
    hc_fmt(tmp, sizeof tmp, "HOROVOD_%s=%ld", ids[i].name, ids[i].v);
    env[k++] = strdup(tmp);
  }
  const char *host = hd_here(job);
  hc_fmt(tmp, sizeof tmp, "HORA_HOSTNAME=%s", host);
  env[k++] = strdup(tmp);
  hc_fmt(tmp, sizeof tmp, "HOROVOD_HOSTNAME=%s", host);
  env[k++] = strdup(tmp);
  hc_fmt(tmp, sizeof tmp, "HORA_DAEMON_SOCKET=%s", job->sock_path);
  env[k++] = strdup(tmp);
  hc_fmt(tmp, sizeof tmp, "HORA_RANK_TOKEN=%s", r->token);
  env[k++] = strdup(tmp);
  if (r->restarts) { /* hora.elastic: its state comes from the others */
    hc_fmt(tmp, sizeof tmp, "HORA_RANK_RESTARTS=%d", r->restarts);
    env[k++] = strdup(tmp);
  }
  if (!have_unbuf) env[k++] = strdup("PYTHONUNBUFFERED=1");
  env[k] = NULL;
  return env;
}

static void free_strv(char **v) {
  for (size_t i = 0; v && v[i]; i++) free(v[i]);
  free(v);
}

/* Resolves the program like execvp would, but with the job's PATH. Returns
 * a malloc'd path, or NULL with errno set. */
static char *resolve_program(const struct hp_job *j) {
  const char *prog = j->argv[0];
  if (!*prog) {
    errno = ENOENT;
    return NULL;
  }
  if (strchr(prog, '/')) return strdup(prog);
  const char *path = job_getenv(j, "PATH");
  if (!path) path = "/usr/local/bin:/usr/bin:/bin";
  int saw_eacces = 0;
  while (*path) {
    const char *colon = strchr(path, ':');
    size_t len = colon ? (size_t)(colon - path) : strlen(path);
    char buf[4096];
    if (len == 0)
      hc_fmt(buf, sizeof buf, "./%s", prog);
    else
      hc_fmt(buf, sizeof buf, "%.*s/%s", (int)len, path, prog);
    struct stat st;
    if (stat(buf, &st) == 0 && S_ISREG(st.st_mode)) {
      if (access(buf, X_OK) == 0) return strdup(buf);
      saw_eacces = 1;
    }
    path += len + (colon ? 1 : 0);
    if (!colon) break;
  }
  errno = saw_eacces ? EACCES : ENOENT;
  return NULL;
}

static void on_closed(uv_handle_t *h) { (void)h; }

static void on_restart_timer(uv_timer_t *t);

static void maybe_report(struct hd_rank *r) {
  if (r->reported || !r->reaped) return;
  if (r->out_open[0] || r->out_open[1]) return;
  uv_timer_stop(&r->report_timer);
  if (r->restarting == HD_RESTART_ENDING) { /* once its pipes' handles are
                                               * closed (the next turn) */
    uv_timer_start(&r->report_timer, on_restart_timer, 0, 0);
    return;
  }
  hd_send_exit(r->job, r);
}

static void on_report_timer(uv_timer_t *t) {
  struct hd_rank *r = t->data;
  /* A process the rank started still holds its output open. */
  for (int s = 0; s < 2; s++)
    if (r->out_open[s]) {
      r->out_open[s] = 0;
      uv_close((uv_handle_t *)&r->out[s], on_closed);
    }
  maybe_report(r);
}

static void on_out_alloc(uv_handle_t *h, size_t size, uv_buf_t *buf) {
  static char slab[65536];
  (void)h;
  (void)size;
  *buf = uv_buf_init(slab, sizeof slab);
}

static void on_out_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  struct hd_rank *r = s->data;
  int stream = (s == (uv_stream_t *)&r->out[0]) ? 1 : 2;
  if (n < 0) {
    r->out_open[stream - 1] = 0;
    uv_close((uv_handle_t *)s, on_closed);
    maybe_report(r);
    return;
  }
  if (n == 0) return;
  struct hp_output m = {.rank = r->slot,
                        .stream = (uint8_t)stream,
                        .data = (const unsigned char *)buf->base,
                        .len = (size_t)n};
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_output(&w, &m);
  hd_control_send(r->job, &w);
  hp_wbuf_free(&w);
}

static void spawn_failed(struct hd_rank *r, int err, const char *what) {
  char msg[600];
  hc_fmt(msg, sizeof msg, "%s: %s", what, strerror(err));
  r->spawn_msg = strdup(msg);
  r->exit_how = HP_EXIT_SPAWN;
  r->exit_code = err;
  r->reaped = 1;
  r->gone = 1;
  hd_rank_left(r, msg);
}

/* The child between fork and exec: only async-signal-safe calls. */
static void child_exec(int out, int err, int errpipe, const char *cwd,
                       const char *path, char **argv, char **env) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  sigset_t all;
  sigemptyset(&all);
  sigprocmask(SIG_SETMASK, &all, NULL);
  for (int s = 1; s < NSIG; s++) signal(s, SIG_DFL);
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0 && devnull != 0) {
    dup2(devnull, 0);
    close(devnull);
  }
  dup2(out, 1);
  dup2(err, 2);
  if (out > 2) close(out);
  if (err > 2) close(err);
  if (cwd && *cwd && chdir(cwd) < 0) {
    int e = errno;
    ssize_t w = write(errpipe, &e, sizeof e);
    (void)w;
    _exit(126);
  }
  execve(path, argv, env);
  int e = errno;
  ssize_t w = write(errpipe, &e, sizeof e);
  (void)w;
  _exit(127);
}

static int spawn_one(struct hd_job *job, struct hd_rank *r, const char *path) {
  int out[2], err[2], ep[2];
  if (pipe2(out, O_CLOEXEC) < 0) return -errno;
  if (pipe2(err, O_CLOEXEC) < 0) {
    close(out[0]), close(out[1]);
    return -errno;
  }
  if (pipe2(ep, O_CLOEXEC) < 0) {
    close(out[0]), close(out[1]), close(err[0]), close(err[1]);
    return -errno;
  }
  char **env = build_env(job, r);
  pid_t pid = env ? fork() : -1;
  if (pid == 0)
    child_exec(out[1], err[1], ep[1], job->desc.cwd, path, job->desc.argv, env);
  int fork_errno = errno;
  free_strv(env);
  close(out[1]);
  close(err[1]);
  close(ep[1]);
  if (pid < 0) {
    close(out[0]), close(err[0]), close(ep[0]);
    return -fork_errno;
  }
  setpgid(pid, pid); /* also here, so teardown never races the child */
  r->pid = pid;
  r->spawned = 1;
  int child_errno = 0;
  ssize_t got = read(ep[0], &child_errno, sizeof child_errno);
  close(ep[0]);
  int fds[2] = {out[0], err[0]};
  for (int s = 0; s < 2; s++) {
    uv_pipe_init(job->daemon->loop, &r->out[s], 0);
    uv_pipe_open(&r->out[s], fds[s]);
    r->out[s].data = r;
    r->out_open[s] = 1;
    uv_read_start((uv_stream_t *)&r->out[s], on_out_alloc, on_out_read);
  }
  if (got == (ssize_t)sizeof child_errno) {
    char msg[700];
    hc_fmt(msg, sizeof msg, "cannot execute '%s': %s", path,
           strerror(child_errno));
    r->spawn_msg = strdup(msg);
    r->exit_how = HP_EXIT_SPAWN;
    r->exit_code = child_errno;
    r->gone = 1;
  }
  return 0;
}

static void describe_exit(struct hd_rank *r, char *buf, size_t len);

/* ---- --restart-failed-ranks: a crashed rank started again -------------
 *
 * A spawned rank that ends without shutting hora down (killed by a
 * signal, an exit status not 0, or its connection closed while it lives
 * on) is, while the job has no other failure and the rank has restarts
 * left, not the job's end: what runs fails on every rank as for a lost
 * rank (their hora.elastic.run resets: hora_shutdown(), hora_init()), but
 * no host cancels the next session; horad starts the rank's program again
 * with the same identity (and HORA_RANK_RESTARTS), and its first hello
 * waits for that session as the others' rejoins do. The new session
 * starts once every rank of the job is back (session.c). Anything else
 * that goes meanwhile (another rank, a host, the program not starting)
 * ends the wait as any failure does (hd_restart_abandon). */

int hd_restart_wanted(const struct hd_rank *r) {
  const struct hd_job *job = r->job;
  long max = hk_int(&job->knobs, restart_failed_ranks);
  if (max <= 0 || r->restarts >= max || r->said_bye || !r->spawned ||
      job->joined || job->aborting || job->gone_rank != -1 ||
      r->exit_how == HP_EXIT_SPAWN)
    return 0;
  /* an exit status of 0 is an end, not a crash (it did not shut hora
   * down, but starting it again would run the program again from the
   * start) */
  return !(r->reaped && r->exit_how == HP_EXIT_CODE && r->exit_code == 0);
}

void hd_restart_begin(struct hd_rank *r, const char *why) {
  struct hd_job *job = r->job;
  long max = hk_int(&job->knobs, restart_failed_ranks);
  r->restarting = HD_RESTART_ENDING;
  r->restarts++;
  char msg[HP_MSG_MAX + 1];
  hc_fmt(msg, sizeof msg, "%s" HD_RESTART_SAYS " (restart %d of %ld)", why,
         r->restarts, max);
  hc_info("%s", msg); /* horarun says so (hd_send_restart) */
  job->gone_rank = r->info.rank;
  job->restart_gone = 1;
  hc_fmt(job->gone_msg, sizeof job->gone_msg, "%s", msg);
  hd_mesh_announce_restart(job, r->info.rank, (int)job->desc.host_index, msg);
  hd_fail_all(job);
  /* its connection closed, but the process lives on: ended, to start
   * anew (the reaper goes on from there); horarun hears that, not the
   * SIGKILL horad sent it */
  if (!r->reaped && r->pid > 0) {
    siginfo_t si;
    memset(&si, 0, sizeof si); /* (a zombie not reaped yet did not live on) */
    if (waitid(P_PID, (id_t)r->pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0 ||
        si.si_pid != r->pid) {
      free(r->spawn_msg);
      r->spawn_msg = strdup(HD_ENDED_BY_HORAD);
    }
    kill(-r->pid, SIGKILL);
  }
}

void hd_restart_gone_msg(struct hd_job *job, const char *why) {
  if (!job->restart_gone) {
    hc_fmt(job->gone_msg, sizeof job->gone_msg, "%s", why);
    return;
  }
  /* the crash stays the cause (gone_rank too), what ended its restart
   * follows */
  job->restart_ended = 1;
  char first[HP_MSG_MAX + 1];
  hc_fmt(first, sizeof first, "%s", job->gone_msg);
  char *says = strstr(first, HD_RESTART_SAYS);
  if (says) *says = '\0';
  hc_fmt(job->gone_msg, sizeof job->gone_msg, "%s; not started again: %s",
         first, why);
}

void hd_restart_abandon(struct hd_job *job, int rank, const char *why) {
  hd_restart_gone_msg(job, why);
  if (job->gone_rank == -1) job->gone_rank = rank; /* (the crash's stays) */
  job->restart_gone = 0;
  hd_local_drop_rejoins(job, why);
  job->up->session_cancel(job); /* and no rank is started again */
  hd_mesh_announce_gone(job, rank, (int)job->desc.host_index, why);
  hd_fail_all(job);
}

static void on_restart_timer(uv_timer_t *t) {
  struct hd_rank *r = t->data;
  struct hd_job *job = r->job;
  if (r->restarting != HD_RESTART_ENDING || job->aborting) {
    /* abandoned meanwhile: its end */
    r->restarting = 0;
    hd_send_exit(job, r);
    return;
  }
  hd_send_restart(job, r);
  r->reaped = r->spawned = r->connected = r->noinit = r->exit_held = 0;
  r->exit_how = r->exit_code = 0;
  r->pid = 0;
  free(r->spawn_msg);
  r->spawn_msg = NULL;
  uv_timer_stop(&r->lost_timer);
  errno = 0;
  char *path = resolve_program(&job->desc);
  int rc = path ? spawn_one(job, r, path) : -(errno ? errno : EIO);
  free(path);
  if (rc < 0 || r->exit_how == HP_EXIT_SPAWN) { /* the wait for it ends */
    r->restarting = 0;
    if (rc < 0) {
      spawn_failed(r, -rc, "cannot start the rank's program again");
      maybe_report(r);
    } else { /* exec failed: the reaper reports it */
      char msg[HP_MSG_MAX + 1];
      describe_exit(r, msg, sizeof msg);
      hd_rank_left(r, msg);
    }
    return;
  }
  r->restarting = HD_RESTART_STARTED;
  hc_info("rank %d started again (pid %d, restart %d)", r->info.rank,
          (int)r->pid, r->restarts);
}

/* ---- join mode: ranks another launcher started ------------------------- */

/* The job's join directory, $TMPDIR/hora-UID/join-KEY (TMPDIR of the job's
 * environment, as libhora's ranks compute it). Each horad writes only its
 * own ranks' files there, replacing any an earlier job of the key left:
 * the hosts of a job may share the directory (one machine, or TMPDIR on a
 * shared file system). 0, or -1 with why in err. */
static int join_dir_make(struct hd_job *job, const char *key, char *err,
                         size_t len) {
  const char *tmp = job_getenv(&job->desc, "TMPDIR");
  if (!tmp || tmp[0] != '/') tmp = "/tmp";
  if (!hc_join_key_ok(key)) {
    hc_fmt(err, len, "the join key '%.160s' is not a file name part", key);
    return -1;
  }
  char base[4096];
  hc_fmt(base, sizeof base, "%s/hora-%u", tmp, (unsigned)getuid());
  hc_fmt(job->join_dir, sizeof job->join_dir, "%s/join-%s", base, key);
  if (hc_private_dir(base, err, len) < 0 ||
      hc_private_dir(job->join_dir, err, len) < 0) {
    job->join_dir[0] = '\0';
    return -1;
  }
  return 0;
}

/* DIR/rank.R: "socket\ntoken\n", 0600, written whole (rename). */
static int join_write(struct hd_job *job, struct hd_rank *r) {
  char tmp[4400], file[4400], text[256];
  hc_fmt(tmp, sizeof tmp, "%s/.rank.%d.tmp", job->join_dir, r->info.rank);
  hc_fmt(file, sizeof file, "%s/rank.%d", job->join_dir, r->info.rank);
  int n = snprintf(text, sizeof text, "%s\n%s\n", job->sock_path, r->token);
  unlink(tmp);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                0600);
  if (fd < 0) return -errno;
  int ok = write(fd, text, (size_t)n) == n;
  int e = errno;
  if (close(fd) < 0 && ok) ok = 0, e = errno;
  if (ok && rename(tmp, file) < 0) ok = 0, e = errno;
  if (!ok) unlink(tmp);
  return ok ? 0 : -(e ? e : EIO);
}

static void join_dir_remove(struct hd_job *job) {
  if (!job->join_dir[0]) return;
  char file[4400];
  for (int i = 0; job->ranks && i < job->nlocal; i++) {
    hc_fmt(file, sizeof file, "%s/rank.%d", job->join_dir,
           job->ranks[i].info.rank);
    unlink(file);
  }
  rmdir(job->join_dir);
  job->join_dir[0] = '\0';
}

static void exit_poll_stop(struct hd_rank *r) {
  if (!r->exit_polling) return;
  r->exit_polling = 0;
  uv_poll_stop(&r->exit_poll);
  uv_close((uv_handle_t *)&r->exit_poll, on_closed);
  close(r->pidfd);
  r->pidfd = -1;
}

/* A joined rank's end: its process exited (pid >= 0), or it never came
 * (pid 0, its hello awaited too long). Its exit status is its launcher's;
 * horarun hears 0 when it shut hora down first, else 1 and why. */
static void joined_end(struct hd_rank *r, const char *why) {
  struct hd_job *job = r->job;
  exit_poll_stop(r);
  if (r->reaped) return;
  r->reaped = 1;
  r->exit_how = HP_EXIT_CODE;
  r->exit_code = r->said_bye ? 0 : 1;
  if (!r->spawn_msg)
    r->spawn_msg = strdup(r->exit_code ? why : "has ended, after shutting "
                                               "down hora");
  char msg[HP_MSG_MAX + 1];
  describe_exit(r, msg, sizeof msg);
  hc_debug("%s", msg);
  if (!r->gone || job->gone_rank < 0) hd_rank_left(r, msg);
  if (r->said_bye) /* gone for good: no new session can start */
    hd_local_drop_rejoins(job, msg);
  maybe_report(r);
}

#define JOINED_LEFT                                                            \
  "left the job without shutting down hora: it crashed or exited (its exit " \
  "status is for its launcher to report)"

static void on_exit_poll(uv_poll_t *p, int status, int events) {
  (void)status;
  (void)events;
  joined_end(p->data, JOINED_LEFT);
}

/* Without a pidfd (a kernel before 5.3): whether the process is still
 * there, every half second. */
static void on_pid_check(uv_timer_t *t) {
  struct hd_rank *r = t->data;
  if (r->reaped) {
    uv_timer_stop(t);
  } else if (kill(r->pid, 0) < 0 && errno == ESRCH) {
    uv_timer_stop(t);
    joined_end(r, JOINED_LEFT);
  }
}

void hd_join_hello(struct hd_rank *r, int pid) {
  struct hd_job *job = r->job;
  if (!job->joined || r->exit_polling || pid <= 0) return;
  r->pid = pid; /* not a child: never signalled as a group (spawned == 0) */
  int fd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (fd < 0) { /* gone already (ESRCH: at once), or no pidfds: polled */
    if (errno != ESRCH)
      hc_debug("rank %d: no pidfd for process %d (%s): polling it", r->info.rank,
               pid, strerror(errno));
    uv_timer_start(&r->report_timer, on_pid_check, 0, 500);
    return;
  }
  r->pidfd = fd;
  uv_poll_init(job->daemon->loop, &r->exit_poll, fd);
  r->exit_poll.data = r;
  uv_poll_start(&r->exit_poll, UV_READABLE, on_exit_poll);
  r->exit_polling = 1;
}

/* Ranks that never said hello: their launcher did not start them, or they
 * ended before hora_init. */
static void join_missing(struct hd_job *job, const char *why) {
  for (int i = 0; i < job->nlocal; i++) {
    struct hd_rank *r = &job->ranks[i];
    if (!r->connected && !r->pid && !r->reaped) joined_end(r, why);
  }
}

/* How long joined ranks have for their first hello: the start timeout,
 * 30 s when it is 0 (never forever: the ranks are not ours to see fail;
 * libhora's ranks wait as long for their files). */
static long join_timeout_s(const struct hd_job *job) {
  long t = hk_int(&job->knobs, start_timeout);
  return t > 0 ? t : 30;
}

static void on_join_timer(uv_timer_t *t) {
  struct hd_job *job = t->data;
  char why[300];
  hc_fmt(why, sizeof why, "did not join the job within %ld s of its start "
         "(HORA_START_TIMEOUT): its launcher did not start it, or it ended "
         "before hora_init", join_timeout_s(job));
  join_missing(job, why);
}

/* Join mode: the way in of every local rank, in files for them to find. */
static void join_all(struct hd_job *job, const char *key) {
  char err[4400];
  int rc = job->sock_path[0] ? join_dir_make(job, key, err, sizeof err) : -1;
  if (!job->sock_path[0])
    hc_fmt(err, sizeof err, "horad could not create the job's socket");
  for (int i = 0; rc == 0 && i < job->nlocal; i++) {
    int w = join_write(job, &job->ranks[i]);
    if (w < 0) {
      hc_fmt(err, sizeof err, "cannot write %s/rank.%d: %s", job->join_dir,
             job->ranks[i].info.rank, strerror(-w));
      rc = -1;
    }
  }
  if (rc < 0) {
    hc_error("%s", err);
    for (int i = 0; i < job->nlocal; i++) {
      struct hd_rank *r = &job->ranks[i];
      r->spawn_msg = strdup(err);
      r->exit_how = HP_EXIT_SPAWN;
      r->exit_code = EIO;
      r->reaped = r->gone = 1;
      hd_send_exit(job, r);
    }
    return;
  }
  hc_debug("join mode: the ranks' way in is in %s", job->join_dir);
  uv_timer_start(&job->join_timer, on_join_timer,
                 (uint64_t)join_timeout_s(job) * 1000, 0);
}

int hd_spawn_all(struct hd_job *job) {
  job->ranks = calloc((size_t)job->nlocal, sizeof *job->ranks);
  if (!job->ranks) return HORA_ENOMEM;
  uv_timer_init(job->daemon->loop, &job->term_timer);
  uv_timer_init(job->daemon->loop, &job->kill_timer);
  uv_timer_init(job->daemon->loop, &job->join_timer);
  uv_timer_init(job->daemon->loop, &job->reform_timer);
  job->term_timer.data = job->kill_timer.data = job->join_timer.data = job;
  job->reform_timer.data = job;
  const char *key = job_getenv(&job->desc, "HORA_JOIN_KEY");
  job->joined = key != NULL;
  for (int i = 0; i < job->nlocal; i++) {
    struct hd_rank *r = &job->ranks[i];
    r->job = job;
    r->idx = i;
    r->info = job->desc.ranks[i];
    r->slot = r->info.rank;
    r->memfd = -1;
    r->pidfd = -1;
    fill_random_hex(r->token, HP_TOKEN_LEN);
    uv_timer_init(job->daemon->loop, &r->report_timer);
    r->report_timer.data = r;
    uv_timer_init(job->daemon->loop, &r->lost_timer);
    r->lost_timer.data = r;
  }
  if (job->joined) {
    join_all(job, key);
    return 0;
  }
  errno = 0;
  char *path = job->sock_path[0] ? resolve_program(&job->desc) : NULL;
  int perr = errno ? errno : EIO;
  for (int i = 0; i < job->nlocal; i++) {
    struct hd_rank *r = &job->ranks[i];
    char what[600];
    if (!job->sock_path[0]) {
      spawn_failed(r, perr, "horad could not create the job's socket");
    } else if (!path) {
      hc_fmt(what, sizeof what, "cannot find program '%s'%s", job->desc.argv[0],
             strchr(job->desc.argv[0], '/') ? "" : " in PATH");
      spawn_failed(r, perr, what);
    } else {
      int rc = spawn_one(job, r, path);
      if (rc < 0) {
        hc_fmt(what, sizeof what, "cannot start '%s'", path);
        spawn_failed(r, -rc, what);
      }
    }
  }
  free(path);
  for (int i = 0; i < job->nlocal; i++) {
    struct hd_rank *r = &job->ranks[i];
    if (r->exit_how == HP_EXIT_SPAWN && !r->pid) {
      hd_send_exit(job, r);
    } else if (r->exit_how == HP_EXIT_SPAWN) {
      hd_rank_left(r, r->spawn_msg);
    }
  }
  return 0;
}

static void describe_exit(struct hd_rank *r, char *buf, size_t len) {
  const char *host = hd_here(r->job);
  if (r->exit_how == HP_EXIT_SIGNAL && r->spawn_msg)
    hc_fmt(buf, len, "rank %d on host %s %s", r->info.rank, host,
           r->spawn_msg); /* horad ended it (HD_ENDED_BY_HORAD) */
  else if (r->exit_how == HP_EXIT_SIGNAL)
    hc_fmt(buf, len, "rank %d on host %s was killed by signal %s",
           r->info.rank, host, hc_signal_name(r->exit_code));
  else if (r->exit_how == HP_EXIT_SPAWN)
    hc_fmt(buf, len, "rank %d on host %s could not be started: %s",
           r->info.rank, host, r->spawn_msg ? r->spawn_msg : "?");
  else if (r->spawn_msg)
    hc_fmt(buf, len, "rank %d on host %s %s", r->info.rank, host,
           r->spawn_msg);
  else
    hc_fmt(buf, len, "rank %d on host %s exited with code %d%s", r->info.rank,
           host, r->exit_code,
           r->noinit ? " without initialising hora (it never called "
                       "hora_init)" : "");
}

int hd_spawn_reaped(struct hd_job *job, pid_t pid, int status) {
  for (int i = 0; job->ranks && i < job->nlocal; i++) {
    struct hd_rank *r = &job->ranks[i];
    if (r->pid != pid || r->reaped) continue;
    r->reaped = 1;
    if (r->exit_how != HP_EXIT_SPAWN) {
      if (WIFSIGNALED(status)) {
        r->exit_how = HP_EXIT_SIGNAL;
        r->exit_code = WTERMSIG(status);
      } else {
        r->exit_how = HP_EXIT_CODE;
        r->exit_code = WEXITSTATUS(status);
        /* the other ranks cannot go on without it: it is the cause */
        r->noinit = r->exit_code == 0 && !r->connected && !job->aborting;
      }
    }
    /* Whatever the rank started in its group goes with it. */
    kill(-pid, SIGTERM);
    char msg[HP_MSG_MAX + 1];
    describe_exit(r, msg, sizeof msg);
    hc_debug("%s", msg);
    if (r->restarting == HD_RESTART_ENDING) {
      /* its connection's end started the restart (hd_restart_begin) */
    } else if (r->restarting == HD_RESTART_STARTED) {
      /* started again, it ended before the new session: gone for good */
      r->restarting = 0;
      hd_restart_abandon(job, r->info.rank, msg);
    } else if (!r->gone || job->gone_rank < 0) {
      hd_rank_left(r, msg);
    }
    if (r->said_bye) hd_local_drop_rejoins(job, msg);
    /* Failing what was pending may have taken a while (a million
     * operations): the output's grace counts from now, not from when
     * this loop iteration began, or it would end before the pipes were
     * read and the rank's last words would be lost. */
    uv_update_time(job->daemon->loop);
    uv_timer_start(&r->report_timer, on_report_timer, 200, 0);
    maybe_report(r);
    return 1;
  }
  return 0;
}

static void signal_all(struct hd_job *job, int sig) {
  for (int i = 0; i < job->nlocal; i++) {
    struct hd_rank *r = &job->ranks[i];
    if (r->pid > 0 && r->spawned && !r->reaped) kill(-r->pid, sig);
  }
}

static void on_kill_timer(uv_timer_t *t) {
  struct hd_job *job = t->data;
  job->kill_sent = 1;
  hc_info("grace period over; sending SIGKILL");
  signal_all(job, SIGKILL);
  /* joined ranks are their launcher's to end: those that never came are
   * not waited for any more */
  if (job->joined) join_missing(job, "never joined the job");
}

static void on_term_timer(uv_timer_t *t) {
  struct hd_job *job = t->data;
  job->term_sent = 1;
  signal_all(job, SIGTERM);
  signal_all(job, SIGCONT); /* a stopped rank too gets it now */
  double grace = hk_double(&job->knobs, kill_grace);
  if (grace < 0) grace = 0;
  uv_timer_start(&job->kill_timer, on_kill_timer, (uint64_t)(grace * 1000), 0);
}

void hd_spawn_teardown(struct hd_job *job, const char *reason,
                       int delay_ms) {
  if (!job->have_job || !job->ranks) return;
  if (job->aborting) return;
  job->aborting = 1;
  hc_info("stopping the job: %s", reason);
  if (job->gone_rank == -1) {
    job->gone_rank = HD_GONE_SHUTDOWN;
    hc_fmt(job->gone_msg, sizeof job->gone_msg, "the job is stopping: %s",
           reason);
  }
  hd_fail_all(job);
  for (int i = 0; i < job->nlocal; i++)
    if (job->ranks[i].hdr)
      atomic_store(&job->ranks[i].hdr->closed, 1);
  hd_flush_wakeups(job);
  uv_timer_start(&job->term_timer, on_term_timer, (uint64_t)delay_ms, 0);
  hd_maybe_done(job);
}

void hd_spawn_close(struct hd_job *job) {
  uv_handle_t *hs[] = {(uv_handle_t *)&job->term_timer,
                       (uv_handle_t *)&job->kill_timer,
                       (uv_handle_t *)&job->join_timer,
                       (uv_handle_t *)&job->reform_timer};
  for (size_t i = 0; i < HC_ARRAY_SIZE(hs); i++)
    if (hs[i]->loop && !uv_is_closing(hs[i])) uv_close(hs[i], on_closed);
  join_dir_remove(job);
  for (int i = 0; job->ranks && i < job->nlocal; i++) {
    struct hd_rank *r = &job->ranks[i];
    exit_poll_stop(r);
    if (r->pid > 0 && r->spawned && !r->reaped) kill(-r->pid, SIGKILL);
    for (int s = 0; s < 2; s++)
      if (r->out_open[s]) {
        r->out_open[s] = 0;
        uv_close((uv_handle_t *)&r->out[s], on_closed);
      }
    uv_handle_t *ts[] = {(uv_handle_t *)&r->report_timer,
                         (uv_handle_t *)&r->lost_timer};
    for (size_t k = 0; k < 2; k++)
      if (ts[k]->loop && !uv_is_closing(ts[k])) uv_close(ts[k], on_closed);
  }
}
