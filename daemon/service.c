/* service.c -- horad as a resident service (horad --service), and its
 * client (horad --service-client), which horarun runs instead of ssh
 * (--launcher service).
 *
 * The service listens on a TCP port, and on a unix socket for this host's
 * clients (see serve_local: the kernel names them, no key or credential;
 * horarun's connection is passed along and the job's horad runs on it),
 * or on the ones systemd passes (from_systemd: horad.socket).
 * Each connection is served by a
 * process of its own (forked, as sshd does), so that one job's trouble
 * never touches the service or another job:
 *
 *   client  -> service  AUTH_HELLO / AUTH_PROOF (auth.h, purpose SERVICE,
 *                       the cluster key as the secret)
 *   service -> client   AUTH_CHALLENGE
 *   client  -> service  SVC_LAUNCH: the bootstrap line, then horad's
 *                       arguments, each NUL-terminated
 *   service -> client   SVC_OUTPUT: what the job's horad wrote (stdout and
 *                       stderr), as ssh carries it
 *   service -> client   SVC_EXIT: its exit status (as a shell gives it)
 *
 * With --auth munge (the service runs as root) the first three steps are
 * instead:
 *
 *   client  -> service  SVC_MUNGE, empty: "I come with MUNGE"
 *   service -> client   SVC_MUNGE: a fresh 32-byte nonce
 *   client  -> service  SVC_MUNGE: a MUNGE credential of the client's user
 *                       (encrypted, decodable by root alone) whose payload
 *                       is MUNGE_LABEL, the nonce and the launch request
 *
 * munged rejects forged, expired and replayed credentials; the nonce binds
 * the credential to this connection; the job's horad then runs as the
 * credential's user (become()). A refusal at any step is a SVC_OUTPUT with
 * the reason and a SVC_EXIT of 255.
 *
 * Once the job's horad runs, the service's frames (its output, its exit
 * status) carry tags under an output key (drawn from the launch key, or
 * chosen by the client and sent inside its credential): see send_tagged().
 *
 * The service starts its own horad binary with `--rendezvous`, `--launcher
 * ADDR` (the client's address as the service sees it: horad connects back
 * to horarun there, as it does to $SSH_CONNECTION's) and at most `--iface
 * IF`; nothing else is accepted, so the key lets a client start horad
 * jobs, as the service's user (or a credential, as its user), and nothing
 * more. The bootstrap line goes to
 * horad's standard input, as over ssh. When the client's connection
 * closes (horarun ended or gave up), that horad is sent SIGTERM (it then
 * ends its ranks) and, 10 s later, SIGKILL.
 *
 * The key file holds 64 hex digits (32 bytes); it must be a regular file
 * of the user's or root's, read and written by no one else (mode 0600 or
 * 0400). SIGHUP makes the service read it again; SIGTERM (systemctl stop)
 * stops taking jobs, sends SIGTERM to the running ones and ends once they
 * have ended (configs/horad.service). */
#define HC_LOG_SUB HC_SUB_CTL
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "auth.h"
#include "common.h"
#include "msg.h"
#include "munge.h"
#include "service.h"

#define LAUNCH_MAX 4096       /* bytes of a SVC_LAUNCH payload */
#define KILL_GRACE_S 10       /* SIGTERM, then SIGKILL */
#define MAX_JOBS 1024         /* connections served at once */
#define MAX_PER_PEER 16       /* of them from one address */
#define IO_TIMEOUT_S 10       /* a peer that stalls before its job starts */
#define IV_LEN 12
#define TAG_LEN 16

/* ---- the key ------------------------------------------------------------ */

int hd_service_load_key(const char *path, unsigned char key[HP_SECRET_LEN],
                        char *why, size_t whylen) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    hc_fmt(why, whylen, "cannot open the key file %s: %s", path,
           strerror(errno));
    return -1;
  }
  struct stat st;
  char buf[200];
  ssize_t n = -2;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
      (st.st_uid == getuid() || st.st_uid == 0) && !(st.st_mode & 077))
    n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n == -2) {
    hc_fmt(why, whylen, "the key file %s must be a regular file of this "
           "user's or root's that no one else may read or write (chmod 600)",
           path);
    return -1;
  }
  if (n < 0) {
    hc_fmt(why, whylen, "cannot read the key file %s: %s", path,
           strerror(errno));
    return -1;
  }
  buf[n] = '\0';
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' ||
                   buf[n - 1] == ' '))
    buf[--n] = '\0';
  int bad = n != 2 * HP_SECRET_LEN || hp_unhex(buf, key, HP_SECRET_LEN) < 0;
  OPENSSL_cleanse(buf, sizeof buf);
  if (bad) {
    hc_fmt(why, whylen, "the key file %s must hold %d hex digits (e.g. from "
           "'openssl rand -hex %d')", path, 2 * HP_SECRET_LEN, HP_SECRET_LEN);
    return -1;
  }
  return 0;
}

/* ---- blocking frames ------------------------------------------------------ */

static int write_all(int fd, const void *p, size_t n) {
  const unsigned char *b = p;
  while (n) {
    ssize_t k = write(fd, b, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    b += k;
    n -= (size_t)k;
  }
  return 0;
}

static int read_all(int fd, void *p, size_t n) {
  unsigned char *b = p;
  while (n) {
    ssize_t k = read(fd, b, n);
    if (k < 0 && errno == EINTR) continue;
    if (k == 0) errno = 0; /* (a close, not a timeout) */
    if (k <= 0) return -1;
    b += k;
    n -= (size_t)k;
  }
  return 0;
}

static int send_wbuf(int fd, struct hp_wbuf *w) {
  int rc = w->err ? -1 : write_all(fd, w->data, w->len);
  hp_wbuf_reset(w);
  return rc;
}

/* Reads one frame of at most max payload bytes into *payload (malloc'd).
 * Returns 0, or -1 with a reason in why. */
static int read_frame(int fd, struct hp_frame_hdr *h, unsigned char **payload,
                      size_t max, char *why, size_t whylen) {
  unsigned char hdr[HP_FRAME_HDR];
  *payload = NULL;
  if (read_all(fd, hdr, sizeof hdr) < 0) {
    hc_fmt(why, whylen, errno == EAGAIN || errno == EWOULDBLOCK
                            ? "nothing came within the time limit"
                            : "the connection closed");
    return -1;
  }
  if (hp_frame_parse(hdr, h, why, whylen) < 0) return -1;
  if (h->len > max) {
    hc_fmt(why, whylen, "a frame of %u bytes (at most %zu here)", h->len, max);
    return -1;
  }
  *payload = malloc(h->len ? h->len : 1);
  errno = 0;
  if (!*payload || read_all(fd, *payload, h->len) < 0) {
    free(*payload);
    *payload = NULL;
    hc_fmt(why, whylen, errno == EAGAIN || errno == EWOULDBLOCK
                            ? "nothing came within the time limit"
                            : "the connection closed");
    return -1;
  }
  return 0;
}

/* A refusal's words (a SVC_OUTPUT frame), printable, without the newline. */
static void refusal_text(const unsigned char *p, size_t n, char *why,
                         size_t whylen) {
  size_t k = 0;
  for (size_t i = 0; i < n && k + 1 < whylen; i++)
    if (p[i] != '\n') why[k++] = (p[i] >= 32 && p[i] < 127) ? (char)p[i] : '?';
  why[k] = '\0';
}

/* The key that seals the launch request: HMAC-SHA256 of the cluster key
 * over a label and both sides' nonces, fresh for each connection. The
 * request carries the job's secret, which must not cross the network in
 * the clear (over ssh it travels inside the ssh channel). */
static void launch_key(const struct hp_auth *a, unsigned char out[32]) {
  unsigned char in[64 + 2 * HP_NONCE_LEN];
  static const char label[] = "hora-service-1 launch";
  size_t n = sizeof label - 1;
  memcpy(in, label, n);
  memcpy(in + n, a->nonce_c, HP_NONCE_LEN);
  memcpy(in + n + HP_NONCE_LEN, a->nonce_s, HP_NONCE_LEN);
  unsigned int len = 32;
  HMAC(EVP_sha256(), a->secret, HP_SECRET_LEN, in, n + 2 * HP_NONCE_LEN, out,
       &len);
  OPENSSL_cleanse(in, sizeof in);
}

/* AES-256-GCM: seals n bytes of in into out (IV | ciphertext | tag), or
 * opens them (out gets n - IV_LEN - TAG_LEN bytes). Returns the bytes
 * written, or -1 (a forged or damaged request). */
static long seal(const unsigned char key[32], const unsigned char *in,
                 size_t n, unsigned char *out) {
  EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
  int len = 0, fin = 0;
  long rc = -1;
  if (c && hp_random(out, IV_LEN) == 0 &&
      EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), NULL, key, out) == 1 &&
      EVP_EncryptUpdate(c, out + IV_LEN, &len, in, (int)n) == 1 &&
      EVP_EncryptFinal_ex(c, out + IV_LEN + len, &fin) == 1 &&
      EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, TAG_LEN,
                          out + IV_LEN + len + fin) == 1)
    rc = IV_LEN + len + fin + TAG_LEN;
  EVP_CIPHER_CTX_free(c);
  return rc;
}

