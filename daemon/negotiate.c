/* negotiate.c -- matching the local ranks' submissions by tensor name.
 *
 * Ranks may submit names in any order. A tensor becomes ready when every
 * local rank has submitted it; its metadata are then compared with the
 * first submitter's and a disagreement fails the operation on every rank
 * with a message naming both ranks and both values (the job goes on).
 * Ready tensors run in the order they became ready. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"

const char *hd_coll_name(int c) {
  switch (c) {
  case HP_ALLREDUCE: return "allreduce";
  case HP_BROADCAST: return "broadcast";
  case HP_BARRIER: return "barrier";
  default: return "unknown collective";
  }
}

uint64_t hd_name_hash(const char *s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static struct hd_tensor **slot_of(struct hd_daemon *d, const char *name) {
  struct hd_tensor **pp = &d->table[hd_name_hash(name) & (d->table_size - 1)];
  while (*pp && strcmp((*pp)->name, name)) pp = &(*pp)->next_hash;
  return pp;
}

static int grow_table(struct hd_daemon *d) {
  size_t n = d->table_size ? d->table_size * 2 : 256;
  struct hd_tensor **t = calloc(n, sizeof *t);
  if (!t) return HORA_ENOMEM;
  for (size_t i = 0; i < d->table_size; i++) {
    struct hd_tensor *e = d->table[i];
    while (e) {
      struct hd_tensor *next = e->next_hash;
      struct hd_tensor **pp = &t[hd_name_hash(e->name) & (n - 1)];
      e->next_hash = *pp;
      *pp = e;
      e = next;
    }
  }
  free(d->table);
  d->table = t;
  d->table_size = n;
  return 0;
}


static struct hd_meta *metas_of(struct hd_daemon *d, struct hd_tensor *t) {
  return (struct hd_meta *)(t->part + d->nlocal);
}

static void remove_tensor(struct hd_daemon *d, struct hd_tensor *t) {
  struct hd_tensor **pp = slot_of(d, t->name);
  if (*pp == t) *pp = t->next_hash;
  d->ntensors--;
  free(t);
}

/* Sends every participant that submitted t the same completion. */
static void complete_all(struct hd_daemon *d, struct hd_tensor *t, int status,
                         const char *msg) {
  for (int i = 0; i < d->nlocal; i++)
    if (t->part[i].submitted) hd_complete(&d->ranks[i], t->part[i].id, status, msg);
}

void hd_tensor_finish(struct hd_daemon *d, struct hd_tensor *t) {
  complete_all(d, t, 0, NULL);
}

void hd_tensor_fail(struct hd_daemon *d, struct hd_tensor *t, int status,
                    const char *msg) {
  complete_all(d, t, status, msg);
}

static int check_entry(struct hd_rank *r, const struct hp_sqe *e, char *why,
                       size_t len) {
  if (e->coll < HP_ALLREDUCE || e->coll > HP_BARRIER) {
    hc_fmt(why, len, "unknown collective %u", e->coll);
    return HORA_EINVAL;
  }
  if (e->dtype >= HORA_DTYPE_COUNT) {
    hc_fmt(why, len, "unknown data type %u", e->dtype);
    return HORA_EINVAL;
  }
  if (e->coll == HP_ALLREDUCE && e->op >= HORA_OP_COUNT) {
    hc_fmt(why, len, "unknown reduction operation %u", e->op);
    return HORA_EINVAL;
  }
  if (e->coll == HP_BROADCAST &&
      (e->root < 0 || e->root >= r->d->job.size)) {
    hc_fmt(why, len, "root rank %d is out of range [0, %d)", e->root,
           r->d->job.size);
    return HORA_EINVAL;
  }
  uint64_t es = hora_dtype_size(e->dtype);
  if (e->count > UINT64_MAX / 16) {
    hc_fmt(why, len, "element count %llu is too large",
           (unsigned long long)e->count);
    return HORA_EINVAL;
  }
  if (e->flags & HP_F_RESIDENT) {
    const struct hp_shm_hdr *h = &r->layout;
    uint64_t bytes = e->count * es, lo = h->arena_off,
             hi = h->arena_off + h->arena_size;
    if (e->offset < lo || e->offset > hi || bytes > hi - e->offset) {
      hc_fmt(why, len, "buffer [%llu, +%llu) lies outside the arena",
             (unsigned long long)e->offset, (unsigned long long)bytes);
      return HORA_EINVAL;
    }
    if (e->offset % es) {
      hc_fmt(why, len, "buffer offset %llu is not aligned to its %s elements",
             (unsigned long long)e->offset, hora_dtype_name(e->dtype));
      return HORA_EINVAL;
    }
  }
  return 0;
}

