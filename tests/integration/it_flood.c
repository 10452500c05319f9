/* it_flood.c -- ranks that give horad far more than a job would: floods of
 * entries written straight into the submission ring, tens of thousands of
 * operations in flight, a rank that dies under such a load.
 *
 *   it_flood unknown N        rank 1 writes N entries of unknown kinds into
 *                             its ring, waits a second and writes N more
 *                             (horad warns about them; its log must stay
 *                             short), then both ranks shut down. Exit 0.
 *   it_flood inflight others|self N exit3|sigkill
 *                             others: every rank but the last submits N
 *                             async allreduces and reads no completion
 *                             until the last rank has died (it ignores
 *                             SIGTERM, so that it can report: SIGKILL ends
 *                             it). Each survivor must get N errors naming
 *                             the victim (exit 4).
 *                             self: the last rank submits N the others
 *                             never do, then dies; the others are blocked
 *                             in an allreduce and must get HORA_EPEERGONE
 *                             naming it (exit 4).
 *   it_flood garbage N        rank 1 writes N entries of random bytes
 *                             (valid kinds among them, random fields) into
 *                             its ring and never reads a completion, then
 *                             exits 7; rank 0 is blocked in an allreduce
 *                             and must get HORA_EPEERGONE naming rank 1.
 *   it_flood names N          rank 1 writes N valid submissions of distinct
 *                             names nobody else submits, as fast as horad
 *                             takes them, until horad stops taking them
 *                             for 2 s; prints how many it took and horad's
 *                             peak memory, then exits 5. Rank 0 as above.
 *   it_flood sockbig N        rank 0 opens N connections to the job socket,
 *                             and on each starts a 16 MiB frame and sends
 *                             1 MiB of it; prints horad's peak memory, then
 *                             every rank runs a checked allreduce. Exit 0.
 *   it_flood many N           every rank submits N async allreduces of
 *                             arena tensors, then waits for each and checks
 *                             it; prints the time taken. Exit 0.
 *
 * A victim is always the last rank. Arguments --marker=... are ignored. */
#include <hora.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "msg.h"
#include "shm.h"

static int rank_, size_;
static unsigned char *shm_;
static struct hp_shm_hdr *hdr_;
static int efd_ = -1;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rnd_state = 88172645463325252ull;
static uint64_t rnd(void) { /* xorshift64 */
  rnd_state ^= rnd_state << 13;
  rnd_state ^= rnd_state >> 7;
  rnd_state ^= rnd_state << 17;
  return rnd_state;
}

/* Finds the rank's segment (through its mapping's name) and horad's
 * eventfd (the one eventfd libhora holds). */
static int find_shm(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512];
  while (f && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (strstr(line, "hora-rank") && sscanf(line, "%lx-%lx", &lo, &hi) == 2) {
      shm_ = (unsigned char *)lo;
      break;
    }
  }
  if (f) fclose(f);
  DIR *d = opendir("/proc/self/fd");
  struct dirent *e;
  while (d && (e = readdir(d))) {
    char p[300], l[300];
    snprintf(p, sizeof p, "/proc/self/fd/%s", e->d_name);
    ssize_t n = readlink(p, l, sizeof l - 1);
    if (n <= 0) continue;
    l[n] = '\0';
    if (strstr(l, "eventfd")) efd_ = atoi(e->d_name);
  }
  if (d) closedir(d);
  if (!shm_ || efd_ < 0) {
    printf("rank %d: FAIL: cannot find the segment or the eventfd\n", rank_);
    return -1;
  }
  hdr_ = (struct hp_shm_hdr *)shm_;
  return 0;
}

static void wake_daemon(void) {
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load(&hdr_->daemon_sleeping) &&
      atomic_exchange(&hdr_->daemon_sleeping, 0)) {
    uint64_t one = 1;
    if (write(efd_, &one, sizeof one) < 0) perror("write eventfd");
  }
}

/* Writes one entry into the submission ring as libhora would, waiting
 * while it is full; -1 when horad has taken nothing for `patience` s. */
static int raw_push(const struct hp_sqe *e, double patience) {
  uint64_t tail = atomic_load(&hdr_->sq.tail);
  double t0 = 0;
  unsigned spins = 0;
  while (tail - atomic_load(&hdr_->sq.head) >= hdr_->sq_slots) {
    wake_daemon();
    if (!t0) t0 = now_s();
    if ((++spins & 255) == 0 && now_s() - t0 > patience) return -1;
    sched_yield();
  }
  memcpy(shm_ + hdr_->sq_slots_off + (tail & (hdr_->sq_slots - 1)) * sizeof *e,
         e, sizeof *e);
  atomic_store(&hdr_->sq.tail, tail + 1);
  wake_daemon();
  return 0;
}

