/* msg.h -- framed, versioned messages between hora components, and the
 * codec every binary shares.
 *
 * Every message is a 16-byte header followed by `len` payload bytes:
 *   u32 magic "HORA" | u16 version | u16 type | u32 len | u32 reqid
 * All integers are little-endian. Strings are u32 length + bytes (no NUL).
 * A reader checks magic, version, type and length before it reads a byte
 * of payload, and every field read is bounds-checked: malformed input is an
 * error for that peer, never a crash. On TCP, after the handshake, each
 * frame is followed by a 16-byte tag that `len` does not count (conn.h). */
#ifndef HORA_PROTO_MSG_H
#define HORA_PROTO_MSG_H

#include <stddef.h>
#include <stdint.h>

#define HP_FRAME_MAGIC 0x41524f48u /* "HORA" read as little-endian u32 */
#define HP_PROTO_VERSION 14u
#define HP_FRAME_HDR 16u
#define HP_FRAME_MAX (16u << 20) /* payload bytes */
#define HP_MAX_ARGS 4096u          /* argv / envp entries in a JOB */

enum hp_msg_type {
  /* rank <-> daemon, on the job's unix socket */
  HP_MSG_HELLO = 1,   /* rank -> daemon: who I am */
  HP_MSG_WELCOME = 2, /* daemon -> rank: layout, with memfd + eventfd */
  HP_MSG_BYE = 3,     /* rank -> daemon: clean shutdown */
  HP_MSG_REFUSE = 4,  /* daemon -> rank: its hello is refused (status, why);
                         the daemon then closes the connection. Sent in the
                         daemon's version also to a hello of another one */
  /* launcher <-> daemon, on the control connection */
  HP_MSG_JOB = 16,    /* launcher -> daemon: what to run */
  HP_MSG_ABORT = 17,  /* launcher -> daemon: tear the job down */
  HP_MSG_READY = 18,  /* daemon -> launcher: daemon is up */
  HP_MSG_OUTPUT = 19, /* daemon -> launcher: bytes a rank wrote */
  HP_MSG_EXIT = 20,   /* daemon -> launcher: a rank ended; comes after all
                         of that rank's OUTPUT frames */
  HP_MSG_DONE = 21,   /* daemon -> launcher: every local rank ended */
  HP_MSG_REGISTER = 22,  /* daemon -> launcher over TCP: host index, name,
                            mesh port (see hp_register) */
  HP_MSG_HEARTBEAT = 23, /* either way, on every TCP connection */
  HP_MSG_FAULT = 24,     /* daemon -> launcher: the job cannot go on */
  HP_MSG_PEER_LOST = 25, /* daemon -> launcher: it lost its link to a host
                            (hp_peer_lost); the launcher decides, from
                            every daemon's word, which host is the cause.
                            A daemon's HEARTBEAT to the launcher lists the
                            hosts its links to have been in trouble with
                            lately (hp_enc_heartbeat) */
  HP_MSG_LATENESS = 26,  /* daemon -> launcher, before DONE: how late each
                            rank submitted its operations, for the
                            communicators it coordinates (hp_lateness) */
  HP_MSG_HOSTS_UPDATED = 27, /* launcher -> daemon: the job's hosts changed
                                (an elastic job's discovery script); no
                                payload: the ranks' hosts_updated count
                                grows by one */
  HP_MSG_REFORM = 35,        /* launcher -> daemon: an elastic job goes on
                                without some hosts, its ranks numbered anew
                                (hp_reform); daemon -> launcher: u32, that
                                re-forming's number, once the re-formed
                                job's first session started there */
  /* horad --service-client <-> horad --service (daemon/service.c) */
  HP_MSG_SVC_LAUNCH = 28, /* client -> service: bootstrap line, arguments */
  HP_MSG_SVC_OUTPUT = 29, /* service -> client: what the job's horad wrote */
  HP_MSG_SVC_EXIT = 30,   /* service -> client: u32 its exit status */
  HP_MSG_SVC_MUNGE = 31,  /* a service with --auth munge: client -> service
                             (empty): "I come with MUNGE"; service ->
                             client: a 32-byte nonce; client -> service:
                             the credential (text), whose payload holds
                             the nonce and the launch request */
  /* authentication, first on every TCP connection (auth.h) */
  HP_MSG_AUTH_HELLO = 32,     /* connector -> acceptor: purpose, nonce */
  HP_MSG_AUTH_CHALLENGE = 33, /* acceptor -> connector: nonce, MAC */
  HP_MSG_AUTH_PROOF = 34,     /* connector -> acceptor: MAC */
  /* daemon <-> daemon, on the mesh */
  HP_MSG_PEER_HELLO = 40,  /* connector -> acceptor: its host index */
  HP_MSG_NEGO_READY = 41,  /* daemon -> coordinator: a tensor is ready */
  HP_MSG_NEGO_DECIDE = 42, /* coordinator -> daemons: run it (or fail) */
  HP_MSG_DATA = 43,        /* ring data of a running operation */
  HP_MSG_RANK_GONE = 44,   /* a rank or host left: fail what waits on it */
  HP_MSG_XDATA = 45,       /* allgather / alltoall / reducescatter data */
  HP_MSG_NEGO_PLAN = 46,   /* coordinator -> daemons: decisions on several
                              tensors, run as one unit (a group) */
  HP_MSG_SESSION = 47,     /* hora_init() again: a host's ranks are back,
                              or host 0 starts the new session */
  HP_MSG_DEADLOCK = 48,    /* deadlock detection: a host's report to host
                              0, host 0's probe and verdict (deadlock.c) */
  HP_MSG_TIMELINE = 49,    /* the timeline: start, stop, clock pings, a
                              host's events for host 0 (daemon/timeline.c) */
  HP_MSG_TYPE_MAX = 49
};

