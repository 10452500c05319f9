/* conn.c -- framed, authenticated TCP connections on libuv (see conn.h). */
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "common.h"
#include "conn.h"

#define SOCK_BUF (4u << 20) /* socket buffers: a few pieces in flight */
#define KEEP_MAX ((4u << 20) + 64) /* payload buffer kept between frames */

static const struct hp_conn_cb no_cb;

void hp_addr_str(const struct sockaddr *sa, char *buf, size_t len) {
  char ip[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
    inet_ntop(AF_INET, &s->sin_addr, ip, sizeof ip);
    port = ntohs(s->sin_port);
    hc_fmt(buf, len, "%s:%d", ip, port);
  } else if (sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
    if (IN6_IS_ADDR_V4MAPPED(&s->sin6_addr)) {
      inet_ntop(AF_INET, &s->sin6_addr.s6_addr[12], ip, sizeof ip);
      hc_fmt(buf, len, "%s:%d", ip, ntohs(s->sin6_port));
      return;
    }
    inet_ntop(AF_INET6, &s->sin6_addr, ip, sizeof ip);
    port = ntohs(s->sin6_port);
    hc_fmt(buf, len, "[%s]:%d", ip, port);
  } else {
    hc_fmt(buf, len, "(unknown address)");
  }
}

int hp_addr_parse(const char *addr, int port, struct sockaddr_storage *ss) {
  memset(ss, 0, sizeof *ss);
  struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
  struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
  if (inet_pton(AF_INET, addr, &s4->sin_addr) == 1) {
    s4->sin_family = AF_INET;
    s4->sin_port = htons((uint16_t)port);
    return 0;
  }
  char tmp[INET6_ADDRSTRLEN + 1];
  const char *pct = strchr(addr, '%');
  size_t n = pct ? (size_t)(pct - addr) : strlen(addr);
  if (n >= sizeof tmp) return -1;
  memcpy(tmp, addr, n);
  tmp[n] = '\0';
  if (inet_pton(AF_INET6, tmp, &s6->sin6_addr) != 1) return -1;
  s6->sin6_family = AF_INET6;
  s6->sin6_port = htons((uint16_t)port);
  if (pct) { /* a zone: its number, or an interface's name */
    const char *z = pct + 1;
    char *end;
    unsigned long v = strtoul(z, &end, 10);
    if (*z && !*end && v <= UINT32_MAX) s6->sin6_scope_id = (uint32_t)v;
    else if (!(s6->sin6_scope_id = if_nametoindex(z))) return -1;
  }
  return 0;
}

/* ---- closing ---------------------------------------------------------- */

void hp_conn_track(struct hp_conn *c, struct hp_conn **head) {
  c->next = *head;
  if (*head) (*head)->pprev = &c->next;
  c->pprev = head;
  *head = c;
}

/* ---- strangers in their handshake --------------------------------------- */

/* The length of the address part of c->peer ("1.2.3.4" of "1.2.3.4:5"). */
static size_t source_len(const struct hp_conn *c) {
  const char *colon = strrchr(c->peer, ':');
  return colon ? (size_t)(colon - c->peer) : strlen(c->peer);
}

static int same_source(const struct hp_conn *a, const struct hp_conn *b) {
  size_t n = source_len(a);
  return n == source_len(b) && !memcmp(a->peer, b->peer, n);
}

/* 1 for a connection a listener accepted that is still in its handshake. */
static int stranger(const struct hp_conn *c) {
  return !c->connector && !c->authed && !c->closing;
}

/* Among the strangers on the list other than `except` (from the source of
 * `from` when not NULL): *count of them, and the one to drop, the oldest
 * silent one, else the oldest (the list runs newest first). */
static struct hp_conn *pick_victim(struct hp_conn *list,
                                   const struct hp_conn *except,
                                   const struct hp_conn *from,
                                   unsigned *count) {
  struct hp_conn *oldest = NULL, *silent = NULL;
  *count = 0;
  for (struct hp_conn *k = list; k; k = k->next) {
    if (k == except || !stranger(k) || (from && !same_source(k, from)))
      continue;
    ++*count;
    oldest = k;
    if (!k->heard) silent = k;
  }
  return silent ? silent : oldest;
}

