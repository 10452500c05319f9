/* test_auth.c -- the mutual challenge-response of proto/auth.h: complete
 * handshakes in memory (every frame through hp_decoder, as off a socket),
 * known-answer MACs that pin the wire format, wrong secrets on either side,
 * replay, reflection, purposes, every wrong payload length, frames out of
 * order, a fixed-seed fuzz loop (run it under ASan), randomness and hex. */
#include <stdint.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "auth.h"
#include "common.h"
#include "msg.h"
#include "munge.h"
#include "testlib.h"

#define HELLO_LEN (1 + HP_NONCE_LEN)
#define CHAL_LEN (HP_NONCE_LEN + HP_MAC_LEN)
#define PROOF_LEN HP_MAC_LEN

/* ---- helpers ------------------------------------------------------------- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng >> 33);
}

static const unsigned char secret_a[HP_SECRET_LEN] = {
    0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb,
    0xcc, 0xdd, 0xee, 0xff, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06,
    0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10};

/* secret_a with its last bit flipped: as near as a wrong secret gets. */
static void near_secret(unsigned char out[HP_SECRET_LEN]) {
  memcpy(out, secret_a, HP_SECRET_LEN);
  out[HP_SECRET_LEN - 1] ^= 1;
}

/* Feeds every frame in `in` to `to` through a decoder, as a socket would
 * deliver them, stopping at the first that does not return 0; replies go
 * to `reply`. Empties `in`. Returns the last hp_auth_step result, or -9999
 * when `in` held no whole frame. */
static int deliver(struct hp_auth *to, struct hp_wbuf *in,
                   struct hp_wbuf *reply, char *why, size_t whylen) {
  struct hp_decoder d;
  hp_decoder_init(&d);
  CHECK_EQ_INT(hp_decoder_feed(&d, in->data, in->len), 0);
  hp_wbuf_reset(in);
  int rc = -9999;
  struct hp_frame_hdr h;
  const unsigned char *p;
  char dwhy[128] = "";
  int got;
  while ((got = hp_decoder_next(&d, &h, &p, dwhy, sizeof dwhy)) == 1) {
    rc = hp_auth_step(to, &h, p, reply, why, whylen);
    if (rc != 0) break;
  }
  CHECK(got >= 0);
  hp_decoder_free(&d);
  return rc;
}

/* Builds one frame of any type, request id and payload, and delivers it. */
static int feed(struct hp_auth *to, uint16_t type, uint32_t reqid,
                const unsigned char *payload, size_t n, struct hp_wbuf *reply,
                char *why, size_t whylen) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_frame_begin(&w, type, reqid);
  for (size_t i = 0; i < n; i++)
    hp_put_u8(&w, payload[i]);
  CHECK_EQ_INT(hp_frame_end(&w), 0);
  int rc = deliver(to, &w, reply, why, whylen);
  hp_wbuf_free(&w);
  return rc;
}

/* Checks that w holds exactly one frame of `type`, request id 0 and `len`
 * payload bytes, parsed by the decoder; copies the payload out (when out is
 * not NULL) and empties w. Returns 1 when it does. */
static int take(struct hp_wbuf *w, uint16_t type, unsigned char *out,
                size_t len) {
  struct hp_decoder d;
  struct hp_frame_hdr h;
  const unsigned char *p = NULL;
  char why[128] = "";
  int ok = 1;
  CHECK_EQ_INT(w->err, 0);
  CHECK_EQ_INT(w->len, HP_FRAME_HDR + len);
  ok &= w->len == HP_FRAME_HDR + len;
  hp_decoder_init(&d);
  hp_decoder_feed(&d, w->data, w->len);
  int got = hp_decoder_next(&d, &h, &p, why, sizeof why);
  CHECK_EQ_INT(got, 1);
  if (got == 1) {
    CHECK_EQ_INT(h.type, type);
    CHECK_EQ_INT(h.reqid, 0);
    CHECK_EQ_INT(h.len, len);
    ok &= h.type == type && h.reqid == 0 && h.len == len;
    if (ok && out) memcpy(out, p, len);
  } else {
    ok = 0;
  }
  CHECK_EQ_INT(hp_decoder_next(&d, &h, &p, why, sizeof why), 0);
  hp_decoder_free(&d);
  hp_wbuf_reset(w);
  return ok;
}

/* A connector and an acceptor, run up to a point of the handshake. */
struct pair {
  struct hp_auth c, a;
  unsigned char hello[HELLO_LEN], chal[CHAL_LEN], proof[PROOF_LEN];
  struct hp_wbuf w;
  char why[160];
};

enum { UPTO_HELLO = 1, UPTO_CHALLENGE, UPTO_PROOF };

/* UPTO_HELLO: the connector sent HELLO (hello[] holds it), the acceptor is
 * fresh. UPTO_CHALLENGE: the acceptor answered (chal[]) and waits for the
 * proof; the connector waits for the challenge. UPTO_PROOF: the connector
 * proved itself (proof[]); the acceptor still waits for the proof. */
