/* cli.h -- horarun's command line: options, --help, usage errors. */
#ifndef HORA_LAUNCHER_CLI_H
#define HORA_LAUNCHER_CLI_H

#include <stddef.h>

#define HR_EXIT_USAGE 2     /* wrong command line */
#define HR_CLI_RUN (-1)     /* hr_cli_parse(): go on and run the job */
#define HR_NP_MAX (1 << 20) /* the most ranks one job may have */

struct hr_opts {
  int np;                 /* -np; 0 when not given */
  const char *hosts;      /* -H value, or NULL */
  int verbose;            /* --verbose */
  int prefix_timestamp;   /* --prefix-output-with-timestamp */
  const char *output_dir; /* --output-filename, or NULL */
  /* Values of the hc_params knobs given as flags, indexed like hc_params;
   * NULL where the flag was not given. Points into argv (or a literal). */
  const char **knob;
  char **prog; /* the program and its arguments (points into argv) */
  int nprog;
};

/* Parses argv into *o. Returns HR_CLI_RUN to go on, or the exit status to
 * leave with: 0 after --help / --version (printed on stdout), HR_EXIT_USAGE
 * after a usage error (one "horarun: error: ..." line and the short usage on
 * stderr). *o borrows from argv; free it with hr_opts_free(). */
int hr_cli_parse(int argc, char **argv, struct hr_opts *o);
void hr_opts_free(struct hr_opts *o);

/* Prints "horarun: error: <message>" and the short usage on stderr; returns
 * HR_EXIT_USAGE so callers can `return hr_usage_error(...)`. */
int hr_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The numeric value of knob `name` (an INT or DOUBLE one): its flag if
 * given, else the environment (HORA_*, then the Horovod alias) when it
 * holds a number, else the table's default. */
double hr_opts_knob_num(const struct hr_opts *o, const char *name);

#endif
