/* coord.c -- negotiation across hosts, on a communicator's coordinator
 * (its first host; host 0 for the global set).
 *
 * A daemon whose local ranks have all submitted a tensor (and agree on it)
 * says NEGO_READY to the coordinator, with the metadata. When every host
 * has, the coordinator compares the hosts' metadata and broadcasts one
 * NEGO_DECIDE: run it as decision number `seq`, or fail it on every rank
 * with a message naming two ranks and their values (the job goes on).
 * Every daemon runs decisions in the order of their numbers, so all hosts
 * run the same collectives in the same order whatever order their ranks
 * submitted them in. */
#define HC_LOG_SUB HC_SUB_COORD
#include <stdlib.h>
#include <string.h>

#include "autotune.h"
#include "daemon.h"
#include "metrics.h"

struct centry {
  struct centry *next;
  struct hp_nego_ready first; /* the first host's metadata */
  int32_t last_rank; /* join: the rank the last host reported */
  int nready;
  int mismatch;
  char msg[HP_MSG_MAX + 1];
  uint64_t t_first;
  int warned;
  /* a small allreduce (xhost/ring.c): each host's part, by host, until
   * every host's is here; then the whole, reduced in host order */
  unsigned char **parts; /* partcap of them, by host */
  uint32_t partcap, npart, nparts; /* npart: bytes of each; nparts: kept */
  unsigned char *whole;
  unsigned char seen[]; /* one per host */
};

/* A group whose tensors are decided together: those every host is ready
 * for wait here, out of the table, for the rest. */
struct cgroup {
  struct cgroup *next;
  uint64_t key;
  uint32_t n, nready;
  struct centry *e[]; /* by group_idx */
};

struct hd_coord {
  struct centry **table;
  size_t size, n;
  uint64_t seq;
  unsigned char *joined; /* hosts whose ranks have all joined */
  struct cgroup *groups;
  /* decided, not sent yet: they go out together as one NEGO_PLAN, in
   * order (batch[i] is decision batch_seq + i), fused where they can be */
  struct centry **batch;
  uint32_t nbatch, capbatch;
  uint64_t batch_seq, batch_bytes, batch_t0;
  /* the response cache (ncache.c), by host position: the numbers each
   * host gives its READYs, and those this coordinator gives its
   * decisions to each */
  struct hd_ncache *nc_ready, *nc_decide;
};

static void centry_free(struct centry *e) {
  if (!e) return;
  for (uint32_t i = 0; e->parts && i < e->partcap; i++) free(e->parts[i]);
  free(e->parts);
  free(e->whole);
  free(e);
}

static struct hd_coord *coord(struct hd_comm *c) {
  if (!c->coord) {
    c->coord = calloc(1, sizeof *c->coord);
    if (c->coord) {
      /* a session's decisions are numbered apart from an earlier one's,
       * whose data may still be on their way after a failure */
      c->coord->seq = HD_SEQ_FIRST(c->job->session);
      c->coord->size = 256;
      c->coord->table = calloc(c->coord->size, sizeof *c->coord->table);
      c->coord->joined = calloc((size_t)c->nhosts, 1);
      c->coord->nc_ready = calloc((size_t)c->nhosts, sizeof(struct hd_ncache));
      c->coord->nc_decide =
          calloc((size_t)c->nhosts, sizeof(struct hd_ncache));
      if (!c->coord->table || !c->coord->joined || !c->coord->nc_ready ||
          !c->coord->nc_decide) {
        free(c->coord->table);
        free(c->coord->joined);
        free(c->coord->nc_ready);
        free(c->coord->nc_decide);
        free(c->coord);
        c->coord = NULL;
      }
    }
  }
  return c->coord;
}

static int mismatch(const struct hp_nego_ready *a,
                    const struct hp_nego_ready *b, char *msg, size_t len) {
  struct hd_meta ma, mb;
  memset(&ma, 0, sizeof ma);
  memset(&mb, 0, sizeof mb);
  hd_meta_from_ready(a, &ma);
  hd_meta_from_ready(b, &mb);
  return hd_meta_mismatch(a->name, &ma, a->rank, &mb, b->rank, msg, len);
}

/* How the hosts run an operation of collective `coll` that this host
 * decides (HP_DA_*): the job's hierarchical_allreduce/_allgather and
 * cache settings, or the trial of host 0's autotuning (autotune.h). */
uint32_t hd_coord_algo(const struct hd_job *job, int coll) {
  uint32_t a = 0;
  if ((coll == HORA_COLL_ALLREDUCE &&
       !hd_at_choice(job->at, AT_HIER_ALLREDUCE, !hd_flat_allreduce(&job->knobs))) ||
      (coll == HORA_COLL_ALLGATHER &&
       !hd_at_choice(job->at, AT_HIER_ALLGATHER, !hd_flat_allgather(&job->knobs))))
    a |= HP_DA_FLAT;
  if (!hd_at_choice(job->at, AT_CACHE, 1)) a |= HP_DA_NOCACHE;
  return a;
}

