/* probe.c -- horad --probe: what `horarun --doctor` asks of a host.
 *
 * horarun starts it as it would start horad for a job (over ssh, or
 * directly on its own machine) and writes one line on its standard input,
 * "HORA-DOCTOR 1 <token>", the token (32 hex digits) never on a command
 * line. The probe then reports what a job depends on, one "key value..."
 * line each on its standard output:
 *
 *   probe 1                  the protocol of these lines
 *   version V                hora_version()
 *   hostname NAME
 *   ifaces NAME,...          the interfaces with an address
 *   iface NAME ADDR          the first of --iface this host has, or
 *   iface-missing LIST       none of them
 *   launcher ADDR            horarun's address ($SSH_CONNECTION or
 *                            --launcher), where known
 *   addr ADDR                the address a job's daemons would use: the
 *                            interface's, else this host's source address
 *                            towards horarun; absent when neither is known
 *   speed MBPS               link speed of the interface of addr (-1:
 *                            unknown)
 *   shm TOTAL FREE           /dev/shm in bytes, or shm-missing REASON
 *   memlock BYTES            RLIMIT_MEMLOCK (-1: unlimited)
 *   mem AVAIL CGROUP         MemAvailable, and what the memory cgroup
 *                            still allows (-1: no limit found), bytes
 *   rdma N                   RDMA devices (/sys/class/infiniband)
 *   gpu N [MODEL;...]        NVIDIA GPUs (/proc/driver/nvidia/gpus)
 *   nccl VERSION | nccl none libnccl.so.2's ncclGetVersion()
 *   listen PORT              the port of its test listener
 *   ready
 *
 * and then takes commands, one per line:
 *
 *   test ADDR PORT [rtt|bw]   connect to another host's probe there and
 *                    measure: "result ok RTT_NS BYTES NS" (median round
 *                    trip of small messages; bytes sent in NS nanoseconds,
 *                    until the other end confirmed them; 0 for what was
 *                    not asked: rtt, bw, or without either both) or
 *                    "result fail WHY"
 *   quit             (or end of input) end
 *
 * Its listener, on a thread of its own, serves other probes' tests
 * meanwhile (also while this one runs a test): a connection must
 * begin with the token, or it is closed; bytes it cannot parse close it.
 * It holds MAX_CONNS connections; past that, a new one takes the place of
 * the oldest that has not sent the token, so silent strangers cannot keep
 * a test out.
 * Nothing is written anywhere: the probe leaves no trace on the host. */
#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "daemon.h"

#define TOKEN_LEN 32
#define MAX_CONNS 16
#define IDLE_NS (10ull * 1000000000ull) /* a silent connection is closed */
#define CONNECT_MS 2000
#define PINGS 10
#define PING_BUDGET_NS 1000000000ull /* the pings stop after 1 s */
#define BULK_NS 300000000ull         /* bytes are sent for 0.3 s */
#define BULK_MAX (256ull << 20)
#define BULK_CHUNK 65536u
#define REPLY_MS 5000

static char token[TOKEN_LEN + 1];

/* ---- facts ------------------------------------------------------------ */

static void say_ifaces(void) {
  struct ifaddrs *ifs, *i;
  char list[1024] = "";
  size_t n = 0;
  if (getifaddrs(&ifs) < 0) {
    printf("ifaces\n");
    return;
  }
  for (i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET &&
                         i->ifa_addr->sa_family != AF_INET6))
      continue;
    char key[64], hay[sizeof list + 2];
    size_t k = strlen(i->ifa_name);
    hc_fmt(key, sizeof key, ",%s,", i->ifa_name);
    hc_fmt(hay, sizeof hay, ",%s,", list);
    if (strstr(hay, key) || n + k + 2 > sizeof list) continue;
    n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", n ? "," : "",
                          i->ifa_name);
  }
  freeifaddrs(ifs);
  printf("ifaces %s\n", list);
}

