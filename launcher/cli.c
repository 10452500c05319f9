/* cli.c -- horarun's command line, compatible with horovodrun's.
 *
 * Options come from two tables: the launcher's own (below) and every knob of
 * common/params.c that has a `flag`, so a knob is defined once and --help,
 * parsing and the environment given to ranks all follow from it. Options
 * stop at the first word that is not an option (the program) or at "--";
 * "--opt value" and "--opt=value" are both accepted.
 *
 * --config-file is applied where it stands (config.c), as horovodrun does:
 * its values override the flags before it, and the flags after it override
 * its values. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "config.h"
#include "opts.h"

enum opt_id {
  O_NP,
  O_HOSTS,
  O_HOSTFILE,
  O_SSH_PORT,
  O_SSH_IDENTITY,
  O_IFACE,
  O_IFACES,
  O_CONFIG,
  O_OUTPUT,
  O_PREFIX_TS,
  O_VERBOSE,
  O_LAUNCHER,
  O_MPI,
  O_GLOO,
  O_DOCTOR,
  O_JOIN,
  O_VERSION,
  O_HELP,
  O_KNOB
};

struct opt {
  const char *short_name; /* single dash, horovodrun style, or NULL */
  const char *long_name;
  const char *metavar; /* NULL: takes no value */
  enum opt_id id;
  const char *help;
};

static const struct opt builtin_opts[] = {
    {"-np", "--num-proc", "N", O_NP,
     "number of processes (ranks) to run; without it, the number of slots "
     "the hosts give"},
    {"-H", "--hosts", "HOST[:SLOTS],...", O_HOSTS,
     "hosts to run on and how many processes each may run (a HOST alone has "
     "1 slot; IPv6 as [::1]:4 or [fe80::1%eth0]:4); default localhost:N for "
     "-np N. Hosts other "
     "than this machine are reached with ssh"},
    {"-hostfile", "--hostfile", "FILE", O_HOSTFILE,
     "read the hosts from FILE, one per line: 'HOST slots=N', 'HOST:N' or "
     "'HOST'; '#' starts a comment. Of -H, --hostfile and a config file's "
     "hosts, the last one given counts"},
    {"-p", "--ssh-port", "PORT", O_SSH_PORT,
     "ssh port of the hosts (default: ssh's own)"},
    {"-i", "--ssh-identity-file", "FILE", O_SSH_IDENTITY,
     "private key ssh uses to reach the hosts"},
    {NULL, "--network-interface", "IF", O_IFACE,
     "network interface for hora's traffic between hosts; repeat it (or "
     "give a comma list) for several"},
    {NULL, "--network-interfaces", "IF,...", O_IFACES,
     "comma list of network interfaces for hora's traffic between hosts"},
    {NULL, "--config-file", "FILE", O_CONFIG,
     "read settings from a YAML file (see hora.yaml(5)); they override the "
     "options before --config-file and are overridden by those after it"},
    {NULL, "--output-filename", "DIR", O_OUTPUT,
     "also write each rank's output, unprefixed, to DIR/rank.<rank>/stdout "
     "and DIR/rank.<rank>/stderr"},
    {"-prefix-timestamp", "--prefix-output-with-timestamp", NULL, O_PREFIX_TS,
     "put the time in front of every output line"},
    {NULL, "--verbose", NULL, O_VERBOSE,
     "print what horarun does (horad command line, job layout) on stderr"},
    {NULL, "--launcher", "NAME", O_LAUNCHER,
     "how horad starts on the hosts other than this machine: ssh; srun "
     "(a job step of the Slurm allocation horarun runs in: no ssh to the "
     "nodes); mpirun (one process per host, started the way mpirun "
     "reaches hosts); or service (the hosts' resident horad --service, "
     "reached with --service-key-file: no ssh). Default: srun when the hosts "
     "are the allocation's and srun is at hand; else service when the "
     "service's key file (or munged's socket) is here and every other "
     "host's service answers on --service-port; else ssh"},
    {NULL, "--mpi", NULL, O_MPI,
     "horovodrun's: --launcher mpirun (hora's own protocol runs the "
     "collectives either way)"},
    {NULL, "--gloo", NULL, O_GLOO,
     "horovodrun's: --launcher ssh (hora's own controller plays Gloo's "
     "part)"},
    {NULL, "--doctor", NULL, O_DOCTOR,
     "run no program: check the hosts a job would run on (ssh, horad and "
     "its version, the network interfaces, TCP between each pair of hosts "
     "both ways with its round trip and bandwidth, /dev/shm, memory for "
     "the arenas, locked memory, GPUs and NCCL), print one table with a "
     "fix for each problem, and exit 1 when a job would fail"},
    {NULL, "--join", "KEY", O_JOIN,
     "start no program: the ranks were started by another launcher (srun, "
     "mpirun, torchrun) and join the job themselves. libhora's rank 0 runs "
     "this for them; KEY names the launcher's job, and each horad writes "
     "its ranks' way in to $TMPDIR/hora-UID/join-KEY. The hosts are "
     "-H's, or the Slurm step's (SLURM_STEP_NODELIST)"},
    {"-v", "--version", NULL, O_VERSION, "print the version and exit"},
    {"-h", "--help", NULL, O_HELP, "print this help and exit"},
};

