/* layout_test.c -- prints horarun's rank layout for a host list, so that
 * tests/cli/layout.sh can check Horovod's rule on multi-host lists
 * without reaching any host. Built by layout.sh with cc.
 *   layout_test HOSTS NP  ->  one line per rank:
 *   rank host local_rank local_size cross_rank cross_size */
#include <stdio.h>
#include <stdlib.h>

#include "hosts.h"

int main(int argc, char **argv) {
  if (argc != 3) return 64;
  struct hr_host *h;
  size_t nh;
  struct hr_layout l;
  char err[512];
  if (hr_hosts_parse(argv[1], &h, &nh, err, sizeof err) < 0 ||
      hr_layout_make(&l, h, nh, atoi(argv[2]), err, sizeof err) < 0) {
    printf("error: %s\n", err);
    return 1;
  }
  for (int r = 0; r < l.np; r++) {
    const struct hr_rank *k = &l.ranks[r];
    printf("%d %s %d %d %d %d\n", k->rank, l.hosts[k->host].name, k->local_rank,
           k->local_size, k->cross_rank, k->cross_size);
  }
  hr_layout_free(&l);
  return 0;
}