struct hp_frame_hdr {
  uint32_t magic;
  uint16_t version;
  uint16_t type;
  uint32_t len;
  uint32_t reqid;
};

/* ---- growable write buffer ------------------------------------------- */
struct hp_wbuf {
  unsigned char *data;
  size_t len, cap;
  size_t frame_start;
  int err; /* sticky: set when an allocation failed */
};

void hp_wbuf_init(struct hp_wbuf *w);
void hp_wbuf_free(struct hp_wbuf *w);
void hp_wbuf_reset(struct hp_wbuf *w);
void hp_put_u8(struct hp_wbuf *w, uint8_t v);
void hp_put_u16(struct hp_wbuf *w, uint16_t v);
void hp_put_u32(struct hp_wbuf *w, uint32_t v);
void hp_put_u64(struct hp_wbuf *w, uint64_t v);
void hp_put_bytes(struct hp_wbuf *w, const void *p, size_t n);
void hp_put_str(struct hp_wbuf *w, const char *s); /* NULL as "" */
/* n bytes as they are, with no length before them */
void hp_put_raw(struct hp_wbuf *w, const void *src, size_t n);
/* Starts a frame at the end of the buffer; hp_frame_end() fills in its
 * length. Returns 0, or HORA_ENOMEM / HORA_EINVAL (payload too large: the
 * frame is removed and w->err set). */
void hp_frame_begin(struct hp_wbuf *w, uint16_t type, uint32_t reqid);
int hp_frame_end(struct hp_wbuf *w);

/* ---- bounds-checked reader -------------------------------------------- */
struct hp_rbuf {
  const unsigned char *p;
  size_t len, off;
  int err; /* sticky: set on the first read past the end */
};

void hp_rbuf_init(struct hp_rbuf *r, const void *p, size_t len);
uint8_t hp_get_u8(struct hp_rbuf *r);
uint16_t hp_get_u16(struct hp_rbuf *r);
uint32_t hp_get_u32(struct hp_rbuf *r);
uint64_t hp_get_u64(struct hp_rbuf *r);
/* Returns a pointer into the buffer and sets *n; NULL on error. */
const unsigned char *hp_get_bytes(struct hp_rbuf *r, size_t *n);
/* Returns a malloc'd NUL-terminated copy (caller frees); NULL on error,
 * also for strings longer than `max` or holding a NUL byte. */
char *hp_get_str(struct hp_rbuf *r, size_t max);