static void drop_for_room(struct hp_conn *victim, const char *which) {
  char why[128];
  hc_fmt(why, sizeof why,
         "dropped for a newer connection: too many in their handshake%s",
         which);
  hp_conn_close(victim, why);
}

/* Makes room for c, just accepted, among the strangers of the list. */
static void make_room(struct hp_conn *list, const struct hp_conn *c) {
  unsigned n;
  struct hp_conn *v = pick_victim(list, c, c, &n);
  if (v && n >= HP_UNAUTH_PER_SOURCE) {
    drop_for_room(v, " from one address");
    return;
  }
  v = pick_victim(list, c, NULL, &n);
  if (v && n >= HP_UNAUTH_MAX) drop_for_room(v, "");
}

int hp_conn_refuse_flood(uv_stream_t *server, struct hp_conn *list) {
  unsigned n;
  struct hp_conn *v = pick_victim(list, NULL, NULL, &n);
  (void)server;
  if (v && n >= HP_UNAUTH_MAX) drop_for_room(v, "");
  return 0;
}

int hp_conn_accept_tracked(uv_stream_t *server,
                           const unsigned char secret[HP_SECRET_LEN],
                           uint8_t purpose, const struct hp_conn_cb *cb,
                           void *data, struct hp_conn **list,
                           struct hp_conn **out) {
  int rc = hp_conn_accept(server, secret, purpose, cb, data, out);
  if (rc < 0) return rc;
  make_room(*list, *out);
  hp_conn_track(*out, list);
  return 0;
}

void hp_conn_close_all(struct hp_conn **head, const char *why) {
  for (struct hp_conn *c = *head; c; c = c->next) hp_conn_close(c, why);
}

static void on_handle_closed(uv_handle_t *h) {
  struct hp_conn *c = h->data;
  if (--c->nclosing > 0) return;
  if (c->pprev) {
    *c->pprev = c->next;
    if (c->next) c->next->pprev = c->pprev;
  }
  if (c->cb->on_close) c->cb->on_close(c, c->why);
  hp_auth_clear(&c->auth);
  EVP_CIPHER_CTX_free(c->tag_tx);
  EVP_CIPHER_CTX_free(c->tag_rx);
  free(c->payload);
  free(c);
}

int hp_conn_retrans(struct hp_conn *c, uint32_t *total) {
  uv_os_fd_t fd;
  struct tcp_info ti;
  socklen_t len = sizeof ti;
  if (!c || c->closing || uv_fileno((uv_handle_t *)&c->tcp, &fd) < 0 ||
      getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0)
    return -1;
  *total = ti.tcpi_total_retrans;
  return 0;
}

void hp_conn_close(struct hp_conn *c, const char *why) {
  if (c->closing) return;
  c->closing = 1;
  if (why && why != c->why) hc_fmt(c->why, sizeof c->why, "%s", why);
  c->nclosing = 2;
  uv_close((uv_handle_t *)&c->timer, on_handle_closed);
  uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
}

static void fail(struct hp_conn *c, const char *fmt, const char *arg) {
  char why[256];
  hc_fmt(why, sizeof why, fmt, arg);
  hp_conn_close(c, why);
}

/* The peer sent what cannot be hora's: the connection ends. */
static void bad_data(struct hp_conn *c, const char *fmt, const char *arg) {
  if (!c->closing) c->bad_data = 1;
  fail(c, fmt, arg);
}

/* ---- frame tags ------------------------------------------------------------ */

/* The key of one direction: HMAC-SHA256 of the secret over a label and
 * both nonces (the handshake's, fresh on both sides). */
static void dir_key(const struct hp_auth *a, const char *what, const char *dir,
                    unsigned char key[32]) {
  unsigned char in[64 + 2 * HP_NONCE_LEN];
  hc_fmt((char *)in, 64, "hora-frame-%s-1 %s", what, dir);
  size_t n = strlen((char *)in);
  memcpy(in + n, a->nonce_c, HP_NONCE_LEN);
  memcpy(in + n + HP_NONCE_LEN, a->nonce_s, HP_NONCE_LEN);
  unsigned int kl = 32;
  if (!HMAC(EVP_sha256(), a->secret, HP_SECRET_LEN, in, n + 2 * HP_NONCE_LEN,
            key, &kl))
    hp_random(key, 32); /* (a key the peer cannot have: every tag fails) */
  OPENSSL_cleanse(in, sizeof in);
}