static long unseal(const unsigned char key[32], const unsigned char *in,
                   size_t n, unsigned char *out) {
  if (n < IV_LEN + TAG_LEN) return -1;
  EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
  int len = 0, fin = 0;
  long rc = -1;
  size_t body = n - IV_LEN - TAG_LEN;
  if (c && EVP_DecryptInit_ex(c, EVP_aes_256_gcm(), NULL, key, in) == 1 &&
      EVP_DecryptUpdate(c, out, &len, in + IV_LEN, (int)body) == 1 &&
      EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, TAG_LEN,
                          (void *)(in + IV_LEN + body)) == 1 &&
      EVP_DecryptFinal_ex(c, out + len, &fin) == 1)
    rc = len + fin;
  EVP_CIPHER_CTX_free(c);
  return rc;
}

/* ---- tagged frames: the job's output and exit status -------------------- */

/* Once the job's horad runs, each frame the service sends has request id
 * 1 and is followed by a tag: HMAC-SHA256 (16 bytes) under the
 * connection's output key, over a sequence number, the header and the
 * payload. The client takes untagged frames (id 0: a refusal) only before
 * the first tagged one, which the service sends at once. */
#define OTAG_LEN 16
struct otag {
  unsigned char key[32];
  uint64_t seq;
};

static void otag_of(struct otag *t, const unsigned char *frame, size_t n,
                    unsigned char out[OTAG_LEN]) {
  unsigned char s[8], md[32];
  unsigned int ml = sizeof md;
  for (int i = 0; i < 8; i++) s[i] = (unsigned char)(t->seq >> (8 * i));
  t->seq++;
  unsigned char *all = malloc(8 + n);
  if (!all) {
    memset(out, 0, OTAG_LEN); /* (a tag that fails: the client ends) */
    return;
  }
  memcpy(all, s, 8);
  memcpy(all + 8, frame, n);
  HMAC(EVP_sha256(), t->key, sizeof t->key, all, 8 + n, md, &ml);
  free(all);
  memcpy(out, md, OTAG_LEN);
}

/* Sends one tagged frame. Returns 0 or -1. */
static int send_tagged(int fd, struct otag *t, int type, const void *p,
                       size_t n) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_frame_begin(&w, (uint16_t)type, 1);
  if (n) hp_put_raw(&w, p, n);
  hp_frame_end(&w);
  unsigned char tag[OTAG_LEN];
  int rc = -1;
  if (!w.err) {
    otag_of(t, w.data, w.len, tag);
    hp_put_raw(&w, tag, sizeof tag);
    rc = send_wbuf(fd, &w);
  }
  hp_wbuf_free(&w);
  return rc;
}

/* The output key of a connection authenticated by the cluster key. */
static void okey_from(const unsigned char lkey[32], unsigned char out[32]) {
  static const char label[] = "hora-service-1 output";
  unsigned int len = 32;
  HMAC(EVP_sha256(), lkey, 32, (const unsigned char *)label,
       sizeof label - 1, out, &len);
}

/* Runs the handshake on fd as `role`; on success *lkey is the launch key.
 * The acceptor's first frame may have been read already (first, fp).
 * Returns 0, or -1 (why), or -2 when the service refused the client (its
 * words in why). */
static int handshake(int fd, int role, const unsigned char key[HP_SECRET_LEN],
                     const struct hp_frame_hdr *first, unsigned char *fp,
                     unsigned char lkey[32], char *why, size_t whylen) {
  struct hp_auth a;
  struct hp_wbuf w;
  hp_auth_init(&a, role, HP_AUTH_SERVICE, key);
  hp_wbuf_init(&w);
  int rc = -1;
  if (role == HP_AUTH_CONNECTOR &&
      (hp_auth_start(&a, &w) < 0 || send_wbuf(fd, &w) < 0)) {
    hc_fmt(why, whylen, "cannot send the handshake");
    goto out;
  }
  for (;;) {
    struct hp_frame_hdr h;
    unsigned char *p;
    if (first) {
      h = *first;
      p = fp;
      first = NULL;
    } else if (read_frame(fd, &h, &p, HP_AUTH_FRAME_MAX + 512, why, whylen) <
               0) {
      goto out;
    }
    if (role == HP_AUTH_CONNECTOR && h.type == HP_MSG_SVC_OUTPUT) {
      refusal_text(p, h.len, why, whylen);
      free(p);
      rc = -2;
      goto out;
    }
    int st = hp_auth_step(&a, &h, p, &w, why, whylen);
    free(p);
    if (st < 0) goto out;
    if (w.len && send_wbuf(fd, &w) < 0) {
      hc_fmt(why, whylen, "the connection closed");
      goto out;
    }
    if (st == 1) break;
  }
  launch_key(&a, lkey);
  rc = 0;
out:
  hp_auth_clear(&a);
  hp_wbuf_free(&w);
  return rc;
}

/* ---- the service: one connection ----------------------------------------- */

static volatile sig_atomic_t got_term, got_hup;
static void on_term(int s) { (void)s; got_term++; } /* (a second: now) */
static void on_hup(int s) { (void)s; got_hup = 1; }

static int iface_ok(const char *s) {
  if (!*s || strlen(s) > 255) return 0;
  for (; *s; s++)
    if (!(('a' <= *s && *s <= 'z') || ('A' <= *s && *s <= 'Z') ||
          ('0' <= *s && *s <= '9') || strchr(".-_:,", *s)))
      return 0;
  return 1;
}

/* Splits a SVC_LAUNCH payload: the bootstrap line, then arguments. Over
 * TCP only --rendezvous and --iface IF are taken; over the unix socket
 * (local) only --control-fd 3 (the connection passed with the request),
 * --bootstrap (then the line is there, else it is empty) and --iface IF.
 * Returns 0 or -1 (why). */
static int parse_launch(unsigned char *p, size_t n, int local,
                        const char **boot, const char **iface, char *why,
                        size_t whylen) {
  if (!n || p[n - 1] != '\0') {
    hc_fmt(why, whylen, "a malformed launch request");
    return -1;
  }
  *boot = (const char *)p;
  *iface = NULL;
  size_t bl = strlen(*boot);
  int rdv = 0, ctl = 0, bs = 0;
  if (bl > 1024 || (bl && strncmp(*boot, "HORA1 ", 6)) || (!bl && !local)) {
    hc_fmt(why, whylen, "a launch request without a bootstrap line");
    return -1;
  }
  for (size_t off = bl + 1; off < n;) {
    const char *a = (const char *)p + off;
    off += strlen(a) + 1;
    if (!local && !strcmp(a, "--rendezvous")) {
      rdv = 1;
    } else if (local && !strcmp(a, "--bootstrap")) {
      bs = 1;
    } else if (local && !strcmp(a, "--control-fd") && off < n &&
               !strcmp((const char *)p + off, "3")) {
      ctl = 1;
      off += 2;
    } else if (!strcmp(a, "--iface") && off < n) {
      *iface = (const char *)p + off;
      off += strlen(*iface) + 1;
      if (!iface_ok(*iface)) {
        hc_fmt(why, whylen, "a launch request with a bad --iface");
        return -1;
      }
    } else {
      hc_fmt(why, whylen, "a launch request with an argument the service "
             "does not take: '%.60s'", a);
      return -1;
    }
  }
  if (!local && !rdv) {
    hc_fmt(why, whylen, "a launch request without --rendezvous");
    return -1;
  }
  if (local && !ctl) {
    hc_fmt(why, whylen, "a launch request over the unix socket without "
           "--control-fd 3");
    return -1;
  }
  if (local && bs != (bl != 0)) {
    hc_fmt(why, whylen, bs ? "a launch request with --bootstrap but no "
                             "bootstrap line"
                           : "a launch request with a bootstrap line but "
                             "without --bootstrap");
    return -1;
  }
  return 0;
}

static int send_frame(int fd, int type, const void *p, size_t n) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_frame_begin(&w, (uint16_t)type, 0);
  if (n) hp_put_raw(&w, p, n);
  hp_frame_end(&w);
  int rc = send_wbuf(fd, &w);
  hp_wbuf_free(&w);
  return rc;
}

/* Tells the client why its request is refused (untagged: see otag). */
static void refuse(int fd, const char *why) {
  char line[600];
  unsigned char st[4] = {255, 0, 0, 0};
  hc_fmt(line, sizeof line, "horad: the service refused the request: %s\n",
         why);
  send_frame(fd, HP_MSG_SVC_OUTPUT, line, strlen(line));
  send_frame(fd, HP_MSG_SVC_EXIT, st, sizeof st);
}

