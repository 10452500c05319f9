/* join_hosts.c -- the hosts of ranks that another launcher started on
 * several hosts, for rank 0's horarun --join -H: srun's step names them
 * itself (horarun reads it); here the others.
 *
 *   HORA_JOIN_HOSTS   "HOST:N,..." in rank order, from whoever gathered
 *                     them (hora's Python module does under torchrun, through
 *                     torch's store)
 *   torchrun          torch's store at MASTER_ADDR:MASTER_PORT, through the
 *                     Python that runs torchrun (a program of any language:
 *                     torchrun is torch's, so its Python has torch): each
 *                     node's first rank writes its host there, rank 0 reads
 *                     them all, as hora's Python module does in-process
 *   Open MPI, MPICH   MPI itself: each rank's node, gathered with
 *                     MPI_Allgather (Open MPI's libmpi.so.40 under its
 *                     mpirun, MPICH's libmpi.so.12 or libmpich.so.12
 *                     under hydra's mpiexec, loaded at run time; hora
 *                     initialises MPI when the program has not, and
 *                     finalises it at exit)
 *
 * Through MPI every rank learns the whole table and checks that each node
 * holds consecutive ranks, as horad's do; through torch's store only rank
 * 0 needs it (torchrun numbers each node's ranks consecutively). */
#define HC_LOG_SUB HC_SUB_CLIENT
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client.h"
#include "join.h"

/* One rank's node: `id` tells nodes apart (Open MPI's daemon of the node,
 * else the host name); `name` is how horarun reaches it (the host name,
 * or the daemon's address where two nodes share a name). */
#define JH_FIELD 120
struct jh_rec {
  char id[JH_FIELD], name[JH_FIELD], addr[JH_FIELD];
};

/* A field of rank r's record: 0 its node's id, 1 its name, 2 its address */
static const char *field(const struct jh_rec *v, long r, int which) {
  return which == 0 ? v[r].id : which == 1 ? v[r].name : v[r].addr;
}

/* "name:n,..." of the nodes in rank order, a node's address instead of
 * its name where two nodes share the name; -1 with why when a node's
 * ranks are not consecutive. */
static int hosts_of(const struct jh_rec *v, long size, char *out, size_t len,
                    char *why, size_t whylen) {
  size_t n = 0;
  out[0] = '\0';
  for (long r = 0; r < size;) {
    long end = r + 1;
    while (end < size && !strcmp(field(v, end, 0), field(v, r, 0))) end++;
    for (long k = 0; k < r; k++)
      if (!strcmp(field(v, k, 0), field(v, r, 0))) {
        snprintf(why, whylen, "ranks %ld and %ld run on the same node, but "
                 "not next to each other (hora's ranks on one node are "
                 "consecutive: mpirun --map-by slot, its default)", k, r);
        return -1;
      }
    /* the name, unless another node has it too: then the address */
    const char *name = field(v, r, 1);
    for (long k = 0; k < size; k++)
      if (strcmp(field(v, k, 0), field(v, r, 0)) &&
          !strcmp(field(v, k, 1), name) && *field(v, r, 2)) {
        name = field(v, r, 2);
        break;
      }
    int w = snprintf(out + n, len - n, "%s%s:%ld", n ? "," : "", name,
                     end - r);
    if (w < 0 || (size_t)w >= len - n) {
      snprintf(why, whylen, "the list of the ranks' hosts is too long");
      return -1;
    }
    n += (size_t)w;
    r = end;
  }
  return 0;
}

/* ---- MPI: Open MPI's or MPICH's ------------------------------------------ */

/* The two ABIs differ in their handles: Open MPI's are the addresses of
 * objects in its library, MPICH's (and Intel MPI's, built on it) are ints
 * with fixed values. */
#define MPICH_COMM_WORLD 0x44000000
#define MPICH_BYTE 0x4c00010d
struct mpi_api {
  int mpich;
  int (*initialized)(int *);
  int (*finalized)(int *);
  int (*init)(int *, char ***);
  int (*finalize)(void);
  void *allgather, *comm_size; /* typed by the ABI: see below */
  void *comm_world, *byte;     /* Open MPI's */
};
static struct mpi_api mpi;
typedef int (*ompi_allgather_fn)(const void *, int, void *, void *, int,
                                 void *, void *);
