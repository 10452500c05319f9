/* rings.c -- horad's side of the shared-memory rings: polling the ranks'
 * submission queues and the loop's wake-up protocol (completions: cq.c).
 *
 * While there is work the loop spins on the rings from an idle handle (no
 * system call per operation); after spin_us without work it announces
 * that it sleeps in every rank's header, checks once more, and lets libuv
 * block. A rank that then submits sees the announcement and writes the
 * daemon's eventfd, which the loop polls. */
#define HC_LOG_SUB HC_SUB_RINGS
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/eventfd.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "daemon.h"
#include "timeline.h"

#define SPIN_SLICE_NS 50000u /* back to libuv at least this often */


static void set_sleeping(struct hd_job *job, uint32_t v) {
  for (int i = 0; i < job->nlocal; i++)
    if (job->ranks[i].hdr)
      atomic_store_explicit(&job->ranks[i].hdr->daemon_sleeping, v,
                            memory_order_relaxed);
  atomic_thread_fence(memory_order_seq_cst);
}

static void spin_cb(uv_idle_t *h);

void hd_kick(struct hd_job *job) {
  if (job->spinning || !job->spin.loop ||
      uv_is_closing((uv_handle_t *)&job->spin))
    return;
  job->spinning = 1;
  set_sleeping(job, 0);
  job->last_activity = hc_now_ns();
  uv_idle_start(&job->spin, spin_cb);
}

static void try_sleep(struct hd_job *job) {
  set_sleeping(job, 1);
  if (hd_poll_rings(job) > 0) { /* raced with a submission */
    set_sleeping(job, 0);
    job->last_activity = hc_now_ns();
    return;
  }
  job->spinning = 0;
  uv_idle_stop(&job->spin);
}

static void spin_cb(uv_idle_t *h) {
  struct hd_job *job = h->data;
  uint64_t start = hc_now_ns(), now = start;
  unsigned idle = 0;
  while (now - start < SPIN_SLICE_NS) {
    if (hd_poll_rings(job) > 0) {
      job->last_activity = hc_now_ns();
      idle = 0;
    } else if (++idle < 64) {
      hc_cpu_relax();
    } else if (job->multi) {
      /* the other hosts' frames wait in the sockets, which only libuv
       * polls: back to it (epoll with no timeout while this idle handle
       * runs) rather than at the end of the slice, which would add up to
       * SPIN_SLICE_NS to every hop of a small operation */
      sched_yield();
      break;
    } else {
      /* Ranks and the daemon may outnumber the cores: let them run. */
      sched_yield();
    }
    now = hc_now_ns();
    if (now - job->last_activity > job->spin_ns) break;
    if (!job->spinning) return;
  }
  if (now - job->last_activity > job->spin_ns) try_sleep(job);
}

static void on_efd(uv_poll_t *p, int status, int events) {
  struct hd_job *job = p->data;
  uint64_t v;
  ssize_t n = read(job->efd, &v, sizeof v);
  (void)n;
  (void)status;
  (void)events;
  hd_kick(job);
  hd_poll_rings(job);
}

/* The job's periodic timer: the stall inspector, and the counts of
 * rate-limited log messages. */
static void on_stall_timer(uv_timer_t *t) {
  struct hd_job *job = t->data;
  if (job->stall_warn_ns || job->stall_fail_ns) hd_check_stalls(job);
  hc_log_flush_suppressed(0);
}

int hd_rings_init(struct hd_job *job) {
  const struct hc_knobs *k = &job->knobs;
  job->spin_ns = (uint64_t)HC_MAX(0, hk_int(k, spin_us)) * 1000u;
  job->chunk_size = (uint64_t)HC_MAX(65536, hk_int(k, chunk_size));
  job->arena_size = (uint64_t)HC_MAX(65536, hk_int(k, arena_size));
  job->adopt_size = (uint64_t)HC_MAX(0, hk_int(k, adopt_size));
  job->max_pending = (uint64_t)HC_MAX(1, hk_int(k, max_pending));
  job->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (job->efd < 0) return -errno;
  uv_poll_init(job->daemon->loop, &job->efd_poll, job->efd);
  job->efd_poll.data = job;
  uv_poll_start(&job->efd_poll, UV_READABLE, on_efd);
  uv_idle_init(job->daemon->loop, &job->spin);
  job->spin.data = job;
  job->stall_warn_ns = (uint64_t)HC_MAX(0, hk_int(k, stall_check_time)) *
                     1000000000u;
  job->stall_fail_ns = (uint64_t)HC_MAX(0, hk_int(k, stall_shutdown_time)) *
                     1000000000u;
  if (hk_int(k, stall_check_disable))
    job->stall_warn_ns = job->stall_fail_ns = 0; /* --no-stall-check */
  uv_timer_init(job->daemon->loop, &job->stall_timer);
  job->stall_timer.data = job;
  uv_timer_start(&job->stall_timer, on_stall_timer, 500, 500);
  uv_timer_init(job->daemon->loop, &job->fusion_timer);
  job->fusion_timer.data = job;
  if (hd_deadlock_init(job) < 0) return -1;
  long threads = (long)hk_int(k, threads);
  if (threads <= 0) threads = sysconf(_SC_NPROCESSORS_ONLN);
  hd_pool_init((int)HC_MAX(1, HC_MIN(threads, 64)));
  for (int i = 0; job->engines && job->engines[i]; i++)
    if (job->engines[i]->init && job->engines[i]->init(job) < 0) return -1;
  return 0;
}

