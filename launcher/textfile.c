/* textfile.c -- a host or config file read whole, within limits (see
 * textfile.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "textfile.h"

#define CHUNK (64u << 10)

/* Checks the bytes p[0..n) that follow what was read before: no NUL and no
 * line too long. *line and *col carry the position between calls. */
static int scan(const char *path, const char *what, const char *p, size_t n,
                unsigned long *line, size_t *col, char *err, size_t errlen) {
  for (size_t i = 0; i < n; i++) {
    if (p[i] == '\n') {
      ++*line;
      *col = 0;
      continue;
    }
    if (p[i] == '\0') {
      hc_fmt(err, errlen, "%s:%lu: NUL byte in the line (not a text file?)",
             path, *line);
      return -1;
    }
    if (++*col > HR_FILE_LINE_MAX) {
      hc_fmt(err, errlen,
             "%s:%lu: line longer than %u bytes (the most a %s allows)", path,
             *line, HR_FILE_LINE_MAX, what);
      return -1;
    }
  }
  return 0;
}

static int too_big(const char *path, const char *what, size_t max, char *err,
                   size_t errlen) {
  if (max % (1u << 20) == 0)
    hc_fmt(err, errlen, "%s: larger than %zu MiB (the most a %s may hold)",
           path, max >> 20, what);
  else
    hc_fmt(err, errlen, "%s: larger than %zu bytes (the most a %s may hold)",
           path, max, what);
  return -1;
}

int hr_read_text(const char *path, const char *what, size_t max, char **text,
                 size_t *len, char *err, size_t errlen) {
  *text = NULL;
  *len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd >= 0 && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    close(fd);
    fd = -1;
    errno = EISDIR;
  }
  if (fd < 0) {
    hc_fmt(err, errlen, "cannot read %s '%s': %s", what, path, strerror(errno));
    return -1;
  }
  if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > max) {
    close(fd);
    return too_big(path, what, max, err, errlen);
  }
  char *buf = NULL;
  size_t n = 0, cap = 0, col = 0;
  unsigned long line = 1;
  int rc = 0;
  for (;;) {
    if (n + 1 >= cap) { /* room for a chunk, one byte past the limit and
                           the final NUL at most */
      size_t ncap = HC_MIN(cap ? cap * 2 : (size_t)CHUNK, max + 2);
      char *g = realloc(buf, ncap);
      if (!g) {
        hc_fmt(err, errlen, "%s: out of memory", path);
        rc = -1;
        break;
      }
      buf = g;
      cap = ncap;
    }
    size_t want = cap - n - 1;
    ssize_t r = read(fd, buf + n, want);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      hc_fmt(err, errlen, "cannot read %s '%s': %s", what, path,
             strerror(errno));
      rc = -1;
      break;
    }
    if (r == 0) break;
    if (scan(path, what, buf + n, (size_t)r, &line, &col, err, errlen) < 0) {
      rc = -1;
      break;
    }
    n += (size_t)r;
    if (n > max) {
      rc = too_big(path, what, max, err, errlen);
      break;
    }
  }
  close(fd);
  if (rc < 0) {
    free(buf);
    return -1;
  }
  if (!buf && !(buf = malloc(1))) {
    hc_fmt(err, errlen, "%s: out of memory", path);
    return -1;
  }
  buf[n] = '\0';
  *text = buf;
  *len = n;
  return 0;
}
