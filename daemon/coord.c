/* coord.c -- negotiation across hosts, on the coordinator (host 0).
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
};

static struct hd_coord *coord(struct hd_daemon *d) {
  if (!d->coord) {
    d->coord = calloc(1, sizeof *d->coord);
    if (d->coord) {
      d->coord->size = 256;
      d->coord->table = calloc(d->coord->size, sizeof *d->coord->table);
      if (!d->coord->table) {
        free(d->coord);
        d->coord = NULL;
      }
    }
  }
  return d->coord;
}

static int mismatch(const struct hp_nego_ready *a,
                    const struct hp_nego_ready *b, char *msg, size_t len) {
  struct hd_meta ma = {a->coll, a->dtype, a->op, a->root, a->count};
  struct hd_meta mb = {b->coll, b->dtype, b->op, b->root, b->count};
  return hd_meta_mismatch(a->name, &ma, a->rank, &mb, b->rank, msg, len);
}

/* Sends the decision on e (status 0: run it as decision number `seq`) to
 * every host that said ready for it: only those hold it (a stalled
 * operation fails only where it was submitted). */
static void send_decision(struct hd_daemon *d, struct centry *e,
                          uint64_t seq, int status) {
  struct hp_nego_decide m = {.seq = seq, .status = status};
  memcpy(m.name, e->first.name, sizeof m.name);
  if (status) hc_fmt(m.msg, sizeof m.msg, "%s", e->msg);
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  for (uint32_t i = 1; i < d->job.nhosts; i++) {
    if (!e->seen[i]) continue;
    hp_enc_nego_decide(&w, &m);
    hd_mesh_send(d, (int)i, &w);
  }
  hp_wbuf_free(&w);
  if (e->seen[0]) hd_decide(d, &m);
}

static void decide(struct hd_daemon *d, struct centry *e) {
  send_decision(d, e, d->coord->seq++, e->mismatch ? HORA_EMISMATCH : 0);
}

static void unlink_entry(struct hd_coord *c, struct centry *e) {
  struct centry **pp = &c->table[hd_name_hash(e->first.name) & (c->size - 1)];
  while (*pp != e) pp = &(*pp)->next;
  *pp = e->next;
  c->n--;
  free(e);
}

void hd_coord_ready(struct hd_daemon *d, int host,
                    const struct hp_nego_ready *m) {
  struct hd_coord *c = coord(d);
  if (!c) {
    hc_error("coordinator out of memory");
    return;
  }
  struct centry **pp = &c->table[hd_name_hash(m->name) & (c->size - 1)], *e;
  for (e = *pp; e && strcmp(e->first.name, m->name); e = e->next) {}
  if (!e) {
    e = calloc(1, sizeof *e + d->job.nhosts);
    if (!e) {
      hc_error("coordinator out of memory");
      return;
    }
    e->first = *m;
    e->t_first = hc_now_ns();
    if (m->msg[0]) {
      e->mismatch = 1;
      hc_fmt(e->msg, sizeof e->msg, "%s", m->msg);
    }
    e->next = *pp;
    *pp = e;
    c->n++;
  } else if (e->seen[host]) {
    hc_warn("host %d said ready twice for tensor '%s'; ignored", host,
            m->name);
    return;
  } else if (!e->mismatch && m->msg[0]) {
    e->mismatch = 1;
    hc_fmt(e->msg, sizeof e->msg, "%s", m->msg);
  } else if (!e->mismatch) {
    e->mismatch = mismatch(&e->first, m, e->msg, sizeof e->msg);
  }
  e->seen[host] = 1;
  if (++e->nready < (int)d->job.nhosts) return;
  decide(d, e);
  unlink_entry(c, e);
}

/* Names the hosts that have not said ready, e.g. "h2 (ranks 2-3)". */
static void missing(struct hd_daemon *d, struct centry *e, char *buf,
                    size_t len) {
  size_t n = 0;
  buf[0] = '\0';
  for (uint32_t i = 0; i < d->job.nhosts && n + 64 < len; i++) {
    if (e->seen[i]) continue;
    char name[300];
    hd_host_name(d, (int)i, name, sizeof name);
    n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? ", " : "", name);
  }
}

/* The stall inspector across hosts: warns once about a tensor some hosts'
 * ranks all submitted while other hosts' ranks did not; past the shutdown
 * time fails it where it was submitted. */
void hd_coord_check_stalls(struct hd_daemon *d) {
  struct hd_coord *c = d->coord;
  if (!c) return;
  uint64_t now = hc_now_ns();
  for (size_t i = 0; i < c->size; i++) {
    struct centry *e = c->table[i], *next;
    for (; e; e = next) {
      next = e->next;
      uint64_t age = now - e->t_first;
      char who[512];
      if (d->stall_fail_ns && age >= d->stall_fail_ns) {
        missing(d, e, who, sizeof who);
        hc_fmt(e->msg, sizeof e->msg, "%s '%s' stalled for %llu s: the ranks "
               "of %s never submitted it", hd_coll_name(e->first.coll),
               e->first.name, (unsigned long long)(age / 1000000000u), who);
        hc_error("%s", e->msg);
        send_decision(d, e, UINT64_MAX, HORA_ESTALL);
        unlink_entry(c, e);
        continue;
      }
      if (d->stall_warn_ns && age >= d->stall_warn_ns && !e->warned) {
        e->warned = 1;
        missing(d, e, who, sizeof who);
        hc_warn("stall: %s '%s' has waited %llu s for the ranks of %s; the "
                "other hosts' ranks submitted it. Ranks may be issuing "
                "collectives in a different order or with different names.",
                hd_coll_name(e->first.coll), e->first.name,
                (unsigned long long)(age / 1000000000u), who);
      }
    }
  }
}

void hd_coord_free(struct hd_daemon *d) {
  struct hd_coord *c = d->coord;
  if (!c) return;
  for (size_t i = 0; i < c->size; i++)
    while (c->table[i]) {
      struct centry *e = c->table[i];
      c->table[i] = e->next;
      free(e);
    }
  free(c->table);
  free(c);
  d->coord = NULL;
}
