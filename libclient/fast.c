/* fast.c -- the fast path for small operations (proto/fast.h says how the
 * ranks meet in the job's shared segment).
 *
 * An allreduce or broadcast of the global set, of at most HP_FAST_BYTES
 * on this rank, given a name, and already completed once through horad
 * with the same name and metadata (`learnt`), is offered to the fast path
 * when the job's ranks all lie on one host. The rank that completes a
 * round does the collective for all of them with horad's own kernels
 * (common/reduce.c, common/scale.c), so results are those horad gives.
 *
 * An operation on the fast path is in one of these states (op->fstate):
 *   FS_WAIT   its lane is in a round that has not closed;
 *   FS_BUSY   a thread is taking its outcome (or withdrawing it);
 *   FS_DONE   its result is in place (op->done);
 *   FS_HORAD  its round failed: it was submitted to horad, as any other.
 * Whichever thread sees the outcome first takes it: a waiter, hora_test(),
 * or the progress thread, which also withdraws operations that waited
 * longer than fast_path_wait, so that no operation is left on the fast
 * path while a peer waits for it in horad. */
#define HC_LOG_SUB HC_SUB_CLIENT
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "fast.h"
#include "half.h"
#include "reduce.h"

_Static_assert(HORA_DTYPE_COUNT <= 16, "fast.h counts 16 dtypes");
_Static_assert(HP_FAST_RANKS <= 16, "the state word holds 16 ranks");

#define LEARNT 4096u           /* keys remembered, direct-mapped */
#define TOMB_TTL_NS 1000000000ull /* a tombstone nobody claims is cleared */

static struct {
  struct hp_fast_hdr *hdr; /* NULL: no fast path in this session */
  uint64_t size;
  unsigned char *slots, *lanes;
  uint32_t n, me, full;
  uint64_t wait_ns;
  pthread_mutex_t lock;     /* pending[] */
  uint64_t *pending;        /* ids of operations in FS_WAIT */
  size_t npending, cap;
  _Atomic uint64_t learnt[LEARNT];
  /* this rank's lane of the slot holds an operation (claimed by the
   * thread that offers one: a rank's threads may submit at once) */
  _Atomic unsigned char busy[HP_FAST_SLOTS];
  _Atomic uint64_t busy_key[HP_FAST_SLOTS]; /* the key of what holds it */
  _Atomic uint64_t taken, back; /* done on the fast path; given to horad */
} fp = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* This rank's lane of slot s is free again. */
static void lane_release(uint32_t s) {
  atomic_store(&fp.busy_key[s], 0);
  atomic_store(&fp.busy[s], 0);
}

static struct hp_fast_slot *slot_at(uint32_t s) {
  return (struct hp_fast_slot *)(fp.slots + (size_t)s * sizeof(struct hp_fast_slot));
}

static struct hp_fast_lane *lane_at(uint32_t s, uint32_t r) {
  return (struct hp_fast_lane *)(fp.lanes + ((size_t)s * fp.n + r) *
                                                sizeof(struct hp_fast_lane));
}

