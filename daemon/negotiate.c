/* negotiate.c -- matching the local members' submissions by name, per
 * communicator.
 *
 * Ranks may submit names in any order. An operation becomes ready when
 * every local member of its communicator has submitted it (a member that
 * has joined counts as having submitted, with a neutral contribution);
 * its metadata are then compared with the first submitter's and a
 * disagreement fails the operation on every rank with a message naming
 * both ranks and both values (the job goes on). A communicator with
 * members on several hosts then asks its coordinator (coord.c), whose
 * decisions every host runs in the same order. Ready operations run in
 * order, one communicator independently of the others. */
#define HC_LOG_SUB HC_SUB_NEGO
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "autotune.h"
#include "metrics.h"
#include "timeline.h"

_Static_assert(HP_PLAN_MAX == HP_GROUP_MAX, "one bound for a group");

static struct hd_tensor **slot_of(struct hd_comm *c, const char *name,
                                   uint64_t hash) {
  struct hd_tensor **pp = &c->table[hash & (c->table_size - 1)];
  while (*pp && strcmp((*pp)->name, name)) pp = &(*pp)->next_hash;
  return pp;
}

static int grow_table(struct hd_comm *c) {
  size_t n = c->table_size ? c->table_size * 2 : 64;
  struct hd_tensor **t = calloc(n, sizeof *t);
  if (!t) return HORA_ENOMEM;
  for (size_t i = 0; i < c->table_size; i++) {
    struct hd_tensor *e = c->table[i];
    while (e) {
      struct hd_tensor *next = e->next_hash;
      struct hd_tensor **pp = &t[e->hash & (n - 1)];
      e->next_hash = *pp;
      *pp = e;
      e = next;
    }
  }
  free(c->table);
  c->table = t;
  c->table_size = n;
  return 0;
}

/* ---- the job's communicators -------------------------------------------- */

int hd_comms_init(struct hd_job *job) {
  int n = job->desc.size;
  int32_t *all = malloc((size_t)(n ? n : 1) * sizeof *all);
  if (!all) return HORA_ENOMEM;
  for (int i = 0; i < n; i++) all[i] = i;
  struct hd_comm *c = hd_comm_new(job, all, n);
  free(all);
  /* A host whose links all came up before ours may already have said
   * ready for the global set's first operations: held, they are ours now
   * (else its ranks would wait for a decision that never comes). */
  if (c) hd_coord_replay(c);
  return c ? 0 : HORA_ENOMEM;
}

void hd_comms_free(struct hd_job *job) {
  hd_coord_held_free(job);
  for (uint32_t i = 0; i < job->ncomms; i++) {
    struct hd_comm *c = job->comms[i];
    if (!c) continue;
    for (int k = 0; job->engines && job->engines[k]; k++)
      if (job->engines[k]->comm_fini) job->engines[k]->comm_fini(job, c);
    hd_coord_free(c);
    hd_comm_free(c);
  }
  free(job->comms);
  job->comms = NULL;
  job->ncomms = 0;
}

/* ---- groups and plans ---------------------------------------------------- */

static void group_free(struct hd_comm *c, struct hd_group *g) {
  struct hd_group **pp = &c->groups;
  while (*pp && *pp != g) pp = &(*pp)->next;
  if (*pp) *pp = g->next;
  for (uint32_t i = 0; i < g->n; i++)
    if (g->t[i]) g->t[i]->group = NULL;
  free(g);
}

static void group_unlink(struct hd_tensor *t) {
  struct hd_group *g = t->group;
  if (!g) return;
  g->t[t->meta.group_idx] = NULL;
  t->group = NULL;
  if (t->held) g->nheld--;
  t->held = 0;
  if (--g->nlive == 0) group_free(t->comm, g);
}

/* Puts t, a new tensor of a group, in its group; 0 or HORA_E* (why). */
static int group_attach(struct hd_comm *c, struct hd_tensor *t, char *why,
                        size_t len) {
  const struct hd_meta *m = &t->meta;
  struct hd_group *g = c->groups;
  while (g && g->key != m->group) g = g->next;
  if (!g) {
    g = calloc(1, sizeof *g + m->group_n * sizeof g->t[0]);
    if (!g) {
      hc_fmt(why, len, "horad is out of memory");
      return HORA_ENOMEM;
    }
    g->key = m->group;
    g->n = m->group_n;
    g->next = c->groups;
    c->groups = g;
  }
  if (g->n != m->group_n || g->t[m->group_idx]) {
    hc_fmt(why, len, "it is tensor %u of a group of %u, but %s", m->group_idx,
           m->group_n, g->n != m->group_n ? "another tensor of that group "
           "came in a group of another size" : "another tensor of that group "
           "has that place");
    if (!g->nlive) group_free(c, g);
    return HORA_EINVAL;
  }
  g->t[m->group_idx] = t;
  g->nlive++;
  t->group = g;
  return 0;
}

/* Tensors and one-tensor plans of a communicator are all of one size:
 * the last few freed are kept for the next (an operation in steady state
 * costs no malloc). */
#ifdef __SANITIZE_ADDRESS__
#define SPARE_MAX 0 /* every use after free stays visible */
#else
#define SPARE_MAX 16
#endif

static struct hd_tensor *tensor_new(struct hd_comm *c) {
  size_t n = (size_t)c->nlocal;
  size_t size = sizeof(struct hd_tensor) +
                n * (sizeof(struct hd_part) + sizeof(struct hd_meta));
  struct hd_tensor *t = c->spare;
  if (t) {
    c->spare = t->next_hash;
    c->nspare--;
    memset(t, 0, size);
  } else if (!(t = calloc(1, size))) {
    return NULL;
  }
  t->comm = c;
  t->metas = (struct hd_meta *)(t->part + n);
  return t;
}

static void tensor_release(struct hd_comm *c, struct hd_tensor *t) {
  if (c->nspare < SPARE_MAX) {
    t->next_hash = c->spare;
    c->spare = t;
    c->nspare++;
  } else {
    free(t);
  }
}

static struct hd_plan *plan_new(struct hd_comm *c, int n) {
  struct hd_plan *p = NULL;
  if (n == 1 && c->spare_plan) {
    p = c->spare_plan;
    c->spare_plan = NULL;
    memset(p, 0, sizeof *p + sizeof p->t[0]);
  } else {
    p = calloc(1, sizeof *p + (size_t)n * sizeof p->t[0]);
  }
  return p;
}

static void plan_release(struct hd_comm *c, struct hd_plan *p) {
  if (p->n == 1 && !c->spare_plan) c->spare_plan = p;
  else free(p);
}

static void free_plans(struct hd_comm *c) {
  while (c->plan_head) {
    struct hd_plan *p = c->plan_head;
    c->plan_head = p->next;
    plan_release(c, p);
  }
  c->plan_tail = NULL;
}

static void free_tensor(struct hd_comm *c, struct hd_tensor *t) {
  group_unlink(t);
  for (int i = 0; i < c->nlocal; i++) {
    struct hd_rank *r = hd_comm_local(c, i);
    if (r->staging_owner == t) {
      r->staging_owner = NULL;
      c->job->staging_freed = 1; /* an operation of another set may wait */
    }
    free(t->part[i].aux);
  }
  free(t->neutral);
  free(t->star);
  t->star = NULL;
  t->nstar = 0;
  tensor_release(c, t);
}

static void remove_tensor(struct hd_comm *c, struct hd_tensor *t) {
  struct hd_tensor **pp = slot_of(c, t->name, t->hash);
  if (*pp == t) *pp = t->next_hash;
  c->ntensors--;
  free_tensor(c, t);
  HD_AT_HOOK(c->job, hd_at_removed_(c->job));
}

