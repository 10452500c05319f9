/* join.c -- ranks that another launcher started join one hora job.
 *
 *   srun -n 4 python train.py          mpirun -np 4 python train.py
 *   torchrun --nproc_per_node 4 train.py
 *
 * Each rank reads its place (rank, size, local rank and size, nodes) from
 * the launcher's environment. Global rank 0 starts `horarun --join KEY`,
 * which starts one horad per node as for any job (this machine alone; job
 * steps on a Slurm step's nodes; elsewhere as horarun reaches hosts, on
 * the hosts join_hosts.c learns). In join mode the
 * horads start no ranks: each writes, for every rank of its node, a file
 * with the job socket's name and the rank's token into the node's join
 * directory, $TMPDIR/hora-UID/join-KEY (private to the user, 0700). The
 * ranks wait for their file, then connect as horad's own ranks do. KEY
 * names the launcher's job (Slurm's job and step ids, Open MPI's job id,
 * hydra's mpiexec's address, torchrun's run id, master and attempt), the
 * same on every rank of it. */
#define HC_LOG_SUB HC_SUB_CLIENT
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "join.h"

extern char **environ;

static long env_num(const char *name) {
  const char *v = getenv(name);
  char *end;
  if (!v || !*v) return -1;
  long x = strtol(v, &end, 10);
  return *end || x < 0 || x > (1L << 24) ? -1 : x;
}

/* Keeps [A-Za-z0-9._-] of s, the rest as '_': a file name part. */
static void key_add(char *key, size_t len, const char *s) {
  size_t n = strlen(key);
  for (; s && *s && n + 1 < len && n < HC_JOIN_KEY_MAX; s++)
    key[n++] = ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
                (*s >= '0' && *s <= '9') || *s == '.' || *s == '-')
                   ? *s
                   : '_';
  key[n] = '\0';
}

/* Slurm's SLURM_STEP_TASKS_PER_NODE ("2(x3),1"): the tasks of node `node`
 * in *count and those of the nodes before it in *before. 0 or -1. */
static int slurm_tasks(const char *spec, long node, long *count,
                       long *before) {
  long i = 0;
  *before = 0;
  while (spec && *spec) {
    char *end;
    long n = strtol(spec, &end, 10), times = 1;
    if (end == spec || n < 0) return -1;
    if (*end == '(') {
      if (end[1] != 'x') return -1;
      times = strtol(end + 2, &end, 10);
      if (times < 1 || *end != ')') return -1;
      end++;
    }
    if (node < i + times) {
      *count = n;
      *before += n * (node - i);
      return 0;
    }
    *before += n * times;
    i += times;
    spec = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return -1;
  }
  return -1;
}

/* Each launcher's variables; 1 when they are there. The key names the
 * launcher's job, the same on every rank of it. */
static int by_torchrun(struct hl_foreign *f) {
  if (!getenv("LOCAL_RANK") || (f->size = env_num("WORLD_SIZE")) < 0)
    return 0;
  f->kind = HL_TORCHRUN;
  f->who = "torchrun";
  f->rank = env_num("RANK");
  f->local_rank = env_num("LOCAL_RANK");
  f->local_size = env_num("LOCAL_WORLD_SIZE");
  long group = env_num("GROUP_RANK");
  if (f->local_size > 0 && group >= 0)
    f->cyclic = f->rank != group * f->local_size + f->local_rank;
  /* the same on every node of one run and attempt; two runs at once
   * cannot share the master's address and port */
  char run[400];
  snprintf(run, sizeof run, "%s-%s-%s-%s",
           getenv("TORCHELASTIC_RUN_ID") ? getenv("TORCHELASTIC_RUN_ID") : "",
           getenv("MASTER_ADDR") ? getenv("MASTER_ADDR") : "",
           getenv("MASTER_PORT") ? getenv("MASTER_PORT") : "",
           getenv("TORCHELASTIC_RESTART_COUNT") ?
           getenv("TORCHELASTIC_RESTART_COUNT") : "0");
  snprintf(f->key, sizeof f->key, "torchrun-");
  key_add(f->key, sizeof f->key, run);
  return 1;
}

