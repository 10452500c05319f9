/* test_hosts.c -- host lists (launcher/hosts.c): the host file parser
 * (--hostfile) with every accepted form and every error with its file:line,
 * the -H parser, merging of entries for the same machine, and Horovod's rank
 * layout (local and cross ranks) including "more processes than slots",
 * and the limits on a host file's size and lines. */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "hosts.h"
#include "msg.h"
#include "opts.h"
#include "remote.h"
#include "spawn.h"
#include "testlib.h"
#include "textfile.h"

#define CHECK_HOST(hs, i, nm, sl)                                              \
  do {                                                                         \
    CHECK_EQ_STR((hs)[i].name, nm);                                            \
    CHECK_EQ_INT((hs)[i].slots, sl);                                           \
  } while (0)

static char dir[] = "/tmp/hora-test-hosts.XXXXXX";
static char path[256];

/* Writes len bytes of `text` to dir/name; returns the path (static). */
static const char *write_file(const char *name, const char *text, size_t len) {
  hc_fmt(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(text, 1, len, f) != len || fclose(f) != 0) {
    TL_FAIL("cannot write %s", path);
    if (f) fclose(f);
  }
  return path;
}

static const char *hostfile(const char *text) {
  return write_file("hosts.txt", text, strlen(text));
}

/* Parses `text` as a host file and checks the error is exactly
 * "<path>:<the rest>", with the rest formatted from fmt. */
static void hostfile_error(const char *text, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void hostfile_error(const char *text, const char *fmt, ...) {
  char rest[512], want[1024], err[1024] = "";
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rest, sizeof rest, fmt, ap);
  va_end(ap);
  const char *p = hostfile(text);
  hc_fmt(want, sizeof want, "%s%s", p, rest);
  struct hr_host *h = (struct hr_host *)1;
  size_t n = 99;
  CHECK_EQ_INT(hr_hostfile_parse(p, &h, &n, err, sizeof err), -1);
  CHECK_EQ_STR(err, want);
  CHECK(h == NULL);
  CHECK_EQ_INT(n, 0);
}

static void hosts_error(const char *spec, const char *want) {
  struct hr_host *h;
  size_t n;
  char err[512] = "";
  CHECK_EQ_INT(hr_hosts_parse(spec, &h, &n, err, sizeof err), -1);
  CHECK_EQ_STR(err, want);
}

/* ---- host files: accepted forms ------------------------------------------ */

static void test_hostfile_forms(void) {
  const char *p = hostfile("# hosts of the job\n"
                           "\n"
                           "node1 slots=4\n"
                           "node2:2\n"
                           "node3\n"
                           "   node4\tslots=3   # trailing comment\n"
                           "\t\n"
                           "[2001:db8::1] slots=2\n"
                           "[2001:db8::2]:3\n"
                           "2001:db8::3\n"
                           "node5#comment right after the name\n"
                           "node6 slots=7#and after the slots\n"
                           "node1 slots=1\n"
                           "  # an indented comment\n"
                           "NODE2\n"
                           "node7 slots=1000000");
  struct hr_host *h;
  size_t n;
  char err[512] = "";
  CHECK_EQ_INT(hr_hostfile_parse(p, &h, &n, err, sizeof err), 0);
  CHECK_EQ_STR(err, "");
  CHECK_EQ_INT(n, 10);
  if (n != 10) return;
  CHECK_HOST(h, 0, "node1", 5); /* merged with the later node1 */
  CHECK_HOST(h, 1, "node2", 3); /* names compare without case */
  CHECK_HOST(h, 2, "node3", 1);
  CHECK_HOST(h, 3, "node4", 3);
  CHECK_HOST(h, 4, "2001:db8::1", 2);
  CHECK_HOST(h, 5, "2001:db8::2", 3);
  CHECK_HOST(h, 6, "2001:db8::3", 1);
  CHECK_HOST(h, 7, "node5", 1);
  CHECK_HOST(h, 8, "node6", 7);
  CHECK_HOST(h, 9, "node7", 1000000);
  for (size_t i = 0; i < n; i++) {
    CHECK_EQ_INT(h[i].local, 0);
    CHECK(h[i].user == NULL && h[i].address == NULL && h[i].iface == NULL);
    CHECK_EQ_INT(h[i].ssh_port, 0);
  }
  CHECK_EQ_INT(hr_hosts_slots(h, n),
               5 + 3 + 1 + 3 + 2 + 3 + 1 + 1 + 7 + 1000000);
  hr_hosts_free(h, n);
}

