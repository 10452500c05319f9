/* it_output.c -- a rank that writes output the launcher must prefix:
 * '\r'-terminated progress segments, an empty line, a stderr line, and a
 * last stdout line without a newline. Each write is flushed on its own, so
 * the launcher sees the pieces in separate reads.
 *
 * Rank R writes on stdout:
 *   "progress R 1/3\r" "progress R 2/3\r" "progress R 3/3\r"
 *   "done R\n" "\n" "tab\tand  spaces R\n"
 *   "partial R"                      (no newline; the rank then exits 0)
 * and on stderr "err R\n". Arguments starting with --marker= are ignored. */
#include <hora.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void put(FILE *f, const char *s) {
  fputs(s, f);
  fflush(f);
  usleep(20000);
}

int main(void) {
  int rc = hora_init();
  if (rc != 0) {
    printf("FAIL: hora_init: %s\n", hora_last_error());
    return 1;
  }
  int r = hora_rank();
  char b[128];
  for (int k = 1; k <= 3; k++) {
    snprintf(b, sizeof b, "progress %d %d/3\r", r, k);
    put(stdout, b);
  }
  snprintf(b, sizeof b, "done %d\n", r);
  put(stdout, b);
  put(stdout, "\n");
  snprintf(b, sizeof b, "tab\tand  spaces %d\n", r);
  put(stdout, b);
  snprintf(b, sizeof b, "err %d\n", r);
  put(stderr, b);
  /* everyone has written all but the last piece */
  rc = hora_barrier();
  if (rc != 0) {
    printf("FAIL: barrier: %s\n", hora_last_error());
    return 1;
  }
  snprintf(b, sizeof b, "partial %d", r);
  put(stdout, b);
  hora_shutdown();
  return 0;
}
