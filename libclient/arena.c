/* arena.c -- allocator for the rank's shared arena (hora_alloc).
 *
 * The live blocks are kept in an array sorted by offset; an allocation
 * takes the first gap that fits. Blocks are few (tensors, staging copies),
 * so the linear scan costs less than a smarter structure would. */
#include <stdlib.h>
#include <string.h>

#include "client.h"

struct block {
  uint64_t off, size;
};

static struct block *blocks;
static size_t nblocks, capblocks;

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
  nblocks = 0;
  return 0;
}

void hl_arena_fini(void) {
  free(blocks);
  blocks = NULL;
  nblocks = capblocks = 0;
}

int hl_in_arena(const void *p, uint64_t bytes) {
  if (!hl.arena || !p) return 0;
  const unsigned char *c = p;
  if (c < hl.arena || c > hl.arena + hl.arena_size) return 0;
  return bytes <= (uint64_t)(hl.arena + hl.arena_size - c);
}

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

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
  uint64_t start = 0;
  size_t i = 0;
  for (;; i++) {
    uint64_t at = align_up(start, align);
    uint64_t end = i < nblocks ? blocks[i].off : hl.arena_size;
    if (at <= end && end - at >= size) {
      memmove(&blocks[i + 1], &blocks[i], (nblocks - i) * sizeof *blocks);
      blocks[i] = (struct block){at, size};
      nblocks++;
      res = hl.arena + at;
      break;
    }
    if (i == nblocks) break;
    start = blocks[i].off + blocks[i].size;
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
  int rc = -1;
  if (lo < nblocks && blocks[lo].off == off) {
    memmove(&blocks[lo], &blocks[lo + 1], (nblocks - lo - 1) * sizeof *blocks);
    nblocks--;
    rc = 0;
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
  if (hl_arena_free(ptr) < 0)
    hl_error(HORA_EINVAL, "hora_free: %p was not returned by hora_alloc", ptr);
}
