/* it_errors.c -- a rank of the error-handling integration tests.
 *
 *   it_errors badargs     calls before hora_init, bad arguments, bad handles
 *                         (works with any number of ranks, also without
 *                         horarun)
 *   it_errors mismatch    count / dtype / op / root / collective mismatches
 *                         for one name, and duplicate names (2+ ranks)
 *
 * Every error must come back as the documented HORA_E* code with a message
 * in hora_last_error(), never as a crash, and the job must go on: each case
 * is followed by a correct allreduce that is checked.
 * Exit status: 0 when every check passed, 1 otherwise. Arguments starting
 * with --marker= are ignored. */
#include <hora.h>

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int g_rank = -1, g_size;
static int g_checks, g_failures;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
  char buf[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  g_failures++;
  printf("rank %d: FAIL: %s\n", g_rank, buf);
  fflush(stdout);
}

/* rc must be `want`, with a non-empty last error containing every one of
 * the NULL-terminated strings that follow. */
static void expect_err(const char *what, int rc, int want, ...) {
  g_checks++;
  const char *msg = hora_last_error();
  if (rc != want) {
    fail("%s: expected %d (%s), got %d (%s); last error: \"%s\"", what, want,
         hora_err_name(want), rc, hora_err_name(rc), msg ? msg : "(null)");
    return;
  }
  if (want != 0 && (!msg || !*msg)) {
    fail("%s: returned %s as expected, but hora_last_error() is empty", what,
         hora_err_name(want));
    return;
  }
  va_list ap;
  va_start(ap, want);
  const char *s;
  while ((s = va_arg(ap, const char *)))
    if (!strstr(msg, s))
      fail("%s: the message \"%s\" does not mention \"%s\"", what, msg, s);
  va_end(ap);
  if (want != 0 && getenv("IT_VERBOSE"))
    printf("rank %d: ok: %s -> %s: %s\n", g_rank, what, hora_err_name(rc), msg);
}

/* A correct, checked allreduce: the job goes on. */
static void sane(const char *after, const char *name) {
  int32_t v[5], w[5];
  for (int i = 0; i < 5; i++) v[i] = (g_rank + 1) * (i + 1);
  int rc = hora_allreduce(name, v, w, 5, HORA_INT32, HORA_SUM);
  g_checks++;
  if (rc != 0) {
    fail("allreduce '%s' after %s: returned %d (%s): %s", name ? name : "(null)",
         after, rc, hora_err_name(rc), hora_last_error());
    return;
  }
  int32_t tri = g_size * (g_size + 1) / 2;
  for (int i = 0; i < 5; i++)
    if (w[i] != tri * (i + 1)) {
      fail("allreduce '%s' after %s: element %d: expected %d, got %d",
           name ? name : "(null)", after, i, tri * (i + 1), w[i]);
      return;
    }
}

