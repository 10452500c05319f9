/* arena.c -- allocator for the rank's shared arena (hora_alloc).
 *
 * The blocks are kept in an array sorted by offset; an allocation takes
 * the next gap that fits after the last one it took (next fit: operations
 * are allocated and freed roughly in order, so the search is short), and
 * wraps around once. A free only marks its block (size 0); the array is
 * compacted once half of it is marks, so neither costs time in proportion
 * to the blocks in flight. */
#define HC_LOG_SUB HC_SUB_CLIENT
#include <stdlib.h>
#include <string.h>

#include "client.h"

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

struct block {
  uint64_t off, size;
};

static struct block *blocks;
static size_t nblocks, capblocks;
static size_t nfreed; /* marked blocks (size 0) among them */
static size_t hint;   /* where the last allocation went */

static void compact(void) {
  size_t k = 0;
  for (size_t i = 0; i < nblocks; i++) {
    if (i == hint) hint = k;
    if (blocks[i].size) blocks[k++] = blocks[i];
  }
  nblocks = k;
  nfreed = 0;
  if (hint > nblocks) hint = nblocks;
}

/* The first gap at or after array position `from` (up to `to`) that holds
 * size bytes aligned to align: its array position in *pos, its offset in
 * *at. */
static int find_gap(size_t from, size_t to, uint64_t size, uint64_t align,
                    size_t *pos, uint64_t *at) {
  uint64_t start = 0;
  for (size_t j = from; j-- > 0;) /* the end of the live block before */
    if (blocks[j].size) {
      start = blocks[j].off + blocks[j].size;
      break;
    }
  for (size_t i = from;; i++) {
    if (i < nblocks && !blocks[i].size) continue;
    uint64_t a = align_up(start, align);
    uint64_t end = i < nblocks ? blocks[i].off : hl.arena_size;
    if (a <= end && end - a >= size) {
      *pos = i;
      *at = a;
      return 1;
    }
    if (i >= to || i >= nblocks) return 0;
    start = blocks[i].off + blocks[i].size;
  }
}

/* In a job of one there is no arena: hora_alloc() uses the heap, and this
 * set of its pointers lets hora_free() refuse a foreign one. */
static void **heap_ptrs;
static size_t nheap, capheap;

static int heap_add(void *p) {
  if (nheap == capheap) {
    size_t cap = capheap ? capheap * 2 : 64;
    void **v = realloc(heap_ptrs, cap * sizeof *v);
    if (!v) return -1;
    heap_ptrs = v;
    capheap = cap;
  }
  heap_ptrs[nheap++] = p;
  return 0;
}

static int heap_remove(void *p) {
  for (size_t i = 0; i < nheap; i++)
    if (heap_ptrs[i] == p) {
      heap_ptrs[i] = heap_ptrs[--nheap];
      return 0;
    }
  return -1;
}

int hl_arena_init(void) {
  nblocks = nfreed = hint = 0;
  return 0;
}

void hl_arena_fini(void) {
  free(blocks);
  blocks = NULL;
  nblocks = capblocks = nfreed = hint = 0;
}

/* Arenas that hora_shutdown() left mapped because blocks were in use: a
 * later hora_free() of such a block, even after another hora_init(), does
 * nothing. */
struct segment {
  const unsigned char *base;
  uint64_t size;
};
static struct segment *retired;
static size_t nretired;

void hl_arena_retire(const void *base, uint64_t size) {
  pthread_mutex_lock(&hl.arena_lock);
  struct segment *v = realloc(retired, (nretired + 1) * sizeof *v);
  if (v) { /* else: a later hora_free() of its blocks reports them */
    retired = v;
    retired[nretired++] = (struct segment){base, size};
  }
  pthread_mutex_unlock(&hl.arena_lock);
}

static int in_retired(const void *p) {
  const unsigned char *c = p;
  int found = 0;
  pthread_mutex_lock(&hl.arena_lock);
  for (size_t i = 0; i < nretired && !found; i++)
    found = c >= retired[i].base && c < retired[i].base + retired[i].size;
  pthread_mutex_unlock(&hl.arena_lock);
  return found;
}

size_t hl_arena_live(void) {
  pthread_mutex_lock(&hl.arena_lock);
  size_t n = nblocks - nfreed;
  pthread_mutex_unlock(&hl.arena_lock);
  return n;
}