/* Sends every participant that submitted t the same completion. */
static void complete_all(struct hd_tensor *t, int status, const char *msg) {
  struct hd_comm *c = t->comm;
  hd_metrics_done(t, status);
  HD_TL_HOOK(c->job, hd_tl_end_(t, status, msg));
  HD_AT_HOOK(c->job, hd_at_done_(c->job, t, status));
  /* one the fast path may take next time: its slot, for the ranks to learn */
  uint32_t slot = 0;
  if (c->job->fast && status >= 0 &&
      (t->meta.coll == HORA_COLL_ALLREDUCE ||
       t->meta.coll == HORA_COLL_BROADCAST) &&
      t->meta.count * hora_dtype_size(t->meta.dtype) <= HP_FAST_BYTES)
    slot = hd_fast_slot(c->job, c->id, t->hash);
  for (int i = 0; i < c->nlocal; i++)
    if (t->part[i].submitted)
      hd_complete_slot(hd_comm_local(c, i), t->part[i].id, status, msg, slot);
}

void hd_tensor_finish(struct hd_job *job, struct hd_tensor *t) {
  if (t->run) hd_xcoll_fused_end(t, 0, NULL); /* its run completes them */
  else complete_all(t, t->value, NULL);
}

void hd_tensor_fail(struct hd_job *job, struct hd_tensor *t, int status,
                    const char *msg) {
  if (t->run) hd_xcoll_fused_end(t, status, msg);
  else complete_all(t, status, msg);
}

/* ---- checking a submission ---------------------------------------------- */

/* The arena, and the adopted memory after it (libclient's adopt.c). */
static int in_arena(const struct hp_shm_hdr *h, uint64_t off, uint64_t bytes) {
  uint64_t lo = h->arena_off, hi = h->adopt_off + h->adopt_size;
  return off >= lo && off <= hi && bytes <= hi - off;
}

static int check_range(struct hd_rank *r, const char *what, uint64_t off,
                       uint64_t count, int dtype, char *why, size_t len) {
  uint64_t es = hora_dtype_size(dtype);
  if (!in_arena(&r->layout, off, count * es)) {
    hc_fmt(why, len, "%s [%llu, +%llu) lies outside the arena", what,
           (unsigned long long)off, (unsigned long long)(count * es));
    return HORA_EINVAL;
  }
  if (off % es) {
    hc_fmt(why, len, "%s offset %llu is not aligned to its %s elements", what,
           (unsigned long long)off, hora_dtype_name(dtype));
    return HORA_EINVAL;
  }
  return 0;
}

/* The elements a member must be able to receive, or UINT64_MAX. */
static uint64_t want_recv(const struct hd_comm *c, const struct hp_sqe *e,
                          const int64_t *aux, int member) {
  uint64_t sum = 0;
  switch (e->coll) {
  case HORA_COLL_ALLGATHER:
    if (!aux) return e->count * (uint64_t)c->size;
    for (int i = 0; i < c->size; i++) sum += (uint64_t)aux[i];
    return sum;
  case HORA_COLL_ALLTOALL:
    if (!aux) return e->count;
    for (int i = 0; i < c->size; i++) sum += (uint64_t)aux[c->size + i];
    return sum;
  case HORA_COLL_REDUCESCATTER: {
    struct hd_meta m = {.ndims = e->ndims, .count = e->count};
    memcpy(m.shape, e->shape, sizeof m.shape);
    uint64_t rows = e->ndims ? (uint64_t)e->shape[0] : e->count, first, n;
    hd_rs_block(rows, c->size, member, &first, &n);
    return n * hd_row_elems(&m);
  }
  default:
    return UINT64_MAX;
  }
}

/* Checks e; on success *auxp holds a private copy of its array. */
static int check_entry(struct hd_comm *c, struct hd_rank *r,
                       const struct hp_sqe *e, int64_t **auxp, char *why,
                       size_t len) {
  const struct hd_coll *k = hd_coll(e->coll);
  *auxp = NULL;
  if (!k) {
    hc_fmt(why, len, "unknown collective %u", e->coll);
    return HORA_EINVAL;
  }
  if (e->dtype >= HORA_DTYPE_COUNT) {
    hc_fmt(why, len, "unknown data type %u", e->dtype);
    return HORA_EINVAL;
  }
  if (e->count > UINT64_MAX / 16) {
    hc_fmt(why, len, "element count %llu is too large",
           (unsigned long long)e->count);
    return HORA_EINVAL;
  }
  if (e->ndims > HP_MAX_DIMS) {
    hc_fmt(why, len, "%u dimensions (at most %u)", e->ndims, HP_MAX_DIMS);
    return HORA_EINVAL;
  }
  if (e->ndims) {
    uint64_t prod = 1;
    for (int i = 0; i < e->ndims; i++) {
      if (e->shape[i] < 0 ||
          (e->shape[i] && prod > UINT64_MAX / 16 / (uint64_t)e->shape[i])) {
        hc_fmt(why, len, "dimension %d of the shape is %lld", i,
               (long long)e->shape[i]);
        return HORA_EINVAL;
      }
      prod *= (uint64_t)e->shape[i];
    }
    if (prod != e->count) {
      hc_fmt(why, len, "its shape has %llu elements, but it sends %llu",
             (unsigned long long)prod, (unsigned long long)e->count);
      return HORA_EINVAL;
    }
  }
  if (!(k->traits & HORA_CF_OP) && e->coll != HORA_COLL_BROADCAST &&
      (k->traits & HORA_CF_CTRL) == 0 && e->op >= HORA_OP_COUNT) {
    hc_fmt(why, len, "unknown reduction operation %u", e->op);
    return HORA_EINVAL;
  }
  if (e->group_n > 1 &&
      (e->group_idx >= e->group_n || e->group_n > HP_PLAN_MAX ||
       (k->traits & HORA_CF_CTRL))) {
    if (k->traits & HORA_CF_CTRL)
      hc_fmt(why, len, "a %s cannot be part of a group", k->name);
    else
      hc_fmt(why, len, "tensor %u of a group of %u (at most %u)",
             e->group_idx, e->group_n, HP_PLAN_MAX);
    return HORA_EINVAL;
  }
  int rc = k->check ? k->check(c, r, e, why, len) : 0;
  if (rc < 0) return rc;
  int outsized = (k->traits & HORA_CF_OUT) != 0;
  if ((e->flags & HP_F_RESIDENT) &&
      (rc = check_range(r, "buffer", e->offset, e->count, e->dtype, why,
                        len)) < 0)
    return rc;
  if (outsized && e->count && !(e->flags & HP_F_RESIDENT)) {
    hc_fmt(why, len, "its input must lie in the arena");
    return HORA_EINVAL;
  }
  if (e->flags & HP_F_AUX) {
    if (e->aux_count > (uint64_t)2 * (uint64_t)r->job->desc.size + 2) {
      hc_fmt(why, len, "%llu array entries", (unsigned long long)e->aux_count);
      return HORA_EINVAL;
    }
    if ((rc = check_range(r, "array", e->aux_offset, e->aux_count, HORA_INT64,
                          why, len)) < 0)
      return rc;
    int64_t *aux = malloc((size_t)(e->aux_count ? e->aux_count : 1) * 8);
    if (!aux) {
      hc_fmt(why, len, "horad is out of memory");
      return HORA_ENOMEM;
    }
    memcpy(aux, r->shm + e->aux_offset, (size_t)e->aux_count * 8);
    for (uint64_t i = 0; i < e->aux_count; i++)
      if (aux[i] < 0 ||
          (uint64_t)aux[i] > UINT64_MAX / 64 / (uint64_t)r->job->desc.size) {
        hc_fmt(why, len, "entry %llu of its array is %lld",
               (unsigned long long)i, (long long)aux[i]);
        free(aux);
        return HORA_EINVAL;
      }
    *auxp = aux;
  }
  int member = hd_comm_member(c, r->info.rank);
  if (e->coll == HORA_COLL_PS_ADD) {
    int64_t *v = *auxp;
    for (uint64_t i = 0; i < e->aux_count; i++)
      if (v[i] >= r->job->desc.size || (i && v[i] <= v[i - 1])) {
        hc_fmt(why, len, "process set ranks must be sorted, distinct and in "
               "[0, %d)", r->job->desc.size);
        goto bad;
      }
  }
  if (e->coll == HORA_COLL_ALLGATHER && *auxp &&
      (uint64_t)(*auxp)[member] != e->count) {
    hc_fmt(why, len, "it sends %llu elements, but its receive counts say %lld "
           "for it", (unsigned long long)e->count, (long long)(*auxp)[member]);
    goto bad;
  }
  if (e->coll == HORA_COLL_ALLTOALL && *auxp) {
    uint64_t sum = 0;
    for (int i = 0; i < c->size; i++) sum += (uint64_t)(*auxp)[i];
    if (sum != e->count) {
      hc_fmt(why, len, "its splits add up to %llu elements, but it sends %llu",
             (unsigned long long)sum, (unsigned long long)e->count);
      goto bad;
    }
  }
  if (outsized) {
    uint64_t want = want_recv(c, e, *auxp, member);
    if (e->recv_count < want) {
      hc_fmt(why, len, "its output holds %llu elements, but %llu arrive",
             (unsigned long long)e->recv_count, (unsigned long long)want);
      goto bad;
    }
    if ((rc = check_range(r, "output", e->recv_offset, e->recv_count,
                          e->dtype, why, len)) < 0) {
      free(*auxp);
      *auxp = NULL;
      return rc;
    }
  }
  return 0;
bad:
  free(*auxp);
  *auxp = NULL;
  return HORA_EINVAL;
}

