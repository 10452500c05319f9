/* it_cuda.c -- device (CUDA) buffers through libhora, against the stand-in
 * driver of tests/fakecuda (its "device memory" faults when anything but
 * the driver touches it). Each mode prints "rank R: cuda MODE: N checks,
 * F failures".
 *
 *   matrix   the driver loaded before hora_init(): allreduce (device to
 *            device, in place, device to host, host to device, device
 *            into an arena block, average with scale factors, one larger
 *            than the arena's half: streamed), broadcast (and streamed),
 *            allgatherv, alltoall, reducescatter, a group, 64 at once,
 *            a name used again and again (not the fast path: device
 *            buffers go to horad), memory of the virtual memory API (no
 *            context: the device's primary one); every copy had a
 *            context, inputs went on the caller's stream and results on
 *            libhora's, the shared segment was pinned once and let go at
 *            hora_shutdown()
 *   late     the driver is loaded after hora_init() and a first host
 *            operation: device buffers are still recognised
 *   failin   rank 1's first copy fails: its submission returns
 *            HORA_EDEVICE with the driver's message; it submits again
 *   failout  rank 1's copy of a result back fails: its wait returns
 *            HORA_EDEVICE; the other ranks' results are right
 *   solo     a job of one (no horad): device buffers copied, scaled
 *   host     a program that never loads the driver: host buffers work and
 *            libhora has not loaded it either
 * Usage: it_cuda MODE (FAKECUDA_LIB: the stand-in driver's path; without
 * it, the machine's libcuda.so.1: on a GPU, the checks that need the
 * stand-in's counters or its virtual-memory allocations are left out) */
#include <dlfcn.h>
#include <hora.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned long long dptr_t;
struct fakecuda_stats {
  long copies, user_stream_copies, own_stream_copies, streams_made, syncs,
      host_registers, host_unregisters, no_context;
};

static struct {
  int (*init)(unsigned);
  int (*retain)(void **, int);
  int (*set_current)(void *);
  int (*mem_alloc)(dptr_t *, size_t);
  int (*mem_free)(dptr_t);
  int (*alloc_vmm)(dptr_t *, size_t);
  int (*memcpy_async)(dptr_t, dptr_t, size_t, void *);
  int (*stream_create)(void **, unsigned);
  int (*stream_sync)(void *);
  void (*user_stream)(void *);
  void (*stats)(struct fakecuda_stats *);
} cu;

static int rank, size, checks, failures;
static void *stream;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    checks++;                                                                  \
    if (!(cond)) {                                                             \
      failures++;                                                              \
      printf("rank %d: ", rank);                                               \
      printf(__VA_ARGS__);                                                     \
      printf("\n");                                                            \
      fflush(stdout);                                                          \
    }                                                                          \
  } while (0)

static void load_driver(void) {
  const char *path = getenv("FAKECUDA_LIB");
  void *h = dlopen(path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "it_cuda: cannot load the driver: %s\n", dlerror());
    exit(2);
  }
#define SYM(field, name) *(void **)&cu.field = dlsym(h, name)
  SYM(init, "cuInit");
  SYM(retain, "cuDevicePrimaryCtxRetain");
  SYM(set_current, "cuCtxSetCurrent");
  SYM(mem_alloc, "cuMemAlloc_v2");
  SYM(mem_free, "cuMemFree_v2");
  SYM(alloc_vmm, "fakecuda_alloc_vmm");
  SYM(memcpy_async, "cuMemcpyAsync");
  SYM(stream_create, "cuStreamCreate");
  SYM(stream_sync, "cuStreamSynchronize");
  SYM(user_stream, "fakecuda_user_stream");
  SYM(stats, "fakecuda_stats");
#undef SYM
  void *ctx = NULL;
  int dev = getenv("IT_CUDA_DEVICE") ? atoi(getenv("IT_CUDA_DEVICE")) : 0;
  if (cu.init(0) || cu.retain(&ctx, dev) || cu.set_current(ctx) ||
      cu.stream_create(&stream, 1)) {
    fprintf(stderr, "it_cuda: no context on device %d\n", dev);
    exit(2);
  }
  if (cu.user_stream) cu.user_stream(stream);
}

