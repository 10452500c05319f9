/* opts.h -- what horarun was asked to do: struct hr_opts, which the command
 * line (cli.c) and a --config-file (config.c) both fill in, and the helpers
 * that set its fields. Calls run one way: cli.c -> config.c -> opts.c. */
#ifndef HORA_LAUNCHER_OPTS_H
#define HORA_LAUNCHER_OPTS_H

#include <stddef.h>

#define HR_NP_MAX (1 << 20) /* the most ranks one job may have */

/* Which option gave the hosts; the last one given wins (a config file's
 * hosts count where --config-file stands). */
enum { HR_HOSTS_NONE, HR_HOSTS_LIST, HR_HOSTS_FILE, HR_HOSTS_CONFIG };

struct hr_host;
struct hc_param;

struct hr_opts {
  int np;                   /* -np; 0 when not given */
  const char *hosts;        /* -H value, or NULL */
  const char *hostfile;     /* --hostfile, or NULL */
  int ssh_port;             /* -p/--ssh-port; 0 when not given */
  const char *ssh_identity; /* -i/--ssh-identity-file, or NULL */
  const char **ifaces;      /* --network-interface (repeatable; also a comma
                               list), nifaces entries */
  size_t nifaces;
  /* Set by --config-file (see config.h); strings are owned by the opts. */
  struct hr_host *cfg_hosts; /* the config's hosts, or NULL */
  size_t ncfg_hosts;
  int host_source; /* HR_HOSTS_*: which host option came last */
  char **ssh_opts; /* extra ssh arguments, in order */
  size_t nssh_opts;
  const char *horad_path; /* horad's path on the hosts, or NULL */
  char **env;             /* "KEY=VALUE" added to the job's environment */
  size_t nenv;
  char **owned; /* strings to free with the opts */
  size_t nowned;
  const char *ssh_user;   /* config ssh.user: login for hosts that do
                             not name their own, or NULL */
  int ifaces_replace;     /* the next --network-interface starts a new
                             list (the last one came from a config) */
  int verbose;            /* --verbose */
  int doctor;             /* --doctor: check the hosts, run nothing */
  const char *join;       /* --join KEY: the ranks were started by another
                             launcher and join (libhora), or NULL */
  int prefix_timestamp;   /* --prefix-output-with-timestamp */
  const char *output_dir; /* --output-filename, or NULL */
  const char *launcher;   /* --launcher (ssh, srun), or NULL: the default */
  int launch;             /* the one the job uses (HR_LAUNCH_*; main.c) */
  /* Values of the hc_params knobs given as flags or in a config file,
   * indexed like hc_params; NULL where not given. Each points into argv,
   * to a literal or to a string the opts own. */
  const char **knob;
  char **prog; /* the program and its arguments (points into argv, or to
                  join_prog) */
  char *join_prog[2]; /* --join without a program: a name for the ranks */
  int nprog;
};

/* How horad is started on the hosts other than this machine. */
enum { HR_LAUNCH_SSH, HR_LAUNCH_SRUN, HR_LAUNCH_MPIRUN, HR_LAUNCH_SERVICE };
/* Checks a --launcher / `launcher:` value: 0, or -1 with "expected ..."
 * in why. */
int hr_launcher_check(const char *v, char *why, size_t whylen);
/* The launcher of the job: the one given, else srun when the hosts are a
 * Slurm allocation's (no -H, --hostfile or config hosts; SLURM_JOB_ID set)
 * and srun is on PATH, else ssh. Returns HR_LAUNCH_*, or -1 with a reason in err (srun
 * outside an allocation). */
int hr_opts_launcher(const struct hr_opts *o, char *err, size_t errlen);
/* "ssh", "srun" or "mpirun". */
const char *hr_launcher_name(int launcher);

/* Sets *o to "nothing given" (knob array allocated). Returns 0, or -1
 * when out of memory. hr_cli_parse() calls it. */
int hr_opts_init(struct hr_opts *o);
void hr_opts_free(struct hr_opts *o);

/* Hands the malloc'd string s to the opts (freed by hr_opts_free()) and
 * returns it; on out of memory frees s and returns NULL. */
char *hr_opts_own(struct hr_opts *o, char *s);

/* Adds the network interfaces of a comma list ("eth0" or "eth0,ib0") to
 * o->ifaces (duplicates dropped); with `replace`, they replace the list.
 * Returns 0, or -1 with a reason in err (a bad or empty name). */
int hr_opts_add_ifaces(struct hr_opts *o, const char *list, int replace,
                       char *err, size_t errlen);

/* 1 when `name` is a plausible network interface name (1 to 15
 * characters, no blank, '/', ',' or quote). */
int hr_iface_ok(const char *name);

/* A knob whose flag takes another unit than its variables: the flag's
 * value is multiplied by `scale` (horovodrun's --fusion-threshold-mb). */
struct hr_knob_unit {
  const char *knob;
  long long scale;
  long long max; /* largest flag value */
  const char *metavar;
};

/* The flag unit of knob p, or NULL when its flag takes the variable's. */
const struct hr_knob_unit *hr_knob_unit(const struct hc_param *p);

/* Sets knob i (an index into hc_params) to a copy of v after checking it
 * with hc_param_check(). With `flag_unit`, v is in the unit of the knob's
 * flag where that differs from the variable's (--fusion-threshold-mb takes
 * MiB; the variables hold bytes) and is converted. Returns 0, or -1 with
 * "expected ..." in why. */
int hr_opts_set_knob(struct hr_opts *o, size_t i, const char *v, int flag_unit,
                     char *why, size_t whylen);

/* The hosts of the job, from whichever of -H, --hostfile and a config's
 * `hosts` came last (o->host_source), else "localhost:<np>"; hosts without
 * a user get o->ssh_user. Returns 0 and a list the caller frees with
 * hr_hosts_free(), or -1 with a reason in err (naming the option, or the
 * file and line). */
int hr_opts_hosts(const struct hr_opts *o, struct hr_host **hosts, size_t *n,
                  char *err, size_t errlen);

/* The numeric value of knob `name` (an INT or DOUBLE one): its flag if
 * given, else the environment (HORA_*, then the Horovod alias) when it
 * holds a number, else the table's default. */
double hr_opts_knob_num(const struct hr_opts *o, const char *name);
/* A string knob's value: -x/config, else the environment or default. */
const char *hr_opts_knob_str(const struct hr_opts *o, const char *name);

/* Checks the HORA_* variables of the knobs, and their Horovod aliases, in
 * the environment `envp` (NULL-terminated "NAME=value") and a config
 * file's `env` (which goes over it), as horad and the ranks will read them: an
 * empty one counts as unset, and one whose knob was given as a flag or in a
 * config file is replaced, so not checked. Returns 0, or -1 with "invalid NAME
 * value 'v' in the environment: expected ..." in err. */
int hr_env_check(const struct hr_opts *o, char *const envp[], char *err,
                 size_t errlen);

/* The value of `name` in envp, or NULL. */
const char *hr_env_get(char *const envp[], const char *name);

#endif
