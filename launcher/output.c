/* output.c -- prints ranks' output with horovodrun's gloo prefix.
 *
 * Each (rank, stream) has a buffer; bytes wait there until a '\n' or '\r'
 * arrives, and each finished line is printed as "[rank]<stdout>:line" with
 * its own terminator and one write(), so lines of different ranks never mix
 * mid-line (horarun is single-threaded; one write per line also keeps them
 * whole against other writers of the same terminal or pipe).
 *
 * '\r' lines (progress bars). Like horovodrun, a segment ended by '\r' is
 * printed as soon as the '\r' arrives, prefixed, with the '\r' kept: on a
 * terminal the next update of the same rank redraws the bar in place, and
 * in a log every update is a separate prefixed record that `tr '\r' '\n'`
 * or less(1) shows readably. Two refinements over horovodrun:
 *   - "\r\n" is one terminator (no empty prefixed line after each line of a
 *     CRLF program), also when the two bytes arrive in separate chunks;
 *   - when another rank or stream prints while a '\r' line is the last
 *     thing on the terminal, a '\n' ends that line first (on the fd that
 *     holds it), so the progress line is kept instead of being overwritten
 *     and garbled by the other line.
 * Lines longer than HR_LINE_MAX are printed in pieces of that size (cut at
 * a UTF-8 character boundary), each ended by '\n'. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "output.h"

#define TAIL_LINE_MAX 1024 /* bytes kept of each tail line */
#define FILES_OPEN_MAX 256 /* rank output files kept open at once */

struct src { /* one (rank, stream) */
  int rank, stream;
  unsigned char *buf; /* bytes of the unfinished line */
  size_t len, cap;
  int cr_pending; /* the last byte seen was a '\r': a '\n' may complete it */
  int file_fd;    /* DIR/rank.N/<stream> once opened, else -1 */
  int file_dead;  /* writing the file failed: no more tries */
};

struct tail { /* ring of a rank's last stderr lines */
  char *line[HR_TAIL_LINES];
  int n, next;
  int last_cr; /* the newest line ended with '\r': the next replaces it */
};

struct rank_out {
  struct src s[2];
  struct tail tail;
};

struct hr_out {
  struct hr_out_cfg cfg;
  char *dir;
  int width; /* digits of the rank in DIR/rank.N */
  struct rank_out *r;
  unsigned char *scratch;
  size_t scratch_cap;
  const struct src *cr_open; /* its '\r' line is the last thing on cr_fd */
  int cr_fd;
  int dead[2]; /* out_fd / err_fd failed: output for it is dropped */
  int reader_gone;
  int files_open;
  time_t ts_sec;
  char ts[64];
};

/* ---- writing ----------------------------------------------------------- */

/* Writes all of p; returns 0 or -errno. Waits when fd is non-blocking. */
static int write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w >= 0) {
      c += w;
      n -= (size_t)w;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      struct pollfd pfd = {.fd = fd, .events = POLLOUT};
      poll(&pfd, 1, -1);
    } else if (errno != EINTR) {
      return -errno;
    }
  }
  return 0;
}

static void out_write(struct hr_out *o, int fd, const void *p, size_t n) {
  int i = fd == o->cfg.out_fd ? 0 : 1;
  if (o->dead[i]) return;
  int rc = write_all(fd, p, n);
  if (rc == 0) return;
  o->dead[i] = 1;
  if (rc == -EPIPE) o->reader_gone = 1;
}

void hr_say(struct hr_out *o, const char *fmt, ...) {
  char line[4096];
  int n = snprintf(line, sizeof line, "horarun: ");
  va_list ap;
  va_start(ap, fmt);
  n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
  line[n++] = '\n';
  if (o) hr_out_break(o);
  int fd = o ? o->cfg.err_fd : STDERR_FILENO;
  if (write_all(fd, line, (size_t)n) == -EPIPE && o) o->reader_gone = 1;
}

/* ---- the tee into DIR/rank.N/ ------------------------------------------ */