static void before_init(void) {
  float x[4] = {1, 2, 3, 4}, y[4];
  int64_t h = 0;
  int done = 0;
  g_checks++;
  if (hora_is_initialized() != 0) fail("hora_is_initialized() before init is not 0");
  expect_err("hora_rank before init", hora_rank(), HORA_ENOTINIT, "hora_init", NULL);
  expect_err("hora_size before init", hora_size(), HORA_ENOTINIT, NULL);
  expect_err("hora_local_rank before init", hora_local_rank(), HORA_ENOTINIT, NULL);
  expect_err("hora_local_size before init", hora_local_size(), HORA_ENOTINIT, NULL);
  expect_err("hora_cross_rank before init", hora_cross_rank(), HORA_ENOTINIT, NULL);
  expect_err("hora_cross_size before init", hora_cross_size(), HORA_ENOTINIT, NULL);
  expect_err("hora_allreduce before init",
             hora_allreduce("x", x, y, 4, HORA_FLOAT32, HORA_SUM),
             HORA_ENOTINIT, "hora_init", NULL);
  expect_err("hora_allreduce_async before init",
             hora_allreduce_async("x", x, y, 4, HORA_FLOAT32, HORA_SUM, &h),
             HORA_ENOTINIT, NULL);
  expect_err("hora_broadcast before init",
             hora_broadcast("x", x, 4, HORA_FLOAT32, 0), HORA_ENOTINIT, NULL);
  expect_err("hora_broadcast_async before init",
             hora_broadcast_async("x", x, 4, HORA_FLOAT32, 0, &h),
             HORA_ENOTINIT, NULL);
  expect_err("hora_barrier before init", hora_barrier(), HORA_ENOTINIT, NULL);
  expect_err("hora_wait before init", hora_wait(1), HORA_ENOTINIT, NULL);
  expect_err("hora_test before init", hora_test(1, &done), HORA_ENOTINIT, NULL);
  expect_err("hora_shutdown before init", hora_shutdown(), HORA_ENOTINIT, NULL);
  void *p = hora_alloc(64);
  g_checks++;
  if (p) fail("hora_alloc before init returned %p, expected NULL", p);
  else if (!*hora_last_error())
    fail("hora_alloc before init returned NULL without a message");
  hora_free(NULL); /* must not crash */
  g_checks++;
  if (hora_arena_size() || hora_in_arena(&done, 1))
    fail("before init: hora_arena_size() %zu, hora_in_arena %d",
         hora_arena_size(), hora_in_arena(&done, 1));
  /* pure functions work without init */
  g_checks++;
  if (hora_dtype_size(HORA_FLOAT64) != 8 || hora_dtype_size(HORA_BFLOAT16) != 2)
    fail("hora_dtype_size is wrong before init");
  if (!hora_version() || !*hora_version()) fail("hora_version() is empty");
  if (!hora_strerror(HORA_EMISMATCH) || !*hora_strerror(HORA_EMISMATCH))
    fail("hora_strerror(HORA_EMISMATCH) is empty");
  if (!hora_strerror(-12345)) fail("hora_strerror(-12345) is NULL");
  if (!hora_err_name(-12345)) fail("hora_err_name(-12345) is NULL");
  if (!hora_dtype_name((hora_dtype_t)99)) fail("hora_dtype_name(99) is NULL");
  if (!hora_op_name((hora_op_t)-1)) fail("hora_op_name(-1) is NULL");
}