int hl_in_arena(const void *p, uint64_t bytes) {
  if (!hl.arena || !p) return 0;
  const unsigned char *c = p;
  if (c < hl.arena || c > hl.arena + hl.arena_size) return 0;
  return bytes <= (uint64_t)(hl.arena + hl.arena_size - c);
}


void *hl_arena_alloc(uint64_t bytes) {
  if (!bytes || !hl.arena) return NULL;
  uint64_t align = bytes >= 65536 ? 4096 : 64;
  uint64_t size = align_up(bytes, 64);
  pthread_mutex_lock(&hl.arena_lock);
  void *res = NULL;
  if (nblocks == capblocks) {
    size_t cap = capblocks ? capblocks * 2 : 64;
    struct block *b = realloc(blocks, cap * sizeof *b);
    if (!b) goto out;
    blocks = b;
    capblocks = cap;
  }
  size_t i;
  uint64_t at;
  if (hint > nblocks) hint = nblocks;
  if (find_gap(hint, nblocks, size, align, &i, &at) ||
      find_gap(0, hint, size, align, &i, &at)) {
    /* keep the array sorted by offset, marks included (a mark may sit
     * where the block goes: the new block goes before it) */
    while (i > 0 && blocks[i - 1].off >= at) i--;
    memmove(&blocks[i + 1], &blocks[i], (nblocks - i) * sizeof *blocks);
    blocks[i] = (struct block){at, size};
    nblocks++;
    hint = i + 1;
    res = hl.arena + at;
  }
out:
  pthread_mutex_unlock(&hl.arena_lock);
  return res;
}

int hl_arena_free(void *p) {
  if (!hl_in_arena(p, 0)) return -1;
  uint64_t off = (uint64_t)((unsigned char *)p - hl.arena);
  pthread_mutex_lock(&hl.arena_lock);
  size_t lo = 0, hi = nblocks;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (blocks[mid].off < off) lo = mid + 1;
    else hi = mid;
  }
  /* marks sit among the live blocks with their old offsets: find the
   * live block of this offset */
  while (lo < nblocks && blocks[lo].off == off && !blocks[lo].size) lo++;
  int rc = -1;
  if (lo < nblocks && blocks[lo].off == off && blocks[lo].size) {
    blocks[lo].size = 0;
    nfreed++;
    rc = 0;
    if (nfreed > 64 && nfreed * 2 > nblocks) compact();
  }
  pthread_mutex_unlock(&hl.arena_lock);
  return rc;
}

void *hora_alloc(size_t bytes) {
  if (!atomic_load(&hl.initialized)) {
    hl_error(HORA_ENOTINIT, "hora_alloc: hora is not initialized; call "
                            "hora_init() first");
    return NULL;
  }
  if (!bytes) return NULL;
  if (hl.local_only) {
    size_t align = bytes >= 65536 ? 4096 : 64;
    void *p = aligned_alloc(align, align_up(bytes, align));
    pthread_mutex_lock(&hl.arena_lock);
    if (p && heap_add(p) < 0) {
      free(p);
      p = NULL;
    }
    pthread_mutex_unlock(&hl.arena_lock);
    if (!p) hl_error(HORA_ENOMEM, "hora_alloc: out of memory (%zu bytes)", bytes);
    return p;
  }
  void *p = hl_arena_alloc(bytes);
  if (!p)
    hl_error(HORA_ENOMEM,
             "hora_alloc: the shared arena of rank %d (%llu bytes, "
             "HORA_ARENA_SIZE) has no free block of %zu bytes",
             hl.rank, (unsigned long long)hl.arena_size, bytes);
  return p;
}

int hora_in_arena(const void *ptr, size_t bytes) {
  return atomic_load(&hl.initialized) && hl_in_arena(ptr, bytes);
}

size_t hora_arena_size(void) {
  return atomic_load(&hl.initialized) && hl.arena ? (size_t)hl.arena_size : 0;
}

void hora_free(void *ptr) {
  if (!ptr) return;
  if (hl.local_only) {
    pthread_mutex_lock(&hl.arena_lock);
    int rc = heap_remove(ptr);
    pthread_mutex_unlock(&hl.arena_lock);
    if (rc < 0)
      hl_error(HORA_EINVAL, "hora_free: %p was not returned by hora_alloc",
               ptr);
    else
      free(ptr);
    return;
  }
  if (!hl.arena) return; /* the arena went away with hora_shutdown() */
  if (hl_arena_free(ptr) < 0 && !in_retired(ptr))
    hl_error(HORA_EINVAL, "hora_free: %p was not returned by hora_alloc", ptr);
}
