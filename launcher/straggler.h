/* straggler.h -- the end-of-job word on a rank that was late (job.c):
 * the daemons' lateness counts (LATENESS frames) merged per rank, and the
 * rule for naming a straggler. */
#ifndef HORA_LAUNCHER_STRAGGLER_H
#define HORA_LAUNCHER_STRAGGLER_H

#include <stddef.h>

#include "msg.h"

/* The rule: a rank is named when it took part in at least
 * HR_STRAGGLER_MIN_OPS measured operations (of two or more submitting
 * ranks), was the last to submit at least HR_STRAGGLER_SHARE percent of
 * them, and its median lateness is at least HR_STRAGGLER_MIN_NS; of
 * several, the one last most often. */
#define HR_STRAGGLER_MIN_OPS 20
#define HR_STRAGGLER_SHARE 50
#define HR_STRAGGLER_MIN_NS 1000000ull

/* Adds the n entries of v (one daemon's) into acc (np entries, by rank).
 * 0, or -1 when an entry's rank is not one of the job's (why). */
int hr_late_merge(struct hp_late_rank *acc, int np,
                  const struct hp_late_rank *v, unsigned n, char *why,
                  size_t whylen);
/* The straggler of acc by the rule above, or -1; *pct and *median_ns
 * say how often it was last and how late it was. */
int hr_straggler(const struct hp_late_rank *acc, int np, int *pct,
                 unsigned long long *median_ns);

#endif