int hl_fast_map(int fd, uint64_t size) {
  struct stat st;
  /* a rank may keep out (its peers then wait fast_path_wait for it each
   * time, then go to horad): meant for the whole job (--no-fast-path) */
  if (hc_param_int(fast_path_disable)) return 0;
  if (size < sizeof(struct hp_fast_hdr) || fstat(fd, &st) < 0 ||
      (uint64_t)st.st_size < size)
    return -1;
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return -1;
  struct hp_fast_hdr *h = p, want;
  memset(&want, 0, sizeof want);
  uint32_t n = h->nranks;
  if (h->magic != HP_FAST_MAGIC || h->version != HP_FAST_VERSION ||
      n < 2 || n > HP_FAST_RANKS || n != (uint32_t)hl.size ||
      hl.rank < 0 || hl.rank >= (int)n ||
      hp_fast_layout(&want, n) != h->total_size || want.total_size > size ||
      h->slots_off != want.slots_off || h->lanes_off != want.lanes_off ||
      h->lane_size != want.lane_size || h->nslots != want.nslots) {
    munmap(p, size);
    return -1;
  }
  fp.hdr = h;
  fp.size = size;
  fp.slots = (unsigned char *)p + h->slots_off;
  fp.lanes = (unsigned char *)p + h->lanes_off;
  fp.n = n;
  fp.me = (uint32_t)hl.rank;
  fp.full = (1u << n) - 1;
  fp.wait_ns = (uint64_t)HC_MAX(0, hc_param_int(fast_path_wait)) * 1000u;
  atomic_store(&fp.taken, 0);
  atomic_store(&fp.back, 0);
  for (uint32_t i = 0; i < HP_FAST_SLOTS; i++) lane_release(i);
  /* horad gives slots anew each session: learnt anew */
  for (uint32_t i = 0; i < LEARNT; i++) atomic_store(&fp.learnt[i], 0);
  return 0;
}

void hl_fast_unmap(void) {
  if (fp.hdr)
    hc_debug("rank %d: %llu operations on the fast path, %llu given back to "
             "horad", hl.rank, (unsigned long long)atomic_load(&fp.taken),
             (unsigned long long)atomic_load(&fp.back));
  if (fp.hdr) munmap(fp.hdr, fp.size);
  fp.hdr = NULL;
  pthread_mutex_lock(&fp.lock);
  free(fp.pending);
  fp.pending = NULL;
  fp.npending = fp.cap = 0;
  pthread_mutex_unlock(&fp.lock);
}

int hl_fast_on(void) { return fp.hdr != NULL; }

/* ---- what must match ------------------------------------------------ */

static void meta_of(struct hp_fast_meta *m, const struct hp_sqe *e,
                    uint32_t flags, uint32_t members) {
  memset(m, 0, offsetof(struct hp_fast_meta, name));
  m->comm = e->comm;
  m->members = members;
  m->coll = e->coll;
  m->dtype = e->dtype;
  m->op = e->coll == HORA_COLL_ALLREDUCE ? e->op : 0;
  m->ndims = e->ndims;
  m->root = e->coll == HORA_COLL_BROADCAST ? e->root : 0;
  m->flags = flags;
  m->name_len = e->name_len;
  m->count = e->count;
  m->prescale = m->coll == HORA_COLL_ALLREDUCE ? e->prescale : 1.0;
  m->postscale = m->coll == HORA_COLL_ALLREDUCE ? e->postscale : 1.0;
  for (int i = 0; i < e->ndims && i < HP_MAX_DIMS; i++) m->shape[i] = e->shape[i];
  memcpy(m->name, e->name, (size_t)e->name_len + 1);
}

static size_t meta_len(const struct hp_fast_meta *m) {
  return offsetof(struct hp_fast_meta, name) + m->name_len + 1;
}

static int meta_equal(const struct hp_fast_meta *a,
                      const struct hp_fast_meta *b) {
  return a->name_len <= HP_NAME_MAX && a->name_len == b->name_len &&
         memcmp(a, b, meta_len(a)) == 0;
}

/* A hash of the metadata, eight bytes at a time (the bytes past the
 * name's NUL, up to the next eight, count as zeros). */
