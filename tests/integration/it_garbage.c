/* it_garbage.c -- a rank that writes garbage to horad's job socket.
 *
 * Rank 0 (before hora_init) and the last rank (after hora_init, with an
 * operation in flight) open raw connections to the socket named by
 * HORA_DAEMON_SOCKET and send random bytes, truncated frames, bad magic,
 * bad versions, huge lengths, frames of the wrong type, HELLOs with wrong
 * tokens or malformed payloads, and a second HELLO of a connected rank.
 * Malformed input must cost only that connection: horad closes it (checked
 * where the frame is complete and wrong) and keeps serving, so afterwards
 * every rank runs checked allreduces, broadcasts and barriers and exits 0.
 *
 * Usage: it_garbage [--marker=...]   (needs horarun; exit 0 on success) */
#include <hora.h>

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAGIC 0x41524f48u

static int g_rank = -1, g_size;
static int g_checks, g_failures;
static const char *g_path;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  g_failures++;
  printf("rank %d: FAIL: %s\n", g_rank, buf);
  fflush(stdout);
}

static int conn(void) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", g_path);
  socklen_t len = sizeof sa;
  if (g_path[0] == '@') { /* the abstract namespace: no file */
    sa.sun_path[0] = '\0';
    len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(g_path));
  }
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0 || connect(s, (struct sockaddr *)&sa, len) < 0) {
    fail("cannot connect to %s: %s", g_path, strerror(errno));
    if (s >= 0) close(s);
    return -1;
  }
  return s;
}

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* A frame header: magic, version, type, len, reqid. */
static size_t hdr(unsigned char *p, uint32_t magic, uint16_t ver, uint16_t type,
                  uint32_t len) {
  put32(p, magic);
  p[4] = (unsigned char)ver;
  p[5] = (unsigned char)(ver >> 8);
  p[6] = (unsigned char)type;
  p[7] = (unsigned char)(type >> 8);
  put32(p + 8, len);
  put32(p + 12, 7);
  return 16;
}

/* A HELLO frame: rank, pid, token (u32 length + bytes). */
static size_t hello(unsigned char *p, int rank, const char *token,
                    uint32_t toklen_field) {
  size_t tl = strlen(token);
  size_t n = 16;
  put32(p + n, (uint32_t)rank);
  put32(p + n + 4, (uint32_t)getpid());
  put32(p + n + 8, toklen_field);
  memcpy(p + n + 12, token, tl);
  n += 12 + tl;
  hdr(p, MAGIC, 1, 1, (uint32_t)(n - 16));
  return n;
}

static int send_all(int s, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t k = send(s, c, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1; /* the daemon may already have dropped us */
    c += k;
    n -= (size_t)k;
  }
  return 0;
}

/* 1 when the daemon closes the connection within ms (any bytes it sends
 * first are read and ignored). */
static int closed_within(int s, int ms) {
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    int left = ms - (int)((t1.tv_sec - t0.tv_sec) * 1000 +
                          (t1.tv_nsec - t0.tv_nsec) / 1000000);
    if (left <= 0) return 0;
    struct pollfd pfd = {.fd = s, .events = POLLIN};
    int r = poll(&pfd, 1, left);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return 0;
    char buf[4096];
    ssize_t k = recv(s, buf, sizeof buf, MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) return 1;
  }
}

/* Sends bytes on a new connection; when must_close, the daemon has to drop
 * the connection. */
static void garbage(const char *what, const void *p, size_t n, int must_close) {
  int s = conn();
  if (s < 0) return;
  send_all(s, p, n);
  g_checks++;
  if (must_close) {
    if (!closed_within(s, 5000))
      fail("garbage '%s': horad did not close the connection within 5 s", what);
  }
  close(s);
}

static uint64_t g_rng = 88172645463325252ull;
static uint64_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}

static int g_held[8], g_nheld;