static void file_path(const struct hr_out *o, int rank, int stream, char *path,
                      size_t len) {
  if (stream == 0)
    hc_fmt(path, len, "%s/rank.%0*d", o->dir, o->width, rank);
  else
    hc_fmt(path, len, "%s/rank.%0*d/%s", o->dir, o->width, rank,
           stream == 1 ? "stdout" : "stderr");
}

static void file_write(struct hr_out *o, struct src *s, const void *p,
                       size_t n) {
  if (!o->dir || s->file_dead || n == 0) return;
  char path[4096];
  file_path(o, s->rank, s->stream, path, sizeof path);
  int fd = s->file_fd, rc = 0;
  if (fd < 0) fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0)
    rc = -errno;
  else
    rc = write_all(fd, p, n);
  if (fd >= 0 && s->file_fd < 0) {
    /* Keep it open, unless so many ranks would exhaust the fds. */
    if (o->files_open < FILES_OPEN_MAX) {
      s->file_fd = fd;
      o->files_open++;
    } else {
      close(fd);
    }
  }
  if (rc < 0) {
    s->file_dead = 1;
    hr_say(o,
           "warning: cannot write %s: %s; its output goes only to the "
           "terminal from now on",
           path, strerror(-rc));
  }
}

static void file_close(struct hr_out *o, struct src *s) {
  if (s->file_fd < 0) return;
  close(s->file_fd);
  s->file_fd = -1;
  o->files_open--;
}

