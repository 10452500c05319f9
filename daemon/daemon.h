/* daemon.h -- horad's shared state: the job, its local ranks, the
 * negotiation table and the operation being executed. */
#ifndef HORA_DAEMON_H
#define HORA_DAEMON_H

#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "auth.h"
#include "common.h"
#include "conn.h"
#include "msg.h"
#include "shm.h"

struct hd_daemon;
struct hd_tensor;
struct hd_conn;

/* One local rank: its process, its output pipes, its connection and its
 * shared-memory segment. */
struct hd_rank {
  struct hd_daemon *d;
  int idx; /* index among local ranks == local_rank */
  struct hp_job_rank info;
  char token[HP_TOKEN_LEN + 1];

  /* process */
  pid_t pid; /* 0 before spawn / after reaping */
  int spawned, reaped, reported;
  int exit_how, exit_code;
  char *spawn_msg;
  uv_pipe_t out[2];
  int out_open[2];
  uv_timer_t report_timer; /* reports the exit even if a pipe stays open */

  /* connection */
  struct hd_conn *conn;
  int connected, said_bye;

  /* shared memory: daemon consumes sq, produces cq */
  int memfd;
  unsigned char *shm;
  uint64_t shm_size;
  struct hp_shm_hdr *hdr;
  struct hp_shm_hdr layout; /* private copy: the rank can write the shared one */
  struct hp_ring_cursor sq, cq;
  /* completions waiting for room in cq: a ring of capbacklog entries (a
   * power of two), the oldest at backlog_head */
  struct hp_cqe *backlog;
  size_t nbacklog, capbacklog, backlog_head;
  size_t backlog_copies; /* of them, copy requests (not DONE) */
  uint64_t held; /* submissions taken whose DONE has not reached cq */
  int throttled; /* held reached max_pending: its sq waits (logged once) */
  int wake_rank, wake_prog; /* pending wake-ups after a batch of pushes */

  int gone; /* no longer takes part in collectives */
  int broken; /* wrote nonsense into its rings, or does not read them: no
                longer polled, its completions dropped; hd_poll_rings()
                then declares it gone */
  char broken_msg[HP_MSG_MAX + 1];
  uv_timer_t lost_timer; /* connection closed without goodbye */
};

/* A participant's view of one operation. */
struct hd_part {
  uint64_t id;
  int submitted;
  int resident;     /* data in the arena at offset */
  uint64_t offset;  /* from the segment start */
  uint64_t ready;   /* chunks copied into staging (streamed) */
  uint64_t done;    /* chunks copied out of staging (streamed) */
  uint64_t issued;  /* chunks whose COPY_IN was sent */
};

/* A named operation, from the first submission until it completes. */
struct hd_tensor {
  struct hd_tensor *next_hash, *next_ready;
  char name[HP_NAME_MAX + 1];
  uint8_t coll, dtype, op;
  int32_t root;
  uint64_t count;
  double prescale, postscale;
  int first; /* local index of the first submitter: the metadata reference */
  int awaiting; /* multi-host: told the coordinator, waits for its decision */
  uint64_t seq; /* multi-host: the coordinator's decision number */
  int nsubmitted;
  int stall_warned;
  uint64_t t_first; /* when the first rank submitted it */
  /* execution of a streamed operation */
  uint64_t nchunks, chunk_elems, reduced;
  struct hd_part part[]; /* one per local rank */
};

/* An engine executes ready operations (habit 6: a named struct of function
 * pointers). The CPU engine serves tensors in host memory; a GPU engine
 * (NCCL) takes its place for device tensors, registered beside it. */
struct hd_engine {
  const char *name;
  int (*init)(struct hd_daemon *d);
  void (*fini)(struct hd_daemon *d);
  /* Advances the operation; returns 1 when it completed (every participant
   * was sent its DONE), 0 when it waits for ranks. */
  int (*step)(struct hd_daemon *d, struct hd_tensor *t);
};

extern const struct hd_engine hd_engine_cpu;

/* A host of a multi-host job, as this daemon sees it. */
struct hd_peer {
  int needed;        /* a link this daemon keeps: ring neighbour, coordinator */
  struct hp_conn *c; /* once it has said PEER_HELLO */
  int up;            /* both ends bound the link: it may carry anything */
  int left;          /* said goodbye: its ranks have ended */
  int lost;          /* its connection broke or fell silent */
};