static void set_timeouts(int fd, int rcv_s, int snd_s) {
  struct timeval r = {.tv_sec = rcv_s}, t = {.tv_sec = snd_s};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &r, sizeof r);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &t, sizeof t);
}

static const char *msock(const struct hd_service_cfg *c) {
  return c->munge_socket[0] ? c->munge_socket : NULL;
}

/* The job's user, from a MUNGE credential (auth munge). */
struct job_user {
  uid_t uid;
  gid_t gid;
  char name[64], home[1024], shell[256];
};

#define MUNGE_LABEL "hora-service-munge-1" /* then NUL, nonce, output key,
                                              request */
#define CRED_MAX 16384                     /* bytes of a credential */


static int job_user_of(const struct hd_service_cfg *cfg, struct job_user *u,
                       char *why, size_t whylen);

/* auth munge: the nonce, the client's credential, its user. On success
 * *req (malloc'd) is the launch request and *n its length. Returns 0, or
 * -1 with why (to log and tell the client). */
static int munge_request(int fd, const struct hd_service_cfg *cfg,
                         struct job_user *u, unsigned char **req, long *n,
                         unsigned char okey[32], char *why, size_t whylen) {
  unsigned char nonce[HP_NONCE_LEN];
  if (hp_random(nonce, sizeof nonce) < 0) {
    hc_fmt(why, whylen, "the service has no randomness");
    return -1;
  }
  send_frame(fd, HP_MSG_SVC_MUNGE, nonce, sizeof nonce);
  struct hp_frame_hdr h;
  unsigned char *p = NULL;
  if (read_frame(fd, &h, &p, CRED_MAX, why, whylen) < 0) return -1;
  if (h.type != HP_MSG_SVC_MUNGE || !h.len || memchr(p, '\0', h.len)) {
    if (h.type != HP_MSG_SVC_MUNGE)
      hc_fmt(why, whylen, "a frame of type %u where a MUNGE credential was "
             "due", h.type);
    else
      hc_fmt(why, whylen, "an empty credential, or one with a NUL byte: not "
             "MUNGE's");
    free(p);
    return -1;
  }
  char *cred = malloc(h.len + 1);
  if (!cred) {
    free(p);
    hc_fmt(why, whylen, "out of memory");
    return -1;
  }
  memcpy(cred, p, h.len);
  cred[h.len] = '\0';
  free(p);
  void *pl = NULL;
  int len = 0;
  char mwhy[300];
  int err = hd_munge_decode(msock(cfg), cred, &pl, &len, &u->uid,
                            &u->gid, mwhy, sizeof mwhy);
  free(cred);
  if (err) {
    if (err == HD_MUNGE_ESOCKET || err < 0) { /* the service's trouble */
      hc_fmt(why, whylen, "the service cannot check MUNGE credentials (%s)",
             mwhy);
      return -1;
    }
    const char *kind = err == HD_MUNGE_EXPIRED    ? "an expired"
                       : err == HD_MUNGE_REPLAYED ? "a replayed"
                       : err == HD_MUNGE_REWOUND  ? "a future-dated"
                       : err == HD_MUNGE_UNAUTHORIZED
                           ? "another decoder's"
                           : "an invalid";
    if (u->uid != (uid_t)-1)
      hc_fmt(why, whylen, "%s MUNGE credential of uid %u (%s)", kind,
             (unsigned)u->uid, mwhy);
    else
      hc_fmt(why, whylen, "%s MUNGE credential (%s)", kind, mwhy);
    return -1;
  }
  size_t ll = sizeof MUNGE_LABEL; /* with its NUL */
  if ((size_t)len < ll + HP_NONCE_LEN + 32 || memcmp(pl, MUNGE_LABEL, ll) ||
      CRYPTO_memcmp((unsigned char *)pl + ll, nonce, HP_NONCE_LEN)) {
    hc_fmt(why, whylen, "a MUNGE credential (uid %u) not made for this "
           "connection (another nonce, or not a hora launch request): "
           "replayed from elsewhere?", (unsigned)u->uid);
    OPENSSL_cleanse(pl, (size_t)len);
    free(pl);
    return -1;
  }
  memcpy(okey, (unsigned char *)pl + ll + HP_NONCE_LEN, 32);
  *n = len - (long)ll - HP_NONCE_LEN - 32;
  *req = malloc((size_t)*n + 1);
  if (*req)
    memcpy(*req, (unsigned char *)pl + ll + HP_NONCE_LEN + 32, (size_t)*n);
  OPENSSL_cleanse(pl, (size_t)len);
  free(pl);
  if (!*req) {
    hc_fmt(why, whylen, "out of memory");
    return -1;
  }
  return job_user_of(cfg, u, why, whylen);
}

/* The account of u->uid (u->gid as given), when the service takes its
 * jobs. Returns 0, or -1 with why. */
static int job_user_of(const struct hd_service_cfg *cfg, struct job_user *u,
                       char *why, size_t whylen) {
  if (u->uid == 0 && !cfg->allow_root) {
    hc_fmt(why, whylen, "jobs as root are not taken here (the service's "
           "--allow-root)");
    return -1;
  }
  struct passwd pw, *pp = NULL;
  char pwbuf[4096];
  if (getpwuid_r(u->uid, &pw, pwbuf, sizeof pwbuf, &pp) != 0 || !pp) {
    hc_fmt(why, whylen, "uid %u has no account on this host",
           (unsigned)u->uid);
    return -1;
  }
  if (strlen(pw.pw_name) >= sizeof u->name ||
      strlen(pw.pw_dir) >= sizeof u->home ||
      strlen(pw.pw_shell) >= sizeof u->shell) {
    hc_fmt(why, whylen, "uid %u's account has too long a name, home or "
           "shell", (unsigned)u->uid);
    return -1;
  }
  strcpy(u->name, pw.pw_name);
  strcpy(u->home, pw.pw_dir);
  strcpy(u->shell, pw.pw_shell);
  return 0;
}

/* In the job's horad before exec: become the job's user (its uid, the
 * credential's gid, its supplementary groups), in its home, with a clean
 * environment. Returns 0, or -1 (reported on stderr, which the client
 * reads). */
static int become(const struct job_user *u, char ***envp) {
  static char e_home[1100], e_user[80], e_logname[80], e_shell[300];
  static char *env[8];
  if (initgroups(u->name, u->gid) < 0 || setgid(u->gid) < 0 ||
      setuid(u->uid) < 0) {
    fprintf(stderr, "horad: the service cannot run the job as %s (uid %u, "
            "gid %u): %s\n", u->name, (unsigned)u->uid, (unsigned)u->gid,
            strerror(errno));
    return -1;
  }
  if (u->uid != 0 && (setuid(0) == 0 || seteuid(0) == 0)) {
    fprintf(stderr, "horad: the service could not drop root\n");
    return -1;
  }
  if (chdir(u->home) < 0 && chdir("/") < 0) {
    fprintf(stderr, "horad: the service cannot change to %s's home %s or to "
            "/: %s\n", u->name, u->home, strerror(errno));
    return -1;
  }
  hc_fmt(e_home, sizeof e_home, "HOME=%s", u->home);
  hc_fmt(e_user, sizeof e_user, "USER=%s", u->name);
  hc_fmt(e_logname, sizeof e_logname, "LOGNAME=%s", u->name);
  hc_fmt(e_shell, sizeof e_shell, "SHELL=%s", u->shell);
  int k = 0;
  env[k++] = e_home;
  env[k++] = e_user;
  env[k++] = e_logname;
  env[k++] = e_shell;
  env[k++] = "PATH=/usr/local/bin:/usr/bin:/bin";
  env[k] = NULL;
  *envp = env;
  return 0;
}

static int run_job(int fd, const char *peer, const char *self,
                   const struct job_user *u, const char *boot,
                   const char *iface, int ctl, struct otag *ot,
                   unsigned jobno);

/* One frame to the client: tagged under ot, or plain when ot is NULL. */
static int send_out(int fd, struct otag *ot, int type, const void *p,
                    size_t n) {
  return ot ? send_tagged(fd, ot, type, p, n) : send_frame(fd, type, p, n);
}

/* The start of a served connection (in its own process): the service
 * stopping ends its job too, and a stalled client is dropped. Returns 1
 * when the client closed before a byte: it only probed the listener
 * (horarun, to see whether a service is there), which is no refusal. */
static int conn_begin(int fd, unsigned jobno, const char *peer,
                      const char *what) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_term;
  sigaction(SIGTERM, &sa, NULL);
  set_timeouts(fd, IO_TIMEOUT_S, IO_TIMEOUT_S);
  unsigned char peek;
  ssize_t pk;
  do {
    pk = recv(fd, &peek, 1, MSG_PEEK);
  } while (pk < 0 && errno == EINTR);
  if (pk != 0) return 0;
  hc_debug("service: job %u: %s probed the %s", jobno, peer, what);
  return 1;
}

