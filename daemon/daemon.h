/* daemon.h -- horad's objects: the daemon and its jobs, a job's local
 * ranks, its communicators with their name tables, operations and plans,
 * and the interfaces to the engines and links below. */
#ifndef HORA_DAEMON_H
#define HORA_DAEMON_H

#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "auth.h"
#include "common.h"
#include "conn.h"
#include "link.h"
#include "fast.h"
#include "msg.h"
#include "shm.h"

/* horad reads knobs from a job's struct hc_knobs (job->knobs), never from
 * its own environment: the table's environment readers are not for it. */
#undef hc_param_str
#undef hc_param_int
#undef hc_param_double
#pragma GCC poison hc_param_str hc_param_int hc_param_double
#pragma GCC poison hc_param_str_named hc_param_int_named hc_param_double_named

struct hd_daemon;
struct hd_job;
struct hd_tensor;
struct hd_conn;
struct hd_dl;
struct hd_timeline;

/* Decision numbers (a communicator coordinator's, in DATA and XDATA
 * frames) carry the session in their high bits: a frame of a session that
 * failed, still on its way when the next one started, is told apart. */
#define HD_SEQ_SESSION_SHIFT 40
#define HD_SEQ_FIRST(session) ((uint64_t)(session) << HD_SEQ_SESSION_SHIFT)
#define HD_SEQ_STALE(job, seq) \
  (((seq) >> HD_SEQ_SESSION_SHIFT) < (uint64_t)(job)->session)

/* struct hd_rank's restarting (--restart-failed-ranks, spawn.c) */
enum { HD_RESTART_ENDING = 1, HD_RESTART_STARTED = 2 };

/* One local rank: its process, its output pipes, its connection and its
 * shared-memory segment. */
struct hd_rank {
  struct hd_job *job;
  int idx; /* index among local ranks == local_rank */
  struct hp_job_rank info;
  int32_t slot; /* its rank as the job started (info.rank then): what
                   horarun knows it by, also once an elastic job re-formed
                   (reform.c) numbered it anew */
  char token[HP_TOKEN_LEN + 1];

  /* process */
  pid_t pid; /* 0 before spawn / after reaping */
  int spawned, reaped, reported;
  int exit_how, exit_code;
  int noinit; /* exited 0 without ever initialising hora (no hello), while
                 the job ran */
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
  struct hp_shm_hdr
      layout; /* private copy: the rank can write the shared one */
  struct hp_ring_cursor sq, cq;
  /* completions waiting for room in cq: a ring of capbacklog entries (a
   * power of two), the oldest at backlog_head */
  struct hp_cqe *backlog;
  size_t nbacklog, capbacklog, backlog_head;
  size_t backlog_copies; /* of them, copy requests (not DONE) */
  uint64_t held; /* submissions taken whose DONE has not reached cq */
  int throttled; /* held reached max_pending: its sq waits (logged once) */
  int wake_rank, wake_prog; /* pending wake-ups after a batch of pushes */

  struct hd_tensor *staging_owner; /* the streamed operation using its
                                      staging area, or NULL */
  int exit_held; /* its failed exit waits for the culprit's (victim_timer) */
  struct hd_conn *rejoin; /* hora_init() again after hora_shutdown(): its
                             connection waits for the new session */
  int gone; /* no longer takes part in collectives */
  int broken; /* wrote nonsense into its rings, or does not read them: no
                longer polled, its completions dropped; hd_poll_rings()
                then declares it gone */
  char broken_msg[HP_MSG_MAX + 1];
  uv_timer_t lost_timer; /* connection closed without goodbye */
  /* --restart-failed-ranks: times horad started it again; restarting:
   * HD_RESTART_ENDING, it crashed and its process is being reaped;
   * HD_RESTART_STARTED, its program runs again and its hello waits for
   * the new session as a rejoin does (spawn.c) */
  int restarts, restarting;

  /* a rank another launcher started (job->joined): its process, watched
   * through a pidfd from its first hello until it exits */
  int pidfd;
  uv_poll_t exit_poll;
  int exit_polling;
};

/* What a participant said about an operation; compared across ranks
 * (coll.c: how depends on the collective). */
struct hd_meta {
  uint8_t coll, dtype, op, ndims;
  int32_t root;
  uint64_t count;
  int64_t shape[HP_MAX_DIMS];
  double prescale, postscale;
  uint64_t aux_hash; /* of the recv_counts / splits / ranks array */
  uint64_t group;    /* grouped operations: the group's key, */
  uint32_t group_n, group_idx; /* its size and this one's place (0: none) */
  uint32_t flags;              /* HD_MF_* */
  uint32_t spare;              /* 0: no padding for memcmp() to see */
};
#define HD_MF_WIRE16 1u /* 16-bit values between hosts (HORA_REQ_WIRE16) */
#define HD_MF_DEVICE 2u /* the tensor lies in GPU memory (HP_F_DEVICE) */
#define HD_MF_HOSTMEM 4u /* ... in host memory (HP_F_HOSTMEM; neither: no
                            bytes, matching both) */

/* A participant's view of one operation (index: the local member). */
struct hd_part {
  uint64_t id;
  int submitted;
  int joined;       /* the rank has joined: neutral input, no output */
  int resident;     /* data in the arena at offset */
  uint64_t offset;  /* from the segment start */
  uint64_t count;   /* elements it sends */
  uint64_t recv_offset, recv_count; /* HP_F_RECV */
  int64_t *aux;     /* private copy of its array (HP_F_AUX) */
  uint64_t naux;
  uint64_t ready;   /* chunks copied into staging (streamed) */
  uint64_t done;    /* chunks copied out of staging (streamed) */
  uint64_t issued;  /* chunks whose COPY_IN was sent */
  uint64_t t_sub;   /* when it was submitted (hc_now_ns(), metrics.c) */
};

/* A named operation of a communicator, from the first submission until
 * it completes: one negotiated collective and how far its plan went. */