static void *dev_alloc(size_t n) {
  dptr_t p = 0;
  if (cu.mem_alloc(&p, n)) {
    fprintf(stderr, "it_cuda: cuMemAlloc failed\n");
    exit(2);
  }
  return (void *)(uintptr_t)p;
}

static void dev_free(void *p) { cu.mem_free((dptr_t)(uintptr_t)p); }

static void h2d(void *d, const void *h, size_t n) {
  cu.memcpy_async((dptr_t)(uintptr_t)d, (dptr_t)(uintptr_t)h, n, stream);
  cu.stream_sync(stream);
}

static void d2h(void *h, const void *d, size_t n) {
  cu.memcpy_async((dptr_t)(uintptr_t)h, (dptr_t)(uintptr_t)d, n, stream);
  cu.stream_sync(stream);
}

/* rank r's element i: small integers, exact in float32 sums */
static float val(int r, size_t i) { return (float)((int)((i * 7 + (size_t)r * 13) % 17) - 8); }

static float sum_at(size_t i) {
  float s = 0;
  for (int r = 0; r < size; r++) s += val(r, i);
  return s;
}

static int run(hora_request_t *q) {
  int64_t h;
  int rc = hora_submit(q, &h);
  if (rc == 0) rc = hora_wait(h);
  return rc;
}

static hora_request_t req(hora_coll_t coll, const char *name, const void *s,
                          void *r, size_t count, hora_dtype_t dt) {
  hora_request_t q;
  memset(&q, 0, sizeof q);
  q.coll = coll;
  q.name = name;
  q.sendbuf = s;
  q.recvbuf = r;
  q.count = count;
  q.dtype = dt;
  q.op = HORA_SUM;
  q.stream = stream;
  return q;
}

/* kinds of buffers for an allreduce's input and output */
enum { DEV, HOST, ARENA };

static void allreduce_case(const char *name, size_t n, int in_kind,
                           int out_kind, int in_place) {
  float *h = malloc(n * sizeof *h), *got = malloc(n * sizeof *got);
  for (size_t i = 0; i < n; i++) h[i] = val(rank, i);
  void *in = in_kind == DEV ? dev_alloc(n * 4) : in_kind == ARENA ? hora_alloc(n * 4) : malloc(n * 4);
  void *out = in_place ? in : out_kind == DEV ? dev_alloc(n * 4)
                            : out_kind == ARENA ? hora_alloc(n * 4) : malloc(n * 4);
  if (in_kind == DEV) h2d(in, h, n * 4); else memcpy(in, h, n * 4);
  hora_request_t q = req(HORA_COLL_ALLREDUCE, name, in, out, n, HORA_FLOAT32);
  int rc = run(&q);
  CHECK(rc == 0, "%s: rc %d (%s)", name, rc, hora_last_error());
  int kind = in_place ? in_kind : out_kind;
  if (kind == DEV) d2h(got, out, n * 4); else memcpy(got, out, n * 4);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += got[i] != sum_at(i);
  CHECK(bad == 0, "%s: %zu of %zu elements wrong", name, bad, n);
  if (!in_place) {
    /* the input is left as it was */
    if (in_kind == DEV) d2h(got, in, n * 4); else memcpy(got, in, n * 4);
    CHECK(!memcmp(got, h, n * 4), "%s: the input changed", name);
  }
  if (in_kind == DEV) dev_free(in); else if (in_kind == ARENA) hora_free(in); else free(in);
  if (!in_place) {
    if (out_kind == DEV) dev_free(out); else if (out_kind == ARENA) hora_free(out); else free(out);
  }
  free(h);
  free(got);
}

