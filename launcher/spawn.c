/* spawn.c -- finds and starts horad on this machine; builds the job's
 * environment. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "spawn.h"

extern char **environ;

#define HIGH_FD 10 /* fds handed to the child are moved at least this high */

char *hr_horad_path(void) {
  const char *env = getenv("HORA_HORAD");
  if (env && *env) return strdup(env);
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash && (size_t)(slash - self) + sizeof "/horad" <= sizeof self) {
      strcpy(slash, "/horad");
      if (access(self, X_OK) == 0) return strdup(self);
    }
  }
  return strdup("horad");
}

void hr_strv_free(char **v) {
  for (size_t i = 0; v && v[i]; i++)
    free(v[i]);
  free(v);
}

/* HORA_JOIN_KEY: only --join sets it (main.c), never the caller's */
static int env_exportable(const char *kv) {
  return strncmp(kv, "BASH_FUNC_", 10) != 0 && strncmp(kv, "OLDPWD=", 7) != 0 &&
         strncmp(kv, "HORA_JOIN_KEY=", 14) != 0;
}

/* Sets NAME=value in v (n entries, room for one more), replacing an entry
 * of the same name. Returns 0 or -1 when out of memory. */
static int env_set(char **v, size_t *n, const char *name, const char *value) {
  size_t len = strlen(name);
  char *kv = malloc(len + strlen(value) + 2);
  if (!kv) return -1;
  sprintf(kv, "%s=%s", name, value);
  for (size_t i = 0; i < *n; i++) {
    if (!strncmp(v[i], name, len) && v[i][len] == '=') {
      free(v[i]);
      v[i] = kv;
      return 0;
    }
  }
  v[(*n)++] = kv;
  v[*n] = NULL;
  return 0;
}

char **hr_job_env(const struct hr_opts *o, size_t *n) {
  size_t count = 0;
  for (char **e = environ; e && *e; e++)
    count++;
  char **v = calloc(count + hc_nparams + 2, sizeof *v);
  if (!v) return NULL;
  *n = 0;
  for (char **e = environ; e && *e; e++) {
    if (!env_exportable(*e)) continue;
    if (!(v[*n] = strdup(*e))) goto oom;
    (*n)++;
  }
  const char *pyu = getenv("PYTHONUNBUFFERED");
  if ((!pyu || !*pyu) && env_set(v, n, "PYTHONUNBUFFERED", "1") < 0) goto oom;
  for (size_t i = 0; i < hc_nparams; i++)
    if (o->knob[i] && env_set(v, n, hc_params[i].env, o->knob[i]) < 0) goto oom;
  return v;
oom:
  hr_strv_free(v);
  return NULL;
}