/* The interface that holds address `addr`, into name; 0 or -1. */
static int iface_of(const char *addr, char *name, size_t len) {
  struct ifaddrs *ifs, *i;
  int found = -1;
  if (getifaddrs(&ifs) < 0) return -1;
  for (i = ifs; i && found < 0; i = i->ifa_next) {
    char buf[INET6_ADDRSTRLEN];
    if (!i->ifa_addr) continue;
    int fam = i->ifa_addr->sa_family;
    const void *a;
    if (fam == AF_INET)
      a = &((struct sockaddr_in *)i->ifa_addr)->sin_addr;
    else if (fam == AF_INET6)
      a = &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
    else
      continue;
    if (!inet_ntop(fam, a, buf, sizeof buf)) continue;
    if (!strncmp(addr, buf, strlen(buf)) &&
        (!addr[strlen(buf)] || addr[strlen(buf)] == '%')) {
      hc_fmt(name, len, "%s", i->ifa_name);
      found = 0;
    }
  }
  freeifaddrs(ifs);
  return found;
}

/* This host's source address towards `to` (as a TCP connection to it would
 * get it: the route's), into buf; 0 or -1. No packet is sent. */
static int source_addr(const char *to, char *buf, size_t len) {
  struct addrinfo hints = {.ai_socktype = SOCK_DGRAM,
                           .ai_flags = AI_NUMERICHOST},
                  *ai;
  if (getaddrinfo(to, "9", &hints, &ai) != 0) return -1;
  int rc = -1, fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
      getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
    const void *a =
        ss.ss_family == AF_INET
            ? (const void *)&((struct sockaddr_in *)&ss)->sin_addr
            : (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr;
    if (ss.ss_family == AF_INET6 &&
        IN6_IS_ADDR_V4MAPPED(&((struct sockaddr_in6 *)&ss)->sin6_addr)) {
      if (inet_ntop(AF_INET, (const char *)a + 12, buf, (socklen_t)len))
        rc = 0;
    } else if (inet_ntop(ss.ss_family, a, buf, (socklen_t)len)) {
      rc = 0;
      struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
      if (ss.ss_family == AF_INET6 && s6->sin6_scope_id &&
          IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr)) {
        size_t k = strlen(buf);
        hc_fmt(buf + k, len - k, "%%%u", s6->sin6_scope_id);
      }
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(ai);
  return rc;
}

static long long read_ll(const char *path) {
  char buf[64];
  FILE *f = fopen(path, "r");
  if (!f) return -2;
  long long v = -2;
  if (fgets(buf, sizeof buf, f)) {
    char *end;
    errno = 0;
    v = strtoll(buf, &end, 10);
    if (errno || end == buf) v = strncmp(buf, "max", 3) ? -2 : -1;
  }
  fclose(f);
  return v;
}

/* What the memory cgroup of this process still allows, in bytes, or -1. */
static long long cgroup_room(void) {
  FILE *f = fopen("/proc/self/cgroup", "r");
  char line[1024], path[1300];
  long long room = -1;
  if (!f) return -1;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2) continue;
    const char *cg = c2 + 1, *max, *cur;
    char base[64];
    if (!strncmp(line, "0::", 3)) { /* v2 */
      hc_fmt(base, sizeof base, "/sys/fs/cgroup");
      max = "memory.max";
      cur = "memory.current";
    } else if (!strncmp(c1, ":memory:", 8)) { /* v1 */
      hc_fmt(base, sizeof base, "/sys/fs/cgroup/memory");
      max = "memory.limit_in_bytes";
      cur = "memory.usage_in_bytes";
    } else {
      continue;
    }
    /* inside a container the path may not exist: its root is the group */
    for (int pass = 0; pass < 2; pass++) {
      hc_fmt(path, sizeof path, "%s%s/%s", base, pass ? "" : cg, max);
      long long m = read_ll(path);
      if (m == -2) continue;
      if (m < 0 || m >= (1ll << 60)) break; /* no limit */
      hc_fmt(path, sizeof path, "%s%s/%s", base, pass ? "" : cg, cur);
      long long u = read_ll(path);
      if (u < 0) break;
      long long r = m > u ? m - u : 0;
      if (room < 0 || r < room) room = r;
      break;
    }
  }
  fclose(f);
  return room;
}