struct hd_tensor {
  struct hd_tensor *next_hash;
  struct hd_comm *comm;
  char name[HP_NAME_MAX + 1];
  uint64_t hash; /* hd_name_hash(name): its place in the name table */
  struct hd_meta meta; /* the first submitter's: the reference */
  int first;    /* local member index of the first submitter */
  int awaiting; /* multi-host: told the coordinator, waits for its decision */
  uint64_t seq; /* multi-host: the coordinator's decision number */
  int fuse;     /* multi-host: fused with the tensor before it in its plan
                   (one collective over their concatenation) */
  int flat;     /* multi-host: round a flat ring, not hierarchically (its
                   decision's HP_DA_FLAT: an allreduce or an allgather) */
  struct hd_xfused *run; /* a fused run's own operation (exchange.c): its
                            run, which its result goes to */
  unsigned char **own;   /* ... and its data, in this daemon's memory:
                            local member i's input own[2i], output own[2i+1] */
  int nsubmitted;
  int32_t priority; /* the highest its submitters gave (hora_request_t) */
  int queued;   /* in a plan of the ready queue: decided, running or to run */
  struct hd_group *group; /* grouped: the group it is assembled in */
  int held;     /* grouped: ready here, waits for the rest of its group */
  int stall_warned;
  int value;    /* a non-negative result (join: the last rank to join) */
  uint64_t t_first; /* when the first rank submitted it */
  uint32_t tl;      /* timeline.c: where its row is */
  uint64_t tl_wait; /* timeline.c: when the engine began to wait for it */
  /* execution of a streamed operation */
  uint64_t nchunks, chunk_elems, reduced;
  /* execution of a large resident allreduce or broadcast on one host, in
   * pieces (engines/cpu.c): the elements done */
  uint64_t piece_done;
  void *neutral; /* a joined member's input */
  unsigned char *star; /* the coordinator's whole result (hd_star_*), */
  uint32_t nstar;      /* its bytes; NULL: none, the ring runs */
  struct hd_meta *metas; /* one per local member */
  struct hd_part part[]; /* one per local member */
};

/* A plan: what one decision runs -- a list of a communicator's tensors,
 * executed as one unit by one engine, in order (t[cur] is the first not
 * complete). Today a plan holds one tensor, or the tensors of a group
 * (hora_submit_group); fusion builds on it. */
struct hd_plan {
  struct hd_plan *next;
  struct hd_comm *comm;
  const struct hd_engine *engine; /* the first that can run every tensor */
  int n, cur;
  struct hd_tensor *t[];
};

/* A group being assembled: its tensors by group_idx, until every one is
 * ready here (one host) or decided (several hosts). */
struct hd_group {
  struct hd_group *next;
  uint64_t key;
  uint32_t n, nlive, nheld, ndecided;
  struct hd_tensor *t[];
};

/* A communicator: the global set (id 0) or a process set. Its members
 * are global ranks, sorted; those of this host are local[0..nlocal) (as
 * indices into job->ranks), those of host hosts[k] are members
 * [host_first[k], host_first[k] + host_n[k]). Each negotiates on its own:
 * its own name table, ready queue, coordinator (its first host) and
 * cross-host state, so disjoint sets never wait for each other. */
/* The response cache: one direction of a communicator's negotiation
 * between two hosts (see ncache.c). Empty until used. */
struct hd_nc_slot;
struct hd_ncache {
  uint32_t cap, n, hand; /* size, numbers given, the next to reuse */
  struct hd_nc_slot *slot;
  uint32_t *bucket; /* by name: the first slot + 1 (the sender's side) */
  uint32_t nbuckets;
};
struct hd_comm {
  struct hd_job *job;
  uint32_t id;
  int removed;  /* hora_process_set_remove'd: refuses new operations */
  int size;     /* members */
  int32_t *members;
  int nlocal;
  int *local;        /* index into job->ranks, in member order */
  int *local_member; /* member index of local[i] */
  int *part_of;      /* by index into job->ranks: its local index here, or -1 */
  unsigned char *joined; /* local members that have joined (global set) */
  int nhosts;
  int *hosts;        /* global host indices, in member order */
  int *host_first, *host_n;
  int me;            /* position of this host in hosts[], -1: none */
  /* negotiation */
  struct hd_tensor **table;
  size_t table_size, ntensors;
  struct hd_plan *plan_head, *plan_tail; /* the ready queue */
  struct hd_tensor *spare; /* freed ones kept for reuse (negotiate.c) */
  int nspare;
  struct hd_plan *spare_plan;
  struct hd_group *groups;
  /* join (global set only) */
  int njoined;       /* local members that have joined */
  int32_t last_joined;
  /* NEGO_READYs for the coordinator, held while the rings are polled and
   * sent together after (one write for a burst of submissions) */
  struct hp_wbuf ready_out;
  uint64_t ready_data; /* bytes of small allreduces' parts in ready_out */
  /* the response cache (ncache.c) with its coordinator, when that is
   * another host: the numbers this host gives its NEGO_READYs, and those
   * the coordinator gives its decisions */
  struct hd_ncache nc_ready, nc_decide;
  int nc_off; /* the coordinator's last decision said HP_DA_NOCACHE: this
                 host's NEGO_READYs go whole too */
  struct hd_coord *coord;  /* coord.c: when hosts[0] is this host */
  struct hd_xop *xop;      /* xhost/ring.c: its running cross-host operation */
  struct hd_xop *xop2;     /* ring.c's urgent lane: one of higher priority
                              that overtook xop's (hd_xhost_lane) */
  struct hd_xcoll *xc;     /* xhost/exchange.c: the same, for the others */
  struct hd_xfused *xfused; /* xhost/exchange.c: the fused run under way */
};

/* The sender: how to name (name, key) in its next frame, cap the knob
 * cache_capacity (0: off): HP_CREF_NONE, or HP_CREF_SET / HP_CREF_USE with
 * *cid. */
int hd_nc_encode(struct hd_ncache *nc, uint32_t cap, const char *name,
                 const struct hd_meta *key, uint32_t *cid);
