/* it_stall.c -- ranks that wait on names the others never submit: the
 * stall inspector must warn, then fail the operation with HORA_ESTALL
 * naming the missing rank; a correct operation afterwards still works. */
#include <hora.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  if (hora_init() != 0) return 1;
  int r = hora_rank();
  char name[32];
  snprintf(name, sizeof name, "only-on-rank-%d", r);
  float x = 1;
  int rc = hora_allreduce(name, &x, &x, 1, HORA_FLOAT32, HORA_SUM);
  printf("rank %d stalled op: %s: %s\n", r, hora_err_name(rc),
         hora_last_error());
  x = 1;
  rc = hora_allreduce("after", &x, &x, 1, HORA_FLOAT32, HORA_SUM);
  printf("rank %d after: rc %d sum %g\n", r, rc, x);
  int ok = rc == 0 && x == (float)hora_size();
  hora_shutdown();
  return ok ? 0 : 1;
}
