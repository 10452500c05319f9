/* cpu.c -- the CPU engine: collectives on tensors in host memory.
 *
 * Allreduce and broadcast: when every participant's tensor lies in its
 * arena, the operation runs in one pass, in place, split across the
 * reduction threads: each thread owns a slice and reads every input byte
 * of it once and writes every output byte once. Otherwise the tensor is
 * streamed through the staging areas in chunks (two per rank, so copying
 * one chunk overlaps reducing the other): the daemon asks each streamed
 * rank to copy chunk k in, reduces it across all ranks when every copy is
 * there, and asks for it to be copied out.
 *
 * Adasum (adasum.c): the members' tensors, which lie in their arenas
 * whole, are widened into this daemon's memory and combined up the tree
 * (or averaged, hierarchical); the result goes back to every member.
 *
 * Allgather, alltoall and reducescatter: inputs and outputs lie in the
 * arenas (libhora puts them there); each output byte is written once,
 * from the inputs where they lie, on the reduction threads; an allgather
 * block is read once for all the outputs it goes to, and an alltoall in
 * place trades the blocks of two members in place.
 *
 * A communicator with members on several hosts runs the cross-host
 * algorithms (xhost/ring.c; xhost/exchange.c, Adasum too) over the links
 * between the daemons; both use what parts.c says of an operation's
 * parts. There a run of allreduces the coordinator fused (hd_tensor.fuse)
 * goes round the ring as one, and a run of allgathers or reducescatters is
 * exchanged as one (packed together); on one host each tensor is reduced
 * as soon as it is ready, and fusing would only make the first wait for
 * the last. */
#define HC_LOG_SUB HC_SUB_ENGINE
#include <stdlib.h>
#include <string.h>

#include "../daemon.h"
#include "../metrics.h"
#include "reduce.h"
#include "../adasum.h"
#include "../timeline.h"

#define PARALLEL_MIN_BYTES (256u << 10)
#define SLICE_ALIGN 64u
#define MAX_PARTS 256

/* ---- allreduce and broadcast on one host ----------------------------------
 */

struct job {
  struct hd_tensor *t;
  void *ptrs[MAX_PARTS];
  int n;      /* inputs: ptrs[0..n) (broadcast: the root first) */
  int nout;   /* outputs: ptrs[0..nout) ... those are the first ones */
  int out[MAX_PARTS]; /* whether ptrs[k] is an output */
  uint64_t count;
  int divisor;
};

static void slice(const struct job *j, int i, int n, uint64_t *off,
                  uint64_t *cnt) {
  uint64_t es = hora_dtype_size(j->t->meta.dtype);
  uint64_t unit = SLICE_ALIGN / es;
  uint64_t units = (j->count + unit - 1) / unit;
  uint64_t lo = units * (uint64_t)i / (uint64_t)n * unit;
  uint64_t hi = units * (uint64_t)(i + 1) / (uint64_t)n * unit;
  if (hi > j->count) hi = j->count;
  if (lo > hi) lo = hi;
  *off = lo;
  *cnt = hi - lo;
}

static void run_slice(void *arg, int i, int n) {
  const struct job *j = arg;
  const struct hd_tensor *t = j->t;
  uint64_t off, cnt;
  slice(j, i, n, &off, &cnt);
  if (!cnt) return;
  uint64_t es = hora_dtype_size(t->meta.dtype);
  void *p[MAX_PARTS], *dst[MAX_PARTS];
  int nd = 0;
  for (int k = 0; k < j->n; k++) {
    p[k] = (char *)j->ptrs[k] + off * es;
    if (j->out[k]) dst[nd++] = p[k];
  }
  if (t->meta.coll == HORA_COLL_ALLREDUCE) {
    for (int k = 0; k < j->n; k++)
      if (j->out[k]) hd_scale_buf(t, p[k], cnt, 1);
    hc_reduce(dst, nd, (const void *const *)p, j->n, cnt, t->meta.dtype,
              t->meta.op, j->divisor);
    for (int k = 0; k < nd; k++) hd_scale_buf(t, dst[k], cnt, 0);
  } else { /* broadcast: ptrs[0] is the root */
    for (int k = 1; k < j->n; k++)
      if (j->out[k]) {
        if (cnt * es >= HC_COPY_NT_MIN) hc_copy_nt(p[k], p[0], cnt * es);
        else memcpy(p[k], p[0], cnt * es);
      }
  }
}

