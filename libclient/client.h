/* client.h -- libhora's internal state, shared by its files. */
#ifndef HORA_CLIENT_H
#define HORA_CLIENT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "common.h"
#include "shm.h"

#define HL_API __attribute__((visibility("default")))

/* A process set as this rank knows it. */
struct hl_pset {
  int exists;
  int size, rank; /* rank: this rank's index in it, -1 when not a member */
  int *ranks;
  uint64_t noname[HORA_COLL_MAX + 1]; /* unnamed operations in it (ps_lock) */
};

/* One operation from submission until its result is taken. */
struct hl_op {
  uint64_t id; /* generation << 24 | slot; 0 when the slot is free */
  uint8_t coll, dtype;
  uint64_t count;
  const void *send;
  void *recv;
  void *temp; /* arena copy of a staged tensor, or NULL */
  int copy_back;
  void *out_temp;  /* arena block the output lands in, copied to recv */
  uint64_t out_bytes;
  void *aux_temp;  /* arena block of its counts / splits / ranks */
  _Atomic int done;
  int status;
  char msg[HP_MSG_MAX + 1];
  uint32_t next_free;
  uint32_t qflags; /* the request's flags (HORA_REQ_*) */
  /* device buffers (cuda.c): their contexts (NULL: host memory), the
   * caller's stream, and a failed copy's error (its message in msg) */
  void *send_ctx, *recv_ctx, *stream;
  /* where the rank's tensor lies, as horad compares it across ranks:
   * HP_F_DEVICE, HP_F_HOSTMEM, or neither (no bytes either way) */
  uint32_t place;
  int copy_err;
  /* the fast path (fast.c): fkey, the operation's key when it is a
   * candidate (0: not one); the rest while it is on the fast path */
  uint64_t fkey;
  _Atomic int fstate; /* HL_FS_* */
  uint32_t fslot, fround, fmembers;
  _Atomic uint64_t ft0; /* when a waiter first looked at the clock (0: not yet) */
  int froot, fnolist;
  struct hp_sqe fe; /* last: op_new() clears only what comes before */
};

enum { HL_FS_NONE, HL_FS_WAIT, HL_FS_BUSY, HL_FS_DONE, HL_FS_HORAD };

struct hl_state {
  _Atomic int initialized;
  int local_only; /* no daemon: a job of one */
  int rank, size, local_rank, local_size, cross_rank, cross_size;
  char hostname[256];

  int sock, efd;
  unsigned char *shm;
  uint64_t shm_size;
  struct hp_shm_hdr *hdr;
  unsigned char *arena;
  uint64_t arena_size;
  uint64_t spin_ns;

  pthread_mutex_t sq_lock, cq_lock, op_lock, arena_lock;
  struct hp_ring_cursor sq, cq;

  struct hl_op **op_blocks; /* fixed blocks, so an hl_op never moves */
  uint32_t nops, free_head;
  uint32_t generation;

  _Atomic uint64_t noname[HORA_COLL_MAX + 1]; /* per collective, for
                                                 unnamed operations */
  pthread_mutex_t ps_lock;
  struct hl_pset *psets; /* by id; 0 is the global set */
  int npsets;

  uint32_t session; /* hora_init() calls that reached a daemon */
  _Atomic int stack_signal; /* hora_set_stack_signal() */

  pthread_t progress;
  int have_progress;
  _Atomic int stop;
};

extern struct hl_state hl;

/* Sets this thread's last error (returns err for tail calls). */
int hl_error(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void hl_clear_error(void);

/* client.c: a connected socket to the unix socket path ("@name": in the
 * abstract namespace), or -errno */
int hl_unix_connect(const char *path);

/* arena.c */
int hl_arena_init(void);
void hl_arena_fini(void);
void *hl_arena_alloc(uint64_t bytes);
int hl_arena_free(void *p); /* 0, or -1 when p is not an arena block */
size_t hl_arena_live(void); /* blocks hora_alloc gave and nobody freed */
void hl_arena_retire(const void *base, uint64_t size); /* left mapped */
int hl_in_arena(const void *p, uint64_t bytes);

/* adopt.c: ordinary memory horad reaches in place (the segment's memfd
 * is adopt.c's from init on) */
#define HL_ADOPT_MIN (64u << 10) /* smaller buffers are copied */
void hl_adopt_init(int memfd);
void hl_adopt_fini(void);
/* 1 with the segment offset of [p, p+bytes) in *off when horad can reach
 * it where it lies: in the arena, or in pages adopted into it (now, if
 * they can be); else 0 */
int hl_reach(const void *p, uint64_t bytes, uint64_t *off);

/* fast.c: the fast path for small operations (proto/fast.h) */
int hl_fast_map(int fd, uint64_t size); /* 0, or -1: no fast path */
void hl_fast_unmap(void);
int hl_fast_on(void);
/* The key of e when it is of a kind the fast path takes (0: not one),
 * with its metadata in *m for hl_fast_offer(). */
struct hp_fast_meta;
uint64_t hl_fast_candidate(const struct hp_sqe *e, uint32_t flags,
                           uint64_t bytes, struct hp_fast_meta *m);
/* Puts op (op->fkey set from m) on the fast path: 1, or 0 when it goes to
 * horad. */
int hl_fast_offer(struct hl_op *op, const struct hp_sqe *e,
                  const struct hp_fast_meta *m);
/* horad completed it: offer it next time, at horad's slot (plus 1; 0: a
 * hash of the key chooses) */
void hl_fast_learn(uint64_t key, uint64_t slot);
int hl_fast_settle(struct hl_op *op, int leave); /* its HL_FS_* after */
int hl_fast_should_leave(struct hl_op *op, uint64_t now);
/* Waits on op's round until its outcome is taken (or, with id, until
 * another thread took op's result). */
void hl_fast_wait(struct hl_op *op, uint64_t id);
void hl_fast_sweep(void);
int hl_fast_pending(void);
uint64_t hl_fast_wait_ns(void);
void hl_fast_join(int in); /* this rank enters (1) or leaves hora_join() */

/* cuda.c: device buffers, staged through the shared segment */
/* 1 and its context in *ctx when p is device memory, 0 when it is host
 * memory (always, in a process that has not loaded the CUDA driver), or a
 * HORA_E* error. */
int hl_cuda_locate(const void *p, void **ctx);
/* Copies bytes between a device buffer of context ctx and host memory
 * (or device to device), on stream or (own) on libhora's own stream of
 * ctx, and waits for the copy: 0 or HORA_EDEVICE. */
int hl_cuda_copy(void *dst, const void *src, uint64_t bytes, void *ctx,
                 void *stream, int own);
/* Waits until the work queued on stream so far is done. */
int hl_cuda_sync(void *ctx, void *stream);
void hl_cuda_release_segment(void); /* before the segment is unmapped */

/* ops.c */
/* The members of process set id (one bit per rank; 0: unknown, or a
 * rank past the fast path's 16). */
uint32_t hl_pset_members(int id);
/* Submits op (an allreduce or broadcast the fast path gave up on) to
 * horad from op->fe. */
int hl_submit_horad(struct hl_op *op);
struct hl_op *hl_op_get(uint64_t id); /* NULL when stale */
int hl_ops_init(void);
void hl_ops_fini(void);
void hl_drain_locked(void);
void *hl_progress_main(void *arg);
void hl_fail_pending(int status, const char *msg);
void hl_psets_fini(void);
void hl_futex_wake_all(_Atomic uint32_t *w);
/* Sleeps while *w == v, at most timeout_ms. */
void hl_futex_wait(_Atomic uint32_t *w, uint32_t v, int timeout_ms);

#endif
