/* test_reduce.c -- hc_reduce() and the float16/bfloat16 conversions against
 * straightforward references: every dtype x op, 1..8 sources, sizes that
 * cross block boundaries, in place and out of place.
 *
 *   test_reduce           run the tests
 *   test_reduce bench [MiB]   throughput of hc_reduce beside memcpy
 *                             (float16/bfloat16 on both kernels, where
 *                             the CPU has the AVX2/F16C ones)
 *
 * HORA_REDUCE_PORTABLE=1 makes hc_reduce use its portable float16/bfloat16
 * kernels; the tests then check those (test_fast_vs_portable compares the
 * two either way). */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "half.h"
#include "reduce.h"
#include "testlib.h"

/* ---- helpers ------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545f4914f6cdd1dull;
}

static uint32_t fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float ffrom(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint64_t dbits(double d) {
  uint64_t u;
  memcpy(&u, &d, 8);
  return u;
}

/* ---- reference conversions (double arithmetic, no bit tricks) ------------ */

static float ref_h2f_slow(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0    ? ldexp(m, -24)
             : e == 31 ? (m ? NAN : INFINITY)
                       : ldexp(1024 + m, e - 25);
  return (float)((h & 0x8000) ? -v : v);
}

static float ref_b2f_slow(uint16_t b) {
  int e = (b >> 7) & 255, m = b & 127;
  double v = e == 0     ? ldexp(m, -133)
             : e == 255 ? (m ? NAN : INFINITY)
                        : ldexp(128 + m, e - 134);
  return (float)((b & 0x8000) ? -v : v);
}

/* The same through tables made once (ldexp is slow). */
static float h2f_tab[65536], b2f_tab[65536];
static void make_tables(void) {
  for (uint32_t i = 0; i < 65536; i++) {
    h2f_tab[i] = ref_h2f_slow((uint16_t)i);
    b2f_tab[i] = ref_b2f_slow((uint16_t)i);
  }
}
static float ref_h2f(uint16_t h) {
  return h2f_tab[h];
}
static float ref_b2f(uint16_t b) {
  return b2f_tab[b];
}

/* Rounds |f| to a format with `mant` stored mantissa bits, minimum normal
 * exponent `emin` and all-ones exponent `einf`; NaN gives the canonical
 * quiet NaN. Uses nearbyint (ties to even in the default rounding mode) on
 * an exactly scaled double. */
static uint16_t ref_round(float f, int mant, int emin, unsigned einf) {
  uint16_t sign = (fbits(f) >> 31) ? 0x8000 : 0;
  unsigned inf = einf << mant;
  double v = fabs((double)f);
  if (isnan(v)) return sign | inf | (1u << (mant - 1));
  if (v == 0) return sign;
  int ex;
  frexp(v, &ex);
  int e = ex - 1; /* v in [2^e, 2^(e+1)) */
  double bits;
  if (e < emin) {
    bits =
        nearbyint(ldexp(v, mant - emin)); /* in units of the subnormal step */
  } else {
    double r = nearbyint(ldexp(v, mant - e)); /* in [2^mant, 2^(mant+1)] */
    bits = ldexp(e - emin + 1, mant) + (r - ldexp(1, mant));
  }
  return sign | (uint16_t)(bits >= inf ? inf : bits);
}
static uint16_t ref_f2h(float f) {
  return ref_round(f, 10, -14, 31);
}
static uint16_t ref_f2b(float f) {
  return ref_round(f, 7, -126, 255);
}

static int h_isnan(uint16_t h) {
  return (h & 0x7fff) > 0x7c00;
}
static int b_isnan(uint16_t b) {
  return (b & 0x7fff) > 0x7f80;
}

/* ---- conversion tests ---------------------------------------------------- */

static void test_half_all(void) {
  int bad = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = hc_h2f((unsigned short)h), r = ref_h2f((uint16_t)h);
    uint32_t want = fbits(r);
    if (h_isnan((uint16_t)h)) /* payload and sign kept */
      want = (h & 0x8000u) << 16 | 0x7f800000u | (h & 0x3ffu) << 13;
#ifdef __FLT16_MAX__
    _Float16 x;
    uint16_t hb = (uint16_t)h;
    memcpy(&x, &hb, 2);
    if (!h_isnan((uint16_t)h) && fbits((float)x) != want && bad++ < 5)
      TL_FAIL("half 0x%04x: _Float16 gives %08x, want %08x", h, fbits((float)x),
              want);
#endif
    if (fbits(f) != want && bad++ < 5)
      TL_FAIL("half 0x%04x -> %08x, want %08x", h, fbits(f), want);
    unsigned short back = hc_f2h(f);
    unsigned short wantb =
        h_isnan((uint16_t)h) ? (unsigned short)(h | 0x200) : (unsigned short)h;
    if (back != wantb && bad++ < 5)
      TL_FAIL("half 0x%04x round trip -> 0x%04x", h, back);
  }
  CHECK_EQ_INT(bad, 0);
}

static void test_bf16_all(void) {
  int bad = 0;
  for (uint32_t b = 0; b < 65536; b++) {
    float f = hc_b2f((unsigned short)b);
    if (fbits(f) != b << 16 && bad++ < 5)
      TL_FAIL("bf16 0x%04x -> %08x", b, fbits(f));
    if (!b_isnan((uint16_t)b) && fbits(f) != fbits(ref_b2f((uint16_t)b)) &&
        bad++ < 5)
      TL_FAIL("bf16 0x%04x -> %g, ref %g", b, f, ref_b2f((uint16_t)b));
    unsigned short back = hc_f2b(f);
    unsigned short wantb =
        b_isnan((uint16_t)b) ? (unsigned short)(b | 0x40) : (unsigned short)b;
    if (back != wantb && bad++ < 5)
      TL_FAIL("bf16 0x%04x round trip -> 0x%04x", b, back);
  }
  CHECK_EQ_INT(bad, 0);
}

/* Compares one float's conversion with the references; returns 1 if bad. */
static int check_f2h(float f) {
  uint16_t got = hc_f2h(f), want = ref_f2h(f);
  int bad = h_isnan(want) ? !h_isnan(got) || (got & 0x8000) != (want & 0x8000)
                          : got != want;
#ifdef __FLT16_MAX__
  _Float16 x = (_Float16)f;
  uint16_t hw;
  memcpy(&hw, &x, 2);
  if (!h_isnan(hw) && hw != want) bad = 1;
#endif
  if (bad)
    TL_FAIL("float %a (%08x) -> half 0x%04x, want 0x%04x", f, fbits(f), got,
            want);
  return bad;
}

static int check_f2b(float f) {
  uint16_t got = hc_f2b(f), want = ref_f2b(f);
  int bad = b_isnan(want) ? !b_isnan(got) || (got & 0x8000) != (want & 0x8000)
                          : got != want;
  if (bad)
    TL_FAIL("float %a (%08x) -> bf16 0x%04x, want 0x%04x", f, fbits(f), got,
            want);
  return bad;
}

/* Every representable value, the midpoints to its successor and their
 * float neighbours, both signs; then a sweep and random floats. */
