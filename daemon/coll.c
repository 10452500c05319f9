/* coll.c -- the collectives, described once: name, traits (hora.h's
 * HORA_COLL_MAP), what a submission must satisfy, and how the metadata
 * of two ranks are compared. The engines hold how each one runs. */
#define HC_LOG_SUB HC_SUB_NEGO
#include <stdio.h>
#include <string.h>

#include "daemon.h"
#include "reduce.h"
#include "adasum.h"

static int check_op(struct hd_comm *c, struct hd_rank *r,
                    const struct hp_sqe *e, char *why, size_t len) {
  if (e->op >= HORA_OP_COUNT) {
    hc_fmt(why, len, "unknown reduction operation %u", e->op);
    return HORA_EINVAL;
  }
  if (e->op != HORA_ADASUM) return 0;
  if (e->coll != HORA_COLL_ALLREDUCE) {
    hc_fmt(why, len, "Adasum is a reduction of allreduce only");
    return HORA_EINVAL;
  }
  if (!hd_adasum_dtype_ok(e->dtype)) {
    hc_fmt(why, len, "Adasum combines floating-point tensors (float16, "
           "bfloat16, float32, float64), not %s", hora_dtype_name(e->dtype));
    return HORA_EINVAL;
  }
  if (e->count && !(e->flags & HP_F_RESIDENT)) {
    hc_fmt(why, len, "Adasum needs the whole tensor in the arena at once "
           "(hora_alloc memory, or room in the arena for libhora's copy)");
    return HORA_EINVAL;
  }
  int hier = hk_int(&r->job->knobs, hierarchical_allreduce) != 0;
  return hd_adasum_refuse(c, hier, why, len) ? HORA_EINVAL : 0;
}

static int check_broadcast(struct hd_comm *c, struct hd_rank *r,
                           const struct hp_sqe *e, char *why, size_t len) {
  if (e->root < 0 || e->root >= r->job->desc.size) {
    hc_fmt(why, len, "root rank %d is out of range [0, %d)", e->root,
           r->job->desc.size);
    return HORA_EINVAL;
  }
  if (hd_comm_member(c, e->root) < 0) {
    hc_fmt(why, len, "root rank %d is not a member of process set %u",
           e->root, c->id);
    return HORA_EINVAL;
  }
  return 0;
}

/* The output must lie in the arena, be large enough and aligned. */
static int check_recv(struct hd_rank *r, const struct hp_sqe *e, char *why,
                      size_t len) {
  if (!(e->flags & HP_F_RECV)) {
    hc_fmt(why, len, "no output buffer");
    return HORA_EINVAL;
  }
  return 0;
}

static int check_allgather(struct hd_comm *c, struct hd_rank *r,
                           const struct hp_sqe *e, char *why, size_t len) {
  if (e->flags & HP_F_AUX) {
    if (e->aux_count != (uint64_t)c->size) {
      hc_fmt(why, len, "%llu receive counts for a set of %d ranks",
             (unsigned long long)e->aux_count, c->size);
      return HORA_EINVAL;
    }
  } else if (e->count > UINT64_MAX / 16 / (uint64_t)c->size) {
    hc_fmt(why, len, "element count %llu is too large",
           (unsigned long long)e->count);
    return HORA_EINVAL;
  }
  return check_recv(r, e, why, len);
}

static int check_alltoall(struct hd_comm *c, struct hd_rank *r,
                          const struct hp_sqe *e, char *why, size_t len) {
  if (e->flags & HP_F_AUX) {
    if (e->aux_count != 2 * (uint64_t)c->size) {
      hc_fmt(why, len, "%llu split entries for a set of %d ranks (expected "
             "%d splits and %d receive splits)",
             (unsigned long long)e->aux_count, c->size, c->size, c->size);
      return HORA_EINVAL;
    }
  } else if (e->count % (uint64_t)c->size) {
    hc_fmt(why, len, "%llu elements do not split evenly among %d ranks",
           (unsigned long long)e->count, c->size);
    return HORA_EINVAL;
  }
  return check_recv(r, e, why, len);
}

