/* remote.c -- the ssh command line that starts horad on another host, and
 * starting it. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netdb.h>
#include <sys/wait.h>
#include <unistd.h>

#include "auth.h"
#include "common.h"
#include "remote.h"
#include "spawn.h"

void hr_boot_line(char *buf, size_t len, int host, int port,
                  const unsigned char *secret, size_t secret_len,
                  double heartbeat_timeout, int integrity, int encrypt) {
  char hex[2 * HP_SECRET_LEN + 1];
  hp_hex(secret, HC_MIN(secret_len, (size_t)HP_SECRET_LEN), hex);
  hc_fmt(buf, len, "HORA1 %d %d %s %g%s%s\n", host, port, hex,
         heartbeat_timeout, integrity ? " integrity" : "",
         encrypt ? " encrypt" : "");
  memset(hex, 0, sizeof hex);
}

/* 'text' for a POSIX shell: ' becomes '\''. */
static char *shell_quote(const char *s) {
  size_t n = 3;
  for (const char *p = s; *p; p++) n += *p == '\'' ? 4 : 1;
  char *q = malloc(n), *o = q;
  if (!q) return NULL;
  *o++ = '\'';
  for (const char *p = s; *p; p++) {
    if (*p == '\'') {
      memcpy(o, "'\\''", 4);
      o += 4;
    } else {
      *o++ = *p;
    }
  }
  *o++ = '\'';
  *o = '\0';
  return q;
}

char *hr_iface_arg(const struct hr_opts *o, const struct hr_host *h) {
  if (h->iface) return strdup(h->iface);
  if (!o->nifaces) return NULL;
  size_t len = 1;
  for (size_t i = 0; i < o->nifaces; i++) len += strlen(o->ifaces[i]) + 1;
  char *s = malloc(len);
  if (!s) return NULL;
  s[0] = '\0';
  for (size_t i = 0; i < o->nifaces; i++) {
    if (i) strcat(s, ",");
    strcat(s, o->ifaces[i]);
  }
  return s;
}

char **hr_ssh_argv(const struct hr_opts *o, const struct hr_host *h,
                   const char *horad) {
  return hr_ssh_argv_mode(o, h, horad, "--rendezvous");
}

char **hr_ssh_argv_mode(const struct hr_opts *o, const struct hr_host *h,
                        const char *horad, const char *mode) {
  size_t cap = 16 + o->nssh_opts, n = 0;
  char **v = calloc(cap, sizeof *v);
  if (!v) return NULL;
  char port[16];
  int p = h->ssh_port ? h->ssh_port : o->ssh_port;
  char *iface = hr_iface_arg(o, h);
#define ADD(s)                                                                 \
  do {                                                                         \
    if (!(v[n++] = strdup(s))) goto oom;                                       \
  } while (0)
  ADD("ssh");
  ADD("-o");
  ADD("BatchMode=yes");
  ADD("-T");
  if (p) {
    hc_fmt(port, sizeof port, "%d", p);
    ADD("-p");
    ADD(port);
  }
  if (o->ssh_identity) {
    ADD("-i");
    ADD(o->ssh_identity);
  }
  if (h->user) {
    ADD("-l");
    ADD(h->user);
  }
  for (size_t i = 0; i < o->nssh_opts; i++) ADD(o->ssh_opts[i]);
  ADD("--");
  ADD(h->address ? h->address : h->name);
  {
    char *q = shell_quote(horad), *qi = iface ? shell_quote(iface) : NULL;
    if (!q || (iface && !qi)) {
      free(q);
      free(qi);
      goto oom;
    }
    size_t len = strlen(q) + strlen(mode) + (qi ? strlen(qi) : 0) + 64;
    char *cmd = malloc(len);
    if (cmd)
      hc_fmt(cmd, len, "exec %s %s%s%s", q, mode, qi ? " --iface " : "",
             qi ? qi : "");
    free(q);
    free(qi);
    if (!cmd) goto oom;
    v[n++] = cmd;
  }
  v[n] = NULL;
  free(iface);
  return v;
#undef ADD
oom:
  free(iface);
  hr_strv_free(v);
  return NULL;
}

/* A malloc'd copy of the k words of v, NULL-terminated (free with
 * hr_strv_free()); NULL when out of memory. */
static char **strv_dup(const char *const *v, int k) {
  char **out = calloc((size_t)k + 1, sizeof *out);
  for (int i = 0; out && i < k; i++)
    if (!(out[i] = strdup(v[i]))) {
      hr_strv_free(out);
      out = NULL;
    }
  return out;
}

