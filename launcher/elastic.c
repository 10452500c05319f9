/* elastic.c -- an elastic job (--min-np, --max-np or
 * --host-discovery-script): when the job fails, horarun leaves out the
 * hosts the failure is blamed on and starts the job again on the hosts
 * that are still usable, with as many ranks as they hold (at least
 * --min-np, at most --max-np), up to --reset-limit times.
 *
 * A failure of a start first re-forms it in place (job.c's reform(),
 * elastic_in_place): the hosts to blame are left out here as below, and
 * the other hosts' daemons go on with their ranks' processes, numbered
 * anew, while --min-np allows; each counts as a reset. Otherwise, and for
 * hosts that come, the job starts again.
 *
 * Each start is a whole job of its own (job.c): new daemons, new ranks,
 * ranks numbered anew. What training carries over is what the ranks
 * committed: hora.elastic's commit() writes the state into
 * HORA_ELASTIC_DIR on the rank's host (one directory per horarun, the same
 * on every start), and the next start's ranks begin from the job's newest
 * commit, sent by the rank whose host holds it. HORA_ELASTIC_RESETS says
 * how many starts came before. A failure no host is blamed for ends the
 * job (the next start would fail alike); starts for a change of hosts do
 * not count against --reset-limit.
 *
 * Blacklisting, as Horovod: a host blamed for a failure (its rank failed,
 * its horad exited or could not start, the verdict on a lost link named
 * it) stays out for the rest of the job, or with --blacklist-cooldown-range
 * MIN MAX for MIN seconds after its first failure, doubling with each
 * further one, at most MAX. Too few usable hosts: horarun waits (running
 * the discovery script every second, and for cooled-down hosts) up to
 * --elastic-timeout seconds; when no host can come back (no script, and
 * every missing host is out for good) it ends at once.
 *
 * While a start runs, a thread runs the discovery script every second (or,
 * without one, watches for a left-out host whose cool-down ends). When a
 * host of the start is gone from the script's output, or new slots would
 * let the job grow, the start's horads are told (HP_MSG_HOSTS_UPDATED, job.c);
 * the ranks see it at their next commit() (HostsUpdatedInterrupt on every
 * rank at once), commit and exit with HR_EXIT_RESTART, and the job starts
 * again on the hosts the script names. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "cli.h"
#include "common.h"
#include "elastic.h"
#include "hosts.h"
#include "job.h"
#include "output.h"
#include "spawn.h"

#define SCRIPT_OUT_MAX (1 << 20) /* bytes of the discovery script's output */
#define SCRIPT_TIMEOUT_S 10       /* seconds it may take */

struct black {
  char *name;
  int failures;
  double at;    /* monotonic seconds: its last failure */
  int secs;     /* its last cool-down */
  double until; /* monotonic seconds; < 0: for good */
};

struct elastic {
  struct hr_opts *o;
  const char *script; /* NULL: the hosts given */
  int slots_per_host;
  int min_np, max_np;
  int timeout;     /* seconds */
  int reset_limit; /* 0: none */
  int cooling;            /* --blacklist-cooldown-range given */
  int cool_min, cool_max; /* its seconds */
  struct black *black;
  size_t nblack;
  /* black and nblack: a start's watcher thread reads them while the
   * start's re-formings in place (left_out()) add to them */
  pthread_mutex_t lock;
};

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static const char *knob_str(const struct hr_opts *o, const char *name) {
  const struct hc_param *p = hc_param_find(name);
  const char *v = p && o->knob[p - hc_params] ? o->knob[p - hc_params]
                                                : hc_param_str_named(name);
  return v && *v ? v : NULL;
}

/* "MIN MAX" or "MIN,MAX", whole seconds, MIN <= MAX. */
static int parse_cooldown(const char *v, int *lo, int *hi) {
  char *end;
  errno = 0;
  long a = strtol(v, &end, 10);
  if (end == v || errno || a < 0 || a > INT_MAX) return -1;
  while (*end == ' ' || *end == ',') end++;
  const char *b = end;
  long c = strtol(b, &end, 10);
  if (end == b || errno || *end || c < a || c > INT_MAX) return -1;
  *lo = (int)a;
  *hi = (int)c;
  return 0;
}

static const char *const elastic_only[] = {
    "slots_per_host", "elastic_timeout", "reset_limit",
    "blacklist_cooldown_range", "elastic_in_place"};

