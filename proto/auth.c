/* auth.c -- the mutual challenge-response that opens every TCP connection
 * of a job (see auth.h for the frames and the MAC inputs).
 *
 * The code is a small state machine per end. Every frame is checked for
 * its type, request id and exact payload length before a byte of it is
 * read, and any error ends the handshake for good: a peer gets one try per
 * connection. HMAC, constant-time comparison and randomness all come from
 * libcrypto; nothing here is cryptography of its own. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "auth.h"
#include "common.h"

#define LABEL_ACCEPTOR "hora-auth-1 acceptor"
#define LABEL_CONNECTOR "hora-auth-1 connector"

#define HELLO_LEN (1 + HP_NONCE_LEN)
#define CHALLENGE_LEN (HP_NONCE_LEN + HP_MAC_LEN)
#define PROOF_LEN HP_MAC_LEN

/* The largest frame we send must fit what a peer buffers before it trusts
 * us. */
_Static_assert(HP_FRAME_HDR + CHALLENGE_LEN <= HP_AUTH_FRAME_MAX,
               "an AUTH frame exceeds HP_AUTH_FRAME_MAX");
_Static_assert(HP_MAC_LEN == 32, "HMAC-SHA256 gives 32 bytes");

enum {
  ST_START = 0,      /* connector: hp_auth_start not yet called */
  ST_WAIT_HELLO,     /* acceptor */
  ST_WAIT_CHALLENGE, /* connector, HELLO sent */
  ST_WAIT_PROOF,     /* acceptor, CHALLENGE sent */
  ST_DONE,           /* the peer proved it holds the secret */
  ST_FAILED,         /* an error ended the handshake (or it was cleared) */
};

int hp_random(void *buf, size_t n) {
  /* RAND_bytes takes an int; no caller asks for anywhere near that much,
   * but refuse rather than truncate. */
  if (n > (size_t)INT32_MAX) return HORA_EINVAL;
  if (n == 0) return 0;
  return RAND_bytes(buf, (int)n) == 1 ? 0 : HORA_EIO;
}

void hp_auth_init(struct hp_auth *a, int role, uint8_t purpose,
                  const unsigned char secret[HP_SECRET_LEN]) {
  memset(a, 0, sizeof *a);
  a->role = role;
  a->purpose = purpose;
  memcpy(a->secret, secret, HP_SECRET_LEN);
  if (role == HP_AUTH_CONNECTOR)
    a->state = ST_START;
  else if (role == HP_AUTH_ACCEPTOR)
    a->state = ST_WAIT_HELLO;
  else
    a->state = ST_FAILED; /* an unknown role can never succeed */
}

void hp_auth_clear(struct hp_auth *a) {
  OPENSSL_cleanse(a->secret, sizeof a->secret);
  OPENSSL_cleanse(a->nonce_c, sizeof a->nonce_c);
  OPENSSL_cleanse(a->nonce_s, sizeof a->nonce_s);
  /* A cleared object holds no secret, so it must not pass a handshake. */
  a->state = ST_FAILED;
}

static int valid_purpose(unsigned v) {
  return v == HP_AUTH_CONTROL || v == HP_AUTH_MESH || v == HP_AUTH_SERVICE;
}

static const char *purpose_name(unsigned v) {
  return v == HP_AUTH_CONTROL ? "control"
         : v == HP_AUTH_MESH  ? "mesh"
         : v == HP_AUTH_SERVICE ? "service"
                                : "?";
}