static void scaled_average(void) {
  size_t n = 1000;
  double *h = malloc(n * 8), *got = malloc(n * 8);
  for (size_t i = 0; i < n; i++) h[i] = val(rank, i);
  void *d = dev_alloc(n * 8);
  h2d(d, h, n * 8);
  hora_request_t q = req(HORA_COLL_ALLREDUCE, "avg", d, d, n, HORA_FLOAT64);
  q.op = HORA_AVERAGE;
  q.prescale = 2.0;
  q.postscale = 0.5;
  int rc = run(&q);
  CHECK(rc == 0, "avg: rc %d (%s)", rc, hora_last_error());
  d2h(got, d, n * 8);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += fabs(got[i] - (double)sum_at(i) / size) > 1e-12;
  CHECK(bad == 0, "avg: %zu of %zu elements wrong", bad, n);
  dev_free(d);
  free(h);
  free(got);
}

static void broadcast_case(const char *name, size_t n) {
  int root = size - 1;
  int32_t *h = malloc(n * 4), *got = malloc(n * 4);
  for (size_t i = 0; i < n; i++) h[i] = rank == root ? (int32_t)(i * 3 + 1) : -1;
  void *d = dev_alloc(n * 4);
  h2d(d, h, n * 4);
  hora_request_t q = req(HORA_COLL_BROADCAST, name, d, NULL, n, HORA_INT32);
  q.root_rank = root;
  int rc = run(&q);
  CHECK(rc == 0, "%s: rc %d (%s)", name, rc, hora_last_error());
  d2h(got, d, n * 4);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += got[i] != (int32_t)(i * 3 + 1);
  CHECK(bad == 0, "%s: %zu of %zu elements wrong", name, bad, n);
  dev_free(d);
  free(h);
  free(got);
}

static void allgather_case(void) {
  /* member m sends m + 1 elements, all equal to m */
  size_t mine = (size_t)rank + 1, total = 0;
  int64_t counts[64];
  for (int m = 0; m < size; m++) total += (size_t)(counts[m] = m + 1);
  float *h = malloc(mine * 4), *got = malloc(total * 4);
  for (size_t i = 0; i < mine; i++) h[i] = (float)rank;
  void *in = dev_alloc(mine * 4), *out = dev_alloc(total * 4);
  h2d(in, h, mine * 4);
  hora_request_t q = req(HORA_COLL_ALLGATHER, "ag", in, out, mine, HORA_FLOAT32);
  q.recv_counts = counts;
  q.recv_count = total;
  int rc = run(&q);
  CHECK(rc == 0, "allgather: rc %d (%s)", rc, hora_last_error());
  d2h(got, out, total * 4);
  size_t k = 0, bad = 0;
  for (int m = 0; m < size; m++)
    for (int j = 0; j <= m; j++) bad += got[k++] != (float)m;
  CHECK(bad == 0, "allgather: %zu elements wrong", bad);
  dev_free(in);
  dev_free(out);
  free(h);
  free(got);
}

static void alltoall_case(void) {
  /* 3 elements to each member: 100 * sender + receiver */
  size_t n = 3 * (size_t)size;
  int64_t *h = malloc(n * 8), *got = malloc(n * 8);
  for (size_t i = 0; i < n; i++) h[i] = 100 * rank + (int64_t)(i / 3);
  void *in = dev_alloc(n * 8), *out = dev_alloc(n * 8);
  h2d(in, h, n * 8);
  hora_request_t q = req(HORA_COLL_ALLTOALL, "a2a", in, out, n, HORA_INT64);
  int rc = run(&q);
  CHECK(rc == 0, "alltoall: rc %d (%s)", rc, hora_last_error());
  d2h(got, out, n * 8);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += got[i] != 100 * (int64_t)(i / 3) + rank;
  CHECK(bad == 0, "alltoall: %zu of %zu elements wrong", bad, n);
  dev_free(in);
  dev_free(out);
  free(h);
  free(got);
}