char **hr_srun_argv(const struct hr_opts *o, const struct hr_host *h,
                    const char *horad, const char *mode) {
  char *iface = hr_iface_arg(o, h);
  size_t len = strlen(h->name) + 32;
  char *node = malloc(len);
  if (node) hc_fmt(node, len, "--nodelist=%s", h->name);
  const char *v[] = {"srun", "--nodes=1", "--ntasks=1", node, "--overlap",
                     "--cpu-bind=none", "--kill-on-bad-exit=1", "--quiet",
                     "--", horad, mode, iface ? "--iface" : NULL, iface, NULL};
  int k = 0;
  while (v[k]) k++;
  char **out = node ? strv_dup(v, k) : NULL;
  free(node);
  free(iface);
  return out;
}

int hr_route_addr(const struct hr_host *h, char *buf, size_t len) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_DGRAM;
  const char *name = h->address ? h->address : h->name;
  if (getaddrinfo(name, "9", &hints, &res) != 0 || !res) return -1;
  int rc = -1, fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_storage me;
  socklen_t ml = sizeof me;
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
      getsockname(fd, (struct sockaddr *)&me, &ml) == 0 &&
      getnameinfo((struct sockaddr *)&me, ml, buf, (socklen_t)len, NULL, 0,
                  NI_NUMERICHOST) == 0)
    rc = 0;
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return rc;
}

char **hr_mpirun_argv(const struct hr_opts *o, const struct hr_host *h,
                      const char *horad, const char *mode, const char *addr) {
  char *iface = hr_iface_arg(o, h);
  char rsh[1024] = "";
  int p = h->ssh_port ? h->ssh_port : o->ssh_port;
  size_t n = 0;
  if (p) n += (size_t)snprintf(rsh + n, sizeof rsh - n, "-p %d ", p);
  if (o->ssh_identity && n < sizeof rsh)
    n += (size_t)snprintf(rsh + n, sizeof rsh - n, "-i %s ", o->ssh_identity);
  if (h->user && n < sizeof rsh)
    snprintf(rsh + n, sizeof rsh - n, "-l %s ", h->user);
  const char *host = h->address ? h->address : h->name;
  const char *v[24];
  int k = 0;
  v[k++] = "mpirun";
  if (geteuid() == 0) v[k++] = "--allow-run-as-root";
  v[k++] = "-np";
  v[k++] = "1";
  v[k++] = "-H";
  v[k++] = host;
  if (rsh[0]) {
    v[k++] = "--mca";
    v[k++] = "plm_rsh_args";
    v[k++] = rsh;
  }
  v[k++] = horad;
  v[k++] = mode;
  v[k++] = "--launcher";
  v[k++] = addr;
  if (iface) {
    v[k++] = "--iface";
    v[k++] = iface;
  }
  v[k] = NULL;
  char **out = strv_dup(v, k);
  free(iface);
  return out;
}

char **hr_service_argv(const struct hr_opts *o, const struct hr_host *h,
                       const char *horad) {
  int port = (int)hr_opts_knob_num(o, "service_port");
  char *iface = hr_iface_arg(o, h);
  const char *host = h->address ? h->address : h->name;
  char target[600];
  hc_fmt(target, sizeof target, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host,
         port);
  const char *v[14];
  int k = 0;
  v[k++] = horad;
  v[k++] = "--service-client";
  v[k++] = target;
  if (!strcmp(hr_opts_knob_str(o, "service_auth"), "munge")) {
    v[k++] = "--auth";
    v[k++] = "munge";
    v[k++] = "--munge-socket";
    v[k++] = hr_opts_knob_str(o, "munge_socket");
  } else {
    v[k++] = "--key-file";
    v[k++] = hr_opts_knob_str(o, "service_key_file");
  }
  v[k++] = "--";
  v[k++] = "--rendezvous";
  if (iface) {
    v[k++] = "--iface";
    v[k++] = iface;
  }
  v[k] = NULL;
  char **out = strv_dup(v, k);
  free(iface);
  return out;
}

int hr_spawn_ssh(char *const argv[], const char *line, pid_t *pid,
                 int *out_fd, char *err, size_t errlen) {
  int in[2] = {-1, -1}, out[2] = {-1, -1}, ep[2] = {-1, -1};
  if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(ep, O_CLOEXEC)) {
    hc_fmt(err, errlen, "cannot start %s: %s", argv[0], strerror(errno));
    int fds[] = {in[0], in[1], out[0], out[1], ep[0], ep[1]};
    for (size_t i = 0; i < HC_ARRAY_SIZE(fds); i++)
      if (fds[i] >= 0) close(fds[i]);
    return -1;
  }
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &old);
  pid_t p = fork();
  int fork_errno = errno;
  if (p == 0) {
    setsid();
    dup2(in[0], STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    dup2(out[1], STDERR_FILENO);
    hr_child_signals();
    execvp(argv[0], argv);
    int e = errno;
    ssize_t w = write(ep[1], &e, sizeof e);
    (void)w;
    _exit(127);
  }
  sigprocmask(SIG_SETMASK, &old, NULL);
  close(in[0]);
  close(out[1]);
  close(ep[1]);
  int e = p < 0 ? fork_errno : 0;
  if (p > 0) {
    ssize_t r;
    do
      r = read(ep[0], &e, sizeof e);
    while (r < 0 && errno == EINTR);
    if (r != (ssize_t)sizeof e) e = 0;
  }
  close(ep[0]);
  if (e) {
    hc_fmt(err, errlen, "cannot run %s: %s", argv[0], strerror(e));
    if (p > 0) waitpid(p, NULL, 0);
    close(in[1]);
    close(out[0]);
    return -1;
  }
  /* A few dozen bytes: they fit in the pipe, so this cannot block. */
  size_t len = strlen(line), off = 0;
  while (off < len) {
    ssize_t w = write(in[1], line + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    off += (size_t)w;
  }
  close(in[1]);
  *pid = p;
  *out_fd = out[0];
  return 0;
}

/* ---- does every host's service answer? ----------------------------------- */

/* A non-blocking connection to host:port begun, or -1. */
static int dial_nb(const char *host, int port) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  char ps[16];
  hc_fmt(ps, sizeof ps, "%d", port);
  if (getaddrinfo(host, ps, &hints, &res) || !res) return -1;
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                  0);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) < 0 &&
      errno != EINPROGRESS) {
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  return fd;
}