/* ---- readiness -------------------------------------------------------------
 */

static int32_t plan_priority(const struct hd_plan *p) {
  int32_t v = INT32_MIN;
  for (int i = p->cur; i < p->n; i++)
    if (p->t[i]->priority > v) v = p->t[i]->priority;
  return v;
}

static int plan_ctrl(const struct hd_plan *p) {
  for (int i = p->cur; i < p->n; i++)
    if (hd_coll(p->t[i]->meta.coll)->traits & HORA_CF_CTRL) return 1;
  return 0;
}

/* Where p goes in the queue: at its end, or, on one host, where the order
 * is this daemon's to choose, before the first queued plan of lower
 * priority (hora_request_t.priority) that has not started -- the head may
 * have -- and that no operation of control (barrier, join, a process-set
 * change) stands before: nothing passes those, and they pass nothing.
 * Several hosts run the coordinator's order, which holds the priorities
 * (coord.c). */
static void insert_plan(struct hd_comm *c, struct hd_plan *p) {
  struct hd_plan **at = NULL;
  int32_t pr = plan_priority(p);
  /* the queue is walked only for a plan that may overtake the last one
   * (when all are alike, as without priorities, it is appended at once) */
  if (c->nhosts == 1 && c->plan_head && c->plan_tail != c->plan_head &&
      pr > plan_priority(c->plan_tail) && !plan_ctrl(p)) {
    for (struct hd_plan **pp = &c->plan_head->next; *pp; pp = &(*pp)->next)
      if (plan_ctrl(*pp)) at = NULL;
      else if (!at && plan_priority(*pp) < pr) at = pp;
  }
  if (at) { /* *at is queued: p is not the tail */
    p->next = *at;
    *at = p;
    return;
  }
  if (c->plan_tail) c->plan_tail->next = p;
  else c->plan_head = p;
  c->plan_tail = p;
}

/* Queues the plan of tensors v[0..n) (decided, in this order); their
 * engine is the first that can run every one. 0, or HORA_ENOMEM. */
static int queue_plan(struct hd_comm *c, struct hd_tensor *const *v, int n) {
  struct hd_plan *p = plan_new(c, n);
  if (!p) return HORA_ENOMEM;
  p->comm = c;
  p->n = n;
  for (int i = 0; i < n; i++) {
    p->t[i] = v[i];
    v[i]->queued = 1;
    hd_metrics_queued(c, v[i]);
    v[i]->held = 0;
    HD_TL_HOOK(c->job, hd_tl_queued_(v[i]));
  }
  const struct hd_engine *const *e = c->job->engines;
  for (int i = 0; e && e[i] && !p->engine; i++) {
    int all = 1;
    for (int k = 0; k < n && all; k++)
      all = !e[i]->can_run || e[i]->can_run(c->job, v[k]);
    if (all) p->engine = e[i];
  }
  insert_plan(c, p);
  return 0;
}

static int is_ready(const struct hd_comm *c, const struct hd_tensor *t) {
  if (t->queued || t->awaiting || t->held) return 0;
  if (t->meta.coll == HORA_COLL_JOIN) return t->nsubmitted == c->nlocal;
  int n = 0;
  for (int i = 0; i < c->nlocal; i++)
    n += t->part[i].submitted || c->joined[i];
  return n == c->nlocal;
}

/* Local members' disagreements, and what joined members cannot do. */
static int describe_problem(struct hd_comm *c, struct hd_tensor *t, char *msg,
                            size_t len) {
  int ra = hd_comm_rank(c, t->first);
  /* against the first submitter's own (t->meta may have taken a later
   * one's group) */
  for (int i = 0; i < c->nlocal; i++)
    if (i != t->first && t->part[i].submitted &&
        hd_meta_mismatch(t->name, &t->metas[t->first], ra, &t->metas[i],
                         hd_comm_rank(c, i), msg, len))
      return HORA_EMISMATCH;
  for (int i = 0; i < c->nlocal; i++) {
    if (t->part[i].submitted || !c->joined[i]) continue;
    t->part[i].joined = 1;
    if (t->meta.coll == HORA_COLL_BROADCAST &&
        hd_comm_rank(c, i) == t->meta.root) {
      hc_fmt(msg, len, "broadcast '%s' cannot run: its root rank %d has "
             "joined", t->name, t->meta.root);
      return HORA_EINVAL;
    }
    if (t->meta.coll == HORA_COLL_PS_ADD ||
        t->meta.coll == HORA_COLL_PS_REMOVE) {
      hc_fmt(msg, len, "%s cannot run while rank %d has joined",
             hd_coll_name(t->meta.coll), hd_comm_rank(c, i));
      return HORA_EINVAL;
    }
  }
  if (t->meta.coll == HORA_COLL_ALLTOALL) { /* local pairs agree */
    for (int i = 0; i < c->nlocal; i++)
      for (int j = 0; j < c->nlocal; j++) {
        const struct hd_part *pi = &t->part[i], *pj = &t->part[j];
        if (!pi->aux || !pj->aux || pi->joined || pj->joined) continue;
        int64_t sent = pi->aux[c->local_member[j]];
        int64_t want = pj->aux[c->size + c->local_member[i]];
        if (sent != want) {
          hc_fmt(msg, len, "Mismatched alltoall splits on tensor '%s': rank "
                 "%d sends %lld elements to rank %d, which expects %lld.",
                 t->name, hd_comm_rank(c, i), (long long)sent,
                 hd_comm_rank(c, j), (long long)want);
          return HORA_EMISMATCH;
        }
      }
  }
  if (t->meta.coll == HORA_COLL_ALLGATHER) { /* joined members send none */
    for (int i = 0; i < c->nlocal; i++) {
      const struct hd_part *p = &t->part[t->first];
      if (t->part[i].joined && p->aux && p->aux[c->local_member[i]]) {
        hc_fmt(msg, len, "allgather '%s': rank %d has joined, but the receive "
               "counts expect %lld elements from it", t->name,
               hd_comm_rank(c, i), (long long)p->aux[c->local_member[i]]);
        return HORA_EINVAL;
      }
    }
  }
  return 0;
}

/* Whether every local member submitted t with its data in the arena, none
 * joined (an allreduce, allgather or reducescatter the coordinator may
 * fuse with others: the ring then reads and writes those data in place,
 * through no staging area; the others' are packed together, exchange.c). */
