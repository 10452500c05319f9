/* shm.h -- layout of the per-rank shared-memory segment (a memfd made by
 * horad and passed to the rank over the unix socket), and the entries of
 * its two rings.
 *
 *   [hp_shm_hdr | sq ring | cq ring | sq slots | cq slots | staging | arena]
 *
 * The submission queue (sq) carries rank -> daemon entries, the completion
 * queue (cq) daemon -> rank. The staging area belongs to the daemon: it
 * asks the rank to copy chunks of a tensor that does not lie in the arena
 * in and out of it. The arena belongs to the rank (hora_alloc and small
 * staged copies); the daemon reads and writes it only where a submission
 * says so, after checking the range. */
#ifndef HORA_PROTO_SHM_H
#define HORA_PROTO_SHM_H

#include <stdatomic.h>
#include <stdint.h>

#include "ring.h"

#define HP_SHM_MAGIC 0x4d454d5341524f48ull /* "HORASMEM" */
#define HP_SHM_VERSION 6u
#define HP_SQ_SLOTS 256u
#define HP_CQ_SLOTS 256u
#define HP_NAME_MAX 191u /* longer names are shortened with a hash suffix */
#define HP_MSG_MAX 459u
#define HP_WAIT_SLOTS 8u /* threads of a rank whose waits horad can see */

/* Wake-up words. Each waiting side announces that it sleeps, re-checks,
 * then sleeps; the other side wakes it only when the announcement is
 * there, so a busy pair never makes a system call. */
struct hp_shm_hdr {
  uint64_t magic;
  uint32_t version;
  uint32_t hdr_size;
  uint64_t total_size;
  uint64_t sq_slots_off, cq_slots_off;
  uint32_t sq_slots, cq_slots;
  uint32_t sqe_size, cqe_size;
  uint64_t staging_off, staging_size;
  uint64_t arena_off, arena_size;
  uint64_t chunk_size; /* bytes per streamed chunk; staging holds two */
  /* the rank's ordinary memory mapped into the segment (libclient's
   * adopt.c), right after the arena: horad reaches both alike */
  uint64_t adopt_off, adopt_size;

  struct hp_ring sq;
  struct hp_ring cq;
  /* daemon -> asleep in its event loop; a rank that pushes to sq and sees
   * 1 swaps it to 0 and writes the daemon's eventfd. */
  _Alignas(64) _Atomic uint32_t daemon_sleeping;
  /* rank threads asleep on wake_seq (futex) waiting for completions */
  _Alignas(64) _Atomic uint32_t rank_sleepers;
  _Atomic uint32_t wake_seq;
  /* the rank's progress thread, asleep on prog_seq; woken only for copy
   * requests, which need the rank to act */
  _Alignas(64) _Atomic uint32_t prog_sleeping;
  _Atomic uint32_t prog_seq;
  /* set by the daemon when the job is torn down or the daemon goes away */
  _Alignas(64) _Atomic uint32_t closed;
  /* the daemon holds completions that did not fit in cq: a rank that makes
   * room wakes it */
  _Atomic uint32_t cq_backlog;
  /* Deadlock detection: the rank says when it is blocked in hora, and on
   * what, with no system call. wait_threads: its live threads that have
   * ever waited in hora_wait(); waiting: how many of them wait now (past
   * a moment's spin), each on the operation in one slot of wait_ids (0:
   * free; a thread that finds none counts in waiting only); wait_gen
   * changes whenever a wait starts or ends. horad reads them. */
  _Alignas(64) _Atomic uint32_t wait_threads;
  _Atomic uint32_t waiting;
  _Atomic uint32_t wait_gen;
  /* a signal on which the rank prints its stacks (hora.torch: its
   * faulthandler), 0: none; horad sends it to the ranks of a deadlock */
  _Atomic uint32_t stack_signal;
  _Atomic uint64_t wait_ids[HP_WAIT_SLOTS];
  /* host updates horarun announced to the job (an elastic job's discovery
   * script found hosts added or removed): their count, which only grows;
   * hora_hosts_updated() reads it */
  _Alignas(64) _Atomic uint64_t hosts_updated;
};

/* Collective ids are hora.h's HORA_COLL_* (HORA_COLL_MAP). */
enum hp_sq_kind {
  HP_SQ_SUBMIT = 1,      /* a new operation */
  HP_SQ_CHUNK_READY = 2, /* copied chunk `chunk` into staging */
  HP_SQ_CHUNK_DONE = 3,  /* copied chunk `chunk` out of staging */
  HP_SQ_CANCEL = 4,      /* withdraws the submission `id` of a group whose
                            later members could not be submitted; horad
                            completes it with HORA_ECANCELED */
  HP_SQ_TIMELINE = 5,    /* starts (flags & 1; 2: mark cycles) the
                            timeline into the file named by the aux_count
                            bytes at aux_offset, or stops it; completed
                            once done (rank 0's; the others' at once) */
};

