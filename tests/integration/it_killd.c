/* it_killd.c -- horad dies under a running job (args: SIGNAL, a number).
 *
 * Every rank connects and runs a barrier; rank 0 prints the daemon socket
 * it was given ("rank 0: socket @...") and sends SIGNAL to horad, its
 * parent; every rank then blocks in an allreduce. horad dying kills the
 * ranks (they die with it) or fails their operation; either way nothing
 * may be left behind: no socket file, no directory (tests/killd.sh).
 * Arguments starting with --marker= are ignored. */
#include <hora.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
  int sig = 0;
  for (int i = 1; i < argc; i++)
    if (strncmp(argv[i], "--marker=", 9) != 0) sig = atoi(argv[i]);
  if (sig <= 0) {
    fprintf(stderr, "usage: it_killd SIGNAL\n");
    return 2;
  }
  if (hora_init() != 0 || hora_barrier() != 0) {
    printf("FAIL: start: %s\n", hora_last_error());
    return 1;
  }
  int rank = hora_rank();
  if (rank == 0) {
    const char *s = getenv("HORA_DAEMON_SOCKET");
    printf("rank 0: socket %s\n", s ? s : "(none)");
    printf("rank 0: sending signal %d to horad (pid %d)\n", sig,
           (int)getppid());
    fflush(stdout);
    usleep(300000); /* horad forwards the output first */
    kill(getppid(), sig);
  }
  float x[4] = {1, 2, 3, 4};
  int rc = hora_allreduce("after", x, x, 4, HORA_FLOAT32, HORA_SUM);
  printf("rank %d: the allreduce returned %s: %s\n", rank, hora_err_name(rc),
         hora_last_error());
  return rc == 0 ? 9 : 6;
}