/* Runs the collective on j->ptrs, in parallel when it is large enough to
 * pay for waking the threads. */
static int threads_for(uint64_t bytes);

static void run_job(struct job *j) {
  uint64_t bytes = j->count * hora_dtype_size(j->t->meta.dtype);
  hd_pool_run(run_slice, j, threads_for(bytes));
}

/* Order of participants for a job: the broadcast root first. */
static int order(struct hd_tensor *t, int *idx) {
  int n = 0, nl = t->comm->nlocal;
  for (int i = 0; i < nl; i++)
    if (hd_is_root(t, i)) idx[n++] = i;
  for (int i = 0; i < nl; i++)
    if (!hd_is_root(t, i)) idx[n++] = i;
  return n;
}

/* Chunk k's staging slot of member i may be (re)filled once chunk k-2 has
 * left it. */
static int slot_free(struct hd_tensor *t, int i, uint64_t k) {
  if (k < 2) return 1;
  return hd_needs_out(t, i) ? t->part[i].done >= k - 1 : t->reduced >= k - 1;
}

/* Fills j with the members' data for chunk k (or the whole tensor). */
static int fill_job(struct hd_tensor *t, struct job *j, int streamed,
                    uint64_t k) {
  struct hd_comm *c = t->comm;
  uint64_t es = hora_dtype_size(t->meta.dtype);
  int idx[MAX_PARTS], n = order(t, idx);
  j->t = t;
  j->n = 0;
  j->divisor = c->size;
  j->count = streamed ? hd_chunk_count(t, k) : t->meta.count;
  uint64_t base = streamed ? k * t->chunk_elems : 0;
  for (int m = 0; m < n; m++) {
    int i = idx[m];
    struct hd_rank *r = hd_comm_local(c, i);
    struct hd_part *p = &t->part[i];
    if (p->joined) {
      if (t->meta.coll != HORA_COLL_ALLREDUCE) continue;
      unsigned char *z = hd_neutral(t, t->meta.count);
      if (!z) return -1;
      j->ptrs[j->n] = z + base * es;
      j->out[j->n++] = 0;
      continue;
    }
    j->ptrs[j->n] = p->resident ? r->shm + p->offset + base * es
                                : r->shm + hd_staging_off(r, k);
    j->out[j->n++] = 1;
  }
  return 0;
}

static int stream_step(struct hd_job *job, struct hd_tensor *t) {
  struct hd_comm *c = t->comm;
  uint64_t es = hora_dtype_size(t->meta.dtype);
  if (!t->nchunks) {
    t->chunk_elems = HC_MAX(1, hd_comm_local(c, 0)->layout.chunk_size / es);
    t->nchunks = (t->meta.count + t->chunk_elems - 1) / t->chunk_elems;
  }
  for (;;) {
    int progress = 0;
    for (int i = 0; i < c->nlocal; i++) {
      struct hd_part *p = &t->part[i];
      while (hd_needs_in(t, i) && p->issued < t->nchunks &&
             slot_free(t, i, p->issued)) {
        hd_copy_req(hd_comm_local(c, i), t, HP_CQ_COPY_IN, p->issued++);
        progress = 1;
      }
    }
    uint64_t k = t->reduced;
    int can = k < t->nchunks;
    for (int i = 0; can && i < c->nlocal; i++) {
      if (hd_needs_in(t, i) && t->part[i].ready <= k) can = 0;
      if (hd_needs_out(t, i) && !slot_free(t, i, k)) can = 0;
    }
    if (can) {
      struct job j;
      if (fill_job(t, &j, 1, k) < 0) {
        hd_tensor_fail(job, t, HORA_ENOMEM, "horad is out of memory");
        return 1;
      }
      run_job(&j);
      t->reduced++;
      for (int i = 0; i < c->nlocal; i++)
        if (hd_needs_out(t, i))
          hd_copy_req(hd_comm_local(c, i), t, HP_CQ_COPY_OUT, k);
      progress = 1;
    }
    if (!progress) break;
  }
  if (t->reduced < t->nchunks) return 0;
  for (int i = 0; i < c->nlocal; i++)
    if (hd_needs_out(t, i) && t->part[i].done < t->nchunks) return 0;
  hd_tensor_finish(job, t);
  return 1;
}

