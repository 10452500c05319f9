/* ops.c -- submitting collectives, completing them, and waiting.
 *
 * A tensor that lies in the arena is reduced where it is (the submission
 * carries its offset). Another one is copied into an arena block when one
 * is free and copied back when the operation completes; a tensor too large
 * for that is streamed: horad asks for chunks to be copied in and out of
 * its staging area, and whichever thread holds the completion queue
 * (a waiting caller, or the progress thread, which horad wakes only for
 * such copy requests) does the copies.
 *
 * A waiting thread polls shared memory for spin_us, yielding the core when
 * ranks outnumber cores, then sleeps on a futex that horad bumps only when
 * it sees a sleeper, so busy ranks make no system call per operation. */
#define HC_LOG_SUB HC_SUB_CLIENT
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "fast.h"
#include "half.h"

#define SLOT_BITS 24u
#define SLOT_MASK ((1u << SLOT_BITS) - 1)
#define MAX_OPS (1u << 20)
#define BLOCK_OPS 256u

static struct hl_op *op_at(uint32_t slot) {
  return &hl.op_blocks[slot / BLOCK_OPS][slot % BLOCK_OPS];
}
#define SLEEP_CHECK_MS 100

void hl_futex_wake_all(_Atomic uint32_t *w) {
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void hl_futex_wait(_Atomic uint32_t *w, uint32_t v, int timeout_ms) {
  struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000};
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, v, &ts, NULL, 0);
}

/* ---- the operation table ------------------------------------------------ */

int hl_ops_init(void) {
  hl.op_blocks = calloc(MAX_OPS / BLOCK_OPS, sizeof *hl.op_blocks);
  if (!hl.op_blocks) return hl_error(HORA_ENOMEM, "out of memory");
  hl.nops = 1; /* slot 0 is never used, so no id is 0 */
  hl.free_head = 0;
  return 0;
}

void hl_ops_fini(void) {
  for (uint32_t b = 0; hl.op_blocks && b < MAX_OPS / BLOCK_OPS; b++)
    free(hl.op_blocks[b]);
  free(hl.op_blocks);
  hl.op_blocks = NULL;
  hl.nops = hl.free_head = 0;
}

static struct hl_op *op_new(void) {
  pthread_mutex_lock(&hl.op_lock);
  uint32_t slot = hl.free_head;
  if (slot) {
    hl.free_head = op_at(slot)->next_free;
  } else {
    if (hl.nops >= MAX_OPS) {
      pthread_mutex_unlock(&hl.op_lock);
      return NULL;
    }
    struct hl_op **blk = &hl.op_blocks[hl.nops / BLOCK_OPS];
    if (!*blk && !(*blk = calloc(BLOCK_OPS, sizeof **blk))) {
      pthread_mutex_unlock(&hl.op_lock);
      return NULL;
    }
    slot = hl.nops++;
  }
  struct hl_op *op = op_at(slot);
  uint64_t gen = ++hl.generation;
  memset(op, 0, offsetof(struct hl_op, fe));
  op->id = gen << SLOT_BITS | slot;
  pthread_mutex_unlock(&hl.op_lock);
  return op;
}

/* Looks an id up; NULL when stale. Caller holds op_lock or owns the op. */
static struct hl_op *op_find(uint64_t id) {
  uint32_t slot = (uint32_t)(id & SLOT_MASK);
  if (!id || slot == 0 || slot >= hl.nops) return NULL;
  struct hl_op *op = op_at(slot);
  return op->id == id ? op : NULL;
}

struct hl_op *hl_op_get(uint64_t id) {
  pthread_mutex_lock(&hl.op_lock);
  struct hl_op *op = op_find(id);
  pthread_mutex_unlock(&hl.op_lock);
  return op;
}

static void op_release(struct hl_op *op) {
  pthread_mutex_lock(&hl.op_lock);
  uint32_t slot = (uint32_t)(op->id & SLOT_MASK);
  op->id = 0;
  op->next_free = hl.free_head;
  hl.free_head = slot;
  pthread_mutex_unlock(&hl.op_lock);
}

/* ---- talking to the daemon ------------------------------------------------ */

static void wake_daemon(void) {
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(&hl.hdr->daemon_sleeping, memory_order_relaxed) &&
      atomic_exchange(&hl.hdr->daemon_sleeping, 0)) {
    uint64_t one = 1;
    ssize_t n = write(hl.efd, &one, sizeof one);
    (void)n;
  }
}

static int daemon_gone(void);

/* Pushes an entry; waits while the ring is full (horad drains it whole
 * each time it looks). */
static int sq_push(const struct hp_sqe *e) {
  pthread_mutex_lock(&hl.sq_lock);
  void *slot;
  unsigned spins = 0;
  while (!(slot = hp_ring_reserve(&hl.sq))) {
    wake_daemon();
    if (atomic_load(&hl.hdr->closed)) {
      pthread_mutex_unlock(&hl.sq_lock);
      return hl_error(HORA_ESHUTDOWN, "rank %d: the job is being stopped",
                      hl.rank);
    }
    if ((spins & 4095) == 4095 && daemon_gone()) {
      pthread_mutex_unlock(&hl.sq_lock);
      return hl_error(HORA_EPEERGONE, "rank %d on host %s: horad has gone away",
                      hl.rank, hl.hostname);
    }
    if (++spins > 16) sched_yield();
    else hc_cpu_relax();
  }
  /* the header and the name: horad reads no more */
  size_t n = offsetof(struct hp_sqe, name) + e->name_len + 1;
  memcpy(slot, e, n < sizeof *e ? n : sizeof *e);
  hp_ring_commit(&hl.sq);
  pthread_mutex_unlock(&hl.sq_lock);
  wake_daemon();
  return 0;
}

static void wake_waiters(void) {
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(&hl.hdr->rank_sleepers, memory_order_relaxed)) {
    atomic_fetch_add(&hl.hdr->wake_seq, 1);
    hl_futex_wake_all(&hl.hdr->wake_seq);
  }
}

/* Copies of an operation's data into and out of the shared segment: a
 * device buffer's through the CUDA driver (cuda.c): in, at submission, on
 * the caller's stream (own: a chunk, later, on libhora's stream); out, on
 * libhora's stream; a host buffer's with memmove. */
static int copy_in(struct hl_op *op, void *dst, const void *src, uint64_t n,
                   int own) {
  if (op->send_ctx)
    return hl_cuda_copy(dst, src, n, op->send_ctx, op->stream, own);
  if (n) memmove(dst, src, n);
  return 0;
}

/* A failed copy back fails the operation, whatever horad reported. */
static void copy_out(struct hl_op *op, void *dst, const void *src, uint64_t n) {
  if (!op->recv_ctx) {
    if (n) memmove(dst, src, n);
    return;
  }
  if (!op->copy_err && hl_cuda_copy(dst, src, n, op->recv_ctx, NULL, 1) < 0) {
    op->copy_err = HORA_EDEVICE;
    hc_fmt(op->msg, sizeof op->msg, "%s", hora_last_error());
  }
}

static void chunk_copy(const struct hp_cqe *c, struct hl_op *op) {
  uint64_t es = hora_dtype_size(op->dtype);
  const struct hp_shm_hdr *h = hl.hdr;
  uint64_t bytes = c->elem_count * es;
  int ok = c->elem_off <= op->count && c->elem_count <= op->count - c->elem_off &&
           c->staging_off >= h->staging_off && bytes <= h->chunk_size &&
           c->staging_off + bytes <= h->staging_off + h->staging_size;
  if (!ok) {
    hc_warn_rl("rank %d: copy request out of range; ignored", hl.rank);
    return;
  }
  unsigned char *stage = hl.shm + c->staging_off;
  struct hp_sqe e;
  memset(&e, 0, offsetof(struct hp_sqe, name));
  e.id = c->id;
  e.chunk = c->chunk;
  if (c->kind == HP_CQ_COPY_IN) {
    /* a chunk that could not be copied still goes back (horad waits for
     * it); the operation fails when it completes */
    if (copy_in(op, stage, (const char *)op->send + c->elem_off * es, bytes, 1) < 0 &&
        !op->copy_err) {
      op->copy_err = HORA_EDEVICE;
      hc_fmt(op->msg, sizeof op->msg, "%s", hora_last_error());
    }
    e.kind = HP_SQ_CHUNK_READY;
  } else {
    copy_out(op, (char *)op->recv + c->elem_off * es, stage, bytes);
    e.kind = HP_SQ_CHUNK_DONE;
  }
  e.name[0] = '\0';
  sq_push(&e);
}