/* Further spellings of boolean knobs, as horovodrun has them: each sets the
 * knob to a fixed value. */
static const struct knob_alias {
  const char *flag;
  const char *knob;
  const char *value;
} knob_aliases[] = {
    {"--no-hierarchical-allreduce", "hierarchical_allreduce", "0"},
    {"--no-hierarchical-allgather", "hierarchical_allgather", "0"},
    {"--no-torus-allreduce", "torus_allreduce", "0"},
    {"--no-autotune", "autotune", "0"},
    {"--no-timeline-mark-cycles", "timeline_mark_cycles", "0"},
    {"--stall-check", "stall_check_disable", "0"},
    {"--no-mpi-threads-disable", "mpi_threads_disable", "0"},
    {"--log-with-timestamp", "log_hide_timestamp", "0"},
    {"--log-hide-timestamp", "log_hide_timestamp", "1"},
};

static const char usage_short[] =
    "usage: horarun [-h] [-v] [-np N] [-H HOST[:SLOTS],... | -hostfile FILE] "
    "[options] program [args...]\n"
    "       horarun --doctor [-np N] [-H ... | -hostfile FILE] [options]\n"
    "Run 'horarun --help' for every option.\n";

int hr_usage_error(const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "horarun: error: %s\n%s", msg, usage_short);
  return HR_EXIT_USAGE;
}

#define MV_LEN 32 /* room for a knob's metavar */

/* The metavar of knob p's flag ("N", "SIZE", "LEVEL"), written into mv for
 * a string knob; NULL for a boolean (its flag takes no value). */
static const char *knob_metavar(const struct hc_param *p, char mv[MV_LEN]) {
  const struct hr_knob_unit *u = hr_knob_unit(p);
  if (u) return u->metavar;
  switch (p->type) {
  case HC_P_INT:
    return "N";
  case HC_P_SIZE:
    return "SIZE";
  case HC_P_DOUBLE:
    return "X";
  case HC_P_STRING:
    break;
  case HC_P_BOOL:
    return NULL;
  }
  /* A string's metavar is the last word of its name: log_level -> LEVEL. */
  const char *word = strrchr(p->name, '_');
  word = word ? word + 1 : p->name;
  size_t i = 0;
  for (; word[i] && i < MV_LEN - 1; i++)
    mv[i] = (char)toupper((unsigned char)word[i]);
  mv[i] = '\0';
  return mv;
}