static uint64_t meta_key(const struct hp_fast_meta *m) {
  const unsigned char *p = (const unsigned char *)m;
  size_t n = meta_len(m);
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  for (size_t i = 0; i < n; i += 8) {
    uint64_t w = 0;
    memcpy(&w, p + i, n - i < 8 ? n - i : 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 29;
  }
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h | 1; /* never 0: 0 is "no key" */
}

/* learnt[key % LEARNT]: the key with its low bits (which its place in
 * learnt[] already says) replaced by horad's slot for it plus 1 (0: none,
 * a hash of the key chooses), so that key and slot are read at once */
#define SLOT_BITS 10u
#define SLOT_MASK ((1ull << SLOT_BITS) - 1)
_Static_assert(HP_FAST_SLOTS < SLOT_MASK && LEARNT > SLOT_MASK,
               "learnt[] packs the slot in the key's low bits");

void hl_fast_learn(uint64_t key, uint64_t slot) {
  if (!key) return;
  if (slot > HP_FAST_SLOTS) slot = 0; /* not horad's: hash it */
  atomic_store_explicit(&fp.learnt[key % LEARNT], (key & ~SLOT_MASK) | slot,
                        memory_order_relaxed);
}

/* ---- closing a round ------------------------------------------------ */

static void wake_lane(struct hp_fast_lane *l) {
  /* the outcome is stored: a sleeper that announced itself before is seen
   * here (it checks the outcome again after its announcement) */
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(&l->sleeping, memory_order_relaxed))
    syscall(SYS_futex, (uint32_t *)&l->outcome, FUTEX_WAKE, INT_MAX, NULL,
            NULL, 0);
}

/* Every member of the set is in round `round` of slot s: this rank does
 * the collective for all (or fails the round when their metadata differ)
 * and writes each member's lane's outcome. */
static void close_round(uint32_t s, uint64_t round,
                        const struct hp_fast_meta *m) {
  /* m is this rank's own copy, checked when it was offered: what the
   * lanes say is compared with it, never used */
  int ok = 1;
  uint32_t mem[HP_FAST_RANKS], k = 0;
  for (uint32_t r = 0; r < fp.n; r++)
    if (m->members >> r & 1u) mem[k++] = r;
  for (uint32_t i = 0; i < k && ok; i++)
    ok = meta_equal(m, &lane_at(s, mem[i])->meta);
  uint64_t es = hora_dtype_size((hora_dtype_t)m->dtype);
  uint64_t bytes = m->count * es;
  if (ok && m->count) {
    void *v[HP_FAST_RANKS];
    for (uint32_t i = 0; i < k; i++) v[i] = lane_at(s, mem[i])->data;
    hora_dtype_t dt = (hora_dtype_t)m->dtype;
    if (m->coll == HORA_COLL_ALLREDUCE) {
      for (uint32_t i = 0; i < k; i++)
        if (m->prescale != 1.0) hc_scale(v[i], m->count, dt, m->prescale);
      hc_reduce(v, (int)k, (const void *const *)v, (int)k, m->count, dt,
                (hora_op_t)m->op, (int)k);
      for (uint32_t i = 0; i < k; i++)
        if (m->postscale != 1.0) hc_scale(v[i], m->count, dt, m->postscale);
    } else {
      const void *from = lane_at(s, (uint32_t)m->root)->data;
      for (uint32_t i = 0; i < k; i++)
        if (mem[i] != (uint32_t)m->root) memcpy(v[i], from, bytes);
    }
  }
  if (ok) {
    uint32_t c = hp_fast_coll_index(m->coll);
    atomic_fetch_add_explicit(&fp.hdr->ops[c][m->dtype], 1,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&fp.hdr->bytes[c][m->dtype], bytes,
                              memory_order_relaxed);
  }
  for (uint32_t i = 0; i < k; i++) {
    struct hp_fast_lane *l = lane_at(s, mem[i]);
    atomic_store_explicit(&l->outcome, HP_FAST_OUTCOME(round, !ok),
                          memory_order_release);
    wake_lane(l);
  }
}

/* ---- offering an operation ------------------------------------------- */

static int pending_add(uint64_t id) {
  pthread_mutex_lock(&fp.lock);
  if (fp.npending == fp.cap) {
    size_t cap = fp.cap ? 2 * fp.cap : 64;
    uint64_t *p = realloc(fp.pending, cap * sizeof *p);
    if (!p) {
      pthread_mutex_unlock(&fp.lock);
      return -1;
    }
    fp.pending = p;
    fp.cap = cap;
  }
  fp.pending[fp.npending++] = id;
  pthread_mutex_unlock(&fp.lock);
  return 0;
}