void hr_child_signals(void) {
  /* Handlers horarun installed must not run here once signals are
   * unblocked (exec would reset them, but only later); SIGPIPE was
   * ignored for horarun's sake only. */
  for (int sig = 1; sig < NSIG; sig++) {
    struct sigaction sa;
    if (sigaction(sig, NULL, &sa) == 0 && sa.sa_handler != SIG_DFL &&
        (sa.sa_handler != SIG_IGN || sig == SIGPIPE)) {
      sa.sa_handler = SIG_DFL;
      sa.sa_flags = 0;
      sigaction(sig, &sa, NULL);
    }
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
}

/* In the child between fork and exec: only async-signal-safe calls. */
static void child_exec(const char *path, char *const envp[], int sock,
                       int devnull, int errw, int boot, const char *iface,
                       const char *service) {
  char *argv[12] = {(char *)path};
  int n = 1;
  if (service) {
    argv[n++] = "--service-client";
    argv[n++] = (char *)service;
    argv[n++] = "--";
  }
  argv[n++] = "--control-fd";
  argv[n++] = "3";
  if (boot) argv[n++] = "--bootstrap";
  if (iface) {
    argv[n++] = "--iface";
    argv[n++] = (char *)iface;
  }
  setsid();
  dup2(devnull, STDIN_FILENO);
  if (service) dup2(STDERR_FILENO, STDOUT_FILENO); /* the job's words */
  dup2(sock, HR_CONTROL_FD);
  dup3(errw, HR_CONTROL_FD + 1, O_CLOEXEC);
  if (close_range(HR_CONTROL_FD + 2, ~0u, 0) < 0) {
    long max = sysconf(_SC_OPEN_MAX);
    for (long fd = HR_CONTROL_FD + 2; fd < max && fd < 65536; fd++)
      close((int)fd);
  }
  hr_child_signals();
  if (strchr(path, '/'))
    execve(path, argv, envp);
  else
    execvpe(path, argv, envp);
  int e = errno;
  ssize_t w = write(HR_CONTROL_FD + 1, &e, sizeof e);
  (void)w;
  _exit(127);
}

/* Moves fd to HIGH_FD or above (close-on-exec), so the child's dup2()s to
 * 0 and 3 cannot clobber each other. Returns the new fd or -1. */
static int move_high(int fd) {
  if (fd < 0 || fd >= HIGH_FD) return fd;
  int hi = fcntl(fd, F_DUPFD_CLOEXEC, HIGH_FD);
  close(fd);
  return hi;
}

static void close_all(int *fds, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (fds[i] >= 0) close(fds[i]);
}

/* Reads the child's exec errno from the error pipe; 0 when exec worked. */
static int exec_result(int errr) {
  int e = 0;
  ssize_t r;
  do
    r = read(errr, &e, sizeof e);
  while (r < 0 && errno == EINTR);
  return r == (ssize_t)sizeof e ? e : 0;
}

int hr_spawn_local(const char *path, char *const envp[], const char *boot,
                   const char *iface, const char *service, pid_t *pid,
                   int *fd, char *err, size_t errlen) {
  int sv[2] = {-1, -1}, ep[2] = {-1, -1}, bp[2] = {-1, -1};
  int devnull = -1;
  if (boot) { /* stdin: a pipe holding the bootstrap line */
    if (pipe2(bp, O_CLOEXEC) == 0) {
      size_t len = strlen(boot);
      ssize_t w = write(bp[1], boot, len); /* fits in the pipe */
      close(bp[1]);
      devnull = w == (ssize_t)len ? bp[0] : -1;
      if (devnull < 0) close(bp[0]);
    }
  } else {
    devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  if (devnull < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) ||
      pipe2(ep, O_CLOEXEC)) {
    hc_fmt(err, errlen, "cannot start horad: %s", strerror(errno));
    int fds[] = {devnull, sv[0], sv[1], ep[0], ep[1]};
    close_all(fds, HC_ARRAY_SIZE(fds));
    return -1;
  }
  devnull = move_high(devnull);
  sv[1] = move_high(sv[1]);
  ep[1] = move_high(ep[1]);
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &old);
  pid_t p = (devnull < 0 || sv[1] < 0 || ep[1] < 0) ? -1 : fork();
  int fork_errno = errno;
  if (p == 0)
    child_exec(path, envp, sv[1], devnull, ep[1], boot != NULL, iface,
               service);
  sigprocmask(SIG_SETMASK, &old, NULL);
  int theirs[] = {devnull, sv[1], ep[1]};
  close_all(theirs, HC_ARRAY_SIZE(theirs));
  int e = p < 0 ? fork_errno : exec_result(ep[0]);
  close(ep[0]);
  if (e) {
    hc_fmt(err, errlen, "cannot start horad (%s): %s%s", path, strerror(e),
           e == ENOENT ? "; set HORA_HORAD, or install horad beside "
                         "horarun or on PATH"
                       : "");
    if (p > 0) waitpid(p, NULL, 0);
    close(sv[0]);
    return -1;
  }
  *pid = p;
  *fd = sv[0];
  return 0;
}