static int by_ompi(struct hl_foreign *f) {
  if ((f->size = env_num("OMPI_COMM_WORLD_SIZE")) < 0) return 0;
  f->kind = HL_OMPI;
  f->who = "mpirun (Open MPI)";
  f->rank = env_num("OMPI_COMM_WORLD_RANK");
  f->local_rank = env_num("OMPI_COMM_WORLD_LOCAL_RANK");
  f->local_size = env_num("OMPI_COMM_WORLD_LOCAL_SIZE");
  const char *v = getenv("PMIX_NAMESPACE");
  if (!v || !*v) v = getenv("OMPI_MCA_ess_base_jobid");
  if (v && *v) {
    snprintf(f->key, sizeof f->key, "ompi-");
    key_add(f->key, sizeof f->key, v);
  }
  return 1;
}

/* srun's, also when it gave the ranks PMI's variables (--mpi=pmi2): the
 * same rank and size then */
static int by_srun(struct hl_foreign *f) {
  if (!getenv("SLURM_STEP_ID") ||
      ((f->size = env_num("SLURM_STEP_NUM_TASKS")) < 0 &&
       (f->size = env_num("SLURM_NTASKS")) < 0))
    return 0;
  f->rank = env_num("SLURM_PROCID");
  if (getenv("PMI_RANK") && (env_num("PMI_RANK") != f->rank ||
                             env_num("PMI_SIZE") != f->size))
    return 0; /* an MPI launcher of its own inside the step (hydra) */
  f->kind = HL_SRUN;
  f->who = "srun";
  f->local_rank = env_num("SLURM_LOCALID");
  long node = env_num("SLURM_NODEID"), before = 0, count = -1;
  f->nodes = env_num("SLURM_STEP_NUM_NODES");
  if (f->nodes < 0) f->nodes = env_num("SLURM_NNODES");
  const char *v = getenv("SLURM_STEP_TASKS_PER_NODE");
  if (!v || !*v) v = getenv("SLURM_TASKS_PER_NODE");
  if (node >= 0 && slurm_tasks(v, node, &count, &before) == 0) {
    f->local_size = count;
    /* horad's ranks are consecutive on each node, as srun's block
     * distribution (its default) lays them out */
    f->cyclic = f->rank != before + f->local_rank;
  }
  /* the same verdict on every rank: the distribution srun was asked for
   * (its first part is across nodes) */
  v = getenv("SLURM_DISTRIBUTION");
  if (v && *v && f->nodes > 1 && strncmp(v, "block", 5) &&
      strncmp(v, "pack", 4))
    f->cyclic = 1;
  snprintf(f->key, sizeof f->key, "slurm-");
  key_add(f->key, sizeof f->key, getenv("SLURM_JOB_ID"));
  key_add(f->key, sizeof f->key, ".");
  key_add(f->key, sizeof f->key, getenv("SLURM_STEP_ID"));
  return 1;
}

/* The value of option `opt` in the command line of this process's
 * nearest ancestor named `comm` (a few generations up: a shell between),
 * in out; 0 when found, -1 when not. */
