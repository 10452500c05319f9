/* hosts.c -- parsing of host lists and Horovod's rank layout.
 *
 * The layout rule is horovodrun's (runner/common/util/hosts.py): hosts in
 * the order given, ranks filled host by host; local_rank is the index on the
 * host, cross_rank the index of the host among the hosts that have that
 * local_rank, cross_size the number of such hosts.
 *
 * Host lists come from -H ("a:4,b:4"), a host file (--hostfile) or a
 * config file's `hosts` (config.c); all of them end up as one array of
 * struct hr_host, with entries for the same machine merged. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <netinet/in.h>
#include <unistd.h>

#include "common.h"
#include "hosts.h"
#include "textfile.h"

void hr_hosts_free(struct hr_host *hosts, size_t nhosts) {
  for (size_t i = 0; hosts && i < nhosts; i++) {
    free(hosts[i].name);
    free(hosts[i].user);
    free(hosts[i].address);
    free(hosts[i].iface);
  }
  free(hosts);
}

/* Splits a scoped IPv6 address "fe80::1%eth0" into the address, into buf
 * (len bytes), and its zone (NULL when none). Returns the address, or NULL
 * when it does not fit. */
static const char *split_zone(const char *name, char *buf, size_t len,
                              const char **zone) {
  const char *pct = strchr(name, '%');
  *zone = pct ? pct + 1 : NULL;
  size_t n = pct ? (size_t)(pct - name) : strlen(name);
  if (n >= len) return NULL;
  memcpy(buf, name, n);
  buf[n] = '\0';
  return buf;
}

/* 1 when interface `ifname` is the zone `zone` ("eth0" or its index). */
static int zone_is(const char *zone, const char *ifname) {
  if (!strcmp(zone, ifname)) return 1;
  if (!*zone || strspn(zone, "0123456789") != strlen(zone)) return 0;
  unsigned idx = if_nametoindex(ifname);
  return idx && (unsigned long)idx == strtoul(zone, NULL, 10);
}

/* 1 when `name` is an IP address literal of one of this machine's
 * interfaces (no name lookup: that could hang on DNS). A scoped IPv6
 * address ("fe80::1%eth0") must be on the interface of its zone. */
static int is_local_address(const char *name) {
  struct in_addr a4;
  struct in6_addr a6;
  char addr[INET6_ADDRSTRLEN];
  const char *zone;
  if (!split_zone(name, addr, sizeof addr, &zone)) return 0;
  int v4 = !zone && inet_pton(AF_INET, addr, &a4) == 1;
  if (!v4 && inet_pton(AF_INET6, addr, &a6) != 1) return 0;
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
                      sizeof a6) &&
              (!zone || zone_is(zone, i->ifa_name));
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

/* 1 when the zone of a scoped IPv6 address (after '%') is a plausible
 * interface name or index: 1 to 15 letters, digits, '.', '-', '_'. */
static int zone_ok(const char *z, size_t len) {
  if (len == 0 || len > 15 || z[0] == '-') return 0;
  for (size_t i = 0; i < len; i++)
    if (!isalnum((unsigned char)z[i]) && !strchr(".-_", z[i])) return 0;
  return 1;
}

/* 1 when host[0..len) is a name or address ssh may be given: a leading
 * '-' would be read as an option. An IPv6 address may have a zone
 * ("fe80::1%eth0"), kept as it is: ssh and getaddrinfo() read it. */
static int name_ok(const char *host, size_t len, int ipv6) {
  if (len == 0 || len > 255 || host[0] == '-') return 0;
  const char *pct = ipv6 ? memchr(host, '%', len) : NULL;
  if (pct) {
    char addr[INET6_ADDRSTRLEN];
    struct in6_addr a6;
    size_t n = (size_t)(pct - host);
    if (n == 0 || n >= sizeof addr || !zone_ok(pct + 1, len - n - 1)) return 0;
    memcpy(addr, host, n);
    addr[n] = '\0';
    return inet_pton(AF_INET6, addr, &a6) == 1;
  }
  for (size_t i = 0; i < len; i++)
    if (!valid_name_char((unsigned char)host[i], ipv6)) return 0;
  return 1;
}

int hr_host_name_ok(const char *name) {
  return name_ok(name, strlen(name), strchr(name, ':') != NULL);
}

/* Parses a slot count of n bytes; -1 when malformed or out of range. */
static int parse_slots(const char *s, size_t n) {
  if (n == 0 || n > 9) return -1;
  long v = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isdigit((unsigned char)s[i])) return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v >= 1 && v <= HR_SLOTS_MAX ? (int)v : -1;
}

