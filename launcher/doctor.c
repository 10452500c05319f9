/* doctor.c -- horarun --doctor: a pre-flight check of a job's hosts.
 *
 * Each host of the layout is reached as a job would reach it (ssh with the
 * job's options, or directly on this machine) and runs `horad --probe`
 * (daemon/probe.c), which reports what a job depends on and then tests
 * the TCP path to every other host's probe, on the addresses a job's
 * daemons would use, one direction at a time. What they say is judged
 * here and printed as one table, a fix under every problem. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "doctor.h"
#include "job.h"
#include "remote.h"
#include "shm.h"
#include "spawn.h"

#define TAIL 4               /* lines of what else a probe said, kept */
#define TEST_MS 20000        /* one link test, at most */
#define QUIT_MS 5000         /* a probe has this long to end */
#define RTT_EXPECT_NS 1000000 /* one network: a round trip under 1 ms */

enum { D_OK, D_WARN, D_FAIL };

struct probe {
  const struct hr_host *h;
  pid_t pid;
  int in, out; /* its stdin (ours to write), its stdout+stderr */
  char buf[4096];
  size_t have;
  int ready, ended, reaped, status;
  int late; /* not ready within the start timeout: killed */
  int remote;
  /* what it said */
  char version[128], hostname[128], ifaces[512], iface[64], iface_addr[128];
  char iface_missing[256], launcher[128], addr[128], nccl[32], gpus[512];
  char shm_err[256], listen_err[256];
  long long speed, shm_total, shm_free, memlock, mem_avail, mem_cg;
  int ngpu, rdma, port, has_shm, has_mem, has_memlock;
  char tail[TAIL][512];
  int ntail;
  char result[512]; /* the last "result" line */
};

struct doc {
  const struct hr_opts *o;
  const struct hr_layout *l;
  struct probe *p;
  size_t np;
  char token[33];
  /* the table */
  char **rows; /* "host\tcheck\tresult\tdetail\tfix" */
  size_t nrows;
  int fails, warns;
  double start_timeout; /* seconds */
};

/* ---- the table ---------------------------------------------------------- */