static int resident_here(const struct hd_comm *c, const struct hd_tensor *t) {
  if (t->meta.coll != HORA_COLL_ALLREDUCE &&
      t->meta.coll != HORA_COLL_ALLGATHER &&
      t->meta.coll != HORA_COLL_REDUCESCATTER)
    return 0;
  for (int i = 0; i < c->nlocal; i++)
    if (!t->part[i].submitted || !t->part[i].resident || t->part[i].joined ||
        c->joined[i])
      return 0;
  return 1;
}

static void send_readies(struct hd_comm *c);

/* The bytes of a host's part of t through the coordinator (0: the ring). */
static uint32_t star_bytes(const struct hd_job *job, const struct hd_tensor *t) {
  return hd_star_bytes(job, t->meta.coll, t->meta.dtype, t->meta.op,
                       t->meta.count, (t->meta.flags & HD_MF_WIRE16) != 0);
}

/* Multi-host: asks the coordinator; hd_decide() queues it. */
static void tell_coordinator(struct hd_comm *c, struct hd_tensor *t,
                             int status, const char *msg) {
  struct hd_job *job = c->job;
  struct hp_nego_ready m;
  memset(&m, 0, sizeof m);
  m.comm = c->id;
  hd_meta_to_ready(&t->meta, &m);
  m.rank = t->meta.coll == HORA_COLL_JOIN ? c->last_joined
                                          : hd_comm_rank(c, t->first);
  memcpy(m.name, t->name, sizeof m.name);
  if (status < 0) {
    hc_fmt(m.msg, sizeof m.msg, "%s", msg);
    m.status = status;
  }
  if (!status && resident_here(c, t)) m.flags |= HP_NR_RESIDENT;
  m.priority = t->priority;
  if (hd_comm_host_left(c)) { /* a host has left: no decision can come */
    char why[HP_MSG_MAX + 1];
    hc_fmt(why, sizeof why, "%s '%s' cannot run: %s",
           hd_coll_name(t->meta.coll), t->name,
           job->left_msg[0] ? job->left_msg : "a host of the set has left");
    complete_all(t, HORA_EPEERGONE, why);
    remove_tensor(c, t);
    return;
  }
  t->awaiting = 1;
  unsigned char *arrive = hd_metrics_arrivals(c, t, &m);
  /* a small allreduce: this host's part goes with it (ring.c) */
  unsigned char *part = NULL;
  uint32_t np = !status && !t->group && (m.flags & HP_NR_RESIDENT)
                    ? star_bytes(job, t) : 0;
  if (np && (part = malloc(np)) && hd_star_part(c, t, part) == 0) {
    m.data = part;
    m.ndata = np;
  }
  if (c->me == 0) {
    hd_coord_ready(c, 0, &m);
    free(arrive);
    free(part);
    return;
  }
  HD_TL_HOOK(job, hd_tl_flush(job)); /* what came before, first */
  if (!status) { /* numbered in the response cache */
    struct hd_meta key;
    memset(&key, 0, sizeof key);
    hd_meta_from_ready(&m, &key);
    m.cref = (uint8_t)hd_nc_encode(&c->nc_ready,
                                   c->nc_off ? 0 : hd_nc_capacity(job), m.name,
                                   &key, &m.cid);
  }
  hp_enc_nego_ready(&c->ready_out, &m);
  c->ready_data += m.ndata;
  free(arrive);
  free(part);
  if (job->corked) job->readies_held = 1;
  else send_readies(c);
}

static void send_readies(struct hd_comm *c) {
  hd_metrics_nego_sent(c->job, c->ready_out.len - c->ready_data);
  hd_metrics_star_sent(c->job, c->ready_data);
  c->ready_data = 0;
  /* a lost coordinator fails all anyway */
  c->job->link->send_frames(c->job, c->hosts[0], &c->ready_out);
  hp_wbuf_free(&c->ready_out);
}

void hd_send_readies(struct hd_job *job) {
  if (!job->readies_held) return; /* the rings' poll: nothing to look at */
  job->readies_held = 0;
  for (uint32_t k = 0; k < job->ncomms; k++)
    if (job->comms[k] && job->comms[k]->ready_out.len)
      send_readies(job->comms[k]);
}

static void fail_tensor(struct hd_comm *c, struct hd_tensor *t, int status,
                        const char *msg) {
  complete_all(t, status, msg);
  remove_tensor(c, t);
}

/* Every tensor of a group is ready here: they go on together. A problem
 * with one fails them all (they run as one unit or not at all). */
static void group_ready(struct hd_comm *c, struct hd_group *g) {
  uint32_t n = g->n;
  struct hd_tensor **v = calloc(n, sizeof *v);
  char msg[HP_MSG_MAX + 1] = "", one[HP_MSG_MAX + 1];
  int bad = 0;
  if (!v) {
    while (g->nlive) { /* frees g with the last */
      struct hd_tensor *t = NULL;
      for (uint32_t i = 0; i < n && !t; i++) t = g->t[i];
      fail_tensor(c, t, HORA_ENOMEM, "horad is out of memory");
    }
    return;
  }
  for (uint32_t i = 0; i < n; i++) {
    struct hd_tensor *t = g->t[i];
    int rc = describe_problem(c, t, one, sizeof one);
    if (rc && !bad) {
      bad = rc;
      hc_fmt(msg, sizeof msg, "%s (the whole group of %u tensors fails)", one,
             n);
    }
    v[i] = t;
  }
  group_free(c, g); /* the tensors go on without it */
  for (uint32_t i = 0; i < n; i++) v[i]->held = 0;
  if (c->nhosts > 1) { /* the coordinator decides them as one plan */
    for (uint32_t i = 0; i < n; i++) tell_coordinator(c, v[i], bad, msg);
  } else if (bad) {
    hc_info("%s", msg);
    for (uint32_t i = 0; i < n; i++) fail_tensor(c, v[i], bad, msg);
  } else if (queue_plan(c, v, (int)n) < 0) {
    for (uint32_t i = 0; i < n; i++)
      fail_tensor(c, v[i], HORA_ENOMEM, "horad is out of memory");
  }
  free(v);
}

static void make_ready(struct hd_comm *c, struct hd_tensor *t) {
  hd_metrics_ready(c, t);
  if (t->group) { /* waits for the rest of its group */
    t->held = 1;
    if (++t->group->nheld == t->group->n) group_ready(c, t->group);
    return;
  }
  char msg[HP_MSG_MAX + 1] = "";
  int bad = describe_problem(c, t, msg, sizeof msg);
  if (t->meta.coll == HORA_COLL_JOIN) t->value = c->last_joined;
  if (c->nhosts > 1) { /* the other hosts must fail it too */
    tell_coordinator(c, t, bad, msg);
    return;
  }
  if (bad) {
    hc_info("%s", msg);
    fail_tensor(c, t, bad, msg);
    return;
  }
  if (queue_plan(c, &t, 1) < 0)
    fail_tensor(c, t, HORA_ENOMEM, "horad is out of memory");
}

/* Fails the tensors of t's group that wait here (t itself included); the
 * ranks' next step is theirs to decide. */
static void fail_group(struct hd_comm *c, struct hd_tensor *t, int status,
                       const char *msg) {
  struct hd_group *g = t->group;
  if (!g) {
    fail_tensor(c, t, status, msg);
    return;
  }
  char other[HP_MSG_MAX + 1];
  hc_fmt(other, sizeof other, "grouped with tensor '%s', which failed: %s",
         t->name, msg);
  while (g->nlive > 1) {
    struct hd_tensor *o = NULL;
    for (uint32_t i = 0; i < g->n && !o; i++)
      if (g->t[i] && g->t[i] != t) o = g->t[i];
    fail_tensor(c, o, status, other);
  }
  fail_tensor(c, t, status, msg);
}