/* A streamed operation holds its members' staging areas until it ends:
 * operations of two communicators never share one. */
static int claim_staging(struct hd_tensor *t) {
  struct hd_comm *c = t->comm;
  for (int i = 0; i < c->nlocal; i++) {
    struct hd_rank *r = hd_comm_local(c, i);
    if ((hd_needs_in(t, i) || hd_needs_out(t, i)) && r->staging_owner &&
        r->staging_owner != t)
      return 0;
  }
  for (int i = 0; i < c->nlocal; i++)
    if (hd_needs_in(t, i) || hd_needs_out(t, i))
      hd_comm_local(c, i)->staging_owner = t;
  return 1;
}

static int run_reduce_bcast(struct hd_job *job, struct hd_tensor *t) {
  struct hd_comm *c = t->comm;
  if (c->nhosts > 1) {
    if (!claim_staging(t)) return 0;
    return hd_xhost_step(c, t);
  }
  int streamed = 0;
  for (int i = 0; i < c->nlocal; i++)
    if (hd_needs_in(t, i) || hd_needs_out(t, i)) streamed = 1;
  if (streamed) {
    if (!claim_staging(t)) return 0;
    return stream_step(job, t);
  }
  struct job j;
  if (fill_job(t, &j, 0, 0) < 0) {
    hd_tensor_fail(job, t, HORA_ENOMEM, "horad is out of memory");
    return 1;
  }
  /* Larger than a chunk: a piece of a chunk at a time, back to the loop
   * after each (job->resume), so that what the ranks submit meanwhile is
   * seen, and queued operations of higher priority run between the
   * pieces (negotiate.c's overtake) instead of waiting for the whole. The
   * pieces are disjoint runs of elements, each reduced or copied whole. */
  uint64_t es = hora_dtype_size(t->meta.dtype);
  uint64_t piece = HC_MAX((uint64_t)1, job->chunk_size / es);
  if (t->meta.count > piece) {
    uint64_t lo = t->piece_done;
    uint64_t n = HC_MIN(piece, t->meta.count - lo);
    for (int k = 0; k < j.n; k++) j.ptrs[k] = (char *)j.ptrs[k] + lo * es;
    j.count = n;
    run_job(&j);
    t->piece_done = lo + n;
    if (t->piece_done < t->meta.count) {
      job->resume = 1;
      hd_kick(job); /* the loop spins, and polls again */
      return 0;
    }
  } else {
    run_job(&j);
  }
  hd_tensor_finish(job, t);
  return 1;
}

/* ---- Adasum on one host ---------------------------------------------------
 */

static int adasum_hier(const struct hd_job *job) {
  return hk_int(&job->knobs, hierarchical_allreduce) != 0;
}

/* The members' inputs, prescaled and widened, are combined in this
 * daemon's memory (pairwise up the tree, or averaged: hierarchical, one
 * host); the result goes to every output. Submission checked the rest
 * (coll.c). */
static int run_adasum(struct hd_job *job, struct hd_tensor *t) {
  struct hd_comm *c = t->comm;
  int dt = t->meta.dtype, wt = hd_adasum_wtype(dt), nl = c->nlocal;
  uint64_t n = t->meta.count, wes = hora_dtype_size(wt);
  unsigned char *w = malloc((size_t)nl * n * wes + 8);
  if (!w) {
    hd_tensor_fail(job, t, HORA_ENOMEM, "horad is out of memory");
    return 1;
  }
  for (int i = 0; i < nl; i++)
    hd_adasum_widen(w + (size_t)i * n * wes,
                    t->part[i].joined ? NULL : hd_in_ptr(t, i), n, dt,
                    t->meta.prescale);
  if (adasum_hier(job)) hd_adasum_mean(w, nl, n, wt);
  else hd_adasum_tree(w, nl, n, wt);
  for (int i = 0; i < nl; i++)
    if (!t->part[i].joined)
      hd_adasum_narrow(hd_in_ptr(t, i), w, n, dt, t->meta.postscale);
  free(w);
  hd_tensor_finish(job, t);
  return 1;
}

/* ---- allgather, alltoall, reducescatter on one host -----------------------
 */