static int ancestor_arg(const char *comm, const char *opt, char *out,
                        size_t len) {
  pid_t pid = getppid();
  for (int gen = 0; gen < 4 && pid > 1; gen++) {
    char path[64], buf[4096], name[64] = "";
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
    FILE *fp = fopen(path, "re");
    if (!fp) return -1;
    int ok = fgets(name, sizeof name, fp) != NULL;
    fclose(fp);
    name[strcspn(name, "\n")] = '\0';
    if (ok && !strcmp(name, comm)) {
      snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
      int fd = open(path, O_RDONLY | O_CLOEXEC);
      if (fd < 0) return -1;
      ssize_t n = read(fd, buf, sizeof buf - 1);
      close(fd);
      if (n <= 0) return -1;
      buf[n] = '\0';
      for (char *a = buf; a < buf + n; a += strlen(a) + 1)
        if (!strcmp(a, opt) && a + strlen(a) + 1 < buf + n) {
          snprintf(out, len, "%s", a + strlen(a) + 1);
          return 0;
        }
      return -1;
    }
    /* the parent's parent: field 4 of /proc/PID/stat, after the name */
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    fp = fopen(path, "re");
    if (!fp) return -1;
    ok = fgets(buf, sizeof buf, fp) != NULL;
    fclose(fp);
    char *e = ok ? strrchr(buf, ')') : NULL;
    int ppid;
    if (!e || sscanf(e + 1, " %*c %d", &ppid) != 1) return -1;
    pid = ppid;
  }
  return -1;
}

static int by_pmi(struct hl_foreign *f) {
  if ((f->size = env_num("PMI_SIZE")) < 0) return 0;
  f->kind = HL_PMI;
  f->who = "an MPI launcher (PMI)";
  f->rank = env_num("PMI_RANK");
  f->local_rank = env_num("MPI_LOCALRANKID"); /* MPICH's hydra */
  f->local_size = env_num("MPI_LOCALNRANKS");
  /* hydra's proxies, one per node, are told where their mpiexec listens
   * ("--control-port HOST:PORT"): the same on every node of one mpiexec,
   * and no two live ones share it; "--pgid" tells apart the processes it
   * spawned later (MPI_Comm_spawn) */
  char port[256], pgid[32] = "0";
  if (ancestor_arg("hydra_pmi_proxy", "--control-port", port,
                   sizeof port) == 0) {
    ancestor_arg("hydra_pmi_proxy", "--pgid", pgid, sizeof pgid);
    snprintf(f->key, sizeof f->key, "hydra-");
    key_add(f->key, sizeof f->key, port);
    key_add(f->key, sizeof f->key, "-");
    key_add(f->key, sizeof f->key, pgid);
  } else {
    /* some launcher's process on this node starts its ranks */
    snprintf(f->key, sizeof f->key, "pmi-%ld", (long)getppid());
  }
  return 1;
}

int hl_foreign_detect(struct hl_foreign *f) {
  /* the innermost launcher first: srun -n 2 torchrun ..., sbatch with
   * mpirun inside, srun --mpi=pmi2 */
  static int (*const by[])(struct hl_foreign *) = {by_torchrun, by_ompi,
                                                    by_srun, by_pmi};
  for (size_t i = 0; i < HC_ARRAY_SIZE(by); i++) {
    memset(f, 0, sizeof *f);
    f->rank = f->size = f->local_rank = f->local_size = -1;
    f->nodes = 1;
    /* one of a single rank is a job of one: an outer launcher may still
     * have started several (srun -N 2 torchrun --nproc_per_node 1) */
    if (!by[i](f) || f->size <= 1 || f->rank < 0) continue;
    if (f->local_size > 0 && f->local_size < f->size && f->nodes <= 1)
      f->nodes = 2; /* at least: ranks live elsewhere too */
    return 1;
  }
  memset(f, 0, sizeof *f);
  return 0;
}

/* The user's directory of join directories: $TMPDIR/hora-UID, made 0700
 * when missing; refused when someone else owns it or may write to it. */
static int base_dir(char *out, size_t len) {
  const char *tmp = getenv("TMPDIR");
  if (!tmp || tmp[0] != '/') tmp = "/tmp";
  snprintf(out, len, "%s/hora-%u", tmp, (unsigned)getuid());
  char why[4300];
  if (hc_private_dir(out, why, sizeof why) < 0)
    return hl_error(HORA_EIO, "%s: remove it, or point TMPDIR elsewhere",
                    why);
  return 0;
}

/* horarun: $HORA_HORARUN, else beside this library (PREFIX/lib ->
 * PREFIX/bin, as installed and as built), else on PATH. */
