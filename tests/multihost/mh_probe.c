/* mh_probe.c -- a stranger on a job's TCP ports (multi-host tests).
 *
 *   mh_probe HOST PORT MODE [control|mesh]
 *   mh_probe HOST PORT forgedlaunch service KEYFILE
 *   mh_probe local SOCKET nofd|pipefd|rendezvous
 *
 * Connects to HOST:PORT (horarun's rendezvous port: control, the default;
 * a horad's mesh port: mesh), sends what MODE says, then waits up to 5 s
 * for the peer to close the connection:
 *
 *   garbage           256 random bytes (never starting with the magic)
 *   truncated         the first bytes of a valid AUTH_HELLO, then EOF
 *   oversize          a header announcing a 4 GiB payload, and a few bytes
 *   badversion        an AUTH_HELLO whose header says version 2
 *   wrongsecret       the whole handshake with a random secret: HELLO, the
 *                     peer's CHALLENGE (whose MAC we check, and expect not
 *                     to match), then a PROOF made with our secret
 *   wrongpurpose      a valid AUTH_HELLO for the other purpose (a mesh
 *                     hello on a control port and the other way round)
 *   hello-then-close  a valid AUTH_HELLO, then EOF
 *   forgedlaunch      (a horad --service's port) the whole handshake with
 *                     the cluster key of KEYFILE, then a launch request of
 *                     random bytes, not sealed with the connection's key:
 *                     the service must refuse it, saying why, and close
 *
 * local: a client at a horad --service's unix socket SOCKET whose launch
 * request (plain, as the local client sends it) passes no descriptor
 * (nofd), two (twofds), a pipe's (pipefd) or a datagram socket's (dgram)
 * instead of a stream socket, or a connection but asks for --rendezvous
 * (rendezvous) or for --bootstrap without the line (nobootline): the
 * service must refuse it, and close; the refusal is printed.
 *
 * Exit status: 0 when the peer closed the connection (EOF or reset, also
 * while we were still sending); 1 when it kept it open for 5 s, or sent a
 * frame other than AUTH_CHALLENGE (as if we were authenticated), or sent
 * bytes that are not frames; 2 on a usage error or when the connection
 * could not be made. One line on stdout says what happened. Arguments
 * starting with --marker= are ignored. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "auth.h"
#include "common.h"
#include "msg.h"

#define WAIT_MS 5000
#define CONNECT_MS 5000

static const char *g_host, *g_port, *g_mode;
static double g_t0;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void out(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void out(int rc, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  printf("mh_probe: %s:%s %s: %s (%.2f s)\n", g_host, g_port, g_mode, buf,
         now_s() - g_t0);
  fflush(stdout);
  exit(rc);
}

static int dial(const char *host, const char *port) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host, port, &hints, &res);
  if (rc) out(2, "cannot resolve: %s", gai_strerror(rc));
  int fd = -1, err = 0;
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
    if (errno == EINPROGRESS) {
      struct pollfd p = {.fd = fd, .events = POLLOUT};
      int n = poll(&p, 1, CONNECT_MS);
      socklen_t len = sizeof err;
      if (n == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 &&
          err == 0)
        break;
      if (n == 0) err = ETIMEDOUT;
    } else {
      err = errno;
    }
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) out(2, "cannot connect: %s", strerror(err));
  /* blocking from here on; waits use poll */
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

static int closed_errno(int e) {
  return e == ECONNRESET || e == EPIPE || e == ECONNABORTED;
}

/* Sends all of p; a peer that closed meanwhile is the verdict (0). */
static void send_all(int fd, const void *p, size_t n) {
  const unsigned char *c = p;
  while (n > 0) {
    ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && closed_errno(errno))
      out(0, "closed by the peer while we were sending (%s)", strerror(errno));
    if (k < 0) out(2, "send: %s", strerror(errno));
    c += k;
    n -= (size_t)k;
  }
}