static void bad_args(void) {
  float x[8] = {0}, y[8];
  int64_t h = 0;
  int done = 0;
  char *bad99 = "99";
  expect_err("allreduce with NULL sendbuf, count 8",
             hora_allreduce("na", NULL, y, 8, HORA_FLOAT32, HORA_SUM),
             HORA_EINVAL, NULL);
  expect_err("allreduce with NULL recvbuf, count 8",
             hora_allreduce("na", x, NULL, 8, HORA_FLOAT32, HORA_SUM),
             HORA_EINVAL, NULL);
  expect_err("allreduce_async with NULL buffers, count 8",
             hora_allreduce_async("na", NULL, NULL, 8, HORA_FLOAT32, HORA_SUM, &h),
             HORA_EINVAL, NULL);
  expect_err("broadcast with NULL buffer, count 8",
             hora_broadcast("nb", NULL, 8, HORA_FLOAT32, 0), HORA_EINVAL, NULL);
  expect_err("allreduce with dtype 99",
             hora_allreduce("bd", x, y, 8, (hora_dtype_t)99, HORA_SUM),
             HORA_EINVAL, bad99, NULL);
  expect_err("allreduce with dtype -1",
             hora_allreduce("bd", x, y, 8, (hora_dtype_t)-1, HORA_SUM),
             HORA_EINVAL, NULL);
  expect_err("allreduce with dtype HORA_DTYPE_COUNT",
             hora_allreduce("bd", x, y, 8, HORA_DTYPE_COUNT, HORA_SUM),
             HORA_EINVAL, NULL);
  expect_err("broadcast with dtype 99",
             hora_broadcast("bd", x, 8, (hora_dtype_t)99, 0), HORA_EINVAL,
             bad99, NULL);
  expect_err("allreduce with op 99",
             hora_allreduce("bo", x, y, 8, HORA_FLOAT32, (hora_op_t)99),
             HORA_EINVAL, bad99, NULL);
  expect_err("allreduce with op -1",
             hora_allreduce("bo", x, y, 8, HORA_FLOAT32, (hora_op_t)-1),
             HORA_EINVAL, NULL);
  expect_err("allreduce with op HORA_OP_COUNT",
             hora_allreduce("bo", x, y, 8, HORA_FLOAT32, HORA_OP_COUNT),
             HORA_EINVAL, NULL);
  expect_err("Adasum of int32",
             hora_allreduce("ba", x, y, 8, HORA_INT32, HORA_ADASUM),
             HORA_EINVAL, "Adasum", "float", NULL);
  expect_err("reducescatter with Adasum",
             hora_reducescatter("ba", x, 8, y, HORA_FLOAT32, HORA_ADASUM),
             HORA_EINVAL, "Adasum", "allreduce only", NULL);
  {
    hora_request_t q = {.coll = HORA_COLL_ALLREDUCE, .name = "bf",
                        .sendbuf = x, .recvbuf = y, .count = 8,
                        .dtype = HORA_FLOAT16, .op = HORA_SUM,
                        .flags = HORA_REQ_WIRE16 | 4};
    expect_err("allreduce with unknown request flags", hora_submit(&q, &h),
               HORA_EINVAL, "unknown flags 0x5", NULL);
  }
  char sz[32];
  snprintf(sz, sizeof sz, "%d", g_size);
  expect_err("broadcast with root == size",
             hora_broadcast("br", x, 8, HORA_FLOAT32, g_size), HORA_EINVAL,
             sz, NULL);
  expect_err("broadcast with root 1000000",
             hora_broadcast("br", x, 8, HORA_FLOAT32, 1000000), HORA_EINVAL,
             NULL);
  expect_err("broadcast with root -1",
             hora_broadcast("br", x, 8, HORA_FLOAT32, -1), HORA_EINVAL, NULL);
  expect_err("broadcast_async with root -5",
             hora_broadcast_async("br", x, 8, HORA_FLOAT32, -5, &h),
             HORA_EINVAL, NULL);
  expect_err("allreduce_async with NULL handle",
             hora_allreduce_async("nh", x, y, 8, HORA_FLOAT32, HORA_SUM, NULL),
             HORA_EINVAL, NULL);
  expect_err("broadcast_async with NULL handle",
             hora_broadcast_async("nh", x, 8, HORA_FLOAT32, 0, NULL),
             HORA_EINVAL, NULL);
  expect_err("allreduce with count SIZE_MAX",
             hora_allreduce("big", x, y, SIZE_MAX, HORA_FLOAT32, HORA_SUM),
             HORA_EINVAL, NULL);
  expect_err("allreduce with count SIZE_MAX/4 (bytes overflow)",
             hora_allreduce("big", x, y, SIZE_MAX / 4 + 2, HORA_FLOAT32, HORA_SUM),
             HORA_EINVAL, NULL);
  /* bogus and stale handles */
  expect_err("hora_wait(12345)", hora_wait(12345), HORA_EBADHANDLE, NULL);
  expect_err("hora_wait(0)", hora_wait(0), HORA_EBADHANDLE, NULL);
  expect_err("hora_wait(-1)", hora_wait(-1), HORA_EBADHANDLE, NULL);
  expect_err("hora_wait(INT64_MAX)", hora_wait(INT64_MAX), HORA_EBADHANDLE, NULL);
  expect_err("hora_test(98765)", hora_test(98765, &done), HORA_EBADHANDLE, NULL);
  sane("bad arguments", "sane.1");
  /* a handle used twice */
  for (int i = 0; i < 8; i++) x[i] = (float)(g_rank + i);
  int rc = hora_allreduce_async("stale", x, y, 8, HORA_FLOAT32, HORA_MAX, &h);
  expect_err("allreduce_async 'stale'", rc, 0, NULL);
  if (rc == 0) {
    expect_err("hora_wait on a live handle", hora_wait(h), 0, NULL);
    g_checks++;
    for (int i = 0; i < 8; i++)
      if (y[i] != (float)(g_size - 1 + i)) {
        fail("allreduce 'stale': element %d: expected %g, got %g", i,
             (double)(g_size - 1 + i), (double)y[i]);
        break;
      }
    expect_err("hora_wait on a completed handle", hora_wait(h),
               HORA_EBADHANDLE, NULL);
    expect_err("hora_test on a completed handle", hora_test(h, &done),
               HORA_EBADHANDLE, NULL);
  }
  rc = hora_allreduce_async("tst", x, y, 8, HORA_FLOAT32, HORA_SUM, &h);
  if (rc == 0) {
    expect_err("hora_test with NULL done", hora_test(h, NULL), HORA_EINVAL, NULL);
    expect_err("hora_wait after hora_test(NULL)", hora_wait(h), 0, NULL);
    expect_err("hora_test on a handle hora_wait released", hora_test(h, &done),
               HORA_EBADHANDLE, NULL);
  } else {
    fail("allreduce_async 'tst' returned %d: %s", rc, hora_last_error());
  }
  /* count 0 needs no buffer */
  expect_err("allreduce of 0 elements with NULL buffers",
             hora_allreduce("zero", NULL, NULL, 0, HORA_FLOAT32, HORA_SUM), 0,
             NULL);
  expect_err("broadcast of 0 elements with NULL buffer",
             hora_broadcast("zerob", NULL, 0, HORA_INT8, g_size - 1), 0, NULL);
  /* hora_free of memory that is not from hora_alloc */
  char stackbuf[16];
  /* (in a job of one, hora_free is free(): only with a daemon) */
  if (getenv("HORA_DAEMON_SOCKET")) hora_free(stackbuf);
  hora_free(NULL);
  void *a = hora_alloc(0);
  g_checks++;
  if (a) fail("hora_alloc(0) returned %p, expected NULL", a);
  int daemon = getenv("HORA_DAEMON_SOCKET") != NULL;
  a = hora_alloc(4096);
  g_checks++;
  size_t past = (size_t)1 << 40; /* beyond the end of any arena */
  if (!a || hora_in_arena(a, 4096) != daemon || hora_in_arena(a, past) ||
      hora_in_arena(stackbuf, 1) || hora_in_arena(NULL, 0))
    fail("hora_in_arena: a block of 4096 bytes %d, 2^40 from it %d, the "
         "stack %d", hora_in_arena(a, 4096), hora_in_arena(a, past),
         hora_in_arena(stackbuf, 1));
  hora_free(a);
  g_checks++;
  if ((hora_arena_size() >= 4096) != daemon)
    fail("hora_arena_size() is %zu", hora_arena_size());
  a = hora_alloc((size_t)1 << 62);
  g_checks++;
  if (a) fail("hora_alloc(2^62) returned %p, expected NULL", a);
  else if (!*hora_last_error()) fail("hora_alloc(2^62) failed without a message");
  expect_err("hora_init a second time", hora_init(), 0, NULL);
  sane("bad handles and a second hora_init", "sane.2");
  sane("bad handles (unnamed)", NULL);
  expect_err("hora_barrier", hora_barrier(), 0, NULL);
}

