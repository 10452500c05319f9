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

#define SLOT_BITS 24u
#define SLOT_MASK ((1u << SLOT_BITS) - 1)
#define MAX_OPS (1u << 20)
#define BLOCK_OPS 256u

static struct hl_op *op_at(uint32_t slot) {
  return &hl.op_blocks[slot / BLOCK_OPS][slot % BLOCK_OPS];
}
#define SLEEP_CHECK_MS 100

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

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
  memset(op, 0, sizeof *op);
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
    else cpu_relax();
  }
  memcpy(slot, e, sizeof *e);
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

static void chunk_copy(const struct hp_cqe *c, struct hl_op *op) {
  uint64_t es = hora_dtype_size(op->dtype);
  const struct hp_shm_hdr *h = hl.hdr;
  uint64_t bytes = c->elem_count * es;
  int ok = c->elem_off <= op->count && c->elem_count <= op->count - c->elem_off &&
           c->staging_off >= h->staging_off && bytes <= h->chunk_size &&
           c->staging_off + bytes <= h->staging_off + h->staging_size;
  if (!ok) {
    hc_warn("rank %d: copy request out of range; ignored", hl.rank);
    return;
  }
  unsigned char *stage = hl.shm + c->staging_off;
  struct hp_sqe e;
  memset(&e, 0, offsetof(struct hp_sqe, name));
  e.id = c->id;
  e.chunk = c->chunk;
  if (c->kind == HP_CQ_COPY_IN) {
    memcpy(stage, (const char *)op->send + c->elem_off * es, bytes);
    e.kind = HP_SQ_CHUNK_READY;
  } else {
    memcpy((char *)op->recv + c->elem_off * es, stage, bytes);
    e.kind = HP_SQ_CHUNK_DONE;
  }
  e.name[0] = '\0';
  sq_push(&e);
}