static void put_header(unsigned char *h, uint32_t magic, uint16_t version,
                       uint16_t type, uint32_t len, uint32_t reqid) {
  for (int i = 0; i < 4; i++) h[i] = (unsigned char)(magic >> (8 * i));
  for (int i = 0; i < 2; i++) h[4 + i] = (unsigned char)(version >> (8 * i));
  for (int i = 0; i < 2; i++) h[6 + i] = (unsigned char)(type >> (8 * i));
  for (int i = 0; i < 4; i++) h[8 + i] = (unsigned char)(len >> (8 * i));
  for (int i = 0; i < 4; i++) h[12 + i] = (unsigned char)(reqid >> (8 * i));
}

static void random_bytes(void *p, size_t n) {
  if (hp_random(p, n) != 0) out(2, "no random bytes");
}

/* Waits for one frame from the peer, until the deadline. Returns 1 with
 * *h / *payload (valid until the next call) when one came; returns 0 when
 * the peer closed (with the reason in how). Exits 1 on bytes that are not
 * frames and on the deadline. */
static int next_frame(int fd, struct hp_decoder *d, double deadline,
                      struct hp_frame_hdr *h, const unsigned char **payload,
                      const char **how) {
  for (;;) {
    char why[256];
    int rc = hp_decoder_next(d, h, payload, why, sizeof why);
    if (rc == 1) return 1;
    if (rc < 0) out(1, "the peer sent bytes that are not a frame: %s", why);
    double left = deadline - now_s();
    if (left <= 0) out(1, "the peer kept the connection open for %d s", WAIT_MS / 1000);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int n = poll(&p, 1, (int)(left * 1000) + 1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) out(2, "poll: %s", strerror(errno));
    if (n == 0) continue; /* the deadline check above ends it */
    unsigned char buf[4096];
    ssize_t k = recv(fd, buf, sizeof buf, 0);
    if (k == 0) {
      *how = "EOF";
      return 0;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && closed_errno(errno)) {
      *how = "connection reset";
      return 0;
    }
    if (k < 0) out(2, "recv: %s", strerror(errno));
    if (hp_decoder_feed(d, buf, (size_t)k) != 0) out(2, "out of memory");
  }
}

/* The verdict: the peer must close; an AUTH_CHALLENGE before that is
 * allowed when allow_challenge (it answers a valid HELLO), anything else
 * is not. */
static void expect_close(int fd, struct hp_decoder *d, int allow_challenge) {
  double deadline = now_s() + WAIT_MS / 1000.0;
  struct hp_frame_hdr h;
  const unsigned char *payload;
  const char *how = "";
  while (next_frame(fd, d, deadline, &h, &payload, &how)) {
    if (h.type == HP_MSG_AUTH_CHALLENGE && allow_challenge) {
      allow_challenge = 0;
      continue;
    }
    out(1, "the peer answered with a frame of type %u (%u bytes), as if we "
           "were let in", h.type, h.len);
  }
  out(0, "closed by the peer (%s)", how);
}

/* The service's refusal: a SVC_OUTPUT (its first line into text), then a
 * SVC_EXIT, before the deadline; anything else ends the probe (exit 1). */
static void read_refusal(int fd, struct hp_decoder *d, double deadline,
                         char *text, size_t len) {
  struct hp_frame_hdr h;
  const unsigned char *payload;
  const char *how = "";
  if (!next_frame(fd, d, deadline, &h, &payload, &how))
    out(1, "closed by the peer without saying why (%s)", how);
  if (h.type != HP_MSG_SVC_OUTPUT)
    out(1, "the service answered with a frame of type %u, not its refusal",
        h.type);
  size_t n = h.len < len - 1 ? h.len : len - 1;
  memcpy(text, payload, n);
  text[n] = '\0';
  text[strcspn(text, "\n")] = '\0';
  if (!next_frame(fd, d, deadline, &h, &payload, &how) ||
      h.type != HP_MSG_SVC_EXIT)
    out(1, "no exit status after the refusal");
}