/* The message names rank `odd` and some other rank ("rank N"). */
static void names_two_ranks(const char *what, int odd) {
  const char *msg = hora_last_error(), *p = msg;
  int saw_odd = 0, saw_other = 0;
  while ((p = strstr(p, "rank "))) {
    char *end;
    long r = strtol(p + 5, &end, 10);
    if (end != p + 5 && r >= 0 && r < g_size) {
      if (r == odd) saw_odd = 1;
      else saw_other = 1;
    }
    p += 5;
  }
  g_checks++;
  if (!saw_odd || !saw_other)
    fail("%s: the message \"%s\" should name rank %d and the rank it "
         "disagrees with", what, msg, odd);
}

static char g_num[4][32];
static const char *num(int slot, long long v) {
  snprintf(g_num[slot], sizeof g_num[slot], "%lld", v);
  return g_num[slot];
}

/* Rank `odd` passes different metadata for one name; every rank must get
 * HORA_EMISMATCH naming both ranks and both values. */
static void mismatch(void) {
  const int odd = 1 % g_size;
  const int me_odd = g_rank == odd;
  char rodd[32];
  snprintf(rodd, sizeof rodd, "rank %d", odd);
  float x[16], y[16];
  for (int i = 0; i < 16; i++) x[i] = 1;
  int rc;

  /* count */
  rc = hora_allreduce("mm.count", x, y, me_odd ? 9 : 8, HORA_FLOAT32, HORA_SUM);
  expect_err("count mismatch (8 vs 9)", rc, HORA_EMISMATCH, "mm.count", rodd,
             num(0, 8), num(1, 9), NULL);
  names_two_ranks("count mismatch", odd);
  sane("a count mismatch", "mm.count"); /* the name is free again */
  sane("a count mismatch", "after.count");

  /* dtype */
  rc = hora_allreduce("mm.dtype", x, y, 8, me_odd ? HORA_INT32 : HORA_FLOAT32,
                      HORA_SUM);
  expect_err("dtype mismatch (float32 vs int32)", rc, HORA_EMISMATCH,
             "mm.dtype", rodd, "float32", "int32", NULL);
  names_two_ranks("dtype mismatch", odd);
  sane("a dtype mismatch", "mm.dtype");

  /* op */
  rc = hora_allreduce("mm.op", x, y, 8, HORA_FLOAT32,
                      me_odd ? HORA_MAX : HORA_SUM);
  expect_err("op mismatch (sum vs max)", rc, HORA_EMISMATCH, "mm.op", rodd,
             "sum", "max", NULL);
  names_two_ranks("op mismatch", odd);
  sane("an op mismatch", "mm.op");

  /* broadcast root: rank `odd` says root 0, the others root size-1 */
  int r1 = g_size - 1, r2 = 0;
  rc = hora_broadcast("mm.root", x, 8, HORA_FLOAT32, me_odd ? r2 : r1);
  if (r1 != r2)
    expect_err("broadcast root mismatch", rc, HORA_EMISMATCH, "mm.root", rodd,
               num(0, r1), num(1, r2), "root", NULL);
  if (r1 != r2) names_two_ranks("root mismatch", odd);
  sane("a root mismatch", "mm.root");

  /* collective type */
  if (me_odd)
    rc = hora_broadcast("mm.coll", x, 8, HORA_FLOAT32, 0);
  else
    rc = hora_allreduce("mm.coll", x, y, 8, HORA_FLOAT32, HORA_SUM);
  expect_err("collective mismatch (allreduce vs broadcast)", rc,
             HORA_EMISMATCH, "mm.coll", rodd, "allreduce", "broadcast", NULL);
  names_two_ranks("collective mismatch", odd);
  sane("a collective mismatch", "mm.coll");

  /* several things differ at once; still one clean error */
  rc = hora_allreduce("mm.many", x, y, me_odd ? 3 : 4,
                      me_odd ? HORA_FLOAT64 : HORA_FLOAT32,
                      me_odd ? HORA_MIN : HORA_SUM);
  expect_err("count+dtype+op mismatch", rc, HORA_EMISMATCH, "mm.many", rodd,
             NULL);
  sane("a multiple mismatch", "mm.many");

  /* a mismatch among async operations, with good ones around it */
  int64_t h1, h2, h3;
  float a1[4] = {1, 1, 1, 1}, a3[4] = {2, 2, 2, 2};
  rc = hora_allreduce_async("mm.a1", a1, a1, 4, HORA_FLOAT32, HORA_SUM, &h1);
  int rc2 = hora_allreduce_async("mm.a2", x, y, me_odd ? 5 : 6, HORA_FLOAT32,
                                 HORA_SUM, &h2);
  int rc3 = hora_allreduce_async("mm.a3", a3, a3, 4, HORA_FLOAT32, HORA_SUM, &h3);
  if (rc || rc2 || rc3) {
    fail("async submissions around a mismatch: %d %d %d: %s", rc, rc2, rc3,
         hora_last_error());
  } else {
    expect_err("async mismatch (6 vs 5)", hora_wait(h2), HORA_EMISMATCH,
               "mm.a2", num(0, 6), num(1, 5), NULL);
    expect_err("async good op before a mismatch", hora_wait(h1), 0, NULL);
    expect_err("async good op after a mismatch", hora_wait(h3), 0, NULL);
    g_checks++;
    if (a1[0] != (float)g_size || a3[3] != (float)(2 * g_size))
      fail("async ops around a mismatch: got %g and %g, expected %d and %d",
           (double)a1[0], (double)a3[3], g_size, 2 * g_size);
  }
  sane("async mismatches", "mm.after.async");
}

