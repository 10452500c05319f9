/* service_conf.c -- the service's configuration file (horad --service
 * --config, default /etc/hora/horad.yaml): a YAML mapping of the same
 * settings as the command line's, which wins where both say something. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "common.h"
#include "service.h"

/* The file's keys, each the bit cfg->cli / the loaded mask uses. */
static const struct {
  const char *key;
  unsigned bit;
} keys[] = {
    {"port", HD_SVC_PORT},
    {"listen", HD_SVC_LISTEN},
    {"auth", HD_SVC_AUTH},
    {"key_file", HD_SVC_KEY_FILE},
    {"munge_socket", HD_SVC_MUNGE_SOCKET},
    {"allow_root", HD_SVC_ALLOW_ROOT},
    {"stop", HD_SVC_STOP},
    {"drain_timeout", HD_SVC_DRAIN_TIMEOUT},
    {"socket", HD_SVC_SOCKET},
};

void hd_service_cfg_defaults(struct hd_service_cfg *c) {
  const char *cfg = c->config;
  int given = c->config_given;
  memset(c, 0, sizeof *c);
  c->config = cfg;
  c->config_given = given;
  c->port = HD_SERVICE_PORT;
  hc_fmt(c->key_file, sizeof c->key_file, "%s", HD_SERVICE_KEY);
  hc_fmt(c->socket, sizeof c->socket, "%s", HD_SERVICE_SOCKET);
}

static int parse_bool(const char *v, int *out) {
  static const char *yes[] = {"true", "yes", "on", "1"};
  static const char *no[] = {"false", "no", "off", "0"};
  for (size_t i = 0; i < HC_ARRAY_SIZE(yes); i++)
    if (!strcmp(v, yes[i])) return *out = 1, 0;
  for (size_t i = 0; i < HC_ARRAY_SIZE(no); i++)
    if (!strcmp(v, no[i])) return *out = 0, 0;
  return -1;
}

int hd_service_cfg_set(struct hd_service_cfg *c, unsigned bit, const char *v,
                       char *why, size_t whylen) {
  char *end;
  long n;
  switch (bit) {
  case HD_SVC_PORT:
    n = strtol(v, &end, 10);
    if (*end || end == v || n < 1 || n > 65535) {
      hc_fmt(why, whylen, "expected a port number from 1 to 65535");
      return -1;
    }
    c->port = (int)n;
    return 0;
  case HD_SVC_LISTEN:
    if (strlen(v) >= sizeof c->listen_addr) break;
    hc_fmt(c->listen_addr, sizeof c->listen_addr, "%s", v);
    return 0;
  case HD_SVC_AUTH:
    if (strcmp(v, "key") && strcmp(v, "munge")) {
      hc_fmt(why, whylen, "expected key or munge");
      return -1;
    }
    c->munge = !strcmp(v, "munge");
    return 0;
  case HD_SVC_KEY_FILE:
  case HD_SVC_MUNGE_SOCKET: { /* a path, both the same size */
    char *dst = bit == HD_SVC_KEY_FILE ? c->key_file : c->munge_socket;
    if (!*v || strlen(v) >= sizeof c->key_file) break;
    hc_fmt(dst, sizeof c->key_file, "%s", v);
    return 0;
  }
  case HD_SVC_ALLOW_ROOT:
    if (parse_bool(v, &c->allow_root) < 0) {
      hc_fmt(why, whylen, "expected true or false");
      return -1;
    }
    return 0;
  case HD_SVC_STOP:
    if (strcmp(v, "end") && strcmp(v, "drain")) {
      hc_fmt(why, whylen, "expected end or drain");
      return -1;
    }
    c->drain = !strcmp(v, "drain");
    return 0;
  case HD_SVC_SOCKET: /* an absolute path that fits a sockaddr_un */
    if (!strcmp(v, "none")) {
      c->socket[0] = '\0';
      return 0;
    }
    if (v[0] != '/' || strlen(v) >= sizeof c->socket) {
      hc_fmt(why, whylen, "expected none, or an absolute path of at most "
             "%zu bytes", sizeof c->socket - 1);
      return -1;
    }
    hc_fmt(c->socket, sizeof c->socket, "%s", v);
    return 0;
  case HD_SVC_DRAIN_TIMEOUT:
    n = strtol(v, &end, 10);
    if (*end || end == v || n < 0 || n > 86400 * 7) {
      hc_fmt(why, whylen, "expected seconds from 0 (no limit) to 604800");
      return -1;
    }
    c->drain_timeout = (int)n;
    return 0;
  }
  if (bit == HD_SVC_LISTEN)
    hc_fmt(why, whylen, "expected an address of at most %zu bytes",
           sizeof c->listen_addr - 1);
  else
    hc_fmt(why, whylen, "expected a non-empty path of at most %zu bytes",
           sizeof c->key_file - 1);
  return -1;
}

/* Reads path into file (over its defaults); *mask gets the keys it set.
 * Returns 0, 1 when the file does not exist, or -1 with "FILE:LINE: ..."
 * in why. */
