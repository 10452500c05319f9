/* reduce.h -- the reduction kernels of the CPU engine: element-wise, and
 * Adasum's. */
#ifndef HORA_DAEMON_REDUCE_H
#define HORA_DAEMON_REDUCE_H

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
void hd_reduce(void *const *dsts, int ndst, const void *const *srcs, int nsrc,
               size_t count, hora_dtype_t dtype, hora_op_t op, int divisor);

/* memcpy for copies too large for the caches (a thread copying at least
 * HD_COPY_NT_MIN bytes in all, in one piece or several): stores that go
 * around the caches (non-temporal) do not first read each line they
 * write, so a copy moves two bytes through memory per byte instead of
 * three, but the destination is not in the cache afterwards: below that
 * size a plain copy, whose data may well stay in the cache, is faster.
 * Where the CPU lacks such stores it is memcpy. dst and src must not
 * overlap. */
#define HD_COPY_NT_MIN ((size_t)32 << 20)
void hd_copy_nt(void *dst, const void *src, size_t n);

/* Exchanges n bytes at a and b (which do not overlap). */
void hd_swap_bytes(void *a, void *b, size_t n);

/* Selects the float16/bfloat16 kernels: 0 portable, 1 vector (x86-64 with
 * AVX2 and F16C, when the CPU has them), -1 only asks. Returns the one in
 * use. HORA_REDUCE_PORTABLE=1 in the environment forces the portable one.
 * Both give the same bits. */
int hd_reduce_fast(int want);

/* ---- Adasum (adasum.c; hora.h says what it computes) ------------------
 * Vectors are combined in a working type: float64 for float64, float32
 * for float16, bfloat16 and float32. */
struct hd_comm;
int hd_adasum_wtype(int dtype);
int hd_adasum_dtype_ok(int dtype); /* a floating-point type */
/* Whether Adasum cannot run on the communicator (its size, or with hier,
 * its number of hosts, not a power of two): 1 and why says so. */
int hd_adasum_refuse(const struct hd_comm *c, int hier, char *why,
                     size_t len);
/* n elements of src (dtype) times scale into dst (the working type);
 * zeros when src is NULL. */
void hd_adasum_widen(void *dst, const void *src, uint64_t n, int dtype,
                     double scale);
/* n elements of src (the working type) times scale into dst (dtype),
 * rounded once to nearest even. */
void hd_adasum_narrow(void *dst, const void *src, uint64_t n, int dtype,
                      double scale);
/* a = Adasum(a, b). */
void hd_adasum_pair(void *a, const void *b, uint64_t n, int wtype);
/* The nv vectors of n elements at v, one after the other: v[0] = the
 * tree over v[0 .. nv): level s = 1, 2, 4 ... combines v[i] and v[i + s]
 * into v[i] for i a multiple of 2s (nv not a power of two: a vector
 * without a partner goes up unchanged); the others are overwritten. */
void hd_adasum_tree(void *v, int nv, uint64_t n, int wtype);
/* The same vectors: v[0] = their mean, summed in double. */
void hd_adasum_mean(void *v, int nv, uint64_t n, int wtype);

#endif
