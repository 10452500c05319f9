/* timeline.c -- Horovod's timeline (see timeline.h): the JSON writer of
 * host 0, the events every host records, their way to host 0 with the
 * clocks corrected, and starting and stopping it while the job runs. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "timeline.h"

#define FLUSH_BYTES (256u << 10) /* the writer writes when it holds this */
#define PEND_MAX (4u << 20)      /* a host holds at most this for host 0 */
#define BATCH_MAX (1u << 20)     /* bytes of events in one frame */
#define TICK_MS 20               /* writes and batches at least this often */
#define PING_EVERY 50            /* ticks between clock samples */
#define NSAMPLES 16              /* clock samples kept: the best is used */
#define BURST 8                  /* pings in a row when recording starts */
#define FAST_TICKS 20            /* then one every 5 ticks for 100 ticks */
#define HOLD_MS 2000             /* host 0 waits for the others' last events */
#define STOP_WAIT_MS 2000        /* a stop waits this long for the hosts */
#define NAME_MAX_TL 64u          /* an event's name in a frame */
#define ARGS_MAX 4096u           /* its arguments */
#define PATH_MAX_TL 4096u

/* ---- the JSON writer ---------------------------------------------------- */

struct hd_tl_row {
  int pid;
  uint64_t tids; /* threads named so far (hosts < 64) */
  char name[];
};

static void put(struct hd_tl_writer *w, const char *s, size_t n) {
  if (w->err) return;
  if (w->len + n + 1 > w->cap) {
    size_t cap = w->cap ? w->cap : 4096;
    while (cap < w->len + n + 1) cap *= 2;
    char *p = realloc(w->buf, cap);
    if (!p) {
      w->err = ENOMEM;
      return;
    }
    w->buf = p;
    w->cap = cap;
  }
  memcpy(w->buf + w->len, s, n);
  w->len += n;
}

static void putf(struct hd_tl_writer *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void putf(struct hd_tl_writer *w, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof tmp) {
    put(w, tmp, (size_t)n);
    return;
  }
  char *big = malloc((size_t)n + 1);
  if (!big) {
    w->err = ENOMEM;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  put(w, big, (size_t)n);
  free(big);
}

/* The length of the UTF-8 sequence at s (1-4), or 0 when it is not one. */
static int utf8_len(const unsigned char *s) {
  unsigned c = s[0];
  int n;
  unsigned min;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) n = 2, min = 0x80;
  else if (c >= 0xe0 && c <= 0xef) n = 3, min = 0x800;
  else if (c >= 0xf0 && c <= 0xf4) n = 4, min = 0x10000;
  else return 0;
  unsigned v = c & (0x3fu >> (n - 1));
  for (int i = 1; i < n; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    v = v << 6 | (s[i] & 0x3fu);
  }
  if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
  return n;
}

size_t hd_tl_json_str(char *buf, size_t n, const char *s) {
  size_t k = 0;
#define OUT(ch)                                                               \
  do {                                                                        \
    char c_ = (ch); /* evaluated once, whether it fits or not */              \
    if (k + 1 < n) buf[k] = c_;                                               \
    k++;                                                                      \
  } while (0)
  OUT('"');
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p;) {
    int u = utf8_len(p);
    if (*p == '"' || *p == '\\') {
      OUT('\\');
      OUT((char)*p++);
    } else if (*p < 0x20 || u == 0 || *p == 0x7f) {
      /* control characters, and a byte that is no UTF-8: as the code
       * point of the same value */
      char e[8];
      snprintf(e, sizeof e, "\\u%04x", *p++);
      for (int i = 0; e[i]; i++) OUT(e[i]);
    } else {
      for (int i = 0; i < u; i++) OUT((char)*p++);
    }
  }
  OUT('"');
#undef OUT
  if (n) buf[k < n ? k : n - 1] = '\0';
  return k;
}

static void put_str(struct hd_tl_writer *w, const char *s) {
  char tmp[512];
  size_t n = hd_tl_json_str(tmp, sizeof tmp, s);
  if (n < sizeof tmp) {
    put(w, tmp, n);
    return;
  }
  char *big = malloc(n + 1);
  if (!big) {
    w->err = ENOMEM;
    return;
  }
  hd_tl_json_str(big, n + 1, s);
  put(w, big, n);
  free(big);
}

static uint64_t str_hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* The row of tensor `name`, made (with its metadata records) when new. */
static struct hd_tl_row *row_of(struct hd_tl_writer *w, const char *name) {
  if (w->nrows + 1 > w->caprows / 2) {
    size_t cap = w->caprows ? w->caprows * 2 : 64;
    struct hd_tl_row **v = calloc(cap, sizeof *v);
    if (!v) {
      w->err = ENOMEM;
      return NULL;
    }
    for (size_t i = 0; i < w->caprows; i++) {
      struct hd_tl_row *r = w->rows[i];
      if (!r) continue;
      size_t k = str_hash(r->name) & (cap - 1);
      while (v[k]) k = (k + 1) & (cap - 1);
      v[k] = r;
    }
    free(w->rows);
    w->rows = v;
    w->caprows = cap;
  }
  size_t k = str_hash(name) & (w->caprows - 1);
  for (; w->rows[k]; k = (k + 1) & (w->caprows - 1))
    if (!strcmp(w->rows[k]->name, name)) return w->rows[k];
  size_t n = strlen(name);
  struct hd_tl_row *r = malloc(sizeof *r + n + 1);
  if (!r) {
    w->err = ENOMEM;
    return NULL;
  }
  memcpy(r->name, name, n + 1);
  r->pid = ++w->next_pid;
  r->tids = 0;
  w->rows[k] = r;
  w->nrows++;
  putf(w, ",\n{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, "
       "\"args\": {\"name\": ", r->pid);
  put_str(w, name);
  putf(w, "}},\n{\"name\": \"process_sort_index\", \"ph\": \"M\", "
       "\"pid\": %d, \"args\": {\"sort_index\": %d}}", r->pid, r->pid);
  return r;
}

