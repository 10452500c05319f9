/* reduce.c -- element-wise reduction kernels of the CPU engine (see reduce.h).
 *
 * The work goes in blocks that fit in L1: for each block the sources are
 * combined into a private accumulator (`acc`, on the stack), one source at a
 * time, then the accumulator is converted and written into the first
 * destination and copied from there to the others. Every source of a block
 * is read before any destination of that block is written, so a destination
 * may be any of the sources (in-place allreduce: dsts == srcs).
 *
 * The kernels are plain loops over restrict-qualified pointers, shaped so
 * that gcc -O2 (its "very cheap" cost model, which refuses loops that need
 * a scalar epilogue or alias checks) vectorizes them: runs of exactly 16
 * elements, then the same statement in a scalar loop for the rest, so both
 * parts give bit-identical results. Check with -fopt-info-vec.
 *
 * Accumulators: float32 for float16/bfloat16/float32, float64 for float64,
 * the element's unsigned type for integer SUM/PRODUCT (wrapping modulo 2^n
 * without undefined behaviour), the element type for integer MIN/MAX, and for
 * integer AVERAGE an exact sum: in float64 when it provably stays below 2^53,
 * else in 64-bit unsigned arithmetic (int64 sums wrap). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "reduce.h"
#include "half.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Through a small buffer, with plain copies: the blocks of a swap are
 * read and written at once, the lines being in the cache anyway. */
void hc_swap_bytes(void *a, void *b, size_t n) {
  unsigned char tmp[16u << 10], *pa = a, *pb = b;
  for (size_t off = 0; off < n; off += sizeof tmp) {
    size_t k = n - off < sizeof tmp ? n - off : sizeof tmp;
    memcpy(tmp, pa + off, k);
    memcpy(pa + off, pb + off, k);
    memcpy(pb + off, tmp, k);
  }
}

void hc_copy_nt(void *dst, const void *src, size_t n) {
#if defined(__SSE2__)
  if (n >= 256) {
    unsigned char *d = dst;
    const unsigned char *s = src;
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    size_t body = n & ~(size_t)63;
    for (size_t i = 0; i < body; i += 64) {
      __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
      __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
      __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
      __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
      _mm_stream_si128((__m128i *)(d + i), a);
      _mm_stream_si128((__m128i *)(d + i + 16), b);
      _mm_stream_si128((__m128i *)(d + i + 32), c);
      _mm_stream_si128((__m128i *)(d + i + 48), e);
    }
    _mm_sfence(); /* the stores are visible before whatever follows */
    memcpy(d + body, s + body, n - body);
    return;
  }
#endif
  memcpy(dst, src, n);
}

/* Accumulator bytes per block (a compile-time tuning knob). Small blocks
 * keep the block of every source, the accumulator and the destinations in
 * L1 until the block is done; measured on a 2-core Zen VM (float32 SUM, 2
 * and 4 sources in place, 64 MiB): 1-2 KiB ran 1.5x faster than 16 KiB,
 * 512 bytes slower again. */
#ifndef ACC_BYTES
#define ACC_BYTES 2048u
#endif

/* Runs the statement for i in [0, n): first in runs of exactly 16, an
 * inner loop of constant trip count that gcc -O2 vectorizes whatever the
 * element size, then the scalar rest. */
#define VLOOP(n, ...)                                                          \
  do {                                                                         \
    size_t vl_n_ = (n), vl_v_ = vl_n_ & ~(size_t)15;                           \
    for (size_t vl_j_ = 0; vl_j_ < vl_v_; vl_j_ += 16)                         \
      for (size_t vl_k_ = 0; vl_k_ < 16; vl_k_++) {                            \
        size_t i = vl_j_ + vl_k_;                                              \
        __VA_ARGS__;                                                           \
      }                                                                        \
    for (size_t i = vl_v_; i < vl_n_; i++) {                                   \
      __VA_ARGS__;                                                             \
    }                                                                          \
  } while (0)

/* ---- scalar conversions (common/half.h), as the reductions store them -- */

/* The reductions' own stores: hc_f2h/hc_f2b, except that a NaN becomes the
 * canonical quiet NaN (0x7e00, 0x7fc0). SUM/PRODUCT/AVERAGE round through
 * these: which operand's payload and sign a NaN + NaN keeps depends on the
 * order in which the compiler puts the operands (x86 keeps the first, and
 * inf - inf gives the negative default NaN there but a positive one on
 * Arm), so without this the bits of a NaN result would vary with the
 * compiler and the kernel that ran. MIN/MAX select without arithmetic and
 * keep the first NaN in source order (quieted, with the top of its payload
 * and its sign): the same in every kernel. */