static void test_float_to_narrow(int bf16) {
  int bad = 0;
  float (*to_f)(uint16_t) = bf16 ? ref_b2f : ref_h2f;
  int (*check)(float) = bf16 ? check_f2b : check_f2h;
  uint16_t inf = bf16 ? 0x7f80 : 0x7c00;
  for (uint16_t v = 0; v < inf && bad < 10; v++) {
    double lo = to_f(v), hi = v + 1 == inf ? (bf16 ? ldexp(1, 128) : 65536.0)
                                           : (double)to_f((uint16_t)(v + 1));
    float mid = (float)((lo + hi) / 2); /* exact: one more bit */
    float t[] = {(float)lo, mid, nextafterf(mid, 0), nextafterf(mid, INFINITY)};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
      bad += check(t[i]) + check(-t[i]);
  }
  for (uint64_t u = 0; u < (1ull << 32) && bad < 10; u += 4093)
    bad += check(ffrom((uint32_t)u));
  for (int i = 0; i < 1000000 && bad < 10; i++)
    bad += check(ffrom((uint32_t)rnd()));
  float special[] = {0.0f,          -0.0f,       INFINITY,      -INFINITY,
                     NAN,           -NAN,        3.4028235e38f, -3.4028235e38f,
                     1e-45f,        -1e-45f,     65504.0f,      65519.99f,
                     65520.0f,      65536.0f,    5.9604645e-8f, 2.9802322e-8f,
                     2.9802326e-8f, 8.940697e-8f};
  for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
    bad += check(special[i]);
  CHECK_EQ_INT(bad, 0);
}

static void test_f2h_rounding(void) {
  test_float_to_narrow(0);
}
static void test_f2b_rounding(void) {
  test_float_to_narrow(1);
}