static void test_hostfile_crlf(void) {
  const char *p = hostfile("# windows\r\na slots=2\r\n\r\nb\r\nc:3 # x\r\n");
  struct hr_host *h;
  size_t n;
  char err[512] = "";
  CHECK_EQ_INT(hr_hostfile_parse(p, &h, &n, err, sizeof err), 0);
  CHECK_EQ_STR(err, "");
  CHECK_EQ_INT(n, 3);
  if (n == 3) {
    CHECK_HOST(h, 0, "a", 2);
    CHECK_HOST(h, 1, "b", 1);
    CHECK_HOST(h, 2, "c", 3);
  }
  hr_hosts_free(h, n);
}

static void test_hostfile_local_merge(void) {
  char me[256] = "localhost", text[600];
  gethostname(me, sizeof me - 1);
  hc_fmt(text, sizeof text,
         "localhost slots=2\n127.0.0.1 slots=1\n%s:3\n[::1]\nother\n", me);
  const char *p = hostfile(text);
  struct hr_host *h;
  size_t n;
  char err[512] = "";
  CHECK_EQ_INT(hr_hostfile_parse(p, &h, &n, err, sizeof err), 0);
  CHECK_EQ_INT(n, 2);
  if (n == 2) {
    CHECK_HOST(h, 0, "localhost", 7); /* every name of this machine */
    CHECK_EQ_INT(h[0].local, 1);
    CHECK_HOST(h, 1, "other", 1);
    CHECK_EQ_INT(h[1].local, 0);
  }
  hr_hosts_free(h, n);
}

/* ---- host files: errors, each with its file:line ---------------------------
 */

static void test_hostfile_errors(void) {
  hostfile_error("a slots=x\n",
                 ":1: bad slots value 'x': expected a whole number from 1 "
                 "to 1000000");
  hostfile_error("# c\n\na slots=2\nb slots=0\n",
                 ":4: bad slots value '0': expected a whole number from 1 "
                 "to 1000000");
  hostfile_error("a slots=\n", ":1: bad slots value '': expected a whole "
                               "number from 1 to 1000000");
  hostfile_error("a slots=1000001\n",
                 ":1: bad slots value '1000001': expected a whole number "
                 "from 1 to 1000000");
  hostfile_error("a slots=-1\n", ":1: bad slots value '-1': expected a "
                                 "whole number from 1 to 1000000");
  hostfile_error("a slots=2x # c\n", ":1: bad slots value '2x': expected a "
                                     "whole number from 1 to 1000000");
  hostfile_error("ok\r\n\r\na max_slots=4\r\n",
                 ":3: unexpected 'max_slots=4' after host 'a' (expected "
                 "slots=N)");
  hostfile_error("a SLOTS=2\n",
                 ":1: unexpected 'SLOTS=2' after host 'a' (expected "
                 "slots=N)");
  hostfile_error("a slots=2 extra\n",
                 ":1: unexpected 'extra' after host 'a' (expected slots=N)");
  hostfile_error("a slots = 2\n",
                 ":1: unexpected 'slots' after host 'a' (expected slots=N)");
  hostfile_error("a:2 slots=3\n", ":1: slots given twice for host 'a'");
  hostfile_error("b\na slots=2 slots=3\n",
                 ":2: slots given twice for host 'a'");
  hostfile_error("a/b slots=1\n",
                 ":1: bad host 'a/b': expected HOST or HOST:SLOTS, e.g. "
                 "node1:4 (IPv6 as [::1]:4)");
  hostfile_error("x\ny\na:x\n", ":3: bad host 'a:x': slots must be a whole "
                                "number from 1 to 1000000");
  hostfile_error("a:0\n", ":1: bad host 'a:0': slots must be a whole number "
                          "from 1 to 1000000");
  hostfile_error("-oProxyCommand slots=1\n",
                 ":1: bad host '-oProxyCommand': expected HOST or "
                 "HOST:SLOTS, e.g. node1:4 (IPv6 as [::1]:4)");
  hostfile_error("[::1 slots=2\n",
                 ":1: bad host '[::1': expected HOST or HOST:SLOTS, e.g. "
                 "node1:4 (IPv6 as [::1]:4)");
  hostfile_error("[::1]x\n", ":1: bad host '[::1]x': expected HOST or "
                             "HOST:SLOTS, e.g. node1:4 (IPv6 as [::1]:4)");
  hostfile_error(":2\n", ":1: bad host ':2': expected HOST or HOST:SLOTS, "
                         "e.g. node1:4 (IPv6 as [::1]:4)");
  hostfile_error("", ": no hosts in the file (expected lines like 'node1 "
                     "slots=4')");
  hostfile_error("# only\n\n   # comments\n\t\r\n",
                 ": no hosts in the file (expected lines like 'node1 "
                 "slots=4')");

  /* A NUL byte: not silently cut. */
  char err[512] = "", want[600];
  struct hr_host *h;
  size_t n;
  const char *p = write_file("nul.txt", "a\nb\0c slots=2\n", 14);
  hc_fmt(want, sizeof want, "%s:2: NUL byte in the line (not a text file?)", p);
  CHECK_EQ_INT(hr_hostfile_parse(p, &h, &n, err, sizeof err), -1);
  CHECK_EQ_STR(err, want);
}

