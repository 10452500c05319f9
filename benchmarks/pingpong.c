/* pingpong.c -- one TCP connection's round trip, the yardstick for small
 * collectives between hosts: BYTES go one way and come back, N times after
 * W warm-up trips, on a connection with TCP_NODELAY, with blocking reads
 * (the kernel's path: each side sleeps and is woken), or with -p on both
 * sides, reads that poll (MSG_DONTWAIT in a loop: no sleep and wake-up, as
 * MPI's progress loop and horad's spin do).
 *
 *   pingpong -s ADDR PORT [-p]     serve one connection, echo each message
 *   pingpong -c HOST PORT [-n N] [-w W] [-b BYTES] [-p]
 *
 * The client prints one line:
 *   rtt_us BYTES min MIN median MEDIAN p90 P90 (N trips, blocking|polling reads) */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int poll_reads;

static int full(int fd, void *buf, size_t n, int out) {
  char *p = buf;
  while (n) {
    ssize_t k = out ? write(fd, p, n)
                : poll_reads ? recv(fd, p, n, MSG_DONTWAIT)
                             : read(fd, p, n);
    if (k < 0 && !out && poll_reads && errno == EAGAIN) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int dial(const char *host, const char *port, int listen_too) {
  struct addrinfo hints = {0}, *res;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = listen_too ? AI_PASSIVE : 0;
  int rc = getaddrinfo(host, port, &hints, &res);
  if (rc) {
    fprintf(stderr, "pingpong: %s:%s: %s\n", host, port, gai_strerror(rc));
    return -1;
  }
  int fd = socket(res->ai_family, res->ai_socktype, 0), one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (listen_too) {
    if (bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, 1)) {
      perror("pingpong: bind/listen");
      return -1;
    }
    int c = accept(fd, NULL, NULL);
    close(fd);
    fd = c;
  } else {
    double t0 = now_us();
    while (connect(fd, res->ai_addr, res->ai_addrlen)) {
      if (now_us() - t0 > 10e6) {
        perror("pingpong: connect");
        return -1;
      }
      close(fd);
      usleep(20000);
      fd = socket(res->ai_family, res->ai_socktype, 0);
    }
  }
  freeaddrinfo(res);
  if (fd >= 0) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

int main(int argc, char **argv) {
  if (argc < 4 || (strcmp(argv[1], "-s") && strcmp(argv[1], "-c"))) {
    fprintf(stderr, "usage: pingpong -s ADDR PORT [-p] | -c HOST PORT [-n N] "
                    "[-w W] [-b BYTES] [-p]\n");
    return 2;
  }
  int server = !strcmp(argv[1], "-s");
  long n = 2000, w = 200, bytes = 8;
  for (int i = 4; i < argc; i++) {
    if (!strcmp(argv[i], "-p")) poll_reads = 1;
    else if (i + 1 < argc && !strcmp(argv[i], "-n")) n = atol(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "-w")) w = atol(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "-b")) bytes = atol(argv[++i]);
  }
  if (n < 1 || w < 0 || bytes < 1 || bytes > (1 << 24)) {
    fprintf(stderr, "pingpong: bad -n, -w or -b\n");
    return 2;
  }
  int fd = dial(argv[2], argv[3], server);
  if (fd < 0) return 1;
  uint32_t len;
  if (server) {
    char *buf = NULL;
    while (full(fd, &len, 4, 0) == 0 && len <= (1u << 24)) {
      char *nb = realloc(buf, 4 + (size_t)len);
      if (!nb) break;
      buf = nb;
      memcpy(buf, &len, 4);
      if (full(fd, buf + 4, len, 0) || full(fd, buf, 4 + (size_t)len, 1)) break;
    }
    free(buf);
    return 0;
  }
  /* the length and the bytes in one write, as a small message is sent */
  char *m = calloc(1, 4 + (size_t)bytes);
  double *t = malloc(sizeof *t * (size_t)n);
  if (!m || !t) return 1;
  len = (uint32_t)bytes;
  for (long i = 0; i < w + n; i++) {
    double t0 = now_us();
    memcpy(m, &len, 4);
    if (full(fd, m, 4 + (size_t)bytes, 1) || full(fd, m, 4 + (size_t)bytes, 0)) {
      fprintf(stderr, "pingpong: the connection broke\n");
      return 1;
    }
    if (i >= w) t[i - w] = now_us() - t0;
  }
  qsort(t, (size_t)n, sizeof *t, cmp);
  printf("rtt_us %ld min %.1f median %.1f p90 %.1f (%ld trips, %s reads)\n",
         bytes, t[0], t[n / 2], t[n * 9 / 10], n,
         poll_reads ? "polling" : "blocking");
  return 0;
}
