/* adasum.h -- Adasum's kernels (adasum.c; hora.h says what it computes). */
#ifndef HORA_DAEMON_ADASUM_H
#define HORA_DAEMON_ADASUM_H

#include <stddef.h>
#include <stdint.h>

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
