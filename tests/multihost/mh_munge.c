/* mh_munge.c -- a client of a `horad --service --auth munge` that
 * misbehaves (multi-host tests, service_munge.sh).
 *
 *   mh_munge HOST PORT MUNGE-SOCKET MODE
 *
 * Connects, says it comes with MUNGE, reads the service's nonce, then:
 *
 *   forged      sends text shaped like a credential that munged never made
 *   expired     sends a credential for the nonce made with a 1 s lifetime,
 *               2.5 s late
 *   othernonce  sends a fresh credential made for another nonce
 *   replayed    sends a credential for the nonce whose request is not a
 *               launch request (refused after munged checked it), then, on
 *               a second connection, the same credential again
 *
 * and prints, one line per connection, "refused: <the service's words>"
 * when the service answered with its refusal and exit status 255.
 * Exit status: 0 when every connection was refused so; 1 otherwise; 2 on
 * a usage error, or when the service cannot be reached. */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"
#include "common.h"
#include "msg.h"
#include "munge.h"

static const char *g_host, *g_port, *g_sock;

static int dial(void) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(g_host, g_port, &hints, &res)) return -1;
  int fd = socket(res->ai_family, SOCK_STREAM, 0);
  struct timeval tv = {.tv_sec = 10};
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) < 0) {
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  return fd;
}

static int send_frame(int fd, int type, const void *p, size_t n) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_frame_begin(&w, (uint16_t)type, 0);
  if (n) hp_put_raw(&w, p, n);
  hp_frame_end(&w);
  int rc = w.err || write(fd, w.data, w.len) != (ssize_t)w.len ? -1 : 0;
  hp_wbuf_free(&w);
  return rc;
}

static int read_all(int fd, void *p, size_t n) {
  unsigned char *b = p;
  while (n) {
    ssize_t k = read(fd, b, n);
    if (k <= 0) return -1;
    b += k;
    n -= (size_t)k;
  }
  return 0;
}

/* One frame into buf (at most max bytes); returns its type, or -1. */
static int read_frame(int fd, unsigned char *buf, size_t max, size_t *len) {
  unsigned char hdr[HP_FRAME_HDR];
  struct hp_frame_hdr h;
  char why[200];
  if (read_all(fd, hdr, sizeof hdr) < 0 ||
      hp_frame_parse(hdr, &h, why, sizeof why) < 0 || h.len > max ||
      read_all(fd, buf, h.len) < 0)
    return -1;
  *len = h.len;
  return h.type;
}

/* Connects and reads the nonce. Returns the fd, or -1. */
static int start(unsigned char nonce[HP_NONCE_LEN]) {
  int fd = dial();
  if (fd < 0) {
    printf("cannot reach %s:%s\n", g_host, g_port);
    exit(2);
  }
  size_t n = 0;
  if (send_frame(fd, HP_MSG_SVC_MUNGE, NULL, 0) < 0 ||
      read_frame(fd, nonce, HP_NONCE_LEN, &n) != HP_MSG_SVC_MUNGE ||
      n != HP_NONCE_LEN) {
    printf("no nonce from the service\n");
    exit(1);
  }
  return fd;
}

/* A credential with the service's payload layout for `nonce` (label, the
 * nonce, an output key, a request). */
static char *credential(const unsigned char nonce[HP_NONCE_LEN], int ttl) {
  static const char label[] = "hora-service-munge-1";
  const char req[] = "not a launch request";
  unsigned char pl[sizeof label + HP_NONCE_LEN + 32 + sizeof req];
  memcpy(pl, label, sizeof label);
  memcpy(pl + sizeof label, nonce, HP_NONCE_LEN);
  memset(pl + sizeof label + HP_NONCE_LEN, 7, 32); /* the output key */
  memcpy(pl + sizeof label + HP_NONCE_LEN + 32, req, sizeof req);
  char *cred = NULL, why[300];
  if (hd_munge_encode(g_sock, pl, (int)sizeof pl, (uid_t)-1, ttl, &cred, why,
                      sizeof why) < 0) {
    printf("cannot make a credential: %s\n", why);
    exit(2);
  }
  return cred;
}

/* Sends cred on fd; 0 when the service refused it (its words printed). */
static int refused(int fd, const char *cred) {
  static unsigned char buf[1 << 16];
  size_t n = 0;
  if (send_frame(fd, HP_MSG_SVC_MUNGE, cred, strlen(cred)) < 0) {
    printf("the service closed the connection early\n");
    return 1;
  }
  int t = read_frame(fd, buf, sizeof buf - 1, &n);
  if (t != HP_MSG_SVC_OUTPUT) {
    printf("no refusal from the service (frame type %d)\n", t);
    return 1;
  }
  buf[n] = '\0';
  if (n && buf[n - 1] == '\n') buf[n - 1] = '\0';
  unsigned char st[4];
  if (read_frame(fd, st, sizeof st, &n) != HP_MSG_SVC_EXIT || n != 4 ||
      st[0] != 255) {
    printf("a refusal without exit status 255: %s\n", buf);
    return 1;
  }
  printf("refused: %s\n", buf);
  close(fd);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: mh_munge HOST PORT MUNGE-SOCKET "
                    "forged|expired|othernonce|replayed\n");
    return 2;
  }
  g_host = argv[1];
  g_port = argv[2];
  g_sock = argv[3];
  const char *mode = argv[4];
  setvbuf(stdout, NULL, _IOLBF, 0);
  unsigned char nonce[HP_NONCE_LEN];
  if (!strcmp(mode, "forged")) {
    int fd = start(nonce);
    return refused(fd, "MUNGE:AwQDAACo4xL6hHZx2SKy1UuoBjp+uiFbkDmsLfCNfA"
                       "ZXfRtZhfYb0lhwGfyKvcN2kGwtU2MNE6FdaKEQO2Ma8xJs1Mfi"
                       "ymGnd9x2gAj5tJLUrVYuDUpYMRv4D2tj0o4vbsL0Mbg=:");
  }
  if (!strcmp(mode, "expired")) {
    int fd = start(nonce);
    char *cred = credential(nonce, 1);
    usleep(2500 * 1000);
    int rc = refused(fd, cred);
    free(cred);
    return rc;
  }
  if (!strcmp(mode, "othernonce")) {
    int fd = start(nonce);
    unsigned char other[HP_NONCE_LEN];
    hp_random(other, sizeof other);
    char *cred = credential(other, 0);
    int rc = refused(fd, cred);
    free(cred);
    return rc;
  }
  if (!strcmp(mode, "replayed")) {
    int fd = start(nonce);
    char *cred = credential(nonce, 0);
    int rc = refused(fd, cred);
    fd = start(nonce);
    rc |= refused(fd, cred);
    free(cred);
    return rc;
  }
  fprintf(stderr, "mh_munge: unknown mode '%s'\n", mode);
  return 2;
}
