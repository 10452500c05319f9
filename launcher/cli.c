/* cli.c -- horarun's command line, compatible with horovodrun's local case.
 *
 * Options come from two tables: the launcher's own (below) and every knob of
 * common/params.c that has a `flag`, so a knob is defined once and --help,
 * parsing and the environment given to ranks all follow from it. Options
 * stop at the first word that is not an option (the program) or at "--";
 * "--opt value" and "--opt=value" are both accepted. */
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

enum opt_id {
  O_NP,
  O_HOSTS,
  O_OUTPUT,
  O_PREFIX_TS,
  O_VERBOSE,
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
     "given with -H"},
    {"-H", "--hosts", "HOST[:SLOTS],...", O_HOSTS,
     "hosts to run on and how many processes each may run (a HOST alone has "
     "1 slot); default localhost:N for -np N. Only this machine for now"},
    {NULL, "--output-filename", "DIR", O_OUTPUT,
     "also write each rank's output, unprefixed, to DIR/rank.<rank>/stdout "
     "and DIR/rank.<rank>/stderr"},
    {"-prefix-timestamp", "--prefix-output-with-timestamp", NULL, O_PREFIX_TS,
     "put the time in front of every output line"},
    {NULL, "--verbose", NULL, O_VERBOSE,
     "print what horarun does (horad command line, job layout) on stderr"},
    {"-v", "--version", NULL, O_VERSION, "print the version and exit"},
    {"-h", "--help", NULL, O_HELP, "print this help and exit"},
};

static const char usage_short[] =
    "usage: horarun [-h] [-v] [-np N] [-H HOST[:SLOTS],...] [options] "
    "program [args...]\n"
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

static const char *knob_metavar(const struct hc_param *p) {
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
  static char mv[32];
  const char *word = strrchr(p->name, '_');
  word = word ? word + 1 : p->name;
  size_t i = 0;
  for (; word[i] && i < sizeof mv - 1; i++)
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

static void print_help(FILE *f) {
  fprintf(f, "usage: horarun [options] program [args...]\n\n"
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
             "a flag, it is set\nin the environment of horad and of every "
             "rank):\n");
  for (size_t i = 0; i < hc_nparams; i++) {
    const struct hc_param *p = &hc_params[i];
    if (!p->flag) continue;
    const char *mv = knob_metavar(p);
    fprintf(f, "  %s%s%s\n", p->flag, mv ? " " : "", mv ? mv : "");
    char text[1024];
    hc_fmt(text, sizeof text, "%s [env %s%s%s; default %s]", p->help, p->env,
           p->hvd_env ? " or " : "", p->hvd_env ? p->hvd_env : "", p->def);
    print_wrapped(f, text);
  }
  fprintf(f, "\nOptions end at the first word that is not an option, or at "
             "'--'. Both\n'--opt value' and '--opt=value' work. Exit status: "
             "that of the first rank to\nfail, 128+N for signal N, 2 for a "
             "usage error, 1 for a launcher error.\nSee horarun(1).\n");
}

/* Finds an option by exact name; *knob gets the hc_params index for knobs. */
static const struct opt *find_opt(const char *name, size_t n, size_t *knob) {
  static struct opt knob_opt;
  for (size_t i = 0; i < HC_ARRAY_SIZE(builtin_opts); i++) {
    const struct opt *o = &builtin_opts[i];
    if ((o->short_name && strlen(o->short_name) == n &&
         !strncmp(o->short_name, name, n)) ||
        (strlen(o->long_name) == n && !strncmp(o->long_name, name, n)))
      return o;
  }
  for (size_t i = 0; i < hc_nparams; i++) {
    const char *f = hc_params[i].flag;
    if (f && strlen(f) == n && !strncmp(f, name, n)) {
      knob_opt =
          (struct opt){NULL, f, knob_metavar(&hc_params[i]), O_KNOB, NULL};
      *knob = i;
      return &knob_opt;
    }
  }
  return NULL;
}

/* Checks a knob's value against its type. Returns 0 or a usage error. */
static int check_knob(const struct hc_param *p, const char *v) {
  char *end = NULL;
  int ok = *v != '\0';
  switch (p->type) {
  case HC_P_INT: {
    errno = 0;
    long long n = strtoll(v, &end, 10);
    ok = ok && !*end && errno == 0 && n >= 0 && n <= INT_MAX;
    break;
  }
  case HC_P_SIZE:
    ok = ok && hc_parse_size(v) >= 0;
    break;
  case HC_P_DOUBLE: {
    double d = strtod(v, &end);
    ok = ok && !*end && isfinite(d) && d >= 0;
    break;
  }
  case HC_P_STRING:
    if (!strcmp(p->name, "log_level")) ok = hc_parse_level(v) >= 0;
    break;
  case HC_P_BOOL:
    break;
  }
  if (ok) return 0;
  if (!strcmp(p->name, "log_level"))
    return hr_usage_error("invalid %s value '%s': expected trace, debug, "
                          "info, warning, error or fatal",
                          p->flag, v);
  return hr_usage_error("invalid %s value '%s': expected %s", p->flag, v,
                        p->type == HC_P_SIZE ? "a size like 64M"
                        : p->type == HC_P_DOUBLE
                            ? "a non-negative number"
                            : "a non-negative whole number");
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

/* Applies one option. Returns 0 (with *done set after --help/--version,
 * which print and end the run) or HR_EXIT_USAGE. */
static int apply(struct hr_opts *o, const struct opt *op, size_t knob,
                 const char *v, int *done) {
  switch (op->id) {
  case O_NP:
    return parse_np(v, &o->np);
  case O_HOSTS:
    o->hosts = v;
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
  case O_VERSION:
    printf("horarun %s\n", hora_version());
    *done = 1;
    return 0;
  case O_HELP:
    print_help(stdout);
    *done = 1;
    return 0;
  case O_KNOB:
    if (!v) v = "1"; /* a boolean knob */
    o->knob[knob] = v;
    return check_knob(&hc_params[knob], v);
  }
  return 0;
}

/* Parses one option word at argv[*i]; may consume the next word as value. */
static int parse_one(struct hr_opts *o, int argc, char **argv, int *i,
                     int *done) {
  const char *a = argv[*i];
  const char *eq = strchr(a, '=');
  size_t n = eq ? (size_t)(eq - a) : strlen(a);
  size_t knob = 0;
  const struct opt *op = find_opt(a, n, &knob);
  if (!op) return hr_usage_error("unrecognized option '%s'", a);
  const char *v = NULL;
  if (op->metavar) {
    if (eq)
      v = eq + 1;
    else if (*i + 1 < argc)
      v = argv[++*i];
    else
      return hr_usage_error("option '%s' needs a value (%s)", a, op->metavar);
  } else if (eq) {
    return hr_usage_error("option '%.*s' takes no value", (int)n, a);
  }
  return apply(o, op, knob, v, done);
}

int hr_cli_parse(int argc, char **argv, struct hr_opts *o) {
  memset(o, 0, sizeof *o);
  o->knob = calloc(hc_nparams ? hc_nparams : 1, sizeof *o->knob);
  if (!o->knob) {
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
  if (o->nprog == 0) return hr_usage_error("no program to run was given");
  return HR_CLI_RUN;
}

void hr_opts_free(struct hr_opts *o) {
  free(o->knob);
  o->knob = NULL;
}

double hr_opts_knob_num(const struct hr_opts *o, const char *name) {
  const struct hc_param *p = hc_param_find(name);
  if (p && o->knob && o->knob[p - hc_params])
    return strtod(o->knob[p - hc_params], NULL); /* checked when parsed */
  return hc_param_double(name);
}