/* A member joined: what waited for it only may be ready now. */
static void recheck(struct hd_comm *c) {
  for (size_t i = 0; i < c->table_size; i++) {
    struct hd_tensor *t = c->table[i], *next;
    for (; t; t = next) {
      next = t->next_hash;
      if (t->meta.coll != HORA_COLL_JOIN && is_ready(c, t)) make_ready(c, t);
    }
  }
}

/* An operation every local member has joined before it came: it runs
 * here with neutral inputs only (the coordinator sent its metadata). */
static struct hd_tensor *materialize(struct hd_comm *c,
                                     const struct hp_nego_decide *m) {
  if (c->ntensors >= c->table_size / 2 && grow_table(c) < 0) return NULL;
  size_t n = (size_t)c->nlocal;
  struct hd_tensor *t = tensor_new(c);
  if (!t) return NULL;
  hc_fmt(t->name, sizeof t->name, "%s", m->name);
  t->hash = hd_name_hash(t->name);
  hd_meta_from_ready(&m->meta, &t->meta);
  t->t_first = hc_now_ns();
  for (size_t i = 0; i < n; i++) t->part[i].joined = 1;
  struct hd_tensor **pp = slot_of(c, t->name, t->hash);
  t->next_hash = *pp;
  *pp = t;
  c->ntensors++;
  t->awaiting = 1;
  return t;
}

/* The tensor a decision is about, ready to be queued; NULL when it fails
 * (completed here) or is not waiting. */
static struct hd_tensor *take_decision(struct hd_job *job, struct hd_comm *c,
                                       const struct hp_nego_decide *m) {
  struct hd_tensor *t =
      c && c->table_size ? *slot_of(c, m->name, hd_name_hash(m->name)) : NULL;
  if (!t && c && m->status >= 0 && c->nlocal && c->njoined == c->nlocal &&
      m->meta.coll != HORA_COLL_JOIN && !(t = materialize(c, m))) {
    hc_error("out of memory: the job cannot go on");
    hd_teardown(job, "horad is out of memory", 0);
    return NULL;
  }
  if (!t || !t->awaiting) {
    if (job->gone_rank == -1)
      hc_warn_rl("decision for tensor '%s' of process set %u, which is not "
              "waiting for one; ignored", m->name, m->comm);
    return NULL;
  }
  t->awaiting = 0;
  if (m->status < 0) {
    hc_info("%s", m->msg);
    fail_tensor(c, t, m->status, m->msg);
    return NULL;
  }
  t->seq = m->seq;
  t->fuse = (int)m->fuse;
  t->flat = (m->algo & HP_DA_FLAT) != 0;
  c->nc_off = (m->algo & HP_DA_NOCACHE) != 0; /* the coordinator's lead */
  if (t->meta.coll == HORA_COLL_JOIN) t->value = m->value;
  if (m->ndata) { /* the whole result of a small allreduce (ring.c) */
    /* written where each member's data lie: all must be in the arena */
    int ok = 1;
    for (int i = 0; i < c->nlocal; i++)
      ok &= t->part[i].joined || (t->part[i].submitted && t->part[i].resident);
    if (!ok || m->ndata != star_bytes(job, t)) {
      char msg[HP_MSG_MAX + 1];
      hc_fmt(msg, sizeof msg, "%s '%s': the coordinator's result (%u "
             "bytes) does not fit this host's data", hd_coll_name(t->meta.coll),
             t->name, m->ndata);
      hc_warn_rl("%s", msg);
      fail_tensor(c, t, HORA_EPROTO, msg);
      return NULL;
    }
    if (!(t->star = malloc(m->ndata))) {
      fail_tensor(c, t, HORA_ENOMEM, "horad is out of memory");
      return NULL;
    }
    memcpy(t->star, m->data, m->ndata);
    t->nstar = m->ndata;
  }
  return t;
}

int hd_decide_resolve(struct hd_comm *c, struct hp_nego_decide *v,
                      uint32_t n) {
  uint32_t cap = hd_nc_capacity(c->job);
  for (uint32_t k = 0; k < n; k++) {
    if (v[k].cref == HP_CREF_NONE) continue;
    struct hd_meta key;
    memset(&key, 0, sizeof key);
    if (v[k].cref == HP_CREF_SET) hd_meta_from_ready(&v[k].meta, &key);
    if (hd_nc_decode(&c->nc_decide, cap, v[k].cref, v[k].cid, v[k].name,
                     sizeof v[k].name, &key) < 0)
      return -1;
    if (v[k].cref == HP_CREF_USE) {
      uint32_t flags = v[k].meta.flags;
      hd_meta_to_ready(&key, &v[k].meta);
      v[k].meta.flags = flags;
    }
  }
  return 0;
}

void hd_decide(struct hd_job *job, const struct hp_nego_decide *m) {
  hd_decide_plan(job, m, 1);
}

void hd_decide_plan(struct hd_job *job, const struct hp_nego_decide *v,
                    uint32_t n) {
  struct hd_comm *c = n ? hd_comm_get(job, v[0].comm) : NULL;
  struct hd_tensor *one, **ts = n == 1 ? &one : malloc(n * sizeof *ts);
  if (!ts) {
    hc_error("out of memory: the job cannot go on");
    hd_teardown(job, "horad is out of memory", 0);
    return;
  }
  int k = 0, prev = 0; /* whether v[i - 1] was taken */
  for (uint32_t i = 0; i < n; i++) {
    struct hd_tensor *t = take_decision(job, c, &v[i]);
    if (t) {
      if (!prev) t->fuse = 0; /* what it was fused with is not here */
      ts[k++] = t;
    }
    prev = t != NULL;
  }
  if (k && queue_plan(c, ts, k) < 0)
    for (int i = 0; i < k; i++)
      fail_tensor(c, ts[i], HORA_ENOMEM, "horad is out of memory");
  if (ts != &one) free(ts);
  if (c) hd_comm_progress(c);
  hd_flush_wakeups(job);
}


void hd_fail_undecided(struct hd_job *job, int from, int left,
                       const char *why) {
  if (job->gone_rank == HD_GONE_DEADLOCK) { /* it fails as the deadlock */
    hd_fail_all(job);
    return;
  }
  for (uint32_t k = 0; k < job->ncomms; k++) {
    struct hd_comm *c = job->comms[k];
    if (!c || c->removed || c->nhosts < 2) continue;
    int in = 0;
    for (int j = 0; j < c->nhosts; j++) in |= c->hosts[j] == left;
    if (!in) continue; /* a set without that host goes on */
    if (c->me == 0) {
      hd_coord_fail(c, why);
      continue;
    }
    if (c->hosts[0] != from) continue; /* its coordinator will say */
    for (size_t i = 0; i < c->table_size; i++) {
      struct hd_tensor **pp = &c->table[i];
      while (*pp) {
        struct hd_tensor *t = *pp;
        if (!t->awaiting) {
          pp = &t->next_hash;
          continue;
        }
        char msg[HP_MSG_MAX + 1];
        hc_fmt(msg, sizeof msg, "%s '%s' cannot run: %s",
               hd_coll_name(t->meta.coll), t->name, why);
        complete_all(t, HORA_EPEERGONE, msg);
        *pp = t->next_hash;
        c->ntensors--;
        free_tensor(c, t);
      }
    }
  }
  hd_flush_wakeups(job);
}

/* ---- submissions ------------------------------------------------------------
 */

