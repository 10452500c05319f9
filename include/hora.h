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
  X(ECANCELED, -125, "operation canceled")                                     \
  X(ENOTINIT, -2001, "hora is not initialized; call hora_init() first")        \
  X(EPEERGONE, -2002, "a rank or daemon of the job is gone")                   \
  X(EMISMATCH, -2003, "ranks disagree about a collective operation")           \
  X(EDUPNAME, -2004, "a tensor of the same name is already in flight")         \
  X(ESHUTDOWN, -2005, "hora has been shut down")                               \
  X(EPROTO, -2006, "protocol error")                                           \
  X(EAUTH, -2007, "authentication failed")                                     \
  X(ESTALL, -2008, "collective operation stalled")                             \
  X(EBADHANDLE, -2009, "unknown or already completed handle")              \
  X(ENOSET, -2010, "unknown or removed process set")                         \
  X(ENOTMEMBER, -2011, "this rank is not a member of the process set")       \
  X(EVERSION, -2012, "libhora and horad speak different protocol versions")  \
  X(ELIMIT, -2013, "a limit of hora was reached")                             \
  X(EDEADLOCK, -2014, "deadlock: ranks wait on operations that cannot "        \
                      "complete")                                              \
  X(EDEVICE, -2015, "a call to the GPU's driver failed")

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
 * nearest even.
 *
 * HORA_ADASUM (allreduce of floating-point tensors only) is not
 * element-wise: two gradients a and b combine as
 *   a (1 - a.b / (2 |a|^2)) + b (1 - a.b / (2 |b|^2))
 * (their sum when orthogonal, their average when parallel; a side whose
 * squared norm is below sqrt(DBL_MIN) keeps coefficient 1), pairwise up a
 * binary tree over the process set's ranks in order: (0,1), (2,3), ...,
 * then ((0,1),(2,3)) and so on; the set's size must be a power of two. With
 * HOROVOD_HIERARCHICAL_ALLREDUCE=1 the ranks of each host are averaged
 * first and the tree runs over the hosts (their number a power of two).
 * Dot products and norms are summed in double; float16 and bfloat16 are
 * combined in float32 and rounded once. The tensor must fit in the arena
 * (hora_alloc memory, or a copy libhora makes there). Joined ranks give
 * zeros, which leave the other side unchanged. */
typedef enum {
  HORA_AVERAGE,
  HORA_SUM,
  HORA_MIN,
  HORA_MAX,
  HORA_PRODUCT,
  HORA_ADASUM,
  HORA_OP_COUNT,
  HORA_OP_ELEMENTWISE = HORA_ADASUM /* the element-wise ops: op < this */
} hora_op_t;

/* The collectives, described once: X(NAME, id, name, traits). Traits:
 *   HORA_CF_OP     takes a reduction op (and prescale/postscale factors)
 *   HORA_CF_ROOT   takes a root rank (a global rank)
 *   HORA_CF_VARY   the number of elements may differ per rank
 *   HORA_CF_SPLITS per-member split sizes (alltoall)
 *   HORA_CF_OUT    the output differs in size from the input
 *   HORA_CF_TAIL   ranks must agree on every dimension but the first
 *   HORA_CF_SHAPE  ranks must agree on the whole shape
 *   HORA_CF_CTRL   moves no tensor data (barrier, join, process sets) */
#define HORA_CF_OP 0x01
#define HORA_CF_ROOT 0x02
#define HORA_CF_VARY 0x04
#define HORA_CF_SPLITS 0x08
#define HORA_CF_OUT 0x10
#define HORA_CF_TAIL 0x20
#define HORA_CF_SHAPE 0x40
#define HORA_CF_CTRL 0x80
#define HORA_COLL_MAP(X)                                                       \
  X(ALLREDUCE, 1, "allreduce", HORA_CF_OP | HORA_CF_SHAPE)                     \
  X(BROADCAST, 2, "broadcast", HORA_CF_ROOT | HORA_CF_SHAPE)                   \
  X(BARRIER, 3, "barrier", HORA_CF_CTRL)                                       \
  X(ALLGATHER, 4, "allgather",                                                 \
    HORA_CF_VARY | HORA_CF_OUT | HORA_CF_TAIL)                                 \
  X(ALLTOALL, 5, "alltoall",                                                   \
    HORA_CF_VARY | HORA_CF_SPLITS | HORA_CF_OUT | HORA_CF_TAIL)                \
  X(REDUCESCATTER, 6, "reducescatter",                                         \
    HORA_CF_OP | HORA_CF_OUT | HORA_CF_SHAPE)                                  \
  X(JOIN, 7, "join", HORA_CF_CTRL)                                             \
  X(PS_ADD, 8, "process_set_add", HORA_CF_CTRL)                                \
  X(PS_REMOVE, 9, "process_set_remove", HORA_CF_CTRL)

typedef enum {
#define HORA_COLL_ENUM(n, id, name, traits) HORA_COLL_##n = (id),
  HORA_COLL_MAP(HORA_COLL_ENUM)
#undef HORA_COLL_ENUM
  HORA_COLL_MAX = 9
} hora_coll_t;

