/* scale.c -- prescale and postscale factors, applied in place (horad's
 * operations; libhora's job of one). */
#include <stdint.h>

#include "half.h"

/* C's conversion truncates toward zero; out-of-range results saturate. */
#define SCALE_INT(T, lo, hi)                                                   \
  do {                                                                         \
    T *v = p;                                                                  \
    for (size_t i = 0; i < n; i++) {                                           \
      double x = (double)v[i] * f;                                             \
      v[i] = x != x ? 0 : x <= (double)(lo) ? (lo) : x >= (double)(hi) ? (hi)  \
                                                                    : (T)x;    \
    }                                                                          \
  } while (0)

void hc_scale(void *p, size_t n, hora_dtype_t dtype, double f) {
  if (f == 1.0) return;
  switch (dtype) {
  case HORA_UINT8: SCALE_INT(uint8_t, 0, UINT8_MAX); break;
  case HORA_INT8: SCALE_INT(int8_t, INT8_MIN, INT8_MAX); break;
  case HORA_INT16: SCALE_INT(int16_t, INT16_MIN, INT16_MAX); break;
  case HORA_INT32: SCALE_INT(int32_t, INT32_MIN, INT32_MAX); break;
  case HORA_INT64: SCALE_INT(int64_t, INT64_MIN, INT64_MAX); break;
  case HORA_FLOAT16: {
    uint16_t *v = p;
    for (size_t i = 0; i < n; i++) v[i] = hc_f2h(hc_h2f(v[i]) * (float)f);
    break;
  }
  case HORA_BFLOAT16: {
    uint16_t *v = p;
    for (size_t i = 0; i < n; i++) v[i] = hc_f2b(hc_b2f(v[i]) * (float)f);
    break;
  }
  case HORA_FLOAT32: {
    float *v = p;
    float g = (float)f;
    for (size_t i = 0; i < n; i++) v[i] *= g;
    break;
  }
  case HORA_FLOAT64: {
    double *v = p;
    for (size_t i = 0; i < n; i++) v[i] *= f;
    break;
  }
  default: break;
  }
}