/* Serves one client (in a process of its own). Returns the exit status. */
static int serve(int fd, const char *peer, const char *self,
                 const struct hd_service_cfg *cfg,
                 const unsigned char key[HP_SECRET_LEN], unsigned jobno) {
  char why[600];
  if (conn_begin(fd, jobno, peer, "port")) return 0;
  /* the first frame says how the client authenticates */
  struct hp_frame_hdr h;
  unsigned char *p = NULL, *req = NULL;
  if (read_frame(fd, &h, &p, HP_AUTH_FRAME_MAX, why, sizeof why) < 0) {
    hc_warn("service: job %u: refused a connection from %s: %s", jobno, peer,
            why);
    return 1;
  }
  if ((h.type == HP_MSG_SVC_MUNGE) != (cfg->munge != 0)) {
    hc_fmt(why, sizeof why, cfg->munge
           ? "this service authenticates users with MUNGE (horarun "
             "--service-auth munge)"
           : "this service authenticates with the cluster key, not MUNGE "
             "(horarun --service-auth key)");
    free(p);
    hc_warn("service: job %u: refused a connection from %s: %s", jobno, peer,
            why);
    refuse(fd, why);
    return 1;
  }
  struct job_user user = {.uid = (uid_t)-1};
  struct otag ot = {.seq = 0};
  const char *boot, *iface;
  long n = -1;
  int bad = 0;
  if (cfg->munge) {
    free(p);
    p = NULL;
    bad = munge_request(fd, cfg, &user, &req, &n, ot.key, why, sizeof why) <
          0;
  } else {
    unsigned char lkey[32];
    if (handshake(fd, HP_AUTH_ACCEPTOR, key, &h, p, lkey, why, sizeof why) <
        0) {
      hc_warn("service: job %u: refused a connection from %s: %s", jobno,
              peer, why);
      return 1;
    }
    okey_from(lkey, ot.key);
    p = NULL;
    bad = read_frame(fd, &h, &p, LAUNCH_MAX, why, sizeof why) < 0;
    if (!bad && h.type != HP_MSG_SVC_LAUNCH) {
      hc_fmt(why, sizeof why, "a frame of type %u, not a launch request",
             h.type);
      bad = 1;
    }
    if (!bad && (!(req = malloc(h.len + 1)) ||
                 (n = unseal(lkey, p, h.len, req)) < 0)) {
      hc_fmt(why, sizeof why, "a launch request that does not open with "
             "the connection's key (forged or damaged)");
      bad = 1;
    }
    OPENSSL_cleanse(lkey, sizeof lkey);
    free(p);
  }
  if (bad ||
      parse_launch(req, (size_t)n, 0, &boot, &iface, why, sizeof why) < 0) {
    hc_warn("service: job %u: refused a request from %s: %s", jobno, peer,
            why);
    refuse(fd, why);
    if (req) OPENSSL_cleanse(req, (size_t)(n > 0 ? n : 0));
    free(req);
    return 1;
  }
  int rc = run_job(fd, peer, self, cfg->munge ? &user : NULL, boot, iface,
                   -1, &ot, jobno);
  OPENSSL_cleanse(req, (size_t)n);
  free(req);
  OPENSSL_cleanse(&ot, sizeof ot);
  return rc;
}

/* A local client's request: one SVC_LAUNCH frame, plain (the kernel
 * carries it between this host's processes alone), with horarun's
 * connection to the job's horad passed along it (SCM_RIGHTS). On success
 * *req (malloc'd, *n bytes) and *ctl (a unix stream socket, moved above
 * 9). Returns 0, or -1 with why. */
static int local_request(int fd, unsigned char **req, size_t *n, int *ctl,
                         char *why, size_t whylen) {
  unsigned char hdr[HP_FRAME_HDR];
  union {
    struct cmsghdr c;
    char b[CMSG_SPACE(sizeof(int) * 4)];
  } cb;
  struct iovec iov = {.iov_base = hdr, .iov_len = sizeof hdr};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1,
                     .msg_control = cb.b, .msg_controllen = sizeof cb.b};
  ssize_t k;
  do
    k = recvmsg(fd, &m, MSG_CMSG_CLOEXEC | MSG_WAITALL);
  while (k < 0 && errno == EINTR);
  *ctl = -1;
  *req = NULL;
  int extra = 0;
  for (struct cmsghdr *c = k > 0 ? CMSG_FIRSTHDR(&m) : NULL; c;
       c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < nfd; i++) {
      int f;
      memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
      if (*ctl < 0) {
        *ctl = f;
      } else {
        close(f);
        extra = 1;
      }
    }
  }
  struct hp_frame_hdr h = {.len = 0};
  int st, ty = 0, dom = 0;
  socklen_t sl = sizeof ty;
  if (k != (ssize_t)sizeof hdr) {
    hc_fmt(why, whylen, k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)
                            ? "nothing came within the time limit"
                            : "the connection closed");
  } else if (hp_frame_parse(hdr, &h, why, whylen) < 0) {
    /* (why says it) */
  } else if (h.type != HP_MSG_SVC_LAUNCH || h.len > LAUNCH_MAX) {
    hc_fmt(why, whylen, "a frame of type %u and %u bytes, not a launch "
           "request", h.type, h.len);
  } else if (*ctl < 0 || extra || (m.msg_flags & MSG_CTRUNC)) {
    hc_fmt(why, whylen, "a launch request that did not pass one connection "
           "to horarun with it");
  } else if ((st = fcntl(*ctl, F_DUPFD_CLOEXEC, 10)) < 0) {
    hc_fmt(why, whylen, "cannot keep the connection passed: %s",
           strerror(errno));
  } else {
    close(*ctl);
    *ctl = st;
    sl = sizeof ty;
    getsockopt(*ctl, SOL_SOCKET, SO_TYPE, &ty, &sl);
    sl = sizeof dom;
    getsockopt(*ctl, SOL_SOCKET, SO_DOMAIN, &dom, &sl);
    if (ty != SOCK_STREAM || dom != AF_UNIX) {
      hc_fmt(why, whylen, "the connection passed with the request is not a "
             "unix stream socket");
    } else if (!(*req = malloc(h.len ? h.len : 1))) {
      hc_fmt(why, whylen, "out of memory");
    } else if (read_all(fd, *req, h.len) < 0) {
      hc_fmt(why, whylen, "the connection closed");
    } else {
      *n = h.len;
      return 0;
    }
  }
  if (*req) OPENSSL_cleanse(*req, h.len);
  free(*req);
  *req = NULL;
  if (*ctl >= 0) close(*ctl);
  *ctl = -1;
  return -1;
}

/* Serves one client of the unix socket (in a process of its own): the
 * kernel says who it is (cr), so it needs neither the key nor MUNGE. With
 * auth munge the job runs as that user (as for a credential of theirs);
 * with auth key only the service's own user is served. Returns the exit
 * status. */
static int serve_local(int fd, const struct ucred *cr, const char *peer,
                       const char *self, const struct hd_service_cfg *cfg,
                       unsigned jobno) {
  char why[600];
  if (conn_begin(fd, jobno, peer, "socket")) return 0;
  unsigned char *req = NULL;
  size_t n = 0;
  int ctl = -1;
  const char *boot, *iface;
  struct job_user user = {.uid = cr->uid, .gid = cr->gid};
  int bad = local_request(fd, &req, &n, &ctl, why, sizeof why) < 0;
  if (!bad && !cfg->munge && cr->uid != geteuid()) {
    hc_fmt(why, sizeof why, "uid %u may not start jobs here: with auth key "
           "the service runs its own user's (uid %u) jobs alone",
           (unsigned)cr->uid, (unsigned)geteuid());
    bad = 1;
  }
  if (!bad && cfg->munge) bad = job_user_of(cfg, &user, why, sizeof why) < 0;
  if (bad || parse_launch(req, n, 1, &boot, &iface, why, sizeof why) < 0) {
    hc_warn("service: job %u: refused a request from %s: %s", jobno, peer,
            why);
    refuse(fd, why);
    if (ctl >= 0) close(ctl);
    if (req) OPENSSL_cleanse(req, n);
    free(req);
    return 1;
  }
  int rc = run_job(fd, peer, self, cfg->munge ? &user : NULL, boot, iface,
                   ctl, NULL, jobno);
  OPENSSL_cleanse(req, n);
  free(req);
  return rc;
}

/* Starts the job's horad and relays its output and exit status to the
 * client on fd: with --rendezvous (it connects back to the client's
 * address, as to $SSH_CONNECTION's), or, when ctl >= 0 (a local client's
 * connection to horarun, passed over the unix socket), with --control-fd
 * on it. As u (NULL: the service's user); frames tagged under ot, or
 * untagged when ot is NULL (the unix socket, which no one else can write
 * to). Returns the serving process's exit status. */
