/* main.c -- horad, the per-node daemon: command line and event loop. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: horad --control-fd FD\n"
          "\n"
          "horad is hora's per-node daemon. horarun starts it for each job\n"
          "and speaks to it over FD (a connected socket); it spawns the\n"
          "job's local ranks, forwards their output and runs their\n"
          "collective operations over shared memory.\n"
          "\n"
          "  --control-fd FD   the launcher's connection\n"
          "  -h, --help        this text\n"
          "  -v, --version     print the version\n"
          "\n"
          "See horad(8).\n");
}

/* Releases what the job held once its handles are closed. */
void hd_free_job(struct hd_daemon *d) {
  for (int i = 0; d->ranks && i < d->nlocal; i++) {
    struct hd_rank *r = &d->ranks[i];
    free(r->backlog);
    free(r->spawn_msg);
    if (r->shm) munmap(r->shm, r->shm_size);
    if (r->memfd >= 0) close(r->memfd);
  }
  free(d->ranks);
  d->ranks = NULL;
  for (size_t i = 0; i < d->table_size; i++)
    while (d->table[i]) {
      struct hd_tensor *t = d->table[i];
      d->table[i] = t->next_hash;
      free(t);
    }
  free(d->table);
  d->table = NULL;
  if (d->efd >= 0) close(d->efd);
  d->efd = -1;
  hp_job_free(&d->job);
}

int main(int argc, char **argv) {
  int fd = -1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--version")) {
      printf("horad %s\n", hora_version());
      return 0;
    } else if (!strcmp(argv[i], "--control-fd") && i + 1 < argc) {
      char *end;
      long v = strtol(argv[++i], &end, 10);
      if (*end || v < 0 || v > 65535) {
        fprintf(stderr, "horad: error: bad --control-fd '%s'\n", argv[i]);
        return 2;
      }
      fd = (int)v;
    } else {
      fprintf(stderr, "horad: error: unknown argument '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  if (fd < 0) {
    fprintf(stderr, "horad: error: --control-fd is required\n");
    usage(stderr);
    return 2;
  }
  hc_log_init("horad", HC_WARNING);
  signal(SIGPIPE, SIG_IGN);
  /* libuv needs fds 0-2 taken; the ranks must not inherit the control fd. */
  for (int s = 0; s < 3; s++)
    if (fcntl(s, F_GETFD) < 0 && open("/dev/null", O_RDWR) != s) return 1;
  fcntl(fd, F_SETFD, FD_CLOEXEC);

  struct hd_daemon *d = calloc(1, sizeof *d);
  if (!d) return 1;
  d->loop = uv_default_loop();
  d->loop->data = d;
  d->efd = -1;
  d->gone_rank = -1;
  if (gethostname(d->hostname, sizeof d->hostname - 1) < 0)
    strcpy(d->hostname, "localhost");
  if (hd_control_open(d, fd) < 0) return 1;
  uv_run(d->loop, UV_RUN_DEFAULT);
  int rc = d->done_sent ? 0 : 1;
  hd_local_close(d);
  hd_rings_close(d);
  uv_run(d->loop, UV_RUN_NOWAIT); /* let the close callbacks run */
  hd_pool_fini();
  hd_free_job(d);
  uv_loop_close(d->loop);
  free(d);
  return rc;
}
