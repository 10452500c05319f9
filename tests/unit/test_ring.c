/* test_ring.c -- the single-producer/single-consumer ring of proto/ring.h:
 * push and pop, full and empty, many laps with indices across 2^32 and 2^64,
 * a two-thread stress test, and hp_ring_check on corrupted indices. */
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>

#include "ring.h"
#include "testlib.h"

#define SLOT 24 /* deliberately not a power of two */

struct item {
  uint64_t seq;
  uint64_t check;
  uint32_t len;
  uint32_t pad;
};

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

/* A ring of `nslots` whose both indices start at `start`, with a producer
 * and a consumer cursor. */
struct fixture {
  struct hp_ring ring;
  unsigned char *slots;
  struct hp_ring_cursor prod, cons;
  uint32_t nslots;
};

static void fx_init(struct fixture *f, uint32_t nslots, uint64_t start) {
  hp_ring_init(&f->ring);
  atomic_store(&f->ring.head, start);
  atomic_store(&f->ring.tail, start);
  f->nslots = nslots;
  f->slots = calloc(nslots, SLOT);
  hp_ring_attach(&f->prod, &f->ring, f->slots, nslots, SLOT, 1);
  hp_ring_attach(&f->cons, &f->ring, f->slots, nslots, SLOT, 0);
}

static void fx_free(struct fixture *f) {
  free(f->slots);
}

static int push(struct fixture *f, uint64_t seq) {
  void *p = hp_ring_reserve(&f->prod);
  if (!p) return 0;
  struct item it = {seq, mix(seq), (uint32_t)seq, 0};
  memcpy(p, &it, sizeof it);
  hp_ring_commit(&f->prod);
  return 1;
}

/* Pops one item; returns 1 and its sequence number, 0 when empty, -1 when
 * the content is wrong. */
static int pop(struct fixture *f, uint64_t *seq) {
  const void *p = hp_ring_peek(&f->cons);
  if (!p) return 0;
  struct item it;
  memcpy(&it, p, sizeof it);
  hp_ring_release(&f->cons);
  *seq = it.seq;
  return it.check == mix(it.seq) && it.len == (uint32_t)it.seq ? 1 : -1;
}

static void test_layout(void) {
  CHECK_EQ_INT(sizeof(struct hp_ring), 128);
  CHECK_EQ_INT(offsetof(struct hp_ring, head), 0);
  CHECK_EQ_INT(offsetof(struct hp_ring, tail), 64);
  CHECK_EQ_INT(_Alignof(struct hp_ring), 64);
}

static void test_push_pop(void) {
  struct fixture f;
  fx_init(&f, 8, 0);
  uint64_t s = 99;
  CHECK(hp_ring_peek(&f.cons) == NULL);
  CHECK_EQ_INT(hp_ring_nonempty(&f.cons), 0);
  CHECK_EQ_INT(pop(&f, &s), 0);
  CHECK_EQ_INT(push(&f, 7), 1);
  CHECK_EQ_INT(hp_ring_nonempty(&f.cons), 1);
  CHECK_EQ_INT(atomic_load(&f.ring.tail), 1);
  CHECK_EQ_INT(atomic_load(&f.ring.head), 0);
  /* peek does not consume: the same slot twice */
  CHECK(hp_ring_peek(&f.cons) == hp_ring_peek(&f.cons));
  CHECK(hp_ring_peek(&f.cons) == (const void *)f.slots);
  CHECK_EQ_INT(pop(&f, &s), 1);
  CHECK_EQ_INT(s, 7);
  CHECK_EQ_INT(atomic_load(&f.ring.head), 1);
  CHECK_EQ_INT(pop(&f, &s), 0);
  CHECK_EQ_INT(hp_ring_nonempty(&f.cons), 0);
  /* slot addresses step by slot_size */
  CHECK(hp_ring_reserve(&f.prod) == (void *)(f.slots + SLOT));
  fx_free(&f);
}

static void test_full_empty(void) {
  struct fixture f;
  fx_init(&f, 4, 0);
  uint64_t s;
  for (uint64_t i = 0; i < 4; i++)
    CHECK_EQ_INT(push(&f, i), 1);
  CHECK(hp_ring_reserve(&f.prod) == NULL); /* full */
  CHECK(hp_ring_reserve(&f.prod) == NULL); /* and stays full */
  CHECK_EQ_INT(hp_ring_check(&f.cons), 0);
  CHECK_EQ_INT(pop(&f, &s), 1);
  CHECK_EQ_INT(s, 0);
  /* the producer sees the freed slot (it rereads head when it looks full) */
  CHECK_EQ_INT(push(&f, 4), 1);
  CHECK(hp_ring_reserve(&f.prod) == NULL);
  for (uint64_t i = 1; i <= 4; i++) {
    CHECK_EQ_INT(pop(&f, &s), 1);
    CHECK_EQ_INT(s, i);
  }
  CHECK_EQ_INT(pop(&f, &s), 0); /* empty */
  CHECK(hp_ring_reserve(&f.prod) != NULL);
  fx_free(&f);
}