static long long mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  char line[256];
  long long kb = -1;
  if (!f) return -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
  fclose(f);
  return kb < 0 ? -1 : kb * 1024;
}

static int count_dir(const char *path) {
  DIR *d = opendir(path);
  int n = 0;
  if (!d) return 0;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

static void say_gpus(void) {
  const char *root = "/proc/driver/nvidia/gpus";
  DIR *d = opendir(root);
  char models[1024] = "";
  size_t mlen = 0;
  int n = 0;
  if (d) {
    for (struct dirent *e; (e = readdir(d));) {
      if (e->d_name[0] == '.') continue;
      n++;
      char path[512], line[256];
      hc_fmt(path, sizeof path, "%s/%s/information", root, e->d_name);
      FILE *f = fopen(path, "r");
      while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "Model:", 6)) continue;
        char *m = line + 6;
        m += strspn(m, " \t");
        m[strcspn(m, "\n")] = '\0';
        for (char *p = m; *p; p++)
          if (*p == ' ') *p = '_';
        if (mlen + strlen(m) + 2 < sizeof models)
          mlen += (size_t)snprintf(models + mlen, sizeof models - mlen,
                                   "%s%s", mlen ? ";" : "", m);
        break;
      }
      if (f) fclose(f);
    }
    closedir(d);
  }
  printf("gpu %d%s%s\n", n, mlen ? " " : "", models);
  /* NCCL, where its library is installed (with or without a GPU) */
  void *h = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_LOCAL);
  int (*get)(int *) = NULL;
  int v = 0;
  if (h) *(void **)&get = dlsym(h, "ncclGetVersion");
  if (get && get(&v) == 0 && v > 0) {
    int major = v >= 10000 ? v / 10000 : v / 1000;
    int minor = v >= 10000 ? v / 100 % 100 : v / 100 % 10;
    printf("nccl %d.%d.%d\n", major, minor, v % 100);
  } else {
    printf("nccl none\n");
  }
  if (h) dlclose(h);
}

/* Writes every fact line; *addr gets the address of the listener. */
static void say_facts(const char *iface, const char *launcher, char *addr,
                      size_t alen) {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  printf("probe 1\nversion %s\nhostname %s\n", hora_version(), host);
  say_ifaces();
  addr[0] = '\0';
  if (iface) {
    char list[256], *save = NULL, *name;
    hc_fmt(list, sizeof list, "%s", iface);
    for (name = strtok_r(list, ",", &save); name && !addr[0];
         name = strtok_r(NULL, ",", &save))
      if (hd_iface_addr(name, addr, alen) == 0)
        printf("iface %s %s\n", name, addr);
    if (!addr[0]) printf("iface-missing %s\n", iface);
  }
  if (launcher) printf("launcher %s\n", launcher);
  if (!iface && launcher && source_addr(launcher, addr, alen) < 0)
    addr[0] = '\0';
  if (addr[0]) printf("addr %s\n", addr);
  char ifn[64], path[128];
  long long speed = -1;
  if (addr[0] && iface_of(addr, ifn, sizeof ifn) == 0) {
    hc_fmt(path, sizeof path, "/sys/class/net/%s/speed", ifn);
    speed = read_ll(path);
    if (speed <= 0) speed = -1;
  }
  printf("speed %lld\n", speed);
  struct statvfs sv;
  if (statvfs("/dev/shm", &sv) < 0)
    printf("shm-missing %s\n", strerror(errno));
  else if (access("/dev/shm", W_OK) < 0)
    printf("shm-missing not writable: %s\n", strerror(errno));
  else
    printf("shm %llu %llu\n",
           (unsigned long long)sv.f_blocks * sv.f_frsize,
           (unsigned long long)sv.f_bavail * sv.f_frsize);
  struct rlimit rl;
  if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0)
    printf("memlock %lld\n",
           rl.rlim_cur == RLIM_INFINITY ? -1ll : (long long)rl.rlim_cur);
  printf("mem %lld %lld\n", mem_available(), cgroup_room());
  printf("rdma %d\n", count_dir("/sys/class/infiniband"));
  say_gpus();
}

