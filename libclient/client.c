/* client.c -- libhora start-up, shutdown and job layout: the top of
 * libhora (it calls ops.c, arena.c and join.c; they call only state.c).
 *
 * hora_init() reads the environment horad gave the rank, connects to the
 * job's unix socket, says hello with the rank's token, and receives its
 * shared-memory segment and the daemon's eventfd by fd passing. Without
 * that environment, a process that another launcher started as one of
 * several ranks joins them (join.c); any other is a job of one. */
#define HC_LOG_SUB HC_SUB_CLIENT
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "client.h"
#include "join.h"
#include "msg.h"

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;

static int env_int(const char *name, int *out) {
  const char *v = getenv(name);
  if (!v || !*v) return -1;
  char *end;
  long x = strtol(v, &end, 10);
  if (*end || x < 0 || x > 1 << 24) return -2;
  *out = (int)x;
  return 0;
}

/* Reads one frame and its passed fds (the segment, horad's eventfd, and
 * the fast path's segment when there is one) from the socket. */
static int recv_welcome(int sock, struct hp_welcome *w, int fds[3]) {
  unsigned char buf[1024];
  char cbuf[CMSG_SPACE(3 * sizeof(int))];
  size_t have = 0;
  fds[0] = fds[1] = fds[2] = -1;
  while (have < HP_FRAME_HDR ||
         have < HP_FRAME_HDR + (size_t)(buf[8] | buf[9] << 8)) {
    struct pollfd pfd = {.fd = sock, .events = POLLIN};
    int pr = poll(&pfd, 1, 30000);
    if (pr == 0) return hl_error(HORA_ETIMEDOUT, "no answer from horad");
    if (pr < 0 && errno == EINTR) continue;
    struct iovec iov = {.iov_base = buf + have, .iov_len = sizeof buf - have};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fds[0] < 0) {
      mh.msg_control = cbuf;
      mh.msg_controllen = sizeof cbuf;
    }
    ssize_t n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return hl_error(HORA_EPEERGONE,
                      "horad closed the connection during hello (it refused "
                      "this rank; its log says why)");
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c && mh.msg_controllen;
         c = CMSG_NXTHDR(&mh, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        /* cbuf holds three: the kernel drops any more (MSG_CTRUNC) */
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        memcpy(fds, CMSG_DATA(c), (k > 3 ? 3 : k) * sizeof(int));
      }
    have += (size_t)n;
    if (have == sizeof buf) break;
  }
  struct hp_frame_hdr h;
  char why[160];
  unsigned version = (unsigned)(buf[4] | buf[5] << 8);
  int parsed = hp_frame_parse(buf, &h, why, sizeof why);
  if (parsed < 0 && !memcmp(buf, "HORA", 4) && version != HP_PROTO_VERSION)
    /* another release's horad: its header still reads the same */
    return hl_error(HORA_EVERSION,
                    "libhora speaks protocol version %u, but horad speaks "
                    "version %u: use libhora and horad of the same hora "
                    "release", HP_PROTO_VERSION, version);
  if (parsed == 0 && h.type == HP_MSG_REFUSE && HP_FRAME_HDR + h.len <= have) {
    struct hp_refuse m;
    if (hp_dec_refuse(buf + HP_FRAME_HDR, h.len, &m) < 0)
      return hl_error(HORA_EPROTO, "malformed refusal from horad");
    int st = strcmp(hora_err_name(m.status), "HORA_E?") ? m.status : HORA_EPROTO;
    return hl_error(st, "horad refused this rank: %s", m.msg);
  }
  if (parsed < 0 || h.type != HP_MSG_WELCOME || HP_FRAME_HDR + h.len > have ||
      hp_dec_welcome(buf + HP_FRAME_HDR, h.len, w) < 0 || fds[0] < 0 ||
      fds[1] < 0)
    return hl_error(HORA_EPROTO, "malformed welcome from horad");
  return 0;
}