/* A single slot ring alternates full and empty. */
static void test_one_slot(void) {
  struct fixture f;
  fx_init(&f, 1, 5);
  uint64_t s;
  for (uint64_t i = 0; i < 100; i++) {
    CHECK_EQ_INT(push(&f, i), 1);
    CHECK(hp_ring_reserve(&f.prod) == NULL);
    CHECK_EQ_INT(pop(&f, &s), 1);
    CHECK_EQ_INT(s, i);
    CHECK(hp_ring_peek(&f.cons) == NULL);
  }
  fx_free(&f);
}

/* Many laps in batches of varying size from a given start index. */
static void laps(uint64_t start, uint32_t nslots) {
  struct fixture f;
  fx_init(&f, nslots, start);
  uint64_t next_in = 0, next_out = 0, s;
  int bad = 0;
  for (int round = 0; round < 2000 && !bad; round++) {
    uint32_t want = (uint32_t)(mix((uint64_t)round) % (nslots + 2));
    for (uint32_t i = 0; i < want && push(&f, next_in); i++)
      next_in++;
    if (next_in - next_out > nslots) bad = 1;
    uint32_t take = (uint32_t)(mix((uint64_t)round + 7777) % (nslots + 2));
    for (uint32_t i = 0; i < take; i++) {
      int r = pop(&f, &s);
      if (r == 0) break;
      if (r < 0 || s != next_out) {
        TL_FAIL("start %" PRIu64 ": got seq %" PRIu64 " (ok %d), want %" PRIu64,
                start, s, r, next_out);
        bad = 1;
        break;
      }
      next_out++;
    }
    if (hp_ring_check(&f.cons)) bad = 1;
  }
  while (!bad && next_out < next_in) {
    if (pop(&f, &s) != 1 || s != next_out) bad = 1;
    next_out++;
  }
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_INT(pop(&f, &s), 0);
  CHECK(next_in > 10 * (uint64_t)nslots); /* really went round many laps */
  CHECK_EQ_INT(atomic_load(&f.ring.tail) - start, next_in);
  CHECK_EQ_INT(atomic_load(&f.ring.head) - start, next_in);
  fx_free(&f);
}

static void test_laps(void) {
  laps(0, 8);
  laps(0, 64);
  laps((1ull << 32) - 37, 8); /* across 2^32: no 32-bit truncation */
  laps((1ull << 32) - 1, 16);
  laps((1ull << 33) + 5, 4);
  laps(UINT64_MAX - 50, 8); /* across 2^64: unsigned wrap */
  laps(UINT64_MAX, 2);
}

/* The slot for an index is index mod nslots, whatever the start. */
static void test_slot_index(void) {
  struct fixture f;
  fx_init(&f, 8, (1ull << 32) + 3);
  CHECK(hp_ring_reserve(&f.prod) == (void *)(f.slots + 3 * SLOT));
  fx_free(&f);
  fx_init(&f, 8, UINT64_MAX);
  CHECK(hp_ring_reserve(&f.prod) == (void *)(f.slots + 7 * SLOT));
  CHECK_EQ_INT(push(&f, 1), 1);
  CHECK_EQ_INT(atomic_load(&f.ring.tail), 0); /* wrapped */
  CHECK(hp_ring_reserve(&f.prod) == (void *)f.slots);
  uint64_t s;
  CHECK_EQ_INT(pop(&f, &s), 1);
  CHECK_EQ_INT(s, 1);
  fx_free(&f);
}

/* A cursor attached later picks up the indices already there. */
static void test_reattach(void) {
  struct fixture f;
  fx_init(&f, 8, 1000);
  for (uint64_t i = 0; i < 5; i++)
    push(&f, i);
  uint64_t s;
  CHECK_EQ_INT(pop(&f, &s), 1);
  struct hp_ring_cursor c2, p2;
  hp_ring_attach(&c2, &f.ring, f.slots, 8, SLOT, 0);
  hp_ring_attach(&p2, &f.ring, f.slots, 8, SLOT, 1);
  CHECK_EQ_INT(c2.pos, 1001);
  CHECK_EQ_INT(p2.pos, 1005);
  const struct item *it = hp_ring_peek(&c2);
  CHECK(it != NULL && it->seq == 1);
  fx_free(&f);
}

