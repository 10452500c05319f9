/* config.c -- horarun's --config-file (YAML, through libyaml).
 *
 * The keys are horovodrun's (params, autotune, timeline, stall_check,
 * library_options, logging, controller), each mapped onto a knob of
 * common/params.c exactly as horovodrun maps it onto a HOROVOD_* variable,
 * and hora's own cluster keys (hosts, ssh, horad_path, env,
 * network_interfaces, np, start_timeout, verbose, output_filename,
 * prefix_output_with_timestamp, knobs). hora.yaml(5) documents every one.
 *
 * Unlike horovodrun, which ignores keys it does not know, the file is read
 * strictly: a misspelt key would otherwise silently leave a setting at its
 * default. Every error names the file, the line and the key. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "opts.h"
#include "common.h"
#include "config.h"
#include "hosts.h"
#include "textfile.h"

#define PATH_LEN 256 /* room for a key path in messages */

struct cfg {
  const char *file;
  yaml_document_t *doc;
  struct hr_opts *o;
  struct hr_host *host; /* the hosts[] item being read */
  char *err;
  size_t errlen;
};

/* A key of a mapping and what reads its value. */
typedef int (*key_fn)(struct cfg *c, yaml_node_t *v, const char *path,
                      const void *arg);
struct key {
  const char *name;
  key_fn fn;
  const void *arg;
};

/* ---- messages and scalars ------------------------------------------------ */

static unsigned long line_of(const yaml_node_t *n) {
  return (unsigned long)n->start_mark.line + 1;
}