static void pair_begin(struct pair *s, int upto, uint8_t purpose) {
  memset(s, 0, sizeof *s);
  hp_wbuf_init(&s->w);
  hp_auth_init(&s->c, HP_AUTH_CONNECTOR, purpose, secret_a);
  hp_auth_init(&s->a, HP_AUTH_ACCEPTOR, purpose, secret_a);
  CHECK_EQ_INT(hp_auth_start(&s->c, &s->w), 0);
  struct hp_wbuf copy; /* take() empties w; keep the bytes to deliver */
  hp_wbuf_init(&copy);
  for (size_t i = 0; i < s->w.len; i++)
    hp_put_u8(&copy, s->w.data[i]);
  CHECK(take(&s->w, HP_MSG_AUTH_HELLO, s->hello, HELLO_LEN));
  if (upto >= UPTO_CHALLENGE) {
    CHECK_EQ_INT(deliver(&s->a, &copy, &s->w, s->why, sizeof s->why), 0);
    for (size_t i = 0; i < s->w.len; i++)
      hp_put_u8(&copy, s->w.data[i]);
    CHECK(take(&s->w, HP_MSG_AUTH_CHALLENGE, s->chal, CHAL_LEN));
  }
  if (upto >= UPTO_PROOF) {
    CHECK_EQ_INT(deliver(&s->c, &copy, &s->w, s->why, sizeof s->why), 1);
    CHECK(take(&s->w, HP_MSG_AUTH_PROOF, s->proof, PROOF_LEN));
  }
  hp_wbuf_free(&copy);
}

static void pair_end(struct pair *s) {
  hp_auth_clear(&s->c);
  hp_auth_clear(&s->a);
  hp_wbuf_free(&s->w);
}

/* A whole handshake between two ends configured as given. Fills the
 * results of both sides and, where given, the raw HELLO and PROOF frames
 * as they went on the wire. */
struct run {
  int rc_hello;       /* acceptor's step on HELLO */
  int rc_c;           /* connector's step on CHALLENGE */
  int rc_a;           /* acceptor's step on PROOF (or -9999 if none was sent) */
  size_t proof_bytes; /* what the connector sent after the challenge */
  char why_c[160], why_a[160];
  unsigned char hello_frame[HP_FRAME_HDR + HELLO_LEN];
  unsigned char proof_frame[HP_FRAME_HDR + PROOF_LEN];
};

static void handshake(const unsigned char *sec_c, uint8_t pur_c,
                      const unsigned char *sec_a, uint8_t pur_a,
                      struct run *r) {
  struct hp_auth c, a;
  struct hp_wbuf c2a, a2c;
  memset(r, 0, sizeof *r);
  r->rc_a = -9999;
  hp_wbuf_init(&c2a);
  hp_wbuf_init(&a2c);
  hp_auth_init(&c, HP_AUTH_CONNECTOR, pur_c, sec_c);
  hp_auth_init(&a, HP_AUTH_ACCEPTOR, pur_a, sec_a);
  CHECK_EQ_INT(hp_auth_start(&c, &c2a), 0);
  CHECK_EQ_INT(c2a.len, sizeof r->hello_frame);
  memcpy(r->hello_frame, c2a.data, sizeof r->hello_frame);
  r->rc_hello = deliver(&a, &c2a, &a2c, r->why_a, sizeof r->why_a);
  if (r->rc_hello == 0) {
    r->rc_c = deliver(&c, &a2c, &c2a, r->why_c, sizeof r->why_c);
    r->proof_bytes = c2a.len;
    if (c2a.len == sizeof r->proof_frame)
      memcpy(r->proof_frame, c2a.data, sizeof r->proof_frame);
    if (c2a.len) r->rc_a = deliver(&a, &c2a, &a2c, r->why_a, sizeof r->why_a);
    CHECK_EQ_INT(a2c.len, 0); /* the acceptor never answers a proof */
  }
  hp_auth_clear(&c);
  hp_auth_clear(&a);
  hp_wbuf_free(&c2a);
  hp_wbuf_free(&a2c);
}

static int contains(const char *s, const char *needle) {
  return s && strstr(s, needle) != NULL;
}

/* A reason is one non-empty line. */
static int one_line(const char *s) {
  return s && s[0] && !strchr(s, '\n');
}

/* ---- complete handshakes ------------------------------------------------- */

static void test_handshake_ok(void) {
  const uint8_t purposes[] = {HP_AUTH_CONTROL, HP_AUTH_MESH};
  for (size_t i = 0; i < HC_ARRAY_SIZE(purposes); i++) {
    struct run r;
    handshake(secret_a, purposes[i], secret_a, purposes[i], &r);
    CHECK_EQ_INT(r.rc_hello, 0);
    CHECK_EQ_INT(r.rc_c, 1);
    CHECK_EQ_INT(r.proof_bytes, HP_FRAME_HDR + PROOF_LEN);
    CHECK_EQ_INT(r.rc_a, 1);
    CHECK_EQ_INT(r.hello_frame[HP_FRAME_HDR], purposes[i]);
  }
  /* Both ends agree on both nonces, and the frames are as auth.h says. */
  struct pair s;
  pair_begin(&s, UPTO_PROOF, HP_AUTH_MESH);
  CHECK_EQ_INT(s.hello[0], HP_AUTH_MESH);
  CHECK(!memcmp(s.hello + 1, s.c.nonce_c, HP_NONCE_LEN));
  CHECK(!memcmp(s.a.nonce_c, s.c.nonce_c, HP_NONCE_LEN));
  CHECK(!memcmp(s.chal, s.a.nonce_s, HP_NONCE_LEN));
  CHECK(!memcmp(s.a.nonce_s, s.c.nonce_s, HP_NONCE_LEN));
  CHECK(memcmp(s.c.nonce_c, s.a.nonce_s, HP_NONCE_LEN) != 0);
  CHECK_EQ_INT(feed(&s.a, HP_MSG_AUTH_PROOF, 0, s.proof, PROOF_LEN, &s.w, s.why,
                    sizeof s.why),
               1);
  CHECK_EQ_INT(s.w.len, 0);
  pair_end(&s);
}

/* The same handshake with every byte arriving on its own, through one
 * long-lived decoder per direction. */
