/* cma_perf.c -- how fast one process reads and writes another's memory
 * with cross-memory attach (process_vm_readv / process_vm_writev), beside
 * the copies libhora makes today to put an ordinary tensor into the shared
 * arena and back.
 *
 *   build/benchmarks/cma_perf [-b 16M] [-e 64M] [-f 4] [-p 256K] [-r 7]
 *
 * A child process holds a buffer of each size (filled, so its pages are
 * there); the parent, as horad would, reads all of it in pieces of -p bytes
 * into one buffer of its own that stays in the cache (readv), and writes it
 * back the same way (writev). Beside them, in the parent: memcpy of a
 * buffer of the same size into another (the copy into the arena, or out of
 * it). Each figure is the median over -r repetitions, in GB/s of the
 * buffer's size. Cross-memory attach would replace two such copies
 * (in and out) with one readv and one writev, so it wins only where
 * readv and writev are about as fast as memcpy or faster. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  switch (*end) {
  case 'K': case 'k': v *= 1024; break;
  case 'M': case 'm': v *= 1024 * 1024; break;
  case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
  case '\0': break;
  default: return 0;
  }
  return v > 0 ? (size_t)v : 0;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One pass over the child's [remote, remote + size) in pieces through
 * buf; returns seconds, or -1 with errno set. */
static double pass(pid_t pid, char *buf, size_t piece, char *remote,
                   size_t size, int write) {
  double t0 = now();
  for (size_t off = 0; off < size; off += piece) {
    size_t n = size - off < piece ? size - off : piece;
    struct iovec l = {buf, n}, r = {remote + off, n};
    ssize_t got = write ? process_vm_writev(pid, &l, 1, &r, 1, 0)
                        : process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (got != (ssize_t)n) return -1;
  }
  return now() - t0;
}

int main(int argc, char **argv) {
  size_t lo = 16u << 20, hi = 64u << 20, piece = 256u << 10;
  int factor = 4, reps = 7, c;
  while ((c = getopt(argc, argv, "b:e:f:p:r:h")) != -1) {
    switch (c) {
    case 'b': lo = parse_size(optarg); break;
    case 'e': hi = parse_size(optarg); break;
    case 'f': factor = atoi(optarg); break;
    case 'p': piece = parse_size(optarg); break;
    case 'r': reps = atoi(optarg); break;
    default:
      fprintf(stderr, "usage: cma_perf [-b MIN] [-e MAX] [-f FACTOR] "
                      "[-p PIECE] [-r REPS]\n");
      return c == 'h' ? 0 : 2;
    }
  }
  if (!lo || lo > hi || factor < 2 || !piece || reps < 1 || reps > 99) {
    fprintf(stderr, "cma_perf: need 0 < -b <= -e, -f >= 2, -p > 0, "
                    "1 <= -r <= 99\n");
    return 2;
  }
  char *remote = malloc(hi), *src = malloc(hi), *dst = malloc(hi);
  char *buf = malloc(piece);
  if (!remote || !src || !dst || !buf) {
    fprintf(stderr, "cma_perf: out of memory\n");
    return 1;
  }
  memset(remote, 1, hi);
  memset(src, 2, hi);
  memset(dst, 3, hi);
  pid_t pid = fork();
  if (pid < 0) {
    perror("cma_perf: fork");
    return 1;
  }
  if (pid == 0) { /* holds `remote` (the same address) until killed */
    for (;;) pause();
  }
  printf("# cross-memory attach: pieces of %zu bytes, median of %d\n", piece,
         reps);
  printf("%12s %12s %12s %12s\n", "size", "readv GB/s", "writev GB/s",
         "memcpy GB/s");
  int rc = 0;
  for (size_t size = lo; size <= hi; size *= (size_t)factor) {
    double r[99], w[99], m[99];
    for (int i = 0; i < reps && !rc; i++) {
      double tr = pass(pid, buf, piece, remote, size, 0);
      double tw = pass(pid, buf, piece, remote, size, 1);
      if (tr < 0 || tw < 0) {
        fprintf(stderr, "cma_perf: process_vm_%s: %s (ptrace is refused "
                "here: cross-memory attach is not available)\n",
                tr < 0 ? "readv" : "writev", strerror(errno));
        rc = 1;
        break;
      }
      double t0 = now();
      memcpy(dst, src, size);
      double tm = now() - t0;
      r[i] = (double)size / tr / 1e9;
      w[i] = (double)size / tw / 1e9;
      m[i] = (double)size / tm / 1e9;
    }
    if (rc) break;
    printf("%12zu %12.2f %12.2f %12.2f\n", size, median(r, reps),
           median(w, reps), median(m, reps));
    if (size > hi / (size_t)factor) break;
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  free(remote);
  free(src);
  free(dst);
  free(buf);
  return rc;
}