static void pending_del(uint64_t id) {
  pthread_mutex_lock(&fp.lock);
  for (size_t i = 0; i < fp.npending; i++)
    if (fp.pending[i] == id) {
      fp.pending[i] = fp.pending[--fp.npending];
      break;
    }
  pthread_mutex_unlock(&fp.lock);
}

int hl_fast_pending(void) {
  pthread_mutex_lock(&fp.lock);
  int n = fp.npending > 0;
  pthread_mutex_unlock(&fp.lock);
  return n;
}

uint64_t hl_fast_wait_ns(void) { return fp.wait_ns; }

static int must_leave(void) {
  return atomic_load_explicit(&fp.hdr->joined, memory_order_relaxed) ||
         atomic_load_explicit(&fp.hdr->off, memory_order_relaxed) ||
         atomic_load_explicit(&hl.hdr->closed, memory_order_relaxed);
}

uint64_t hl_fast_candidate(const struct hp_sqe *e, uint32_t flags,
                           uint64_t bytes, struct hp_fast_meta *m) {
  if (!fp.hdr || bytes > HP_FAST_BYTES || !hp_fast_coll_index(e->coll) ||
      (e->coll == HORA_COLL_ALLREDUCE && e->op >= HORA_OP_ELEMENTWISE))
    return 0;
  /* a process set: its members (a broadcast's root among them) */
  uint32_t members = e->comm ? hl_pset_members(e->comm) : fp.full;
  if (!(members & (1u << fp.me)) || __builtin_popcount(members) < 2 ||
      (e->coll == HORA_COLL_BROADCAST &&
       (e->root < 0 || e->root >= (int32_t)fp.n || !(members >> e->root & 1u))))
    return 0;
  meta_of(m, e, flags, members);
  return meta_key(m);
}

static int offer_at(struct hl_op *op, const struct hp_sqe *e,
                    const struct hp_fast_meta *m, uint32_t s);

int hl_fast_offer(struct hl_op *op, const struct hp_sqe *e,
                  const struct hp_fast_meta *m) {
  uint64_t key = op->fkey;
  uint64_t l = key ? atomic_load_explicit(&fp.learnt[key % LEARNT],
                                          memory_order_relaxed) : 0;
  if (!key || (l & ~SLOT_MASK) != (key & ~SLOT_MASK) || must_leave())
    return 0;
  /* horad's slot for it, the same on every rank; or a hash of it */
  uint32_t s = l & SLOT_MASK ? (uint32_t)(l & SLOT_MASK) - 1u
                             : (uint32_t)(key >> 40) & (HP_FAST_SLOTS - 1);
  if (atomic_exchange(&fp.busy[s], 1)) {
    /* this rank's lane there is taken: by the very same operation, a
     * name still in flight, which horad would refuse too */
    if (atomic_load(&fp.busy_key[s]) != key) return 0;
    op->status = HORA_EDUPNAME;
    hc_fmt(op->msg, sizeof op->msg, "rank %d submitted tensor '%s' while an "
           "operation of the same name is still in flight on that rank; "
           "names of pending operations must be unique", hl.rank, e->name);
    atomic_store(&op->fstate, HL_FS_DONE);
    atomic_store_explicit(&op->done, 1, memory_order_release);
    return 1;
  }
  atomic_store(&fp.busy_key[s], key);
  int rc = offer_at(op, e, m, s);
  if (!rc) lane_release(s);
  return rc;
}