static void reducescatter_case(void) {
  size_t rows = 5 * (size_t)size + 1, n = rows;
  size_t mine = hora_reducescatter_rows(rows, size, rank), first = 0;
  for (int m = 0; m < rank; m++) first += hora_reducescatter_rows(rows, size, m);
  float *h = malloc(n * 4), *got = malloc((mine ? mine : 1) * 4);
  for (size_t i = 0; i < n; i++) h[i] = val(rank, i);
  void *in = dev_alloc(n * 4), *out = dev_alloc((mine ? mine : 1) * 4);
  h2d(in, h, n * 4);
  hora_request_t q = req(HORA_COLL_REDUCESCATTER, "rs", in, out, n, HORA_FLOAT32);
  int rc = run(&q);
  CHECK(rc == 0, "reducescatter: rc %d (%s)", rc, hora_last_error());
  d2h(got, out, mine * 4);
  size_t bad = 0;
  for (size_t i = 0; i < mine; i++) bad += got[i] != sum_at(first + i);
  CHECK(bad == 0, "reducescatter: %zu of %zu elements wrong", bad, mine);
  dev_free(in);
  dev_free(out);
  free(h);
  free(got);
}

/* 64 allreduces in flight at once, then a group of 3 */
static void many_case(void) {
  enum { K = 64, N = 257 };
  void *d[K];
  int64_t hs[K];
  float h[N], got[N];
  char names[K][24];
  for (int k = 0; k < K; k++) {
    for (int i = 0; i < N; i++) h[i] = val(rank, (size_t)(i + k));
    d[k] = dev_alloc(N * 4);
    h2d(d[k], h, N * 4);
    snprintf(names[k], sizeof names[k], "many.%d", k);
    hora_request_t q = req(HORA_COLL_ALLREDUCE, names[k], d[k], d[k], N, HORA_FLOAT32);
    int rc = hora_submit(&q, &hs[k]);
    CHECK(rc == 0, "many %d: submit rc %d (%s)", k, rc, hora_last_error());
  }
  size_t bad = 0;
  for (int k = 0; k < K; k++) {
    int rc = hora_wait(hs[k]);
    CHECK(rc == 0, "many %d: rc %d (%s)", k, rc, hora_last_error());
    d2h(got, d[k], N * 4);
    for (int i = 0; i < N; i++) bad += got[i] != sum_at((size_t)(i + k));
  }
  CHECK(bad == 0, "many: %zu elements wrong", bad);
  hora_request_t g[3];
  for (int k = 0; k < 3; k++)
    g[k] = req(HORA_COLL_ALLREDUCE, names[k], d[k], d[k], N, HORA_FLOAT32);
  for (int k = 0; k < 3; k++) {
    for (int i = 0; i < N; i++) h[i] = val(rank, (size_t)(i + k));
    h2d(d[k], h, N * 4);
  }
  int rc = hora_submit_group(g, 3, hs);
  CHECK(rc == 0, "group: submit rc %d (%s)", rc, hora_last_error());
  bad = 0;
  for (int k = 0; k < 3 && rc == 0; k++) {
    int r2 = hora_wait(hs[k]);
    CHECK(r2 == 0, "group %d: rc %d (%s)", k, r2, hora_last_error());
    d2h(got, d[k], N * 4);
    for (int i = 0; i < N; i++) bad += got[i] != sum_at((size_t)(i + k));
  }
  CHECK(bad == 0, "group: %zu elements wrong", bad);
  for (int k = 0; k < K; k++) dev_free(d[k]);
}

/* The same small named allreduce again and again: on host buffers the
 * fast path would take it after the first; device buffers go to horad. */
static void repeat_case(void) {
  float h[16], got[16];
  void *d = dev_alloc(sizeof h);
  size_t bad = 0;
  for (int round = 0; round < 20; round++) {
    for (int i = 0; i < 16; i++) h[i] = val(rank, (size_t)(i + round));
    h2d(d, h, sizeof h);
    hora_request_t q = req(HORA_COLL_ALLREDUCE, "again", d, d, 16, HORA_FLOAT32);
    int rc = run(&q);
    CHECK(rc == 0, "again %d: rc %d (%s)", round, rc, hora_last_error());
    d2h(got, d, sizeof got);
    for (int i = 0; i < 16; i++) bad += got[i] != sum_at((size_t)(i + round));
  }
  CHECK(bad == 0, "again: %zu elements wrong", bad);
  dev_free(d);
}

