/* elastic.h -- an elastic job: started again on the usable hosts after a
 * failure (elastic.c). */
#ifndef HORA_LAUNCHER_ELASTIC_H
#define HORA_LAUNCHER_ELASTIC_H

#include "opts.h"

/* 1 when the options make the job elastic: --min-np, --max-np or
 * --host-discovery-script (flag, config or environment). */
int hr_elastic_wanted(const struct hr_opts *o);

/* Checks the elastic knobs: a --blacklist-cooldown-range that does not
 * read as MIN MAX, or a flag of an elastic job's (--slots-per-host,
 * --elastic-timeout, --reset-limit, --blacklist-cooldown-range) given to a
 * job that is not elastic, is a usage error. Returns 0 or the exit status
 * after printing the error. */
int hr_elastic_check(const struct hr_opts *o);

/* Runs the job elastically (see elastic.c) with `envp` as the environment
 * of horad and the ranks (HORA_ELASTIC_DIR and HORA_ELASTIC_RESETS added),
 * and `horad` as the daemon's path. Returns horarun's exit status: 0 when
 * a start ended with every rank exiting 0; else the last start's status
 * (as hr_job_run()), HR_EXIT_LAUNCHER when too few hosts were left, or a
 * usage error's. Sets o->np to each start's number of ranks. */
int hr_elastic_run(struct hr_opts *o, char **envp, const char *horad);

#endif