/* horad's peak resident memory in kB (the ranks are its children). */
static long daemon_peak_kb(void) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)getppid());
  FILE *f = fopen(path, "r");
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmHWM:", 6)) kb = atol(line + 6);
  if (f) fclose(f);
  return kb;
}

/* A survivor: blocked in an allreduce the victim never joins. */
static int survive(int victim) {
  float x[16] = {0};
  int rc = hora_allreduce("stuck", x, x, 16, HORA_FLOAT32, HORA_SUM);
  char want[32];
  snprintf(want, sizeof want, "rank %d", victim);
  if (rc == HORA_EPEERGONE && strstr(hora_last_error(), want)) {
    printf("rank %d: got HORA_EPEERGONE as expected: %s\n", rank_,
           hora_last_error());
    fflush(stdout);
    return 4;
  }
  printf("rank %d: FAIL: the blocked allreduce returned %s (%s), expected "
         "HORA_EPEERGONE naming %s\n", rank_, hora_err_name(rc),
         hora_last_error(), want);
  fflush(stdout);
  return 5;
}

static void die(const char *how) {
  printf("rank %d: going away (%s)\n", rank_, how);
  fflush(stdout);
  if (!strcmp(how, "sigkill")) kill(getpid(), SIGKILL);
  _exit(3);
}

/* Submits n async allreduces of 4 floats each, in one arena block (so no
 * staging copy is made per operation); names "P.i". */
static int submit_many(const char *prefix, int n, float **bufp,
                       int64_t **hp) {
  float *buf = hora_alloc((size_t)n * 4 * sizeof(float));
  int64_t *h = calloc((size_t)n, sizeof *h);
  if (!buf || !h) {
    printf("rank %d: FAIL: no memory for %d operations\n", rank_, n);
    return -1;
  }
  for (int i = 0; i < n; i++) {
    char name[64];
    snprintf(name, sizeof name, "%s.%d", prefix, i);
    for (int k = 0; k < 4; k++) buf[4 * i + k] = (float)(rank_ + i + k);
    int rc = hora_allreduce_async(name, buf + 4 * i, buf + 4 * i, 4,
                                  HORA_FLOAT32, HORA_SUM, &h[i]);
    if (rc != 0) {
      h[i] = -1;
      if (rc != HORA_EPEERGONE) {
        printf("rank %d: FAIL: submission %d: %s\n", rank_, i,
               hora_last_error());
        return -1;
      }
    }
  }
  *bufp = buf;
  *hp = h;
  return 0;
}

static int cmd_unknown(long n) {
  if (rank_ != 1) {
    sleep(2);
    hora_shutdown();
    return 0;
  }
  if (find_shm() < 0) return 1;
  struct hp_sqe e;
  memset(&e, 0, sizeof e);
  for (int round = 0; round < 2; round++) {
    if (round) usleep(1100000);
    for (long i = 0; i < n; i++) {
      /* past the last kind there is (HP_SQ_TIMELINE) */
      e.kind = (uint8_t)(HP_SQ_TIMELINE + 1 + rnd() % (255 - HP_SQ_TIMELINE));
      e.id = (uint64_t)i + 1;
      if (raw_push(&e, 10) < 0) {
        printf("rank 1: FAIL: horad stopped reading unknown entries\n");
        return 1;
      }
    }
  }
  /* let horad read them all before the goodbye (it reads nothing after) */
  double t0 = now_s();
  while (atomic_load(&hdr_->sq.head) != atomic_load(&hdr_->sq.tail) &&
         now_s() - t0 < 10) {
    wake_daemon();
    usleep(1000);
  }
  printf("rank 1: wrote %ld entries of unknown kinds\n", 2 * n);
  fflush(stdout);
  hora_shutdown(); /* the goodbye goes over the socket, not the ring */
  return 0;
}

