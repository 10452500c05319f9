/* libcuda.c -- a stand-in for the CUDA driver (libcuda.so.1), for the
 * tests of libhora's device buffers on machines without a GPU.
 *
 * "Device memory" is host memory mapped PROT_NONE: only this library's
 * copies (cuMemcpyAsync) open it for the while, so a program that reads
 * or writes a device pointer itself dies of SIGSEGV, as it would on a GPU.
 * A copy or a stream synchronisation needs a current context, as the real
 * driver's do. Counters tell the tests what was called, on which stream;
 * FAKECUDA_FAIL_COPY=N fails the N-th copy (1-based) of the process. */

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;
typedef void *CUstream;
typedef int CUdevice;

#define MAX_ALLOCS 4096
static struct {
  uintptr_t base;
  size_t size;
  int vmm; /* mapped as the virtual memory API does: no context */
} allocs[MAX_ALLOCS];
static int nallocs;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local CUcontext current;
static char primary; /* the device's primary context */
static long ncopies, nstreams_made, nsyncs, nregister, nunregister,
    nuser_copies, nown_copies, nctx_missing, fail_at;
static void *registered;
static size_t registered_size;

/* What a test reads (fakecuda_stats). */
struct fakecuda_stats {
  long copies, user_stream_copies, own_stream_copies, streams_made, syncs,
      host_registers, host_unregisters, no_context;
};

static int find(uintptr_t p) {
  for (int i = 0; i < nallocs; i++)
    if (p >= allocs[i].base && p < allocs[i].base + allocs[i].size) return i;
  return -1;
}

static void set_prot(uintptr_t p, size_t n, int prot) {
  int i = find(p);
  if (i >= 0 && n) mprotect((void *)allocs[i].base, allocs[i].size, prot);
}

CUresult cuInit(unsigned flags) { (void)flags; return 0; }

CUresult cuGetErrorString(CUresult r, const char **s) {
  *s = r == 201 ? "invalid device context"
       : r == 1 ? "invalid argument"
       : r == 999 ? "unknown error (injected by the test)"
                  : "error";
  return 0;
}

CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  if (ordinal != 0) return 101; /* invalid device */
  *d = 0;
  return 0;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
  (void)d;
  *c = &primary;
  return 0;
}

CUresult cuCtxGetCurrent(CUcontext *c) { *c = current; return 0; }
CUresult cuCtxSetCurrent(CUcontext c) { current = c; return 0; }

static CUresult alloc(CUdeviceptr *p, size_t n, int vmm) {
  void *m = mmap(NULL, n ? n : 1, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return 2; /* out of memory */
  pthread_mutex_lock(&lock);
  if (nallocs == MAX_ALLOCS) {
    pthread_mutex_unlock(&lock);
    munmap(m, n ? n : 1);
    return 2;
  }
  allocs[nallocs].base = (uintptr_t)m;
  allocs[nallocs].size = n ? n : 1;
  allocs[nallocs++].vmm = vmm;
  pthread_mutex_unlock(&lock);
  *p = (CUdeviceptr)(uintptr_t)m;
  return 0;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
  if (!current) return 201;
  return alloc(p, n, 0);
}

/* Memory that the pointer queries place on device 0 but in no context, as
 * the virtual memory API's (cuMemCreate + cuMemMap) is. */
CUresult fakecuda_alloc_vmm(CUdeviceptr *p, size_t n) { return alloc(p, n, 1); }

CUresult cuMemFree_v2(CUdeviceptr p) {
  pthread_mutex_lock(&lock);
  int i = find((uintptr_t)p);
  if (i < 0) {
    pthread_mutex_unlock(&lock);
    return 1;
  }
  munmap((void *)allocs[i].base, allocs[i].size);
  allocs[i] = allocs[--nallocs];
  pthread_mutex_unlock(&lock);
  return 0;
}

CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr ptr) {
  pthread_mutex_lock(&lock);
  int i = find((uintptr_t)ptr), vmm = i >= 0 && allocs[i].vmm;
  pthread_mutex_unlock(&lock);
  if (i < 0) return 1; /* not known to CUDA: host memory */
  switch (attr) {
  case 1: /* CONTEXT */
    *(CUcontext *)data = vmm ? NULL : &primary;
    return vmm ? 1 : 0;
  case 2: /* MEMORY_TYPE */
    *(unsigned *)data = 2; /* DEVICE */
    return 0;
  case 9: /* DEVICE_ORDINAL */
    *(int *)data = 0;
    return 0;
  default:
    return 1;
  }
}

CUresult cuStreamCreate(CUstream *s, unsigned flags) {
  (void)flags;
  if (!current) return 201;
  pthread_mutex_lock(&lock);
  nstreams_made++;
  pthread_mutex_unlock(&lock);
  *s = malloc(1); /* a distinct handle, kept with its context */
  return 0;
}

CUresult cuStreamDestroy_v2(CUstream s) { free(s); return 0; }

CUresult cuStreamSynchronize(CUstream s) {
  (void)s;
  pthread_mutex_lock(&lock);
  nsyncs++;
  if (!current) nctx_missing++;
  pthread_mutex_unlock(&lock);
  return current ? 0 : 201;
}

/* Streams the test made count as the caller's; the rest as libhora's. */
#define MAX_USER 16
static CUstream user_streams[MAX_USER];
static int nuser;
void fakecuda_user_stream(CUstream s) {
  if (nuser < MAX_USER) user_streams[nuser++] = s;
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  pthread_mutex_lock(&lock);
  const char *f = getenv("FAKECUDA_FAIL_COPY"); /* a test may set it late */
  fail_at = f ? atol(f) : 0;
  ncopies++;
  if (!current) {
    nctx_missing++;
    pthread_mutex_unlock(&lock);
    return 201;
  }
  if (fail_at && ncopies == fail_at) {
    pthread_mutex_unlock(&lock);
    return 999;
  }
  int user = s == NULL;
  for (int i = 0; i < nuser; i++) user |= s == user_streams[i];
  if (user) nuser_copies++;
  else nown_copies++;
  set_prot((uintptr_t)dst, n, PROT_READ | PROT_WRITE);
  set_prot((uintptr_t)src, n, PROT_READ | PROT_WRITE);
  memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
  set_prot((uintptr_t)dst, n, PROT_NONE);
  set_prot((uintptr_t)src, n, PROT_NONE);
  pthread_mutex_unlock(&lock);
  return 0;
}

CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags) {
  (void)flags;
  pthread_mutex_lock(&lock);
  CUresult r = 0;
  if (registered) r = 712; /* already registered */
  else {
    registered = p;
    registered_size = n;
    nregister++;
  }
  pthread_mutex_unlock(&lock);
  return r;
}

CUresult cuMemHostUnregister(void *p) {
  pthread_mutex_lock(&lock);
  CUresult r = p == registered ? 0 : 713; /* not registered */
  if (!r) {
    registered = NULL;
    nunregister++;
  }
  pthread_mutex_unlock(&lock);
  return r;
}

void fakecuda_stats(struct fakecuda_stats *st) {
  pthread_mutex_lock(&lock);
  st->copies = ncopies;
  st->user_stream_copies = nuser_copies;
  st->own_stream_copies = nown_copies;
  st->streams_made = nstreams_made;
  st->syncs = nsyncs;
  st->host_registers = nregister;
  st->host_unregisters = nunregister;
  st->no_context = nctx_missing;
  pthread_mutex_unlock(&lock);
}