static void throw_garbage(int after_init) {
  unsigned char b[1 << 16];
  size_t n;
  g_rng ^= (uint64_t)g_rank * 0x9e3779b97f4a7c15ull + (uint64_t)after_init;
  const char *tok = getenv("HORA_RANK_TOKEN");
  char badtok[128];
  snprintf(badtok, sizeof badtok, "%s", tok ? tok : "x");
  badtok[0] = badtok[0] == '0' ? '1' : '0';

  /* random bytes (with a first byte that is surely not the magic's) */
  for (size_t i = 0; i < 4096; i++) b[i] = (unsigned char)rnd();
  b[0] = 0x00;
  garbage("4096 random bytes", b, 4096, 1);
  /* truncated frame headers, then the connection ends */
  hdr(b, MAGIC, 1, 1, 40);
  garbage("7 bytes of a header, then EOF", b, 7, 0);
  garbage("15 bytes of a header, then EOF", b, 15, 0);
  /* a header promising 40 bytes, 10 sent, then EOF */
  memset(b + 16, 'z', 10);
  garbage("truncated payload, then EOF", b, 26, 0);
  /* bad magic, version, type */
  hdr(b, 0xdeadbeefu, 1, 1, 0);
  garbage("bad magic", b, 16, 1);
  hdr(b, MAGIC, 99, 1, 0);
  garbage("bad version 99", b, 16, 1);
  hdr(b, MAGIC, 1, 0, 0);
  garbage("message type 0", b, 16, 1);
  hdr(b, MAGIC, 1, 999, 0);
  garbage("message type 999", b, 16, 1);
  /* huge lengths */
  hdr(b, MAGIC, 1, 1, 0xffffffffu);
  garbage("length 0xffffffff", b, 16, 1);
  hdr(b, MAGIC, 1, 1, (16u << 20) + 1);
  garbage("length 16 MiB + 1", b, 16, 1);
  /* a length at the limit, 1 MiB of it sent, then EOF */
  {
    size_t big = (1u << 20) + 16;
    unsigned char *m = malloc(big);
    hdr(m, MAGIC, 1, 1, 16u << 20);
    memset(m + 16, 0x41, big - 16);
    garbage("length 16 MiB, 1 MiB sent, then EOF", m, big, 0);
    free(m);
  }
  /* messages of the wrong direction or before hello */
  hdr(b, MAGIC, 1, 3, 0);
  garbage("BYE before HELLO", b, 16, 1);
  hdr(b, MAGIC, 1, 2, 0);
  garbage("WELCOME sent to the daemon", b, 16, 1);
  hdr(b, MAGIC, 1, 16, 0);
  garbage("JOB on the job socket", b, 16, 1);
  hdr(b, MAGIC, 1, 17, 4);
  memcpy(b + 16, "\0\0\0\0", 4);
  garbage("ABORT on the job socket", b, 20, 1);
  /* HELLOs that must be refused */
  n = hello(b, g_rank, badtok, (uint32_t)strlen(badtok));
  garbage("HELLO with a wrong token", b, n, 1);
  n = hello(b, 12345, tok ? tok : "x", (uint32_t)strlen(tok ? tok : "x"));
  garbage("HELLO for rank 12345", b, n, 1);
  n = hello(b, -1, tok ? tok : "x", (uint32_t)strlen(tok ? tok : "x"));
  garbage("HELLO for rank -1", b, n, 1);
  n = hello(b, g_rank, "abc", 3);
  garbage("HELLO with a 3-character token", b, n, 1);
  n = hello(b, g_rank, "", 0);
  garbage("HELLO with an empty token", b, n, 1);
  n = hello(b, g_rank, tok ? tok : "x", 0xfffffff0u);
  garbage("HELLO whose token length is 0xfffffff0", b, n, 1);
  n = hello(b, g_rank, badtok, (uint32_t)strlen(badtok));
  hdr(b, MAGIC, 1, 1, 4); /* payload shorter than a HELLO */
  garbage("HELLO with a 4-byte payload", b, 20, 1);
  n = hello(b, g_rank, badtok, (uint32_t)strlen(badtok));
  b[8] = (unsigned char)(b[8] + 5); /* trailing bytes */
  memset(b + n, 0, 5);
  garbage("HELLO with trailing bytes", b, n + 5, 1);
  {
    /* a token with a NUL byte in it */
    char t[64];
    snprintf(t, sizeof t, "%s", tok ? tok : "x");
    n = hello(b, g_rank, t, (uint32_t)strlen(t));
    b[16 + 12 + 1] = 0;
    garbage("HELLO whose token holds a NUL", b, n, 1);
  }
  /* two frames in one write: a bad HELLO, then random bytes */
  n = hello(b, g_rank, badtok, (uint32_t)strlen(badtok));
  for (size_t i = 0; i < 100; i++) b[n + i] = (unsigned char)rnd();
  garbage("bad HELLO followed by random bytes", b, n + 100, 1);
  /* a header dribbled out one byte at a time, bad magic */
  {
    int s = conn();
    if (s >= 0) {
      hdr(b, 0x12345678u, 1, 1, 0);
      for (int i = 0; i < 16; i++) {
        send_all(s, b + i, 1);
        usleep(2000);
      }
      g_checks++;
      if (!closed_within(s, 5000))
        fail("garbage 'bad magic, byte by byte': not closed within 5 s");
      close(s);
    }
  }
  /* a hundred connections at once */
  {
    int fds[100], k = 0;
    for (int i = 0; i < 100; i++)
      if ((fds[k] = conn()) >= 0) k++;
    for (int i = 0; i < k; i++) {
      unsigned char c = (unsigned char)(0x80 | rnd());
      send_all(fds[i], &c, 1);
    }
    for (int i = 0; i < k; i++) close(fds[i]);
  }
  /* connections left open until the end: silent, and half a header */
  if (g_nheld < 6) {
    int s = conn();
    if (s >= 0) g_held[g_nheld++] = s;
    s = conn();
    if (s >= 0) {
      hdr(b, MAGIC, 1, 1, 40);
      send_all(s, b, 10);
      g_held[g_nheld++] = s;
    }
  }
  /* a second HELLO of this very rank, once it is connected */
  if (after_init && tok) {
    n = hello(b, g_rank, tok, (uint32_t)strlen(tok));
    garbage("a second HELLO of a connected rank (its own token)", b, n, 1);
  }
}