static int cmd_inflight(const char *who, int n, const char *how) {
  int victim = size_ - 1;
  char flag[512];
  const char *tmp = getenv("TMPDIR");
  if (!tmp) tmp = "/tmp";
  if (!strcmp(who, "self")) {
    if (rank_ != victim) return survive(victim);
    float *buf;
    int64_t *h;
    if (submit_many("mine", n, &buf, &h) < 0) return 1;
    printf("rank %d: %d operations in flight\n", rank_, n);
    fflush(stdout);
    die(how);
  }
  if (rank_ == victim) { /* dies once every survivor has submitted */
    double t0 = now_s();
    for (int r = 0; r < victim && now_s() - t0 < 60; r++) {
      snprintf(flag, sizeof flag, "%s/flood.%d", tmp, r);
      while (access(flag, F_OK) != 0 && now_s() - t0 < 60) usleep(10000);
    }
    snprintf(flag, sizeof flag, "%s/flood.dead", tmp);
    close(open(flag, O_CREAT | O_WRONLY, 0600));
    die(how);
  }
  signal(SIGTERM, SIG_IGN);
  float *buf;
  int64_t *h;
  if (submit_many("op", n, &buf, &h) < 0) return 1;
  snprintf(flag, sizeof flag, "%s/flood.%d", tmp, rank_);
  close(open(flag, O_CREAT | O_WRONLY, 0600));
  printf("rank %d: %d operations in flight\n", rank_, n);
  fflush(stdout);
  /* nobody here reads a completion until the victim has died */
  snprintf(flag, sizeof flag, "%s/flood.dead", tmp);
  for (double t0 = now_s(); access(flag, F_OK) != 0 && now_s() - t0 < 60;)
    usleep(10000);
  usleep(200000);
  char want[32];
  snprintf(want, sizeof want, "rank %d", victim);
  int named = 0, other = 0;
  for (int i = 0; i < n; i++) {
    if (h[i] < 0) {
      named++; /* refused at submission: the job had already failed */
      continue;
    }
    int rc = hora_wait(h[i]);
    if (rc == HORA_EPEERGONE && strstr(hora_last_error(), want)) {
      named++;
    } else if (other++ == 0) {
      printf("rank %d: FAIL: operation %d: %s (%s)\n", rank_, i,
             hora_err_name(rc), hora_last_error());
    }
  }
  free(h);
  printf("rank %d: %d of %d operations failed naming %s\n", rank_, named, n,
         want);
  fflush(stdout);
  return other ? 5 : 4;
}

static int cmd_garbage(long n) {
  if (rank_ != 1) return survive(1);
  if (find_shm() < 0) return 1;
  rnd_state ^= (uint64_t)getpid() << 20;
  long took = 0;
  for (; took < n; took++) {
    struct hp_sqe e;
    uint64_t *w = (uint64_t *)&e;
    for (size_t i = 0; i < sizeof e / 8; i++) w[i] = rnd();
    /* mostly entries horad acts on: submissions, chunk events, cancels */
    if (rnd() % 8) e.kind = (uint8_t)(1 + rnd() % 4);
    if (rnd() % 4) { /* some in small groups, keys colliding */
      e.group_n = rnd() % 4;
      e.group = rnd() % 3;
    }
    if (e.group_n) e.group_idx = rnd() % (e.group_n + 1);
    if (rnd() % 2) e.coll = (uint8_t)(1 + rnd() % 3);
    if (rnd() % 2) e.dtype = (uint8_t)(rnd() % HORA_DTYPE_COUNT);
    if (rnd() % 2) e.count = rnd() % 4096;
    if (raw_push(&e, 2) < 0) break;
  }
  printf("rank 1: horad took %ld of %ld random entries\n", took, n);
  fflush(stdout);
  _exit(7);
}

static int cmd_names(long n) {
  if (rank_ != 1) return survive(1);
  if (find_shm() < 0) return 1;
  struct hp_sqe e;
  memset(&e, 0, sizeof e);
  e.kind = HP_SQ_SUBMIT;
  e.coll = HORA_COLL_ALLREDUCE;
  e.dtype = HORA_FLOAT32;
  e.op = HORA_SUM;
  e.count = 1;
  e.prescale = e.postscale = 1.0;
  long took = 0;
  for (; took < n; took++) {
    e.id = (uint64_t)took + 1;
    e.name_len = (uint16_t)snprintf(e.name, sizeof e.name, "pending.%ld", took);
    /* patience for a loaded machine: the table grows, and horad shares the
     * cores with the rest of the tests */
    if (raw_push(&e, 20) < 0) break;
  }
  printf("rank 1: horad took %ld of %ld submissions; its peak memory: %ld kB\n",
         took, n, daemon_peak_kb());
  fflush(stdout);
  _exit(5);
}

/* A raw connection to the job socket ("@name": the abstract namespace). */
static int sock_connect(void) {
  const char *path = getenv("HORA_DAEMON_SOCKET");
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (!path || strlen(path) >= sizeof sa.sun_path) return -1;
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
  socklen_t len = sizeof sa;
  if (path[0] == '@') {
    sa.sun_path[0] = '\0';
    len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path));
  }
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s >= 0 && connect(s, (struct sockaddr *)&sa, len) == 0) return s;
  if (s >= 0) close(s);
  return -1;
}

