/* test_slurm.c -- the hosts of a Slurm allocation (launcher/slurm.c):
 * hostlist expansion (ranges, zero padding, several brackets, lists),
 * SLURM_TASKS_PER_NODE's counts, the host list built from both, and every
 * malformed value refused with a message that quotes it. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "hosts.h"
#include "slurm.h"
#include "testlib.h"

/* Expands spec and checks the names, joined by spaces, against want. */
static void expands(const char *spec, const char *want) {
  char **v = NULL, err[512], got[4096] = "";
  size_t n = 0, at = 0;
  int rc = hr_slurm_hostlist(spec, 1000, &v, &n, err, sizeof err);
  CHECK_EQ_INT(rc, 0);
  if (rc) {
    TL_FAIL("%s: %s", spec, err);
    return;
  }
  for (size_t i = 0; i < n; i++)
    at += (size_t)snprintf(got + at, sizeof got - at, "%s%s", i ? " " : "",
                           v[i]);
  CHECK_EQ_STR(got, want);
  hr_slurm_names_free(v, n);
}

/* spec is refused with a message containing want. */
static void refused(const char *spec, size_t max, const char *want) {
  char **v = NULL, err[512] = "";
  size_t n = 0;
  CHECK(hr_slurm_hostlist(spec, max, &v, &n, err, sizeof err) < 0);
  CHECK(v == NULL && n == 0);
  if (!strstr(err, want)) TL_FAIL("%s: '%s' lacks '%s'", spec, err, want);
}

static void test_hostlist(void) {
  expands("node1", "node1");
  expands("a,b,c", "a b c");
  expands("node[1-3]", "node1 node2 node3");
  expands("node[01-04,07]", "node01 node02 node03 node04 node07");
  expands("n[8-11]", "n8 n9 n10 n11");
  expands("n[098-101]", "n098 n099 n100 n101");
  expands("rack[1-2]-n[1-3]",
          "rack1-n1 rack1-n2 rack1-n3 rack2-n1 rack2-n2 rack2-n3");
  expands("gpu[1-2].ib,cpu[5]", "gpu1.ib gpu2.ib cpu5");
  expands("a[1,3],b", "a1 a3 b");
  expands("[1-2]x", "1x 2x");
  refused("", 1000, "no host");
  refused("a,,b", 1000, "an empty name");
  refused("a,", 1000, "an empty name");
  refused("node[1-3", 1000, "a '[' without its ']'");
  refused("node1-3]", 1000, "a ']' without its '['");
  refused("node[]", 1000, "an empty '[]'");
  refused("node[3-1]", 1000, "a bad range in '[3-1]'");
  refused("node[a-b]", 1000, "a bad range");
  refused("node[1-]", 1000, "a bad range");
  refused("node[1,]", 1000, "a bad range");
  refused("node[1--2]", 1000, "a bad range");
  refused("node[1234567890]", 1000, "a bad range");
  refused("n[1-10]", 5, "more than 5 hosts");
  refused("a[1-3]-b[1-3]", 8, "more than 8 hosts");
  refused("n[1-2],m[1-4]", 5, "more than 5 hosts");
  refused("node[1-3", 1000, "'node[1-3'");
}

static void tasks(const char *spec, size_t n, const char *want) {
  int c[16];
  char err[256], got[256] = "";
  size_t at = 0;
  int rc = hr_slurm_tasks(spec, c, n, err, sizeof err);
  if (rc) {
    hc_fmt(got, sizeof got, "error: %s", err);
  } else {
    for (size_t i = 0; i < n; i++)
      at += (size_t)snprintf(got + at, sizeof got - at, "%s%d", i ? " " : "",
                             c[i]);
  }
  CHECK_EQ_STR(got, want);
}

static void test_tasks(void) {
  tasks("4", 1, "4");
  tasks("2(x3),1", 4, "2 2 2 1");
  tasks("1,2,3", 3, "1 2 3");
  tasks("8(x2)", 2, "8 8");
  tasks("2(x3)", 2, "error: '2(x3)' gives tasks to more than the 2 nodes");
  tasks("2,2", 3, "error: '2,2' gives tasks to 2 nodes, not 3");
  tasks("0", 1, "error: '0': expected counts like 2(x3),1");
  tasks("2(3)", 1, "error: '2(3)': expected counts like 2(x3),1");
  tasks("2(x0)", 1, "error: '2(x0)': expected counts like 2(x3),1");
  tasks("2(x2", 2, "error: '2(x2': expected counts like 2(x3),1");
  tasks("2,", 1, "error: '2,': expected counts like 2(x3),1");
  tasks("x", 1, "error: 'x': expected counts like 2(x3),1");
  tasks("2 ", 1, "error: '2 ': expected counts like 2(x3),1");
}

static void test_hosts(void) {
  struct hr_host *h = NULL;
  size_t n = 0;
  char err[512];
  CHECK_EQ_INT(hr_slurm_hosts("node[01-03],gpu7", "2(x3),4", &h, &n, err,
                              sizeof err), 0);
  CHECK_EQ_INT(n, 4);
  if (n == 4) {
    CHECK_EQ_STR(h[0].name, "node01");
    CHECK_EQ_INT(h[0].slots, 2);
    CHECK_EQ_STR(h[2].name, "node03");
    CHECK_EQ_STR(h[3].name, "gpu7");
    CHECK_EQ_INT(h[3].slots, 4);
  }
  hr_hosts_free(h, n);
  /* no tasks: one slot each; one number (SLURM_NTASKS_PER_NODE): each */
  CHECK_EQ_INT(hr_slurm_hosts("a,b", NULL, &h, &n, err, sizeof err), 0);
  CHECK(n == 2 && h[0].slots == 1 && h[1].slots == 1);
  hr_hosts_free(h, n);
  CHECK_EQ_INT(hr_slurm_hosts("a[1-3]", "3", &h, &n, err, sizeof err), 0);
  CHECK(n == 3 && h[0].slots == 3 && h[2].slots == 3);
  hr_hosts_free(h, n);
  /* the same node twice: one host, slots summed */
  CHECK_EQ_INT(hr_slurm_hosts("a,b,a", "1,2,3", &h, &n, err, sizeof err), 0);
  CHECK(n == 2 && h[0].slots == 4 && h[1].slots == 2);
  hr_hosts_free(h, n);
  CHECK(hr_slurm_hosts("n[1-2]", "1,1,1", &h, &n, err, sizeof err) < 0);
  CHECK(strstr(err, "SLURM_TASKS_PER_NODE '1,1,1' gives tasks to more than "
                    "the 2 nodes (SLURM_JOB_NODELIST has 2 nodes)") != NULL);
  CHECK(h == NULL && n == 0);
  CHECK(hr_slurm_hosts("n[1-", NULL, &h, &n, err, sizeof err) < 0);
  CHECK(strstr(err, "SLURM_JOB_NODELIST 'n[1-'") != NULL);
  CHECK(hr_slurm_hosts("-oProxy[1]", NULL, &h, &n, err, sizeof err) < 0);
  CHECK(strstr(err, "bad host name '-oProxy1'") != NULL);
}

int main(void) {
  RUN(test_hostlist);
  RUN(test_tasks);
  RUN(test_hosts);
  TL_EXIT();
}