static int run_job(int fd, const char *peer, const char *self,
                   const struct job_user *u, const char *boot,
                   const char *iface, int ctl, struct otag *ot,
                   unsigned jobno) {
  char who[160] = "";
  if (u)
    hc_fmt(who, sizeof who, " (user %s, uid %u)", u->name, (unsigned)u->uid);
  char job[48];
  hc_fmt(job, sizeof job, "job %u", jobno);
  /* the job's output may pause for hours; a client that stops reading is
   * taken for gone after a while */
  set_timeouts(fd, 0, 60);
  const char *argv[8];
  int ac = 0;
  argv[ac++] = self;
  if (ctl >= 0) {
    argv[ac++] = "--control-fd";
    argv[ac++] = "3";
    if (*boot) argv[ac++] = "--bootstrap";
  } else {
    argv[ac++] = "--rendezvous";
    argv[ac++] = "--launcher";
    argv[ac++] = peer;
  }
  if (iface) {
    argv[ac++] = "--iface";
    argv[ac++] = iface;
  }
  argv[ac] = NULL;
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0) {
    hc_error("service: %s from %s%s: pipe: %s", job, peer, who,
             strerror(errno));
    refuse(fd, "the service cannot make a pipe");
    return 1;
  }
  pid_t pid = fork();
  if (pid == 0) {
    setsid();
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(out[1], 2);
    if (ctl >= 0) dup2(ctl, 3); /* (ctl is above 9: see serve_local) */
    /* nothing else of the service's reaches the job's horad */
    int keep = ctl >= 0 ? 4 : 3;
    if (close_range((unsigned)keep, ~0u, 0) < 0)
      for (int f = keep; f < 65536; f++) close(f);
    /* horad starts with the signals as a shell would give them */
    static const int sigs[] = {SIGPIPE, SIGCHLD, SIGHUP, SIGTERM, SIGINT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
      signal(sigs[i], SIG_DFL);
    char **envp = environ;
    if (u && become(u, &envp) < 0) _exit(126);
    execve(self, (char *const *)argv, envp);
    fprintf(stderr, "horad: cannot run %s: %s\n", self, strerror(errno));
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  if (pid < 0) {
    hc_error("service: %s from %s%s: fork: %s", job, peer, who,
             strerror(errno));
    refuse(fd, "the service cannot fork");
    return 1;
  }
  if (ctl >= 0) close(ctl); /* horad's now */
  hc_info("service: %s from %s%s: horad %d started", job, peer, who,
          (int)pid);
  /* the first tagged frame: from now on the client takes no other */
  int client = !ot || send_tagged(fd, ot, HP_MSG_SVC_OUTPUT, NULL, 0) == 0;
  int wrote = !*boot || (write_all(in[1], boot, strlen(boot)) == 0 &&
                         write_all(in[1], "\n", 1) == 0);
  close(in[1]);
  if (!wrote)
    hc_warn("service: %s from %s%s: horad did not take its line", job, peer,
            who);
  /* relay its output until it closes; the client gone: end the job */
  int ending = 0;
  time_t kill_at = 0;
  unsigned char buf[16384];
  for (;;) {
    if ((got_term || !client) && !ending) {
      ending = 1;
      hc_info("service: %s: %s: ending horad %d (from %s%s)", job,
              got_term ? "stopping" : "the client left", (int)pid, peer, who);
      kill(-pid, SIGTERM);
      kill_at = time(NULL) + KILL_GRACE_S;
    }
    if (kill_at && time(NULL) >= kill_at) {
      kill(-pid, SIGKILL);
      kill_at = 0;
    }
    struct pollfd pf[2] = {{.fd = out[0], .events = POLLIN},
                           {.fd = client ? fd : -1, .events = POLLIN}};
    int r = poll(pf, 2, 1000);
    if (r < 0 && errno != EINTR) {
      kill(-pid, SIGKILL);
      break;
    }
    if (r <= 0) continue;
    /* the client sends nothing after its request: readable is its end (or
     * a breach of the protocol, taken alike) */
    if (pf[1].revents) client = 0;
    if (pf[0].revents) {
      ssize_t k = read(out[0], buf, sizeof buf);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) break;
      /* (a client gone or that stopped reading: no more) */
      if (client && send_out(fd, ot, HP_MSG_SVC_OUTPUT, buf, (size_t)k) < 0)
        client = 0;
    }
  }
  close(out[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  int status = WIFEXITED(st) ? WEXITSTATUS(st)
               : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 255;
  hc_info("service: %s from %s%s: horad %d ended (status %d)", job, peer,
          who, (int)pid, status);
  if (client) {
    unsigned char st4[4] = {(unsigned char)status, 0, 0, 0};
    send_out(fd, ot, HP_MSG_SVC_EXIT, st4, sizeof st4);
  }
  return 0;
}

/* ---- the service: listening ---------------------------------------------- */


static int listen_on(const char *addr, int port, char *why, size_t whylen) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  int g = getaddrinfo(addr, ps, &hints, &res);
  if (g) {
    hc_fmt(why, whylen, "cannot listen on %s port %d: %s",
           addr ? addr : "every address", port, gai_strerror(g));
    return -1;
  }
  int fd = -1, e = 0;
  for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ai->ai_family == AF_INET6) {
      int zero = 0; /* both families on "::" */
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    }
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 128) < 0) {
      e = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0)
    hc_fmt(why, whylen, "cannot listen on %s port %d: %s",
           addr ? addr : "every address", port, strerror(e));
  return fd;
}

/* The local socket at path (mode 0666: who connects is told by the
 * kernel, see serve_local), its directory made when missing (0755, as
 * systemd's RuntimeDirectory= does). A socket nothing listens on is an
 * earlier service's and is replaced; another service's, or a file that is
 * not a socket, is left alone. *ino: the socket file's, so that only ours
 * is removed at the end. Returns the listening fd, or -1 with why. */
static int listen_unix(const char *path, ino_t *ino, char *why,
                       size_t whylen) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  hc_fmt(sa.sun_path, sizeof sa.sun_path, "%s", path);
  struct stat st;
  if (lstat(path, &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      hc_fmt(why, whylen, "%s exists and is not a socket", path);
      return -1;
    }
    /* (non-blocking: a full backlog is a live service too) */
    int c = hc_unix_connect(path, 1, NULL);
    int e = c < 0 ? -c : 0;
    if (c >= 0) close(c);
    if (e != ECONNREFUSED) {
      if (e == 0 || e == EAGAIN)
        hc_fmt(why, whylen, "another service listens on %s", path);
      else
        hc_fmt(why, whylen, "cannot tell whether a service listens on %s: "
               "%s", path, strerror(e));
      return -1;
    }
    unlink(path); /* nothing listens: an earlier service's */
  } else {
    char dir[sizeof sa.sun_path];
    hc_fmt(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
      *slash = '\0';
      if (mkdir(dir, 0755) == 0) {
        chmod(dir, 0755); /* (whatever the umask) */
      } else if (errno != EEXIST) {
        hc_fmt(why, whylen, "cannot make %s for the socket: %s", dir,
               strerror(errno));
        return -1;
      }
    }
  }
  /* made 0666 by bind itself (no chmod of a path that could be swapped) */
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  mode_t old = umask(0111);
  int rc = fd < 0 ? -1 : bind(fd, (struct sockaddr *)&sa, sizeof sa);
  umask(old);
  if (rc < 0 || listen(fd, 128) < 0 || lstat(path, &st) < 0) {
    hc_fmt(why, whylen, "cannot listen on %s: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  *ino = st.st_ino;
  return fd;
}

/* Socket activation (configs/horad.socket): the listening sockets systemd
 * passes, LISTEN_FDS of them from descriptor 3 when LISTEN_PID is ours: at
 * most one TCP socket (*lfd) and one unix socket (*ufd, its path in upath),
 * each of the stream type and listening. They then replace port:, listen:
 * and socket: (the socket unit says where), and the unix socket's file is
 * systemd's to remove. Returns 1 when there are such sockets, 0 when none
 * was passed, -1 with why. Children see no LISTEN_ variable. */
static int from_systemd(int *lfd, int *ufd, char *upath, size_t ulen,
                        int *port, char *why, size_t whylen) {
  const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
  char *pend = NULL, *fend = NULL, fdsv[32];
  long p = pid ? strtol(pid, &pend, 10) : 0;
  long n = fds ? strtol(fds, &fend, 10) : 0;
  hc_fmt(fdsv, sizeof fdsv, "%s", fds ? fds : "");
  int ours = pid && fds && !*pend && p == (long)getpid();
  unsetenv("LISTEN_PID");
  unsetenv("LISTEN_FDS");
  unsetenv("LISTEN_FDNAMES");
  if (!ours) return 0;
  if (*fend || n < 1 || n > 2) {
    hc_fmt(why, whylen, "systemd passed LISTEN_FDS=%s: horad takes one TCP "
           "socket and one unix socket (ListenStream= twice at most)", fdsv);
    return -1;
  }
  *lfd = *ufd = -1;
  for (int fd = 3; fd < 3 + n; fd++) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int type = 0, listening = 0;
    socklen_t tl = sizeof type, ll = sizeof listening;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0 ||
        getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 ||
        getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ll) < 0 ||
        type != SOCK_STREAM || !listening) {
      hc_fmt(why, whylen, "descriptor %d from systemd is not a listening "
             "stream socket (ListenStream= only)", fd);
      return -1;
    }
    int unix_ = ss.ss_family == AF_UNIX;
    int tcp = ss.ss_family == AF_INET || ss.ss_family == AF_INET6;
    if ((!unix_ && !tcp) || (unix_ && *ufd >= 0) || (tcp && *lfd >= 0)) {
      hc_fmt(why, whylen, "systemd passed %s: horad takes one TCP socket and "
             "one unix socket", unix_ || tcp ? "two sockets of one kind"
                                            : "a socket of another family");
      return -1;
    }
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    if (unix_) {
      const struct sockaddr_un *su = (const struct sockaddr_un *)&ss;
      size_t k = sl > offsetof(struct sockaddr_un, sun_path)
                     ? sl - offsetof(struct sockaddr_un, sun_path) : 0;
      if (k > sizeof su->sun_path) k = sizeof su->sun_path;
      if (k && su->sun_path[0])
        hc_fmt(upath, ulen, "%.*s", (int)k, su->sun_path);
      else
        hc_fmt(upath, ulen, "an abstract or unnamed unix socket");
      *ufd = fd;
    } else {
      *port = ntohs(ss.ss_family == AF_INET
                        ? ((const struct sockaddr_in *)&ss)->sin_port
                        : ((const struct sockaddr_in6 *)&ss)->sin6_port);
      *lfd = fd;
    }
  }
  return 1;
}

