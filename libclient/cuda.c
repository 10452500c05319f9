/* cuda.c -- CUDA device buffers, without linking CUDA.
 *
 * libhora is built without CUDA and never loads it on its own: a pointer
 * can only be a device pointer in a process that has loaded the CUDA
 * driver (libcuda.so.1: the CUDA runtime, PyTorch and every CUDA program
 * load it). So before each buffer is looked at, one cheap question --
 * has any shared object been loaded since we last looked
 * (dl_iterate_phdr's count of additions, about 10 ns) -- tells whether the
 * driver may have arrived; once it has, libhora takes its own handle on
 * it and asks it of each pointer that does not lie in the arena
 * (cuPointerGetAttribute). A CPU program pays the 10 ns and nothing else.
 *
 * A device buffer is staged through the rank's shared segment (pinned
 * once, on the first device buffer): the input is copied to the arena on
 * the caller's stream, ordered after the work that produced it, and the
 * caller waits for that copy before the submission goes to horad (a
 * tensor too large for the arena, streamed by horad in chunks: the caller
 * waits for its stream at submission, and the chunks are copied on
 * libhora's own stream); the result is copied back on libhora's own stream,
 * which does not wait for the caller's later work, before the operation
 * is reported complete. The thread doing a copy makes the buffer's
 * context current first. */
#define HC_LOG_SUB HC_SUB_CLIENT
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <string.h>

#include "client.h"

/* The few declarations of the driver API used here (cuda.h's values). */
typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;
typedef void *CUstream;
typedef int CUdevice;
enum {
  CUDA_SUCCESS = 0,
  CU_POINTER_ATTRIBUTE_CONTEXT = 1,
  CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
  CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
  CU_MEMORYTYPE_DEVICE = 2,
  CU_MEMORYTYPE_UNIFIED = 4,
  CU_MEMHOSTREGISTER_PORTABLE = 1,
  CU_STREAM_NON_BLOCKING = 1,
};

static struct {
  CUresult (*pointer_get_attribute)(void *, int, CUdeviceptr);
  CUresult (*memcpy_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*stream_synchronize)(CUstream);
  CUresult (*stream_create)(CUstream *, unsigned);
  CUresult (*ctx_get_current)(CUcontext *);
  CUresult (*ctx_set_current)(CUcontext);
  CUresult (*primary_ctx_retain)(CUcontext *, CUdevice);
  CUresult (*device_get)(CUdevice *, int);
  CUresult (*host_register)(void *, size_t, unsigned);
  CUresult (*host_unregister)(void *);
  CUresult (*get_error_string)(CUresult, const char **);
} cu;

static pthread_mutex_t cu_lock = PTHREAD_MUTEX_INITIALIZER;
static void *cu_handle;             /* the driver, once found */
static _Atomic int cu_ready;        /* 1: cu is filled in; -1: unusable */
static _Atomic unsigned long long seen_adds; /* dl_iterate_phdr's count */

/* The streams libhora copies results on, one per context. */
#define MAX_CTX 64
static struct {
  CUcontext ctx;
  CUstream stream;
} streams[MAX_CTX];
static int nstreams;

/* The shared segment, pinned for the driver's copies (NULL: not yet). */
static void *pinned;
static int pin_tried;

static const char *cu_err(CUresult r) {
  const char *s = NULL;
  if (cu.get_error_string && cu.get_error_string(r, &s) == CUDA_SUCCESS && s)
    return s;
  return "unknown CUDA error";
}

static int count_adds(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  *(unsigned long long *)data = info->dlpi_adds;
  return 1; /* the first object carries the count: stop */
}

static int find_driver(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  const char *n = info->dlpi_name, *slash = n ? strrchr(n, '/') : NULL;
  const char *base = slash ? slash + 1 : n;
  if (base && !strncmp(base, "libcuda.so", 10)) {
    hc_fmt(data, 4096, "%s", n);
    return 1;
  }
  return 0;
}

/* Takes libhora's own handle on a driver the process has loaded; fills cu.
 * Caller holds cu_lock. */
static void load_driver(const char *path) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!h) return;
  struct {
    const char *name;
    void **fn;
  } syms[] = {
      {"cuPointerGetAttribute", (void **)&cu.pointer_get_attribute},
      {"cuMemcpyAsync", (void **)&cu.memcpy_async},
      {"cuStreamSynchronize", (void **)&cu.stream_synchronize},
      {"cuStreamCreate", (void **)&cu.stream_create},
      {"cuCtxGetCurrent", (void **)&cu.ctx_get_current},
      {"cuCtxSetCurrent", (void **)&cu.ctx_set_current},
      {"cuDevicePrimaryCtxRetain", (void **)&cu.primary_ctx_retain},
      {"cuDeviceGet", (void **)&cu.device_get},
      {"cuMemHostRegister_v2", (void **)&cu.host_register},
      {"cuMemHostUnregister", (void **)&cu.host_unregister},
      {"cuGetErrorString", (void **)&cu.get_error_string},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    *syms[i].fn = dlsym(h, syms[i].name);
    if (!*syms[i].fn) {
      hc_warn("rank %d: the CUDA driver %s lacks %s: device buffers cannot "
              "be used", hl.rank, path, syms[i].name);
      memset(&cu, 0, sizeof cu);
      dlclose(h);
      atomic_store(&cu_ready, -1);
      return;
    }
  }
  cu_handle = h;
  hc_debug("rank %d: the process has loaded the CUDA driver (%s): device "
           "buffers are staged through shared memory", hl.rank, path);
  atomic_store_explicit(&cu_ready, 1, memory_order_release);
}