/* The decision on e (status 0: run it as decision number `seq`; seq
 * UINT64_MAX: it fails) as an entry of a NEGO_DECIDE or NEGO_PLAN. */
static void fill_decide(struct hd_comm *c, struct hp_nego_decide *v,
                        const struct centry *e, uint64_t seq, int status,
                        const char *msg) {
  memset(v, 0, sizeof *v);
  v->comm = c->id;
  v->seq = seq;
  v->status = status;
  v->value = e->last_rank;
  v->meta = e->first;
  memcpy(v->name, e->first.name, sizeof v->name);
  if (status) hc_fmt(v->msg, sizeof v->msg, "%s", msg);
  v->algo = hd_coord_algo(c->job, e->first.coll);
  /* a small allreduce's whole result, unless it goes round a flat ring */
  if (!status && seq != UINT64_MAX && e->whole && !(v->algo & HP_DA_FLAT)) {
    v->data = e->whole;
    v->ndata = e->npart;
  }
  hd_metrics_coord_decided(c, v->name, !status && seq != UINT64_MAX);
}

/* Numbers v[0..n) for host i in the response cache: each entry that
 * carries no failure gets its cref and cid (the rest: HP_CREF_NONE). */
static void number_decides(struct hd_comm *c, int i, struct hp_nego_decide *v,
                           uint32_t n) {
  uint32_t cap = hd_at_choice(c->job->at, AT_CACHE, 1)
                     ? hd_nc_capacity(c->job) : 0;
  for (uint32_t k = 0; k < n; k++) {
    v[k].cref = HP_CREF_NONE;
    if (!cap || v[k].status || v[k].msg[0] || v[k].seq == UINT64_MAX)
      continue;
    struct hd_meta key;
    memset(&key, 0, sizeof key);
    hd_meta_from_ready(&v[k].meta, &key);
    v[k].cref = (uint8_t)hd_nc_encode(&c->coord->nc_decide[i], cap, v[k].name,
                                      &key, &v[k].cid);
  }
}

/* Sends the decisions v[0..n) (one: NEGO_DECIDE, more: NEGO_PLAN) to
 * every host that said ready for them (seen): only those hold them (a
 * stalled operation fails only where it was submitted); when they run
 * (fails 0), also to the hosts whose ranks all joined, which run them
 * with neutral inputs. This host's own go straight to hd_decide_plan. */
static void send_decides(struct hd_comm *c, const unsigned char *seen,
                         struct hp_nego_decide *v, uint32_t n, int fails) {
  struct hd_job *job = c->job;
  unsigned char *joined = c->coord->joined;
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  uint64_t data = 0; /* small allreduces' results: data, not negotiation */
  for (uint32_t k = 0; k < n; k++) data += v[k].data ? v[k].ndata : 0;
  for (int i = 1; i < c->nhosts; i++) {
    if (!seen[i] && (!joined[i] || fails)) continue;
    number_decides(c, i, v, n);
    if (n == 1) hp_enc_nego_decide(&w, v);
    else hp_enc_nego_plan(&w, v, n);
    hd_metrics_nego_sent(job, w.len - data);
    hd_metrics_star_sent(job, data);
    job->link->send_frames(job, c->hosts[i], &w);
  }
  hp_wbuf_free(&w);
  for (uint32_t k = 0; k < n; k++) v[k].cref = HP_CREF_NONE;
  if (seen[0] || (joined[0] && !fails)) job->up->decide(job, v, n);
}

int hd_coord_ready_from(struct hd_comm *cm, int host,
                        struct hp_nego_ready *m) {
  struct hd_coord *c = coord(cm);
  if (m->cref != HP_CREF_NONE) {
    struct hd_meta key;
    memset(&key, 0, sizeof key);
    if (m->cref == HP_CREF_SET) hd_meta_from_ready(m, &key);
    if (!c || host <= 0 || host >= cm->nhosts ||
        hd_nc_decode(&c->nc_ready[host], hd_nc_capacity(cm->job), m->cref,
                     m->cid, m->name, sizeof m->name, &key) < 0)
      return -1;
    if (m->cref == HP_CREF_USE) {
      uint32_t flags = m->flags;
      hd_meta_to_ready(&key, m);
      m->flags = flags; /* this time's (RESIDENT) */
    }
  }
  hd_coord_ready(cm, host, m);
  return 0;
}

static void send_decision(struct hd_comm *c, struct centry *e, uint64_t seq,
                          int status) {
  if (seq != UINT64_MAX) hd_coord_flush(c); /* decisions go in order */
  struct hp_nego_decide m;
  fill_decide(c, &m, e, seq, status, e->msg);
  send_decides(c, e->seen, &m, 1, status || seq == UINT64_MAX);
}

static int entry_status(const struct centry *e) {
  return e->mismatch ? (e->mismatch < 0 ? e->mismatch : HORA_EMISMATCH) : 0;
}

/* ---- fusion ---------------------------------------------------------------
 *
 * Allreduces decided while this host still has work of the set queued
 * wait in a batch (they could not start before that work ends anyway);
 * when the queue drains, the batch reaches the fusion threshold, or it
 * has waited cycle_time, it goes out as one NEGO_PLAN, highest priority
 * first (hora_request_t.priority). There, a decision
 * with `fuse` set runs as one collective with the one before it: one
 * ring over their concatenation, so a hundred small tensors pay the
 * latency of the ring's steps once. */