static void test_check(void) {
  struct fixture f;
  fx_init(&f, 8, 100);
  CHECK_EQ_INT(hp_ring_check(&f.cons), 0); /* empty */
  atomic_store(&f.ring.tail, 108);
  CHECK_EQ_INT(hp_ring_check(&f.cons), 0); /* exactly full */
  atomic_store(&f.ring.tail, 109);
  CHECK_EQ_INT(hp_ring_check(&f.cons), -1); /* more than nslots ahead */
  atomic_store(&f.ring.tail, 99);
  CHECK_EQ_INT(hp_ring_check(&f.cons), -1); /* behind the head */
  atomic_store(&f.ring.tail, 0);
  CHECK_EQ_INT(hp_ring_check(&f.cons), -1);
  atomic_store(&f.ring.tail, UINT64_MAX);
  CHECK_EQ_INT(hp_ring_check(&f.cons), -1);
  atomic_store(&f.ring.tail, 100 + (1ull << 32));
  CHECK_EQ_INT(hp_ring_check(&f.cons), -1); /* not fooled by 32-bit wrap */
  fx_free(&f);
  /* Across the 2^64 wrap a sane tail numerically below the head is fine. */
  fx_init(&f, 8, UINT64_MAX - 2);
  atomic_store(&f.ring.tail, 3); /* 6 ahead */
  CHECK_EQ_INT(hp_ring_check(&f.cons), 0);
  atomic_store(&f.ring.tail, 6); /* 9 ahead */
  CHECK_EQ_INT(hp_ring_check(&f.cons), -1);
  atomic_store(&f.ring.tail, UINT64_MAX - 3); /* behind */
  CHECK_EQ_INT(hp_ring_check(&f.cons), -1);
  fx_free(&f);
}

/* A consumer that writes a head beyond the tail makes the producer see a
 * full ring: it never gets a slot it could overwrite unread. */
static void test_hostile_head(void) {
  struct fixture f;
  fx_init(&f, 8, 50);
  push(&f, 1);
  atomic_store(&f.ring.head, 60); /* consumer claims more than produced */
  for (int i = 0; i < 8; i++)
    push(&f, 2); /* fills the cached view */
  CHECK(hp_ring_reserve(&f.prod) == NULL);
  fx_free(&f);
}

/* ---- two threads --------------------------------------------------------- */

#define STRESS_ITEMS 1000000u

struct stress {
  struct fixture f;
  uint64_t bad, yields;
};

static void *producer(void *arg) {
  struct stress *st = arg;
  for (uint64_t i = 0; i < STRESS_ITEMS;) {
    if (push(&st->f, i)) {
      i++;
    } else {
      sched_yield();
    }
  }
  return NULL;
}

static void *consumer(void *arg) {
  struct stress *st = arg;
  uint64_t s;
  for (uint64_t want = 0; want < STRESS_ITEMS;) {
    int r = pop(&st->f, &s);
    if (r == 0) {
      st->yields++;
      sched_yield();
      continue;
    }
    if (r < 0 || s != want) {
      if (st->bad++ < 5)
        TL_FAIL("stress: got %" PRIu64 " (ok %d), want %" PRIu64, s, r, want);
      want = s; /* resynchronize */
    }
    if (hp_ring_check(&st->f.cons) && st->bad++ < 5)
      TL_FAIL("stress: hp_ring_check failed at %" PRIu64, want);
    want++;
  }
  return NULL;
}

static void stress(uint32_t nslots, uint64_t start) {
  struct stress st;
  memset(&st, 0, sizeof st);
  fx_init(&st.f, nslots, start);
  pthread_t p, c;
  CHECK_EQ_INT(pthread_create(&c, NULL, consumer, &st), 0);
  CHECK_EQ_INT(pthread_create(&p, NULL, producer, &st), 0);
  pthread_join(p, NULL);
  pthread_join(c, NULL);
  CHECK_EQ_INT(st.bad, 0);
  CHECK_EQ_INT(atomic_load(&st.f.ring.head) - start, STRESS_ITEMS);
  CHECK_EQ_INT(atomic_load(&st.f.ring.tail) - start, STRESS_ITEMS);
  fx_free(&st.f);
}

static void test_stress(void) {
  stress(64, (1ull << 32) - 500000); /* crosses 2^32 mid-run */
  stress(4, UINT64_MAX - 1000);      /* tiny ring: full and empty often */
}

int main(void) {
  RUN(test_layout);
  RUN(test_push_pop);
  RUN(test_full_empty);
  RUN(test_one_slot);
  RUN(test_laps);
  RUN(test_slot_index);
  RUN(test_reattach);
  RUN(test_check);
  RUN(test_hostile_head);
  RUN(test_stress);
  TL_EXIT();
}