int hd_meta_mismatch(const char *name, const struct hd_meta *a, int ra,
                     const struct hd_meta *b, int rb, char *msg, size_t len) {
  if (b->coll != a->coll)
    hc_fmt(msg, len, "Mismatched operations on tensor '%s': rank %d did an "
           "%s, but rank %d did a %s.", name, ra, hd_coll_name(a->coll), rb,
           hd_coll_name(b->coll));
  else if (b->dtype != a->dtype)
    hc_fmt(msg, len, "Mismatched data types on tensor '%s': rank %d had "
           "type %s, but rank %d had type %s.", name, ra,
           hora_dtype_name(a->dtype), rb, hora_dtype_name(b->dtype));
  else if (b->count != a->count)
    hc_fmt(msg, len, "Mismatched %s tensor shapes on tensor '%s': rank %d "
           "sent %llu elements, but rank %d sent %llu elements.",
           hd_coll_name(a->coll), name, ra, (unsigned long long)a->count, rb,
           (unsigned long long)b->count);
  else if (a->coll == HP_ALLREDUCE && b->op != a->op)
    hc_fmt(msg, len, "Mismatched reduction operations on tensor '%s': rank "
           "%d asked for %s, but rank %d asked for %s.", name, ra,
           hora_op_name(a->op), rb, hora_op_name(b->op));
  else if (a->coll == HP_BROADCAST && b->root != a->root)
    hc_fmt(msg, len, "Mismatched broadcast root ranks on tensor '%s': rank "
           "%d gave root %d, but rank %d gave root %d.", name, ra, a->root,
           rb, b->root);
  else
    return 0;
  return 1;
}

static int describe_mismatch(struct hd_daemon *d, struct hd_tensor *t,
                             char *msg, size_t len) {
  struct hd_meta *m = metas_of(d, t);
  int ra = d->ranks[t->first].info.rank;
  for (int i = 0; i < d->nlocal; i++)
    if (hd_meta_mismatch(t->name, &m[t->first], ra, &m[i],
                         d->ranks[i].info.rank, msg, len))
      return 1;
  return 0;
}

static void queue_ready(struct hd_daemon *d, struct hd_tensor *t) {
  t->next_ready = NULL;
  if (d->ready_tail) d->ready_tail->next_ready = t;
  else d->ready_head = t;
  d->ready_tail = t;
}

/* Multi-host: asks the coordinator; hd_decide() queues it. */
static void tell_coordinator(struct hd_daemon *d, struct hd_tensor *t,
                             const char *msg) {
  struct hp_nego_ready m = {.coll = t->coll,
                            .dtype = t->dtype,
                            .op = t->op,
                            .root = t->root,
                            .count = t->count,
                            .rank = d->ranks[t->first].info.rank};
  memcpy(m.name, t->name, sizeof m.name);
  hc_fmt(m.msg, sizeof m.msg, "%s", msg);
  if (d->left_msg[0]) { /* a host has left: no decision can come */
    char why[HP_MSG_MAX + 1];
    hc_fmt(why, sizeof why, "%s '%s' cannot run: %s", hd_coll_name(t->coll),
           t->name, d->left_msg);
    complete_all(d, t, HORA_EPEERGONE, why);
    remove_tensor(d, t);
    return;
  }
  t->awaiting = 1;
  if (d->job.host_index == 0) {
    hd_coord_ready(d, 0, &m);
    return;
  }
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_nego_ready(&w, &m);
  hd_mesh_send(d, 0, &w); /* a lost coordinator fails everything anyway */
  hp_wbuf_free(&w);
}

void hd_decide(struct hd_daemon *d, const struct hp_nego_decide *m) {
  if (!d->table_size) return;
  struct hd_tensor *t = *slot_of(d, m->name);
  if (!t || !t->awaiting) {
    if (d->gone_rank == -1)
      hc_warn("decision for tensor '%s', which is not waiting for one; "
              "ignored", m->name);
    return;
  }
  t->awaiting = 0;
  if (m->status < 0) {
    hc_info("%s", m->msg);
    complete_all(d, t, m->status, m->msg);
    remove_tensor(d, t);
    hd_flush_wakeups(d);
    return;
  }
  t->seq = m->seq;
  queue_ready(d, t);
  hd_run_ready(d);
  hd_flush_wakeups(d);
}

