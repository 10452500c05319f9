/* ipc_probe.c -- which ways of sharing device memory between processes work
 * on this machine.
 *
 *   cc -I$CUDA/include ipc_probe.c -o ipc_probe -L$CUDA/lib64/stubs -lcuda
 *   ./ipc_probe
 *
 * The GPU engine needs one process (a rank) to hand its device buffer to
 * another (horad) without a copy. Two mechanisms exist and machines differ
 * in which they allow (containers and sandboxed VMs often refuse one):
 *
 *   legacy  cuIpcGetMemHandle on a cuMemAlloc buffer, the 64-byte handle
 *           sent as bytes, cuIpcOpenMemHandle in the other process; an
 *           interprocess event (CU_EVENT_INTERPROCESS) orders the two
 *   vmm     cuMemCreate with POSIX file descriptors as its shareable handle,
 *           cuMemExportToShareableHandle, the descriptor passed over a unix
 *           socket (SCM_RIGHTS), cuMemImportFromShareableHandle, then
 *           cuMemAddressReserve + cuMemMap + cuMemSetAccess there
 *
 * For each, in a process of its own, the parent fills a buffer, the child
 * (forked before the driver is initialised: a rank and horad are separate
 * programs) maps it, adds
 * one to every word in place, and the parent checks. One line per
 * mechanism, "legacy: works" or "legacy: fails: <where>: <driver's
 * message>", and the time the child took to map the buffer. Exit status:
 * the number of mechanisms that failed.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N (1 << 20) /* words */

static char why[512];

static int fail(const char *where, CUresult r) {
  const char *s = NULL;
  cuGetErrorString(r, &s);
  snprintf(why, sizeof why, "%s: %s (%d)", where, s ? s : "?", (int)r);
  return -1;
}
#define CK(call)                                  \
  do {                                            \
    CUresult r_ = (call);                         \
    if (r_ != CUDA_SUCCESS) return fail(#call, r_); \
  } while (0)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int send_msg(int s, const void *b, size_t n, int fd) {
  struct msghdr m = {0};
  struct iovec v = {(void *)b, n};
  char c[CMSG_SPACE(sizeof(int))];
  m.msg_iov = &v;
  m.msg_iovlen = 1;
  if (fd >= 0) {
    memset(c, 0, sizeof c);
    m.msg_control = c;
    m.msg_controllen = sizeof c;
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(h), &fd, sizeof(int));
  }
  return sendmsg(s, &m, 0) == (ssize_t)n ? 0 : -1;
}

static int recv_msg(int s, void *b, size_t n, int *fd) {
  struct msghdr m = {0};
  struct iovec v = {b, n};
  char c[CMSG_SPACE(sizeof(int))];
  m.msg_iov = &v;
  m.msg_iovlen = 1;
  m.msg_control = c;
  m.msg_controllen = sizeof c;
  if (recvmsg(s, &m, MSG_WAITALL) != (ssize_t)n) return -1;
  if (fd) {
    *fd = -1;
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    if (h && h->cmsg_type == SCM_RIGHTS) memcpy(fd, CMSG_DATA(h), sizeof(int));
  }
  return 0;
}

