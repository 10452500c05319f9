/* main.c -- horad, the per-node daemon: command line and event loop. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon.h"
#include "metrics.h"
#include "service.h"

static void usage(FILE *f) {
  fprintf(
      f, "usage: horad --control-fd FD [--bootstrap] [--iface IF]\n"
         "                   [--metrics-port PORT]\n"
         "       horad --rendezvous [--iface IF] [--launcher ADDR]\n"
         "                   [--metrics-port PORT]\n"
         "       horad --probe [--iface IF] [--launcher ADDR]\n"
         "       horad --service [--config FILE] [--port PORT] [--listen ADDR]\n"
         "                   [--socket PATH|none] [--auth key|munge]\n"
         "                   [--key-file FILE]\n"
         "                   [--munge-socket PATH] [--allow-root]\n"
         "                   [--stop end|drain] [--drain-timeout SECONDS]\n"
         "                   [--check]\n"
         "       horad --service-client HOST:PORT [--key-file FILE]\n"
         "                   [--auth key|munge] [--munge-socket PATH] -- ARGS...\n"
         "       horad --service-client /PATH -- --control-fd 3 [--bootstrap]\n"
         "                   [--iface IF]\n"
         "\n"
         "horad is hora's per-node daemon. horarun starts it for each job:\n"
         "on its own machine with a connected socket on FD, on other hosts\n"
         "over ssh, after which horad connects back to horarun over TCP.\n"
         "It spawns the job's local ranks, forwards their output and runs\n"
         "their collective operations: over shared memory on the host,\n"
         "over TCP to the other hosts' daemons.\n"
         "\n"
         "  --control-fd FD   the launcher's connection\n"
         "  --bootstrap       read the job's host index, secret and heartbeat\n"
         "                    timeout from the first line of standard input\n"
         "                    (multi-host)\n"
         "  --rendezvous      started over ssh or srun: read the bootstrap\n"
         "                    line, then connect to horarun (the client\n"
         "                    address of $SSH_CONNECTION, else\n"
         "                    $SLURM_LAUNCH_NODE_IPADDR, or --launcher)\n"
         "  --probe           for horarun --doctor: report this host's\n"
         "                    version, interfaces, /dev/shm, memory, GPUs,\n"
         "                    and test the links to the other hosts\n"
         "  --launcher ADDR   horarun's address, instead of $SSH_CONNECTION\n"
         "                    or $SLURM_LAUNCH_NODE_IPADDR\n"
         "  --iface IF        use this network interface's address for\n"
         "                    hora's TCP\n"
         "  --metrics-port PORT  serve Prometheus metrics at\n"
         "                    http://HOST:PORT/metrics (every address)\n"
         "  --service         run as a resident service: start horad for each\n"
         "                    job a client with the cluster key asks for\n"
         "                    (horarun --launcher service)\n"
         "  --config FILE     the service's settings, a YAML mapping of the\n"
         "                    options below without their dashes (port,\n"
         "                    listen, socket, auth, key_file, munge_socket,\n"
         "                    allow_root, stop, drain_timeout); default\n"
         "                    /etc/hora/horad.yaml\n"
         "                    where it exists. Options given here win; SIGHUP\n"
         "                    reads it again\n"
         "  --port PORT       the service's TCP port (default 17970)\n"
         "  --listen ADDR     the service's address (default: every one)\n"
         "  --socket PATH|none  the service's local unix socket (default\n"
         "                    /run/hora/horad.sock): this host's clients,\n"
         "                    known by the kernel, need no key or credential\n"
         "  --auth key|munge  how clients prove who they are: key (default),\n"
         "                    the cluster key, jobs run as the service's\n"
         "                    user; munge, a MUNGE credential of the user's,\n"
         "                    the job run as that user (the service runs as\n"
         "                    root)\n"
         "  --allow-root      auth key: let the service run as root (its jobs\n"
         "                    then do); auth munge: take root's jobs\n"
         "  --key-file FILE   the cluster key: 64 hex digits, mode 0600\n"
         "                    (default /etc/hora/cluster.key)\n"
         "  --munge-socket PATH  munged's socket (default\n"
         "                    /run/munge/munge.socket.2)\n"
         "  --stop end|drain  on SIGTERM: end the running jobs (default), or\n"
         "                    take no new ones and let them finish\n"
         "  --drain-timeout SECONDS  how long a drain waits before it ends\n"
         "                    the jobs left (default 0: no limit)\n"
         "  --check           print the settings the service would run with\n"
         "                    (file and options) and whether it could start;\n"
         "                    exit 0 if so, 2 if not\n"
         "  --service-client HOST:PORT  what horarun runs instead of ssh:\n"
         "                    has the service on HOST start horad with ARGS\n"
         "                    and relays its output and exit status; with\n"
         "                    /PATH, this host's service at its unix socket,\n"
         "                    passing it horarun's connection on fd 3\n"
         "  -h, --help        this text\n"
         "  -v, --version     print the version and the engines built in\n"
         "\n"
         "See horad(8).\n");
}

/* Reads "HORA1 <host> <port> <secret-hex> <heartbeat-timeout>[ integrity]
 * [ encrypt]" from stdin (the
 * ssh channel, or a pipe from horarun): the secret never appears on a command
 * line or in the environment. Returns 0 or -1 (reported). */