static void vmm_case(void) {
  if (!cu.alloc_vmm) return; /* the real driver: not this way */
  size_t n = 300;
  float h[300], got[300];
  for (size_t i = 0; i < n; i++) h[i] = val(rank, i);
  dptr_t p;
  CHECK(cu.alloc_vmm(&p, n * 4) == 0, "vmm: no allocation");
  void *d = (void *)(uintptr_t)p;
  h2d(d, h, n * 4);
  hora_request_t q = req(HORA_COLL_ALLREDUCE, "vmm", d, d, n, HORA_FLOAT32);
  int rc = run(&q);
  CHECK(rc == 0, "vmm: rc %d (%s)", rc, hora_last_error());
  d2h(got, d, n * 4);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += got[i] != sum_at(i);
  CHECK(bad == 0, "vmm: %zu of %zu elements wrong", bad, n);
  dev_free(d);
}

/* the elements of an allreduce larger than half the arena (streamed) */
/* Even ranks give a device tensor, odd ranks a host tensor: every rank's
 * operation fails with the mismatch, as in Horovod, and nothing hangs. */
static void device_mismatch_case(void) {
  size_t n = 17;
  float h[17], o[17];
  for (size_t i = 0; i < n; i++) h[i] = val(rank, i);
  void *d = dev_alloc(n * 4), *od = dev_alloc(n * 4);
  h2d(d, h, n * 4);
  int on_dev = rank % 2 == 0;
  hora_request_t q = req(HORA_COLL_ALLREDUCE, "cpu_gpu", on_dev ? d : (void *)h,
                         on_dev ? od : (void *)o, n, HORA_FLOAT32);
  int rc = run(&q);
  CHECK(rc == HORA_EMISMATCH &&
            strstr(hora_last_error(), "CPU/GPU device selection on tensor 'cpu_gpu'"),
        "cpu_gpu: rc %d (%s)", rc, hora_last_error());
  dev_free(d);
  dev_free(od);
}

static size_t big_count(void) { return hora_arena_size() / 4 / 2 + 4099; }