int hr_elastic_check(const struct hr_opts *o) {
  const char *cool = knob_str(o, "blacklist_cooldown_range");
  int lo, hi;
  if (cool && parse_cooldown(cool, &lo, &hi) < 0)
    return hr_usage_error("invalid --blacklist-cooldown-range value '%s': "
                          "expected MIN MAX (or MIN,MAX), whole seconds "
                          "with MIN <= MAX", cool);
  if (o->doctor || hr_elastic_wanted(o)) return 0;
  for (size_t i = 0; i < HC_ARRAY_SIZE(elastic_only); i++) {
    const struct hc_param *p = hc_param_find(elastic_only[i]);
    if (p && o->knob[p - hc_params])
      return hr_usage_error("%s is for elastic jobs: give --min-np, --max-np "
                            "or --host-discovery-script too", p->flag);
  }
  return 0;
}

int hr_elastic_wanted(const struct hr_opts *o) {
  return hr_opts_knob_num(o, "min_np") > 0 ||
         hr_opts_knob_num(o, "max_np") > 0 ||
         knob_str(o, "host_discovery_script") != NULL;
}

/* ---- the hosts --------------------------------------------------------- */

/* Runs `cmd` with sh in a process group of its own, its standard output
 * read into buf (at most cap bytes), for at most SCRIPT_TIMEOUT_S seconds.
 * Returns 0 when it exited 0, else -1 with what happened in why ("failed
 * with status 5", "did not finish within 10 s", ...). Called from the
 * watcher thread too: the child only calls async-signal-safe functions
 * before exec. */