const char *hr_service_socket(const struct hr_opts *o) {
  const char *path = hr_opts_knob_str(o, "service_socket");
  if (!path || path[0] != '/') return NULL;
  /* (non-blocking: a service too busy to take it is passed over) */
  uid_t owner;
  int fd = hc_unix_connect(path, 1, &owner);
  if (fd < 0) return NULL;
  close(fd);
  /* a service of root's or this user's: the client would refuse another */
  return owner == 0 || owner == getuid() ? path : NULL;
}

int hr_service_answers(const struct hr_opts *o, const struct hr_layout *l,
                       int wait_ms, char *why, size_t whylen) {
  /* the credentials first: without them the service is no way in */
  struct stat st;
  if (!strcmp(hr_opts_knob_str(o, "service_auth"), "munge")) {
    const char *sock = hr_opts_knob_str(o, "munge_socket");
    if (stat(sock, &st) < 0 || !S_ISSOCK(st.st_mode)) {
      hc_fmt(why, whylen, "no munged socket at %s", sock);
      return 0;
    }
  } else {
    const char *key = hr_opts_knob_str(o, "service_key_file");
    if (access(key, R_OK) < 0) {
      hc_fmt(why, whylen, "no readable key file %s", key);
      return 0;
    }
  }
  int port = (int)hr_opts_knob_num(o, "service_port");
  struct pollfd *pf = calloc(l->nhosts ? l->nhosts : 1, sizeof *pf);
  size_t *host = calloc(l->nhosts ? l->nhosts : 1, sizeof *host);
  int *fds = calloc(l->nhosts ? l->nhosts : 1, sizeof *fds);
  size_t n = 0;
  int ok = pf && host && fds;
  for (size_t i = 0; ok && i < l->nhosts; i++) {
    const struct hr_host *h = &l->hosts[i];
    if (h->local || h->nranks == 0) continue;
    pf[n].fd = fds[n] = dial_nb(h->address ? h->address : h->name, port);
    pf[n].events = POLLOUT;
    host[n] = i;
    if (pf[n].fd < 0) {
      hc_fmt(why, whylen, "host %s: cannot connect to port %d", h->name, port);
      ok = 0;
    }
    n++;
  }
  if (ok && n == 0) {
    hc_fmt(why, whylen, "no host but this machine");
    ok = 0;
  }
  /* every connection must be accepted within wait_ms */
  size_t left = ok ? n : 0;
  uint64_t end = hc_now_ns() + (uint64_t)wait_ms * 1000000u;
  while (ok && left) {
    uint64_t now = hc_now_ns();
    int r = now >= end ? 0 : poll(pf, n, (int)((end - now) / 1000000u) + 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      for (size_t k = 0; k < n; k++)
        if (pf[k].fd >= 0) {
          hc_fmt(why, whylen, "host %s: no answer on port %d within %d ms",
                 l->hosts[host[k]].name, port, wait_ms);
          break;
        }
      ok = 0;
      break;
    }
    for (size_t k = 0; k < n; k++) {
      if (pf[k].fd < 0 || !pf[k].revents) continue;
      int err = 0;
      socklen_t el = sizeof err;
      getsockopt(pf[k].fd, SOL_SOCKET, SO_ERROR, &err, &el);
      if (err) {
        hc_fmt(why, whylen, "host %s: port %d: %s", l->hosts[host[k]].name,
               port, strerror(err));
        ok = 0;
        break;
      }
      pf[k].fd = -1; /* answered: poll skips it */
      left--;
    }
  }
  for (size_t k = 0; fds && k < n; k++)
    if (fds[k] >= 0) close(fds[k]);
  free(pf);
  free(host);
  free(fds);
  return ok;
}