/* The receiver: learns a SET; fills name and key for a USE. 0, or -1 for
 * a number it cannot have (a protocol error of the sender). */
int hd_nc_decode(struct hd_ncache *nc, uint32_t cap, int cref, uint32_t cid,
                 char *name, size_t namelen, struct hd_meta *key);
void hd_nc_free(struct hd_ncache *nc);
/* The job's cache_capacity, bounded. */
uint32_t hd_nc_capacity(const struct hd_job *job);

/* An engine executes ready operations (a named struct of function
 * pointers, in a registry: hd_engines). The first whose can_run accepts
 * an operation runs it. The CPU engine serves tensors in host memory; a
 * GPU engine (NCCL) registers beside it for device tensors. An engine
 * that works on a thread of its own completes through the loop
 * (uv_async), never by touching loop state from that thread. */
struct hd_engine {
  const char *name;
  int (*init)(struct hd_job *job);
  void (*fini)(struct hd_job *job);
  int (*can_run)(struct hd_job *job, const struct hd_tensor *t);
  /* Advances plan p from p->t[p->cur]: each tensor it completes (every
   * participant was sent its DONE) it hands to hd_plan_next(). Returns 1
   * when the whole plan is complete, 0 when it waits (for ranks, peers or
   * its thread: it calls hd_comm_progress() when it can go on). */
  int (*progress)(struct hd_job *job, struct hd_plan *p);
  /* Drops what the engine holds for the communicator's operations (they
   * are being failed). */
  void (*abort)(struct hd_job *job, struct hd_comm *c);
  /* Frees what the engine keeps for the communicator (it is freed). */
  void (*comm_fini)(struct hd_job *job, struct hd_comm *c);
};

extern const struct hd_engine hd_engine_cpu;
/* The registry (engines/cpu.c); the core reaches it through job->engines. */
extern const struct hd_engine *const hd_engines[];

/* What the layers below reach up through: the calls run one way, from
 * control.c down to the links and the kernels, and these few go back up
 * through pointers the job sets (control.c's hd_job_upcalls). */
struct hd_upcalls {
  /* the job's one failure path: stop the ranks, end (spawn.c) */
  void (*teardown)(struct hd_job *job, const char *reason, int delay_ms);
  /* close everything: horad ends (control.c) */
  void (*close_all)(struct hd_job *job);
  /* the mesh is up: spawn the ranks, say READY (control.c) */
  void (*job_go)(struct hd_job *job);
  /* a coordinator's decisions for this host (negotiate.c) */
  void (*decide)(struct hd_job *job, const struct hp_nego_decide *v,
                 uint32_t n);
  /* a new session across hosts (session.c): every local rank is back; a
   * SESSION frame from host `from` (< 0, why: a bad one); none can start */
  void (*session_back)(struct hd_job *job);
  int (*session_frame)(struct hd_job *job, int from, const unsigned char *p,
                       size_t len, char *why, size_t whylen);
  void (*session_cancel)(struct hd_job *job);
  /* a DEADLOCK frame from host `from` (deadlock.c); < 0 (why): a bad one */
  int (*deadlock_frame)(struct hd_job *job, int from, const unsigned char *p,
                        size_t len, char *why, size_t whylen);
};
extern const struct hd_upcalls hd_job_upcalls;

/* A host of a multi-host job, as this daemon sees it. */
struct hd_peer {
  int needed;        /* a link this daemon keeps: ring neighbour, coordinator */
  struct hp_conn *c; /* once it has said PEER_HELLO */
  int up;            /* both ends bound the link: it may carry anything */
  int left;          /* said goodbye: its ranks have ended */
  int lost;          /* its connection broke or fell silent */
  /* how its link has been lately, for horarun (see mesh.c) */
  int watched;         /* retrans holds a first reading */
  uint32_t retrans;    /* TCP retransmissions at the last heartbeat tick */
  uint64_t trouble_ns; /* when it last retransmitted, fell silent or broke */
  uint32_t orig;   /* its host index as the job started (what horarun
                      knows it by, also after a re-forming: reform.c) */
  uint32_t fence;  /* the last re-forming it said it made (SESSION FENCE) */
};

struct hd_xop; /* xhost/ring.c: the cross-host part of the running operation */
struct hd_xfused; /* xhost/exchange.c: a run of allgathers fused into one */
struct hd_xcoll; /* xhost/exchange.c: the same for allgather, alltoall,
                    reducescatter */
struct hd_coord; /* coord.c: a communicator's coordinator table */

/* The daemon: the event loop, this host, and the jobs it serves. horad is
 * started for one job today (by horarun, over ssh or on its own machine);
 * a resident service would hold several, each isolated in its struct
 * hd_job. It owns what is one per process: the loop, SIGCHLD (the ranks of
 * every job are its children), the reduction threads (pool.c). */
struct hd_daemon {
  uv_loop_t *loop;
  char hostname[256];
  char iface[256]; /* --iface: hora's TCP uses the first of these
                      interfaces (comma separated) this host has */
  uv_signal_t sigchld;
  uv_signal_t sigterm; /* ends the jobs as horarun's ABORT does */
  struct hd_job *jobs;
  struct hd_msrv *msrv; /* metrics.c: the /metrics listeners */
  /* a job has closed its handles (main.c: horad ends with its job) */
  void (*job_ended)(struct hd_daemon *dm, struct hd_job *job);
};

/* A job: its ranks on this host, its hosts and secret, its knobs, its
 * communicators and its failure state. Everything of it is reached from
 * here (callbacks find it through their handle's data), nothing through
 * a global. */
struct hd_job {
  struct hd_daemon *daemon; /* its owner */
  struct hd_job *next;      /* in daemon->jobs */
  const struct hd_upcalls *up;
  const struct hd_engine *const *engines; /* NULL-terminated */
  struct hp_job desc; /* as horarun described it */
  /* the job's knobs, parsed once: the defaults, horad's command line (the
   * bootstrap line's heartbeat timeout), then the job's environment; read
   * with hk_int(&job->knobs, spin_us), never from horad's own environment */
  struct hc_knobs knobs;
  int have_job;
  int nlocal;
  struct hd_rank *ranks;

