/* main.c -- horarun: runs a program as a hora job of -np ranks.
 *
 *   horarun -np 4 python train.py
 *
 * Parses the command line (cli.c, config.c), lays the ranks out over the
 * hosts (hosts.c), builds the environment (spawn.c) and runs the job
 * (job.c); with --doctor, checks the hosts instead (doctor.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "common.h"
#include "doctor.h"
#include "elastic.h"
#include "hosts.h"
#include "job.h"
#include "output.h"
#include "remote.h"
#include "spawn.h"

/* Checks that the ssh identity file can be read (ssh would only warn and
 * go on without it). "~/" is the home directory, as for ssh. */
static int check_identity(const char *path) {
  char buf[4096];
  const char *home = getenv("HOME");
  if (!strncmp(path, "~/", 2) && home) {
    hc_fmt(buf, sizeof buf, "%s/%s", home, path + 2);
    path = buf;
  }
  if (access(path, R_OK) == 0) return 0;
  return hr_usage_error("cannot read the ssh identity file '%s': %s", path,
                        strerror(errno));
}

/* Builds the layout from -np and the hosts (-H, --hostfile or the config
 * file's, whichever came last; else localhost:np). Returns 0, or the exit
 * status after printing the error. */
static int make_layout(struct hr_opts *o, struct hr_layout *l) {
  char err[1024];
  struct hr_host *h;
  size_t nh;
  if (hr_opts_hosts(o, &h, &nh, err, sizeof err) < 0)
    return hr_usage_error("%s", err);
  int remote = 0;
  for (size_t i = 0; i < nh; i++)
    remote |= !h[i].local;
  if (remote && o->ssh_identity && check_identity(o->ssh_identity)) {
    hr_hosts_free(h, nh);
    return HR_EXIT_USAGE;
  }
  if (o->np == 0) {
    long slots = hr_hosts_slots(h, nh);
    o->np = slots > HR_NP_MAX ? HR_NP_MAX : (int)slots;
  }
  if (hr_layout_make(l, h, nh, o->np, err, sizeof err) < 0)
    return hr_usage_error("%s", err);
  return 0;
}

/* Sets name=value in the NULL-terminated vector *v of *n entries,
 * replacing an entry of that name. Returns 0 or -1 (out of memory). */
static int env_put(char ***v, size_t *n, const char *name, size_t len,
                   const char *value) {
  char *kv = malloc(len + strlen(value) + 2);
  if (!kv) return -1;
  sprintf(kv, "%.*s=%s", (int)len, name, value);
  for (size_t i = 0; i < *n; i++) {
    if (!strncmp((*v)[i], name, len) && (*v)[i][len] == '=') {
      free((*v)[i]);
      (*v)[i] = kv;
      return 0;
    }
  }
  char **g = realloc(*v, (*n + 2) * sizeof *g);
  if (!g) {
    free(kv);
    return -1;
  }
  *v = g;
  g[(*n)++] = kv;
  g[*n] = NULL;
  return 0;
}

/* The environment of horad and the ranks: hr_job_env()'s, then the config
 * file's `env`, then every knob that was given under its HORA_* and its
 * Horovod name (as horovodrun sets HOROVOD_*), so that an explicit knob
 * beats a variable of the same name. NULL when out of memory. */
static char **job_env(const struct hr_opts *o, size_t *n) {
  char **v = hr_job_env(o, n);
  for (size_t i = 0; v && i < o->nenv; i++) {
    const char *eq = strchr(o->env[i], '=');
    if (!strncmp(o->env[i], "HORA_JOIN_KEY=", 14)) continue; /* --join's */
    if (env_put(&v, n, o->env[i], (size_t)(eq - o->env[i]), eq + 1) < 0)
      goto oom;
  }
  for (size_t i = 0; v && i < hc_nparams; i++) {
    const struct hc_param *p = &hc_params[i];
    if (!o->knob[i]) continue;
    if (env_put(&v, n, p->env, strlen(p->env), o->knob[i]) < 0 ||
        (p->hvd_env &&
         env_put(&v, n, p->hvd_env, strlen(p->hvd_env), o->knob[i]) < 0))
      goto oom;
  }
  /* horad writes the ranks' way in instead of starting them (spawn.c) */
  if (v && o->join && env_put(&v, n, "HORA_JOIN_KEY", 13, o->join) < 0)
    goto oom;
  return v;
oom:
  hr_strv_free(v);
  return NULL;
}