/* ---- the listener: other probes' tests -------------------------------- */

struct sconn {
  int fd;
  int state; /* 0 token, 1 command, 2 chunk length, 3 chunk data */
  size_t have;
  unsigned char hdr[TOKEN_LEN];
  uint32_t left;
  uint64_t last;
};

static void sconn_close(struct sconn *c) {
  close(c->fd);
  c->fd = -1;
}

static int send_byte(int fd, char b) {
  ssize_t w;
  do w = send(fd, &b, 1, MSG_NOSIGNAL);
  while (w < 0 && errno == EINTR);
  return w == 1 ? 0 : -1;
}

/* Takes what the connection brought; closes it on end, error or garbage. */
static void sconn_read(struct sconn *c) {
  static unsigned char buf[1 << 16];
  ssize_t n = recv(c->fd, buf, sizeof buf, 0);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    sconn_close(c);
    return;
  }
  c->last = hc_now_ns();
  for (ssize_t i = 0; i < n && c->fd >= 0;) {
    switch (c->state) {
    case 0: /* the token */
      c->hdr[c->have++] = buf[i++];
      if (c->have < TOKEN_LEN) break;
      if (memcmp(c->hdr, token, TOKEN_LEN)) {
        sconn_close(c);
        break;
      }
      c->state = 1;
      c->have = 0;
      break;
    case 1: { /* 'p' ping, 'b' a chunk follows, 'e' all sent */
      unsigned char k = buf[i++];
      if (k == 'b') {
        c->state = 2;
        c->have = 0;
      } else if ((k != 'p' && k != 'e') ||
                 send_byte(c->fd, k == 'p' ? 'p' : 'd') < 0) {
        sconn_close(c);
      }
      break;
    }
    case 2: /* the chunk's length, 4 bytes, big-endian */
      c->hdr[c->have++] = buf[i++];
      if (c->have < 4) break;
      c->left = (uint32_t)c->hdr[0] << 24 | (uint32_t)c->hdr[1] << 16 |
                (uint32_t)c->hdr[2] << 8 | c->hdr[3];
      if (c->left == 0 || c->left > BULK_CHUNK) {
        sconn_close(c);
        break;
      }
      c->state = 3;
      break;
    case 3: { /* its bytes, dropped */
      size_t take = HC_MIN((size_t)(n - i), (size_t)c->left);
      i += (ssize_t)take;
      c->left -= (uint32_t)take;
      if (!c->left) c->state = 1;
      break;
    }
    }
  }
}

/* ---- a test towards another probe ------------------------------------- */

static int wait_fd(int fd, short ev, uint64_t deadline) {
  for (;;) {
    uint64_t now = hc_now_ns();
    if (now >= deadline) return 0;
    struct pollfd p = {.fd = fd, .events = ev};
    int ms = (int)((deadline - now + 999999) / 1000000);
    int r = poll(&p, 1, ms);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r > 0) return 1;
  }
}

/* Sends all of len bytes before the deadline; 0, or -1 with why. */
static int send_all(int fd, const void *p, size_t len, uint64_t deadline,
                    char *why, size_t wlen) {
  const char *s = p;
  while (len) {
    ssize_t w = send(fd, s, len, MSG_NOSIGNAL);
    if (w > 0) {
      s += w;
      len -= (size_t)w;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno != EAGAIN) {
      hc_fmt(why, wlen, "sending: %s", strerror(errno));
      return -1;
    }
    if (wait_fd(fd, POLLOUT, deadline) <= 0) {
      hc_fmt(why, wlen, "sending: no progress within the time allowed");
      return -1;
    }
  }
  return 0;
}