static inline uint16_t f2h_c(float f) {
  return (uint16_t)hc_sel((hc_fbits(f) & 0x7fffffffu) > 0x7f800000u, 0x7e00u,
                       hc_f2h(f));
}

static inline uint16_t f2b_c(float f) {
  uint32_t x = hc_fbits(f);
  uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  return (uint16_t)hc_sel((x & 0x7fffffffu) > 0x7f800000u, 0x7fc0u, r);
}


/* ---- kernels ------------------------------------------------------------- */

/* What a store needs to finish AVERAGE. */
struct avg {
  int div;
  float f32;
  double f64;
};

typedef void load_fn(void *restrict acc, const void *restrict s, size_t n);
typedef void op2_fn(void *restrict acc, const void *restrict a,
                    const void *restrict b, size_t n);
typedef void op1_fn(void *restrict acc, const void *restrict s, size_t n);
typedef void store_fn(void *restrict out, const void *restrict acc, size_t n,
                      const struct avg *d);

struct kernel {
  size_t esize, asize; /* element and accumulator bytes */
  load_fn *load;       /* acc = s (nsrc == 1) */
  op2_fn *op2;         /* acc = a op b */
  op1_fn *op1;         /* acc = acc op s */
  store_fn *store;     /* out = finish(acc) */
};

#define ID(x) (x)
/* NaN-propagating: the result is NaN when either x or y is. */
#define FMIN(x, y) ((x) < (y) || (x) != (x) ? (x) : (y))
#define FMAX(x, y) ((x) > (y) || (x) != (x) ? (x) : (y))
#define IMIN(x, y) ((x) < (y) ? (x) : (y))
#define IMAX(x, y) ((x) > (y) ? (x) : (y))

/* acc = LOAD(s) */
#define DEF_LOAD(tag, T, A, LOAD)                                              \
  static void tag##_load(void *restrict acc_, const void *restrict s_,         \
                         size_t n) {                                           \
    A *acc = acc_;                                                             \
    const T *s = s_;                                                           \
    VLOOP(n, acc[i] = (A)LOAD(s[i]));                                          \
  }

/* acc = OP(LOAD(a), LOAD(b)) and acc = OP(acc, LOAD(s)); OP sees x and y
 * of type A and its result is converted to A. */
#define DEF_OP(tag, name, T, A, LOAD, OP)                                      \
  static void tag##_##name##2(void *restrict acc_, const void *restrict a_,    \
                              const void *restrict b_, size_t n) {             \
    A *acc = acc_;                                                             \
    const T *a = a_, *b = b_;                                                  \
    VLOOP(n, {                                                                 \
      A x = (A)LOAD(a[i]), y = (A)LOAD(b[i]);                                  \
      acc[i] = (A)(OP(x, y));                                                  \
    });                                                                        \
  }                                                                            \
  static void tag##_##name##1(void *restrict acc_, const void *restrict s_,    \
                              size_t n) {                                      \
    A *acc = acc_;                                                             \
    const T *s = s_;                                                           \
    VLOOP(n, {                                                                 \
      A x = acc[i], y = (A)LOAD(s[i]);                                         \
      acc[i] = (A)(OP(x, y));                                                  \
    });                                                                        \
  }

#define ADD(x, y) ((x) + (y))
#define MUL(x, y) ((x) * (y))
/* Unsigned arithmetic promoted at least to unsigned int, so that uint8 and
 * uint16 products cannot overflow a signed int. */
#define UADD(x, y) (0u + (x) + (y))
#define UMUL(x, y) ((0u + (x)) * (y))

/* out = acc, for accumulators of the element's own width. */
#define DEF_COPY(tag, T)                                                       \
  static void tag##_copy(void *restrict out, const void *restrict acc,         \
                         size_t n, const struct avg *d) {                      \
    (void)d;                                                                   \
    memcpy(out, acc, n * sizeof(T));                                           \
  }

/* Floating classes: element T accumulated in A. STORE finishes MIN/MAX,
 * CSTORE (canonical NaN, see f2h_c) SUM, PRODUCT and AVERAGE. */
