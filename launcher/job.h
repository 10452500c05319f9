/* job.h -- runs one job: starts a horad per host, sends it the job, prints
 * the ranks' output and ends the job when a rank fails or horarun is
 * interrupted. */
#ifndef HORA_LAUNCHER_JOB_H
#define HORA_LAUNCHER_JOB_H

#include <stdatomic.h>

#include "opts.h"
#include "hosts.h"

#define HR_EXIT_LAUNCHER 1 /* horarun or horad failed, not a rank */

enum { HR_BLAME_RANK = 1, HR_BLAME_HOST = 2 };

/* A rank's exit status when it leaves a start of an elastic job for the
 * next one, after a host update was announced (hora.elastic's
 * RESTART_EXIT): not a failure. */
#define HR_EXIT_RESTART 75

/* What ended a job, for an elastic job's next start (elastic.c). */
struct hr_job_outcome {
  int *culprit;    /* by layout host (l->nhosts entries, zeroed by the
                      caller): for each host the end is blamed on,
                      HR_BLAME_RANK (a rank of it failed) or, above it,
                      HR_BLAME_HOST (its horad exited or could not start,
                      the verdict on a lost link named it) */
  int interrupted; /* a stop signal (SIGINT, SIGTERM, SIGHUP) ended it */
  /* Host updates to announce to the ranks (HP_MSG_HOSTS_UPDATED to every
   * horad): another thread raises it (elastic.c's discovery), the job
   * sends one announcement per step, within a quarter of a second. */
  _Atomic int hosts_changed;
  int restart; /* a rank left with HR_EXIT_RESTART after an announcement */
  /* Re-forming in place (elastic_in_place): a rank or host failure leaves
   * out the hosts to blame and the job goes on on the others, their ranks
   * numbered anew (job.c's reform()), while at least min_np ranks are
   * left and resets_left allows (< 0: no limit). left_out(arg, host) is
   * told of each host left out; reforms counts the re-formings. */
  int in_place, min_np, resets_left, reforms;
  _Atomic int np_now; /* the ranks after the last re-forming (0: none) */
  void (*left_out)(void *arg, const char *host);
  void *arg;
};

/* Runs the job described by the options and layout, with `envp` as the
 * environment of horad and the ranks, and `horad` as the daemon's path.
 * Only local hosts are supported. Returns horarun's exit status: 0 when
 * every rank exited 0; the first failed rank's code (128+N for signal N,
 * 127/126 when it could not be started); 128+N when interrupted by signal
 * N; HR_EXIT_LAUNCHER when a horad failed. Borrows every argument; `out`
 * (may be NULL) says what ended the job. */
int hr_job_run(const struct hr_opts *o, const struct hr_layout *l, char **envp,
               const char *horad, struct hr_job_outcome *out);

#endif
