/* opts.c -- struct hr_opts and the helpers that set it (see opts.h). The
 * command line (cli.c) and the config file (config.c) both call these; this
 * file calls neither. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "hosts.h"
#include "opts.h"
#include "slurm.h"

/* Knobs whose flag takes another unit than their variables: the flag's
 * value is multiplied by `scale` (horovodrun's --fusion-threshold-mb). */
static const struct hr_knob_unit knob_units[] = {
    {"fusion_threshold", 1LL << 20, 1LL << 20, "MB"},
};

const struct hr_knob_unit *hr_knob_unit(const struct hc_param *p) {
  for (size_t i = 0; i < HC_ARRAY_SIZE(knob_units); i++)
    if (!strcmp(knob_units[i].knob, p->name)) return &knob_units[i];
  return NULL;
}

char *hr_opts_own(struct hr_opts *o, char *s) {
  if (!s) return NULL;
  char **g = realloc(o->owned, (o->nowned + 1) * sizeof *g);
  if (!g) {
    free(s);
    return NULL;
  }
  o->owned = g;
  o->owned[o->nowned++] = s;
  return s;
}

int hr_opts_set_knob(struct hr_opts *o, size_t i, const char *v, int flag_unit,
                     char *why, size_t whylen) {
  const struct hc_param *p = &hc_params[i];
  const struct hr_knob_unit *u = flag_unit ? hr_knob_unit(p) : NULL;
  char buf[32];
  if (u) { /* a whole number in the flag's unit */
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (!*v || *end || errno || n < 0 || n > u->max) {
      hc_fmt(why, whylen, "expected a whole number from 0 to %lld", u->max);
      return -1;
    }
    hc_fmt(buf, sizeof buf, "%lld", n * u->scale);
    v = buf;
  }
  if (hc_param_check(p, v, why, whylen) < 0) return -1;
  char *copy = hr_opts_own(o, strdup(v));
  if (!copy) {
    hc_fmt(why, whylen, "out of memory");
    return -1;
  }
  o->knob[i] = copy;
  return 0;
}

int hr_iface_ok(const char *name) {
  size_t n = strlen(name);
  return n >= 1 && n <= 15 && !strpbrk(name, " \t\r\n/,'\"\\");
}

int hr_opts_add_ifaces(struct hr_opts *o, const char *list, int replace,
                       char *err, size_t errlen) {
  if (replace) o->nifaces = 0;
  for (const char *p = list;; p++) {
    size_t len = strcspn(p, ",");
    char *name = strndup(p, len);
    if (!name) {
      hc_fmt(err, errlen, "out of memory");
      return -1;
    }
    if (!hr_iface_ok(name)) {
      if (len == 0)
        hc_fmt(err, errlen, "empty interface name in '%s'", list);
      else
        hc_fmt(err, errlen,
               "bad network interface '%s': expected a name like eth0 (at "
               "most 15 characters)",
               name);
      free(name);
      return -1;
    }
    int dup = 0;
    for (size_t i = 0; i < o->nifaces && !dup; i++)
      dup = !strcmp(o->ifaces[i], name);
    const char **g =
        dup ? NULL : realloc(o->ifaces, (o->nifaces + 1) * sizeof *g);
    if (dup) {
      free(name);
    } else if (!g || !hr_opts_own(o, name)) {
      if (!g) free(name);
      hc_fmt(err, errlen, "out of memory");
      return -1;
    } else {
      o->ifaces = g;
      o->ifaces[o->nifaces++] = name;
    }
    p += len;
    if (!*p) break;
  }
  return 0;
}

int hr_opts_init(struct hr_opts *o) {
  memset(o, 0, sizeof *o);
  o->knob = calloc(hc_nparams ? hc_nparams : 1, sizeof *o->knob);
  return o->knob ? 0 : -1;
}

void hr_opts_free(struct hr_opts *o) {
  free(o->knob);
  for (size_t i = 0; i < o->nowned; i++)
    free(o->owned[i]);
  free(o->owned);
  free(o->ifaces);
  free(o->ssh_opts);
  free(o->env);
  hr_hosts_free(o->cfg_hosts, o->ncfg_hosts);
  memset(o, 0, sizeof *o);
}

/* 1 when the variable of entry kv belongs to a knob given as a flag or in
 * a config file (it replaces both its names). */
static int flagged_var(const struct hr_opts *o, const char *kv) {
  size_t len = strcspn(kv, "=");
  for (size_t i = 0; o->knob && i < hc_nparams; i++) {
    const struct hc_param *p = &hc_params[i];
    if (!o->knob[i]) continue;
    if ((strlen(p->env) == len && !strncmp(kv, p->env, len)) ||
        (p->hvd_env && strlen(p->hvd_env) == len &&
         !strncmp(kv, p->hvd_env, len)))
      return 1;
  }
  return 0;
}

int hr_env_check(const struct hr_opts *o, char *const envp[], char *err,
                 size_t errlen) {
  /* What horad will parse: the config's env over the environment (the
   * first entry of a name counts), less the variables a flag replaces. */
  size_t n = o->nenv, k = 0;
  for (size_t i = 0; envp && envp[i]; i++) n++;
  char **v = calloc(n + 1, sizeof *v);
  if (!v) {
    hc_fmt(err, errlen, "out of memory");
    return -1;
  }
  for (size_t i = 0; i < o->nenv; i++)
    if (!flagged_var(o, o->env[i])) v[k++] = o->env[i];
  for (size_t i = 0; envp && envp[i]; i++)
    if (!flagged_var(o, envp[i])) v[k++] = envp[i];
  struct hc_knobs knobs;
  hc_knobs_init(&knobs);
  int rc = hc_knobs_parse_env(&knobs, v, k, "the environment", err, errlen);
  hc_knobs_free(&knobs);
  free(v);
  return rc;
}

