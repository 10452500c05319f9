/* cli.h -- horarun's command line: options, --help, usage errors. It fills
 * a struct hr_opts (opts.h), calling config.c for --config-file. */
#ifndef HORA_LAUNCHER_CLI_H
#define HORA_LAUNCHER_CLI_H

#include "opts.h"

#define HR_EXIT_USAGE 2     /* wrong command line */
#define HR_CLI_RUN (-1)     /* hr_cli_parse(): go on and run the job */

/* Parses argv into *o. Returns HR_CLI_RUN to go on, or the exit status to
 * leave with: 0 after --help / --version (printed on stdout), HR_EXIT_USAGE
 * after a usage error (one "horarun: error: ..." line and the short usage on
 * stderr). *o borrows from argv; free it with hr_opts_free(). */
int hr_cli_parse(int argc, char **argv, struct hr_opts *o);

/* Prints "horarun: error: <message>" and the short usage on stderr; returns
 * HR_EXIT_USAGE so callers can `return hr_usage_error(...)`. */
int hr_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