/* A list of copies, run by the reduction threads. An entry reads n bytes
 * at src and writes them to each of its destinations (allgather: every
 * local output that wants that member's block), or swaps them with the
 * bytes at its one destination (alltoall in place). Each thread takes an
 * equal share of the work (bytes written), across entries; within an
 * entry of several destinations it takes a range of the source and
 * copies it in cache-sized pieces to every destination, so the source is
 * read from memory once however many outputs want it. */
struct copy {
  const unsigned char *src;
  uint64_t n;
  size_t first; /* its destinations: dst[first .. first + nd) */
  int nd;
  int swap; /* n bytes at src and at dst[first] trade places */
};

struct copies {
  struct copy *v;
  size_t n, cap;
  unsigned char **dst;
  size_t nd, dcap;
  uint64_t total; /* work: each entry's n times its weight */
  int bad;        /* out of memory while the list was made */
};

#define COPY_PIECE (128u << 10) /* read once, written to every destination */

static uint64_t weight(const struct copy *c) {
  return c->swap ? 2 : (uint64_t)c->nd;
}

/* Starts an entry reading n bytes at src; add_dst() gives its
 * destinations. */
static void add_src(struct copies *l, const unsigned char *src, uint64_t n) {
  if (l->bad) return;
  if (l->n && l->v[l->n - 1].nd == 0) l->n--; /* the last one wrote nothing */
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 64;
    struct copy *v = realloc(l->v, cap * sizeof *v);
    if (!v) {
      l->bad = 1;
      return;
    }
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = (struct copy){src, n, l->nd, 0, 0};
}

static void add_dst(struct copies *l, unsigned char *dst) {
  struct copy *c = l->n ? &l->v[l->n - 1] : NULL;
  if (l->bad || !c || !c->n || dst == c->src) return; /* in place: there */
  if (l->nd == l->dcap) {
    size_t cap = l->dcap ? l->dcap * 2 : 64;
    unsigned char **v = realloc(l->dst, cap * sizeof *v);
    if (!v) {
      l->bad = 1;
      return;
    }
    l->dst = v;
    l->dcap = cap;
  }
  l->dst[l->nd++] = dst;
  c->nd++;
  l->total += c->n;
}

static void add_copy(struct copies *l, unsigned char *dst,
                     const unsigned char *src, uint64_t n) {
  add_src(l, src, n);
  add_dst(l, dst);
}

static void add_swap(struct copies *l, unsigned char *a, unsigned char *b,
                     uint64_t n) {
  if (a == b) return;
  add_copy(l, b, a, n);
  if (!l->bad && l->n && l->v[l->n - 1].nd == 1) {
    l->v[l->n - 1].swap = 1;
    l->total += n;
  }
}

static void copy(void *dst, const void *src, uint64_t n, int nt) {
  if (nt) hc_copy_nt(dst, src, n);
  else memcpy(dst, src, n);
}

/* Where work position p (0 .. n * w) of an entry falls in its source:
 * 64-byte aligned, so that two threads never share a cache line. */
static uint64_t cut(uint64_t p, uint64_t n, uint64_t w) {
  return p >= n * w ? n : (p / w) & ~(uint64_t)63;
}

static void run_copy_share(void *arg, int i, int n) {
  const struct copies *l = arg;
  uint64_t lo = l->total * (uint64_t)i / (uint64_t)n;
  uint64_t hi = l->total * (uint64_t)(i + 1) / (uint64_t)n, at = 0;
  int nt = hi - lo >= HC_COPY_NT_MIN; /* this thread's writes */
  for (size_t k = 0; k < l->n && at < hi; k++) {
    const struct copy *c = &l->v[k];
    uint64_t w = weight(c), len = c->n * w;
    if (!len) continue;
    uint64_t a = HC_MAX(lo, at), b = HC_MIN(hi, at + len);
    at += len;
    if (a >= b) continue;
    uint64_t s0 = cut(a - (at - len), c->n, w),
             s1 = cut(b - (at - len), c->n, w);
    if (s0 >= s1) continue;
    unsigned char *const *dst = l->dst + c->first;
    if (c->swap) {
      hc_swap_bytes((unsigned char *)c->src + s0, dst[0] + s0, s1 - s0);
    } else if (c->nd == 1) {
      copy(dst[0] + s0, c->src + s0, s1 - s0, nt);
    } else {
      for (uint64_t o = s0; o < s1; o += COPY_PIECE) {
        uint64_t m = HC_MIN((uint64_t)COPY_PIECE, s1 - o);
        for (int job = 0; job < c->nd; job++)
          copy(dst[job] + o, c->src + o, m, nt);
      }
    }
  }
}