/* A fused run holds at most this many bytes (fusion_threshold may say
 * less): fusion amortizes the latency of the ring's steps, which a run of
 * this size has amortized already; a larger one would only add the copies
 * through W and lose the overlap between one operation and the next
 * (measured: benchmarks/fusion.sh). A tensor this large runs alone, in
 * place. */
#define FUSE_RUN_MAX (256u << 10)

static uint64_t entry_bytes(const struct hp_nego_ready *m) {
  return m->count * hora_dtype_size(m->dtype);
}

/* Marks which of the n decisions v[] run fused with the one before them:
 * allreduces alike in dtype, op, scaling, wire (HP_NR_WIRE16) and algo
 * (HP_DA_*), reducescatters alike in dtype, op, scaling and algo, or
 * allgathers alike in algo (of any dtype: their bytes are packed),
 * resident on every host (none joined), up to `threshold` (and
 * FUSE_RUN_MAX) bytes together (an allgather's: what one rank sends; a
 * reducescatter's: its whole input). */
void hd_coord_mark_fusion(struct hp_nego_decide *v, uint32_t n,
                          uint64_t threshold) {
  uint64_t run = 0;
  if (threshold > FUSE_RUN_MAX) threshold = FUSE_RUN_MAX;
  for (uint32_t i = 0; i < n; i++) {
    const struct hp_nego_ready *m = &v[i].meta, *p = &v[i > 0 ? i - 1 : 0].meta;
    uint64_t b = entry_bytes(m);
    int ag = m->coll == HORA_COLL_ALLGATHER;
    /* an allgather's bytes are packed (any dtype, some ranks' empty) */
    int fusable = !v[i].status && !v[i].ndata && /* a whole: no ring */
                  (((m->coll == HORA_COLL_ALLREDUCE &&
                     m->op != HORA_ADASUM) || /* norms are per tensor */
                    m->coll == HORA_COLL_REDUCESCATTER) ? m->count > 0 : ag) &&
                  (m->flags & HP_NR_RESIDENT) &&
                  b < FUSE_RUN_MAX && threshold > 0;
    v[i].fuse = i > 0 && fusable && run > 0 && p->coll == m->coll &&
                (ag || (p->dtype == m->dtype && p->op == m->op &&
                        p->prescale == m->prescale &&
                        p->postscale == m->postscale &&
                        !((p->flags ^ m->flags) & HP_NR_WIRE16))) &&
                v[i - 1].algo == v[i].algo && run + b <= threshold;
    if (v[i].fuse) run += b;
    else run = fusable ? HC_MAX(b, 1) : 0; /* (an empty allgather too) */
  }
}

static uint64_t fusion_threshold(const struct hd_job *job) {
  return (uint64_t)HC_MAX(0, hk_int(&job->knobs, fusion_threshold));
}

/* Higher priority first (hora_request_t.priority), in the order they were
 * decided among equals: a stable insertion sort, linear when all are
 * alike, as they are unless the ranks give priorities. */
static void sort_by_priority(struct centry **b, uint32_t n) {
  for (uint32_t i = 1; i < n; i++) {
    struct centry *e = b[i];
    uint32_t k = i;
    for (; k > 0 && b[k - 1]->first.priority < e->first.priority; k--)
      b[k] = b[k - 1];
    b[k] = e;
  }
}

void hd_coord_flush(struct hd_comm *c) {
  struct hd_coord *co = c->coord;
  if (!co || !co->nbatch) return;
  /* taken out first: a decision made while these go out (this host's own
   * run in hd_decide_plan) starts a batch of its own */
  uint32_t n = co->nbatch;
  struct centry **b = co->batch;
  co->batch = NULL;
  co->nbatch = co->capbatch = 0;
  co->batch_bytes = 0;
  struct hp_nego_decide *v = calloc(n, sizeof *v);
  if (!v) {
    for (uint32_t i = 0; i < n; i++) centry_free(b[i]);
    free(b);
    hc_error("coordinator out of memory: the job cannot go on");
    hd_teardown(c->job, "horad is out of memory", 0);
    return;
  }
  /* the batch's decisions are numbered as they go out: a late one of
   * higher priority overtakes those of lower priority waiting with it */
  sort_by_priority(b, n);
  for (uint32_t i = 0; i < n; i++)
    fill_decide(c, &v[i], b[i], co->batch_seq + i, 0, "");
  hd_coord_mark_fusion(v, n, fusion_threshold(c->job));
  /* every host said ready for each (none is batched otherwise) */
  send_decides(c, b[0]->seen, v, n, 0);
  for (uint32_t i = 0; i < n; i++) centry_free(b[i]);
  free(b);
  free(v);
}

/* cycle_time in libuv's milliseconds (at least 1). */
static uint64_t cycle_ms(const struct hd_job *job) {
  double ms = hk_double(&job->knobs, cycle_time);
  return ms < 1.0 ? 1 : (uint64_t)(ms + 0.5);
}