static void test_hostfile_unreadable(void) {
  char err[512] = "", want[600], missing[300];
  struct hr_host *h;
  size_t n;
  hc_fmt(missing, sizeof missing, "%s/no-such-file", dir);
  hc_fmt(want, sizeof want,
         "cannot read host file '%s': No such file or directory", missing);
  CHECK_EQ_INT(hr_hostfile_parse(missing, &h, &n, err, sizeof err), -1);
  CHECK_EQ_STR(err, want);
  hc_fmt(want, sizeof want, "cannot read host file '%s': Is a directory", dir);
  CHECK_EQ_INT(hr_hostfile_parse(dir, &h, &n, err, sizeof err), -1);
  CHECK_EQ_STR(err, want);
}

/* Huge or binary files fail at once, naming the file (and the line). */
static void test_hostfile_limits(void) {
  char err[512] = "", want[600];
  struct hr_host *h = NULL;
  size_t n = 0;
  CHECK_EQ_INT(hr_hostfile_parse("/dev/zero", &h, &n, err, sizeof err), -1);
  CHECK_EQ_STR(err, "/dev/zero:1: NUL byte in the line (not a text file?)");
  CHECK(h == NULL);

  /* past HR_HOSTFILE_MAX: a sparse file, refused by its size */
  const char *p = write_file("big.txt", "a\n", 2);
  CHECK_EQ_INT(truncate(p, (off_t)HR_HOSTFILE_MAX + 1), 0);
  hc_fmt(want, sizeof want,
         "%s: larger than 16 MiB (the most a host file may hold)", p);
  CHECK_EQ_INT(hr_hostfile_parse(p, &h, &n, err, sizeof err), -1);
  CHECK_EQ_STR(err, want);
  /* the same bytes as a stream (no size to look at) */
  char cmd[400];
  hc_fmt(cmd, sizeof cmd, "%s/fifo", dir);
  unlink(cmd);
  CHECK_EQ_INT(mkfifo(cmd, 0600), 0);
  pid_t pid = fork();
  if (pid == 0) { /* a writer of 17 MiB of valid lines */
    FILE *f = fopen(cmd, "w");
    for (long i = 0; f && i < (17L << 20) / 8; i++)
      if (fputs("a:1 #xx\n", f) < 0) break;
    _exit(0);
  }
  hc_fmt(want, sizeof want,
         "%s: larger than 16 MiB (the most a host file may hold)", cmd);
  CHECK_EQ_INT(hr_hostfile_parse(cmd, &h, &n, err, sizeof err), -1);
  CHECK_EQ_STR(err, want);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  unlink(cmd);

  /* a line past HR_FILE_LINE_MAX, and one just at it */
  size_t len = HR_FILE_LINE_MAX + 20;
  char *text = malloc(len + 1);
  CHECK(text != NULL);
  if (!text) return;
  memcpy(text, "a slots=2\n#", 11);
  memset(text + 11, 'x', len - 11);
  text[11 + HR_FILE_LINE_MAX - 1] = '\n';
  memcpy(text + 11 + HR_FILE_LINE_MAX, "b:3\n", 4);
  p = write_file("long.txt", text, 11 + HR_FILE_LINE_MAX + 4);
  CHECK_EQ_INT(hr_hostfile_parse(p, &h, &n, err, sizeof err), 0);
  CHECK_EQ_INT(n, 2);
  hr_hosts_free(h, n);
  memset(text + 11, 'x', len - 11);
  text[len - 1] = '\n';
  p = write_file("long.txt", text, len);
  hc_fmt(want, sizeof want,
         "%s:2: line longer than 65536 bytes (the most a host file allows)", p);
  CHECK_EQ_INT(hr_hostfile_parse(p, &h, &n, err, sizeof err), -1);
  CHECK_EQ_STR(err, want);
  free(text);
}