/* offer(), with this rank's lane of slot s claimed. */
static int offer_at(struct hl_op *op, const struct hp_sqe *e,
                    const struct hp_fast_meta *m, uint32_t s) {
  struct hp_fast_slot *sl = slot_at(s);
  struct hp_fast_lane *mine = lane_at(s, fp.me);
  uint32_t bit = 1u << fp.me;
  uint64_t bytes = op->count * hora_dtype_size((hora_dtype_t)op->dtype);
  int written = 0;
  uint64_t st = atomic_load_explicit(&sl->state, memory_order_acquire);
  for (;;) {
    uint32_t tomb = HP_FAST_TOMB(st), arrived = HP_FAST_ARRIVED(st);
    uint64_t round = HP_FAST_ROUND(st);
    if (tomb) {
      uint32_t from = HP_FAST_FROM(st);
      uint64_t now = hc_now_ns(), laid = atomic_load(&sl->tomb_ns);
      if (now > laid && now - laid > TOMB_TTL_NS) {
        /* nobody came for it: the slot is free again */
        if (atomic_compare_exchange_weak(&sl->state, &st,
                                         HP_FAST_STATE(round, 0, 0, 0)))
          st = HP_FAST_STATE(round, 0, 0, 0);
        continue;
      }
      if (!(tomb & bit) || from >= fp.n) return 0;
      /* peers withdrew this very operation: go where they went */
      if (!meta_equal(m, &lane_at(s, from)->meta)) return 0;
      uint64_t nst = HP_FAST_STATE(round, tomb & ~bit, tomb & ~bit ? from : 0, 0);
      if (atomic_compare_exchange_weak(&sl->state, &st, nst)) return 0;
      continue;
    }
    if (arrived & bit) return 0; /* cannot be: busy[] says otherwise */
    if (!written) {
      memcpy(&mine->meta, m, meta_len(m));
      if (bytes && (e->coll == HORA_COLL_ALLREDUCE ||
                    (uint32_t)e->root == fp.me))
        memcpy(mine->data, op->send, bytes);
      written = 1;
    }
    uint32_t now_in = arrived | bit;
    int closing = now_in == m->members;
    uint64_t nst = closing ? HP_FAST_STATE(round + 1, 0, 0, 0)
                           : HP_FAST_STATE(round, 0, 0, now_in);
    if (!atomic_compare_exchange_weak_explicit(&sl->state, &st, nst,
                                               memory_order_acq_rel,
                                               memory_order_acquire))
      continue;
    op->fslot = s;
    op->fround = round & 0x0fffffffu;
    op->fmembers = m->members;
    atomic_store_explicit(&op->ft0, 0, memory_order_relaxed);
    op->froot = e->coll == HORA_COLL_BROADCAST && (uint32_t)e->root == fp.me;
    memcpy(&op->fe, e, offsetof(struct hp_sqe, name) + e->name_len + 1);
    atomic_store(&op->fstate, HL_FS_WAIT);
    if (closing) {
      op->fnolist = 1;
      close_round(s, op->fround, m);
      hl_fast_settle(op, 0); /* the result is there: take it now */
    } else if (pending_add(op->id) < 0) {
      /* the progress thread could not find it: leave now */
      op->fnolist = 1;
      hl_fast_settle(op, 1);
    }
    return 1;
  }
}

/* ---- taking an outcome, or withdrawing ----------------------------- */

/* Withdraws op's round (it is in it, and the round has not closed): the
 * round fails for those in it, and a tombstone tells the others. 1 when
 * withdrawn, 0 when the round closed first. */