static void peer_name(int fd, char *buf, size_t len) {
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  char host[NI_MAXHOST];
  if (getpeername(fd, (struct sockaddr *)&ss, &sl) < 0 ||
      getnameinfo((struct sockaddr *)&ss, sl, host, sizeof host, NULL, 0,
                  NI_NUMERICHOST)) {
    hc_fmt(buf, len, "?");
    return;
  }
  /* an IPv4 client of a dual-stack socket: its plain address */
  const char *h = strncmp(host, "::ffff:", 7) ? host : host + 7;
  hc_fmt(buf, len, "%s", h);
}

/* Whether the settings can serve: the service's user, the key file (read
 * into key) or MUNGE's library. Returns 0, or -1 (logged). */
static int usable(const struct hd_service_cfg *c,
                  unsigned char key[HP_SECRET_LEN]) {
  char why[600];
  if (c->munge) {
    if (geteuid() != 0) {
      hc_error("service: --auth munge runs each job as the user its "
               "credential names: the service must run as root");
      return -1;
    }
    if (hd_munge_available(why, sizeof why) < 0) {
      hc_error("service: %s", why);
      return -1;
    }
    return 0;
  }
  if (geteuid() == 0 && !c->allow_root) {
    hc_error("service: it runs the jobs as its own user, and that is root: "
             "run it as the jobs' user (User= in horad.service), give "
             "--allow-root, or authenticate users with --auth munge");
    return -1;
  }
  if (hd_service_load_key(c->key_file, key, why, sizeof why) < 0) {
    hc_error("service: %s", why);
    return -1;
  }
  return 0;
}

/* SIGHUP: the file (and key) read again; what needs a new socket (port,
 * address, authentication) waits for a restart. */
static void reload(const struct hd_service_cfg *cli, struct hd_service_cfg *cfg,
                   unsigned char key[HP_SECRET_LEN]) {
  char why[600];
  struct hd_service_cfg n;
  unsigned char nkey[HP_SECRET_LEN];
  if (hd_service_cfg_load(cli, &n, why, sizeof why) < 0) {
    hc_error("service: SIGHUP: %s; the settings stay as they were", why);
    return;
  }
  if (n.port != cfg->port || strcmp(n.listen_addr, cfg->listen_addr) ||
      n.munge != cfg->munge || strcmp(n.socket, cfg->socket)) {
    hc_warn("service: SIGHUP: port, listen, auth and socket change only "
            "when the service starts again; the others are applied");
    n.port = cfg->port;
    memcpy(n.listen_addr, cfg->listen_addr, sizeof n.listen_addr);
    n.munge = cfg->munge;
    memcpy(n.socket, cfg->socket, sizeof n.socket);
  }
  memset(nkey, 0, sizeof nkey);
  if (usable(&n, nkey) < 0) {
    hc_error("service: SIGHUP: the settings stay as they were");
    OPENSSL_cleanse(nkey, sizeof nkey);
    return;
  }
  *cfg = n;
  memcpy(key, nkey, HP_SECRET_LEN);
  OPENSSL_cleanse(nkey, sizeof nkey);
  hc_info("service: SIGHUP: the settings%s and the %s were read again",
          n.file_found ? " file" : "", n.munge ? "MUNGE library" : "key file");
}

/* Reaps the connections served that have ended; returns how many remain. */
static int reap(pid_t *jobs, char (*peers)[NI_MAXHOST], int njobs) {
  for (int i = 0; i < njobs;)
    if (waitpid(jobs[i], NULL, WNOHANG) == jobs[i]) {
      jobs[i] = jobs[--njobs];
      memcpy(peers[i], peers[njobs], sizeof peers[i]);
    } else {
      i++;
    }
  return njobs;
}