/* Receives one byte, expecting `want`, before the deadline. */
static int recv_byte(int fd, char want, uint64_t deadline, char *why,
                     size_t wlen) {
  for (;;) {
    char b;
    ssize_t r = recv(fd, &b, 1, 0);
    if (r == 1) {
      if (b == want) return 0;
      hc_fmt(why, wlen, "the other probe answered '%c'", b);
      return -1;
    }
    if (r == 0) {
      hc_fmt(why, wlen, "the other probe closed the connection");
      return -1;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN) {
      hc_fmt(why, wlen, "%s", strerror(errno));
      return -1;
    }
    if (wait_fd(fd, POLLIN, deadline) <= 0) {
      hc_fmt(why, wlen, "no answer within %d ms", REPLY_MS);
      return -1;
    }
  }
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* mode: 1 the round trips, 2 the bandwidth, 3 both */
static void run_test(const char *addr, const char *port, int mode) {
  char why[256];
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV},
                  *ai = NULL;
  int fd = -1, e = getaddrinfo(addr, port, &hints, &ai);
  if (e) {
    printf("result fail bad address %s port %s: %s\n", addr, port,
           gai_strerror(e));
    return;
  }
  fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    printf("result fail socket: %s\n", strerror(errno));
    freeaddrinfo(ai);
    return;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  uint64_t t0 = hc_now_ns();
  int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
  freeaddrinfo(ai);
  if (rc < 0 && errno != EINPROGRESS) {
    printf("result fail connect: %s\n", strerror(errno));
    goto out;
  }
  if (rc < 0) {
    int w = wait_fd(fd, POLLOUT, t0 + CONNECT_MS * 1000000ull);
    int err = 0;
    socklen_t el = sizeof err;
    if (w <= 0) {
      printf("result fail connect: no answer within %d ms\n", CONNECT_MS);
      goto out;
    }
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
    if (err) {
      printf("result fail connect: %s\n", strerror(err));
      goto out;
    }
  }
  uint64_t dl = hc_now_ns() + REPLY_MS * 1000000ull;
  if (send_all(fd, token, TOKEN_LEN, dl, why, sizeof why) < 0) goto fail;
  uint64_t rtt[PINGS] = {0};
  int np = 0;
  uint64_t pstart = hc_now_ns();
  while ((mode & 1) && np < PINGS &&
         (np < 3 || hc_now_ns() - pstart < PING_BUDGET_NS)) {
    uint64_t s = hc_now_ns();
    dl = s + REPLY_MS * 1000000ull;
    if (send_all(fd, "p", 1, dl, why, sizeof why) < 0 ||
        recv_byte(fd, 'p', dl, why, sizeof why) < 0)
      goto fail;
    rtt[np++] = hc_now_ns() - s;
  }
  qsort(rtt, (size_t)np, sizeof *rtt, cmp_u64);
  static unsigned char chunk[5 + BULK_CHUNK];
  chunk[0] = 'b';
  chunk[1] = (unsigned char)(BULK_CHUNK >> 24);
  chunk[2] = (unsigned char)(BULK_CHUNK >> 16);
  chunk[3] = (unsigned char)(BULK_CHUNK >> 8);
  chunk[4] = (unsigned char)BULK_CHUNK;
  uint64_t bytes = 0, b0 = hc_now_ns();
  dl = b0 + REPLY_MS * 1000000ull;
  while ((mode & 2) && hc_now_ns() - b0 < BULK_NS && bytes < BULK_MAX) {
    if (send_all(fd, chunk, sizeof chunk, dl, why, sizeof why) < 0)
      goto fail;
    bytes += BULK_CHUNK;
  }
  dl = hc_now_ns() + REPLY_MS * 1000000ull;
  if (send_all(fd, "e", 1, dl, why, sizeof why) < 0 ||
      recv_byte(fd, 'd', dl, why, sizeof why) < 0)
    goto fail;
  printf("result ok %llu %llu %llu\n", (unsigned long long)rtt[np / 2],
         (unsigned long long)bytes,
         (unsigned long long)(mode & 2 ? hc_now_ns() - b0 : 0));
  goto out;
fail:
  printf("result fail %s\n", why);
out:
  close(fd);
}

