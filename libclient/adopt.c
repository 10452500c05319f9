/* adopt.c -- large buffers of ordinary memory that horad reads and writes
 * where they lie.
 *
 * A buffer outside the arena is otherwise copied into an arena block and
 * back (ops.c): two passes over its bytes on the rank's core, several
 * times what the collective itself costs. A buffer that glibc's malloc
 * gave a mapping of its own (it does for every allocation of at least
 * its mmap threshold, 128 KiB at first; PyTorch's large CPU tensors are
 * such allocations) is instead adopted: the mapping's pages are copied
 * once into a block of the segment's adoption region (after the arena,
 * --adopt-size), and that block is mapped over them (MAP_FIXED). The
 * program's addresses then show the segment's pages: horad reduces into
 * them in place, and the program sees the result with no copy, from then
 * on. Nothing but that one allocation lives on those pages, and free()
 * unmaps them as it would have its own.
 *
 * A buffer is adopted at its second operation, not its first: adopting
 * costs a few copies' time (mostly the kernel making the segment's fresh
 * pages), so a buffer that sees one operation (a broadcast of the
 * parameters at start) is cheaper copied. A buffer allocated where an
 * adopted one was freed (a tensor allocated again at each step, glibc
 * mapping it at the same place) is adopted at its first.
 *
 * An adopted range is checked before each use: its first byte (malloc's
 * header, never the buffer's data), flipped through the segment's view,
 * must read flipped at the program's address (read with process_vm_readv(),
 * which fails instead of faulting on an unmapped page). A range that fails
 * the check was freed, its addresses perhaps reused: its block is freed.
 * A freed block keeps its pages for the next adoption of the same size (a
 * tensor freed and allocated again at each step then costs a copy, not
 * the kernel's making of pages), up to the arena's size in all; beyond
 * that, and when the segment goes, their pages are given back to the
 * system (a hole punched in the memfd). When the region is full, buffers
 * are copied as before. */
#define HC_LOG_SUB HC_SUB_CLIENT
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "client.h"

#define ADOPT_MAX 256 /* adopted buffers at once (a large model's gradients) */
#define SEEN_MAX 256
#define PAGE 4096u