/* forgedlaunch: a client with the key whose launch request does not open. */
static int forged_launch(const char *keyfile) {
  unsigned char key[HP_SECRET_LEN];
  char hex[2 * HP_SECRET_LEN + 8] = "";
  FILE *f = fopen(keyfile, "r");
  if (!f || !fgets(hex, sizeof hex, f)) out(2, "cannot read %s", keyfile);
  fclose(f);
  hex[strcspn(hex, "\r\n")] = '\0';
  if (hp_unhex(hex, key, sizeof key) < 0) out(2, "%s: not 64 hex digits", keyfile);
  signal(SIGPIPE, SIG_IGN);
  int fd = dial(g_host, g_port);
  g_t0 = now_s();
  struct hp_decoder d;
  hp_decoder_init(&d);
  struct hp_auth a;
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_auth_init(&a, HP_AUTH_CONNECTOR, HP_AUTH_SERVICE, key);
  if (hp_auth_start(&a, &w) != 0) out(2, "hp_auth_start failed");
  send_all(fd, w.data, w.len);
  hp_wbuf_reset(&w);
  double deadline = now_s() + WAIT_MS / 1000.0;
  struct hp_frame_hdr h;
  const unsigned char *payload;
  const char *how = "";
  char why[256] = "";
  if (!next_frame(fd, &d, deadline, &h, &payload, &how))
    out(1, "closed by the peer before its challenge (%s)", how);
  if (hp_auth_step(&a, &h, payload, &w, why, sizeof why) != 1)
    out(1, "the handshake with the key failed: %s", why);
  send_all(fd, w.data, w.len); /* our PROOF */
  hp_wbuf_reset(&w);
  unsigned char junk[200];
  random_bytes(junk, sizeof junk);
  hp_frame_begin(&w, HP_MSG_SVC_LAUNCH, 0);
  hp_put_raw(&w, junk, sizeof junk);
  hp_frame_end(&w);
  send_all(fd, w.data, w.len);
  hp_wbuf_free(&w);
  char text[300];
  read_refusal(fd, &d, deadline, text, sizeof text);
  if (!strstr(text, "does not open with the connection's key"))
    out(1, "the service refused for another reason: %s", text);
  expect_close(fd, &d, 0);
  return 2; /* not reached */
}

/* local: a bad request at the service's unix socket; prints the refusal. */
static int local_launch(const char *path, const char *mode) {
  static const char boot[] = "HORA1 0 0 00 10";
  const char *args[4] = {"--control-fd", "3", NULL, NULL};
  if (!strcmp(mode, "rendezvous")) args[0] = "--rendezvous", args[1] = NULL;
  else if (!strcmp(mode, "nobootline")) args[2] = "--bootstrap";
  else if (strcmp(mode, "nofd") && strcmp(mode, "pipefd") &&
           strcmp(mode, "twofds") && strcmp(mode, "dgram"))
    out(2, "unknown local mode");
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_frame_begin(&w, HP_MSG_SVC_LAUNCH, 0);
  if (strcmp(mode, "rendezvous")) hp_put_raw(&w, "", 1);
  else hp_put_raw(&w, boot, sizeof boot);
  for (int i = 0; args[i]; i++) hp_put_raw(&w, args[i], strlen(args[i]) + 1);
  hp_frame_end(&w);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
    out(2, "cannot connect: %s", strerror(errno));
  signal(SIGPIPE, SIG_IGN);
  g_t0 = now_s();
  int pass[2] = {-1, -1}, npass = 1;
  if (!strcmp(mode, "pipefd") && pipe(pass) < 0) out(2, "pipe failed");
  if (!strcmp(mode, "dgram") && socketpair(AF_UNIX, SOCK_DGRAM, 0, pass) < 0)
    out(2, "socketpair failed");
  if ((!strcmp(mode, "rendezvous") || !strcmp(mode, "nobootline") ||
       !strcmp(mode, "twofds")) &&
      socketpair(AF_UNIX, SOCK_STREAM, 0, pass) < 0)
    out(2, "socketpair failed");
  if (!strcmp(mode, "twofds")) npass = 2;
  union {
    struct cmsghdr c;
    char b[CMSG_SPACE(2 * sizeof(int))];
  } cb;
  memset(&cb, 0, sizeof cb);
  struct iovec iov = {.iov_base = w.data, .iov_len = w.len};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
  if (pass[0] >= 0) {
    m.msg_control = cb.b;
    m.msg_controllen = CMSG_SPACE(npass * sizeof(int));
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(npass * sizeof(int));
    memcpy(CMSG_DATA(c), pass, npass * sizeof(int));
  }
  if (sendmsg(fd, &m, 0) != (ssize_t)w.len) out(2, "sendmsg failed");
  hp_wbuf_free(&w);
  struct hp_decoder d;
  hp_decoder_init(&d);
  char text[400];
  read_refusal(fd, &d, now_s() + WAIT_MS / 1000.0, text, sizeof text);
  printf("refused: %s\n", text);
  expect_close(fd, &d, 0);
  return 2; /* not reached */
}

