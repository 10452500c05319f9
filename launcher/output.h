/* output.h -- ranks' output, printed line by line with horovodrun's prefix
 * ("[3]<stdout>:text"), optionally teed raw into DIR/rank.N/{stdout,stderr}.
 */
#ifndef HORA_LAUNCHER_OUTPUT_H
#define HORA_LAUNCHER_OUTPUT_H

#include <stddef.h>

#define HR_LINE_MAX (64 * 1024) /* longer lines are printed in pieces */
#define HR_TAIL_LINES 10        /* stderr lines kept per rank for errors */

struct hr_out_cfg {
  int np;               /* ranks in the job */
  int prefix_timestamp; /* asctime()-style time before each line */
  const char *dir;      /* --output-filename, or NULL */
  int out_fd, err_fd;   /* where prefixed lines go (normally 1 and 2) */
};

struct hr_out;

/* Creates the printer; with cfg->dir, also DIR/rank.N/ and empty stdout and
 * stderr files for every rank (N zero-padded to the digits of np-1, as
 * horovodrun does). Returns 0, or -1 with a reason in err. cfg->dir is
 * copied. */
int hr_out_new(struct hr_out **po, const struct hr_out_cfg *cfg, char *err,
               size_t errlen);
void hr_out_free(struct hr_out *o);

/* Bytes rank `rank` wrote on `stream` (1 stdout, 2 stderr), any chunking.
 * Complete lines (ended by '\n' or '\r') are printed at once, each with one
 * write(); the rest waits for its terminator. rank must be < np. */
void hr_out_data(struct hr_out *o, int rank, int stream, const void *p,
                 size_t n);

/* The rank has ended: prints its unterminated last lines with a '\n' added
 * and closes its files. */
/* A rank's unfinished lines, ended (its process ended and another
 * takes its place: --restart-failed-ranks). */
void hr_out_flush_rank(struct hr_out *o, int rank);
void hr_out_end_rank(struct hr_out *o, int rank);

/* Ends a '\r'-terminated (progress) line left on the terminal, so that a
 * message printed next does not overwrite it. Call before printing. */
void hr_out_break(struct hr_out *o);

/* Prints "horarun: last lines of its stderr:" and, indented, the last (up
 * to HR_TAIL_LINES) stderr lines of `rank` on stderr with one write().
 * Prints nothing when the rank wrote nothing on stderr. Returns the number
 * of lines printed. */
size_t hr_out_print_tail(struct hr_out *o, int rank);

/* 1 once writing to out_fd or err_fd failed with EPIPE (the reader left). */
int hr_out_reader_gone(const struct hr_out *o);

/* Prints "horarun: <message>\n" on stderr with one write(), after
 * hr_out_break() when `o` is not NULL. */
void hr_say(struct hr_out *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
