/* munge.h -- MUNGE credentials (the service's user authentication), with
 * libmunge loaded at run time: horad builds and runs without it, and
 * only `--auth munge` needs it installed (Debian: munge). */
#ifndef HORA_DAEMON_MUNGE_H
#define HORA_DAEMON_MUNGE_H

#include <stddef.h>
#include <sys/types.h>

#define HD_MUNGE_SOCKET "/run/munge/munge.socket.2" /* munged's default */

/* MUNGE's error numbers that the service tells apart (munge.h's values) */
enum {
  HD_MUNGE_OK = 0,
  HD_MUNGE_ESOCKET = 6, /* munged cannot be reached */
  HD_MUNGE_EXPIRED = 15,
  HD_MUNGE_REWOUND = 16,
  HD_MUNGE_REPLAYED = 17,
  HD_MUNGE_UNAUTHORIZED = 18
};

/* Has munged (on `socket`, or its default when NULL) make a credential for
 * this process's uid and gid, carrying `len` bytes of payload encrypted
 * (AES-128), decodable only by `decoder` (a uid; (uid_t)-1: anyone), valid
 * for `ttl` seconds (0: munged's default). *cred is malloc'd text.
 * Returns 0, or -1 with a reason in why. */
int hd_munge_encode(const char *socket, const void *payload, int len,
                    uid_t decoder, int ttl, char **cred, char *why,
                    size_t whylen);

/* Has munged check `cred`: on success *payload (malloc'd, NUL-terminated
 * past *len bytes), *uid and *gid are the encoder's, and 0 is returned.
 * Otherwise returns MUNGE's error number (HD_MUNGE_EXPIRED, ...; uid and
 * gid are set when MUNGE gives them, else (uid_t)-1), or -1 when libmunge
 * cannot be loaded, with a reason in why either way. */
int hd_munge_decode(const char *socket, const char *cred, void **payload,
                    int *len, uid_t *uid, gid_t *gid, char *why,
                    size_t whylen);

/* 0 when libmunge can be loaded, else -1 with a reason in why. */
int hd_munge_available(char *why, size_t whylen);

#endif