int hd_service_main(const struct hd_service_cfg *cli) {
  hc_log_start("horad", HC_INFO);
  char why[600];
  struct hd_service_cfg cfg;
  if (hd_service_cfg_load(cli, &cfg, why, sizeof why) < 0) {
    hc_error("service: %s", why);
    return 2;
  }
  unsigned char key[HP_SECRET_LEN];
  memset(key, 0, sizeof key);
  int ok = usable(&cfg, key) == 0;
  if (cli->check) {
    OPENSSL_cleanse(key, sizeof key);
    printf("settings file: %s\nport: %d\nlisten: %s\nsocket: %s\n"
           "auth: %s\nkey_file: %s\nmunge_socket: %s\nallow_root: %s\n"
           "stop: %s\ndrain_timeout: %d\n%s\n",
           cfg.file_found ? (cli->config ? cli->config : HD_SERVICE_CONFIG)
                          : "(none)",
           cfg.port, cfg.listen_addr[0] ? cfg.listen_addr : "(every address)",
           cfg.socket[0] ? cfg.socket : "none",
           cfg.munge ? "munge" : "key", cfg.key_file,
           cfg.munge_socket[0] ? cfg.munge_socket : "(MUNGE's default)",
           cfg.allow_root ? "true" : "false", cfg.drain ? "drain" : "end",
           cfg.drain_timeout,
           ok ? "the service can start with these"
              : "the service cannot start with these (see above)");
    return ok ? 0 : 2;
  }
  if (!ok) return 2;
  char self[4096];
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  if (sl <= 0) {
    hc_error("service: cannot find its own program: %s", strerror(errno));
    return 1;
  }
  self[sl] = '\0';
  int lfd = -1, ufd = -1, aport = 0;
  char upath[sizeof ((struct sockaddr_un *)0)->sun_path + 1] = "";
  int act = from_systemd(&lfd, &ufd, upath, sizeof upath, &aport, why,
                         sizeof why);
  if (act < 0) {
    hc_error("service: %s", why);
    return 1;
  }
  if (act) {
    char tcp[32] = "no TCP port";
    if (lfd >= 0) hc_fmt(tcp, sizeof tcp, "port %d", aport);
    hc_info("service: sockets from systemd (socket activation): %s%s%s "
            "(port:, listen: and socket: of the settings do not apply)",
            tcp, ufd >= 0 ? " and " : "", upath);
  }
  if (!act)
    lfd = listen_on(cfg.listen_addr[0] ? cfg.listen_addr : NULL, cfg.port,
                    why, sizeof why);
  if (!act && lfd < 0) {
    hc_error("service: %s", why);
    return 1;
  }
  /* the local socket: one given must be there; the default one may be
   * missing (a service not root, without RuntimeDirectory=) */
  ino_t uino = 0;
  if (!act && cfg.socket[0])
    ufd = listen_unix(cfg.socket, &uino, why, sizeof why);
  if (!act && cfg.socket[0] && ufd < 0) {
    if (cfg.set & HD_SVC_SOCKET) {
      hc_error("service: %s", why);
      close(lfd);
      return 1;
    }
    hc_warn("service: no local socket (%s): local clients come over TCP "
            "(socket: in the settings chooses another path, or none)", why);
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_term;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sa.sa_handler = on_hup;
  sigaction(SIGHUP, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  char where[400];
  if (act)
    hc_fmt(where, sizeof where, "systemd's sockets");
  else
    hc_fmt(where, sizeof where, "%s port %d%s%s",
           cfg.listen_addr[0] ? cfg.listen_addr : "every address", cfg.port,
           ufd >= 0 ? " and " : "", ufd >= 0 ? cfg.socket : "");
  hc_info("service: listening on %s (jobs started with %s; %s; on stop: "
          "%s)%s%s",
          where, self,
          cfg.munge ? "users authenticated by MUNGE, each job run as its user"
                    : "the cluster key",
          cfg.drain ? "drain" : "end", cfg.file_found ? "; settings from " : "",
          cfg.file_found ? (cli->config ? cli->config : HD_SERVICE_CONFIG)
                         : "");
  static pid_t jobs[MAX_JOBS];
  static char peers[MAX_JOBS][NI_MAXHOST];
  int njobs = 0;
  unsigned jobno = 0;
  while (!got_term) {
    if (got_hup) {
      got_hup = 0;
      reload(cli, &cfg, key);
    }
    njobs = reap(jobs, peers, njobs);
    struct pollfd pf[2] = {{.fd = lfd, .events = POLLIN},
                           {.fd = ufd, .events = POLLIN}};
    if (poll(pf, 2, 500) <= 0) continue;
    for (int w = 0; w < 2; w++) {
      if (!pf[w].revents) continue;
      int local = w == 1;
      int cfd = accept4(pf[w].fd, NULL, NULL, SOCK_CLOEXEC);
      if (cfd < 0) {
        if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) {
          hc_warn_rl("service: accept: %s", strerror(errno));
          usleep(100 * 1000); /* out of descriptors: let some close */
        }
        continue;
      }
      char peer[NI_MAXHOST];
      struct ucred cr = {.pid = 0};
      socklen_t crl = sizeof cr;
      if (!local)
        peer_name(cfd, peer, sizeof peer);
      else if (getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, &cr, &crl) == 0)
        hc_fmt(peer, sizeof peer, "local uid %u (pid %d)", (unsigned)cr.uid,
               (int)cr.pid);
      else
        hc_fmt(peer, sizeof peer, "?");
      /* (local clients are users the kernel names: no limit per user) */
      int from_peer = 0;
      for (int i = 0; !local && i < njobs; i++)
        from_peer += !strcmp(peers[i], peer);
      const char *full = njobs == MAX_JOBS ? "too many connections being served"
                         : !local && from_peer >= MAX_PER_PEER
                             ? "too many connections from that address"
                         : !strcmp(peer, "?") ? "its address is unknown"
                                              : NULL;
      if (full) {
        hc_warn_rl("service: refused a connection from %s: %s", peer, full);
        set_timeouts(cfd, 1, 1);
        refuse(cfd, full);
        close(cfd);
        continue;
      }
      int one = 1;
      if (!local) setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      jobno++;
      pid_t pid = fork();
      if (pid == 0) {
        if (lfd >= 0) close(lfd);
        if (ufd >= 0) close(ufd);
        signal(SIGINT, SIG_DFL);
        signal(SIGHUP, SIG_IGN); /* the service's: horad gets it back */
        int rc = local ? serve_local(cfd, &cr, peer, self, &cfg, jobno)
                       : serve(cfd, peer, self, &cfg, key, jobno);
        memset(key, 0, sizeof key);
        hc_log_flush_suppressed(1);
        _exit(rc);
      }
      close(cfd);
      if (pid > 0) {
        memcpy(peers[njobs], peer, sizeof peers[njobs]);
        jobs[njobs++] = pid;
      } else {
        hc_error("service: fork: %s", strerror(errno));
      }
    }
  }
  if (lfd >= 0) close(lfd);
  if (ufd >= 0) {
    struct stat st;
    close(ufd);
    /* (ours only: one from systemd is the socket unit's) */
    if (uino && lstat(cfg.socket, &st) == 0 && st.st_ino == uino)
      unlink(cfg.socket);
  }
  hc_info("service: stopping (%s)", got_term ? "SIGTERM" : "?");
  if (cfg.drain && njobs && got_term == 1) {
    /* no new jobs; the running ones end on their own, within the drain
     * timeout, or a second SIGTERM ends them now */
    hc_info("service: draining %d running job(s)%s", njobs,
            cfg.drain_timeout ? "" : " (no time limit)");
    time_t until = cfg.drain_timeout ? time(NULL) + cfg.drain_timeout : 0;
    while (njobs && got_term == 1 && (!until || time(NULL) < until)) {
      njobs = reap(jobs, peers, njobs);
      if (njobs) usleep(100 * 1000);
    }
    if (njobs)
      hc_info("service: %s: ending the %d job(s) still running",
              got_term > 1 ? "SIGTERM again" : "the drain timeout passed",
              njobs);
  }
  if (njobs) hc_info("service: ending %d running job(s)", njobs);
  for (int i = 0; i < njobs; i++) kill(jobs[i], SIGTERM);
  for (int i = 0; i < njobs; i++) waitpid(jobs[i], NULL, 0);
  hc_info("service: stopped");
  memset(key, 0, sizeof key);
  return 0;
}

/* ---- the client --------------------------------------------------------- */

/* auth munge, the client's side: the service's nonce, then a credential
 * whose payload is the label, the nonce and the request. Returns 0, -1
 * (why), or -2 (the service refused: its words in why). */
static int munge_send(int fd, const struct hd_service_cfg *cfg,
                      const unsigned char *plain, size_t n,
                      const unsigned char okey[32], char *why,
                      size_t whylen) {
  send_frame(fd, HP_MSG_SVC_MUNGE, NULL, 0);
  struct hp_frame_hdr h;
  unsigned char *p;
  if (read_frame(fd, &h, &p, 1024, why, whylen) < 0) return -1;
  if (h.type == HP_MSG_SVC_OUTPUT) {
    refusal_text(p, h.len, why, whylen);
    free(p);
    return -2;
  }
  if (h.type != HP_MSG_SVC_MUNGE || h.len != HP_NONCE_LEN) {
    hc_fmt(why, whylen, "a frame of type %u where its nonce was due",
           h.type);
    free(p);
    return -1;
  }
  size_t ll = sizeof MUNGE_LABEL, tot = ll + HP_NONCE_LEN + 32 + n;
  unsigned char *pl = malloc(tot);
  if (!pl) {
    free(p);
    hc_fmt(why, whylen, "out of memory");
    return -1;
  }
  memcpy(pl, MUNGE_LABEL, ll);
  memcpy(pl + ll, p, HP_NONCE_LEN);
  memcpy(pl + ll + HP_NONCE_LEN, okey, 32);
  memcpy(pl + ll + HP_NONCE_LEN + 32, plain, n);
  free(p);
  char *cred = NULL;
  /* decodable by root alone: the service (a user's munge_decode of a
   * credential seen on the network would read the job's secret) */
  int rc = hd_munge_encode(msock(cfg), pl, (int)tot, 0, 0, &cred, why,
                           whylen);
  OPENSSL_cleanse(pl, tot);
  free(pl);
  if (rc < 0) return -1;
  send_frame(fd, HP_MSG_SVC_MUNGE, cred, strlen(cred));
  free(cred);
  return 0;
}

/* Relays the job's output (to stdout) until its exit status, which it
 * returns (255: the connection failed, or a frame not from the service).
 * With ot, frames are tagged under it once the job runs; without (the unix
 * socket) none is. */
static int relay(int fd, const char *target, struct otag *ot) {
  char why[600];
  int tagged = 0; /* a tagged frame came: the job runs */
  for (;;) {
    struct hp_frame_hdr h;
    unsigned char *p;
    if (read_frame(fd, &h, &p, HP_FRAME_MAX, why, sizeof why) < 0) {
      fprintf(stderr, "horad: the service on %s: %s before the job ended\n",
              target, why);
      return 255;
    }
    if (ot && h.reqid == 1) { /* its tag follows */
      unsigned char tag[OTAG_LEN], want[OTAG_LEN];
      struct hp_wbuf w;
      hp_wbuf_init(&w);
      hp_frame_begin(&w, h.type, 1);
      if (h.len) hp_put_raw(&w, p, h.len);
      hp_frame_end(&w);
      int ok = !w.err && read_all(fd, tag, sizeof tag) == 0;
      if (ok) {
        otag_of(ot, w.data, w.len, want);
        ok = !CRYPTO_memcmp(tag, want, sizeof tag);
      }
      hp_wbuf_free(&w);
      if (!ok) {
        free(p);
        fprintf(stderr, "horad: the service on %s: a frame whose tag does "
                "not match (altered or injected on the way)\n", target);
        return 255;
      }
      tagged = 1;
    } else if (ot ? tagged || h.reqid != 0 : h.reqid != 0) {
      free(p);
      fprintf(stderr, "horad: the service on %s: an untagged frame after the "
              "job started (not from the service)\n", target);
      return 255;
    }
    if (h.type == HP_MSG_SVC_OUTPUT) {
      write_all(1, p, h.len);
    } else if (h.type == HP_MSG_SVC_EXIT && h.len == 4) {
      struct hp_rbuf r;
      hp_rbuf_init(&r, p, h.len);
      uint32_t st = hp_get_u32(&r);
      free(p);
      close(fd);
      /* untagged, it can only be a refusal (nothing proves it came from
       * the service): never a success */
      if (ot && !tagged) return 255;
      return st > 255 ? 255 : (int)st;
    } else {
      fprintf(stderr, "horad: the service on %s sent a frame of type %u\n",
              target, h.type);
      free(p);
      return 255;
    }
    free(p);
  }
}

