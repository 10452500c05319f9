/* testlib.h -- minimal assertions for hora's unit tests. A test program is
 * one process; it exits 0 when every check passed. Checks print both
 * values and the place. */
#ifndef HORA_TESTLIB_H
#define HORA_TESTLIB_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tl_failures;
static int tl_checks;

#define TL_FAIL(...)                                                           \
  do {                                                                         \
    tl_failures++;                                                             \
    fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                            \
    fprintf(stderr, __VA_ARGS__);                                              \
    fputc('\n', stderr);                                                       \
  } while (0)

#define CHECK(cond)                                                            \
  do {                                                                         \
    tl_checks++;                                                               \
    if (!(cond)) TL_FAIL("check failed: %s", #cond);                           \
  } while (0)

#define CHECK_EQ_INT(a, b)                                                     \
  do {                                                                         \
    long long tl_a = (long long)(a), tl_b = (long long)(b);                    \
    tl_checks++;                                                               \
    if (tl_a != tl_b)                                                          \
      TL_FAIL("%s == %s: %lld != %lld", #a, #b, tl_a, tl_b);                   \
  } while (0)

#define CHECK_EQ_STR(a, b)                                                     \
  do {                                                                         \
    const char *tl_a = (a), *tl_b = (b);                                       \
    tl_checks++;                                                               \
    if (!tl_a || !tl_b || strcmp(tl_a, tl_b))                                  \
      TL_FAIL("%s == %s: \"%s\" != \"%s\"", #a, #b, tl_a ? tl_a : "(null)",    \
              tl_b ? tl_b : "(null)");                                         \
  } while (0)

/* Runs a named case and reports it. */
#define RUN(fn)                                                                \
  do {                                                                         \
    int tl_before = tl_failures;                                               \
    fn();                                                                      \
    printf("%s %s\n", tl_failures == tl_before ? "ok" : "FAIL", #fn);          \
  } while (0)

#define TL_EXIT()                                                              \
  do {                                                                         \
    printf("%d checks, %d failed\n", tl_checks, tl_failures);                  \
    return tl_failures ? 1 : 0;                                                \
  } while (0)

#endif