/* Writes "file:line: message" into c->err; returns -1. */
static int fail(struct cfg *c, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(struct cfg *c, const yaml_node_t *n, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  hc_fmt(c->err, c->errlen, "%s:%lu: %s", c->file, line_of(n), msg);
  return -1;
}

static const char *kind(const yaml_node_t *n) {
  switch (n->type) {
  case YAML_MAPPING_NODE:
    return "a mapping";
  case YAML_SEQUENCE_NODE:
    return "a list";
  default:
    return "a single value";
  }
}

static yaml_node_t *node(struct cfg *c, int id) {
  return yaml_document_get_node(c->doc, id);
}

static const char *text(const yaml_node_t *n) {
  return (const char *)n->data.scalar.value;
}

/* YAML's null: an empty plain value, ~ or null. */
static int is_null(const yaml_node_t *n) {
  if (n->type != YAML_SCALAR_NODE ||
      n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
    return 0;
  const char *s = text(n);
  return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") ||
         !strcmp(s, "NULL");
}

/* The text of a scalar value; `what` names what was expected. */
static int scalar(struct cfg *c, yaml_node_t *n, const char *path,
                  const char *what, const char **s) {
  if (n->type != YAML_SCALAR_NODE)
    return fail(c, n, "'%s' must be %s, not %s", path, what, kind(n));
  if (is_null(n))
    return fail(c, n, "'%s' has no value (expected %s)", path, what);
  if (strlen(text(n)) != n->data.scalar.length)
    return fail(c, n, "'%s' holds a NUL character", path);
  *s = text(n);
  return 0;
}

static int get_bool(struct cfg *c, yaml_node_t *n, const char *path, int *b) {
  static const char *const yes[] = {"true", "yes", "on"};
  static const char *const no[] = {"false", "no", "off"};
  const char *s;
  if (scalar(c, n, path, "true or false", &s) < 0) return -1;
  for (size_t i = 0; i < HC_ARRAY_SIZE(yes); i++) {
    if (!strcasecmp(s, yes[i]) || !strcasecmp(s, no[i])) {
      *b = !strcasecmp(s, yes[i]);
      return 0;
    }
  }
  return fail(c, n, "'%s': bad value '%s': expected true or false", path, s);
}

static int get_int(struct cfg *c, yaml_node_t *n, const char *path,
                   long long min, long long max, long long *v) {
  const char *s;
  if (scalar(c, n, path, "a whole number", &s) < 0) return -1;
  char *end;
  errno = 0;
  *v = strtoll(s, &end, 10);
  if (*s && !*end && !errno && *v >= min && *v <= max) return 0;
  return fail(c, n,
              "'%s': bad value '%s': expected a whole number from %lld "
              "to %lld",
              path, s, min, max);
}

/* A non-empty string, copied into the opts. */
static int get_str(struct cfg *c, yaml_node_t *n, const char *path,
                   const char **out) {
  const char *s;
  if (scalar(c, n, path, "a string", &s) < 0) return -1;
  if (!*s) return fail(c, n, "'%s' is empty", path);
  char *copy = hr_opts_own(c->o, strdup(s));
  if (!copy) return fail(c, n, "out of memory");
  *out = copy;
  return 0;
}

/* ---- mappings --------------------------------------------------------------
 */

/* "in 'params'" or "at the top level", for messages; uses buf. */
static const char *where(const char *path, char *buf, size_t len) {
  if (!*path) return "at the top level";
  hc_fmt(buf, len, "in '%s'", path);
  return buf;
}

/* Checks that every key of a mapping is a plain value, given once. */
static int check_keys(struct cfg *c, yaml_node_t *map, const char *path) {
  yaml_node_pair_t *b = map->data.mapping.pairs.start,
                   *e = map->data.mapping.pairs.top;
  char buf[PATH_LEN + 8];
  for (yaml_node_pair_t *p = b; p < e; p++) {
    yaml_node_t *k = node(c, p->key);
    if (k->type != YAML_SCALAR_NODE || is_null(k))
      return fail(c, k, "keys must be plain names (%s)",
                  where(path, buf, sizeof buf));
    for (yaml_node_pair_t *q = b; q < p; q++) {
      yaml_node_t *k0 = node(c, q->key);
      if (k0->type == YAML_SCALAR_NODE && !strcmp(text(k0), text(k)))
        return fail(c, k, "duplicate key '%s' %s (first at line %lu)", text(k),
                    where(path, buf, sizeof buf), line_of(k0));
    }
  }
  return 0;
}

/* Reads a mapping whose keys are those of `keys`. A null value (a section
 * with every key commented out) is an empty mapping. */
static int walk_map(struct cfg *c, yaml_node_t *map, const char *path,
                    const struct key *keys, size_t nkeys, const char *hint) {
  if (is_null(map)) return 0;
  if (map->type != YAML_MAPPING_NODE && !*path)
    return fail(c, map, "the top level must be a mapping of keys, not %s",
                kind(map));
  if (map->type != YAML_MAPPING_NODE)
    return fail(c, map, "'%s' must be a mapping of keys, not %s", path,
                kind(map));
  if (check_keys(c, map, path) < 0) return -1;
  for (yaml_node_pair_t *p = map->data.mapping.pairs.start;
       p < map->data.mapping.pairs.top; p++) {
    yaml_node_t *k = node(c, p->key), *v = node(c, p->value);
    const struct key *found = NULL;
    for (size_t i = 0; i < nkeys && !found; i++)
      if (!strcmp(keys[i].name, text(k))) found = &keys[i];
    if (!found) {
      char known[512] = "";
      size_t len = 0;
      for (size_t i = 0; i < nkeys && len < sizeof known; i++)
        len += (size_t)snprintf(known + len, sizeof known - len, "%s%s",
                                i ? ", " : "", keys[i].name);
      if (*path)
        return fail(c, k, "unknown key '%s' in '%s' (expected one of: %s)%s",
                    text(k), path, known, hint ? hint : "");
      return fail(c, k, "unknown key '%s' (expected one of: %s)", text(k),
                  known);
    }
    char sub[PATH_LEN];
    hc_fmt(sub, sizeof sub, "%s%s%s", path, *path ? "." : "", found->name);
    if (found->fn(c, v, sub, found->arg) < 0) return -1;
  }
  return 0;
}

/* ---- knobs (horovodrun's sections) -----------------------------------------
 */

enum { KK_PLAIN, KK_INVERT, KK_MB };
struct knob_key {
  const char *knob;
  int mode; /* KK_INVERT: a boolean meaning the opposite of the knob;
               KK_MB: in the unit of the knob's flag (MiB) */
};

/* Sets knob `name` from value node v; flag_unit as hr_opts_set_knob(). */
static int set_knob(struct cfg *c, yaml_node_t *v, const char *path,
                    const char *name, int mode) {
  const struct hc_param *p = hc_param_find(name);
  if (!p) return fail(c, v, "'%s': no knob '%s' in this build", path, name);
  const char *s;
  char why[256];
  if (p->type == HC_P_BOOL) {
    int b;
    if (get_bool(c, v, path, &b) < 0) return -1;
    s = b ^ (mode == KK_INVERT) ? "1" : "0";
  } else {
    const char *what = p->type == HC_P_STRING ? "a string" : "a number";
    if (scalar(c, v, path, what, &s) < 0) return -1;
  }
  if (hr_opts_set_knob(c->o, (size_t)(p - hc_params), s, mode == KK_MB, why,
                       sizeof why) < 0)
    return fail(c, v, "'%s': bad value '%s': %s", path, s, why);
  return 0;
}

static int key_knob(struct cfg *c, yaml_node_t *v, const char *path,
                    const void *arg) {
  const struct knob_key *k = arg;
  return set_knob(c, v, path, k->knob, k->mode);
}

#define KNOB(key, knob, mode)                                                  \
  {                                                                            \
    key, key_knob, &(const struct knob_key) {                                  \
      knob, mode                                                               \
    }                                                                          \
  }

static const struct key params_keys[] = {
    KNOB("fusion_threshold_mb", "fusion_threshold", KK_MB),
    KNOB("cycle_time_ms", "cycle_time", KK_PLAIN),
    KNOB("cache_capacity", "cache_capacity", KK_PLAIN),
    KNOB("hierarchical_allreduce", "hierarchical_allreduce", KK_PLAIN),
    KNOB("hierarchical_allgather", "hierarchical_allgather", KK_PLAIN),
    KNOB("torus_allreduce", "torus_allreduce", KK_PLAIN),
};
static const struct key autotune_keys[] = {
    KNOB("enabled", "autotune", KK_PLAIN),
    KNOB("log_file", "autotune_log_file", KK_PLAIN),
    KNOB("warmup_samples", "autotune_warmup_samples", KK_PLAIN),
    KNOB("steps_per_sample", "autotune_steps_per_sample", KK_PLAIN),
    KNOB("bayes_opt_max_samples", "autotune_bayes_opt_max_samples", KK_PLAIN),
    KNOB("gaussian_process_noise", "autotune_gaussian_process_noise", KK_PLAIN),
};
static const struct key timeline_keys[] = {
    KNOB("filename", "timeline_filename", KK_PLAIN),
    KNOB("mark_cycles", "timeline_mark_cycles", KK_PLAIN),
};
static const struct key stall_keys[] = {
    KNOB("enabled", "stall_check_disable", KK_INVERT),
    KNOB("warning_time_seconds", "stall_check_time", KK_PLAIN),
    KNOB("shutdown_time_seconds", "stall_shutdown_time", KK_PLAIN),
};
static const struct key library_keys[] = {
    KNOB("mpi_threads_disable", "mpi_threads_disable", KK_PLAIN),
    KNOB("num_nccl_streams", "num_nccl_streams", KK_PLAIN),
    KNOB("thread_affinity", "thread_affinity", KK_PLAIN),
    KNOB("gloo_timeout_seconds", "gloo_timeout_seconds", KK_PLAIN),
};
static const struct key logging_keys[] = {
    KNOB("level", "log_level", KK_PLAIN),
    KNOB("with_timestamp", "log_hide_timestamp", KK_INVERT),
    KNOB("hide_timestamp", "log_hide_timestamp", KK_PLAIN),
};

struct section {
  const struct key *keys;
  size_t nkeys;
};
#define SECTION(k)                                                             \
  &(const struct section) {                                                    \
    k, HC_ARRAY_SIZE(k)                                                        \
  }

static int key_section(struct cfg *c, yaml_node_t *v, const char *path,
                       const void *arg) {
  const struct section *s = arg;
  return walk_map(c, v, path, s->keys, s->nkeys, NULL);
}

/* knobs: any knob of the parameter table by name, in its own unit. */
static int key_knobs(struct cfg *c, yaml_node_t *v, const char *path,
                     const void *arg) {
  (void)arg;
  if (is_null(v)) return 0;
  if (v->type != YAML_MAPPING_NODE)
    return fail(c, v,
                "'%s' must be a mapping of knob names to values, not "
                "%s",
                path, kind(v));
  if (check_keys(c, v, path) < 0) return -1;
  for (yaml_node_pair_t *p = v->data.mapping.pairs.start;
       p < v->data.mapping.pairs.top; p++) {
    yaml_node_t *k = node(c, p->key);
    if (!hc_param_find(text(k)))
      return fail(c, k,
                  "unknown knob '%s' in '%s' (the knobs are listed by "
                  "horarun --help and in hora.yaml(5))",
                  text(k), path);
    char sub[PATH_LEN];
    hc_fmt(sub, sizeof sub, "%s.%s", path, text(k));
    if (set_knob(c, node(c, p->value), sub, text(k), KK_PLAIN) < 0) return -1;
  }
  return 0;
}

static int key_controller(struct cfg *c, yaml_node_t *v, const char *path,
                          const void *arg) {
  (void)arg;
  const char *s;
  if (scalar(c, v, path, "gloo or mpi", &s) < 0) return -1;
  if (strcasecmp(s, "gloo") && strcasecmp(s, "mpi"))
    return fail(c, v, "'%s': bad value '%s': expected gloo or mpi", path, s);
  return 0; /* hora has its own controller: accepted, no effect */
}

/* ---- hosts -----------------------------------------------------------------
 */

/* 1 when s is a login name ssh can be given safely. */
static int user_ok(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > 64 || s[0] == '-') return 0;
  for (size_t i = 0; i < n; i++)
    if (!(s[i] == '.' || s[i] == '-' || s[i] == '_' ||
          (s[i] >= '0' && s[i] <= '9') ||
          ((s[i] | 32) >= 'a' && (s[i] | 32) <= 'z')))
      return 0;
  return 1;
}

/* A host name or address, "[v6]" unwrapped; malloc'd into *out. */
static int get_host_name(struct cfg *c, yaml_node_t *v, const char *path,
                         char **out) {
  const char *s;
  if (scalar(c, v, path, "a host name", &s) < 0) return -1;
  size_t len = strlen(s);
  if (len > 2 && s[0] == '[' && s[len - 1] == ']') {
    s++;
    len -= 2;
  }
  char *name = strndup(s, len);
  if (!name) return fail(c, v, "out of memory");
  if (!hr_host_name_ok(name)) {
    free(name);
    return fail(c, v,
                "'%s': bad host name '%s' (letters, digits, '.', '-' "
                "and '_', or an IP address; the slots go in 'slots')",
                path, text(v));
  }
  free(*out);
  *out = name;
  return 0;
}

static int key_host_name(struct cfg *c, yaml_node_t *v, const char *path,
                         const void *arg) {
  return get_host_name(c, v, path, arg ? &c->host->address : &c->host->name);
}

static int key_host_slots(struct cfg *c, yaml_node_t *v, const char *path,
                          const void *arg) {
  long long n;
  (void)arg;
  if (get_int(c, v, path, 1, HR_SLOTS_MAX, &n) < 0) return -1;
  c->host->slots = (int)n;
  return 0;
}

static int key_port(struct cfg *c, yaml_node_t *v, const char *path,
                    const void *arg) {
  long long n;
  if (get_int(c, v, path, 1, 65535, &n) < 0) return -1;
  *(arg ? &c->o->ssh_port : &c->host->ssh_port) = (int)n;
  return 0;
}

/* A login name: the host's (arg NULL) or the default one (ssh.user). */
static int key_user(struct cfg *c, yaml_node_t *v, const char *path,
                    const void *arg) {
  const char *s;
  if (scalar(c, v, path, "a user name", &s) < 0) return -1;
  if (!user_ok(s)) return fail(c, v, "'%s': bad user name '%s'", path, s);
  char *copy = strdup(s);
  if (!copy) return fail(c, v, "out of memory");
  if (arg) {
    if (!hr_opts_own(c->o, copy)) return fail(c, v, "out of memory");
    c->o->ssh_user = copy;
  } else {
    free(c->host->user);
    c->host->user = copy;
  }
  return 0;
}

static int key_host_iface(struct cfg *c, yaml_node_t *v, const char *path,
                          const void *arg) {
  const char *s;
  (void)arg;
  if (scalar(c, v, path, "an interface name", &s) < 0) return -1;
  if (!hr_iface_ok(s))
    return fail(c, v, "'%s': bad network interface '%s'", path, s);
  char *copy = strdup(s);
  if (!copy) return fail(c, v, "out of memory");
  free(c->host->iface);
  c->host->iface = copy;
  return 0;
}

static const struct key host_keys[] = {
    {"name", key_host_name, NULL},
    {"slots", key_host_slots, NULL},
    {"ssh_port", key_port, NULL},
    {"user", key_user, NULL},
    {"address", key_host_name, "address"},
    {"network_interface", key_host_iface, NULL},
};

/* Reads hosts[i] into *h: "name", "name:slots" or a mapping. */
static int read_host(struct cfg *c, yaml_node_t *v, const char *path,
                     struct hr_host *h) {
  char why[512];
  *h = (struct hr_host){.slots = 1};
  if (v->type == YAML_SCALAR_NODE && !is_null(v)) {
    if (hr_host_item_parse(text(v), strlen(text(v)), &h->name, &h->slots, why,
                           sizeof why) < 0)
      return fail(c, v, "'%s': %s", path, why);
    return 0;
  }
  if (v->type != YAML_MAPPING_NODE)
    return fail(c, v,
                "'%s' must be a host (\"node1\", \"node1:4\") or a "
                "mapping with a name, not %s (quote IPv6 addresses: "
                "\"[::1]:2\")",
                path, is_null(v) ? "empty" : kind(v));
  c->host = h;
  if (walk_map(c, v, path, host_keys, HC_ARRAY_SIZE(host_keys),
               "; a host with slots is written 'node1:4' (no blank after "
               "the colon) or {name: node1, slots: 4}") < 0)
    return -1;
  if (!h->name) return fail(c, v, "'%s' has no 'name'", path);
  return 0;
}

static int key_hosts(struct cfg *c, yaml_node_t *v, const char *path,
                     const void *arg) {
  struct hr_host *list = NULL, h;
  size_t n = 0, cap = 0;
  char why[512];
  (void)arg;
  if (v->type == YAML_SCALAR_NODE && !is_null(v)) { /* as -H */
    if (hr_hosts_parse(text(v), &list, &n, why, sizeof why) < 0)
      return fail(c, v, "'%s': %s", path, why);
  } else if (v->type != YAML_SEQUENCE_NODE) {
    return fail(c, v, "'%s' must be a list of hosts, not %s", path,
                is_null(v) ? "empty" : kind(v));
  }
  yaml_node_item_t *b =
      v->type == YAML_SEQUENCE_NODE ? v->data.sequence.items.start : NULL;
  yaml_node_item_t *e = b ? v->data.sequence.items.top : NULL;
  if (v->type == YAML_SEQUENCE_NODE && b == e)
    return fail(c, v, "'%s' is an empty list", path);
  for (yaml_node_item_t *it = b; it < e; it++) {
    yaml_node_t *item = node(c, *it);
    char sub[PATH_LEN];
    hc_fmt(sub, sizeof sub, "%s[%ld]", path, (long)(it - b));
    int rc = read_host(c, item, sub, &h);
    if (rc == 0 && hr_hosts_add(&list, &n, &cap, &h, why, sizeof why) < 0)
      rc = fail(c, item, "'%s': %s", sub, why);
    if (rc < 0) {
      free(h.name); /* what read_host() got before it failed */
      free(h.user);
      free(h.address);
      free(h.iface);
      hr_hosts_free(list, n);
      return -1;
    }
  }
  hr_hosts_free(c->o->cfg_hosts, c->o->ncfg_hosts);
  c->o->cfg_hosts = list;
  c->o->ncfg_hosts = n;
  c->o->host_source = HR_HOSTS_CONFIG;
  return 0;
}

/* ---- ssh, env, the rest
 * ------------------------------------------------------ */

static int key_identity(struct cfg *c, yaml_node_t *v, const char *path,
                        const void *arg) {
  (void)arg;
  return get_str(c, v, path, &c->o->ssh_identity);
}

/* A list of strings, each copied into the opts. */
static int get_str_list(struct cfg *c, yaml_node_t *v, const char *path,
                        const char *what, char ***out, size_t *nout) {
  if (v->type != YAML_SEQUENCE_NODE)
    return fail(c, v, "'%s' must be a list of %s, not %s", path, what,
                is_null(v) ? "empty" : kind(v));
  yaml_node_item_t *b = v->data.sequence.items.start,
                   *e = v->data.sequence.items.top;
  char **list = calloc((size_t)(e - b) + 1, sizeof *list);
  if (!list) return fail(c, v, "out of memory");
  for (yaml_node_item_t *it = b; it < e; it++) {
    char sub[PATH_LEN];
    const char *s;
    hc_fmt(sub, sizeof sub, "%s[%ld]", path, (long)(it - b));
    if (get_str(c, node(c, *it), sub, &s) < 0) {
      free(list);
      return -1;
    }
    list[it - b] = (char *)s;
  }
  *out = list;
  *nout = (size_t)(e - b);
  return 0;
}

static int key_ssh_options(struct cfg *c, yaml_node_t *v, const char *path,
                           const void *arg) {
  char **list;
  size_t n;
  (void)arg;
  if (get_str_list(c, v, path, "ssh arguments (\"-o\", \"Name=value\")", &list,
                   &n) < 0)
    return -1;
  free(c->o->ssh_opts);
  c->o->ssh_opts = list;
  c->o->nssh_opts = n;
  return 0;
}

static const struct key ssh_keys[] = {
    {"port", key_port, "opts"},
    {"identity_file", key_identity, NULL},
    {"user", key_user, "default"},
    {"options", key_ssh_options, NULL},
};

static int key_horad_path(struct cfg *c, yaml_node_t *v, const char *path,
                          const void *arg) {
  (void)arg;
  return get_str(c, v, path, &c->o->horad_path);
}

static int env_name_ok(const char *s) {
  if (!*s || (*s >= '0' && *s <= '9')) return 0;
  for (; *s; s++)
    if (!(*s == '_' || (*s >= '0' && *s <= '9') ||
          ((*s | 32) >= 'a' && (*s | 32) <= 'z')))
      return 0;
  return 1;
}

/* Sets "name=value" in o->env, replacing an entry of the same name. */
static int env_put(struct cfg *c, yaml_node_t *at, const char *name,
                   const char *value) {
  size_t len = strlen(name);
  char *kv = malloc(len + strlen(value) + 2);
  if (!kv || !hr_opts_own(c->o, kv)) return fail(c, at, "out of memory");
  sprintf(kv, "%s=%s", name, value);
  for (size_t i = 0; i < c->o->nenv; i++) {
    if (!strncmp(c->o->env[i], name, len) && c->o->env[i][len] == '=') {
      c->o->env[i] = kv;
      return 0;
    }
  }
  char **g = realloc(c->o->env, (c->o->nenv + 2) * sizeof *g);
  if (!g) return fail(c, at, "out of memory");
  c->o->env = g;
  g[c->o->nenv++] = kv;
  g[c->o->nenv] = NULL;
  return 0;
}

/* A knob's variable (HORA_SPIN_US, HOROVOD_CYCLE_TIME) in `env` must hold
 * a value of the knob (or be empty: unset). */
static int check_knob_var(struct cfg *c, yaml_node_t *at, const char *path,
                          const char *name, const char *value) {
  char why[256];
  for (size_t i = 0; i < hc_nparams && *value; i++) {
    const struct hc_param *p = &hc_params[i];
    if (strcmp(p->env, name) && (!p->hvd_env || strcmp(p->hvd_env, name)))
      continue;
    if (hc_param_check(p, value, why, sizeof why) < 0)
      return fail(c, at, "'%s': bad value '%s': %s", path, value, why);
  }
  return 0;
}

static int key_env(struct cfg *c, yaml_node_t *v, const char *path,
                   const void *arg) {
  (void)arg;
  if (is_null(v)) return 0;
  if (v->type != YAML_MAPPING_NODE)
    return fail(c, v, "'%s' must be a mapping of NAME: value, not %s", path,
                kind(v));
  if (check_keys(c, v, path) < 0) return -1;
  for (yaml_node_pair_t *p = v->data.mapping.pairs.start;
       p < v->data.mapping.pairs.top; p++) {
    yaml_node_t *k = node(c, p->key), *val = node(c, p->value);
    char sub[PATH_LEN];
    const char *s;
    hc_fmt(sub, sizeof sub, "%s.%s", path, text(k));
    if (!env_name_ok(text(k)))
      return fail(c, k,
                  "'%s': bad variable name '%s' (letters, digits and "
                  "'_', not starting with a digit)",
                  path, text(k));
    if (is_null(val))
      return fail(c, val,
                  "'%s' has no value (write %s: \"\" for an empty "
                  "one)",
                  sub, text(k));
    if (scalar(c, val, sub, "a single value", &s) < 0 ||
        check_knob_var(c, val, sub, text(k), s) < 0 ||
        env_put(c, val, text(k), s) < 0)
      return -1;
  }
  return 0;
}

static int key_ifaces(struct cfg *c, yaml_node_t *v, const char *path,
                      const void *arg) {
  char why[512];
  (void)arg;
  if (v->type == YAML_SCALAR_NODE && !is_null(v)) { /* "eth0,ib0" */
    if (hr_opts_add_ifaces(c->o, text(v), 1, why, sizeof why) < 0)
      return fail(c, v, "'%s': %s", path, why);
  } else if (v->type != YAML_SEQUENCE_NODE) {
    return fail(c, v, "'%s' must be a list of interface names, not %s", path,
                is_null(v) ? "empty" : kind(v));
  } else {
    c->o->nifaces = 0;
    yaml_node_item_t *b = v->data.sequence.items.start;
    for (yaml_node_item_t *it = b; it < v->data.sequence.items.top; it++) {
      yaml_node_t *item = node(c, *it);
      char sub[PATH_LEN];
      const char *s;
      hc_fmt(sub, sizeof sub, "%s[%ld]", path, (long)(it - b));
      if (scalar(c, item, sub, "an interface name", &s) < 0) return -1;
      if (strchr(s, ',') || hr_opts_add_ifaces(c->o, s, 0, why, sizeof why) < 0)
        return fail(c, item, "'%s': bad network interface '%s'", sub, s);
    }
  }
  c->o->ifaces_replace = 1; /* a later --network-interface starts anew */
  return 0;
}

static int key_np(struct cfg *c, yaml_node_t *v, const char *path,
                  const void *arg) {
  long long n;
  (void)arg;
  if (get_int(c, v, path, 1, HR_NP_MAX, &n) < 0) return -1;
  c->o->np = (int)n;
  return 0;
}

static int key_verbose(struct cfg *c, yaml_node_t *v, const char *path,
                       const void *arg) {
  (void)arg;
  return get_bool(c, v, path, &c->o->verbose);
}

static int key_prefix_ts(struct cfg *c, yaml_node_t *v, const char *path,
                         const void *arg) {
  (void)arg;
  return get_bool(c, v, path, &c->o->prefix_timestamp);
}

static int key_output(struct cfg *c, yaml_node_t *v, const char *path,
                      const void *arg) {
  (void)arg;
  return get_str(c, v, path, &c->o->output_dir);
}

static int key_launcher(struct cfg *c, yaml_node_t *v, const char *path,
                        const void *arg) {
  const char *s;
  char why[128];
  (void)arg;
  if (get_str(c, v, path, &s) < 0) return -1;
  if (hr_launcher_check(s, why, sizeof why) < 0)
    return fail(c, v, "'%s': bad value '%s': %s", path, s, why);
  c->o->launcher = s;
  return 0;
}

static const struct key top_keys[] = {
    /* horovodrun's */
    {"controller", key_controller, NULL},
    {"params", key_section, SECTION(params_keys)},
    {"autotune", key_section, SECTION(autotune_keys)},
    {"timeline", key_section, SECTION(timeline_keys)},
    {"stall_check", key_section, SECTION(stall_keys)},
    {"library_options", key_section, SECTION(library_keys)},
    {"logging", key_section, SECTION(logging_keys)},
    /* hora's */
    {"hosts", key_hosts, NULL},
    {"ssh", key_section, SECTION(ssh_keys)},
    {"horad_path", key_horad_path, NULL},
    {"env", key_env, NULL},
    {"network_interfaces", key_ifaces, NULL},
    {"np", key_np, NULL},
    KNOB("start_timeout", "start_timeout", KK_PLAIN),
    {"verbose", key_verbose, NULL},
    {"output_filename", key_output, NULL},
    {"launcher", key_launcher, NULL},
    {"prefix_output_with_timestamp", key_prefix_ts, NULL},
    {"knobs", key_knobs, NULL},
};

/* ---- loading
 * ----------------------------------------------------------------- */

/* Describes a libyaml failure as "file:line: YAML syntax error: ...". */
static void parse_error(struct cfg *c, const yaml_parser_t *p) {
  if (p->error == YAML_MEMORY_ERROR) {
    hc_fmt(c->err, c->errlen, "%s: out of memory", c->file);
  } else if (p->error == YAML_READER_ERROR) {
    hc_fmt(c->err, c->errlen, "%s: cannot read the file: %s (at byte %zu)",
           c->file, p->problem ? p->problem : "unknown error",
           p->problem_offset);
  } else if (p->context) {
    hc_fmt(c->err, c->errlen, "%s:%lu: YAML syntax error: %s (%s at line %lu)",
           c->file, (unsigned long)p->problem_mark.line + 1,
           p->problem ? p->problem : "unknown error", p->context,
           (unsigned long)p->context_mark.line + 1);
  } else {
    hc_fmt(c->err, c->errlen, "%s:%lu: YAML syntax error: %s", c->file,
           (unsigned long)p->problem_mark.line + 1,
           p->problem ? p->problem : "unknown error");
  }
}

/* ---- the first pass: depth and NUL characters ---------------------------
 *
 * Before libyaml builds the document (which takes a time quadratic in the
 * nesting: 36 s for 100,000 levels), the file's events are walked once,
 * keeping only a stack of HR_CONFIG_DEPTH_MAX entries: nesting deeper than
 * that, and a NUL character in any key or value (libyaml reads "\0" and
 * keeps it; C strings would end there), are errors naming the line and
 * the key. So are a mapping of more than HR_CONFIG_KEYS_MAX keys (checking
 * them for duplicates is quadratic) and more than HR_CONFIG_ANCHORS_MAX
 * anchors and aliases (so is resolving them). A syntax error is left to
 * the second pass, which reports it. */

struct level {
  int map;      /* a mapping (else a list) */
  int in_value; /* a mapping: its key has been read */
  long index;   /* a list: the item being read; a mapping: its keys */
  char key[64]; /* a mapping: the key being read, "?" when not plain */
};

/* The key path to the value being read ("hosts[1].name"), into buf. */
static const char *event_path(const struct level *lv, int depth, char *buf,
                              size_t len) {
  size_t n = 0;
  buf[0] = '\0';
  for (int i = 0; i < depth && n < len; i++) {
    if (lv[i].map && lv[i].in_value)
      n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? "." : "", lv[i].key);
    else if (!lv[i].map)
      n += (size_t)snprintf(buf + n, len - n, "[%ld]", lv[i].index);
  }
  return buf;
}