static void test_handshake_bytewise(void) {
  struct hp_auth c, a;
  struct hp_wbuf c2a, a2c;
  struct hp_decoder dc, da; /* what c reads, what a reads */
  char why[160] = "", dwhy[128] = "";
  hp_wbuf_init(&c2a);
  hp_wbuf_init(&a2c);
  hp_decoder_init(&dc);
  hp_decoder_init(&da);
  hp_auth_init(&c, HP_AUTH_CONNECTOR, HP_AUTH_CONTROL, secret_a);
  hp_auth_init(&a, HP_AUTH_ACCEPTOR, HP_AUTH_CONTROL, secret_a);
  CHECK_EQ_INT(hp_auth_start(&c, &c2a), 0);
  int done_c = 0, done_a = 0, frames = 0;
  for (int round = 0; round < 4 && !(done_c && done_a); round++) {
    struct hp_frame_hdr h;
    const unsigned char *p;
    for (size_t i = 0; i < c2a.len; i++) {
      hp_decoder_feed(&da, c2a.data + i, 1);
      while (hp_decoder_next(&da, &h, &p, dwhy, sizeof dwhy) == 1) {
        frames++;
        int rc = hp_auth_step(&a, &h, p, &a2c, why, sizeof why);
        CHECK(rc >= 0);
        done_a |= rc == 1;
      }
    }
    hp_wbuf_reset(&c2a);
    for (size_t i = 0; i < a2c.len; i++) {
      hp_decoder_feed(&dc, a2c.data + i, 1);
      while (hp_decoder_next(&dc, &h, &p, dwhy, sizeof dwhy) == 1) {
        frames++;
        int rc = hp_auth_step(&c, &h, p, &c2a, why, sizeof why);
        CHECK(rc >= 0);
        done_c |= rc == 1;
      }
    }
    hp_wbuf_reset(&a2c);
  }
  CHECK(done_c);
  CHECK(done_a);
  CHECK_EQ_INT(frames, 3);
  hp_auth_clear(&c);
  hp_auth_clear(&a);
  hp_decoder_free(&dc);
  hp_decoder_free(&da);
  hp_wbuf_free(&c2a);
  hp_wbuf_free(&a2c);
}

/* Fixed inputs, MACs computed elsewhere (Python's hmac module): they pin
 * the labels, the field order and the frame layout, so two builds of hora
 * keep talking to each other. */
static const char *kat_mac_s[] = {
    "933687ef3636f4931b4aad5ff091390aff1aabe7fac0ccb62dfcdd3732bec95b",
    "3e5221e5d3bab34fd043cf87c0038a8a96522eed131f542dc43bd72979e4080e"};
static const char *kat_mac_c[] = {
    "cae5333d0dedf8709d43542dd3738f240abd792f7b00e5fe721d714d55e60d85",
    "d05f81defc1f04b7c03d1d714b3d6f39348a5999f8ab9f54af87e90d30ed728d"};

static void test_known_answers(void) {
  unsigned char secret[HP_SECRET_LEN], nc[HP_NONCE_LEN], ns[HP_NONCE_LEN];
  for (int i = 0; i < HP_SECRET_LEN; i++)
    secret[i] = (unsigned char)i;
  for (int i = 0; i < HP_NONCE_LEN; i++)
    nc[i] = (unsigned char)(0x40 + i);
  for (int i = 0; i < HP_NONCE_LEN; i++)
    ns[i] = (unsigned char)(0x80 + i);
  for (int k = 0; k < 2; k++) {
    uint8_t purpose = (uint8_t)(k + 1);
    unsigned char chal[CHAL_LEN], mac_c[HP_MAC_LEN], proof[PROOF_LEN];
    char why[160] = "", hex[2 * HP_MAC_LEN + 1];
    struct hp_wbuf w;
    hp_wbuf_init(&w);
    memcpy(chal, ns, HP_NONCE_LEN);
    CHECK_EQ_INT(hp_unhex(kat_mac_s[k], chal + HP_NONCE_LEN, HP_MAC_LEN), 0);
    CHECK_EQ_INT(hp_unhex(kat_mac_c[k], mac_c, HP_MAC_LEN), 0);

    /* Connector: its nonce replaced by the fixed one after the HELLO. */
    struct hp_auth c;
    hp_auth_init(&c, HP_AUTH_CONNECTOR, purpose, secret);
    CHECK_EQ_INT(hp_auth_start(&c, &w), 0);
    hp_wbuf_reset(&w);
    memcpy(c.nonce_c, nc, HP_NONCE_LEN);
    CHECK_EQ_INT(
        feed(&c, HP_MSG_AUTH_CHALLENGE, 0, chal, CHAL_LEN, &w, why, sizeof why),
        1);
    CHECK(take(&w, HP_MSG_AUTH_PROOF, proof, PROOF_LEN));
    hp_hex(proof, PROOF_LEN, hex);
    CHECK_EQ_STR(hex, kat_mac_c[k]);
    hp_auth_clear(&c);

    /* Acceptor: given the fixed HELLO; its nonce replaced after it
     * answered, the known proof opens it. */
    struct hp_auth a;
    unsigned char hello[HELLO_LEN], got[CHAL_LEN];
    hello[0] = purpose;
    memcpy(hello + 1, nc, HP_NONCE_LEN);
    hp_auth_init(&a, HP_AUTH_ACCEPTOR, purpose, secret);
    CHECK_EQ_INT(
        feed(&a, HP_MSG_AUTH_HELLO, 0, hello, HELLO_LEN, &w, why, sizeof why),
        0);
    CHECK(take(&w, HP_MSG_AUTH_CHALLENGE, got, CHAL_LEN));
    CHECK(!memcmp(got, a.nonce_s, HP_NONCE_LEN));
    memcpy(a.nonce_s, ns, HP_NONCE_LEN);
    CHECK_EQ_INT(
        feed(&a, HP_MSG_AUTH_PROOF, 0, mac_c, PROOF_LEN, &w, why, sizeof why),
        1);
    CHECK_EQ_INT(w.len, 0);
    hp_auth_clear(&a);
    hp_wbuf_free(&w);
  }
}