/* ---- -H
 * ----------------------------------------------------------------------- */

static void test_hosts_list(void) {
  struct hr_host *h;
  size_t n;
  char err[512] = "";
  CHECK_EQ_INT(hr_hosts_parse("a:2,b,[2001:db8::1]:3,2001:db8::2,A:1", &h, &n,
                              err, sizeof err),
               0);
  CHECK_EQ_INT(n, 4);
  if (n == 4) {
    CHECK_HOST(h, 0, "a", 3);
    CHECK_HOST(h, 1, "b", 1);
    CHECK_HOST(h, 2, "2001:db8::1", 3);
    CHECK_HOST(h, 3, "2001:db8::2", 1);
  }
  hr_hosts_free(h, n);
  CHECK_EQ_INT(hr_hosts_parse("localhost:1,127.0.0.1:2,::1,[::1]:4", &h, &n,
                              err, sizeof err),
               0);
  CHECK_EQ_INT(n, 1);
  if (n == 1) {
    CHECK_HOST(h, 0, "localhost", 8);
    CHECK_EQ_INT(h[0].local, 1);
  }
  hr_hosts_free(h, n);

  const char *form = "expected HOST or HOST:SLOTS, e.g. node1:4 (IPv6 as "
                     "[::1]:4)";
  char want[256];
  hosts_error("", "empty host list");
  hosts_error("a:1,,b", "empty entry in host list 'a:1,,b'");
  hosts_error("a,", "empty entry in host list 'a,'");
  hosts_error("a:", "bad host 'a:': slots must be a whole number from 1 to "
                    "1000000");
  hosts_error("a:0", "bad host 'a:0': slots must be a whole number from 1 to "
                     "1000000");
  hosts_error("a:1x", "bad host 'a:1x': slots must be a whole number from 1 "
                      "to 1000000");
  hc_fmt(want, sizeof want, "bad host ':2': %s", form);
  hosts_error(":2", want);
  hc_fmt(want, sizeof want, "bad host 'a/b:1': %s", form);
  hosts_error("a/b:1", want);
  hc_fmt(want, sizeof want, "bad host '-v:1': %s", form);
  hosts_error("-v:1", want); /* ssh would take it for an option */
  hc_fmt(want, sizeof want, "bad host '[::1]2': %s", form);
  hosts_error("[::1]2", want);
}

/* Scoped IPv6 addresses ("fe80::1%eth0") in -H, host files, the name
 * check and the ssh command line: the zone is kept as written. */