static int threads_for(uint64_t bytes) {
  int n = bytes >= PARALLEL_MIN_BYTES ? hd_pool_size() : 1;
  if (n > 1 && bytes / (uint64_t)n < PARALLEL_MIN_BYTES / 2)
    n = (int)HC_MAX(1, bytes / (PARALLEL_MIN_BYTES / 2));
  return n;
}

static void run_copies(struct copies *l) {
  if (l->n && l->v[l->n - 1].nd == 0) l->n--;
  if (l->total) hd_pool_run(run_copy_share, l, threads_for(l->total));
}

static void free_copies(struct copies *l) {
  free(l->v);
  free(l->dst);
  memset(l, 0, sizeof *l);
}

static int run_allgather(struct hd_job *job, struct hd_tensor *t) {
  struct hd_comm *c = t->comm;
  uint64_t es = hora_dtype_size(t->meta.dtype);
  const int64_t *counts = t->part[t->first].aux;
  struct copies l = {0};
  uint64_t off = 0;
  for (int m = 0, i = 0; m < c->size; m++) {
    uint64_t n = (uint64_t)counts[m];
    while (i < c->nlocal && c->local_member[i] < m) i++;
    if (n && i < c->nlocal && c->local_member[i] == m && !t->part[i].joined) {
      add_src(&l, hd_in_ptr(t, i), n * es);
      for (int k = 0; k < c->nlocal; k++)
        if (!t->part[k].joined) add_dst(&l, hd_out_ptr(t, k) + off * es);
    }
    off += n;
  }
  if (l.bad) {
    free_copies(&l);
    hd_tensor_fail(job, t, HORA_ENOMEM, "horad is out of memory");
    return 1;
  }
  run_copies(&l);
  free_copies(&l);
  hd_tensor_finish(job, t);
  return 1;
}

/* Zeroes, in each receiving member's output, the part a joined member
 * would have sent (its receive splits say how much): it reads 0, as a
 * joined rank's contribution does everywhere, not what the buffer held. */
static void zero_joined_parts(struct hd_tensor *t) {
  struct hd_comm *c = t->comm;
  uint64_t es = hora_dtype_size(t->meta.dtype);
  int any = 0;
  for (int i = 0; i < c->nlocal; i++) any |= t->part[i].joined;
  for (int j = 0; any && j < c->nlocal; j++) {
    const struct hd_part *pj = &t->part[j];
    if (pj->joined || !pj->aux) continue;
    const int64_t *rs = pj->aux + c->size;
    uint64_t roff = 0;
    for (int m = 0, i = 0; m < c->size; m++) {
      while (i < c->nlocal && c->local_member[i] < m) i++;
      uint64_t n = (uint64_t)rs[m];
      if (n && i < c->nlocal && c->local_member[i] == m && t->part[i].joined)
        memset(hd_out_ptr(t, j) + roff * es, 0, n * es);
      roff += n;
    }
  }
}

/* In place, a pair of members in place trade their blocks (one swap); a
 * member in place receives from one that is not only once every block
 * its own input holds for others has been read: the copies into the
 * outputs of members not in place go first (then), those into the members
 * in place second (later). */