/* AES-256-GCM keyed for one direction. */
static void *enc_ctx(const struct hp_auth *a, const char *dir, int encrypt) {
  unsigned char key[32];
  dir_key(a, "enc", dir, key);
  EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
  if (x && EVP_CipherInit_ex(x, EVP_aes_256_gcm(), NULL, key, NULL,
                             encrypt) != 1) {
    EVP_CIPHER_CTX_free(x);
    x = NULL;
  }
  OPENSSL_cleanse(key, sizeof key);
  return x;
}

/* How many of a frame's payload bytes its tag covers: all, but for the
 * bulk data frames only their own header (where the data goes: which
 * operation, piece, offset) unless the connection checks the data's
 * integrity (or encrypts). */
static size_t covered(const struct hp_conn *c, uint16_t type, size_t len) {
  if (c->integrity || c->encrypt) return len;
  if (type == HP_MSG_DATA) return HC_MIN(len, (size_t)HP_DATA_HDR_LEN);
  if (type == HP_MSG_XDATA) return HC_MIN(len, (size_t)HP_XDATA_HDR_LEN);
  return len;
}

/* Starts the tag of a frame: the IV's last 8 bytes are its sequence
 * number, its header is authenticated as additional data. */
static int tag_begin(void *x, uint64_t seq, const unsigned char *hdr) {
  unsigned char iv[12] = {0};
  for (int i = 0; i < 8; i++) iv[4 + i] = (unsigned char)(seq >> (8 * i));
  int outl = 0;
  return EVP_CipherInit_ex(x, NULL, NULL, NULL, iv, -1) == 1 &&
                 EVP_CipherUpdate(x, NULL, &outl, hdr, HP_FRAME_HDR) == 1
             ? 0
             : -1;
}

/* n payload bytes: encrypted or decrypted from src into dst (which may be
 * src) when the connection encrypts, else authenticated as they are (GCM's
 * additional data: GMAC). */
static int tag_data(const struct hp_conn *c, void *x, const void *src,
                    void *dst, size_t n) {
  int outl = 0;
  if (!n) return 0;
  if (!c->encrypt)
    return EVP_CipherUpdate(x, NULL, &outl, src, (int)n) == 1 ? 0 : -1;
  return EVP_CipherUpdate(x, dst, &outl, src, (int)n) == 1 &&
                 (size_t)outl == n
             ? 0
             : -1;
}

/* The sender's tag into out. */
static int tag_finish(void *x, unsigned char out[HP_FRAME_TAG]) {
  int outl = 0;
  unsigned char none[16];
  return EVP_CipherFinal_ex(x, none, &outl) == 1 &&
                 EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_GCM_GET_TAG, HP_FRAME_TAG,
                                     out) == 1
             ? 0
             : -1;
}

/* The receiver: 1 when tag is the frame's, 0 when not, -1 on an error. */
static int tag_check(void *x, const unsigned char *tag) {
  int outl = 0;
  unsigned char none[16];
  if (EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_GCM_SET_TAG, HP_FRAME_TAG,
                          (void *)tag) != 1)
    return -1;
  return EVP_CipherFinal_ex(x, none, &outl) == 1;
}

/* An outgoing frame: its header hdr, then n1 payload bytes at p1 (the
 * connection's own: encrypted in place), then n2 at p2 (the caller's:
 * when encrypting, encrypted into d2). Its tag goes to out. */
static int tag_out(struct hp_conn *c, const unsigned char *hdr,
                   unsigned char *p1, size_t n1, const void *p2, void *d2,
                   size_t n2, unsigned char out[HP_FRAME_TAG]) {
  uint16_t type = (uint16_t)(hdr[6] | hdr[7] << 8);
  size_t cov = covered(c, type, n1 + n2);
  size_t c1 = HC_MIN(cov, n1), c2 = cov - c1;
  if (tag_begin(c->tag_tx, c->seq_tx++, hdr) < 0 ||
      tag_data(c, c->tag_tx, p1, p1, c1) < 0 ||
      tag_data(c, c->tag_tx, p2, d2, c2) < 0)
    return -1;
  return tag_finish(c->tag_tx, out);
}

