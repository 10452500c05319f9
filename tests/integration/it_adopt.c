/* it_adopt.c -- large malloc'd buffers that horad reduces where they lie
 * (libclient/adopt.c), from their second operation on (the first copies
 * them). Each rank, on buffers from plain malloc():
 *   - allreduce in place, twice with new values written in between;
 *   - allreduce of a part of one (a view inside the adopted pages);
 *   - out of place, allgather, broadcast;
 *   - a buffer freed and a new one malloc'd (often at the same address):
 *     its own values, never the old buffer's pages;
 *   - a pointer inside an allocation (not its start): copied, still right;
 *   - after hora_shutdown() the adopted buffers keep their values.
 * It prints, per buffer, whether its pages are the segment's now
 * ("<name> in the segment: yes|no", from /proc/self/maps), and
 * "rank R: adopt: N checks, F failures"; exits 1 on a failure.
 * Mode "full" (run with a small HORA_ADOPT_SIZE): two buffers, the second
 * does not fit; the first freed, a third takes its place. With
 * IT_HOLD=PATH the job stays alive before hora_shutdown() while the test
 * reads /metrics (it_hold.h). */
#include <hora.h>

#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "it_hold.h"

static int rank, size, checks, failures;

/* Is p on a mapping of horad's segment (a memfd)? */
static const char *in_segment(const void *p) {
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512];
  const char *res = "no";
  uintptr_t a = (uintptr_t)p;
  while (f && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && a >= lo && a < hi) {
      if (strstr(line, "memfd:hora-rank")) res = "yes";
      break;
    }
  }
  if (f) fclose(f);
  return res;
}

static void say(const char *what, const void *p) {
  printf("rank %d: %s in the segment: %s\n", rank, what, in_segment(p));
}

static void check(const char *what, const float *v, size_t n, float (*want)(size_t)) {
  checks++;
  for (size_t i = 0; i < n; i++)
    if (v[i] != want(i)) {
      printf("rank %d: FAIL %s: element %zu is %g, expected %g\n", rank, what,
             i, (double)v[i], (double)want(i));
      failures++;
      return;
    }
}

static void rc_ok(const char *what, int rc) {
  if (rc < 0) {
    printf("rank %d: FAIL %s: %s\n", rank, what, hora_last_error());
    failures++;
  }
}

/* A first operation on v, which leaves its values as they are (the
 * minimum of the same values on every rank): libhora copies v this time
 * and adopts it at the next. */
static void first_use(const char *name, float *v, size_t n) {
  for (size_t i = 0; i < n; i++) v[i] = 1.0f;
  rc_ok(name, hora_allreduce(name, v, v, n, HORA_FLOAT32, HORA_MIN));
}

#define N ((size_t)4 << 20) /* 16 MiB of float */

static float tri(void) { return (float)(size * (size + 1) / 2); }
static float w_first(size_t i) { return tri() + (float)(size * (int)(i % 7)); }
static float w_second(size_t i) { return (float)(size * (size - 1)) + (float)(i % 5); }
static float w_fresh(size_t i) { return (float)size * 3 + (float)(i % 3); }
static float w_bcast(size_t i) { return (float)(i % 11); }
static float w_outside(size_t i) { (void)i; return 0.5f; }

static float *fill(float *v, size_t n, float (*f)(size_t)) {
  for (size_t i = 0; i < n; i++) v[i] = f(i);
  return v;
}
static float mine_first(size_t i) { return (float)(rank + 1) + (float)(i % 7); }
static float mine_second(size_t i) { return (float)(2 * rank) + (float)(i % 5) / (float)size; }
static float mine_fresh(size_t i) { return 3.0f + (float)(i % 3) / (float)size; }

