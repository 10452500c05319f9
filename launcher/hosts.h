/* hosts.h -- host lists ("a:4,b:4") and the rank layout horarun builds from
 * them. Kept free of anything single-host so the ssh launcher can reuse it. */
#ifndef HORA_LAUNCHER_HOSTS_H
#define HORA_LAUNCHER_HOSTS_H

#include <stddef.h>

#define HR_SLOTS_MAX 1000000 /* more slots than this on one host is a typo */
/* What one JOB message can describe, as horad's decoder (hp_dec_job() in
 * proto/msg.c) takes it: at most 65536 ranks on one host and 65536 hosts
 * with ranks. test_hosts checks both against the decoder. */
#define HR_HOST_RANKS_MAX 65536
#define HR_HOSTS_MAX 65536

/* One host of the job, in the order the user gave them. */
struct hr_host {
  char *name;     /* as the user wrote it ("localhost", "node1") */
  int slots;      /* processes the host may run */
  int local;      /* 1 when the name denotes this machine */
  int nranks;     /* ranks placed on it by hr_layout_make() */
  int first_rank; /* its lowest rank; ranks are contiguous per host */
  /* Per-host settings from a --config-file (NULL / 0: the defaults). */
  char *user;    /* ssh login name */
  int ssh_port;  /* ssh port; 0: -p, else ssh's own default */
  char *address; /* what ssh connects to, instead of name */
  char *iface;   /* network interface for hora's TCP on this host */
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
 * bare "::1", a scoped one as "[fe80::1%eth0]:2" or "fe80::1%eth0", the
 * zone kept in the name). Entries naming the same host are merged (slots
 * summed), and so are all names of this machine (localhost, 127.0.0.1,
 * ::1, the host name), since one machine runs one horad. On success returns 0
 * and fills *hosts (caller frees with hr_hosts_free()); on error returns -1
 * with a one-line reason in err. */
int hr_hosts_parse(const char *spec, struct hr_host **hosts, size_t *nhosts,
                   char *err, size_t errlen);

/* Parses a host file (--hostfile): one host per line, as "HOST slots=N"
 * (mpirun's and horovodrun's form), "HOST:N" or "HOST" (1 slot); '#'
 * starts a comment (whole line or trailing); blank lines, surrounding
 * blanks and CRLF line ends are fine; IPv6 as "[::1] slots=2" or
 * "[::1]:2", scoped as "[fe80::1%eth0] slots=2". Same-host entries merge
 * as in hr_hosts_parse(). Returns 0 and fills *hosts (free with
 * hr_hosts_free()), or -1 with a reason in err that names the file and line
 * ("hosts.txt:3: bad slots value 'x': ..."), or the file and strerror when
 * it cannot be read; a file without hosts, or one past the limits of
 * textfile.h, is an error. */
int hr_hostfile_parse(const char *path, struct hr_host **hosts, size_t *nhosts,
                      char *err, size_t errlen);

/* Parses one host item of len bytes, "HOST", "HOST:SLOTS", "[v6]",
 * "[v6]:SLOTS" or a bare IPv6 address, into a malloc'd *name and *slots.
 * Returns 0, or -1 with "bad host '...': ..." in err. */
int hr_host_item_parse(const char *item, size_t len, char **name, int *slots,
                       char *err, size_t errlen);
/* The same, with *explicit_slots set to 1 when the item gave ":SLOTS". */
int hr_host_item_parse_slots(const char *item, size_t len, char **name,
                             int *slots, int *explicit_slots, char *err,
                             size_t errlen);

/* 1 when `name` is a plausible host name or address for ssh: letters,
 * digits, '.', '-', '_' (or an IPv6 address, perhaps scoped: "fe80::1%eth0"
 * with a zone of 1 to 15 letters, digits, '.', '-', '_'), not starting
 * with '-'. */
int hr_host_name_ok(const char *name);

/* Appends *h to the list (*hosts, *n entries, room for *cap), taking its
 * strings, or merges it into an entry for the same machine (slots summed;
 * per-host settings must agree, a missing one is taken from the other).
 * Sets h->local. Returns 0, or -1 with a reason in err (h's strings are
 * freed either way). */
int hr_hosts_add(struct hr_host **hosts, size_t *n, size_t *cap,
                 struct hr_host *h, char *err, size_t errlen);

/* A deep copy of a host list; NULL when out of memory (or n is 0). */
struct hr_host *hr_hosts_copy(const struct hr_host *hosts, size_t n);

/* Frees the hosts' strings (name, user, address, iface) and the array. */
void hr_hosts_free(struct hr_host *hosts, size_t nhosts);

/* 1 when `name` denotes this machine: localhost, 127.0.0.1, ::1, the name
 * gethostname() returns (with or without its domain), or an IP address of
 * one of its interfaces (a scoped IPv6 one on the interface of its zone). */
int hr_host_is_local(const char *name);

/* Sum of the hosts' slots (saturating at INT_MAX). */
long hr_hosts_slots(const struct hr_host *hosts, size_t nhosts);

/* Places np ranks on the hosts. Takes ownership of `hosts` (also on error).
 * Returns 0, or -1 with a reason in err: more processes than slots, more
 * than HR_HOST_RANKS_MAX ranks on one host, more than HR_HOSTS_MAX hosts
 * with ranks. */
int hr_layout_make(struct hr_layout *l, struct hr_host *hosts, size_t nhosts,
                   int np, char *err, size_t errlen);
void hr_layout_free(struct hr_layout *l);

#endif
