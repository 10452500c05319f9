/* hora.h -- public C API of libhora, the library that training processes link.
 *
 * A process started by horarun talks to the local horad over shared memory;
 * a process started on its own is a job of one rank whose collectives are
 * local copies. Every function returns 0 (or a non-negative value) on
 * success and a negative HORA_E* code on failure; hora_last_error() then
 * holds a message that names the rank, host and tensor involved.
 */
#ifndef HORA_H
#define HORA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HORA_VERSION_MAJOR 0
#define HORA_VERSION_MINOR 1
#define HORA_VERSION_PATCH 0

/* X(name, value, message). Negative errno-style values; domain codes sit
 * beside the errno ones. */
#define HORA_ERRNO_MAP(X)                                                      \
  X(EINVAL, -22, "invalid argument")                                           \
  X(ENOMEM, -12, "out of memory")                                              \
  X(EIO, -5, "input/output error")                                             \
  X(EAGAIN, -11, "resource temporarily unavailable")                           \
  X(ENOENT, -2, "no such file or directory")                                   \
  X(EEXIST, -17, "already exists")                                             \
  X(ETIMEDOUT, -110, "timed out")                                              \
  X(ENOTSUP, -95, "operation not supported")                                   \
  X(ENOTINIT, -2001, "hora is not initialized; call hora_init() first")        \
  X(EPEERGONE, -2002, "a rank or daemon of the job is gone")                   \
  X(EMISMATCH, -2003, "ranks disagree about a collective operation")           \
  X(EDUPNAME, -2004, "a tensor of the same name is already in flight")         \
  X(ESHUTDOWN, -2005, "hora has been shut down")                               \
  X(EPROTO, -2006, "protocol error")                                           \
  X(EAUTH, -2007, "authentication failed")                                     \
  X(ESTALL, -2008, "collective operation stalled")                             \
  X(EBADHANDLE, -2009, "unknown or already completed handle")

typedef enum {
  HORA_OK = 0,
#define HORA_ERR_ENUM(name, val, msg) HORA_##name = (val),
  HORA_ERRNO_MAP(HORA_ERR_ENUM)
#undef HORA_ERR_ENUM
} hora_errno_t;

typedef enum {
  HORA_UINT8,
  HORA_INT8,
  HORA_INT16,
  HORA_INT32,
  HORA_INT64,
  HORA_FLOAT16,
  HORA_BFLOAT16,
  HORA_FLOAT32,
  HORA_FLOAT64,
  HORA_DTYPE_COUNT
} hora_dtype_t;

/* Integer AVERAGE: the sum is formed exactly (in 64 bits; int64 sums wrap
 * like SUM does) and divided by the number of ranks, rounding toward zero
 * as C integer division does. Float AVERAGE divides the sum by the number
 * of ranks. float16 and bfloat16 accumulate in float32 and round once to
 * nearest even. */
typedef enum {
  HORA_AVERAGE,
  HORA_SUM,
  HORA_MIN,
  HORA_MAX,
  HORA_PRODUCT,
  HORA_OP_COUNT
} hora_op_t;

/* Start-up and job layout. hora_init() connects to the local daemon named by
 * the environment horarun sets; without it the process is a job of size 1.
 * Calling hora_init() again after success is a no-op returning 0.
 * hora_shutdown() must not run while other threads of the process are
 * inside hora calls (like MPI_Finalize); operations still pending fail
 * with HORA_ESHUTDOWN. */
int hora_init(void);
int hora_shutdown(void);
int hora_is_initialized(void);
int hora_rank(void);
int hora_size(void);
int hora_local_rank(void);
int hora_local_size(void);
int hora_cross_rank(void);
int hora_cross_size(void);

/* Collectives. `name` identifies the operation across ranks; NULL names it
 * by call order (the n-th unnamed allreduce of every rank matches). Buffers
 * handed to an async call must stay valid until hora_wait() returns or
 * hora_test() reports done. In place when sendbuf == recvbuf. Buffers from
 * hora_alloc() are reduced where they lie, with no copy. */
int hora_allreduce(const char *name, const void *sendbuf, void *recvbuf,
                   size_t count, hora_dtype_t dtype, hora_op_t op);
int hora_broadcast(const char *name, void *buf, size_t count,
                   hora_dtype_t dtype, int root_rank);
int hora_barrier(void);
int hora_allreduce_async(const char *name, const void *sendbuf, void *recvbuf,
                         size_t count, hora_dtype_t dtype, hora_op_t op,
                         int64_t *handle);
int hora_broadcast_async(const char *name, void *buf, size_t count,
                         hora_dtype_t dtype, int root_rank, int64_t *handle);
/* Waits for the operation; returns its result and releases the handle. */
int hora_wait(int64_t handle);
/* Sets *done to 1 when the operation has finished (its result is then
 * returned and the handle released), 0 otherwise. */
int hora_test(int64_t handle, int *done);

/* Memory in the rank's shared arena (aligned to 64 bytes, 4096 for larger
 * blocks). NULL when the arena is full or bytes is 0. */
void *hora_alloc(size_t bytes);
void hora_free(void *ptr);

size_t hora_dtype_size(hora_dtype_t dtype);
const char *hora_dtype_name(hora_dtype_t dtype);
const char *hora_op_name(hora_op_t op);
const char *hora_strerror(int err);
const char *hora_err_name(int err);
/* The message of this thread's last error; "" when there was none. */
const char *hora_last_error(void);
const char *hora_version(void);

#ifdef __cplusplus
}
#endif
#endif /* HORA_H */