static void test_scoped_ipv6(void) {
  struct hr_host *h;
  size_t n;
  char err[512] = "";
  CHECK(hr_host_name_ok("fe80::1%eth0"));
  CHECK(hr_host_name_ok("fe80::1%2"));
  CHECK(hr_host_name_ok("fe80::1%br-lan.10_x"));
  CHECK(!hr_host_name_ok("fe80::1%"));
  CHECK(!hr_host_name_ok("fe80::1%-oProxyCommand"));
  CHECK(!hr_host_name_ok("fe80::1%a;b"));
  CHECK(!hr_host_name_ok("fe80::1%a b"));
  CHECK(!hr_host_name_ok("fe80::1%waytoolonginterface0"));
  CHECK(!hr_host_name_ok("fe80::zz%eth0"));
  CHECK(!hr_host_name_ok("%eth0"));
  CHECK(!hr_host_name_ok("node1%eth0"));

  CHECK_EQ_INT(hr_hosts_parse("[fe80::1%eth0]:2,fe80::2%eth1,[fe80::3%7]", &h,
                              &n, err, sizeof err),
               0);
  CHECK_EQ_INT(n, 3);
  if (n == 3) {
    CHECK_HOST(h, 0, "fe80::1%eth0", 2);
    CHECK_HOST(h, 1, "fe80::2%eth1", 1);
    CHECK_HOST(h, 2, "fe80::3%7", 1);
    CHECK_EQ_INT(h[0].local, 0);
  }
  /* the ssh command line carries the zone */
  struct hr_opts o;
  CHECK_EQ_INT(hr_opts_init(&o), 0);
  char **argv = n ? hr_ssh_argv(&o, &h[0], "horad") : NULL;
  int seen = 0;
  for (char **a = argv; a && *a; a++)
    seen |= !strcmp(*a, "fe80::1%eth0");
  CHECK(seen);
  hr_strv_free(argv);
  hr_opts_free(&o);
  hr_hosts_free(h, n);
  hosts_error("fe80::1%eth0:2",
              "bad host 'fe80::1%eth0:2': expected HOST or HOST:SLOTS, e.g. "
              "node1:4 (IPv6 as [::1]:4)");
  hosts_error("[fe80::1%]:2", "bad host '[fe80::1%]:2': expected HOST or "
                              "HOST:SLOTS, e.g. node1:4 (IPv6 as [::1]:4)");

  const char *p = hostfile("[fe80::1%eth0] slots=2\nfe80::2%eth0 slots=3\n"
                           "[fe80::3%eth0]:4 # c\n");
  CHECK_EQ_INT(hr_hostfile_parse(p, &h, &n, err, sizeof err), 0);
  CHECK_EQ_INT(n, 3);
  if (n == 3) {
    CHECK_HOST(h, 0, "fe80::1%eth0", 2);
    CHECK_HOST(h, 1, "fe80::2%eth0", 3);
    CHECK_HOST(h, 2, "fe80::3%eth0", 4);
  }
  hr_hosts_free(h, n);

  /* A link-local address of this machine is local on its own interface
   * (by name or index), not with another zone. */
  struct ifaddrs *ifs;
  if (getifaddrs(&ifs) < 0) return;
  for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)i->ifa_addr;
    if (!s6 || s6->sin6_family != AF_INET6 ||
        !IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr))
      continue;
    char a[INET6_ADDRSTRLEN], name[128];
    inet_ntop(AF_INET6, &s6->sin6_addr, a, sizeof a);
    hc_fmt(name, sizeof name, "%s%%%s", a, i->ifa_name);
    CHECK(hr_host_is_local(name));
    hc_fmt(name, sizeof name, "%s%%%u", a, if_nametoindex(i->ifa_name));
    CHECK(hr_host_is_local(name));
    hc_fmt(name, sizeof name, "%s%%nosuch0", a);
    CHECK(!hr_host_is_local(name));
    printf("link-local %s%%%s is local\n", a, i->ifa_name);
    break;
  }
  freeifaddrs(ifs);
}

static void test_name_ok(void) {
  CHECK(hr_host_name_ok("node-1.example.com"));
  CHECK(hr_host_name_ok("10.0.0.5"));
  CHECK(hr_host_name_ok("fe80::1"));
  CHECK(hr_host_name_ok("under_score"));
  CHECK(!hr_host_name_ok(""));
  CHECK(!hr_host_name_ok("-oProxyCommand=x"));
  CHECK(!hr_host_name_ok("-v"));
  CHECK(!hr_host_name_ok("a b"));
  CHECK(!hr_host_name_ok("a;b"));
  CHECK(!hr_host_name_ok("user@host"));
  CHECK(!hr_host_name_ok("fe80::zz"));
}

/* ---- merging with per-host settings, copies
 * ------------------------------------ */

static struct hr_host host(const char *name, int slots, const char *user,
                           int port, const char *addr, const char *iface) {
  return (struct hr_host){.name = strdup(name),
                          .slots = slots,
                          .user = user ? strdup(user) : NULL,
                          .ssh_port = port,
                          .address = addr ? strdup(addr) : NULL,
                          .iface = iface ? strdup(iface) : NULL};
}

