/* conn.h -- a framed, authenticated TCP connection on a libuv loop: what
 * horarun and horad use for every connection between hosts; and the same
 * framed connection over a socketpair (hp_conn_open_local), horad's
 * control connection when horarun started it on its own machine, so that
 * both ends handle their control frames in one way whatever carries them.
 *
 * A connection starts with the handshake of auth.h. Before it completes,
 * a frame longer than HP_AUTH_FRAME_MAX or of any other type ends the
 * connection, and so does a handshake that takes longer than
 * HP_AUTH_TIMEOUT_MS: a stranger on the port costs a few bytes of memory
 * and is logged, nothing it sends is acted on. After it, frames go to the
 * owner's on_frame; each payload is read straight into a buffer of its
 * own size (no copy through an intermediate buffer), which the owner may
 * keep. Every byte received refreshes last_rx, which the owners' heartbeat
 * checks read.
 *
 * After the handshake every frame on a TCP connection is followed by a
 * tag of HP_FRAME_TAG bytes: AES-256-GCM's, under a key for its direction
 * drawn from the secret and both handshake nonces, with the frame's
 * sequence number on the connection as its IV, over its header and its
 * payload as additional data (GMAC; of DATA and XDATA frames, their own
 * header, which says where the data goes, always, the bulk data only with
 * hp_conn_set_integrity()); with hp_conn_set_encrypt() the payloads are
 * encrypted as well. The payload is authenticated (and decrypted) as it
 * is read, into its place when placed; its tag is checked once the frame
 * is whole, before on_frame, so a placed buffer may hold bytes of a frame
 * that is then refused (and the connection ends). A frame
 * altered, injected, dropped, replayed or reordered on the wire fails its
 * tag and ends the connection. Local connections (a socketpair) carry no
 * tags. */
#ifndef HORA_PROTO_CONN_H
#define HORA_PROTO_CONN_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "auth.h"
#include "msg.h"

struct hp_conn;

#define HP_FRAME_TAG 16 /* bytes of a frame's tag after the handshake */

struct hp_conn_cb {
  /* The handshake succeeded: the peer holds the secret. May be NULL. */
  void (*on_auth)(struct hp_conn *c);
  /* A whole frame after the handshake. The payload (h->len bytes, NULL
   * when 0) stays valid until the call returns; to keep it, set *keep to 1
   * and free() it later. Returning < 0 closes the connection with the
   * reason the callback put in c->why. */
  int (*on_frame)(struct hp_conn *c, const struct hp_frame_hdr *h,
                  unsigned char *payload, int *keep);
  /* Called once when the connection is gone (closed by either side, an
   * error, a failed handshake); `why` says why. c is freed after it
   * returns. */
  void (*on_close)(struct hp_conn *c, const char *why);
};

struct hp_conn {
  union {
    uv_tcp_t tcp;   /* hp_conn_connect, hp_conn_accept */
    uv_pipe_t pipe; /* hp_conn_open_local */
  };
  int local; /* over a socketpair to a parent or child process: no
                handshake, and no need of heartbeats (its end closes when
                the peer dies); no TCP address either */
  uv_timer_t timer; /* the handshake's deadline */
  const struct hp_conn_cb *cb;
  void *data; /* the owner's */
  struct hp_auth auth;
  int connector;
  int connected, authed, closing, reading;
  int paused; /* hp_conn_pause(): not reading (no silence checks then) */
  int nclosing; /* handles still closing */
  int close_when_sent;
  int heard; /* a byte has come from the peer */
  int bad_data; /* closed because of what the peer sent: not hora's
                   framing, or a frame out of place before the handshake */
  /* Placement (see hp_conn_set_place). */
  uint16_t place_types[4];
  int nplace_types;
  size_t place_pre;
  void *(*place)(struct hp_conn *c, const struct hp_frame_hdr *h,
                 const unsigned char *pre);
  int pre_phase;
  unsigned char *dst;    /* where the rest of the current payload goes */
  unsigned char *placed; /* during on_frame: where it went, or NULL */
  struct hp_conn *next, **pprev; /* on its owner's list (hp_conn_track) */
  char peer[96]; /* "address:port", for messages */
  char why[256];
  uint64_t last_rx;    /* hc_now_ns() of the last byte received */
  size_t queued;       /* bytes written but not yet sent */
  /* frame tags (after the handshake; TCP only) */
  void *tag_tx, *tag_rx; /* AES-256-GCM keyed each way (EVP_CIPHER_CTX) */
  uint64_t seq_tx, seq_rx;
  int integrity;         /* DATA/XDATA payloads are covered too */
  int encrypt;           /* every payload encrypted (AES-256-GCM) */
  int tag_phase;         /* reading the current frame's tag */
  size_t tgot;
  unsigned char tag[HP_FRAME_TAG];
  /* reader: a header, then its payload */
  unsigned char hdr[HP_FRAME_HDR];
  size_t hgot;
  struct hp_frame_hdr h;
  unsigned char *payload;
  size_t pgot, pcap;
};

/* The TCP retransmissions of the connection so far (TCP_INFO), a sign of
 * loss on its path. Returns 0 and *total, or -1. */
int hp_conn_retrans(struct hp_conn *c, uint32_t *total);

/* Starts connecting to sa. The handshake runs as soon as the connection
 * is up; on_auth or on_close follows. Returns 0 and *out, or a UV_E*
 * code (nothing to free). */
int hp_conn_connect(uv_loop_t *loop, const struct sockaddr *sa,
                    const unsigned char secret[HP_SECRET_LEN],
                    uint8_t purpose, const struct hp_conn_cb *cb, void *data,
                    struct hp_conn **out);

/* Accepts a pending connection of `server` and waits for the peer's
 * handshake. Returns 0 and *out, or a UV_E* code. */