void hd_coord_on_fusion_timer(uv_timer_t *t) {
  struct hd_job *job = t->data;
  uint64_t now = hc_now_ns(), wait = cycle_ms(job) * 1000000u, next = 0;
  for (uint32_t k = 0; k < job->ncomms; k++) {
    struct hd_comm *c = job->comms[k];
    if (!c || !c->coord || !c->coord->nbatch) continue;
    uint64_t age = now - c->coord->batch_t0;
    if (age + 500000u >= wait) hd_coord_flush(c);
    else if (!next || wait - age < next) next = wait - age;
  }
  if (next) /* a younger batch: its own time */
    uv_timer_start(t, hd_coord_on_fusion_timer, (next + 999999u) / 1000000u,
                   0);
}

/* Whether the decision on e (every host ready, no problem) may wait in
 * the batch: an allreduce, broadcast, allgather... (nothing of control:
 * those change what follows), alone, seen by every host (one that has
 * joined runs it with neutral inputs, unfused), while this host has
 * two plans of the set queued or more: it could not start before those
 * anyway, and the batch goes out when one is left (hd_comm_progress), so
 * that it arrives everywhere while that one still runs. */
static int may_batch(struct hd_comm *c, const struct centry *e) {
  struct hd_job *job = c->job;
  if (entry_status(e) || e->first.group_n > 1 ||
      (hd_coll(e->first.coll)->traits & HORA_CF_CTRL))
    return 0;
  for (int i = 0; i < c->nhosts; i++)
    if (!e->seen[i]) return 0;
  if (hk_double(&job->knobs, cycle_time) <= 0 || !fusion_threshold(job))
    return 0;
  return c->plan_head && c->plan_head->next;
}

/* Adds e (detached) to the batch as the next decision; 0, or -1 when it
 * cannot (out of memory: it is sent alone). */
static int batch_add(struct hd_comm *c, struct centry *e) {
  struct hd_coord *co = c->coord;
  struct hd_job *job = c->job;
  if (co->nbatch == co->capbatch) {
    uint32_t cap = co->capbatch ? 2 * co->capbatch : 64;
    struct centry **v = realloc(co->batch, cap * sizeof *v);
    if (!v) return -1;
    co->batch = v;
    co->capbatch = cap;
  }
  if (!co->nbatch) {
    co->batch_seq = co->seq;
    co->batch_t0 = hc_now_ns();
    uv_timer_t *tm = &job->fusion_timer;
    if (tm->loop && !uv_is_active((uv_handle_t *)tm))
      uv_timer_start(tm, hd_coord_on_fusion_timer, cycle_ms(job), 0);
  }
  co->batch[co->nbatch++] = e;
  co->seq++;
  co->batch_bytes += entry_bytes(&e->first);
  if (co->batch_bytes >= fusion_threshold(job) || co->nbatch >= HP_PLAN_MAX)
    hd_coord_flush(c);
  return 0;
}

/* Sends one NEGO_PLAN with the decisions on a whole group (g->e in
 * order), as send_decision() does for one. A failure of one fails all:
 * the group runs as one unit or not at all. */
static void send_plan(struct hd_comm *c, struct cgroup *g, int status,
                      const char *msg) {
  struct hd_job *job = c->job;
  uint32_t n = g->n;
  struct hp_nego_decide *v = calloc(n, sizeof *v);
  if (!v) {
    hc_error("coordinator out of memory: the job cannot go on");
    hd_teardown(job, "horad is out of memory", 0);
    return;
  }
  if (!status) hd_coord_flush(c); /* decisions go out in their order */
  for (uint32_t i = 0; i < n; i++)
    fill_decide(c, &v[i], g->e[i], status ? UINT64_MAX : c->coord->seq++,
                status, msg);
  if (!status) {
    int all = 1; /* fused only where every host holds the data */
    for (int i = 0; i < c->nhosts; i++) all &= g->e[0]->seen[i];
    if (all) hd_coord_mark_fusion(v, n, fusion_threshold(job));
  }
  send_decides(c, g->e[0]->seen, v, n, status);
  free(v);
}

static void cgroup_free(struct hd_coord *co, struct cgroup *g) {
  struct cgroup **pp = &co->groups;
  while (*pp && *pp != g) pp = &(*pp)->next;
  if (*pp) *pp = g->next;
  for (uint32_t i = 0; i < g->n; i++) centry_free(g->e[i]);
  free(g);
}

/* Fails the entries of e's group that wait for the rest (e itself is the
 * caller's). */
static void cgroup_fail(struct hd_comm *c, const struct centry *e,
                        int status, const char *why) {
  struct hd_coord *co = c->coord;
  struct cgroup *g = co->groups;
  while (g && g->key != e->first.group) g = g->next;
  if (!g) return;
  for (uint32_t i = 0; i < g->n; i++) {
    struct centry *o = g->e[i];
    if (!o) continue;
    hc_fmt(o->msg, sizeof o->msg, "grouped with tensor '%s', which failed: "
           "%s", e->first.name, why);
    send_decision(c, o, UINT64_MAX, status);
  }
  cgroup_free(co, g);
}