/* The child's part: map what the parent sent, add one, report. */
static int child_legacy(int s, double *secs) {
  CUipcMemHandle mh;
  CUipcEventHandle eh;
  CUdevice dev;
  CUcontext ctx;
  CUdeviceptr p;
  CUevent ev;
  if (recv_msg(s, &mh, sizeof mh, NULL) || recv_msg(s, &eh, sizeof eh, NULL)) {
    snprintf(why, sizeof why, "the handles did not arrive");
    return -1;
  }
  CK(cuInit(0));
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  double t0 = now();
  CK(cuIpcOpenMemHandle(&p, mh, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  CK(cuIpcOpenEventHandle(&ev, eh));
  *secs = now() - t0;
  CUstream st;
  CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  CK(cuStreamWaitEvent(st, ev, 0));
  uint32_t *h = malloc(N * 4);
  CK(cuMemcpyDtoHAsync(h, p, N * 4, st));
  CK(cuStreamSynchronize(st));
  for (int i = 0; i < N; i++) h[i] += 1;
  CK(cuMemcpyHtoDAsync(p, h, N * 4, st));
  CK(cuStreamSynchronize(st));
  free(h);
  CK(cuIpcCloseMemHandle(p));
  return 0;
}

static int child_vmm(int s, double *secs) {
  int fd = -1;
  size_t size;
  CUdevice dev;
  CUcontext ctx;
  if (recv_msg(s, &size, sizeof size, &fd) || fd < 0) {
    snprintf(why, sizeof why, "the descriptor did not arrive");
    return -1;
  }
  CK(cuInit(0));
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  double t0 = now();
  CUmemGenericAllocationHandle a;
  CK(cuMemImportFromShareableHandle(&a, (void *)(intptr_t)fd,
                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  CUdeviceptr p;
  CK(cuMemAddressReserve(&p, size, 0, 0, 0));
  CK(cuMemMap(p, size, 0, a, 0));
  CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CK(cuMemSetAccess(p, size, &acc, 1));
  *secs = now() - t0;
  uint32_t *h = malloc(N * 4);
  CK(cuMemcpyDtoH(h, p, N * 4));
  for (int i = 0; i < N; i++) h[i] += 1;
  CK(cuMemcpyHtoD(p, h, N * 4));
  free(h);
  CK(cuMemUnmap(p, size));
  CK(cuMemAddressFree(p, size));
  CK(cuMemRelease(a));
  close(fd);
  return 0;
}

static int check(CUdeviceptr p) {
  uint32_t *h = malloc(N * 4);
  CK(cuMemcpyDtoH(h, p, N * 4));
  for (int i = 0; i < N; i++)
    if (h[i] != (uint32_t)i * 3u + 1u) {
      snprintf(why, sizeof why, "word %d is %u after the child, not %u", i, h[i], i * 3u + 1u);
      free(h);
      return -1;
    }
  free(h);
  return 0;
}

static int fill(CUdeviceptr p) {
  uint32_t *h = malloc(N * 4);
  for (int i = 0; i < N; i++) h[i] = (uint32_t)i * 3u;
  CK(cuMemcpyHtoD(p, h, N * 4));
  free(h);
  return 0;
}

static CUdeviceptr legacy_ptr;

/* Runs one mechanism: the parent's side after the child is forked. */
static int parent_legacy(int s) {
  CUdeviceptr p;
  CUevent ev;
  CUipcMemHandle mh;
  CUipcEventHandle eh;
  CK(cuMemAlloc(&p, N * 4));
  if (fill(p)) return -1;
  CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS));
  CK(cuEventRecord(ev, 0));
  CK(cuIpcGetMemHandle(&mh, p));
  CK(cuIpcGetEventHandle(&eh, ev));
  if (send_msg(s, &mh, sizeof mh, -1) || send_msg(s, &eh, sizeof eh, -1)) {
    snprintf(why, sizeof why, "sending the handles failed");
    return -1;
  }
  legacy_ptr = p;
  return 0;
}

static CUdeviceptr vmm_ptr;
static size_t vmm_size;
static CUmemGenericAllocationHandle vmm_alloc;

static int parent_vmm(int s) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t gran = 0;
  CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  vmm_size = ((size_t)N * 4 + gran - 1) / gran * gran;
  CK(cuMemCreate(&vmm_alloc, vmm_size, &prop, 0));
  CK(cuMemAddressReserve(&vmm_ptr, vmm_size, 0, 0, 0));
  CK(cuMemMap(vmm_ptr, vmm_size, 0, vmm_alloc, 0));
  CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CK(cuMemSetAccess(vmm_ptr, vmm_size, &acc, 1));
  if (fill(vmm_ptr)) return -1;
  int fd = -1;
  CK(cuMemExportToShareableHandle(&fd, vmm_alloc, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  int rc = send_msg(s, &vmm_size, sizeof vmm_size, fd);
  close(fd);
  if (rc) snprintf(why, sizeof why, "sending the descriptor failed");
  return rc;
}

/* The child is forked first (before this process touches the driver), and
 * waits for the parent's message. */
static int run(const char *name, int (*parent)(int), int (*child)(int, double *)) {
  int sv[2], pv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) || pipe(pv)) return perror("socketpair"), 1;
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    close(pv[0]);
    double secs = 0;
    int rc = child(sv[1], &secs);
    char msg[600];
    snprintf(msg, sizeof msg, "%s", rc ? why : "");
    dprintf(pv[1], "%d %.6f %s", rc ? 1 : 0, secs, msg);
    _exit(0);
  }
  close(sv[1]);
  close(pv[1]);
  CUdevice dev;
  CUcontext ctx;
  CUresult r;
  int ok = 1;
  why[0] = 0;
  if ((r = cuInit(0)) != CUDA_SUCCESS || (r = cuDeviceGet(&dev, 0)) != CUDA_SUCCESS ||
      (r = cuDevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS ||
      (r = cuCtxSetCurrent(ctx)) != CUDA_SUCCESS) {
    fail("cuInit/primary context", r);
    ok = 0;
  }
  int prc = ok ? parent(sv[0]) : -1;
  if (prc == -1) ok = 0;
  close(sv[0]);
  char buf[700] = {0};
  ssize_t n = 0, k;
  while ((k = read(pv[0], buf + n, sizeof buf - 1 - n)) > 0) n += k;
  waitpid(pid, NULL, 0);
  close(pv[0]);
  if (!ok) {
    printf("%s: fails: parent: %s\n", name, why);
    return 1;
  }
  int crc = 1;
  double secs = 0;
  char *msg = NULL;
  if (sscanf(buf, "%d %lf", &crc, &secs) != 2) crc = 1;
  msg = strchr(buf, ' ');
  msg = msg ? strchr(msg + 1, ' ') : NULL;
  if (crc) {
    printf("%s: fails: child: %s\n", name, msg ? msg + 1 : "(no report)");
    return 1;
  }
  int c = check(parent == parent_vmm ? vmm_ptr : legacy_ptr);
  if (c) {
    printf("%s: fails: %s\n", name, why);
    return 1;
  }
  printf("%s: works (the other process mapped it in %.1f us)\n", name, secs * 1e6);
  return 0;
}

/* Each mechanism in a process of its own, since a process that has
 * initialised the driver cannot fork a child that uses it. */
static int isolated(const char *name, int (*parent)(int), int (*child)(int, double *)) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    int rc = run(name, parent, child);
    fflush(stdout);
    _exit(rc);
  }
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) < 0) return 1;
  if (WIFSIGNALED(st)) {
    printf("%s: fails: the probe died of signal %d\n", name, WTERMSIG(st));
    return 1;
  }
  return WEXITSTATUS(st) != 0;
}

int main(void) {
  int failed = 0;
  failed += isolated("legacy", parent_legacy, child_legacy);
  failed += isolated("vmm", parent_vmm, child_vmm);
  return failed;
}