int hd_tlw_open(struct hd_tl_writer *w, const char *path, int64_t epoch_us,
                char *why, size_t whylen) {
  memset(w, 0, sizeof *w);
  w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w->fd < 0) {
    int e = errno;
    hc_fmt(why, whylen, "cannot create the timeline file '%s': %s", path,
           strerror(e));
    return -e;
  }
  /* the first record without its ",\n", then as any flush */
  putf(w, "[\n{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0, "
       "\"args\": {\"name\": \"hora\", \"start_time_since_epoch_in_micros\": "
       "%lld}},\n{\"name\": \"process_sort_index\", \"ph\": \"M\", "
       "\"pid\": 0, \"args\": {\"sort_index\": 0}}", (long long)epoch_us);
  w->file_len = 1; /* as if it held "]": the first write replaces it */
  int rc = hd_tlw_flush(w);
  if (rc < 0) {
    hc_fmt(why, whylen, "cannot write the timeline file '%s': %s", path,
           strerror(-rc));
    hd_tlw_close(w);
    return rc;
  }
  return 0;
}

static void name_thread(struct hd_tl_writer *w, struct hd_tl_row *r,
                        int tid) {
  if (tid < 0 || tid >= 64 || (r->tids >> tid & 1) || !w->tid_name) return;
  r->tids |= 1ull << tid;
  char buf[320];
  const char *name = w->tid_name(w->tid_arg, tid, buf, sizeof buf);
  if (!name) return;
  putf(w, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, "
       "\"tid\": %d, \"args\": {\"name\": ", r->pid, tid);
  put_str(w, name);
  put(w, "}}", 2);
}

void hd_tlw_event(struct hd_tl_writer *w, const char *tensor, int tid,
                  char ph, const char *name, int64_t ts, const char *args) {
  if (w->fd < 0 || w->err) return;
  struct hd_tl_row *r = row_of(w, tensor);
  if (!r) return;
  name_thread(w, r, tid);
  putf(w, ",\n{\"ph\": \"%c\"", ph);
  if (ph != 'E') {
    put(w, ", \"name\": ", 10);
    put_str(w, name);
  }
  putf(w, ", \"ts\": %lld, \"pid\": %d, \"tid\": %d", (long long)ts, r->pid,
       tid);
  if (ph == 'X') put(w, ", \"dur\": 0", 10);
  if (args && *args) putf(w, ", \"args\": {%s}", args);
  put(w, "}", 1);
  if (w->len >= FLUSH_BYTES) hd_tlw_flush(w);
}

void hd_tlw_marker(struct hd_tl_writer *w, const char *name, int64_t ts,
                   const char *args) {
  if (w->fd < 0 || w->err) return;
  put(w, ",\n{\"ph\": \"i\", \"name\": ", 21);
  put_str(w, name);
  putf(w, ", \"ts\": %lld, \"pid\": 0, \"s\": \"g\"", (long long)ts);
  if (args && *args) putf(w, ", \"args\": {%s}", args);
  put(w, "}", 1);
  if (w->len >= FLUSH_BYTES) hd_tlw_flush(w);
}