/* mkdir -p; returns 0 or -errno. */
static int mkdir_p(const char *dir) {
  char path[4096];
  hc_fmt(path, sizeof path, "%s", dir);
  for (char *p = path + 1;; p++) {
    if (*p != '/' && *p != '\0') continue;
    char c = *p;
    *p = '\0';
    if (mkdir(path, 0777) < 0 && errno != EEXIST) return -errno;
    *p = c;
    if (!c) break;
  }
  struct stat st;
  if (stat(dir, &st) < 0) return -errno;
  return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

/* Creates DIR/rank.N/ and empty stdout/stderr files for every rank. */
static int make_files(struct hr_out *o, char *err, size_t errlen) {
  int rc = mkdir_p(o->dir);
  char path[4096];
  hc_fmt(path, sizeof path, "%s", o->dir);
  for (int r = 0; rc == 0 && r < o->cfg.np; r++) {
    for (int stream = 0; rc == 0 && stream <= 2; stream++) {
      file_path(o, r, stream, path, sizeof path);
      if (stream == 0) {
        if (mkdir(path, 0777) < 0 && errno != EEXIST) rc = -errno;
        continue;
      }
      int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
      if (fd < 0)
        rc = -errno;
      else
        close(fd);
    }
  }
  if (rc < 0)
    hc_fmt(err, errlen, "--output-filename: cannot create %s: %s", path,
           strerror(-rc));
  return rc < 0 ? -1 : 0;
}

/* ---- the tail of stderr ------------------------------------------------ */

static void tail_push(struct tail *t, const unsigned char *p, size_t n,
                      int ends_cr) {
  if (t->last_cr && t->n > 0) { /* replace the progress line */
    t->next = (t->next + HR_TAIL_LINES - 1) % HR_TAIL_LINES;
    t->n--;
  }
  size_t keep = HC_MIN(n, (size_t)TAIL_LINE_MAX);
  char *s = malloc(keep + 4);
  if (s) {
    memcpy(s, p, keep);
    strcpy(s + keep, n > keep ? "..." : "");
  }
  free(t->line[t->next]);
  t->line[t->next] = s;
  t->next = (t->next + 1) % HR_TAIL_LINES;
  if (t->n < HR_TAIL_LINES) t->n++;
  t->last_cr = ends_cr;
}

size_t hr_out_print_tail(struct hr_out *o, int rank) {
  const struct tail *t = &o->r[rank].tail;
  static const char head[] = "horarun: last lines of its stderr:\n";
  size_t len = sizeof head, k = 0;
  for (int i = 0; i < t->n; i++)
    len += 4 + TAIL_LINE_MAX + 4 + 1;
  char *buf = malloc(len);
  if (!buf || t->n == 0) {
    free(buf);
    return 0;
  }
  size_t off = (size_t)snprintf(buf, len, "%s", head);
  for (int i = 0; i < t->n; i++) {
    int idx = (t->next - t->n + i + 2 * HR_TAIL_LINES) % HR_TAIL_LINES;
    if (!t->line[idx]) continue;
    off += (size_t)snprintf(buf + off, len - off, "    %s\n", t->line[idx]);
    k++;
  }
  hr_out_break(o);
  if (write_all(o->cfg.err_fd, buf, off) == -EPIPE) o->reader_gone = 1;
  free(buf);
  return k;
}

/* ---- printing lines ---------------------------------------------------- */

static const char *timestamp(struct hr_out *o) {
  time_t now = time(NULL);
  if (now != o->ts_sec) {
    struct tm tm;
    localtime_r(&now, &tm);
    /* asctime() without its newline: "Mon Jan  1 12:00:00 2024". */
    strftime(o->ts, sizeof o->ts, "%a %b %e %H:%M:%S %Y", &tm);
    o->ts_sec = now;
  }
  return o->ts;
}

static int src_fd(const struct hr_out *o, const struct src *s) {
  return s->stream == 1 ? o->cfg.out_fd : o->cfg.err_fd;
}

void hr_out_break(struct hr_out *o) {
  if (!o || !o->cr_open) return;
  o->cr_open = NULL;
  out_write(o, o->cr_fd, "\n", 1);
}

/* Prints one prefixed line with a single write. */
static void emit_one(struct hr_out *o, struct src *s, const unsigned char *c,
                     size_t n, const char *term, size_t tlen) {
  if (o->cr_open && o->cr_open != s) hr_out_break(o);
  size_t need = 128 + n + tlen;
  if (need > o->scratch_cap) {
    unsigned char *b = realloc(o->scratch, need);
    if (!b) return;
    o->scratch = b;
    o->scratch_cap = need;
  }
  int k = snprintf((char *)o->scratch, 128,
                   "%s[%d]<%s>:", o->cfg.prefix_timestamp ? timestamp(o) : "",
                   s->rank, s->stream == 1 ? "stdout" : "stderr");
  memcpy(o->scratch + k, c, n);
  memcpy(o->scratch + k + n, term, tlen);
  out_write(o, src_fd(o, s), o->scratch, (size_t)k + n + tlen);
  int lone_cr = tlen == 1 && term[0] == '\r';
  if (s->stream == 2) tail_push(&o->r[s->rank].tail, c, n, lone_cr);
  o->cr_open = lone_cr ? s : NULL;
  o->cr_fd = src_fd(o, s);
}

/* Where to cut a piece of at most `max` bytes of p (which holds more than
 * max) so that no UTF-8 character is split. */
static size_t utf8_cut(const unsigned char *p, size_t max) {
  size_t cut = max;
  while (cut > max - 3 && (p[cut] & 0xC0) == 0x80)
    cut--;
  return (p[cut] & 0xC0) == 0x80 ? max : cut;
}

/* Prints a line, in HR_LINE_MAX pieces when it is longer. */
static void emit(struct hr_out *o, struct src *s, const unsigned char *c,
                 size_t n, const char *term, size_t tlen) {
  while (n > HR_LINE_MAX) {
    size_t cut = utf8_cut(c, HR_LINE_MAX);
    emit_one(o, s, c, cut, "\n", 1);
    c += cut;
    n -= cut;
  }
  emit_one(o, s, c, n, term, tlen);
}

static int buf_append(struct src *s, const unsigned char *p, size_t n) {
  if (s->len + n > s->cap) {
    size_t cap = s->cap ? s->cap : 256;
    while (cap < s->len + n)
      cap *= 2;
    unsigned char *b = realloc(s->buf, cap);
    if (!b) return -1;
    s->buf = b;
    s->cap = cap;
  }
  memcpy(s->buf + s->len, p, n);
  s->len += n;
  return 0;
}

/* Keeps an unterminated line from growing past HR_LINE_MAX. */
static void flush_long(struct hr_out *o, struct src *s) {
  size_t off = 0;
  while (s->len - off > HR_LINE_MAX) {
    size_t cut = utf8_cut(s->buf + off, HR_LINE_MAX);
    emit_one(o, s, s->buf + off, cut, "\n", 1);
    off += cut;
  }
  memmove(s->buf, s->buf + off, s->len - off);
  s->len -= off;
}

/* The '\n' of a "\r\n" whose '\r' came in an earlier chunk. */
static void finish_crlf(struct hr_out *o, struct src *s) {
  struct tail *t = &o->r[s->rank].tail;
  if (s->stream == 2) t->last_cr = 0;
  if (o->cr_open != s) return; /* another line already ended it */
  o->cr_open = NULL;
  out_write(o, src_fd(o, s), "\n", 1);
}

static const unsigned char *find_eol(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i] == '\n' || p[i] == '\r') return p + i;
  return NULL;
}

