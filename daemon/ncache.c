/* ncache.c -- the response cache: negotiation messages that name an
 * operation seen before carry a number instead of its name and metadata.
 *
 * Each direction of each communicator's link between a host and its
 * coordinator has a dictionary of its own, kept by the sender (NEGO_READY:
 * the host; NEGO_DECIDE and NEGO_PLAN: the coordinator, one per host) and
 * learnt by the receiver in the order the frames arrive: a frame that
 * names an operation the sender has not numbered yet, or whose metadata
 * changed, carries it whole with the number it now has (HP_CREF_SET); a
 * later one carries the number alone (HP_CREF_USE). When the dictionary
 * is full (cache_capacity entries) the sender reuses the numbers in turn
 * (the oldest first), and says so the same way. One TCP connection
 * carries a direction's frames in order, so the receiver's dictionary is
 * the sender's as of each frame: no number is ever stale, and none needs
 * a reply. A number the receiver has not learnt is a protocol error. */
#include <stdlib.h>
#include <string.h>

#include "daemon.h"

struct hd_nc_slot {
  uint32_t next; /* the bucket's next slot + 1; 0 ends it */
  int used;
  struct hd_meta key;
  char name[HP_NAME_MAX + 1];
};

static int nc_alloc(struct hd_ncache *nc, uint32_t cap) {
  if (nc->slot) return 0;
  nc->slot = calloc(cap, sizeof *nc->slot);
  nc->nbuckets = 2 * cap;
  nc->bucket = calloc(nc->nbuckets, sizeof *nc->bucket);
  if (!nc->slot || !nc->bucket) {
    free(nc->slot);
    free(nc->bucket);
    nc->slot = NULL;
    nc->bucket = NULL;
    return -1;
  }
  nc->cap = cap;
  return 0;
}

void hd_nc_free(struct hd_ncache *nc) {
  free(nc->slot);
  free(nc->bucket);
  memset(nc, 0, sizeof *nc);
}

static uint32_t *bucket_of(struct hd_ncache *nc, const char *name) {
  return &nc->bucket[hd_name_hash(name) % nc->nbuckets];
}

static void unlink_slot(struct hd_ncache *nc, uint32_t id) {
  uint32_t *pp = bucket_of(nc, nc->slot[id].name);
  while (*pp && *pp != id + 1) pp = &nc->slot[*pp - 1].next;
  if (*pp) *pp = nc->slot[id].next;
  nc->slot[id].next = 0;
}

int hd_nc_encode(struct hd_ncache *nc, uint32_t cap, const char *name,
                 const struct hd_meta *key, uint32_t *cid) {
  if (!cap || nc_alloc(nc, cap) < 0) return HP_CREF_NONE;
  uint32_t *pp = bucket_of(nc, name), id = *pp;
  while (id && strcmp(nc->slot[id - 1].name, name)) id = nc->slot[id - 1].next;
  if (id) {
    struct hd_nc_slot *s = &nc->slot[id - 1];
    *cid = id - 1;
    if (!memcmp(&s->key, key, sizeof *key)) return HP_CREF_USE;
    s->key = *key; /* the same name, other metadata: renumbered in place */
    return HP_CREF_SET;
  }
  if (nc->n < nc->cap) {
    id = nc->n++;
  } else { /* full: the numbers are reused in turn */
    id = nc->hand;
    nc->hand = (nc->hand + 1) % nc->cap;
    unlink_slot(nc, id);
  }
  struct hd_nc_slot *s = &nc->slot[id];
  s->used = 1;
  s->key = *key;
  hc_fmt(s->name, sizeof s->name, "%s", name);
  pp = bucket_of(nc, name);
  s->next = *pp;
  *pp = id + 1;
  *cid = id;
  return HP_CREF_SET;
}

int hd_nc_decode(struct hd_ncache *nc, uint32_t cap, int cref, uint32_t cid,
                 char *name, size_t namelen, struct hd_meta *key) {
  if (cref == HP_CREF_NONE) return 0;
  if (cid >= cap || nc_alloc(nc, cap) < 0) return -1;
  struct hd_nc_slot *s = &nc->slot[cid];
  if (cref == HP_CREF_SET) {
    s->used = 1;
    s->key = *key;
    hc_fmt(s->name, sizeof s->name, "%s", name);
    return 0;
  }
  if (!s->used) return -1;
  *key = s->key;
  hc_fmt(name, namelen, "%s", s->name);
  return 0;
}

/* a bound on the knob: each dictionary takes about 320 bytes an entry */
#define NC_CAP_MAX 65536u

uint32_t hd_nc_capacity(const struct hd_job *job) {
  long long v = hk_int(&job->knobs, cache_capacity);
  return v <= 0 ? 0 : v > NC_CAP_MAX ? NC_CAP_MAX : (uint32_t)v;
}