static void finish_op(const struct hp_cqe *c, struct hl_op *op) {
  op->status = c->status;
  uint32_t n = c->msg_len <= HP_MSG_MAX ? c->msg_len : HP_MSG_MAX;
  memcpy(op->msg, c->msg, n);
  op->msg[n] = '\0';
  if (op->temp) {
    if (op->status == 0 && op->copy_back)
      memcpy(op->recv, op->temp, op->count * hora_dtype_size(op->dtype));
    hl_arena_free(op->temp);
    op->temp = NULL;
  }
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
    if (!cq_pending() && !atomic_load(&hl.stop))
      hl_futex_wait(&hl.hdr->prog_seq, seq, 1000);
    atomic_store(&hl.hdr->prog_sleeping, 0);
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
    op->status = status;
    hc_fmt(op->msg, sizeof op->msg, "%s", msg);
    if (op->temp) hl_arena_free(op->temp);
    op->temp = NULL;
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

static void wait_done(struct hl_op *op) {
  uint64_t t0 = 0;
  unsigned spins = 0;
  while (!atomic_load_explicit(&op->done, memory_order_acquire)) {
    if (pthread_mutex_trylock(&hl.cq_lock) == 0) {
      hl_drain_locked();
      pthread_mutex_unlock(&hl.cq_lock);
      if (atomic_load_explicit(&op->done, memory_order_acquire)) break;
    }
    if (!t0) t0 = hc_now_ns();
    if (++spins < 32) {
      cpu_relax();
      continue;
    }
    if (hc_now_ns() - t0 < hl.spin_ns) {
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
}

/* ---- the public calls --------------------------------------------------- */

static int take_result(struct hl_op *op) {
  int rc = op->status;
  if (rc < 0) hl_error(rc, "%s", op->msg[0] ? op->msg : hora_strerror(rc));
  op_release(op);
  return rc;
}

static const char *coll_word(int coll) {
  return coll == HP_ALLREDUCE ? "allreduce"
         : coll == HP_BROADCAST ? "broadcast" : "barrier";
}

/* Fills e->name from the user's name, or names the operation by call
 * order; long names keep a prefix and get a hash so they stay unique. */
static void set_name(struct hp_sqe *e, const char *name, int coll) {
  char buf[64];
  if (!name) {
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

/* Checks what every collective shares; `op` is checked when has_op. */
static int check_args(const char *fn, const void *send, const void *recv,
                      size_t count, int dtype, int has_op, int op, int root) {
  if (!atomic_load(&hl.initialized))
    return hl_error(HORA_ENOTINIT, "%s: hora is not initialized; call "
                                   "hora_init() first", fn);
  if ((unsigned)dtype >= HORA_DTYPE_COUNT)
    return hl_error(HORA_EINVAL, "%s: invalid dtype %d (rank %d)", fn, dtype,
                    hl.rank);
  if (has_op && (unsigned)op >= HORA_OP_COUNT)
    return hl_error(HORA_EINVAL, "%s: invalid reduction op %d (rank %d)", fn,
                    op, hl.rank);
  if (count && (!send || !recv))
    return hl_error(HORA_EINVAL, "%s: NULL buffer with count %zu (rank %d)",
                    fn, count, hl.rank);
  if (count > (SIZE_MAX >> 4))
    return hl_error(HORA_EINVAL, "%s: count %zu is too large (rank %d)", fn,
                    count, hl.rank);
  if (root >= 0 && root >= hl.size)
    return hl_error(HORA_EINVAL, "%s: root rank %d is out of range for a job "
                    "of %d ranks (rank %d)", fn, root, hl.size, hl.rank);
  return 0;
}

static int submit(int coll, const char *name, const void *send, void *recv,
                  size_t count, hora_dtype_t dtype, hora_op_t rop, int root,
                  int64_t *handle) {
  struct hl_op *op = op_new();
  if (!op) return hl_error(HORA_ENOMEM, "too many operations in flight");
  uint64_t bytes = (uint64_t)count * hora_dtype_size(dtype);
  op->coll = (uint8_t)coll;
  op->dtype = (uint8_t)dtype;
  op->count = count;
  op->send = send;
  op->recv = recv;
  int is_root = coll == HP_BROADCAST && root == hl.rank;
  if (hl.size == 1) { /* a job of one: a local copy */
    if (bytes && send != recv) memmove(recv, send, bytes);
    atomic_store(&op->done, 1);
    *handle = (int64_t)op->id;
    return 0;
  }
  struct hp_sqe e;
  memset(&e, 0, offsetof(struct hp_sqe, name));
  e.id = op->id;
  e.kind = HP_SQ_SUBMIT;
  e.coll = (uint8_t)coll;
  e.dtype = (uint8_t)dtype;
  e.op = (uint8_t)rop;
  e.root = root;
  e.count = count;
  e.prescale = e.postscale = 1.0;
  set_name(&e, name, coll);
  if (bytes && hl_in_arena(recv, bytes) &&
      (uintptr_t)recv % hora_dtype_size(dtype) == 0) {
    if (send != recv) memmove(recv, send, bytes);
    e.flags = HP_F_RESIDENT;
    e.offset = (uint64_t)((unsigned char *)recv - hl.shm);
  } else if (bytes && bytes <= hl.arena_size / 2 &&
             (op->temp = hl_arena_alloc(bytes))) {
    if (coll == HP_ALLREDUCE || is_root) memcpy(op->temp, send, bytes);
    op->copy_back = !is_root;
    e.flags = HP_F_RESIDENT;
    e.offset = (uint64_t)((unsigned char *)op->temp - hl.shm);
  } /* else streamed: horad asks for chunks of send, and returns them to recv */
  int rc = sq_push(&e);
  if (rc < 0) {
    if (op->temp) hl_arena_free(op->temp);
    op_release(op);
    return rc;
  }
  *handle = (int64_t)op->id;
  return 0;
}

int hora_allreduce_async(const char *name, const void *sendbuf, void *recvbuf,
                         size_t count, hora_dtype_t dtype, hora_op_t op,
                         int64_t *handle) {
  hl_clear_error();
  int rc = check_args("hora_allreduce", sendbuf, recvbuf, count, dtype, 1,
                      (int)op, -1);
  if (rc < 0) return rc;
  if (!handle) return hl_error(HORA_EINVAL, "hora_allreduce_async: NULL handle");
  return submit(HP_ALLREDUCE, name, sendbuf, recvbuf, count, dtype, op, -1,
                handle);
}

int hora_broadcast_async(const char *name, void *buf, size_t count,
                         hora_dtype_t dtype, int root_rank, int64_t *handle) {
  hl_clear_error();
  if (root_rank < 0)
    return hl_error(HORA_EINVAL, "hora_broadcast: negative root rank %d",
                    root_rank);
  int rc = check_args("hora_broadcast", buf, buf, count, dtype, 0, 0,
                      root_rank);
  if (rc < 0) return rc;
  if (!handle) return hl_error(HORA_EINVAL, "hora_broadcast_async: NULL handle");
  return submit(HP_BROADCAST, name, buf, buf, count, dtype, HORA_SUM, root_rank,
                handle);
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
  if (!atomic_load(&op->done) && pthread_mutex_trylock(&hl.cq_lock) == 0) {
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

int hora_barrier(void) {
  hl_clear_error();
  if (!atomic_load(&hl.initialized))
    return hl_error(HORA_ENOTINIT, "hora_barrier: hora is not initialized; "
                                   "call hora_init() first");
  int64_t h;
  int rc = submit(HP_BARRIER, NULL, NULL, NULL, 0, HORA_UINT8, HORA_SUM, 0, &h);
  return rc < 0 ? rc : hora_wait(h);
}