static int check_reducescatter(struct hd_comm *c, struct hd_rank *r,
                               const struct hp_sqe *e, char *why,
                               size_t len) {
  int rc = check_op(c, r, e, why, len);
  return rc < 0 ? rc : check_recv(r, e, why, len);
}

static int check_ps_add(struct hd_comm *c, struct hd_rank *r,
                        const struct hp_sqe *e, char *why, size_t len) {
  if (c->id != 0) {
    hc_fmt(why, len, "process sets are added by every rank of the job");
    return HORA_EINVAL;
  }
  if (!(e->flags & HP_F_AUX) || !e->aux_count ||
      e->aux_count > (uint64_t)r->job->desc.size) {
    hc_fmt(why, len, "a process set needs 1 to %d ranks, not %llu",
           r->job->desc.size, (unsigned long long)e->aux_count);
    return HORA_EINVAL;
  }
  return 0;
}

static int check_global(struct hd_comm *c, struct hd_rank *r,
                        const struct hp_sqe *e, char *why, size_t len) {
  if (c->id != 0) {
    hc_fmt(why, len, "%s runs on the global process set only",
           hd_coll_name(e->coll));
    return HORA_EINVAL;
  }
  return 0;
}

static const struct hd_coll colls[] = {
#define HD_COLL_ENTRY(n, id, name, traits) [id] = {name, traits, NULL},
    HORA_COLL_MAP(HD_COLL_ENTRY)
#undef HD_COLL_ENTRY
};

/* The checks, by collective; the rest of each entry comes from hora.h. */
static int (*const checks[])(struct hd_comm *, struct hd_rank *,
                             const struct hp_sqe *, char *, size_t) = {
    [HORA_COLL_ALLREDUCE] = check_op,
    [HORA_COLL_BROADCAST] = check_broadcast,
    [HORA_COLL_ALLGATHER] = check_allgather,
    [HORA_COLL_ALLTOALL] = check_alltoall,
    [HORA_COLL_REDUCESCATTER] = check_reducescatter,
    [HORA_COLL_JOIN] = check_global,
    [HORA_COLL_PS_ADD] = check_ps_add,
    [HORA_COLL_PS_REMOVE] = check_global,
};

static struct hd_coll table[sizeof colls / sizeof colls[0]];

const struct hd_coll *hd_coll(int coll) {
  if (coll <= 0 || (size_t)coll >= sizeof colls / sizeof colls[0] ||
      !colls[coll].name)
    return NULL;
  struct hd_coll *c = &table[coll];
  if (!c->name) {
    *c = colls[coll];
    if ((size_t)coll < sizeof checks / sizeof checks[0])
      c->check = checks[coll];
  }
  return c;
}

const char *hd_coll_name(int coll) {
  const struct hd_coll *c = hd_coll(coll);
  return c ? c->name : "unknown collective";
}

uint64_t hd_name_hash(const char *s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

uint64_t hd_aux_hash(const int64_t *v, uint64_t n) {
  uint64_t h = 1469598103934665603ull;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t x = (uint64_t)v[i];
    for (int b = 0; b < 8; b++)
      h = (h ^ ((x >> (8 * b)) & 0xff)) * 1099511628211ull;
  }
  return h ^ n;
}

static void shape_str(const struct hd_meta *m, char *buf, size_t len) {
  size_t n = 0;
  buf[0] = '\0';
  n += (size_t)snprintf(buf + n, len - n, "[");
  if (!m->ndims)
    n += (size_t)snprintf(buf + n, len - n, "%llu",
                          (unsigned long long)m->count);
  for (int i = 0; i < m->ndims && n + 24 < len; i++)
    n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? ", " : "",
                          (long long)m->shape[i]);
  if (n + 2 < len) snprintf(buf + n, len - n, "]");
}

/* Whether the shapes agree, from dimension `from` on. */
static int same_shape(const struct hd_meta *a, const struct hd_meta *b,
                      int from) {
  if (!a->ndims && !b->ndims) return from > 0 || a->count == b->count;
  int na = a->ndims ? a->ndims : 1, nb = b->ndims ? b->ndims : 1;
  if (na != nb) return 0;
  for (int i = from; i < na; i++) {
    int64_t x = a->ndims ? a->shape[i] : (int64_t)a->count;
    int64_t y = b->ndims ? b->shape[i] : (int64_t)b->count;
    if (x != y) return 0;
  }
  return 1;
}

