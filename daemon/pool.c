/* pool.c -- the reduction threads. The caller of hd_pool_run() takes part
 * (slice 0 is its own), so a pool of one is just a function call. Workers
 * spin a little after each job, since jobs come in bursts (chunks of a
 * tensor), then sleep on a futex. */
#define HC_LOG_SUB HC_SUB_ENGINE
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "daemon.h"

#define WORKER_SPIN_NS 100000u

static struct {
  int n; /* threads including the caller */
  pthread_t *tids;
  _Atomic uint32_t seq;     /* bumped per job (futex word) */
  _Atomic uint32_t sleepers;
  _Atomic int remaining;
  _Atomic int stop;
  void (*fn)(void *, int, int);
  void *arg;
  int parts;
} P;

static void futex_wait(_Atomic uint32_t *w, uint32_t v) {
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}
static void futex_wake(_Atomic uint32_t *w) {
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void *worker(void *argp) {
  int me = (int)(intptr_t)argp;
  uint32_t seen = 0; /* the value before any job, even if one came first */
  for (;;) {
    uint64_t t0 = hc_now_ns();
    uint32_t s;
    while ((s = atomic_load_explicit(&P.seq, memory_order_acquire)) == seen) {
      if (atomic_load(&P.stop)) return NULL;
      if (hc_now_ns() - t0 < WORKER_SPIN_NS) {
        sched_yield();
        continue;
      }
      atomic_fetch_add(&P.sleepers, 1);
      if (atomic_load(&P.seq) == seen && !atomic_load(&P.stop))
        futex_wait(&P.seq, seen);
      atomic_fetch_sub(&P.sleepers, 1);
    }
    seen = s;
    if (atomic_load(&P.stop)) return NULL;
    if (me < P.parts) P.fn(P.arg, me, P.parts);
    /* Every worker acknowledges every job, taking part or not, so none can
     * still be looking at this job's parameters when the next one is set. */
    atomic_fetch_sub_explicit(&P.remaining, 1, memory_order_release);
  }
}

int hd_pool_init(int nthreads) {
  if (P.tids) return 0;
  P.n = nthreads < 1 ? 1 : nthreads;
  P.tids = calloc((size_t)P.n, sizeof *P.tids);
  if (!P.tids) return HORA_ENOMEM;
  for (int i = 1; i < P.n; i++)
    if (pthread_create(&P.tids[i], NULL, worker, (void *)(intptr_t)i) != 0) {
      P.n = i;
      break;
    }
  return 0;
}

void hd_pool_fini(void) {
  if (!P.tids) return;
  atomic_store(&P.stop, 1);
  atomic_fetch_add(&P.seq, 1);
  futex_wake(&P.seq);
  for (int i = 1; i < P.n; i++) pthread_join(P.tids[i], NULL);
  free(P.tids);
  P.tids = NULL;
}

int hd_pool_size(void) { return P.n > 0 ? P.n : 1; }

void hd_pool_run(void (*fn)(void *arg, int i, int n), void *arg, int n) {
  if (n > hd_pool_size()) n = hd_pool_size();
  if (n <= 1) {
    fn(arg, 0, 1);
    return;
  }
  P.fn = fn;
  P.arg = arg;
  P.parts = n;
  atomic_store(&P.remaining, P.n - 1);
  atomic_fetch_add_explicit(&P.seq, 1, memory_order_release);
  if (atomic_load(&P.sleepers)) futex_wake(&P.seq);
  fn(arg, 0, n);
  unsigned spins = 0;
  while (atomic_load_explicit(&P.remaining, memory_order_acquire) > 0)
    if (++spins > 64) sched_yield();
}
