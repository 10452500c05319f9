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
#include <stdlib.h>
#include <string.h>

#include "daemon.h"

struct centry {
  struct centry *next;
  struct hp_nego_ready first; /* the first host's metadata */
  int32_t last_rank; /* join: the rank the last host reported */
  int nready;
  int mismatch;
  char msg[HP_MSG_MAX + 1];
  uint64_t t_first;
  int warned;
  unsigned char seen[]; /* one per host */
};

struct hd_coord {
  struct centry **table;
  size_t size, n;
  uint64_t seq;
  unsigned char *joined; /* hosts whose ranks have all joined */
};

static struct hd_coord *coord(struct hd_comm *c) {
  if (!c->coord) {
    c->coord = calloc(1, sizeof *c->coord);
    if (c->coord) {
      c->coord->size = 256;
      c->coord->table = calloc(c->coord->size, sizeof *c->coord->table);
      c->coord->joined = calloc((size_t)c->nhosts, 1);
      if (!c->coord->table || !c->coord->joined) {
        free(c->coord->table);
        free(c->coord->joined);
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

/* Sends the decision on e (status 0: run it as decision number `seq`) to
 * every host that said ready for it: only those hold it (a stalled
 * operation fails only where it was submitted). */
static void send_decision(struct hd_comm *c, struct centry *e, uint64_t seq,
                          int status) {
  struct hd_daemon *d = c->d;
  struct hp_nego_decide m = {.comm = c->id, .seq = seq, .status = status,
                             .value = e->last_rank, .meta = e->first};
  memcpy(m.name, e->first.name, sizeof m.name);
  if (status) hc_fmt(m.msg, sizeof m.msg, "%s", e->msg);
  unsigned char *joined = c->coord->joined;
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  /* hosts whose ranks all joined run it too, with neutral inputs */
  for (int i = 1; i < c->nhosts; i++) {
    if (!e->seen[i] && (!joined[i] || status || seq == UINT64_MAX)) continue;
    hp_enc_nego_decide(&w, &m);
    hd_mesh_send(d, c->hosts[i], &w);
  }
  hp_wbuf_free(&w);
  if (e->seen[0] || (joined[0] && !status && seq != UINT64_MAX))
    hd_decide(d, &m);
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
      hd_host_name(c->d, c->hosts[i], name, sizeof name);
      e->mismatch = HORA_EINVAL;
      hc_fmt(e->msg, sizeof e->msg, "%s '%s' cannot run while every rank of "
             "%s has joined", hd_coll_name(coll), e->first.name, name);
      return;
    }
}

static void unlink_entry(struct hd_coord *c, struct centry *e);

/* A host joined: what waited only for it is ready now. */
static void recheck(struct hd_comm *c) {
  struct hd_coord *co = c->coord;
  for (size_t i = 0; i < co->size; i++) {
    struct centry *e = co->table[i], *next;
    for (; e; e = next) {
      next = e->next;
      if (e->first.coll == HORA_COLL_JOIN || nready(c, e) < c->nhosts)
        continue;
      check_joined(c, e);
      send_decision(c, e, co->seq++, e->mismatch ? (e->mismatch < 0 ? e->mismatch : HORA_EMISMATCH) : 0);
      unlink_entry(co, e);
    }
  }
}

static void decide(struct hd_comm *c, struct centry *e) {
  check_joined(c, e);
  send_decision(c, e, c->coord->seq++,
                e->mismatch ? (e->mismatch < 0 ? e->mismatch : HORA_EMISMATCH)
                            : 0);
  if (e->first.coll == HORA_COLL_JOIN)
    memset(c->coord->joined, 0, (size_t)c->nhosts);
}

static void unlink_entry(struct hd_coord *c, struct centry *e) {
  struct centry **pp = &c->table[hd_name_hash(e->first.name) & (c->size - 1)];
  while (*pp != e) pp = &(*pp)->next;
  *pp = e->next;
  c->n--;
  free(e);
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
  e->seen[host] = 1;
  e->last_rank = m->rank;
  e->nready++;
  if (hd_comm_host_left(cm)) { /* a host of the set has left: never now */
    hc_fmt(e->msg, sizeof e->msg, "%s '%s' cannot run: %s",
           hd_coll_name(e->first.coll), e->first.name,
           cm->d->left_msg[0] ? cm->d->left_msg : "a host has left");
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
  unlink_entry(c, e);
}

/* Names the hosts that have not said ready, e.g. "h2 (ranks 2-3)". */
static void missing(struct hd_comm *c, struct centry *e, char *buf,
                    size_t len) {
  size_t n = 0;
  buf[0] = '\0';
  for (int i = 0; i < c->nhosts && n + 64 < len; i++) {
    if (e->seen[i]) continue;
    char name[300];
    hd_host_name(c->d, c->hosts[i], name, sizeof name);
    n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? ", " : "", name);
  }
}

/* The stall inspector across hosts: warns once about a tensor some hosts'
 * ranks all submitted while other hosts' ranks did not; past the shutdown
 * time fails it where it was submitted. */
void hd_coord_check_stalls(struct hd_comm *cm) {
  struct hd_daemon *d = cm->d;
  struct hd_coord *c = cm->coord;
  if (!c) return;
  uint64_t now = hc_now_ns();
  for (size_t i = 0; i < c->size; i++) {
    struct centry *e = c->table[i], *next;
    for (; e; e = next) {
      next = e->next;
      uint64_t age = now - e->t_first;
      char who[512];
      if (d->stall_fail_ns && age >= d->stall_fail_ns) {
        missing(cm, e, who, sizeof who);
        hc_fmt(e->msg, sizeof e->msg, "%s '%s' stalled for %llu s: the ranks "
               "of %s never submitted it", hd_coll_name(e->first.coll),
               e->first.name, (unsigned long long)(age / 1000000000u), who);
        hc_error("%s", e->msg);
        send_decision(cm, e, UINT64_MAX, HORA_ESTALL);
        unlink_entry(c, e);
        continue;
      }
      if (d->stall_warn_ns && age >= d->stall_warn_ns && !e->warned) {
        e->warned = 1;
        missing(cm, e, who, sizeof who);
        hc_warn("stall: %s '%s' has waited %llu s for the ranks of %s; the "
                "other hosts' ranks submitted it. Ranks may be issuing "
                "collectives in a different order or with different names.",
                hd_coll_name(e->first.coll), e->first.name,
                (unsigned long long)(age / 1000000000u), who);
      }
    }
  }
}

void hd_coord_free(struct hd_comm *cm) {
  struct hd_coord *c = cm->coord;
  if (!c) return;
  for (size_t i = 0; i < c->size; i++)
    while (c->table[i]) {
      struct centry *e = c->table[i];
      c->table[i] = e->next;
      free(e);
    }
  free(c->table);
  free(c->joined);
  free(c);
  cm->coord = NULL;
}

/* ---- readiness for a set not added yet ---------------------------------- */

#define HELD_MAX 65536

struct hd_held_ready {
  int from;
  struct hp_nego_ready m;
};

int hd_coord_hold(struct hd_daemon *d, int from,
                  const struct hp_nego_ready *m) {
  if (d->nheld >= HELD_MAX || m->comm >= d->ncomms + 1024) return -1;
  struct hd_held_ready *v = realloc(d->held, (d->nheld + 1) * sizeof *v);
  if (!v) return -1;
  d->held = v;
  v[d->nheld].from = from;
  v[d->nheld].m = *m;
  d->nheld++;
  return 0;
}

void hd_coord_replay(struct hd_comm *c) {
  struct hd_daemon *d = c->d;
  size_t k = 0;
  for (size_t i = 0; i < d->nheld; i++) {
    struct hd_held_ready *h = &d->held[i];
    if (h->m.comm != c->id) {
      d->held[k++] = *h;
      continue;
    }
    int pos = -1;
    for (int j = 0; j < c->nhosts; j++)
      if (c->hosts[j] == h->from) pos = j;
    if (c->me == 0 && pos > 0) hd_coord_ready(c, pos, &h->m);
    else hc_warn("readiness for process set %u from host %d, which has no "
                 "part in it; ignored", c->id, h->from);
  }
  d->nheld = k;
}

void hd_coord_held_free(struct hd_daemon *d) {
  free(d->held);
  d->held = NULL;
  d->nheld = 0;
}

void hd_coord_fail(struct hd_comm *cm, const char *why) {
  struct hd_coord *c = cm->coord;
  if (!c) return;
  for (size_t i = 0; i < c->size; i++)
    while (c->table[i]) {
      struct centry *e = c->table[i];
      hc_fmt(e->msg, sizeof e->msg, "%s '%s' cannot run: %s",
             hd_coll_name(e->first.coll), e->first.name, why);
      send_decision(cm, e, UINT64_MAX, HORA_EPEERGONE);
      unlink_entry(c, e);
    }
}