/* ---- wrong secrets, replay, reflection ----------------------------------- */

/* The MAC a peer holding `secret` would send, made here with libcrypto
 * directly (not through auth.c), to play a peer that skips its own
 * checks. */
static void mac_of(const unsigned char *secret, const char *label,
                   uint8_t purpose, const unsigned char *nc,
                   const unsigned char *ns, unsigned char out[HP_MAC_LEN]) {
  unsigned char in[64 + 1 + 2 * HP_NONCE_LEN];
  size_t n = strlen(label);
  memcpy(in, label, n);
  in[n++] = purpose;
  memcpy(in + n, nc, HP_NONCE_LEN);
  memcpy(in + n + HP_NONCE_LEN, ns, HP_NONCE_LEN);
  n += 2 * HP_NONCE_LEN;
  unsigned int len = 0;
  CHECK(HMAC(EVP_sha256(), secret, HP_SECRET_LEN, in, n, out, &len) != NULL);
  CHECK_EQ_INT(len, HP_MAC_LEN);
}

static void test_wrong_secret(void) {
  unsigned char other[HP_SECRET_LEN];
  near_secret(other);
  struct run r;
  /* The connector lacks the secret. The MAC is symmetric, so it is the
   * first to notice: the acceptor's MAC does not check out under its
   * secret, and it refuses the challenge without sending a proof. */
  handshake(other, HP_AUTH_CONTROL, secret_a, HP_AUTH_CONTROL, &r);
  CHECK_EQ_INT(r.rc_hello, 0);
  CHECK_EQ_INT(r.rc_c, HORA_EAUTH);
  CHECK_EQ_INT(r.proof_bytes, 0);
  CHECK_EQ_INT(r.rc_a, -9999);
  CHECK(contains(r.why_c, "wrong MAC"));
  CHECK(one_line(r.why_c));

  /* The acceptor lacks the secret: the connector rejects its challenge
   * and sends no proof. */
  handshake(secret_a, HP_AUTH_MESH, other, HP_AUTH_MESH, &r);
  CHECK_EQ_INT(r.rc_hello, 0);
  CHECK_EQ_INT(r.rc_c, HORA_EAUTH);
  CHECK_EQ_INT(r.proof_bytes, 0);
  CHECK_EQ_INT(r.rc_a, -9999);
  CHECK(contains(r.why_c, "wrong MAC"));

  /* A connector with the wrong secret that skips its check and sends a
   * proof anyway is refused by the acceptor. First the control: the same
   * forgery with the right secret passes, so mac_of is right and the
   * refusal below is about the secret alone. */
  const uint8_t purposes[] = {HP_AUTH_CONTROL, HP_AUTH_MESH};
  for (size_t i = 0; i < HC_ARRAY_SIZE(purposes); i++) {
    struct pair s;
    unsigned char proof[HP_MAC_LEN];
    pair_begin(&s, UPTO_CHALLENGE, purposes[i]);
    mac_of(secret_a, "hora-auth-1 connector", purposes[i], s.a.nonce_c,
           s.a.nonce_s, proof);
    CHECK_EQ_INT(feed(&s.a, HP_MSG_AUTH_PROOF, 0, proof, PROOF_LEN, &s.w, s.why,
                      sizeof s.why),
                 1);
    pair_end(&s);

    pair_begin(&s, UPTO_CHALLENGE, purposes[i]);
    mac_of(other, "hora-auth-1 connector", purposes[i], s.a.nonce_c,
           s.a.nonce_s, proof);
    CHECK_EQ_INT(feed(&s.a, HP_MSG_AUTH_PROOF, 0, proof, PROOF_LEN, &s.w, s.why,
                      sizeof s.why),
                 HORA_EAUTH);
    CHECK(contains(s.why, "wrong MAC"));
    CHECK(one_line(s.why));
    CHECK_EQ_INT(s.w.len, 0);
    pair_end(&s);
  }
}

static void test_replay(void) {
  struct run r;
  handshake(secret_a, HP_AUTH_CONTROL, secret_a, HP_AUTH_CONTROL, &r);
  CHECK_EQ_INT(r.rc_a, 1);
  /* An eavesdropper replays the HELLO and the PROOF to a fresh acceptor. */
  struct hp_auth a;
  struct hp_wbuf in, out;
  char why[160] = "";
  hp_wbuf_init(&in);
  hp_wbuf_init(&out);
  hp_auth_init(&a, HP_AUTH_ACCEPTOR, HP_AUTH_CONTROL, secret_a);
  for (size_t i = 0; i < sizeof r.hello_frame; i++)
    hp_put_u8(&in, r.hello_frame[i]);
  CHECK_EQ_INT(deliver(&a, &in, &out, why, sizeof why), 0);
  CHECK(take(&out, HP_MSG_AUTH_CHALLENGE, NULL, CHAL_LEN));
  for (size_t i = 0; i < sizeof r.proof_frame; i++)
    hp_put_u8(&in, r.proof_frame[i]);
  CHECK_EQ_INT(deliver(&a, &in, &out, why, sizeof why), HORA_EAUTH);
  CHECK(contains(why, "wrong MAC"));
  CHECK_EQ_INT(out.len, 0);
  hp_auth_clear(&a);

  /* Both frames in one read, as a replaying peer would send them: the
   * acceptor answers the HELLO and refuses the PROOF. */
  hp_auth_init(&a, HP_AUTH_ACCEPTOR, HP_AUTH_CONTROL, secret_a);
  for (size_t i = 0; i < sizeof r.hello_frame; i++)
    hp_put_u8(&in, r.hello_frame[i]);
  for (size_t i = 0; i < sizeof r.proof_frame; i++)
    hp_put_u8(&in, r.proof_frame[i]);
  CHECK_EQ_INT(deliver(&a, &in, &out, why, sizeof why), HORA_EAUTH);
  hp_auth_clear(&a);

  /* Two acceptors answering one HELLO choose different nonces. */
  struct pair s1, s2;
  pair_begin(&s1, UPTO_CHALLENGE, HP_AUTH_MESH);
  pair_begin(&s2, UPTO_CHALLENGE, HP_AUTH_MESH);
  CHECK(memcmp(s1.chal, s2.chal, CHAL_LEN) != 0);
  pair_end(&s1);
  pair_end(&s2);
  hp_wbuf_free(&in);
  hp_wbuf_free(&out);
}