static void finish_op(const struct hp_cqe *c, struct hl_op *op) {
  op->status = c->status;
  if (!op->copy_err) {
    uint32_t n = c->msg_len <= HP_MSG_MAX ? c->msg_len : HP_MSG_MAX;
    memcpy(op->msg, c->msg, n);
    op->msg[n] = '\0';
  }
  if (op->temp) {
    if (op->status >= 0 && op->copy_back)
      copy_out(op, op->recv, op->temp, op->count * hora_dtype_size(op->dtype));
    hl_arena_free(op->temp);
    op->temp = NULL;
  }
  if (op->out_temp) {
    if (op->status >= 0) copy_out(op, op->recv, op->out_temp, op->out_bytes);
    hl_arena_free(op->out_temp);
    op->out_temp = NULL;
  }
  if (op->copy_err && op->status >= 0) op->status = op->copy_err;
  if (op->aux_temp) hl_arena_free(op->aux_temp);
  op->aux_temp = NULL;
  if (op->status >= 0 && op->fkey) hl_fast_learn(op->fkey, c->chunk);
  atomic_store_explicit(&op->done, 1, memory_order_release);
}

/* Handles every completion waiting in the queue. Caller holds cq_lock. */
void hl_drain_locked(void) {
  const void *slot;
  int finished = 0;
  while ((slot = hp_ring_peek(&hl.cq))) {
    struct hp_cqe c;
    memcpy(&c, slot, offsetof(struct hp_cqe, msg));
    uint32_t n = c.msg_len <= HP_MSG_MAX ? c.msg_len : HP_MSG_MAX;
    memcpy(c.msg, ((const struct hp_cqe *)slot)->msg, n);
    c.msg[n] = '\0';
    c.msg_len = n;
    hp_ring_release(&hl.cq);
    pthread_mutex_lock(&hl.op_lock);
    struct hl_op *op = op_find(c.id);
    pthread_mutex_unlock(&hl.op_lock);
    if (!op || atomic_load(&op->done)) continue;
    if (c.kind == HP_CQ_DONE) {
      finish_op(&c, op);
      finished = 1;
    } else if (c.kind == HP_CQ_COPY_IN || c.kind == HP_CQ_COPY_OUT) {
      chunk_copy(&c, op);
    }
  }
  if (finished) wake_waiters();
  /* horad holds completions that did not fit; it may be asleep. */
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(&hl.hdr->cq_backlog, memory_order_relaxed))
    wake_daemon();
}

static int cq_pending(void) {
  return atomic_load_explicit(&hl.hdr->cq.tail, memory_order_acquire) !=
         atomic_load_explicit(&hl.hdr->cq.head, memory_order_relaxed);
}

void *hl_progress_main(void *arg) {
  (void)arg;
  while (!atomic_load(&hl.stop)) {
    pthread_mutex_lock(&hl.cq_lock);
    hl_drain_locked();
    pthread_mutex_unlock(&hl.cq_lock);
    uint32_t seq = atomic_load(&hl.hdr->prog_seq);
    atomic_store(&hl.hdr->prog_sleeping, 1);
    atomic_thread_fence(memory_order_seq_cst);
    /* with the fast path, often enough to withdraw in time what nobody
     * waits for (hl_fast_sweep) */
    int ms = 1000;
    if (hl_fast_on()) /* (what is added while it sleeps waits <= 10 ms) */
      ms = hl_fast_pending() ? (int)HC_MAX(1, hl_fast_wait_ns() / 1000000) : 10;
    if (!cq_pending() && !atomic_load(&hl.stop))
      hl_futex_wait(&hl.hdr->prog_seq, seq, ms);
    atomic_store(&hl.hdr->prog_sleeping, 0);
    if (hl_fast_on()) hl_fast_sweep();
  }
  return NULL;
}

/* Marks every unfinished operation failed (shutdown, daemon gone). */
void hl_fail_pending(int status, const char *msg) {
  pthread_mutex_lock(&hl.cq_lock); /* no completion is being applied now */
  pthread_mutex_lock(&hl.op_lock);
  for (uint32_t i = 1; i < hl.nops; i++) {
    struct hl_op *op = op_at(i);
    if (!op->id || atomic_load(&op->done)) continue;
    /* on the fast path: a thread taking its outcome now (BUSY) completes
     * it, or gives it to horad, which fails it; otherwise failed here,
     * and whoever looks at it later finds it done */
    if (atomic_load(&op->fstate) == HL_FS_BUSY) continue;
    op->status = status;
    hc_fmt(op->msg, sizeof op->msg, "%s", msg);
    if (op->temp) hl_arena_free(op->temp);
    if (op->out_temp) hl_arena_free(op->out_temp);
    if (op->aux_temp) hl_arena_free(op->aux_temp);
    op->temp = op->out_temp = op->aux_temp = NULL;
    atomic_store(&op->done, 1);
  }
  pthread_mutex_unlock(&hl.op_lock);
  pthread_mutex_unlock(&hl.cq_lock);
}