static int run_script(const char *cmd, char *buf, size_t cap, size_t *len,
                      char *why, size_t whylen) {
  int fds[2];
  *len = 0;
  if (pipe2(fds, O_CLOEXEC) < 0) {
    hc_fmt(why, whylen, "cannot be run: %s", strerror(errno));
    return -1;
  }
  pid_t pid = fork();
  if (pid < 0) {
    hc_fmt(why, whylen, "cannot be run: %s", strerror(errno));
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  if (pid == 0) {
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &dfl, NULL); /* horarun ignores it */
    setpgid(0, 0);
    int dn = open("/dev/null", O_RDONLY);
    if (dn >= 0) dup2(dn, 0);
    dup2(fds[1], 1);
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  setpgid(pid, pid); /* (either side may win the race) */
  close(fds[1]);
  double end = now_s() + SCRIPT_TIMEOUT_S;
  int timed_out = 0, too_much = 0;
  for (;;) {
    double left = end - now_s();
    if (left <= 0) {
      timed_out = 1;
      break;
    }
    struct pollfd pf = {.fd = fds[0], .events = POLLIN};
    int r = poll(&pf, 1, (int)(left * 1000) + 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    if (*len == cap) {
      char c;
      ssize_t more = read(fds[0], &c, 1);
      if (more < 0 && errno == EINTR) continue;
      too_much = more > 0;
      break;
    }
    ssize_t k = read(fds[0], buf + *len, cap - *len);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    *len += (size_t)k;
  }
  close(fds[0]);
  if (timed_out || too_much) kill(-pid, SIGKILL);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    hc_fmt(why, whylen, "did not finish within %d s", SCRIPT_TIMEOUT_S);
    return -1;
  }
  if (too_much) {
    hc_fmt(why, whylen, "printed more than %zu bytes", cap);
    return -1;
  }
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
  if (WIFEXITED(st))
    hc_fmt(why, whylen, "failed with status %d", WEXITSTATUS(st));
  else
    hc_fmt(why, whylen, "was killed by %s",
           hc_signal_name(WIFSIGNALED(st) ? WTERMSIG(st) : 0));
  return -1;
}

/* Runs the discovery script and parses its lines into hosts. Returns 0, or
 * -1 with a reason in err. */
static int discover(const struct elastic *e, struct hr_host **hosts, size_t *n,
                    char *err, size_t errlen) {
  char *buf = malloc(SCRIPT_OUT_MAX + 1);
  if (!buf) {
    hc_fmt(err, errlen, "out of memory");
    return -1;
  }
  size_t len = 0;
  char why[256];
  if (run_script(e->script, buf, SCRIPT_OUT_MAX, &len, why, sizeof why) < 0) {
    hc_fmt(err, errlen, "the host discovery script '%s' %s", e->script, why);
    free(buf);
    return -1;
  }
  buf[len] = '\0';
  /* one HOST or HOST:SLOTS per line (as -H's items; a bare IPv6 address
   * has no slots), merged as -H merges its items */
  struct hr_host *h = NULL;
  size_t nh = 0, cap = 0;
  int line = 0, rc = 0;
  for (char *l = buf, *next; l && *l; l = next) {
    line++;
    next = strchr(l, '\n');
    if (next) *next++ = '\0';
    while (*l == ' ' || *l == '\t') l++;
    size_t ll = strlen(l);
    while (ll && (l[ll - 1] == ' ' || l[ll - 1] == '\t' || l[ll - 1] == '\r'))
      l[--ll] = '\0';
    if (!ll || *l == '#') continue;
    struct hr_host one = {0};
    int explicit_slots = 0;
    char what[512];
    if (hr_host_item_parse_slots(l, ll, &one.name, &one.slots,
                                 &explicit_slots, what, sizeof what) < 0) {
      hc_fmt(err, errlen, "the host discovery script's line %d: %s", line,
             what);
      rc = -1;
      break;
    }
    if (!explicit_slots && e->slots_per_host > 0) one.slots = e->slots_per_host;
    if (e->o->ssh_user && !(one.user = strdup(e->o->ssh_user))) {
      free(one.name);
      hc_fmt(err, errlen, "out of memory");
      rc = -1;
      break;
    }
    if (hr_hosts_add(&h, &nh, &cap, &one, what, sizeof what) < 0) {
      hc_fmt(err, errlen, "the host discovery script's line %d: %s", line,
             what);
      rc = -1;
      break;
    }
  }
  free(buf);
  if (rc < 0) {
    hr_hosts_free(h, nh);
    return -1;
  }
  *hosts = h;
  *n = nh;
  return 0;
}

static struct black *find_black(struct elastic *e, const char *name) {
  for (size_t i = 0; i < e->nblack; i++)
    if (!strcmp(e->black[i].name, name)) return &e->black[i];
  return NULL;
}

/* 1 while host `name` is left out. */
static int blacklisted(struct elastic *e, const char *name, double now) {
  struct black *b = find_black(e, name);
  return b && (b->until < 0 || now < b->until);
}

static void blacklist(struct elastic *e, const char *name) {
  struct black *b = find_black(e, name);
  if (!b) {
    struct black *g = realloc(e->black, (e->nblack + 1) * sizeof *g);
    char *n = strdup(name);
    if (!g || !n) {
      free(n);
      if (g) e->black = g;
      return; /* out of memory: the host stays usable */
    }
    e->black = g;
    b = &e->black[e->nblack++];
    *b = (struct black){.name = n};
  }
  b->failures++;
  b->at = now_s();
  if (!e->cooling) {
    b->until = -1;
    return;
  }
  double d = e->cool_min;
  for (int i = 1; i < b->failures && d < e->cool_max; i++) d *= 2;
  if (d > e->cool_max) d = e->cool_max;
  b->secs = (int)d;
  b->until = now_s() + d;
}

/* The usable hosts now (the script's or the given ones, less the left-out
 * ones). Sets *could_grow when a host may still come (a script, or a host
 * cooling down). Returns 0, or -1 with a reason in err. */
static int usable_hosts(struct elastic *e, struct hr_host **out, size_t *nout,
                        int *could_grow, char *err, size_t errlen) {
  struct hr_host *h;
  size_t n;
  int rc = e->script ? discover(e, &h, &n, err, errlen)
                     : hr_opts_hosts(e->o, &h, &n, err, errlen);
  if (rc < 0) return -1;
  double now = now_s();
  *could_grow = e->script != NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    struct black *b = find_black(e, h[i].name);
    if (b && b->until >= 0 && now < b->until) *could_grow = 1;
    if (blacklisted(e, h[i].name, now)) continue;
    if (k != i) {
      struct hr_host t = h[k];
      h[k] = h[i];
      h[i] = t;
    }
    k++;
  }
  /* h[k..n) are the left-out ones: free their strings */
  for (size_t i = k; i < n; i++) {
    free(h[i].name);
    free(h[i].user);
    free(h[i].address);
    free(h[i].iface);
    memset(&h[i], 0, sizeof h[i]);
  }
  *out = h;
  *nout = k;
  return 0;
}