/* Hosts that said ready, and those whose ranks all joined. */
static int nready(const struct hd_comm *c, const struct centry *e) {
  int n = 0;
  for (int i = 0; i < c->nhosts; i++)
    n += e->seen[i] || (c->coord->joined[i] &&
                        e->first.coll != HORA_COLL_JOIN);
  return n;
}

/* A host that has not seen e runs it only with neutral inputs: every
 * collective can (a broadcast not from there); adding or removing a
 * process set cannot. */
static void check_joined(struct hd_comm *c, struct centry *e) {
  if (e->mismatch) return;
  int coll = e->first.coll;
  if (coll == HORA_COLL_BROADCAST) {
    int h = hd_comm_host_of(c, hd_comm_member(c, e->first.root));
    if (h >= 0 && !e->seen[h] && c->coord->joined[h]) {
      e->mismatch = HORA_EINVAL;
      hc_fmt(e->msg, sizeof e->msg, "broadcast '%s' cannot run: its root "
             "rank %d has joined", e->first.name, e->first.root);
    }
    return;
  }
  if (coll != HORA_COLL_PS_ADD && coll != HORA_COLL_PS_REMOVE) return;
  for (int i = 0; i < c->nhosts; i++)
    if (!e->seen[i] && c->coord->joined[i]) {
      char name[300];
      hd_host_name(c->job, c->hosts[i], name, sizeof name);
      e->mismatch = HORA_EINVAL;
      hc_fmt(e->msg, sizeof e->msg, "%s '%s' cannot run while every rank of "
             "%s has joined", hd_coll_name(coll), e->first.name, name);
      return;
    }
}

static void unlink_entry(struct hd_coord *c, struct centry *e);
static void decide(struct hd_comm *c, struct centry *e);

/* ---- small allreduces (xhost/ring.c): the hosts' parts, the whole ----- */

/* Keeps host's part of e (a copy: m's is the frame's). Parts of another
 * size than the first's are not kept: then the ring runs. */
static void keep_part(struct hd_comm *c, struct centry *e, int host,
                      const struct hp_nego_ready *m) {
  if (!e->parts) {
    if (!(e->parts = calloc((size_t)c->nhosts, sizeof *e->parts))) return;
    e->partcap = (uint32_t)c->nhosts;
    e->npart = m->ndata;
  }
  if (m->ndata != e->npart || e->parts[host]) return;
  if ((e->parts[host] = malloc(m->ndata))) {
    memcpy(e->parts[host], m->data, m->ndata);
    e->nparts++;
  }
}

/* Every host is ready for e and agrees: when every host sent its part
 * (and use), the whole, reduced in host order (the same bits, whatever
 * order the parts came in), goes with the decision. */
static void make_whole(struct hd_comm *c, struct centry *e, int use) {
  const struct hp_nego_ready *m = &e->first;
  if (!use || !e->parts || e->nparts != (uint32_t)c->nhosts ||
      entry_status(e) ||
      e->npart != hd_star_bytes(c->job, m->coll, m->dtype, m->op, m->count,
                                (m->flags & HP_NR_WIRE16) != 0) ||
      !(e->whole = malloc(e->npart))) {
    e->npart = 0;
  } else {
    memcpy(e->whole, e->parts[0], e->npart);
    for (int h = 1; h < c->nhosts; h++)
      hd_star_fold(m->dtype, m->op, e->whole, e->parts[h], m->count);
  }
  for (uint32_t h = 0; e->parts && h < e->partcap; h++) free(e->parts[h]);
  free(e->parts);
  e->parts = NULL;
  e->nparts = e->partcap = 0;
}

/* A host joined: what waited only for it is ready now. */
static void recheck(struct hd_comm *c) {
  struct hd_coord *co = c->coord;
  for (size_t i = 0; i < co->size; i++) {
    struct centry *e = co->table[i], *next;
    for (; e; e = next) {
      next = e->next;
      if (e->first.coll == HORA_COLL_JOIN || nready(c, e) < c->nhosts)
        continue;
      decide(c, e);
    }
  }
}

static void detach_entry(struct hd_coord *c, struct centry *e) {
  struct centry **pp = &c->table[hd_name_hash(e->first.name) & (c->size - 1)];
  while (*pp != e) pp = &(*pp)->next;
  *pp = e->next;
  c->n--;
}

static void unlink_entry(struct hd_coord *c, struct centry *e) {
  detach_entry(c, e);
  centry_free(e);
}

/* Every host is ready for e, of a group: it waits out of the table for
 * the rest; the last one decides them all. */