/* ---- frame parsing ----------------------------------------------------- */
/* Parses the 16-byte header at `p`. Returns 0, or HORA_EPROTO with a reason
 * in why (bad magic, version, type, length). */
int hp_frame_parse(const void *p, struct hp_frame_hdr *h, char *why,
                   size_t whylen);

/* Accumulates a byte stream and yields whole frames. */
struct hp_decoder {
  unsigned char *buf;
  size_t len, cap;
  size_t consumed; /* bytes of the current frame to drop on next call */
};

void hp_decoder_init(struct hp_decoder *d);
void hp_decoder_free(struct hp_decoder *d);
int hp_decoder_feed(struct hp_decoder *d, const void *p, size_t n);
/* 1: a frame is ready in *h / *payload (valid until the next call);
 * 0: more bytes are needed; HORA_EPROTO: the stream is bad (reason in why),
 * the peer should be dropped. */
int hp_decoder_next(struct hp_decoder *d, struct hp_frame_hdr *h,
                    const unsigned char **payload, char *why, size_t whylen);

/* ---- messages ----------------------------------------------------------- */
#define HP_TOKEN_LEN 32 /* hex characters */

struct hp_hello {
  int32_t rank;
  int32_t pid;
  char token[HP_TOKEN_LEN + 1];
  uint32_t shm_version; /* the HP_SHM_VERSION of the rank's libhora */
};

/* REFUSE: why the daemon will not serve this connection. */
struct hp_refuse {
  int32_t status; /* HORA_E* */
  char msg[460];
};

struct hp_welcome {
  int32_t rank, size, local_rank, local_size, cross_rank, cross_size;
  int32_t daemon_pid;
  uint64_t shm_size;
  char hostname[256];
  /* the job's fast-path segment (proto/fast.h), passed as a third fd;
   * 0: none (the job spans hosts, or the fast path is off) */
  uint64_t fast_size;
};

struct hp_job_rank {
  int32_t rank, local_rank, cross_rank, cross_size;
};

/* One host of a multi-host job, as every daemon learns it from the JOB. */
struct hp_job_host {
  char *name;   /* for messages */
  char *addr;   /* where its mesh listener is (numeric address) */
  uint16_t port;
  int32_t first_rank, nranks;
};

#define HP_MAX_HOSTS 65536u

struct hp_job {
  int32_t size, local_size;
  uint32_t nlocal;
  struct hp_job_rank *ranks;
  /* the hosts (one entry, this host, for a single-host job) */
  uint32_t host_index, nhosts;
  struct hp_job_host *hosts;
  char *hostname;
  char *cwd;
  uint32_t argc;
  char **argv;
  uint32_t envc;
  char **envp; /* "KEY=value" */
};

enum hp_exit_how { HP_EXIT_CODE = 0, HP_EXIT_SIGNAL = 1, HP_EXIT_SPAWN = 2 };

struct hp_exit {
  int32_t rank;
  uint8_t how;
  int32_t code; /* exit code, signal number, or errno for SPAWN */
  char *msg;    /* may be NULL */
  uint8_t noinit; /* it ended without ever initialising hora (no hello) */
  uint32_t restart; /* 0: the rank's end; k: horad starts it again, for
                     * the k-th time (--restart-failed-ranks) */
};

struct hp_output {
  int32_t rank;
  uint8_t stream; /* 1 stdout, 2 stderr */
  const unsigned char *data;
  size_t len;
};

/* REGISTER: a horad started over ssh introduces itself to horarun. */
struct hp_register {
  uint32_t host_index;
  char hostname[256];
  uint16_t mesh_port;
  char mesh_addr[64]; /* its --network-interface address, or "" */
  int32_t pid;
  char version[64];
};

/* NEGO_READY: every local rank of the sender has submitted `name`. */
/* The response cache (daemon/ncache.c): how a NEGO_READY, or an entry of
 * a NEGO_DECIDE or NEGO_PLAN, names its operation. */
#define HP_CREF_NONE 0 /* whole, not numbered */
#define HP_CREF_SET 1  /* whole, and it is number cid from now on */
#define HP_CREF_USE 2  /* number cid alone: no name or metadata on the wire
                          (nor status and message: it carries no failure) */