static void matrix(void) {
  allreduce_case("d2d", 1000, DEV, DEV, 0);
  allreduce_case("inplace", 1, DEV, DEV, 1);
  allreduce_case("d2h", 777, DEV, HOST, 0);
  allreduce_case("h2d", 777, HOST, DEV, 0);
  allreduce_case("d2arena", 555, DEV, ARENA, 0);
  allreduce_case("big", big_count(), DEV, DEV, 0);
  allreduce_case("big.inplace", big_count(), DEV, DEV, 1);
  scaled_average();
  broadcast_case("bc", 1234);
  broadcast_case("bc.big", big_count());
  allgather_case();
  alltoall_case();
  reducescatter_case();
  many_case();
  repeat_case();
  vmm_case();
  device_mismatch_case();
  if (!cu.stats) return; /* the real driver */
  struct fakecuda_stats st;
  cu.stats(&st);
  CHECK(st.no_context == 0, "%ld driver calls without a current context", st.no_context);
  CHECK(st.host_registers == 1, "the segment was pinned %ld times", st.host_registers);
  CHECK(st.own_stream_copies > 0 && st.user_stream_copies > 0,
        "copies on the caller's stream %ld, on libhora's %ld",
        st.user_stream_copies, st.own_stream_copies);
  CHECK(st.streams_made == 2, "%ld streams made (the test's and libhora's)",
        st.streams_made);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "matrix";
  int late = !strcmp(mode, "late"), host = !strcmp(mode, "host");
  if (!late && !host) load_driver();
  int rc = hora_init();
  if (rc) {
    fprintf(stderr, "it_cuda: hora_init: %s\n", hora_last_error());
    return 1;
  }
  rank = hora_rank();
  size = hora_size();
  if (!strcmp(mode, "matrix")) {
    matrix();
  } else if (late) {
    float x = 1, y = 0;
    rc = hora_allreduce("host", &x, &y, 1, HORA_FLOAT32, HORA_SUM);
    CHECK(rc == 0 && y == size, "host allreduce: rc %d, %g", rc, y);
    load_driver();
    allreduce_case("late.d2d", 1000, DEV, DEV, 0);
    allreduce_case("late.big", big_count(), DEV, DEV, 1);
  } else if (!strcmp(mode, "failin") || !strcmp(mode, "failout")) {
    int in = !strcmp(mode, "failin");
    size_t n = 100;
    float h[100], got[100];
    for (size_t i = 0; i < n; i++) h[i] = val(rank, i);
    void *d = dev_alloc(n * 4), *o = dev_alloc(n * 4);
    h2d(d, h, n * 4);
    /* the copies so far: the one above; the next is the input's */
    if (rank == 1) setenv("FAKECUDA_FAIL_COPY", in ? "2" : "3", 1);
    hora_request_t q = req(HORA_COLL_ALLREDUCE, "f", d, o, n, HORA_FLOAT32);
    int64_t hd;
    rc = hora_submit(&q, &hd);
    if (rank == 1 && in) {
      CHECK(rc == HORA_EDEVICE, "failin: submit rc %d", rc);
      printf("rank %d: failin error: %s\n", rank, hora_last_error());
      rc = hora_submit(&q, &hd); /* the next copy works */
    }
    CHECK(rc == 0, "%s: submit rc %d (%s)", mode, rc, hora_last_error());
    rc = hora_wait(hd);
    if (rank == 1 && !in) {
      CHECK(rc == HORA_EDEVICE, "failout: wait rc %d", rc);
      printf("rank %d: failout error: %s\n", rank, hora_last_error());
    } else {
      CHECK(rc == 0, "%s: rc %d (%s)", mode, rc, hora_last_error());
      d2h(got, o, n * 4);
      size_t bad = 0;
      for (size_t i = 0; i < n; i++) bad += got[i] != sum_at(i);
      CHECK(bad == 0, "%s: %zu elements wrong", mode, bad);
    }
    dev_free(d);
    dev_free(o);
  } else if (host) {
    allreduce_case("host.h2h", 1000, HOST, HOST, 0);
    allreduce_case("host.arena", 100, ARENA, ARENA, 1);
    FILE *m = fopen("/proc/self/maps", "r");
    char line[4096];
    int loaded = 0;
    while (m && fgets(line, sizeof line, m)) loaded |= strstr(line, "libcuda") != NULL;
    if (m) fclose(m);
    CHECK(m && !loaded, "the CUDA driver is mapped in a program that never loaded it");
    printf("rank %d: cuda host: %d checks, %d failures\n", rank, checks, failures);
    hora_shutdown();
    return failures ? 1 : 0;
  } else if (!strcmp(mode, "solo")) {
    allreduce_case("solo.d2d", 100, DEV, DEV, 0);
    allreduce_case("solo.h2d", 100, HOST, DEV, 0);
    scaled_average();
    broadcast_case("solo.bc", 10);
    allgather_case();
    reducescatter_case();
  } else {
    fprintf(stderr, "it_cuda: unknown mode %s\n", mode);
    return 2;
  }
  hora_shutdown();
  struct fakecuda_stats st;
  if (cu.stats) {
    cu.stats(&st);
    CHECK(st.host_registers == st.host_unregisters,
          "the segment was pinned %ld times and let go %ld times",
          st.host_registers, st.host_unregisters);
  }
  printf("rank %d: cuda %s: %d checks, %d failures\n", rank, mode, checks, failures);
  return failures ? 1 : 0;
}
