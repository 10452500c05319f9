/* test_adasum.c -- the Adasum kernels (daemon/adasum.c) against references
 * written here: the pair rule (orthogonal vectors sum, parallel ones
 * average, a zero vector or one too small to divide by leaves the other
 * alone), the tree's order for power-of-two and other counts, the mean,
 * widening and narrowing with scale factors (float16, bfloat16, NaN), and
 * which layouts horad refuses. */
#include <math.h>
#include <stdint.h>

#include "daemon.h"
#include "half.h"
#include "reduce.h"
#include "adasum.h"
#include "testlib.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static double rnd(void) { /* uniform in [-1, 1) */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  uint64_t x = (rng_state * 0x2545f4914f6cdd1dull) >> 11;
  return (double)x / 4503599627370496.0 - 1.0;
}

/* The reference: the formula, in long double. */
static void ref_pair(long double *a, const long double *b, int n) {
  long double d = 0, aa = 0, bb = 0;
  for (int i = 0; i < n; i++) {
    d += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  long double tiny = sqrtl((long double)2.2250738585072014e-308);
  long double ca = aa >= tiny ? 1 - d / (2 * aa) : 1;
  long double cb = bb >= tiny ? 1 - d / (2 * bb) : 1;
  for (int i = 0; i < n; i++) a[i] = ca * a[i] + cb * b[i];
}

/* The tree, by halves: the left half's result with the right half's
 * (for nv not a power of two, the left part is the largest power of two
 * below nv, as levels that pass a lone vector up give). */
static void ref_tree(long double *v, int lo, int hi, int n) {
  if (hi - lo < 2) return;
  int half = 1;
  while (2 * half < hi - lo) half *= 2;
  ref_tree(v, lo, lo + half, n);
  ref_tree(v, lo + half, hi, n);
  ref_pair(v + (size_t)lo * n, v + (size_t)(lo + half) * n, n);
}

static double max_rel(const double *got, const long double *want, int n) {
  long double norm = 0, err = 0;
  for (int i = 0; i < n; i++) {
    norm += want[i] * want[i];
    err += (got[i] - want[i]) * (got[i] - want[i]);
  }
  return norm ? (double)sqrtl(err / norm) : (double)sqrtl(err);
}

static void test_pair_rules(void) {
  double a[4] = {3, 0, 0, 0}, b[4] = {0, 4, 0, 0};
  hd_adasum_pair(a, b, 4, HORA_FLOAT64); /* orthogonal: the sum */
  CHECK(a[0] == 3 && a[1] == 4 && a[2] == 0);
  double p[3] = {1, 2, 3}, q[3] = {3, 6, 9};
  hd_adasum_pair(p, q, 3, HORA_FLOAT64); /* parallel: the mean */
  CHECK(fabs(p[0] - 2) < 1e-15 && fabs(p[1] - 4) < 1e-15 &&
        fabs(p[2] - 6) < 1e-15);
  double r[3] = {1, -2, 5}, z[3] = {0, 0, 0};
  hd_adasum_pair(r, z, 3, HORA_FLOAT64); /* a zero vector: unchanged */
  CHECK(r[0] == 1 && r[1] == -2 && r[2] == 5);
  hd_adasum_pair(z, r, 3, HORA_FLOAT64);
  CHECK(z[0] == 1 && z[1] == -2 && z[2] == 5);
  double t[2] = {1e-160, 0}, u[2] = {1, 1}; /* |t|^2 below sqrt(DBL_MIN) */
  hd_adasum_pair(t, u, 2, HORA_FLOAT64);
  CHECK(t[0] == 1e-160 + 1 && t[1] == 1);
  float f[2] = {1, 0}, g[2] = {-1, 0}; /* opposite: their mean, zero */
  hd_adasum_pair(f, g, 2, HORA_FLOAT32);
  CHECK(f[0] == 0 && f[1] == 0);
  float h[2] = {1e30f, 1e30f}, k[2] = {1e30f, -1e30f}; /* squares > FLT_MAX */
  hd_adasum_pair(h, k, 2, HORA_FLOAT32);
  CHECK(h[0] == 2e30f && h[1] == 0);
}

static void test_tree_vs_reference(void) {
  enum { N = 257, V = 8 };
  static double v[V * N];
  static float fv[V * N];
  static long double ref[V * N];
  for (int nv = 1; nv <= V; nv++) {
    for (int i = 0; i < nv * N; i++) {
      v[i] = rnd() * (1 + i % 7);
      fv[i] = (float)v[i];
      ref[i] = v[i];
    }
    /* correlated vectors, so that the coefficients are not all 1 */
    for (int j = 1; j < nv; j++)
      for (int i = 0; i < N; i++) {
        v[j * N + i] += 0.5 * v[i];
        fv[j * N + i] = (float)v[j * N + i];
        ref[j * N + i] = v[j * N + i];
      }
    ref_tree(ref, 0, nv, N);
    hd_adasum_tree(v, nv, N, HORA_FLOAT64);
    double e = max_rel(v, ref, N);
    if (e > 1e-13) TL_FAIL("float64 tree of %d: relative error %g", nv, e);
    for (int i = 0; i < nv * N; i++) ref[i] = (long double)fv[i];
    ref_tree(ref, 0, nv, N);
    hd_adasum_tree(fv, nv, N, HORA_FLOAT32);
    for (int i = 0; i < N; i++) v[i] = fv[i];
    e = max_rel(v, ref, N);
    if (e > 2e-6) TL_FAIL("float32 tree of %d: relative error %g", nv, e);
    tl_checks += 2;
  }
}

static void test_mean(void) {
  double v[6] = {1, 2, 3, 5, 8, 13}; /* three vectors of 2 */
  hd_adasum_mean(v, 3, 2, HORA_FLOAT64);
  CHECK(v[0] == 4 && v[1] == 20.0 / 3);
  float f[4] = {1, 2, 4, 8};
  hd_adasum_mean(f, 1, 4, HORA_FLOAT32); /* one: unchanged */
  CHECK(f[0] == 1 && f[3] == 8);
  hd_adasum_mean(f, 2, 2, HORA_FLOAT32);
  CHECK(f[0] == 2.5f && f[1] == 5);
}

static void test_widen_narrow(void) {
  CHECK_EQ_INT(hd_adasum_wtype(HORA_FLOAT64), HORA_FLOAT64);
  CHECK_EQ_INT(hd_adasum_wtype(HORA_FLOAT16), HORA_FLOAT32);
  CHECK_EQ_INT(hd_adasum_wtype(HORA_BFLOAT16), HORA_FLOAT32);
  CHECK(hd_adasum_dtype_ok(HORA_BFLOAT16) && !hd_adasum_dtype_ok(HORA_INT32) &&
        !hd_adasum_dtype_ok(HORA_UINT8));
  uint16_t h[3] = {hc_f2h(1.5f), hc_f2h(-2.0f), hc_f2h(65504.0f)};
  float w[3];
  hd_adasum_widen(w, h, 3, HORA_FLOAT16, 2.0);
  CHECK(w[0] == 3.0f && w[1] == -4.0f && w[2] == 131008.0f);
  uint16_t o[3];
  hd_adasum_narrow(o, w, 3, HORA_FLOAT16, 0.25);
  CHECK(o[0] == hc_f2h(0.75f) && o[1] == hc_f2h(-1.0f) &&
        o[2] == hc_f2h(32752.0f));
  float nan[2] = {NAN, 1e6f};
  hd_adasum_narrow(o, nan, 2, HORA_FLOAT16, 1.0);
  CHECK(o[0] == 0x7e00 && o[1] == 0x7c00); /* NaN; overflow to inf */
  hd_adasum_narrow(o, nan, 1, HORA_BFLOAT16, 1.0);
  CHECK(o[0] == 0x7fc0);
  uint16_t b[2] = {hc_f2b(3.0f), hc_f2b(-0.5f)};
  hd_adasum_widen(w, b, 2, HORA_BFLOAT16, 1.0);
  CHECK(w[0] == 3.0f && w[1] == -0.5f);
  float fz[2] = {7, 7};
  hd_adasum_widen(fz, NULL, 2, HORA_FLOAT32, 3.0); /* a joined rank */
  CHECK(fz[0] == 0 && fz[1] == 0);
  double d[2] = {1, 2}, dd[2];
  hd_adasum_widen(dd, d, 2, HORA_FLOAT64, 0.5);
  CHECK(dd[0] == 0.5 && dd[1] == 1);
  float fs[2] = {1, 2}, fo[2];
  hd_adasum_narrow(fo, fs, 2, HORA_FLOAT32, 3.0);
  CHECK(fo[0] == 3 && fo[1] == 6);
}

static void test_refuse(void) {
  struct hd_comm c;
  char why[256];
  memset(&c, 0, sizeof c);
  c.id = 3;
  c.size = 4;
  c.nhosts = 3;
  CHECK_EQ_INT(hd_adasum_refuse(&c, 0, why, sizeof why), 0);
  CHECK_EQ_INT(hd_adasum_refuse(&c, 1, why, sizeof why), 1);
  CHECK(strstr(why, "3 hosts, not a power of two") != NULL);
  c.size = 6;
  c.nhosts = 2;
  CHECK_EQ_INT(hd_adasum_refuse(&c, 0, why, sizeof why), 1);
  CHECK(strstr(why, "process set 3 has 6 ranks, not a power of two") != NULL);
  CHECK_EQ_INT(hd_adasum_refuse(&c, 1, why, sizeof why), 0);
  c.size = 1;
  c.nhosts = 1;
  CHECK_EQ_INT(hd_adasum_refuse(&c, 0, why, sizeof why), 0);
  CHECK_EQ_INT(hd_adasum_refuse(&c, 1, why, sizeof why), 0);
  CHECK_EQ_STR(hora_op_name(HORA_ADASUM), "adasum");
}

int main(void) {
  RUN(test_pair_rules);
  RUN(test_tree_vs_reference);
  RUN(test_mean);
  RUN(test_widen_narrow);
  RUN(test_refuse);
  TL_EXIT();
}