/* A value (scalar, alias or a whole collection) has been read at this
 * depth: the enclosing mapping waits for its next key, the list for its
 * next item. */
static void value_done(struct level *lv, int depth) {
  if (depth == 0) return;
  struct level *l = &lv[depth - 1];
  if (l->map) l->in_value = 0;
  l->index++;
}

/* The key of the mapping at the top has been read (text, or NULL when it
 * is not a plain value). Returns -1 past HR_CONFIG_KEYS_MAX keys. */
static int key_read(struct level *top, const char *text) {
  hc_fmt(top->key, sizeof top->key, "%s", text ? text : "?");
  top->in_value = 1;
  return top->index < HR_CONFIG_KEYS_MAX ? 0 : -1;
}

/* The n bytes at v for a message, a NUL as \0, cut at len - 4 bytes. */
static void show_nul(const char *v, size_t n, char *buf, size_t len) {
  size_t o = 0;
  for (size_t i = 0; i < n && o + 4 < len; i++) {
    if (v[i] == '\0') {
      buf[o++] = '\\';
      buf[o++] = '0';
    } else {
      buf[o++] = (unsigned char)v[i] < 0x20 ? '?' : v[i];
    }
  }
  buf[o] = '\0';
}

/* Writes "file:line: message" for event e into c->err; returns -1. */
static int prescan_fail(struct cfg *c, const yaml_event_t *e, const char *fmt,
                        ...) __attribute__((format(printf, 3, 4)));