static int withdraw(struct hl_op *op) {
  struct hp_fast_slot *sl = slot_at(op->fslot);
  uint64_t st = atomic_load_explicit(&sl->state, memory_order_acquire);
  for (;;) {
    if ((HP_FAST_ROUND(st) & 0x0fffffffu) != op->fround) return 0;
    uint32_t arrived = HP_FAST_ARRIVED(st);
    atomic_store(&sl->tomb_ns, hc_now_ns());
    uint64_t nst = HP_FAST_STATE(HP_FAST_ROUND(st) + 1,
                                 op->fmembers & ~arrived, fp.me, 0);
    if (atomic_compare_exchange_weak_explicit(&sl->state, &st, nst,
                                              memory_order_acq_rel,
                                              memory_order_acquire)) {
      for (uint32_t r = 0; r < fp.n; r++)
        if (arrived & (1u << r)) {
          struct hp_fast_lane *l = lane_at(op->fslot, r);
          atomic_store_explicit(&l->outcome, HP_FAST_OUTCOME(op->fround, 1),
                                memory_order_release);
          wake_lane(l);
        }
      return 1;
    }
  }
}

/* Takes op's outcome if it is there (or, with leave, withdraws it first).
 * Returns op's state afterwards. */
int hl_fast_settle(struct hl_op *op, int leave) {
  int want = HL_FS_WAIT;
  if (!atomic_compare_exchange_strong(&op->fstate, &want, HL_FS_BUSY))
    return want;
  struct hp_fast_lane *mine = lane_at(op->fslot, fp.me);
  if (atomic_load_explicit(&op->done, memory_order_acquire)) {
    /* failed meanwhile (hora shut down, horad gone): nothing to take */
    if (!op->fnolist) pending_del(op->id);
    lane_release(op->fslot);
    atomic_store(&op->fstate, HL_FS_DONE);
    return HL_FS_DONE;
  }
  uint32_t done_ok = HP_FAST_OUTCOME(op->fround, 0);
  uint32_t done_bad = HP_FAST_OUTCOME(op->fround, 1);
  uint32_t out = atomic_load_explicit(&mine->outcome, memory_order_acquire);
  if (out != done_ok && out != done_bad) {
    if (!leave || !withdraw(op)) {
      if (!leave) {
        atomic_store(&op->fstate, HL_FS_WAIT);
        return HL_FS_WAIT;
      }
      /* the round closed first: its closer is writing the outcome. A
       * closer that died meanwhile: horad ends the job (closed), and the
       * round counts as failed; the 30 s are for a horad gone too (a
       * closer merely descheduled that long is not waited for) */
      uint64_t t0 = hc_now_ns();
      while ((out = atomic_load_explicit(&mine->outcome,
                                         memory_order_acquire)) != done_ok &&
             out != done_bad) {
        if (atomic_load(&hl.hdr->closed) ||
            hc_now_ns() - t0 > 30000000000ull) {
          out = done_bad;
          break;
        }
        sched_yield();
      }
    } else {
      out = done_bad;
    }
  }
  if (!op->fnolist) pending_del(op->id);
  if (out == done_ok) {
    uint64_t bytes = op->count * hora_dtype_size((hora_dtype_t)op->dtype);
    if (!op->froot && bytes) memcpy(op->recv, mine->data, bytes);
    lane_release(op->fslot);
    op->status = 0;
    op->msg[0] = '\0';
    atomic_fetch_add_explicit(&fp.taken, 1, memory_order_relaxed);
    atomic_store(&op->fstate, HL_FS_DONE);
    atomic_store_explicit(&op->done, 1, memory_order_release);
    return HL_FS_DONE;
  }
  /* the round failed (metadata differ, or someone withdrew): horad
   * decides, as if the fast path had never been tried */
  lane_release(op->fslot);
  atomic_fetch_add_explicit(&fp.back, 1, memory_order_relaxed);
  atomic_store(&op->fstate, HL_FS_HORAD);
  int rc = hl_submit_horad(op);
  if (rc < 0) {
    op->status = rc;
    hc_fmt(op->msg, sizeof op->msg, "%s", hora_last_error());
    atomic_store_explicit(&op->done, 1, memory_order_release);
  }
  return HL_FS_HORAD;
}

/* How long op has waited: from the first time a thread looked at the
 * clock for it (no clock is read on the way in, and most operations are
 * done before anyone looks). */
