/* local.c -- the job's private unix socket: a rank says hello with its
 * token, and gets its shared-memory segment and the daemon's eventfd by fd
 * passing. The connection stays open; its end without a goodbye means the
 * rank is gone.
 *
 * The socket lives in the abstract namespace (Linux): it has no file, so
 * a horad that is killed or crashes leaves nothing behind. Without file
 * permissions to keep strangers out, every connection is checked for the
 * daemon's uid (SO_PEERCRED), and a hello needs the rank's random token. */
#define HC_LOG_SUB HC_SUB_LOCAL
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon.h"
#include "timeline.h"

/* One accepted connection: before hello it belongs to nobody, after it to
 * its rank. Every one is on the daemon's list so the job's end closes
 * them all, strangers included. */
struct hd_conn {
  uv_pipe_t pipe;
  struct hd_job *job;
  struct hd_rank *rank;
  int pid; /* of the peer (SO_PEERCRED) */
  struct hp_decoder dec;
  struct hd_conn *next, **pprev;
};

/* The job socket carries HELLO and BYE only, a few dozen bytes each: a
 * connection that has more than this of one frame buffered is dropped, so
 * none can make the daemon hold more (HP_FRAME_MAX is 16 MiB). */
#define LOCAL_FRAME_MAX 4096u

static void on_conn_closed(uv_handle_t *h) {
  struct hd_conn *c = (struct hd_conn *)h;
  hp_decoder_free(&c->dec);
  free(c);
}

static void drop_conn(struct hd_conn *c) {
  if (c->pprev) { /* unlink */
    *c->pprev = c->next;
    if (c->next) c->next->pprev = c->pprev;
    c->pprev = NULL;
  }
  if (c->rank && c->rank->conn == c) c->rank->conn = NULL;
  if (c->rank && c->rank->rejoin == c) c->rank->rejoin = NULL;
  if (!uv_is_closing((uv_handle_t *)&c->pipe))
    uv_close((uv_handle_t *)&c->pipe, on_conn_closed);
}

/* Binds a listening socket to the abstract name job->sock_path ("@...": the
 * '@' stands for the leading NUL byte). Returns the fd or -errno. */
static int bind_abstract(struct hd_job *job) {
  unsigned char raw[8];
  ssize_t got = getrandom(raw, sizeof raw, GRND_NONBLOCK);
  uint64_t v = hc_now_ns() ^ ((uint64_t)getpid() << 40);
  if (got == (ssize_t)sizeof raw) memcpy(&v, raw, sizeof v);
  hc_fmt(job->sock_path, sizeof job->sock_path, "@hora-%d-%016llx",
         (int)getpid(), (unsigned long long)v);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  size_t n = strlen(job->sock_path);
  memcpy(sa.sun_path, job->sock_path, n);
  sa.sun_path[0] = '\0';
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -errno;
  if (bind(fd, (struct sockaddr *)&sa,
           (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)) < 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  return fd;
}

int hd_local_listen(struct hd_job *job) {
  int fd = -EADDRINUSE;
  for (int tries = 0; fd == -EADDRINUSE && tries < 8; tries++)
    fd = bind_abstract(job);
  if (fd < 0) {
    hc_error("cannot create the job's socket %s: %s", job->sock_path,
             strerror(-fd));
    job->sock_path[0] = '\0';
    return HORA_EIO;
  }
  int rc = uv_pipe_init(job->daemon->loop, &job->listener, 0);
  if (rc == 0) {
    rc = uv_pipe_open(&job->listener, fd);
    if (rc < 0) close(fd);
  } else {
    close(fd);
  }
  if (rc == 0) {
    job->listener.data = job;
    extern void hd_on_connection(uv_stream_t *, int);
    rc = uv_listen((uv_stream_t *)&job->listener, 128, hd_on_connection);
  }
  if (rc < 0) {
    hc_error("cannot listen on %s: %s", job->sock_path, uv_strerror(rc));
    job->sock_path[0] = '\0';
    return HORA_EIO;
  }
  return 0;
}

static void listener_closed(uv_handle_t *h) { (void)h; }

void hd_local_close(struct hd_job *job) {
  if (job->listener.loop && !uv_is_closing((uv_handle_t *)&job->listener))
    uv_close((uv_handle_t *)&job->listener, listener_closed);
  while (job->conns) drop_conn(job->conns);
  job->sock_path[0] = '\0';
}

void hd_local_hosts_updated(struct hd_job *job) {
  job->hosts_updated++;
  hc_info("horarun announced a host update (%llu so far)",
          (unsigned long long)job->hosts_updated);
  if (!job->ranks) return; /* not spawned yet: make_segment copies it */
  for (int i = 0; i < job->nlocal; i++)
    if (job->ranks[i].hdr)
      atomic_store(&job->ranks[i].hdr->hosts_updated, job->hosts_updated);
}

/* Creates and maps the rank's segment and attaches the daemon's cursors. */
static int make_segment(struct hd_job *job, struct hd_rank *r) {
  struct hp_shm_hdr layout;
  memset(&layout, 0, sizeof layout);
  uint64_t size = hp_shm_layout(&layout, job->chunk_size, job->arena_size,
                                job->adopt_size);
  char name[64];
  hc_fmt(name, sizeof name, "hora-rank-%d", r->info.rank);
  int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -errno;
  /* Sealed at its size: a rank cannot shrink it under the daemon (SIGBUS). */
  if (ftruncate(fd, (off_t)size) < 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd);
    return -e;
  }
  r->memfd = fd;
  r->shm = p;
  r->shm_size = size;
  r->hdr = p;
  memcpy(r->hdr, &layout, sizeof layout);
  r->layout = layout;
  hp_ring_init(&r->hdr->sq);
  hp_ring_init(&r->hdr->cq);
  atomic_store(&r->hdr->daemon_sleeping, job->spinning ? 0 : 1);
  atomic_store(&r->hdr->hosts_updated, job->hosts_updated);
  hp_ring_attach(&r->sq, &r->hdr->sq, r->shm + layout.sq_slots_off,
                 layout.sq_slots, layout.sqe_size, 0);
  hp_ring_attach(&r->cq, &r->hdr->cq, r->shm + layout.cq_slots_off,
                 layout.cq_slots, layout.cqe_size, 1);
  return 0;
}

