/* adasum.c -- the Adasum combination of gradients (hora.h, HORA_ADASUM).
 *
 * Vectors are combined in a working type, float64 for float64 tensors and
 * float32 for the others (float16 and bfloat16 are rounded once, at the
 * end); dot products and squared norms are summed in double. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "daemon.h"
#include "half.h"
#include "reduce.h"
#include "adasum.h"

int hd_adasum_wtype(int dtype) {
  return dtype == HORA_FLOAT64 ? HORA_FLOAT64 : HORA_FLOAT32;
}

int hd_adasum_dtype_ok(int dtype) {
  return dtype == HORA_FLOAT16 || dtype == HORA_BFLOAT16 ||
         dtype == HORA_FLOAT32 || dtype == HORA_FLOAT64;
}

static int pow2(int n) { return n > 0 && (n & (n - 1)) == 0; }

int hd_adasum_refuse(const struct hd_comm *c, int hier, char *why,
                     size_t len) {
  if (hier && !pow2(c->nhosts)) {
    hc_fmt(why, len, "hierarchical Adasum (HOROVOD_HIERARCHICAL_ALLREDUCE) "
           "combines hosts pairwise: process set %u spans %d hosts, not a "
           "power of two", c->id, c->nhosts);
    return 1;
  }
  if (!hier && !pow2(c->size)) {
    hc_fmt(why, len, "Adasum combines ranks pairwise: process set %u has "
           "%d ranks, not a power of two", c->id, c->size);
    return 1;
  }
  return 0;
}

void hd_adasum_widen(void *dst, const void *src, uint64_t n, int dtype,
                     double scale) {
  if (hd_adasum_wtype(dtype) == HORA_FLOAT64) {
    double *o = dst;
    if (!src) memset(o, 0, n * sizeof *o);
    else if (scale == 1.0) memcpy(o, src, n * sizeof *o);
    else
      for (uint64_t i = 0; i < n; i++) o[i] = ((const double *)src)[i] * scale;
    return;
  }
  float *o = dst;
  if (!src) {
    memset(o, 0, n * sizeof *o);
    return;
  }
  if (dtype == HORA_FLOAT32 && scale == 1.0) {
    memcpy(o, src, n * sizeof *o);
    return;
  }
  const uint16_t *h = src;
  for (uint64_t i = 0; i < n; i++) {
    double v = dtype == HORA_FLOAT32   ? ((const float *)src)[i]
               : dtype == HORA_FLOAT16 ? hc_h2f(h[i])
                                       : hc_b2f(h[i]);
    o[i] = (float)(v * scale);
  }
}

void hd_adasum_narrow(void *dst, const void *src, uint64_t n, int dtype,
                      double scale) {
  if (dtype == HORA_FLOAT64) {
    const double *s = src;
    double *o = dst;
    for (uint64_t i = 0; i < n; i++) o[i] = s[i] * scale;
    return;
  }
  const float *s = src;
  if (dtype == HORA_FLOAT32) {
    float *o = dst;
    if (scale == 1.0) memcpy(o, s, n * sizeof *o);
    else
      for (uint64_t i = 0; i < n; i++) o[i] = (float)(s[i] * scale);
    return;
  }
  uint16_t *o = dst;
  for (uint64_t i = 0; i < n; i++) {
    float f = scale == 1.0 ? s[i] : (float)(s[i] * scale);
    o[i] = f != f ? (dtype == HORA_FLOAT16 ? 0x7e00 : 0x7fc0)
           : dtype == HORA_FLOAT16 ? hc_f2h(f)
                                   : hc_f2b(f);
  }
}

/* The coefficients of a and b: 1 - a.b / (2 |x|^2), or 1 where |x|^2 is
 * too small to divide by (a zero vector leaves the other unchanged). */
static void coeffs(double dot, double aa, double bb, double *ca,
                   double *cb) {
  static const double tiny = 1.4916681462400413e-154; /* sqrt(DBL_MIN) */
  *ca = aa >= tiny ? 1.0 - dot / aa * 0.5 : 1.0;
  *cb = bb >= tiny ? 1.0 - dot / bb * 0.5 : 1.0;
}

void hd_adasum_pair(void *a, const void *b, uint64_t n, int wtype) {
  double dot = 0, aa = 0, bb = 0, ca, cb;
  if (wtype == HORA_FLOAT64) {
    double *x = a;
    const double *y = b;
    for (uint64_t i = 0; i < n; i++) {
      dot += x[i] * y[i];
      aa += x[i] * x[i];
      bb += y[i] * y[i];
    }
    coeffs(dot, aa, bb, &ca, &cb);
    for (uint64_t i = 0; i < n; i++) x[i] = ca * x[i] + cb * y[i];
    return;
  }
  float *x = a;
  const float *y = b;
  for (uint64_t i = 0; i < n; i++) {
    double u = x[i], v = y[i];
    dot += u * v;
    aa += u * u;
    bb += v * v;
  }
  coeffs(dot, aa, bb, &ca, &cb);
  for (uint64_t i = 0; i < n; i++) x[i] = (float)(ca * x[i] + cb * y[i]);
}

void hd_adasum_tree(void *v, int nv, uint64_t n, int wtype) {
  size_t vb = (size_t)n * hora_dtype_size(wtype);
  unsigned char *b = v;
  for (int s = 1; s < nv; s *= 2)
    for (int i = 0; i + s < nv; i += 2 * s)
      hd_adasum_pair(b + (size_t)i * vb, b + (size_t)(i + s) * vb, n, wtype);
}

void hd_adasum_mean(void *v, int nv, uint64_t n, int wtype) {
  if (nv <= 1) return;
  if (wtype == HORA_FLOAT64) {
    double *o = v;
    for (uint64_t i = 0; i < n; i++) {
      double s = o[i];
      for (int k = 1; k < nv; k++) s += o[(size_t)k * n + i];
      o[i] = s / nv;
    }
    return;
  }
  float *o = v;
  for (uint64_t i = 0; i < n; i++) {
    double s = o[i];
    for (int k = 1; k < nv; k++) s += o[(size_t)k * n + i];
    o[i] = (float)(s / nv);
  }
}