static void group_entry(struct hd_comm *c, struct centry *e) {
  struct hd_coord *co = c->coord;
  const struct hp_nego_ready *m = &e->first;
  struct cgroup *g = co->groups;
  detach_entry(co, e);
  while (g && g->key != m->group) g = g->next;
  if (!g && (g = calloc(1, sizeof *g + m->group_n * sizeof g->e[0]))) {
    g->key = m->group;
    g->n = m->group_n;
    g->next = co->groups;
    co->groups = g;
  }
  if (!g || g->n != m->group_n || g->e[m->group_idx]) {
    hc_fmt(e->msg, sizeof e->msg, "%s '%s' cannot run: %s",
           hd_coll_name(m->coll), m->name,
           !g ? "the coordinator is out of memory"
              : "another tensor of its group has its place or another size");
    send_decision(c, e, UINT64_MAX, !g ? HORA_ENOMEM : HORA_EINVAL);
    centry_free(e);
    return;
  }
  g->e[m->group_idx] = e;
  if (++g->nready < g->n) return;
  int status = 0;
  const char *msg = "";
  char buf[HP_MSG_MAX + 1];
  for (uint32_t i = 0; i < g->n && !status; i++)
    if ((status = entry_status(g->e[i]))) {
      hc_fmt(buf, sizeof buf, "%s (the whole group of %u tensors fails)",
             g->e[i]->msg, g->n);
      msg = buf;
    }
  send_plan(c, g, status, msg);
  cgroup_free(co, g);
}

static void decide(struct hd_comm *c, struct centry *e) {
  check_joined(c, e);
  if (e->first.group_n > 1) {
    group_entry(c, e);
    return;
  }
  int batch = may_batch(c, e);
  /* a decision that waits in a batch runs fused round the ring, as a
   * burst of small tensors (a training step's) should: the whole is for
   * one that would run at once, where the latency is what counts */
  make_whole(c, e, !batch);
  if (batch) {
    detach_entry(c->coord, e);
    if (batch_add(c, e) == 0) return;
    hd_coord_flush(c); /* out of memory: it goes alone, after the batch */
    send_decision(c, e, c->coord->seq++, 0);
    centry_free(e);
    return;
  }
  send_decision(c, e, c->coord->seq++, entry_status(e));
  if (e->first.coll == HORA_COLL_JOIN)
    memset(c->coord->joined, 0, (size_t)c->nhosts);
  unlink_entry(c->coord, e);
}

void hd_coord_ready(struct hd_comm *cm, int host,
                    const struct hp_nego_ready *m) {
  struct hd_coord *c = coord(cm);
  if (!c) {
    hc_error("coordinator out of memory");
    return;
  }
  struct centry **pp = &c->table[hd_name_hash(m->name) & (c->size - 1)], *e;
  for (e = *pp; e && strcmp(e->first.name, m->name); e = e->next) {}
  if (!e) {
    e = calloc(1, sizeof *e + (size_t)cm->nhosts);
    if (!e) {
      hc_error("coordinator out of memory");
      return;
    }
    e->first = *m;
    e->first.arrive = NULL; /* the caller's */
    e->first.narrive = 0;
    e->first.data = NULL;
    e->first.ndata = 0;
    e->t_first = hc_now_ns();
    if (m->msg[0]) {
      e->mismatch = m->status < 0 ? m->status : 1;
      hc_fmt(e->msg, sizeof e->msg, "%s", m->msg);
    }
    e->next = *pp;
    *pp = e;
    c->n++;
  } else if (e->seen[host]) {
    hc_warn_rl("host %d said ready twice for tensor '%s'; ignored", host,
            m->name);
    return;
  } else if (!e->mismatch && m->msg[0]) {
    e->mismatch = m->status < 0 ? m->status : 1;
    hc_fmt(e->msg, sizeof e->msg, "%s", m->msg);
  } else if (!e->mismatch) {
    e->mismatch = mismatch(&e->first, m, e->msg, sizeof e->msg);
  }
  if (m->group_n > 1 && !e->first.group_n) {
    /* decided with its group, which fails as a whole on the mismatch:
     * none of the group's other tensors waits for this one */
    e->first.group = m->group;
    e->first.group_n = m->group_n;
    e->first.group_idx = m->group_idx;
  }
  if (e->nready) e->first.flags &= m->flags; /* RESIDENT: on every host */
  if (e->nready && m->priority > e->first.priority)
    e->first.priority = m->priority; /* the highest any host's ranks gave */
  e->seen[host] = 1;
  if (m->ndata) keep_part(cm, e, host, m);
  hd_metrics_coord_ready(cm, host, m);
  e->last_rank = m->rank;
  e->nready++;
  if (hd_comm_host_left(cm)) { /* a host of the set has left: never now */
    hc_fmt(e->msg, sizeof e->msg, "%s '%s' cannot run: %s",
           hd_coll_name(e->first.coll), e->first.name,
           cm->job->left_msg[0] ? cm->job->left_msg : "a host has left");
    send_decision(cm, e, UINT64_MAX, HORA_EPEERGONE);
    unlink_entry(c, e);
    return;
  }
  if (m->coll == HORA_COLL_JOIN && !c->joined[host]) {
    c->joined[host] = 1;
    recheck(cm); /* what waited only for this host, before the join ends */
    if (e->nready < cm->nhosts) return;
  }
  if (nready(cm, e) < cm->nhosts) return;
  decide(cm, e);
}