int hd_tlw_flush(struct hd_tl_writer *w) {
  if (w->fd < 0) return -EBADF;
  if (!w->err && !w->len) return 0;
  if (!w->err) put(w, "]", 1);
  if (w->err) return -w->err;
  /* over the ']' that ends the file: it parses again once this is in */
  uint64_t off = w->file_len - 1;
  size_t done = 0;
  while (done < w->len) {
    ssize_t n = pwrite(w->fd, w->buf + done, w->len - done,
                       (off_t)(off + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      w->err = n < 0 ? errno : EIO;
      return -w->err;
    }
    done += (size_t)n;
  }
  w->file_len = off + w->len;
  w->len = 0;
  return 0;
}

int hd_tlw_close(struct hd_tl_writer *w) {
  int rc = 0;
  if (w->fd >= 0) {
    rc = hd_tlw_flush(w);
    if (close(w->fd) < 0 && !rc) rc = -errno;
  }
  w->fd = -1;
  for (size_t i = 0; i < w->caprows; i++) free(w->rows[i]);
  free(w->rows);
  free(w->buf);
  w->rows = NULL;
  w->buf = NULL;
  w->nrows = w->caprows = w->len = w->cap = 0;
  return rc;
}

/* ---- the job's timeline -------------------------------------------------- */

enum {
  TL_START = 1, TL_STOP, TL_STOPPED, TL_PING, TL_PONG, TL_EVENTS,
  TL_FINAL,    /* a host's ranks ended: its last events came before this */
  TL_FINAL_OK, /* host 0 has them */
};
/* where a tensor's row is: negotiating, queued, running, waiting for its
 * data while running, in an activity while running */
enum { ST_NONE, ST_NEGO, ST_QUEUE, ST_RUN, ST_WAIT, ST_ACT };

struct sample {
  uint64_t rtt;
  int64_t offset; /* host 0's clock minus ours */
};

struct hd_timeline {
  int active; /* first: hd_tl_on() reads it */
  struct hd_job *job;
  uint32_t epoch;  /* the current timeline (host 0 numbers them) */
  int mark_cycles;
  uint64_t last_cycle;
  uv_timer_t timer;
  int timer_on, closed;
  unsigned ticks;
  /* host 0 */
  struct hd_tl_writer w;
  int writing;
  char *path;
  uint64_t t0;              /* hc_now_ns() at the start */
  uint64_t *peer_dropped;   /* events each host says it dropped */
  struct hd_rank *stop_rank; /* rank 0's stop waits for the hosts */
  uint64_t stop_id;
  uint64_t stop_deadline;
  unsigned char *stopped; /* per host: it sent its last events */
  int stop_left;
  /* other hosts: events for host 0 */
  struct hp_wbuf pend;
  uint32_t npend;
  uint64_t dropped;
  struct sample samples[NSAMPLES];
  int nsamples, next_sample;
  int64_t last_sent; /* times sent never go back, whatever the offset */
  int burst;         /* pings of the burst so far */
  unsigned since;    /* ticks since recording started */
  /* its ranks ended: DONE waits until host 0 has the last events (host
   * 0: every other host's), or hold_deadline */
  int hold, held;
  uint64_t hold_deadline;
  unsigned char *final; /* host 0: the hosts whose last events are in */
};

static int is_host0(const struct hd_job *job) {
  return job->desc.host_index == 0;
}

static int64_t wall_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static const char *host_label(void *arg, int tid, char *buf, size_t n) {
  struct hd_job *job = arg;
  if (!job->multi) return NULL;
  hd_host_name(job, tid, buf, n);
  return buf;
}

static struct hd_timeline *tl_get(struct hd_job *job) {
  if (job->tl) return job->tl;
  struct hd_timeline *tl = calloc(1, sizeof *tl);
  if (!tl) return NULL;
  tl->job = job;
  tl->w.fd = -1;
  hp_wbuf_init(&tl->pend);
  job->tl = tl;
  return tl;
}

static void send_to(struct hd_job *job, int host, struct hp_wbuf *w) {
  if (job->link && job->link->send_frames) job->link->send_frames(job, host,
                                                                  w);
}

static void begin(struct hp_wbuf *w, uint8_t kind) {
  hp_frame_begin(w, HP_MSG_TIMELINE, 0);
  hp_put_u8(w, kind);
}

static void ping(struct hd_job *job) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  begin(&w, TL_PING);
  hp_put_u64(&w, hc_now_ns());
  hp_frame_end(&w);
  send_to(job, 0, &w);
  hp_wbuf_free(&w);
}

static void on_tick(uv_timer_t *t);

static void timer_on(struct hd_timeline *tl) {
  if (tl->timer_on || tl->closed) return;
  if (!tl->timer.loop) {
    uv_timer_init(tl->job->daemon->loop, &tl->timer);
    tl->timer.data = tl;
  }
  tl->timer_on = 1;
  uv_timer_start(&tl->timer, on_tick, TICK_MS, TICK_MS);
}

/* The offset of the best sample: the one of the shortest round trip. */
static int offset_of(const struct hd_timeline *tl, int64_t *off) {
  int best = -1;
  for (int i = 0; i < tl->nsamples; i++)
    if (best < 0 || tl->samples[i].rtt < tl->samples[best].rtt) best = i;
  if (best < 0) return -1;
  *off = tl->samples[best].offset;
  return 0;
}

/* Sends the events recorded here (a host other than 0); with `force`
 * also before the clock was measured (uncorrected, the job ending). */
static void send_events(struct hd_timeline *tl, int force) {
  struct hd_job *job = tl->job;
  int64_t off = 0;
  if (!tl->npend && !tl->dropped) return;
  /* the first samples may have waited on a busy host 0: the events wait
   * for the whole burst (unless they must go now) */
  if ((offset_of(tl, &off) < 0 || tl->nsamples < BURST) && !force) return;
  struct hp_rbuf r;
  hp_rbuf_init(&r, tl->pend.data, tl->pend.len);
  while (!r.err && (r.off < r.len || tl->dropped)) {
    struct hp_wbuf w;
    hp_wbuf_init(&w);
    begin(&w, TL_EVENTS);
    hp_put_u32(&w, tl->epoch);
    hp_put_u64(&w, tl->dropped);
    tl->dropped = 0;
    size_t count_at = w.len;
    hp_put_u32(&w, 0);
    uint32_t n = 0;
    /* records: u8 ph, u64 ts (ours), str tensor, str name, str args */
    while (r.off < r.len && w.len - w.frame_start < BATCH_MAX) {
      uint8_t ph = hp_get_u8(&r);
      uint64_t ts = hp_get_u64(&r);
      size_t a, b, c;
      const unsigned char *ta = hp_get_bytes(&r, &a);
      const unsigned char *na = hp_get_bytes(&r, &b);
      const unsigned char *ar = hp_get_bytes(&r, &c);
      if (r.err || !ta || !na || !ar) break;
      int64_t t0 = (int64_t)ts + off;
      if (t0 < tl->last_sent) t0 = tl->last_sent;
      tl->last_sent = t0;
      hp_put_u8(&w, ph);
      hp_put_u64(&w, (uint64_t)t0);
      hp_put_bytes(&w, ta, a);
      hp_put_bytes(&w, na, b);
      hp_put_bytes(&w, ar, c);
      n++;
    }
    unsigned char *cp = w.data + count_at;
    cp[0] = (unsigned char)n;
    cp[1] = (unsigned char)(n >> 8);
    cp[2] = (unsigned char)(n >> 16);
    cp[3] = (unsigned char)(n >> 24);
    hp_frame_end(&w);
    send_to(job, 0, &w);
    hp_wbuf_free(&w);
  }
  hp_wbuf_reset(&tl->pend);
  tl->npend = 0;
}