static void fill_meta(struct hd_meta *m, const struct hp_sqe *e,
                      const int64_t *aux, uint64_t naux) {
  memset(m, 0, sizeof *m);
  m->coll = e->coll;
  m->dtype = e->dtype;
  m->op = e->op;
  m->ndims = e->ndims;
  m->root = e->root;
  m->count = e->count;
  memcpy(m->shape, e->shape, sizeof m->shape);
  m->prescale = e->prescale == 0 ? 1.0 : e->prescale;
  m->postscale = e->postscale == 0 ? 1.0 : e->postscale;
  /* alltoall splits differ per rank by design: local pairs are checked
   * when it is ready, remote ones by the sizes that arrive */
  if (aux && e->coll != HORA_COLL_ALLTOALL)
    m->aux_hash = hd_aux_hash(aux, naux);
  const struct hd_coll *k = hd_coll(e->coll);
  if (!k || !(k->traits & HORA_CF_OP)) {
    m->prescale = m->postscale = 1.0;
    if (e->coll != HORA_COLL_REDUCESCATTER) m->op = 0;
  }
  if (e->coll != HORA_COLL_BROADCAST && e->coll != HORA_COLL_PS_REMOVE)
    m->root = 0;
  if (e->group_n > 1) {
    m->group = e->group;
    m->group_n = e->group_n;
    m->group_idx = e->group_idx;
  }
  if (e->coll == HORA_COLL_ALLREDUCE && (e->flags & HP_F_WIRE16))
    m->flags = HD_MF_WIRE16;
  if (e->flags & HP_F_DEVICE) m->flags |= HD_MF_DEVICE;
  else if (e->flags & HP_F_HOSTMEM) m->flags |= HD_MF_HOSTMEM;
}

/* The array an allgather or alltoall without one implies. */
static int64_t *implied_aux(const struct hd_comm *c, const struct hp_sqe *e) {
  size_t n = e->coll == HORA_COLL_ALLTOALL ? 2 * (size_t)c->size
                                           : (size_t)c->size;
  int64_t *v = malloc(n * sizeof *v);
  if (!v) return NULL;
  int64_t each = e->coll == HORA_COLL_ALLTOALL
                     ? (int64_t)(e->count / (uint64_t)c->size)
                     : (int64_t)e->count;
  for (size_t i = 0; i < n; i++) v[i] = each;
  return v;
}

static void refuse(struct hd_rank *r, const struct hp_sqe *e, int rc,
                   const char *fmt, const char *why) {
  char msg[HP_MSG_MAX + 1];
  hc_fmt(msg, sizeof msg, fmt, r->info.rank, hd_coll_name(e->coll), e->name,
         why);
  hd_complete(r, e->id, rc, msg);
}

void hd_submit(struct hd_rank *r, const struct hp_sqe *e) {
  struct hd_job *job = r->job;
  char why[HP_MSG_MAX + 1];
  if (r->gone) return;
  struct hd_comm *c = hd_comm_get(job, e->comm);
  if (!c || c->removed) {
    hc_fmt(why, sizeof why, "process set %u does not exist%s", e->comm,
           c ? " any more (it was removed)" : "");
    refuse(r, e, HORA_ENOSET, "rank %d: %s '%s': %s", why);
    return;
  }
  int idx = c->part_of[r->idx];
  if (idx < 0) {
    hc_fmt(why, sizeof why, "rank %d is not a member of process set %u",
           r->info.rank, c->id);
    refuse(r, e, HORA_ENOTMEMBER, "rank %d: %s '%s': %s", why);
    return;
  }
  int64_t *aux = NULL;
  int rc = check_entry(c, r, e, &aux, why, sizeof why);
  if (rc < 0) {
    refuse(r, e, rc, "rank %d: bad %s request for tensor '%s': %s", why);
    return;
  }
  if (job->gone_rank != -1) {
    char msg[HP_MSG_MAX + 1];
    hc_fmt(msg, sizeof msg, "%s '%s' cannot run: %s", hd_coll_name(e->coll),
           e->name, job->gone_msg);
    hd_complete(r, e->id,
                hd_gone_status(job), msg);
    free(aux);
    return;
  }
  if ((e->coll == HORA_COLL_ALLGATHER || e->coll == HORA_COLL_ALLTOALL) &&
      !aux && !(aux = implied_aux(c, e))) {
    hd_complete(r, e->id, HORA_ENOMEM, "horad is out of memory");
    return;
  }
  if (c->ntensors >= c->table_size / 2 && grow_table(c) < 0) {
    hd_complete(r, e->id, HORA_ENOMEM, "horad is out of memory");
    free(aux);
    return;
  }
  uint64_t naux = !aux ? 0
                 : e->coll == HORA_COLL_ALLTOALL ? 2u * (uint64_t)c->size
                 : e->aux_count ? e->aux_count : (uint64_t)c->size;
  uint64_t hash = hd_name_hash(e->name);
  struct hd_tensor **pp = slot_of(c, e->name, hash), *t = *pp;
  int fresh = !t;
  if (!t) {
    t = tensor_new(c);
    if (!t) {
      hd_complete(r, e->id, HORA_ENOMEM, "horad is out of memory");
      free(aux);
      return;
    }
    memcpy(t->name, e->name, strnlen(e->name, HP_NAME_MAX));
    t->hash = hash;
    fill_meta(&t->meta, e, aux, naux);
    t->first = idx;
    t->t_first = hc_now_ns();
    if (t->meta.group_n && (rc = group_attach(c, t, why, sizeof why)) < 0) {
      tensor_release(c, t);
      refuse(r, e, rc, "rank %d: bad %s request for tensor '%s': %s", why);
      free(aux);
      return;
    }
    *pp = t;
    c->ntensors++;
    HD_AT_HOOK(job, hd_at_submitted_(job));
  } else if (t->part[idx].submitted) {
    char msg[HP_MSG_MAX + 1];
    hc_fmt(msg, sizeof msg,
           "rank %d submitted tensor '%s' while an operation of the same name "
           "is still in flight on that rank; names of pending operations must "
           "be unique",
           r->info.rank, e->name);
    hd_complete(r, e->id, HORA_EDUPNAME, msg);
    free(aux);
    return;
  } else if (t->queued || t->awaiting) {
    char msg[HP_MSG_MAX + 1];
    hc_fmt(msg, sizeof msg, "rank %d submitted tensor '%s' after it ran "
           "without it (the rank had joined)", r->info.rank, e->name);
    hd_complete(r, e->id, HORA_EINVAL, msg);
    free(aux);
    return;
  }
  if (!t->group && e->group_n > 1) {
    /* a rank that submitted it alone came first: the group is still
     * assembled (and fails as a whole on the mismatch), so that none of
     * its other tensors waits for this one */
    t->meta.group = e->group;
    t->meta.group_n = e->group_n;
    t->meta.group_idx = e->group_idx;
    if (group_attach(c, t, why, sizeof why) < 0)
      t->meta.group = t->meta.group_n = t->meta.group_idx = 0;
  }
  struct hd_part *p = &t->part[idx];
  p->id = e->id;
  p->submitted = 1;
  if (fresh || e->priority > t->priority) t->priority = e->priority;
  hd_metrics_submit(t, idx);
  p->resident = (e->flags & HP_F_RESIDENT) != 0;
  p->offset = e->offset;
  p->count = e->count;
  p->recv_offset = e->recv_offset;
  p->recv_count = e->recv_count;
  p->aux = aux;
  p->naux = naux;
  hd_metrics_adopted(job, &r->layout, e);
  if (fresh) t->metas[idx] = t->meta; /* what fill_meta gave it above */
  else fill_meta(&t->metas[idx], e, aux, naux);
  t->nsubmitted++;
  HD_TL_HOOK(job, hd_tl_submitted_(t, r->info.rank));
  if (e->coll == HORA_COLL_JOIN) {
    c->joined[idx] = 1;
    c->njoined++;
    c->last_joined = r->info.rank;
  }
  /* what waited only for this member goes first: the join must not reach
   * the coordinator before them */
  if (e->coll == HORA_COLL_JOIN) recheck(c);
  if (is_ready(c, t)) make_ready(c, t);
}

static struct hd_tensor *running(struct hd_comm *c, struct hd_rank *r,
                                 uint64_t id, struct hd_part **pp) {
  int idx = c->part_of[r->idx];
  if (idx < 0) return NULL;
  for (struct hd_plan *p = c->plan_head; p; p = p->next)
    for (int i = p->cur; i < p->n; i++) {
      struct hd_tensor *t = p->t[i];
      if (t->part[idx].submitted && t->part[idx].id == id) {
        *pp = &t->part[idx];
        return t;
      }
    }
  return NULL;
}

