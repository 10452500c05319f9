/* it_coll.c -- a rank of the collective-correctness integration tests.
 *
 *   it_coll matrix [options]   allreduce / broadcast / barrier over a matrix
 *                              of dtypes x ops x sizes x buffer kinds
 *   it_coll async [options]    names in rank-dependent orders, hundreds of
 *                              async operations in flight, unnamed ones,
 *                              long / empty / odd names
 *   it_coll threads [options]  several threads per rank submitting and
 *                              waiting at once
 *   it_coll edges              values at the limits of the documented
 *                              arithmetic (int64 wrap, exact integer
 *                              averages, float16 accumulated in float32)
 *
 * Every rank computes the expected result itself: the input of rank r,
 * element i is a pure function of (dtype, op, r, i, salt), with values
 * chosen so that sums, products, minima and maxima are exact in the
 * dtype (integer AVERAGE: exact sum / size, truncated toward zero, hora.h;
 * float AVERAGE: compared within one unit in the last place).
 *
 * Options (matrix):
 *   -t LIST   dtypes (uint8,...,float64 or "all")         default all
 *   -o LIST   ops (average,sum,min,max,product or "all")  default all
 *   -s LIST   element counts, "A+B" with K/M suffixes (1M+3); a leading b
 *             counts the first term in bytes (b1M+3: 1 MiB of elements + 3)
 *             default 0,1,7,33,4099
 *   -m LIST   buffer kinds (ip_alloc ip_malloc oop_alloc oop_malloc
 *             oop_sa_rm oop_sm_ra, or rankmix: each rank picks one of
 *             those, differently on different ranks; "all" is all seven)
 *                                                         default all
 *   -b        broadcast every dtype and size from every root (from
 *             hora_alloc and/or malloc buffers, as the -m kinds use them)
 *   -B FILE   barrier check: ranks append to FILE around barriers
 *   -R N      barrier rounds (default 20)
 *   -x N      fail unless hora_size() == N
 *   -q        quiet: no per-section timing
 * Options (async):
 *   -k N      names submitted in rank-dependent orders (default 64)
 *   -M N      outstanding async allreduces (default 500)
 *   -U N      unnamed operations (default 60)
 *   -x N      as above
 * Options (threads):
 *   -T N      threads per rank (default 4)
 *   -K N      operations per thread (default 400)
 *   -W N      operations each thread keeps in flight (default 100)
 * Any argument starting with --marker= is ignored (the drivers use it to
 * find the job's processes).
 *
 * Exit status 0 when every check passed, 1 when one failed, 2 on a usage
 * error; failures are printed as "rank R: <what>: expected X, got Y". */
#include <hora.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int g_rank, g_size;
static _Atomic long g_checks, g_failures; /* threads share them */
static int g_quiet;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  g_failures++;
  long nf = g_failures;
  if (nf <= 60) printf("rank %d: FAIL: %s\n", g_rank, buf);
  else if (nf == 61) printf("rank %d: (more failures not shown)\n", g_rank);
  fflush(stdout);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- values ------------------------------------------------------------ */

static uint64_t mix64(uint64_t x) { /* splitmix64 finalizer */
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static uint64_t hash5(uint64_t a, uint64_t b, uint64_t c, uint64_t d,
                      uint64_t e) {
  return mix64((a * 0x9e3779b97f4a7c15ull) ^ (b * 0xc2b2ae3d27d4eb4full) ^
               (c * 0x165667b19e3779f9ull) ^ (e * 0xd6e8feb86659fd93ull) ^
               (d * 0xff51afd7ed558ccdull));
}

static int is_float(int dt) { return dt >= HORA_FLOAT16; }
static int is_signed(int dt) { return dt != HORA_UINT8; }

static int64_t int_min(int dt) {
  switch (dt) {
  case HORA_UINT8: return 0;
  case HORA_INT8: return INT8_MIN;
  case HORA_INT16: return INT16_MIN;
  case HORA_INT32: return INT32_MIN;
  default: return INT64_MIN;
  }
}
static int64_t int_max(int dt) {
  switch (dt) {
  case HORA_UINT8: return UINT8_MAX;
  case HORA_INT8: return INT8_MAX;
  case HORA_INT16: return INT16_MAX;
  case HORA_INT32: return INT32_MAX;
  default: return INT64_MAX;
  }
}

static uint16_t f2h(float f) { /* round to nearest even */
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0));
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520: inf */
  if (a < 0x38800000u) {                                       /* subnormal */
    float af;
    memcpy(&af, &a, 4);
    return (uint16_t)(sign | (uint32_t)lrintf(af * 16777216.0f));
  }
  uint32_t h = ((((a >> 23) - 127 + 15)) << 10) | ((a & 0x7fffffu) >> 13);
  uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
  return (uint16_t)(sign | h);
}

