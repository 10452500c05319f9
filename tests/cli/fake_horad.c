/* fake_horad.c -- a minimal horad for horarun's tests: speaks the control
 * protocol (READY, JOB, OUTPUT, EXIT, DONE, ABORT) and spawns the ranks with
 * pipes, with no collectives. Built by tests/cli/lib.sh with cc.
 *
 * FAKE_HORAD_MODE selects misbehaviour:
 *   (unset)   behave
 *   noready   never say READY, never read (for --start-timeout)
 *   crash     exit 3 right after READY, without DONE
 *   garbage   answer with bytes that are not a frame
 * FAKE_HORAD_CHUNK=N forwards output in OUTPUT frames of at most N bytes
 * (1: byte by byte, to test horarun's reassembly). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "msg.h"

struct rank {
  struct hp_job_rank info;
  pid_t pid;
  int fd[2]; /* stdout, stderr pipes; -1 once at EOF */
  int reaped, status, spawn_err, reported;
};

static int ctl = -1, chld_pipe[2];
static struct rank *ranks;
static unsigned nranks, nreported;
static size_t chunk = 65536;
static double deadline; /* SIGKILL time during teardown; 0: none */

static double now(void) {
  return hc_now_ns() / 1e9;
}

static void send_wbuf(struct hp_wbuf *w) {
  size_t off = 0;
  while (ctl >= 0 && off < w->len) {
    ssize_t n = write(ctl, w->data + off, w->len - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ctl = -1;
      break;
    }
    off += (size_t)n;
  }
  hp_wbuf_reset(w);
}

static void on_sigchld(int sig) {
  (void)sig;
  int e = errno;
  ssize_t n = write(chld_pipe[1], "c", 1);
  (void)n;
  errno = e;
}

static void set_envs(char **env, size_t *n, const struct hp_job *j,
                     const struct hp_job_rank *k) {
  static const char *const pre[] = {"HORA_", "HOROVOD_"};
  for (int p = 0; p < 2; p++) {
    char buf[512];
#define E(name, fmt, val)                                                      \
  snprintf(buf, sizeof buf, "%s" name "=" fmt, pre[p], val);                   \
  env[(*n)++] = strdup(buf);
    E("RANK", "%d", k->rank)
    E("SIZE", "%d", j->size)
    E("LOCAL_RANK", "%d", k->local_rank)
    E("LOCAL_SIZE", "%d", j->local_size)
    E("CROSS_RANK", "%d", k->cross_rank)
    E("CROSS_SIZE", "%d", k->cross_size)
    E("HOSTNAME", "%s", j->hostname)
#undef E
  }
  env[*n] = NULL;
}

static void spawn_rank(const struct hp_job *j, struct rank *r) {
  int out[2], err[2], ep[2];
  if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC) || pipe2(ep, O_CLOEXEC))
    exit(70);
  char **env = calloc(j->envc + 20, sizeof *env);
  size_t n = 0;
  for (; n < j->envc; n++)
    env[n] = j->envp[n];
  set_envs(env, &n, j, &r->info);
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    signal(SIGCHLD, SIG_DFL);
    if (chdir(j->cwd) == 0) execvpe(j->argv[0], j->argv, env);
    int e = errno;
    ssize_t w = write(ep[1], &e, sizeof e);
    (void)w;
    _exit(127);
  }
  setpgid(pid, pid);
  for (size_t i = j->envc; i < n; i++)
    free(env[i]);
  free(env);
  close(out[1]);
  close(err[1]);
  close(ep[1]);
  int e = 0;
  ssize_t got = read(ep[0], &e, sizeof e);
  close(ep[0]);
  r->pid = pid;
  r->fd[0] = out[0];
  r->fd[1] = err[0];
  if (got == (ssize_t)sizeof e) r->spawn_err = e;
}

static void on_job(const unsigned char *p, size_t len) {
  struct hp_job j;
  if (hp_dec_job(p, len, &j) < 0) exit(71);
  nranks = j.nlocal;
  ranks = calloc(nranks, sizeof *ranks);
  for (unsigned i = 0; i < nranks; i++) {
    ranks[i].info = j.ranks[i];
    spawn_rank(&j, &ranks[i]);
  }
  hp_job_free(&j);
}

static void teardown(void) {
  if (deadline > 0) return;
  deadline = now() + hc_param_double(kill_grace);
  for (unsigned i = 0; i < nranks; i++)
    if (!ranks[i].reaped) kill(-ranks[i].pid, SIGTERM);
}

static void report(struct rank *r, struct hp_wbuf *w) {
  if (r->reported || !r->reaped || r->fd[0] >= 0 || r->fd[1] >= 0) return;
  r->reported = 1;
  nreported++;
  char msg[512] = "";
  struct hp_exit m = {.rank = r->info.rank, .msg = msg};
  if (r->spawn_err) {
    m.how = HP_EXIT_SPAWN;
    m.code = r->spawn_err;
    snprintf(msg, sizeof msg, "cannot run the program: %s",
             strerror(r->spawn_err));
  } else if (WIFSIGNALED(r->status)) {
    m.how = HP_EXIT_SIGNAL;
    m.code = WTERMSIG(r->status);
  } else {
    m.how = HP_EXIT_CODE;
    m.code = WEXITSTATUS(r->status);
  }
  hp_enc_exit(w, &m);
  send_wbuf(w);
}

