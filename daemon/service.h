/* service.h -- horad as a resident service, and its client (service.c). */
#ifndef HORA_DAEMON_SERVICE_H
#define HORA_DAEMON_SERVICE_H

#include "auth.h"

#define HD_SERVICE_PORT 17970
#define HD_SERVICE_KEY "/etc/hora/cluster.key"
#define HD_SERVICE_CONFIG "/etc/hora/horad.yaml"
#define HD_SERVICE_SOCKET "/run/hora/horad.sock"

/* Reads a cluster key file (64 hex digits; a regular file of this user's
 * or root's, mode 0600 or 0400). Returns 0, or -1 with a reason in why. */
int hd_service_load_key(const char *path, unsigned char key[HP_SECRET_LEN],
                        char *why, size_t whylen);

/* The service's settings: the command line's, over the configuration
 * file's (service_conf.c), over the defaults. */
enum {
  HD_SVC_PORT = 1u << 0,
  HD_SVC_LISTEN = 1u << 1,
  HD_SVC_AUTH = 1u << 2,
  HD_SVC_KEY_FILE = 1u << 3,
  HD_SVC_MUNGE_SOCKET = 1u << 4,
  HD_SVC_ALLOW_ROOT = 1u << 5,
  HD_SVC_STOP = 1u << 6,
  HD_SVC_DRAIN_TIMEOUT = 1u << 7,
  HD_SVC_SOCKET = 1u << 8
};
struct hd_service_cfg {
  const char *config;       /* the file; NULL: HD_SERVICE_CONFIG if any */
  int config_given;         /* --config: the file must exist */
  char key_file[1024];      /* the cluster key (auth key) */
  char listen_addr[256];    /* "": every address */
  char munge_socket[1024];  /* munged's socket; "": MUNGE's default */
  char socket[108];         /* the local unix socket; "": none */
  int port;
  int allow_root;           /* key: the service may run as root (its jobs
                               then do); munge: root's jobs are taken */
  int munge;                /* auth munge: users' MUNGE credentials, each
                               job run as its user (the service is root) */
  int drain;                /* stop: drain (let the jobs end), not end */
  int drain_timeout;        /* seconds a drain waits (0: as long as it
                               takes), then the jobs are ended */
  unsigned cli;             /* HD_SVC_* given on the command line */
  unsigned set;             /* HD_SVC_* given there or in the file */
  int check;                /* --check: print the settings, start nothing */
  int file_found;           /* the file was read */
};

/* The defaults (config and config_given kept). */
void hd_service_cfg_defaults(struct hd_service_cfg *c);
/* Sets one setting (an HD_SVC_* bit) from its text. Returns 0, or -1 with
 * "expected ..." in why. */
int hd_service_cfg_set(struct hd_service_cfg *c, unsigned bit, const char *v,
                       char *why, size_t whylen);
/* The settings: the file's (cli->config, else HD_SERVICE_CONFIG when it
 * exists) under the command line's (cli, whose cli mask says which it
 * gave). Returns 0, or -1 with "FILE:LINE: ..." in why. */
int hd_service_cfg_load(const struct hd_service_cfg *cli,
                        struct hd_service_cfg *out, char *why,
                        size_t whylen);

/* horad --service: serves jobs on cfg->port until SIGTERM. Returns
 * horad's exit status. */
int hd_service_main(const struct hd_service_cfg *cfg);

/* horad --service-client HOST:PORT: reads the bootstrap line on stdin,
 * has the service there start horad with `args` (authenticated with the
 * key file, or with a MUNGE credential of this user's when cfg->munge),
 * relays its output to stdout and returns its exit status (255 when the
 * service cannot be reached or refuses), as ssh does. */
int hd_service_client_main(const char *target,
                           const struct hd_service_cfg *cfg, int nargs,
                           char **args);

#endif