static void test_reflection(void) {
  /* The acceptor's own MAC, sent back as the proof, is refused: the labels
   * differ. */
  struct pair s;
  pair_begin(&s, UPTO_CHALLENGE, HP_AUTH_CONTROL);
  CHECK_EQ_INT(feed(&s.a, HP_MSG_AUTH_PROOF, 0, s.chal + HP_NONCE_LEN,
                    HP_MAC_LEN, &s.w, s.why, sizeof s.why),
               HORA_EAUTH);
  CHECK(contains(s.why, "wrong MAC"));
  pair_end(&s);

  /* An attacker opens a second connection to the same acceptor, sending
   * the acceptor's nonce as its own, hoping the answer is the proof the
   * first connection needs: the label and the fresh nonce_s spoil it. */
  pair_begin(&s, UPTO_CHALLENGE, HP_AUTH_CONTROL);
  struct hp_auth a2;
  unsigned char hello[HELLO_LEN], chal2[CHAL_LEN];
  hello[0] = HP_AUTH_CONTROL;
  memcpy(hello + 1, s.a.nonce_s, HP_NONCE_LEN);
  hp_auth_init(&a2, HP_AUTH_ACCEPTOR, HP_AUTH_CONTROL, secret_a);
  CHECK_EQ_INT(feed(&a2, HP_MSG_AUTH_HELLO, 0, hello, HELLO_LEN, &s.w, s.why,
                    sizeof s.why),
               0);
  CHECK(take(&s.w, HP_MSG_AUTH_CHALLENGE, chal2, CHAL_LEN));
  CHECK_EQ_INT(feed(&s.a, HP_MSG_AUTH_PROOF, 0, chal2 + HP_NONCE_LEN,
                    HP_MAC_LEN, &s.w, s.why, sizeof s.why),
               HORA_EAUTH);
  hp_auth_clear(&a2);
  pair_end(&s);

  /* A connector handed its own HELLO's nonce back with a MAC under the
   * connector label (what it would itself send) refuses it. */
  pair_begin(&s, UPTO_PROOF, HP_AUTH_MESH);
  struct hp_auth c2;
  unsigned char chal[CHAL_LEN];
  hp_auth_init(&c2, HP_AUTH_CONNECTOR, HP_AUTH_MESH, secret_a);
  CHECK_EQ_INT(hp_auth_start(&c2, &s.w), 0);
  hp_wbuf_reset(&s.w);
  memcpy(c2.nonce_c, s.c.nonce_c, HP_NONCE_LEN);
  memcpy(chal, s.c.nonce_s, HP_NONCE_LEN);
  memcpy(chal + HP_NONCE_LEN, s.proof, HP_MAC_LEN);
  CHECK_EQ_INT(feed(&c2, HP_MSG_AUTH_CHALLENGE, 0, chal, CHAL_LEN, &s.w, s.why,
                    sizeof s.why),
               HORA_EAUTH);
  CHECK_EQ_INT(s.w.len, 0);
  hp_auth_clear(&c2);
  pair_end(&s);
}

/* ---- purposes ------------------------------------------------------------ */

static void test_purpose(void) {
  struct run r;
  /* A mesh connection on a control port and the other way round. */
  handshake(secret_a, HP_AUTH_MESH, secret_a, HP_AUTH_CONTROL, &r);
  CHECK_EQ_INT(r.rc_hello, HORA_EPROTO);
  CHECK(contains(r.why_a, "purpose") || contains(r.why_a, "port"));
  CHECK(one_line(r.why_a));
  handshake(secret_a, HP_AUTH_CONTROL, secret_a, HP_AUTH_MESH, &r);
  CHECK_EQ_INT(r.rc_hello, HORA_EPROTO);
  /* a service client (horad --service-client) at a job's port, and the
   * other way round */
  handshake(secret_a, HP_AUTH_SERVICE, secret_a, HP_AUTH_CONTROL, &r);
  CHECK_EQ_INT(r.rc_hello, HORA_EPROTO);
  CHECK(contains(r.why_a, "purpose") || contains(r.why_a, "port"));
  handshake(secret_a, HP_AUTH_MESH, secret_a, HP_AUTH_SERVICE, &r);
  CHECK_EQ_INT(r.rc_hello, HORA_EPROTO);

  /* Unknown purpose bytes, and no reply to any of them. */
  const unsigned bad[] = {0, 4, 0x81, 255};
  for (size_t i = 0; i < HC_ARRAY_SIZE(bad); i++) {
    struct pair s;
    pair_begin(&s, UPTO_HELLO, HP_AUTH_CONTROL);
    s.hello[0] = (unsigned char)bad[i];
    CHECK_EQ_INT(feed(&s.a, HP_MSG_AUTH_HELLO, 0, s.hello, HELLO_LEN, &s.w,
                      s.why, sizeof s.why),
                 HORA_EPROTO);
    CHECK(contains(s.why, "purpose"));
    CHECK_EQ_INT(s.w.len, 0);
    pair_end(&s);
  }

  /* The purpose is under the MAC: changed in transit to suit the acceptor,
   * it makes the connector refuse the challenge. */
  struct pair s;
  pair_begin(&s, UPTO_HELLO, HP_AUTH_MESH);
  struct hp_auth a;
  hp_auth_init(&a, HP_AUTH_ACCEPTOR, HP_AUTH_CONTROL, secret_a);
  s.hello[0] = HP_AUTH_CONTROL;
  CHECK_EQ_INT(feed(&a, HP_MSG_AUTH_HELLO, 0, s.hello, HELLO_LEN, &s.w, s.why,
                    sizeof s.why),
               0);
  CHECK(take(&s.w, HP_MSG_AUTH_CHALLENGE, s.chal, CHAL_LEN));
  CHECK_EQ_INT(feed(&s.c, HP_MSG_AUTH_CHALLENGE, 0, s.chal, CHAL_LEN, &s.w,
                    s.why, sizeof s.why),
               HORA_EAUTH);
  CHECK_EQ_INT(s.w.len, 0);
  hp_auth_clear(&a);
  pair_end(&s);

  /* A connector set up with no valid purpose cannot start. */
  struct hp_auth c;
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_auth_init(&c, HP_AUTH_CONNECTOR, 7, secret_a);
  CHECK_EQ_INT(hp_auth_start(&c, &w), HORA_EINVAL);
  CHECK_EQ_INT(w.len, 0);
  hp_wbuf_free(&w);
}

