/* service.c -- horad as a resident service (horad --service), and its
 * client (horad --service-client), which horarun runs instead of ssh
 * (--launcher service).
 *
 * The service listens on a TCP port. Each connection is served by a
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
 * The service starts its own horad binary with `--rendezvous`, `--launcher
 * ADDR` (the client's address as the service sees it: horad connects back
 * to horarun there, as it does to $SSH_CONNECTION's) and at most `--iface
 * IF`; nothing else is accepted, so the key lets a client start horad
 * jobs, as the service's user, and nothing more. The bootstrap line goes to
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
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "auth.h"
#include "common.h"
#include "msg.h"
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
    hc_fmt(why, whylen, "the connection closed");
    return -1;
  }
  if (hp_frame_parse(hdr, h, why, whylen) < 0) return -1;
  if (h->len > max) {
    hc_fmt(why, whylen, "a frame of %u bytes (at most %zu here)", h->len, max);
    return -1;
  }
  *payload = malloc(h->len ? h->len : 1);
  if (!*payload || read_all(fd, *payload, h->len) < 0) {
    free(*payload);
    *payload = NULL;
    hc_fmt(why, whylen, "the connection closed");
    return -1;
  }
  return 0;
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

/* Runs the handshake on fd as `role`; on success *lkey is the launch key.
 * Returns 0 or -1 (why). */
static int handshake(int fd, int role, const unsigned char key[HP_SECRET_LEN],
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
    if (read_frame(fd, &h, &p, HP_AUTH_FRAME_MAX, why, whylen) < 0) goto out;
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
static void on_term(int s) { (void)s; got_term = 1; }
static void on_hup(int s) { (void)s; got_hup = 1; }

static int iface_ok(const char *s) {
  if (!*s || strlen(s) > 255) return 0;
  for (; *s; s++)
    if (!(('a' <= *s && *s <= 'z') || ('A' <= *s && *s <= 'Z') ||
          ('0' <= *s && *s <= '9') || strchr(".-_:,", *s)))
      return 0;
  return 1;
}

/* Splits a SVC_LAUNCH payload: the bootstrap line, then arguments. Only
 * --rendezvous and --iface IF are taken. Returns 0 or -1 (why). */
static int parse_launch(unsigned char *p, size_t n, const char **boot,
                        const char **iface, char *why, size_t whylen) {
  if (!n || p[n - 1] != '\0') {
    hc_fmt(why, whylen, "a malformed launch request");
    return -1;
  }
  *boot = (const char *)p;
  *iface = NULL;
  size_t bl = strlen(*boot);
  if (bl == 0 || bl > 1024 || strncmp(*boot, "HORA1 ", 6)) {
    hc_fmt(why, whylen, "a launch request without a bootstrap line");
    return -1;
  }
  int rdv = 0;
  for (size_t off = bl + 1; off < n;) {
    const char *a = (const char *)p + off;
    off += strlen(a) + 1;
    if (!strcmp(a, "--rendezvous")) {
      rdv = 1;
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
  if (!rdv) {
    hc_fmt(why, whylen, "a launch request without --rendezvous");
    return -1;
  }
  return 0;
}

static void send_exit(int fd, int status) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_frame_begin(&w, HP_MSG_SVC_EXIT, 0);
  hp_put_u32(&w, (uint32_t)status);
  hp_frame_end(&w);
  send_wbuf(fd, &w);
  hp_wbuf_free(&w);
}

/* After the handshake: tells the client why its request is refused. */
static void refuse(int fd, const char *why) {
  struct hp_wbuf w;
  char line[600];
  hc_fmt(line, sizeof line, "horad: the service refused the request: %s\n",
         why);
  hp_wbuf_init(&w);
  hp_frame_begin(&w, HP_MSG_SVC_OUTPUT, 0);
  hp_put_raw(&w, line, strlen(line));
  hp_frame_end(&w);
  send_wbuf(fd, &w);
  hp_wbuf_free(&w);
  send_exit(fd, 255);
}

static void set_timeouts(int fd, int rcv_s, int snd_s) {
  struct timeval r = {.tv_sec = rcv_s}, t = {.tv_sec = snd_s};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &r, sizeof r);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &t, sizeof t);
}