static void check_allreduce(int round) {
  enum { N = 1001 };
  static int64_t v[N], w[N];
  char name[64];
  snprintf(name, sizeof name, "after.garbage.%d", round);
  for (int i = 0; i < N; i++) v[i] = (int64_t)(g_rank + 1) * (i + round);
  int rc = hora_allreduce(round % 3 == 2 ? NULL : name, v, w, N, HORA_INT64,
                          HORA_SUM);
  g_checks++;
  if (rc != 0) {
    fail("allreduce %d after garbage: %d (%s): %s", round, rc,
         hora_err_name(rc), hora_last_error());
    return;
  }
  int64_t tri = (int64_t)g_size * (g_size + 1) / 2;
  for (int i = 0; i < N; i++)
    if (w[i] != tri * (i + round)) {
      fail("allreduce %d after garbage: element %d: expected %lld, got %lld",
           round, i, (long long)(tri * (i + round)), (long long)w[i]);
      return;
    }
}

int main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  setvbuf(stdout, NULL, _IOLBF, 0);
  g_path = getenv("HORA_DAEMON_SOCKET");
  const char *rk = getenv("HORA_RANK");
  if (!g_path || !*g_path || !rk) {
    printf("FAIL: HORA_DAEMON_SOCKET / HORA_RANK not set: run under horarun\n");
    return 1;
  }
  g_rank = atoi(rk);
  if (g_rank == 0) throw_garbage(0);
  int rc = hora_init();
  if (rc != 0) {
    printf("rank %d: FAIL: hora_init after garbage: %d (%s): %s\n", g_rank, rc,
           hora_err_name(rc), hora_last_error());
    return 1;
  }
  g_size = hora_size();
  if (g_rank == g_size - 1) {
    /* garbage while an operation of this rank is in flight */
    float x[64], want = (float)g_size;
    for (int i = 0; i < 64; i++) x[i] = 1;
    int64_t h;
    rc = hora_allreduce_async("during.garbage", x, x, 64, HORA_FLOAT32,
                              HORA_SUM, &h);
    throw_garbage(1);
    if (rc == 0) rc = hora_wait(h);
    g_checks++;
    if (rc != 0)
      fail("allreduce in flight during garbage: %d: %s", rc, hora_last_error());
    else if (x[0] != want || x[63] != want)
      fail("allreduce in flight during garbage: expected %g, got %g",
           (double)want, (double)x[0]);
  } else {
    float x[64];
    for (int i = 0; i < 64; i++) x[i] = 1;
    rc = hora_allreduce("during.garbage", x, x, 64, HORA_FLOAT32, HORA_SUM);
    g_checks++;
    if (rc != 0)
      fail("allreduce during garbage: %d: %s", rc, hora_last_error());
  }
  rc = hora_barrier();
  g_checks++;
  if (rc != 0) fail("barrier after garbage: %d: %s", rc, hora_last_error());
  for (int r = 0; r < 30; r++) check_allreduce(r);
  /* a streamed one too (larger than half the arena would be too big to
   * keep fast; a malloc'd buffer is copied through the arena or streamed) */
  {
    size_t n = 3u << 20;
    float *big = malloc(n * sizeof *big);
    for (size_t i = 0; i < n; i++) big[i] = (float)(i % 1000);
    rc = hora_broadcast("after.garbage.bcast", big, n, HORA_FLOAT32,
                        g_size - 1);
    g_checks++;
    if (rc != 0) fail("broadcast after garbage: %d: %s", rc, hora_last_error());
    for (size_t i = 0; i < n; i += 4099)
      if (big[i] != (float)(i % 1000)) {
        fail("broadcast after garbage: element %zu wrong", i);
        break;
      }
    free(big);
  }
  rc = hora_barrier();
  if (rc != 0) fail("final barrier: %d: %s", rc, hora_last_error());
  rc = hora_shutdown();
  if (rc != 0) fail("hora_shutdown: %d: %s", rc, hora_last_error());
  for (int i = 0; i < g_nheld; i++) close(g_held[i]);
  printf("rank %d of %d: garbage: %d checks, %d failures\n", g_rank, g_size,
         g_checks, g_failures);
  return g_failures ? 1 : 0;
}