  /* the launcher connection (control.c), NULL once gone: one hp_conn over
   * the socketpair horarun made when it started this horad on its own
   * machine, or over TCP to horarun's rendezvous port (a horad started
   * over ssh) */
  struct hp_conn *ctl_conn;
  int ctl_closing; /* closing on purpose (DONE sent, or ending) */

  /* job-private unix socket, in the abstract namespace: "@name" (no file,
   * so nothing is left behind however horad ends) */
  uv_pipe_t listener;
  char sock_path[108];
  struct hd_conn *conns; /* every accepted connection */

  /* the small-operation fast path (local.c, proto/fast.h): a segment all
   * the job's ranks share, made when they all lie on this host (-1, NULL:
   * none); fast_off: what its `off` word says (the timeline is on) */
  int fast_fd;
  struct hp_fast_hdr *fast;
  uint64_t fast_size;
  uint32_t fast_off;
  /* its slots given out by operation (hd_fast_slot): keys (0: free) and
   * slot numbers, 2 * HP_FAST_SLOTS entries; fast_nslots given so far */
  uint64_t *fast_keys;
  uint16_t *fast_slots;
  uint32_t fast_nslots;
  /* what earlier sessions' segments counted (metrics.c adds the rest) */
  uint64_t fast_prev_ops[HP_FAST_COLLS][16], fast_prev_bytes[HP_FAST_COLLS][16];

  /* wake-ups and polling */
  int efd;
  uv_poll_t efd_poll;
  uv_idle_t spin;
  int spinning;
  uint64_t last_activity;
  uint64_t spin_ns;
  uint64_t chunk_size, arena_size, adopt_size;
  uint64_t max_pending; /* per rank: what it can make the daemon hold */
  int corked; /* polling the rings: NEGO_READYs wait in comm->ready_out */
  int readies_held; /* some comm->ready_out holds some */

  uv_timer_t stall_timer;
  uv_timer_t fusion_timer; /* coord.c: batches of decisions wait at most
                              cycle_time for more to fuse with */
  uint64_t stall_warn_ns, stall_fail_ns;
  struct hd_dl *dl; /* deadlock.c: the detector (NULL: off) */
  char *late_fault; /* a FAULT for horarun, sent in a while or before DONE */

  uv_timer_t term_timer, kill_timer;
  int aborting, term_sent, kill_sent, done_sent;
  /* join mode (horarun --join): the ranks were started by another launcher;
   * horad writes each one's way in to join_dir (spawn.c) and waits for
   * them, at most the start timeout for their first hello */
  int joined;
  char join_dir[4200];
  uv_timer_t join_timer;
  int nexited;

  /* communicators, by id (0: the global set; NULL: removed or never) */
  struct hd_comm **comms;
  uint32_t ncomms;  /* entries of comms[]; the next set gets this id */
  /* NEGO_READY for a process set this daemon has not added yet (its
   * ranks may be quicker elsewhere): replayed once it is */
  struct hd_held_ready *held;
  size_t nheld, capheld;
  int staging_freed; /* a streamed operation let go of a rank's staging */
  int in_run_ready;
  int resume; /* an operation ran a piece and goes on at the next poll */
  uint64_t hosts_updated; /* host updates horarun announced (local.c) */

  /* first rank that left the job, and why: later operations fail with it
   * (-1: none; HD_GONE_SHUTDOWN: torn down; HD_GONE_DEADLOCK: a deadlock) */
  int gone_rank;
  char gone_msg[HP_MSG_MAX + 1];
  /* sessions: hora_init() after hora_shutdown() on every rank */
  uint32_t session;        /* sessions started after the first */
  int restart_gone; /* gone_rank is a rank being started again: a new
                       session may still start (spawn.c) */
  int restart_ended; /* gone_rank crashed, and another failure ended its
                        restart: it stays the cause, and its exit may
                        reach horarun after its victims' (report.c) */
  unsigned char *sess_back; /* host 0: the hosts whose ranks are back */
  int sess_nback;
  /* re-forming in place (reform.c): an elastic job of horarun's goes on
   * without the hosts it leaves out. reformable: a rank or host lost
   * makes the ranks here wait in hora_init() for horarun's REFORM (or its
   * ABORT) rather than the job failing; reform_wait: they wait for it
   * now; reform_quiet: one was made, and until the next session nothing
   * but SESSION frames passes between the hosts (each peer's FENCE ends
   * what it sent before); reform_session: the highest session count a
   * host said with its FENCE (the next session's number on every host) */
  int reformable, reform_wait, reform_quiet;
  uint32_t reforms, reforms_said; /* made; told horarun they took */
  uint32_t reform_session;
  uint32_t orig_nhosts; /* as the job started (horarun's index in the
                           hosts in trouble, mesh.c) */
  uv_timer_t reform_timer; /* how long the ranks wait for horarun */

  /* multi-host */
  int multi;     /* the job spans several hosts */
  int boot;      /* got a bootstrap line on stdin (host index, secret) */
  int boot_host; /* the host index it gave */
  int wire_integrity; /* from the bootstrap line: the mesh's DATA and XDATA
                         frames' tags cover their payloads */
  int wire_encrypt;   /* and: every frame between hosts is encrypted */
  unsigned char secret[HP_SECRET_LEN];
  const struct hd_link *link; /* to the other hosts (the TCP mesh) */
  uv_tcp_t mesh_listener;
  int mesh_listening;
  uint16_t mesh_port;
  char mesh_addr[64]; /* the iface's address, or "" */
  struct hd_peer *peers; /* job.nhosts entries */
  struct hp_conn *mesh_conns; /* every mesh connection, also unproven */
  int peers_needed, peers_up, mesh_up;
  uint64_t mesh_start_ns; /* when the links began (debug: how long) */
  struct hp_conn **early; /* authenticated peers that spoke before the JOB */
  uint64_t *early_hello;  /* what each said: host index << 32 | nhosts */
  size_t nearly;
  uv_timer_t hb_timer;
  struct hd_peer ctl_link; /* the same watch on the connection to horarun */
  uv_timer_t victim_timer; /* releases exits held back (hd_send_exit) */
  uint64_t hb_timeout_ns;
  uv_timer_t close_timer; /* a graceful close has this long */
  unsigned nrejected;     /* strangers turned away (logging is thinned) */
  /* a host whose ranks all ended: what was decided still runs, nothing
   * new can be */
  char left_msg[HP_MSG_MAX + 1];
  struct hd_metrics *metrics; /* metrics.c: what is counted of the job */
  struct hd_timeline *tl; /* timeline.c: NULL until one is asked for */
  struct hd_autotune *at; /* autotune.c: host 0 with --autotune, or NULL */
};