/* ---- lengths ------------------------------------------------------------- */

/* Feeds the frame `type` to the end of a pair waiting for it, its payload
 * `good` cut or padded to every length but the right one up to
 * HP_AUTH_FRAME_MAX: every one is a protocol error with no reply. */
static void lengths_of(int upto, uint16_t type, size_t goodlen) {
  for (size_t n = 0; n <= HP_AUTH_FRAME_MAX; n++) {
    if (n == goodlen) continue;
    struct pair s;
    pair_begin(&s, upto, HP_AUTH_CONTROL);
    unsigned char buf[HP_AUTH_FRAME_MAX];
    const unsigned char *good = type == HP_MSG_AUTH_HELLO       ? s.hello
                                : type == HP_MSG_AUTH_CHALLENGE ? s.chal
                                                                : s.proof;
    for (size_t i = 0; i < n; i++)
      buf[i] = i < goodlen ? good[i] : (unsigned char)rnd();
    struct hp_auth *to = type == HP_MSG_AUTH_CHALLENGE ? &s.c : &s.a;
    int rc = feed(to, type, 0, buf, n, &s.w, s.why, sizeof s.why);
    CHECK_EQ_INT(rc, HORA_EPROTO);
    CHECK_EQ_INT(s.w.len, 0);
    if (n == goodlen + 1 || n + 1 == goodlen) {
      CHECK(contains(s.why, "bytes"));
      CHECK(one_line(s.why));
    }
    /* One try per connection: even the right frame is refused now. */
    if (n == 0)
      CHECK_EQ_INT(feed(to, type, 0, good, goodlen, &s.w, s.why, sizeof s.why),
                   HORA_EPROTO);
    pair_end(&s);
  }
}

static void test_lengths(void) {
  lengths_of(UPTO_HELLO, HP_MSG_AUTH_HELLO, HELLO_LEN);
  lengths_of(UPTO_CHALLENGE, HP_MSG_AUTH_CHALLENGE, CHAL_LEN);
  lengths_of(UPTO_PROOF, HP_MSG_AUTH_PROOF, PROOF_LEN);
  /* A frame whose request id is not 0 is refused too. */
  struct pair s;
  pair_begin(&s, UPTO_PROOF, HP_AUTH_MESH);
  CHECK_EQ_INT(feed(&s.a, HP_MSG_AUTH_PROOF, 1, s.proof, PROOF_LEN, &s.w, s.why,
                    sizeof s.why),
               HORA_EPROTO);
  pair_end(&s);
}

/* ---- order --------------------------------------------------------------- */