static int run_alltoall(struct hd_job *job, struct hd_tensor *t) {
  struct hd_comm *c = t->comm;
  uint64_t es = hora_dtype_size(t->meta.dtype);
  int size = c->size, nl = c->nlocal;
  struct copies then = {0}, later = {0};
  int *ip = calloc((size_t)nl, sizeof *ip);
  if (!ip) goto oom;
  for (int i = 0; i < nl; i++) ip[i] = hd_a2a_in_place(t, i);
  for (int i = 0; i < nl; i++) {
    const struct hd_part *pi = &t->part[i];
    if (pi->joined) continue;
    for (int j = 0; j < nl; j++) {
      const struct hd_part *pj = &t->part[j];
      int mi = c->local_member[i], mj = c->local_member[j];
      uint64_t n = (uint64_t)pi->aux[mj] * es;
      if (pj->joined || !n || (i >= j && ip[i] && ip[j])) continue;
      uint64_t soff = 0, roff = 0;
      for (int m = 0; m < mj; m++) soff += (uint64_t)pi->aux[m];
      for (int m = 0; m < mi; m++) roff += (uint64_t)pj->aux[size + m];
      unsigned char *src = hd_in_ptr(t, i) + soff * es;
      unsigned char *dst = hd_out_ptr(t, j) + roff * es;
      if (ip[i] && ip[j])
        add_swap(&then, src, dst, n);
      else
        add_copy(ip[j] ? &later : &then, dst, src, n);
    }
  }
  if (then.bad || later.bad) goto oom;
  free(ip);
  run_copies(&then);
  run_copies(&later);
  free_copies(&then);
  free_copies(&later);
  zero_joined_parts(t);
  hd_tensor_finish(job, t);
  return 1;
oom:
  free(ip);
  free_copies(&then);
  free_copies(&later);
  hd_tensor_fail(job, t, HORA_ENOMEM, "horad is out of memory");
  return 1;
}

/* One member's reducescatter block, reduced by the threads in slices. */
struct rs_job {
  struct hd_tensor *t;
  const void *src[MAX_PARTS];
  int ns;
  unsigned char *dst;
  uint64_t count;
};

static void run_rs_slice(void *arg, int i, int n) {
  const struct rs_job *j = arg;
  uint64_t es = hora_dtype_size(j->t->meta.dtype);
  uint64_t unit = SLICE_ALIGN / es, units = (j->count + unit - 1) / unit;
  uint64_t lo = HC_MIN(j->count, units * (uint64_t)i / (uint64_t)n * unit);
  uint64_t hi =
      HC_MIN(j->count, units * (uint64_t)(i + 1) / (uint64_t)n * unit);
  if (lo >= hi) return;
  const void *s[MAX_PARTS];
  for (int k = 0; k < j->ns; k++)
    s[k] = (const unsigned char *)j->src[k] + lo * es;
  void *dst[1] = {j->dst + lo * es};
  hc_reduce(dst, 1, s, j->ns, hi - lo, j->t->meta.dtype, j->t->meta.op,
            j->t->comm->size);
  hd_scale_buf(j->t, dst[0], hi - lo, 0);
}

static int run_reducescatter(struct hd_job *job, struct hd_tensor *t) {
  struct hd_comm *c = t->comm;
  uint64_t es = hora_dtype_size(t->meta.dtype);
  uint64_t row = hd_row_elems(&t->meta);
  uint64_t rows = t->meta.ndims ? (uint64_t)t->meta.shape[0] : t->meta.count;
  struct rs_job j = {.t = t};
  for (int i = 0; i < c->nlocal; i++) {
    if (t->part[i].joined) {
      if (!(j.src[j.ns++] = hd_neutral(t, t->meta.count))) {
        hd_tensor_fail(job, t, HORA_ENOMEM, "horad is out of memory");
        return 1;
      }
      continue;
    }
    hd_scale_buf(t, hd_in_ptr(t, i), t->meta.count, 1);
    j.src[j.ns++] = hd_in_ptr(t, i);
  }
  const void *base[MAX_PARTS];
  memcpy(base, j.src, sizeof base);
  for (int i = 0; i < c->nlocal; i++) {
    if (t->part[i].joined) continue;
    uint64_t first, n;
    hd_rs_block(rows, c->size, c->local_member[i], &first, &n);
    for (int k = 0; k < j.ns; k++)
      j.src[k] = (const unsigned char *)base[k] + first * row * es;
    j.dst = hd_out_ptr(t, i);
    j.count = n * row;
    if (j.count) hd_pool_run(run_rs_slice, &j, threads_for(j.count * es));
  }
  hd_tensor_finish(job, t);
  return 1;
}

/* How this engine runs each collective on one host. */
static int (*const local_run[])(struct hd_job *, struct hd_tensor *) = {
    [HORA_COLL_ALLREDUCE] = run_reduce_bcast,
    [HORA_COLL_BROADCAST] = run_reduce_bcast,
    [HORA_COLL_ALLGATHER] = run_allgather,
    [HORA_COLL_ALLTOALL] = run_alltoall,
    [HORA_COLL_REDUCESCATTER] = run_reducescatter,
};