struct hd_xop;   /* xhost.c: the cross-host part of the running operation */
struct hd_coord; /* coord.c: the coordinator's table (host 0 only) */

struct hd_daemon {
  uv_loop_t *loop;
  struct hp_job job;
  int have_job;
  int nlocal;
  struct hd_rank *ranks;
  char hostname[256];

  /* launcher connection: a socketpair (ctl) when horarun started this
   * horad on its own machine, a TCP connection (ctl_conn) over ssh */
  uv_pipe_t ctl;
  int ctl_open;
  struct hp_conn *ctl_conn;
  int ctl_closing; /* ctl_conn: close once the queued frames are sent */
  struct hp_decoder ctl_dec;

  /* job-private unix socket, in the abstract namespace: "@name" (no file,
   * so nothing is left behind however horad ends) */
  uv_pipe_t listener;
  char sock_path[108];
  struct hd_conn *conns; /* every accepted connection */

  /* wake-ups and polling */
  int efd;
  uv_poll_t efd_poll;
  uv_idle_t spin;
  int spinning;
  uint64_t last_activity;
  uint64_t spin_ns;
  uint64_t chunk_size, arena_size;
  uint64_t max_pending; /* per rank: what it can make the daemon hold */

  uv_timer_t stall_timer;
  uint64_t stall_warn_ns, stall_fail_ns;

  uv_signal_t sigchld;
  uv_timer_t term_timer, kill_timer;
  int aborting, term_sent, kill_sent, done_sent;
  int nexited;

  /* negotiation */
  struct hd_tensor **table;
  size_t table_size, ntensors;
  struct hd_tensor *ready_head, *ready_tail;
  const struct hd_engine *engine;

  /* first rank that left the job, and why: later operations fail with it */
  int gone_rank;
  char gone_msg[HP_MSG_MAX + 1];

  /* multi-host */
  int multi;     /* the job spans several hosts */
  int boot;      /* got a bootstrap line on stdin (host index, secret) */
  int boot_host; /* the host index it gave */
  unsigned char secret[HP_SECRET_LEN];
  char iface[256]; /* --iface: hora's TCP uses the first of these
                      interfaces (comma separated) this host has */
  uv_tcp_t mesh_listener;
  int mesh_listening;
  uint16_t mesh_port;
  char mesh_addr[64]; /* the iface's address, or "" */
  struct hd_peer *peers; /* job.nhosts entries */
  struct hp_conn *mesh_conns; /* every mesh connection, also unproven */
  int peers_needed, peers_up, mesh_up;
  struct hp_conn **early; /* authenticated peers that spoke before the JOB */
  size_t nearly;
  uv_timer_t hb_timer;
  uint64_t hb_timeout_ns;
  uv_timer_t close_timer; /* a graceful close has this long */
  unsigned nrejected;     /* strangers turned away (logging is thinned) */
  struct hd_coord *coord;
  struct hd_xop *xop;
  /* a host whose ranks all ended: what was decided still runs, nothing
   * new can be */
  char left_msg[HP_MSG_MAX + 1];
};

/* control.c */
int hd_control_open(struct hd_daemon *d, int fd);
void hd_control_send(struct hd_daemon *d, struct hp_wbuf *w);
void hd_send_exit(struct hd_daemon *d, struct hd_rank *r);
void hd_maybe_done(struct hd_daemon *d);

/* spawn.c */
int hd_spawn_all(struct hd_daemon *d);
void hd_teardown(struct hd_daemon *d, const char *reason, int delay_ms);
void hd_spawn_close(struct hd_daemon *d);

/* local.c: the unix socket, hello and shared memory */
int hd_local_listen(struct hd_daemon *d);
void hd_local_close(struct hd_daemon *d);
void hd_rank_left(struct hd_rank *r, const char *why);
void hd_on_lost_timer(uv_timer_t *t);

/* rings.c: polling, completions and wake-ups */
int hd_rings_init(struct hd_daemon *d);
void hd_rings_close(struct hd_daemon *d);
int hd_poll_rings(struct hd_daemon *d);
/* Queues a completion for r (never re-enters negotiation: a rank found
 * broken here is declared gone later, from hd_poll_rings()). */
void hd_push_cqe(struct hd_rank *r, const struct hp_cqe *e);
/* Drops what r's completions hold (r is gone: nobody reads them). */
void hd_rings_forget(struct hd_rank *r);
void hd_complete(struct hd_rank *r, uint64_t id, int status, const char *msg);
void hd_flush_wakeups(struct hd_daemon *d);
void hd_kick(struct hd_daemon *d);