static int prescan_fail(struct cfg *c, const yaml_event_t *e, const char *fmt,
                        ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  hc_fmt(c->err, c->errlen, "%s:%lu: %s", c->file,
         (unsigned long)e->start_mark.line + 1, msg);
  return -1;
}

/* One event; returns 1 at the end of the stream, 0 to go on, -1 on an
 * error (in c->err). */
static int prescan_event(struct cfg *c, const yaml_event_t *e, struct level *lv,
                         int *depth) {
  char path[PATH_LEN], where_buf[PATH_LEN + 8];
  struct level *top = *depth ? &lv[*depth - 1] : NULL;
  int is_key = top && top->map && !top->in_value;
  switch (e->type) {
  case YAML_STREAM_END_EVENT:
    return 1;
  case YAML_DOCUMENT_START_EVENT:
    *depth = 0;
    return 0;
  case YAML_SCALAR_EVENT: {
    const char *v = (const char *)e->data.scalar.value;
    size_t n = e->data.scalar.length;
    if (memchr(v, '\0', n)) {
      event_path(lv, *depth, path, sizeof path);
      if (is_key) {
        char shown[80];
        show_nul(v, n, shown, sizeof shown);
        return prescan_fail(c, e, "key '%s' %s holds a NUL character", shown,
                            where(path, where_buf, sizeof where_buf));
      }
      return prescan_fail(c, e, "'%s' holds a NUL character", path);
    }
    if (is_key && key_read(top, v) < 0) goto too_many_keys;
    if (!is_key) value_done(lv, *depth);
    return 0;
  }
  case YAML_ALIAS_EVENT:
    if (is_key && key_read(top, NULL) < 0) goto too_many_keys;
    if (!is_key) value_done(lv, *depth);
    return 0;
  case YAML_MAPPING_START_EVENT:
  case YAML_SEQUENCE_START_EVENT:
    if (*depth == HR_CONFIG_DEPTH_MAX)
      return prescan_fail(c, e, "nested deeper than %d levels %s",
                          HR_CONFIG_DEPTH_MAX,
                          where(event_path(lv, *depth, path, sizeof path),
                                where_buf, sizeof where_buf));
    /* a collection as a key: walk_map() refuses it */
    if (is_key && key_read(top, NULL) < 0) goto too_many_keys;
    lv[(*depth)++] = (struct level){.map = e->type == YAML_MAPPING_START_EVENT};
    return 0;
  case YAML_MAPPING_END_EVENT:
  case YAML_SEQUENCE_END_EVENT:
    if (*depth > 0) --*depth;
    value_done(lv, *depth);
    return 0;
  default:
    return 0;
  }
too_many_keys:
  return prescan_fail(c, e, "more than %d keys %s", HR_CONFIG_KEYS_MAX,
                      where(event_path(lv, *depth - 1, path, sizeof path),
                            where_buf, sizeof where_buf));
}

