/* reduce.h -- element-wise reduction kernels of the CPU engine. */
#ifndef HORA_DAEMON_REDUCE_H
#define HORA_DAEMON_REDUCE_H

#include <stddef.h>

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
 * once to nearest even. MIN/MAX propagate NaN. nsrc >= 1, ndst >= 0.
 * Thread-safe: callers split a tensor into slices, one per thread. */
void hd_reduce(void *const *dsts, int ndst, const void *const *srcs, int nsrc,
               size_t count, hora_dtype_t dtype, hora_op_t op, int divisor);

/* Scalar conversions, exposed for tests and the client library. */
float hd_half_to_float(unsigned short h);
unsigned short hd_float_to_half(float f); /* round to nearest even */
float hd_bf16_to_float(unsigned short b);
unsigned short hd_float_to_bf16(float f); /* round to nearest even */

#endif