/* Prints `text` wrapped at 79 columns, each line indented by 8 spaces. */
static void print_wrapped(FILE *f, const char *text) {
  const int indent = 8, width = 79;
  int col = 0;
  while (*text) {
    size_t w = strcspn(text, " ");
    if (col > 0 && col + 1 + (int)w > width) {
      fputc('\n', f);
      col = 0;
    }
    if (col == 0)
      col = fprintf(f, "%*s", indent, "");
    else
      col += fprintf(f, " ");
    col += fprintf(f, "%.*s", (int)w, text);
    text += w;
    while (*text == ' ')
      text++;
  }
  fputc('\n', f);
}

static void print_knob(FILE *f, const struct hc_param *p) {
  char buf[MV_LEN];
  const char *mv = knob_metavar(p, buf);
  fprintf(f, "  %s", p->flag);
  for (size_t a = 0; a < HC_ARRAY_SIZE(knob_aliases); a++)
    if (!strcmp(knob_aliases[a].knob, p->name))
      fprintf(f, ", %s", knob_aliases[a].flag);
  fprintf(f, "%s%s\n", mv ? " " : "", mv ? mv : "");
  char text[1024];
  hc_fmt(text, sizeof text, "%s [env %s%s%s; config knobs.%s; default %s]",
         p->help, p->env, p->hvd_env ? " or " : "",
         p->hvd_env ? p->hvd_env : "", p->name, *p->def ? p->def : "none");
  print_wrapped(f, text);
}

static void print_help(FILE *f) {
  fprintf(f, "usage: horarun [options] program [args...]\n"
             "       horarun --doctor [options]\n\n"
             "Runs `program` as a hora job: one horad per host starts the "
             "ranks, and every\nline they print comes back here as "
             "[<rank>]<stdout>:line or\n[<rank>]<stderr>:line.\n\n"
             "Options:\n");
  for (size_t i = 0; i < HC_ARRAY_SIZE(builtin_opts); i++) {
    const struct opt *o = &builtin_opts[i];
    fprintf(f, "  %s%s%s%s%s\n", o->short_name ? o->short_name : "",
            o->short_name ? ", " : "", o->long_name, o->metavar ? " " : "",
            o->metavar ? o->metavar : "");
    print_wrapped(f, o->help);
  }
  fprintf(f, "\nKnobs (each is read from its environment variable; given as "
             "a flag or in a\nconfig file, it is set in the environment of "
             "horad and of every rank, under\nboth names):\n");
  for (size_t i = 0; i < hc_nparams; i++)
    if (hc_params[i].flag) print_knob(f, &hc_params[i]);
  fprintf(f, "\nOptions end at the first word that is not an option, or at "
             "'--'. Both\n'--opt value' and '--opt=value' work. Exit status: "
             "that of the first rank to\nfail, 128+N for signal N, 2 for a "
             "usage error, 1 for a launcher error (with\n--doctor: 1 when "
             "a job would fail).\nSee horarun(1) and "
             "hora.yaml(5).\n");
}

/* An option found by name: a builtin, or a knob (with a fixed value for
 * the aliases of boolean knobs). */
struct match {
  const struct opt *op;
  size_t knob;
  const char *fixed;
};

static int name_is(const char *s, const char *name, size_t n) {
  return s && strlen(s) == n && !strncmp(s, name, n);
}

static int find_opt(const char *name, size_t n, struct match *m) {
  static const struct opt knob_opt = {NULL, "", "V", O_KNOB, NULL};
  static const struct opt knob_bool = {NULL, "", NULL, O_KNOB, NULL};
  *m = (struct match){0};
  for (size_t i = 0; i < HC_ARRAY_SIZE(builtin_opts); i++) {
    const struct opt *o = &builtin_opts[i];
    if (name_is(o->short_name, name, n) || name_is(o->long_name, name, n)) {
      m->op = o;
      return 1;
    }
  }
  for (size_t i = 0; i < hc_nparams; i++) {
    if (name_is(hc_params[i].flag, name, n)) {
      char mv[MV_LEN];
      m->op = knob_metavar(&hc_params[i], mv) ? &knob_opt : &knob_bool;
      m->knob = i;
      m->fixed = hc_params[i].type == HC_P_BOOL ? "1" : NULL;
      return 1;
    }
  }
  for (size_t a = 0; a < HC_ARRAY_SIZE(knob_aliases); a++) {
    const struct hc_param *p = hc_param_find(knob_aliases[a].knob);
    if (p && name_is(knob_aliases[a].flag, name, n)) {
      m->op = &knob_bool;
      m->knob = (size_t)(p - hc_params);
      m->fixed = knob_aliases[a].value;
      return 1;
    }
  }
  return 0;
}

