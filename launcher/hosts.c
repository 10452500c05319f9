/* hosts.c -- parsing of host lists and Horovod's rank layout.
 *
 * The layout rule is horovodrun's (runner/common/util/hosts.py): hosts in
 * the order given, ranks filled host by host; local_rank is the index on the
 * host, cross_rank the index of the host among the hosts that have that
 * local_rank, cross_size the number of such hosts. */
#include <arpa/inet.h>
#include <ctype.h>
#include <ifaddrs.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <netinet/in.h>
#include <unistd.h>

#include "common.h"
#include "hosts.h"

void hr_hosts_free(struct hr_host *hosts, size_t nhosts) {
  for (size_t i = 0; hosts && i < nhosts; i++)
    free(hosts[i].name);
  free(hosts);
}

/* 1 when `name` is an IP address literal of one of this machine's
 * interfaces (no name lookup: that could hang on DNS). */
static int is_local_address(const char *name) {
  struct in_addr a4;
  struct in6_addr a6;
  int v4 = inet_pton(AF_INET, name, &a4) == 1;
  if (!v4 && inet_pton(AF_INET6, name, &a6) != 1) return 0;
  if (v4 && (ntohl(a4.s_addr) >> 24) == 127) return 1; /* 127.0.0.0/8 */
  struct ifaddrs *ifs, *i;
  if (getifaddrs(&ifs) < 0) return 0;
  int found = 0;
  for (i = ifs; i && !found; i = i->ifa_next) {
    const struct sockaddr *sa = i->ifa_addr;
    if (!sa) continue;
    if (v4 && sa->sa_family == AF_INET)
      found =
          !memcmp(&((const struct sockaddr_in *)sa)->sin_addr, &a4, sizeof a4);
    else if (!v4 && sa->sa_family == AF_INET6)
      found = !memcmp(&((const struct sockaddr_in6 *)sa)->sin6_addr, &a6,
                      sizeof a6);
  }
  freeifaddrs(ifs);
  return found;
}

int hr_host_is_local(const char *name) {
  static const char *const fixed[] = {"localhost", "localhost.localdomain",
                                      "127.0.0.1", "::1", "ip6-localhost"};
  for (size_t i = 0; i < HC_ARRAY_SIZE(fixed); i++)
    if (!strcasecmp(name, fixed[i])) return 1;
  if (is_local_address(name)) return 1;
  char me[256];
  if (gethostname(me, sizeof me) != 0) return 0;
  me[sizeof me - 1] = '\0';
  if (!strcasecmp(name, me)) return 1;
  /* "node1" vs "node1.example.com", either way round. */
  size_t short_me = strcspn(me, "."), short_name = strcspn(name, ".");
  if (me[short_me] && !name[short_name] && short_me == short_name &&
      !strncasecmp(name, me, short_me))
    return 1;
  if (name[short_name] && !me[short_me] && short_me == short_name &&
      !strncasecmp(name, me, short_me))
    return 1;
  return 0;
}

static int valid_name_char(int c, int ipv6) {
  if (ipv6) return isxdigit(c) || c == ':' || c == '.';
  return isalnum(c) || c == '.' || c == '-' || c == '_';
}

/* Parses the slot count after a ':'; -1 when malformed. */
static int parse_slots(const char *s, size_t n) {
  if (n == 0 || n > 9) return -1;
  long v = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isdigit((unsigned char)s[i])) return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v >= 1 && v <= HR_SLOTS_MAX ? (int)v : -1;
}

/* Splits one list item into name and slots. Returns 0 or -1 (err set). */
static int parse_item(const char *item, size_t len, char **name, int *slots,
                      char *err, size_t errlen) {
  const char *host = item, *colon = NULL;
  size_t hlen = len;
  int ipv6 = 0;
  if (len && item[0] == '[') { /* [v6addr] or [v6addr]:slots */
    const char *close = memchr(item, ']', len);
    if (!close) goto bad;
    host = item + 1;
    hlen = (size_t)(close - host);
    ipv6 = 1;
    if (close + 1 < item + len) {
      if (close[1] != ':') goto bad;
      colon = close + 1;
    }
  } else {
    const char *c1 = memchr(item, ':', len);
    if (c1 && memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - item))) {
      ipv6 = 1; /* bare IPv6 address: no slot count possible */
    } else if (c1) {
      colon = c1;
      hlen = (size_t)(c1 - item);
    }
  }
  if (hlen == 0) goto bad;
  for (size_t i = 0; i < hlen; i++)
    if (!valid_name_char((unsigned char)host[i], ipv6)) goto bad;
  *slots = 1;
  if (colon) {
    *slots = parse_slots(colon + 1, len - (size_t)(colon + 1 - item));
    if (*slots < 0) {
      hc_fmt(err, errlen,
             "bad host '%.*s': slots must be a whole number from 1 to %d",
             (int)len, item, HR_SLOTS_MAX);
      return -1;
    }
  }
  *name = strndup(host, hlen);
  if (!*name) {
    hc_fmt(err, errlen, "out of memory");
    return -1;
  }
  return 0;