static void list_hosts(const struct hr_host *h, size_t n, char *buf,
                       size_t len) {
  size_t k = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < n && k + 1 < len; i++)
    k += (size_t)snprintf(buf + k, len - k, "%s%s:%d", i ? "," : "", h[i].name,
                          h[i].slots);
  if (!n) hc_fmt(buf, len, "none");
}

/* ---- watching the discovery script during a start ----------------------- */

struct watch {
  struct elastic *e;
  const struct hr_layout *l;
  int want; /* the ranks a start would run with enough slots (0: all) */
  struct hr_job_outcome *oc;
  double t0; /* when the start began */
  pthread_t th;
  _Atomic int stop;
};

/* 1 when the script's hosts h would change the start's layout l: a host
 * of l is gone from them, or there are usable slots for more ranks than l
 * has while more are wanted. */
static int hosts_differ(const struct watch *w, const struct hr_host *h,
                        size_t n) {
  double now = now_s();
  long usable = 0;
  /* the ranks now: fewer than l's once the start re-formed in place */
  int np = atomic_load(&w->oc->np_now);
  if (!np) np = w->l->np;
  int removed = 0;
  pthread_mutex_lock(&w->e->lock);
  for (size_t i = 0; i < n; i++)
    if (!blacklisted(w->e, h[i].name, now)) usable += h[i].slots;
  for (size_t k = 0; k < w->l->nhosts && !removed; k++) {
    if (!w->l->hosts[k].nranks) continue;
    const struct black *b = find_black(w->e, w->l->hosts[k].name);
    if (b && b->at >= w->t0) continue; /* left out of this start */
    size_t i = 0;
    while (i < n && strcmp(h[i].name, w->l->hosts[k].name)) i++;
    removed = i == n;
  }
  pthread_mutex_unlock(&w->e->lock);
  return removed ||
         (usable > np && np < HR_NP_MAX && (!w->want || w->want > np));
}

/* A host a start re-formed in place without (job.c): out, as a host to
 * blame for a failure is. */
static void left_out(void *arg, const char *host) {
  struct elastic *e = arg;
  pthread_mutex_lock(&e->lock);
  blacklist(e, host);
  struct black *b = find_black(e, host);
  int secs = b && b->until >= 0 ? b->secs : -1, failures = b ? b->failures : 0;
  pthread_mutex_unlock(&e->lock);
  if (secs >= 0)
    hr_say(NULL, "elastic: host %s is left out for %d s (failure %d)", host,
           secs, failures);
  else
    hr_say(NULL, "elastic: host %s is left out for the rest of the job",
           host);
}

/* Runs the script (or reads the given hosts, when one of them cools down)
 * every second while the start runs; the first change is announced (one
 * per start: the ranks then leave for the next). */
static void *watch_main(void *arg) {
  struct watch *w = arg;
  for (;;) {
    for (int i = 0; i < 10; i++) {
      if (atomic_load(&w->stop)) return NULL;
      usleep(100 * 1000);
    }
    struct hr_host *h;
    size_t n;
    char err[1024];
    int rc = w->e->script ? discover(w->e, &h, &n, err, sizeof err)
                          : hr_opts_hosts(w->e->o, &h, &n, err, sizeof err);
    if (rc < 0) continue; /* next time */
    int changed = hosts_differ(w, h, n);
    hr_hosts_free(h, n);
    if (changed) {
      atomic_fetch_add(&w->oc->hosts_changed, 1);
      return NULL;
    }
  }
}

/* ---- the job's environment -------------------------------------------- */

static char **env_with(char **envp, const char *dir, int resets) {
  size_t n = 0;
  while (envp[n]) n++;
  char **v = calloc(n + 3, sizeof *v);
  if (!v) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (!strncmp(envp[i], "HORA_ELASTIC_DIR=", 17) ||
        !strncmp(envp[i], "HORA_ELASTIC_RESETS=", 20))
      continue;
    if (!(v[k++] = strdup(envp[i]))) goto oom;
  }
  char b[64];
  hc_fmt(b, sizeof b, "HORA_ELASTIC_RESETS=%d", resets);
  if (!(v[k++] = strdup(b))) goto oom;
  char *d = malloc(strlen(dir) + 18);
  if (!d) goto oom;
  sprintf(d, "HORA_ELASTIC_DIR=%s", dir);
  v[k++] = d;
  return v;
oom:
  hr_strv_free(v);
  return NULL;
}