static int read_bootstrap(struct hd_job *job, int *port) {
  char line[256];
  size_t n = 0;
  while (n < sizeof line - 1) {
    struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
    int pr = poll(&pfd, 1, 30000);
    if (pr <= 0) {
      fprintf(stderr, "horad: error: no bootstrap line on standard input "
                      "within 30 s\n");
      return -1;
    }
    ssize_t r = read(STDIN_FILENO, line + n, 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    if (line[n] == '\n') break;
    n++;
  }
  line[n] = '\0';
  char hex[2 * HP_SECRET_LEN + 2];
  int host, p, used = 0;
  double hb = 0;
  int sc = sscanf(line, "HORA1 %d %d %65s %lf%n", &host, &p, hex, &hb, &used);
  if (sc == 4 && !strncmp(line + used, " integrity", 10)) {
    job->wire_integrity = 1; /* DATA and XDATA tags cover their payloads */
    memmove(line + used, line + used + 10, strlen(line + used + 10) + 1);
  }
  if (sc == 4 && !strcmp(line + used, " encrypt")) {
    job->wire_encrypt = 1; /* every frame between hosts encrypted */
    line[used] = '\0';
  }
  if (sc != 4 || host < 0 || p < 0 || p > 65535 || line[used] != '\0' ||
      !(hb > 0) ||
      hb > 1e6 || hp_unhex(hex, job->secret, HP_SECRET_LEN) < 0) {
    fprintf(stderr, "horad: error: malformed bootstrap line on standard "
                    "input (horad is started by horarun)\n");
    return -1;
  }
  memset(line, 0, sizeof line);
  memset(hex, 0, sizeof hex);
  job->boot = 1;
  job->boot_host = host;
  *port = p;
  /* horarun's heartbeat timeout: both ends must use it from the start,
   * before the job (and its environment) arrives */
  char v[32], why[160];
  hc_fmt(v, sizeof v, "%g", hb);
  if (hk_set(&job->knobs, heartbeat_timeout, v, why, sizeof why) < 0) {
    fprintf(stderr, "horad: error: bad heartbeat timeout on the bootstrap "
                    "line: %s\n", why);
    return -1;
  }
  return 0;
}

/* Where horarun is: the client address of $SSH_CONNECTION ("client port
 * server port") when ssh started this horad, else $SLURM_LAUNCH_NODE_IPADDR
 * when srun did (the address of the node srun ran on). */
static int launcher_from_env(char *buf, size_t len) {
  const char *sc = getenv("SSH_CONNECTION");
  if (!sc || !*sc) sc = getenv("SLURM_LAUNCH_NODE_IPADDR");
  if (!sc) return -1;
  size_t n = strcspn(sc, " ");
  if (n == 0 || n >= len) return -1;
  memcpy(buf, sc, n);
  buf[n] = '\0';
  return 0;
}

/* SIGCHLD: every job's ranks are children of this process. */
static void on_sigchld(uv_signal_t *h, int sig) {
  struct hd_daemon *dm = h->data;
  (void)sig;
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    for (struct hd_job *job = dm->jobs; job; job = job->next)
      if (hd_spawn_reaped(job, pid, status)) break;
  }
}

static void on_sigterm(uv_signal_t *h, int sig) {
  struct hd_daemon *dm = h->data;
  (void)sig;
  uv_signal_stop(h); /* a second one: the default, at once */
  hc_warn("got SIGTERM: ending the job");
  for (struct hd_job *job = dm->jobs; job; job = job->next)
    hd_control_stop(job, "horad got SIGTERM");
}

static void close_daemon(struct hd_daemon *dm) {
  hd_metrics_close(dm);
  if (dm->sigchld.loop && !uv_is_closing((uv_handle_t *)&dm->sigchld))
    uv_close((uv_handle_t *)&dm->sigchld, NULL);
  if (dm->sigterm.loop && !uv_is_closing((uv_handle_t *)&dm->sigterm))
    uv_close((uv_handle_t *)&dm->sigterm, NULL);
}