/* Hand-picked cases: ties to even, overflow, subnormals, NaN. */
static void test_f2h_cases(void) {
  CHECK_EQ_INT(hc_f2h(1.0f), 0x3c00);
  CHECK_EQ_INT(hc_f2h(1.0f + 0x1p-11f), 0x3c00); /* tie, even */
  CHECK_EQ_INT(hc_f2h(1.0f + 0x1p-10f + 0x1p-11f), 0x3c02);
  CHECK_EQ_INT(hc_f2h(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
  CHECK_EQ_INT(hc_f2h(65504.0f), 0x7bff);
  CHECK_EQ_INT(hc_f2h(65519.0f), 0x7bff);
  CHECK_EQ_INT(hc_f2h(65520.0f), 0x7c00); /* tie to even: inf */
  CHECK_EQ_INT(hc_f2h(1e10f), 0x7c00);
  CHECK_EQ_INT(hc_f2h(-1e10f), 0xfc00);
  CHECK_EQ_INT(hc_f2h(0x1p-24f), 0x0001);
  CHECK_EQ_INT(hc_f2h(0x1p-25f), 0x0000); /* tie to even: 0 */
  CHECK_EQ_INT(hc_f2h(0x1.8p-24f), 0x0002);
  CHECK_EQ_INT(hc_f2h(0x1p-25f + 0x1p-40f), 0x0001);
  CHECK_EQ_INT(hc_f2h(-0x1p-26f), 0x8000);
  CHECK_EQ_INT(hc_f2h(0x1.ffcp-15f), 0x0400); /* tie: up to normal */
  CHECK_EQ_INT(hc_f2h(-0.0f), 0x8000);
  CHECK(h_isnan(hc_f2h(NAN)));
  CHECK(h_isnan(hc_f2h(ffrom(0x7f800001u)))); /* payload low bits */
  CHECK_EQ_INT(hc_f2h(ffrom(0xff800001u)) & 0x8000, 0x8000);
  CHECK_EQ_INT(hc_f2b(1.0f + 0x1p-8f), 0x3f80);
  CHECK_EQ_INT(hc_f2b(1.0f + 0x1p-7f + 0x1p-8f), 0x3f82);
  CHECK_EQ_INT(hc_f2b(3.4028235e38f), 0x7f80); /* rounds to inf */
  CHECK_EQ_INT(hc_f2b(ffrom(0x7f7f7fffu)), 0x7f7f);
  CHECK_EQ_INT(hc_f2b(ffrom(0x00008000u)), 0x0000); /* tie, even */
  CHECK_EQ_INT(hc_f2b(ffrom(0x00018000u)), 0x0002);
  CHECK(b_isnan(hc_f2b(ffrom(0x7f800001u)))); /* not inf */
  CHECK(b_isnan(hc_f2b(ffrom(0xffffffffu))));
}

/* ---- reference reduction ------------------------------------------------- */

static int is_float(hora_dtype_t t) {
  return t >= HORA_FLOAT16;
}

/* Loads element i as a signed (uint8: unsigned) integer. */
static int64_t ld_int(hora_dtype_t t, const void *p, size_t i) {
  switch (t) {
  case HORA_UINT8:
    return ((const uint8_t *)p)[i];
  case HORA_INT8:
    return ((const int8_t *)p)[i];
  case HORA_INT16:
    return ((const int16_t *)p)[i];
  case HORA_INT32:
    return ((const int32_t *)p)[i];
  default:
    return ((const int64_t *)p)[i];
  }
}

static void st_int(hora_dtype_t t, void *p, size_t i, uint64_t v) {
  size_t es = hora_dtype_size(t);
  unsigned char b[8];
  for (size_t k = 0; k < es; k++)
    b[k] = (unsigned char)(v >> (8 * k));
  memcpy((unsigned char *)p + i * es, b, es); /* little-endian hosts */
}

static int64_t to_s64(uint64_t u) {
  return u <= INT64_MAX ? (int64_t)u : -(int64_t)(~u) - 1;
}

static uint64_t ref_int(hora_dtype_t t, hora_op_t op, const void *const *s,
                        int nsrc, size_t i, int div) {
  uint64_t acc = (uint64_t)ld_int(t, s[0], i);
  int64_t mm = ld_int(t, s[0], i);
  for (int k = 1; k < nsrc; k++) {
    int64_t v = ld_int(t, s[k], i);
    if (op == HORA_SUM || op == HORA_AVERAGE) acc += (uint64_t)v;
    if (op == HORA_PRODUCT) acc *= (uint64_t)v;
    if (op == HORA_MIN && v < mm) mm = v;
    if (op == HORA_MAX && v > mm) mm = v;
  }
  if (op == HORA_MIN || op == HORA_MAX) return (uint64_t)mm;
  if (op == HORA_AVERAGE) return (uint64_t)(to_s64(acc) / div);
  return acc;
}

/* Loads element i of a float dtype as double (f16/bf16/f32 exactly). */
static double ld_flt(hora_dtype_t t, const void *p, size_t i) {
  switch (t) {
  case HORA_FLOAT16:
    return ref_h2f(((const uint16_t *)p)[i]);
  case HORA_BFLOAT16:
    return ref_b2f(((const uint16_t *)p)[i]);
  case HORA_FLOAT32:
    return ((const float *)p)[i];
  default:
    return ((const double *)p)[i];
  }
}

#define REF_FOLD(T)                                                            \
  do {                                                                         \
    T a = (T)ld_flt(t, s[0], i);                                               \
    for (int k = 1; k < nsrc; k++) {                                           \
      T v = (T)ld_flt(t, s[k], i);                                             \
      if (op == HORA_SUM || op == HORA_AVERAGE)                                \
        a = a + v;                                                             \
      else if (op == HORA_PRODUCT)                                             \
        a = a * v;                                                             \
      else if (isnan(a) || isnan(v))                                           \
        a = NAN;                                                               \
      else if (op == HORA_MIN)                                                 \
        a = v < a ? v : a;                                                     \
      else                                                                     \
        a = v > a ? v : a;                                                     \
    }                                                                          \
    if (op == HORA_AVERAGE) a = a / (T)div;                                    \
    return a;                                                                  \
  } while (0)

/* float16/bfloat16/float32 fold in float, float64 in double. */
static float ref_flt32(hora_dtype_t t, hora_op_t op, const void *const *s,
                       int nsrc, size_t i, int div) {
  REF_FOLD(float);
}
static double ref_flt64(hora_dtype_t t, hora_op_t op, const void *const *s,
                        int nsrc, size_t i, int div) {
  REF_FOLD(double);
}

static void ref_reduce(void *out, const void *const *s, int nsrc, size_t n,
                       hora_dtype_t t, hora_op_t op, int div) {
  for (size_t i = 0; i < n; i++) {
    if (!is_float(t)) {
      st_int(t, out, i, ref_int(t, op, s, nsrc, i, div));
      continue;
    }
    float f = t == HORA_FLOAT64 ? 0 : ref_flt32(t, op, s, nsrc, i, div);
    if (t == HORA_FLOAT16) ((uint16_t *)out)[i] = ref_f2h(f);
    if (t == HORA_BFLOAT16) ((uint16_t *)out)[i] = ref_f2b(f);
    if (t == HORA_FLOAT32) ((float *)out)[i] = f;
    if (t == HORA_FLOAT64)
      ((double *)out)[i] = ref_flt64(t, op, s, nsrc, i, div);
  }
}

/* Index of the first element where got and want differ, or n. NaNs match
 * any NaN; for MIN/MAX +0 and -0 match each other. */
static size_t first_diff(const void *got, const void *want, size_t n,
                         hora_dtype_t t, hora_op_t op) {
  size_t es = hora_dtype_size(t);
  int mm = op == HORA_MIN || op == HORA_MAX;
  if (!memcmp(got, want, n * es)) return n;
  for (size_t i = 0; i < n; i++) {
    const unsigned char *g = (const unsigned char *)got + i * es,
                        *w = (const unsigned char *)want + i * es;
    if (!memcmp(g, w, es)) continue;
    if (!is_float(t)) return i;
    double a = ld_flt(t, g, 0), b = ld_flt(t, w, 0);
    if (isnan(a) && isnan(b)) continue;
    if (mm && a == 0 && b == 0) continue;
    return i;
  }
  return n;
}

/* ---- test data ----------------------------------------------------------- */

static const float specials[] = {0.0f,  -0.0f,   INFINITY, -INFINITY,
                                 NAN,   1e-40f,  -1e-45f,  3e38f,
                                 6e-5f, 65504.0f};

/* special_rate: per mille of special values. */
static void fill_pool(void *p, size_t n, hora_dtype_t t, int special_rate) {
  for (size_t i = 0; i < n; i++) {
    uint64_t r = rnd();
    int sp = special_rate && r % 1000 < (uint64_t)special_rate;
    float f = sp ? specials[(r >> 10) % (sizeof specials / sizeof *specials)]
                 : ldexpf((float)((int)(r >> 40 & 0xffff) - 32768) / 4096.0f,
                          (int)(r >> 32 & 15) - 7);
    int any = special_rate && (r >> 20) % 4 == 0; /* any bit pattern */
    switch (t) {
    case HORA_FLOAT16:
      ((uint16_t *)p)[i] = any ? (uint16_t)(r >> 48) : ref_f2h(f);
      break;
    case HORA_BFLOAT16:
      ((uint16_t *)p)[i] = any ? (uint16_t)(r >> 48) : ref_f2b(f);
      break;
    case HORA_FLOAT32:
      ((float *)p)[i] = f;
      break;
    case HORA_FLOAT64:
      ((double *)p)[i] =
          sp ? (double)f : (double)f + ldexp((double)(r & 0xffff), -30);
      break;
    default:
      st_int(t, p, i, r >> 3 ^ r << 7);
      break;
    }
  }
}

/* Fills p with n values of dtype t, copied from a random place in a pool of
 * random values (made once per dtype and flag: generating every element
 * afresh would dominate the run time). With `special`, 2% of the float
 * values are special (zeros, inf, NaN, subnormals, huge) and a quarter of
 * the 16-bit float values are arbitrary bit patterns. */
#define POOL 65536
static void fill(void *p, size_t n, hora_dtype_t t, int special) {
  static unsigned char *pools[HORA_DTYPE_COUNT][2];
  unsigned char **pool = &pools[t][special != 0];
  size_t es = hora_dtype_size(t);
  if (!*pool) {
    *pool = malloc(POOL * es);
    fill_pool(*pool, POOL, t, special ? 20 : 0);
  }
  for (size_t i = 0; i < n;) {
    size_t at = rnd() % POOL, k = POOL - at < n - i ? POOL - at : n - i;
    memcpy((unsigned char *)p + i * es, *pool + at * es, k * es);
    i += k;
  }
}

/* ---- reduction tests ----------------------------------------------------- */

enum place {
  P_OUT1,    /* one fresh destination */
  P_OUTN,    /* nsrc fresh destinations */
  P_NONE,    /* no destination: sources stay as they were */
  P_INPLACE, /* dsts == srcs */
  P_LAST,    /* dsts = {srcs[nsrc-1], fresh} */
  P_REV,     /* dsts = srcs reversed */
  P_COUNT
};
static const char *const place_name[] = {"out1",    "outN",       "none",
                                         "inplace", "last+fresh", "reversed"};

struct rcase {
  hora_dtype_t t;
  hora_op_t op;
  int nsrc;
  size_t n;
  enum place pl;
  int divisor;
  int special; /* mix special values into the inputs (see fill()) */
};

/* Runs one case; returns 0 when it passed. */
static int run_case(const struct rcase *c) {
  size_t es = hora_dtype_size(c->t), bytes = c->n * es;
  void *src[8], *orig[8], *fresh[8], *dst[8];
  int ndst = 0, nsrc = c->nsrc;
  /* Exact sizes, so that ASan sees a single byte written past the end. */
  size_t alloc = bytes ? bytes : 1;
  void *want = malloc(alloc);
  for (int k = 0; k < nsrc; k++) {
    src[k] = malloc(alloc);
    orig[k] = malloc(alloc);
    fresh[k] = malloc(alloc);
    fill(orig[k], c->n, c->t, c->special);
    memcpy(src[k], orig[k], bytes);
    memset(fresh[k], 0xa5, bytes);
  }
  int div = c->divisor > 0 ? c->divisor : nsrc;
  ref_reduce(want, (const void *const *)orig, nsrc, c->n, c->t, c->op, div);
  switch (c->pl) {
  case P_OUT1:
    dst[ndst++] = fresh[0];
    break;
  case P_OUTN:
    for (int k = 0; k < nsrc; k++)
      dst[ndst++] = fresh[k];
    break;
  case P_NONE:
    break;
  case P_INPLACE:
    for (int k = 0; k < nsrc; k++)
      dst[ndst++] = src[k];
    break;
  case P_LAST:
    dst[ndst++] = src[nsrc - 1];
    dst[ndst++] = fresh[0];
    break;
  default:
    for (int k = 0; k < nsrc; k++)
      dst[ndst++] = src[nsrc - 1 - k];
    break;
  }
  hc_reduce(dst, ndst, (const void *const *)src, nsrc, c->n, c->t, c->op,
            c->divisor);
  int bad = 0;
  for (int d = 0; d < ndst && !bad; d++) {
    size_t i = first_diff(dst[d], want, c->n, c->t, c->op);
    if (i < c->n) {
      uint64_t g = 0, w = 0;
      memcpy(&g, (char *)dst[d] + i * es, es);
      memcpy(&w, (char *)want + i * es, es);
      TL_FAIL("%s %s nsrc=%d n=%zu %s div=%d: dst %d [%zu] = 0x%" PRIx64
              ", want 0x%" PRIx64,
              hora_dtype_name(c->t), hora_op_name(c->op), nsrc, c->n,
              place_name[c->pl], c->divisor, d, i, g, w);
      bad = 1;
    }
  }
  /* Sources that are not destinations are untouched. */
  for (int k = 0; k < nsrc && !bad; k++) {
    int isdst = 0;
    for (int d = 0; d < ndst; d++)
      isdst |= dst[d] == src[k];
    if (!isdst && memcmp(src[k], orig[k], bytes)) {
      TL_FAIL("%s %s nsrc=%d n=%zu %s: source %d was modified",
              hora_dtype_name(c->t), hora_op_name(c->op), nsrc, c->n,
              place_name[c->pl], k);
      bad = 1;
    }
  }
  for (int k = 0; k < nsrc; k++) {
    free(src[k]);
    free(orig[k]);
    free(fresh[k]);
  }
  free(want);
  tl_checks++;
  return bad;
}

static const int nsrcs[] = {1, 2, 3, 4, 8};

/* Every dtype x op x nsrc x placement on small and block-crossing sizes. */
static void test_matrix(void) {
  static const size_t sizes[] = {0, 1, 7, 4099};
  int fails = 0;
  for (int t = 0; t < HORA_DTYPE_COUNT; t++)
    for (int op = 0; op < HORA_OP_ELEMENTWISE; op++)
      for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (size_t j = 0; j < sizeof nsrcs / sizeof nsrcs[0]; j++)
          for (int pl = 0; pl < P_COUNT && fails < 20; pl++) {
            struct rcase c = {.t = (hora_dtype_t)t,
                              .op = (hora_op_t)op,
                              .nsrc = nsrcs[j],
                              .n = sizes[s],
                              .pl = (enum place)pl,
                              .special = 1};
            fails += run_case(&c);
          }
}

/* Sizes over many accumulator blocks for every dtype. */
static void test_medium(void) {
  int fails = 0;
  for (int t = 0; t < HORA_DTYPE_COUNT; t++)
    for (int op = 0; op < HORA_OP_ELEMENTWISE; op++)
      for (size_t j = 0; j < sizeof nsrcs / sizeof nsrcs[0]; j++)
        for (int pl = P_OUT1; pl <= P_INPLACE && fails < 20; pl += 3) {
          struct rcase c = {.t = (hora_dtype_t)t,
                            .op = (hora_op_t)op,
                            .nsrc = nsrcs[j],
                            .n = 40961,
                            .pl = (enum place)pl,
                            .special = 1};
          fails += run_case(&c);
        }
}

/* 1 MiB + 3 elements of float32 and float16. */
static void test_large(void) {
  static const hora_dtype_t types[] = {HORA_FLOAT32, HORA_FLOAT16};
  int fails = 0;
  for (size_t ti = 0; ti < 2; ti++)
    for (int op = 0; op < HORA_OP_ELEMENTWISE; op++)
      for (size_t j = 0; j < sizeof nsrcs / sizeof nsrcs[0]; j++)
        for (int pl = P_OUTN; pl <= P_INPLACE && fails < 10; pl += 2) {
          struct rcase c = {.t = types[ti],
                            .op = (hora_op_t)op,
                            .nsrc = nsrcs[j],
                            .n = (1u << 20) + 3,
                            .pl = (enum place)pl,
                            .special = 1};
          fails += run_case(&c);
        }
}

/* AVERAGE with an explicit divisor: equal to, above and below nsrc. */
static void test_divisor(void) {
  static const int divs[] = {1, 2, 3, 5, 7, 100};
  int fails = 0;
  for (int t = 0; t < HORA_DTYPE_COUNT; t++)
    for (size_t j = 0; j < sizeof nsrcs / sizeof nsrcs[0]; j++)
      for (size_t d = 0; d < sizeof divs / sizeof divs[0] && fails < 20; d++) {
        struct rcase c = {.t = (hora_dtype_t)t,
                          .op = HORA_AVERAGE,
                          .nsrc = nsrcs[j],
                          .n = 4099,
                          .pl = P_INPLACE,
                          .divisor = divs[d],
                          .special = 1};
        fails += run_case(&c);
        c.pl = P_OUT1;
        c.divisor = -divs[d]; /* negative: treated as 0, i.e. nsrc */
        c.n = 33;
        fails += run_case(&c);
      }
}

/* ---- hand-written reduction cases ---------------------------------------- */

/* Reduces one-element sources v[0..nsrc) of a 16-bit float dtype. */
static uint16_t red16(hora_dtype_t t, hora_op_t op, int nsrc,
                      const uint16_t *v) {
  uint16_t out = 0xdead;
  const void *s[8];
  for (int k = 0; k < nsrc; k++)
    s[k] = &v[k];
  void *d[1] = {&out};
  hc_reduce(d, 1, s, nsrc, 1, t, op, 0);
  return out;
}
#define R16(t, op, n, ...)                                                     \
  red16((t), (op), (n), (const uint16_t[]){__VA_ARGS__})

static void test_half_reduce_cases(void) {
  const hora_dtype_t H = HORA_FLOAT16, B = HORA_BFLOAT16;
  /* Accumulated in float, rounded once: 1 + 2^-11 + 2^-11 = 1 + 2^-10. */
  CHECK_EQ_INT(R16(H, HORA_SUM, 3, 0x3c00, 0x1000, 0x1000), 0x3c01);
  CHECK_EQ_INT(R16(H, HORA_SUM, 2, 0x3c00, 0x1000), 0x3c00); /* tie */
  CHECK_EQ_INT(R16(H, HORA_SUM, 2, 0x3c01, 0x1000), 0x3c02); /* tie */
  CHECK_EQ_INT(R16(H, HORA_SUM, 2, 0x7bff, 0x4c00), 0x7c00); /* 65504+16 */
  CHECK_EQ_INT(R16(H, HORA_SUM, 2, 0x7bff, 0x4b80), 0x7bff); /* +15 */
  CHECK_EQ_INT(R16(H, HORA_SUM, 3, 0x7bff, 0x7bff, 0xfbff), 0x7bff);
  CHECK_EQ_INT(R16(H, HORA_AVERAGE, 2, 0x7bff, 0x7bff), 0x7bff);
  CHECK_EQ_INT(R16(H, HORA_SUM, 2, 0x0001, 0x0001), 0x0002);
  CHECK_EQ_INT(R16(H, HORA_AVERAGE, 2, 0x0001, 0x0000), 0x0000);
  CHECK_EQ_INT(R16(H, HORA_AVERAGE, 2, 0x0003, 0x0000), 0x0002);
  CHECK_EQ_INT(R16(H, HORA_SUM, 2, 0x03ff, 0x0001), 0x0400);
  CHECK_EQ_INT(R16(H, HORA_PRODUCT, 2, 0x0200, 0x3800), 0x0100);
  CHECK_EQ_INT(R16(H, HORA_PRODUCT, 3, 0x5c00, 0x5c00, 0x5c00), 0x7c00);
  CHECK_EQ_INT(R16(H, HORA_SUM, 2, 0x8000, 0x8000), 0x8000); /* -0 */
  CHECK(h_isnan(R16(H, HORA_SUM, 2, 0x7c00, 0xfc00)));       /* inf-inf */
  CHECK(h_isnan(R16(H, HORA_SUM, 2, 0x3c00, 0x7e00)));
  CHECK(h_isnan(R16(H, HORA_MIN, 2, 0x7e00, 0x3c00)));
  CHECK(h_isnan(R16(H, HORA_MIN, 2, 0x3c00, 0x7e00)));
  CHECK(h_isnan(R16(H, HORA_MAX, 3, 0x3c00, 0x7d00, 0x4000)));
  CHECK(h_isnan(R16(H, HORA_MAX, 2, 0xfe00, 0xfc00)));
  CHECK_EQ_INT(R16(H, HORA_MIN, 3, 0x3c00, 0xfc00, 0x0001), 0xfc00);
  CHECK_EQ_INT(R16(H, HORA_MAX, 3, 0x3c00, 0x8001, 0x0001), 0x3c00);
  CHECK_EQ_INT(R16(B, HORA_SUM, 2, 0x3f80, 0x3b80), 0x3f80); /* tie */
  CHECK_EQ_INT(R16(B, HORA_SUM, 3, 0x3f80, 0x3b80, 0x3b80), 0x3f81);
  CHECK_EQ_INT(R16(B, HORA_SUM, 2, 0x3f81, 0x3b80), 0x3f82);
  CHECK_EQ_INT(R16(B, HORA_SUM, 2, 0x7f7f, 0x7b80), 0x7f80); /* to inf */
  CHECK_EQ_INT(R16(B, HORA_SUM, 2, 0x0001, 0x0001), 0x0002); /* subn. */
  CHECK_EQ_INT(R16(B, HORA_AVERAGE, 2, 0x0001, 0x0000), 0x0000);
  CHECK(b_isnan(R16(B, HORA_MIN, 2, 0x3f80, 0x7fc0)));
  CHECK(b_isnan(R16(B, HORA_SUM, 2, 0x7f80, 0xff80)));
}

static void test_float_cases(void) {
  float a[3] = {1.0f, NAN, -2.0f}, b[3] = {NAN, 3.0f, INFINITY}, o[3];
  const void *s[2] = {a, b};
  void *d[1] = {o};
  hc_reduce(d, 1, s, 2, 3, HORA_FLOAT32, HORA_MIN, 0);
  CHECK(isnan(o[0]) && isnan(o[1]) && o[2] == -2.0f);
  hc_reduce(d, 1, s, 2, 3, HORA_FLOAT32, HORA_MAX, 0);
  CHECK(isnan(o[0]) && isnan(o[1]) && o[2] == INFINITY);
  double x[2] = {1e308, -0.0}, y[2] = {1e308, -0.0}, z[2];
  const void *s2[2] = {x, y};
  void *d2[1] = {z};
  hc_reduce(d2, 1, s2, 2, 2, HORA_FLOAT64, HORA_SUM, 0);
  CHECK(isinf(z[0]) && dbits(z[1]) == dbits(-0.0));
  hc_reduce(d2, 1, s2, 2, 2, HORA_FLOAT64, HORA_AVERAGE, 0);
  CHECK(isinf(z[0])); /* the sum overflows before the division */
  CHECK(dbits(z[1]) == dbits(-0.0));
}

/* Reduces one-element integer sources v[0..nsrc) and returns the result
 * as a signed value (uint8 as unsigned). */
static int64_t red_int(hora_dtype_t t, hora_op_t op, int div, int nsrc,
                       const int64_t *v) {
  uint64_t in[8], out = 0; /* aligned for any element type */
  const void *s[8];
  for (int k = 0; k < nsrc; k++) {
    st_int(t, &in[k], 0, (uint64_t)v[k]);
    s[k] = &in[k];
  }
  void *d[1] = {&out};
  hc_reduce(d, 1, s, nsrc, 1, t, op, div);
  return ld_int(t, &out, 0);
}
#define RED1(T, dt, op, div, n, ...)                                           \
  red_int((dt), (op), (div), (n), (const int64_t[]){__VA_ARGS__})

static void test_int_cases(void) {
  /* Average: exact sum, then division toward zero. */
  CHECK_EQ_INT(RED1(int32_t, HORA_INT32, HORA_AVERAGE, 0, 3, -7, 0, 0), -2);
  CHECK_EQ_INT(RED1(int32_t, HORA_INT32, HORA_AVERAGE, 0, 2, -3, 0), -1);
  CHECK_EQ_INT(RED1(int32_t, HORA_INT32, HORA_AVERAGE, 0, 2, 3, 0), 1);
  CHECK_EQ_INT(RED1(int8_t, HORA_INT8, HORA_AVERAGE, 0, 3, -128, -128, -128),
               -128);
  CHECK_EQ_INT(RED1(int8_t, HORA_INT8, HORA_AVERAGE, 0, 3, 127, 127, -1), 84);
  CHECK_EQ_INT(RED1(uint8_t, HORA_UINT8, HORA_AVERAGE, 0, 2, 255, 255), 255);
  CHECK_EQ_INT(RED1(int16_t, HORA_INT16, HORA_AVERAGE, 4, 2, -32768, -1),
               -8192);
  CHECK_EQ_INT(
      RED1(int32_t, HORA_INT32, HORA_AVERAGE, 0, 2, INT32_MIN, INT32_MIN),
      INT32_MIN);
  CHECK_EQ_INT(RED1(int32_t, HORA_INT32, HORA_AVERAGE, 0, 4, INT32_MAX,
                    INT32_MAX, INT32_MAX, -5),
               1610612734);
  /* div < nsrc: the quotient does not fit and wraps like SUM would. */
  CHECK_EQ_INT(RED1(int8_t, HORA_INT8, HORA_AVERAGE, 1, 2, 100, 100), -56);
  /* int64: the sum wraps, then divides as a signed value. */
  CHECK_EQ_INT(
      RED1(int64_t, HORA_INT64, HORA_AVERAGE, 0, 2, INT64_MAX, INT64_MAX), -1);
  CHECK_EQ_INT(RED1(int64_t, HORA_INT64, HORA_AVERAGE, 0, 2, INT64_MIN, -1),
               INT64_MAX / 2);
  CHECK_EQ_INT(RED1(int64_t, HORA_INT64, HORA_AVERAGE, 0, 3, -10, 0, 0), -3);
  /* SUM and PRODUCT wrap modulo 2^bits. */
  CHECK_EQ_INT(RED1(int8_t, HORA_INT8, HORA_SUM, 0, 2, 100, 100), -56);
  CHECK_EQ_INT(RED1(uint8_t, HORA_UINT8, HORA_SUM, 0, 3, 200, 100, 1), 45);
  CHECK_EQ_INT(RED1(int16_t, HORA_INT16, HORA_PRODUCT, 0, 2, 300, 300), 24464);
  CHECK_EQ_INT(RED1(int16_t, HORA_INT16, HORA_PRODUCT, 0, 2, -32768, -1),
               -32768);
  CHECK_EQ_INT(RED1(uint8_t, HORA_UINT8, HORA_PRODUCT, 0, 2, 255, 255), 1);
  CHECK_EQ_INT(RED1(int32_t, HORA_INT32, HORA_SUM, 0, 2, INT32_MAX, 1),
               INT32_MIN);
  CHECK_EQ_INT(RED1(int32_t, HORA_INT32, HORA_PRODUCT, 0, 2, 65536, 65536), 0);
  CHECK_EQ_INT(RED1(int32_t, HORA_INT32, HORA_PRODUCT, 0, 2, INT32_MIN, -1),
               INT32_MIN);
  CHECK_EQ_INT(RED1(int64_t, HORA_INT64, HORA_SUM, 0, 2, INT64_MAX, 1),
               INT64_MIN);
  CHECK_EQ_INT(RED1(int64_t, HORA_INT64, HORA_PRODUCT, 0, 2, INT64_MIN, -1),
               INT64_MIN);
  CHECK_EQ_INT(RED1(int64_t, HORA_INT64, HORA_MIN, 0, 3, 5, INT64_MIN, -1),
               INT64_MIN);
  CHECK_EQ_INT(RED1(int8_t, HORA_INT8, HORA_MAX, 0, 3, -5, -128, -1), -1);
  CHECK_EQ_INT(RED1(uint8_t, HORA_UINT8, HORA_MIN, 0, 2, 200, 7), 7);
}

/* The same buffer twice among the sources, and as the destination. */
static void test_repeated_buffers(void) {
  float a[5] = {1, 2, 3, 4, 5}, o[5];
  const void *s[3] = {a, a, a};
  void *d[2] = {o, o};
  hc_reduce(d, 2, s, 3, 5, HORA_FLOAT32, HORA_SUM, 0);
  CHECK(o[0] == 3 && o[4] == 15);
  void *d2[1] = {a};
  hc_reduce(d2, 1, s, 2, 5, HORA_FLOAT32, HORA_PRODUCT, 0);
  CHECK(a[0] == 1 && a[1] == 4 && a[4] == 25);
  /* nsrc == 1 copies, also to the source itself. */
  int16_t b[3] = {1, -2, 3}, c[3] = {0};
  const void *s1[1] = {b};
  void *d1[2] = {b, c};
  hc_reduce(d1, 2, s1, 1, 3, HORA_INT16, HORA_MIN, 0);
  CHECK(c[0] == 1 && c[1] == -2 && c[2] == 3 && b[1] == -2);
  hc_reduce(d1, 2, s1, 1, 3, HORA_INT16, HORA_AVERAGE, 2);
  CHECK(c[0] == 0 && c[1] == -1 && c[2] == 1 && b[1] == -1);
  /* Nothing happens for count 0 or no destination. */
  hc_reduce(d1, 2, s1, 1, 0, HORA_INT16, HORA_SUM, 0);
  hc_reduce(d1, 0, s1, 1, 3, HORA_INT16, HORA_AVERAGE, 5);
  CHECK(b[0] == 0 && b[1] == -1 && b[2] == 1);
}

/* Two threads reduce the two halves of the same tensors at once. */
struct slice {
  float *s[3], *d;
  size_t off, n;
};
static void *slice_main(void *arg) {
  struct slice *sl = arg;
  const void *s[3] = {sl->s[0] + sl->off, sl->s[1] + sl->off,
                      sl->s[2] + sl->off};
  void *d[1] = {sl->d + sl->off};
  for (int r = 0; r < 20; r++)
    hc_reduce(d, 1, s, 3, sl->n, HORA_FLOAT32, HORA_SUM, 0);
  return NULL;
}

static void test_threads(void) {
  size_t n = 100003;
  float *a = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4),
        *o = malloc(n * 4);
  for (size_t i = 0; i < n; i++) {
    a[i] = (float)i;
    b[i] = 0.5f;
    c[i] = -(float)(i % 7);
  }
  struct slice sl[2] = {{{a, b, c}, o, 0, n / 2},
                        {{a, b, c}, o, n / 2, n - n / 2}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++)
    pthread_create(&th[i], NULL, slice_main, &sl[i]);
  for (int i = 0; i < 2; i++)
    pthread_join(th[i], NULL);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += o[i] != (float)i + 0.5f - (float)(i % 7);
  CHECK_EQ_INT(bad, 0);
  free(a);
  free(b);
  free(c);
  free(o);
}

/* ---- fast path (x86-64 AVX2/F16C) against the portable one --------------- */

/* Test hook in daemon/reduce.c: 0 forces the portable float16/bfloat16
 * kernels, 1 the AVX2/F16C ones where the build and the CPU have them, -1
 * changes nothing; returns whether the fast ones are in use. (The
 * environment variable HORA_REDUCE_PORTABLE=1, read once, forces the
 * portable ones for the whole process: the other tests then check those
 * against the references.) */

/* A 16-bit float (bf: bfloat16) for the comparisons: any bit pattern (NaNs
 * with every payload, signalling ones included, infinities, subnormals),
 * a listed special, a value with a short mantissa near 1 or near the
 * subnormal range (sums of those often fall exactly halfway between two
 * representable values, or overflow), or a plain random value. */
static uint16_t rand16(int bf) {
  static const uint16_t hsp[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00,
                                 0xfe00, 0x7c01, 0xfd55, 0x7bff, 0xfbff,
                                 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00},
                        bsp[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0,
                                 0xffc0, 0x7f81, 0xffa5, 0x7f7f, 0xff7f,
                                 0x0001, 0x8001, 0x007f, 0x0080, 0x3f80};
  uint64_t r = rnd();
  int mant = bf ? 7 : 10, bias = bf ? 127 : 15;
  uint16_t sign = (uint16_t)(r >> 63 << 15);
  switch (r % 5) {
  case 0:
    return (uint16_t)(r >> 32);
  case 1:
    return (bf ? bsp : hsp)[(r >> 8) % 15];
  case 2: { /* exponent near 1 (or the top of the range), a few bits */
    int e = bias - 3 + (int)((r >> 8) % 7);
    if ((r >> 16) % 8 == 0) e = 2 * bias - (int)((r >> 19) % 2);
    static const unsigned m[] = {0, 1, 2, 3, 0x200, 0x201, 0x3ff, 0x3fe};
    unsigned mm = m[(r >> 24) % 8] & ((1u << mant) - 1);
    return (uint16_t)(sign | (unsigned)e << mant | mm);
  }
  case 3: { /* a power of two below 1 that makes ties, or a subnormal */
    int e = bias - mant - 1 - (int)((r >> 8) % 3);
    if (e < 1 || (r >> 16) % 4 == 0) return (uint16_t)(sign | ((r >> 20) & 7));
    return (uint16_t)(sign | (unsigned)e << mant);
  }
  default: { /* finite, moderate */
    int e = bias - 4 + (int)((r >> 8) % 9);
    return (uint16_t)(sign | (unsigned)e << mant |
                      ((r >> 16) & ((1u << mant) - 1)));
  }
  }
}

/* One case run through both paths on the same data; `place`: 0 one fresh
 * destination, 1 in place (dsts == srcs), 2 dsts = {fresh, srcs[nsrc-1],
 * fresh again}. Returns 1 when the outputs differ anywhere. */
static int fast_case(hora_dtype_t t, hora_op_t op, int nsrc, size_t n,
                     int place, int divisor) {
  int bf = t == HORA_BFLOAT16;
  size_t bytes = n * 2;
  uint16_t *orig[8], *src[2][8], *fresh[2];
  for (int k = 0; k < nsrc; k++) {
    orig[k] = malloc(bytes);
    for (size_t i = 0; i < n; i++)
      orig[k][i] = rand16(bf);
  }
  int ndst = 0;
  void *dst[2][8];
  for (int path = 0; path < 2; path++) {
    for (int k = 0; k < nsrc; k++) {
      src[path][k] = malloc(bytes); /* exact sizes, for ASan */
      memcpy(src[path][k], orig[k], bytes);
    }
    fresh[path] = malloc(bytes);
    memset(fresh[path], 0xa5, bytes);
    ndst = 0;
    if (place == 1) {
      for (int k = 0; k < nsrc; k++)
        dst[path][ndst++] = src[path][k];
    } else {
      dst[path][ndst++] = fresh[path];
      if (place == 2) {
        dst[path][ndst++] = src[path][nsrc - 1];
        dst[path][ndst++] = fresh[path];
      }
    }
    hc_reduce_fast(path); /* 0: portable, 1: fast */
    hc_reduce(dst[path], ndst, (const void *const *)src[path], nsrc, n, t, op,
              divisor);
  }
  int bad = 0;
  for (int k = 0; k < nsrc && !bad; k++) /* every buffer, written or not */
    for (size_t i = 0; i < n && !bad; i++)
      if (src[0][k][i] != src[1][k][i]) {
        TL_FAIL("%s %s nsrc=%d n=%zu place=%d div=%d: src %d [%zu]: "
                "portable 0x%04x, fast 0x%04x",
                hora_dtype_name(t), hora_op_name(op), nsrc, n, place, divisor,
                k, i, src[0][k][i], src[1][k][i]);
        bad = 1;
      }
  for (size_t i = 0; i < n && !bad; i++)
    if (fresh[0][i] != fresh[1][i]) {
      uint16_t in[8];
      for (int k = 0; k < nsrc; k++)
        in[k] = orig[k][i];
      TL_FAIL("%s %s nsrc=%d n=%zu place=%d div=%d: [%zu]: portable 0x%04x, "
              "fast 0x%04x (inputs 0x%04x 0x%04x ...)",
              hora_dtype_name(t), hora_op_name(op), nsrc, n, place, divisor, i,
              fresh[0][i], fresh[1][i], in[0], nsrc > 1 ? in[1] : 0);
      bad = 1;
    }
  for (int path = 0; path < 2; path++) {
    for (int k = 0; k < nsrc; k++)
      free(src[path][k]);
    free(fresh[path]);
  }
  for (int k = 0; k < nsrc; k++)
    free(orig[k]);
  tl_checks++;
  return bad;
}

/* Bit-for-bit equality of the two paths for every op, both types, 1, 2, 3
 * and 8 sources, sizes with every tail length modulo the vector (8 elements)
 * and across the fast path's blocks (1024 elements). */
static void test_fast_vs_portable(void) {
  int was = hc_reduce_fast(-1);
  if (!hc_reduce_fast(1)) {
    printf("   (no AVX2/F16C kernels on this CPU or build: nothing to "
           "compare)\n");
    hc_reduce_fast(was);
    return;
  }
  static const size_t sizes[] = {1,  2,  3,  4,  5,    6,    7,    8,   9,
                                 15, 16, 17, 30, 1023, 1024, 1029, 3003};
  static const int ns[] = {1, 2, 3, 8};
  int fails = 0;
  for (int bf = 0; bf < 2; bf++)
    for (int op = 0; op < HORA_OP_ELEMENTWISE; op++)
      for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
          for (int place = 0; place < 3 && fails < 10; place++) {
            /* AVERAGE: the default divisor, and one that rounds. */
            int div = op == HORA_AVERAGE && (s + (size_t)place) % 2 ? 3 : 0;
            if (op == HORA_AVERAGE && ns[j] == 1 && !div) div = 7;
            fails += fast_case(bf ? HORA_BFLOAT16 : HORA_FLOAT16, (hora_op_t)op,
                               ns[j], sizes[s], place, div);
          }
  /* Every 16-bit pattern once: through SUM with -0 (x + -0 is x, a NaN
   * becomes the canonical one), MIN with itself (x, quieted) and PRODUCT
   * and AVERAGE with random values. */
  for (int bf = 0; bf < 2; bf++) {
    hora_dtype_t t = bf ? HORA_BFLOAT16 : HORA_FLOAT16;
    size_t n = 65536;
    uint16_t *a = malloc(n * 2), *b = malloc(n * 2), *o[2];
    for (size_t i = 0; i < n; i++)
      a[i] = (uint16_t)i;
    static const hora_op_t ops[] = {HORA_SUM, HORA_MIN, HORA_PRODUCT,
                                    HORA_AVERAGE};
    for (size_t k = 0; k < 4; k++) {
      for (size_t i = 0; i < n; i++)
        b[i] = k == 0 ? 0x8000 : k == 1 ? (uint16_t)i : rand16(bf);
      const void *s[2] = {a, b};
      for (int path = 0; path < 2; path++) {
        o[path] = malloc(n * 2);
        void *d[1] = {o[path]};
        hc_reduce_fast(path);
        hc_reduce(d, 1, s, 2, n, t, ops[k], 0);
      }
      size_t i = 0;
      while (i < n && o[0][i] == o[1][i])
        i++;
      if (i < n)
        TL_FAIL("%s %s all patterns: 0x%04x, 0x%04x: portable 0x%04x, fast "
                "0x%04x",
                hora_dtype_name(t), hora_op_name(ops[k]), a[i], b[i], o[0][i],
                o[1][i]);
      CHECK(i == n);
      free(o[0]);
      free(o[1]);
    }
    free(a);
    free(b);
  }
  hc_reduce_fast(was);
}

/* The NaN results, the same in both paths: SUM/PRODUCT/AVERAGE give the
 * canonical quiet NaN (positive), MIN/MAX the first NaN in source order,
 * quieted, with its sign and the top of its payload. */
static void nan_cases(void) {
  const hora_dtype_t H = HORA_FLOAT16, B = HORA_BFLOAT16;
  CHECK_EQ_INT(R16(H, HORA_SUM, 2, 0xfe05, 0x3c00), 0x7e00);
  CHECK_EQ_INT(R16(H, HORA_SUM, 2, 0x7c00, 0xfc00), 0x7e00); /* inf-inf */
  CHECK_EQ_INT(R16(H, HORA_SUM, 3, 0x3c00, 0xfd00, 0x7f00), 0x7e00);
  CHECK_EQ_INT(R16(H, HORA_PRODUCT, 2, 0x0000, 0xfc00), 0x7e00); /* 0*inf */
  CHECK_EQ_INT(R16(H, HORA_AVERAGE, 2, 0xfc01, 0x3c00), 0x7e00);
  CHECK_EQ_INT(R16(H, HORA_SUM, 1, 0xfc01), 0xfc01);         /* a copy */
  CHECK_EQ_INT(R16(H, HORA_MIN, 2, 0x7d01, 0x3c00), 0x7f01); /* quieted */
  CHECK_EQ_INT(R16(H, HORA_MIN, 3, 0x3c00, 0xfe05, 0x7d00), 0xfe05);
  CHECK_EQ_INT(R16(H, HORA_MAX, 2, 0x3c00, 0xfc01), 0xfe01);
  CHECK_EQ_INT(R16(H, HORA_MAX, 2, 0x8000, 0x0000), 0x0000); /* the 2nd */
  CHECK_EQ_INT(R16(H, HORA_MIN, 2, 0x0000, 0x8000), 0x8000);
  CHECK_EQ_INT(R16(B, HORA_SUM, 2, 0xffa5, 0x3f80), 0x7fc0);
  CHECK_EQ_INT(R16(B, HORA_SUM, 2, 0x7f80, 0xff80), 0x7fc0);
  CHECK_EQ_INT(R16(B, HORA_AVERAGE, 2, 0x3f80, 0x7f81), 0x7fc0);
  CHECK_EQ_INT(R16(B, HORA_MIN, 2, 0x7f81, 0x3f80), 0x7fc1);
  CHECK_EQ_INT(R16(B, HORA_MAX, 3, 0x3f80, 0xffa5, 0x7fc0), 0xffe5);
}

/* The hand-written 16-bit cases and the NaN cases, on each path. */
static void test_half_cases_both_paths(void) {
  int was = hc_reduce_fast(-1);
  for (int path = 0; path < 2; path++) {
    if (hc_reduce_fast(path) != path) continue; /* no fast path here */
    test_half_reduce_cases();
    nan_cases();
  }
  hc_reduce_fast(was);
}

/* ---- benchmark ----------------------------------------------------------- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Best of `reps` runs of hc_reduce in place on nsrc buffers of `bytes`. */
static double bench_reduce(hora_dtype_t t, hora_op_t op, int nsrc, size_t bytes,
                           int reps) {
  size_t es = hora_dtype_size(t), n = bytes / es;
  void *buf[8];
  for (int k = 0; k < nsrc; k++) {
    buf[k] = malloc(bytes);
    fill(buf[k], n, t, 0);
  }
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    double t0 = now_s();
    hc_reduce(buf, nsrc, (const void *const *)buf, nsrc, n, t, op, 0);
    double dt = now_s() - t0;
    if (dt < best) best = dt;
  }
  for (int k = 0; k < nsrc; k++)
    free(buf[k]);
  return best;
}