#define HORA_MAX_DIMS 8
#define HORA_GLOBAL_PROCESS_SET 0

/* Start-up and job layout. hora_init() connects to the local daemon named by
 * the environment horarun sets; without it the process is a job of size 1.
 * Calling hora_init() again after success is a no-op returning 0. After
 * hora_shutdown(), hora_init() may be called again: as in Horovod this is
 * collective, and returns once every rank of the job has shut hora down
 * and initialised it again; the new session starts clean (the global set
 * only, no failure). In jobs on one host; across hosts it fails.
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
/* How many times horarun has announced that the job's hosts changed (an
 * elastic job whose --host-discovery-script now names hosts added or
 * removed); it only grows. Horovod's elastic API turns a change into
 * HostsUpdatedInterrupt at the next commit (hora.elastic). 0 in a job of
 * one; HORA_ENOTINIT before hora_init(). */
int64_t hora_hosts_updated(void);

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
/* Waits, as hora_wait() does, until the operation has finished, but
 * leaves its result and handle to hora_test() / hora_wait() (another
 * thread may take them meanwhile: this then returns too). */
int hora_wait_ready(int64_t handle);
/* Deadlock detection: a thread blocked in hora_wait() tells horad, through
 * shared memory, what it waits for; when every rank that an operation
 * needs waits on one that cannot complete, horad fails their waits with
 * HORA_EDEADLOCK, naming each rank's wait. Before that it sends the ranks
 * that asked for it this signal (0: none, the default), on which they
 * print where they are stuck (hora.torch uses Python's faulthandler). */
int hora_set_stack_signal(int signum);
/* A rank is blocked when every thread of it that submits or waits is
 * waiting. A thread that submits only on behalf of threads that wait for
 * the result elsewhere (hora.torch's helper) says so, and is not counted. */
int hora_thread_helper(void);

/* Every collective, in one request. Fields a collective does not use are
 * ignored (zero them: hora_request_t r = {0}). Counts are in elements.
 *   count        elements this rank sends (allgather, alltoall: may differ
 *                per rank; reducescatter: the whole input)
 *   recv_count   elements recvbuf holds; checked against what arrives
 *                (allgather: the sum of recv_counts; alltoall: the sum of
 *                recv_splits; reducescatter: this rank's block). 0: the
 *                same as count (allreduce, broadcast)
 *   shape        ndims dimensions (NULL: 1-D of count); ranks must agree
 *                on the shape (allreduce, broadcast, reducescatter) or on
 *                every dimension but the first (allgather, alltoall).
 *                Reducescatter splits dimension 0: the first
 *                (dim0 % size) members get one row more.
 *   recv_counts  allgather: elements from each member, in member order
 *                (NULL: count from every member)
 *   splits       alltoall: elements to each member (NULL: count / size each)
 *   recv_splits  alltoall: elements from each member (NULL: equal)
 *   root_rank    broadcast: a global rank, a member of the set
 *   process_set  0 (global) or an id from hora_process_set_add()
 *   prescale, postscale  allreduce, reducescatter: factors applied before
 *                and after the reduction (0 means 1). Integers are scaled
 *                in float64, float16/bfloat16 in float32, then rounded.
 *   priority     any int (0 by default): among operations that wait
 *                together, higher first -- a late one overtakes queued
 *                ones of lower priority (never a barrier, join or
 *                process-set change; one that has started only between
 *                the chunks of a large allreduce or broadcast on one
 *                host, or, across hosts, by a small allreduce whose
 *                result comes with the decision, or by one of up to 8
 *                MiB in the arena that runs round the ring beside it);
 *                the highest any rank gave counts
 *   flags        HORA_REQ_* bits; others are refused
 *   stream       for device (CUDA) buffers: the stream (a cudaStream_t or
 *                CUstream; NULL: the default stream) that orders the work
 *                producing the input; see DEVICE BUFFERS in hora(3) */
typedef struct hora_request {
  hora_coll_t coll;
  const char *name;
  const void *sendbuf;
  void *recvbuf;
  size_t count, recv_count;
  hora_dtype_t dtype;
  hora_op_t op;
  int root_rank;
  int process_set;
  double prescale, postscale;
  int ndims;
  const int64_t *shape;
  const int64_t *recv_counts;
  const int64_t *splits;
  const int64_t *recv_splits;
  int priority;
  int flags;
  void *stream;
  int reserved[4];
} hora_request_t;

/* hora_request_t.flags. HORA_REQ_WIRE16: an allreduce of float16 or
 * bfloat16 (SUM, AVERAGE, PRODUCT) sends its partial results between
 * hosts in its own 16-bit type, half the bytes of the float32 they travel
 * in otherwise: the sum on each host is formed in float32, and each hop
 * of the ring between hosts rounds the partial result to the dtype (n - 1
 * roundings for n hosts, then the result). Without it the result is
 * rounded once, as on one host. Every rank must ask alike (a mismatch
 * fails the operation); other collectives and dtypes ignore it. */
