/* lhist.h -- a log-linear histogram of durations in nanoseconds: eight
 * buckets per power of two, so a value read back from its bucket is off by
 * at most 1/16 of itself. horad keeps one per rank of how late the rank
 * submits its operations; horarun merges those of every daemon and reads
 * medians from them. Values below 8 ns have a bucket each. */
#ifndef HORA_COMMON_LHIST_H
#define HORA_COMMON_LHIST_H

#include <stdint.h>

#define HC_LHIST_N 512u /* buckets: 64 powers of two, 8 each */

static inline unsigned hc_lhist_index(uint64_t v) {
  if (v < 8) return (unsigned)v;
  int msb = 63 - __builtin_clzll(v);
  return (unsigned)msb * 8u + (unsigned)((v >> (msb - 3)) & 7u);
}

/* The smallest value of bucket i, and one past its largest (saturated). */
static inline uint64_t hc_lhist_lower(unsigned i) {
  if (i < 24) return i < 8 ? i : 8;
  unsigned msb = i / 8, s = i % 8;
  return (uint64_t)(8 + s) << (msb - 3);
}
static inline uint64_t hc_lhist_upper(unsigned i) {
  if (i < 24) return i < 8 ? i + 1 : 8;
  uint64_t lo = hc_lhist_lower(i), w = (uint64_t)1 << (i / 8 - 3);
  return lo + w < lo ? UINT64_MAX : lo + w;
}

/* The median of the values counted in h[0..HC_LHIST_N) (n of them, n > 0),
 * as the middle of its bucket. */
static inline uint64_t hc_lhist_median(const uint64_t *h, uint64_t n) {
  uint64_t k = (n - 1) / 2, sum = 0;
  for (unsigned i = 0; i < HC_LHIST_N; i++) {
    sum += h[i];
    if (sum > k) {
      uint64_t lo = hc_lhist_lower(i), hi = hc_lhist_upper(i);
      return lo + (hi - lo) / 2;
    }
  }
  return 0;
}

#endif