/* "as tensor 2 of a group of 3" / "alone" */
static void group_str(const struct hd_meta *m, char *buf, size_t len) {
  if (!m->group_n) hc_fmt(buf, len, "alone");
  else hc_fmt(buf, len, "as tensor %u of a group of %u", m->group_idx,
              m->group_n);
}

int hd_meta_mismatch(const char *name, const struct hd_meta *a, int ra,
                     const struct hd_meta *b, int rb, char *msg, size_t len) {
  if (!memcmp(a, b, sizeof *a)) return 0; /* the common case: the same */
  const struct hd_coll *c = hd_coll(a->coll);
  unsigned tr = c ? c->traits : 0;
  char sa[200], sb[200];
  if (b->coll != a->coll) {
    hc_fmt(msg, len, "Mismatched operations on tensor '%s': rank %d did an "
           "%s, but rank %d did a %s.", name, ra, hd_coll_name(a->coll), rb,
           hd_coll_name(b->coll));
  } else if (tr & HORA_CF_CTRL) {
    if (a->coll == HORA_COLL_PS_ADD && a->aux_hash != b->aux_hash)
      hc_fmt(msg, len, "Mismatched process sets: rank %d and rank %d asked "
             "to add different sets of ranks.", ra, rb);
    else if (a->coll == HORA_COLL_PS_REMOVE && a->root != b->root)
      hc_fmt(msg, len, "Mismatched process set removal: rank %d removes "
             "process set %d, but rank %d removes process set %d.", ra,
             a->root, rb, b->root);
    else
      return 0;
  } else if (b->dtype != a->dtype) {
    hc_fmt(msg, len, "Mismatched data types on tensor '%s': rank %d had "
           "type %s, but rank %d had type %s.", name, ra,
           hora_dtype_name(a->dtype), rb, hora_dtype_name(b->dtype));
  } else if ((tr & HORA_CF_SHAPE) && !same_shape(a, b, 0)) {
    shape_str(a, sa, sizeof sa);
    shape_str(b, sb, sizeof sb);
    hc_fmt(msg, len, "Mismatched %s tensor shapes on tensor '%s': rank %d "
           "sent a tensor of shape %s, but rank %d sent a tensor of shape "
           "%s.", hd_coll_name(a->coll), name, ra, sa, rb, sb);
  } else if ((tr & HORA_CF_TAIL) && !same_shape(a, b, 1)) {
    shape_str(a, sa, sizeof sa);
    shape_str(b, sb, sizeof sb);
    hc_fmt(msg, len, "Mismatched %s tensor shapes on tensor '%s': rank %d "
           "sent a tensor of shape %s, but rank %d sent a tensor of shape "
           "%s; only the first dimension may differ.", hd_coll_name(a->coll),
           name, ra, sa, rb, sb);
  } else if ((tr & HORA_CF_OP) && b->op != a->op) {
    hc_fmt(msg, len, "Mismatched reduction operations on tensor '%s': rank "
           "%d asked for %s, but rank %d asked for %s.", name, ra,
           hora_op_name(a->op), rb, hora_op_name(b->op));
  } else if ((tr & HORA_CF_OP) && (b->prescale != a->prescale ||
                                   b->postscale != a->postscale)) {
    hc_fmt(msg, len, "Mismatched prescale and/or postscale factors on tensor "
           "'%s': rank %d gave %g and %g, but rank %d gave %g and %g.", name,
           ra, a->prescale, a->postscale, rb, b->prescale, b->postscale);
  } else if ((a->flags ^ b->flags) & HD_MF_WIRE16) {
    hc_fmt(msg, len, "Mismatched compression on tensor '%s': rank %d sends "
           "it between hosts in 16 bits (HORA_REQ_WIRE16, Compression.fp16 "
           "or .bf16), but rank %d does not.", name,
           a->flags & HD_MF_WIRE16 ? ra : rb,
           a->flags & HD_MF_WIRE16 ? rb : ra);
  } else if (((a->flags & HD_MF_DEVICE) && (b->flags & HD_MF_HOSTMEM)) ||
             ((a->flags & HD_MF_HOSTMEM) && (b->flags & HD_MF_DEVICE))) {
    hc_fmt(msg, len, "Mismatched %s CPU/GPU device selection on tensor "
           "'%s': rank %d specified device GPU, but rank %d specified "
           "device CPU.", hd_coll_name(a->coll), name,
           a->flags & HD_MF_DEVICE ? ra : rb,
           a->flags & HD_MF_DEVICE ? rb : ra);
  } else if ((tr & HORA_CF_ROOT) && b->root != a->root) {
    hc_fmt(msg, len, "Mismatched broadcast root ranks on tensor '%s': rank "
           "%d gave root %d, but rank %d gave root %d.", name, ra, a->root,
           rb, b->root);
  } else if (a->group != b->group || a->group_n != b->group_n ||
             a->group_idx != b->group_idx) {
    group_str(a, sa, sizeof sa);
    group_str(b, sb, sizeof sb);
    hc_fmt(msg, len, "Mismatched grouping of tensor '%s': rank %d submitted "
           "it %s, but rank %d %s.", name, ra, sa, rb, sb);
  } else if ((tr & HORA_CF_VARY) && a->aux_hash != b->aux_hash) {
    hc_fmt(msg, len, "Mismatched %s sizes on tensor '%s': rank %d and rank "
           "%d expect different %s from the ranks.", hd_coll_name(a->coll),
           name, ra, rb, a->coll == HORA_COLL_ALLTOALL ? "splits" : "counts");
  } else {
    return 0;
  }
  return 1;
}