void hp_conn_set_integrity(struct hp_conn *c, int on) { c->integrity = on; }
void hp_conn_set_encrypt(struct hp_conn *c, int on) { c->encrypt = on; }

/* ---- writing ------------------------------------------------------------ */

struct wreq {
  uv_write_t req;
  struct hp_conn *c;
  size_t bytes;
  struct hp_wbuf w;                /* an owned frame, or */
  void (*done)(void *, int);       /* a zero-copy payload's callback */
  void *arg;
  unsigned char *tags;             /* the frames' tags */
  unsigned char *enc;              /* a zero-copy payload, encrypted */
  unsigned char hdr[64];
  unsigned char ztag[HP_FRAME_TAG]; /* a zero-copy frame's tag */
};

static void on_write(uv_write_t *req, int status) {
  struct wreq *r = (struct wreq *)req;
  struct hp_conn *c = r->c;
  c->queued -= r->bytes;
  if (r->done) r->done(r->arg, status);
  hp_wbuf_free(&r->w);
  free(r->tags);
  free(r->enc);
  free(r);
  if (c->close_when_sent && !c->queued) hp_conn_close(c, "closed");
}

void hp_conn_close_when_sent(struct hp_conn *c) {
  c->close_when_sent = 1;
  if (!c->queued) hp_conn_close(c, "closed");
}

/* The frames of r->w, each followed by its tag, as buffers for uv_write
 * (*bufs malloc'd, *nb of them). Returns 0 or < 0. */
static int tag_frames(struct hp_conn *c, struct wreq *r, uv_buf_t **bufs,
                      unsigned *nb) {
  size_t nf = 0;
  size_t off = 0;
  for (; off + HP_FRAME_HDR <= r->w.len; nf++) {
    const unsigned char *h = r->w.data + off;
    off += HP_FRAME_HDR + ((size_t)h[8] | (size_t)h[9] << 8 |
                           (size_t)h[10] << 16 | (size_t)h[11] << 24);
    if (off > r->w.len) return UV_EINVAL;
  }
  if (nf == 0 || off != r->w.len) return UV_EINVAL; /* not whole frames */
  r->tags = malloc(nf * HP_FRAME_TAG);
  uv_buf_t *b = malloc(2 * nf * sizeof *b);
  if (!r->tags || !b) {
    free(b);
    return UV_ENOMEM;
  }
  off = 0;
  for (size_t i = 0; i < nf; i++) {
    unsigned char *h = r->w.data + off;
    size_t len = (size_t)h[8] | (size_t)h[9] << 8 | (size_t)h[10] << 16 |
                 (size_t)h[11] << 24;
    unsigned char *t = r->tags + i * HP_FRAME_TAG;
    if (tag_out(c, h, h + HP_FRAME_HDR, len, NULL, NULL, 0, t) < 0) {
      free(b);
      return UV_EIO;
    }
    b[2 * i] = uv_buf_init((char *)h, (unsigned)(HP_FRAME_HDR + len));
    b[2 * i + 1] = uv_buf_init((char *)t, HP_FRAME_TAG);
    off += HP_FRAME_HDR + len;
  }
  *bufs = b;
  *nb = (unsigned)(2 * nf);
  r->bytes += nf * HP_FRAME_TAG;
  return 0;
}

int hp_conn_send(struct hp_conn *c, struct hp_wbuf *w) {
  if (c->closing || w->err || !w->len) {
    hp_wbuf_reset(w);
    return UV_EPIPE;
  }
  struct wreq *r = calloc(1, sizeof *r);
  if (!r) {
    hp_wbuf_reset(w);
    return UV_ENOMEM;
  }
  r->c = c;
  r->w = *w;
  hp_wbuf_init(w);
  r->bytes = r->w.len;
  uv_buf_t one = uv_buf_init((char *)r->w.data, (unsigned)r->w.len), *b = &one;
  unsigned nb = 1;
  int rc = c->tag_tx ? tag_frames(c, r, &b, &nb) : 0;
  if (rc == 0) rc = uv_write(&r->req, (uv_stream_t *)&c->tcp, b, nb, on_write);
  if (b != &one) free(b); /* (uv_write copied the array) */
  if (rc < 0) {
    hp_wbuf_free(&r->w);
    free(r->tags);
    free(r);
    if (c->tag_tx) /* the sequence is off: nothing more can pass */
      hp_conn_close(c, rc == UV_EIO ? "cannot tag a frame (libcrypto)"
                                    : uv_strerror(rc));
    return rc;
  }
  c->queued += r->bytes;
  return 0;
}