static void horarun_path(char *out, size_t len) {
  const char *env = getenv("HORA_HORARUN");
  if (env && *env) {
    snprintf(out, len, "%s", env);
    return;
  }
  Dl_info di;
  if (dladdr((void *)hl_foreign_detect, &di) && di.dli_fname &&
      strchr(di.dli_fname, '/')) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", di.dli_fname);
    *strrchr(dir, '/') = '\0';
    snprintf(out, len, "%s/../bin/horarun", dir);
    if (access(out, X_OK) == 0) return;
  }
  snprintf(out, len, "horarun");
}

/* hosts: -H's value, or empty (the Slurm step's nodes) */
static pid_t start_horarun(const struct hl_foreign *f, const char *hosts) {
  char path[4200], np[32];
  horarun_path(path, sizeof path);
  snprintf(np, sizeof np, "%ld", f->size);
  char key[sizeof f->key];
  snprintf(key, sizeof key, "%s", f->key);
  char *argv[12];
  int n = 0;
  argv[n++] = path;
  argv[n++] = "--join";
  argv[n++] = key;
  argv[n++] = "-np";
  argv[n++] = np;
  if (*hosts) {
    argv[n++] = "-H";
    argv[n++] = (char *)hosts;
  }
  argv[n++] = "--";
  argv[n++] = (char *)f->who;
  argv[n] = NULL;
  posix_spawnattr_t at;
  posix_spawn_file_actions_t fa;
  posix_spawnattr_init(&at);
  posix_spawn_file_actions_init(&fa);
  /* its own session: the terminal's ^C is the ranks', and the job ends
   * when they do */
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 34)
  /* none of the rank's files (its launcher's PMI socket, ...) */
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
#endif
  pid_t pid = -1;
  int rc = strchr(path, '/')
               ? posix_spawn(&pid, path, &fa, &at, argv, environ)
               : posix_spawnp(&pid, path, &fa, &at, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (rc != 0) {
    hl_error(HORA_EIO, "rank 0 of %ld started by %s cannot start %s to join "
             "the ranks into one job: %s (HORA_HORARUN names it)", f->size,
             f->who, path, strerror(rc));
    return -1;
  }
  return pid;
}

/* Reads DIR/rank.R: "socket\ntoken\n". 1 when read, 0 when not there. */
static int read_rank_file(const char *file, char *sock, size_t socklen,
                          char *token, size_t toklen) {
  FILE *fp = fopen(file, "re");
  if (!fp) return 0;
  char a[512], b[512];
  int ok = fgets(a, sizeof a, fp) && fgets(b, sizeof b, fp);
  fclose(fp);
  if (!ok) return 0;
  a[strcspn(a, "\n")] = b[strcspn(b, "\n")] = '\0';
  if (!a[0] || !b[0] || strlen(a) >= socklen || strlen(b) >= toklen) return 0;
  snprintf(sock, socklen, "%s", a);
  snprintf(token, toklen, "%s", b);
  return 1;
}

/* Whether a horad of this user listens at the socket: a file left by an
 * earlier job of the same key names one that is gone, or a name someone
 * else bound since (abstract names are anyone's to take). */
static int socket_answers(const char *path) {
  int s = hl_unix_connect(path);
  if (s < 0) return 0;
  struct ucred cred;
  socklen_t cl = sizeof cred;
  int ours = getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0 &&
             cred.uid == getuid();
  close(s);
  return ours;
}