/* 1 when horad's end of the socket is gone. */
static int daemon_gone(void) {
  struct pollfd p = {.fd = hl.sock, .events = POLLIN};
  if (poll(&p, 1, 0) <= 0) return 0;
  if (p.revents & (POLLHUP | POLLERR)) return 1;
  char c;
  return recv(hl.sock, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* ---- what horad's deadlock detection sees --------------------------------
 * Each thread that submits or waits counts itself once per session among
 * the rank's threads (wait_threads, until it exits), unless it is a helper
 * (hora_thread_helper()); a wait longer than a moment counts in waiting,
 * with its operation in a slot of wait_ids. The rank is blocked when every
 * such thread waits. Atomics in shared memory, no system call; a wait that
 * ends within the spin marks nothing. */
#define MARK_NS 1000000u /* a wait this long is marked even while spinning */

static pthread_key_t waiter_key;
static int waiter_key_ok;
static pthread_once_t waiter_once = PTHREAD_ONCE_INIT;
static _Thread_local uint32_t waiter_session; /* registered in (0: none) */
static _Thread_local int waiter_helper; /* hora_thread_helper() */

static void waiter_exit(void *v) {
  /* the thread ends: it waits no more (only in the session it counted in) */
  uint32_t s = (uint32_t)(uintptr_t)v;
  if (s && s == hl.session && atomic_load(&hl.initialized) && hl.hdr)
    atomic_fetch_sub(&hl.hdr->wait_threads, 1);
}

static void waiter_key_make(void) {
  waiter_key_ok = pthread_key_create(&waiter_key, waiter_exit) == 0;
}

/* Counts this thread among the rank's (once per session). */
static inline void thread_register(void) {
  if (waiter_session == hl.session || waiter_helper) return;
  pthread_once(&waiter_once, waiter_key_make);
  waiter_session = hl.session;
  atomic_fetch_add(&hl.hdr->wait_threads, 1);
  if (waiter_key_ok)
    pthread_setspecific(waiter_key, (void *)(uintptr_t)hl.session);
}

int hora_thread_helper(void) {
  hl_clear_error();
  if (!waiter_helper && waiter_session && waiter_session == hl.session &&
      atomic_load(&hl.initialized) && hl.hdr)
    atomic_fetch_sub(&hl.hdr->wait_threads, 1);
  waiter_helper = 1;
  waiter_session = 0;
  if (waiter_key_ok) pthread_setspecific(waiter_key, NULL);
  return 0;
}

/* Marks this thread as waiting on id; returns its slot (-1: none free). */
static int wait_mark(uint64_t id) {
  struct hp_shm_hdr *h = hl.hdr;
  thread_register();
  int slot = -1;
  for (unsigned i = 0; i < HP_WAIT_SLOTS && slot < 0; i++) {
    uint64_t free_id = 0;
    if (atomic_compare_exchange_strong(&h->wait_ids[i], &free_id, id))
      slot = (int)i;
  }
  atomic_fetch_add(&h->waiting, 1);
  atomic_fetch_add(&h->wait_gen, 1);
  return slot;
}

static void wait_unmark(int slot) {
  struct hp_shm_hdr *h = hl.hdr;
  if (slot >= 0) atomic_store(&h->wait_ids[slot], 0);
  atomic_fetch_sub(&h->waiting, 1);
  atomic_fetch_add(&h->wait_gen, 1);
}

/* Waits until op is done (or, with id, until it is released: another
 * thread took its result). */
static void wait_done_id(struct hl_op *op, uint64_t id);
static void wait_done(struct hl_op *op) { wait_done_id(op, 0); }

static void wait_done_id(struct hl_op *op, uint64_t id) {
  int fs = atomic_load(&op->fstate);
  if (fs == HL_FS_WAIT || fs == HL_FS_BUSY) {
    hl_fast_wait(op, id);
    if (atomic_load_explicit(&op->done, memory_order_acquire) ||
        (id && __atomic_load_n(&op->id, __ATOMIC_ACQUIRE) != id))
      return;
  }
  uint64_t t0 = 0;
  unsigned spins = 0;
  int marked = 0, slot = -1;
  uint64_t mark_ns = HC_MIN(hl.spin_ns, (uint64_t)MARK_NS);
  while (!atomic_load_explicit(&op->done, memory_order_acquire) &&
         (!id || __atomic_load_n(&op->id, __ATOMIC_ACQUIRE) == id)) {
    if (pthread_mutex_trylock(&hl.cq_lock) == 0) {
      hl_drain_locked();
      pthread_mutex_unlock(&hl.cq_lock);
      if (atomic_load_explicit(&op->done, memory_order_acquire)) break;
    }
    if (!t0) t0 = hc_now_ns();
    if (++spins < 32) {
      hc_cpu_relax();
      continue;
    }
    uint64_t waited = hc_now_ns() - t0;
    if (!marked && waited >= mark_ns) {
      slot = wait_mark(op->id);
      marked = 1;
    }
    if (waited < hl.spin_ns) {
      sched_yield();
      continue;
    }
    atomic_fetch_add(&hl.hdr->rank_sleepers, 1);
    uint32_t seq = atomic_load(&hl.hdr->wake_seq);
    atomic_thread_fence(memory_order_seq_cst);
    if (!cq_pending() && !atomic_load(&op->done))
      hl_futex_wait(&hl.hdr->wake_seq, seq, SLEEP_CHECK_MS);
    atomic_fetch_sub(&hl.hdr->rank_sleepers, 1);
    if (!cq_pending() && !atomic_load(&op->done) && daemon_gone()) {
      char msg[200];
      hc_fmt(msg, sizeof msg, "rank %d on host %s: horad has gone away",
             hl.rank, hl.hostname);
      hl_fail_pending(HORA_EPEERGONE, msg);
    }
  }
  if (marked) wait_unmark(slot);
}

/* ---- the public calls --------------------------------------------------- */

static int take_result(struct hl_op *op) {
  int rc = op->status;
  if (rc < 0) hl_error(rc, "%s", op->msg[0] ? op->msg : hora_strerror(rc));
  op_release(op);
  return rc;
}

static const char *coll_word(int coll) {
  switch (coll) {
#define HL_COLL_WORD(n, id, name, traits) case id: return name;
    HORA_COLL_MAP(HL_COLL_WORD)
#undef HL_COLL_WORD
  default: return "collective";
  }
}

/* Fills e->name from the user's name, or names the operation by call
 * order; long names keep a prefix and get a hash so they stay unique. */
static struct hl_pset *pset_locked(int id);

/* An unnamed operation is named by its order among the unnamed ones of
 * its collective and process set ("allreduce.noname.N", and
 * "allreduce.ps<id>.noname.N" in a set other than the global one), so
 * that the members of a set agree whatever the ranks do elsewhere. */
static void set_name(struct hp_sqe *e, const char *name, int coll) {
  char buf[64];
  if (!name && e->comm) {
    uint64_t n = 0;
    pthread_mutex_lock(&hl.ps_lock);
    struct hl_pset *p = pset_locked((int)e->comm);
    if (p) n = p->noname[coll]++;
    pthread_mutex_unlock(&hl.ps_lock);
    snprintf(buf, sizeof buf, "%s.ps%u.noname.%llu", coll_word(coll), e->comm,
             (unsigned long long)n);
    name = buf;
  } else if (!name) {
    uint64_t n = atomic_fetch_add(&hl.noname[coll], 1);
    snprintf(buf, sizeof buf, "%s.noname.%llu", coll_word(coll),
             (unsigned long long)n);
    name = buf;
  }
  size_t len = strlen(name);
  if (len <= HP_NAME_MAX) {
    memcpy(e->name, name, len + 1);
  } else {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++)
      h = (h ^ (unsigned char)name[i]) * 1099511628211ull;
    snprintf(e->name, sizeof e->name, "%.150s#%016llx", name,
             (unsigned long long)h);
    len = strlen(e->name);
  }
  e->name_len = (uint16_t)len;
}

/* ---- process sets, as this rank knows them ------------------------------ */

static struct hl_pset *pset_locked(int id) {
  if (id == 0) {
    static struct hl_pset global;
    global.exists = 1;
    global.size = hl.size;
    global.rank = hl.rank;
    global.ranks = NULL;
    return &global;
  }
  return id > 0 && id < hl.npsets && hl.psets[id].exists ? &hl.psets[id]
                                                          : NULL;
}

uint32_t hl_pset_members(int id) {
  uint32_t m = 0;
  pthread_mutex_lock(&hl.ps_lock);
  struct hl_pset *p = pset_locked(id);
  for (int i = 0; p && p->ranks && i < p->size; i++) {
    if (p->ranks[i] < 0 || p->ranks[i] >= 16) {
      m = 0;
      break;
    }
    m |= 1u << p->ranks[i];
  }
  pthread_mutex_unlock(&hl.ps_lock);
  return m;
}

/* Copies the set's size and this rank's index in it; HORA_ENOSET. */
static int pset_info(const char *fn, int id, int *size, int *rank) {
  if (id == 0) { /* the global set: no lock on the common path */
    *size = hl.size;
    *rank = hl.rank;
    return 0;
  }
  pthread_mutex_lock(&hl.ps_lock);
  struct hl_pset *p = pset_locked(id);
  if (p) {
    *size = p->size;
    *rank = p->rank;
  }
  pthread_mutex_unlock(&hl.ps_lock);
  if (!p)
    return hl_error(HORA_ENOSET, "%s: process set %d does not exist (rank "
                    "%d)", fn, id, hl.rank);
  return 0;
}

void hl_psets_fini(void) {
  pthread_mutex_lock(&hl.ps_lock);
  for (int i = 0; i < hl.npsets; i++) free(hl.psets[i].ranks);
  free(hl.psets);
  hl.psets = NULL;
  hl.npsets = 0;
  pthread_mutex_unlock(&hl.ps_lock);
}


/* ---- submitting ------------------------------------------------------------ */

/* An arena copy of n bytes (copied from src when non-NULL), or NULL. */
static void *arena_copy(const void *src, uint64_t n) {
  void *p = hl_arena_alloc(n ? n : 1);
  if (p && src && n) memcpy(p, src, n);
  return p;
}

static int fits_arena(uint64_t bytes) { return bytes <= hl.arena_size / 2; }

size_t hora_reducescatter_rows(size_t rows, int set_size, int member) {
  if (set_size <= 0 || member < 0 || member >= set_size) return 0;
  size_t q = rows / (size_t)set_size, rem = rows % (size_t)set_size;
  return q + ((size_t)member < rem);
}

static int sum_splits(const char *fn, const int64_t *v, int n, uint64_t *out) {
  uint64_t s = 0;
  for (int i = 0; i < n; i++) {
    if (v[i] < 0)
      return hl_error(HORA_EINVAL, "%s: entry %d is negative (%lld) (rank %d)",
                      fn, i, (long long)v[i], hl.rank);
    s += (uint64_t)v[i];
  }
  *out = s;
  return 0;
}

/* Where horad finds op's data (an allreduce, a broadcast, a join...: the
 * output is the input's place): the arena where it lies, an arena copy,
 * or else streamed (horad asks for chunks of send, and returns them to
 * recv). */
static int place(struct hl_op *op, struct hp_sqe *e, const char *fn) {
  uint64_t es = hora_dtype_size((hora_dtype_t)op->dtype);
  uint64_t bytes = op->count * es;
  void *recv = op->recv;
  int rc;
  uint64_t off;
  if (bytes && (uintptr_t)recv % es == 0 && !op->send_ctx && !op->recv_ctx &&
      hl_reach(recv, bytes, &off)) {
    if (op->send != recv && (rc = copy_in(op, recv, op->send, bytes, 0)) < 0)
      return rc;
    e->flags = HP_F_RESIDENT | (e->flags & HP_F_AUX);
    e->offset = off;
  } else if (bytes && fits_arena(bytes) && (op->temp = hl_arena_alloc(bytes))) {
    if ((op->coll == HORA_COLL_ALLREDUCE || op->froot) &&
        (rc = copy_in(op, op->temp, op->send, bytes, 0)) < 0)
      return rc; /* the caller frees temp */
    op->copy_back = !op->froot;
    e->flags = HP_F_RESIDENT | (e->flags & HP_F_AUX);
    e->offset = (uint64_t)((unsigned char *)op->temp - hl.shm);
  } else if (bytes && op->send_ctx &&
             (op->coll == HORA_COLL_ALLREDUCE || op->froot) &&
             (rc = hl_cuda_sync(op->send_ctx, op->stream)) < 0) {
    return rc; /* streamed: its chunks are copied later, on libhora's stream */
  } else if (bytes && e->op == HORA_ADASUM && op->coll == HORA_COLL_ALLREDUCE) {
    return hl_error(HORA_ELIMIT, "%s '%s': Adasum needs the whole tensor in "
                    "the arena, and its %llu bytes do not fit in the free "
                    "part of the arena (HORA_ARENA_SIZE, --arena-size) (rank "
                    "%d)", fn, e->name, (unsigned long long)bytes, hl.rank);
  }
  return 0;
}

int hl_submit_horad(struct hl_op *op) {
  struct hp_sqe *e = &op->fe;
  e->flags &= HP_F_AUX;
  int rc = place(op, e, coll_word(op->coll));
  if (rc == 0 && op->coll == HORA_COLL_ALLREDUCE &&
      (op->qflags & HORA_REQ_WIRE16))
    e->flags |= HP_F_WIRE16;
  if (rc == 0) e->flags |= op->place;
  if (rc == 0) rc = sq_push(e);
  if (rc < 0 && op->temp) {
    hl_arena_free(op->temp);
    op->temp = NULL;
  }
  return rc;
}

/* A job of one with a device buffer: the collective is a copy on the
 * caller's stream, through host memory when it must be scaled. */
static int local_device(struct hl_op *op, const hora_request_t *q,
                        unsigned traits, uint64_t bytes, uint64_t rbytes,
                        uint64_t recv_count, double pre, double post) {
  int coll = q->coll;
  uint64_t n = 0, count = 0;
  if (traits & HORA_CF_OUT) {
    n = coll == HORA_COLL_REDUCESCATTER ? rbytes : bytes;
    count = coll == HORA_COLL_REDUCESCATTER ? recv_count : 0;
  } else if (coll == HORA_COLL_ALLREDUCE || coll == HORA_COLL_BROADCAST) {
    n = bytes;
    count = coll == HORA_COLL_ALLREDUCE ? q->count : 0;
  }
  void *ctx = op->send_ctx ? op->send_ctx : op->recv_ctx;
  int rc = 0;
  if (count && (pre != 1.0 || post != 1.0)) {
    void *h = malloc(n ? n : 1);
    if (!h) return hl_error(HORA_ENOMEM, "out of memory");
    rc = hl_cuda_copy(h, q->sendbuf, n, ctx, op->stream, 0);
    if (rc == 0) {
      hc_scale(h, count, q->dtype, pre);
      hc_scale(h, count, q->dtype, post);
      rc = hl_cuda_copy(op->recv, h, n, ctx, op->stream, 0);
    }
    free(h);
  } else if (n && op->recv != q->sendbuf) {
    rc = hl_cuda_copy(op->recv, q->sendbuf, n, ctx, op->stream, 0);
  }
  if (rc < 0) return rc;
  op->status = 0;
  atomic_store(&op->done, 1);
  return 0;
}

/* A group being submitted (hora_submit_group): its key comes from the
 * name of its first tensor (unique among the rank's pending names), and
 * each pushed entry is kept so that it can be withdrawn. */
struct group {
  uint64_t key;
  uint32_t n, idx;
  struct hp_sqe *sent;
};

static int submit_req(const hora_request_t *q, int64_t *handle,
                      struct group *g) {
  const char *fn = q->coll > 0 && q->coll <= HORA_COLL_MAX ? coll_word(q->coll)
                                                           : "hora_submit";
  if (!atomic_load(&hl.initialized))
    return hl_error(HORA_ENOTINIT, "%s: hora is not initialized; call "
                                   "hora_init() first", fn);
  if (!handle) return hl_error(HORA_EINVAL, "%s: NULL handle", fn);
  int coll = q->coll;
  if (coll <= 0 || coll > HORA_COLL_MAX)
    return hl_error(HORA_EINVAL, "hora_submit: unknown collective %d (rank %d)",
                    coll, hl.rank);
  unsigned traits = 0;
#define HL_TRAITS(n, id, name, tr) if (coll == id) traits = (tr);
  HORA_COLL_MAP(HL_TRAITS)
#undef HL_TRAITS
  int ctrl = (traits & HORA_CF_CTRL) != 0;
  if (!ctrl && (unsigned)q->dtype >= HORA_DTYPE_COUNT)
    return hl_error(HORA_EINVAL, "%s: invalid dtype %d (rank %d)", fn,
                    (int)q->dtype, hl.rank);
  if ((traits & HORA_CF_OP) && (unsigned)q->op >= HORA_OP_COUNT)
    return hl_error(HORA_EINVAL, "%s: invalid reduction op %d (rank %d)", fn,
                    (int)q->op, hl.rank);
  if (q->flags & ~HORA_REQ_WIRE16)
    return hl_error(HORA_EINVAL, "%s: unknown flags 0x%x (rank %d)", fn,
                    (unsigned)q->flags, hl.rank);
  if ((traits & HORA_CF_OP) && q->op == HORA_ADASUM &&
      (coll != HORA_COLL_ALLREDUCE ||
       (q->dtype != HORA_FLOAT16 && q->dtype != HORA_BFLOAT16 &&
        q->dtype != HORA_FLOAT32 && q->dtype != HORA_FLOAT64)))
    return hl_error(HORA_EINVAL, "%s: Adasum %s (rank %d)", fn,
                    coll != HORA_COLL_ALLREDUCE
                        ? "is a reduction of allreduce only"
                        : "combines float16, bfloat16, float32 and float64 "
                          "tensors only", hl.rank);
  if (q->count > (SIZE_MAX >> 4))
    return hl_error(HORA_EINVAL, "%s: count %zu is too large (rank %d)", fn,
                    q->count, hl.rank);
  if (q->ndims < 0 || q->ndims > HORA_MAX_DIMS || (q->ndims && !q->shape))
    return hl_error(HORA_EINVAL, "%s: bad shape (%d dimensions) (rank %d)", fn,
                    q->ndims, hl.rank);
  int psize, prank;
  /* process sets are added and removed by every rank of the job */
  int set = coll == HORA_COLL_PS_ADD || coll == HORA_COLL_PS_REMOVE
                ? 0 : q->process_set;
  int rc = pset_info(fn, set, &psize, &prank);
  if (rc < 0) return rc;
  if (prank < 0)
    return hl_error(HORA_ENOTMEMBER, "%s: rank %d is not a member of process "
                    "set %d", fn, hl.rank, set);
  if ((traits & HORA_CF_ROOT) &&
      (q->root_rank < 0 || q->root_rank >= hl.size))
    return hl_error(HORA_EINVAL, "%s: root rank %d is out of range for a job "
                    "of %d ranks (rank %d)", fn, q->root_rank, hl.size,
                    hl.rank);
  uint64_t es = ctrl ? 1 : hora_dtype_size(q->dtype);
  uint64_t count = ctrl ? 0 : q->count, recv_count = count;
  uint64_t naux = 0;
  const int64_t *aux1 = NULL, *aux2 = NULL;
  switch (coll) {
  case HORA_COLL_ALLGATHER:
    if (q->recv_counts) {
      aux1 = q->recv_counts;
      naux = (uint64_t)psize;
      if ((rc = sum_splits(fn, q->recv_counts, psize, &recv_count)) < 0) return rc;
      if ((uint64_t)q->recv_counts[prank] != count)
        return hl_error(HORA_EINVAL, "%s: rank %d sends %zu elements but its "
                        "recv_counts say %lld", fn, hl.rank, q->count,
                        (long long)q->recv_counts[prank]);
    } else {
      recv_count = count * (uint64_t)psize;
    }
    break;
  case HORA_COLL_ALLTOALL:
    if (q->splits || q->recv_splits) {
      uint64_t s = 0;
      if (!q->splits || !q->recv_splits)
        return hl_error(HORA_EINVAL, "%s: give both splits and recv_splits "
                        "(rank %d)", fn, hl.rank);
      if ((rc = sum_splits(fn, q->splits, psize, &s)) < 0) return rc;
      if (s != count)
        return hl_error(HORA_EINVAL, "%s: the splits add up to %llu elements, "
                        "but the tensor has %llu (rank %d)", fn,
                        (unsigned long long)s, (unsigned long long)count,
                        hl.rank);
      if ((rc = sum_splits(fn, q->recv_splits, psize, &recv_count)) < 0)
        return rc;
      aux1 = q->splits;
      aux2 = q->recv_splits;
      naux = 2 * (uint64_t)psize;
    } else if (count % (uint64_t)psize) {
      return hl_error(HORA_EINVAL, "%s: %zu elements do not split evenly among "
                      "%d ranks (rank %d)", fn, q->count, psize, hl.rank);
    }
    break;
  case HORA_COLL_REDUCESCATTER: {
    uint64_t rows = q->ndims ? (uint64_t)q->shape[0] : count;
    uint64_t row = rows ? count / rows : 1;
    recv_count = hora_reducescatter_rows(rows, psize, prank) * row;
    break;
  }
  case HORA_COLL_PS_ADD:
    naux = q->count;
    aux1 = q->splits;
    break;
  default:
    break;
  }
  if (q->recv_count && (traits & HORA_CF_OUT)) {
    if (q->recv_count < recv_count)
      return hl_error(HORA_EINVAL, "%s: recvbuf holds %zu elements, but %llu "
                      "arrive (rank %d)", fn, q->recv_count,
                      (unsigned long long)recv_count, hl.rank);
  }
  uint64_t bytes = count * es, rbytes = recv_count * es;
  if ((count && !q->sendbuf) || (rbytes && (traits & HORA_CF_OUT) && !q->recvbuf) ||
      (coll == HORA_COLL_ALLREDUCE && count && !q->recvbuf))
    return hl_error(HORA_EINVAL, "%s: NULL buffer with count %zu (rank %d)",
                    fn, q->count, hl.rank);
  double pre = q->prescale == 0 ? 1.0 : q->prescale;
  double post = q->postscale == 0 ? 1.0 : q->postscale;
  void *recv = coll == HORA_COLL_BROADCAST ? (void *)q->sendbuf : q->recvbuf;
  /* device buffers (cuda.c); the arena is host memory */
  void *send_ctx = NULL, *recv_ctx = NULL;
  if (bytes && !hl_in_arena(q->sendbuf, bytes) &&
      (rc = hl_cuda_locate(q->sendbuf, &send_ctx)) < 0)
    return rc;
  if (recv == q->sendbuf)
    recv_ctx = send_ctx;
  else if (rbytes && recv && !hl_in_arena(recv, rbytes) &&
           (rc = hl_cuda_locate(recv, &recv_ctx)) < 0)
    return rc;

  struct hl_op *op = op_new();
  if (!op) return hl_error(HORA_ENOMEM, "too many operations in flight");
  op->coll = (uint8_t)coll;
  op->dtype = (uint8_t)(ctrl ? HORA_UINT8 : q->dtype);
  op->count = count;
  op->send = q->sendbuf;
  op->recv = recv;
  op->send_ctx = send_ctx;
  op->recv_ctx = recv_ctx;
  /* Where the tensor lies, as horad compares it across ranks (Horovod's
   * CPU/GPU device selection): the input's place, or the output's when
   * the rank sends nothing; neither when it has no bytes at all (a GPU
   * rank's empty part matches either). */
  op->place = bytes ? (send_ctx ? HP_F_DEVICE : HP_F_HOSTMEM)
              : rbytes && recv ? (recv_ctx ? HP_F_DEVICE : HP_F_HOSTMEM)
                               : 0;
  op->stream = q->stream;
  if (hl.local_only && (send_ctx || recv_ctx)) {
    rc = local_device(op, q, traits, bytes, rbytes, recv_count, pre, post);
    if (rc < 0) {
      op_release(op);
      return rc;
    }
    *handle = (int64_t)op->id;
    return 0;
  }
  if (hl.local_only) {
    /* a job of one: the collective is a copy */
    int value = 0;
    if (traits & HORA_CF_OUT) {
      uint64_t n = coll == HORA_COLL_REDUCESCATTER ? rbytes : bytes;
      if (n && recv != q->sendbuf) memmove(recv, q->sendbuf, n);
      if (coll == HORA_COLL_REDUCESCATTER) {
        hc_scale(recv, recv_count, q->dtype, pre);
        hc_scale(recv, recv_count, q->dtype, post);
      }
    } else if (coll == HORA_COLL_ALLREDUCE || coll == HORA_COLL_BROADCAST) {
      if (bytes && recv != q->sendbuf) memmove(recv, q->sendbuf, bytes);
      if (coll == HORA_COLL_ALLREDUCE) {
        hc_scale(recv, count, q->dtype, pre);
        hc_scale(recv, count, q->dtype, post);
      }
    } else if (coll == HORA_COLL_PS_ADD) {
      value = 1; /* hora_process_set_add records it */
    } else if (coll == HORA_COLL_PS_REMOVE) {
      value = 0;
    }
    op->status = value;
    atomic_store(&op->done, 1);
    *handle = (int64_t)op->id;
    return 0;
  }
  thread_register();
  struct hp_sqe e;
  memset(&e, 0, offsetof(struct hp_sqe, name));
  e.id = op->id;
  e.kind = HP_SQ_SUBMIT;
  e.coll = (uint8_t)coll;
  e.dtype = op->dtype;
  e.op = (uint8_t)q->op;
  e.root = coll == HORA_COLL_PS_REMOVE ? q->process_set : q->root_rank;
  e.comm = coll == HORA_COLL_PS_REMOVE || coll == HORA_COLL_PS_ADD
               ? 0 : (uint32_t)q->process_set;
  e.priority = q->priority;
  e.count = count;
  e.prescale = pre;
  e.postscale = post;
  e.ndims = (uint8_t)q->ndims;
  for (int i = 0; i < q->ndims; i++) e.shape[i] = q->shape[i];
  set_name(&e, coll == HORA_COLL_JOIN ? "hora.join" : q->name, coll);
  if (g) {
    if (g->idx == 0) {
      uint64_t h = 1469598103934665603ull; /* FNV-1a */
      for (const char *c = e.name; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
      g->key = h ^ g->n;
    }
    e.group = g->key;
    e.group_n = g->n;
    e.group_idx = g->idx;
  }
  int is_root = coll == HORA_COLL_BROADCAST && q->root_rank == hl.rank;
  op->qflags = q->flags;
  struct hp_fast_meta fm;
  if (!g && !naux && q->name && !send_ctx && !recv_ctx && hl_fast_on() &&
      (op->fkey = hl_fast_candidate(&e, q->flags, bytes, &fm)) &&
      hl_fast_offer(op, &e, &fm)) {
    *handle = (int64_t)op->id;
    return 0;
  }
  rc = 0;
  if (naux) {
    if (!(op->aux_temp = arena_copy(NULL, naux * 8))) {
      rc = hl_error(HORA_ELIMIT, "%s: no room in the arena for %llu split "
                    "entries (HORA_ARENA_SIZE)", fn, (unsigned long long)naux);
      goto fail;
    }
    uint64_t n1 = aux2 ? naux / 2 : naux;
    memcpy(op->aux_temp, aux1, n1 * 8);
    if (aux2) memcpy((int64_t *)op->aux_temp + n1, aux2, n1 * 8);
    e.flags |= HP_F_AUX;
    e.aux_count = naux;
    e.aux_offset = (uint64_t)((unsigned char *)op->aux_temp - hl.shm);
  }
  if (traits & HORA_CF_OUT) {
    /* input and output lie in the arena, where horad reads and writes
     * them; prescaled inputs are horad's to scale: a copy */
    uint64_t in_off = 0, out_off = 0;
    int in_ok = bytes == 0 || ((uintptr_t)q->sendbuf % es == 0 &&
                               (pre == 1.0 || coll != HORA_COLL_REDUCESCATTER) &&
                               !send_ctx && hl_reach(q->sendbuf, bytes, &in_off));
    if (!in_ok) {
      if (!fits_arena(bytes) || !(op->temp = arena_copy(NULL, bytes))) {
        rc = hl_error(HORA_ELIMIT, "%s '%s': its %llu-byte input does not fit "
                      "in the free part of the arena (HORA_ARENA_SIZE, "
                      "--arena-size) (rank %d)", fn, e.name,
                      (unsigned long long)bytes, hl.rank);
        goto fail;
      }
      if ((rc = copy_in(op, op->temp, q->sendbuf, bytes, 0)) < 0) goto fail;
      op->copy_back = 0;
    }
    if (op->temp) in_off = (uint64_t)((unsigned char *)op->temp - hl.shm);
    e.flags |= HP_F_RESIDENT;
    e.offset = bytes ? in_off : hl.hdr->arena_off;
    /* The input may lie inside the output only where this rank's own
     * block of the result goes (allgather, reducescatter in place, as
     * MPI's MPI_IN_PLACE): horad then leaves it where it is; an
     * alltoall's input may be its output (below). Any other overlap gets
     * an output of its own. */
    uint64_t own = 0; /* elements before this rank's block of the output */
    if (coll == HORA_COLL_ALLGATHER)
      for (int i = 0; i < prank; i++)
        own += q->recv_counts ? (uint64_t)q->recv_counts[i] : count;
    if (coll == HORA_COLL_REDUCESCATTER) {
      uint64_t rows = q->ndims ? (uint64_t)q->shape[0] : count;
      uint64_t row = rows ? count / rows : 1;
      for (int i = 0; i < prank; i++)
        own += hora_reducescatter_rows(rows, psize, i) * row;
    }
    const unsigned char *ib = op->temp ? op->temp : q->sendbuf, *ob = recv;
    int overlap = bytes && rbytes && ib < ob + rbytes && ob < ib + bytes;
    int own_place = coll == HORA_COLL_ALLGATHER ? ib == ob + own * es
                                                : ob == ib + own * es;
    /* Alltoall in place: each block received goes where the block sent
     * to that member lay, which needs as much from each member as goes
     * to it (horad then trades the blocks). */
    if (coll == HORA_COLL_ALLTOALL) {
      own_place = ib == ob && bytes == rbytes;
      for (int i = 0; own_place && q->splits && i < psize; i++)
        own_place = q->splits[i] == q->recv_splits[i];
    }
    if (!(rbytes == 0 || ((uintptr_t)recv % es == 0 &&
                          (!overlap || own_place) && !recv_ctx &&
                          hl_reach(recv, rbytes, &out_off)))) {
      if (!fits_arena(rbytes) || !(op->out_temp = arena_copy(NULL, rbytes))) {
        rc = hl_error(HORA_ELIMIT, "%s '%s': its %llu-byte output does not fit "
                      "in the free part of the arena (HORA_ARENA_SIZE, "
                      "--arena-size) (rank %d)", fn, e.name,
                      (unsigned long long)rbytes, hl.rank);
        goto fail;
      }
      op->out_bytes = rbytes;
      out_off = (uint64_t)((unsigned char *)op->out_temp - hl.shm);
    }
    e.flags |= HP_F_RECV;
    e.recv_count = recv_count;
    e.recv_offset = rbytes ? out_off : hl.hdr->arena_off;
  } else {
    op->froot = is_root;
    if ((rc = place(op, &e, fn)) < 0) goto fail;
  }
  if (coll == HORA_COLL_ALLREDUCE && (q->flags & HORA_REQ_WIRE16))
    e.flags |= HP_F_WIRE16;
  e.flags |= op->place;
  rc = sq_push(&e);
  if (rc < 0) goto fail;
  if (g) g->sent[g->idx] = e;
  *handle = (int64_t)op->id;
  return 0;
fail:
  if (op->temp) hl_arena_free(op->temp);
  if (op->out_temp) hl_arena_free(op->out_temp);
  if (op->aux_temp) hl_arena_free(op->aux_temp);
  op->temp = op->out_temp = op->aux_temp = NULL;
  op_release(op);
  return rc;
}

int hora_submit(const hora_request_t *req, int64_t *handle) {
  hl_clear_error();
  if (!req) return hl_error(HORA_EINVAL, "hora_submit: NULL request");
  return submit_req(req, handle, NULL);
}

int hora_submit_group(const hora_request_t *reqs, int n, int64_t *handles) {
  hl_clear_error();
  if (!reqs || !handles || n < 0 || (uint32_t)n > HP_GROUP_MAX)
    return hl_error(HORA_EINVAL, "hora_submit_group: %s", !reqs || !handles
                    ? "NULL requests or handles" : "a group of 0 to 4096 "
                    "requests");
  if (n <= 1) return n ? submit_req(&reqs[0], &handles[0], NULL) : 0;
  for (int i = 1; i < n; i++)
    if (reqs[i].coll != reqs[0].coll ||
        reqs[i].process_set != reqs[0].process_set)
      return hl_error(HORA_EINVAL, "hora_submit_group: request %d is not of "
                      "the first's collective and process set (rank %d)", i,
                      hl.rank);
  struct group g = {.n = (uint32_t)n};
  if (!hl.local_only && !(g.sent = malloc((size_t)n * sizeof *g.sent)))
    return hl_error(HORA_ENOMEM, "hora_submit_group: out of memory");
  int rc = 0, k;
  for (k = 0; k < n; k++) {
    g.idx = (uint32_t)k;
    if ((rc = submit_req(&reqs[k], &handles[k], hl.local_only ? NULL : &g)) < 0)
      break;
  }
  if (rc < 0) {
    /* horad holds the first k for the rest: it withdraws them; their
     * handles end here, and the error is the one that stopped the group */
    char saved[HP_MSG_MAX + 128];
    snprintf(saved, sizeof saved, "%s", hora_last_error());
    for (int i = 0; i < k; i++) {
      if (!hl.local_only) {
        struct hp_sqe c = g.sent[i];
        c.kind = HP_SQ_CANCEL;
        (void)sq_push(&c);
      }
      (void)hora_wait(handles[i]);
    }
    rc = hl_error(rc, "%s", saved);
  }
  free(g.sent);
  return rc;
}

int hora_allreduce_async(const char *name, const void *sendbuf, void *recvbuf,
                         size_t count, hora_dtype_t dtype, hora_op_t op,
                         int64_t *handle) {
  hora_request_t r = {.coll = HORA_COLL_ALLREDUCE, .name = name,
                      .sendbuf = sendbuf, .recvbuf = recvbuf, .count = count,
                      .dtype = dtype, .op = op};
  return hora_submit(&r, handle);
}

int hora_broadcast_async(const char *name, void *buf, size_t count,
                         hora_dtype_t dtype, int root_rank, int64_t *handle) {
  hl_clear_error();
  if (root_rank < 0)
    return hl_error(HORA_EINVAL, "hora_broadcast: negative root rank %d",
                    root_rank);
  hora_request_t r = {.coll = HORA_COLL_BROADCAST, .name = name,
                      .sendbuf = buf, .recvbuf = buf, .count = count,
                      .dtype = dtype, .root_rank = root_rank};
  return submit_req(&r, handle, NULL);
}

int hora_wait(int64_t handle) {
  hl_clear_error();
  if (!atomic_load(&hl.initialized))
    return hl_error(HORA_ENOTINIT, "hora_wait: hora is not initialized");
  pthread_mutex_lock(&hl.op_lock);
  struct hl_op *op = op_find((uint64_t)handle);
  pthread_mutex_unlock(&hl.op_lock);
  if (!op)
    return hl_error(HORA_EBADHANDLE, "hora_wait: unknown or already "
                    "completed handle %lld", (long long)handle);
  if (!hl.local_only) wait_done(op);
  return take_result(op);
}

int hora_wait_ready(int64_t handle) {
  hl_clear_error();
  if (!atomic_load(&hl.initialized))
    return hl_error(HORA_ENOTINIT, "hora_wait_ready: hora is not "
                    "initialized");
  pthread_mutex_lock(&hl.op_lock);
  struct hl_op *op = op_find((uint64_t)handle);
  pthread_mutex_unlock(&hl.op_lock);
  if (!op)
    return hl_error(HORA_EBADHANDLE, "hora_wait_ready: unknown or already "
                    "completed handle %lld", (long long)handle);
  if (!hl.local_only) wait_done_id(op, (uint64_t)handle);
  return 0;
}

int hora_test(int64_t handle, int *done) {
  hl_clear_error();
  if (!atomic_load(&hl.initialized))
    return hl_error(HORA_ENOTINIT, "hora_test: hora is not initialized");
  if (!done) return hl_error(HORA_EINVAL, "hora_test: NULL done pointer");
  pthread_mutex_lock(&hl.op_lock);
  struct hl_op *op = op_find((uint64_t)handle);
  pthread_mutex_unlock(&hl.op_lock);
  if (!op)
    return hl_error(HORA_EBADHANDLE, "hora_test: unknown or already "
                    "completed handle %lld", (long long)handle);
  int fs = atomic_load(&op->fstate);
  if (fs == HL_FS_WAIT)
    fs = hl_fast_settle(op, hl_fast_should_leave(op, hc_now_ns()));
  if (!atomic_load(&op->done) && fs != HL_FS_WAIT && fs != HL_FS_BUSY &&
      pthread_mutex_trylock(&hl.cq_lock) == 0) {
    hl_drain_locked();
    pthread_mutex_unlock(&hl.cq_lock);
  }
  *done = atomic_load_explicit(&op->done, memory_order_acquire);
  return *done ? take_result(op) : 0;
}

int hora_allreduce(const char *name, const void *sendbuf, void *recvbuf,
                   size_t count, hora_dtype_t dtype, hora_op_t op) {
  int64_t h;
  int rc = hora_allreduce_async(name, sendbuf, recvbuf, count, dtype, op, &h);
  return rc < 0 ? rc : hora_wait(h);
}

int hora_broadcast(const char *name, void *buf, size_t count,
                   hora_dtype_t dtype, int root_rank) {
  int64_t h;
  int rc = hora_broadcast_async(name, buf, count, dtype, root_rank, &h);
  return rc < 0 ? rc : hora_wait(h);
}

/* Submits r and waits for it. */
static int run_req(const hora_request_t *r) {
  int64_t h;
  int rc = hora_submit(r, &h);
  return rc < 0 ? rc : hora_wait(h);
}

int hora_barrier(void) {
  hora_request_t r = {.coll = HORA_COLL_BARRIER};
  return run_req(&r);
}

int hora_allgather(const char *name, const void *sendbuf, size_t count,
                   void *recvbuf, hora_dtype_t dtype) {
  hora_request_t r = {.coll = HORA_COLL_ALLGATHER, .name = name,
                      .sendbuf = sendbuf, .recvbuf = recvbuf, .count = count,
                      .dtype = dtype};
  return run_req(&r);
}

int hora_allgatherv(const char *name, const void *sendbuf, size_t count,
                    void *recvbuf, const int64_t *recv_counts,
                    hora_dtype_t dtype) {
  hora_request_t r = {.coll = HORA_COLL_ALLGATHER, .name = name,
                      .sendbuf = sendbuf, .recvbuf = recvbuf, .count = count,
                      .dtype = dtype, .recv_counts = recv_counts};
  return run_req(&r);
}

int hora_alltoall(const char *name, const void *sendbuf, size_t count,
                  void *recvbuf, hora_dtype_t dtype) {
  hora_request_t r = {.coll = HORA_COLL_ALLTOALL, .name = name,
                      .sendbuf = sendbuf, .recvbuf = recvbuf, .count = count,
                      .dtype = dtype};
  return run_req(&r);
}

int hora_alltoallv(const char *name, const void *sendbuf,
                   const int64_t *splits, void *recvbuf,
                   const int64_t *recv_splits, hora_dtype_t dtype) {
  hl_clear_error();
  int size, rank;
  int rc = atomic_load(&hl.initialized) ? pset_info("alltoall", 0, &size, &rank)
                                        : HORA_ENOTINIT;
  if (rc < 0)
    return rc == HORA_ENOTINIT ? hl_error(rc, "alltoall: hora is not "
                                              "initialized") : rc;
  uint64_t count = 0;
  for (int i = 0; splits && i < size; i++) count += (uint64_t)splits[i];
  hora_request_t r = {.coll = HORA_COLL_ALLTOALL, .name = name,
                      .sendbuf = sendbuf, .recvbuf = recvbuf,
                      .count = (size_t)count, .dtype = dtype,
                      .splits = splits, .recv_splits = recv_splits};
  return run_req(&r);
}

int hora_reducescatter(const char *name, const void *sendbuf, size_t count,
                       void *recvbuf, hora_dtype_t dtype, hora_op_t op) {
  hora_request_t r = {.coll = HORA_COLL_REDUCESCATTER, .name = name,
                      .sendbuf = sendbuf, .recvbuf = recvbuf, .count = count,
                      .dtype = dtype, .op = op};
  return run_req(&r);
}

int hora_join(void) {
  hora_request_t r = {.coll = HORA_COLL_JOIN};
  /* the peers' small operations go to horad, which gives this rank's
   * neutral part, until every rank has joined */
  if (atomic_load(&hl.initialized)) hl_fast_join(1);
  int rc = run_req(&r);
  if (atomic_load(&hl.initialized)) hl_fast_join(0);
  return rc;
}

int hora_process_set_add(const int *ranks, int nranks) {
  hl_clear_error();
  if (!atomic_load(&hl.initialized))
    return hl_error(HORA_ENOTINIT, "hora_process_set_add: hora is not "
                                   "initialized");
  if (!ranks || nranks <= 0 || nranks > hl.size)
    return hl_error(HORA_EINVAL, "hora_process_set_add: a process set needs 1 "
                    "to %d ranks (rank %d)", hl.size, hl.rank);
  int64_t *v = malloc((size_t)nranks * sizeof *v);
  if (!v) return hl_error(HORA_ENOMEM, "out of memory");
  for (int i = 0; i < nranks; i++) v[i] = ranks[i];
  for (int i = 1; i < nranks; i++) /* sorted: insertion, sets are small */
    for (int k = i; k > 0 && v[k - 1] > v[k]; k--) {
      int64_t x = v[k];
      v[k] = v[k - 1];
      v[k - 1] = x;
    }
  for (int i = 0; i < nranks; i++)
    if (v[i] < 0 || v[i] >= hl.size || (i && v[i] == v[i - 1])) {
      free(v);
      return hl_error(HORA_EINVAL, "hora_process_set_add: ranks must be "
                      "distinct and in [0, %d) (rank %d)", hl.size, hl.rank);
    }
  hora_request_t r = {.coll = HORA_COLL_PS_ADD, .count = (size_t)nranks,
                      .splits = v};
  int id = run_req(&r);
  if (id >= 0 && hl.local_only) { /* a job of one numbers its own sets */
    pthread_mutex_lock(&hl.ps_lock);
    id = hl.npsets ? hl.npsets : 1;
    pthread_mutex_unlock(&hl.ps_lock);
  }
  if (id > 0) {
    pthread_mutex_lock(&hl.ps_lock);
    if (id >= hl.npsets) {
      struct hl_pset *p = realloc(hl.psets, (size_t)(id + 1) * sizeof *p);
      if (!p) {
        pthread_mutex_unlock(&hl.ps_lock);
        free(v);
        return hl_error(HORA_ENOMEM, "out of memory");
      }
      memset(p + hl.npsets, 0, (size_t)(id + 1 - hl.npsets) * sizeof *p);
      hl.psets = p;
      hl.npsets = id + 1;
    }
    struct hl_pset *s = &hl.psets[id];
    free(s->ranks);
    memset(s->noname, 0, sizeof s->noname); /* a new set under that id */
    s->ranks = malloc((size_t)nranks * sizeof *s->ranks);
    s->exists = s->ranks != NULL;
    s->size = nranks;
    s->rank = -1;
    for (int i = 0; s->ranks && i < nranks; i++) {
      s->ranks[i] = (int)v[i];
      if (v[i] == hl.rank) s->rank = i;
    }
    pthread_mutex_unlock(&hl.ps_lock);
  }
  free(v);
  return id;
}

int hora_process_set_remove(int process_set) {
  hl_clear_error();
  if (!atomic_load(&hl.initialized))
    return hl_error(HORA_ENOTINIT, "hora_process_set_remove: hora is not "
                                   "initialized");
  int size, rank;
  if (process_set == 0)
    return hl_error(HORA_ENOSET, "hora_process_set_remove: the global process "
                    "set cannot be removed");
  int rc = pset_info("hora_process_set_remove", process_set, &size, &rank);
  if (rc < 0) return rc;
  hora_request_t r = {.coll = HORA_COLL_PS_REMOVE, .process_set = process_set};
  rc = run_req(&r);
  if (rc >= 0) {
    pthread_mutex_lock(&hl.ps_lock);
    struct hl_pset *s = pset_locked(process_set);
    if (s) {
      s->exists = 0;
      free(s->ranks);
      s->ranks = NULL;
    }
    pthread_mutex_unlock(&hl.ps_lock);
  }
  return rc;
}

int hora_process_set_size(int process_set) {
  hl_clear_error();
  if (!atomic_load(&hl.initialized))
    return hl_error(HORA_ENOTINIT, "hora_process_set_size: hora is not "
                                   "initialized");
  int size, rank;
  int rc = pset_info("hora_process_set_size", process_set, &size, &rank);
  return rc < 0 ? rc : size;
}

int hora_process_set_rank(int process_set) {
  hl_clear_error();
  if (!atomic_load(&hl.initialized))
    return hl_error(HORA_ENOTINIT, "hora_process_set_rank: hora is not "
                                   "initialized");
  int size, rank;
  int rc = pset_info("hora_process_set_rank", process_set, &size, &rank);
  if (rc < 0) return rc;
  if (rank < 0)
    return hl_error(HORA_ENOTMEMBER, "rank %d is not a member of process set "
                    "%d", hl.rank, process_set);
  return rank;
}

int hora_process_set_ranks(int process_set, int *ranks, int cap) {
  hl_clear_error();
  if (!atomic_load(&hl.initialized))
    return hl_error(HORA_ENOTINIT, "hora_process_set_ranks: hora is not "
                                   "initialized");
  pthread_mutex_lock(&hl.ps_lock);
  struct hl_pset *p = pset_locked(process_set);
  int n = p ? p->size : 0;
  for (int i = 0; p && ranks && i < n && i < cap; i++)
    ranks[i] = p->ranks ? p->ranks[i] : i;
  pthread_mutex_unlock(&hl.ps_lock);
  if (!p)
    return hl_error(HORA_ENOSET, "hora_process_set_ranks: process set %d does "
                    "not exist", process_set);
  return n;
}

int hora_process_set_ids(int *ids, int cap) {
  hl_clear_error();
  if (!atomic_load(&hl.initialized))
    return hl_error(HORA_ENOTINIT, "hora_process_set_ids: hora is not "
                                   "initialized");
  pthread_mutex_lock(&hl.ps_lock);
  int n = 0;
  for (int i = 0; i < (hl.npsets ? hl.npsets : 1); i++)
    if (pset_locked(i)) {
      if (ids && n < cap) ids[n] = i;
      n++;
    }
  pthread_mutex_unlock(&hl.ps_lock);
  return n;
}

/* ---- constants for bindings ------------------------------------------- */

static char describe_buf[8192];

static void describe_add(size_t *n, const char *kind, const char *name,
                         long long v) {
  if (*n < sizeof describe_buf)
    *n += (size_t)snprintf(describe_buf + *n, sizeof describe_buf - *n,
                           "%s %s %lld\n", kind, name, v);
}

static void describe_fill(void) {
  size_t n = 0;
  for (int i = 0; i < HORA_DTYPE_COUNT; i++)
    describe_add(&n, "dtype", hora_dtype_name((hora_dtype_t)i), i);
  for (int i = 0; i < HORA_OP_COUNT; i++)
    describe_add(&n, "op", hora_op_name((hora_op_t)i), i);
#define HL_DESC_ERR(name, val, msg) describe_add(&n, "err", #name, val);
  HORA_ERRNO_MAP(HL_DESC_ERR)
#undef HL_DESC_ERR
#define HL_DESC_COLL(nm, id, name, traits)                                     \
  describe_add(&n, "coll", name, id);                                          \
  describe_add(&n, "traits", name, traits);
  HORA_COLL_MAP(HL_DESC_COLL)
#undef HL_DESC_COLL
  describe_add(&n, "cf", "OP", HORA_CF_OP);
  describe_add(&n, "cf", "ROOT", HORA_CF_ROOT);
  describe_add(&n, "cf", "VARY", HORA_CF_VARY);
  describe_add(&n, "cf", "SPLITS", HORA_CF_SPLITS);
  describe_add(&n, "cf", "OUT", HORA_CF_OUT);
  describe_add(&n, "cf", "TAIL", HORA_CF_TAIL);
  describe_add(&n, "cf", "SHAPE", HORA_CF_SHAPE);
  describe_add(&n, "cf", "CTRL", HORA_CF_CTRL);
  describe_add(&n, "req", "WIRE16", HORA_REQ_WIRE16);
  describe_add(&n, "limit", "MAX_DIMS", HORA_MAX_DIMS);
  describe_add(&n, "limit", "NAME_MAX", HP_NAME_MAX);
  describe_add(&n, "limit", "GLOBAL_PROCESS_SET", HORA_GLOBAL_PROCESS_SET);
  /* hora_request_t's layout, which a binding that declares it checks */
  describe_add(&n, "layout", "request_size", (int)sizeof(hora_request_t));
  describe_add(&n, "layout", "request_stream",
               (int)offsetof(hora_request_t, stream));
}

const char *hora_describe(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, describe_fill);
  return describe_buf;
}

/* ---- the timeline -------------------------------------------------- */

#define TIMELINE_PATH_MAX 4096u /* as horad takes (daemon/timeline.c) */

static int timeline_req(const char *fn, int start, const char *path,
                        int mark_cycles) {
  hl_clear_error();
  if (!atomic_load(&hl.initialized))
    return hl_error(HORA_ENOTINIT, "%s: hora is not initialized; call "
                                   "hora_init() first", fn);
  if (hl.local_only)
    return hl_error(HORA_ENOTSUP, "%s: this process is a job of its own "
                    "(not started by horarun): a timeline is written by "
                    "horad", fn);
  char full[TIMELINE_PATH_MAX + 1];
  size_t n = 0;
  if (start) {
    if (!path || !*path)
      return hl_error(HORA_EINVAL, "%s: the file name is empty", fn);
    if (path[0] == '/') {
      hc_fmt(full, sizeof full, "%s", path);
    } else {
      char cwd[TIMELINE_PATH_MAX];
      if (!getcwd(cwd, sizeof cwd))
        return hl_error(HORA_EINVAL, "%s: cannot make '%s' absolute: %s", fn,
                        path, strerror(errno));
      hc_fmt(full, sizeof full, "%s/%s", cwd, path);
    }
    n = strlen(full);
    if (n >= TIMELINE_PATH_MAX)
      return hl_error(HORA_EINVAL, "%s: the file name '%.60s...' is longer "
                      "than %u bytes", fn, full, TIMELINE_PATH_MAX - 1);
  }
  struct hl_op *op = op_new();
  if (!op) return hl_error(HORA_ENOMEM, "%s: out of memory", fn);
  struct hp_sqe e;
  memset(&e, 0, offsetof(struct hp_sqe, name) + 1);
  e.id = op->id;
  e.kind = HP_SQ_TIMELINE;
  e.flags = (start ? 1u : 0u) | (mark_cycles ? 2u : 0u);
  if (start) {
    op->aux_temp = arena_copy(full, n);
    if (!op->aux_temp) {
      op_release(op);
      return hl_error(HORA_ENOMEM, "%s: no room in the arena for the file "
                      "name", fn);
    }
    e.flags |= HP_F_AUX;
    e.aux_offset = (uint64_t)((unsigned char *)op->aux_temp - hl.shm);
    e.aux_count = n;
  }
  int rc = sq_push(&e);
  if (rc < 0) {
    if (op->aux_temp) hl_arena_free(op->aux_temp);
    op_release(op);
    return rc;
  }
  wait_done(op);
  return take_result(op);
}

int hora_start_timeline(const char *path, int mark_cycles) {
  return timeline_req("hora_start_timeline", 1, path, mark_cycles);
}

int hora_stop_timeline(void) {
  return timeline_req("hora_stop_timeline", 0, NULL, 0);
}
