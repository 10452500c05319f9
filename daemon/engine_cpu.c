/* engine_cpu.c -- the CPU engine: collectives on tensors in host memory.
 *
 * When every participant's tensor lies in its arena, the operation runs in
 * one pass, in place, split across the reduction threads: each thread owns
 * a slice and reads every input byte of it once and writes every output
 * byte once. Otherwise the tensor is streamed through the staging areas in
 * chunks (two per rank, so copying one chunk overlaps reducing the other):
 * the daemon asks each streamed rank to copy chunk k in, reduces it across
 * all ranks when every copy is there, and asks for it to be copied out. */
#include <string.h>

#include "daemon.h"
#include "reduce.h"

#define PARALLEL_MIN_BYTES (256u << 10)
#define SLICE_ALIGN 64u

struct job {
  struct hd_daemon *d;
  struct hd_tensor *t;
  void *ptrs[256];
  int n;
  uint64_t count;
};

static void slice(const struct job *j, int i, int n, uint64_t *off,
                  uint64_t *cnt) {
  uint64_t es = hora_dtype_size(j->t->dtype);
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
  uint64_t off, cnt;
  slice(j, i, n, &off, &cnt);
  if (!cnt) return;
  uint64_t es = hora_dtype_size(j->t->dtype);
  void *p[256];
  for (int k = 0; k < j->n; k++) p[k] = (char *)j->ptrs[k] + off * es;
  if (j->t->coll == HP_ALLREDUCE) {
    hd_reduce(p, j->n, (const void *const *)p, j->n, cnt, j->t->dtype,
              j->t->op, j->d->job.size);
  } else { /* broadcast: ptrs[0] is the root */
    for (int k = 1; k < j->n; k++) memcpy(p[k], p[0], cnt * es);
  }
}

/* Runs the collective on j->ptrs (broadcast: root first), in parallel when
 * it is large enough to pay for waking the threads. */
static void run_job(struct job *j) {
  uint64_t bytes = j->count * hora_dtype_size(j->t->dtype);
  int n = bytes >= PARALLEL_MIN_BYTES ? hd_pool_size() : 1;
  if (n > 1 && bytes / (uint64_t)n < PARALLEL_MIN_BYTES / 2)
    n = (int)HC_MAX(1, bytes / (PARALLEL_MIN_BYTES / 2));
  hd_pool_run(run_slice, j, n);
}

/* Order of participants for a job: the broadcast root first. */
static int order(struct hd_daemon *d, struct hd_tensor *t, int *idx) {
  int n = 0;
  if (t->coll == HP_BROADCAST)
    for (int i = 0; i < d->nlocal; i++)
      if (d->ranks[i].info.rank == t->root) idx[n++] = i;
  for (int i = 0; i < d->nlocal; i++)
    if (t->coll != HP_BROADCAST || d->ranks[i].info.rank != t->root)
      idx[n++] = i;
  return n;
}

int hd_is_root(struct hd_daemon *d, struct hd_tensor *t, int i) {
  return t->coll == HP_BROADCAST && d->ranks[i].info.rank == t->root;
}
int hd_needs_in(struct hd_daemon *d, struct hd_tensor *t, int i) {
  return !t->part[i].resident &&
         (t->coll == HP_ALLREDUCE || hd_is_root(d, t, i));
}
int hd_needs_out(struct hd_daemon *d, struct hd_tensor *t, int i) {
  return !t->part[i].resident && !hd_is_root(d, t, i);
}

static uint64_t chunk_count(struct hd_tensor *t, uint64_t k) {
  uint64_t lo = k * t->chunk_elems;
  return HC_MIN(t->chunk_elems, t->count - lo);
}

uint64_t hd_staging_off(struct hd_rank *r, uint64_t k) {
  return r->layout.staging_off + (k & 1) * r->layout.chunk_size;
}