int hp_conn_send_zc(struct hp_conn *c, const void *hdr, size_t hdrlen,
                    const void *p, size_t n, void (*done)(void *, int),
                    void *arg) {
  struct wreq *r = NULL;
  int rc = UV_EPIPE;
  if (!c->closing && hdrlen >= HP_FRAME_HDR && hdrlen <= sizeof r->hdr &&
      n <= HP_FRAME_MAX && (r = calloc(1, sizeof *r))) {
    r->c = c;
    r->done = done;
    r->arg = arg;
    r->bytes = hdrlen + n;
    memcpy(r->hdr, hdr, hdrlen);
    uv_buf_t b[3] = {uv_buf_init((char *)r->hdr, (unsigned)hdrlen),
                     uv_buf_init((char *)p, (unsigned)n),
                     uv_buf_init((char *)r->ztag, HP_FRAME_TAG)};
    unsigned nb = n ? 2 : 1;
    rc = 0;
    if (c->tag_tx && c->encrypt && n && !(r->enc = malloc(n))) {
      rc = UV_ENOMEM;
      hp_conn_close(c, "out of memory");
    } else if (c->tag_tx) {
      if (r->enc) b[1] = uv_buf_init((char *)r->enc, (unsigned)n);
      if (tag_out(c, r->hdr, r->hdr + HP_FRAME_HDR, hdrlen - HP_FRAME_HDR, p,
                  r->enc, n, r->ztag) < 0) {
        rc = UV_EIO;
        hp_conn_close(c, "cannot tag a frame");
      } else {
        if (!n) b[1] = b[2];
        nb++;
        r->bytes += HP_FRAME_TAG;
      }
    }
    if (rc == 0) {
      rc = uv_write(&r->req, (uv_stream_t *)&c->tcp, b, nb, on_write);
      /* a tagged frame not sent: the sequence is off, nothing more passes */
      if (rc < 0 && c->tag_tx) hp_conn_close(c, uv_strerror(rc));
    }
    if (rc == 0) {
      c->queued += r->bytes;
      return 0;
    }
  }
  if (r) free(r->enc);
  free(r);
  done(arg, rc ? rc : UV_ENOMEM);
  return rc ? rc : UV_ENOMEM;
}

/* ---- the handshake --------------------------------------------------- */

static void on_auth_timeout(uv_timer_t *t) {
  struct hp_conn *c = t->data;
  hp_conn_close(c, "no authentication within the time limit");
}

static void auth_send(struct hp_conn *c, struct hp_wbuf *w) {
  if (w->len && hp_conn_send(c, w) < 0)
    hp_conn_close(c, "cannot write the handshake");
}

static int auth_frame(struct hp_conn *c) {
  struct hp_wbuf w;
  char why[200];
  hp_wbuf_init(&w);
  int rc = hp_auth_step(&c->auth, &c->h, c->payload, &w, why, sizeof why);
  if (rc < 0) {
    hp_wbuf_free(&w);
    fail(c, "authentication failed: %s", why);
    return -1;
  }
  auth_send(c, &w);
  hp_wbuf_free(&w);
  if (rc == 1 && !c->closing) {
    /* from here on every frame carries a tag, each way its own key */
    const char *tx = c->connector ? "c2s" : "s2c";
    const char *rx = c->connector ? "s2c" : "c2s";
    c->tag_tx = enc_ctx(&c->auth, tx, 1);
    c->tag_rx = enc_ctx(&c->auth, rx, 0);
    if (!c->tag_tx || !c->tag_rx) {
      hp_conn_close(c, "cannot set up the frame tags (libcrypto)");
      return -1;
    }
    c->authed = 1;
    uv_timer_stop(&c->timer);
    if (c->cb->on_auth) c->cb->on_auth(c);
  }
  return c->closing ? -1 : 0;
}

/* ---- reading -------------------------------------------------------- */