const char *hr_env_get(char *const envp[], const char *name) {
  size_t len = strlen(name);
  for (size_t i = 0; envp && envp[i]; i++)
    if (!strncmp(envp[i], name, len) && envp[i][len] == '=')
      return envp[i] + len + 1;
  return NULL;
}

const char *hr_opts_knob_str(const struct hr_opts *o, const char *name) {
  const struct hc_param *p = hc_param_find(name);
  if (p && o->knob && o->knob[p - hc_params]) return o->knob[p - hc_params];
  return hc_param_str_named(name);
}

double hr_opts_knob_num(const struct hr_opts *o, const char *name) {
  const struct hc_param *p = hc_param_find(name);
  if (p && o->knob && o->knob[p - hc_params]) {
    const char *v = o->knob[p - hc_params]; /* checked when set */
    return p->type == HC_P_SIZE ? (double)hc_parse_size(v) : strtod(v, NULL);
  }
  return hc_param_double_named(name);
}

int hr_launcher_check(const char *v, char *why, size_t whylen) {
  if (!strcmp(v, "ssh") || !strcmp(v, "srun") || !strcmp(v, "mpirun") ||
      !strcmp(v, "service"))
    return 0;
  hc_fmt(why, whylen, "expected ssh, srun, mpirun or service");
  return -1;
}

const char *hr_launcher_name(int launcher) {
  return launcher == HR_LAUNCH_SRUN      ? "srun"
         : launcher == HR_LAUNCH_MPIRUN  ? "mpirun"
         : launcher == HR_LAUNCH_SERVICE ? "the hora service's client"
                                         : "ssh";
}

/* Whether an executable `name` is on PATH. */
static int on_path(const char *name) {
  const char *path = getenv("PATH");
  char buf[4096];
  while (path && *path) {
    size_t n = strcspn(path, ":");
    hc_fmt(buf, sizeof buf, "%.*s/%s", (int)n, n ? path : ".", name);
    if (access(buf, X_OK) == 0) return 1;
    path += n;
    if (*path) path++;
  }
  return 0;
}

int hr_opts_launcher(const struct hr_opts *o, char *err, size_t errlen) {
  const char *nodelist, *tasks, *id = getenv("SLURM_JOB_ID");
  int in_job = id && *id;
  int slurm_hosts = o->host_source == HR_HOSTS_NONE &&
                    hr_slurm_env(&nodelist, &tasks);
  if (!o->launcher)
    return slurm_hosts && in_job && on_path("srun") ? HR_LAUNCH_SRUN
                                                     : HR_LAUNCH_SSH;
  if (!strcmp(o->launcher, "mpirun")) return HR_LAUNCH_MPIRUN;
  if (!strcmp(o->launcher, "service")) return HR_LAUNCH_SERVICE;
  if (strcmp(o->launcher, "srun")) return HR_LAUNCH_SSH;
  if (!in_job) {
    hc_fmt(err, errlen, "--launcher srun starts horad in a job step of the "
           "Slurm allocation horarun runs in (salloc, sbatch), and "
           "SLURM_JOB_ID is not set: run horarun inside one, or use "
           "--launcher ssh");
    return -1;
  }
  return HR_LAUNCH_SRUN;
}

/* The hosts from o->host_source, before defaults are applied. */
static int pick_hosts(const struct hr_opts *o, struct hr_host **hosts,
                      size_t *n, char *err, size_t errlen) {
  char why[1024], spec[64];
  switch (o->host_source) {
  case HR_HOSTS_LIST:
    if (hr_hosts_parse(o->hosts, hosts, n, why, sizeof why) == 0) return 0;
    hc_fmt(err, errlen, "-H: %s", why);
    return -1;
  case HR_HOSTS_FILE:
    return hr_hostfile_parse(o->hostfile, hosts, n, err, errlen);
  case HR_HOSTS_CONFIG:
    *n = o->ncfg_hosts;
    *hosts = hr_hosts_copy(o->cfg_hosts, o->ncfg_hosts);
    if (*hosts) return 0;
    hc_fmt(err, errlen, "out of memory");
    return -1;
  default:
    break;
  }
  /* inside a Slurm allocation: its nodes, with their tasks as slots; the
   * step's when its ranks join (--join from a task of srun) */
  const char *nodelist, *tasks, *step = getenv("SLURM_STEP_NODELIST");
  if (o->join && step && *step) {
    tasks = getenv("SLURM_STEP_TASKS_PER_NODE");
    return hr_slurm_hosts(step, tasks && *tasks ? tasks : NULL, hosts, n,
                          err, errlen);
  }
  if (hr_slurm_env(&nodelist, &tasks)) {
    return hr_slurm_hosts(nodelist, tasks, hosts, n, err, errlen);
  }
  if (o->np == 0) {
    hc_fmt(err, errlen, "-np is required: the number of processes to run");
    return -1;
  }
  hc_fmt(spec, sizeof spec, "localhost:%d", o->np);
  return hr_hosts_parse(spec, hosts, n, err, errlen);
}

int hr_opts_hosts(const struct hr_opts *o, struct hr_host **hosts, size_t *n,
                  char *err, size_t errlen) {
  *hosts = NULL;
  *n = 0;
  if (pick_hosts(o, hosts, n, err, errlen) < 0) return -1;
  for (size_t i = 0; o->ssh_user && i < *n; i++) {
    if ((*hosts)[i].user) continue;
    if (!((*hosts)[i].user = strdup(o->ssh_user))) {
      hr_hosts_free(*hosts, *n);
      *hosts = NULL;
      *n = 0;
      hc_fmt(err, errlen, "out of memory");
      return -1;
    }
  }
  return 0;
}