/* Rank `dup` submits "dup" twice before the other ranks submit it once:
 * the second gets HORA_EDUPNAME, the first completes normally. */
static void duplicate(int dup) {
  char tag[64];
  snprintf(tag, sizeof tag, "dup.%d", dup);
  float v[4], w[4];
  for (int i = 0; i < 4; i++) v[i] = (float)(g_rank + 1);
  int64_t h1, h2;
  int rc;
  if (g_rank == dup) {
    rc = hora_allreduce_async(tag, v, v, 4, HORA_FLOAT32, HORA_SUM, &h1);
    if (rc != 0) {
      fail("first '%s' submission: %d: %s", tag, rc, hora_last_error());
      hora_barrier();
      return;
    }
    rc = hora_allreduce_async(tag, v, w, 4, HORA_FLOAT32, HORA_SUM, &h2);
    if (rc == 0) rc = hora_wait(h2); /* reported at submission or wait */
    char rk[32];
    snprintf(rk, sizeof rk, "rank %d", dup);
    expect_err("a second submission of a name in flight", rc, HORA_EDUPNAME,
               tag, rk, NULL);
    rc = hora_barrier(); /* only now do the others submit it */
    expect_err("barrier after a duplicate", rc, 0, NULL);
    expect_err("the first submission of the duplicated name", hora_wait(h1), 0,
               NULL);
  } else {
    expect_err("barrier before submitting", hora_barrier(), 0, NULL);
    rc = hora_allreduce(tag, v, v, 4, HORA_FLOAT32, HORA_SUM);
    expect_err("allreduce of a name another rank duplicated", rc, 0, NULL);
  }
  g_checks++;
  float want = (float)(g_size * (g_size + 1) / 2);
  if (v[0] != want || v[3] != want)
    fail("'%s' after a duplicate: expected %g, got %g", tag, (double)want,
         (double)v[0]);
  sane("a duplicate name", tag);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *cmd = NULL;
  for (int i = 1; i < argc; i++)
    if (strncmp(argv[i], "--marker=", 9) != 0) cmd = argv[i];
  if (!cmd) {
    fprintf(stderr, "usage: it_errors badargs|mismatch\n");
    return 2;
  }
  before_init();
  int rc = hora_init();
  if (rc != 0) {
    printf("FAIL: hora_init returned %d (%s): %s\n", rc, hora_err_name(rc),
           hora_last_error());
    return 1;
  }
  g_rank = hora_rank();
  g_size = hora_size();
  g_checks++;
  if (!hora_is_initialized()) fail("hora_is_initialized() is 0 after init");
  if (!strcmp(cmd, "badargs")) {
    bad_args();
  } else if (!strcmp(cmd, "mismatch")) {
    if (g_size < 2) {
      printf("rank %d: FAIL: mismatch needs at least 2 ranks\n", g_rank);
      return 1;
    }
    mismatch();
    duplicate(0);
    duplicate(g_size - 1);
  } else {
    fprintf(stderr, "it_errors: unknown command '%s'\n", cmd);
    return 2;
  }
  /* a block still in use at shutdown stays mapped; freeing it later,
   * even in the next session, does nothing and says nothing */
  int *kept = hora_alloc(4096);
  if (kept) kept[0] = g_rank;
  rc = hora_shutdown();
  expect_err("hora_shutdown", rc, 0, NULL);
  if (kept && !strcmp(cmd, "badargs")) {
    kept[1023] = kept[0] + 1;
    g_checks++;
    if (hora_in_arena(kept, 4)) fail("hora_in_arena after hora_shutdown");
    expect_err("hora_init again", hora_init(), 0, NULL);
    hora_free(kept);
    g_checks++;
    if (*hora_last_error())
      fail("hora_free of the last session's block: %s", hora_last_error());
    void *b = hora_alloc(4096);
    g_checks++;
    if (!b || (getenv("HORA_DAEMON_SOCKET") && !hora_in_arena(b, 4096)))
      fail("hora_alloc in the new session: %p: %s", b, hora_last_error());
    hora_free(b);
    expect_err("hora_shutdown of the new session", hora_shutdown(), 0, NULL);
  } else {
    hora_free(kept);
  }
  /* after shutdown: not initialized again */
  float x = 1;
  rc = hora_allreduce("late", &x, &x, 1, HORA_FLOAT32, HORA_SUM);
  g_checks++;
  if (rc != HORA_ENOTINIT && rc != HORA_ESHUTDOWN)
    fail("allreduce after hora_shutdown: expected HORA_ENOTINIT or "
         "HORA_ESHUTDOWN, got %d (%s): %s", rc, hora_err_name(rc),
         hora_last_error());
  expect_err("hora_shutdown twice", hora_shutdown(), HORA_ENOTINIT, NULL);
  printf("rank %d of %d: %s: %d checks, %d failures\n", g_rank, g_size, cmd,
         g_checks, g_failures);
  return g_failures ? 1 : 0;
}