#define HORA_REQ_WIRE16 1

/* Submits any collective; *handle as for the _async calls. */
int hora_submit(const hora_request_t *req, int64_t *handle);
/* Submits n requests (at most 4096) of one collective and process set as
 * one group, as Horovod's grouped_allreduce: horad negotiates them as one
 * unit and runs them together once every one is ready on every rank of
 * the set; a problem with one (a mismatch, a stall) fails them all. Every
 * rank must submit the same group: the same names in the same order.
 * handles[i] is request i's. On an error, nothing of the group stays
 * submitted. */
int hora_submit_group(const hora_request_t *reqs, int n, int64_t *handles);

/* Allgather: recvbuf receives every member's elements, in member order
 * (size * count elements when all send count). */
int hora_allgather(const char *name, const void *sendbuf, size_t count,
                   void *recvbuf, hora_dtype_t dtype);
int hora_allgatherv(const char *name, const void *sendbuf, size_t count,
                    void *recvbuf, const int64_t *recv_counts,
                    hora_dtype_t dtype);
/* Alltoall: member j receives splits[j] elements of sendbuf (in order);
 * recvbuf receives recv_splits[i] elements from each member i. With NULL
 * splits, count must divide by the set's size. */
int hora_alltoall(const char *name, const void *sendbuf, size_t count,
                  void *recvbuf, hora_dtype_t dtype);
int hora_alltoallv(const char *name, const void *sendbuf,
                   const int64_t *splits, void *recvbuf,
                   const int64_t *recv_splits, hora_dtype_t dtype);
/* Reducescatter: reduces count elements over the set and gives member i
 * its block of dimension 0 (elements here): count / size, one more for
 * the first count % size members. Only SUM, AVERAGE, MIN, MAX, PRODUCT. */
int hora_reducescatter(const char *name, const void *sendbuf, size_t count,
                       void *recvbuf, hora_dtype_t dtype, hora_op_t op);
/* The size of member `member`'s reducescatter block of `rows` rows. */
size_t hora_reducescatter_rows(size_t rows, int set_size, int member);

/* Join: this rank has no more data. Until every rank has joined, the
 * collectives of the others go on; a joined rank takes part in them with
 * the neutral element (allreduce: 0 for SUM/AVERAGE, 1 for PRODUCT, the
 * type's largest/smallest value for MIN/MAX; AVERAGE still divides by the
 * full size; zeros in reducescatter), sends nothing in allgather and
 * alltoall (receive counts must say 0 for it), receives nothing, and
 * cannot be a broadcast root. Returns the last rank to join (>= 0).
 * Global set only. */
int hora_join(void);

/* Process sets: collective over all ranks of the job (every rank calls
 * it, with the same ranks, in the same order). Returns the new set's id
 * (>= 1; ids are not reused) or HORA_EEXIST for a set with the same ranks.
 * Ranks are sorted and must be distinct and in range. */
int hora_process_set_add(const int *ranks, int nranks);
/* Collective over all ranks. HORA_ENOSET for 0 or an unknown id. */
int hora_process_set_remove(int process_set);
/* The set's size, this rank's rank in it (HORA_ENOTMEMBER when it is not
 * a member), and its members (up to cap; returns the size). */
int hora_process_set_size(int process_set);
int hora_process_set_rank(int process_set);
int hora_process_set_ranks(int process_set, int *ranks, int cap);
/* The ids of the sets that exist now, up to cap; returns how many. */
int hora_process_set_ids(int *ids, int cap);

/* Horovod's timeline at run time (its start_timeline / stop_timeline): a
 * Chrome trace of every operation of every host, written by host 0's
 * horad into `path` (created or truncated; a relative path is taken from
 * the caller's working directory), with CYCLE_START markers when
 * mark_cycles is non-zero. Rank 0's call counts; the others' return 0 at
 * once. Starting it with another file ends the current one. Stopping it
 * returns once the file is complete (the other hosts have sent their
 * events). Not collective. A process that is a job of its own (no horad)
 * gets HORA_ENOTSUP. */
int hora_start_timeline(const char *path, int mark_cycles);
int hora_stop_timeline(void);

/* Every constant a binding needs, one per line: "kind name value"
 * (kind: dtype, op, err, coll, cf, limit, req). */
const char *hora_describe(void);

/* Memory in the rank's shared arena (aligned to 64 bytes, 4096 for larger
 * blocks). NULL when the arena is full or bytes is 0. Blocks not freed
 * when hora_shutdown() runs stay readable and writable until the process
 * exits (the arena stays mapped); hora_free() of such a block after
 * hora_shutdown() does nothing. */
void *hora_alloc(size_t bytes);
void hora_free(void *ptr);
/* 1 when [ptr, ptr + bytes) lies in this session's arena (a collective on
 * it then moves no data through a copy), else 0. */
int hora_in_arena(const void *ptr, size_t bytes);
/* Bytes of this rank's arena (HORA_ARENA_SIZE, --arena-size); 0 before
 * hora_init() and in a job of one, which has none. */
size_t hora_arena_size(void);

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