/* 1 when the driver is at hand, 0 when the process has not loaded it. */
static int driver(void) {
  int r = atomic_load_explicit(&cu_ready, memory_order_acquire);
  if (r) return r > 0;
  unsigned long long adds = 0;
  dl_iterate_phdr(count_adds, &adds);
  if (adds == atomic_load_explicit(&seen_adds, memory_order_relaxed))
    return 0;
  pthread_mutex_lock(&cu_lock);
  if (!atomic_load(&cu_ready)) {
    char path[4096] = "";
    dl_iterate_phdr(find_driver, path);
    if (path[0]) load_driver(path);
    atomic_store(&seen_adds, adds);
  }
  pthread_mutex_unlock(&cu_lock);
  return atomic_load(&cu_ready) > 0;
}

int hl_cuda_locate(const void *p, void **ctx) {
  *ctx = NULL;
  if (!p || !driver()) return 0;
  unsigned type = 0;
  CUdeviceptr d = (CUdeviceptr)(uintptr_t)p;
  if (cu.pointer_get_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d) !=
          CUDA_SUCCESS ||
      (type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED))
    return 0; /* host memory, known to CUDA or not */
  CUcontext c = NULL;
  if (cu.pointer_get_attribute(&c, CU_POINTER_ATTRIBUTE_CONTEXT, d) !=
          CUDA_SUCCESS || !c) {
    /* memory mapped with the virtual memory API belongs to a device, not
     * to a context: that device's primary context */
    int ordinal = -1;
    CUdevice dev;
    CUresult r = cu.pointer_get_attribute(&ordinal,
                                          CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d);
    if (r == CUDA_SUCCESS) r = cu.device_get(&dev, ordinal);
    if (r == CUDA_SUCCESS) r = cu.primary_ctx_retain(&c, dev);
    if (r != CUDA_SUCCESS)
      return hl_error(HORA_EDEVICE, "a device buffer at %p whose context CUDA "
                      "does not give: %s (rank %d)", p, cu_err(r), hl.rank);
  }
  *ctx = c;
  return 1;
}

/* The shared segment pinned, so that copies to and from it run at the
 * bus's speed: once per mapping; a failure only costs speed. */
static void pin_segment(void) {
  if (pin_tried || !hl.shm) return;
  pin_tried = 1;
  CUresult r = cu.host_register(hl.shm, hl.shm_size, CU_MEMHOSTREGISTER_PORTABLE);
  if (r == CUDA_SUCCESS)
    pinned = hl.shm;
  else
    hc_warn("rank %d: the shared segment could not be pinned for CUDA "
            "(%s); device buffers are copied from pageable memory",
            hl.rank, cu_err(r));
}

void hl_cuda_release_segment(void) {
  pthread_mutex_lock(&cu_lock);
  if (pinned && cu_handle) cu.host_unregister(pinned);
  pinned = NULL;
  pin_tried = 0;
  pthread_mutex_unlock(&cu_lock);
}

/* libhora's stream for ctx (made once; kept for the life of the process,
 * as the context's). Caller holds cu_lock. */
static CUstream own_stream(CUcontext ctx) {
  for (int i = 0; i < nstreams; i++)
    if (streams[i].ctx == ctx) return streams[i].stream;
  CUstream s = NULL;
  if (nstreams == MAX_CTX || cu.stream_create(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
    return NULL; /* the context's legacy default stream */
  streams[nstreams].ctx = ctx;
  streams[nstreams++].stream = s;
  return s;
}

/* Copies bytes (none: only waits) on ctx, made current on this thread for
 * the while, on stream or (own) libhora's stream of ctx, and waits for
 * the stream. */
static CUresult with_ctx(CUcontext ctx, void *dst, const void *src,
                         uint64_t bytes, CUstream stream, int own) {
  CUcontext prev = NULL;
  cu.ctx_get_current(&prev);
  CUresult r = prev == ctx ? CUDA_SUCCESS : cu.ctx_set_current(ctx);
  if (r != CUDA_SUCCESS) return r;
  if (own || bytes) {
    pthread_mutex_lock(&cu_lock);
    pin_segment();
    if (own) stream = own_stream(ctx);
    pthread_mutex_unlock(&cu_lock);
  }
  if (bytes)
    r = cu.memcpy_async((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src,
                        bytes, stream);
  if (r == CUDA_SUCCESS) r = cu.stream_synchronize(stream);
  if (prev != ctx) cu.ctx_set_current(prev);
  return r;
}

int hl_cuda_copy(void *dst, const void *src, uint64_t bytes, void *ctx,
                 void *stream, int own) {
  if (!bytes) return 0;
  CUresult r = with_ctx(ctx, dst, src, bytes, stream, own);
  if (r != CUDA_SUCCESS)
    return hl_error(HORA_EDEVICE, "copying %llu bytes between device and host "
                    "memory failed: %s (rank %d)", (unsigned long long)bytes,
                    cu_err(r), hl.rank);
  return 0;
}

int hl_cuda_sync(void *ctx, void *stream) {
  CUresult r = with_ctx(ctx, NULL, NULL, 0, stream, 0);
  if (r != CUDA_SUCCESS)
    return hl_error(HORA_EDEVICE, "waiting for the stream of a device buffer "
                    "failed: %s (rank %d)", cu_err(r), hl.rank);
  return 0;
}
