/* it_timeline.c -- ranks whose operations a timeline records.
 *
 *   it_timeline ops [N]      N rounds (default 3) of: allreduce "grad.fc7.R"
 *                            (4096 float32, R the round), allgather
 *                            "gather.R", broadcast "bcast.R" from rank 0,
 *                            then one allreduce of a name that JSON must
 *                            escape, and a barrier
 *   it_timeline dynamic DIR  rank 0 starts a timeline in DIR/one.json
 *                            with mark_cycles, every rank runs allreduce
 *                            "in.one", rank 0 stops it; then one
 *                            allreduce "between" with none; then
 *                            DIR/two.json (no marks) with "in.two". Rank
 *                            0 prints "stopped PATH" after each stop
 *   it_timeline kill [N]     N rounds (default 20) of allreduce
 *                            "round.R"; rank 1 kills itself (SIGKILL) in
 *                            the middle of round N/2, while the others
 *                            wait in it
 *
 * Every rank checks its results and prints "rank R: ok" at the end (FAIL
 * lines, exit 1, otherwise). Arguments starting with --marker= are
 * ignored. */
#include <hora.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank_, size_, bad_;

#define CHECK(cond, ...)                                                      \
  do {                                                                        \
    if (!(cond)) {                                                            \
      printf("rank %d: FAIL: ", rank_);                                       \
      printf(__VA_ARGS__);                                                    \
      printf(" (%s)\n", hora_last_error());                                   \
      bad_ = 1;                                                               \
    }                                                                         \
  } while (0)

static void allreduce(const char *name, int n) {
  float *x = malloc((size_t)n * sizeof *x);
  for (int i = 0; i < n; i++) x[i] = (float)(rank_ + 1);
  int rc = hora_allreduce(name, x, x, (size_t)n, HORA_FLOAT32, HORA_SUM);
  float want = (float)size_ * (float)(size_ + 1) / 2;
  CHECK(rc == 0 && x[0] == want && x[n - 1] == want,
        "allreduce '%s': rc %d, %g (want %g)", name, rc, x[0], want);
  free(x);
}

static void ops(int rounds) {
  char name[64];
  for (int r = 0; r < rounds; r++) {
    snprintf(name, sizeof name, "grad.fc7.%d", r);
    allreduce(name, 4096);
    int32_t v[2] = {rank_, r}, *all = calloc((size_t)size_ * 2, 4);
    snprintf(name, sizeof name, "gather.%d", r);
    int rc = hora_allgather(name, v, 2, all, HORA_INT32);
    CHECK(rc == 0 && all[2 * (size_ - 1)] == size_ - 1,
          "allgather '%s': rc %d", name, rc);
    free(all);
    double b[8] = {0};
    if (rank_ == 0) b[7] = 42 + r;
    snprintf(name, sizeof name, "bcast.%d", r);
    rc = hora_broadcast(name, b, 8, HORA_FLOAT64, 0);
    CHECK(rc == 0 && b[7] == 42 + r, "broadcast '%s': rc %d", name, rc);
  }
  /* a quote, a backslash, a newline, a tab, a control character, UTF-8,
   * and a byte that is no UTF-8 */
  allreduce("odd \"name\" \\ \n\t\x01 caf\xc3\xa9 \xff end", 16);
  int rc = hora_barrier();
  CHECK(rc == 0, "barrier: rc %d", rc);
}

static void dynamic(const char *dir) {
  char one[4096], two[4096];
  snprintf(one, sizeof one, "%s/one.json", dir);
  snprintf(two, sizeof two, "%s/two.json", dir);
  int rc = hora_start_timeline(one, 1);
  CHECK(rc == 0, "start_timeline %s: rc %d", one, rc);
  hora_barrier(); /* not collective: the others wait for rank 0's */
  allreduce("in.one", 64);
  hora_barrier(); /* every host is done with it: its row ends in the file */
  rc = hora_stop_timeline();
  CHECK(rc == 0, "stop_timeline: rc %d", rc);
  if (rank_ == 0) printf("stopped %s\n", one);
  /* every rank is past the first timeline before the next begins */
  hora_barrier();
  allreduce("between", 64);
  hora_barrier();
  rc = hora_start_timeline(two, 0);
  CHECK(rc == 0, "start_timeline %s: rc %d", two, rc);
  /* the same file again: it goes on */
  rc = hora_start_timeline(two, 0);
  CHECK(rc == 0, "start_timeline %s again: rc %d", two, rc);
  hora_barrier();
  allreduce("in.two", 64);
  hora_barrier();
  rc = hora_stop_timeline();
  CHECK(rc == 0, "stop_timeline: rc %d", rc);
  if (rank_ == 0) printf("stopped %s\n", two);
  /* stopping again does nothing */
  rc = hora_stop_timeline();
  CHECK(rc == 0, "stop_timeline again: rc %d", rc);
  /* a file that cannot be made: an error naming it */
  if (rank_ == 0) {
    char nowhere[4200];
    snprintf(nowhere, sizeof nowhere, "%s/no/such/dir/t.json", dir);
    rc = hora_start_timeline(nowhere, 0);
    CHECK(rc == HORA_EIO && strstr(hora_last_error(), "no/such/dir"),
          "start_timeline into a missing directory: rc %d", rc);
    rc = hora_start_timeline("", 0);
    CHECK(rc == HORA_EINVAL, "start_timeline(\"\"): rc %d", rc);
  }
  hora_barrier();
}

static void kill_mid(int rounds) {
  char name[64];
  for (int r = 0; r < rounds; r++) {
    if (r == rounds / 2 && rank_ == 1) {
      printf("rank 1: killing itself in round %d\n", r);
      fflush(stdout);
      usleep(100000); /* the others are blocked in it by now */
      raise(SIGKILL);
    }
    snprintf(name, sizeof name, "round.%d", r);
    float x[256];
    for (int i = 0; i < 256; i++) x[i] = 1;
    int rc = hora_allreduce(name, x, x, 256, HORA_FLOAT32, HORA_SUM);
    if (rc < 0) {
      printf("rank %d: round %d failed as expected: %s\n", rank_, r,
             hora_err_name(rc));
      fflush(stdout);
      exit(4);
    }
  }
  printf("rank %d: FAIL: every round succeeded\n", rank_);
  exit(1);
}

int main(int argc, char **argv) {
  char *args[8];
  int n = 0;
  for (int i = 1; i < argc && n < 8; i++)
    if (strncmp(argv[i], "--marker=", 9)) args[n++] = argv[i];
  if (n < 1) {
    fprintf(stderr, "usage: it_timeline ops [N] | dynamic DIR | kill [N]\n");
    return 2;
  }
  if (hora_init() < 0) {
    printf("FAIL: hora_init: %s\n", hora_last_error());
    return 1;
  }
  rank_ = hora_rank();
  size_ = hora_size();
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (!strcmp(args[0], "ops")) {
    ops(n > 1 ? atoi(args[1]) : 3);
  } else if (!strcmp(args[0], "dynamic") && n > 1) {
    dynamic(args[1]);
  } else if (!strcmp(args[0], "kill")) {
    kill_mid(n > 1 ? atoi(args[1]) : 20);
  } else {
    fprintf(stderr, "it_timeline: unknown mode %s\n", args[0]);
    return 2;
  }
  hora_shutdown();
  if (!bad_) printf("rank %d: ok\n", rank_);
  return bad_;
}