static void forward(struct rank *r, int s, struct hp_wbuf *w) {
  unsigned char buf[65536];
  ssize_t n = read(r->fd[s], buf, sizeof buf);
  if (n < 0 && errno == EINTR) return;
  if (n <= 0) {
    close(r->fd[s]);
    r->fd[s] = -1;
    return;
  }
  for (size_t off = 0; off < (size_t)n; off += chunk) {
    struct hp_output m = {.rank = r->info.rank,
                          .stream = (uint8_t)(s + 1),
                          .data = buf + off,
                          .len = HC_MIN(chunk, (size_t)n - off)};
    hp_enc_output(w, &m);
    send_wbuf(w);
  }
}

static void reap(void) {
  int st;
  pid_t pid;
  while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
    for (unsigned i = 0; i < nranks; i++)
      if (ranks[i].pid == pid) ranks[i].reaped = 1, ranks[i].status = st;
}

/* Reads control frames; returns 0, or -1 when the socket closed. */
static int read_ctl(struct hp_decoder *dec) {
  unsigned char buf[65536];
  ssize_t n = read(ctl, buf, sizeof buf);
  if (n < 0 && errno == EINTR) return 0;
  if (n <= 0) return -1;
  hp_decoder_feed(dec, buf, (size_t)n);
  struct hp_frame_hdr h;
  const unsigned char *p;
  char why[256];
  int rc;
  while ((rc = hp_decoder_next(dec, &h, &p, why, sizeof why)) == 1) {
    if (h.type == HP_MSG_JOB && !ranks)
      on_job(p, h.len);
    else if (h.type == HP_MSG_ABORT)
      teardown();
  }
  return rc < 0 ? -1 : 0;
}

static void loop(struct hp_wbuf *w, struct hp_decoder *dec) {
  while (!ranks || nreported < nranks) {
    struct pollfd pfd[2 + 2 * 1024];
    int np = 0;
    pfd[np++] = (struct pollfd){.fd = chld_pipe[0], .events = POLLIN};
    pfd[np++] = (struct pollfd){.fd = ctl, .events = POLLIN};
    for (unsigned i = 0; i < nranks && i < 1024; i++)
      for (int s = 0; s < 2; s++)
        pfd[np++] = (struct pollfd){.fd = ranks[i].fd[s], .events = POLLIN};
    int timeout = -1;
    if (deadline > 0) timeout = (int)HC_MAX(0.0, (deadline - now()) * 1000);
    poll(pfd, (nfds_t)np, timeout);
    if (deadline > 0 && now() >= deadline) {
      for (unsigned i = 0; i < nranks; i++)
        if (!ranks[i].reaped) kill(-ranks[i].pid, SIGKILL);
      deadline = now() + 3600;
    }
    char c;
    if (pfd[0].revents && read(chld_pipe[0], &c, 1) > 0) reap();
    if (ctl >= 0 && pfd[1].revents && read_ctl(dec) < 0) {
      ctl = -1;
      if (!ranks) exit(0);
      teardown();
    }
    for (int k = 2; k < np; k++) {
      unsigned i = (unsigned)(k - 2) / 2;
      if (pfd[k].revents) forward(&ranks[i], (k - 2) % 2, w);
    }
    reap();
    for (unsigned i = 0; i < nranks; i++)
      report(&ranks[i], w);
  }
}

int main(int argc, char **argv) {
  if (argc != 3 || strcmp(argv[1], "--control-fd")) return 64;
  ctl = atoi(argv[2]);
  const char *mode = getenv("FAKE_HORAD_MODE");
  mode = mode ? mode : "";
  const char *ch = getenv("FAKE_HORAD_CHUNK");
  if (ch) chunk = (size_t)atol(ch);
  if (chunk == 0) chunk = 1;
  if (!strcmp(mode, "noready")) {
    for (;;)
      pause();
  }
  if (pipe2(chld_pipe, O_CLOEXEC | O_NONBLOCK)) return 70;
  signal(SIGCHLD, on_sigchld);
  signal(SIGPIPE, SIG_IGN);
  fcntl(ctl, F_SETFD, FD_CLOEXEC);
  struct hp_wbuf w;
  struct hp_decoder dec;
  hp_wbuf_init(&w);
  hp_decoder_init(&dec);
  if (!strcmp(mode, "garbage")) {
    char buf[4096];
    ssize_t n = write(ctl, "GARBAGE, NOT A FRAME", 20);
    while (n > 0 || (n < 0 && errno == EINTR))
      n = read(ctl, buf, sizeof buf);
    return 0; /* horarun hung up, as it should */
  }
  hp_enc_text(&w, HP_MSG_READY, "fake-horad");
  send_wbuf(&w);
  if (!strcmp(mode, "crash")) return 3;
  loop(&w, &dec);
  hp_enc_text(&w, HP_MSG_DONE, "");
  send_wbuf(&w);
  return 0;
}