#define HD_GONE_SHUTDOWN (-2)
#define HD_GONE_DEADLOCK (-3)
/* What operations fail with once the job is failing. */
static inline int hd_gone_status(const struct hd_job *job) {
  return job->gone_rank == HD_GONE_SHUTDOWN   ? HORA_ESHUTDOWN
         : job->gone_rank == HD_GONE_DEADLOCK ? HORA_EDEADLOCK
                                              : HORA_EPEERGONE;
}

/* Allreduce across hosts as one flat ring over every member (hosts'
 * members consecutive), not hierarchically (a ring of hosts, each host's
 * members reduced first): only when hierarchical_allreduce was given as 0.
 * Unset, hora's allreduce is hierarchical; Adasum reads the value alone.
 * This is the job's setting; which one an operation takes, the
 * coordinator decides (hd_coord_algo: the setting, or autotune's trial)
 * and says so in its decision (hd_tensor.flat). */
static inline int hd_flat_allreduce(const struct hc_knobs *k) {
  return hk_given(k, hierarchical_allreduce) &&
         hk_int(k, hierarchical_allreduce) == 0;
}

/* Allgather across hosts round a ring (each host sends to the next one
 * only: its members' blocks, then the others' as they come), not
 * hierarchically (each host's block straight to every other host): only
 * when hierarchical_allgather was given as 0 (the job's setting, as
 * above). */
static inline int hd_flat_allgather(const struct hc_knobs *k) {
  return hk_given(k, hierarchical_allgather) &&
         hk_int(k, hierarchical_allgather) == 0;
}

/* The name of this host in the job's messages: as horarun calls it, or
 * its own. */
static inline const char *hd_here(const struct hd_job *job) {
  return job->desc.hostname && *job->desc.hostname ? job->desc.hostname
                                                   : job->daemon->hostname;
}

/* control.c */
int hd_control_open(struct hd_job *job, int fd);

/* report.c: what horad tells horarun */
void hd_control_send(struct hd_job *job, struct hp_wbuf *w);
void hd_send_exit(struct hd_job *job, struct hd_rank *r);
void hd_maybe_done(struct hd_job *job);
void hd_control_fault(struct hd_job *job, const char *msg);

/* spawn.c */
int hd_spawn_all(struct hd_job *job);
void hd_spawn_teardown(struct hd_job *job, const char *reason, int delay_ms);
void hd_spawn_close(struct hd_job *job);
/* Join mode: rank r's first hello came from process pid; horad watches it
 * for its exit (its own ranks' exits come from waitpid). */
void hd_join_hello(struct hd_rank *r, int pid);
/* Child pid ended with status: 1 when it was one of job's ranks. */
int hd_spawn_reaped(struct hd_job *job, pid_t pid, int status);
/* The job's one failure path (job->up->teardown: spawn.c). */
static inline void hd_teardown(struct hd_job *job, const char *reason,
                               int delay_ms) {
  job->up->teardown(job, reason, delay_ms);
}

/* local.c: the unix socket, hello and shared memory */
int hd_local_listen(struct hd_job *job);
void hd_local_close(struct hd_job *job);
void hd_rank_left(struct hd_rank *r, const char *why);
/* --restart-failed-ranks (spawn.c): whether r, which left without shutting
 * hora down, is started again; begin that (instead of its end); a restart
 * that cannot be completed (or another failure meanwhile) ends the job's
 * wait for it, naming `rank` and why, on every host */
int hd_restart_wanted(const struct hd_rank *r);
void hd_restart_begin(struct hd_rank *r, const char *why);
void hd_restart_abandon(struct hd_job *job, int rank, const char *why);
/* what a rank being started again says after its cause */
#define HD_RESTART_SAYS "; horad starts it again"
/* why a rank whose connection closed while its process lived on ended
 * (horad's SIGKILL, to start it again): the EXIT's message says so */
#define HD_ENDED_BY_HORAD                                                      \
  "closed its connection to horad without shutting down hora, and horad "     \
  "ended its process, which lived on"
/* why: the failure from now on; after the cause of a restart it ends */
void hd_restart_gone_msg(struct hd_job *job, const char *why);
/* tells horarun that r ended and is started again (report.c) */
void hd_send_restart(struct hd_job *job, struct hd_rank *r);
void hd_on_lost_timer(uv_timer_t *t);
/* hora_init() after hora_shutdown(): 1 when every local rank is back */
int hd_local_all_back(const struct hd_job *job);
/* Starts the new session of the local ranks (all back). */
void hd_new_session(struct hd_job *job);
/* Refuses the local ranks that are back (the new session cannot start). */
/* why: what those waiting for a new session are told, or NULL */
void hd_local_drop_rejoins(struct hd_job *job, const char *why);
/* horarun announced a host update: every local rank's count (and the
 * count new segments start from) grows by one. */
void hd_local_hosts_updated(struct hd_job *job);
/* control.c: ends the job as an ABORT would, at once (horad got SIGTERM:
 * the ranks get SIGTERM, then SIGKILL after the kill grace). */
void hd_control_stop(struct hd_job *job, const char *why);
/* The fast path's segment: brings its `off` word in line with the
 * timeline (called after each poll of the rings that took entries); frees
 * it (the job ends). */
