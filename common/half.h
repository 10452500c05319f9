/* half.h -- float16 and bfloat16 to and from float32, the one definition
 * that horad's kernels and libhora share. Branch-free (they vectorize in
 * the reductions' loops); exact where widening, round to nearest even
 * where narrowing. */
#ifndef HORA_COMMON_HALF_H
#define HORA_COMMON_HALF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hora.h"

static inline uint32_t hc_fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float hc_ffrom(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* c ? a : b for c in {0, 1}, with masks: a conditional expression would
 * become a branch around the float operation (which may trap, so cannot be
 * executed speculatively), and a branch stops vectorization. */
static inline uint32_t hc_sel(uint32_t c, uint32_t a, uint32_t b) {
  uint32_t m = 0u - c;
  return (a & m) | (b & ~m);
}

/* Exact; branch-free so that loops over it vectorize. Subnormal halfs are
 * normalized by an exact float subtraction (no subnormal float operand). */
static inline float hc_h2f(uint16_t h) {
  uint32_t a = (uint32_t)(h & 0x7fffu) << 13; /* exponent and mantissa */
  uint32_t e = a & 0x0f800000u;
  uint32_t norm = a + 0x38000000u;    /* rebias exponent: +(127 - 15) << 23 */
  uint32_t special = a + 0x70000000u; /* inf/NaN: exponent 31 -> 255 */
  /* 2^-14 * (1 + m/1024) - 2^-14 = m * 2^-24 */
  uint32_t sub = hc_fbits(hc_ffrom(a + 0x38800000u) - hc_ffrom(0x38800000u));
  uint32_t r = hc_sel(e == 0x0f800000u, special, hc_sel(e == 0, sub, norm));
  return hc_ffrom(r | (uint32_t)(h & 0x8000u) << 16);
}

/* Round to nearest, ties to even. Overflow gives inf; NaN stays NaN (quiet,
 * with the top bits of its payload and its sign). */
static inline uint16_t hc_f2h(float f) {
  uint32_t x = hc_fbits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t a = x & 0x7fffffffu;
  /* Normal half: rebias the exponent, then round the 13 dropped bits to
   * nearest even (0xfff plus the lowest kept bit); a carry out of the
   * mantissa bumps the exponent, up to inf. */
  uint32_t norm = (a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13;
  /* Subnormal half (|f| < 2^-14): adding 0.5 makes the float's ulp 2^-24,
   * the half's subnormal step, so the FPU rounds to nearest even for us. */
  uint32_t sub = hc_fbits(hc_ffrom(a) + 0.5f) - 0x3f000000u;
  uint32_t special =
      hc_sel(a > 0x7f800000u, 0x7e00u | ((a >> 13) & 0x3ffu), 0x7c00u);
  uint32_t r =
      hc_sel(a >= 0x47800000u, special, hc_sel(a < 0x38800000u, sub, norm));
  return (uint16_t)(r | sign);
}

static inline float hc_b2f(uint16_t b) {
  return hc_ffrom((uint32_t)b << 16);
}

/* Round to nearest, ties to even; NaN stays NaN (quiet, its sign and the
 * top of its payload). */
static inline uint16_t hc_f2b(float f) {
  uint32_t x = hc_fbits(f);
  uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  uint32_t nan = (x >> 16) | 0x40u;
  return (uint16_t)hc_sel((x & 0x7fffffffu) > 0x7f800000u, nan, r);
}

/* Multiplies n elements at p by f in place (prescale / postscale).
 * Integers: in float64, truncated toward zero, saturating (NaN gives 0);
 * float16 and bfloat16: in float32, rounded to nearest even; float32 and
 * float64 in their own type. */
void hc_scale(void *p, size_t n, hora_dtype_t dtype, double f);

#endif
