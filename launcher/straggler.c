/* straggler.c -- merging the daemons' lateness counts, and the rule that
 * names a straggler (straggler.h). */
#include "straggler.h"

#include "common.h"
#include "lhist.h"

int hr_late_merge(struct hp_late_rank *acc, int np,
                  const struct hp_late_rank *v, unsigned n, char *why,
                  size_t whylen) {
  for (unsigned i = 0; i < n; i++)
    if (v[i].rank < 0 || v[i].rank >= np) {
      hc_fmt(why, whylen, "lateness of rank %d, in a job of %d ranks",
             (int)v[i].rank, np);
      return -1;
    }
  for (unsigned i = 0; i < n; i++) {
    struct hp_late_rank *a = &acc[v[i].rank];
    a->rank = v[i].rank;
    a->ops += v[i].ops;
    a->last += v[i].last;
    for (unsigned b = 0; b < HC_LHIST_N; b++) a->hist[b] += v[i].hist[b];
  }
  return 0;
}

int hr_straggler(const struct hp_late_rank *acc, int np, int *pct,
                 unsigned long long *median_ns) {
  int best = -1;
  for (int r = 0; r < np; r++) {
    const struct hp_late_rank *a = &acc[r];
    if (a->ops < HR_STRAGGLER_MIN_OPS ||
        a->last * 100 < a->ops * HR_STRAGGLER_SHARE ||
        hc_lhist_median(a->hist, a->ops) < HR_STRAGGLER_MIN_NS)
      continue;
    if (best < 0 ||
        a->last * acc[best].ops > acc[best].last * a->ops)
      best = r;
  }
  if (best >= 0) {
    *pct = (int)(acc[best].last * 100 / acc[best].ops);
    *median_ns = hc_lhist_median(acc[best].hist, acc[best].ops);
  }
  return best;
}