/* 0, or -1 with the reason hora cannot join f's ranks in buf. */
static int join_reason(const struct hl_foreign *f, char *buf, size_t len) {
  const char *why = NULL;
  if (!f->key[0])
    why = "its variables do not name its job (Open MPI: PMIX_NAMESPACE)";
  else if (f->local_rank < 0 || f->local_size <= 0)
    why = "its variables do not say how many of the ranks run on this "
          "node";
  else if (f->cyclic)
    why = "it did not give each node consecutive ranks (hora's ranks on "
          "one node are consecutive: srun -m block, or torchrun's default)";
  else if (f->nodes > 1 && f->kind == HL_PMI && !strncmp(f->key, "pmi-", 4))
    why = "its ranks run on several hosts, and only MPICH's mpiexec "
          "(hydra) among PMI launchers names its job the same on every "
          "host (srun's step, Open MPI, MPICH and torchrun's ranks can "
          "join across hosts)";
  if (!why) return 0;
  snprintf(buf, len, "this process is rank %ld of %ld started by %s, not by "
           "horarun, and hora cannot join them into one job: %s. Start the "
           "job with horarun -np %ld ... instead (HORA_STANDALONE=1 runs "
           "each rank alone as a job of 1 on purpose)", f->rank, f->size,
           f->who, why, f->size);
  return -1;
}

int hl_join(const struct hl_foreign *f, char *sock, size_t socklen,
            char *token, size_t toklen) {
  char why[700], base[4200], file[4400];
  if (join_reason(f, why, sizeof why) < 0)
    return hl_error(HORA_EINVAL, "%s", why);
  int rc = base_dir(base, sizeof base);
  if (rc < 0) return rc;
  snprintf(file, sizeof file, "%s/join-%s/rank.%ld", base, f->key, f->rank);
  /* -H for rank 0's horarun: this machine; across hosts the step's nodes
   * (srun: horarun reads them), else the ones the ranks name (collective) */
  char hosts[8192] = "";
  if (f->nodes <= 1)
    snprintf(hosts, sizeof hosts, "localhost:%ld", f->size);
  else if (f->kind != HL_SRUN &&
           (rc = hl_join_hosts(f, hosts, sizeof hosts)) < 0)
    return rc;
  /* once per job: hora_init() after hora_shutdown() finds the same horad,
   * which waits for the ranks' processes to end */
  static char started[sizeof f->key];
  pid_t runner = -1;
  if (f->rank == 0 && strcmp(started, f->key)) {
    if ((runner = start_horarun(f, hosts)) < 0) return HORA_EIO;
    snprintf(started, sizeof started, "%s", f->key);
  }
  long timeout = hc_param_int(start_timeout);
  if (timeout <= 0) timeout = 30; /* as horad's for joined ranks */
  /* rank 0 may start later than this rank; its horarun then takes up to
   * the start timeout */
  uint64_t deadline = hc_now_ns() + (uint64_t)(timeout + 5) * 1000000000ull;
  for (unsigned spin = 0;; spin++) {
    if (read_rank_file(file, sock, socklen, token, toklen) &&
        socket_answers(sock))
      return 0;
    if (runner > 0) {
      int st;
      pid_t w = waitpid(runner, &st, WNOHANG);
      if (w == runner) {
        /* one last look: it may have ended after writing the files */
        if (read_rank_file(file, sock, socklen, token, toklen)) return 0;
        return hl_error(HORA_EIO, "rank 0: horarun, started to join the %ld "
                        "ranks of %s into one job, %s %d before the job "
                        "started (its message is above)", f->size, f->who,
                        WIFSIGNALED(st) ? "was killed by signal" :
                        "exited with code",
                        WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
      }
      if (w < 0) runner = -1; /* reaped elsewhere (SIGCHLD ignored) */
    }
    if (hc_now_ns() > deadline) {
      if (runner > 0) kill(runner, SIGTERM); /* its horads follow it */
      return hl_error(HORA_ETIMEDOUT, "rank %ld of %ld started by %s: no "
                      "horad for the job appeared in %s/join-%s within %ld s "
                      "(rank 0 starts it with horarun: see rank 0's output)",
                      f->rank, f->size, f->who, base, f->key,
                      timeout + 5);
    }
    struct timespec ts = {0, (spin < 100 ? 5 : 20) * 1000000L};
    nanosleep(&ts, NULL);
  }
}
