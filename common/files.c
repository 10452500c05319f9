/* files.c -- the join directories' rules, the same for the ranks (libhora)
 * and horad; a connection to a local service's unix socket (horarun and
 * horad). */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common.h"

int hc_join_key_ok(const char *key) {
  size_t n = strlen(key);
  return n && n <= HC_JOIN_KEY_MAX && key[0] != '.' &&
         !key[strspn(key, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVW"
                          "XYZ0123456789._-")];
}

int hc_private_dir(const char *dir, char *why, size_t whylen) {
  if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
    hc_fmt(why, whylen, "cannot create %s: %s", dir, strerror(errno));
    return -1;
  }
  struct stat st;
  if (lstat(dir, &st) < 0) {
    hc_fmt(why, whylen, "cannot use %s: %s", dir, strerror(errno));
    return -1;
  }
  if (!S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077)) {
    hc_fmt(why, whylen, "%s is not a directory private to uid %u (mode 0700)",
           dir, (unsigned)getuid());
    return -1;
  }
  return 0;
}

int hc_unix_connect(const char *path, int nonblock, uid_t *owner) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  size_t n = strlen(path);
  if (owner) *owner = (uid_t)-1;
  if (n >= sizeof sa.sun_path) return -ENAMETOOLONG;
  memcpy(sa.sun_path, path, n + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC |
                               (nonblock ? SOCK_NONBLOCK : 0), 0);
  if (fd < 0) return -errno;
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  struct ucred cr;
  socklen_t cl = sizeof cr;
  if (owner && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0)
    *owner = cr.uid;
  return fd;
}