/* ---- the probe -------------------------------------------------------- */

/* Takes one line out of buf (*have bytes) into line (at most len-1 bytes
 * of it); 1, or 0 when buf holds no whole line. */
static int take_line(char *line, size_t len, char *buf, size_t *have) {
  char *nl = memchr(buf, '\n', *have);
  if (!nl) return 0;
  size_t k = (size_t)(nl - buf);
  hc_fmt(line, len, "%.*s", (int)HC_MIN(k, len - 1), buf);
  memmove(buf, nl + 1, *have - k - 1);
  *have -= k + 1;
  return 1;
}

/* Reads what standard input holds into buf; 0 at its end, else 1. A
 * "line" that fills buf is garbage, dropped. */
static int fill(char *buf, size_t len, size_t *have) {
  if (*have == len) *have = 0;
  ssize_t r = read(STDIN_FILENO, buf + *have, len - *have);
  if (r < 0 && (errno == EINTR || errno == EAGAIN)) return 1;
  if (r <= 0) return 0;
  *have += (size_t)r;
  return 1;
}

static int open_listener(const char *addr, int *port) {
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  int fd = -1;
  if (addr[0]) {
    if (hp_addr_parse(addr, 0, &ss) < 0) return -1;
    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  } else {
    hp_addr_parse("::", 0, &ss);
    fd = socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      hp_addr_parse("0.0.0.0", 0, &ss);
      fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    }
  }
  if (fd < 0) return -1;
  socklen_t sl = ss.ss_family == AF_INET ? sizeof(struct sockaddr_in)
                                         : sizeof(struct sockaddr_in6);
  if (bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, 16) < 0 ||
      getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(ss.ss_family == AF_INET
                    ? ((struct sockaddr_in *)&ss)->sin_port
                    : ((struct sockaddr_in6 *)&ss)->sin6_port);
  return fd;
}

/* The listener and its connections, on a thread of their own, so that
 * this probe serves another's test while it runs one of its own. Ends
 * when `stop` becomes readable. */
struct server {
  int lfd, stop;
};