#define HP_GROUP_MAX 4096u /* submissions in one group */
#define HP_F_RESIDENT 1u /* send data lie in the arena at `offset` */
#define HP_F_RECV 2u     /* the output lies in the arena at recv_offset
                            (collectives whose output differs in size) */
#define HP_F_AUX 4u      /* aux_count int64 values lie at aux_offset:
                            allgather: recv_counts; alltoall: splits then
                            recv_splits; process_set_add: the ranks */
#define HP_F_WIRE16 8u   /* allreduce: 16-bit values between hosts
                            (HORA_REQ_WIRE16) */
#define HP_F_DEVICE 16u  /* the rank's tensor lies in GPU memory (libhora
                            stages it); compared across ranks */
#define HP_F_HOSTMEM 32u /* it lies in host memory (neither: it has no
                            bytes, and matches both) */
#define HP_MAX_DIMS 8

struct hp_sqe {
  uint64_t id; /* rank-chosen, non-zero, unique among its pending ops */
  uint8_t kind;
  uint8_t coll;
  uint8_t dtype;
  uint8_t op;
  int32_t root; /* broadcast: global root rank; process_set_remove: id */
  uint32_t flags;
  uint16_t name_len; /* bytes of name before its NUL (horad reads no more) */
  uint8_t ndims; /* 0: 1-D of count */
  uint8_t reserved0;
  uint32_t comm; /* process set id; 0 is the global set */
  int32_t priority;
  uint64_t count;  /* elements this rank sends */
  uint64_t offset; /* arena offset of the data, from the segment start */
  uint64_t recv_count, recv_offset; /* HP_F_RECV */
  uint64_t aux_count, aux_offset;   /* HP_F_AUX */
  uint64_t chunk;  /* for CHUNK_READY / CHUNK_DONE */
  double prescale, postscale;
  int64_t shape[HP_MAX_DIMS];
  /* grouped operations (hora_submit_group): group_n > 1 submissions with
   * the same group key run as one unit, in group_idx order */
  uint64_t group;
  uint32_t group_n, group_idx;
  char name[HP_NAME_MAX + 1]; /* before the spare room: an entry is
                                 written and read only as far as its name */
  unsigned char reserved[136];
};

enum hp_cq_kind {
  HP_CQ_DONE = 1,     /* the operation finished; status and msg say how */
  HP_CQ_COPY_IN = 2,  /* copy elements [elem_off, +elem_count) to staging */
  HP_CQ_COPY_OUT = 3, /* copy them back from staging */
};

struct hp_cqe {
  uint64_t id;
  uint32_t kind;
  int32_t status; /* HORA_E* for DONE */
  uint64_t chunk;
  uint64_t elem_off, elem_count;
  uint64_t staging_off; /* from the segment start */
  uint32_t msg_len;
  char msg[HP_MSG_MAX + 1];
};

_Static_assert(sizeof(struct hp_sqe) == 512, "sqe size");
_Static_assert(sizeof(struct hp_cqe) == 512, "cqe size");

/* Computes the layout for the given sizes into *h (all fields but the
 * wake-up words) and returns the total segment size. */
static inline uint64_t hp_shm_layout(struct hp_shm_hdr *h, uint64_t chunk_size,
                                     uint64_t arena_size, uint64_t adopt_size) {
  const uint64_t page = 4096;
#define HP_ALIGN_UP(x, a) (((x) + (a)-1) / (a) * (a))
  h->magic = HP_SHM_MAGIC;
  h->version = HP_SHM_VERSION;
  h->hdr_size = (uint32_t)sizeof(struct hp_shm_hdr);
  h->sq_slots = HP_SQ_SLOTS;
  h->cq_slots = HP_CQ_SLOTS;
  h->sqe_size = (uint32_t)sizeof(struct hp_sqe);
  h->cqe_size = (uint32_t)sizeof(struct hp_cqe);
  h->sq_slots_off = HP_ALIGN_UP(sizeof(struct hp_shm_hdr), page);
  h->cq_slots_off = h->sq_slots_off + (uint64_t)HP_SQ_SLOTS * h->sqe_size;
  h->chunk_size = HP_ALIGN_UP(chunk_size, page);
  h->staging_off =
      HP_ALIGN_UP(h->cq_slots_off + (uint64_t)HP_CQ_SLOTS * h->cqe_size, page);
  h->staging_size = 2 * h->chunk_size;
  h->arena_off = h->staging_off + h->staging_size;
  h->arena_size = HP_ALIGN_UP(arena_size, page);
  h->adopt_off = h->arena_off + h->arena_size;
  h->adopt_size = HP_ALIGN_UP(adopt_size, page);
  h->total_size = h->adopt_off + h->adopt_size;
#undef HP_ALIGN_UP
  return h->total_size;
}

#endif