static int load(const char *path, struct hd_service_cfg *file, unsigned *mask,
                char *why, size_t whylen) {
  *mask = 0;
  /* it says whom the service trusts (the key, munged's socket, root): a
   * regular file of root's or the service's user's that no one else may
   * write; never a FIFO that would block the service */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return 1;
    hc_fmt(why, whylen, "%s: %s", path, strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
      (st.st_uid != 0 && st.st_uid != geteuid()) || (st.st_mode & 022)) {
    close(fd);
    hc_fmt(why, whylen, "%s: must be a regular file of root's or this user's "
           "that no one else may write (chmod 644)", path);
    return -1;
  }
  FILE *f = fdopen(fd, "r");
  if (!f) {
    close(fd);
    hc_fmt(why, whylen, "%s: %s", path, strerror(errno));
    return -1;
  }
  yaml_parser_t p;
  yaml_event_t e;
  yaml_parser_initialize(&p);
  yaml_parser_set_input_file(&p, f);
  int rc = 0, depth = 0, done = 0;
  char key[64] = "";
  unsigned bit = 0;
  while (!done && rc == 0) {
    if (!yaml_parser_parse(&p, &e)) {
      hc_fmt(why, whylen, "%s:%zu: not YAML: %s", path,
             p.problem_mark.line + 1, p.problem ? p.problem : "?");
      rc = -1;
      break;
    }
    size_t line = e.start_mark.line + 1;
    switch (e.type) {
    case YAML_STREAM_END_EVENT:
      done = 1;
      break;
    case YAML_MAPPING_START_EVENT:
      if (depth++ > 0 || key[0]) {
        hc_fmt(why, whylen, "%s:%zu: '%s' takes a plain value, not a "
               "mapping", path, line, key[0] ? key : "?");
        rc = -1;
      }
      break;
    case YAML_MAPPING_END_EVENT:
      depth--;
      break;
    case YAML_SEQUENCE_START_EVENT:
      if (key[0])
        hc_fmt(why, whylen, "%s:%zu: '%s' takes a plain value, not a list",
               path, line, key);
      else
        hc_fmt(why, whylen, "%s:%zu: expected a mapping of settings (port: "
               "17970, ...), not a list", path, line);
      rc = -1;
      break;
    case YAML_ALIAS_EVENT:
      hc_fmt(why, whylen, "%s:%zu: aliases are not taken here", path, line);
      rc = -1;
      break;
    case YAML_SCALAR_EVENT: {
      const char *v = (const char *)e.data.scalar.value;
      if (depth == 0) { /* a document that is one scalar: empty is fine */
        if (*v) {
          hc_fmt(why, whylen, "%s:%zu: expected a mapping of settings "
                 "(port: 17970, ...)", path, line);
          rc = -1;
        }
      } else if (!key[0]) {
        bit = 0;
        for (size_t i = 0; i < HC_ARRAY_SIZE(keys); i++)
          if (!strcmp(v, keys[i].key)) bit = keys[i].bit;
        if (!bit) {
          hc_fmt(why, whylen, "%s:%zu: unknown setting '%.60s' (known: port, "
                 "listen, auth, key_file, munge_socket, allow_root, stop, "
                 "drain_timeout, socket)", path, line, v);
          rc = -1;
        } else if (*mask & bit) {
          hc_fmt(why, whylen, "%s:%zu: '%s' is set twice", path, line, v);
          rc = -1;
        } else {
          hc_fmt(key, sizeof key, "%s", v);
        }
      } else {
        char w[200];
        if (hd_service_cfg_set(file, bit, v, w, sizeof w) < 0) {
          hc_fmt(why, whylen, "%s:%zu: bad %s '%.100s': %s", path, line, key,
                 v, w);
          rc = -1;
        }
        *mask |= bit;
        key[0] = '\0';
      }
      break;
    }
    default:
      break;
    }
    yaml_event_delete(&e);
  }
  yaml_parser_delete(&p);
  fclose(f);
  return rc;
}

int hd_service_cfg_load(const struct hd_service_cfg *cli,
                        struct hd_service_cfg *out, char *why,
                        size_t whylen) {
  struct hd_service_cfg file = {.config = cli->config,
                                .config_given = cli->config_given};
  hd_service_cfg_defaults(&file);
  unsigned mask = 0;
  const char *path = cli->config ? cli->config : HD_SERVICE_CONFIG;
  int rc = load(path, &file, &mask, why, whylen);
  if (rc < 0) return -1;
  if (rc == 1 && cli->config_given) {
    hc_fmt(why, whylen, "%s: no such file", path);
    return -1;
  }
  /* the command line wins where it said something */
  *out = file;
  out->cli = cli->cli;
  if (cli->cli & HD_SVC_PORT) out->port = cli->port;
  if (cli->cli & HD_SVC_LISTEN)
    memcpy(out->listen_addr, cli->listen_addr, sizeof out->listen_addr);
  if (cli->cli & HD_SVC_AUTH) out->munge = cli->munge;
  if (cli->cli & HD_SVC_KEY_FILE)
    memcpy(out->key_file, cli->key_file, sizeof out->key_file);
  if (cli->cli & HD_SVC_MUNGE_SOCKET)
    memcpy(out->munge_socket, cli->munge_socket, sizeof out->munge_socket);
  if (cli->cli & HD_SVC_ALLOW_ROOT) out->allow_root = cli->allow_root;
  if (cli->cli & HD_SVC_STOP) out->drain = cli->drain;
  if (cli->cli & HD_SVC_DRAIN_TIMEOUT) out->drain_timeout = cli->drain_timeout;
  if (cli->cli & HD_SVC_SOCKET)
    memcpy(out->socket, cli->socket, sizeof out->socket);
  out->set = mask | cli->cli;
  out->file_found = rc == 0;
  return 0;
}