static float h2f(uint16_t h) {
  uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu,
           m = h & 0x3ffu, x;
  if (e == 0) {
    float f = ldexpf((float)m, -24);
    return s ? -f : f;
  }
  if (e == 31) x = s | 0x7f800000u | (m << 13);
  else x = s | ((e - 15 + 127) << 23) | (m << 13);
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static uint16_t f2bf(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

static float bf2f(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

/* A value of some dtype, as an exact int64 or double. */
struct val {
  int64_t i;
  double f;
};

/* Set for huge tensors: float32 sums then use a cheap pattern (no hash)
 * that still tells every position apart from its neighbours. */
static int g_fast;

/* The input of rank r, element i. */
static inline uint32_t fast_val(int r, uint64_t i, uint64_t salt) {
  uint32_t x = (uint32_t)(i ^ (i >> 17)) * 7u + (uint32_t)r * 13u +
               (uint32_t)salt;
  return x % 1021u;
}

static struct val gen(int dt, int op, int r, int n, uint64_t i, uint64_t salt) {
  struct val v = {0, 0};
  if (g_fast && dt == HORA_FLOAT32 && op == HORA_SUM) {
    v.f = (double)fast_val(r, i, salt);
    return v;
  }
  uint64_t u = hash5((uint64_t)dt, (uint64_t)op, (uint64_t)r, i, salt);
  if (!is_float(dt)) {
    int64_t lo = int_min(dt), hi = int_max(dt);
    switch (op) {
    case HORA_SUM: { /* |sum| stays in range */
      int64_t b = hi / n;
      lo = is_signed(dt) ? -b : 0;
      hi = b;
      break;
    }
    case HORA_AVERAGE: /* the dtype's full range: sums overflow the dtype */
      if (dt == HORA_INT64) { /* but not int64 (that sum wraps) */
        hi = INT64_MAX / n;
        lo = -hi;
      }
      break;
    case HORA_PRODUCT: {
      int64_t f = ((i + (uint64_t)r) % 3 == 0 && r < 8) ? 2 : 1;
      if (is_signed(dt) && (u >> 32) % 5 == 0) f = -f;
      if (u % 97 == 0) f = 0;
      v.i = f;
      return v;
    }
    default: /* MIN, MAX: full range, extremes now and then */
      if ((u >> 58) == 0) { v.i = lo; return v; }
      if ((u >> 58) == 1) { v.i = hi; return v; }
      break;
    }
    uint64_t range = (uint64_t)hi - (uint64_t)lo; /* + 1 may wrap */
    uint64_t off = range == UINT64_MAX ? u : u % (range + 1);
    v.i = (int64_t)((uint64_t)lo + off);
    return v;
  }
  /* floats */
  switch (op) {
  case HORA_SUM:
  case HORA_AVERAGE: {
    /* halves, |sum| small enough to be exact in the dtype */
    int64_t k;
    switch (dt) {
    case HORA_FLOAT16:
      /* one element in 13: 2048 + 1 + 1 ...; exact only when accumulated
       * in float32 and rounded once (hora.h) */
      if (op == HORA_SUM && i % 13 == 5) {
        v.f = r == 0 ? 2048.0 : 1.0;
        return v;
      }
      k = 2000 / n;
      break;
    case HORA_BFLOAT16:
      if (op == HORA_SUM && i % 13 == 5) {
        v.f = r == 0 ? 256.0 : 1.0;
        return v;
      }
      k = 254 / n;
      break;
    case HORA_FLOAT32: k = (1 << 23) / n; break;
    default: k = (1ll << 50) / n; break;
    }
    v.f = (double)((int64_t)(u % (uint64_t)(2 * k + 1)) - k) / 2.0;
    return v;
  }
  case HORA_PRODUCT: {
    double f = ((i + (uint64_t)r) % 3 == 0 && r < 8) ? 2.0 : 1.0;
    if ((u >> 32) % 5 == 0) f = -f;
    if ((u >> 40) % 7 == 0) f *= 0.5;
    if (u % 97 == 0) f = 0.0;
    v.f = f;
    return v;
  }
  default: { /* MIN, MAX: k * 2^e, exact in the dtype, infinities too */
    int64_t k;
    int e;
    uint64_t w = u >> 16;
    switch (dt) {
    case HORA_FLOAT16: k = 2047; e = (int)(w % 16) - 10; break;
    case HORA_BFLOAT16: k = 255; e = (int)(w % 41) - 20; break;
    case HORA_FLOAT32: k = (1 << 24) - 1; e = (int)(w % 81) - 40; break;
    default: k = (1ll << 53) - 1; e = (int)(w % 401) - 200; break;
    }
    if (u % 251 == 0) {
      v.f = (u >> 8) & 1 ? INFINITY : -INFINITY;
      return v;
    }
    v.f = ldexp((double)((int64_t)(u % (uint64_t)(2 * k + 1)) - k), e);
    return v;
  }
  }
}

static void store(int dt, void *buf, uint64_t i, struct val v) {
  unsigned char *p = buf;
  switch (dt) {
  case HORA_UINT8: p[i] = (uint8_t)v.i; break;
  case HORA_INT8: ((int8_t *)p)[i] = (int8_t)v.i; break;
  case HORA_INT16: { int16_t x = (int16_t)v.i; memcpy(p + 2 * i, &x, 2); break; }
  case HORA_INT32: { int32_t x = (int32_t)v.i; memcpy(p + 4 * i, &x, 4); break; }
  case HORA_INT64: memcpy(p + 8 * i, &v.i, 8); break;
  case HORA_FLOAT16: { uint16_t x = f2h((float)v.f); memcpy(p + 2 * i, &x, 2); break; }
  case HORA_BFLOAT16: { uint16_t x = f2bf((float)v.f); memcpy(p + 2 * i, &x, 2); break; }
  case HORA_FLOAT32: { float x = (float)v.f; memcpy(p + 4 * i, &x, 4); break; }
  default: memcpy(p + 8 * i, &v.f, 8); break;
  }
}

static struct val load(int dt, const void *buf, uint64_t i) {
  const unsigned char *p = buf;
  struct val v = {0, 0};
  switch (dt) {
  case HORA_UINT8: v.i = p[i]; break;
  case HORA_INT8: v.i = ((const int8_t *)p)[i]; break;
  case HORA_INT16: { int16_t x; memcpy(&x, p + 2 * i, 2); v.i = x; break; }
  case HORA_INT32: { int32_t x; memcpy(&x, p + 4 * i, 4); v.i = x; break; }
  case HORA_INT64: memcpy(&v.i, p + 8 * i, 8); break;
  case HORA_FLOAT16: { uint16_t x; memcpy(&x, p + 2 * i, 2); v.f = h2f(x); break; }
  case HORA_BFLOAT16: { uint16_t x; memcpy(&x, p + 2 * i, 2); v.f = bf2f(x); break; }
  case HORA_FLOAT32: { float x; memcpy(&x, p + 4 * i, 4); v.f = x; break; }
  default: memcpy(&v.f, p + 8 * i, 8); break;
  }
  return v;
}

/* x rounded to the dtype (as the result would be stored). */
static double round_to(int dt, double x) {
  switch (dt) {
  case HORA_FLOAT16: return h2f(f2h((float)x));
  case HORA_BFLOAT16: return bf2f(f2bf((float)x));
  case HORA_FLOAT32: return (float)x;
  default: return x;
  }
}

static double ulp_rel(int dt) {
  switch (dt) {
  case HORA_FLOAT16: return ldexp(1, -10);
  case HORA_BFLOAT16: return ldexp(1, -7);
  case HORA_FLOAT32: return ldexp(1, -23);
  default: return ldexp(1, -52);
  }
}

/* The expected result of element i. */
static struct val reference(int dt, int op, int n, uint64_t i, uint64_t salt) {
  struct val acc = gen(dt, op, 0, n, i, salt);
  if (!is_float(dt)) {
    int64_t a = acc.i;
    for (int r = 1; r < n; r++) {
      int64_t x = gen(dt, op, r, n, i, salt).i;
      switch (op) {
      case HORA_SUM: case HORA_AVERAGE: a += x; break;
      case HORA_MIN: a = x < a ? x : a; break;
      case HORA_MAX: a = x > a ? x : a; break;
      default: a *= x; break;
      }
    }
    if (op == HORA_AVERAGE) a /= n; /* C division: toward zero */
    acc.i = a;
    return acc;
  }
  double a = acc.f;
  for (int r = 1; r < n; r++) {
    double x = gen(dt, op, r, n, i, salt).f;
    switch (op) {
    case HORA_SUM: case HORA_AVERAGE: a += x; break;
    case HORA_MIN: a = x < a ? x : a; break;
    case HORA_MAX: a = x > a ? x : a; break;
    default: a *= x; break;
    }
  }
  if (op == HORA_AVERAGE) a /= n;
  acc.f = round_to(dt, a);
  return acc;
}

static void fill_input(int dt, int op, uint64_t count, uint64_t salt,
                       void *buf) {
  if (g_fast && dt == HORA_FLOAT32 && op == HORA_SUM) {
    float *f = buf;
    for (uint64_t i = 0; i < count; i++) f[i] = (float)fast_val(g_rank, i, salt);
    return;
  }
  for (uint64_t i = 0; i < count; i++)
    store(dt, buf, i, gen(dt, op, g_rank, g_size, i, salt));
}

/* Checks an allreduce result; returns the number of bad elements. */
static uint64_t check_result(const char *what, int dt, int op, uint64_t count,
                             uint64_t salt, const void *buf) {
  uint64_t bad = 0;
  g_checks++;
  if (g_fast && dt == HORA_FLOAT32 && op == HORA_SUM) {
    const float *f = buf;
    for (uint64_t i = 0; i < count; i++) {
      uint32_t want = 0;
      for (int r = 0; r < g_size; r++) want += fast_val(r, i, salt);
      if (f[i] != (float)want) {
        if (bad < 4)
          fail("%s: element %llu: expected %u, got %.9g", what,
               (unsigned long long)i, want, (double)f[i]);
        bad++;
      }
    }
    if (bad > 4)
      fail("%s: %llu of %llu elements wrong in all", what,
           (unsigned long long)bad, (unsigned long long)count);
    return bad;
  }
  for (uint64_t i = 0; i < count; i++) {
    struct val got = load(dt, buf, i);
    struct val want = reference(dt, op, g_size, i, salt);
    int ok;
    if (!is_float(dt)) {
      ok = got.i == want.i;
    } else if (op == HORA_AVERAGE) {
      double tol = fmax(fabs(want.f), fabs(got.f)) * ulp_rel(dt) * 1.01;
      ok = fabs(got.f - want.f) <= tol;
    } else {
      ok = got.f == want.f || (isnan(got.f) && isnan(want.f));
    }
    if (!ok) {
      if (bad < 4) {
        if (!is_float(dt))
          fail("%s: element %llu: expected %lld, got %lld", what,
               (unsigned long long)i, (long long)want.i, (long long)got.i);
        else
          fail("%s: element %llu: expected %.17g, got %.17g", what,
               (unsigned long long)i, want.f, got.f);
      }
      bad++;
    }
  }
  if (bad > 4)
    fail("%s: %llu of %llu elements wrong in all", what,
         (unsigned long long)bad, (unsigned long long)count);
  return bad;
}

/* Broadcast payload of root `root`: raw bytes, any bit pattern, one hash
 * per 8 bytes. */
static uint64_t bcast_word(int dt, int root, uint64_t w, uint64_t salt) {
  return hash5((uint64_t)dt, 77, (uint64_t)root, w, salt);
}

static void fill_bcast(int dt, int root, uint64_t bytes, uint64_t salt,
                       void *buf) {
  unsigned char *p = buf;
  if (g_rank != root) {
    memset(p, 0x5a ^ g_rank, bytes);
    return;
  }
  for (uint64_t w = 0; w * 8 < bytes; w++) {
    uint64_t x = bcast_word(dt, root, w, salt);
    uint64_t n = bytes - w * 8 < 8 ? bytes - w * 8 : 8;
    memcpy(p + w * 8, &x, n);
  }
}

static uint64_t check_bcast(const char *what, int dt, int root, uint64_t bytes,
                            uint64_t salt, const void *buf) {
  const unsigned char *p = buf;
  uint64_t bad = 0;
  g_checks++;
  for (uint64_t w = 0; w * 8 < bytes; w++) {
    uint64_t x = bcast_word(dt, root, w, salt);
    uint64_t n = bytes - w * 8 < 8 ? bytes - w * 8 : 8;
    if (memcmp(p + w * 8, &x, n) == 0) continue;
    const unsigned char *want = (const unsigned char *)&x;
    for (uint64_t k = 0; k < n; k++)
      if (p[w * 8 + k] != want[k]) {
        if (bad < 4)
          fail("%s: byte %llu: expected 0x%02x, got 0x%02x", what,
               (unsigned long long)(w * 8 + k), want[k], p[w * 8 + k]);
        bad++;
      }
  }
  if (bad > 4)
    fail("%s: %llu of %llu bytes wrong in all", what, (unsigned long long)bad,
         (unsigned long long)bytes);
  return bad;
}

/* ---- argument lists ------------------------------------------------------ */

/* rankmix: each rank picks one of the others, differently on different
 * ranks (so resident and streamed/copied participants meet in one op). */
enum mode { IP_ALLOC, IP_MALLOC, OOP_ALLOC, OOP_MALLOC, OOP_SA_RM, OOP_SM_RA,
            NMODES, RANKMIX = NMODES };
static const char *const mode_names[NMODES + 1] = {
    "ip_alloc", "ip_malloc", "oop_alloc", "oop_malloc",
    "oop_sa_rm", "oop_sm_ra", "rankmix"};

static int parse_list(const char *arg, const char *(*name)(int), int nnames,
                      int *out) {
  int n = 0;
  if (!strcmp(arg, "all")) {
    for (int i = 0; i < nnames; i++) out[n++] = i;
    return n;
  }
  char *dup = strdup(arg), *save = NULL;
  for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int found = -1;
    for (int i = 0; i < nnames; i++)
      if (!strcmp(t, name(i))) found = i;
    if (found < 0) {
      fprintf(stderr, "it_coll: unknown name '%s'\n", t);
      exit(2);
    }
    out[n++] = found;
  }
  free(dup);
  return n;
}

static const char *dt_name(int i) { return hora_dtype_name((hora_dtype_t)i); }
static const char *op_name(int i) { return hora_op_name((hora_op_t)i); }
static const char *md_name(int i) { return mode_names[i]; }

/* "A+B+..." with K/M suffixes; a leading 'b' makes the first term bytes:
 * "b1M+3" is 1 MiB worth of elements of the dtype, plus 3 elements. */
static uint64_t parse_count(const char *s, size_t es) {
  uint64_t total = 0;
  int bytes = *s == 'b';
  if (bytes) s++;
  while (*s) {
    char *end;
    uint64_t v = strtoull(s, &end, 10);
    if (*end == 'K') v <<= 10, end++;
    else if (*end == 'M') v <<= 20, end++;
    if (bytes) v /= es, bytes = 0;
    total += v;
    if (*end == '+') end++;
    else if (*end) {
      fprintf(stderr, "it_coll: bad size '%s'\n", s);
      exit(2);
    }
    s = end;
  }
  return total;
}

/* ---- buffers ------------------------------------------------------------ */

static _Atomic int g_alloc_fallbacks;

/* hora_alloc memory, or malloc when the arena has no room (counted). */
static void *buf_alloc(size_t bytes, int arena, int *from_arena) {
  size_t b = bytes ? bytes : 1;
  void *p = NULL;
  *from_arena = 0;
  if (arena && bytes) {
    p = hora_alloc(b);
    if (p) *from_arena = 1;
    else g_alloc_fallbacks++;
  }
  if (!p) p = malloc(b);
  if (!p) {
    printf("rank %d: out of memory (%zu bytes)\n", g_rank, b);
    exit(1);
  }
  return p;
}

static void buf_free(void *p, int from_arena) {
  if (from_arena) hora_free(p);
  else free(p);
}

/* ---- matrix ------------------------------------------------------------- */

static long g_opseq;

static void one_allreduce(int dt, int op, uint64_t count, int mode) {
  size_t es = hora_dtype_size((hora_dtype_t)dt), bytes = count * es;
  uint64_t salt = (uint64_t)g_opseq;
  char what[200], name[200];
  int mix = mode == RANKMIX;
  if (mix) mode = (int)((g_rank + salt) % NMODES);
  snprintf(what, sizeof what, "allreduce %s %s count=%llu %s%s", dt_name(dt),
           op_name(op), (unsigned long long)count, mix ? "rankmix:" : "",
           mode_names[mode]);
  snprintf(name, sizeof name, "ar.%s.%s.%llu.%s", dt_name(dt), op_name(op),
           (unsigned long long)count, mix ? "rankmix" : mode_names[mode]);
  /* every fourth operation is unnamed: matched by call order */
  const char *nm = g_opseq % 4 == 3 ? NULL : name;
  g_opseq++;
  g_fast = count >= (1u << 22);
  int sa = mode == IP_ALLOC || mode == OOP_ALLOC || mode == OOP_SA_RM;
  int ra = mode == IP_ALLOC || mode == OOP_ALLOC || mode == OOP_SM_RA;
  int inplace = mode == IP_ALLOC || mode == IP_MALLOC;
  int fs, fr = 0;
  void *send = buf_alloc(bytes, sa, &fs), *recv = send;
  fill_input(dt, op, count, salt, send);
  void *copy = NULL;
  if (!inplace) {
    recv = buf_alloc(bytes, ra, &fr);
    memset(recv, 0xa5, bytes ? bytes : 1);
    copy = malloc(bytes ? bytes : 1);
    memcpy(copy, send, bytes);
  }
  double t0 = now_s();
  int rc = hora_allreduce(nm, send, recv, count, (hora_dtype_t)dt,
                          (hora_op_t)op);
  if (!g_quiet && g_rank == 0 && bytes >= (32u << 20))
    printf("rank 0: %s: %.3f s, %.2f GB/s\n", what, now_s() - t0,
           (double)bytes / 1e9 / (now_s() - t0));
  if (rc != 0) {
    fail("%s: hora_allreduce returned %d (%s): %s", what, rc,
         hora_err_name(rc), hora_last_error());
  } else {
    check_result(what, dt, op, count, salt, recv);
    if (copy && memcmp(copy, send, bytes) != 0)
      fail("%s: the send buffer was modified by an out-of-place allreduce",
           what);
  }
  if (!inplace) buf_free(recv, fr);
  buf_free(send, fs);
  free(copy);
}

/* arena: 0 malloc, 1 hora_alloc, 2 one or the other, by rank */
static void one_broadcast(int dt, uint64_t count, int root, int arena) {
  size_t es = hora_dtype_size((hora_dtype_t)dt), bytes = count * es;
  uint64_t salt = (uint64_t)g_opseq;
  int mixed = arena == 2; /* the name must not depend on the rank */
  if (mixed) arena = (int)((g_rank + salt) & 1);
  char what[200], name[200];
  snprintf(what, sizeof what, "broadcast %s count=%llu root=%d %s%s",
           dt_name(dt), (unsigned long long)count, root,
           mixed ? "rankmix:" : "", arena ? "alloc" : "malloc");
  snprintf(name, sizeof name, "bc.%s.%llu.%d.%d", dt_name(dt),
           (unsigned long long)count, root, mixed ? 2 : arena);
  const char *nm = g_opseq % 4 == 3 ? NULL : name;
  g_opseq++;
  int fa;
  void *buf = buf_alloc(bytes, arena, &fa);
  fill_bcast(dt, root, bytes, salt, buf);
  double t0 = now_s();
  int rc = hora_broadcast(nm, buf, count, (hora_dtype_t)dt, root);
  if (!g_quiet && g_rank == 0 && bytes >= (32u << 20))
    printf("rank 0: %s: %.3f s, %.2f GB/s\n", what, now_s() - t0,
           (double)bytes / 1e9 / (now_s() - t0));
  if (rc != 0)
    fail("%s: hora_broadcast returned %d (%s): %s", what, rc,
         hora_err_name(rc), hora_last_error());
  else
    check_bcast(what, dt, root, bytes, salt, buf);
  buf_free(buf, fa);
}

static void barrier_check(const char *file, int rounds) {
  int fd = open(file, O_WRONLY | O_APPEND | O_CREAT, 0600);
  if (fd < 0) {
    fail("barrier: cannot open %s: %s", file, strerror(errno));
    return;
  }
  int rc = hora_barrier(); /* every rank has opened (and maybe created) it */
  if (rc != 0) fail("barrier: %s", hora_last_error());
  for (int k = 0; k < rounds; k++) {
    if (write(fd, "x", 1) != 1) fail("barrier: write: %s", strerror(errno));
    if (k % 3 == g_rank % 3) usleep(2000); /* someone is always late */
    rc = hora_barrier();
    g_checks++;
    if (rc != 0) {
      fail("barrier round %d: hora_barrier returned %d (%s): %s", k, rc,
           hora_err_name(rc), hora_last_error());
      break;
    }
    struct stat st;
    fstat(fd, &st);
    long lo = (long)(k + 1) * g_size, hi = (long)(k + 2) * g_size;
    if (st.st_size < lo || st.st_size > hi)
      fail("barrier round %d: %s has %lld bytes after the barrier; expected "
           "between %ld and %ld (every rank writes one byte per round before "
           "the barrier)", k, file, (long long)st.st_size, lo, hi);
  }
  close(fd);
}

static int cmd_matrix(int argc, char **argv) {
  int dts[HORA_DTYPE_COUNT], ops[HORA_OP_ELEMENTWISE], modes[NMODES + 1];
  int ndt = parse_list("all", dt_name, HORA_DTYPE_COUNT, dts);
  int nop = parse_list("all", op_name, HORA_OP_ELEMENTWISE, ops);
  int nmode = parse_list("all", md_name, NMODES + 1, modes);
  const char *sizes[64] = {"0", "1", "7", "33", "4099"};
  char *sizes_dup = NULL;
  int nsizes = 5, bcast = 0, rounds = 20;
  const char *bfile = NULL;
  int opt;
  while ((opt = getopt(argc, argv, "t:o:s:m:bB:R:x:q")) != -1) {
    switch (opt) {
    case 't': ndt = parse_list(optarg, dt_name, HORA_DTYPE_COUNT, dts); break;
    case 'o':
      nop = parse_list(optarg, op_name, HORA_OP_ELEMENTWISE, ops);
      break;
    case 'm': nmode = parse_list(optarg, md_name, NMODES + 1, modes); break;
    case 's': {
      nsizes = 0;
      char *save = NULL;
      sizes_dup = strdup(optarg);
      for (char *t = strtok_r(sizes_dup, ",", &save); t && nsizes < 64;
           t = strtok_r(NULL, ",", &save)) {
        parse_count(t, 1); /* validates */
        sizes[nsizes++] = t;
      }
      break;
    }
    case 'b': bcast = 1; break;
    case 'B': bfile = optarg; break;
    case 'R': rounds = atoi(optarg); break;
    case 'x': break; /* handled in main */
    case 'q': g_quiet = 1; break;
    default: return 2;
    }
  }
  /* broadcasts use the kinds of buffer the modes name */
  int want_alloc = 0, want_malloc = 0, want_mix = 0;
  for (int m = 0; m < nmode; m++) {
    if (modes[m] == RANKMIX) want_mix = 1;
    else if (modes[m] != IP_MALLOC && modes[m] != OOP_MALLOC) want_alloc = 1;
    if (modes[m] != IP_ALLOC && modes[m] != OOP_ALLOC && modes[m] != RANKMIX)
      want_malloc = 1;
  }
  double t0 = now_s();
  for (int s = 0; s < nsizes; s++) {
    double ts = now_s();
    long before = g_checks;
    for (int a = 0; a < ndt; a++) {
      uint64_t count = parse_count(sizes[s], hora_dtype_size(dts[a]));
      for (int b = 0; b < nop; b++)
        for (int m = 0; m < nmode; m++)
          one_allreduce(dts[a], ops[b], count, modes[m]);
    }
    if (bcast)
      for (int a = 0; a < ndt; a++) {
        uint64_t count = parse_count(sizes[s], hora_dtype_size(dts[a]));
        for (int root = 0; root < g_size; root++)
          for (int arena = 0; arena < 3; arena++)
            if (arena == 2 ? want_mix : arena ? want_alloc : want_malloc)
              one_broadcast(dts[a], count, root, arena);
      }
    if (!g_quiet && g_rank == 0)
      printf("rank 0: size %s: %ld operations in %.3f s\n", sizes[s],
             (long)g_checks - before, now_s() - ts);
  }
  if (bfile) barrier_check(bfile, rounds);
  free(sizes_dup);
  if (!g_quiet && g_rank == 0)
    printf("rank 0: matrix done in %.3f s\n", now_s() - t0);
  return 0;
}

/* ---- async -------------------------------------------------------------- */

struct aop {
  int coll; /* 0 allreduce, 1 broadcast */
  int dt, op, root, mode;
  uint64_t count, salt;
  char name[64];
  const char *nm;
  void *send, *recv, *copy;
  int fs, fr;
  int64_t h;
  int submitted, done;
};

static void aop_prepare(struct aop *a) {
  size_t bytes = a->count * hora_dtype_size((hora_dtype_t)a->dt);
  if (a->coll == 1) {
    a->send = a->recv = buf_alloc(bytes, a->mode & 1, &a->fs);
    fill_bcast(a->dt, a->root, bytes, a->salt, a->send);
    return;
  }
  int sa = a->mode == IP_ALLOC || a->mode == OOP_ALLOC || a->mode == OOP_SA_RM;
  int ra = a->mode == IP_ALLOC || a->mode == OOP_ALLOC || a->mode == OOP_SM_RA;
  a->send = buf_alloc(bytes, sa, &a->fs);
  fill_input(a->dt, a->op, a->count, a->salt, a->send);
  a->recv = a->send;
  if (a->mode != IP_ALLOC && a->mode != IP_MALLOC) {
    a->recv = buf_alloc(bytes, ra, &a->fr);
    memset(a->recv, 0xa5, bytes ? bytes : 1);
    a->copy = malloc(bytes ? bytes : 1);
    memcpy(a->copy, a->send, bytes);
  }
}

static void aop_describe(const struct aop *a, char *what, size_t len) {
  if (a->coll == 1)
    snprintf(what, len, "async broadcast '%s' %s count=%llu root=%d",
             a->nm ? a->nm : "(unnamed)", dt_name(a->dt),
             (unsigned long long)a->count, a->root);
  else
    snprintf(what, len, "async allreduce '%s' %s %s count=%llu %s",
             a->nm ? a->nm : "(unnamed)", dt_name(a->dt), op_name(a->op),
             (unsigned long long)a->count, mode_names[a->mode]);
}

static void aop_submit(struct aop *a) {
  int rc;
  if (a->coll == 1)
    rc = hora_broadcast_async(a->nm, a->send, a->count, (hora_dtype_t)a->dt,
                              a->root, &a->h);
  else
    rc = hora_allreduce_async(a->nm, a->send, a->recv, a->count,
                              (hora_dtype_t)a->dt, (hora_op_t)a->op, &a->h);
  if (rc != 0) {
    char what[256];
    aop_describe(a, what, sizeof what);
    fail("%s: submission returned %d (%s): %s", what, rc, hora_err_name(rc),
         hora_last_error());
    a->done = 1;
  }
  a->submitted = 1;
}

static void aop_finish(struct aop *a, int rc) {
  char what[256];
  aop_describe(a, what, sizeof what);
  size_t bytes = a->count * hora_dtype_size((hora_dtype_t)a->dt);
  if (rc != 0) {
    fail("%s: returned %d (%s): %s", what, rc, hora_err_name(rc),
         hora_last_error());
  } else if (a->coll == 1) {
    check_bcast(what, a->dt, a->root, bytes, a->salt, a->recv);
  } else {
    check_result(what, a->dt, a->op, a->count, a->salt, a->recv);
    if (a->copy && memcmp(a->copy, a->send, bytes) != 0)
      fail("%s: the send buffer was modified", what);
  }
  if (a->recv != a->send) buf_free(a->recv, a->fr);
  buf_free(a->send, a->fs);
  free(a->copy);
  a->send = a->recv = a->copy = NULL;
  a->done = 1;
}

static void aop_wait(struct aop *a) {
  if (a->done) return;
  aop_finish(a, hora_wait(a->h));
}

/* A permutation of 0..n-1 from seed. */
static void permute(int *p, int n, uint64_t seed) {
  for (int i = 0; i < n; i++) p[i] = i;
  for (int i = n - 1; i > 0; i--) {
    seed = mix64(seed);
    int j = (int)(seed % (uint64_t)(i + 1));
    int t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
}

static int cmd_async(int argc, char **argv) {
  int k = 64, many = 500, unnamed = 60, opt;
  while ((opt = getopt(argc, argv, "k:M:U:x:q")) != -1) {
    switch (opt) {
    case 'k': k = atoi(optarg); break;
    case 'M': many = atoi(optarg); break;
    case 'U': unnamed = atoi(optarg); break;
    case 'x': break;
    case 'q': g_quiet = 1; break;
    default: return 2;
    }
  }
  static const uint64_t sizes[] = {0, 1, 7, 100, 1000, 4097, 65537, 300001};
  const int nsz = (int)(sizeof sizes / sizeof sizes[0]);
  double t0 = now_s();

  /* 1. k names, submitted in a rank-dependent order, waited in another */
  struct aop *A = calloc((size_t)k, sizeof *A);
  int *perm = malloc(sizeof(int) * (size_t)(k > many ? k : many) + 64);
  for (int j = 0; j < k; j++) {
    struct aop *a = &A[j];
    a->coll = j % 7 == 3;
    a->dt = j % HORA_DTYPE_COUNT;
    a->op = (j / HORA_DTYPE_COUNT) % HORA_OP_ELEMENTWISE;
    a->root = j % g_size;
    a->mode = (j / 3) % NMODES;
    a->count = sizes[(j * 5) % nsz];
    a->salt = 1000 + (uint64_t)j;
    snprintf(a->name, sizeof a->name, "perm.%d", j);
    a->nm = a->name;
    aop_prepare(a);
  }
  permute(perm, k, 12345 + (uint64_t)g_rank);
  for (int j = 0; j < k; j++) aop_submit(&A[perm[j]]);
  permute(perm, k, 999 + 7 * (uint64_t)g_rank);
  for (int j = 0; j < k; j++) aop_wait(&A[perm[j]]);
  free(A);
  if (!g_quiet && g_rank == 0)
    printf("rank 0: %d names in rank-dependent orders: %.3f s\n", k,
           now_s() - t0);

  /* 2. many async allreduces in flight at once, then wait for all */
  double t1 = now_s();
  A = calloc((size_t)many, sizeof *A);
  for (int j = 0; j < many; j++) {
    struct aop *a = &A[j];
    uint64_t u = mix64(4242 + (uint64_t)j);
    a->dt = (int)(u % HORA_DTYPE_COUNT);
    a->op = (int)((u >> 8) % HORA_OP_ELEMENTWISE);
    a->mode = (int)((u >> 16) % NMODES);
    a->count = (u >> 24) % 5 == 0 ? (u >> 32) % 50000 : (u >> 32) % 200;
    a->salt = 5000 + (uint64_t)j;
    snprintf(a->name, sizeof a->name, "many.%d", j);
    a->nm = a->name;
    aop_prepare(a);
  }
  for (int j = 0; j < many; j++) /* rotated by rank */
    aop_submit(&A[(j + g_rank * many / (g_size + 1)) % many]);
  for (int j = 0; j < many; j += 5) { /* some through hora_test */
    struct aop *a = &A[j];
    if (a->done) continue;
    int done = 0, rc = 0;
    double td = now_s();
    while (!done && (rc = hora_test(a->h, &done)) == 0 && !done) {
      if (now_s() - td > 120) break;
      sched_yield();
    }
    if (rc != 0 || done) aop_finish(a, rc);
    else fail("many.%d: hora_test never reported done", j);
  }
  for (int j = many - 1; j >= 0; j--) aop_wait(&A[j]);
  free(A);
  if (!g_quiet && g_rank == 0)
    printf("rank 0: %d async allreduces in flight: %.3f s\n", many,
           now_s() - t1);

  /* 3. unnamed operations, matched by call order, with named ones placed
   * at rank-dependent positions among them */
  double t2 = now_s();
  int named = unnamed / 2, tot = unnamed + named;
  A = calloc((size_t)tot, sizeof *A);
  for (int j = 0; j < tot; j++) {
    struct aop *a = &A[j];
    a->coll = j < unnamed && j % 5 == 4;
    a->dt = (j * 7) % HORA_DTYPE_COUNT;
    a->op = (j * 3) % HORA_OP_ELEMENTWISE;
    a->root = (j / 5) % g_size;
    a->mode = j % NMODES;
    a->count = sizes[j % nsz];
    a->salt = 9000 + (uint64_t)j;
    if (j >= unnamed) {
      snprintf(a->name, sizeof a->name, "between.%d", j);
      a->nm = a->name;
    }
    aop_prepare(a);
  }
  /* order: the unnamed ones in order, each named one inserted after a
   * rank-dependent number of unnamed ones */
  int *pos = malloc(sizeof(int) * (size_t)tot);
  for (int j = unnamed; j < tot; j++)
    pos[j] = (int)(mix64((uint64_t)j * 31 + (uint64_t)g_rank) %
                   (uint64_t)(unnamed + 1));
  for (int u = 0; u <= unnamed; u++) {
    for (int j = unnamed; j < tot; j++)
      if (pos[j] == u) aop_submit(&A[j]);
    if (u < unnamed) aop_submit(&A[u]);
  }
  permute(perm, tot, 31337 + (uint64_t)g_rank);
  for (int j = 0; j < tot; j++) aop_wait(&A[perm[j]]);
  free(pos);
  /* and synchronous unnamed calls */
  for (int j = 0; j < 12; j++) {
    struct aop a = {.coll = j % 3 == 2, .dt = j % HORA_DTYPE_COUNT,
                    .op = j % HORA_OP_ELEMENTWISE, .root = j % g_size,
                    .mode = j % NMODES, .count = sizes[j % nsz],
                    .salt = 20000 + (uint64_t)j};
    aop_prepare(&a);
    int rc = a.coll ? hora_broadcast(NULL, a.send, a.count, (hora_dtype_t)a.dt,
                                     a.root)
                    : hora_allreduce(NULL, a.send, a.recv, a.count,
                                     (hora_dtype_t)a.dt, (hora_op_t)a.op);
    aop_finish(&a, rc);
  }
  free(A);
  if (!g_quiet && g_rank == 0)
    printf("rank 0: %d unnamed + %d named: %.3f s\n", unnamed, named,
           now_s() - t2);

  /* 4. runs of allreduces alike in dtype and op, the same order on every
   * rank (across hosts the coordinator fuses them: one collective over
   * their concatenation, segments of odd sizes, the wide sums of integer
   * averages and of float16/bfloat16), a broadcast between two runs */
  double tf = now_s();
  enum { RUN = 9 };
  int nf = HORA_DTYPE_COUNT * HORA_OP_ELEMENTWISE * RUN;
  A = calloc((size_t)nf, sizeof *A);
  for (int j = 0; j < nf; j++) {
    struct aop *a = &A[j];
    int r = j / RUN;
    a->dt = r % HORA_DTYPE_COUNT;
    a->op = r / HORA_DTYPE_COUNT;
    a->coll = j % RUN == RUN - 1 && r % 4 == 1; /* a run cut by a broadcast */
    a->root = r % g_size;
    a->mode = j % 3 ? IP_ALLOC : OOP_ALLOC; /* resident: fusable */
    a->count = sizes[1 + j % 5] + (uint64_t)(j % 3);
    a->salt = 30000 + (uint64_t)j;
    snprintf(a->name, sizeof a->name, "fuse.%d", j);
    a->nm = a->name;
    aop_prepare(a);
  }
  for (int j = 0; j < nf; j++) aop_submit(&A[j]);
  for (int j = nf - 1; j >= 0; j--) aop_wait(&A[j]);
  free(A);
  /* fused runs whose 64-bit sums span several ring pieces (1 MiB each),
   * cut inside tensors: int8/uint8 averages of about 50000 elements */
  enum { BIG = 6 };
  A = calloc(2 * BIG, sizeof *A);
  for (int j = 0; j < 2 * BIG; j++) {
    struct aop *a = &A[j];
    a->dt = j < BIG ? HORA_INT8 : HORA_UINT8;
    a->op = HORA_AVERAGE;
    a->mode = IP_ALLOC;
    a->count = 50000 + 7 * (uint64_t)j;
    a->salt = 31000 + (uint64_t)j;
    snprintf(a->name, sizeof a->name, "fusebig.%d", j);
    a->nm = a->name;
    aop_prepare(a);
  }
  for (int j = 0; j < 2 * BIG; j++) aop_submit(&A[j]);
  for (int j = 0; j < 2 * BIG; j++) aop_wait(&A[j]);
  free(A);
  if (!g_quiet && g_rank == 0)
    printf("rank 0: %d allreduces in runs of %d alike: %.3f s\n", nf, RUN,
           now_s() - tf);

  /* 5. awkward names: longer than a submission entry holds (they differ
   * only after the 191st character), empty, with blanks, tabs, a newline
   * and UTF-8; rank-dependent order */
  double t3 = now_s();
  enum { NLONG = 24 };
  static char names[NLONG][400];
  A = calloc(NLONG, sizeof *A);
  for (int j = 0; j < NLONG; j++) {
    struct aop *a = &A[j];
    if (j < 16) {
      memset(names[j], 'n', 300);
      snprintf(names[j] + (j < 8 ? 300 : 195), 40, "/%d", j);
    } else if (j == 16) {
      names[j][0] = '\0';
    } else {
      snprintf(names[j], sizeof names[j], "name with  blanks\tand\nn\xc3\xbc%d", j);
    }
    a->nm = names[j];
    a->coll = j % 6 == 5;
    a->dt = j % HORA_DTYPE_COUNT;
    a->op = j % HORA_OP_ELEMENTWISE;
    a->root = j % g_size;
    a->mode = j % NMODES;
    a->count = sizes[j % nsz];
    a->salt = 30000 + (uint64_t)j;
    aop_prepare(a);
  }
  permute(perm, NLONG, 4711 + (uint64_t)g_rank);
  for (int j = 0; j < NLONG; j++) aop_submit(&A[perm[j]]);
  for (int j = 0; j < NLONG; j++) aop_wait(&A[j]);
  free(A);
  free(perm);
  if (!g_quiet && g_rank == 0)
    printf("rank 0: %d awkward names: %.3f s\n", NLONG, now_s() - t3);
  return 0;
}

/* ---- edges -------------------------------------------------------------- */

/* Hand-picked values at the limits of the documented arithmetic (hora.h):
 * int64 SUM wraps, int64 AVERAGE divides the wrapped sum, smaller integer
 * AVERAGEs sum exactly in 64 bits then truncate toward zero, float16
 * accumulates in float32 and rounds once (a float16 accumulator would
 * overflow to inf). Every element of a 37-element tensor holds the value. */
static void edge(const char *what, int dt, int op, struct val mine,
                 struct val want) {
  enum { N = 37 };
  unsigned char buf[N * 8];
  for (int i = 0; i < N; i++) store(dt, buf, (uint64_t)i, mine);
  char name[96];
  snprintf(name, sizeof name, "edge.%s", what);
  int rc = hora_allreduce(name, buf, buf, N, (hora_dtype_t)dt, (hora_op_t)op);
  g_checks++;
  if (rc != 0) {
    fail("edge %s: allreduce returned %d (%s): %s", what, rc, hora_err_name(rc),
         hora_last_error());
    return;
  }
  for (int i = 0; i < N; i++) {
    struct val got = load(dt, buf, (uint64_t)i);
    int ok = is_float(dt) ? (got.f == want.f || (isnan(got.f) && isnan(want.f)))
                          : got.i == want.i;
    if (!ok) {
      if (is_float(dt))
        fail("edge %s (%s %s, %d ranks): expected %.9g, got %.9g", what,
             dt_name(dt), op_name(op), g_size, want.f, got.f);
      else
        fail("edge %s (%s %s, %d ranks): expected %lld, got %lld", what,
             dt_name(dt), op_name(op), g_size, (long long)want.i,
             (long long)got.i);
      return;
    }
  }
}

static struct val I(int64_t i) { return (struct val){i, 0}; }
static struct val F(double f) { return (struct val){0, f}; }

static int cmd_edges(int argc, char **argv) {
  (void)argc;
  (void)argv;
  const int n = g_size, r = g_rank;
  const uint64_t un = (uint64_t)n;
  /* int64 SUM wraps: MAX + 1 + 1 ... */
  edge("i64.sum.wrap", HORA_INT64, HORA_SUM, I(r == 0 ? INT64_MAX : 1),
       I((int64_t)((uint64_t)INT64_MAX + (un - 1))));
  /* int64 AVERAGE: the wrapped sum, divided */
  edge("i64.avg.max", HORA_INT64, HORA_AVERAGE, I(INT64_MAX),
       I((int64_t)((uint64_t)INT64_MAX * un) / n));
  edge("i64.avg.min", HORA_INT64, HORA_AVERAGE, I(INT64_MIN),
       I((int64_t)((uint64_t)INT64_MIN * un) / n));
  /* smaller integers: exact sum, truncated toward zero */
  edge("u8.avg", HORA_UINT8, HORA_AVERAGE, I(r == 0 ? 254 : 255),
       I((254 + 255 * (n - 1)) / n));
  edge("i8.avg.neg", HORA_INT8, HORA_AVERAGE, I(r == 0 ? -128 : -127),
       I((-128 - 127 * (n - 1)) / n));
  edge("i8.avg.pos", HORA_INT8, HORA_AVERAGE, I(r == 0 ? 126 : 127),
       I((126 + 127 * (n - 1)) / n));
  {
    int64_t sum = 0;
    for (int k = 0; k < n; k++) sum += k % 2 ? 32767 : -32768;
    edge("i16.avg.alt", HORA_INT16, HORA_AVERAGE, I(r % 2 ? 32767 : -32768),
         I(sum / n));
  }
  edge("i32.avg.max", HORA_INT32, HORA_AVERAGE, I(INT32_MAX), I(INT32_MAX));
  edge("i32.avg.min", HORA_INT32, HORA_AVERAGE, I(INT32_MIN), I(INT32_MIN));
  {
    int64_t sum = 0;
    for (int k = 0; k < n; k++) sum += k == n - 1 ? INT32_MIN : -1;
    edge("i32.avg.trunc", HORA_INT32, HORA_AVERAGE,
         I(r == n - 1 ? INT32_MIN : -1), I(sum / n));
  }
  edge("u8.max", HORA_UINT8, HORA_MAX, I(r == n - 1 ? 255 : 128), I(255));
  edge("u8.min", HORA_UINT8, HORA_MIN, I(r == n - 1 ? 0 : 200), I(0));
  edge("i64.min", HORA_INT64, HORA_MIN, I(r == 0 ? INT64_MIN : INT64_MAX),
       I(INT64_MIN));
  /* float16 accumulates in float32: 65504 (its largest) averages fine */
  edge("f16.avg.max", HORA_FLOAT16, HORA_AVERAGE, F(65504), F(65504));
  {
    /* 60000 + 60000 - 60000 ...: inf in a float16 accumulator */
    double exact = 0;
    for (int k = 0; k < n; k++) exact += k < 2 ? 60000.0 : -60000.0;
    edge("f16.sum.inner", HORA_FLOAT16, HORA_SUM,
         F(r < 2 ? 60000.0 : -60000.0), F(round_to(HORA_FLOAT16, exact)));
  }
  edge("bf16.avg", HORA_BFLOAT16, HORA_AVERAGE, F(r == 0 ? 256.0 : 1.0),
       F(round_to(HORA_BFLOAT16, (256.0 + (n - 1)) / n)));
  edge("f32.max.inf", HORA_FLOAT32, HORA_MAX, F(r == n - 1 ? INFINITY : -1e30),
       F(INFINITY));
  edge("f64.min.neginf", HORA_FLOAT64, HORA_MIN, F(r == 0 ? -INFINITY : 1e300),
       F(-INFINITY));
  if (!g_quiet && g_rank == 0) printf("rank 0: edges done\n");
  return 0;
}

/* ---- threads ------------------------------------------------------------- */

struct thr {
  pthread_t tid;
  int id, nops, window;
};

/* One thread of a rank: submits `window` named async operations, waits
 * for them (every other thread through hora_test), again and again. The
 * ranks' threads run at their own pace, so the same name is submitted in
 * different interleavings on different ranks. */
static void *thr_main(void *arg) {
  struct thr *t = arg;
  static const uint64_t sizes[] = {0, 1, 7, 100, 1000, 5000};
  struct aop *A = calloc((size_t)t->window, sizeof *A);
  for (int base = 0; base < t->nops; base += t->window) {
    int n = t->nops - base < t->window ? t->nops - base : t->window;
    memset(A, 0, sizeof *A * (size_t)t->window);
    for (int j = 0; j < n; j++) {
      int k = base + j;
      struct aop *a = &A[j];
      a->coll = k % 5 == 4;
      a->dt = k % HORA_DTYPE_COUNT;
      a->op = (k / HORA_DTYPE_COUNT) % HORA_OP_ELEMENTWISE;
      a->root = (k + t->id) % g_size;
      a->mode = (k + t->id) % NMODES;
      a->count = sizes[(k * 7 + t->id) % 6];
      a->salt = 100000 + (uint64_t)t->id * 100000 + (uint64_t)k;
      snprintf(a->name, sizeof a->name, "th.%d.%d", t->id, k);
      a->nm = a->name;
      aop_prepare(a);
      aop_submit(a);
    }
    for (int j = n - 1; j >= 0; j--) {
      struct aop *a = &A[j];
      if (a->done) continue;
      if (t->id % 2) {
        int done = 0, rc;
        double t0 = now_s();
        while ((rc = hora_test(a->h, &done)) == 0 && !done) {
          if (now_s() - t0 > 120) break;
          sched_yield();
        }
        if (rc != 0 || done) aop_finish(a, rc);
        else fail("thread %d: %s: hora_test never reported done", t->id, a->name);
      } else {
        aop_wait(a);
      }
    }
  }
  free(A);
  return NULL;
}

static int cmd_threads(int argc, char **argv) {
  int nthr = 4, nops = 400, window = 100, opt;
  while ((opt = getopt(argc, argv, "T:K:W:x:q")) != -1) {
    switch (opt) {
    case 'T': nthr = atoi(optarg); break;
    case 'K': nops = atoi(optarg); break;
    case 'W': window = atoi(optarg); break;
    case 'x': break;
    case 'q': g_quiet = 1; break;
    default: return 2;
    }
  }
  if (nthr < 1 || nthr > 64 || window < 1) return 2;
  double t0 = now_s();
  struct thr th[64];
  for (int i = 0; i < nthr; i++) {
    th[i] = (struct thr){.id = i, .nops = nops, .window = window};
    if (pthread_create(&th[i].tid, NULL, thr_main, &th[i]) != 0) {
      fail("cannot start thread %d", i);
      nthr = i;
      break;
    }
  }
  for (int i = 0; i < nthr; i++) pthread_join(th[i].tid, NULL);
  int rc = hora_barrier();
  if (rc != 0) fail("barrier after the threads: %s", hora_last_error());
  if (!g_quiet && g_rank == 0)
    printf("rank 0: %d threads x %d operations (%d in flight per thread): "
           "%.3f s\n", nthr, nops, window, now_s() - t0);
  return 0;
}

int main(int argc, char **argv) {
  /* drop --marker=... arguments */
  int n = 0;
  for (int i = 0; i < argc; i++)
    if (strncmp(argv[i], "--marker=", 9) != 0) argv[n++] = argv[i];
  argc = n;
  argv[argc] = NULL;
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) {
    fprintf(stderr, "usage: it_coll matrix|async|threads|edges [options]\n");
    return 2;
  }
  int expect = -1;
  for (int i = 2; i + 1 < argc; i++)
    if (!strcmp(argv[i], "-x")) expect = atoi(argv[i + 1]);
  int rc = hora_init();
  if (rc != 0) {
    printf("rank ?: FAIL: hora_init returned %d (%s): %s\n", rc,
           hora_err_name(rc), hora_last_error());
    return 1;
  }
  g_rank = hora_rank();
  g_size = hora_size();
  if (g_rank < 0 || g_size < 1 || g_rank >= g_size) {
    printf("FAIL: bad layout: rank %d of %d\n", g_rank, g_size);
    return 1;
  }
  if (expect >= 0 && g_size != expect)
    fail("hora_size() is %d; expected %d", g_size, expect);
  double t0 = now_s();
  optind = 1;
  if (!strcmp(argv[1], "matrix")) rc = cmd_matrix(argc - 1, argv + 1);
  else if (!strcmp(argv[1], "async")) rc = cmd_async(argc - 1, argv + 1);
  else if (!strcmp(argv[1], "threads")) rc = cmd_threads(argc - 1, argv + 1);
  else if (!strcmp(argv[1], "edges")) rc = cmd_edges(argc - 1, argv + 1);
  else {
    fprintf(stderr, "it_coll: unknown command '%s'\n", argv[1]);
    rc = 2;
  }
  if (rc == 2) return 2;
  int src = hora_shutdown();
  if (src != 0) fail("hora_shutdown returned %d: %s", src, hora_last_error());
  printf("rank %d of %d: %ld checks, %ld failures, %d alloc fallbacks, "
         "%.3f s\n", g_rank, g_size, (long)g_checks, (long)g_failures,
         (int)g_alloc_fallbacks, now_s() - t0);
  return g_failures ? 1 : 0;
}