struct hp_nego_ready {
  uint32_t comm; /* the communicator (process set id) */
  uint8_t cref;  /* HP_CREF_* */
  uint32_t cid;
  char name[192];
  uint8_t coll, dtype, op, ndims;
  int32_t root;
  uint64_t count;
  int64_t shape[8];
  double prescale, postscale;
  uint64_t aux_hash;
  uint64_t group; /* grouped operations: the group's key, its size and */
  uint32_t group_n, group_idx; /* this tensor's place in it (n 0: none) */
  int32_t rank; /* a rank of the sender that submitted it, for messages;
                   join: the sender's last rank to join */
  int32_t status; /* with msg: the HORA_E* its ranks fail it with */
  char msg[460]; /* non-empty: the sender's own ranks disagree (this says
                    how); the operation fails everywhere */
  uint32_t flags; /* HP_NR_*: what the sender knows of its own ranks' data */
  int32_t priority; /* the highest its ranks gave (hora_request_t.priority);
                       not compared: the coordinator takes the highest */
  /* how long before this READY each local member of the set submitted it
   * (ns, on the sender's clock; UINT64_MAX: it did not, it has joined),
   * in member order: narrive little-endian u64s at arrive (the encoder's
   * buffer, or the decoded payload: valid only as long as that is; read
   * with hp_nego_ready_before()). Not part of the metadata (NEGO_DECIDE
   * does not carry it). */
  uint32_t narrive;
  const unsigned char *arrive;
  /* a small allreduce: the sender's part of the result (its members'
   * inputs prescaled and reduced, in the cross-host ring's element type),
   * for the coordinator to reduce with the other hosts' and send back in
   * its decision (daemon/xhost/ring.c, "star"); ndata 0: none. Valid as
   * long as arrive. */
  uint32_t ndata;
  const unsigned char *data;
};
#define HP_ARRIVE_MAX 65536u
#define HP_STAR_MAX 16384u /* the most bytes of a part or a result */
/* Every local member submitted it and its data lie in the arena (none is
 * streamed through staging, none joined): it may be fused with others. */
#define HP_NR_RESIDENT 1u
/* The ranks asked for 16-bit values between hosts (HORA_REQ_WIRE16):
 * part of the metadata, compared across hosts. */
#define HP_NR_WIRE16 2u
/* The tensor lies in GPU memory on the ranks (HP_F_DEVICE): part of the
 * metadata, compared across hosts. */
#define HP_NR_DEVICE 4u
#define HP_NR_HOSTMEM 8u /* ... in host memory (HP_F_HOSTMEM) */
uint64_t hp_nego_ready_before(const struct hp_nego_ready *m, uint32_t i);
/* Stores v as entry i of an arrive buffer. */
void hp_arrive_store(unsigned char *buf, uint32_t i, uint64_t v);

struct hp_nego_decide {
  uint32_t comm;
  uint8_t cref; /* HP_CREF_* */
  uint32_t cid;
  uint64_t seq;
  char name[192];
  int32_t status;
  int32_t value; /* join: the last rank to join */
  uint32_t fuse; /* 1: fused with the previous decision of its NEGO_PLAN
                    (one collective over their concatenation) */
  uint32_t algo; /* HP_DA_*: how the hosts run it, the coordinator's
                    choice (its knobs, or its autotuning) */
  char msg[460];
  /* the operation, for a host whose ranks have all joined (it runs it
   * with neutral contributions without having seen it): meta.name and
   * meta.msg are not sent */
  struct hp_nego_ready meta;
  /* a small allreduce every host sent its part of: the whole result, in
   * the ring's element type (ndata 0: none; it runs as usual). Points into
   * the decoded frame, or the coordinator's memory. */
  uint32_t ndata;
  const unsigned char *data;
};

/* hp_nego_decide.algo */
#define HP_DA_FLAT 1u    /* an allreduce or allgather round a flat ring
                            (hierarchical_allreduce/_allgather off) */
#define HP_DA_NOCACHE 2u /* the coordinator's cache is off: the host sends
                            its NEGO_READYs whole too (cache_enabled) */
#define HP_DA_ALL 3u

