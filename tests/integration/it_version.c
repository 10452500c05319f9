/* it_version.c -- libhora and horad of different protocol versions.
 *
 *   it_version daemon   a rank under horarun: before hora_init() it says
 *                       hello itself, as a libhora of another release
 *                       would, twice: with frame protocol version 99, then
 *                       with shared-memory protocol version 99 in the
 *                       hello. Both must come back as a REFUSE frame in
 *                       horad's own version, with HORA_EVERSION and a
 *                       message naming the rank and both versions. Then
 *                       hora_init() works and an allreduce is checked.
 *   it_version client   no horarun: a stand-in horad on a socket of its
 *                       own answers hora_init()'s hello as a horad of
 *                       another release would: a frame of version 99, a
 *                       REFUSE with HORA_EVERSION, a segment of
 *                       shared-memory version 99. hora_init() must return
 *                       HORA_EVERSION each time with a clear message; the
 *                       hello it sent carries this libhora's versions.
 *
 * Prints "rank R: version: N checks, 0 failures" and exits 0 when every
 * check passed, 1 otherwise. Arguments starting with --marker= are
 * ignored. */
#include <hora.h>

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "msg.h"
#include "shm.h"

static int g_rank = -1, g_checks, g_failures;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    g_checks++;                                                                \
    if (!(cond)) {                                                             \
      g_failures++;                                                            \
      printf("rank %d: FAIL: ", g_rank);                                       \
      printf(__VA_ARGS__);                                                     \
      printf("\n");                                                            \
      fflush(stdout);                                                          \
    }                                                                          \
  } while (0)

static socklen_t sock_addr(const char *path, struct sockaddr_un *sa) {
  memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  snprintf(sa->sun_path, sizeof sa->sun_path, "%s", path);
  if (path[0] != '@') return sizeof *sa;
  sa->sun_path[0] = '\0';
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path));
}

/* Reads one whole frame (at most cap bytes) from s; returns its length or
 * -1 when the connection ends first. */
