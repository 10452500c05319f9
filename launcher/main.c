/* main.c -- horarun: runs a program as a hora job of -np ranks.
 *
 *   horarun -np 4 python train.py
 *
 * Parses the command line (cli.c), lays the ranks out over the hosts
 * (hosts.c), builds the environment (spawn.c) and runs the job (job.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli.h"
#include "common.h"
#include "hosts.h"
#include "job.h"
#include "output.h"
#include "spawn.h"

/* Builds the layout from -np and -H. Returns 0, or the exit status after
 * printing the error. */
static int make_layout(struct hr_opts *o, struct hr_layout *l) {
  char spec[64], err[1024];
  const char *hosts = o->hosts;
  if (!hosts) {
    if (o->np == 0)
      return hr_usage_error("-np is required: the number of processes to "
                            "run");
    hc_fmt(spec, sizeof spec, "localhost:%d", o->np);
    hosts = spec;
  }
  struct hr_host *h;
  size_t nh;
  if (hr_hosts_parse(hosts, &h, &nh, err, sizeof err) < 0)
    return hr_usage_error("-H: %s", err);
  for (size_t i = 0; i < nh; i++) {
    if (h[i].local) continue;
    fprintf(stderr,
            "horarun: error: remote hosts are not supported yet: "
            "%s\n",
            h[i].name);
    hr_hosts_free(h, nh);
    return HR_EXIT_USAGE;
  }
  if (o->np == 0) {
    long slots = hr_hosts_slots(h, nh);
    o->np = slots > HR_NP_MAX ? HR_NP_MAX : (int)slots;
  }
  if (hr_layout_make(l, h, nh, o->np, err, sizeof err) < 0)
    return hr_usage_error("%s", err);
  return 0;
}

/* Puts /dev/null on any of fds 0-2 that is closed, so that no socket or
 * file of ours lands there (libuv refuses to close fds 0-2, and output
 * meant for a closed stdout must not go into horad's socket). */
static void open_std_fds(void) {
  for (int fd = 0; fd <= 2; fd++) {
    if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
    int n = open("/dev/null", O_RDWR);
    if (n >= 0 && n != fd) close(n);
  }
}

int main(int argc, char **argv) {
  open_std_fds();
  struct hr_opts o;
  int rc = hr_cli_parse(argc, argv, &o);
  if (rc != HR_CLI_RUN) {
    hr_opts_free(&o);
    return rc;
  }
  hc_log_init("horarun", HC_WARNING);
  struct hr_layout l;
  rc = make_layout(&o, &l);
  if (rc != 0) {
    hr_opts_free(&o);
    return rc;
  }
  size_t envc;
  char **envp = hr_job_env(&o, &envc);
  char *horad = hr_horad_path();
  if (!envp || !horad) {
    hr_say(NULL, "error: out of memory");
    rc = HR_EXIT_LAUNCHER;
  } else {
    rc = hr_job_run(&o, &l, envp, horad);
  }
  free(horad);
  hr_strv_free(envp);
  hr_layout_free(&l);
  hr_opts_free(&o);
  return rc;
}
