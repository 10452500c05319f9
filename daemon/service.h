/* service.h -- horad as a resident service, and its client (service.c). */
#ifndef HORA_DAEMON_SERVICE_H
#define HORA_DAEMON_SERVICE_H

#include "auth.h"

#define HD_SERVICE_PORT 17970
#define HD_SERVICE_KEY "/etc/hora/cluster.key"

/* Reads a cluster key file (64 hex digits; a regular file of this user's
 * or root's, mode 0600 or 0400). Returns 0, or -1 with a reason in why. */
int hd_service_load_key(const char *path, unsigned char key[HP_SECRET_LEN],
                        char *why, size_t whylen);

/* How the service and its clients authenticate. */
struct hd_service_cfg {
  const char *key_file;     /* the cluster key (auth key) */
  const char *listen_addr;  /* NULL: every address */
  int port;
  int allow_root;           /* key: the service may run as root (its jobs
                               then do); munge: root's jobs are taken */
  int munge;                /* auth munge: users' MUNGE credentials, each
                               job run as its user (the service is root) */
  const char *munge_socket; /* munged's socket; NULL: MUNGE's default */
};

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