/* The anchor an event defines, or NULL. */
static const yaml_char_t *anchor_of(const yaml_event_t *e) {
  switch (e->type) {
  case YAML_SCALAR_EVENT:
    return e->data.scalar.anchor;
  case YAML_SEQUENCE_START_EVENT:
    return e->data.sequence_start.anchor;
  case YAML_MAPPING_START_EVENT:
    return e->data.mapping_start.anchor;
  default:
    return NULL;
  }
}

/* Runs the first pass over text. Returns 0 (also on a syntax error, left
 * to the loader) or -1 with the error in c->err. */
static int prescan(struct cfg *c, const char *text, size_t len) {
  yaml_parser_t p;
  struct level lv[HR_CONFIG_DEPTH_MAX];
  int depth = 0, rc = 0;
  long refs = 0;                             /* anchors and aliases */
  if (!yaml_parser_initialize(&p)) return 0; /* the loader says it */
  yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
  while (rc == 0) {
    yaml_event_t e;
    if (!yaml_parser_parse(&p, &e)) break;
    rc = prescan_event(c, &e, lv, &depth);
    /* libyaml looks each alias up among every anchor: keep it linear */
    if (rc == 0 && (e.type == YAML_ALIAS_EVENT || anchor_of(&e)) &&
        ++refs > HR_CONFIG_ANCHORS_MAX)
      rc = prescan_fail(c, &e,
                        "more than %d YAML anchors and aliases (&x, "
                        "*x)",
                        HR_CONFIG_ANCHORS_MAX);
    yaml_event_delete(&e);
  }
  yaml_parser_delete(&p);
  return rc < 0 ? -1 : 0;
}