/* The local tensor of that name on c, or NULL. */
static struct hd_tensor *local_tensor(struct hd_comm *c, const char *name) {
  if (!c->table_size) return NULL;
  struct hd_tensor *t = c->table[hd_name_hash(name) & (c->table_size - 1)];
  while (t && strcmp(t->name, name)) t = t->next_hash;
  return t;
}

/* This host's members that have not submitted `name` (it knows them one
 * by one), e.g. "rank 1 of host h0" or "ranks 1, 3 of host h0"; "" when
 * it has no such tensor (then none of them submitted it). */
static void missing_here(struct hd_comm *c, const char *name, char *buf,
                         size_t len) {
  struct hd_tensor *t = local_tensor(c, name);
  size_t n = 0;
  int k = 0;
  buf[0] = '\0';
  if (!t) return;
  for (int i = 0; i < c->nlocal && n + 64 < len; i++) {
    if (t->part[i].submitted || c->joined[i]) continue;
    n += (size_t)snprintf(buf + n, len - n, "%s%d", k++ ? ", " : "",
                          hd_comm_rank(c, i));
  }
  if (!k) return;
  char rest[300];
  hc_fmt(rest, sizeof rest, "%s", buf);
  hc_fmt(buf, len, "rank%s %s of host %s", k > 1 ? "s" : "", rest,
         c->job->desc.hosts[c->hosts[c->me]].name);
}

/* Names what has not said ready: this host's missing ranks one by one,
 * another host as a whole ("the ranks of host h2 (ranks 2-3)": which of
 * them are missing, only that host knows, and its own report says). */
static void missing(struct hd_comm *c, struct centry *e, char *buf,
                    size_t len) {
  size_t n = 0;
  buf[0] = '\0';
  for (int i = 0; i < c->nhosts && n + 64 < len; i++) {
    if (e->seen[i]) continue;
    char name[300];
    if (i == c->me) missing_here(c, e->first.name, name, sizeof name);
    else name[0] = '\0';
    if (!name[0]) {
      char host[280];
      hd_host_name(c->job, c->hosts[i], host, sizeof host);
      hc_fmt(name, sizeof name, "the ranks of %s", host);
    }
    n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? " and " : "", name);
  }
}

/* Fails e as stalled, where it was submitted. */
static void stall_fail(struct hd_comm *cm, struct centry *e, uint64_t age) {
  char who[512];
  missing(cm, e, who, sizeof who);
  hc_fmt(e->msg, sizeof e->msg, "%s '%s' stalled for %llu s: %s never "
         "submitted it", hd_coll_name(e->first.coll), e->first.name,
         (unsigned long long)(age / 1000000000u), who);
  hc_error("%s [H1004]", e->msg);
  hd_metrics_stall(cm->job, 1);
  send_decision(cm, e, UINT64_MAX, HORA_ESTALL);
  if (e->first.group_n > 1) cgroup_fail(cm, e, HORA_ESTALL, e->msg);
  unlink_entry(cm->coord, e);
}

/* The stall inspector across hosts: warns once about a tensor some hosts'
 * ranks all submitted while other hosts' ranks did not; past the shutdown
 * time fails it where it was submitted. */
void hd_coord_check_stalls(struct hd_comm *cm) {
  struct hd_job *job = cm->job;
  struct hd_coord *c = cm->coord;
  if (!c) return;
  uint64_t now = hc_now_ns();
  for (size_t i = 0; i < c->size; i++) {
    struct centry *e = c->table[i], *next;
    for (; e; e = next) {
      next = e->next;
      uint64_t age = now - e->t_first;
      char who[512];
      if (job->stall_fail_ns && age >= job->stall_fail_ns) {
        stall_fail(cm, e, age);
        continue;
      }
      if (job->stall_warn_ns && age >= job->stall_warn_ns && !e->warned) {
        e->warned = 1;
        hd_metrics_stall(job, 0);
        missing(cm, e, who, sizeof who);
        hc_warn_rl("stall: %s '%s' has waited %llu s for %s; the "
                "other hosts' ranks submitted it. Ranks may be issuing "
                "collectives in a different order or with different names. "
                "[H1003]",
                hd_coll_name(e->first.coll), e->first.name,
                (unsigned long long)(age / 1000000000u), who);
      }
    }
  }
}

void hd_coord_stall(struct hd_comm *cm, const char *name) {
  struct hd_coord *c = cm->coord;
  if (!c) return;
  struct centry *e = c->table[hd_name_hash(name) & (c->size - 1)];
  while (e && strcmp(e->first.name, name)) e = e->next;
  if (e) stall_fail(cm, e, hc_now_ns() - e->t_first);
}

void hd_coord_free(struct hd_comm *cm) {
  struct hd_coord *c = cm->coord;
  hd_metrics_coord_forget(cm);
  if (!c) return;
  for (size_t i = 0; i < c->size; i++)
    while (c->table[i]) {
      struct centry *e = c->table[i];
      c->table[i] = e->next;
      centry_free(e);
    }
  while (c->groups) cgroup_free(c, c->groups);
  for (uint32_t i = 0; i < c->nbatch; i++) centry_free(c->batch[i]);
  free(c->batch);
  free(c->table);
  free(c->joined);
  for (int h = 0; h < cm->nhosts; h++) {
    hd_nc_free(&c->nc_ready[h]);
    hd_nc_free(&c->nc_decide[h]);
  }
  free(c->nc_ready);
  free(c->nc_decide);
  free(c);
  cm->coord = NULL;
}