static void test_add_merge(void) {
  struct hr_host *l = NULL, h;
  size_t n = 0, cap = 0;
  char err[512] = "";
  h = host("a", 2, "alice", 0, NULL, NULL);
  CHECK_EQ_INT(hr_hosts_add(&l, &n, &cap, &h, err, sizeof err), 0);
  CHECK(h.name == NULL); /* taken */
  h = host("b", 1, NULL, 2222, "10.1.1.2", "eth1");
  CHECK_EQ_INT(hr_hosts_add(&l, &n, &cap, &h, err, sizeof err), 0);
  /* Same host again: slots add up, missing settings are filled in. */
  h = host("A", 3, NULL, 2200, NULL, "ib0");
  CHECK_EQ_INT(hr_hosts_add(&l, &n, &cap, &h, err, sizeof err), 0);
  CHECK_EQ_INT(n, 2);
  CHECK_HOST(l, 0, "a", 5);
  CHECK_EQ_STR(l[0].user, "alice");
  CHECK_EQ_INT(l[0].ssh_port, 2200);
  CHECK_EQ_STR(l[0].iface, "ib0");
  CHECK(l[0].address == NULL);
  /* Conflicting settings are an error. */
  h = host("a", 1, "bob", 0, NULL, NULL);
  CHECK_EQ_INT(hr_hosts_add(&l, &n, &cap, &h, err, sizeof err), -1);
  CHECK_EQ_STR(err, "host 'a' is given twice, with a different user");
  CHECK(h.name == NULL && h.user == NULL); /* freed */
  h = host("b", 1, NULL, 22, NULL, NULL);
  CHECK_EQ_INT(hr_hosts_add(&l, &n, &cap, &h, err, sizeof err), -1);
  CHECK_EQ_STR(err, "host 'b' is given twice, with a different ssh_port");
  h = host("b", 1, NULL, 0, "10.1.1.3", NULL);
  CHECK_EQ_INT(hr_hosts_add(&l, &n, &cap, &h, err, sizeof err), -1);
  CHECK_EQ_STR(err, "host 'b' is given twice, with a different address");
  h = host("b", 1, NULL, 0, NULL, "eth2");
  CHECK_EQ_INT(hr_hosts_add(&l, &n, &cap, &h, err, sizeof err), -1);
  CHECK_EQ_STR(err,
               "host 'b' is given twice, with a different network_interface");
  h = host("localhost", 1, NULL, 0, NULL, "lo");
  CHECK_EQ_INT(hr_hosts_add(&l, &n, &cap, &h, err, sizeof err), 0);
  h = host("127.0.0.1", 1, NULL, 0, NULL, "eth0");
  CHECK_EQ_INT(hr_hosts_add(&l, &n, &cap, &h, err, sizeof err), -1);
  CHECK_EQ_STR(err, "host '127.0.0.1' is this machine, like 'localhost', but "
                    "has a different network_interface");
  /* An address of this machine makes the host local. */
  h = host("alias-of-me", 2, NULL, 0, "127.0.0.1", NULL);
  CHECK_EQ_INT(hr_hosts_add(&l, &n, &cap, &h, err, sizeof err), 0);
  CHECK_EQ_INT(n, 3);
  CHECK_HOST(l, 2, "localhost", 3);
  CHECK_EQ_STR(l[2].address, "127.0.0.1");
  CHECK_EQ_INT(l[2].local, 1);
  CHECK_EQ_INT(l[1].local, 0);

  struct hr_host *c = hr_hosts_copy(l, n);
  CHECK(c != NULL);
  if (c) {
    CHECK(c[0].name != l[0].name && c[0].user != l[0].user);
    CHECK_EQ_STR(c[1].address, "10.1.1.2");
    CHECK_EQ_STR(c[1].iface, "eth1");
    CHECK_EQ_INT(c[1].ssh_port, 2222);
    CHECK_EQ_INT(c[2].slots, 3);
  }
  hr_hosts_free(c, n);
  hr_hosts_free(l, n);
}

/* ---- layout
 * ----------------------------------------------------------------------- */

/* Lays out np ranks on `spec` and checks each rank's "host local_rank
 * local_size cross_rank cross_size". */
static void check_layout(const char *spec, int np, const char *const *want) {
  struct hr_host *h;
  size_t n;
  struct hr_layout l;
  char err[512] = "", got[64];
  CHECK_EQ_INT(hr_hosts_parse(spec, &h, &n, err, sizeof err), 0);
  CHECK_EQ_INT(hr_layout_make(&l, h, n, np, err, sizeof err), 0);
  CHECK_EQ_INT(l.np, np);
  for (int r = 0; r < l.np; r++) {
    const struct hr_rank *k = &l.ranks[r];
    CHECK_EQ_INT(k->rank, r);
    hc_fmt(got, sizeof got, "%s %d %d %d %d", l.hosts[k->host].name,
           k->local_rank, k->local_size, k->cross_rank, k->cross_size);
    CHECK_EQ_STR(got, want[r]);
  }
  hr_layout_free(&l);
}