static void test_order(void) {
  struct pair s;
  unsigned char zero[CHAL_LEN] = {0};
  /* Acceptor: PROOF first, CHALLENGE, a non-auth frame, HELLO twice. */
  pair_begin(&s, UPTO_PROOF, HP_AUTH_CONTROL);
  struct hp_auth a;
  hp_auth_init(&a, HP_AUTH_ACCEPTOR, HP_AUTH_CONTROL, secret_a);
  CHECK_EQ_INT(feed(&a, HP_MSG_AUTH_PROOF, 0, s.proof, PROOF_LEN, &s.w, s.why,
                    sizeof s.why),
               HORA_EPROTO);
  CHECK(contains(s.why, "expected AUTH_HELLO"));
  CHECK(one_line(s.why));
  hp_auth_init(&a, HP_AUTH_ACCEPTOR, HP_AUTH_CONTROL, secret_a);
  CHECK_EQ_INT(feed(&a, HP_MSG_AUTH_CHALLENGE, 0, s.chal, CHAL_LEN, &s.w, s.why,
                    sizeof s.why),
               HORA_EPROTO);
  hp_auth_init(&a, HP_AUTH_ACCEPTOR, HP_AUTH_CONTROL, secret_a);
  CHECK_EQ_INT(feed(&a, HP_MSG_JOB, 0, zero, 8, &s.w, s.why, sizeof s.why),
               HORA_EPROTO);
  CHECK_EQ_INT(feed(&s.a, HP_MSG_AUTH_HELLO, 0, s.hello, HELLO_LEN, &s.w, s.why,
                    sizeof s.why),
               HORA_EPROTO); /* s.a already answered one HELLO */
  CHECK_EQ_INT(s.w.len, 0);
  hp_auth_clear(&a);
  pair_end(&s);

  /* Connector: a frame before hp_auth_start, HELLO, PROOF, a second
   * start, a start on an acceptor. */
  pair_begin(&s, UPTO_PROOF, HP_AUTH_CONTROL);
  struct hp_auth c;
  hp_auth_init(&c, HP_AUTH_CONNECTOR, HP_AUTH_CONTROL, secret_a);
  CHECK_EQ_INT(feed(&c, HP_MSG_AUTH_CHALLENGE, 0, s.chal, CHAL_LEN, &s.w, s.why,
                    sizeof s.why),
               HORA_EPROTO);
  CHECK(one_line(s.why));
  hp_auth_init(&c, HP_AUTH_CONNECTOR, HP_AUTH_CONTROL, secret_a);
  CHECK_EQ_INT(hp_auth_start(&c, &s.w), 0);
  CHECK_EQ_INT(hp_auth_start(&c, &s.w), HORA_EINVAL);
  hp_wbuf_reset(&s.w);
  CHECK_EQ_INT(feed(&c, HP_MSG_AUTH_HELLO, 0, s.hello, HELLO_LEN, &s.w, s.why,
                    sizeof s.why),
               HORA_EPROTO);
  hp_auth_init(&c, HP_AUTH_CONNECTOR, HP_AUTH_CONTROL, secret_a);
  CHECK_EQ_INT(hp_auth_start(&c, &s.w), 0);
  hp_wbuf_reset(&s.w);
  CHECK_EQ_INT(feed(&c, HP_MSG_AUTH_PROOF, 0, s.proof, PROOF_LEN, &s.w, s.why,
                    sizeof s.why),
               HORA_EPROTO);
  CHECK_EQ_INT(s.w.len, 0);
  hp_auth_init(&a, HP_AUTH_ACCEPTOR, HP_AUTH_CONTROL, secret_a);
  CHECK_EQ_INT(hp_auth_start(&a, &s.w), HORA_EINVAL);
  CHECK_EQ_INT(s.w.len, 0);

  /* Anything after success, on either side. */
  CHECK_EQ_INT(feed(&s.a, HP_MSG_AUTH_PROOF, 0, s.proof, PROOF_LEN, &s.w, s.why,
                    sizeof s.why),
               1);
  const uint16_t types[] = {HP_MSG_AUTH_HELLO, HP_MSG_AUTH_CHALLENGE,
                            HP_MSG_AUTH_PROOF, HP_MSG_HEARTBEAT};
  const size_t lens[] = {HELLO_LEN, CHAL_LEN, PROOF_LEN, 0};
  for (size_t i = 0; i < HC_ARRAY_SIZE(types); i++) {
    unsigned char buf[CHAL_LEN];
    memcpy(buf, s.chal, CHAL_LEN);
    if (types[i] == HP_MSG_AUTH_PROOF) memcpy(buf, s.proof, PROOF_LEN);
    if (types[i] == HP_MSG_AUTH_HELLO) memcpy(buf, s.hello, HELLO_LEN);
    struct hp_auth done_a = s.a, done_c = s.c;
    CHECK_EQ_INT(
        feed(&done_a, types[i], 0, buf, lens[i], &s.w, s.why, sizeof s.why),
        HORA_EPROTO);
    CHECK(contains(s.why, "ended"));
    CHECK_EQ_INT(
        feed(&done_c, types[i], 0, buf, lens[i], &s.w, s.why, sizeof s.why),
        HORA_EPROTO);
    CHECK_EQ_INT(s.w.len, 0);
  }
  /* And after a clear: no secret, no success. */
  struct hp_auth cleared;
  hp_auth_init(&cleared, HP_AUTH_ACCEPTOR, HP_AUTH_CONTROL, secret_a);
  hp_auth_clear(&cleared);
  static const unsigned char zeros[HP_SECRET_LEN];
  CHECK(!memcmp(cleared.secret, zeros, HP_SECRET_LEN));
  CHECK_EQ_INT(feed(&cleared, HP_MSG_AUTH_HELLO, 0, s.hello, HELLO_LEN, &s.w,
                    s.why, sizeof s.why),
               HORA_EPROTO);
  /* An unknown role never runs. */
  struct hp_auth odd;
  hp_auth_init(&odd, 3, HP_AUTH_CONTROL, secret_a);
  CHECK_EQ_INT(hp_auth_start(&odd, &s.w), HORA_EINVAL);
  CHECK_EQ_INT(feed(&odd, HP_MSG_AUTH_HELLO, 0, s.hello, HELLO_LEN, &s.w, s.why,
                    sizeof s.why),
               HORA_EPROTO);
  CHECK_EQ_INT(s.w.len, 0);
  hp_auth_clear(&c);
  hp_auth_clear(&a);
  pair_end(&s);
}

/* ---- fuzz ---------------------------------------------------------------- */

/* Random frames to each waiting end: no crash, no success, and a reply
 * only where a HELLO of the right shape asks for one. */
