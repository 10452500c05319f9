/* it_reinit.c -- a rank that initialises hora, runs collectives (an
 * allreduce, an allgather, a process set), shuts it down and starts
 * again, ROUNDS times (argv[1], default 3), ranks arriving at different
 * times; also hora_init() twice in a row. Prints
 * "rank R: reinit: N rounds, 0 failures" and exits 1 on a failure.
 * With "-d R", rank R exits with status 3 after its first shutdown
 * instead of initialising hora again (the others must not hang). */
#include <hora.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 3, failures = 0, rank = -1, size = 0;
  int die = -1;
  for (int i = 2; i + 1 < argc; i++)
    if (!strcmp(argv[i], "-d")) die = atoi(argv[i + 1]);
  for (int k = 0; k < rounds; k++) {
    if (hora_init() < 0 || hora_init() < 0) {
      printf("rank %d: FAIL init in round %d: %s\n", rank, k, hora_last_error());
      return 1;
    }
    if (k && (hora_rank() != rank || hora_size() != size)) {
      printf("rank %d: FAIL round %d: rank %d of %d\n", rank, k, hora_rank(),
             hora_size());
      failures++;
    }
    rank = hora_rank();
    size = hora_size();
    usleep((useconds_t)(20000 * ((rank + k) % 3)));
    double x = rank + 1;
    int rc = hora_allreduce("x", &x, &x, 1, HORA_FLOAT64, HORA_SUM);
    if (rc < 0 || x != size * (size + 1) / 2.0) {
      printf("rank %d: FAIL round %d: allreduce %d (%s), %g\n", rank, k, rc,
             hora_last_error(), x);
      failures++;
    }
    /* rank r sends r % 4 + 1 elements (up to 16 ranks checked) */
    int32_t mine[4], got[4 * 16];
    int64_t counts[16];
    int n = size < 16 ? size : 16;
    for (int r = 0; r < n; r++) counts[r] = r % 4 + 1;
    for (int i = 0; i < rank % 4 + 1; i++) mine[i] = rank * 10 + i;
    rc = size > 16 ? 0
                   : hora_allgatherv("g", mine, (size_t)(rank % 4 + 1), got,
                                     counts, HORA_INT32);
    if (rc < 0) {
      printf("rank %d: FAIL round %d: allgather %d (%s)\n", rank, k, rc,
             hora_last_error());
      failures++;
    }
    for (int r = 0, o = 0; rc >= 0 && size <= 16 && r < size; r++)
      for (int i = 0; i < counts[r]; i++, o++)
        if (got[o] != r * 10 + i) {
          printf("rank %d: FAIL round %d: allgather element %d: %d\n", rank,
                 k, o, (int)got[o]);
          failures++;
          r = size;
          break;
        }
    int last = size - 1; /* a set that is not the global one */
    int ps = size > 1 ? hora_process_set_add(&last, 1) : 1;
    if (ps != 1) { /* sets start again from 1 in each session */
      printf("rank %d: FAIL round %d: process set id %d\n", rank, k, ps);
      failures++;
    }
    if (hora_barrier() < 0) failures++;
    if (hora_shutdown() < 0) failures++;
    if (hora_is_initialized()) failures++;
    if (rank == die) {
      printf("rank %d: exits instead of initialising hora again\n", rank);
      fflush(stdout);
      _exit(3);
    }
  }
  printf("rank %d: reinit: %d rounds, %d failures\n", rank, rounds, failures);
  return failures ? 1 : 0;
}
