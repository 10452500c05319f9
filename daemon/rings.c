/* rings.c -- horad's side of the shared-memory rings: polling the ranks'
 * submission queues, pushing completions, and the wake-up protocol.
 *
 * While there is work the loop spins on the rings from an idle handle (no
 * system call per operation); after spin_us without work it announces
 * that it sleeps in every rank's header, checks once more, and lets libuv
 * block. A rank that then submits sees the announcement and writes the
 * daemon's eventfd, which the loop polls. */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "daemon.h"

#define SPIN_SLICE_NS 50000u /* back to libuv at least this often */
#define MAX_BACKLOG 65536u    /* completions held for one rank */

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static void futex_wake_all(_Atomic uint32_t *w) {
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void set_sleeping(struct hd_daemon *d, uint32_t v) {
  for (int i = 0; i < d->nlocal; i++)
    if (d->ranks[i].hdr)
      atomic_store_explicit(&d->ranks[i].hdr->daemon_sleeping, v,
                            memory_order_relaxed);
  atomic_thread_fence(memory_order_seq_cst);
}

static void spin_cb(uv_idle_t *h);

void hd_kick(struct hd_daemon *d) {
  if (d->spinning) return;
  d->spinning = 1;
  set_sleeping(d, 0);
  d->last_activity = hc_now_ns();
  uv_idle_start(&d->spin, spin_cb);
}

static void try_sleep(struct hd_daemon *d) {
  set_sleeping(d, 1);
  if (hd_poll_rings(d) > 0) { /* raced with a submission */
    set_sleeping(d, 0);
    d->last_activity = hc_now_ns();
    return;
  }
  d->spinning = 0;
  uv_idle_stop(&d->spin);
}

static void spin_cb(uv_idle_t *h) {
  struct hd_daemon *d = h->data;
  uint64_t start = hc_now_ns(), now = start;
  unsigned idle = 0;
  while (now - start < SPIN_SLICE_NS) {
    if (hd_poll_rings(d) > 0) {
      d->last_activity = hc_now_ns();
      idle = 0;
    } else if (++idle < 64) {
      cpu_relax();
    } else {
      /* Ranks and the daemon may outnumber the cores: let them run. */
      sched_yield();
    }
    now = hc_now_ns();
    if (now - d->last_activity > d->spin_ns) break;
    if (!d->spinning) return;
  }
  if (now - d->last_activity > d->spin_ns) try_sleep(d);
}

static void on_efd(uv_poll_t *p, int status, int events) {
  struct hd_daemon *d = p->data;
  uint64_t v;
  ssize_t n = read(d->efd, &v, sizeof v);
  (void)n;
  (void)status;
  (void)events;
  hd_kick(d);
  hd_poll_rings(d);
}

/* The daemon's periodic timer: the stall inspector, and the counts of
 * rate-limited log messages. */
static void on_stall_timer(uv_timer_t *t) {
  struct hd_daemon *d = t->data;
  if (d->stall_warn_ns || d->stall_fail_ns) hd_check_stalls(d);
  hc_log_flush_suppressed(0);
}

int hd_rings_init(struct hd_daemon *d) {
  d->spin_ns = (uint64_t)HC_MAX(0, hc_param_int("spin_us")) * 1000u;
  d->chunk_size = (uint64_t)HC_MAX(65536, hc_param_int("chunk_size"));
  d->arena_size = (uint64_t)HC_MAX(65536, hc_param_int("arena_size"));
  d->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (d->efd < 0) return -errno;
  uv_poll_init(d->loop, &d->efd_poll, d->efd);
  d->efd_poll.data = d;
  uv_poll_start(&d->efd_poll, UV_READABLE, on_efd);
  uv_idle_init(d->loop, &d->spin);
  d->spin.data = d;
  d->stall_warn_ns = (uint64_t)HC_MAX(0, hc_param_int("stall_check_time")) *
                     1000000000u;
  d->stall_fail_ns = (uint64_t)HC_MAX(0, hc_param_int("stall_shutdown_time")) *
                     1000000000u;
  const char *off = hc_param_str("stall_check_disable");
  if (off && strcmp(off, "0") && strcasecmp(off, "false"))
    d->stall_warn_ns = d->stall_fail_ns = 0; /* --no-stall-check */
  uv_timer_init(d->loop, &d->stall_timer);
  d->stall_timer.data = d;
  uv_timer_start(&d->stall_timer, on_stall_timer, 500, 500);
  long threads = hc_param_int("threads");
  if (threads <= 0) threads = sysconf(_SC_NPROCESSORS_ONLN);
  hd_pool_init((int)HC_MAX(1, HC_MIN(threads, 64)));
  d->engine = &hd_engine_cpu;
  return d->engine->init ? d->engine->init(d) : 0;
}

static void on_closed(uv_handle_t *h) { (void)h; }

void hd_rings_close(struct hd_daemon *d) {
  if (d->efd_poll.loop && !uv_is_closing((uv_handle_t *)&d->efd_poll)) {
    uv_close((uv_handle_t *)&d->efd_poll, on_closed);
    uv_close((uv_handle_t *)&d->spin, on_closed);
    uv_close((uv_handle_t *)&d->stall_timer, on_closed);
  }
}

/* Moves queued completions into the ring as room appears. */
static void flush_backlog(struct hd_rank *r) {
  size_t i = 0;
  for (; i < r->nbacklog; i++) {
    void *slot = hp_ring_reserve(&r->cq);
    if (!slot) break;
    memcpy(slot, &r->backlog[i], sizeof(struct hp_cqe));
    hp_ring_commit(&r->cq);
    if (r->backlog[i].kind != HP_CQ_DONE) r->wake_prog = 1;
  }
  if (i) {
    memmove(r->backlog, r->backlog + i, (r->nbacklog - i) * sizeof *r->backlog);
    r->nbacklog -= i;
    r->wake_rank = 1;
  }
  if (!r->nbacklog) atomic_store(&r->hdr->cq_backlog, 0);
}

void hd_push_cqe(struct hd_rank *r, const struct hp_cqe *e) {
  if (!r->hdr || !r->connected) return;
  r->wake_rank = 1;
  if (e->kind != HP_CQ_DONE) r->wake_prog = 1;
  void *slot = r->nbacklog ? NULL : hp_ring_reserve(&r->cq);
  if (slot) {
    memcpy(slot, e, sizeof *e);
    hp_ring_commit(&r->cq);
    return;
  }
  if (r->nbacklog >= MAX_BACKLOG) {
    hc_error("rank %d leaves its completion queue unread; dropping it from "
             "the job", r->info.rank);
    r->broken = 1;
    hd_rank_left(r, "a rank stopped reading its completions");
    return;
  }
  if (r->nbacklog == r->capbacklog) {
    size_t cap = r->capbacklog ? 2 * r->capbacklog : 64;
    struct hp_cqe *b = realloc(r->backlog, cap * sizeof *b);
    if (!b) {
      hc_error("out of memory queueing a completion for rank %d",
               r->info.rank);
      return;
    }
    r->backlog = b;
    r->capbacklog = cap;
  }
  r->backlog[r->nbacklog++] = *e;
  atomic_store(&r->hdr->cq_backlog, 1);
}

void hd_complete(struct hd_rank *r, uint64_t id, int status, const char *msg) {
  struct hp_cqe e;
  e.id = id;
  e.kind = HP_CQ_DONE;
  e.status = status;
  e.chunk = e.elem_off = e.elem_count = e.staging_off = 0;
  size_t n = msg ? strlen(msg) : 0;
  if (n > HP_MSG_MAX) n = HP_MSG_MAX;
  if (n) memcpy(e.msg, msg, n);
  e.msg[n] = '\0';
  e.msg_len = (uint32_t)n;
  hd_push_cqe(r, &e);
}

void hd_flush_wakeups(struct hd_daemon *d) {
  int any = 0;
  for (int i = 0; i < d->nlocal; i++) any |= d->ranks[i].wake_rank;
  if (!any) return;
  atomic_thread_fence(memory_order_seq_cst);
  for (int i = 0; i < d->nlocal; i++) {
    struct hd_rank *r = &d->ranks[i];
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

static void dispatch(struct hd_rank *r, const struct hp_sqe *e) {
  switch (e->kind) {
  case HP_SQ_SUBMIT:
    hd_submit(r, e);
    break;
  case HP_SQ_CHUNK_READY:
  case HP_SQ_CHUNK_DONE:
    hd_chunk_event(r, e);
    break;
  default:
    hc_warn_rl("rank %d sent an entry of unknown kind %u; ignored",
            r->info.rank, e->kind);
  }
}

int hd_poll_rings(struct hd_daemon *d) {
  int n = 0;
  for (int i = 0; i < d->nlocal; i++) {
    struct hd_rank *r = &d->ranks[i];
    if (!r->hdr || r->broken) continue;
    if (r->nbacklog) flush_backlog(r);
    if (hp_ring_check(&r->sq) < 0) {
      char msg[HP_MSG_MAX + 1];
      hc_fmt(msg, sizeof msg, "rank %d corrupted its submission ring",
             r->info.rank);
      hc_error("%s; dropping it from the job", msg);
      r->broken = 1;
      hd_rank_left(r, msg);
      continue;
    }
    const void *slot;
    unsigned budget = r->layout.sq_slots;
    while (budget-- && (slot = hp_ring_peek(&r->sq))) {
      struct hp_sqe e; /* copied first: the rank may scribble on its slot */
      memcpy(&e, slot, sizeof e);
      hp_ring_release(&r->sq);
      n++;
      dispatch(r, &e);
    }
  }
  if (n) hd_run_ready(d);
  hd_flush_wakeups(d);
  return n;
}