static void *serve(void *arg) {
  const struct server *sv = arg;
  struct sconn conns[MAX_CONNS];
  for (int i = 0; i < MAX_CONNS; i++) conns[i].fd = -1;
  for (;;) {
    struct pollfd pf[2 + MAX_CONNS];
    int n = 0;
    pf[n++] = (struct pollfd){.fd = sv->stop, .events = POLLIN};
    pf[n++] = (struct pollfd){.fd = sv->lfd, .events = POLLIN};
    for (int i = 0; i < MAX_CONNS; i++)
      if (conns[i].fd >= 0)
        pf[n++] = (struct pollfd){.fd = conns[i].fd, .events = POLLIN};
    if (poll(pf, (nfds_t)n, 1000) < 0 && errno != EINTR) break;
    if (pf[0].revents) break;
    if (pf[1].revents & POLLIN) {
      int cfd = accept4(sv->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
      int slot = -1, old = -1;
      for (int i = 0; i < MAX_CONNS && slot < 0 && cfd >= 0; i++) {
        if (conns[i].fd < 0)
          slot = i;
        else if (conns[i].state == 0 &&
                 (old < 0 || conns[i].last < conns[old].last))
          old = i;
      }
      if (slot < 0 && old >= 0) { /* full: the oldest without the token */
        sconn_close(&conns[old]);
        slot = old;
      }
      if (slot < 0 && cfd >= 0) {
        close(cfd); /* all of them hold the token */
      } else if (cfd >= 0) {
        int one = 1;
        setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        conns[slot] = (struct sconn){.fd = cfd, .last = hc_now_ns()};
      }
    }
    for (int k = 2; k < n; k++)
      for (int i = 0; i < MAX_CONNS; i++)
        if (conns[i].fd == pf[k].fd && pf[k].revents) sconn_read(&conns[i]);
    uint64_t now = hc_now_ns();
    for (int i = 0; i < MAX_CONNS; i++)
      if (conns[i].fd >= 0 && now - conns[i].last > IDLE_NS)
        sconn_close(&conns[i]);
  }
  for (int i = 0; i < MAX_CONNS; i++)
    if (conns[i].fd >= 0) sconn_close(&conns[i]);
  return NULL;
}

int hd_probe_main(const char *iface, const char *launcher) {
  char buf[1024], line[1024], addr[128];
  size_t have = 0;
  int got = 0;
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, NULL, _IOLBF, 0);
  uint64_t until = hc_now_ns() + 30000000000ull;
  while (!(got = take_line(line, sizeof line, buf, &have))) {
    if (wait_fd(STDIN_FILENO, POLLIN, until) <= 0 ||
        !fill(buf, sizeof buf, &have))
      break;
  }
  unsigned v;
  int used = 0;
  if (!got || sscanf(line, "HORA-DOCTOR %u %32s%n", &v, token, &used) != 2 ||
      v != 1 || strlen(token) != TOKEN_LEN || line[used]) {
    fprintf(stderr, "horad: error: --probe expects the line 'HORA-DOCTOR 1 "
                    "<token>' on standard input (horarun --doctor "
                    "writes it)\n");
    return 2;
  }
  say_facts(iface, launcher, addr, sizeof addr);
  int port = 0, stop[2] = {-1, -1};
  struct server sv = {.lfd = -1};
  pthread_t th;
  int threaded = 0;
  if (!iface || addr[0]) {
    sv.lfd = open_listener(iface ? addr : "", &port);
    if (sv.lfd < 0) {
      printf("listen-failed %s\n", strerror(errno));
    } else if (pipe2(stop, O_CLOEXEC) < 0 ||
               ((sv.stop = stop[0]),
                (errno = pthread_create(&th, NULL, serve, &sv)) != 0)) {
      printf("listen-failed cannot serve it: %s\n", strerror(errno));
    } else {
      threaded = 1;
      printf("listen %d\n", port);
    }
  }
  printf("ready\n");
  for (;;) {
    while (take_line(line, sizeof line, buf, &have)) {
      char a[128], p[16], m[8] = "";
      int k = 0;
      if (!strcmp(line, "quit")) goto done;
      if (sscanf(line, "test %127s %15s%n %7s%n", a, p, &k, m, &k) >= 2 &&
          !line[k] && (!m[0] || !strcmp(m, "rtt") || !strcmp(m, "bw")))
        run_test(a, p, !m[0] ? 3 : m[0] == 'r' ? 1 : 2);
      else
        printf("error unknown command\n");
    }
    struct pollfd in = {.fd = STDIN_FILENO, .events = POLLIN};
    if (poll(&in, 1, -1) < 0 && errno != EINTR) break;
    if (in.revents && !fill(buf, sizeof buf, &have)) break;
  }
done:
  if (threaded) {
    ssize_t w;
    do w = write(stop[1], "x", 1);
    while (w < 0 && errno == EINTR);
    pthread_join(th, NULL);
  }
  for (int i = 0; i < 2; i++)
    if (stop[i] >= 0) close(stop[i]);
  if (sv.lfd >= 0) close(sv.lfd);
  return 0;
}