/* horad serves the one job it was started for: it ends with it. */
static void job_ended(struct hd_daemon *dm, struct hd_job *job) {
  (void)job;
  close_daemon(dm);
}

int main(int argc, char **argv) {
  int fd = -1, boot = 0, rendezvous = 0, probe = 0, mport = 0;
  const char *iface = NULL, *launcher = NULL;
  /* the service and its client (service.c) */
  int service = 0, svc_opt = 0;
  const char *client = NULL;
  struct hd_service_cfg svc = {.config = NULL};
  hd_service_cfg_defaults(&svc);
  /* the service's settings that take a value on the command line: checked,
   * and marked as given (they win over the configuration file's) */
  static const struct {
    const char *flag;
    unsigned bit;
  } svc_flags[] = {{"--key-file", HD_SVC_KEY_FILE},
                   {"--auth", HD_SVC_AUTH},
                   {"--munge-socket", HD_SVC_MUNGE_SOCKET},
                   {"--listen", HD_SVC_LISTEN},
                   {"--port", HD_SVC_PORT},
                   {"--stop", HD_SVC_STOP},
                   {"--drain-timeout", HD_SVC_DRAIN_TIMEOUT},
                   {"--socket", HD_SVC_SOCKET}};
  for (int i = 1; i < argc; i++) {
    size_t f = 0;
    while (f < HC_ARRAY_SIZE(svc_flags) && strcmp(argv[i], svc_flags[f].flag))
      f++;
    if (f < HC_ARRAY_SIZE(svc_flags) && i + 1 < argc) {
      char w[200];
      if (hd_service_cfg_set(&svc, svc_flags[f].bit, argv[++i], w, sizeof w) <
          0) {
        fprintf(stderr, "horad: error: bad %s '%s': %s\n", svc_flags[f].flag,
                argv[i], w);
        return 2;
      }
      svc.cli |= svc_flags[f].bit;
      svc_opt = 1;
      continue;
    }
    if (!strcmp(argv[i], "--service-client") && i + 1 < argc) {
      client = argv[++i];
      continue;
    } else if (!strcmp(argv[i], "--") && client) {
      if (client[0] == '/' && svc_opt) {
        fprintf(stderr, "horad: error: --service-client %s (a unix socket) "
                        "takes no --key-file, --auth or --munge-socket: the "
                        "service learns who connects from the kernel\n",
                client);
        return 2;
      }
      return hd_service_client_main(client, &svc, argc - i - 1,
                                    argv + i + 1);
    } else if (!strcmp(argv[i], "--service")) {
      service = 1;
      continue;
    } else if (!strcmp(argv[i], "--allow-root")) {
      svc.allow_root = svc_opt = 1;
      svc.cli |= HD_SVC_ALLOW_ROOT;
      continue;
    } else if (!strcmp(argv[i], "--check")) {
      svc.check = svc_opt = 1;
      continue;
    } else if (!strcmp(argv[i], "--config") && i + 1 < argc) {
      svc.config = argv[++i];
      svc.config_given = svc_opt = 1;
      continue;
    }
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--version")) {
      printf("horad %s\nengines:", hora_version());
      for (const struct hd_engine *const *e = hd_engines; *e; e++)
        printf(" %s", (*e)->name);
      printf("\nCUDA tensors: staged through shared memory by libhora "
             "(no GPU engine in this build)\n");
      return 0;
    } else if (!strcmp(argv[i], "--control-fd") && i + 1 < argc) {
      char *end;
      long v = strtol(argv[++i], &end, 10);
      if (*end || v < 0 || v > 65535) {
        fprintf(stderr, "horad: error: bad --control-fd '%s'\n", argv[i]);
        return 2;
      }
      fd = (int)v;
    } else if (!strcmp(argv[i], "--bootstrap")) {
      boot = 1;
    } else if (!strcmp(argv[i], "--rendezvous")) {
      rendezvous = boot = 1;
    } else if (!strcmp(argv[i], "--probe")) {
      probe = 1;
    } else if (!strcmp(argv[i], "--iface") && i + 1 < argc) {
      iface = argv[++i];
    } else if (!strcmp(argv[i], "--launcher") && i + 1 < argc) {
      launcher = argv[++i];
    } else if (!strcmp(argv[i], "--metrics-port") && i + 1 < argc) {
      char *end;
      long v = strtol(argv[++i], &end, 10);
      if (*end || end == argv[i] || v < 1 || v > 65535) {
        fprintf(stderr, "horad: error: bad --metrics-port '%s': expected a "
                        "port number from 1 to 65535\n", argv[i]);
        return 2;
      }
      mport = (int)v;
    } else {
      fprintf(stderr, "horad: error: unknown argument '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  if (client) {
    fprintf(stderr, "horad: error: --service-client HOST:PORT [--key-file "
                    "FILE] [--auth key|munge] [--munge-socket PATH] -- "
                    "ARGS... (or --service-client /PATH -- ARGS...): the "
                    "arguments after -- are missing\n");
    return 2;
  }
  if (service) {
    if (fd >= 0 || boot || probe || iface || launcher || mport) {
      fprintf(stderr, "horad: error: --service goes with --config, --port, "
                      "--listen, --socket, --auth, --key-file, "
                      "--munge-socket, --allow-root, --stop, "
                      "--drain-timeout and --check only\n");
      return 2;
    }
    return hd_service_main(&svc);
  }
  if (svc_opt) {
    fprintf(stderr, "horad: error: --config, --port, --listen, --socket, "
                    "--auth, --key-file, --munge-socket, --allow-root, "
                    "--stop and --drain-timeout go with --service (and "
                    "--key-file, --auth and --munge-socket with "
                    "--service-client HOST:PORT)\n");
    return 2;
  }
  if (probe && (fd >= 0 || boot)) {
    fprintf(stderr, "horad: error: --probe goes with --iface and "
                    "--launcher only\n");
    return 2;
  }
  if (probe) {
    char addr[128];
    if (!launcher && launcher_from_env(addr, sizeof addr) == 0)
      launcher = addr;
    return hd_probe_main(iface, launcher);
  }
  if (fd < 0 && !rendezvous) {
    fprintf(stderr, "horad: error: --control-fd or --rendezvous is "
                    "required\n");
    usage(stderr);
    return 2;
  }
  /* not from the environment: the job's log level comes with the job */
  hc_log_start("horad", HC_WARNING);
  signal(SIGPIPE, SIG_IGN);
  /* libuv needs fds 0-2 taken; the ranks must not inherit the control fd. */
  for (int s = 0; s < 3; s++)
    if (fcntl(s, F_GETFD) < 0 && open("/dev/null", O_RDWR) != s) return 1;
  if (fd >= 0) fcntl(fd, F_SETFD, FD_CLOEXEC);

  struct hd_daemon dm = {.loop = uv_default_loop(), .job_ended = job_ended};
  if (iface) hc_fmt(dm.iface, sizeof dm.iface, "%s", iface);
  if (gethostname(dm.hostname, sizeof dm.hostname - 1) < 0)
    strcpy(dm.hostname, "localhost");
  uv_signal_init(dm.loop, &dm.sigchld);
  dm.sigchld.data = &dm;
  uv_signal_start(&dm.sigchld, on_sigchld, SIGCHLD);
  uv_signal_init(dm.loop, &dm.sigterm);
  dm.sigterm.data = &dm;
  uv_signal_start(&dm.sigterm, on_sigterm, SIGTERM);
  struct hd_job *job = hd_job_new(&dm);
  int port = 0, rc = 1;
  if (!job) goto out;
  if (boot && read_bootstrap(job, &port) < 0) {
    rc = 2;
    goto out;
  }
  if (boot && hd_mesh_listen(job) < 0) goto out;
  if (mport && hd_metrics_listen(&dm, mport) < 0) goto out;
  if (rendezvous) {
    char addr[128];
    if (launcher) {
      hc_fmt(addr, sizeof addr, "%s", launcher);
    } else if (launcher_from_env(addr, sizeof addr) < 0) {
      hc_error("no $SSH_CONNECTION or $SLURM_LAUNCH_NODE_IPADDR to find "
               "horarun by: give --launcher");
      rc = 2;
      goto out;
    }
    if (hd_control_connect(job, addr, port) < 0) goto out;
  } else if (hd_control_open(job, fd) < 0) {
    goto out;
  }
  uv_run(dm.loop, UV_RUN_DEFAULT);
  rc = job->done_sent ? 0 : 1;
out: /* also after a failed start: whatever was opened is closed */
  if (job) {
    hd_local_close(job);
    hd_rings_close(job);
    hd_mesh_close(job, 0);
  }
  close_daemon(&dm);
  uv_run(dm.loop, UV_RUN_NOWAIT); /* let the close callbacks run */
  hd_pool_fini();
  hc_log_flush_suppressed(1);
  hd_job_free(job);
  uv_loop_close(dm.loop);
  return rc;
}