void hp_conn_set_place(struct hp_conn *c, uint16_t type, size_t pre,
                       void *(*place)(struct hp_conn *, const struct hp_frame_hdr *,
                                      const unsigned char *)) {
  if (c->place != place || c->place_pre != pre) c->nplace_types = 0;
  for (int i = 0; i < c->nplace_types; i++)
    if (c->place_types[i] == type) return;
  if (c->nplace_types == 4) return;
  c->place_types[c->nplace_types++] = type;
  c->place_pre = pre;
  c->place = place;
}

static int placed_type(const struct hp_conn *c, uint16_t type) {
  for (int i = 0; i < c->nplace_types; i++)
    if (c->place_types[i] == type) return 1;
  return 0;
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  struct hp_conn *c = h->data;
  size_t left;
  (void)hint;
  if (c->tag_phase) {
    *buf = uv_buf_init((char *)c->tag + c->tgot,
                       (unsigned)(HP_FRAME_TAG - c->tgot));
  } else if (c->hgot < HP_FRAME_HDR) {
    *buf = uv_buf_init((char *)c->hdr + c->hgot,
                       (unsigned)(HP_FRAME_HDR - c->hgot));
  } else if (c->dst) {
    left = c->h.len - c->pgot;
    *buf = uv_buf_init((char *)c->dst + (c->pgot - c->place_pre),
                       (unsigned)HC_MIN(left, (size_t)1 << 30));
  } else {
    left = (c->pre_phase ? c->place_pre : c->h.len) - c->pgot;
    *buf = uv_buf_init((char *)c->payload + c->pgot,
                       (unsigned)HC_MIN(left, (size_t)1 << 30));
  }
}

/* A whole frame is in: hands it on and gets ready for the next. */
static void frame_done(struct hp_conn *c) {
  c->hgot = 0;
  c->pgot = 0;
  if (!c->authed) {
    auth_frame(c);
    return;
  }
  int keep = 0;
  c->placed = c->dst;
  c->dst = NULL;
  int rc = c->cb->on_frame(c, &c->h, c->h.len ? c->payload : NULL, &keep);
  c->placed = NULL;
  if (keep) {
    c->payload = NULL;
    c->pcap = 0;
  }
  if (rc < 0) hp_conn_close(c, c->why[0] ? c->why : "protocol error");
}

/* Makes room for n payload bytes, keeping the first `keep` read. */
static int payload_room(struct hp_conn *c, size_t n, size_t keep) {
  if (n <= c->pcap) return 0;
  /* A large payload is never kept around once done with (a 16 MiB
   * buffer per idle connection would add up): see on_read(). */
  unsigned char *p = malloc(n);
  if (!p) {
    hp_conn_close(c, "out of memory");
    return -1;
  }
  if (keep) memcpy(p, c->payload, keep);
  free(c->payload);
  c->payload = p;
  c->pcap = n;
  return 0;
}

static int start_payload(struct hp_conn *c) {
  char why[200];
  if (hp_frame_parse(c->hdr, &c->h, why, sizeof why) < 0) {
    bad_data(c, "bad frame: %s", why);
    return -1;
  }
  if (!c->authed) {
    if (c->h.len > HP_AUTH_FRAME_MAX) {
      bad_data(c, "%s", "oversize frame before authentication");
      return -1;
    }
    if (c->h.type < HP_MSG_AUTH_HELLO || c->h.type > HP_MSG_AUTH_PROOF) {
      bad_data(c, "%s", "a message before authentication");
      return -1;
    }
  }
  c->pre_phase = c->authed && c->place && placed_type(c, c->h.type) &&
                 c->h.len > c->place_pre;
  return payload_room(c, c->pre_phase ? c->place_pre : c->h.len, 0);
}

/* The first bytes of a placed frame are in: where does the rest go? */
static int end_pre(struct hp_conn *c) {
  c->pre_phase = 0;
  c->dst = c->place(c, &c->h, c->payload);
  if (c->dst) return 0;
  return payload_room(c, c->h.len, c->place_pre);
}

void hp_conn_unplace(struct hp_conn *c) {
  if (!c->dst) return;
  c->dst = NULL;
  /* the bytes already placed are lost: the frame is only dropped now */
  if (payload_room(c, c->h.len, c->place_pre) < 0) return;
}