void hd_fast_sync(struct hd_job *job);
void hd_fast_free(struct hd_job *job);
/* The fast path's slot for the operation of set `comm` whose name hashes
 * to name_hash (hd_name_hash, hd_tensor.hash) (plus 1; 0:
 * none, the ranks hash it), the same on every rank: sent with the
 * operation's first completions, from which the ranks learn it. */
uint32_t hd_fast_slot(struct hd_job *job, uint32_t comm, uint64_t name_hash);

/* session.c: a new session across hosts, agreed through host 0 */
/* Every local rank is back: tells host 0 (or counts itself there). */
void hd_session_back(struct hd_job *job);

/* reform.c: an elastic job re-formed in place on some of its hosts */
/* horarun's REFORM (control connection) */
void hd_reform_frame(struct hd_job *job, const unsigned char *p, size_t len);
/* a peer's SESSION FENCE for re-forming `number`, its session count */
void hd_reform_fence(struct hd_job *job, int from, uint32_t number,
                     uint32_t session);
/* a rank or host is lost in a reformable job: the ranks that come back
 * wait for horarun's REFORM */
void hd_reform_hold(struct hd_job *job);
/* how long they wait for it: 30 s, or --elastic-timeout when shorter (at
 * least 1 s), but never less than 4 heartbeat timeouts; then their
 * hora_init() fails */
uint64_t hd_reform_wait_ms(const struct hd_job *job);
/* 1 while a new session must not be asked for: the REFORM, or a peer's
 * FENCE, has not come yet */
int hd_reform_pending(const struct hd_job *job);
/* 1 when a peer's frame of this type is dropped: between a re-forming and
 * the next session only SESSION frames (and heartbeats) pass */
int hd_reform_drops(const struct hd_job *job, uint16_t type);
/* A SESSION frame from host `from`; < 0 (why) for a bad one. */
int hd_session_frame(struct hd_job *job, int from, const unsigned char *p,
                     size_t len, char *why, size_t whylen);
/* A rank died or a host was lost: no new session can start. */
void hd_session_cancel(struct hd_job *job);
void hd_session_free(struct hd_job *job);

/* rings.c: polling the submissions, the loop's wake-ups */
int hd_rings_init(struct hd_job *job);
void hd_rings_close(struct hd_job *job);
/* Takes the ranks' submissions and runs what is ready; returns how many
 * it took, plus 1 when an operation ran its next piece (job->resume). */
int hd_poll_rings(struct hd_job *job);
void hd_kick(struct hd_job *job);

/* deadlock.c: deadlock detection */
enum { HD_DL_OFF, HD_DL_WARN, HD_DL_FAIL }; /* --deadlock-action */
int hd_deadlock_init(struct hd_job *job);
void hd_deadlock_close(struct hd_job *job);
/* The job's hosts change (reform.c): what the first nhosts said goes. */
void hd_deadlock_forget(struct hd_job *job, uint32_t nhosts);
/* A DEADLOCK frame from host `from`; < 0 (why) for a bad one. */
int hd_deadlock_frame(struct hd_job *job, int from, const unsigned char *p,
                      size_t len, char *why, size_t whylen);

/* cq.c: completions to the ranks */
/* Queues a completion for r (never re-enters negotiation: a rank found
 * broken here is declared gone later, from hd_poll_rings()). */
void hd_push_cqe(struct hd_rank *r, const struct hp_cqe *e);
/* Marks r broken (it wrote nonsense, or does not read its cq); the loop
 * then declares it gone, from hd_poll_rings(), outside negotiation. */
void hd_rank_broken(struct hd_rank *r, const char *what);
/* Moves r's waiting completions into its cq as far as there is room. */
void hd_cq_flush(struct hd_rank *r);
/* Drops what r's completions hold (r is gone: nobody reads them). */
void hd_rings_forget(struct hd_rank *r);
void hd_complete(struct hd_rank *r, uint64_t id, int status, const char *msg);
/* The same, for an operation the fast path may take next time: slot (plus
 * 1; 0: none) is where (hd_fast_slot). */
void hd_complete_slot(struct hd_rank *r, uint64_t id, int status,
                      const char *msg, uint32_t slot);
void hd_flush_wakeups(struct hd_job *job);

/* negotiate.c: submissions, readiness, decisions, the run queues */
/* e is horad's own copy of the rank's entry, its name terminated within
 * HP_NAME_MAX + 1 bytes (rings.c copies it so). */
void hd_submit(struct hd_rank *r, const struct hp_sqe *e);
void hd_chunk_event(struct hd_rank *r, const struct hp_sqe *e);
void hd_run_ready(struct hd_job *job);
/* The tensor p->t[p->cur] is complete: frees it (its name may be used
 * again) and moves on to the next. */
void hd_plan_next(struct hd_plan *p);
/* HP_SQ_CANCEL: withdraws r's submission e->id of a group not yet ready. */
void hd_cancel(struct hd_rank *r, const struct hp_sqe *e);
/* Runs what is ready on one communicator (an engine that can go on). */
void hd_comm_progress(struct hd_comm *c);
void hd_fail_all(struct hd_job *job);
void hd_tensor_finish(struct hd_job *job, struct hd_tensor *t);
void hd_tensor_fail(struct hd_job *job, struct hd_tensor *t, int status,
                    const char *msg);
void hd_check_stalls(struct hd_job *job);

/* negotiate.c: the job's communicators, with their negotiation state */
int hd_comms_init(struct hd_job *job); /* the global set */
void hd_comms_free(struct hd_job *job);

/* comm.c: communicators */
/* A new set of the given sorted, distinct global ranks; its id is
 * job->ncomms. NULL when out of memory. */