void hd_tl_flush(struct hd_job *job) {
  struct hd_timeline *tl = job->tl;
  if (!tl) return;
  if (is_host0(job)) {
    if (tl->writing) hd_tlw_flush(&tl->w);
  } else {
    send_events(tl, !job->mesh_up || job->done_sent);
  }
}

static void close_file(struct hd_timeline *tl) {
  if (!tl->writing) return;
  tl->writing = 0;
  uint64_t lost = 0;
  for (uint32_t h = 0; tl->peer_dropped && h < tl->job->desc.nhosts; h++)
    lost += tl->peer_dropped[h];
  int rc = hd_tlw_close(&tl->w);
  if (rc < 0)
    hc_error("the timeline file '%s' is incomplete: %s", tl->path,
             strerror(-rc));
  else
    hc_debug("timeline '%s' closed%s", tl->path, lost ? " (events dropped)"
                                                      : "");
}

/* Host 0: rank 0's stop completes (every host answered, or time is up). */
static void stop_done(struct hd_timeline *tl) {
  close_file(tl);
  free(tl->stopped);
  tl->stopped = NULL;
  tl->stop_left = 0;
  struct hd_rank *r = tl->stop_rank;
  tl->stop_rank = NULL;
  if (r && !r->gone) {
    hd_complete(r, tl->stop_id, 0, NULL);
    hd_flush_wakeups(tl->job);
  }
}

/* Host 0: every other host's last events are in (or it is gone). */
static int finals_in(struct hd_job *job) {
  const struct hd_timeline *tl = job->tl;
  if (!is_host0(job)) return !tl->hold;
  /* (a host whose ranks have shut hora down is "left", but its last
   * events come when they have ended) */
  for (uint32_t h = 1; job->peers && h < job->desc.nhosts; h++)
    if (!(tl->final && tl->final[h]) && hd_mesh_conn(job, (int)h))
      return 0;
  return 1;
}

int hd_tl_hold_done(struct hd_job *job) {
  struct hd_timeline *tl = job->tl;
  if (!tl || tl->held || tl->closed || !job->multi) return 0;
  if (tl->hold) return 1;
  if (is_host0(job)) {
    if (!tl->writing || finals_in(job)) return 0;
  } else {
    if (!tl->active || !hd_mesh_conn(job, 0)) return 0;
    send_events(tl, 1);
    struct hp_wbuf w;
    hp_wbuf_init(&w);
    begin(&w, TL_FINAL);
    hp_put_u32(&w, tl->epoch);
    hp_frame_end(&w);
    send_to(job, 0, &w);
    hp_wbuf_free(&w);
  }
  hc_debug("timeline: DONE waits for the last events to reach host 0's "
           "file");
  tl->held = 1; /* once */
  tl->hold = 1;
  tl->hold_deadline = hc_now_ns() + (uint64_t)HOLD_MS * 1000000u;
  timer_on(tl);
  return 1;
}

static void final_ok(struct hd_timeline *tl) {
  if (!tl->hold) return;
  tl->hold = 0;
  hd_maybe_done(tl->job);
}

static void on_tick(uv_timer_t *t) {
  struct hd_timeline *tl = t->data;
  struct hd_job *job = tl->job;
  tl->ticks++;
  if (is_host0(job)) {
    if (tl->writing && hd_tlw_flush(&tl->w) < 0 && tl->w.err) {
      hc_error("cannot write the timeline file '%s': %s; it stops here",
               tl->path, strerror(tl->w.err));
      tl->active = 0;
      close_file(tl);
    }
    if (tl->stop_rank && hc_now_ns() > tl->stop_deadline) {
      hc_warn_rl("timeline: %d host(s) did not send their last events "
                 "within %d ms of the stop; the file ends without them",
                 tl->stop_left, STOP_WAIT_MS);
      stop_done(tl);
    }
  } else if (tl->active) {
    if ((++tl->since <= 5 * FAST_TICKS && tl->since % 5 == 0) ||
        tl->ticks % PING_EVERY == 0)
      ping(job);
    send_events(tl, 0);
  }
  if (tl->hold && (finals_in(job) || hc_now_ns() > tl->hold_deadline)) {
    tl->hold = 0;
    hd_maybe_done(job); /* closes this timer too */
    return;
  }
  if (!tl->active && !tl->stop_rank && !tl->writing) {
    tl->timer_on = 0;
    uv_timer_stop(&tl->timer);
  }
}