#define DEF_FLOAT(tag, T, A, LOAD, STORE, CSTORE, DIVF)                        \
  DEF_LOAD(tag, T, A, LOAD)                                                    \
  DEF_OP(tag, sum, T, A, LOAD, ADD)                                            \
  DEF_OP(tag, prod, T, A, LOAD, MUL)                                           \
  DEF_OP(tag, min, T, A, LOAD, FMIN)                                           \
  DEF_OP(tag, max, T, A, LOAD, FMAX)                                           \
  static void tag##_store(void *restrict out_, const void *restrict acc_,      \
                          size_t n, const struct avg *d) {                     \
    T *out = out_;                                                             \
    const A *acc = acc_;                                                       \
    (void)d;                                                                   \
    VLOOP(n, out[i] = STORE(acc[i]));                                          \
  }                                                                            \
  static void tag##_cstore(void *restrict out_, const void *restrict acc_,     \
                           size_t n, const struct avg *d) {                    \
    T *out = out_;                                                             \
    const A *acc = acc_;                                                       \
    (void)d;                                                                   \
    VLOOP(n, out[i] = CSTORE(acc[i]));                                         \
  }                                                                            \
  static void tag##_store_avg(void *restrict out_, const void *restrict acc_,  \
                              size_t n, const struct avg *d) {                 \
    T *out = out_;                                                             \
    const A *acc = acc_;                                                       \
    const A div = d->DIVF;                                                     \
    VLOOP(n, out[i] = CSTORE(acc[i] / div));                                   \
  }

DEF_FLOAT(f16, uint16_t, float, hc_h2f, hc_f2h, f2h_c, f32)
DEF_FLOAT(bf16, uint16_t, float, hc_b2f, hc_f2b, f2b_c, f32)
DEF_FLOAT(f32, float, float, ID, ID, ID, f32)
DEF_FLOAT(f64, double, double, ID, ID, ID, f64)

/* Integer SUM/PRODUCT on the unsigned type U of the element's width. */
#define DEF_UINT(tag, U)                                                       \
  DEF_COPY(tag, U)                                                             \
  DEF_LOAD(tag, U, U, ID)                                                      \
  DEF_OP(tag, sum, U, U, ID, UADD)                                             \
  DEF_OP(tag, prod, U, U, ID, UMUL)

DEF_UINT(u8, uint8_t)
DEF_UINT(u16, uint16_t)
DEF_UINT(u32, uint32_t)
DEF_UINT(u64, uint64_t)

/* Integer MIN/MAX on the element type itself. */
#define DEF_MINMAX(tag, T)                                                     \
  DEF_COPY(tag, T)                                                             \
  DEF_LOAD(tag, T, T, ID)                                                      \
  DEF_OP(tag, min, T, T, ID, IMIN)                                             \
  DEF_OP(tag, max, T, T, ID, IMAX)

DEF_MINMAX(mu8, uint8_t)
DEF_MINMAX(mi8, int8_t)
DEF_MINMAX(mi16, int16_t)
DEF_MINMAX(mi32, int32_t)
DEF_MINMAX(mi64, int64_t)

/* Integer AVERAGE, fast path: elements of at most 32 bits summed in double,
 * exact while |sum| < 2^53. The quotient rounds to nearest in double but
 * cannot reach an integer the true quotient does not equal (that would need
 * an error of 1/div > |sum|/div * 2^-53), so truncating it is C's division.
 * Used only when the quotient fits T (div >= nsrc). */
#define DEF_DAVG(tag, T)                                                       \
  DEF_LOAD(tag, T, double, ID)                                                 \
  DEF_OP(tag, sum, T, double, ID, ADD)                                         \
  static void tag##_store_avg(void *restrict out_, const void *restrict acc_,  \
                              size_t n, const struct avg *d) {                 \
    T *out = out_;                                                             \
    const double *acc = acc_;                                                  \
    const double div = d->f64;                                                 \
    VLOOP(n, out[i] = (T)(acc[i] / div));                                      \
  }

DEF_DAVG(du8, uint8_t)
DEF_DAVG(di8, int8_t)
DEF_DAVG(di16, int16_t)
DEF_DAVG(di32, int32_t)

/* Integer AVERAGE, general path: sign-extended into uint64 (int64 sums wrap,
 * smaller ones are exact), divided as int64, stored modulo 2^bits through
 * the unsigned type U (the quotient may not fit T when div < nsrc). */
static inline int64_t s64(uint64_t u) {
  return u <= INT64_MAX ? (int64_t)u : -(int64_t)(~u) - 1;
}
#define SEXT(x) ((uint64_t)(int64_t)(x))

#define DEF_LAVG(tag, T, U)                                                    \
  DEF_LOAD(tag, T, uint64_t, SEXT)                                             \
  DEF_OP(tag, sum, T, uint64_t, SEXT, ADD)                                     \
  static void tag##_store_avg(void *restrict out_, const void *restrict acc_,  \
                              size_t n, const struct avg *d) {                 \
    U *out = out_;                                                             \
    const uint64_t *acc = acc_;                                                \
    const int64_t div = d->div;                                                \
    VLOOP(n, out[i] = (U)(uint64_t)(s64(acc[i]) / div));                       \
  }

DEF_LAVG(lu8, uint8_t, uint8_t)
DEF_LAVG(li8, int8_t, uint8_t)
DEF_LAVG(li16, int16_t, uint16_t)
DEF_LAVG(li32, int32_t, uint32_t)
DEF_LAVG(li64, int64_t, uint64_t)

