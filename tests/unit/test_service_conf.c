/* test_service_conf.c -- the service's settings file (service_conf.c):
 * every setting read, the command line winning over the file, and each
 * kind of bad file refused with its file and line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "service.h"
#include "testlib.h"

static char dir[] = "/tmp/hora-svcconf-XXXXXX";
static char path[256];

static void write_file(const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

/* Loads text as the file under cli; returns load's result, why in why. */
static int load_text(const char *text, struct hd_service_cfg *cli,
                     struct hd_service_cfg *out, char *why, size_t n) {
  write_file(text);
  cli->config = path;
  cli->config_given = 1;
  return hd_service_cfg_load(cli, out, why, n);
}

static void test_every_setting(void) {
  struct hd_service_cfg cli = {.config = NULL}, c;
  hd_service_cfg_defaults(&cli);
  char why[512] = "";
  CHECK_EQ_INT(load_text("# comment\nport: 4000\nlisten: 169.254.1.1\n"
                         "auth: munge\nkey_file: /k\nmunge_socket: /m.sock\n"
                         "allow_root: yes\nstop: drain\ndrain_timeout: 90\n"
                         "socket: /s/h.sock\n",
                         &cli, &c, why, sizeof why),
               0);
  CHECK_EQ_STR(c.socket, "/s/h.sock");
  CHECK(c.set & HD_SVC_SOCKET);
  CHECK_EQ_INT(c.port, 4000);
  CHECK_EQ_STR(c.listen_addr, "169.254.1.1");
  CHECK_EQ_INT(c.munge, 1);
  CHECK_EQ_STR(c.key_file, "/k");
  CHECK_EQ_STR(c.munge_socket, "/m.sock");
  CHECK_EQ_INT(c.allow_root, 1);
  CHECK_EQ_INT(c.drain, 1);
  CHECK_EQ_INT(c.drain_timeout, 90);
  CHECK_EQ_INT(c.file_found, 1);
  /* the command line wins where it says something, the file elsewhere */
  CHECK_EQ_INT(hd_service_cfg_set(&cli, HD_SVC_PORT, "5000", why, sizeof why),
               0);
  cli.cli |= HD_SVC_PORT;
  CHECK_EQ_INT(hd_service_cfg_set(&cli, HD_SVC_STOP, "end", why, sizeof why),
               0);
  cli.cli |= HD_SVC_STOP;
  CHECK_EQ_INT(hd_service_cfg_load(&cli, &c, why, sizeof why), 0);
  CHECK_EQ_INT(c.port, 5000);
  CHECK_EQ_INT(c.drain, 0);
  CHECK_EQ_INT(c.drain_timeout, 90);
  CHECK_EQ_STR(c.key_file, "/k");
  /* an empty file, and no file where none was asked for: the defaults */
  hd_service_cfg_defaults(&cli);
  CHECK_EQ_INT(load_text("", &cli, &c, why, sizeof why), 0);
  CHECK_EQ_INT(c.port, HD_SERVICE_PORT);
  CHECK_EQ_STR(c.key_file, HD_SERVICE_KEY);
  CHECK_EQ_STR(c.socket, HD_SERVICE_SOCKET);
  CHECK(!(c.set & HD_SVC_SOCKET)); /* (the default: may be missing) */
  CHECK_EQ_INT(c.munge, 0);
  /* none: no local socket; the command line's wins over the file's */
  CHECK_EQ_INT(load_text("socket: none\n", &cli, &c, why, sizeof why), 0);
  CHECK_EQ_STR(c.socket, "");
  CHECK_EQ_INT(hd_service_cfg_set(&cli, HD_SVC_SOCKET, "/c.sock", why,
                                  sizeof why),
               0);
  cli.cli |= HD_SVC_SOCKET;
  CHECK_EQ_INT(hd_service_cfg_load(&cli, &c, why, sizeof why), 0);
  CHECK_EQ_STR(c.socket, "/c.sock");
  hd_service_cfg_defaults(&cli);
  cli.config = "/nonexistent/horad.yaml";
  cli.config_given = 0;
  CHECK_EQ_INT(hd_service_cfg_load(&cli, &c, why, sizeof why), 0);
  CHECK_EQ_INT(c.file_found, 0);
}

static void bad(const char *text, const char *want) {
  struct hd_service_cfg cli = {.config = NULL}, c;
  hd_service_cfg_defaults(&cli);
  char why[512] = "", full[600];
  CHECK_EQ_INT(load_text(text, &cli, &c, why, sizeof why), -1);
  hc_fmt(full, sizeof full, "%s:%s", path, want);
  if (strncmp(why, full, strlen(full)))
    TL_FAIL("for %s: '%s', not '%s...'", text, why, full);
}

static void test_bad_files(void) {
  bad("port: 1\nprot: 2\n", "2: unknown setting 'prot'");
  bad("port: 0\n", "1: bad port '0': expected a port number");
  bad("port: 12x\n", "1: bad port '12x'");
  bad("auth: kerberos\n", "1: bad auth 'kerberos': expected key or munge");
  bad("allow_root: maybe\n", "1: bad allow_root 'maybe': expected true");
  bad("stop: later\n", "1: bad stop 'later': expected end or drain");
  bad("drain_timeout: -1\n", "1: bad drain_timeout '-1'");
  bad("key_file:\n", "1: bad key_file ''");
  bad("socket: run/h.sock\n", "1: bad socket 'run/h.sock': expected none, "
                             "or an absolute path of at most 107 bytes");
  {
    char longer[200] = "socket: /";
    memset(longer + 9, 'a', 120);
    strcpy(longer + 129, "\n");
    bad(longer, "1: bad socket '/aaa");
  }
  bad("port: 1\nport: 2\n", "2: 'port' is set twice");
  bad("port:\n  a: 1\n", "2: 'port' takes a plain value, not a mapping");
  bad("listen: [a, b]\n", "1: 'listen' takes a plain value, not a list");
  bad("- port\n", "1: expected a mapping of settings (port: 17970, ...), "
                  "not a list");
  bad("just text\n", "1: expected a mapping of settings");
  bad("port: 'abc\n", "2: not YAML");
  /* a file others may write, or not a regular file, is not trusted */
  write_file("port: 1\n");
  chmod(path, 0666);
  {
    struct hd_service_cfg k = {.config = path, .config_given = 1}, o;
    char w[512];
    hd_service_cfg_defaults(&k);
    CHECK_EQ_INT(hd_service_cfg_load(&k, &o, w, sizeof w), -1);
    CHECK(strstr(w, "that no one else may write") != NULL);
    chmod(path, 0644);
    k.config = dir; /* a directory */
    CHECK_EQ_INT(hd_service_cfg_load(&k, &o, w, sizeof w), -1);
    CHECK(strstr(w, "must be a regular file") != NULL);
  }
  struct hd_service_cfg cli = {.config = "/nonexistent/h.yaml",
                               .config_given = 1},
                        c;
  char why[256];
  CHECK_EQ_INT(hd_service_cfg_load(&cli, &c, why, sizeof why), -1);
  CHECK_EQ_STR(why, "/nonexistent/h.yaml: no such file");
}

int main(void) {
  if (!mkdtemp(dir)) return 1;
  hc_fmt(path, sizeof path, "%s/horad.yaml", dir);
  RUN(test_every_setting);
  RUN(test_bad_files);
  unlink(path);
  rmdir(dir);
  TL_EXIT();
}