/* Host 0 opens `path` for timeline `epoch`. */
static int open_file(struct hd_timeline *tl, const char *path, char *why,
                     size_t whylen) {
  struct hd_job *job = tl->job;
  close_file(tl);
  free(tl->path);
  tl->path = strdup(path);
  if (!tl->path) {
    hc_fmt(why, whylen, "horad is out of memory");
    return HORA_ENOMEM;
  }
  int64_t epoch_us = wall_us();
  tl->t0 = hc_now_ns();
  if (hd_tlw_open(&tl->w, path, epoch_us, why, whylen) < 0) return HORA_EIO;
  tl->w.tid_name = host_label;
  tl->w.tid_arg = job;
  tl->writing = 1;
  if (!tl->peer_dropped && job->desc.nhosts > 1)
    tl->peer_dropped = calloc(job->desc.nhosts, sizeof *tl->peer_dropped);
  else if (tl->peer_dropped)
    memset(tl->peer_dropped, 0,
           job->desc.nhosts * sizeof *tl->peer_dropped);
  return 0;
}

static void broadcast(struct hd_job *job, uint8_t kind, uint32_t epoch,
                      int mark) {
  for (uint32_t h = 1; h < job->desc.nhosts; h++) {
    struct hp_wbuf w;
    hp_wbuf_init(&w);
    begin(&w, kind);
    hp_put_u32(&w, epoch);
    hp_put_u8(&w, (uint8_t)mark);
    hp_frame_end(&w);
    send_to(job, (int)h, &w);
    hp_wbuf_free(&w);
  }
}

/* Another host begins recording timeline `epoch`. */
static void start_here(struct hd_timeline *tl, uint32_t epoch) {
  if (tl->active && tl->epoch != epoch) send_events(tl, 1);
  hp_wbuf_reset(&tl->pend);
  tl->npend = 0;
  tl->dropped = 0;
  tl->epoch = epoch;
  tl->active = 1;
  tl->burst = 0;
  tl->since = 0;
  timer_on(tl);
  if (tl->job->mesh_up) ping(tl->job);
}

void hd_tl_init(struct hd_job *job) {
  const char *f = hk_str(&job->knobs, timeline_filename);
  if (!f || !*f || !strcmp(f, "DYNAMIC")) return;
  struct hd_timeline *tl = tl_get(job);
  if (!tl) {
    hc_error("out of memory: no timeline");
    return;
  }
  tl->mark_cycles = hk_int(&job->knobs, timeline_mark_cycles) != 0;
  if (!is_host0(job)) {
    start_here(tl, 1);
    return;
  }
  char path[PATH_MAX_TL + 512], why[HP_MSG_MAX + 1];
  hd_job_path(job, f, path, sizeof path);
  if (open_file(tl, path, why, sizeof why) < 0) {
    hc_error("%s (HORA_TIMELINE / --timeline-filename): the job runs "
             "without a timeline", why);
    return;
  }
  tl->epoch = 1;
  tl->active = 1;
  timer_on(tl);
}

void hd_tl_close(struct hd_job *job) {
  struct hd_timeline *tl = job->tl;
  if (!tl || tl->closed) return;
  if (!is_host0(job) && tl->active) send_events(tl, 1);
  tl->active = 0;
  if (tl->stop_rank) stop_done(tl);
  close_file(tl);
  tl->closed = 1;
  if (tl->timer.loop && !uv_is_closing((uv_handle_t *)&tl->timer))
    uv_close((uv_handle_t *)&tl->timer, NULL);
}

void hd_tl_free(struct hd_job *job) {
  struct hd_timeline *tl = job->tl;
  if (!tl) return;
  if (tl->writing) hd_tlw_close(&tl->w);
  hp_wbuf_free(&tl->pend);
  free(tl->path);
  free(tl->peer_dropped);
  free(tl->stopped);
  free(tl->final);
  free(tl);
  job->tl = NULL;
}

/* ---- starting and stopping from a rank ---------------------------------- */

#define TL_F_START 1u
#define TL_F_MARK 2u

static void stop_timeline(struct hd_timeline *tl, struct hd_rank *r,
                          uint64_t id) {
  struct hd_job *job = tl->job;
  tl->active = 0;
  tl->stop_rank = r;
  tl->stop_id = id;
  tl->stop_left = 0;
  uint32_t n = job->desc.nhosts;
  free(tl->stopped);
  tl->stopped = n > 1 ? calloc(n, 1) : NULL;
  for (uint32_t h = 1; tl->stopped && h < n; h++) {
    struct hd_peer *p = &job->peers[h];
    if (p->lost || p->left || !hd_mesh_conn(job, (int)h)) continue;
    tl->stop_left++;
  }
  if (!tl->stop_left) {
    stop_done(tl);
    return;
  }
  broadcast(job, TL_STOP, tl->epoch, 0);
  tl->stop_deadline = hc_now_ns() + (uint64_t)STOP_WAIT_MS * 1000000u;
  timer_on(tl);
}