typedef int (*ompi_size_fn)(void *, int *);
typedef int (*mpich_allgather_fn)(const void *, int, int, void *, int, int,
                                  int);
typedef int (*mpich_size_fn)(int, int *);

static void finalize_mpi(void) {
  int done = 1;
  if (mpi.finalized && mpi.finalized(&done) == 0 && !done) mpi.finalize();
}

/* Open MPI's library for its mpirun's ranks, MPICH's for hydra's. */
static int load_mpi(int mpich, char *why, size_t whylen) {
  if (mpi.allgather) return 0;
  static const char *const ompi_libs[] = {"libmpi.so.40", "libmpi.so", NULL};
  /* libmpi.so.12: MPICH as built upstream, and Intel MPI; Debian's MPICH
   * is libmpich.so.12 */
  static const char *const mpich_libs[] = {"libmpi.so.12", "libmpich.so.12",
                                           NULL};
  const char *const *libs = mpich ? mpich_libs : ompi_libs;
  void *so = NULL;
  for (int i = 0; !so && libs[i]; i++)
    so = dlopen(libs[i], RTLD_NOW | RTLD_GLOBAL);
  if (!so) {
    snprintf(why, whylen, "cannot load %s's library %s to learn the ranks' "
             "hosts: %s", mpich ? "MPICH" : "Open MPI", libs[0], dlerror());
    return -1;
  }
  struct mpi_api m = {.mpich = mpich};
  *(void **)&m.initialized = dlsym(so, "MPI_Initialized");
  *(void **)&m.finalized = dlsym(so, "MPI_Finalized");
  *(void **)&m.init = dlsym(so, "MPI_Init");
  *(void **)&m.finalize = dlsym(so, "MPI_Finalize");
  m.allgather = dlsym(so, "MPI_Allgather");
  m.comm_size = dlsym(so, "MPI_Comm_size");
  if (!mpich) {
    m.comm_world = dlsym(so, "ompi_mpi_comm_world");
    m.byte = dlsym(so, "ompi_mpi_byte");
  }
  if (!m.initialized || !m.finalized || !m.init || !m.finalize ||
      !m.allgather || !m.comm_size || (!mpich && (!m.comm_world || !m.byte))) {
    snprintf(why, whylen, "the MPI library found is not %s", mpich ?
             "MPICH's (no MPI_Allgather)" :
             "Open MPI's (no ompi_mpi_comm_world)");
    return -1;
  }
  mpi = m;
  return 0;
}

static int mpi_world_size(int *n) {
  return mpi.mpich ? ((mpich_size_fn)mpi.comm_size)(MPICH_COMM_WORLD, n)
                   : ((ompi_size_fn)mpi.comm_size)(mpi.comm_world, n);
}

static int mpi_allgather_bytes(const void *mine, void *all, int n) {
  return mpi.mpich ? ((mpich_allgather_fn)mpi.allgather)(
                         mine, n, MPICH_BYTE, all, n, MPICH_BYTE,
                         MPICH_COMM_WORLD)
                   : ((ompi_allgather_fn)mpi.allgather)(
                         mine, n, mpi.byte, all, n, mpi.byte, mpi.comm_world);
}