static int parse_np(const char *v, int *np) {
  char *end;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (!*v || *end || errno || n <= 0 || n > HR_NP_MAX)
    return hr_usage_error("invalid -np value '%s': expected a whole number "
                          "from 1 to %d",
                          v, HR_NP_MAX);
  *np = (int)n;
  return 0;
}

static int parse_port(const char *name, const char *v, int *port) {
  char *end;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (!*v || *end || errno || n < 1 || n > 65535)
    return hr_usage_error("invalid %s value '%s': expected a port number "
                          "from 1 to 65535",
                          name, v);
  *port = (int)n;
  return 0;
}

/* Applies one option; `name` is the option as written. Returns 0 (with
 * *done set after --help/--version, which print and end the run) or the
 * exit status of a usage error. */
static int apply(struct hr_opts *o, const struct match *m, const char *name,
                 const char *v, int *done) {
  char err[1024];
  switch (m->op->id) {
  case O_NP:
    return parse_np(v, &o->np);
  case O_HOSTS:
    o->hosts = v;
    o->host_source = HR_HOSTS_LIST;
    return 0;
  case O_HOSTFILE:
    if (!*v) return hr_usage_error("%s needs a file name", name);
    o->hostfile = v;
    o->host_source = HR_HOSTS_FILE;
    return 0;
  case O_SSH_PORT:
    return parse_port(name, v, &o->ssh_port);
  case O_SSH_IDENTITY:
    if (!*v) return hr_usage_error("%s needs a file name", name);
    o->ssh_identity = v;
    return 0;
  case O_IFACE:
  case O_IFACES: {
    int replace = m->op->id == O_IFACES || o->ifaces_replace;
    o->ifaces_replace = 0;
    if (hr_opts_add_ifaces(o, v, replace, err, sizeof err) < 0)
      return hr_usage_error("%s: %s", name, err);
    return 0;
  }
  case O_CONFIG:
    if (hr_config_load(v, o, err, sizeof err) < 0)
      return hr_usage_error("%s", err);
    return 0;
  case O_OUTPUT:
    if (!*v) return hr_usage_error("--output-filename needs a directory");
    o->output_dir = v;
    return 0;
  case O_PREFIX_TS:
    o->prefix_timestamp = 1;
    return 0;
  case O_VERBOSE:
    o->verbose = 1;
    return 0;
  case O_LAUNCHER:
    if (hr_launcher_check(v, err, sizeof err) < 0)
      return hr_usage_error("invalid %s value '%s': %s", name, v, err);
    o->launcher = v;
    return 0;
  case O_MPI:
    o->launcher = "mpirun";
    return 0;
  case O_GLOO:
    o->launcher = "ssh";
    return 0;
  case O_DOCTOR:
    o->doctor = 1;
    return 0;
  case O_JOIN:
    if (!hc_join_key_ok(v))
      return hr_usage_error("invalid %s value '%s': expected up to 150 "
                            "letters, digits, '.', '_' or '-', not starting "
                            "with '.'", name, v);
    o->join = v;
    return 0;
  case O_VERSION:
    printf("horarun %s\n", hora_version());
    *done = 1;
    return 0;
  case O_HELP:
    print_help(stdout);
    *done = 1;
    return 0;
  case O_KNOB:
    if (m->fixed) v = m->fixed;
    if (hr_opts_set_knob(o, m->knob, v, 1, err, sizeof err) < 0)
      return hr_usage_error("invalid %s value '%s': %s", name, v, err);
    return 0;
  }
  return 0;
}