#define K(tag, T, A, op, store)                                                \
  (struct kernel) {                                                            \
    sizeof(T), sizeof(A), tag##_load, tag##_##op##2, tag##_##op##1, store      \
  }

/* A float class's kernel for `op`. */
#define KFLOAT(tag, T, A, op)                                                  \
  ((op) == HORA_SUM       ? K(tag, T, A, sum, tag##_cstore)                    \
   : (op) == HORA_AVERAGE ? K(tag, T, A, sum, tag##_store_avg)                 \
   : (op) == HORA_PRODUCT ? K(tag, T, A, prod, tag##_cstore)                   \
   : (op) == HORA_MIN     ? K(tag, T, A, min, tag##_store)                     \
                          : K(tag, T, A, max, tag##_store))

/* An integer type's kernel for `op`; `fast` selects the double AVERAGE. */
#define KINT(T, U, u, m, dv, l, op, fast)                                      \
  ((op) == HORA_SUM       ? K(u, U, U, sum, u##_copy)                          \
   : (op) == HORA_PRODUCT ? K(u, U, U, prod, u##_copy)                         \
   : (op) == HORA_MIN     ? K(m, T, T, min, m##_copy)                          \
   : (op) == HORA_MAX     ? K(m, T, T, max, m##_copy)                          \
   : (fast)               ? K(dv, T, double, sum, dv##_store_avg)              \
                          : K(l, T, uint64_t, sum, l##_store_avg))

static struct kernel pick(hora_dtype_t dtype, hora_op_t op, int fast) {
  switch (dtype) {
  case HORA_UINT8:
    return KINT(uint8_t, uint8_t, u8, mu8, du8, lu8, op, fast);
  case HORA_INT8:
    return KINT(int8_t, uint8_t, u8, mi8, di8, li8, op, fast);
  case HORA_INT16:
    return KINT(int16_t, uint16_t, u16, mi16, di16, li16, op, fast);
  case HORA_INT32:
    return KINT(int32_t, uint32_t, u32, mi32, di32, li32, op, fast);
  case HORA_INT64:
    /* Never fast: int64 sums need the wrapping 64-bit path. */
    return KINT(int64_t, uint64_t, u64, mi64, li64, li64, op, 0);
  case HORA_FLOAT16:
    return KFLOAT(f16, uint16_t, float, op);
  case HORA_BFLOAT16:
    return KFLOAT(bf16, uint16_t, float, op);
  case HORA_FLOAT32:
    return KFLOAT(f32, float, float, op);
  default:
    return KFLOAT(f64, double, double, op);
  }
}

/* Copies src to every destination but itself, block by block so that the
 * source is read from memory once however many destinations there are. */
#define COPY_BYTES 16384u
static void copy_all(void *const *dsts, int ndst, const unsigned char *src,
                     size_t bytes) {
  for (size_t off = 0; off < bytes; off += COPY_BYTES) {
    size_t n = bytes - off < COPY_BYTES ? bytes - off : COPY_BYTES;
    for (int d = 0; d < ndst; d++) {
      unsigned char *o = (unsigned char *)dsts[d] + off;
      if (o != src + off) memcpy(o, src + off, n);
    }
  }
}

/* ---- x86-64 fast paths for float16 and bfloat16 ------------------------- *
 *
 * Baseline x86-64 (SSE2) cannot convert half precision, so the portable
 * kernels above spend most of their time in the bit manipulations of
 * hc_h2f/hc_f2h. Where the CPU has AVX2 and F16C (checked once, at the first
 * reduction of either type), the kernels below take over float16
 * (VCVTPH2PS/VCVTPS2PH, rounding to nearest even) and bfloat16 (AVX2
 * integer shifts, and hc_f2b's rounding). gcc compiles them for AVX2 through
 * function attributes, whatever -march the rest of the file gets.
 *
 * Same blocks as hc_reduce: every source of a block is read before the
 * block is written into dsts[0], then copied to the other destinations.
 * With two sources (or one, for AVERAGE) a block goes from the sources to
 * dsts[0] in one pass, through registers; with more, the sources are
 * combined into a float32 accumulator one source at a time (a loop per
 * source, as the portable kernels do: that measured faster than one loop
 * over all sources), then rounded into dsts[0].
 *
 * The results are bit-identical to the portable kernels' for every input,
 * NaN included: the same float32 operations in the same order, then:
 *  - widening is exact; VCVTPH2PS quiets a signalling NaN where hc_h2f does
 *    not, but no result depends on that: arithmetic quiets it in both, and
 *    narrowing a MIN/MAX result sets the quiet bit in both;
 *  - MIN/MAX select as FMIN/FMAX do: VMINPS(x, y) is x < y ? x : y, and y
 *    when either is NaN, so x is blended back in where x is NaN;
 *  - NaN results of SUM/PRODUCT/AVERAGE become the canonical quiet NaN, as
 *    in f2h_c/f2b_c; VCVTPS2PH narrows any other NaN as hc_f2h does (sign, top
 *    of the payload, quiet bit set).
 * test_reduce compares the two on random data with special values.
 * HORA_REDUCE_PORTABLE=1 in the environment (read once) disables these. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#ifdef __clang__
#include <cpuid.h>
#endif

#define HC_FAST 1
#ifndef FAST_BLK
#define FAST_BLK 1024u /* elements per block, a multiple of 8 */
#endif
#define FAST_TARGET __attribute__((target("avx2,f16c")))
#define FAST_INLINE static inline __attribute__((always_inline)) FAST_TARGET

/* 8 elements at p, widened to float32 (exactly: hc_h2f/hc_b2f).
 * bfloat16: the 16 bytes in both halves of a ymm register, then VPSHUFB puts elements 0-3
 * (low half) and 4-7 (high half) in the top 16 bits of the 32-bit lanes
 * and zeroes the bottom ones: one shuffle. Loads and stores are 16 bytes
 * wide, which measured as fast as 32 bytes or faster. */
FAST_INLINE __m256 ld8(int bf, const uint16_t *p) {
  if (bf) {
    const __m256i widen = _mm256_setr_epi8(
        -1, -1, 0, 1, -1, -1, 2, 3, -1, -1, 4, 5, -1, -1, 6, 7, /* low half */
        -1, -1, 8, 9, -1, -1, 10, 11, -1, -1, 12, 13, -1, -1, 14, 15);
    __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const void *)p));
    return _mm256_castsi256_ps(_mm256_shuffle_epi8(v, widen));
  }
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}

/* hc_f2b on 8 floats. The rounding adds 0x7fff plus the lowest bit kept to the
 * 32-bit pattern; the result is its top 16 bits, which VPSHUFB gathers
 * into the low 8 bytes of each half and VPERMQ puts side by side. With
 * `nan` (MIN/MAX results) a NaN gives hc_f2b's (x >> 16) | 0x40; without it
 * NaNs must be the canonical 0x7fc00000 already, which rounds to 0x7fc0
 * like any other value. */
FAST_INLINE __m128i f2b8(int nan, __m256 f) {
  __m256i x = _mm256_castps_si256(f);
  __m256i lsb =
      _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  __m256i r =
      _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb);
  if (nan) {
    __m256i isnan =
        _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                           _mm256_set1_epi32(0x7f800000));
    __m256i q = _mm256_or_si256(x, _mm256_set1_epi32(0x00400000));
    r = _mm256_blendv_epi8(r, q, isnan);
  }
  const __m256i narrow = _mm256_setr_epi8(
      2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1, /* low */
      2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1);
  r = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(r, narrow), 0x08);
  return _mm256_castsi256_si128(r);
}

/* 8 floats rounded to nearest even and stored at p. VCVTPS2PH also
 * overflows to inf and narrows NaNs as hc_f2h does. */
FAST_INLINE void st8(int bf, int nan, uint16_t *p, __m256 v) {
  __m128i h = bf ? f2b8(nan, v) : _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
  _mm_storeu_si128((__m128i *)(void *)p, h);
}

/* x op y, as the portable kernels compute it (see FMIN/FMAX). */
FAST_INLINE __m256 vop(hora_op_t op, __m256 x, __m256 y) {
  switch (op) {
  case HORA_PRODUCT:
    return _mm256_mul_ps(x, y);
  case HORA_MIN:
    return _mm256_blendv_ps(_mm256_min_ps(x, y), x,
                            _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  case HORA_MAX:
    return _mm256_blendv_ps(_mm256_max_ps(x, y), x,
                            _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  default: /* SUM, AVERAGE */
    return _mm256_add_ps(x, y);
  }
}

/* Elements [i, i + 8) of p, or the n - i < 8 left, zero-padded so that
 * nothing past the end is read (stn drops the padding lanes). */
FAST_INLINE __m256 ldn(int bf, const uint16_t *p, size_t i, size_t n) {
  if (n - i >= 8) return ld8(bf, p + i);
  uint16_t pad[8] = {0};
  memcpy(pad, p + i, (n - i) * sizeof *p);
  return ld8(bf, pad);
}

/* v finished (divided for AVERAGE, NaN made canonical for SUM, PRODUCT and
 * AVERAGE as f2h_c/f2b_c do), rounded and stored at p + i: 8 elements, or
 * the n - i < 8 left. */
FAST_INLINE void stn(int bf, hora_op_t op, uint16_t *p, size_t i, size_t n,
                     __m256 v, __m256 div) {
  int minmax = op == HORA_MIN || op == HORA_MAX;
  if (op == HORA_AVERAGE) v = _mm256_div_ps(v, div);
  if (!minmax) {
    __m256 qnan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
    v = _mm256_blendv_ps(v, qnan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  if (n - i >= 8) {
    st8(bf, minmax, p + i, v);
  } else {
    uint16_t pad[8];
    st8(bf, minmax, pad, v);
    memcpy(p + i, pad, (n - i) * sizeof *p);
  }
}

/* Runs STMT for the vectors [i, e) of [0, n): e = i + 8 (which the
 * compiler sees, so that ldn and stn lose their tail code), then the
 * shorter tail if any. */
#define EACH8(n, ...)                                                          \
  do {                                                                         \
    size_t i = 0, e;                                                           \
    for (; i + 8 <= (n); i += 8) {                                             \
      e = i + 8;                                                               \
      __VA_ARGS__;                                                             \
    }                                                                          \
    if (i < (n)) {                                                             \
      e = (n);                                                                 \
      __VA_ARGS__;                                                             \
    }                                                                          \
  } while (0)

/* Elements [off, off + n) of the sources, reduced into out. */
FAST_INLINE void fast_block(int bf, hora_op_t op, uint16_t *out, float *acc,
                            const void *const *srcs, int nsrc, size_t off,
                            size_t n, __m256 div) {
  const uint16_t *s0 = (const uint16_t *)srcs[0] + off;
  if (nsrc == 1) {
    EACH8(n, stn(bf, op, out, i, e, ldn(bf, s0, i, e), div));
    return;
  }
  const uint16_t *s1 = (const uint16_t *)srcs[1] + off;
  if (nsrc == 2) {
    EACH8(n, stn(bf, op, out, i, e,
                 vop(op, ldn(bf, s0, i, e), ldn(bf, s1, i, e)), div));
    return;
  }
  EACH8(n, _mm256_store_ps(acc + i,
                           vop(op, ldn(bf, s0, i, e), ldn(bf, s1, i, e))));
  for (int j = 2; j < nsrc; j++) {
    const uint16_t *s = (const uint16_t *)srcs[j] + off;
    EACH8(n, _mm256_store_ps(
                 acc + i, vop(op, _mm256_load_ps(acc + i), ldn(bf, s, i, e))));
  }
  EACH8(n, stn(bf, op, out, i, e, _mm256_load_ps(acc + i), div));
}

FAST_INLINE void fast_all(int bf, hora_op_t op, void *const *dsts, int ndst,
                          const void *const *srcs, int nsrc, size_t count,
                          float divisor) {
  _Alignas(32) float acc[FAST_BLK];
  __m256 div = _mm256_set1_ps(divisor);
  for (size_t off = 0; off < count; off += FAST_BLK) {
    size_t n = count - off < FAST_BLK ? count - off : FAST_BLK;
    uint16_t *o0 = (uint16_t *)dsts[0] + off;
    fast_block(bf, op, o0, acc, srcs, nsrc, off, n, div);
    /* Every source of this block has been read. */
    for (int d = 1; d < ndst; d++) {
      uint16_t *o = (uint16_t *)dsts[d] + off;
      if (o != o0) memcpy(o, o0, n * sizeof *o);
    }
  }
}

/* One function per dtype and op, so that each loop is compiled for its op
 * (fast_all and what it calls are inlined with bf and op constant). */
#define DEF_FAST(tag, bf, op)                                                  \
  static FAST_TARGET void tag(void *const *dsts, int ndst,                     \
                              const void *const *srcs, int nsrc, size_t count, \
                              float div) {                                     \
    fast_all(bf, op, dsts, ndst, srcs, nsrc, count, div);                      \
  }
DEF_FAST(f16_fast_avg, 0, HORA_AVERAGE)
DEF_FAST(f16_fast_sum, 0, HORA_SUM)
DEF_FAST(f16_fast_min, 0, HORA_MIN)
DEF_FAST(f16_fast_max, 0, HORA_MAX)
DEF_FAST(f16_fast_prod, 0, HORA_PRODUCT)
DEF_FAST(bf16_fast_avg, 1, HORA_AVERAGE)
DEF_FAST(bf16_fast_sum, 1, HORA_SUM)
DEF_FAST(bf16_fast_min, 1, HORA_MIN)
DEF_FAST(bf16_fast_max, 1, HORA_MAX)
DEF_FAST(bf16_fast_prod, 1, HORA_PRODUCT)

typedef void fast_fn(void *const *dsts, int ndst, const void *const *srcs,
                     int nsrc, size_t count, float div);
/* [bfloat16][op] */
static fast_fn *const fast_kernels[2][HORA_OP_ELEMENTWISE] = {
    {[HORA_AVERAGE] = f16_fast_avg,
     [HORA_SUM] = f16_fast_sum,
     [HORA_MIN] = f16_fast_min,
     [HORA_MAX] = f16_fast_max,
     [HORA_PRODUCT] = f16_fast_prod},
    {[HORA_AVERAGE] = bf16_fast_avg,
     [HORA_SUM] = bf16_fast_sum,
     [HORA_MIN] = bf16_fast_min,
     [HORA_MAX] = bf16_fast_max,
     [HORA_PRODUCT] = bf16_fast_prod},
};
#endif /* __x86_64__ */

/* Whether hc_reduce uses the fast paths: -1 until decided, then 0 or 1.
 * Decided once, at the first reduction of a 16-bit float type: 1 where the
 * CPU has them and HORA_REDUCE_PORTABLE is unset, empty or "0". */
static int use_fast = -1;

static int fast_supported(void) {
#ifdef HC_FAST
  __builtin_cpu_init();
#ifdef __clang__
  /* clang may not know "f16c" here. F16C needs the OS to save the YMM
   * registers, which the "avx2" check covers. */
  unsigned a, b, c, d;
  int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
#else
  int f16c = __builtin_cpu_supports("f16c");
#endif
  return __builtin_cpu_supports("avx2") && f16c;
#else
  return 0;
#endif
}

static int fast_enabled(void) {
  int f = __atomic_load_n(&use_fast, __ATOMIC_RELAXED);
  if (f < 0) {
    const char *e = getenv("HORA_REDUCE_PORTABLE");
    f = fast_supported() && !(e && *e && strcmp(e, "0"));
    __atomic_store_n(&use_fast, f, __ATOMIC_RELAXED);
  }
  return f;
}

/* Test hook, declared where it is used (tests/unit/test_reduce.c): with
 * want 0 forces the portable kernels, with 1 the fast ones if the CPU has
 * them, with -1 changes nothing; returns whether the fast ones are in use.
 * Not for use while other threads reduce. */
int hc_reduce_fast(int want) {
  if (want == 0) __atomic_store_n(&use_fast, 0, __ATOMIC_RELAXED);
  if (want > 0) __atomic_store_n(&use_fast, fast_supported(), __ATOMIC_RELAXED);
  return fast_enabled();
}

void hc_reduce(void *const *dsts, int ndst, const void *const *srcs, int nsrc,
               size_t count, hora_dtype_t dtype, hora_op_t op, int divisor) {
  if (count == 0 || ndst <= 0 || nsrc < 1 ||
      (unsigned)dtype >= HORA_DTYPE_COUNT ||
      (unsigned)op >= HORA_OP_ELEMENTWISE) /* Adasum: adasum.c */
    return;
  /* 0 means nsrc; a negative divisor is a caller bug, treated the same
   * rather than risking INT64_MIN / -1. */
  int div = divisor > 0 ? divisor : nsrc;
  /* Sums of up to 2^21 values of at most 32 bits stay below 2^53. */
  int fast = div >= nsrc && nsrc <= (1 << 21);
  struct kernel k = pick(dtype, op, fast);
  if (nsrc == 1 && (op != HORA_AVERAGE || div == 1)) {
    copy_all(dsts, ndst, srcs[0], count * k.esize);
    return;
  }
  struct avg avg = {div, (float)div, (double)div};
#ifdef HC_FAST
  if ((dtype == HORA_FLOAT16 || dtype == HORA_BFLOAT16) && fast_enabled()) {
    fast_kernels[dtype == HORA_BFLOAT16][op](dsts, ndst, srcs, nsrc, count,
                                             avg.f32);
    return;
  }
#endif

  _Alignas(64) unsigned char acc[ACC_BYTES];
  size_t blk = ACC_BYTES / k.asize;
  for (size_t off = 0; off < count; off += blk) {
    size_t n = count - off < blk ? count - off : blk;
    size_t boff = off * k.esize;
    const unsigned char *s0 = (const unsigned char *)srcs[0] + boff;
    if (nsrc == 1) {
      k.load(acc, s0, n);
    } else {
      k.op2(acc, s0, (const unsigned char *)srcs[1] + boff, n);
      for (int j = 2; j < nsrc; j++)
        k.op1(acc, (const unsigned char *)srcs[j] + boff, n);
    }
    /* Every source of this block has been read: destinations may be
     * written now, even those that are sources. */
    unsigned char *o0 = (unsigned char *)dsts[0] + boff;
    k.store(o0, acc, n, &avg);
    for (int d = 1; d < ndst; d++) {
      unsigned char *o = (unsigned char *)dsts[d] + boff;
      if (o != o0) memcpy(o, o0, n * k.esize);
    }
  }
}


/* ---- 16-bit floats to and from float32 (the wire of xhost/ring.c) ------- *
 *
 * Each in a portable loop and, where hc_reduce uses them, through the fast
 * paths' ld8/stn: the same bits either way (hc_h2f/hc_b2f are exact, stn
 * rounds as f2h_c/f2b_c do; a NaN in W may differ in payload, but every
 * store to 16 bits makes it the standard quiet NaN). The flags (bf,
 * product, divide) come last and CONST2 calls with them constant, so
 * that nothing but the conversion is left in each loop. */

/* F(args..., a, b) with a and b as the constants 0 or 1 */
#define CONST2(F, a, b, ...)                                                   \
  ((a) ? ((b) ? F(__VA_ARGS__, 1, 1) : F(__VA_ARGS__, 1, 0))                   \
       : ((b) ? F(__VA_ARGS__, 0, 1) : F(__VA_ARGS__, 0, 0)))

static inline void widen16(float *restrict w, const uint16_t *restrict h,
                           size_t n, int bf, int unused) {
  (void)unused;
  for (size_t i = 0; i < n; i++) w[i] = bf ? hc_b2f(h[i]) : hc_h2f(h[i]);
}

static inline void fold16(float *restrict w, const uint16_t *restrict h,
                          size_t n, int bf, int product) {
  for (size_t i = 0; i < n; i++) {
    float v = bf ? hc_b2f(h[i]) : hc_h2f(h[i]);
    w[i] = product ? w[i] * v : w[i] + v;
  }
}

static inline void narrow16(uint16_t *restrict o, const float *restrict w,
                            size_t n, float div, int bf, int divide) {
  for (size_t i = 0; i < n; i++) {
    float f = divide ? w[i] / div : w[i];
    o[i] = bf ? f2b_c(f) : f2h_c(f);
  }
}

#ifdef HC_FAST
FAST_INLINE void fwiden16(float *w, const uint16_t *h, size_t n, int bf,
                          int unused) {
  (void)unused;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(w + i, ld8(bf, h + i));
  if (i < n) {
    float pad[8];
    _mm256_storeu_ps(pad, ldn(bf, h, i, n));
    memcpy(w + i, pad, (n - i) * sizeof *w);
  }
}

FAST_INLINE void ffold16(float *w, const uint16_t *h, size_t n, int bf,
                         int product) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_loadu_ps(w + i), y = ld8(bf, h + i);
    _mm256_storeu_ps(w + i, product ? _mm256_mul_ps(x, y)
                                    : _mm256_add_ps(x, y));
  }
  fold16(w + i, h + i, n - i, bf, product);
}

FAST_INLINE void fnarrow16(uint16_t *o, const float *w, size_t n, float div,
                           int bf, int divide) {
  hora_op_t op = divide ? HORA_AVERAGE : HORA_SUM;
  __m256 d = _mm256_set1_ps(div);
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    stn(bf, op, o, i, i + 8, _mm256_loadu_ps(w + i), d);
  if (i < n) {
    float pad[8] = {0};
    memcpy(pad, w + i, (n - i) * sizeof *w);
    stn(bf, op, o, i, n, _mm256_loadu_ps(pad), d);
  }
}

static FAST_TARGET void fast_widen16(float *w, const uint16_t *h, size_t n,
                                     int bf) {
  CONST2(fwiden16, bf, 0, w, h, n);
}

static FAST_TARGET void fast_fold16(float *w, const uint16_t *h, size_t n,
                                    int bf, int product) {
  CONST2(ffold16, bf, product, w, h, n);
}

static FAST_TARGET void fast_narrow16(uint16_t *o, const float *w, size_t n,
                                      float div, int bf, int divide) {
  CONST2(fnarrow16, bf, divide, o, w, n, div);
}
#else /* never called: fast_enabled() is 0 */
#define fast_widen16(...) (void)0
#define fast_fold16(...) (void)0
#define fast_narrow16(...) (void)0
#endif

void hc_widen16(float *w, const uint16_t *h, size_t n, int bf) {
  if (fast_enabled()) fast_widen16(w, h, n, bf);
  else CONST2(widen16, bf, 0, w, h, n);
}

void hc_fold16(float *w, const uint16_t *h, size_t n, int bf, int product) {
  if (fast_enabled()) fast_fold16(w, h, n, bf, product);
  else CONST2(fold16, bf, product, w, h, n);
}

void hc_narrow16(uint16_t *o, const float *w, size_t n, int bf, float div) {
  int divide = div != 1.0f;
  if (fast_enabled()) fast_narrow16(o, w, n, div, bf, divide);
  else CONST2(narrow16, bf, divide, o, w, n, div);
}