/* Maps the segment and checks every offset in its header. */
static int map_segment(int memfd, uint64_t size) {
  struct stat st;
  if (fstat(memfd, &st) < 0 || (uint64_t)st.st_size < size ||
      size < sizeof(struct hp_shm_hdr))
    return hl_error(HORA_EPROTO, "shared memory from horad has a bad size");
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (p == MAP_FAILED)
    return hl_error(HORA_ENOMEM, "cannot map shared memory: %s",
                    strerror(errno));
  struct hp_shm_hdr *h = p, want;
  memset(&want, 0, sizeof want);
  uint64_t total =
      hp_shm_layout(&want, h->chunk_size, h->arena_size, h->adopt_size);
  if (h->magic != HP_SHM_MAGIC || h->version != HP_SHM_VERSION ||
      total != h->total_size || total > size ||
      h->sq_slots_off != want.sq_slots_off ||
      h->cq_slots_off != want.cq_slots_off ||
      h->staging_off != want.staging_off || h->arena_off != want.arena_off ||
      h->adopt_off != want.adopt_off) {
    uint64_t magic = h->magic;
    uint32_t version = h->version;
    munmap(p, size);
    if (magic == HP_SHM_MAGIC && version != HP_SHM_VERSION)
      return hl_error(HORA_EVERSION,
                      "libhora speaks shared-memory protocol version %u, but "
                      "horad speaks version %u: use libhora and horad of the "
                      "same hora release", HP_SHM_VERSION, version);
    return hl_error(HORA_EPROTO,
                    "shared memory layout from horad is not the one this "
                    "library knows (version %u, expected %u)",
                    version, HP_SHM_VERSION);
  }
  hl.shm = p;
  hl.shm_size = size;
  hl.hdr = h;
  hl.arena = hl.shm + h->arena_off;
  hl.arena_size = h->arena_size;
  hp_ring_attach(&hl.sq, &h->sq, hl.shm + h->sq_slots_off, h->sq_slots,
                 h->sqe_size, 1);
  hp_ring_attach(&hl.cq, &h->cq, hl.shm + h->cq_slots_off, h->cq_slots,
                 h->cqe_size, 0);
  return 0;
}

int hl_unix_connect(const char *path) {
  /* "@name" is a socket in Linux's abstract namespace (no file): its
   * address starts with a NUL byte and has no terminating one. */
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  size_t plen = strlen(path);
  if (plen >= sizeof sa.sun_path) return -ENAMETOOLONG;
  memcpy(sa.sun_path, path, plen);
  socklen_t salen = sizeof sa;
  if (path[0] == '@') {
    sa.sun_path[0] = '\0';
    salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen);
  }
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0 || connect(s, (struct sockaddr *)&sa, salen) < 0) {
    int e = errno;
    if (s >= 0) close(s);
    return -e;
  }
  return s;
}

static int connect_daemon(const char *path, int rank, const char *token) {
  hl.rank = rank;
  int s = hl_unix_connect(path);
  if (s < 0)
    return hl_error(s == -ENAMETOOLONG ? HORA_EINVAL : HORA_EPEERGONE,
                    "rank %d cannot connect to horad at %s: %s", hl.rank,
                    path, strerror(-s));
  /* an abstract name anyone may bind once its horad is gone: only a horad
   * of this user gets the token */
  struct ucred cred;
  socklen_t cl = sizeof cred;
  if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0 ||
      cred.uid != getuid()) {
    close(s);
    return hl_error(HORA_EAUTH, "rank %d: the process listening at %s is "
                    "not this user's horad", hl.rank, path);
  }
  struct hp_hello h = {.rank = hl.rank,
                       .pid = (int32_t)getpid(),
                       .shm_version = HP_SHM_VERSION};
  hc_fmt(h.token, sizeof h.token, "%s", token);
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_hello(&w, &h);
  ssize_t n = w.err ? -1 : send(s, w.data, w.len, MSG_NOSIGNAL);
  int ok = n == (ssize_t)w.len;
  hp_wbuf_free(&w);
  if (!ok) {
    close(s);
    return hl_error(HORA_EPEERGONE, "rank %d cannot talk to horad", hl.rank);
  }
  struct hp_welcome wm;
  int fds[3];
  int rc = recv_welcome(s, &wm, fds);
  if (rc == 0) rc = map_segment(fds[0], wm.shm_size);
  if (rc == 0) hl_adopt_init(fds[0]); /* keeps the memfd */
  else if (fds[0] >= 0) close(fds[0]);
  if (rc < 0) {
    if (fds[2] >= 0) close(fds[2]);
    if (fds[1] >= 0) close(fds[1]);
    close(s);
    return rc;
  }
  hl.sock = s;
  hl.efd = fds[1];
  hl.rank = wm.rank;
  hl.size = wm.size;
  hl.local_rank = wm.local_rank;
  hl.local_size = wm.local_size;
  hl.cross_rank = wm.cross_rank;
  hl.cross_size = wm.cross_size;
  hc_fmt(hl.hostname, sizeof hl.hostname, "%s", wm.hostname);
  /* fast.c checks the segment against the rank and size just set */
  if (wm.fast_size && fds[2] >= 0 && hl_fast_map(fds[2], wm.fast_size) < 0)
    hc_warn("rank %d: the fast path's shared memory is not usable; small "
            "operations go through horad", hl.rank);
  if (fds[2] >= 0) close(fds[2]);
  return 0;
}