void hd_cancel(struct hd_rank *r, const struct hp_sqe *in) {
  struct hp_sqe e = *in;
  e.name[HP_NAME_MAX] = '\0';
  struct hd_comm *c = hd_comm_get(r->job, e.comm);
  int idx = c ? c->part_of[r->idx] : -1;
  struct hd_tensor *t = idx >= 0 && c->table_size
                            ? *slot_of(c, e.name, hd_name_hash(e.name))
                            : NULL;
  if (!t || !t->part[idx].submitted || t->part[idx].id != e.id ||
      t->queued || t->awaiting || !t->group) {
    hc_warn_rl("rank %d: cancel of '%s', which is not a waiting part of a "
               "group; ignored", r->info.rank, e.name);
    return;
  }
  struct hd_part *p = &t->part[idx];
  if (t->held) {
    t->held = 0;
    t->group->nheld--;
  }
  p->submitted = 0;
  free(p->aux);
  p->aux = NULL;
  t->nsubmitted--;
  char msg[HP_MSG_MAX + 1];
  hc_fmt(msg, sizeof msg, "rank %d withdrew %s '%s': its group could not be "
         "submitted whole", r->info.rank, hd_coll_name(t->meta.coll), t->name);
  hd_complete(r, e.id, HORA_ECANCELED, msg);
  if (t->nsubmitted == 0) {
    remove_tensor(c, t);
    return;
  }
  /* the reference goes to one still in: grouped if any is (a mismatch
   * then fails the group), else the tensor leaves the group */
  int any = -1, grouped = -1;
  for (int i = 0; i < c->nlocal; i++)
    if (t->part[i].submitted) {
      if (any < 0) any = i;
      if (grouped < 0 && t->metas[i].group_n) grouped = i;
    }
  if (grouped < 0) group_unlink(t);
  if (grouped < 0 || !t->part[t->first].submitted) {
    t->first = grouped < 0 ? any : grouped;
    t->meta = t->metas[t->first];
  }
}

void hd_chunk_event(struct hd_rank *r, const struct hp_sqe *e) {
  struct hd_job *job = r->job;
  struct hd_tensor *t = NULL;
  struct hd_part *p = NULL;
  for (uint32_t k = 0; k < job->ncomms && !t; k++)
    if (job->comms[k]) t = running(job->comms[k], r, e->id, &p);
  if (!t || p->resident || r->staging_owner != t) {
    hc_debug("rank %d: chunk event for an operation that is not running; "
             "ignored", r->info.rank);
    return;
  }
  uint64_t *ctr = e->kind == HP_SQ_CHUNK_READY ? &p->ready : &p->done;
  /* only chunks the daemon asked for: a rank cannot make it use staging
   * data it has not copied yet */
  int asked = e->kind == HP_SQ_CHUNK_READY ? *ctr < p->issued
              : t->comm->nhosts == 1      ? *ctr < t->reduced
                                          : 1;
  if (e->chunk != *ctr || *ctr >= t->nchunks || !asked) {
    hc_warn_rl("rank %d: chunk %llu out of order on '%s'; ignored",
               r->info.rank, (unsigned long long)e->chunk, t->name);
    return;
  }
  (*ctr)++;
}

/* ---- running ----------------------------------------------------------------
 */

static void run_ctrl(struct hd_comm *c, struct hd_tensor *t);

void hd_plan_next(struct hd_plan *p) {
  struct hd_tensor *t = p->t[p->cur];
  p->t[p->cur++] = NULL;
  remove_tensor(p->comm, t);
}

/* Whether every operation of p runs at once, in place in the arenas: an
 * allreduce or broadcast none of whose members is streamed. */
static int plan_resident(const struct hd_plan *p) {
  for (int k = p->cur; k < p->n; k++) {
    struct hd_tensor *t = p->t[k];
    if (t->meta.coll != HORA_COLL_ALLREDUCE &&
        t->meta.coll != HORA_COLL_BROADCAST)
      return 0;
    for (int i = 0; i < p->comm->nlocal; i++)
      if (hd_needs_in(t, i) || hd_needs_out(t, i)) return 0;
  }
  return 1;
}

/* Whether every operation of p has its result from the coordinator
 * (hd_tensor.star: a small allreduce across hosts): it completes here
 * with no traffic, wherever it stands in the queue. */
static int plan_star(const struct hd_plan *p) {
  for (int k = p->cur; k < p->n; k++)
    if (!p->t[k]->star) return 0;
  return 1;
}

/* Whether p is one operation that may run in the ring's urgent lane
 * beside the one the ring runs (xhost/ring.c). */
static int plan_lane(const struct hd_plan *p) {
  return p->n - p->cur == 1 && hd_xhost_lane(p->comm, p->t[p->cur]);
}

/* Across hosts, the head waiting on the ring: the first queued plan of
 * higher priority than the head's (up to an operation of control) that
 * fits the ring's urgent lane runs there, or runs on there. Each host's
 * queue keeps the coordinator's order, whatever runs in the lane: a host
 * where it does not overtake (its large one ended already) runs it in
 * turn, and the data meet all the same. */
static void overtake_lane(struct hd_comm *c, int32_t pr) {
  struct hd_plan *prev = c->plan_head, *q;
  while ((q = prev->next) && !plan_ctrl(q)) {
    if (plan_priority(q) > pr && q->engine && plan_resident(q) &&
        plan_lane(q)) {
      if (!q->engine->progress(c->job, q)) return; /* it runs on */
      prev->next = q->next;
      if (c->plan_tail == q) c->plan_tail = prev;
      plan_release(c, q);
      continue;
    }
    prev = q;
  }
}

/* Its head waiting (one host: a streamed operation between chunks, or a
 * large one in the arenas between pieces; several hosts: for the other
 * hosts' data): the queued plans of higher priority that run at once
 * go now, so that a large operation of low priority is in effect split
 * around them. On one host those are the ones in the arenas; across
 * hosts, those whose result came with the decision, which every host
 * can write out of turn, and (overtake_lane) one allreduce or broadcast
 * in the arenas (up to 8 MiB) beside the ring's, in its urgent lane.
 * After the head and up to an operation of control, insert_plan keeps
 * the queue in order of priority (across hosts, the coordinator's
 * order), so those come first; the first that cannot run now stops the
 * others behind it. */
static void overtake(struct hd_comm *c) {
  struct hd_plan *head = c->plan_head, *q;
  int32_t pr = plan_priority(head);
  while ((q = head->next) && !plan_ctrl(q) && plan_priority(q) > pr &&
         q->engine && plan_resident(q) &&
         (c->nhosts == 1 || plan_star(q)) &&
         q->engine->progress(c->job, q)) {
    head->next = q->next;
    if (c->plan_tail == q) c->plan_tail = head;
    plan_release(c, q);
  }
  if (c->nhosts > 1) overtake_lane(c, pr);
}

void hd_comm_progress(struct hd_comm *c) {
  struct hd_plan *p;
  while ((p = c->plan_head)) {
    while (p->cur < p->n) {
      struct hd_tensor *t = p->t[p->cur];
      if (hd_coll(t->meta.coll)->traits & HORA_CF_CTRL) {
        run_ctrl(c, t);
      } else if (!p->engine) {
        complete_all(t, HORA_ENOTSUP, "no engine can run this operation");
      } else {
        if (!p->engine->progress(c->job, p)) {
          overtake(c);
          goto wait;
        }
        break; /* the engine went through the whole plan */
      }
      hd_plan_next(p);
    }
    c->plan_head = p->next;
    if (!c->plan_head) c->plan_tail = NULL;
    plan_release(c, p);
  }
wait:
  /* the coordinator's batch of decisions waited for this host's queue */
  if (c->coord && (!c->plan_head || !c->plan_head->next)) hd_coord_flush(c);
  if (c->job->staging_freed) hd_run_ready(c->job); /* another set may go on */
}

