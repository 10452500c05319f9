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

/* horad --service: serves jobs on `port` (every address, or listen_addr)
 * until SIGTERM; as root only with allow_root. Returns horad's exit
 * status. */
int hd_service_main(const char *key_file, const char *listen_addr, int port,
                    int allow_root);

/* horad --service-client HOST:PORT: reads the bootstrap line on stdin,
 * has the service there start horad with `args`, relays its output to
 * stdout and returns its exit status (255 when the service cannot be
 * reached or refuses), as ssh does. */
int hd_service_client_main(const char *target, const char *key_file,
                           int nargs, char **args);

#endif
