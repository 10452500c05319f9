/* ring.h -- single-producer/single-consumer ring of fixed-size slots in
 * shared memory.
 *
 * The shared part (struct hp_ring) holds only the two indices, each on its
 * own cache line. Each side keeps a private cursor with a cached copy of the
 * other side's index and rereads the shared one only when the cache says
 * full (producer) or empty (consumer), so a busy ring costs one cache-line
 * transfer per batch, not per slot. Indices count up forever (64 bits); the
 * slot is index & (nslots - 1). No function here makes a system call. */
#ifndef HORA_PROTO_RING_H
#define HORA_PROTO_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct hp_ring {
  _Alignas(64) _Atomic uint64_t head; /* next slot the consumer reads */
  char pad0[64 - sizeof(uint64_t)];
  _Alignas(64) _Atomic uint64_t tail; /* next slot the producer writes */
  char pad1[64 - sizeof(uint64_t)];
};

/* A side's private view of one ring. */
struct hp_ring_cursor {
  struct hp_ring *ring;
  unsigned char *slots;
  uint32_t nslots; /* power of two */
  uint32_t slot_size;
  uint64_t pos;    /* own index (tail for the producer, head for consumer) */
  uint64_t cached; /* last seen index of the other side */
};

static inline void hp_ring_init(struct hp_ring *r) {
  atomic_store_explicit(&r->head, 0, memory_order_relaxed);
  atomic_store_explicit(&r->tail, 0, memory_order_relaxed);
}

/* Binds a cursor. `producer` selects which index is ours. */
static inline void hp_ring_attach(struct hp_ring_cursor *c, struct hp_ring *r,
                                  void *slots, uint32_t nslots,
                                  uint32_t slot_size, int producer) {
  c->ring = r;
  c->slots = (unsigned char *)slots;
  c->nslots = nslots;
  c->slot_size = slot_size;
  if (producer) {
    c->pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
    c->cached = atomic_load_explicit(&r->head, memory_order_acquire);
  } else {
    c->pos = atomic_load_explicit(&r->head, memory_order_relaxed);
    c->cached = atomic_load_explicit(&r->tail, memory_order_acquire);
  }
}

/* Producer: the next free slot to fill, or NULL when the ring is full. */
static inline void *hp_ring_reserve(struct hp_ring_cursor *c) {
  if (c->pos - c->cached >= c->nslots) {
    c->cached = atomic_load_explicit(&c->ring->head, memory_order_acquire);
    if (c->pos - c->cached >= c->nslots) return NULL;
  }
  return c->slots + (size_t)(c->pos & (c->nslots - 1)) * c->slot_size;
}

/* Producer: publishes the slot returned by hp_ring_reserve(). */
static inline void hp_ring_commit(struct hp_ring_cursor *c) {
  c->pos++;
  atomic_store_explicit(&c->ring->tail, c->pos, memory_order_release);
}

/* Consumer: the oldest filled slot, or NULL when the ring is empty. The slot
 * stays valid until hp_ring_release(). */
static inline const void *hp_ring_peek(struct hp_ring_cursor *c) {
  if (c->pos == c->cached) {
    c->cached = atomic_load_explicit(&c->ring->tail, memory_order_acquire);
    if (c->pos == c->cached) return NULL;
  }
  return c->slots + (size_t)(c->pos & (c->nslots - 1)) * c->slot_size;
}

static inline void hp_ring_release(struct hp_ring_cursor *c) {
  c->pos++;
  atomic_store_explicit(&c->ring->head, c->pos, memory_order_release);
}

/* Consumer: 1 when something is waiting, re-reading the shared tail. */
static inline int hp_ring_nonempty(struct hp_ring_cursor *c) {
  if (c->pos != c->cached) return 1;
  c->cached = atomic_load_explicit(&c->ring->tail, memory_order_acquire);
  return c->pos != c->cached;
}

/* Consumer: validates the indices a (possibly hostile) producer wrote;
 * 0 when sane, -1 when the tail is behind the head or too far ahead. */
static inline int hp_ring_check(struct hp_ring_cursor *c) {
  uint64_t t = atomic_load_explicit(&c->ring->tail, memory_order_acquire);
  return (t - c->pos) <= c->nslots ? 0 : -1;
}

#endif