struct hd_comm *hd_comm_new(struct hd_job *job, const int32_t *ranks, int n);
void hd_comm_free(struct hd_comm *c);
struct hd_comm *hd_comm_get(struct hd_job *job, uint32_t id);
/* The member index of a global rank, or -1. */
int hd_comm_member(const struct hd_comm *c, int32_t rank);
/* The position in c->hosts of the host of member m. */
int hd_comm_host_of(const struct hd_comm *c, int member);
/* The global rank of local member i, and its struct hd_rank. */
static inline int32_t hd_comm_rank(const struct hd_comm *c, int i) {
  return c->members[c->local_member[i]];
}
static inline struct hd_rank *hd_comm_local(const struct hd_comm *c, int i) {
  return &c->job->ranks[c->local[i]];
}
/* "host h1 (ranks 2-3)" */
void hd_host_name(struct hd_job *job, int host, char *buf, size_t len);
/* 1 when a host of c has left. */
int hd_comm_host_left(const struct hd_comm *c);

/* job.c: a job of daemon dm (in dm->jobs), and its end */
struct hd_job *hd_job_new(struct hd_daemon *dm);
void hd_job_free(struct hd_job *job);

/* control.c, multi-host */
int hd_control_connect(struct hd_job *job, const char *addr, int port);

/* links/mesh.c: connections between the daemons of a multi-host job */
int hd_mesh_listen(struct hd_job *job);
/* The IPv4 (else IPv6, a link-local one with its %zone) address of
 * interface `name` into buf; 0, or -1 when it has none. */
int hd_iface_addr(const char *name, char *buf, size_t len);
/* horad --probe (probe.c): what horarun --doctor asks a host. */
int hd_probe_main(const char *iface, const char *launcher);
int hd_mesh_start(struct hd_job *job);
void hd_mesh_close(struct hd_job *job, int graceful);
int hd_mesh_send(struct hd_job *job, int host, struct hp_wbuf *w);
struct hp_conn *hd_mesh_conn(struct hd_job *job, int host);
/* A local rank left (rank >= 0) or a host was lost: tells the others. */
void hd_mesh_announce_restart(struct hd_job *job, int rank, int host,
                              const char *msg);
void hd_mesh_announce_gone(struct hd_job *job, int rank, int host,
                           const char *msg);

/* coord.c: negotiation across hosts, on a communicator's first host */
void hd_coord_ready(struct hd_comm *c, int host, const struct hp_nego_ready *m);
/* A NEGO_READY from the host at position `host` (> 0), named by the
 * response cache or not: resolved, then hd_coord_ready. -1: a number that
 * host never gave (a protocol error). */
int hd_coord_ready_from(struct hd_comm *c, int host, struct hp_nego_ready *m);
/* The entries of a NEGO_DECIDE or NEGO_PLAN from the coordinator, named by
 * number, get their names and metadata. -1: a number it never gave. */
int hd_decide_resolve(struct hd_comm *c, struct hp_nego_decide *v,
                      uint32_t n);
void hd_coord_free(struct hd_comm *c);
/* Keeps a READY for a set not added here yet (from: global host index);
 * < 0, saying why, when it is too far ahead or HD_HELD_MAX are held
 * already (the peer is then dropped: its ranks and ours disagree on the
 * sets). */
#define HD_HELD_MAX 65536u
int hd_coord_hold(struct hd_job *job, int from, const struct hp_nego_ready *m,
                  char *why, size_t whylen);
/* Hands c's held READYs to its coordinator (c was just added). */
void hd_coord_replay(struct hd_comm *c);
void hd_coord_held_free(struct hd_job *job);
/* Fails every entry (a host of the set has left), telling its hosts. */
void hd_coord_fail(struct hd_comm *c, const char *why);
void hd_coord_check_stalls(struct hd_comm *c);
/* This host's ranks let `name` stall: its entry, if any, fails now too,
 * naming those ranks (while this host still knows which they are). */
void hd_coord_stall(struct hd_comm *c, const char *name);
/* Sends c's batch of decisions now (this host has nothing of c queued
 * any more, or the batch waited long enough). */
void hd_coord_flush(struct hd_comm *c);
/* fusion_timer's callback: flushes the batches that waited cycle_time. */
void hd_coord_on_fusion_timer(uv_timer_t *t);
/* How the hosts run an operation of collective coll that this host
 * decides: HP_DA_* (flat or hierarchical; the response cache off). */
uint32_t hd_coord_algo(const struct hd_job *job, int coll);
/* Sets v[i].fuse where decision i runs fused with decision i - 1:
 * allreduces alike in dtype, op, scaling and algo, resident on every host
 * (HP_NR_RESIDENT), up to `threshold` bytes together and at most 256
 * KiB (0: none fused). */
void hd_coord_mark_fusion(struct hp_nego_decide *v, uint32_t n,
                          uint64_t threshold);

/* coll.c: the collectives, described once */
struct hd_coll {
  const char *name; /* "allreduce" */
  unsigned traits;  /* HORA_CF_* */
  /* checks what is particular to it in a submission; 0 or HORA_E* */
  int (*check)(struct hd_comm *c, struct hd_rank *r, const struct hp_sqe *e,
               char *why, size_t len);
};
const struct hd_coll *hd_coll(int coll); /* NULL when unknown */
const char *hd_coll_name(int coll);      /* "allreduce" */
uint64_t hd_name_hash(const char *name); /* FNV-1a, for the name tables */
uint64_t hd_aux_hash(const int64_t *v, uint64_t n);
/* Describes how b (of rank rb) differs from a (of rank ra) in msg, as
 * Horovod words it; 0 when they agree. */
int hd_meta_mismatch(const char *name, const struct hd_meta *a, int ra,
                     const struct hd_meta *b, int rb, char *msg, size_t len);
void hd_meta_to_ready(const struct hd_meta *m, struct hp_nego_ready *r);
void hd_meta_from_ready(const struct hp_nego_ready *r, struct hd_meta *m);
/* A path a knob gives, relative to the job's working directory. */
void hd_job_path(const struct hd_job *job, const char *path, char *out,
                 size_t n);
/* The reducescatter block of member `member`: rows [*first, +*n). */
void hd_rs_block(uint64_t rows, int size, int member, uint64_t *first,
                 uint64_t *n);
/* Elements per row of dimension 0 (1 for 1-D and scalars). */
uint64_t hd_row_elems(const struct hd_meta *m);