/* Parses one option word at argv[*i]; may consume the next word as value. */
static int parse_one(struct hr_opts *o, int argc, char **argv, int *i,
                     int *done) {
  const char *a = argv[*i];
  const char *eq = strchr(a, '=');
  size_t n = eq ? (size_t)(eq - a) : strlen(a);
  struct match m;
  if (!find_opt(a, n, &m)) return hr_usage_error("unrecognized option '%s'", a);
  char name[64], mv[MV_LEN];
  hc_fmt(name, sizeof name, "%.*s", (int)n, a);
  const char *v = NULL;
  if (m.op->metavar) {
    if (eq)
      v = eq + 1;
    else if (*i + 1 < argc)
      v = argv[++*i];
    else
      return hr_usage_error("option '%s' needs a value (%s)", a,
                            m.op->id == O_KNOB
                                ? knob_metavar(&hc_params[m.knob], mv)
                                : m.op->metavar);
  } else if (eq) {
    return hr_usage_error("option '%s' takes no value", name);
  }
  /* horovodrun's --blacklist-cooldown-range MIN MAX: two words */
  if (m.op->id == O_KNOB && !eq && *i + 1 < argc &&
      !strcmp(hc_params[m.knob].name, "blacklist_cooldown_range") &&
      v[strspn(v, "0123456789")] == '\0' && *v &&
      argv[*i + 1][strspn(argv[*i + 1], "0123456789")] == '\0' &&
      *argv[*i + 1]) {
    char *both = malloc(strlen(v) + strlen(argv[*i + 1]) + 2);
    if (!both || !hr_opts_own(o, both)) {
      fprintf(stderr, "horarun: error: out of memory\n");
      return 1;
    }
    sprintf(both, "%s %s", v, argv[++*i]);
    v = both;
  }
  return apply(o, &m, name, v, done);
}

/* Consequences of the whole command line: a disabled stall check sets the
 * stall check times that horad reads to 0 (never), whatever their flags. */
static int finish(struct hr_opts *o) {
  const struct hc_param *off = hc_param_find("stall_check_disable");
  const char *v = off ? o->knob[off - hc_params] : NULL;
  if (!v || strcmp(v, "1")) return 0;
  static const char *const times[] = {"stall_check_time",
                                      "stall_shutdown_time"};
  for (size_t i = 0; i < HC_ARRAY_SIZE(times); i++) {
    const struct hc_param *p = hc_param_find(times[i]);
    if (p) o->knob[p - hc_params] = "0";
  }
  return 0;
}

int hr_cli_parse(int argc, char **argv, struct hr_opts *o) {
  if (hr_opts_init(o) < 0) {
    fprintf(stderr, "horarun: error: out of memory\n");
    return 1;
  }
  int i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--")) {
      i++;
      break;
    }
    if (a[0] != '-' || a[1] == '\0') break; /* the program */
    int done = 0, rc = parse_one(o, argc, argv, &i, &done);
    if (rc || done) return rc;
  }
  o->prog = argv + i;
  o->nprog = argc - i;
  if (o->doctor && o->nprog > 0)
    return hr_usage_error("--doctor runs no program, but '%s' was given",
                          o->prog[0]);
  if (o->doctor && o->join)
    return hr_usage_error("--doctor and --join cannot be given together");
  if (o->nprog == 0 && !o->doctor && !o->join)
    return hr_usage_error("no program to run was given");
  if (o->nprog == 0 && o->join) { /* a name for the ranks in messages */
    if (!(o->join_prog[0] = hr_opts_own(o, strdup("(joined ranks)")))) {
      fprintf(stderr, "horarun: error: out of memory\n");
      return 1;
    }
    o->prog = o->join_prog;
    o->nprog = 1;
  }
  finish(o);
  return HR_CLI_RUN;
}