int main(int argc, char **argv) {
  int n = 0;
  for (int i = 0; i < argc; i++)
    if (strncmp(argv[i], "--marker=", 9) != 0) argv[n++] = argv[i];
  argc = n;
  if (argc == 4 && !strcmp(argv[1], "local")) {
    g_host = argv[1];
    g_port = argv[2];
    g_mode = argv[3];
    return local_launch(argv[2], argv[3]);
  }
  if (argc == 6 && !strcmp(argv[3], "forgedlaunch") &&
      !strcmp(argv[4], "service")) {
    g_host = argv[1];
    g_port = argv[2];
    g_mode = argv[3];
    return forged_launch(argv[5]);
  }
  if (argc < 4 || argc > 5) {
    fprintf(stderr, "usage: mh_probe HOST PORT MODE [control|mesh]\n"
                    "  MODE: garbage truncated oversize badversion "
                    "wrongsecret wrongpurpose hello-then-close\n");
    return 2;
  }
  g_host = argv[1];
  g_port = argv[2];
  g_mode = argv[3];
  uint8_t purpose = HP_AUTH_CONTROL;
  if (argc == 5) {
    if (!strcmp(argv[4], "mesh")) purpose = HP_AUTH_MESH;
    else if (strcmp(argv[4], "control") != 0) {
      fprintf(stderr, "mh_probe: purpose must be control or mesh\n");
      return 2;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  g_t0 = now_s();

  const char *modes[] = {"garbage", "truncated", "oversize", "badversion",
                         "wrongsecret", "wrongpurpose", "hello-then-close"};
  int known = 0;
  for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
    known |= !strcmp(g_mode, modes[i]);
  if (!known) {
    fprintf(stderr, "mh_probe: unknown mode '%s'\n", g_mode);
    return 2;
  }

  int fd = dial(g_host, g_port);
  g_t0 = now_s();
  struct hp_decoder d;
  hp_decoder_init(&d);
  unsigned char secret[HP_SECRET_LEN];
  random_bytes(secret, sizeof secret);
  struct hp_auth a;
  struct hp_wbuf w;
  hp_wbuf_init(&w);

  if (!strcmp(g_mode, "garbage")) {
    unsigned char junk[256];
    random_bytes(junk, sizeof junk);
    if (junk[0] == (HP_FRAME_MAGIC & 0xff)) junk[0] ^= 0x80; /* never "HORA" */
    send_all(fd, junk, sizeof junk);
    expect_close(fd, &d, 0);
  }

  if (!strcmp(g_mode, "oversize")) {
    unsigned char buf[HP_FRAME_HDR + 64];
    put_header(buf, HP_FRAME_MAGIC, HP_PROTO_VERSION, HP_MSG_AUTH_HELLO,
               0xfffffff0u, 0);
    random_bytes(buf + HP_FRAME_HDR, 64);
    send_all(fd, buf, sizeof buf);
    expect_close(fd, &d, 0);
  }

  if (!strcmp(g_mode, "badversion")) {
    unsigned char buf[HP_FRAME_HDR + 1 + HP_NONCE_LEN];
    put_header(buf, HP_FRAME_MAGIC, HP_PROTO_VERSION + 1, HP_MSG_AUTH_HELLO,
               1 + HP_NONCE_LEN, 0);
    buf[HP_FRAME_HDR] = purpose;
    random_bytes(buf + HP_FRAME_HDR + 1, HP_NONCE_LEN);
    send_all(fd, buf, sizeof buf);
    expect_close(fd, &d, 0);
  }

  /* the rest start with a genuine AUTH_HELLO */
  uint8_t hello_purpose = purpose;
  if (!strcmp(g_mode, "wrongpurpose"))
    hello_purpose = purpose == HP_AUTH_MESH ? HP_AUTH_CONTROL : HP_AUTH_MESH;
  hp_auth_init(&a, HP_AUTH_CONNECTOR, hello_purpose, secret);
  if (hp_auth_start(&a, &w) != 0) out(2, "hp_auth_start failed");

  if (!strcmp(g_mode, "truncated")) {
    send_all(fd, w.data, HP_FRAME_HDR + 10); /* of 16 + 33 */
    shutdown(fd, SHUT_WR);
    expect_close(fd, &d, 0);
  }

  send_all(fd, w.data, w.len);
  hp_wbuf_reset(&w);

  if (!strcmp(g_mode, "hello-then-close")) {
    shutdown(fd, SHUT_WR);
    expect_close(fd, &d, 1);
  }
  if (!strcmp(g_mode, "wrongpurpose")) expect_close(fd, &d, 0);

  /* wrongsecret: the peer's CHALLENGE, then our PROOF */
  double deadline = now_s() + WAIT_MS / 1000.0;
  struct hp_frame_hdr h;
  const unsigned char *payload;
  const char *how = "";
  if (!next_frame(fd, &d, deadline, &h, &payload, &how))
    out(0, "closed by the peer before its challenge (%s)", how);
  if (h.type != HP_MSG_AUTH_CHALLENGE || h.len != HP_NONCE_LEN + HP_MAC_LEN)
    out(1, "the peer answered our hello with a frame of type %u (%u bytes), "
           "not a challenge", h.type, h.len);
  unsigned char nonce_s[HP_NONCE_LEN];
  memcpy(nonce_s, payload, HP_NONCE_LEN);
  char why[256] = "";
  int rc = hp_auth_step(&a, &h, payload, &w, why, sizeof why);
  if (rc == 1) out(1, "the peer's MAC matched our random secret");
  /* (rc is HORA_EAUTH: the peer holds another secret, as it should) */
  /* PROOF = HMAC-SHA256(our secret, label | purpose | nonce_c | nonce_s) */
  static const char label[] = "hora-auth-1 connector";
  unsigned char in[sizeof label + 2 * HP_NONCE_LEN], mac[HP_MAC_LEN];
  size_t k = strlen(label);
  memcpy(in, label, k);
  in[k++] = purpose;
  memcpy(in + k, a.nonce_c, HP_NONCE_LEN);
  k += HP_NONCE_LEN;
  memcpy(in + k, nonce_s, HP_NONCE_LEN);
  k += HP_NONCE_LEN;
  unsigned int maclen = 0;
  if (!HMAC(EVP_sha256(), secret, sizeof secret, in, k, mac, &maclen))
    out(2, "HMAC failed");
  unsigned char proof[HP_FRAME_HDR + HP_MAC_LEN];
  put_header(proof, HP_FRAME_MAGIC, HP_PROTO_VERSION, HP_MSG_AUTH_PROOF,
             HP_MAC_LEN, 0);
  memcpy(proof + HP_FRAME_HDR, mac, HP_MAC_LEN);
  send_all(fd, proof, sizeof proof);
  expect_close(fd, &d, 0);
  return 2; /* not reached */
}