/* negotiate.c, multi-host */
void hd_decide(struct hd_job *job, const struct hp_nego_decide *m);
/* Sends the NEGO_READYs held while job->corked. */
void hd_send_readies(struct hd_job *job);
/* The coordinator's decisions on the n tensors of a group (NEGO_PLAN). */
void hd_decide_plan(struct hd_job *job, const struct hp_nego_decide *v,
                    uint32_t n);
/* Host `left` has left (its ranks ended), as host `from` says: what waits
 * for a decision that can no longer come fails. Only the coordinator of a
 * communicator decides that for the others (its decisions and its word
 * come in order on one link): a host fails its own waiting operations
 * only when their coordinator is `from`; a coordinator fails its entries
 * of the sets `left` is in, by decisions to every host. */
void hd_fail_undecided(struct hd_job *job, int from, int left,
                       const char *why);

/* parts.c: an operation's parts, as the CPU engine and the
 * cross-host algorithms both need them */
int hd_needs_in(struct hd_tensor *t, int i);
int hd_needs_out(struct hd_tensor *t, int i);
int hd_is_root(struct hd_tensor *t, int i);
uint64_t hd_staging_off(struct hd_rank *r, uint64_t k);
void hd_copy_req(struct hd_rank *r, struct hd_tensor *t, int kind, uint64_t k);
/* Elements of chunk k of a streamed operation. */
uint64_t hd_chunk_count(struct hd_tensor *t, uint64_t k);
/* Where local member i's input / output of t lie (arena-resident). */
unsigned char *hd_in_ptr(struct hd_tensor *t, int i);
unsigned char *hd_out_ptr(struct hd_tensor *t, int i);
/* The neutral input of a joined member (count elements), or NULL. */
void *hd_neutral(struct hd_tensor *t, uint64_t count);
/* Whether local member i's alltoall runs in place: its output is its
 * input, and it receives from each member what it sends to it, so each
 * block it receives goes where the block it sends lay. */
int hd_a2a_in_place(const struct hd_tensor *t, int i);
/* Applies prescale (pre = 1) or postscale to count elements at p. */
void hd_scale_buf(const struct hd_tensor *t, void *p, uint64_t count, int pre);

/* xhost/exchange.c: allgather, alltoall and reducescatter across hosts */
int hd_xcoll_step(struct hd_comm *c, struct hd_tensor *t);
/* An XDATA frame from host `from` (its data already at `placed`, when
 * hd_xcoll_place() said where); sets *keep when it holds on to payload. */
int hd_xcoll_data(struct hd_job *job, int from, unsigned char *payload,
                  size_t len, unsigned char *placed, int *keep, char *why,
                  size_t whylen);
/* Where the data of an XDATA frame (header `pre`, frame length len) can
 * go straight away, or NULL (see hp_conn_set_place). */
void *hd_xcoll_place(struct hd_job *job, int from, const unsigned char *pre,
                     size_t len);
/* A run of n allgathers or reducescatters the coordinator fused (ts[0]
 * first): one operation over their data packed together, then unpacked;
 * 1 when every one has completed (or failed), 0 while it waits. */
int hd_xcoll_fused(struct hd_comm *c, struct hd_tensor *const *ts, int n);
/* The fused run's own operation ended (hd_tensor_finish/fail of it). */
void hd_xcoll_fused_end(struct hd_tensor *f, int status, const char *msg);
/* Frees the fused run under way (after hd_xcoll_abort: no frame lands in
 * its memory any more). */
void hd_xcoll_fused_free(struct hd_comm *c);
void hd_xcoll_abort(struct hd_comm *c);
void hd_xcoll_free(struct hd_comm *c);

/* xhost/ring.c: allreduce and broadcast across hosts */
int hd_xhost_step(struct hd_comm *c, struct hd_tensor *t);
/* The same for n fused allreduces (ts[1..n) have fuse set): one ring over
 * their concatenation; 1 once all completed. Their data are resident. */
int hd_xhost_run(struct hd_comm *c, struct hd_tensor *const *ts, int n);
/* A DATA frame from host `from`; sets *keep when it holds on to payload. */
int hd_xhost_data(struct hd_job *job, int from, unsigned char *payload,
                  size_t len, unsigned char *placed, int *keep, char *why,
                  size_t whylen);
/* Where the data of a DATA frame (header `pre`, frame length len) can go
 * straight away, or NULL (see hp_conn_set_place). */
void *hd_xhost_place(struct hd_job *job, int from, const unsigned char *pre,
                     size_t len);
/* Whether t (a resident allreduce or broadcast of at most 8 MiB) may run
 * now beside the one c's ring runs, in the urgent lane: a queued operation
 * of higher priority overtaking a large one (negotiate.c's overtake). */
int hd_xhost_lane(struct hd_comm *c, const struct hd_tensor *t);
void hd_xhost_abort(struct hd_comm *c);
void hd_xhost_free(struct hd_comm *c);
/* A small allreduce through the coordinator (ring.c): the bytes of a
 * host's part of one of that kind (0: it goes round the ring); this
 * host's part of t (every member's input resident, none joined) into out;
 * another part folded into acc; the whole (t->star) written into the
 * members' outputs, which completes t. */
uint32_t hd_star_bytes(const struct hd_job *job, int coll, int dtype, int op,
                       uint64_t count, int wire16);
int hd_star_part(struct hd_comm *c, const struct hd_tensor *t,
                 unsigned char *out);
void hd_star_fold(int dtype, int op, unsigned char *acc,
                  const unsigned char *part, uint64_t count);
void hd_star_finish(struct hd_comm *c, struct hd_tensor *t);

/* pool.c: reduction threads */
int hd_pool_init(int nthreads);
void hd_pool_fini(void);
int hd_pool_size(void);
/* Runs fn(arg, i, n) for i in [0, n) on the pool and the calling thread;
 * returns when all are done. */
void hd_pool_run(void (*fn)(void *arg, int i, int n), void *arg, int n);

#endif