/* The current frame's tag is in: does it match? Returns 0 or -1 (the
 * connection is closing). */
static int check_tag(struct hp_conn *c) {
  int ok = tag_check(c->tag_rx, c->tag);
  if (ok < 0) {
    hp_conn_close(c, "cannot check a frame's tag (libcrypto)");
    return -1;
  }
  if (!ok) {
    bad_data(c, "%s", "a frame whose tag does not match: altered, injected, "
                      "replayed or reordered on the wire");
    return -1;
  }
  return 0;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  struct hp_conn *c = s->data;
  if (c->closing) return;
  if (n < 0) {
    hp_conn_close(c, n == UV_EOF ? "connection closed by the peer"
                                 : uv_strerror((int)n));
    return;
  }
  if (n == 0) return;
  c->last_rx = hc_now_ns();
  c->heard = 1;
  if (c->tag_phase) {
    c->tgot += (size_t)n;
    if (c->tgot < HP_FRAME_TAG) return;
    c->tag_phase = 0;
    if (check_tag(c) < 0) return;
    frame_done(c);
  } else if (c->hgot < HP_FRAME_HDR) {
    c->hgot += (size_t)n;
    /* Reject a stranger as soon as its first bytes show it. */
    static const unsigned char magic[4] = {'H', 'O', 'R', 'A'};
    if (memcmp(c->hdr, magic, HC_MIN(c->hgot, (size_t)4))) {
      bad_data(c, "%s", "bad frame: bad magic (not a hora peer)");
      return;
    }
    if (c->hgot < HP_FRAME_HDR) return;
    if (start_payload(c) < 0) return;
    if (c->authed && (c->tag_rx) &&
        tag_begin(c->tag_rx, c->seq_rx++, c->hdr) < 0) {
      hp_conn_close(c, "cannot check a frame's tag (libcrypto)");
      return;
    }
  } else {
    /* (decrypted in place before anyone reads it, placement included; the
     * tag is checked once the frame is whole, so what a read leaves in a
     * placed buffer may still be refused, and the link then ends) */
    size_t cov = c->authed && c->tag_rx ? covered(c, c->h.type, c->h.len) : 0;
    size_t take = c->pgot < cov ? HC_MIN((size_t)n, cov - c->pgot) : 0;
    if (take && tag_data(c, c->tag_rx, buf->base, buf->base, take) < 0) {
      hp_conn_close(c, "cannot check a frame's tag (libcrypto)");
      return;
    }
    c->pgot += (size_t)n;
    if (c->pre_phase && c->pgot == c->place_pre && end_pre(c) < 0) return;
  }
  if (c->hgot == HP_FRAME_HDR && c->pgot == c->h.len && !c->pre_phase &&
      !c->tag_phase && !c->closing) {
    if (c->authed && (c->tag_rx)) { /* its tag follows */
      c->tag_phase = 1;
      c->tgot = 0;
    } else {
      frame_done(c);
    }
  }
  if (c->pcap > KEEP_MAX && c->hgot == 0) {
    free(c->payload);
    c->payload = NULL;
    c->pcap = 0;
  }
}

void hp_conn_pause(struct hp_conn *c) {
  if (c->paused || c->closing || !c->reading) return;
  uv_read_stop((uv_stream_t *)&c->tcp);
  c->paused = 1;
}

void hp_conn_resume(struct hp_conn *c) {
  if (!c->paused || c->closing) return;
  c->paused = 0;
  c->last_rx = hc_now_ns();
  if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0)
    hp_conn_close(c, "cannot read");
}

/* ---- setting up ------------------------------------------------------- */

static struct hp_conn *conn_new(uv_loop_t *loop,
                                const unsigned char secret[HP_SECRET_LEN],
                                int role, uint8_t purpose,
                                const struct hp_conn_cb *cb, void *data) {
  struct hp_conn *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->cb = cb;
  c->data = data;
  c->connector = role == HP_AUTH_CONNECTOR;
  c->last_rx = hc_now_ns();
  if (secret) {
    hp_auth_init(&c->auth, role, purpose, secret);
    uv_tcp_init(loop, &c->tcp);
  } else { /* local: hp_auth_clear() leaves it unable to pass a handshake */
    hp_auth_clear(&c->auth);
    uv_pipe_init(loop, &c->pipe, 0);
    c->local = 1;
  }
  uv_timer_init(loop, &c->timer);
  c->tcp.data = c->timer.data = c;
  return c;
}

