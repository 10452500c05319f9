/* fast.h -- the job-wide segment of the small-operation fast path (a memfd
 * horad makes for a job whose ranks all lie on its host, passed to every
 * rank in its welcome, made anew for each session).
 *
 *   [hp_fast_hdr | nslots x hp_fast_slot | nslots x nranks x hp_fast_lane]
 *
 * A small allreduce or broadcast that every rank of its process set has
 * already completed once through horad, with the same name and metadata,
 * meets its peers at a slot: the one horad gave that name (in the set) with
 * its completions there (hp_cqe.chunk of a DONE: the slot plus 1; a slot
 * of its own for each of a session's first HP_FAST_SLOTS names), or else
 * one chosen by a hash of those. Each rank writes its metadata and data
 * into its own lane of the slot and adds itself to the slot's round; the
 * rank that completes the round (the closer) compares every lane's
 * metadata, reduces the lanes into each other with horad's kernels and
 * writes each lane's outcome. Different metadata at one slot (two
 * operations whose hashes meet, or ranks that submit different things)
 * fail the round, and each rank then submits its operation to horad, as
 * it would have without the fast path: horad's negotiation decides, so a
 * disagreement costs time, never a wrong result.
 *
 * A rank that waits longer than the wait limit (or sees a peer in join,
 * or horad stopping the fast path) withdraws: the round fails for those
 * in it, and the others, who had not come yet, find a tombstone naming
 * the operation and go to horad at once when they come with it.
 *
 * The state word of a slot (all changes by compare-and-swap):
 *   bits  0-15  ranks in the current round
 *   bits 16-31  ranks of its set still to be told of a withdrawn round
 *               (tombstone)
 *   bits 32-35  the rank that withdrew it (its lane names the operation)
 *   bits 36-63  the round's number
 * A lane's outcome word is (round + 1) << 1 | failed (0: none yet), written
 * by the rank that closed or withdrew the round, after the lane's data. */
#ifndef HORA_PROTO_FAST_H
#define HORA_PROTO_FAST_H

#include <stdatomic.h>
#include <stdint.h>

#include "shm.h"

#define HP_FAST_MAGIC 0x5453414641524f48ull /* "HORAFAST" */
#define HP_FAST_VERSION 2u
#define HP_FAST_RANKS 16u   /* ranks on the host, at most */
#define HP_FAST_SLOTS 512u  /* a power of two */
#define HP_FAST_BYTES 4096u /* data bytes of one rank's tensor, at most */
#define HP_FAST_COLLS 3u    /* counted: 0 unused, allreduce, broadcast */

/* What must be equal on every rank for the round to complete. */
struct hp_fast_meta {
  uint8_t coll, dtype, op, ndims;
  int32_t root;
  uint32_t flags;
  uint32_t comm;    /* the process set */
  uint32_t members; /* its ranks, one bit each: the round is complete when
                       they all are in it */
  uint16_t name_len, pad0;
  uint64_t count;
  double prescale, postscale;
  int64_t shape[HP_MAX_DIMS];
  char name[HP_NAME_MAX + 1];
};

struct hp_fast_hdr {
  uint64_t magic;
  uint32_t version;
  uint32_t nranks; /* the job's ranks, all on this host */
  uint32_t nslots;
  uint32_t lane_size;
  uint64_t slots_off, lanes_off, total_size;
  /* horad: 1 while new operations must go to horad (the timeline is
   * being written: it records every operation) */
  _Alignas(64) _Atomic uint32_t off;
  /* ranks inside hora_join(): their peers go to horad, which gives a
   * joined rank's neutral contribution */
  _Alignas(64) _Atomic uint32_t joined;
  /* completed rounds and their bytes (one rank's tensor), by collective
   * and dtype, counted by the closers; horad adds them to its metrics */
  _Alignas(64) _Atomic uint64_t ops[HP_FAST_COLLS][16];
  _Atomic uint64_t bytes[HP_FAST_COLLS][16];
};

struct hp_fast_slot {
  _Alignas(64) _Atomic uint64_t state;
  _Atomic uint64_t tomb_ns; /* when the tombstone was laid (CLOCK_MONOTONIC) */
};

struct hp_fast_lane {
  _Alignas(64) _Atomic uint32_t outcome;
  _Atomic uint32_t sleeping; /* the rank sleeps on outcome (futex) */
  struct hp_fast_meta meta;
  _Alignas(64) unsigned char data[HP_FAST_BYTES];
};

#define HP_FAST_ARRIVED(s) ((uint32_t)((s) & 0xffffu))
#define HP_FAST_TOMB(s) ((uint32_t)(((s) >> 16) & 0xffffu))
#define HP_FAST_FROM(s) ((uint32_t)(((s) >> 32) & 0xfu))
#define HP_FAST_ROUND(s) ((s) >> 36)
#define HP_FAST_STATE(round, tomb, from, arrived)                              \
  ((uint64_t)(round) << 36 | (uint64_t)((from) & 0xfu) << 32 |                \
   (uint64_t)((tomb) & 0xffffu) << 16 | (uint64_t)((arrived) & 0xffffu))
/* round + 1: a lane nobody has written yet (0) names no round */
#define HP_FAST_OUTCOME(round, failed)                                         \
  ((uint32_t)(((uint32_t)(round) + 1u) << 1 | ((failed) ? 1u : 0u)))

/* The counters' index of a collective (0: not one the fast path takes). */
static inline uint32_t hp_fast_coll_index(int coll) {
  return coll == HORA_COLL_ALLREDUCE ? 1u : coll == HORA_COLL_BROADCAST ? 2u : 0u;
}

/* Fills the layout for n ranks into *h; returns the total size. */
static inline uint64_t hp_fast_layout(struct hp_fast_hdr *h, uint32_t n) {
  const uint64_t page = 4096;
  h->magic = HP_FAST_MAGIC;
  h->version = HP_FAST_VERSION;
  h->nranks = n;
  h->nslots = HP_FAST_SLOTS;
  h->lane_size = (uint32_t)sizeof(struct hp_fast_lane);
  h->slots_off = (sizeof(struct hp_fast_hdr) + 63) / 64 * 64;
  h->lanes_off = (h->slots_off + (uint64_t)HP_FAST_SLOTS *
                                     sizeof(struct hp_fast_slot) + page - 1) /
                 page * page;
  h->total_size = h->lanes_off + (uint64_t)HP_FAST_SLOTS * n * h->lane_size;
  h->total_size = (h->total_size + page - 1) / page * page;
  return h->total_size;
}

#endif