struct hp_data_hdr {
  uint64_t seq;   /* the decision being executed */
  uint64_t piece; /* index of the piece of the tensor */
  uint32_t step;  /* ring step */
  uint32_t comm;  /* its communicator */
};
#define HP_DATA_HDR_LEN 24u

/* XDATA: bytes [offset, +len) of what host `from` sends this host for
 * decision seq of communicator comm (step: which part, per collective). */
struct hp_xdata_hdr {
  uint32_t comm;
  uint32_t step;
  uint64_t seq;
  uint64_t offset;
};
#define HP_XDATA_HDR_LEN 24u

struct hp_peer_lost {
  uint32_t host; /* the host index it lost */
  char msg[460]; /* why ("no heartbeat for 3.0 s") */
};

/* In a daemon's HEARTBEAT to the launcher: this many host indices at most
 * (an index equal to the number of hosts stands for the launcher). */
#define HP_TROUBLE_MAX 1024u

struct hp_rank_gone {
  int32_t rank; /* the first rank gone */
  int32_t host; /* its host index */
  uint8_t restart; /* 1: its horad starts it again, and a new session may
                    * start once it and the others are back */
  char msg[460];
};

/* SESSION: every rank of the sender has called hora_init() again after
 * hora_shutdown() (HP_SESSION_BACK, to host 0), or every rank of the job
 * has, and the receiver starts its new session (HP_SESSION_START, from
 * host 0). `number` is the session asked for (1 after the first). */
/* HP_SESSION_FENCE: the sender has re-formed the job (hp_reform number
 * `number`): nothing it sent before belongs to the re-formed job. */
enum { HP_SESSION_BACK = 1, HP_SESSION_START = 2, HP_SESSION_FENCE = 3 };
struct hp_session {
  uint32_t number;
  uint32_t phase;
  uint32_t session; /* FENCE: the sender's session count; else 0 */
};

/* REFORM: an elastic job goes on in place on some of its hosts (the
 * others are left out). The hosts kept, in their order, are the job's
 * hosts from now on: hosts[i] is old host old_index[i] (increasing), with
 * its ranks numbered first_rank[i] .. + nranks[i]; the receiver's own
 * ranks get ranks[] (in local-rank order). `number` counts the job's
 * re-formings from 1; `why` says what was left out and why. */
struct hp_reform {
  uint32_t number;
  uint32_t host_index, nhosts;
  int32_t size;
  uint32_t *old_index;
  int32_t *first_rank, *nranks;
  uint32_t nlocal;
  struct hp_job_rank *ranks;
  char why[460];
};

void hp_enc_register(struct hp_wbuf *w, const struct hp_register *m);
int hp_dec_register(const unsigned char *p, size_t n, struct hp_register *m);
void hp_enc_peer_hello(struct hp_wbuf *w, uint32_t host_index, uint32_t nhosts);
int hp_dec_peer_hello(const unsigned char *p, size_t n, uint32_t *host_index,
                      uint32_t *nhosts);
void hp_enc_nego_ready(struct hp_wbuf *w, const struct hp_nego_ready *m);
int hp_dec_nego_ready(const unsigned char *p, size_t n,
                      struct hp_nego_ready *m);
void hp_enc_nego_decide(struct hp_wbuf *w, const struct hp_nego_decide *m);
int hp_dec_nego_decide(const unsigned char *p, size_t n,
                       struct hp_nego_decide *m);
/* NEGO_PLAN: the decisions on the n tensors of one group (same comm), run
 * as one unit in this order. The decoder allocates *out (free it). */
#define HP_PLAN_MAX 4096u /* == HP_GROUP_MAX of shm.h: tensors in one group */
void hp_enc_nego_plan(struct hp_wbuf *w, const struct hp_nego_decide *v,
                      uint32_t n);
int hp_dec_nego_plan(const unsigned char *p, size_t n,
                     struct hp_nego_decide **out, uint32_t *count);
/* Writes a complete DATA frame header (16 + HP_DATA_HDR_LEN bytes) for a
 * payload of `bytes` into out. */
void hp_data_frame_hdr(unsigned char *out, const struct hp_data_hdr *m,
                       uint32_t bytes);