static double bench_memcpy(size_t bytes, int reps) {
  unsigned char *a = malloc(bytes), *b = malloc(bytes);
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    double t0 = now_s();
    memcpy(b, a, bytes);
    double dt = now_s() - t0;
    if (dt < best) best = dt;
    a[r % bytes] = (unsigned char)r; /* keep the copies observable */
  }
  volatile unsigned char sink = b[bytes / 2];
  (void)sink;
  free(a);
  free(b);
  return best;
}

static int bench(size_t mib) {
  size_t bytes = mib << 20;
  int reps = 10;
  double mc = bench_memcpy(bytes, reps);
  printf("memcpy %zu MiB: %.2f GB/s\n", mib, (double)bytes / mc / 1e9);
  static const struct {
    hora_dtype_t t;
    hora_op_t op;
    int nsrc;
  } cases[] = {
      {HORA_FLOAT32, HORA_SUM, 2},   {HORA_FLOAT32, HORA_SUM, 4},
      {HORA_FLOAT32, HORA_SUM, 8},   {HORA_FLOAT32, HORA_AVERAGE, 2},
      {HORA_FLOAT32, HORA_MIN, 2},   {HORA_FLOAT16, HORA_SUM, 2},
      {HORA_FLOAT16, HORA_SUM, 4},   {HORA_BFLOAT16, HORA_SUM, 2},
      {HORA_BFLOAT16, HORA_SUM, 4},  {HORA_FLOAT16, HORA_AVERAGE, 2},
      {HORA_FLOAT16, HORA_MIN, 2},   {HORA_FLOAT64, HORA_SUM, 2},
      {HORA_INT32, HORA_SUM, 2},     {HORA_INT32, HORA_AVERAGE, 2},
      {HORA_INT64, HORA_AVERAGE, 2}, {HORA_INT8, HORA_PRODUCT, 2},
  };
  printf("%-9s %-8s nsrc  GB/s (tensor bytes / time)  x memcpy\n", "dtype",
         "op");
  /* float16/bfloat16 also on the portable kernels, where there are others
   * (see hc_reduce_fast). */
  int fast = hc_reduce_fast(-1);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int half = cases[i].t == HORA_FLOAT16 || cases[i].t == HORA_BFLOAT16;
    for (int path = fast; path >= 0; path--) {
      if (path != fast && !half) break;
      hc_reduce_fast(path);
      double dt =
          bench_reduce(cases[i].t, cases[i].op, cases[i].nsrc, bytes, reps);
      double gbs = (double)bytes / dt / 1e9;
      printf("%-9s %-8s %4d  %6.2f  %27.2f%s\n", hora_dtype_name(cases[i].t),
             hora_op_name(cases[i].op), cases[i].nsrc, gbs,
             gbs / ((double)bytes / mc / 1e9),
             !half  ? ""
             : path ? "  AVX2/F16C"
             : fast ? "  portable"
                    : "");
    }
    hc_reduce_fast(fast);
  }
  return 0;
}