static int cmd_sockbig(int n) {
  if (rank_ == 0) {
    enum { CHUNK = 1 << 20 };
    unsigned char *m = calloc(1, CHUNK);
    int *fds = calloc((size_t)n, sizeof *fds);
    if (!m || !fds) return 1;
    /* a HELLO header (magic, this version, type 1) claiming 16 MiB */
    const unsigned char h[16] = {'H', 'O', 'R', 'A', HP_PROTO_VERSION, 0, 1, 0,
                                 0, 0, 0, 1, 0, 0, 0, 0};
    memcpy(m, h, sizeof h);
    memset(m + 16, 0x41, CHUNK - 16);
    long sent = 0;
    for (int i = 0; i < n; i++) {
      fds[i] = sock_connect();
      if (fds[i] < 0) {
        printf("rank 0: FAIL: connection %d: %s\n", i, strerror(errno));
        return 1;
      }
      for (size_t off = 0; off < CHUNK;) {
        ssize_t k = send(fds[i], m + off, CHUNK - off, MSG_NOSIGNAL);
        if (k <= 0) break; /* horad dropped it */
        off += (size_t)k;
        sent += k;
      }
    }
    usleep(200000);
    printf("rank 0: sent %ld bytes on %d connections; horad's peak memory: "
           "%ld kB\n", sent, n, daemon_peak_kb());
    for (int i = 0; i < n; i++) close(fds[i]);
    free(fds);
    free(m);
  }
  float x[8];
  for (int i = 0; i < 8; i++) x[i] = (float)(rank_ + i);
  int rc = hora_allreduce("after.sockbig", x, x, 8, HORA_FLOAT32, HORA_SUM);
  float want = (float)(size_ * (size_ - 1) / 2);
  if (rc != 0 || x[0] != want) {
    printf("rank %d: FAIL: allreduce afterwards: %s, %g\n", rank_,
           hora_last_error(), (double)x[0]);
    return 1;
  }
  printf("rank %d: the job goes on\n", rank_);
  hora_shutdown();
  return 0;
}

static int cmd_many(int n) {
  float *buf;
  int64_t *h;
  double t0 = now_s();
  if (submit_many("many", n, &buf, &h) < 0) return 1;
  double t1 = now_s();
  int bad = 0;
  for (int i = 0; i < n; i++) {
    int rc = hora_wait(h[i]);
    /* every rank r contributed r + i + k */
    float want = (float)(size_ * i + size_ * (size_ - 1) / 2);
    if ((rc != 0 || buf[4 * i] != want) && bad++ == 0)
      printf("rank %d: FAIL: operation %d: rc %d (%s), %g, expected %g\n",
             rank_, i, rc, hora_last_error(), (double)buf[4 * i],
             (double)want);
  }
  printf("rank %d: %d operations: submitted in %.2f s, all done in %.2f s, "
         "%d wrong\n", rank_, n, t1 - t0, now_s() - t0, bad);
  free(h);
  hora_free(buf);
  fflush(stdout);
  hora_shutdown();
  return bad ? 1 : 0;
}

int main(int argc, char **argv) {
  const char *a[4] = {0};
  int na = 0;
  for (int i = 1; i < argc && na < 4; i++)
    if (strncmp(argv[i], "--marker=", 9) != 0) a[na++] = argv[i];
  if (!a[0]) {
    fprintf(stderr, "usage: it_flood unknown|inflight|garbage|names|many "
                    "ARGS\n");
    return 2;
  }
  if (hora_init() != 0) {
    printf("FAIL: hora_init: %s\n", hora_last_error());
    return 1;
  }
  rank_ = hora_rank();
  size_ = hora_size();
  if (hora_barrier() != 0) {
    printf("rank %d: FAIL: barrier: %s\n", rank_, hora_last_error());
    return 1;
  }
  if (!strcmp(a[0], "unknown") && a[1]) return cmd_unknown(atol(a[1]));
  if (!strcmp(a[0], "inflight") && a[3])
    return cmd_inflight(a[1], atoi(a[2]), a[3]);
  if (!strcmp(a[0], "garbage") && a[1]) return cmd_garbage(atol(a[1]));
  if (!strcmp(a[0], "names") && a[1]) return cmd_names(atol(a[1]));
  if (!strcmp(a[0], "many") && a[1]) return cmd_many(atoi(a[1]));
  if (!strcmp(a[0], "sockbig") && a[1]) return cmd_sockbig(atoi(a[1]));
  fprintf(stderr, "it_flood: bad arguments\n");
  return 2;
}