static void on_closed(uv_handle_t *h) { (void)h; }

void hd_rings_close(struct hd_job *job) {
  if (job->efd_poll.loop && !uv_is_closing((uv_handle_t *)&job->efd_poll)) {
    uv_close((uv_handle_t *)&job->efd_poll, on_closed);
    uv_close((uv_handle_t *)&job->spin, on_closed);
    uv_close((uv_handle_t *)&job->stall_timer, on_closed);
    uv_close((uv_handle_t *)&job->fusion_timer, on_closed);
  }
  hd_deadlock_close(job);
  hd_tl_close(job);
}

static void dispatch(struct hd_rank *r, const struct hp_sqe *e) {
  switch (e->kind) {
  case HP_SQ_SUBMIT:
    hd_submit(r, e);
    break;
  case HP_SQ_CHUNK_READY:
  case HP_SQ_CHUNK_DONE:
    hd_chunk_event(r, e);
    break;
  case HP_SQ_CANCEL:
    hd_cancel(r, e);
    break;
  case HP_SQ_TIMELINE:
    /* no operation may take the fast path from the moment the request
     * completes: off first, then as the timeline says */
    if (r->job->fast) atomic_store(&r->job->fast->off, 1);
    r->job->fast_off = 1;
    hd_tl_request(r, e);
    hd_fast_sync(r->job);
    break;
  default:
    hc_warn_rl("rank %d sent an entry of unknown kind %u; ignored",
            r->info.rank, e->kind);
  }
}

/* What a rank can make the daemon hold is bounded: each submission costs a
 * tensor entry, then a completion until that reaches the cq. Past
 * max_pending of them the daemon takes no more of the rank's entries (its
 * sq fills and the rank waits in submission) until some complete; copy
 * requests are bounded by MAX_COPY_BACKLOG, and other entries cost
 * nothing held. */
static int may_take(struct hd_rank *r) {
  struct hd_job *job = r->job;
  if (r->held < job->max_pending) {
    if (r->held <= job->max_pending / 2) r->throttled = 0;
    return 1;
  }
  if (!r->throttled) {
    r->throttled = 1;
    hc_warn_rl("rank %d has %llu operations pending in horad (the most "
               "HORA_MAX_PENDING allows); it waits to submit more until some "
               "complete [H3001]", r->info.rank, (unsigned long long)r->held);
  }
  return 0;
}

int hd_poll_rings(struct hd_job *job) {
  int n = 0;
  job->corked = 1; /* a burst of submissions: one write to the coordinator */
  for (int i = 0; i < job->nlocal; i++) {
    struct hd_rank *r = &job->ranks[i];
    if (!r->hdr || r->gone) continue;
    if (!r->broken && hp_ring_check(&r->sq) < 0)
      hd_rank_broken(r, "corrupted its submission ring");
    if (r->broken) { /* here, outside negotiation: see hd_rank_broken() */
      hd_rank_left(r, r->broken_msg);
      continue;
    }
    if (r->nbacklog) hd_cq_flush(r);
    const void *slot;
    unsigned budget = r->layout.sq_slots;
    while (budget-- && !r->broken && may_take(r) &&
           (slot = hp_ring_peek(&r->sq))) {
      /* copied first: the rank may scribble on its slot; the header and
       * as much of the name as it says it wrote (the rest of the 512
       * bytes are unused), terminated */
      struct hp_sqe e;
      const struct hp_sqe *in = slot;
      memcpy(&e, in, offsetof(struct hp_sqe, name));
      size_t nl = e.name_len < HP_NAME_MAX ? e.name_len : HP_NAME_MAX;
      memcpy(e.name, in->name, nl);
      e.name[nl] = '\0';
      hp_ring_release(&r->sq);
      if (!n++) HD_TL_HOOK(job, hd_tl_cycle_(job)); /* CYCLE_START */
      if (e.kind == HP_SQ_SUBMIT || e.kind == HP_SQ_TIMELINE)
        r->held++; /* until its DONE is in cq */
      dispatch(r, &e);
    }
  }
  job->corked = 0;
  if (n && job->fast) hd_fast_sync(job); /* a timeline may have started */
  hd_send_readies(job);
  /* an operation that ran a piece and came back to the loop (cpu.c) goes
   * on: work, as a submission is */
  int resume = job->resume;
  if (n || resume) hd_run_ready(job);
  hd_flush_wakeups(job);
  return n + resume;
}