static void test_layout(void) {
  static const char *const even[] = {"a 0 2 0 3", "a 1 2 0 3", "b 0 2 1 3",
                                     "b 1 2 1 3", "c 0 2 2 3", "c 1 2 2 3"};
  check_layout("a:2,b:2,c:2", 6, even);
  static const char *const uneven[] = {"a 0 3 0 3", "a 1 3 0 2", "a 2 3 0 1",
                                       "b 0 1 1 3", "c 0 2 2 3", "c 1 2 1 2"};
  check_layout("a:3,b:1,c:2", 6, uneven);
  static const char *const short5[] = {"a 0 3 0 3", "a 1 3 0 1", "a 2 3 0 1",
                                       "b 0 1 1 3", "c 0 1 2 3"};
  check_layout("a:3,b:1,c:2", 5, short5);
  static const char *const fits[] = {"a 0 2 0 1", "a 1 2 0 1"};
  check_layout("a:2,b:2", 2, fits); /* b gets no rank */

  struct hr_host *h;
  size_t n;
  struct hr_layout l;
  char err[512] = "";
  CHECK_EQ_INT(hr_hosts_parse("a:2,b:2,c:2", &h, &n, err, sizeof err), 0);
  CHECK_EQ_INT(hr_layout_make(&l, h, n, 7, err, sizeof err), -1);
  CHECK_EQ_STR(err, "requested 7 processes but the hosts give only 6 slots");
  CHECK_EQ_INT(hr_hosts_parse("a", &h, &n, err, sizeof err), 0);
  CHECK_EQ_INT(hr_layout_make(&l, h, n, 2, err, sizeof err), -1);
  CHECK_EQ_STR(err, "requested 2 processes but the hosts give only 1 slot");
  const char *p = hostfile("a slots=2\nb slots=3\n");
  CHECK_EQ_INT(hr_hostfile_parse(p, &h, &n, err, sizeof err), 0);
  CHECK_EQ_INT(hr_layout_make(&l, h, n, 6, err, sizeof err), -1);
  CHECK_EQ_STR(err, "requested 6 processes but the hosts give only 5 slots");
}

/* A JOB for host 0 of `nhosts` hosts, `nlocal` ranks on it and one on each
 * of the others, through the encoder and horad's decoder: returns what
 * hp_dec_job() returns. */
static int job_roundtrip(uint32_t nlocal, uint32_t nhosts) {
  int32_t size = (int32_t)(nlocal + nhosts - 1);
  struct hp_job_rank *ranks = calloc(nlocal, sizeof *ranks);
  struct hp_job_host *hosts = calloc(nhosts, sizeof *hosts);
  char *argv[] = {"true", NULL}, *envp[] = {NULL};
  if (!ranks || !hosts) {
    free(ranks);
    free(hosts);
    return -1000;
  }
  for (uint32_t i = 0; i < nlocal; i++) /* local rank 0 is on every host */
    ranks[i] = (struct hp_job_rank){(int32_t)i, (int32_t)i, 0,
                                    i == 0 ? (int32_t)nhosts : 1};
  for (uint32_t i = 0; i < nhosts; i++)
    hosts[i] =
        (struct hp_job_host){.name = "h",
                             .addr = "10.0.0.1",
                             .port = 1,
                             .first_rank = i ? (int32_t)(nlocal + i - 1) : 0,
                             .nranks = i ? 1 : (int32_t)nlocal};
  struct hp_job m = {.size = size,
                     .local_size = (int32_t)nlocal,
                     .nlocal = nlocal,
                     .ranks = ranks,
                     .host_index = 0,
                     .nhosts = nhosts,
                     .hosts = hosts,
                     .hostname = "h",
                     .cwd = "/",
                     .argc = 1,
                     .argv = argv,
                     .envc = 0,
                     .envp = envp};
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_job(&w, &m);
  free(ranks);
  free(hosts);
  int rc = -2000;
  struct hp_job d;
  if (!w.err && w.len > HP_FRAME_HDR) {
    rc = hp_dec_job(w.data + HP_FRAME_HDR, w.len - HP_FRAME_HDR, &d);
    hp_job_free(&d);
  }
  hp_wbuf_free(&w);
  return rc;
}

/* horarun's limits are exactly those of horad's JOB decoder, and the layout
 * refuses a job past them with the numbers. */
