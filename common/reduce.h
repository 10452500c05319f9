/* reduce.h -- the element-wise reduction kernels, shared by horad's CPU
 * engine and libhora's fast path for small operations. */
#ifndef HORA_COMMON_REDUCE_H
#define HORA_COMMON_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "hora.h"

/* Reduces elements [0, count) of the nsrc buffers srcs[] with `op` and
 * writes the result into each of the ndst buffers dsts[] (a destination may
 * be one of the sources: the whole reduction happens in place). Each input
 * byte is read once and each output byte written once; the work goes in
 * cache-sized blocks so the copies to the other destinations read from L1.
 *
 * HORA_AVERAGE divides the sum by `divisor` (the number of ranks the sum
 * covers; 0 means nsrc). Integers: exact sum in 64 bits (int64 wraps), then
 * C division (toward zero). float16/bfloat16 accumulate in float32 and round
 * once to nearest even; a NaN result of SUM, PRODUCT or AVERAGE is the
 * standard quiet NaN (0x7e00, 0x7fc0). MIN/MAX propagate the first NaN in
 * source order. A destination that is a source must be the very same
 * pointer (no partial overlap). nsrc >= 1, ndst >= 0.
 * Thread-safe: callers split a tensor into slices, one per thread. */
void hc_reduce(void *const *dsts, int ndst, const void *const *srcs, int nsrc,
               size_t count, hora_dtype_t dtype, hora_op_t op, int divisor);

/* memcpy for copies too large for the caches (a thread copying at least
 * HC_COPY_NT_MIN bytes in all, in one piece or several): stores that go
 * around the caches (non-temporal) do not first read each line they
 * write, so a copy moves two bytes through memory per byte instead of
 * three, but the destination is not in the cache afterwards: below that
 * size a plain copy, whose data may well stay in the cache, is faster.
 * Where the CPU lacks such stores it is memcpy. dst and src must not
 * overlap. */
#define HC_COPY_NT_MIN ((size_t)32 << 20)
void hc_copy_nt(void *dst, const void *src, size_t n);

/* Exchanges n bytes at a and b (which do not overlap). */
void hc_swap_bytes(void *a, void *b, size_t n);

/* float16 (bf 0) or bfloat16 (bf 1) to and from float32, for the
 * float32 sums of a 16-bit allreduce across hosts (daemon/xhost/ring.c):
 *   hc_widen16   w[i] = h[i], exactly
 *   hc_fold16    w[i] = w[i] + h[i] (product: w[i] * h[i])
 *   hc_narrow16  o[i] = w[i] / div (div 1: w[i]), rounded to nearest even;
 *                a NaN becomes the standard quiet NaN, as in hc_reduce
 * Vector kernels where hc_reduce has them (hc_reduce_fast), the same bits
 * as the portable ones. Buffers must not overlap. Thread-safe. */
void hc_widen16(float *w, const uint16_t *h, size_t n, int bf);
void hc_fold16(float *w, const uint16_t *h, size_t n, int bf, int product);
void hc_narrow16(uint16_t *o, const float *w, size_t n, int bf, float div);

/* Selects the float16/bfloat16 kernels: 0 portable, 1 vector (x86-64 with
 * AVX2 and F16C, when the CPU has them), -1 only asks. Returns the one in
 * use. HORA_REDUCE_PORTABLE=1 in the environment forces the portable one.
 * Both give the same bits. */
int hc_reduce_fast(int want);

#endif