void hr_out_data(struct hr_out *o, int rank, int stream, const void *data,
                 size_t n) {
  struct src *s = &o->r[rank].s[stream == 1 ? 0 : 1];
  const unsigned char *p = data;
  file_write(o, s, p, n);
  while (n > 0) {
    if (s->cr_pending) {
      s->cr_pending = 0;
      if (p[0] == '\n' && s->len == 0) {
        finish_crlf(o, s);
        p++, n--;
        continue;
      }
    }
    const unsigned char *t = find_eol(p, n);
    if (!t) {
      if (buf_append(s, p, n) == 0) flush_long(o, s);
      return;
    }
    size_t seg = (size_t)(t - p), tlen = 1;
    if (t[0] == '\r' && seg + 1 < n && t[1] == '\n') tlen = 2;
    if (s->len == 0) {
      emit(o, s, p, seg, (const char *)t, tlen);
    } else if (buf_append(s, p, seg) == 0) {
      emit(o, s, s->buf, s->len, (const char *)t, tlen);
      s->len = 0;
    }
    s->cr_pending = tlen == 1 && t[0] == '\r';
    p += seg + tlen;
    n -= seg + tlen;
  }
}

void hr_out_flush_rank(struct hr_out *o, int rank) {
  for (int i = 0; i < 2; i++) {
    struct src *s = &o->r[rank].s[i];
    if (s->len > 0) emit(o, s, s->buf, s->len, "\n", 1);
    s->len = 0;
    s->cr_pending = 0;
  }
}

void hr_out_end_rank(struct hr_out *o, int rank) {
  hr_out_flush_rank(o, rank);
  for (int i = 0; i < 2; i++) file_close(o, &o->r[rank].s[i]);
}

int hr_out_reader_gone(const struct hr_out *o) {
  return o->reader_gone;
}

/* ---- life cycle -------------------------------------------------------- */

int hr_out_new(struct hr_out **po, const struct hr_out_cfg *cfg, char *err,
               size_t errlen) {
  *po = NULL;
  struct hr_out *o = calloc(1, sizeof *o);
  if (!o || !(o->r = calloc((size_t)cfg->np, sizeof *o->r))) {
    free(o);
    hc_fmt(err, errlen, "out of memory");
    return -1;
  }
  o->cfg = *cfg;
  o->ts_sec = (time_t)-1;
  for (int r = 0; r < cfg->np; r++)
    for (int i = 0; i < 2; i++)
      o->r[r].s[i] = (struct src){.rank = r, .stream = i + 1, .file_fd = -1};
  o->width = 1;
  for (int m = cfg->np - 1; m >= 10; m /= 10)
    o->width++;
  if (cfg->dir) {
    o->dir = strdup(cfg->dir);
    o->cfg.dir = o->dir;
    if (!o->dir || make_files(o, err, errlen) < 0) {
      if (!o->dir) hc_fmt(err, errlen, "out of memory");
      hr_out_free(o);
      return -1;
    }
  }
  *po = o;
  return 0;
}

void hr_out_free(struct hr_out *o) {
  if (!o) return;
  for (int r = 0; r < o->cfg.np; r++) {
    for (int i = 0; i < 2; i++) {
      free(o->r[r].s[i].buf);
      file_close(o, &o->r[r].s[i]);
    }
    for (int i = 0; i < HR_TAIL_LINES; i++)
      free(o->r[r].tail.line[i]);
  }
  free(o->r);
  free(o->scratch);
  free(o->dir);
  free(o);
}
