/* ctl_launcher.c -- a minimal launcher for tests of horad itself: starts
 * `horad --control-fd 3` on a socketpair, as horarun does on its own
 * machine, sends it a one-rank JOB whose environment is this process's
 * plus the NAME=value arguments (so a job can carry what horarun would
 * refuse) less the variables named -NAME (so horad's own environment can
 * hold what the job's does not), and prints what horad answers, one line
 * per frame:
 *   READY | OUTPUT <rank> <stream> <text> | EXIT <rank> <how> <code> |
 *   DONE | FAULT <text> | FRAME <type>
 * then "horad exit <status>". Built by tests/cli/horad_job.sh with cc.
 *
 *   ctl_launcher HORAD [NAME=value | -NAME]... -- PROGRAM [ARGS...] */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "msg.h"

extern char **environ;

static void print_frame(const struct hp_frame_hdr *h, const unsigned char *p) {
  switch (h->type) {
  case HP_MSG_READY:
    printf("READY\n");
    break;
  case HP_MSG_DONE:
    printf("DONE\n");
    break;
  case HP_MSG_OUTPUT: {
    struct hp_output m;
    if (hp_dec_output(p, h->len, &m) == 0)
      printf("OUTPUT %d %u %.*s\n", m.rank, m.stream,
             (int)(m.len && m.data[m.len - 1] == '\n' ? m.len - 1 : m.len),
             (const char *)m.data);
    break;
  }
  case HP_MSG_EXIT: {
    struct hp_exit m;
    if (hp_dec_exit(p, h->len, &m) == 0)
      printf("EXIT %d %u %d\n", m.rank, m.how, m.code);
    free(m.msg);
    break;
  }
  case HP_MSG_FAULT: {
    char *t = hp_dec_text(p, h->len);
    printf("FAULT %s\n", t ? t : "?");
    free(t);
    break;
  }
  default:
    printf("FRAME %u\n", h->type);
  }
  fflush(stdout);
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: ctl_launcher HORAD [NAME=value | -NAME]... -- "
                    "PROG...\n");
    return 2;
  }
  int sep = 2;
  while (sep < argc && strcmp(argv[sep], "--")) sep++;
  if (sep + 1 >= argc) return 2;
  size_t nenv = 0;
  while (environ[nenv]) nenv++;
  char **envp = calloc(nenv + (size_t)argc, sizeof *envp);
  if (!envp) return 1;
  size_t envc = 0;
  for (int i = 2; i < sep; i++) /* first: they win */
    if (argv[i][0] != '-') envp[envc++] = argv[i];
  for (size_t i = 0; i < nenv; i++) {
    int drop = 0;
    for (int a = 2; a < sep && !drop; a++) {
      size_t len = strlen(argv[a] + 1);
      drop = argv[a][0] == '-' && !strncmp(environ[i], argv[a] + 1, len) &&
             environ[i][len] == '=';
    }
    if (!drop) envp[envc++] = environ[i];
  }

  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) return 1;
  pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    dup2(sv[1], 3);
    execl(argv[1], argv[1], "--control-fd", "3", (char *)NULL);
    _exit(127);
  }
  close(sv[1]);

  char cwd[4096];
  if (!getcwd(cwd, sizeof cwd)) return 1;
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  struct hp_job_rank rank = {0, 0, 0, 1};
  struct hp_job_host hj = {.name = host, .addr = "", .first_rank = 0,
                           .nranks = 1};
  struct hp_job m = {.size = 1,
                     .local_size = 1,
                     .nlocal = 1,
                     .ranks = &rank,
                     .host_index = 0,
                     .nhosts = 1,
                     .hosts = &hj,
                     .hostname = host,
                     .cwd = cwd,
                     .argc = (uint32_t)(argc - sep - 1),
                     .argv = argv + sep + 1,
                     .envc = (uint32_t)envc,
                     .envp = envp};
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_job(&w, &m);
  for (size_t off = 0; off < w.len;) {
    ssize_t n = write(sv[0], w.data + off, w.len - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break; /* horad gone: what it said is still read below */
    off += (size_t)n;
  }
  hp_wbuf_free(&w);

  struct hp_decoder dec;
  hp_decoder_init(&dec);
  char buf[65536];
  for (;;) {
    ssize_t n = read(sv[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (hp_decoder_feed(&dec, buf, (size_t)n) < 0) break;
    for (;;) {
      struct hp_frame_hdr h;
      const unsigned char *p;
      char why[160];
      int rc = hp_decoder_next(&dec, &h, &p, why, sizeof why);
      if (rc == 0) break;
      if (rc < 0) {
        printf("BAD %s\n", why);
        goto out;
      }
      print_frame(&h, p);
    }
  }
out:
  hp_decoder_free(&dec);
  close(sv[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  printf("horad exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
  free(envp);
  return 0;
}