static int cpu_can_run(struct hd_job *job, const struct hd_tensor *t) {
  return t->meta.coll < sizeof local_run / sizeof local_run[0] &&
         local_run[t->meta.coll] != NULL;
}

static int cpu_step(struct hd_job *job, struct hd_tensor *t) {
  struct hd_comm *c = t->comm;
  int coll = t->meta.coll;
  if (c->nlocal > MAX_PARTS) { /* job.ptrs bound; far beyond one host's ranks */
    hd_tensor_fail(job, t, HORA_ENOTSUP,
                   "the CPU engine serves at most 256 ranks per host");
    return 1;
  }
  if (t->meta.count == 0 && coll != HORA_COLL_ALLGATHER &&
      coll != HORA_COLL_ALLTOALL && c->nhosts == 1) {
    hd_tensor_finish(job, t);
    return 1;
  }
  if (t->star) { /* the coordinator sent the result (xhost/ring.c) */
    hd_star_finish(c, t);
    return 1;
  }
  int adasum = coll == HORA_COLL_ALLREDUCE && t->meta.op == HORA_ADASUM;
  if (c->nhosts > 1 && (adasum || (coll != HORA_COLL_ALLREDUCE &&
                                   coll != HORA_COLL_BROADCAST)))
    return hd_xcoll_step(c, t);
  if (adasum) return run_adasum(job, t);
  return local_run[coll](job, t);
}

/* The tensors from p->t[p->cur] on that the coordinator fused: they run
 * as one allreduce over their concatenation (several hosts only: there
 * the latency of the ring's steps is paid once for all of them). */
static int fused_run(const struct hd_plan *p) {
  int n = 1;
  while (p->cur + n < p->n && p->t[p->cur + n]->fuse) n++;
  return n;
}

/* A plan's tensors run one after the other, each as its own collective,
 * or a run of them fused into one. */
static int cpu_progress(struct hd_job *job, struct hd_plan *p) {
  while (p->cur < p->n) {
    int n = p->comm->nhosts > 1 ? fused_run(p) : 1;
    for (int k = 0; k < n; k++) /* the first step only */
      HD_TL_HOOK(job, hd_tl_run_(p->t[p->cur + k]));
    for (int k = 0; k < n; k++)
      HD_TL_HOOK(job, hd_tl_resume_(p->t[p->cur + k]));
    if (n > 1) {
      int coll = p->t[p->cur]->meta.coll;
      if (!(coll != HORA_COLL_ALLREDUCE
                ? hd_xcoll_fused(p->comm, &p->t[p->cur], n)
                : hd_xhost_run(p->comm, &p->t[p->cur], n))) {
        for (int k = 0; k < n; k++)
          HD_TL_HOOK(job, hd_tl_wait_(p->t[p->cur + k]));
        return 0;
      }
      hc_debug("ran %d %ss fused into one ('%s' to '%s')", n,
               hd_coll_name(coll), p->t[p->cur]->name,
               p->t[p->cur + n - 1]->name);
      hd_metrics_fused(job, n);
      for (int k = 0; k < n; k++) hd_plan_next(p);
      continue;
    }
    if (!cpu_step(job, p->t[p->cur])) {
      HD_TL_HOOK(job, hd_tl_wait_(p->t[p->cur]));
      return 0;
    }
    hd_plan_next(p);
  }
  return 1;
}

static void cpu_comm_fini(struct hd_job *job, struct hd_comm *c) {
  (void)job;
  hd_xhost_free(c);
  hd_xcoll_free(c);
  hd_xcoll_fused_free(c);
}

static void cpu_abort(struct hd_job *job, struct hd_comm *c) {
  hd_xhost_abort(c);
  hd_xcoll_abort(c);
  hd_xcoll_fused_free(c);
}

const struct hd_engine hd_engine_cpu = {
    .name = "cpu",
    .can_run = cpu_can_run,
    .progress = cpu_progress,
    .abort = cpu_abort,
    .comm_fini = cpu_comm_fini,
};

const struct hd_engine *const hd_engines[] = {&hd_engine_cpu, NULL};