/* keep: blocks of the arena are still in use (a program's tensors that
 * outlive hora_shutdown(), e.g. hora.torch's arena tensors): the segment
 * stays mapped, as private memory of the process from then on, until it
 * exits, so that touching them never faults. */
static void release_daemon(int keep) {
  hl_cuda_release_segment();
  hl_adopt_fini();
  if (hl.shm && keep) hl_arena_retire(hl.shm, hl.shm_size);
  if (hl.shm && !keep) munmap(hl.shm, hl.shm_size);
  hl_fast_unmap();
  hl.shm = NULL;
  hl.hdr = NULL;
  hl.arena = NULL;
  hl.arena_size = 0;
  if (hl.efd >= 0) close(hl.efd);
  if (hl.sock >= 0) close(hl.sock);
  hl.efd = hl.sock = -1;
}

/* Horovod reads HOROVOD_TIMELINE when it initialises: a program that sets
 * it in rank 0's environment before hora_init() gets its timeline (the
 * file horarun gave horad, when it is the same, goes on). */
static void env_timeline(void) {
  const char *f = hc_param_str(timeline_filename);
  if (hl.local_only || hl.rank != 0 || !f || !*f || !strcmp(f, "DYNAMIC"))
    return;
  int rc = hora_start_timeline(f, hc_param_int(timeline_mark_cycles) != 0);
  if (rc < 0)
    hc_warn("rank 0: no timeline (HORA_TIMELINE / HOROVOD_TIMELINE): %s",
            hora_last_error());
  hl_clear_error();
}

/* A process started without horarun by a launcher of several ranks
 * (srun, mpirun, torchrun) joins the job of its ranks (join.c); alone, each
 * would train as a job of one. Returns 1 with the job socket and token
 * filled, 0 when no such launcher started it, or a HORA_E* error. */
static int foreign_launcher(char *sock, size_t socklen, char *token,
                            size_t toklen, int *rank) {
  const char *alone = getenv("HORA_STANDALONE");
  if (alone && !strcmp(alone, "1")) return 0; /* the user says: a job of 1 */
  struct hl_foreign f;
  if (!hl_foreign_detect(&f)) return 0;
  int rc = hl_join(&f, sock, socklen, token, toklen);
  *rank = (int)f.rank;
  return rc < 0 ? rc : 1;
}

int hora_init(void) {
  hl_clear_error();
  pthread_mutex_lock(&init_lock);
  if (atomic_load(&hl.initialized)) {
    pthread_mutex_unlock(&init_lock);
    return 0;
  }
  static int log_ready;
  if (!log_ready) { /* HORA_LOG_LEVEL, HORA_LOG (client:debug ...) */
    hc_log_init("libhora", HC_WARNING);
    log_ready = 1;
  }
  hl.spin_ns = (uint64_t)HC_MAX(0, hc_param_int(spin_us)) * 1000u;
  const char *path = getenv("HORA_DAEMON_SOCKET");
  const char *token = getenv("HORA_RANK_TOKEN");
  char jsock[512], jtoken[HP_TOKEN_LEN + 8];
  int rc = 0, rank = -1, joined = 0;
  if (path && *path && (env_int("HORA_RANK", &rank) < 0 || !token)) {
    pthread_mutex_unlock(&init_lock);
    return hl_error(HORA_EINVAL, "HORA_DAEMON_SOCKET is set but HORA_RANK "
                    "or HORA_RANK_TOKEN is missing or malformed");
  }
  if ((!path || !*path) &&
      (joined = foreign_launcher(jsock, sizeof jsock, jtoken, sizeof jtoken,
                                 &rank)) < 0) {
    pthread_mutex_unlock(&init_lock);
    return joined;
  }
  if (joined) {
    path = jsock;
    token = jtoken;
  }
  if (!path || !*path) {
    hl.local_only = 1;
    hl.rank = hl.local_rank = hl.cross_rank = 0;
    hl.size = hl.local_size = hl.cross_size = 1;
    if (gethostname(hl.hostname, sizeof hl.hostname - 1) < 0)
      strcpy(hl.hostname, "localhost");
  } else {
    hl.local_only = 0;
    rc = connect_daemon(path, rank, token);
    if (rc == 0) rc = hl_arena_init();
  }
  if (rc == 0 && !hl.local_only) {
    hl.session++; /* the threads' wait registrations are of the last one */
    atomic_store(&hl.hdr->stack_signal,
                 (uint32_t)atomic_load(&hl.stack_signal));
  }
  if (rc == 0) rc = hl_ops_init();
  if (rc == 0 && !hl.local_only) {
    atomic_store(&hl.stop, 0);
    if (pthread_create(&hl.progress, NULL, hl_progress_main, NULL) != 0)
      rc = hl_error(HORA_ENOMEM, "cannot start libhora's progress thread");
    else
      hl.have_progress = 1;
  }
  if (rc < 0) {
    hl_ops_fini();
    hl_arena_fini();
    release_daemon(0);
  } else {
    atomic_store(&hl.initialized, 1);
  }
  pthread_mutex_unlock(&init_lock);
  if (rc == 0) env_timeline();
  return rc;
}