/* Loads the one document of the file into *doc. Returns 0 or -1. */
static int load(struct cfg *c, yaml_parser_t *p, yaml_document_t *doc) {
  if (!yaml_parser_load(p, doc)) {
    parse_error(c, p);
    return -1;
  }
  if (!yaml_document_get_root_node(doc)) return 0; /* empty file */
  yaml_document_t next;
  if (!yaml_parser_load(p, &next)) {
    parse_error(c, p);
    yaml_document_delete(doc);
    return -1;
  }
  yaml_node_t *root = yaml_document_get_root_node(&next);
  int rc = 0;
  if (root) {
    hc_fmt(c->err, c->errlen,
           "%s:%lu: a second YAML document ('---'): put every setting in "
           "one",
           c->file, (unsigned long)root->start_mark.line + 1);
    rc = -1;
    yaml_document_delete(doc);
  }
  yaml_document_delete(&next);
  return rc;
}

int hr_config_load(const char *path, struct hr_opts *o, char *err,
                   size_t errlen) {
  struct cfg c = {.file = path, .o = o, .err = err, .errlen = errlen};
  char *text;
  size_t len;
  if (hr_read_text(path, "config file", HR_CONFIG_MAX, &text, &len, err,
                   errlen) < 0)
    return -1;
  yaml_parser_t parser;
  yaml_document_t doc;
  if (prescan(&c, text, len) < 0) {
    free(text);
    return -1;
  }
  if (!yaml_parser_initialize(&parser)) {
    hc_fmt(err, errlen, "%s: out of memory", path);
    free(text);
    return -1;
  }
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  int rc = load(&c, &parser, &doc);
  if (rc == 0) {
    c.doc = &doc;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root)
      rc = walk_map(&c, root, "", top_keys, HC_ARRAY_SIZE(top_keys), NULL);
    yaml_document_delete(&doc);
  }
  yaml_parser_delete(&parser);
  free(text);
  return rc;
}