void hd_run_ready(struct hd_job *job) {
  if (job->in_run_ready) return; /* the loop below goes round again */
  job->in_run_ready = 1;
  job->resume = 0; /* set again by what still has pieces to run */
  do {
    job->staging_freed = 0;
    /* a communicator may be added while this runs: index, not pointer */
    for (uint32_t k = 0; k < job->ncomms; k++)
      if (job->comms[k] && job->comms[k]->plan_head)
        hd_comm_progress(job->comms[k]);
  } while (job->staging_freed);
  job->in_run_ready = 0;
}

static int same_members(const struct hd_comm *c, const int64_t *v, uint64_t n) {
  if ((uint64_t)c->size != n) return 0;
  for (uint64_t i = 0; i < n; i++)
    if (c->members[i] != v[i]) return 0;
  return 1;
}

/* Barrier, join and process sets: decided is done. */
static void run_ctrl(struct hd_comm *c, struct hd_tensor *t) {
  struct hd_job *job = c->job;
  char msg[HP_MSG_MAX + 1];
  switch (t->meta.coll) {
  case HORA_COLL_JOIN:
    memset(c->joined, 0, (size_t)c->nlocal);
    c->njoined = 0;
    c->last_joined = -1;
    complete_all(t, t->value < 0 ? 0 : t->value, NULL);
    return;
  case HORA_COLL_PS_ADD: {
    const struct hd_part *p = &t->part[t->first];
    for (uint32_t k = 0; k < job->ncomms; k++)
      if (job->comms[k] && !job->comms[k]->removed &&
          same_members(job->comms[k], p->aux, p->naux)) {
        hc_fmt(msg, sizeof msg, "Attempted to add a duplicate process set: "
               "process set %u has the same ranks", k);
        complete_all(t, HORA_EEXIST, msg);
        return;
      }
    int32_t *ranks = malloc((size_t)p->naux * sizeof *ranks);
    for (uint64_t i = 0; ranks && i < p->naux; i++)
      ranks[i] = (int32_t)p->aux[i];
    struct hd_comm *n = ranks ? hd_comm_new(job, ranks, (int)p->naux) : NULL;
    free(ranks);
    if (!n) {
      complete_all(t, HORA_ENOMEM, "horad is out of memory");
      return;
    }
    hc_debug("process set %u added (%d ranks)", n->id, n->size);
    hd_coord_replay(n);
    complete_all(t, (int)n->id, NULL);
    return;
  }
  case HORA_COLL_PS_REMOVE: {
    struct hd_comm *x = t->meta.root > 0
                            ? hd_comm_get(job, (uint32_t)t->meta.root) : NULL;
    if (!x || x->removed) {
      hc_fmt(msg, sizeof msg, "process set %d cannot be removed: %s",
             t->meta.root, t->meta.root == 0 ? "it is the global set"
                                             : "no such process set");
      complete_all(t, HORA_ENOSET, msg);
      return;
    }
    x->removed = 1;
    /* what is still pending there can never run now; the engines let go
     * of it first */
    for (int i = 0; job->engines && job->engines[i]; i++)
      if (job->engines[i]->abort) job->engines[i]->abort(job, x);
    hc_fmt(msg, sizeof msg, "process set %u was removed", x->id);
    for (size_t i = 0; i < x->table_size; i++)
      while (x->table[i]) {
        struct hd_tensor *o = x->table[i];
        complete_all(o, HORA_ENOSET, msg);
        x->table[i] = o->next_hash;
        x->ntensors--;
        free_tensor(x, o);
      }
    free_plans(x);
    complete_all(t, 0, NULL);
    return;
  }
  default: /* barrier */
    complete_all(t, 0, NULL);
  }
}

void hd_fail_all(struct hd_job *job) {
  int status = hd_gone_status(job);
  for (uint32_t k = 0; k < job->ncomms; k++) {
    struct hd_comm *c = job->comms[k];
    if (!c) continue;
    for (int i = 0; job->engines && job->engines[i]; i++)
      if (job->engines[i]->abort) job->engines[i]->abort(job, c);
    free_plans(c);
    for (size_t i = 0; i < c->table_size; i++) {
      struct hd_tensor *t;
      while ((t = c->table[i])) {
        char msg[HP_MSG_MAX + 1];
        hc_fmt(msg, sizeof msg, "%s '%s' cannot complete: %s",
               hd_coll_name(t->meta.coll), t->name, job->gone_msg);
        complete_all(t, status, msg);
        c->table[i] = t->next_hash;
        c->ntensors--;
        free_tensor(c, t);
      }
    }
  }
  hd_flush_wakeups(job);
}

/* Names the local members that have not submitted t, e.g. "1, 3". */
static void missing_ranks(struct hd_comm *c, struct hd_tensor *t, char *buf,
                          size_t len) {
  size_t n = 0;
  buf[0] = '\0';
  for (int i = 0; i < c->nlocal && n + 16 < len; i++)
    if (!t->part[i].submitted && !c->joined[i])
      n += (size_t)snprintf(buf + n, len - n, "%s%d", n ? ", " : "",
                            hd_comm_rank(c, i));
}

/* The stall inspector: some ranks submitted a tensor, others not, for too
 * long. Warns once per tensor, naming the missing ranks; past the shutdown
 * time fails it on the ranks that wait. */
static void check_comm_stalls(struct hd_comm *c, uint64_t now) {
  struct hd_job *job = c->job;
again:
  for (size_t i = 0; i < c->table_size; i++) {
    struct hd_tensor **pp = &c->table[i];
    while (*pp) {
      struct hd_tensor *t = *pp;
      uint64_t age = now - t->t_first;
      if (t->queued || t->awaiting || t->held) {
        pp = &t->next_hash;
        continue;
      }
      int fail = job->stall_fail_ns && age >= job->stall_fail_ns;
      int warn = job->stall_warn_ns && age >= job->stall_warn_ns &&
                 !t->stall_warned;
      if (!fail && !warn) { /* the common case: cheap, however many wait */
        pp = &t->next_hash;
        continue;
      }
      char who[256], msg[HP_MSG_MAX + 1];
      missing_ranks(c, t, who, sizeof who);
      if (fail) {
        hc_fmt(msg, sizeof msg, "%s '%s' stalled for %llu s: rank(s) %s never "
               "submitted it", hd_coll_name(t->meta.coll), t->name,
               (unsigned long long)(age / 1000000000u), who);
        hc_error("%s [H1002]", msg);
        hd_metrics_stall(job, 1);
        if (c->nhosts > 1 && c->me == 0) hd_coord_stall(c, t->name);
        if (t->group) { /* the rest of its group waits here too */
          fail_group(c, t, HORA_ESTALL, msg);
          goto again; /* the table changed under pp */
        }
        complete_all(t, HORA_ESTALL, msg);
        *pp = t->next_hash;
        c->ntensors--;
        free_tensor(c, t);
        continue;
      }
      if (warn) {
        t->stall_warned = 1;
        hd_metrics_stall(job, 0);
        hc_warn_rl("stall: %s '%s' has waited %llu s for rank(s) %s; the other "
                "ranks submitted it. Ranks may be issuing collectives in a "
                "different order or with different names. [H1001]",
                hd_coll_name(t->meta.coll), t->name,
                (unsigned long long)(age / 1000000000u), who);
      }
      pp = &t->next_hash;
    }
  }
  if (c->nhosts > 1 && c->me == 0) hd_coord_check_stalls(c);
}

void hd_check_stalls(struct hd_job *job) {
  uint64_t now = hc_now_ns();
  for (uint32_t k = 0; k < job->ncomms; k++)
    if (job->comms[k] && !job->comms[k]->removed)
      check_comm_stalls(job->comms[k], now);
  hd_flush_wakeups(job);
}