/* The client's launch request into plain: the bootstrap line (it holds
 * the job's secret), read from standard input when `boot` (else empty),
 * then horad's arguments, each NUL-terminated; at most max bytes. Returns
 * its length, or 0 (said on stderr). */
static size_t client_request(int boot, int nargs, char **args, size_t max,
                             unsigned char plain[LAUNCH_MAX]) {
  char line[1100] = "";
  if (boot) {
    if (!fgets(line, sizeof line, stdin) || !strchr(line, '\n')) {
      fprintf(stderr, "horad: no bootstrap line on standard input\n");
      return 0;
    }
    *strchr(line, '\n') = '\0';
  }
  size_t n = strlen(line) + 1;
  for (int i = 0; i < nargs; i++) n += strlen(args[i]) + 1;
  if (n > max) {
    OPENSSL_cleanse(line, sizeof line);
    fprintf(stderr, "horad: the launch request is too long\n");
    return 0;
  }
  size_t k = strlen(line) + 1;
  memcpy(plain, line, k);
  OPENSSL_cleanse(line, sizeof line);
  for (int i = 0; i < nargs; i++) {
    memcpy(plain + k, args[i], strlen(args[i]) + 1);
    k += strlen(args[i]) + 1;
  }
  return n;
}

/* The client of the unix socket at path: no key or credential (the
 * service learns this process's user from the kernel); horarun's
 * connection on fd 3 goes to the job's horad with the request, and the
 * bootstrap line is read only with --bootstrap. */
static int client_local(const char *path, int nargs, char **args) {
  if (fcntl(3, F_GETFD) < 0) {
    fprintf(stderr, "horad: no connection to horarun on fd 3 to pass to the "
            "service\n");
    return 255;
  }
  int boot = 0;
  for (int i = 0; i < nargs; i++) boot |= !strcmp(args[i], "--bootstrap");
  unsigned char plain[LAUNCH_MAX];
  size_t n = client_request(boot, nargs, args, LAUNCH_MAX, plain);
  if (!n) return 255;
  uid_t owner;
  int fd = hc_unix_connect(path, 0, &owner);
  if (fd < 0) {
    OPENSSL_cleanse(plain, n);
    fprintf(stderr, "horad: cannot reach the service at %s: %s\n", path,
            strerror(-fd));
    return 255;
  }
  set_timeouts(fd, 30, 30);
  /* the request holds the job's secret: only to a service of root's or
   * this user's (a socket path others could have bound) */
  if (owner != 0 && owner != getuid()) {
    OPENSSL_cleanse(plain, n);
    fprintf(stderr, "horad: %s is served by uid %u, neither root nor this "
            "user: not taken for a hora service\n", path, (unsigned)owner);
    close(fd);
    return 255;
  }
  signal(SIGPIPE, SIG_IGN);
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_frame_begin(&w, HP_MSG_SVC_LAUNCH, 0);
  hp_put_raw(&w, plain, n);
  hp_frame_end(&w);
  OPENSSL_cleanse(plain, n);
  union {
    struct cmsghdr c;
    char b[CMSG_SPACE(sizeof(int))];
  } cb;
  memset(&cb, 0, sizeof cb);
  struct iovec iov = {.iov_base = w.data, .iov_len = w.len};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1,
                     .msg_control = cb.b, .msg_controllen = sizeof cb.b};
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  int three = 3;
  memcpy(CMSG_DATA(c), &three, sizeof three);
  ssize_t sent = w.err ? -1 : sendmsg(fd, &m, MSG_NOSIGNAL);
  int rest = sent > 0 && (size_t)sent < w.len
                 ? write_all(fd, w.data + sent, w.len - (size_t)sent)
                 : 0;
  if (w.data) OPENSSL_cleanse(w.data, w.len);
  int ok = sent > 0 && rest == 0;
  hp_wbuf_free(&w);
  /* the job's horad holds it now: horarun sees it end when that does */
  close(3);
  if (!ok) {
    fprintf(stderr, "horad: the service at %s: cannot send the request: %s\n",
            path, strerror(errno));
    close(fd);
    return 255;
  }
  set_timeouts(fd, 0, 30); /* the job may print nothing for hours */
  return relay(fd, path, NULL);
}

int hd_service_client_main(const char *target,
                           const struct hd_service_cfg *cfg, int nargs,
                           char **args) {
  if (target[0] == '/') return client_local(target, nargs, args);
  char why[600];
  unsigned char key[HP_SECRET_LEN];
  if (cfg->munge ? hd_munge_available(why, sizeof why) < 0
                 : hd_service_load_key(cfg->key_file, key, why, sizeof why) <
                       0) {
    fprintf(stderr, "horad: %s\n", why);
    return 255;
  }
  /* HOST:PORT, [V6]:PORT */
  char host[512];
  const char *colon = strrchr(target, ':');
  if (!colon || colon == target || !colon[1] ||
      (size_t)(colon - target) >= sizeof host) {
    fprintf(stderr, "horad: bad service address '%s': expected HOST:PORT\n",
            target);
    return 255;
  }
  memcpy(host, target, (size_t)(colon - target));
  host[colon - target] = '\0';
  if (host[0] == '[' && host[strlen(host) - 1] == ']') {
    memmove(host, host + 1, strlen(host));
    host[strlen(host) - 1] = '\0';
  }
  unsigned char plain[LAUNCH_MAX];
  size_t n = client_request(1, nargs, args, LAUNCH_MAX - IV_LEN - TAG_LEN,
                            plain);
  if (!n) return 255;
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  int g = getaddrinfo(host, colon + 1, &hints, &res);
  if (g) {
    OPENSSL_cleanse(plain, n);
    fprintf(stderr, "horad: the service on %s: %s\n", target, gai_strerror(g));
    return 255;
  }
  int fd = -1, e = 0;
  for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
    if (fd >= 0) set_timeouts(fd, 30, 30); /* connect, handshake: bounded */
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
      e = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) {
    OPENSSL_cleanse(plain, n);
    fprintf(stderr, "horad: cannot reach the service on %s: %s\n", target,
            strerror(e));
    return 255;
  }
  /* the handshake's last frame and the launch request go out back to back:
   * with Nagle's algorithm the second would wait for the service's delayed
   * ACK (40 ms) */
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  signal(SIGPIPE, SIG_IGN);
  int rc;
  struct otag ot = {.seq = 0};
  if (cfg->munge) {
    /* the output key, for the service's tags: only it can read it */
    rc = hp_random(ot.key, sizeof ot.key) < 0
             ? (hc_fmt(why, sizeof why, "no randomness"), -1)
             : munge_send(fd, cfg, plain, n, ot.key, why, sizeof why);
  } else {
    unsigned char lkey[32], sealed[LAUNCH_MAX];
    rc = handshake(fd, HP_AUTH_CONNECTOR, key, NULL, NULL, lkey, why,
                   sizeof why);
    OPENSSL_cleanse(key, sizeof key);
    long sn = rc < 0 ? -1 : seal(lkey, plain, n, sealed);
    if (rc == 0) okey_from(lkey, ot.key);
    OPENSSL_cleanse(lkey, sizeof lkey);
    if (rc == 0 && sn < 0) {
      hc_fmt(why, sizeof why, "cannot seal the launch request");
      rc = -1;
    }
    if (rc == 0) send_frame(fd, HP_MSG_SVC_LAUNCH, sealed, (size_t)sn);
  }
  OPENSSL_cleanse(plain, n);
  if (rc == -2) {
    fprintf(stderr, "%s\n", why);
    return 255;
  }
  if (rc < 0) {
    fprintf(stderr, "horad: the service on %s refused this client: %s%s\n",
            target, why,
            cfg->munge ? "" : " (are the key files the same?)");
    return 255;
  }
  set_timeouts(fd, 0, 30); /* the job may print nothing for hours */
  return relay(fd, target, &ot);
}