static void full_mode(void) {
  float *x = malloc(N * 4), *y = malloc(N * 4);
  first_use("x0", x, N);
  first_use("y0", y, N);
  fill(x, N, mine_fresh);
  fill(y, N, mine_fresh);
  rc_ok("allreduce x", hora_allreduce("x", x, x, N, HORA_FLOAT32, HORA_SUM));
  rc_ok("allreduce y", hora_allreduce("y", y, y, N, HORA_FLOAT32, HORA_SUM));
  check("x", x, N, w_fresh);
  check("y", y, N, w_fresh);
  say("x", x);
  say("y", y);
  free(x);
  float *z = malloc(N * 4);
  first_use("z0", z, N);
  fill(z, N, mine_fresh);
  rc_ok("allreduce z", hora_allreduce("z", z, z, N, HORA_FLOAT32, HORA_SUM));
  check("z", z, N, w_fresh);
  say("z", z);
  free(y);
  free(z);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "check";
  /* a fixed threshold: glibc maps every large allocation on its own (it
   * would otherwise raise it to the size of a freed mapping) */
  mallopt(M_MMAP_THRESHOLD, 128 << 10);
  if (hora_init() < 0) {
    printf("FAIL init: %s\n", hora_last_error());
    return 1;
  }
  rank = hora_rank();
  size = hora_size();
  if (!strcmp(mode, "full")) {
    full_mode();
    goto out;
  }
  float *a = fill(malloc(N * 4), N, mine_first);
  rc_ok("allreduce a", hora_allreduce("a", a, a, N, HORA_FLOAT32, HORA_SUM));
  check("a", a, N, w_first);
  say("a after one operation", a);
  /* the program writes new values where horad wrote: horad sees them */
  fill(a, N, mine_second);
  rc_ok("allreduce a again", hora_allreduce("a", a, a, N, HORA_FLOAT32, HORA_SUM));
  check("a again", a, N, w_second);
  say("a", a);
  /* a part of it: the rest untouched */
  fill(a, N, w_outside);
  fill(a + 1024, N / 2, mine_first);
  rc_ok("allreduce part", hora_allreduce("part", a + 1024, a + 1024, N / 2,
                                         HORA_FLOAT32, HORA_SUM));
  check("part", a + 1024, N / 2, w_first);
  check("before the part", a, 1024, w_outside);
  check("after the part", a + 1024 + N / 2, N - 1024 - N / 2, w_outside);
  /* out of place, into another malloc'd buffer */
  float *b = malloc(N * 4);
  first_use("b0", b, N);
  memset(b, 0, N * 4);
  fill(a, N, mine_first);
  rc_ok("allreduce a->b", hora_allreduce("ab", a, b, N, HORA_FLOAT32, HORA_SUM));
  check("a->b", b, N, w_first);
  say("b", b);
  /* allgather: 1 MiB of float each, into size MiB */
  size_t m = N / 4;
  float *c = malloc(m * 4), *d = malloc(m * 4 * (size_t)size);
  first_use("c0", c, m);
  first_use("d0", d, m * (size_t)size);
  for (size_t i = 0; i < m; i++) c[i] = (float)(rank * 1000 + (int)(i % 1000));
  rc_ok("allgather", hora_allgather("g", c, m, d, HORA_FLOAT32));
  checks++;
  for (int r = 0; r < size; r++)
    for (size_t i = 0; i < m; i++)
      if (d[(size_t)r * m + i] != (float)(r * 1000 + (int)(i % 1000))) {
        printf("rank %d: FAIL allgather: block %d element %zu is %g\n", rank,
               r, i, (double)d[(size_t)r * m + i]);
        failures++;
        r = size;
        break;
      }
  say("d", d);
  /* broadcast from rank 0 */
  if (rank == 0) fill(a, N, w_bcast);
  else fill(a, N, w_outside);
  rc_ok("broadcast", hora_broadcast("bc", a, N, HORA_FLOAT32, 0));
  check("broadcast", a, N, w_bcast);
  /* freed, and a new buffer of the same size (glibc often maps it at the
   * same address): the new buffer's values, not the old pages' */
  uintptr_t old = (uintptr_t)a;
  free(a);
  float *a2 = malloc(N * 4);
  first_use("a20", a2, N);
  fill(a2, N, mine_fresh);
  printf("rank %d: the new buffer is %s\n", rank,
         (uintptr_t)a2 == old ? "at the old one's address" : "elsewhere");
  rc_ok("allreduce a2", hora_allreduce("a2", a2, a2, N, HORA_FLOAT32, HORA_SUM));
  check("a2", a2, N, w_fresh);
  say("a2", a2);
  /* inside an allocation, not at its start: copied, still right */
  float *e = malloc(N * 4 + 64);
  fill(e + 4, N, mine_first);
  rc_ok("allreduce inside", hora_allreduce("in", e + 4, e + 4, N, HORA_FLOAT32,
                                           HORA_SUM));
  check("inside", e + 4, N, w_first);
  free(e);
  it_hold(rank);
  if (hora_shutdown() < 0) rc_ok("shutdown", -1);
  /* the adopted buffers are the program's after the session */
  check("b after shutdown", b, N, w_first);
  fill(b, N, w_outside);
  check("b written after shutdown", b, N, w_outside);
  free(a2);
  free(b);
  free(c);
  free(d);
  printf("rank %d: adopt: %d checks, %d failures\n", rank, checks, failures);
  return failures ? 1 : 0;
out:
  if (hora_shutdown() < 0) rc_ok("shutdown", -1);
  printf("rank %d: adopt: %d checks, %d failures\n", rank, checks, failures);
  return failures ? 1 : 0;
}