/* This rank's node as its launcher knows it. */
static void my_node(const struct hl_foreign *f, struct jh_rec *me) {
  char host[JH_FIELD] = ""; /* host names: 64 bytes at most */
  if (gethostname(host, sizeof host - 1) < 0) strcpy(host, "localhost");
  if (f->kind == HL_PMI) {
    /* hydra: the name its mpiexec reached the node by, and the node's
     * proxy (one per node, all under one job's key) */
    const char *name = getenv("MPIR_CVAR_CH3_INTERFACE_HOSTNAME");
    snprintf(me->name, sizeof me->name, "%.*s", JH_FIELD - 1,
             name && *name ? name : host);
    snprintf(me->id, sizeof me->id, "%.*s", JH_FIELD - 1, me->name);
    return;
  }
  const char *name = getenv("PMIX_HOSTNAME");
  snprintf(me->name, sizeof me->name, "%.*s", JH_FIELD - 1,
           name && *name ? name : host);
  /* "jobid.vpid;tcp://ADDR:PORT;...": the node's daemon */
  const char *uri = getenv("OMPI_MCA_orte_local_daemon_uri");
  /* (its start, "jobid.vpid", tells the nodes' daemons apart) */
  snprintf(me->id, sizeof me->id, "%.*s", JH_FIELD - 1,
           uri && *uri ? uri : me->name);
  const char *t = uri ? strstr(uri, "tcp://") : NULL;
  if (t) {
    t += 6;
    size_t k = strcspn(t, ":;");
    snprintf(me->addr, sizeof me->addr, "%.*s", (int)k, t);
  }
}

static int hosts_by_mpi(const struct hl_foreign *f, char *out, size_t len,
                        char *why, size_t whylen) {
  if (load_mpi(f->kind == HL_PMI, why, whylen) < 0) return -1;
  int on = 0;
  if (mpi.initialized(&on) != 0) on = 0;
  if (!on) {
    if (mpi.init(NULL, NULL) != 0) {
      snprintf(why, whylen, "MPI_Init failed");
      return -1;
    }
    atexit(finalize_mpi); /* mpirun and mpiexec want every rank to */
  }
  int world = 0;
  if (mpi_world_size(&world) != 0 || world != f->size) {
    snprintf(why, whylen, "MPI's world has %d ranks, not the %ld that "
             "%s says", world, f->size, f->kind == HL_PMI ? "PMI_SIZE" :
             "OMPI_COMM_WORLD_SIZE");
    return -1;
  }
  struct jh_rec me;
  memset(&me, 0, sizeof me);
  my_node(f, &me);
  struct jh_rec *all = calloc((size_t)f->size, sizeof *all);
  if (!all) {
    snprintf(why, whylen, "out of memory");
    return -1;
  }
  int rc = mpi_allgather_bytes(&me, all, (int)sizeof me);
  if (rc != 0) {
    free(all);
    snprintf(why, whylen, "MPI_Allgather of the ranks' hosts failed (%d)",
             rc);
    return -1;
  }
  rc = hosts_of(all, f->size, out, len, why, whylen);
  free(all);
  return rc;
}

/* ---- torchrun ------------------------------------------------------------ */

extern char **environ;

/* What the Python runs: the same keys and values as hora's Python module
 * (python/hora/__init__.py), so both kinds of rank meet in one store. */
static const char torch_hosts_py[] =
    "import datetime, os, socket, sys\n"
    "from torch.distributed import TCPStore\n"
    "e = os.environ\n"
    "rank, size = int(e['RANK']), int(e['WORLD_SIZE'])\n"
    "local, lsize = int(e['LOCAL_RANK']), int(e['LOCAL_WORLD_SIZE'])\n"
    "port = int(e['MASTER_PORT'])\n"
    "wait = int(e.get('HORA_START_TIMEOUT') or\n"
    "           e.get('HOROVOD_START_TIMEOUT') or 30) + 5\n"
    "store = TCPStore(e['MASTER_ADDR'], port, None, False,\n"
    "                 datetime.timedelta(seconds=wait))\n"
    "prefix = 'hora/%s/%s/host/' % (e.get('TORCHELASTIC_RUN_ID', ''),\n"
    "                              e.get('TORCHELASTIC_RESTART_COUNT', '0'))\n"
    "if local == 0:\n"
    "    addr = ''\n"
    "    try:\n"
    "        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:\n"
    "            u.connect((e['MASTER_ADDR'], port))\n"
    "            addr = u.getsockname()[0]\n"
    "    except OSError:\n"
    "        pass\n"
    "    store.set(prefix + str(rank // lsize),\n"
    "              '%s %s' % (socket.gethostname(), addr))\n"
    "if rank == 0:\n"
    "    keys = [prefix + str(g) for g in range(size // lsize)]\n"
    "    store.wait(keys)\n"
    "    nodes = [store.get(k).decode().split(' ') for k in keys]\n"
    "    names = [n[0] for n in nodes]\n"
    "    print(','.join('%s:%d' % (n[1] if names.count(n[0]) > 1 and n[1]\n"
    "                              else n[0], lsize) for n in nodes))\n";