static void tune_socket(struct hp_conn *c) {
  uv_tcp_nodelay(&c->tcp, 1);
  int sz = SOCK_BUF;
  uv_send_buffer_size((uv_handle_t *)&c->tcp, &sz);
  sz = SOCK_BUF;
  uv_recv_buffer_size((uv_handle_t *)&c->tcp, &sz);
}

static void start_reading(struct hp_conn *c) {
  int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
  if (rc < 0) {
    fail(c, "cannot read: %s", uv_strerror(rc));
    return;
  }
  c->reading = 1;
  if (!c->authed)
    uv_timer_start(&c->timer, on_auth_timeout, HP_AUTH_TIMEOUT_MS, 0);
}

static void on_connect(uv_connect_t *req, int status) {
  struct hp_conn *c = req->data;
  free(req);
  if (c->closing) return;
  if (status < 0) {
    fail(c, "cannot connect: %s", uv_strerror(status));
    return;
  }
  c->connected = 1;
  c->last_rx = hc_now_ns();
  tune_socket(c);
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  if (hp_auth_start(&c->auth, &w) < 0) {
    hp_wbuf_free(&w);
    hp_conn_close(c, "cannot start the handshake");
    return;
  }
  auth_send(c, &w);
  hp_wbuf_free(&w);
  if (!c->closing) start_reading(c);
}

int hp_conn_connect(uv_loop_t *loop, const struct sockaddr *sa,
                    const unsigned char secret[HP_SECRET_LEN],
                    uint8_t purpose, const struct hp_conn_cb *cb, void *data,
                    struct hp_conn **out) {
  struct hp_conn *c =
      conn_new(loop, secret, HP_AUTH_CONNECTOR, purpose, cb, data);
  uv_connect_t *req = malloc(sizeof *req);
  if (!c || !req) {
    free(req);
    if (c) hp_conn_close(c, "out of memory");
    return UV_ENOMEM;
  }
  hp_addr_str(sa, c->peer, sizeof c->peer);
  req->data = c;
  int rc = uv_tcp_connect(req, &c->tcp, sa, on_connect);
  if (rc < 0) {
    free(req);
    c->cb = &no_cb;
    hp_conn_close(c, NULL);
    return rc;
  }
  /* The deadline covers connecting too. */
  uv_timer_start(&c->timer, on_auth_timeout, HP_AUTH_TIMEOUT_MS, 0);
  *out = c;
  return 0;
}

int hp_conn_accept(uv_stream_t *server,
                   const unsigned char secret[HP_SECRET_LEN], uint8_t purpose,
                   const struct hp_conn_cb *cb, void *data,
                   struct hp_conn **out) {
  struct hp_conn *c =
      conn_new(server->loop, secret, HP_AUTH_ACCEPTOR, purpose, cb, data);
  if (!c) return UV_ENOMEM;
  int rc = uv_accept(server, (uv_stream_t *)&c->tcp);
  if (rc < 0) {
    c->cb = &no_cb;
    hp_conn_close(c, NULL);
    return rc;
  }
  c->connected = 1;
  struct sockaddr_storage ss;
  int len = sizeof ss;
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0)
    hp_addr_str((struct sockaddr *)&ss, c->peer, sizeof c->peer);
  tune_socket(c);
  *out = c;
  start_reading(c);
  return 0;
}

int hp_conn_open_local(uv_loop_t *loop, int fd, const char *peer,
                       const struct hp_conn_cb *cb, void *data,
                       struct hp_conn **out) {
  struct hp_conn *c = conn_new(loop, NULL, HP_AUTH_CONNECTOR, 0, cb, data);
  if (!c) return UV_ENOMEM;
  int rc = uv_pipe_open(&c->pipe, fd);
  if (rc < 0) {
    c->cb = &no_cb;
    hp_conn_close(c, NULL);
    return rc;
  }
  hc_fmt(c->peer, sizeof c->peer, "%s", peer);
  c->connected = c->authed = 1;
  *out = c;
  start_reading(c);
  return 0;
}