void hd_tl_request(struct hd_rank *r, const struct hp_sqe *e) {
  struct hd_job *job = r->job;
  char why[HP_MSG_MAX + 1];
  int start = (e->flags & TL_F_START) != 0;
  if (r->info.rank != 0) { /* Horovod's: only the coordinator's counts */
    hd_complete(r, e->id, 0, NULL);
    return;
  }
  struct hd_timeline *tl = tl_get(job);
  if (!tl) {
    hd_complete(r, e->id, HORA_ENOMEM, "horad is out of memory");
    return;
  }
  if (tl->stop_rank) {
    hd_complete(r, e->id, HORA_EAGAIN, "rank 0: the timeline is still "
                "being stopped");
    return;
  }
  if (!start) {
    if (!tl->active && !tl->writing) {
      hd_complete(r, e->id, 0, NULL);
      return;
    }
    stop_timeline(tl, r, e->id);
    return;
  }
  /* the path lies in the rank's arena: aux_count bytes at aux_offset */
  const struct hp_shm_hdr *L = &r->layout;
  uint64_t off = e->aux_offset, len = e->aux_count;
  if (!(e->flags & HP_F_AUX) || len == 0 || len > PATH_MAX_TL ||
      off < L->arena_off || off > L->arena_off + L->arena_size ||
      len > L->arena_off + L->arena_size - off) {
    hc_fmt(why, sizeof why, "rank 0: bad timeline request (the file name "
           "must be 1 to %u bytes in the arena)", PATH_MAX_TL);
    hd_complete(r, e->id, HORA_EINVAL, why);
    return;
  }
  char path[PATH_MAX_TL + 1];
  memcpy(path, r->shm + off, len);
  path[len] = '\0';
  if (strlen(path) != len) {
    hd_complete(r, e->id, HORA_EINVAL, "rank 0: the timeline's file name "
                "holds a NUL byte");
    return;
  }
  tl->mark_cycles = (e->flags & TL_F_MARK) != 0;
  if (tl->writing && tl->path && !strcmp(tl->path, path)) {
    tl->active = 1; /* the same file: it goes on */
    hd_complete(r, e->id, 0, NULL);
    return;
  }
  int rc = open_file(tl, path, why, sizeof why);
  if (rc < 0) {
    char msg[HP_MSG_MAX + 1];
    hc_fmt(msg, sizeof msg, "rank 0: %s", why);
    tl->active = 0;
    hd_complete(r, e->id, rc, msg);
    return;
  }
  tl->epoch++;
  tl->active = 1;
  timer_on(tl);
  broadcast(job, TL_START, tl->epoch, tl->mark_cycles);
  hd_complete(r, e->id, 0, NULL);
}

/* ---- frames between the hosts -------------------------------------------- */

static int bad(char *why, size_t n, const char *what) {
  hc_fmt(why, n, "bad TIMELINE message (%s)", what);
  return -1;
}

static int take_events(struct hd_timeline *tl, int from, struct hp_rbuf *r,
                       char *why, size_t whylen) {
  uint32_t epoch = hp_get_u32(r);
  uint64_t dropped = hp_get_u64(r);
  uint32_t n = hp_get_u32(r);
  if (r->err) return bad(why, whylen, "short");
  int take = tl->writing && epoch == tl->epoch;
  if (take && dropped) {
    if (tl->peer_dropped) tl->peer_dropped[from] += dropped;
    char args[96];
    hc_fmt(args, sizeof args, "\"host\": %d, \"count\": %llu", from,
           (unsigned long long)dropped);
    hd_tlw_marker(&tl->w, "EVENTS_DROPPED",
                  (int64_t)(hc_now_ns() - tl->t0) / 1000, args);
  }
  for (uint32_t i = 0; i < n; i++) {
    uint8_t ph = hp_get_u8(r);
    uint64_t ts = hp_get_u64(r);
    char *tensor = hp_get_str(r, HP_NAME_MAX);
    char *name = hp_get_str(r, NAME_MAX_TL);
    char *args = hp_get_str(r, ARGS_MAX);
    int ok = !r->err && tensor && name && args &&
             (ph == 'B' || ph == 'E' || ph == 'X');
    if (ok && take)
      hd_tlw_event(&tl->w, tensor, from, (char)ph, name,
                   ((int64_t)ts - (int64_t)tl->t0) / 1000, args);
    free(tensor);
    free(name);
    free(args);
    if (!ok) return bad(why, whylen, "an event");
  }
  if (r->off != r->len) return bad(why, whylen, "trailing bytes");
  return 0;
}