/* Puts /dev/null on any of fds 0-2 that is closed, so that no socket or
 * file of ours lands there (libuv refuses to close fds 0-2, and output
 * meant for a closed stdout must not go into horad's socket). */
static void open_std_fds(void) {
  for (int fd = 0; fd <= 2; fd++) {
    if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
    int n = open("/dev/null", O_RDWR);
    if (n >= 0 && n != fd) close(n);
  }
}

int main(int argc, char **argv) {
  open_std_fds();
  struct hr_opts o;
  int rc = hr_cli_parse(argc, argv, &o);
  if (rc != HR_CLI_RUN) {
    hr_opts_free(&o);
    return rc;
  }
  char err[1024];
  if (hr_env_check(&o, environ, err, sizeof err) < 0) {
    hr_opts_free(&o);
    return hr_usage_error("%s", err);
  }
  hc_log_init("horarun", HC_WARNING);
  const struct hc_param *lv = hc_param_find("log_level");
  if (lv && o.knob[lv - hc_params]) /* checked by the parser */
    hc_log_set_level((enum hc_level)hc_parse_level(o.knob[lv - hc_params]));
  const struct hc_param *ls = hc_param_find("log");
  const char *spec = ls && o.knob[ls - hc_params]
                         ? o.knob[ls - hc_params]
                         : hc_knob_lookup(ls, environ, SIZE_MAX);
  if (spec) hc_log_apply_spec(spec); /* checked: it came through the knobs */
  struct hr_layout l;
  memset(&l, 0, sizeof l);
  /* the doctor of this machine alone: one rank's worth */
  if (o.doctor && !o.np && o.host_source == HR_HOSTS_NONE) o.np = 1;
  if ((rc = hr_elastic_check(&o)) != 0) {
    hr_opts_free(&o);
    return rc;
  }
  int elastic = !o.doctor && hr_elastic_wanted(&o);
  /* an elastic job lays its ranks out at each start (elastic.c) */
  rc = elastic ? 0 : make_layout(&o, &l);
  if (rc != 0) {
    hr_opts_free(&o);
    return rc;
  }
  char lerr[512];
  if ((o.launch = hr_opts_launcher(&o, lerr, sizeof lerr)) < 0) {
    hr_layout_free(&l);
    hr_opts_free(&o);
    return hr_usage_error("%s", lerr);
  }
  /* no launcher said: the hosts' services where every host has one */
  if (!o.launcher && o.launch == HR_LAUNCH_SSH && !elastic && !o.doctor) {
    char why[300];
    if (hr_service_answers(&o, &l, 300, why, sizeof why)) {
      o.launch = HR_LAUNCH_SERVICE;
      if (o.verbose)
        hr_say(NULL, "every host's hora service answers on port %d: its "
               "daemons start through them (--launcher ssh to use ssh)",
               (int)hr_opts_knob_num(&o, "service_port"));
    } else if (o.verbose && strcmp(why, "no host but this machine")) {
      hr_say(NULL, "starting the daemons over ssh: not through the hosts' "
             "hora services (%s)", why);
    }
  }
  if (o.doctor) {
    char *horad = hr_horad_path();
    rc = horad ? hr_doctor_run(&o, &l, horad) : HR_EXIT_LAUNCHER;
    if (!horad) hr_say(NULL, "error: out of memory");
    free(horad);
    hr_layout_free(&l);
    hr_opts_free(&o);
    return rc;
  }
  size_t envc;
  char **envp = job_env(&o, &envc);
  char *horad = hr_horad_path();
  if (!envp || !horad) {
    hr_say(NULL, "error: out of memory");
    rc = HR_EXIT_LAUNCHER;
  } else if (elastic) {
    rc = hr_elastic_run(&o, envp, horad);
  } else {
    rc = hr_job_run(&o, &l, envp, horad, NULL);
  }
  free(horad);
  hr_strv_free(envp);
  hr_layout_free(&l);
  hr_opts_free(&o);
  return rc;
}