int hp_conn_accept(uv_stream_t *server,
                   const unsigned char secret[HP_SECRET_LEN], uint8_t purpose,
                   const struct hp_conn_cb *cb, void *data,
                   struct hp_conn **out);

/* A connection over fd, one end of a socketpair (AF_UNIX, SOCK_STREAM)
 * that only this process and its parent or child hold: the process that
 * made it handed the other end over itself (horad's --control-fd), so
 * there is no handshake: frames go to on_frame at once, and on_auth is
 * never called. `peer` names the other end in messages. Never for a
 * socket a stranger could have connected to. Returns 0 and *out (the
 * connection owns fd from then on), or a UV_E* code (fd left to the
 * caller). */
int hp_conn_open_local(uv_loop_t *loop, int fd, const char *peer,
                       const struct hp_conn_cb *cb, void *data,
                       struct hp_conn **out);

/* With on, the tags of DATA and XDATA frames cover their payloads too
 * (horarun's --wire-integrity): the bulk data is checked, at the cost of
 * GHASH over every byte on both sides. Both ends must say the same before
 * the handshake ends (the job's knobs do). */
void hp_conn_set_integrity(struct hp_conn *c, int on);

/* With on, every frame's payload is encrypted with AES-256-GCM under a key
 * of its direction drawn from the handshake, its header authenticated
 * with it, and the tag is GCM's (horarun's --wire-encrypt): nothing of the
 * job's data or control is readable on the wire, at the cost of a copy of
 * each outgoing zero-copy payload and AES over every byte both ways. Both
 * ends must say the same before the handshake ends. */
void hp_conn_set_encrypt(struct hp_conn *c, int on);

/* Queues the frames in w (moved out of w, which is left empty). Returns 0
 * or < 0 when the connection is closing or the write failed. */
int hp_conn_send(struct hp_conn *c, struct hp_wbuf *w);

/* Queues a frame made of `hdr` (hdrlen bytes, copied) and `n` bytes at p,
 * which must stay untouched until done(arg, status) is called (status < 0
 * when the write failed or the connection closed first). done is always
 * called, also when this returns < 0. */
int hp_conn_send_zc(struct hp_conn *c, const void *hdr, size_t hdrlen,
                    const void *p, size_t n, void (*done)(void *, int),
                    void *arg);

/* Frames of type `type` are read in two parts: the first `pre` bytes of
 * the payload, then place(c, h, those bytes) says where the other h->len -
 * pre bytes go (straight into their final place: no copy), or NULL for
 * the connection's own buffer. on_frame then finds that pointer in
 * c->placed (its payload argument holds only the first `pre` bytes), or
 * NULL when the whole payload is in its argument as usual. place() must
 * return room for exactly h->len - pre bytes. Called again with another
 * type (up to four, the same pre and place), frames of that type are
 * placed too. */
void hp_conn_set_place(struct hp_conn *c, uint16_t type, size_t pre,
                       void *(*place)(struct hp_conn *, const struct hp_frame_hdr *,
                                      const unsigned char *));

/* A frame being read into a placed buffer goes on into the connection's
 * own buffer instead (the placed one may be reused). */
void hp_conn_unplace(struct hp_conn *c);

/* Connections a listener holds in their handshake at once (accepted, not
 * yet authenticated), in all and from one source address. Past either, a
 * new connection does not wait: the oldest such connection (of that
 * source first) is closed to make room, one that has sent nothing before
 * one that has begun its handshake. A real daemon speaks at once and
 * finishes in a few round trips, so silent strangers, however many, never
 * keep it out, and strangers from one address never push out another's. */
#define HP_UNAUTH_MAX 64
#define HP_UNAUTH_PER_SOURCE 32

/* Accepts a pending connection of `server` as hp_conn_accept() does, makes
 * room for it among the connections of *list as said above, and puts it on
 * *list (hp_conn_track). A connection closed for room gets on_close with
 * "dropped for a newer connection: ...". Returns 0 and *out, or a UV_E*
 * code. */
int hp_conn_accept_tracked(uv_stream_t *server,
                           const unsigned char secret[HP_SECRET_LEN],
                           uint8_t purpose, const struct hp_conn_cb *cb,
                           void *data, struct hp_conn **list,
                           struct hp_conn **out);

/* For listeners that still call it before hp_conn_accept(): when `list`
 * holds HP_UNAUTH_MAX connections in their handshake, closes the oldest
 * (a silent one first) to make room. Returns 0: nothing is refused any
 * more. New code calls hp_conn_accept_tracked(), which also applies
 * HP_UNAUTH_PER_SOURCE. */
int hp_conn_refuse_flood(uv_stream_t *server, struct hp_conn *list);

/* Puts c on the list at *head (it leaves it when freed), so that the owner
 * can close every connection it has, authenticated or not. */
void hp_conn_track(struct hp_conn *c, struct hp_conn **head);
/* Closes every connection on the list. */
void hp_conn_close_all(struct hp_conn **head, const char *why);

/* Stops reading (backpressure: the peer's writes then wait in TCP) and
 * starts again; resuming counts as hearing from the peer. */
void hp_conn_pause(struct hp_conn *c);
void hp_conn_resume(struct hp_conn *c);

/* Closes the connection once every queued frame has been sent. */
void hp_conn_close_when_sent(struct hp_conn *c);

/* Closes the connection (once); on_close follows with `why`. */
void hp_conn_close(struct hp_conn *c, const char *why);

/* "1.2.3.4:5" or "[::1]:5" for a socket address. */
void hp_addr_str(const struct sockaddr *sa, char *buf, size_t len);
/* Parses a numeric address and port into ss. Returns 0 or -1. */
int hp_addr_parse(const char *addr, int port, struct sockaddr_storage *ss);

#endif