/* hr_host_item_parse(), also saying whether the item gave its slots. */
static int parse_item(const char *item, size_t len, char **name, int *slots,
                      int *explicit_slots, char *err, size_t errlen) {
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
  if (!name_ok(host, hlen, ipv6)) goto bad;
  *slots = 1;
  *explicit_slots = colon != NULL;
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

int hr_host_item_parse(const char *item, size_t len, char **name, int *slots,
                       char *err, size_t errlen) {
  int explicit_slots;
  return parse_item(item, len, name, slots, &explicit_slots, err, errlen);
}

int hr_host_item_parse_slots(const char *item, size_t len, char **name,
                             int *slots, int *explicit_slots, char *err,
                             size_t errlen) {
  return parse_item(item, len, name, slots, explicit_slots, err, errlen);
}

static void host_clear(struct hr_host *h) {
  free(h->name);
  free(h->user);
  free(h->address);
  free(h->iface);
  memset(h, 0, sizeof *h);
}

/* Merges the string setting *from into *into: takes it when *into is
 * unset; they must agree otherwise. Returns 0 or -1 on a conflict. */
static int merge_str(char **into, char **from) {
  if (!*from) return 0;
  if (!*into) {
    *into = *from;
    *from = NULL;
    return 0;
  }
  return strcmp(*into, *from) ? -1 : 0;
}

/* Merges h into e, an entry for the same machine. */
static int merge_host(struct hr_host *e, struct hr_host *h, char *err,
                      size_t errlen) {
  const char *what = NULL;
  if (merge_str(&e->user, &h->user) < 0)
    what = "user";
  else if (merge_str(&e->address, &h->address) < 0)
    what = "address";
  else if (merge_str(&e->iface, &h->iface) < 0)
    what = "network_interface";
  else if (h->ssh_port && e->ssh_port && h->ssh_port != e->ssh_port)
    what = "ssh_port";
  if (what && !strcasecmp(h->name, e->name)) {
    hc_fmt(err, errlen, "host '%s' is given twice, with a different %s",
           h->name, what);
    return -1;
  }
  if (what) {
    hc_fmt(err, errlen,
           "host '%s' is this machine, like '%s', but has a different %s",
           h->name, e->name, what);
    return -1;
  }
  if (!e->ssh_port) e->ssh_port = h->ssh_port;
  long sum = (long)e->slots + h->slots;
  e->slots = sum > HR_SLOTS_MAX ? HR_SLOTS_MAX : (int)sum;
  return 0;
}

int hr_hosts_add(struct hr_host **hosts, size_t *n, size_t *cap,
                 struct hr_host *h, char *err, size_t errlen) {
  h->local =
      hr_host_is_local(h->name) || (h->address && hr_host_is_local(h->address));
  for (size_t i = 0; i < *n; i++) {
    struct hr_host *e = &(*hosts)[i];
    if ((h->local && e->local) || !strcasecmp(e->name, h->name)) {
      int rc = merge_host(e, h, err, errlen);
      host_clear(h);
      return rc;
    }
  }
  if (*n == *cap) {
    size_t ncap = *cap ? *cap * 2 : 4;
    struct hr_host *g = realloc(*hosts, ncap * sizeof *g);
    if (!g) {
      hc_fmt(err, errlen, "out of memory");
      host_clear(h);
      return -1;
    }
    *hosts = g;
    *cap = ncap;
  }
  (*hosts)[(*n)++] = *h;
  memset(h, 0, sizeof *h);
  return 0;
}

struct hr_host *hr_hosts_copy(const struct hr_host *hosts, size_t n) {
  struct hr_host *c = n ? calloc(n, sizeof *c) : NULL;
  if (!c) return NULL;
  for (size_t i = 0; i < n; i++) {
    c[i] = hosts[i];
    c[i].name = strdup(hosts[i].name);
    c[i].user = hosts[i].user ? strdup(hosts[i].user) : NULL;
    c[i].address = hosts[i].address ? strdup(hosts[i].address) : NULL;
    c[i].iface = hosts[i].iface ? strdup(hosts[i].iface) : NULL;
    if (!c[i].name || (hosts[i].user && !c[i].user) ||
        (hosts[i].address && !c[i].address) ||
        (hosts[i].iface && !c[i].iface)) {
      hr_hosts_free(c, i + 1);
      return NULL;
    }
  }
  return c;
}

int hr_hosts_parse(const char *spec, struct hr_host **hosts, size_t *nhosts,
                   char *err, size_t errlen) {
  *hosts = NULL;
  *nhosts = 0;
  if (!spec || !*spec) {
    hc_fmt(err, errlen, "empty host list");
    return -1;
  }
  struct hr_host *h = NULL;
  size_t n = 0, cap = 0;
  for (const char *p = spec;;) {
    size_t len = strcspn(p, ",");
    struct hr_host one = {0};
    int explicit_slots;
    if (len == 0) {
      hc_fmt(err, errlen, "empty entry in host list '%s'", spec);
      goto fail;
    }
    if (parse_item(p, len, &one.name, &one.slots, &explicit_slots, err,
                   errlen) < 0 ||
        hr_hosts_add(&h, &n, &cap, &one, err, errlen) < 0)
      goto fail;
    if (!p[len]) break;
    p += len + 1;
  }
  *hosts = h;
  *nhosts = n;
  return 0;
fail:
  hr_hosts_free(h, n);
  return -1;
}

/* ---- host files ---------------------------------------------------------- */

#define BLANKS " \t\r\n\v\f"

/* Parses the fields after the host on one line: only "slots=N". */
static int hostfile_fields(const char *p, const char *where, struct hr_host *h,
                           int explicit_slots, char *err, size_t errlen) {
  for (p += strspn(p, BLANKS); *p; p += strspn(p, BLANKS)) {
    size_t len = strcspn(p, BLANKS);
    if (len < 6 || strncmp(p, "slots=", 6)) {
      hc_fmt(err, errlen,
             "%s: unexpected '%.*s' after host '%s' (expected slots=N)", where,
             (int)len, p, h->name);
      return -1;
    }
    if (explicit_slots) {
      hc_fmt(err, errlen, "%s: slots given twice for host '%s'", where,
             h->name);
      return -1;
    }
    h->slots = parse_slots(p + 6, len - 6);
    if (h->slots < 0) {
      hc_fmt(err, errlen,
             "%s: bad slots value '%.*s': expected a whole number from 1 "
             "to %d",
             where, (int)len - 6, p + 6, HR_SLOTS_MAX);
      return -1;
    }
    explicit_slots = 1;
    p += len;
  }
  return 0;
}

/* Parses one line of a host file (comment already cut off) and adds its
 * host, if any. `where` is "file:line" for messages. */
static int hostfile_line(char *line, const char *where, struct hr_host **hosts,
                         size_t *n, size_t *cap, char *err, size_t errlen) {
  const char *p = line + strspn(line, BLANKS);
  if (!*p) return 0; /* blank or comment only */
  size_t len = strcspn(p, BLANKS);
  struct hr_host h = {0};
  int explicit_slots;
  char why[512];
  if (parse_item(p, len, &h.name, &h.slots, &explicit_slots, why, sizeof why) <
      0) {
    hc_fmt(err, errlen, "%s: %s", where, why);
    return -1;
  }
  if (hostfile_fields(p + len, where, &h, explicit_slots, err, errlen) < 0) {
    host_clear(&h);
    return -1;
  }
  if (hr_hosts_add(hosts, n, cap, &h, why, sizeof why) < 0) {
    hc_fmt(err, errlen, "%s: %s", where, why);
    return -1;
  }
  return 0;
}

int hr_hostfile_parse(const char *path, struct hr_host **hosts, size_t *nhosts,
                      char *err, size_t errlen) {
  *hosts = NULL;
  *nhosts = 0;
  char *text;
  size_t len;
  if (hr_read_text(path, "host file", HR_HOSTFILE_MAX, &text, &len, err,
                   errlen) < 0)
    return -1;
  struct hr_host *h = NULL;
  size_t n = 0, cap = 0;
  char where[320];
  int rc = 0;
  char *line = text, *end = text + len;
  for (long lineno = 1; rc == 0 && line < end; lineno++) {
    char *nl = memchr(line, '\n', (size_t)(end - line));
    if (nl) *nl = '\0';
    hc_fmt(where, sizeof where, "%s:%ld", path, lineno);
    line[strcspn(line, "#")] = '\0';
    rc = hostfile_line(line, where, &h, &n, &cap, err, errlen);
    line = nl ? nl + 1 : end;
  }
  free(text);
  if (rc == 0 && n == 0) {
    hc_fmt(err, errlen,
           "%s: no hosts in the file (expected lines like 'node1 slots=4')",
           path);
    rc = -1;
  }
  if (rc < 0) {
    hr_hosts_free(h, n);
    return -1;
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
  size_t used = 0;
  for (size_t h = 0; h < nhosts; h++) {
    hosts[h].first_rank = rank;
    hosts[h].nranks = HC_MIN(hosts[h].slots, np - rank);
    used += hosts[h].nranks > 0;
    if (hosts[h].nranks > HR_HOST_RANKS_MAX || used > HR_HOSTS_MAX) {
      if (used > HR_HOSTS_MAX)
        hc_fmt(err, errlen,
               "%d processes would need more than %d hosts; horad takes at "
               "most %d hosts in one job",
               np, HR_HOSTS_MAX, HR_HOSTS_MAX);
      else
        hc_fmt(err, errlen,
               "%d processes would put %d ranks on host '%s'; horad runs at "
               "most %d ranks on one host (spread them over more hosts)",
               np, hosts[h].nranks, hosts[h].name, HR_HOST_RANKS_MAX);
      hr_layout_free(l);
      return -1;
    }
    for (int i = 0; i < hosts[h].nranks; i++, rank++)
      l->ranks[rank] = (struct hr_rank){.rank = rank,
                                        .host = (int)h,
                                        .local_rank = i,
                                        .local_size = hosts[h].nranks};
  }
  layout_cross(l);
  return 0;
}