/* hc_widen16, hc_fold16 and hc_narrow16 (the 16-bit wire between hosts),
 * on each path, against hc_h2f/hc_b2f and hc_f2h/hc_f2b: every 16-bit
 * pattern widened and folded into random floats (sums and products), and
 * random float32 patterns (NaNs, infinities, subnormals, halfway values)
 * narrowed, divided or not, at lengths around the vectors' 8. A NaN must
 * stay a NaN; a narrowed one is the standard quiet NaN. */
static int same_float(float a, float b) {
  if (a != a || b != b) return a != a && b != b;
  uint32_t x, y;
  memcpy(&x, &a, 4);
  memcpy(&y, &b, 4);
  return x == y;
}

static float rand_f32(int bf) {
  uint64_t r = rnd();
  uint16_t h = rand16(bf);
  float f = bf ? hc_b2f(h) : hc_h2f(h);
  switch (r % 4) {
  case 0: { /* any pattern */
    uint32_t u = (uint32_t)(r >> 32);
    memcpy(&f, &u, 4);
    return f;
  }
  case 1: /* halfway between two 16-bit values, or near it */
    return f * (1.0f + (float)((r >> 8) % 3) / (bf ? 256.0f : 2048.0f));
  default:
    return f;
  }
}

static void test_convert16(void) {
  int was = hc_reduce_fast(-1);
  int have_fast = hc_reduce_fast(1);
  const size_t n = 65536;
  float *w = malloc(n * 4), *w0 = malloc(n * 4);
  uint16_t *h = malloc(n * 2), *o = malloc(n * 2);
  static const size_t lens[] = {1, 7, 8, 9, 17, 1029, 65536};
  int fails = 0;
  for (int path = 0; path < 1 + have_fast; path++) {
    hc_reduce_fast(path);
    for (int bf = 0; bf < 2; bf++) {
      for (size_t i = 0; i < n; i++) h[i] = (uint16_t)i;
      for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
        size_t len = lens[l];
        const uint16_t *hh = h + (n - len) / 2; /* odd offsets too */
        hc_widen16(w, hh, len, bf);
        for (size_t i = 0; i < len && fails < 10; i++) {
          float want = bf ? hc_b2f(hh[i]) : hc_h2f(hh[i]);
          if (!same_float(w[i], want) && ++fails)
            TL_FAIL("path %d bf %d widen 0x%04x: %a, not %a", path, bf,
                    hh[i], (double)w[i], (double)want);
        }
        for (int prod = 0; prod < 2; prod++) {
          for (size_t i = 0; i < len; i++) w0[i] = w[i] = rand_f32(bf);
          hc_fold16(w, hh, len, bf, prod);
          for (size_t i = 0; i < len && fails < 10; i++) {
            float v = bf ? hc_b2f(hh[i]) : hc_h2f(hh[i]);
            float want = prod ? w0[i] * v : w0[i] + v;
            if (!same_float(w[i], want) && ++fails)
              TL_FAIL("path %d bf %d fold%s %a, 0x%04x: %a, not %a", path, bf,
                      prod ? " (product)" : "", (double)w0[i], hh[i],
                      (double)w[i], (double)want);
          }
        }
        for (int d = 0; d < 2; d++) {
          float div = d ? 3.0f : 1.0f;
          for (size_t i = 0; i < len; i++) w[i] = rand_f32(bf);
          hc_narrow16(o, w, len, bf, div);
          for (size_t i = 0; i < len && fails < 10; i++) {
            float f = d ? w[i] / div : w[i];
            uint16_t want = f != f ? (bf ? 0x7fc0 : 0x7e00)
                            : bf   ? hc_f2b(f)
                                   : hc_f2h(f);
            if (o[i] != want && ++fails)
              TL_FAIL("path %d bf %d narrow %a / %g: 0x%04x, not 0x%04x",
                      path, bf, (double)w[i], (double)div, o[i], want);
          }
        }
      }
    }
  }
  CHECK_EQ_INT(fails, 0);
  if (!have_fast)
    printf("   (no AVX2/F16C kernels on this CPU or build: portable only)\n");
  hc_reduce_fast(was);
  free(w);
  free(w0);
  free(h);
  free(o);
}

int main(int argc, char **argv) {
  make_tables();
  if (argc > 1 && !strcmp(argv[1], "bench"))
    return bench(argc > 2 ? (size_t)atoi(argv[2]) : 64);
  RUN(test_half_all);
  RUN(test_bf16_all);
  RUN(test_f2h_cases);
  RUN(test_f2h_rounding);
  RUN(test_f2b_rounding);
  RUN(test_half_cases_both_paths);
  RUN(test_float_cases);
  RUN(test_int_cases);
  RUN(test_repeated_buffers);
  RUN(test_matrix);
  RUN(test_divisor);
  RUN(test_medium);
  RUN(test_large);
  RUN(test_threads);
  RUN(test_fast_vs_portable);
  RUN(test_convert16);
  TL_EXIT();
}