static void test_fuzz(void) {
  int bad = 0, replies = 0;
  for (int iter = 0; iter < 4000; iter++) {
    struct pair s;
    int upto = 1 + (int)(rnd() % 3);
    pair_begin(&s, upto, HP_AUTH_CONTROL);
    struct hp_auth *to = upto == UPTO_CHALLENGE ? &s.c : &s.a;
    uint16_t type;
    uint32_t r = rnd() % 8;
    type = r < 2   ? HP_MSG_AUTH_HELLO
           : r < 4 ? HP_MSG_AUTH_CHALLENGE
           : r < 6 ? HP_MSG_AUTH_PROOF
                   : (uint16_t)(1 + rnd() % HP_MSG_TYPE_MAX);
    size_t n;
    r = rnd() % 4;
    n = r == 0   ? HELLO_LEN
        : r == 1 ? CHAL_LEN
        : r == 2 ? PROOF_LEN
                 : rnd() % (HP_AUTH_FRAME_MAX + 1);
    unsigned char buf[HP_AUTH_FRAME_MAX];
    for (size_t i = 0; i < n; i++)
      buf[i] = (unsigned char)rnd();
    /* Some HELLOs with a valid purpose, so the acceptor path runs on. */
    if (type == HP_MSG_AUTH_HELLO && n && rnd() % 2) buf[0] = HP_AUTH_CONTROL;
    int rc = feed(to, type, rnd() % 16 ? 0 : rnd(), buf, n, &s.w, s.why,
                  sizeof s.why);
    int hello_ok = upto == UPTO_HELLO && rc == 0;
    if (rc == 1 || (rc == 0 && !hello_ok) || (rc < 0 && s.w.len) ||
        (rc < 0 && !one_line(s.why)) ||
        (rc < 0 && rc != HORA_EPROTO && rc != HORA_EAUTH))
      bad++;
    if (hello_ok) {
      replies++;
      /* The reply is a proper CHALLENGE, and a random proof after it
       * fails. */
      if (!take(&s.w, HP_MSG_AUTH_CHALLENGE, NULL, CHAL_LEN)) bad++;
      for (size_t i = 0; i < PROOF_LEN; i++)
        buf[i] = (unsigned char)rnd();
      if (feed(to, HP_MSG_AUTH_PROOF, 0, buf, PROOF_LEN, &s.w, s.why,
               sizeof s.why) != HORA_EAUTH)
        bad++;
    }
    pair_end(&s);
  }
  CHECK_EQ_INT(bad, 0);
  CHECK(replies > 0); /* the loop did reach past the HELLO */
}

/* ---- randomness and hex -------------------------------------------------- */

static void test_random(void) {
  unsigned char a[32], b[32];
  memset(a, 0, sizeof a);
  memset(b, 0, sizeof b);
  CHECK_EQ_INT(hp_random(a, sizeof a), 0);
  CHECK_EQ_INT(hp_random(b, sizeof b), 0);
  CHECK(memcmp(a, b, sizeof a) != 0);
  static const unsigned char zeros[32];
  CHECK(memcmp(a, zeros, sizeof a) != 0);
  CHECK_EQ_INT(hp_random(a, 0), 0);
}

static void test_hex(void) {
  unsigned char in[256], out[256];
  char hex[2 * sizeof in + 1];
  for (size_t i = 0; i < sizeof in; i++)
    in[i] = (unsigned char)i;
  hp_hex(in, sizeof in, hex);
  CHECK_EQ_INT(strlen(hex), 2 * sizeof in);
  CHECK(!strncmp(hex, "000102", 6));
  CHECK(!strcmp(hex + 2 * 250, "fafbfcfdfeff"));
  CHECK_EQ_INT(hp_unhex(hex, out, sizeof out), 0);
  CHECK(!memcmp(in, out, sizeof in));
  hp_hex(in, 0, hex);
  CHECK_EQ_STR(hex, "");
  CHECK_EQ_INT(hp_unhex("", out, 0), 0);

  /* Upper case too. */
  unsigned char two[2] = {0};
  CHECK_EQ_INT(hp_unhex("ABcd", two, 2), 0);
  CHECK(two[0] == 0xab && two[1] == 0xcd);

  /* Wrong lengths, bad digits; a failure leaves the output untouched. */
  const char *bad[] = {"abc",  "abcde", "abcd ", " abcd",  "abcg",   "ab-d",
                       "0x12", "",      "ab",    "abcdef", "ab\ncd", "g000"};
  for (size_t i = 0; i < HC_ARRAY_SIZE(bad); i++) {
    two[0] = 0x5a;
    two[1] = 0xa5;
    int rc = hp_unhex(bad[i], two, 2);
    CHECK_EQ_INT(rc, -1);
    if (rc != -1) fprintf(stderr, "  accepted \"%s\"\n", bad[i]);
    CHECK(two[0] == 0x5a && two[1] == 0xa5);
  }
  CHECK_EQ_INT(hp_unhex(NULL, two, 2), -1);
  CHECK_EQ_INT(hp_unhex("00", two, 0), -1); /* more digits than asked */
}

/* MUNGE without a munged (or without libmunge): clear errors, nothing
 * made up. (service_munge.sh runs the real thing.) */
static void test_munge_unreachable(void) {
  char why[300] = "", *cred = (char *)1;
  int avail = hd_munge_available(why, sizeof why);
  CHECK(avail == 0 || strstr(why, "libmunge.so.2") != NULL);
  CHECK_EQ_INT(hd_munge_encode("/nonexistent/munge.socket", "x", 1, 0, 0,
                               &cred, why, sizeof why),
               -1);
  CHECK(cred == NULL);
  CHECK(why[0] != '\0');
  void *p = (void *)1;
  int len = -1;
  uid_t uid = 0;
  gid_t gid = 0;
  int rc = hd_munge_decode("/nonexistent/munge.socket", "MUNGE:AAAA:", &p,
                           &len, &uid, &gid, why, sizeof why);
  CHECK(rc != 0);
  CHECK(p == NULL && len == 0);
  CHECK(uid == (uid_t)-1 && gid == (gid_t)-1);
  if (avail == 0) CHECK(strstr(why, "munged") != NULL);
}

int main(void) {
  RUN(test_handshake_ok);
  RUN(test_handshake_bytewise);
  RUN(test_known_answers);
  RUN(test_wrong_secret);
  RUN(test_replay);
  RUN(test_reflection);
  RUN(test_purpose);
  RUN(test_lengths);
  RUN(test_order);
  RUN(test_fuzz);
  RUN(test_random);
  RUN(test_hex);
  RUN(test_munge_unreachable);
  TL_EXIT();
}
