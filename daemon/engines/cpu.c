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
 * Allgather, alltoall and reducescatter: inputs and outputs lie in the
 * arenas (libhora puts them there); each output byte is written once,
 * from the inputs where they lie.
 *
 * A communicator with members on several hosts runs the cross-host
 * algorithms (xhost/ring.c, xhost/exchange.c) over the links between the
 * daemons; both use what parts.c says of an operation's parts. */
#include <stdlib.h>
#include <string.h>

#include "../daemon.h"
#include "../reduce.h"

#define PARALLEL_MIN_BYTES (256u << 10)
#define SLICE_ALIGN 64u
#define MAX_PARTS 256

/* ---- allreduce and broadcast on one host ---------------------------------- */

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
    hd_reduce(dst, nd, (const void *const *)p, j->n, cnt, t->meta.dtype,
              t->meta.op, j->divisor);
    for (int k = 0; k < nd; k++) hd_scale_buf(t, dst[k], cnt, 0);
  } else { /* broadcast: ptrs[0] is the root */
    for (int k = 1; k < j->n; k++)
      if (j->out[k]) memcpy(p[k], p[0], cnt * es);
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

static int stream_step(struct hd_daemon *d, struct hd_tensor *t) {
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
        hd_tensor_fail(d, t, HORA_ENOMEM, "horad is out of memory");
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
  hd_tensor_finish(d, t);
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

static int run_reduce_bcast(struct hd_daemon *d, struct hd_tensor *t) {
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
    return stream_step(d, t);
  }
  struct job j;
  if (fill_job(t, &j, 0, 0) < 0) {
    hd_tensor_fail(d, t, HORA_ENOMEM, "horad is out of memory");
    return 1;
  }
  run_job(&j);
  hd_tensor_finish(d, t);
  return 1;
}

/* ---- allgather, alltoall, reducescatter on one host ----------------------- */

/* A list of copies, run by the reduction threads: each thread takes an
 * equal share of the bytes, across copy boundaries. */
struct copy {
  unsigned char *dst;
  const unsigned char *src;
  uint64_t n;
};

struct copies {
  struct copy *v;
  size_t n, cap;
  uint64_t total;
};

static int add_copy(struct copies *l, unsigned char *dst,
                    const unsigned char *src, uint64_t n) {
  if (!n || dst == src) return 0; /* in place: already there */
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 64;
    struct copy *v = realloc(l->v, cap * sizeof *v);
    if (!v) return -1;
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = (struct copy){dst, src, n};
  l->total += n;
  return 0;
}

static void run_copy_share(void *arg, int i, int n) {
  const struct copies *l = arg;
  uint64_t lo = l->total * (uint64_t)i / (uint64_t)n;
  uint64_t hi = l->total * (uint64_t)(i + 1) / (uint64_t)n, at = 0;
  for (size_t k = 0; k < l->n && at < hi; k++) {
    const struct copy *c = &l->v[k];
    uint64_t a = HC_MAX(lo, at), b = HC_MIN(hi, at + c->n);
    if (a < b) memcpy(c->dst + (a - at), c->src + (a - at), b - a);
    at += c->n;
  }
}

static int threads_for(uint64_t bytes) {
  int n = bytes >= PARALLEL_MIN_BYTES ? hd_pool_size() : 1;
  if (n > 1 && bytes / (uint64_t)n < PARALLEL_MIN_BYTES / 2)
    n = (int)HC_MAX(1, bytes / (PARALLEL_MIN_BYTES / 2));
  return n;
}

static int run_copies(struct copies *l) {
  if (l->total) hd_pool_run(run_copy_share, l, threads_for(l->total));
  free(l->v);
  return 0;
}

static int run_allgather(struct hd_daemon *d, struct hd_tensor *t) {
  struct hd_comm *c = t->comm;
  uint64_t es = hora_dtype_size(t->meta.dtype);
  const int64_t *counts = t->part[t->first].aux;
  struct copies l = {0};
  uint64_t off = 0;
  int bad = 0;
  for (int m = 0, i = 0; m < c->size; m++) {
    uint64_t n = (uint64_t)counts[m];
    while (i < c->nlocal && c->local_member[i] < m) i++;
    if (n && i < c->nlocal && c->local_member[i] == m && !t->part[i].joined) {
      const unsigned char *src = hd_in_ptr(t, i);
      for (int k = 0; k < c->nlocal; k++)
        if (!t->part[k].joined)
          bad |= add_copy(&l, hd_out_ptr(t, k) + off * es, src, n * es);
    }
    off += n;
  }
  if (bad) {
    free(l.v);
    hd_tensor_fail(d, t, HORA_ENOMEM, "horad is out of memory");
    return 1;
  }
  run_copies(&l);
  hd_tensor_finish(d, t);
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

static int run_alltoall(struct hd_daemon *d, struct hd_tensor *t) {
  struct hd_comm *c = t->comm;
  uint64_t es = hora_dtype_size(t->meta.dtype);
  struct copies l = {0};
  int bad = 0;
  for (int i = 0; i < c->nlocal; i++) {
    const struct hd_part *pi = &t->part[i];
    if (pi->joined) continue;
    uint64_t soff = 0;
    for (int m = 0; m < c->size; m++) {
      uint64_t n = (uint64_t)pi->aux[m];
      int j = -1;
      for (int k = 0; k < c->nlocal; k++)
        if (c->local_member[k] == m) j = k;
      if (j >= 0 && !t->part[j].joined && n) {
        const struct hd_part *pj = &t->part[j];
        uint64_t roff = 0;
        for (int s2 = 0; s2 < c->local_member[i]; s2++)
          roff += (uint64_t)pj->aux[c->size + s2];
        bad |= add_copy(&l, hd_out_ptr(t, j) + roff * es,
                        hd_in_ptr(t, i) + soff * es, n * es);
      }
      soff += n;
    }
  }
  if (bad) {
    free(l.v);
    hd_tensor_fail(d, t, HORA_ENOMEM, "horad is out of memory");
    return 1;
  }
  run_copies(&l);
  zero_joined_parts(t);
  hd_tensor_finish(d, t);
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
  uint64_t hi = HC_MIN(j->count, units * (uint64_t)(i + 1) / (uint64_t)n * unit);
  if (lo >= hi) return;
  const void *s[MAX_PARTS];
  for (int k = 0; k < j->ns; k++) s[k] = (const unsigned char *)j->src[k] + lo * es;
  void *dst[1] = {j->dst + lo * es};
  hd_reduce(dst, 1, s, j->ns, hi - lo, j->t->meta.dtype, j->t->meta.op,
            j->t->comm->size);
  hd_scale_buf(j->t, dst[0], hi - lo, 0);
}

static int run_reducescatter(struct hd_daemon *d, struct hd_tensor *t) {
  struct hd_comm *c = t->comm;
  uint64_t es = hora_dtype_size(t->meta.dtype);
  uint64_t row = hd_row_elems(&t->meta);
  uint64_t rows = t->meta.ndims ? (uint64_t)t->meta.shape[0] : t->meta.count;
  struct rs_job j = {.t = t};
  for (int i = 0; i < c->nlocal; i++) {
    if (t->part[i].joined) {
      if (!(j.src[j.ns++] = hd_neutral(t, t->meta.count))) {
        hd_tensor_fail(d, t, HORA_ENOMEM, "horad is out of memory");
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
  hd_tensor_finish(d, t);
  return 1;
}

/* How this engine runs each collective on one host. */
static int (*const local_run[])(struct hd_daemon *, struct hd_tensor *) = {
    [HORA_COLL_ALLREDUCE] = run_reduce_bcast,
    [HORA_COLL_BROADCAST] = run_reduce_bcast,
    [HORA_COLL_ALLGATHER] = run_allgather,
    [HORA_COLL_ALLTOALL] = run_alltoall,
    [HORA_COLL_REDUCESCATTER] = run_reducescatter,
};

static int cpu_can_run(struct hd_daemon *d, const struct hd_tensor *t) {
  return t->meta.coll < sizeof local_run / sizeof local_run[0] &&
         local_run[t->meta.coll] != NULL;
}

static int cpu_step(struct hd_daemon *d, struct hd_tensor *t) {
  struct hd_comm *c = t->comm;
  int coll = t->meta.coll;
  if (c->nlocal > MAX_PARTS) { /* job.ptrs bound; far beyond one host's ranks */
    hd_tensor_fail(d, t, HORA_ENOTSUP,
                   "the CPU engine serves at most 256 ranks per host");
    return 1;
  }
  if (t->meta.count == 0 && coll != HORA_COLL_ALLGATHER &&
      coll != HORA_COLL_ALLTOALL && c->nhosts == 1) {
    hd_tensor_finish(d, t);
    return 1;
  }
  if (c->nhosts > 1 && coll != HORA_COLL_ALLREDUCE &&
      coll != HORA_COLL_BROADCAST)
    return hd_xcoll_step(c, t);
  return local_run[coll](d, t);
}

/* A plan's tensors run one after the other, each as its own collective. */
static int cpu_progress(struct hd_daemon *d, struct hd_plan *p) {
  while (p->cur < p->n) {
    if (!cpu_step(d, p->t[p->cur])) return 0;
    hd_plan_next(p);
  }
  return 1;
}

static void cpu_comm_fini(struct hd_daemon *d, struct hd_comm *c) {
  (void)d;
  hd_xhost_free(c);
  hd_xcoll_free(c);
}

static void cpu_abort(struct hd_daemon *d, struct hd_comm *c) {
  hd_xhost_abort(c);
  hd_xcoll_abort(c);
}

const struct hd_engine hd_engine_cpu = {
    .name = "cpu",
    .can_run = cpu_can_run,
    .progress = cpu_progress,
    .abort = cpu_abort,
    .comm_fini = cpu_comm_fini,
};

const struct hd_engine *const hd_engines[] = {&hd_engine_cpu, NULL};