/* ---- the fast path's segment -------------------------------------------
 * Made for a job whose ranks all lie on this host (2 to HP_FAST_RANKS of
 * them), unless fast_path_disable says no; one per session, zeroed, so no
 * round of an earlier session survives. horad writes only its `off` word
 * and reads only the counters (metrics.c), which a rank may have
 * scribbled on: numbers, nothing more. */
static int fast_wanted(const struct hd_job *job) {
  return !job->multi && job->nlocal >= 2 &&
         (uint32_t)job->nlocal <= HP_FAST_RANKS &&
         job->nlocal == job->desc.size &&
         !hk_int(&job->knobs, fast_path_disable);
}

void hd_fast_free(struct hd_job *job) {
  for (uint32_t c = 0; job->fast && c < HP_FAST_COLLS; c++)
    for (uint32_t d = 0; d < 16; d++) {
      job->fast_prev_ops[c][d] += atomic_load(&job->fast->ops[c][d]);
      job->fast_prev_bytes[c][d] += atomic_load(&job->fast->bytes[c][d]);
    }
  if (job->fast) munmap(job->fast, job->fast_size);
  if (job->fast_fd >= 0) close(job->fast_fd);
  free(job->fast_keys);
  free(job->fast_slots);
  job->fast_keys = NULL;
  job->fast_slots = NULL;
  job->fast_nslots = 0;
  job->fast = NULL;
  job->fast_fd = -1;
  job->fast_size = 0;
}

