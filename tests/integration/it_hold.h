/* it_hold.h -- a job kept alive while its test reads horad's /metrics
 * (tests/integration/lib.sh: metrics_of, held): with IT_HOLD=PATH in the
 * environment, rank 0 writes PATH.done and every rank waits (30 s at
 * most) for PATH.go. Without it, nothing. */
#ifndef IT_HOLD_H
#define IT_HOLD_H
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static inline void it_hold(int rank) {
  const char *hold = getenv("IT_HOLD");
  if (!hold) return;
  char path[4096];
  snprintf(path, sizeof path, "%s.done", hold);
  FILE *f = rank == 0 ? fopen(path, "w") : NULL;
  if (f) fclose(f);
  snprintf(path, sizeof path, "%s.go", hold);
  struct timespec ts = {0, 10000000};
  for (int t = 0; t < 3000 && access(path, F_OK) != 0; t++)
    nanosleep(&ts, NULL);
}
#endif