/* ---- readiness for a set not added yet ---------------------------------- */

#define HELD_SETS_AHEAD 1024 /* how far beyond ours a set id may be */

struct hd_held_ready {
  int from;
  struct hp_nego_ready m;
  unsigned char *arrive; /* its arrival offsets, kept (metrics.c) */
};

int hd_coord_hold(struct hd_job *job, int from,
                  const struct hp_nego_ready *m, char *why, size_t whylen) {
  /* the caller drops the link: the message is about the peer, whose
   * name it puts first ("host h2 (ranks 2-3) is lost: it said ...") */
  const char *me =
      job->desc.hosts ? job->desc.hosts[job->desc.host_index].name : "?";
  if (m->comm >= job->ncomms + HELD_SETS_AHEAD) {
    hc_fmt(why, whylen, "it said ready for %s '%s' of process set %u, but "
           "host %s has added only %u process sets: its ranks added sets "
           "that the ranks of host %s did not", hd_coll_name(m->coll),
           m->name, m->comm, me, job->ncomms ? job->ncomms - 1 : 0, me);
    return -1;
  }
  if (job->nheld >= HD_HELD_MAX) {
    hc_fmt(why, whylen, "it said ready for more than %u operations of "
           "process sets host %s has not added (the last: %s '%s' of process "
           "set %u): its ranks added sets that the ranks of host %s did not, "
           "or not yet", (unsigned)HD_HELD_MAX, me, hd_coll_name(m->coll),
           m->name, m->comm, me);
    return -1;
  }
  if (job->nheld == job->capheld) {
    size_t cap = job->capheld ? 2 * job->capheld : 16;
    struct hd_held_ready *v = realloc(job->held, cap * sizeof *v);
    if (!v) {
      hc_fmt(why, whylen, "horad is out of memory holding its readiness");
      return -1;
    }
    job->held = v;
    job->capheld = cap;
  }
  job->held[job->nheld].from = from;
  job->held[job->nheld].m = *m;
  job->held[job->nheld].arrive = hd_metrics_hold(&job->held[job->nheld].m);
  job->nheld++;
  return 0;
}

void hd_coord_replay(struct hd_comm *c) {
  struct hd_job *job = c->job;
  size_t k = 0;
  for (size_t i = 0; i < job->nheld; i++) {
    struct hd_held_ready *h = &job->held[i];
    if (h->m.comm != c->id) {
      job->held[k++] = *h;
      continue;
    }
    int pos = -1;
    for (int j = 0; j < c->nhosts; j++)
      if (c->hosts[j] == h->from) pos = j;
    hd_metrics_unhold(&h->m, h->arrive);
    if (c->me == 0 && pos > 0) {
      if (hd_coord_ready_from(c, pos, &h->m) < 0)
        hc_warn_rl("readiness for process set %u from host %d names a "
                   "number it never gave; ignored", c->id, h->from);
    } else hc_warn("readiness for process set %u from host %d, which has no "
                 "part in it; ignored", c->id, h->from);
    free(h->arrive);
  }
  job->nheld = k;
}

void hd_coord_held_free(struct hd_job *job) {
  for (size_t i = 0; i < job->nheld; i++) free(job->held[i].arrive);
  free(job->held);
  job->held = NULL;
  job->nheld = job->capheld = 0;
}

void hd_coord_fail(struct hd_comm *cm, const char *why) {
  struct hd_coord *c = cm->coord;
  if (!c) return;
  /* decided but not sent: they fail like the rest (no host runs them) */
  for (uint32_t i = 0; i < c->nbatch; i++) {
    struct centry *e = c->batch[i];
    hc_fmt(e->msg, sizeof e->msg, "%s '%s' cannot run: %s",
           hd_coll_name(e->first.coll), e->first.name, why);
    send_decision(cm, e, UINT64_MAX, HORA_EPEERGONE);
    centry_free(e);
  }
  c->nbatch = 0;
  for (size_t i = 0; i < c->size; i++)
    while (c->table[i]) {
      struct centry *e = c->table[i];
      hc_fmt(e->msg, sizeof e->msg, "%s '%s' cannot run: %s",
             hd_coll_name(e->first.coll), e->first.name, why);
      send_decision(cm, e, UINT64_MAX, HORA_EPEERGONE);
      unlink_entry(c, e);
    }
  while (c->groups) {
    struct cgroup *g = c->groups;
    for (uint32_t i = 0; i < g->n; i++)
      if (g->e[i]) {
        hc_fmt(g->e[i]->msg, sizeof g->e[i]->msg, "%s '%s' cannot run: %s",
               hd_coll_name(g->e[i]->first.coll), g->e[i]->first.name, why);
        send_decision(cm, g->e[i], UINT64_MAX, HORA_EPEERGONE);
      }
    cgroup_free(c, g);
  }
}