static ssize_t read_frame(int s, unsigned char *buf, size_t cap) {
  size_t have = 0;
  while (have < HP_FRAME_HDR ||
         have < HP_FRAME_HDR + (size_t)(buf[8] | buf[9] << 8 | buf[10] << 16)) {
    if (have == cap) return -1;
    ssize_t n = read(s, buf + have, cap - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    have += (size_t)n;
  }
  return (ssize_t)have;
}

/* ---- daemon: a hello of another release to the real horad -------------- */

static void hello_of_another_release(int frame_version, uint32_t shm_version,
                                     const char *want) {
  const char *path = getenv("HORA_DAEMON_SOCKET");
  const char *token = getenv("HORA_RANK_TOKEN");
  struct sockaddr_un sa;
  socklen_t len = sock_addr(path ? path : "", &sa);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (!path || !token || s < 0 || connect(s, (struct sockaddr *)&sa, len)) {
    CHECK(0, "cannot connect to horad at %s: %s", path ? path : "(unset)",
          strerror(errno));
    if (s >= 0) close(s);
    return;
  }
  struct hp_hello h = {.rank = g_rank, .pid = (int32_t)getpid(),
                       .shm_version = shm_version};
  snprintf(h.token, sizeof h.token, "%s", token);
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_hello(&w, &h);
  w.data[4] = (unsigned char)frame_version; /* the header's version field */
  w.data[5] = (unsigned char)(frame_version >> 8);
  ssize_t n = write(s, w.data, w.len);
  hp_wbuf_free(&w);
  CHECK(n > 0, "cannot send the hello: %s", strerror(errno));
  unsigned char buf[1024];
  ssize_t got = read_frame(s, buf, sizeof buf);
  close(s);
  struct hp_frame_hdr fh;
  char why[160];
  struct hp_refuse m;
  if (got < 0) {
    CHECK(0, "horad closed the connection without a word (frame version "
          "%d, shared-memory version %u)", frame_version, shm_version);
    return;
  }
  if (hp_frame_parse(buf, &fh, why, sizeof why) < 0) {
    CHECK(0, "horad's answer is not a frame of version %u: %s",
          HP_PROTO_VERSION, why);
    return;
  }
  CHECK(fh.type == HP_MSG_REFUSE, "horad answered with message type %u",
        fh.type);
  if (fh.type != HP_MSG_REFUSE) return;
  CHECK(hp_dec_refuse(buf + HP_FRAME_HDR, fh.len, &m) == 0,
        "malformed REFUSE");
  CHECK(m.status == HORA_EVERSION, "refused with %s, not HORA_EVERSION: %s",
        hora_err_name(m.status), m.msg);
  char rank[32];
  snprintf(rank, sizeof rank, "rank %d", g_rank);
  CHECK(strstr(m.msg, want) && strstr(m.msg, rank) &&
            strstr(m.msg, "same hora release"),
        "the refusal \"%s\" does not say \"%s\" and name %s", m.msg, want,
        rank);
  printf("rank %d: refused as expected: %s: %s\n", g_rank,
         hora_err_name(m.status), m.msg);
}

static int cmd_daemon(void) {
  const char *r = getenv("HORA_RANK");
  g_rank = r ? atoi(r) : -1;
  char want[96];
  snprintf(want, sizeof want, "protocol version 99, but this horad speaks "
           "version %u", HP_PROTO_VERSION);
  hello_of_another_release(99, HP_SHM_VERSION, want);
  snprintf(want, sizeof want, "shared-memory protocol version 99, but this "
           "horad speaks version %u", HP_SHM_VERSION);
  hello_of_another_release(HP_PROTO_VERSION, 99, want);
  /* refused connections leave no trace: this rank's own hello works */
  int rc = hora_init();
  CHECK(rc == 0, "hora_init after the refusals: %s: %s", hora_err_name(rc),
        hora_last_error());
  if (rc == 0) {
    double x = hora_rank() + 1;
    rc = hora_allreduce("after.version", &x, &x, 1, HORA_FLOAT64, HORA_SUM);
    int n = hora_size();
    CHECK(rc == 0 && x == n * (n + 1) / 2.0, "allreduce: %s, %g",
          hora_err_name(rc), x);
    hora_shutdown();
  }
  printf("rank %d: version: %d checks, %d failures\n", g_rank, g_checks,
         g_failures);
  return g_failures ? 1 : 0;
}

/* ---- client: libhora facing a horad of another release ------------------ */

enum { ANSWER_VERSION, ANSWER_REFUSE, ANSWER_SEGMENT };

struct fake {
  int listener;
  int answer;
  struct hp_hello hello; /* what libhora said */
  int heard;
};

static void send_with_fds(int s, const struct hp_wbuf *w, const int *fds,
                          int nfds) {
  char cbuf[CMSG_SPACE(2 * sizeof(int))];
  memset(cbuf, 0, sizeof cbuf);
  struct iovec iov = {.iov_base = w->data, .iov_len = w->len};
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
  if (nfds) {
    mh.msg_control = cbuf;
    mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
    memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
  }
  ssize_t n = sendmsg(s, &mh, MSG_NOSIGNAL);
  (void)n;
}

/* Accepts one connection, reads its hello and answers as asked. */
static void *fake_main(void *arg) {
  struct fake *f = arg;
  int s = accept(f->listener, NULL, NULL);
  if (s < 0) return NULL;
  unsigned char buf[1024];
  ssize_t got = read_frame(s, buf, sizeof buf);
  struct hp_frame_hdr h;
  char why[160];
  if (got > 0 && hp_frame_parse(buf, &h, why, sizeof why) == 0 &&
      h.type == HP_MSG_HELLO &&
      hp_dec_hello(buf + HP_FRAME_HDR, h.len, &f->hello) == 0)
    f->heard = 1;
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  if (f->answer == ANSWER_REFUSE) {
    struct hp_refuse m = {.status = HORA_EVERSION};
    snprintf(m.msg, sizeof m.msg, "a stand-in horad says no");
    hp_enc_refuse(&w, &m);
    send_with_fds(s, &w, NULL, 0);
  } else {
    struct hp_shm_hdr layout;
    memset(&layout, 0, sizeof layout);
    uint64_t size = hp_shm_layout(&layout, 4096, 1 << 20, 0);
    struct hp_welcome m = {.rank = 0, .size = 1, .local_size = 1,
                           .cross_size = 1, .daemon_pid = (int32_t)getpid(),
                           .shm_size = size};
    snprintf(m.hostname, sizeof m.hostname, "stand-in");
    hp_enc_welcome(&w, &m);
    int fds[2] = {memfd_create("it_version", MFD_CLOEXEC),
                  eventfd(0, EFD_CLOEXEC)};
    if (fds[0] >= 0 && ftruncate(fds[0], (off_t)size) == 0) {
      layout.version = 99; /* a segment of another layout version */
      ssize_t n = pwrite(fds[0], &layout, sizeof layout, 0);
      (void)n;
    }
    if (f->answer == ANSWER_VERSION) { /* a frame of version 99 */
      w.data[4] = 99;
      w.data[5] = 0;
    }
    send_with_fds(s, &w, fds, 2);
    close(fds[0]);
    close(fds[1]);
  }
  hp_wbuf_free(&w);
  usleep(100000); /* let libhora read before the connection ends */
  close(s);
  return NULL;
}

static void client_case(int answer, const char *want) {
  char path[64];
  snprintf(path, sizeof path, "@hora-it-version-%d-%d", (int)getpid(), answer);
  struct sockaddr_un sa;
  socklen_t len = sock_addr(path, &sa);
  struct fake f = {.answer = answer};
  f.listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (f.listener < 0 || bind(f.listener, (struct sockaddr *)&sa, len) ||
      listen(f.listener, 4)) {
    CHECK(0, "cannot listen on %s: %s", path, strerror(errno));
    return;
  }
  pthread_t t;
  pthread_create(&t, NULL, fake_main, &f);
  setenv("HORA_DAEMON_SOCKET", path, 1);
  setenv("HORA_RANK", "0", 1);
  setenv("HORA_RANK_TOKEN", "0123456789abcdef0123456789abcdef", 1);
  int rc = hora_init();
  const char *msg = hora_last_error();
  CHECK(rc == HORA_EVERSION, "case %d: hora_init returned %s (%s), expected "
        "HORA_EVERSION", answer, hora_err_name(rc), msg);
  CHECK(strstr(msg, want) != NULL, "case %d: the message \"%s\" does not say "
        "\"%s\"", answer, msg, want);
  CHECK(!hora_is_initialized(), "case %d: hora is initialised", answer);
  if (rc == 0) hora_shutdown();
  pthread_join(t, NULL);
  close(f.listener);
  CHECK(f.heard && f.hello.shm_version == HP_SHM_VERSION,
        "case %d: the hello did not carry shared-memory version %u (heard %d, "
        "%u)", answer, HP_SHM_VERSION, f.heard, f.hello.shm_version);
  printf("rank 0: hora_init: %s: %s\n", hora_err_name(rc), msg);
}

static int cmd_client(void) {
  g_rank = 0;
  char want[160];
  snprintf(want, sizeof want, "libhora speaks protocol version %u, but horad "
           "speaks version 99", HP_PROTO_VERSION);
  client_case(ANSWER_VERSION, want);
  client_case(ANSWER_REFUSE, "horad refused this rank: a stand-in horad says "
                             "no");
  snprintf(want, sizeof want, "libhora speaks shared-memory protocol version "
           "%u, but horad speaks version 99", HP_SHM_VERSION);
  client_case(ANSWER_SEGMENT, want);
  unsetenv("HORA_DAEMON_SOCKET");
  printf("rank 0: version: %d checks, %d failures\n", g_checks, g_failures);
  return g_failures ? 1 : 0;
}

int main(int argc, char **argv) {
  const char *mode = NULL;
  for (int i = 1; i < argc && !mode; i++)
    if (strncmp(argv[i], "--marker=", 9) != 0) mode = argv[i];
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (mode && !strcmp(mode, "daemon")) return cmd_daemon();
  if (mode && !strcmp(mode, "client")) return cmd_client();
  fprintf(stderr, "usage: it_version daemon|client\n");
  return 2;
}