void hd_fail_undecided(struct hd_daemon *d, const char *why) {
  for (size_t i = 0; i < d->table_size; i++) {
    struct hd_tensor **pp = &d->table[i];
    while (*pp) {
      struct hd_tensor *t = *pp;
      if (!t->awaiting) {
        pp = &t->next_hash;
        continue;
      }
      char msg[HP_MSG_MAX + 1];
      hc_fmt(msg, sizeof msg, "%s '%s' cannot run: %s", hd_coll_name(t->coll),
             t->name, why);
      complete_all(d, t, HORA_EPEERGONE, msg);
      *pp = t->next_hash;
      d->ntensors--;
      free(t);
    }
  }
  hd_flush_wakeups(d);
}

static void make_ready(struct hd_daemon *d, struct hd_tensor *t) {
  char msg[HP_MSG_MAX + 1] = "";
  int bad = describe_mismatch(d, t, msg, sizeof msg);
  if (d->multi) { /* the other hosts must fail it too */
    tell_coordinator(d, t, bad ? msg : "");
    return;
  }
  if (bad) {
    hc_info("%s", msg);
    complete_all(d, t, HORA_EMISMATCH, msg);
    remove_tensor(d, t);
    return;
  }
  t->next_ready = NULL;
  if (d->ready_tail) d->ready_tail->next_ready = t;
  else d->ready_head = t;
  d->ready_tail = t;
}

void hd_submit(struct hd_rank *r, const struct hp_sqe *in) {
  struct hd_daemon *d = r->d;
  struct hp_sqe e = *in;
  e.name[HP_NAME_MAX] = '\0';
  char why[HP_MSG_MAX + 1], msg[HP_MSG_MAX + 1];
  if (r->gone) return;
  int rc = check_entry(r, &e, why, sizeof why);
  if (rc < 0) {
    hc_fmt(msg, sizeof msg, "rank %d: bad %s request for tensor '%s': %s",
           r->info.rank, hd_coll_name(e.coll), e.name, why);
    hd_complete(r, e.id, rc, msg);
    return;
  }
  if (d->gone_rank != -1) {
    hc_fmt(msg, sizeof msg, "%s '%s' cannot run: %s", hd_coll_name(e.coll),
           e.name, d->gone_msg);
    hd_complete(r, e.id, d->gone_rank == -2 ? HORA_ESHUTDOWN : HORA_EPEERGONE,
                msg);
    return;
  }
  if (d->ntensors >= d->table_size / 2 && grow_table(d) < 0) {
    hd_complete(r, e.id, HORA_ENOMEM, "horad is out of memory");
    return;
  }
  struct hd_tensor **pp = slot_of(d, e.name), *t = *pp;
  if (!t) {
    t = calloc(1, sizeof *t + (size_t)d->nlocal *
                                  (sizeof(struct hd_part) + sizeof(struct hd_meta)));
    if (!t) {
      hd_complete(r, e.id, HORA_ENOMEM, "horad is out of memory");
      return;
    }
    memcpy(t->name, e.name, sizeof t->name);
    t->coll = e.coll;
    t->dtype = e.dtype;
    t->op = e.op;
    t->root = e.root;
    t->count = e.count;
    t->prescale = e.prescale;
    t->postscale = e.postscale;
    t->first = r->idx;
    t->t_first = hc_now_ns();
    *pp = t;
    d->ntensors++;
  } else if (t->part[r->idx].submitted) {
    hc_fmt(msg, sizeof msg,
           "rank %d submitted tensor '%s' while an operation of the same name "
           "is still in flight on that rank; names of pending operations must "
           "be unique",
           r->info.rank, e.name);
    hd_complete(r, e.id, HORA_EDUPNAME, msg);
    return;
  }
  struct hd_part *p = &t->part[r->idx];
  p->id = e.id;
  p->submitted = 1;
  p->resident = (e.flags & HP_F_RESIDENT) != 0;
  p->offset = e.offset;
  metas_of(d, t)[r->idx] =
      (struct hd_meta){e.coll, e.dtype, e.op, e.root, e.count};
  if (++t->nsubmitted == d->nlocal) make_ready(d, t);
}