/* negotiate.c */
void hd_submit(struct hd_rank *r, const struct hp_sqe *e);
void hd_chunk_event(struct hd_rank *r, const struct hp_sqe *e);
void hd_run_ready(struct hd_daemon *d);
void hd_fail_all(struct hd_daemon *d);
void hd_tensor_finish(struct hd_daemon *d, struct hd_tensor *t);
void hd_tensor_fail(struct hd_daemon *d, struct hd_tensor *t, int status,
                    const char *msg);
void hd_check_stalls(struct hd_daemon *d);

/* main.c */
void hd_free_job(struct hd_daemon *d);

/* control.c, multi-host */
int hd_control_connect(struct hd_daemon *d, const char *addr, int port);
void hd_control_fault(struct hd_daemon *d, const char *msg);
void hd_job_go(struct hd_daemon *d); /* the mesh is up: spawn, READY */

/* mesh.c: connections between the daemons of a multi-host job */
int hd_mesh_listen(struct hd_daemon *d);
int hd_mesh_start(struct hd_daemon *d);
void hd_mesh_close(struct hd_daemon *d, int graceful);
int hd_mesh_send(struct hd_daemon *d, int host, struct hp_wbuf *w);
struct hp_conn *hd_mesh_conn(struct hd_daemon *d, int host);
/* A local rank left (rank >= 0) or a host was lost: tells the others. */
void hd_mesh_announce_gone(struct hd_daemon *d, int rank, int host,
                           const char *msg);
void hd_host_name(struct hd_daemon *d, int host, char *buf, size_t len);

/* coord.c: negotiation across hosts */
void hd_coord_ready(struct hd_daemon *d, int host,
                    const struct hp_nego_ready *m);
void hd_coord_free(struct hd_daemon *d);
void hd_coord_check_stalls(struct hd_daemon *d);

/* negotiate.c: a participant's metadata, compared across ranks */
struct hd_meta {
  uint8_t coll, dtype, op;
  int32_t root;
  uint64_t count;
};
const char *hd_coll_name(int coll); /* "allreduce" */
uint64_t hd_name_hash(const char *name); /* FNV-1a, for the name tables */
/* Describes how b (of rank rb) differs from a (of rank ra) in msg, as
 * Horovod words it; 0 when they agree. */
int hd_meta_mismatch(const char *name, const struct hd_meta *a, int ra,
                     const struct hd_meta *b, int rb, char *msg, size_t len);

/* negotiate.c, multi-host */
void hd_decide(struct hd_daemon *d, const struct hp_nego_decide *m);
/* Fails what waits for a decision (a host has left: none will come). */
void hd_fail_undecided(struct hd_daemon *d, const char *why);

/* engine_cpu.c: helpers the cross-host engine shares */
int hd_needs_in(struct hd_daemon *d, struct hd_tensor *t, int i);
int hd_needs_out(struct hd_daemon *d, struct hd_tensor *t, int i);
int hd_is_root(struct hd_daemon *d, struct hd_tensor *t, int i);
uint64_t hd_staging_off(struct hd_rank *r, uint64_t k);
void hd_copy_req(struct hd_rank *r, struct hd_tensor *t, int kind, uint64_t k);

/* xhost.c: allreduce and broadcast across hosts */
int hd_xhost_step(struct hd_daemon *d, struct hd_tensor *t);
/* A DATA frame from host `from`; sets *keep when it holds on to payload. */
int hd_xhost_data(struct hd_daemon *d, int from, unsigned char *payload,
                  size_t len, unsigned char *placed, int *keep, char *why,
                  size_t whylen);
/* Where the data of a DATA frame (header `pre`, frame length len) can go
 * straight away, or NULL (see hp_conn_set_place). */
void *hd_xhost_place(struct hd_daemon *d, int from, const unsigned char *pre,
                     size_t len);
void hd_xhost_abort(struct hd_daemon *d);
void hd_xhost_free(struct hd_daemon *d);

/* pool.c: reduction threads */
int hd_pool_init(int nthreads);
void hd_pool_fini(void);
int hd_pool_size(void);
/* Runs fn(arg, i, n) for i in [0, n) on the pool and the calling thread;
 * returns when all are done. */
void hd_pool_run(void (*fn)(void *arg, int i, int n), void *arg, int n);

#endif
