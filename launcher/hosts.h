/* hosts.h -- host lists ("a:4,b:4") and the rank layout horarun builds from
 * them. Kept free of anything single-host so the ssh launcher can reuse it. */
#ifndef HORA_LAUNCHER_HOSTS_H
#define HORA_LAUNCHER_HOSTS_H

#include <stddef.h>

#define HR_SLOTS_MAX 1000000 /* more slots than this on one host is a typo */

/* One host of the job, in the order the user gave them. */
struct hr_host {
  char *name;     /* as the user wrote it ("localhost", "node1") */
  int slots;      /* processes the host may run */
  int local;      /* 1 when the name denotes this machine */
  int nranks;     /* ranks placed on it by hr_layout_make() */
  int first_rank; /* its lowest rank; ranks are contiguous per host */
};

/* Where one rank runs, Horovod's way: hosts in order, filled host by host. */
struct hr_rank {
  int rank;
  int host;       /* index into hr_layout.hosts */
  int local_rank; /* index on its host */
  int local_size; /* ranks on its host */
  int cross_rank; /* index of its host among hosts with this local_rank */
  int cross_size; /* number of hosts with this local_rank */
};

struct hr_layout {
  struct hr_host *hosts;
  size_t nhosts;
  struct hr_rank *ranks; /* np entries, indexed by rank */
  int np;
};

/* Parses "host[:slots],..." (a bare host has 1 slot; IPv6 as "[::1]:2" or
 * bare "::1"). Entries naming the same host are merged (slots summed), and
 * so are all names of this machine (localhost, 127.0.0.1, ::1, the host
 * name), since one machine runs one horad. On success returns 0 and fills
 * *hosts (caller frees with hr_hosts_free()); on error returns -1 with a
 * one-line reason in err. */
int hr_hosts_parse(const char *spec, struct hr_host **hosts, size_t *nhosts,
                   char *err, size_t errlen);
void hr_hosts_free(struct hr_host *hosts, size_t nhosts);

/* 1 when `name` denotes this machine: localhost, 127.0.0.1, ::1, the name
 * gethostname() returns (with or without its domain), or an IP address of
 * one of its interfaces. */
int hr_host_is_local(const char *name);

/* Sum of the hosts' slots (saturating at INT_MAX). */
long hr_hosts_slots(const struct hr_host *hosts, size_t nhosts);

/* Places np ranks on the hosts. Takes ownership of `hosts` (also on error).
 * Returns 0, or -1 with a reason in err (e.g. more processes than slots). */
int hr_layout_make(struct hr_layout *l, struct hr_host *hosts, size_t nhosts,
                   int np, char *err, size_t errlen);
void hr_layout_free(struct hr_layout *l);

#endif