void hd_copy_req(struct hd_rank *r, struct hd_tensor *t, int kind,
                 uint64_t k) {
  struct hp_cqe e;
  memset(&e, 0, offsetof(struct hp_cqe, msg));
  e.id = t->part[r->idx].id;
  e.kind = (uint32_t)kind;
  e.chunk = k;
  e.elem_off = k * t->chunk_elems;
  e.elem_count = chunk_count(t, k);
  e.staging_off = hd_staging_off(r, k);
  e.msg[0] = '\0';
  hd_push_cqe(r, &e);
}

/* Chunk k's staging slot of rank i may be (re)filled once chunk k-2 has
 * left it. */
static int slot_free(struct hd_daemon *d, struct hd_tensor *t, int i,
                     uint64_t k) {
  if (k < 2) return 1;
  return hd_needs_out(d, t, i) ? t->part[i].done >= k - 1 : t->reduced >= k - 1;
}

static int stream_step(struct hd_daemon *d, struct hd_tensor *t) {
  uint64_t es = hora_dtype_size(t->dtype);
  if (!t->nchunks) {
    t->chunk_elems = HC_MAX(1, d->ranks[0].layout.chunk_size / es);
    t->nchunks = (t->count + t->chunk_elems - 1) / t->chunk_elems;
  }
  for (;;) {
    int progress = 0;
    for (int i = 0; i < d->nlocal; i++) {
      struct hd_part *p = &t->part[i];
      while (hd_needs_in(d, t, i) && p->issued < t->nchunks &&
             slot_free(d, t, i, p->issued)) {
        hd_copy_req(&d->ranks[i], t, HP_CQ_COPY_IN, p->issued++);
        progress = 1;
      }
    }
    uint64_t k = t->reduced;
    int can = k < t->nchunks;
    for (int i = 0; can && i < d->nlocal; i++) {
      if (hd_needs_in(d, t, i) && t->part[i].ready <= k) can = 0;
      if (hd_needs_out(d, t, i) && !slot_free(d, t, i, k)) can = 0;
    }
    if (can) {
      int idx[256], n = order(d, t, idx);
      struct job j = {.d = d, .t = t, .n = n, .count = chunk_count(t, k)};
      for (int m = 0; m < n; m++) {
        struct hd_rank *r = &d->ranks[idx[m]];
        struct hd_part *p = &t->part[idx[m]];
        j.ptrs[m] = p->resident
                        ? r->shm + p->offset + k * t->chunk_elems * es
                        : r->shm + hd_staging_off(r, k);
      }
      run_job(&j);
      t->reduced++;
      for (int i = 0; i < d->nlocal; i++)
        if (hd_needs_out(d, t, i)) hd_copy_req(&d->ranks[i], t, HP_CQ_COPY_OUT, k);
      progress = 1;
    }
    if (!progress) break;
  }
  if (t->reduced < t->nchunks) return 0;
  for (int i = 0; i < d->nlocal; i++)
    if (hd_needs_out(d, t, i) && t->part[i].done < t->nchunks) return 0;
  hd_tensor_finish(d, t);
  return 1;
}

static int cpu_step(struct hd_daemon *d, struct hd_tensor *t) {
  if (t->coll == HP_BARRIER || t->count == 0 || d->job.size == 1) {
    hd_tensor_finish(d, t);
    return 1;
  }
  if (d->multi) return hd_xhost_step(d, t);
  if (d->nlocal > 256) { /* job.ptrs bound; far beyond one host's ranks */
    hd_tensor_fail(d, t, HORA_ENOTSUP,
                   "the CPU engine serves at most 256 ranks per host");
    return 1;
  }
  int streamed = 0;
  for (int i = 0; i < d->nlocal; i++)
    if ((hd_needs_in(d, t, i) || hd_needs_out(d, t, i))) streamed = 1;
  if (streamed) return stream_step(d, t);
  int idx[256], n = order(d, t, idx);
  struct job j = {.d = d, .t = t, .n = n, .count = t->count};
  for (int m = 0; m < n; m++)
    j.ptrs[m] = d->ranks[idx[m]].shm + t->part[idx[m]].offset;
  run_job(&j);
  hd_tensor_finish(d, t);
  return 1;
}

const struct hd_engine hd_engine_cpu = {
    .name = "cpu",
    .init = NULL,
    .fini = NULL,
    .step = cpu_step,
};