/* Serves one client (in a process of its own). Returns the exit status. */
static int serve(int fd, const char *peer, const char *self,
                 const unsigned char key[HP_SECRET_LEN]) {
  char why[512];
  /* the service stopping (SIGTERM): this connection's job ends too */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_term;
  sigaction(SIGTERM, &sa, NULL);
  set_timeouts(fd, IO_TIMEOUT_S, IO_TIMEOUT_S);
  unsigned char lkey[32];
  if (handshake(fd, HP_AUTH_ACCEPTOR, key, lkey, why, sizeof why) < 0) {
    hc_warn("service: refused a connection from %s: %s", peer, why);
    return 1;
  }
  struct hp_frame_hdr h;
  unsigned char *p = NULL, *req = NULL;
  const char *boot, *iface;
  long n = -1;
  int bad = read_frame(fd, &h, &p, LAUNCH_MAX, why, sizeof why) < 0;
  if (!bad && h.type != HP_MSG_SVC_LAUNCH) {
    hc_fmt(why, sizeof why, "a frame of type %u, not a launch request",
           h.type);
    bad = 1;
  }
  if (!bad && (!(req = malloc(h.len + 1)) ||
               (n = unseal(lkey, p, h.len, req)) < 0)) {
    hc_fmt(why, sizeof why, "a launch request that does not open with the "
           "connection's key (forged or damaged)");
    bad = 1;
  }
  OPENSSL_cleanse(lkey, sizeof lkey);
  free(p);
  if (bad || parse_launch(req, (size_t)n, &boot, &iface, why, sizeof why) < 0) {
    hc_warn("service: refused a request from %s: %s", peer, why);
    refuse(fd, why);
    if (req) OPENSSL_cleanse(req, (size_t)(n > 0 ? n : 0));
    free(req);
    return 1;
  }
  /* the job's output may pause for hours; a client that stops reading is
   * taken for gone after a while */
  set_timeouts(fd, 0, 60);
  /* horad connects back to the client's address, as to $SSH_CONNECTION's */
  const char *argv[8];
  int ac = 0;
  argv[ac++] = self;
  argv[ac++] = "--rendezvous";
  argv[ac++] = "--launcher";
  argv[ac++] = peer;
  if (iface) {
    argv[ac++] = "--iface";
    argv[ac++] = iface;
  }
  argv[ac] = NULL;
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0) {
    hc_error("service: a job from %s: pipe: %s", peer, strerror(errno));
    refuse(fd, "the service cannot make a pipe");
    return 1;
  }
  pid_t pid = fork();
  if (pid == 0) {
    setsid();
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(out[1], 2);
    /* horad starts with the signals as a shell would give them */
    static const int sigs[] = {SIGPIPE, SIGCHLD, SIGHUP, SIGTERM, SIGINT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
      signal(sigs[i], SIG_DFL);
    execv(self, (char *const *)argv);
    fprintf(stderr, "horad: cannot run %s: %s\n", self, strerror(errno));
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  if (pid < 0) {
    hc_error("service: a job from %s: fork: %s", peer, strerror(errno));
    refuse(fd, "the service cannot fork");
    return 1;
  }
  hc_info("service: job from %s: horad %d started", peer, (int)pid);
  int wrote = write_all(in[1], boot, strlen(boot)) == 0 &&
              write_all(in[1], "\n", 1) == 0;
  close(in[1]);
  OPENSSL_cleanse(req, (size_t)n);
  free(req);
  if (!wrote) hc_warn("service: job from %s: horad did not take its line", peer);
  /* relay its output until it closes; the client gone: end the job */
  int client = 1, ending = 0;
  time_t kill_at = 0;
  unsigned char buf[16384];
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  for (;;) {
    if ((got_term || !client) && !ending) {
      ending = 1;
      hc_info("service: %s: ending horad %d (job from %s)",
              got_term ? "stopping" : "the client left", (int)pid, peer);
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
      if (client) {
        hp_frame_begin(&w, HP_MSG_SVC_OUTPUT, 0);
        hp_put_raw(&w, buf, (size_t)k);
        hp_frame_end(&w);
        if (send_wbuf(fd, &w) < 0) client = 0; /* (or it stopped reading) */
      }
    }
  }
  hp_wbuf_free(&w);
  close(out[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  int status = WIFEXITED(st) ? WEXITSTATUS(st)
               : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 255;
  hc_info("service: job from %s: horad %d ended (status %d)", peer, (int)pid,
          status);
  if (client) send_exit(fd, status);
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

int hd_service_main(const char *key_file, const char *listen_addr, int port,
                    int allow_root) {
  hc_log_start("horad", HC_INFO);
  char why[600];
  if (geteuid() == 0 && !allow_root) {
    hc_error("service: it runs the jobs as its own user, and that is root: "
             "run it as the jobs' user (User= in horad.service), or give "
             "--allow-root");
    return 2;
  }
  unsigned char key[HP_SECRET_LEN];
  if (hd_service_load_key(key_file, key, why, sizeof why) < 0) {
    hc_error("service: %s", why);
    return 2;
  }
  char self[4096];
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  if (sl <= 0) {
    hc_error("service: cannot find its own program: %s", strerror(errno));
    return 1;
  }
  self[sl] = '\0';
  int lfd = listen_on(listen_addr, port, why, sizeof why);
  if (lfd < 0) {
    hc_error("service: %s", why);
    return 1;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_term;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sa.sa_handler = on_hup;
  sigaction(SIGHUP, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  hc_info("service: listening on %s port %d (jobs started with %s)",
          listen_addr ? listen_addr : "every address", port, self);
  static pid_t jobs[MAX_JOBS];
  static char peers[MAX_JOBS][NI_MAXHOST];
  int njobs = 0;
  while (!got_term) {
    if (got_hup) {
      got_hup = 0;
      if (hd_service_load_key(key_file, key, why, sizeof why) < 0)
        hc_error("service: SIGHUP: %s; the old key stays", why);
      else
        hc_info("service: SIGHUP: the key file was read again");
    }
    for (int i = 0; i < njobs;) /* reap the connections served */
      if (waitpid(jobs[i], NULL, WNOHANG) == jobs[i]) {
        jobs[i] = jobs[--njobs];
        memcpy(peers[i], peers[njobs], sizeof peers[i]);
      } else {
        i++;
      }
    struct pollfd pf = {.fd = lfd, .events = POLLIN};
    if (poll(&pf, 1, 500) <= 0) continue;
    int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (cfd < 0) {
      if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) {
        hc_warn_rl("service: accept: %s", strerror(errno));
        usleep(100 * 1000); /* out of descriptors: let some close */
      }
      continue;
    }
    char peer[NI_MAXHOST];
    peer_name(cfd, peer, sizeof peer);
    int from_peer = 0;
    for (int i = 0; i < njobs; i++) from_peer += !strcmp(peers[i], peer);
    if (njobs == MAX_JOBS || from_peer >= MAX_PER_PEER || !strcmp(peer, "?")) {
      hc_warn_rl("service: refused a connection from %s: %s", peer,
                 njobs == MAX_JOBS ? "too many connections being served"
                 : from_peer >= MAX_PER_PEER
                     ? "too many connections from that address"
                     : "its address is unknown");
      close(cfd);
      continue;
    }
    int one = 1;
    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    pid_t pid = fork();
    if (pid == 0) {
      close(lfd);
      signal(SIGINT, SIG_DFL);
      signal(SIGHUP, SIG_IGN); /* the service's: horad gets it back */
      int rc = serve(cfd, peer, self, key);
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
  close(lfd);
  hc_info("service: stopping: ending %d running job(s)", njobs);
  for (int i = 0; i < njobs; i++) kill(jobs[i], SIGTERM);
  for (int i = 0; i < njobs; i++) waitpid(jobs[i], NULL, 0);
  memset(key, 0, sizeof key);
  return 0;
}

/* ---- the client --------------------------------------------------------- */

int hd_service_client_main(const char *target, const char *key_file,
                           int nargs, char **args) {
  char why[600];
  unsigned char key[HP_SECRET_LEN];
  if (hd_service_load_key(key_file, key, why, sizeof why) < 0) {
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
  char line[1100];
  if (!fgets(line, sizeof line, stdin) || !strchr(line, '\n')) {
    fprintf(stderr, "horad: no bootstrap line on standard input\n");
    return 255;
  }
  *strchr(line, '\n') = '\0';
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  int g = getaddrinfo(host, colon + 1, &hints, &res);
  if (g) {
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
    fprintf(stderr, "horad: cannot reach the service on %s: %s\n", target,
            strerror(e));
    return 255;
  }
  signal(SIGPIPE, SIG_IGN);
  unsigned char lkey[32];
  if (handshake(fd, HP_AUTH_CONNECTOR, key, lkey, why, sizeof why) < 0) {
    OPENSSL_cleanse(key, sizeof key);
    fprintf(stderr, "horad: the service on %s refused this client: %s (are "
            "the key files the same?)\n", target, why);
    return 255;
  }
  OPENSSL_cleanse(key, sizeof key);
  /* the request, sealed: the bootstrap line holds the job's secret */
  size_t n = strlen(line) + 1;
  for (int i = 0; i < nargs; i++) n += strlen(args[i]) + 1;
  unsigned char *plain = malloc(n), *sealed = malloc(n + IV_LEN + TAG_LEN);
  long sn = -1;
  if (plain && sealed && n <= LAUNCH_MAX - IV_LEN - TAG_LEN) {
    size_t k = strlen(line) + 1;
    memcpy(plain, line, k);
    for (int i = 0; i < nargs; i++) {
      memcpy(plain + k, args[i], strlen(args[i]) + 1);
      k += strlen(args[i]) + 1;
    }
    sn = seal(lkey, plain, n, sealed);
    OPENSSL_cleanse(plain, n);
  }
  OPENSSL_cleanse(lkey, sizeof lkey);
  OPENSSL_cleanse(line, sizeof line);
  free(plain);
  if (sn < 0) {
    free(sealed);
    fprintf(stderr, "horad: cannot make the launch request\n");
    return 255;
  }
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_frame_begin(&w, HP_MSG_SVC_LAUNCH, 0);
  hp_put_raw(&w, sealed, (size_t)sn);
  hp_frame_end(&w);
  free(sealed);
  if (send_wbuf(fd, &w) < 0) {
    hp_wbuf_free(&w);
    fprintf(stderr, "horad: the service on %s closed the connection\n", target);
    return 255;
  }
  hp_wbuf_free(&w);
  set_timeouts(fd, 0, 30); /* the job may print nothing for hours */
  for (;;) {
    struct hp_frame_hdr h;
    unsigned char *p;
    if (read_frame(fd, &h, &p, HP_FRAME_MAX, why, sizeof why) < 0) {
      fprintf(stderr, "horad: the service on %s: %s before the job ended\n",
              target, why);
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