struct adopted {
  uintptr_t base; /* the mapping's first byte in the program */
  uint64_t len;   /* its bytes (pages) */
  uint64_t at;    /* its block's offset in the adoption region */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct adopted tab[ADOPT_MAX];
static int ntab;
static int memfd = -1;
static uintptr_t seen[SEEN_MAX]; /* mappings copied once (0: none) */
static int seen_next;
static int glibc = -1; /* is malloc glibc's (probe_glibc; -1: not yet) */

/* Reads n bytes at address a of this process, or fails (-1) where they
 * are not mapped. */
static int peek(uintptr_t a, void *out, size_t n) {
  struct iovec l = {out, n}, r = {(void *)a, n};
  return process_vm_readv(getpid(), &l, 1, &r, 1, 0) == (ssize_t)n ? 0 : -1;
}

static unsigned char *view_of(const struct adopted *e) {
  return hl.shm + hl.hdr->adopt_off + e->at;
}

/* Do the program's addresses of e still show its block? */
static int still_adopted(const struct adopted *e) {
  volatile unsigned char *view = view_of(e);
  unsigned char v = view[0], w;
  if (peek(e->base, &w, 1) < 0 || w != v) return 0;
  view[0] = (unsigned char)(v ^ 0x5a);
  int ok = peek(e->base, &w, 1) == 0 && w == (unsigned char)(v ^ 0x5a);
  view[0] = v;
  return ok;
}

/* Gives the pages of the region's [at, at+len) back to the system: nobody
 * maps them any more but horad and the segment's view. */
static void punch(uint64_t at, uint64_t len) {
  if (fallocate(memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                (off_t)(hl.hdr->adopt_off + at), (off_t)len) < 0)
    hc_debug("rank %d: cannot give back %llu adopted bytes: %s", hl.rank,
             (unsigned long long)len, strerror(errno));
}

/* Freed blocks whose pages are kept, oldest first. */
static struct {
  uint64_t at, len;
} cold[ADOPT_MAX];
static int ncold;
static uint64_t cold_bytes;

static void uncold(int k, int give_back) {
  if (give_back) punch(cold[k].at, cold[k].len);
  cold_bytes -= cold[k].len;
  memmove(&cold[k], &cold[k + 1], (size_t)(ncold - k - 1) * sizeof cold[0]);
  ncold--;
}

static void drop(int i) {
  if (ncold == ADOPT_MAX) uncold(0, 1);
  cold[ncold].at = tab[i].at;
  cold[ncold].len = tab[i].len;
  ncold++;
  cold_bytes += tab[i].len;
  while (ncold && cold_bytes > hl.arena_size) uncold(0, 1);
  tab[i] = tab[--ntab];
}

/* Drops the entries whose ranges were freed; 1 if any was. */
static int sweep(void) {
  int any = 0;
  for (int i = ntab; i-- > 0;)
    if (!still_adopted(&tab[i])) {
      drop(i);
      any = 1;
    }
  return any;
}

static int clear_of(uint64_t at, uint64_t len, uint64_t b, uint64_t n) {
  return at + len <= b || b + n <= at;
}

/* A free place of len bytes in the adoption region, or -1: a kept block
 * of that size, else the first place clear of live and kept blocks, else
 * (the kept blocks' pages given back) the first clear of live ones. */
static int64_t place_of(uint64_t len) {
  uint64_t size = hl.hdr->adopt_size;
  for (int k = ncold; k-- > 0;)
    if (cold[k].len == len) {
      uint64_t at = cold[k].at;
      uncold(k, 0);
      return (int64_t)at;
    }
  for (int pass = 0; pass < 2; pass++) {
    if (pass) {
      if (!ncold) break;
      while (ncold) uncold(0, 1);
    }
    for (int c = -1; c < ntab + ncold; c++) {
      uint64_t at = c < 0 ? 0 : c < ntab ? tab[c].at + tab[c].len
                                         : cold[c - ntab].at + cold[c - ntab].len;
      if (at > size || len > size - at) continue;
      int free = 1;
      for (int i = 0; i < ntab && free; i++)
        free = clear_of(at, len, tab[i].at, tab[i].len);
      for (int k = 0; k < ncold && free; k++)
        free = clear_of(at, len, cold[k].at, cold[k].len);
      if (free) return (int64_t)at;
    }
  }
  return -1;
}

/* The mapping glibc's malloc made for the allocation that starts at p
 * (its chunk header lies just before it), in *base and *len; -1 when p
 * does not start such an allocation. */
static int own_mapping(uintptr_t p, uint64_t bytes, uintptr_t *base,
                       uint64_t *len) {
  uint64_t h[2]; /* the chunk's prev_size and size words */
  if (p < 16 || p % 16 || peek(p - 16, h, sizeof h) < 0) return -1;
  if ((h[1] & 7) != 2) return -1; /* IS_MMAPPED alone */
  uint64_t lead = h[0], size = h[1] & ~(uint64_t)7;
  uintptr_t b = p - 16 - lead;
  uint64_t n = lead + size;
  if (lead > p - 16 || b % PAGE || n % PAGE || n < bytes + 16 ||
      p + bytes > b + n || n - bytes > (8u << 20))
    return -1;
  *base = b;
  *len = n;
  return 0;
}

/* Is the program's malloc glibc's, mapping large allocations as
 * own_mapping() reads them? A probe of 64 MiB (above any threshold glibc
 * sets itself; never touched, so it costs no pages) must show in glibc's
 * own count of mapped blocks, with the header own_mapping() expects. */
static int probe_glibc(void) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
  const size_t n = 64u << 20;
  struct mallinfo2 a = mallinfo2();
  void *p = malloc(n);
  if (!p) return 0;
  struct mallinfo2 b = mallinfo2();
  uintptr_t base;
  uint64_t len;
  int ok = b.hblks == a.hblks + 1 && b.hblkhd >= a.hblkhd + n &&
           own_mapping((uintptr_t)p, n, &base, &len) == 0;
  free(p);
  return ok;
#else
  return 0;
#endif
}