static void test_job_limits(void) {
  CHECK_EQ_INT(job_roundtrip(HR_HOST_RANKS_MAX, 1), 0);
  CHECK(job_roundtrip(HR_HOST_RANKS_MAX + 1, 1) < 0);
  CHECK_EQ_INT(job_roundtrip(1, HR_HOSTS_MAX), 0);
  CHECK(job_roundtrip(1, HR_HOSTS_MAX + 1) < 0);

  struct hr_host *h;
  size_t n;
  struct hr_layout l;
  char err[512] = "";
  CHECK_EQ_INT(hr_hosts_parse("localhost:100000", &h, &n, err, sizeof err), 0);
  CHECK_EQ_INT(hr_layout_make(&l, h, n, 100000, err, sizeof err), -1);
  CHECK_EQ_STR(err, "100000 processes would put 100000 ranks on host "
                    "'localhost'; horad runs at most 65536 ranks on one host "
                    "(spread them over more hosts)");
  CHECK_EQ_INT(hr_hosts_parse("a:65536,b:65536", &h, &n, err, sizeof err), 0);
  CHECK_EQ_INT(hr_layout_make(&l, h, n, 100000, err, sizeof err), 0);
  CHECK_EQ_INT(l.hosts[0].nranks, 65536);
  CHECK_EQ_INT(l.hosts[1].nranks, 100000 - 65536);
  hr_layout_free(&l);
  /* more hosts with ranks than a JOB can list */
  n = HR_HOSTS_MAX + 1;
  h = calloc(n, sizeof *h);
  CHECK(h != NULL);
  if (!h) return;
  for (size_t i = 0; i < n; i++) {
    char name[32];
    hc_fmt(name, sizeof name, "h%zu", i);
    h[i] = (struct hr_host){.name = strdup(name), .slots = 1};
  }
  CHECK_EQ_INT(hr_layout_make(&l, h, n, HR_HOSTS_MAX + 1, err, sizeof err), -1);
  CHECK_EQ_STR(err, "65537 processes would need more than 65536 hosts; horad "
                    "takes at most 65536 hosts in one job");
}

/* --launcher service: the client's command line follows service_auth */
static void test_service_argv(void) {
  struct hr_opts o;
  struct hr_host h = {.name = "node7"};
  char err[256];
  CHECK_EQ_INT(hr_opts_init(&o), 0);
  char **a = hr_service_argv(&o, &h, "/x/horad");
  const char *want_key[] = {"/x/horad", "--service-client", "node7:17970",
                            "--key-file", "/etc/hora/cluster.key", "--",
                            "--rendezvous", NULL};
  for (int i = 0; want_key[i] || (a && a[i]); i++)
    CHECK_EQ_STR(a ? a[i] : NULL, want_key[i]);
  hr_strv_free(a);
  size_t ia = (size_t)(hc_param_find("service_auth") - hc_params);
  size_t is = (size_t)(hc_param_find("munge_socket") - hc_params);
  size_t ip = (size_t)(hc_param_find("service_port") - hc_params);
  CHECK_EQ_INT(hr_opts_set_knob(&o, ia, "munge", 0, err, sizeof err), 0);
  CHECK_EQ_INT(hr_opts_set_knob(&o, is, "/m/sock", 0, err, sizeof err), 0);
  CHECK_EQ_INT(hr_opts_set_knob(&o, ip, "4000", 0, err, sizeof err), 0);
  CHECK_EQ_INT(hr_opts_set_knob(&o, ia, "kerberos", 0, err, sizeof err), -1);
  CHECK(strstr(err, "expected key or munge") != NULL);
  a = hr_service_argv(&o, &h, "/x/horad");
  const char *want_munge[] = {"/x/horad", "--service-client", "node7:4000",
                              "--auth", "munge", "--munge-socket", "/m/sock",
                              "--", "--rendezvous", NULL};
  for (int i = 0; want_munge[i] || (a && a[i]); i++)
    CHECK_EQ_STR(a ? a[i] : NULL, want_munge[i]);
  hr_strv_free(a);
  hr_opts_free(&o);
}

int main(void) {
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  RUN(test_hostfile_forms);
  RUN(test_hostfile_crlf);
  RUN(test_hostfile_local_merge);
  RUN(test_hostfile_errors);
  RUN(test_hostfile_unreadable);
  RUN(test_hostfile_limits);
  RUN(test_hosts_list);
  RUN(test_name_ok);
  RUN(test_scoped_ipv6);
  RUN(test_add_merge);
  RUN(test_layout);
  RUN(test_job_limits);
  RUN(test_service_argv);
  const char *files[] = {"hosts.txt", "nul.txt", "big.txt", "long.txt"};
  for (size_t i = 0; i < HC_ARRAY_SIZE(files); i++) {
    hc_fmt(path, sizeof path, "%s/%s", dir, files[i]);
    unlink(path);
  }
  rmdir(dir);
  TL_EXIT();
}