int hd_tl_frame(struct hd_job *job, int from, const unsigned char *p,
                size_t len, char *why, size_t whylen) {
  struct hp_rbuf r;
  hp_rbuf_init(&r, p, len);
  uint8_t kind = hp_get_u8(&r);
  if (r.err) return bad(why, whylen, "empty");
  int h0 = is_host0(job);
  if (h0 == (kind == TL_START || kind == TL_STOP || kind == TL_PONG ||
             kind == TL_FINAL_OK))
    return bad(why, whylen, h0 ? "for another host" : "for host 0");
  if (!h0 && from != 0) return bad(why, whylen, "not from host 0");
  struct hd_timeline *tl = tl_get(job);
  if (!tl) return 0; /* out of memory: no timeline, the job goes on */
  switch (kind) {
  case TL_PING: {
    uint64_t t = hp_get_u64(&r);
    if (r.err || r.off != len) return bad(why, whylen, "PING");
    struct hp_wbuf w;
    hp_wbuf_init(&w);
    begin(&w, TL_PONG);
    hp_put_u64(&w, t);
    hp_put_u64(&w, hc_now_ns());
    hp_frame_end(&w);
    send_to(job, from, &w);
    hp_wbuf_free(&w);
    return 0;
  }
  case TL_PONG: {
    uint64_t t1 = hp_get_u64(&r), t0 = hp_get_u64(&r), t2 = hc_now_ns();
    if (r.err || r.off != len || t1 > t2) return bad(why, whylen, "PONG");
    struct sample *s = &tl->samples[tl->next_sample];
    tl->next_sample = (tl->next_sample + 1) % NSAMPLES;
    if (tl->nsamples < NSAMPLES) tl->nsamples++;
    s->rtt = t2 - t1;
    s->offset = (int64_t)t0 - (int64_t)(t1 + (t2 - t1) / 2);
    if (tl->active && ++tl->burst < BURST) ping(job); /* the next at once */
    return 0;
  }
  case TL_START:
  case TL_STOP: {
    uint32_t epoch = hp_get_u32(&r);
    hp_get_u8(&r); /* mark_cycles: host 0 marks them */
    if (r.err || r.off != len) return bad(why, whylen, "START/STOP");
    if (kind == TL_START) {
      start_here(tl, epoch);
      return 0;
    }
    if (tl->active && tl->epoch == epoch) send_events(tl, 1);
    tl->active = 0;
    struct hp_wbuf w;
    hp_wbuf_init(&w);
    begin(&w, TL_STOPPED);
    hp_put_u32(&w, epoch);
    hp_frame_end(&w);
    send_to(job, 0, &w);
    hp_wbuf_free(&w);
    return 0;
  }
  case TL_STOPPED: {
    uint32_t epoch = hp_get_u32(&r);
    if (r.err || r.off != len) return bad(why, whylen, "STOPPED");
    if (tl->stop_rank && epoch == tl->epoch && tl->stopped &&
        !tl->stopped[from]) {
      tl->stopped[from] = 1;
      if (--tl->stop_left == 0) stop_done(tl);
    }
    return 0;
  }
  case TL_EVENTS:
    return take_events(tl, from, &r, why, whylen);
  case TL_FINAL: {
    hp_get_u32(&r);
    if (r.err || r.off != len) return bad(why, whylen, "FINAL");
    if (tl->writing) hd_tlw_flush(&tl->w);
    if (!tl->final) tl->final = calloc(job->desc.nhosts, 1);
    if (tl->final) tl->final[from] = 1;
    hc_debug("timeline: host %d's last events are in", from);
    struct hp_wbuf w;
    hp_wbuf_init(&w);
    begin(&w, TL_FINAL_OK);
    hp_frame_end(&w);
    send_to(job, from, &w);
    hp_wbuf_free(&w);
    if (tl->hold && finals_in(job)) final_ok(tl);
    return 0;
  }
  case TL_FINAL_OK:
    if (r.off != len) return bad(why, whylen, "FINAL_OK");
    final_ok(tl);
    return 0;
  default:
    return bad(why, whylen, "unknown kind");
  }
}

/* ---- events ------------------------------------------------------------- */

/* Records one event of tensor `tensor` here, now. */
/* A record at `now` (hc_now_ns()'s clock). */
static void record_at(struct hd_job *job, const char *tensor, char ph,
                      const char *name, const char *args, uint64_t now) {
  struct hd_timeline *tl = job->tl;
  if (is_host0(job)) {
    if (tl->writing)
      hd_tlw_event(&tl->w, tensor, 0, ph, name,
                   (int64_t)(now - tl->t0) / 1000, args);
    return;
  }
  size_t a = strlen(tensor), b = strlen(name), c = args ? strlen(args) : 0;
  if (tl->pend.len + a + b + c + 32 > PEND_MAX) {
    tl->dropped++;
    return;
  }
  hp_put_u8(&tl->pend, (uint8_t)ph);
  hp_put_u64(&tl->pend, now);
  hp_put_bytes(&tl->pend, tensor, a);
  hp_put_bytes(&tl->pend, name, b);
  hp_put_bytes(&tl->pend, args ? args : "", c);
  if (tl->pend.err) {
    hp_wbuf_reset(&tl->pend);
    tl->dropped += tl->npend + 1;
    tl->npend = 0;
    return;
  }
  tl->npend++;
}

static void record(struct hd_job *job, const char *tensor, char ph,
                   const char *name, const char *args) {
  record_at(job, tensor, ph, name, args, hc_now_ns());
}

/* "NEGOTIATE_ALLREDUCE", "ALLREDUCE", "CPU_ALLREDUCE" */
static void upper(char *out, size_t n, const char *pre, int coll) {
  const char *s = hd_coll_name(coll);
  hc_fmt(out, n, "%s%s", pre, s ? s : "unknown");
  for (char *p = out; *p; p++)
    if (*p >= 'a' && *p <= 'z') *p = (char)(*p - 'a' + 'A');
}

static int state(const struct hd_timeline *tl, const struct hd_tensor *t) {
  return (t->tl >> 3) == (tl->epoch & 0x1fffffffu) ? (int)(t->tl & 7)
                                                   : ST_NONE;
}

static void set_state(const struct hd_timeline *tl, struct hd_tensor *t,
                      int st) {
  t->tl = (tl->epoch & 0x1fffffffu) << 3 | (uint32_t)st;
}