int hora_shutdown(void) {
  pthread_mutex_lock(&init_lock);
  if (!atomic_load(&hl.initialized)) {
    pthread_mutex_unlock(&init_lock);
    return hl_error(HORA_ENOTINIT, "hora_shutdown: hora is not initialized");
  }
  atomic_store(&hl.initialized, 0);
  if (!hl.local_only) {
    struct hp_wbuf w;
    hp_wbuf_init(&w);
    hp_enc_text(&w, HP_MSG_BYE, "");
    if (!w.err) {
      ssize_t n = send(hl.sock, w.data, w.len, MSG_NOSIGNAL);
      (void)n;
    }
    hp_wbuf_free(&w);
    atomic_store(&hl.stop, 1);
    if (hl.have_progress) {
      atomic_fetch_add(&hl.hdr->prog_seq, 1);
      hl_futex_wake_all(&hl.hdr->prog_seq);
      pthread_join(hl.progress, NULL);
      hl.have_progress = 0;
    }
  }
  hl_fail_pending(HORA_ESHUTDOWN, "hora was shut down on this rank while the "
                                  "operation was pending");
  hl_ops_fini();
  hl_psets_fini();
  size_t live = hl.local_only ? 0 : hl_arena_live();
  if (live)
    hc_debug("rank %d: %zu blocks of the arena are still in use: its "
             "segment stays mapped", hl.rank, live);
  hl_arena_fini();
  release_daemon(live > 0);
  pthread_mutex_unlock(&init_lock);
  return 0;
}

int hora_is_initialized(void) { return atomic_load(&hl.initialized); }

int hora_set_stack_signal(int signum) {
  hl_clear_error();
  if (signum < 0 || signum >= 65)
    return hl_error(HORA_EINVAL, "hora_set_stack_signal: %d is not a signal "
                    "number", signum);
  pthread_mutex_lock(&init_lock);
  atomic_store(&hl.stack_signal, signum);
  if (atomic_load(&hl.initialized) && hl.hdr)
    atomic_store(&hl.hdr->stack_signal, (uint32_t)signum);
  pthread_mutex_unlock(&init_lock);
  return 0;
}

#define QUERY(fn, field)                                                       \
  int fn(void) {                                                               \
    if (!atomic_load(&hl.initialized))                                         \
      return hl_error(HORA_ENOTINIT, #fn ": hora is not initialized; call "    \
                                         "hora_init() first");                 \
    return hl.field;                                                           \
  }
QUERY(hora_rank, rank)
QUERY(hora_size, size)
QUERY(hora_local_rank, local_rank)
QUERY(hora_local_size, local_size)
QUERY(hora_cross_rank, cross_rank)
QUERY(hora_cross_size, cross_size)
#undef QUERY

int64_t hora_hosts_updated(void) {
  if (!atomic_load(&hl.initialized))
    return hl_error(HORA_ENOTINIT, "hora_hosts_updated: hora is not "
                    "initialized; call hora_init() first");
  if (hl.local_only || !hl.hdr) return 0;
  return (int64_t)atomic_load_explicit(&hl.hdr->hosts_updated,
                                       memory_order_acquire);
}