/* Marks the handshake failed and says why; returns rc. */
static int fail(struct hp_auth *a, int rc, char *why, size_t whylen,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int fail(struct hp_auth *a, int rc, char *why, size_t whylen,
                const char *fmt, ...) {
  a->state = ST_FAILED;
  if (why && whylen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
  }
  return rc;
}

/* mac = HMAC-SHA256(secret, label | purpose | nonce_c | nonce_s). Returns 0
 * or HORA_EIO. */
static int auth_mac(const struct hp_auth *a, const char *label,
                    unsigned char mac[HP_MAC_LEN]) {
  unsigned char in[sizeof LABEL_CONNECTOR + 1 + 2 * HP_NONCE_LEN];
  size_t n = strlen(label);
  memcpy(in, label, n);
  in[n++] = a->purpose;
  memcpy(in + n, a->nonce_c, HP_NONCE_LEN);
  n += HP_NONCE_LEN;
  memcpy(in + n, a->nonce_s, HP_NONCE_LEN);
  n += HP_NONCE_LEN;
  unsigned int maclen = 0;
  unsigned char *r =
      HMAC(EVP_sha256(), a->secret, HP_SECRET_LEN, in, n, mac, &maclen);
  return r && maclen == HP_MAC_LEN ? 0 : HORA_EIO;
}

/* Whether `mac` is the MAC under `label`, compared in constant time so a
 * peer learns nothing from how long a wrong guess takes. Returns 1, 0, or
 * HORA_EIO. */
static int auth_mac_ok(const struct hp_auth *a, const char *label,
                       const unsigned char *mac) {
  unsigned char want[HP_MAC_LEN];
  int rc = auth_mac(a, label, want);
  if (rc == 0) rc = CRYPTO_memcmp(want, mac, HP_MAC_LEN) == 0;
  OPENSSL_cleanse(want, sizeof want);
  return rc;
}

/* Fixed-size fields go on the wire raw, without msg.h's u32 length prefix:
 * their size is part of the protocol. */
static void put_raw(struct hp_wbuf *w, const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    hp_put_u8(w, p[i]);
}

/* Appends a frame of `type` whose payload is a | b (b may be empty). On
 * failure nothing is left in w. Returns 0 or HORA_ENOMEM / HORA_EINVAL. */
static int put_frame(struct hp_wbuf *w, uint16_t type, const unsigned char *a,
                     size_t na, const unsigned char *b, size_t nb) {
  if (w->err) return w->err;
  size_t before = w->len;
  hp_frame_begin(w, type, 0);
  put_raw(w, a, na);
  put_raw(w, b, nb);
  int rc = hp_frame_end(w);
  if (rc) w->len = before; /* keep the buffer's earlier frames whole */
  return rc;
}

int hp_auth_start(struct hp_auth *a, struct hp_wbuf *w) {
  if (a->role != HP_AUTH_CONNECTOR || a->state != ST_START ||
      !valid_purpose(a->purpose))
    return HORA_EINVAL;
  int rc = hp_random(a->nonce_c, HP_NONCE_LEN);
  if (rc == 0)
    rc = put_frame(w, HP_MSG_AUTH_HELLO, &a->purpose, 1, a->nonce_c,
                   HP_NONCE_LEN);
  a->state = rc == 0 ? ST_WAIT_CHALLENGE : ST_FAILED;
  return rc;
}

static const char *type_name(uint16_t t) {
  switch (t) {
  case HP_MSG_AUTH_HELLO:
    return "AUTH_HELLO";
  case HP_MSG_AUTH_CHALLENGE:
    return "AUTH_CHALLENGE";
  case HP_MSG_AUTH_PROOF:
    return "AUTH_PROOF";
  default:
    return "a non-auth frame";
  }
}

/* The checks every frame passes before its payload is read: the state
 * expects exactly this type, the request id is 0 and the length exact. */
static int check_frame(struct hp_auth *a, const struct hp_frame_hdr *h,
                       uint16_t want_type, uint32_t want_len, char *why,
                       size_t whylen) {
  if (h->type != want_type)
    return fail(a, HORA_EPROTO, why, whylen,
                "auth: got %s (type %u), expected %s", type_name(h->type),
                h->type, type_name(want_type));
  if (h->reqid != 0)
    return fail(a, HORA_EPROTO, why, whylen, "auth: %s with request id %u",
                type_name(h->type), h->reqid);
  if (h->len != want_len)
    return fail(a, HORA_EPROTO, why, whylen,
                "auth: %s payload of %u bytes, expected %u", type_name(h->type),
                h->len, want_len);
  return 0;
}

/* Acceptor: a HELLO gives the connector's nonce; answer with ours and the
 * proof that we hold the secret. */
static int on_hello(struct hp_auth *a, const unsigned char *p,
                    struct hp_wbuf *w, char *why, size_t whylen) {
  if (!valid_purpose(p[0]))
    return fail(a, HORA_EPROTO, why, whylen, "auth: unknown purpose %u", p[0]);
  if (p[0] != a->purpose)
    return fail(a, HORA_EPROTO, why, whylen,
                "auth: a %s connection on a %s port", purpose_name(p[0]),
                purpose_name(a->purpose));
  memcpy(a->nonce_c, p + 1, HP_NONCE_LEN);
  unsigned char mac[HP_MAC_LEN];
  int rc = hp_random(a->nonce_s, HP_NONCE_LEN);
  if (rc == 0) rc = auth_mac(a, LABEL_ACCEPTOR, mac);
  if (rc == 0)
    rc = put_frame(w, HP_MSG_AUTH_CHALLENGE, a->nonce_s, HP_NONCE_LEN, mac,
                   HP_MAC_LEN);
  if (rc)
    return fail(a, rc, why, whylen, "auth: cannot answer: %s",
                hora_strerror(rc));
  a->state = ST_WAIT_PROOF;
  return 0;
}

/* Connector: check the acceptor's MAC before sending anything that
 * depends on the secret, then prove ourselves. */
static int on_challenge(struct hp_auth *a, const unsigned char *p,
                        struct hp_wbuf *w, char *why, size_t whylen) {
  memcpy(a->nonce_s, p, HP_NONCE_LEN);
  int ok = auth_mac_ok(a, LABEL_ACCEPTOR, p + HP_NONCE_LEN);
  if (ok < 0) return fail(a, ok, why, whylen, "auth: HMAC failed");
  if (!ok)
    return fail(a, HORA_EAUTH, why, whylen,
                "wrong MAC: the peer does not hold this job's secret");
  unsigned char mac[HP_MAC_LEN];
  int rc = auth_mac(a, LABEL_CONNECTOR, mac);
  if (rc == 0) rc = put_frame(w, HP_MSG_AUTH_PROOF, mac, HP_MAC_LEN, NULL, 0);
  OPENSSL_cleanse(mac, sizeof mac);
  if (rc)
    return fail(a, rc, why, whylen, "auth: cannot send proof: %s",
                hora_strerror(rc));
  a->state = ST_DONE;
  return 1;
}

/* Acceptor: the connector's MAC over our fresh nonce is the only thing
 * that lets it in. */
static int on_proof(struct hp_auth *a, const unsigned char *p, char *why,
                    size_t whylen) {
  int ok = auth_mac_ok(a, LABEL_CONNECTOR, p);
  if (ok < 0) return fail(a, ok, why, whylen, "auth: HMAC failed");
  if (!ok)
    return fail(a, HORA_EAUTH, why, whylen,
                "wrong MAC: the peer does not hold this job's secret");
  a->state = ST_DONE;
  return 1;
}

int hp_auth_step(struct hp_auth *a, const struct hp_frame_hdr *h,
                 const unsigned char *p, struct hp_wbuf *w, char *why,
                 size_t whylen) {
  int rc;
  switch (a->state) {
  case ST_WAIT_HELLO:
    rc = check_frame(a, h, HP_MSG_AUTH_HELLO, HELLO_LEN, why, whylen);
    return rc ? rc : on_hello(a, p, w, why, whylen);
  case ST_WAIT_CHALLENGE:
    rc = check_frame(a, h, HP_MSG_AUTH_CHALLENGE, CHALLENGE_LEN, why, whylen);
    return rc ? rc : on_challenge(a, p, w, why, whylen);
  case ST_WAIT_PROOF:
    rc = check_frame(a, h, HP_MSG_AUTH_PROOF, PROOF_LEN, why, whylen);
    return rc ? rc : on_proof(a, p, why, whylen);
  case ST_START:
    return fail(a, HORA_EPROTO, why, whylen,
                "auth: got %s before our AUTH_HELLO was sent",
                type_name(h->type));
  default:
    /* Done, failed, cleared or an unknown role: a frame now is either a
     * caller's bug or a peer talking past the handshake. */
    return fail(a, HORA_EPROTO, why, whylen,
                "auth: got %s after the handshake ended", type_name(h->type));
  }
}

void hp_hex(const unsigned char *p, size_t n, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[p[i] >> 4];
    out[2 * i + 1] = digits[p[i] & 15];
  }
  out[2 * n] = '\0';
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int hp_unhex(const char *s, unsigned char *p, size_t n) {
  if (!s) return -1;
  /* Validate everything first so that a bad string leaves p untouched. */
  for (size_t i = 0; i < 2 * n; i++)
    if (hex_digit(s[i]) < 0) return -1; /* also stops at an early NUL */
  if (s[2 * n] != '\0') return -1;
  for (size_t i = 0; i < n; i++)
    p[i] = (unsigned char)(hex_digit(s[2 * i]) << 4 | hex_digit(s[2 * i + 1]));
  return 0;
}