static void row(struct doc *d, const char *host, const char *check, int r,
                const char *fix, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static void row(struct doc *d, const char *host, const char *check, int r,
                const char *fix, const char *fmt, ...) {
  char detail[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  static const char *const word[] = {"ok", "WARN", "FAIL"};
  size_t len = strlen(host) + strlen(check) + strlen(detail) +
               (fix ? strlen(fix) : 0) + 16;
  char *s = malloc(len), **g = realloc(d->rows, (d->nrows + 1) * sizeof *g);
  if (g) d->rows = g;
  if (!s || !g) {
    free(s);
    return;
  }
  hc_fmt(s, len, "%s\t%s\t%s\t%s\t%s", host, check, word[r], detail,
         fix ? fix : "");
  d->rows[d->nrows++] = s;
  d->fails += r == D_FAIL;
  d->warns += r == D_WARN;
}

/* Prints `text` from column `col`, wrapped at 79 columns on a terminal
 * (elsewhere a row stays one line, for grep). */
static void print_from(const char *text, int col, int start) {
  if (!isatty(STDOUT_FILENO)) {
    printf("%s\n", text);
    return;
  }
  int at = start;
  while (*text) {
    size_t w = strcspn(text, " ");
    if (at > col && at + 1 + (int)w > 79) {
      printf("\n%*s", col, "");
      at = col;
    } else if (at > col) {
      putchar(' ');
      at++;
    }
    at += printf("%.*s", (int)w, text);
    text += w;
    while (*text == ' ') text++;
  }
  putchar('\n');
}

static void print_table(const struct doc *d) {
  int wh = 4, wc = 5;
  for (size_t i = 0; i < d->nrows; i++) {
    int h = (int)strcspn(d->rows[i], "\t");
    int c = (int)strcspn(d->rows[i] + h + 1, "\t");
    wh = HC_MAX(wh, h);
    wc = HC_MAX(wc, c);
  }
  int col = wh + 2 + wc + 2 + 8;
  printf("%-*s  %-*s  %-6s  DETAIL\n", wh, "HOST", wc, "CHECK", "RESULT");
  for (size_t i = 0; i < d->nrows; i++) {
    char *f[5], *s = d->rows[i];
    for (int k = 0; k < 5; k++) {
      f[k] = s;
      s += strcspn(s, "\t");
      if (*s) *s++ = '\0';
    }
    int at = printf("%-*s  %-*s  %-6s  ", wh, f[0], wc, f[1], f[2]);
    print_from(f[3], col, at);
    if (*f[4]) {
      char fix[1100];
      hc_fmt(fix, sizeof fix, "fix: %s", f[4]);
      printf("%*s", col, "");
      print_from(fix, col, col);
    }
  }
}

/* ---- sizes -------------------------------------------------------------- */

static void human(char *buf, size_t len, double v) {
  static const char *const u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (v >= 1024 && i < 4) {
    v /= 1024;
    i++;
  }
  hc_fmt(buf, len, i ? "%.1f %s" : "%.0f %s", v, u[i]);
}

/* A knob's value as the job would have it: its flag or config value, the
 * config file's env, else this environment or the default. */
static long long knob_size(const struct hr_opts *o, const char *name) {
  const struct hc_param *p = hc_param_find(name);
  const char *v = p ? o->knob[p - hc_params] : NULL;
  size_t n = p ? strlen(p->env) : 0;
  for (size_t i = 0; p && !v && i < o->nenv; i++)
    if (!strncmp(o->env[i], p->env, n) && o->env[i][n] == '=' &&
        o->env[i][n + 1])
      v = o->env[i] + n + 1;
  if (!v) v = hc_param_str_named(name);
  return hc_parse_size(v);
}

/* ---- the probes --------------------------------------------------------- */

static const char *label(const struct probe *p) { return p->h->name; }

static void keep_tail(struct probe *p, const char *line) {
  if (!*line) return;
  if (p->ntail == TAIL) {
    memmove(p->tail[0], p->tail[1], sizeof p->tail[0] * (TAIL - 1));
    p->ntail--;
  }
  hc_fmt(p->tail[p->ntail++], sizeof p->tail[0], "%s", line);
}

static void tail_text(const struct probe *p, char *buf, size_t len) {
  buf[0] = '\0';
  for (int i = 0; i < p->ntail; i++) {
    size_t n = strlen(buf);
    hc_fmt(buf + n, len - n, "%s%s", i ? " / " : "", p->tail[i]);
  }
}

static long long ll(const char *s) { return strtoll(s, NULL, 10); }

/* One line of a probe: a fact, or something else (ssh's or a shell's
 * words, a horad error), kept for the table. */
static void take(struct probe *p, char *line) {
  char *v = strchr(line, ' ');
  const char *key = line;
  if (v) *v++ = '\0';
  const char *val = v ? v : "";
#define IS(k) (!strcmp(key, k))
#define PUT(f) hc_fmt(p->f, sizeof p->f, "%s", val)
  if (IS("probe")) {
  } else if (IS("version")) {
    PUT(version);
  } else if (IS("hostname")) {
    PUT(hostname);
  } else if (IS("ifaces")) {
    PUT(ifaces);
  } else if (IS("iface")) {
    sscanf(val, "%63s %127s", p->iface, p->iface_addr);
  } else if (IS("iface-missing")) {
    PUT(iface_missing);
  } else if (IS("launcher")) {
    PUT(launcher);
  } else if (IS("addr")) {
    PUT(addr);
  } else if (IS("speed")) {
    p->speed = ll(val);
  } else if (IS("shm")) {
    p->has_shm = sscanf(val, "%lld %lld", &p->shm_total, &p->shm_free) == 2;
  } else if (IS("shm-missing")) {
    PUT(shm_err);
  } else if (IS("memlock")) {
    p->memlock = ll(val);
    p->has_memlock = 1;
  } else if (IS("mem")) {
    p->has_mem = sscanf(val, "%lld %lld", &p->mem_avail, &p->mem_cg) == 2;
  } else if (IS("rdma")) {
    p->rdma = (int)ll(val);
  } else if (IS("gpu")) {
    p->ngpu = (int)ll(val);
    const char *m = strchr(val, ' ');
    hc_fmt(p->gpus, sizeof p->gpus, "%s", m ? m + 1 : "");
  } else if (IS("nccl")) {
    PUT(nccl);
  } else if (IS("listen")) {
    p->port = (int)ll(val);
  } else if (IS("listen-failed")) {
    PUT(listen_err);
  } else if (IS("ready")) {
    p->ready = 1;
  } else if (IS("result")) {
    PUT(result);
  } else {
    if (v) v[-1] = ' ';
    keep_tail(p, line);
  }
#undef IS
#undef PUT
}

/* Reads what probe p has; 0, or -1 at its end (out closed). */
static int drain(struct probe *p) {
  ssize_t r = read(p->out, p->buf + p->have, sizeof p->buf - 1 - p->have);
  if (r < 0 && (errno == EINTR || errno == EAGAIN)) return 0;
  if (r <= 0) {
    if (p->have) { /* a last line without its newline */
      p->buf[p->have] = '\0';
      take(p, p->buf);
      p->have = 0;
    }
    close(p->out);
    p->out = -1;
    p->ended = 1;
    return -1;
  }
  p->have += (size_t)r;
  char *nl;
  while ((nl = memchr(p->buf, '\n', p->have))) {
    *nl = '\0';
    take(p, p->buf);
    size_t k = (size_t)(nl - p->buf) + 1;
    memmove(p->buf, nl + 1, p->have - k);
    p->have -= k;
  }
  if (p->have == sizeof p->buf - 1) p->have = 0; /* no line is that long */
  return 0;
}

static int start_probe(struct doc *d, struct probe *p, const char *horad) {
  const struct hr_opts *o = d->o;
  char **argv;
  p->in = p->out = -1;
  p->speed = -1;
  if (p->h->local) {
    char *iface = hr_iface_arg(o, p->h);
    argv = calloc(5, sizeof *argv);
    if (argv) {
      argv[0] = strdup(horad);
      argv[1] = strdup("--probe");
      if (iface) {
        argv[2] = strdup("--iface");
        argv[3] = iface;
        iface = NULL;
      }
    }
    free(iface);
    if (argv && (!argv[0] || !argv[1] || (argv[2] && !argv[3]))) {
      hr_strv_free(argv);
      argv = NULL;
    }
  } else {
    p->remote = 1;
    argv = hr_ssh_argv_mode(o, p->h, o->horad_path ? o->horad_path : horad,
                            "--probe");
  }
  if (!argv) return -1;
  if (o->verbose) {
    char cmd[4096];
    size_t n = 0;
    for (char **a = argv; *a && n < sizeof cmd - 1; a++)
      n += (size_t)snprintf(cmd + n, sizeof cmd - n, "%s%s", n ? " " : "", *a);
    fprintf(stderr, "horarun: probing host %s: %s\n", p->h->name, cmd);
  }
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) < 0) {
    hr_strv_free(argv);
    return -1;
  }
  if (pipe2(out, O_CLOEXEC) < 0) {
    close(in[0]);
    close(in[1]);
    hr_strv_free(argv);
    return -1;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    setsid();
    dup2(in[0], STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    dup2(out[1], STDERR_FILENO);
    hr_child_signals();
    execvp(argv[0], argv);
    dprintf(STDOUT_FILENO, "cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  hr_strv_free(argv);
  if (pid < 0) {
    close(in[1]);
    close(out[0]);
    return -1;
  }
  p->pid = pid;
  p->in = in[1];
  p->out = out[0];
  fcntl(p->out, F_SETFL, O_NONBLOCK);
  char line[64];
  hc_fmt(line, sizeof line, "HORA-DOCTOR 1 %s\n", d->token);
  if (write(p->in, line, strlen(line)) < 0) { /* it ended: seen later */
  }
  return 0;
}

/* Waits until every probe is ready or has ended, or `ms` pass. */
static void wait_ready(struct doc *d, int ms) {
  if (!d->np) return;
  uint64_t until = hc_now_ns() + (uint64_t)ms * 1000000u;
  for (;;) {
    struct pollfd pf[d->np];
    size_t idx[d->np], n = 0;
    for (size_t i = 0; i < d->np; i++) {
      if (d->p[i].out < 0 || d->p[i].ready) continue;
      pf[n] = (struct pollfd){.fd = d->p[i].out, .events = POLLIN};
      idx[n++] = i;
    }
    uint64_t now = hc_now_ns();
    if (!n || now >= until) return;
    int r = poll(pf, n, (int)((until - now) / 1000000u) + 1);
    if (r < 0 && errno != EINTR) return;
    for (size_t k = 0; r > 0 && k < n; k++)
      if (pf[k].revents) drain(&d->p[idx[k]]);
  }
}

/* Runs one round of link tests of `mode` (rtt, bw): each probe i with
 * to[i] >= 0 tests the path to probe to[i], all at once (each probe sends
 * to one and serves one); fills each tester's result, or a failure. */
static void link_round(struct doc *d, const int *to, const char *mode) {
  size_t n = 0;
  for (size_t i = 0; i < d->np; i++) {
    struct probe *a = &d->p[i];
    a->result[0] = '\0';
    if (to[i] < 0) continue;
    const struct probe *b = &d->p[to[i]];
    char cmd[256];
    hc_fmt(cmd, sizeof cmd, "test %s %d %s\n", b->addr, b->port, mode);
    if (write(a->in, cmd, strlen(cmd)) != (ssize_t)strlen(cmd))
      hc_fmt(a->result, sizeof a->result, "fail the probe on %s is gone",
             label(a));
    else
      n++;
  }
  uint64_t until = hc_now_ns() + TEST_MS * 1000000ull;
  while (n) {
    struct pollfd pf[d->np];
    size_t idx[d->np], k = 0;
    for (size_t i = 0; i < d->np; i++) {
      if (to[i] < 0 || d->p[i].result[0] || d->p[i].out < 0) continue;
      pf[k] = (struct pollfd){.fd = d->p[i].out, .events = POLLIN};
      idx[k++] = i;
    }
    uint64_t now = hc_now_ns();
    if (!k || now >= until) break;
    int r = poll(pf, k, (int)((until - now) / 1000000u) + 1);
    if (r < 0 && errno != EINTR) break;
    for (size_t j = 0; r > 0 && j < k; j++)
      if (pf[j].revents) drain(&d->p[idx[j]]);
  }
  for (size_t i = 0; i < d->np; i++)
    if (to[i] >= 0 && !d->p[i].result[0])
      hc_fmt(d->p[i].result, sizeof d->p[i].result, "fail no answer from "
             "the probe on %s within %d s", label(&d->p[i]), TEST_MS / 1000);
}

static void reap(struct probe *p, int ms) {
  uint64_t until = hc_now_ns() + (uint64_t)ms * 1000000u;
  while (!p->reaped && p->pid > 0) {
    pid_t r = waitpid(p->pid, &p->status, WNOHANG);
    if (r == p->pid || (r < 0 && errno != EINTR)) {
      p->reaped = 1;
      break;
    }
    if (hc_now_ns() >= until) {
      kill(-p->pid, SIGKILL);
      kill(p->pid, SIGKILL);
      waitpid(p->pid, &p->status, 0);
      p->reaped = 1;
      break;
    }
    usleep(10000);
  }
}

/* ---- the verdicts ------------------------------------------------------- */

/* The version without its build ("0.1.0 (abc123)" -> "0.1.0"). */
static size_t release_len(const char *v) { return strcspn(v, " "); }

static void judge_host(struct doc *d, struct probe *p) {
  const char *h = label(p);
  char fix[768], t[1024];
  tail_text(p, t, sizeof t);
  const char *mine = hora_version();
  int st = p->reaped && WIFEXITED(p->status) ? WEXITSTATUS(p->status) : -1;
  const char *path =
      p->remote && d->o->horad_path ? d->o->horad_path : "horad";
  if (p->late) {
    hc_fmt(fix, sizeof fix, "check that `ssh %s` and horad there do not "
           "wait for input; a slow host needs a larger --start-timeout",
           h);
    row(d, h, p->remote ? "ssh" : "horad", D_FAIL, fix,
        "no answer within the start timeout (%g s)%s%s",
        d->start_timeout, *t ? ": " : "", t);
    return;
  }
  if (!p->ready) {
    if (p->remote && st == 255) {
      hc_fmt(fix, sizeof fix, "make `ssh -o BatchMode=yes %s true` work "
             "from here: sshd running there, the key (-i), the port (-p), "
             "the user", p->h->address ? p->h->address : h);
      row(d, h, "ssh", D_FAIL, fix, "ssh failed: %s",
          *t ? t : "no message");
      return;
    }
    if (p->remote) row(d, h, "ssh", D_OK, NULL, "reached");
    if (st == 127) {
      hc_fmt(fix, sizeof fix, "install hora %.*s on %s, or name where its "
             "horad is (horad_path in the config file)",
             (int)release_len(mine), mine, h);
      row(d, h, "horad", D_FAIL, fix, "%s is not there: %s", path,
          *t ? t : "not found");
    } else {
      hc_fmt(fix, sizeof fix, "install hora %.*s on %s (a horad without "
             "--probe is older)", (int)release_len(mine), mine, h);
      row(d, h, "horad", D_FAIL, fix, "horad --probe failed: %s",
          *t ? t : "no message");
    }
    return;
  }
  if (p->remote) row(d, h, "ssh", D_OK, NULL, "reached (%s)", p->hostname);
  if (strcmp(p->version, mine)) {
    int rel = release_len(p->version) == release_len(mine) &&
              !strncmp(p->version, mine, release_len(mine));
    hc_fmt(fix, sizeof fix, "install the same hora on every host (here: "
           "%s)", mine);
    row(d, h, "horad", rel ? D_WARN : D_FAIL, fix,
        "horad %s there, horarun %s here%s", p->version, mine,
        rel ? " (another build of the release)" : "");
  } else {
    row(d, h, "horad", D_OK, NULL, "%s", p->version);
  }
  /* the interface */
  if (p->iface_missing[0]) {
    hc_fmt(fix, sizeof fix, "name an interface %s has: its own in the "
           "config file (hosts: - {name: %s, network_interface: NAME}), or "
           "a --network-interface list with one of each host's", h, h);
    row(d, h, "iface", D_FAIL, fix, "no interface of '%s' has an address "
        "on %s (it has: %s)", p->iface_missing, h, p->ifaces);
  } else if (p->iface[0]) {
    row(d, h, "iface", D_OK, NULL, "%s %s", p->iface, p->iface_addr);
  } else if (p->addr[0]) {
    row(d, h, "iface", D_OK, NULL, "%s (no interface asked: the route "
        "towards horarun)", p->addr);
  }
  if (p->listen_err[0])
    row(d, h, "iface", D_FAIL, "check that nothing holds the address",
        "cannot listen on %s: %s", p->addr, p->listen_err);
  /* memory: the arenas (memfds, counted as shared memory) */
  long long arena = knob_size(d->o, "arena_size");
  long long chunk = knob_size(d->o, "chunk_size");
  struct hp_shm_hdr lay;
  uint64_t seg = hp_shm_layout(&lay, (uint64_t)HC_MAX(65536, chunk),
                               (uint64_t)HC_MAX(65536, arena), 0);
  long long need = (long long)seg * p->h->nranks;
  long long arenas = (long long)HC_MAX(65536, arena) * p->h->nranks;
  char a[32], b[32], c[32];
  human(a, sizeof a, (double)need);
  if (p->has_mem) {
    long long room = p->mem_avail;
    if (p->mem_cg >= 0 && (room < 0 || p->mem_cg < room)) room = p->mem_cg;
    human(b, sizeof b, (double)room);
    human(c, sizeof c, (double)HC_MAX(65536, arena));
    if (room >= 0 && need > room) {
      hc_fmt(fix, sizeof fix, "a smaller --arena-size (now %s per rank), "
             "fewer ranks on %s, or more memory there", c, h);
      row(d, h, "memory", D_FAIL, fix, "%s available%s, less than the %s "
          "of shared memory its %d rank%s can take", b,
          room == p->mem_cg ? " to its cgroup" : "", a, p->h->nranks,
          p->h->nranks == 1 ? "" : "s");
    } else {
      row(d, h, "memory", D_OK, NULL, "%s available; its %d rank%s can "
          "take %s",
          room >= 0 ? b : "?", p->h->nranks, p->h->nranks == 1 ? "" : "s",
          a);
    }
  }
  /* /dev/shm */
  human(a, sizeof a, (double)arenas);
  if (p->shm_err[0]) {
    row(d, h, "shm", D_FAIL, "mount a tmpfs on /dev/shm "
        "(mount -t tmpfs -o size=1g tmpfs /dev/shm)",
        "/dev/shm: %s", p->shm_err);
  } else if (p->has_shm) {
    human(b, sizeof b, (double)p->shm_free);
    human(c, sizeof c, (double)p->shm_total);
    if (p->shm_free < arenas) {
      char want[32];
      long long mib = (arenas + (1 << 20) - 1) >> 20;
      hc_fmt(want, sizeof want, "%lldm", HC_MAX(mib * 2, 1024));
      hc_fmt(fix, sizeof fix, "enlarge /dev/shm on %s: mount -o "
             "remount,size=%s /dev/shm (Docker: --shm-size=%s; Kubernetes: "
             "an emptyDir of medium Memory on /dev/shm)", h, want, want);
      row(d, h, "shm", D_FAIL, fix, "/dev/shm has %s free (of %s), less "
          "than the %s arena%s of its %d rank%s: the shared memory of "
          "data loader workers and NCCL beside hora will not fit", b, c,
          a, p->h->nranks == 1 ? "" : "s", p->h->nranks,
          p->h->nranks == 1 ? "" : "s");
    } else {
      row(d, h, "shm", D_OK, NULL, "/dev/shm %s free of %s; its arena%s: "
          "%s", b, c, p->h->nranks == 1 ? "" : "s", a);
    }
  }
  /* locked memory: hora locks none; RDMA registration does */
  if (p->has_memlock) {
    if (p->memlock >= 0) {
      human(b, sizeof b, (double)p->memlock);
    } else {
      hc_fmt(b, sizeof b, "unlimited");
    }
    if (p->rdma > 0 && p->memlock >= 0 && p->memlock < arenas)
      row(d, h, "memlock", D_WARN, "raise it to unlimited: memlock in "
          "/etc/security/limits.conf, LimitMEMLOCK= for a service, "
          "docker --ulimit memlock=-1",
          "locked memory is limited to %s, and %d RDMA device%s there "
          "register (lock) the memory they send from", b, p->rdma,
          p->rdma == 1 ? " is" : "s are");
    else
      row(d, h, "memlock", D_OK, NULL, "%s (no RDMA device%s)", b,
          p->rdma ? " needs more" : " there");
  }
  /* GPUs and NCCL: reported, where present */
  if (p->ngpu > 0) {
    for (char *s = p->gpus; *s; s++)
      if (*s == '_') *s = ' ';
    row(d, h, "gpu", D_OK, NULL, "%d: %s", p->ngpu,
        *p->gpus ? p->gpus : "NVIDIA");
  } else {
    row(d, h, "gpu", D_OK, NULL, "none");
  }
  if (!strcmp(p->nccl, "none") || !p->nccl[0])
    row(d, h, "nccl", p->ngpu ? D_WARN : D_OK,
        p->ngpu ? "install NCCL (libnccl.so.2) for the GPUs" : NULL,
        "not installed");
  else
    row(d, h, "nccl", D_OK, NULL, "%s", p->nccl);
}

/* Every probe that found NCCL: the same version? */
static void judge_nccl(struct doc *d) {
  const char *first = NULL, *fh = NULL;
  for (size_t i = 0; i < d->np; i++) {
    struct probe *p = &d->p[i];
    if (!p->ready || !p->nccl[0] || !strcmp(p->nccl, "none")) continue;
    if (!first) {
      first = p->nccl;
      fh = label(p);
    } else if (strcmp(first, p->nccl)) {
      row(d, label(p), "nccl", D_WARN, "install one NCCL on every host",
          "NCCL %s, but %s has %s", p->nccl, fh, first);
    }
  }
}

/* The link a->b from its two results, "ok RTT BYTES NS" or "fail WHY":
 * rt (round trips) and bw (bandwidth). */
static void judge_link(struct doc *d, struct probe *a, struct probe *b,
                       const char *rt, const char *bw) {
  char name[600], fix[768];
  hc_fmt(name, sizeof name, "%s->%s", label(a), label(b));
  unsigned long long rtt, z1, z2, bytes, ns, z3;
  const char *bad = strncmp(rt, "ok ", 3) ? rt : strncmp(bw, "ok ", 3) ? bw
                                                                     : NULL;
  if (!bad && sscanf(rt + 3, "%llu %llu %llu", &rtt, &z1, &z2) == 3 &&
      sscanf(bw + 3, "%llu %llu %llu", &z3, &bytes, &ns) == 3 && ns > 0) {
    double gbps = (double)bytes * 8 / (double)ns;
    long long sp = a->speed > 0 && b->speed > 0 ? HC_MIN(a->speed, b->speed)
                   : a->speed > 0                ? a->speed
                                                 : b->speed;
    char link[64] = "";
    if (sp > 0) hc_fmt(link, sizeof link, ", link %.3g Gb/s", sp / 1000.0);
    int slow_rtt = rtt > RTT_EXPECT_NS;
    int slow_bw = sp > 0 && gbps * 1000 < sp / 4.0;
    char what[256];
    hc_fmt(what, sizeof what, "round trip %.0f us, %.2f Gb/s to %s at %s%s",
           rtt / 1e3, gbps, label(b), b->addr, link);
    if (slow_rtt || slow_bw) {
      hc_fmt(fix, sizeof fix, "look at the path from %s to %s: a shaper or "
             "netem (tc qdisc show), a congested or failing link, a "
             "route through another network", label(a), label(b));
      row(d, name, "link", D_WARN, fix, "slow: %s%s%s", what,
          slow_rtt ? "; expected a round trip under 1 ms" : "",
          slow_bw ? "; expected a quarter of the link speed at least"
                  : "");
    } else {
      row(d, name, "link", D_OK, NULL, "%s", what);
    }
    return;
  }
  if (!bad) bad = "fail the probe's answer made no sense";
  const char *why = !strncmp(bad, "fail ", 5) ? bad + 5 : bad;
  hc_fmt(fix, sizeof fix, "let TCP from %s reach %s at %s (a firewall? a "
         "route?), or choose interfaces that reach each other: "
         "--network-interface, or each host's network_interface in the "
         "config file",
         label(a), label(b), b->addr);
  row(d, name, "link", D_FAIL, fix, "%s cannot reach %s at %s port %d: %s",
      label(a), label(b), b->addr, b->port, why);
}

int hr_doctor_run(const struct hr_opts *o, const struct hr_layout *l,
                  const char *horad) {
  struct doc d = {.o = o, .l = l};
  unsigned char rnd[16];
  if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
    fprintf(stderr, "horarun: error: no random bytes: %s\n",
            strerror(errno));
    return HR_EXIT_LAUNCHER;
  }
  for (int i = 0; i < 16; i++)
    sprintf(d.token + 2 * i, "%02x", rnd[i]);
  for (size_t i = 0; i < l->nhosts; i++) d.np += l->hosts[i].nranks > 0;
  d.p = calloc(d.np ? d.np : 1, sizeof *d.p);
  if (!d.p) {
    fprintf(stderr, "horarun: error: out of memory\n");
    return HR_EXIT_LAUNCHER;
  }
  signal(SIGPIPE, SIG_IGN);
  int rc = 0;
  for (size_t i = 0, k = 0; i < l->nhosts; i++) {
    if (!l->hosts[i].nranks) continue;
    d.p[k].h = &l->hosts[i];
    if (start_probe(&d, &d.p[k], horad) < 0) {
      fprintf(stderr, "horarun: error: cannot start the probe of host %s: "
              "%s\n", l->hosts[i].name, strerror(errno));
      rc = HR_EXIT_LAUNCHER;
    }
    k++;
  }
  if (rc) goto out;
  double st = hr_opts_knob_num(o, "start_timeout");
  d.start_timeout = st > 0 ? st : 30;
  wait_ready(&d, (int)(d.start_timeout * 1000));
  /* a probe on this machine: the others reach it where they reach us */
  const char *seen = NULL;
  for (size_t i = 0; i < d.np && !seen; i++)
    if (d.p[i].ready && d.p[i].remote && d.p[i].launcher[0])
      seen = d.p[i].launcher;
  for (size_t i = 0; i < d.np; i++)
    if (d.p[i].ready && !d.p[i].addr[0] && !d.p[i].iface_missing[0] && seen)
      hc_fmt(d.p[i].addr, sizeof d.p[i].addr, "%s", seen);
  /* the links, each direction on its own, in rounds: in round r probe i
   * tests probe i+r (mod n), so that each sends to one and serves one,
   * and n-1 rounds cover every ordered pair; the round trips first, on
   * quiet links, then the bandwidth */
  char (*res)[512] = calloc(2 * d.np * d.np + 1, sizeof *res);
  int *to = calloc(d.np + 1, sizeof *to);
  if (!res || !to) {
    free(res);
    free(to);
    fprintf(stderr, "horarun: error: out of memory\n");
    rc = HR_EXIT_LAUNCHER;
    goto out;
  }
  for (int phase = 0; phase < 2; phase++) {
    for (size_t r = 1; r < d.np; r++) {
      int any = 0;
      for (size_t i = 0; i < d.np; i++) {
        size_t j = (i + r) % d.np;
        const struct probe *a = &d.p[i], *b = &d.p[j];
        to[i] = a->ready && b->ready && b->addr[0] && b->port && a->port &&
                        a->out >= 0
                    ? (int)j
                    : -1;
        /* no bandwidth where not even the round trips went through */
        if (phase && !strncmp(res[i * d.np + j], "fail", 4)) to[i] = -1;
        any |= to[i] >= 0;
      }
      if (!any) continue;
      link_round(&d, to, phase ? "bw" : "rtt");
      for (size_t i = 0; i < d.np; i++)
        if (to[i] >= 0)
          hc_fmt(res[((size_t)phase * d.np + i) * d.np + (size_t)to[i]],
                 sizeof res[0], "%s", d.p[i].result);
    }
  }
  free(to);
  for (size_t i = 0; i < d.np; i++) {
    if (d.p[i].in >= 0) close(d.p[i].in);
    d.p[i].in = -1;
  }
  for (size_t i = 0; i < d.np; i++) {
    struct probe *p = &d.p[i];
    /* one that did not answer in time had its time: it ends now */
    if (!p->ready && !p->ended && p->pid > 0) {
      p->late = 1;
      kill(-p->pid, SIGKILL);
      kill(p->pid, SIGKILL);
    }
    while (p->out >= 0) { /* what it says until it ends */
      struct pollfd pf = {.fd = p->out, .events = POLLIN};
      if (poll(&pf, 1, QUIT_MS) <= 0) break;
      drain(p);
    }
    reap(p, QUIT_MS);
  }
  for (size_t i = 0; i < d.np; i++) judge_host(&d, &d.p[i]);
  judge_nccl(&d);
  for (size_t i = 0; i < d.np; i++) {
    for (size_t j = 0; j < d.np; j++) {
      const char *rt = res[i * d.np + j], *bw = res[(d.np + i) * d.np + j];
      if (rt[0] || bw[0]) judge_link(&d, &d.p[i], &d.p[j], rt, bw);
    }
  }
  free(res);
  print_table(&d);
  if (d.fails)
    printf("\n%d problem%s, %d warning%s: a job on these hosts would "
           "fail.\n", d.fails, d.fails == 1 ? "" : "s", d.warns,
           d.warns == 1 ? "" : "s");
  else
    printf("\nno problem, %d warning%s: a job can run on these hosts.\n",
           d.warns, d.warns == 1 ? "" : "s");
  fflush(stdout);
  rc = d.fails ? HR_EXIT_LAUNCHER : 0;
out:
  for (size_t i = 0; i < d.np; i++) {
    if (d.p[i].in >= 0) close(d.p[i].in);
    if (d.p[i].out >= 0) close(d.p[i].out);
    if (d.p[i].pid > 0 && !d.p[i].reaped) reap(&d.p[i], QUIT_MS);
  }
  for (size_t i = 0; i < d.nrows; i++) free(d.rows[i]);
  free(d.rows);
  free(d.p);
  return rc;
}