static void make_fast(struct hd_job *job) {
  if (job->fast || !fast_wanted(job)) return;
  struct hp_fast_hdr layout;
  memset(&layout, 0, sizeof layout);
  uint64_t size = hp_fast_layout(&layout, (uint32_t)job->nlocal);
  int fd = memfd_create("hora-fast", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  void *p = MAP_FAILED;
  if (fd >= 0 && ftruncate(fd, (off_t)size) == 0 &&
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    /* the job runs without it: every operation goes through horad */
    hc_warn("no shared memory for the fast path (%s): small operations go "
            "through horad", strerror(errno));
    if (fd >= 0) close(fd);
    return;
  }
  memcpy(p, &layout, sizeof layout);
  job->fast_keys = calloc(2 * HP_FAST_SLOTS, sizeof *job->fast_keys);
  job->fast_slots = calloc(2 * HP_FAST_SLOTS, sizeof *job->fast_slots);
  job->fast_nslots = 0; /* none without them: the ranks hash */
  job->fast = p;
  job->fast_fd = fd;
  job->fast_size = size;
  job->fast_off = 0;
  hd_fast_sync(job);
}

/* Left to a hash of the operation, two of a burst of asynchronous
 * operations often meet in a slot (100 names in 512 slots almost always
 * do); a rank whose lane there still holds the first (its round open)
 * sends the second to horad, while a peer whose lane was free offers it
 * and waits fast_path_wait for the first rank in vain. So horad gives
 * each of a session's first HP_FAST_SLOTS operations (by set and name) a
 * slot of its own, and every rank learns the same one. */
uint32_t hd_fast_slot(struct hd_job *job, uint32_t comm, uint64_t name_hash) {
  if (!job->fast || !job->fast_keys || !job->fast_slots) return 0;
  uint64_t key = (name_hash ^ (comm * 0x9e3779b97f4a7c15ull)) | 1;
  uint32_t mask = 2 * HP_FAST_SLOTS - 1, i = (uint32_t)(key >> 20) & mask;
  for (uint32_t n = 0; n <= mask; n++, i = (i + 1) & mask) {
    if (job->fast_keys[i] == key) return job->fast_slots[i] + 1u;
    if (job->fast_keys[i]) continue;
    if (job->fast_nslots >= HP_FAST_SLOTS) return 0; /* all given */
    job->fast_keys[i] = key;
    job->fast_slots[i] = (uint16_t)job->fast_nslots++;
    return job->fast_slots[i] + 1u;
  }
  return 0;
}

void hd_fast_sync(struct hd_job *job) {
  if (!job->fast) return;
  uint32_t off = hd_tl_on(job->tl) ? 1u : 0u;
  if (off != job->fast_off) {
    job->fast_off = off;
    atomic_store(&job->fast->off, off);
  }
}

static int send_welcome(struct hd_job *job, struct hd_rank *r, int sock) {
  struct hp_welcome m = {.rank = r->info.rank,
                         .size = job->desc.size,
                         .local_rank = r->info.local_rank,
                         .local_size = job->desc.local_size,
                         .cross_rank = r->info.cross_rank,
                         .cross_size = r->info.cross_size,
                         .daemon_pid = (int32_t)getpid(),
                         .shm_size = r->shm_size,
                         .fast_size = job->fast ? job->fast_size : 0};
  hc_fmt(m.hostname, sizeof m.hostname, "%s",
         hd_here(job));
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_welcome(&w, &m);
  if (w.err) {
    hp_wbuf_free(&w);
    return HORA_ENOMEM;
  }
  int fds[3] = {r->memfd, job->efd, job->fast_fd};
  size_t nfds = job->fast ? 3 : 2;
  char cbuf[CMSG_SPACE(sizeof fds)];
  memset(cbuf, 0, sizeof cbuf);
  struct iovec iov = {.iov_base = w.data, .iov_len = w.len};
  struct msghdr mh = {.msg_iov = &iov,
                      .msg_iovlen = 1,
                      .msg_control = cbuf,
                      .msg_controllen = CMSG_SPACE(nfds * sizeof(int))};
  struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
  memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
  ssize_t n;
  do n = sendmsg(sock, &mh, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  int rc = (n == (ssize_t)w.len) ? 0 : HORA_EIO;
  hp_wbuf_free(&w);
  return rc;
}


/* Refuses the hello on c: logs why (rate-limited: strangers can cause it)
 * and tells the peer, in a REFUSE frame libhora turns into the error
 * hora_init() returns. The caller drops the connection. */
static void refuse(struct hd_conn *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void refuse(struct hd_conn *c, int status, const char *fmt, ...) {
  struct hp_refuse m = {.status = status};
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m.msg, sizeof m.msg, fmt, ap);
  va_end(ap);
  hc_warn_rl("%s; connection dropped [H3003]", m.msg);
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_refuse(&w, &m);
  uv_os_fd_t fd;
  if (!w.err && uv_fileno((uv_handle_t *)&c->pipe, &fd) == 0) {
    /* a few hundred bytes into an empty socket buffer: all or nothing */
    ssize_t n = send(fd, w.data, w.len, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)n;
  }
  hp_wbuf_free(&w);
}

/* The local rank whose process is pid, or NULL. */
static struct hd_rank *rank_of_pid(struct hd_job *job, int pid) {
  for (int i = 0; pid > 0 && job->ranks && i < job->nlocal; i++)
    if (job->ranks[i].pid == pid) return &job->ranks[i];
  return NULL;
}

/* A frame of another protocol version on a connection that has not said
 * hello: a libhora of another hora release. Refuses it in our version
 * (the header's layout is the same in every one) and returns 1; 0 when the
 * buffered bytes are not that. */
static int refuse_version(struct hd_conn *c) {
  const unsigned char *b = c->dec.buf;
  if (c->rank || !b || c->dec.len < 8) return 0;
  uint32_t magic = (uint32_t)b[0] | (uint32_t)b[1] << 8 |
                   (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
  unsigned version = (unsigned)(b[4] | b[5] << 8);
  if (magic != HP_FRAME_MAGIC || version == HP_PROTO_VERSION) return 0;
  struct hd_rank *r = rank_of_pid(c->job, c->pid);
  char who[64];
  if (r) hc_fmt(who, sizeof who, "rank %d (pid %d)", r->info.rank, c->pid);
  else hc_fmt(who, sizeof who, "a process (pid %d)", c->pid);
  refuse(c, HORA_EVERSION, "%s uses a libhora of protocol version %u, but "
         "this horad speaks version %u: use libhora and horad of the same "
         "hora release", who, version, HP_PROTO_VERSION);
  return 1;
}

int hd_local_all_back(const struct hd_job *job) {
  if (!job->ranks) return 0; /* not spawned yet */
  for (int i = 0; i < job->nlocal; i++)
    if (!job->ranks[i].rejoin) return 0;
  return 1;
}

/* Those waiting in hora_init() for a new session: dropped, and told why
 * when there is a why (a rank's process ended after its goodbye). */
void hd_local_drop_rejoins(struct hd_job *job, const char *why) {
  /* a host's ranks may be gone before this host's links were all up and
   * its ranks spawned (RANK_GONE comes first) */
  for (int i = 0; job->ranks && i < job->nlocal; i++) {
    struct hd_conn *c = job->ranks[i].rejoin;
    if (!c) continue;
    if (why) refuse(c, HORA_EPEERGONE, "no new session can start: %s", why);
    drop_conn(c);
  }
}

/* Every local rank has shut hora down and initialised it again (and,
 * across hosts, every other host's too: session.c): a fresh start (new
 * shared memory, the global set only, no failure) for all of them. */
void hd_new_session(struct hd_job *job) {
  if (!hd_local_all_back(job)) return;
  hd_comms_free(job);
  job->gone_rank = -1;
  job->restart_gone = job->restart_ended = 0;
  job->reform_quiet = job->reform_wait = 0; /* a re-formed job goes on */
  if (job->reforms != job->reforms_said) {   /* horarun hears it took */
    job->reforms_said = job->reforms;
    struct hp_wbuf w;
    hp_wbuf_init(&w);
    hp_enc_reformed(&w, job->reforms);
    hd_control_send(job, &w);
    hp_wbuf_free(&w);
  }
  job->gone_msg[0] = '\0';
  job->left_msg[0] = '\0';
  for (uint32_t i = 0; job->peers && i < job->desc.nhosts; i++)
    job->peers[i].left = 0; /* their ranks shut down, and are back */
  job->session++;
  hd_fast_free(job);
  make_fast(job);
  if (hd_comms_init(job) < 0) {
    hc_error("out of memory starting a new session; stopping");
    hd_teardown(job, "horad is out of memory", 0);
    return;
  }
  for (int i = 0; i < job->nlocal; i++) {
    struct hd_rank *r = &job->ranks[i];
    struct hd_conn *c = r->rejoin;
    hd_rings_forget(r);
    if (r->shm) munmap(r->shm, r->shm_size);
    if (r->memfd >= 0) close(r->memfd);
    r->shm = NULL;
    r->hdr = NULL;
    r->memfd = -1;
    r->rejoin = NULL;
    uv_os_fd_t fd;
    uv_fileno((uv_handle_t *)&c->pipe, &fd);
    if (make_segment(job, r) < 0 || send_welcome(job, r, fd) < 0) {
      hc_error("cannot start rank %d's new session", r->info.rank);
      drop_conn(c);
      continue;
    }
    r->gone = r->said_bye = r->throttled = r->restarting = 0;
    r->conn = c;
    r->connected = 1;
    hc_debug("rank %d: new session", r->info.rank);
  }
}

static int handle_hello(struct hd_conn *c, const unsigned char *p,
                        size_t len) {
  struct hd_job *job = c->job;
  struct hp_hello h;
  if (hp_dec_hello(p, len, &h) < 0) {
    refuse(c, HORA_EPROTO, "malformed hello on the job socket (pid %d)",
           c->pid);
    return -1;
  }
  /* a rank says the number it was started with (HORA_RANK), which after
   * a re-forming (reform.c) may not be its number any more */
  struct hd_rank *r = NULL;
  for (int i = 0; i < job->nlocal; i++)
    if (job->ranks[i].info.rank == h.rank || job->ranks[i].slot == h.rank)
      if (!strcmp(job->ranks[i].token, h.token)) r = &job->ranks[i];
  if (!r) {
    refuse(c, HORA_EAUTH, "hello from pid %d claiming rank %d with a wrong "
           "token", h.pid, h.rank);
    return -1;
  }
  if (h.shm_version != HP_SHM_VERSION) {
    refuse(c, HORA_EVERSION, "rank %d (pid %d) uses a libhora of "
           "shared-memory protocol version %u, but this horad speaks version "
           "%u: use libhora and horad of the same hora release", h.rank,
           h.pid, h.shm_version, HP_SHM_VERSION);
    return -1;
  }
  int restarted = r->restarting == HD_RESTART_STARTED;
  if (((r->said_bye && !r->broken) || restarted) && r->gone && !r->rejoin &&
      !r->conn) {
    for (int i = 0; i < job->nlocal; i++) {
      if (!job->ranks[i].reaped || job->ranks[i].restarting) continue;
      refuse(c, HORA_EPEERGONE, "no new session can start: rank %d on host "
             "%s has ended", job->ranks[i].info.rank, hd_here(job));
      return -1;
    }
    /* hora_init() after hora_shutdown(): collective, as in Horovod. The
     * job starts a new session once every rank has come back: on one
     * host at once, across hosts when host 0 says every host's ranks
     * are back (session.c). */
    r->rejoin = c;
    c->rank = r;
    hc_debug("rank %d (pid %d) initialises hora again%s", h.rank, h.pid,
             restarted ? " (started again)" : "");
    if (!hd_local_all_back(job)) return 0;
    if (job->multi) job->up->session_back(job);
    else hd_new_session(job);
    return 0;
  }
  if (r->connected || r->gone) {
    refuse(c, HORA_EINVAL, "rank %d (pid %d) connected %s", h.rank, h.pid,
           r->gone ? "after it left the job" : "twice");
    return -1;
  }
  if (job->joined && c->pid <= 0) {
    refuse(c, HORA_EINVAL, "rank %d: horad cannot see its process (another "
           "PID namespace?), so it could not tell when it ends", h.rank);
    return -1;
  }
  make_fast(job);
  if (!r->shm) {
    int rc = make_segment(job, r);
    if (rc < 0) {
      hc_error_rl("cannot create shared memory for rank %d: %s", h.rank,
               strerror(-rc));
      return -1;
    }
  }
  uv_os_fd_t fd;
  uv_fileno((uv_handle_t *)&c->pipe, &fd);
  if (send_welcome(job, r, fd) < 0) {
    hc_warn_rl("cannot send welcome to rank %d", h.rank);
    return -1;
  }
  r->conn = c;
  r->connected = 1;
  c->rank = r;
  hd_join_hello(r, c->pid);
  hc_debug("rank %d (pid %d) connected", h.rank, h.pid);
  return 0;
}

static void on_conn_alloc(uv_handle_t *h, size_t size, uv_buf_t *buf) {
  static char slab[4096];
  (void)h;
  (void)size;
  *buf = uv_buf_init(slab, sizeof slab);
}

/* Handles one frame; returns -1 (reason in why) to drop the connection. */
static int conn_frame(struct hd_conn *c, const struct hp_frame_hdr *h,
                      const unsigned char *p, char *why, size_t whylen) {
  struct hd_rank *r = c->rank;
  if (!r && h->type == HP_MSG_HELLO) {
    if (handle_hello(c, p, h->len) < 0) {
      why[0] = '\0'; /* refuse() said why */
      return -1;
    }
    return 0;
  }
  if (r && h->type == HP_MSG_BYE) {
    struct hd_job *job = c->job;
    r->said_bye = 1;
    hc_debug("rank %d shut down", r->info.rank);
    char msg[HP_MSG_MAX + 1];
    hc_fmt(msg, sizeof msg, "rank %d on host %s has shut down hora",
           r->info.rank, hd_here(job));
    hd_rank_left(r, msg);
    return 0;
  }
  hc_fmt(why, whylen, "unexpected message type %u", h->type);
  return -1;
}

static void on_conn_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  struct hd_conn *c = (struct hd_conn *)s;
  if (n < 0) {
    /* Without a goodbye the rank's exit status names the cause, so the
     * reaper reports it; but a wrapper (sh -c 'prog; ...') may outlive the
     * rank, so the connection's end alone declares it gone soon after. */
    struct hd_rank *r = c->rank;
    if (r && !r->said_bye && !r->gone) {
      uv_update_time(c->job->daemon->loop); /* 250 ms from now (see spawn.c) */
      uv_timer_start(&r->lost_timer, hd_on_lost_timer, 250, 0);
    }
    drop_conn(c);
    return;
  }
  if (hp_decoder_feed(&c->dec, buf->base, (size_t)n) < 0) {
    hc_warn_rl("job socket: out of memory; connection dropped");
    uv_read_stop(s);
    drop_conn(c);
    return;
  }
  for (;;) {
    struct hp_frame_hdr h;
    const unsigned char *p;
    char why[160];
    int rc = hp_decoder_next(&c->dec, &h, &p, why, sizeof why);
    if (rc == 0) { /* part of a frame: only small ones are spoken here */
      if (c->dec.len <= HP_FRAME_HDR + LOCAL_FRAME_MAX) return;
      hc_fmt(why, sizeof why, "a frame longer than %u bytes",
             LOCAL_FRAME_MAX);
    } else if (rc > 0 && conn_frame(c, &h, p, why, sizeof why) == 0) {
      continue;
    } else if (rc < 0 && refuse_version(c)) {
      why[0] = '\0';
    }
    if (why[0])
      hc_warn_rl("job socket: %s from %s; connection dropped", why,
                 c->rank ? "a rank" : "an unidentified peer");
    uv_read_stop(s);
    drop_conn(c);
    return;
  }
}

void hd_on_connection(uv_stream_t *server, int status) {
  struct hd_job *job = server->data;
  if (status < 0) return;
  struct hd_conn *c = calloc(1, sizeof *c);
  if (!c) return;
  uv_pipe_init(job->daemon->loop, &c->pipe, 0);
  c->job = job;
  hp_decoder_init(&c->dec);
  c->next = job->conns;
  if (job->conns) job->conns->pprev = &c->next;
  c->pprev = &job->conns;
  job->conns = c;
  if (uv_accept(server, (uv_stream_t *)&c->pipe) < 0) {
    drop_conn(c);
    return;
  }
  /* Only processes of the daemon's own user may speak to it (the socket
   * has no file permissions: it is in the abstract namespace). */
  uv_os_fd_t fd;
  uv_fileno((uv_handle_t *)&c->pipe, &fd);
  struct ucred cred;
  socklen_t cl = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0)
    cred.uid = (uid_t)-1;
  c->pid = (int)cred.pid;
  if (cred.uid != getuid()) {
    hc_warn_rl("connection from uid %d refused", (int)cred.uid);
    drop_conn(c);
    return;
  }
  uv_read_start((uv_stream_t *)&c->pipe, on_conn_alloc, on_conn_read);
}

void hd_on_lost_timer(uv_timer_t *t) {
  struct hd_rank *r = t->data;
  if (r->gone) return;
  char msg[HP_MSG_MAX + 1];
  hc_fmt(msg, sizeof msg,
         "rank %d on host %s closed its connection to horad without shutting "
         "down hora (it crashed or exited)",
         r->info.rank, hd_here(r->job));
  hd_rank_left(r, msg);
}

void hd_rank_left(struct hd_rank *r, const char *why) {
  struct hd_job *job = r->job;
  int restart = hd_restart_wanted(r);
  r->gone = 1;
  hd_rings_forget(r); /* nobody reads its completions any more */
  if (restart) { /* started again: the others wait for it (spawn.c) */
    hd_restart_begin(r, why);
    return;
  }
  if (!r->said_bye && job->restart_gone) { /* the wait for one ends */
    hd_restart_abandon(job, r->info.rank, why);
    return;
  }
  if (!r->said_bye) /* a rank gone for good: no new session can start */
    job->up->session_cancel(job);
  if (job->gone_rank == -1) {
    job->gone_rank = r->info.rank;
    hc_fmt(job->gone_msg, sizeof job->gone_msg, "%s", why);
    /* The other hosts: a crashed rank fails what they run with it; one
     * that shut down hora finished its operations, so only those not
     * decided yet fail (rank -1). */
    hd_mesh_announce_gone(job, r->said_bye ? -1 : r->info.rank,
                          (int)job->desc.host_index, why);
  }
  hd_fail_all(job);
}