void hd_meta_to_ready(const struct hd_meta *m, struct hp_nego_ready *r) {
  r->coll = m->coll;
  r->dtype = m->dtype;
  r->op = m->op;
  r->ndims = m->ndims;
  r->root = m->root;
  r->count = m->count;
  memcpy(r->shape, m->shape, sizeof r->shape);
  r->prescale = m->prescale;
  r->postscale = m->postscale;
  r->aux_hash = m->aux_hash;
  r->group = m->group;
  r->group_n = m->group_n;
  r->group_idx = m->group_idx;
  if (m->flags & HD_MF_WIRE16) r->flags |= HP_NR_WIRE16;
  if (m->flags & HD_MF_DEVICE) r->flags |= HP_NR_DEVICE;
  if (m->flags & HD_MF_HOSTMEM) r->flags |= HP_NR_HOSTMEM;
}

void hd_meta_from_ready(const struct hp_nego_ready *r, struct hd_meta *m) {
  m->coll = r->coll;
  m->dtype = r->dtype;
  m->op = r->op;
  m->ndims = r->ndims;
  m->root = r->root;
  m->count = r->count;
  memcpy(m->shape, r->shape, sizeof m->shape);
  m->prescale = r->prescale;
  m->postscale = r->postscale;
  m->aux_hash = r->aux_hash;
  m->group = r->group;
  m->group_n = r->group_n;
  m->group_idx = r->group_idx;
  m->flags = (r->flags & HP_NR_WIRE16 ? HD_MF_WIRE16 : 0) |
             (r->flags & HP_NR_DEVICE ? HD_MF_DEVICE : 0) |
             (r->flags & HP_NR_HOSTMEM ? HD_MF_HOSTMEM : 0);
}

void hd_rs_block(uint64_t rows, int size, int member, uint64_t *first,
                 uint64_t *n) {
  uint64_t q = rows / (uint64_t)size, rem = rows % (uint64_t)size;
  uint64_t m = (uint64_t)member;
  *n = q + (m < rem);
  *first = m * q + (m < rem ? m : rem);
}

uint64_t hd_row_elems(const struct hd_meta *m) {
  if (!m->ndims || m->shape[0] <= 0) return 1;
  return m->count / (uint64_t)m->shape[0];
}