bad:
  hc_fmt(err, errlen,
         "bad host '%.*s': expected HOST or HOST:SLOTS, e.g. node1:4 "
         "(IPv6 as [::1]:4)",
         (int)len, item);
  return -1;
}

/* Adds a parsed item, merging it into an entry for the same machine. */
static void add_host(struct hr_host *hosts, size_t *n, char *name, int slots) {
  int local = hr_host_is_local(name);
  for (size_t i = 0; i < *n; i++) {
    if ((local && hosts[i].local) || !strcasecmp(hosts[i].name, name)) {
      long sum = (long)hosts[i].slots + slots;
      hosts[i].slots = sum > HR_SLOTS_MAX ? HR_SLOTS_MAX : (int)sum;
      free(name);
      return;
    }
  }
  hosts[*n] = (struct hr_host){.name = name, .slots = slots, .local = local};
  (*n)++;
}

int hr_hosts_parse(const char *spec, struct hr_host **hosts, size_t *nhosts,
                   char *err, size_t errlen) {
  *hosts = NULL;
  *nhosts = 0;
  if (!spec || !*spec) {
    hc_fmt(err, errlen, "empty host list");
    return -1;
  }
  size_t items = 1;
  for (const char *p = spec; *p; p++)
    items += *p == ',';
  struct hr_host *h = calloc(items, sizeof *h);
  if (!h) {
    hc_fmt(err, errlen, "out of memory");
    return -1;
  }
  size_t n = 0;
  for (const char *p = spec;;) {
    size_t len = strcspn(p, ",");
    char *name;
    int slots;
    if (len == 0) {
      hc_fmt(err, errlen, "empty entry in host list '%s'", spec);
      hr_hosts_free(h, n);
      return -1;
    }
    if (parse_item(p, len, &name, &slots, err, errlen) < 0) {
      hr_hosts_free(h, n);
      return -1;
    }
    add_host(h, &n, name, slots);
    if (!p[len]) break;
    p += len + 1;
  }
  *hosts = h;
  *nhosts = n;
  return 0;
}

long hr_hosts_slots(const struct hr_host *hosts, size_t nhosts) {
  long total = 0;
  for (size_t i = 0; i < nhosts; i++) {
    total += hosts[i].slots;
    if (total > INT_MAX) return INT_MAX;
  }
  return total;
}

void hr_layout_free(struct hr_layout *l) {
  hr_hosts_free(l->hosts, l->nhosts);
  free(l->ranks);
  memset(l, 0, sizeof *l);
}

/* Fills cross_rank / cross_size once every host's rank count is known. */
static void layout_cross(struct hr_layout *l) {
  for (int r = 0; r < l->np; r++) {
    struct hr_rank *k = &l->ranks[r];
    k->cross_rank = 0;
    k->cross_size = 0;
    for (size_t h = 0; h < l->nhosts; h++) {
      if (l->hosts[h].nranks <= k->local_rank) continue;
      if ((int)h < k->host) k->cross_rank++;
      k->cross_size++;
    }
  }
}

int hr_layout_make(struct hr_layout *l, struct hr_host *hosts, size_t nhosts,
                   int np, char *err, size_t errlen) {
  memset(l, 0, sizeof *l);
  l->hosts = hosts;
  l->nhosts = nhosts;
  long slots = hr_hosts_slots(hosts, nhosts);
  if (np <= 0 || np > slots) {
    hc_fmt(err, errlen,
           "requested %d processes but the hosts give only %ld slot%s", np,
           slots, slots == 1 ? "" : "s");
    hr_layout_free(l);
    return -1;
  }
  l->ranks = calloc((size_t)np, sizeof *l->ranks);
  if (!l->ranks) {
    hc_fmt(err, errlen, "out of memory");
    hr_layout_free(l);
    return -1;
  }
  l->np = np;
  int rank = 0;
  for (size_t h = 0; h < nhosts; h++) {
    hosts[h].first_rank = rank;
    hosts[h].nranks = HC_MIN(hosts[h].slots, np - rank);
    for (int i = 0; i < hosts[h].nranks; i++, rank++)
      l->ranks[rank] = (struct hr_rank){.rank = rank,
                                        .host = (int)h,
                                        .local_rank = i,
                                        .local_size = hosts[h].nranks};
  }
  layout_cross(l);
  return 0;
}