/* Removes the commits of a job that ended otherwise than well (on success
 * the ranks remove them) from this machine: dir holds only files. */
static void remove_commits(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *de;
  char path[512];
  while ((de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.' &&
        (!de->d_name[1] || (de->d_name[1] == '.' && !de->d_name[2])))
      continue;
    hc_fmt(path, sizeof path, "%s/%s", dir, de->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

/* ---- the loop ---------------------------------------------------------- */

int hr_elastic_run(struct hr_opts *o, char **envp, const char *horad) {
  struct elastic e = {.o = o, .lock = PTHREAD_MUTEX_INITIALIZER};
  e.script = knob_str(o, "host_discovery_script");
  e.slots_per_host = (int)hr_opts_knob_num(o, "slots_per_host");
  e.min_np = (int)hr_opts_knob_num(o, "min_np");
  e.max_np = (int)hr_opts_knob_num(o, "max_np");
  e.timeout = (int)hr_opts_knob_num(o, "elastic_timeout");
  e.reset_limit = (int)hr_opts_knob_num(o, "reset_limit");
  const char *cool = knob_str(o, "blacklist_cooldown_range");
  e.cooling = cool && parse_cooldown(cool, &e.cool_min, &e.cool_max) == 0;
  /* a start's ranks: --max-np's (or -np's) number where the usable slots
   * allow, else every usable slot */
  int want = e.max_np ? e.max_np : o->np;
  if (o->np && e.max_np && o->np > e.max_np)
    return hr_usage_error("-np %d is more than --max-np %d", o->np, e.max_np);
  if (!e.min_np) e.min_np = o->np ? o->np : 1;
  if (want && e.min_np > want)
    return hr_usage_error("--min-np %d is more than the %s %d", e.min_np,
                          e.max_np ? "--max-np" : "-np", want);

  /* where the ranks keep their commits: the same path on every host */
  char dir[256];
  unsigned char rnd[6];
  if (hp_random(rnd, sizeof rnd) < 0) {
    hr_say(NULL, "error: no random bytes for the elastic directory's name");
    return HR_EXIT_LAUNCHER;
  }
  const char *tmp = getenv("TMPDIR");
  hc_fmt(dir, sizeof dir, "%s/hora-elastic-%u-%02x%02x%02x%02x%02x%02x",
         tmp && *tmp == '/' && strlen(tmp) < 180 ? tmp : "/tmp",
         (unsigned)getuid(), rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5]);

  /* rc: the status horarun ends with; a failed start's, until a later
   * start ends otherwise */
  int rc = HR_EXIT_LAUNCHER, resets = 0, starts = 0, resets_in_place = 0;
  for (;;) {
    /* the hosts, waiting for enough of them */
    struct hr_host *h = NULL;
    size_t nh = 0;
    char err[1024], list[1024];
    double give_up = now_s() + e.timeout;
    int waited = 0;
    for (;;) {
      int grow = 0;
      if (usable_hosts(&e, &h, &nh, &grow, err, sizeof err) < 0) {
        if (!starts && !e.script) { /* -H, --hostfile: as a plain job's */
          rc = hr_usage_error("%s", err);
          goto out;
        }
        hr_say(NULL, "error: elastic: %s", err);
        if (!resets) rc = HR_EXIT_LAUNCHER;
        goto out;
      }
      long slots = hr_hosts_slots(h, nh);
      if (slots >= e.min_np) break;
      list_hosts(h, nh, list, sizeof list);
      hr_hosts_free(h, nh);
      h = NULL;
      if (!grow || now_s() >= give_up) {
        hr_say(NULL, "error: elastic: %ld slot(s) on the usable hosts (%s), "
               "fewer than --min-np %d%s; ending the job", slots, list,
               e.min_np,
               grow ? " after waiting --elastic-timeout"
               : e.nblack ? " (no host can come back: the failed ones are "
                            "left out for good)"
                          : " (no other host is given)");
        if (!resets) rc = HR_EXIT_LAUNCHER;
        goto out;
      }
      if (!waited++)
        hr_say(NULL, "elastic: %ld slot(s) on the usable hosts (%s), fewer "
               "than --min-np %d: waiting up to %d s for more", slots, list,
               e.min_np, e.timeout);
      sleep(1);
    }
    long slots = hr_hosts_slots(h, nh);
    if (slots > HR_NP_MAX) slots = HR_NP_MAX;
    int np = want && want < slots ? want : (int)slots;
    struct hr_layout l;
    if (hr_layout_make(&l, h, nh, np, err, sizeof err) < 0) {
      hr_say(NULL, "error: elastic: %s", err);
      if (!resets) rc = HR_EXIT_LAUNCHER;
      goto out;
    }
    if (starts++) {
      size_t k = 0;
      list[0] = '\0';
      for (size_t i = 0; i < l.nhosts && k + 1 < sizeof list; i++)
        if (l.hosts[i].nranks)
          k += (size_t)snprintf(list + k, sizeof list - k, "%s%s:%d",
                                k ? "," : "", l.hosts[i].name,
                                l.hosts[i].nranks);
      hr_say(NULL, "elastic: start %d: %d rank(s) on %s", starts, np, list);
    }
    o->np = np;
    char **env = env_with(envp, dir, starts - 1 + resets_in_place);
    int *culprit = calloc(l.nhosts ? l.nhosts : 1, sizeof *culprit);
    if (!env || !culprit) {
      hr_strv_free(env);
      free(culprit);
      hr_layout_free(&l);
      hr_say(NULL, "error: out of memory");
      rc = HR_EXIT_LAUNCHER;
      goto out;
    }
    struct hr_job_outcome oc = {
        .culprit = culprit,
        .in_place = hr_opts_knob_num(o, "elastic_in_place") == 1,
        .min_np = e.min_np,
        .resets_left = e.reset_limit > 0 ? HC_MAX(0, e.reset_limit - resets)
                                         : -1,
        .left_out = left_out,
        .arg = &e};
    struct watch w = {.e = &e, .l = &l, .want = want, .oc = &oc,
                      .t0 = now_s()};
    /* hosts may come (a script's, or one cooling down: also one this
     * start leaves out in place) or go (a script's) */
    int watching = (e.script || e.cooling) &&
                   pthread_create(&w.th, NULL, watch_main, &w) == 0;
    int jrc = hr_job_run(o, &l, env, horad, &oc);
    if (watching) {
      atomic_store(&w.stop, 1);
      pthread_join(w.th, NULL);
    }
    hr_strv_free(env);
    resets += oc.reforms; /* re-formings in place are resets too */
    resets_in_place += oc.reforms;
    if (jrc == 0 && oc.restart) { /* the hosts changed: not a failure */
      free(culprit);
      hr_layout_free(&l);
      hr_say(NULL, "elastic: the hosts changed: starting again");
      continue;
    }
    rc = jrc;
    /* a lost host's ranks' failures (or their peers') come from it */
    int nbl = 0, level = HR_BLAME_RANK;
    for (size_t i = 0; jrc && i < l.nhosts; i++)
      if (culprit[i] > level) level = culprit[i];
    for (size_t i = 0; jrc && !oc.interrupted && i < l.nhosts; i++)
      if (culprit[i] == level) {
        blacklist(&e, l.hosts[i].name);
        struct black *b = find_black(&e, l.hosts[i].name);
        if (b && b->until >= 0)
          hr_say(NULL, "elastic: host %s is left out for %d s (failure %d)",
                 l.hosts[i].name, b->secs, b->failures);
        else
          hr_say(NULL, "elastic: host %s is left out for the rest of the job",
                 l.hosts[i].name);
        nbl++;
      }
    free(culprit);
    hr_layout_free(&l);
    if (jrc == 0 || oc.interrupted) break;
    if (!nbl) {
      /* nothing to leave out: the next start would fail alike */
      hr_say(NULL, "error: elastic: the job failed (exit status %d) and no "
             "host is to blame; ending it", rc);
      break;
    }
    resets++;
    if (e.reset_limit > 0 && resets > e.reset_limit) {
      hr_say(NULL, "error: elastic: the job failed %d times; --reset-limit "
             "%d reached, ending it (exit status %d)", resets, e.reset_limit,
             rc);
      break;
    }
    char lim[64] = "";
    if (e.reset_limit) hc_fmt(lim, sizeof lim, " of at most %d", e.reset_limit);
    hr_say(NULL, "elastic: the job failed (exit status %d): reset %d%s", rc,
           resets, lim);
  }
out:
  for (size_t i = 0; i < e.nblack; i++) free(e.black[i].name);
  free(e.black);
  if (rc != 0) remove_commits(dir); /* this machine's; see elastic.py */
  return rc;
}
