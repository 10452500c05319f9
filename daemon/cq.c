/* cq.c -- completions to the ranks: each rank's completion queue in its
 * shared memory, the backlog behind a full one, and waking the ranks'
 * threads that sleep on them. Below negotiation and the engines, which
 * complete operations through it; rings.c (polling the submissions, the
 * loop's wake-ups) sits above. */
#define HC_LOG_SUB HC_SUB_RINGS
#include <limits.h>
#include <stddef.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "daemon.h"

static void futex_wake_all(_Atomic uint32_t *w) {
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* A rank's completions that do not fit in its cq wait in its backlog. A
 * DONE answers one of the rank's own submissions, so a healthy rank that
 * is merely busy may have as many waiting as it has operations in flight:
 * it is never dropped for those, and they are bounded by max_pending (see
 * may_take()). Copy requests answer its chunk events; a
 * rank that keeps sending those without reading its cq is dropped once
 * MAX_COPY_BACKLOG copy requests wait. */
#define MAX_COPY_BACKLOG 4096u

/* What of a completion goes into the ring: its header and its message
 * (the rest of the 512 bytes the rank never reads). */
static size_t cqe_bytes(const struct hp_cqe *e) {
  size_t n = e->msg_len < HP_MSG_MAX ? e->msg_len : HP_MSG_MAX;
  return offsetof(struct hp_cqe, msg) + n + 1;
}

static struct hp_cqe *backlog_at(struct hd_rank *r, size_t i) {
  return &r->backlog[(r->backlog_head + i) & (r->capbacklog - 1)];
}

/* A completion has reached the rank (or was dropped for a gone one). */
static void delivered(struct hd_rank *r, const struct hp_cqe *e) {
  if (e->kind != HP_CQ_DONE) r->wake_prog = 1;
  else if (r->held) r->held--;
}

void hd_rings_forget(struct hd_rank *r) {
  free(r->backlog);
  r->backlog = NULL;
  r->nbacklog = r->capbacklog = r->backlog_head = r->backlog_copies = 0;
  r->held = 0;
  if (r->hdr) atomic_store(&r->hdr->cq_backlog, 0);
}

/* Marks r broken; hd_poll_rings() declares it gone. Not at once: this may
 * run deep inside negotiation, which declaring it gone would re-enter. */
void hd_rank_broken(struct hd_rank *r, const char *what) {
  if (r->broken || r->gone) return;
  struct hd_job *job = r->job;
  r->broken = 1;
  hc_fmt(r->broken_msg, sizeof r->broken_msg, "rank %d %s", r->info.rank,
         what);
  hc_error("%s; dropping it from the job [H3002]", r->broken_msg);
  hd_rings_forget(r);
  /* the loop polls the rings again (rings.c hears its eventfd) */
  uint64_t one = 1;
  if (job->efd >= 0 && write(job->efd, &one, sizeof one) < 0) {}
}

/* Moves queued completions into the ring as room appears. */
void hd_cq_flush(struct hd_rank *r) {
  size_t i = 0;
  for (; i < r->nbacklog; i++) {
    void *slot = hp_ring_reserve(&r->cq);
    if (!slot) break;
    struct hp_cqe *e = backlog_at(r, i);
    memcpy(slot, e, cqe_bytes(e));
    hp_ring_commit(&r->cq);
    if (e->kind != HP_CQ_DONE) r->backlog_copies--;
    delivered(r, e);
  }
  if (i) {
    r->backlog_head = (r->backlog_head + i) & (r->capbacklog - 1);
    r->nbacklog -= i;
    r->wake_rank = 1;
    if (r->nbacklog) r->wake_prog = 1; /* more to come: see hd_push_cqe() */
  }
  if (!r->nbacklog) atomic_store(&r->hdr->cq_backlog, 0);
}

/* Room for one more backlog entry; -1 when out of memory. */
static int backlog_grow(struct hd_rank *r) {
  if (r->nbacklog < r->capbacklog) return 0;
  size_t cap = r->capbacklog ? 2 * r->capbacklog : 64;
  struct hp_cqe *b = malloc(cap * sizeof *b);
  if (!b) return -1;
  for (size_t i = 0; i < r->nbacklog; i++) b[i] = *backlog_at(r, i);
  free(r->backlog);
  r->backlog = b;
  r->capbacklog = cap;
  r->backlog_head = 0;
  return 0;
}

void hd_push_cqe(struct hd_rank *r, const struct hp_cqe *e) {
  if (!r->hdr || !r->connected || r->gone || r->broken) {
    delivered(r, e); /* nobody reads them any more */
    return;
  }
  r->wake_rank = 1;
  void *slot = r->nbacklog ? NULL : hp_ring_reserve(&r->cq);
  if (slot) {
    memcpy(slot, e, cqe_bytes(e));
    hp_ring_commit(&r->cq);
    delivered(r, e);
    return;
  }
  if (e->kind != HP_CQ_DONE && r->backlog_copies >= MAX_COPY_BACKLOG) {
    hd_rank_broken(r, "leaves its completion queue unread");
    return;
  }
  if (backlog_grow(r) < 0) {
    hd_rank_broken(r, "cannot be served: horad is out of memory for its "
                   "completions");
    return;
  }
  *backlog_at(r, r->nbacklog++) = *e;
  if (e->kind != HP_CQ_DONE) r->backlog_copies++;
  atomic_store(&r->hdr->cq_backlog, 1);
  /* The cq is full: the rank's threads may all be busy (submitting, say),
   * so its progress thread, woken otherwise only for copy requests, makes
   * room. Without it the cq drains once a second. */
  r->wake_prog = 1;
}

void hd_complete(struct hd_rank *r, uint64_t id, int status, const char *msg) {
  hd_complete_slot(r, id, status, msg, 0);
}

void hd_complete_slot(struct hd_rank *r, uint64_t id, int status,
                      const char *msg, uint32_t slot) {
  struct hp_cqe e;
  e.id = id;
  e.kind = HP_CQ_DONE;
  e.status = status;
  e.elem_off = e.elem_count = e.staging_off = 0;
  e.chunk = slot; /* DONE: the fast path's slot (hd_fast_slot) */
  size_t n = msg ? strlen(msg) : 0;
  if (n > HP_MSG_MAX) n = HP_MSG_MAX;
  if (n) memcpy(e.msg, msg, n);
  e.msg[n] = '\0';
  e.msg_len = (uint32_t)n;
  hd_push_cqe(r, &e);
}

void hd_flush_wakeups(struct hd_job *job) {
  int any = 0;
  /* no ranks yet: a peer may say BYE before this host's links are all up */
  if (!job->ranks) return;
  for (int i = 0; i < job->nlocal; i++) any |= job->ranks[i].wake_rank;
  if (!any) return;
  atomic_thread_fence(memory_order_seq_cst);
  for (int i = 0; i < job->nlocal; i++) {
    struct hd_rank *r = &job->ranks[i];
    if (!r->hdr) continue;
    if (r->wake_rank &&
        atomic_load_explicit(&r->hdr->rank_sleepers, memory_order_relaxed)) {
      atomic_fetch_add(&r->hdr->wake_seq, 1);
      futex_wake_all(&r->hdr->wake_seq);
    }
    if (r->wake_prog &&
        atomic_load_explicit(&r->hdr->prog_sleeping, memory_order_relaxed)) {
      atomic_fetch_add(&r->hdr->prog_seq, 1);
      futex_wake_all(&r->hdr->prog_seq);
    }
    r->wake_rank = r->wake_prog = 0;
  }
}