/* The Python that runs torchrun (this rank's parent, its agent), else
 * python3 from PATH. */
static void torchrun_python(char *out, size_t len) {
  char link[64];
  snprintf(link, sizeof link, "/proc/%d/exe", (int)getppid());
  ssize_t n = readlink(link, out, len - 1);
  if (n > 0) {
    out[n] = '\0';
    const char *base = strrchr(out, '/');
    if (!strncmp(base ? base + 1 : out, "python", 6)) return;
  }
  snprintf(out, len, "python3");
}

/* Rank 0: the hosts, in out; the first rank of another node: its host
 * written to the store, out empty (only rank 0 starts horarun). */
static int hosts_by_torch(const struct hl_foreign *f, char *out, size_t len,
                          char *why, size_t whylen) {
  out[0] = '\0';
  if (!getenv("MASTER_ADDR") || !getenv("MASTER_PORT")) {
    snprintf(why, whylen, "nothing names them (HORA_JOIN_HOSTS, or "
             "torchrun's store: MASTER_ADDR and MASTER_PORT are not set)");
    return -1;
  }
  /* once per job: hora_init() again finds the job started */
  static char asked[sizeof f->key];
  if ((f->rank != 0 && f->local_rank != 0) || !strcmp(asked, f->key))
    return 0;
  char py[4096];
  torchrun_python(py, sizeof py);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) < 0) {
    snprintf(why, whylen, "pipe: %s", strerror(errno));
    return -1;
  }
  char *argv[] = {py, "-c", (char *)torch_hosts_py, NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  pid_t pid;
  int rc = strchr(py, '/') ? posix_spawn(&pid, py, &fa, NULL, argv, environ)
                           : posix_spawnp(&pid, py, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    snprintf(why, whylen, "cannot start %.200s to ask torch's store: %s", py,
             strerror(rc));
    return -1;
  }
  size_t got = 0;
  for (ssize_t n; got + 1 < len &&
                  ((n = read(fds[0], out + got, len - 1 - got)) > 0 ||
                   (n < 0 && errno == EINTR));)
    if (n > 0) got += (size_t)n;
  out[got] = '\0';
  close(fds[0]);
  int st;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
  out[strcspn(out, "\n")] = '\0';
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || (f->rank == 0 && !out[0])) {
    snprintf(why, whylen, "asking torch's store at %.100s:%.20s through %.200s "
             "failed (%s %d; its message is above)", getenv("MASTER_ADDR"),
             getenv("MASTER_PORT"), py,
             WIFEXITED(st) ? "exit status" : "signal",
             WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    out[0] = '\0';
    return -1;
  }
  snprintf(asked, sizeof asked, "%s", f->key);
  return 0;
}

int hl_join_hosts(const struct hl_foreign *f, char *out, size_t len) {
  char why[600];
  const char *given = getenv("HORA_JOIN_HOSTS");
  if (given && *given) {
    snprintf(out, len, "%s", given);
    return 0;
  }
  if (f->kind == HL_OMPI || f->kind == HL_PMI) {
    if (hosts_by_mpi(f, out, len, why, sizeof why) == 0) return 0;
  } else if (f->kind == HL_TORCHRUN) {
    if (hosts_by_torch(f, out, len, why, sizeof why) == 0) return 0;
  } else {
    snprintf(why, sizeof why, "nothing names them (HORA_JOIN_HOSTS)");
  }
  return hl_error(HORA_EINVAL, "rank %ld of %ld started by %s on several "
                  "hosts: hora cannot learn the ranks' hosts: %s", f->rank,
                  f->size, f->who, why);
}