void hl_adopt_init(int fd) {
  pthread_mutex_lock(&lock);
  if (glibc < 0 && !(glibc = probe_glibc()))
    hc_debug("malloc is not glibc's, or does not map large allocations on "
             "their own: buffers outside the arena are copied into it");
  memfd = fd;
  ntab = ncold = 0;
  cold_bytes = 0;
  memset(seen, 0, sizeof seen);
  pthread_mutex_unlock(&lock);
}

/* The segment goes: the adopted pages stay where they are, the program's
 * (their mappings hold the memory). */
void hl_adopt_fini(void) {
  pthread_mutex_lock(&lock);
  ntab = 0;
  while (ncold) uncold(0, memfd >= 0);
  if (memfd >= 0) close(memfd);
  memfd = -1;
  pthread_mutex_unlock(&lock);
}

static void note_seen(uintptr_t base) {
  seen[seen_next] = base;
  seen_next = (seen_next + 1) % SEEN_MAX;
}

/* Is this the second time the mapping at base comes (then forgotten)?
 * Else it is noted for the next time. */
static int seen_before(uintptr_t base) {
  for (int i = 0; i < SEEN_MAX; i++)
    if (seen[i] == base) {
      seen[i] = 0;
      return 1;
    }
  note_seen(base);
  return 0;
}

static int adopt(uintptr_t p, uint64_t bytes, uint64_t *off) {
  uintptr_t base;
  uint64_t len;
  if (own_mapping(p, bytes, &base, &len) < 0 || !seen_before(base)) return 0;
  for (int i = 0; i < ntab; i++) /* overlaps an older entry */
    if (base < tab[i].base + tab[i].len && tab[i].base < base + len) {
      if (still_adopted(&tab[i])) return 0;
      drop(i);
      i = -1;
    }
  int64_t at = ntab < ADOPT_MAX ? place_of(len) : -1;
  if (at < 0 && sweep() && ntab < ADOPT_MAX) at = place_of(len);
  if (at < 0) return 0;
  struct adopted e = {base, len, (uint64_t)at};
  unsigned char *block = view_of(&e);
  memcpy(block, (const void *)base, len);
  void *m = mmap((void *)base, len, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_FIXED | MAP_POPULATE, memfd,
                 (off_t)(hl.hdr->adopt_off + e.at));
  if (m == MAP_FAILED) {
    int err = errno;
    /* a failed MAP_FIXED may have unmapped the range: put private pages
     * with the same bytes back */
    if (mmap((void *)base, len, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED)
      memcpy((void *)base, block, len);
    punch(e.at, len);
    hc_debug("rank %d: cannot map the segment over %llu bytes at %p (%s): "
             "the buffer is copied", hl.rank, (unsigned long long)len,
             (void *)base, strerror(err));
    return 0;
  }
  tab[ntab++] = e;
  hc_debug("rank %d: adopted %llu bytes at %p", hl.rank,
           (unsigned long long)len, (void *)base);
  *off = hl.hdr->adopt_off + e.at + (p - base);
  return 1;
}

int hl_reach(const void *ptr, uint64_t bytes, uint64_t *off) {
  if (hl_in_arena(ptr, bytes)) {
    *off = (uint64_t)((const unsigned char *)ptr - hl.shm);
    return 1;
  }
  uintptr_t p = (uintptr_t)ptr;
  if (!ptr || bytes < HL_ADOPT_MIN || !hl.hdr || !hl.hdr->adopt_size ||
      glibc != 1)
    return 0;
  pthread_mutex_lock(&lock);
  int found = 0;
  if (memfd >= 0) {
    for (int i = 0; i < ntab; i++) {
      struct adopted *e = &tab[i];
      if (p >= e->base && p + bytes <= e->base + e->len) {
        if (still_adopted(e)) {
          *off = hl.hdr->adopt_off + e->at + (p - e->base);
          found = 1;
        } else {
          /* freed, and perhaps allocated again: a buffer at the same
           * place is adopted at once, into the block just freed */
          uintptr_t b = e->base;
          drop(i);
          note_seen(b);
        }
        break;
      }
    }
    if (!found) found = adopt(p, bytes, off);
  }
  pthread_mutex_unlock(&lock);
  return found;
}