static uint64_t waited(struct hl_op *op, uint64_t now) {
  uint64_t t0 = atomic_load_explicit(&op->ft0, memory_order_relaxed);
  if (!t0 && atomic_compare_exchange_strong(&op->ft0, &t0, now)) return 0;
  return now > t0 ? now - t0 : 0; /* another thread's clock may be later */
}

int hl_fast_should_leave(struct hl_op *op, uint64_t now) {
  return waited(op, now) >= fp.wait_ns || must_leave();
}

/* Waits for op's round (spinning, then asleep on its lane) until its
 * outcome is taken or the wait limit says leave. */
void hl_fast_wait(struct hl_op *op, uint64_t id) {
  struct hp_fast_lane *mine = lane_at(op->fslot, fp.me);
  unsigned spins = 0;
  for (;;) {
    if (atomic_load_explicit(&op->done, memory_order_acquire)) return;
    if (id && __atomic_load_n(&op->id, __ATOMIC_ACQUIRE) != id)
      return; /* another thread took the result (hora_wait_ready) */
    /* the outcome usually comes within a few hundred nanoseconds: no
     * look at the clock before then */
    if (++spins < 256) {
      uint32_t out = atomic_load_explicit(&mine->outcome, memory_order_acquire);
      if (out != HP_FAST_OUTCOME(op->fround, 0) &&
          out != HP_FAST_OUTCOME(op->fround, 1)) {
        hc_cpu_relax();
        continue;
      }
    }
    uint32_t out = atomic_load_explicit(&mine->outcome, memory_order_acquire);
    int there = out == HP_FAST_OUTCOME(op->fround, 0) ||
                out == HP_FAST_OUTCOME(op->fround, 1);
    uint64_t now = there ? 0 : hc_now_ns();
    int st = hl_fast_settle(op, !there && hl_fast_should_leave(op, now));
    if (st == HL_FS_DONE || st == HL_FS_HORAD) return;
    if (st == HL_FS_BUSY) { /* another thread takes it */
      sched_yield();
      continue;
    }
    if (there) continue;
    uint64_t w = waited(op, now);
    if (w < hl.spin_ns) {
      sched_yield();
      continue;
    }
    uint64_t left = w < fp.wait_ns ? fp.wait_ns - w : 1000;
    uint32_t seen = atomic_load_explicit(&mine->outcome, memory_order_acquire);
    if (seen == HP_FAST_OUTCOME(op->fround, 0) ||
        seen == HP_FAST_OUTCOME(op->fround, 1))
      continue; /* it came meanwhile: no sleep */
    atomic_store(&mine->sleeping, 1);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load(&mine->outcome) == seen) {
      struct timespec ts = {(time_t)(left / 1000000000u),
                            (long)(left % 1000000000u)};
      syscall(SYS_futex, (uint32_t *)&mine->outcome, FUTEX_WAIT, seen, &ts,
              NULL, 0);
    }
    atomic_store(&mine->sleeping, 0);
  }
}

/* The progress thread: takes outcomes that arrived and withdraws what
 * waited too long. */
void hl_fast_sweep(void) {
  uint64_t ids[64];
  size_t n = 0;
  pthread_mutex_lock(&fp.lock);
  for (size_t i = 0; i < fp.npending && n < 64; i++) ids[n++] = fp.pending[i];
  pthread_mutex_unlock(&fp.lock);
  uint64_t now = hc_now_ns();
  for (size_t i = 0; i < n; i++) {
    struct hl_op *op = hl_op_get(ids[i]);
    if (op && atomic_load(&op->fstate) == HL_FS_WAIT)
      hl_fast_settle(op, hl_fast_should_leave(op, now));
  }
}

void hl_fast_join(int in) {
  if (!fp.hdr) return;
  if (in) atomic_fetch_or(&fp.hdr->joined, 1u << fp.me);
  else atomic_fetch_and(&fp.hdr->joined, ~(1u << fp.me));
}