void hd_chunk_event(struct hd_rank *r, const struct hp_sqe *e) {
  struct hd_daemon *d = r->d;
  struct hd_tensor *t = d->ready_head;
  struct hd_part *p = t ? &t->part[r->idx] : NULL;
  if (!p || p->id != e->id || p->resident) {
    hc_debug("rank %d: chunk event for an operation that is not running; "
            "ignored", r->info.rank);
    return;
  }
  uint64_t *ctr = e->kind == HP_SQ_CHUNK_READY ? &p->ready : &p->done;
  if (e->chunk != *ctr || *ctr >= t->nchunks) {
    hc_warn("rank %d: chunk %llu out of order on '%s'; ignored", r->info.rank,
            (unsigned long long)e->chunk, t->name);
    return;
  }
  (*ctr)++;
}

void hd_run_ready(struct hd_daemon *d) {
  while (d->ready_head) {
    struct hd_tensor *t = d->ready_head;
    if (!d->engine->step(d, t)) return;
    d->ready_head = t->next_ready;
    if (!d->ready_head) d->ready_tail = NULL;
    remove_tensor(d, t);
  }
}

void hd_fail_all(struct hd_daemon *d) {
  hd_xhost_abort(d);
  if (!d->ntensors) return;
  int status = d->gone_rank == -2 ? HORA_ESHUTDOWN : HORA_EPEERGONE;
  for (size_t i = 0; i < d->table_size; i++) {
    struct hd_tensor *t;
    while ((t = d->table[i])) {
      char msg[HP_MSG_MAX + 1];
      hc_fmt(msg, sizeof msg, "%s '%s' cannot complete: %s",
             hd_coll_name(t->coll), t->name, d->gone_msg);
      complete_all(d, t, status, msg);
      d->table[i] = t->next_hash;
      d->ntensors--;
      free(t);
    }
  }
  d->ready_head = d->ready_tail = NULL;
  hd_flush_wakeups(d);
}

/* Names the local ranks that have not submitted t, e.g. "1, 3". */
static void missing_ranks(struct hd_daemon *d, struct hd_tensor *t, char *buf,
                          size_t len) {
  size_t n = 0;
  buf[0] = '\0';
  for (int i = 0; i < d->nlocal && n + 16 < len; i++)
    if (!t->part[i].submitted)
      n += (size_t)snprintf(buf + n, len - n, "%s%d", n ? ", " : "",
                            d->ranks[i].info.rank);
}

/* The stall inspector: some ranks submitted a tensor, others not, for too
 * long. Warns once per tensor, naming the missing ranks; past the shutdown
 * time fails it on the ranks that wait. */
void hd_check_stalls(struct hd_daemon *d) {
  uint64_t now = hc_now_ns();
  for (size_t i = 0; i < d->table_size; i++) {
    struct hd_tensor **pp = &d->table[i];
    while (*pp) {
      struct hd_tensor *t = *pp;
      uint64_t age = now - t->t_first;
      if (t->nsubmitted == d->nlocal) {
        pp = &t->next_hash;
        continue;
      }
      char who[256], msg[HP_MSG_MAX + 1];
      missing_ranks(d, t, who, sizeof who);
      if (d->stall_fail_ns && age >= d->stall_fail_ns) {
        hc_fmt(msg, sizeof msg, "%s '%s' stalled for %llu s: rank(s) %s never "
               "submitted it", hd_coll_name(t->coll), t->name,
               (unsigned long long)(age / 1000000000u), who);
        hc_error("%s", msg);
        complete_all(d, t, HORA_ESTALL, msg);
        *pp = t->next_hash;
        d->ntensors--;
        free(t);
        continue;
      }
      if (d->stall_warn_ns && age >= d->stall_warn_ns && !t->stall_warned) {
        t->stall_warned = 1;
        hc_warn("stall: %s '%s' has waited %llu s for rank(s) %s; the other "
                "ranks submitted it. Ranks may be issuing collectives in a "
                "different order or with different names.",
                hd_coll_name(t->coll), t->name,
                (unsigned long long)(age / 1000000000u), who);
      }
      pp = &t->next_hash;
    }
  }
  if (d->multi && d->job.host_index == 0) hd_coord_check_stalls(d);
  hd_flush_wakeups(d);
}