int hp_dec_data_hdr(const unsigned char *p, size_t n, struct hp_data_hdr *m);
/* The frame header and XDATA header before `bytes` of data. */
void hp_xdata_frame_hdr(unsigned char *out, const struct hp_xdata_hdr *m,
                        uint32_t bytes);
int hp_dec_xdata_hdr(const unsigned char *p, size_t n,
                     struct hp_xdata_hdr *m);
void hp_enc_peer_lost(struct hp_wbuf *w, const struct hp_peer_lost *m);
int hp_dec_peer_lost(const unsigned char *p, size_t n, struct hp_peer_lost *m);
/* A HEARTBEAT listing n host indices (none: an empty heartbeat). */
void hp_enc_heartbeat(struct hp_wbuf *w, const uint32_t *hosts, uint32_t n);
/* Reads at most max indices into hosts; an empty payload is 0 of them. */
int hp_dec_heartbeat(const unsigned char *p, size_t n, uint32_t *hosts,
                     uint32_t max, uint32_t *count);
void hp_enc_rank_gone(struct hp_wbuf *w, const struct hp_rank_gone *m);
int hp_dec_rank_gone(const unsigned char *p, size_t n, struct hp_rank_gone *m);
/* LATENESS: per rank, the operations (of at least two submitting ranks)
 * it took part in, those it submitted last, and a log-linear histogram
 * (lhist.h) of how long after the first rank it submitted each. */
struct hp_late_rank {
  int32_t rank;
  uint64_t ops, last;
  uint64_t hist[512]; /* HC_LHIST_N */
};
/* At most HP_LATE_MAX ranks in one frame. */
#define HP_LATE_MAX 65536u
void hp_enc_lateness(struct hp_wbuf *w, const struct hp_late_rank *v,
                     uint32_t n);
/* Allocates *out (free it): *count entries, each checked (the histogram
 * holds ops values, last <= ops, bucket indices in order). */
int hp_dec_lateness(const unsigned char *p, size_t n,
                    struct hp_late_rank **out, uint32_t *count);
void hp_enc_reform(struct hp_wbuf *w, const struct hp_reform *m);
/* Fills *m with malloc'd arrays; free with hp_reform_free() (also on
 * error). Checks the numbering: consecutive ranks from 0, hosts in
 * increasing old order, the receiver's ranks its host's. */
int hp_dec_reform(const unsigned char *p, size_t n, struct hp_reform *m);
void hp_reform_free(struct hp_reform *m);
void hp_enc_reformed(struct hp_wbuf *w, uint32_t number);
int hp_dec_reformed(const unsigned char *p, size_t n, uint32_t *number);
void hp_enc_session(struct hp_wbuf *w, const struct hp_session *m);
int hp_dec_session(const unsigned char *p, size_t n, struct hp_session *m);

void hp_enc_hello(struct hp_wbuf *w, const struct hp_hello *m);
int hp_dec_hello(const unsigned char *p, size_t n, struct hp_hello *m);
void hp_enc_refuse(struct hp_wbuf *w, const struct hp_refuse *m);
int hp_dec_refuse(const unsigned char *p, size_t n, struct hp_refuse *m);
void hp_enc_welcome(struct hp_wbuf *w, const struct hp_welcome *m);
int hp_dec_welcome(const unsigned char *p, size_t n, struct hp_welcome *m);
void hp_enc_job(struct hp_wbuf *w, const struct hp_job *m);
/* Fills *m with malloc'd members; free with hp_job_free() (also on error). */
int hp_dec_job(const unsigned char *p, size_t n, struct hp_job *m);
void hp_job_free(struct hp_job *m);
void hp_enc_exit(struct hp_wbuf *w, const struct hp_exit *m);
int hp_dec_exit(const unsigned char *p, size_t n, struct hp_exit *m);
void hp_enc_output(struct hp_wbuf *w, const struct hp_output *m);
/* m->data points into p. */
int hp_dec_output(const unsigned char *p, size_t n, struct hp_output *m);
/* A frame whose payload is one string (ABORT) or nothing (BYE, DONE). */
void hp_enc_text(struct hp_wbuf *w, uint16_t type, const char *text);
char *hp_dec_text(const unsigned char *p, size_t n);

#endif