void hd_tl_submitted_(struct hd_tensor *t, int rank) {
  struct hd_job *job = t->comm->job;
  struct hd_timeline *tl = job->tl;
  char name[64];
  if (state(tl, t) == ST_NONE) {
    upper(name, sizeof name, "NEGOTIATE_", t->meta.coll);
    record(job, t->name, 'B', name, NULL);
    set_state(tl, t, ST_NEGO);
  }
  if (state(tl, t) != ST_NEGO) return;
  hc_fmt(name, sizeof name, "%d", rank);
  record(job, t->name, 'X', name, NULL);
}

void hd_tl_queued_(struct hd_tensor *t) {
  struct hd_job *job = t->comm->job;
  struct hd_timeline *tl = job->tl;
  char name[64];
  if (state(tl, t) == ST_NEGO) record(job, t->name, 'E', "", NULL);
  upper(name, sizeof name, "", t->meta.coll);
  record(job, t->name, 'B', name, NULL);
  record(job, t->name, 'B', "QUEUE", NULL);
  set_state(tl, t, ST_QUEUE);
}

void hd_tl_run_(struct hd_tensor *t) {
  struct hd_job *job = t->comm->job;
  struct hd_timeline *tl = job->tl;
  char name[64];
  if (state(tl, t) != ST_QUEUE) return;
  set_state(tl, t, ST_RUN);
  record(job, t->name, 'E', "", NULL); /* QUEUE */
  upper(name, sizeof name, "CPU_", t->meta.coll);
  record(job, t->name, 'B', name, NULL);
}

/* A wait is recorded when it ends, and only one of WAIT_MIN_NS or more:
 * the engine stops and goes on many times a millisecond around the ring,
 * and a trace of every pause would bury the ones that matter. */
#define WAIT_MIN_NS 200000u

void hd_tl_wait_(struct hd_tensor *t) {
  struct hd_job *job = t->comm->job;
  if (state(job->tl, t) != ST_RUN) return;
  set_state(job->tl, t, ST_WAIT);
  t->tl_wait = hc_now_ns();
}

static void wait_ends(struct hd_job *job, struct hd_tensor *t) {
  uint64_t now = hc_now_ns();
  if (now - t->tl_wait < WAIT_MIN_NS) return;
  record_at(job, t->name, 'B', "WAIT_FOR_DATA", NULL, t->tl_wait);
  record_at(job, t->name, 'E', "", NULL, now);
}

void hd_tl_resume_(struct hd_tensor *t) {
  struct hd_job *job = t->comm->job;
  if (state(job->tl, t) != ST_WAIT) return;
  set_state(job->tl, t, ST_RUN);
  wait_ends(job, t);
}

void hd_tl_act_(struct hd_tensor *t, const char *name) {
  struct hd_job *job = t->comm->job;
  hd_tl_resume_(t); /* what it waited for is here */
  if (state(job->tl, t) != ST_RUN) return;
  set_state(job->tl, t, ST_ACT);
  record(job, t->name, 'B', name, NULL);
}

void hd_tl_act_end_(struct hd_tensor *t) {
  struct hd_job *job = t->comm->job;
  if (state(job->tl, t) != ST_ACT) return;
  set_state(job->tl, t, ST_RUN);
  record(job, t->name, 'E', "", NULL);
}

void hd_tl_end_(struct hd_tensor *t, int status, const char *msg) {
  struct hd_job *job = t->comm->job;
  struct hd_timeline *tl = job->tl;
  int st = state(tl, t);
  if (st == ST_NONE) return;
  set_state(tl, t, ST_NONE);
  if (st == ST_WAIT) wait_ends(job, t);
  if (st == ST_ACT) record(job, t->name, 'E', "", NULL);
  if (st == ST_QUEUE || st == ST_RUN || st == ST_WAIT || st == ST_ACT)
    record(job, t->name, 'E', "", NULL);
  char args[ARGS_MAX];
  size_t k = 0;
  const struct hd_meta *m = &t->meta;
  const struct hd_coll *co = hd_coll(m->coll);
  if (status >= 0 && co && !(co->traits & HORA_CF_CTRL)) {
    k += (size_t)snprintf(args, sizeof args, "\"dtype\": \"%s\", \"shape\": "
                          "\"[", hora_dtype_name((hora_dtype_t)m->dtype));
    if (!m->ndims)
      k += (size_t)snprintf(args + k, sizeof args - k, "%llu",
                            (unsigned long long)m->count);
    for (int i = 0; i < m->ndims && k < sizeof args; i++)
      k += (size_t)snprintf(args + k, sizeof args - k, "%s%lld",
                            i ? ", " : "", (long long)m->shape[i]);
    if (k < sizeof args) snprintf(args + k, sizeof args - k, "]\"");
  } else if (status < 0) {
    char s[HP_MSG_MAX * 6 + 3];
    hd_tl_json_str(s, sizeof s, msg && *msg ? msg
                                            : hora_strerror(status));
    snprintf(args, sizeof args, "\"error\": %s", s);
  } else {
    args[0] = '\0';
  }
  record(job, t->name, 'E', "", args);
}

void hd_tl_cycle_(struct hd_job *job) {
  struct hd_timeline *tl = job->tl;
  if (!is_host0(job) || !tl->writing || !tl->mark_cycles) return;
  uint64_t now = hc_now_ns();
  if (now - tl->last_cycle < 1000000u) return; /* one a millisecond */
  tl->last_cycle = now;
  hd_tlw_marker(&tl->w, "CYCLE_START", (int64_t)(now - tl->t0) / 1000,
                NULL);
}
