/* auth.h -- the mutual challenge-response every TCP connection of a job
 * begins with (launcher <-> daemon, daemon <-> daemon).
 *
 * Both ends hold the job's secret (HP_SECRET_LEN random bytes, made fresh
 * per job by horarun and carried to each horad on the ssh channel's stdin).
 * Three frames, in the framing of msg.h:
 *
 *   connector -> acceptor  AUTH_HELLO      u8 purpose | nonce_c[32]
 *   acceptor  -> connector AUTH_CHALLENGE  nonce_s[32] | mac_s[32]
 *   connector -> acceptor  AUTH_PROOF      mac_c[32]
 *
 *   mac_s = HMAC-SHA256(secret, "hora-auth-1 acceptor" | purpose | nonce_c | nonce_s)
 *   mac_c = HMAC-SHA256(secret, "hora-auth-1 connector" | purpose | nonce_c | nonce_s)
 *
 * The connector checks mac_s before it sends its proof, so it never talks
 * to an acceptor that lacks the secret; the acceptor acts on nothing the
 * connector sends before mac_c checks out. Fresh nonces on both sides make
 * a recorded handshake useless (replay), and the two labels keep one side's
 * MAC from being reflected as the other's. MACs are compared in constant
 * time. HMAC and randomness come from OpenSSL's libcrypto. */
#ifndef HORA_PROTO_AUTH_H
#define HORA_PROTO_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "msg.h"

#define HP_SECRET_LEN 32
#define HP_NONCE_LEN 32
#define HP_MAC_LEN 32
/* A frame before authentication is never longer than this: a stranger
 * cannot make a daemon buffer more. */
#define HP_AUTH_FRAME_MAX 128u
/* Seconds an unauthenticated connection may take to finish. */
#define HP_AUTH_TIMEOUT_MS 10000

enum hp_auth_role { HP_AUTH_CONNECTOR = 1, HP_AUTH_ACCEPTOR = 2 };
/* SERVICE: horad --service-client to horad --service (daemon/service.c),
 * with the cluster key as the secret. */
enum hp_auth_purpose { HP_AUTH_CONTROL = 1, HP_AUTH_MESH = 2,
                       HP_AUTH_SERVICE = 3 };

struct hp_auth {
  int role;
  int state; /* private */
  uint8_t purpose;
  unsigned char secret[HP_SECRET_LEN];
  unsigned char nonce_c[HP_NONCE_LEN], nonce_s[HP_NONCE_LEN];
};

/* Fills buf with n cryptographically random bytes. Returns 0 or HORA_EIO. */
int hp_random(void *buf, size_t n);

/* Sets up one end. An acceptor learns the purpose from the HELLO and
 * refuses a HELLO whose purpose differs from `purpose`. */
void hp_auth_init(struct hp_auth *a, int role, uint8_t purpose,
                  const unsigned char secret[HP_SECRET_LEN]);

/* Connector only: appends the AUTH_HELLO frame to w. Returns 0 or a
 * HORA_E* code. */
int hp_auth_start(struct hp_auth *a, struct hp_wbuf *w);

/* Feeds one received frame (header h, payload p of h->len bytes). May
 * append a reply frame to w. Returns 0 when the handshake goes on, 1 when
 * this end now knows the peer holds the secret (connector: after a good
 * CHALLENGE, having appended its PROOF; acceptor: after a good PROOF), or
 * HORA_EAUTH / HORA_EPROTO with a one-line reason in why (wrong MAC, a
 * frame out of order, a bad length or purpose). HORA_EAUTH means a wrong
 * MAC; a frame of the wrong type, request id (must be 0) or payload length,
 * or a HELLO with another or an unknown purpose, is HORA_EPROTO. On an
 * error nothing is appended to w. After an error or success the object
 * must not be fed again (a further frame is HORA_EPROTO). */
int hp_auth_step(struct hp_auth *a, const struct hp_frame_hdr *h,
                 const unsigned char *p, struct hp_wbuf *w, char *why,
                 size_t whylen);

/* Wipes the secret and nonces; the object then refuses every frame. */
void hp_auth_clear(struct hp_auth *a);

/* Lowercase hex of n bytes into out (2n+1 bytes). */
void hp_hex(const unsigned char *p, size_t n, char *out);
/* Parses exactly 2n hex digits (either case) followed by the NUL into p.
 * Returns 0 or -1; on -1, p is left untouched. */
int hp_unhex(const char *s, unsigned char *p, size_t n);

#endif
