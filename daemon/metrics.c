/* metrics.c -- what horad counts of its jobs, and a small HTTP/1.1
 * server on the daemon's loop that serves it at /metrics in Prometheus'
 * text format (version 0.0.4).
 *
 * Counted per host: operations and bytes by collective, data type and
 * communicator; how long operations take, from the first local submission
 * to the completion, and how long their negotiation takes (to the moment
 * they go to their engine); stalls, deadlocks; the TCP bytes of each
 * link to another host (the kernel's count, TCP_INFO); and, where a
 * communicator is coordinated, how late each rank submits: for every
 * operation of two or more submitting ranks, how long after the first of
 * them each one submitted it. On one host the daemon sees every
 * submission's time. Across hosts no clocks are compared: each host's
 * NEGO_READY says how long before it each local rank submitted (on the
 * host's own clock), and the coordinator places each rank at the READY's
 * arrival on its own clock less that offset (the network's one-way delay,
 * tens of microseconds, is counted in the host's lateness).
 *
 * The server: GET (or HEAD) /metrics, 404 for other paths, 405 for other
 * methods, 400 for what is not HTTP; every answer closes the connection.
 * At most HD_METRICS_CONNS connections at once (a new one closes the
 * oldest, so that idle strangers cannot keep a scraper out), each with
 * 10 s for its request and the answer; a request's header may take 4 KiB.
 * Nothing here blocks the loop: sockets are libuv's. */
#define HC_LOG_SUB HC_SUB_METRICS
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "lhist.h"
#include "metrics.h"

/* tcpbytes.c */
int hd_tcp_bytes(int fd, uint64_t *acked, uint64_t *received);

#define HD_METRICS_CONNS 16
#define HD_METRICS_TIMEOUT_MS 10000
#define HD_HTTP_MAX 4096

/* ---- counting ------------------------------------------------------------ */

/* Prometheus buckets (upper bounds, ns) of every histogram here. */
static const uint64_t bounds_ns[] = {
    10000,     50000,      100000,     250000,     500000,     1000000,
    2500000,   5000000,    10000000,   25000000,   50000000,   100000000,
    250000000, 500000000,  1000000000, 2500000000, 5000000000, 10000000000,
    30000000000, 60000000000};
#define NB HC_ARRAY_SIZE(bounds_ns)

struct mhist {
  uint64_t b[NB]; /* values in (bounds_ns[i-1], bounds_ns[i]] */
  uint64_t n, sum_ns;
};

struct mseries {
  uint8_t coll, dtype;
  uint32_t comm;
  uint64_t ops, bytes, failed;
};

struct mrank {
  uint64_t ops, last;
  struct mhist h;
  uint32_t fine[HC_LHIST_N]; /* lhist.h */
};

/* Arrivals of an operation at the coordinator, until its decision. */
struct mpend {
  struct mpend *next;
  uint32_t comm;
  char name[HP_NAME_MAX + 1];
  int n;          /* members */
  uint64_t arr[]; /* by member; UINT64_MAX: none */
};
#define NPEND 256

struct hd_metrics {
  struct mseries *series;
  size_t nseries, capseries;
  struct mhist lat[HORA_COLL_MAX + 1], nego[HORA_COLL_MAX + 1];
  struct mrank *ranks; /* by global rank, once one is measured */
  int nranks;
  uint64_t measured;
  uint64_t stall_warn, stall_fail, deadlocks;
  uint64_t fused_ops, fused_tensors;
  uint64_t adopted_ops, adopted_bytes; /* ranks' parts in adopted memory */
  uint64_t nego_bytes; /* negotiation sent to other hosts */
  uint64_t star_bytes; /* small allreduces' data sent with it */
  struct mpend *pend[NPEND];
};

static void hist_add(struct mhist *h, uint64_t ns) {
  size_t i = 0;
  while (i < NB && ns > bounds_ns[i]) i++;
  if (i < NB) h->b[i]++;
  h->n++;
  h->sum_ns += ns;
}

static int ctrl(int coll);

static struct mseries *series(struct hd_metrics *mx, int coll, int dtype,
                              uint32_t comm) {
  for (size_t i = 0; i < mx->nseries; i++) {
    struct mseries *s = &mx->series[i];
    if (s->coll == coll && s->dtype == dtype && s->comm == comm) return s;
  }
  if (mx->nseries == mx->capseries) {
    size_t cap = mx->capseries ? 2 * mx->capseries : 16;
    struct mseries *v = realloc(mx->series, cap * sizeof *v);
    if (!v) return NULL;
    mx->series = v;
    mx->capseries = cap;
  }
  struct mseries *s = &mx->series[mx->nseries++];
  *s = (struct mseries){.coll = (uint8_t)coll, .dtype = (uint8_t)dtype,
                        .comm = comm};
  return s;
}

int hd_metrics_job(struct hd_job *job) {
  if (!job->metrics && !(job->metrics = calloc(1, sizeof *job->metrics))) {
    hc_error("out of memory for the job's metrics; stopping");
    return -1;
  }
  int port = (int)hk_int(&job->knobs, metrics_port);
  if (port > 0 && hd_metrics_listen(job->daemon, port) < 0) return -1;
  return 0;
}

void hd_metrics_free(struct hd_job *job) {
  struct hd_metrics *mx = job->metrics;
  if (!mx) return;
  for (int i = 0; i < NPEND; i++)
    while (mx->pend[i]) {
      struct mpend *p = mx->pend[i];
      mx->pend[i] = p->next;
      free(p);
    }
  free(mx->series);
  free(mx->ranks);
  free(mx);
  job->metrics = NULL;
}

void hd_metrics_submit(struct hd_tensor *t, int i) {
  t->part[i].t_sub = hc_now_ns();
}

/* One operation's arrivals arr[0..n) (UINT64_MAX: that rank took no
 * part) of the global ranks ranks[0..n): each rank's lateness. */
static void record(struct hd_job *job, const int32_t *ranks,
                   const uint64_t *arr, int n) {
  struct hd_metrics *mx = job->metrics;
  uint64_t first = UINT64_MAX, lastv = 0;
  int k = 0, last = -1;
  for (int i = 0; i < n; i++) {
    if (arr[i] == UINT64_MAX) continue;
    k++;
    if (arr[i] < first) first = arr[i];
    if (last < 0 || arr[i] > lastv) {
      lastv = arr[i];
      last = i;
    }
  }
  if (k < 2) return;
  if (!mx->ranks) {
    int size = job->desc.size;
    if (size <= 0 || !(mx->ranks = calloc((size_t)size, sizeof *mx->ranks)))
      return;
    mx->nranks = size;
  }
  mx->measured++;
  for (int i = 0; i < n; i++) {
    if (arr[i] == UINT64_MAX || ranks[i] < 0 || ranks[i] >= mx->nranks)
      continue;
    struct mrank *r = &mx->ranks[ranks[i]];
    uint64_t late = arr[i] - first;
    r->ops++;
    r->last += i == last;
    hist_add(&r->h, late);
    r->fine[hc_lhist_index(late)]++;
  }
}

void hd_metrics_ready(struct hd_comm *c, struct hd_tensor *t) {
  struct hd_job *job = c->job;
  if (!job->metrics || c->nhosts != 1 || t->meta.coll == HORA_COLL_JOIN ||
      c->nlocal < 2)
    return;
  int32_t rk[64];
  uint64_t at[64];
  int32_t *ranks = c->nlocal <= 64 ? rk : malloc(c->nlocal * sizeof *ranks);
  uint64_t *arr = c->nlocal <= 64 ? at : malloc(c->nlocal * sizeof *arr);
  if (ranks && arr) {
    for (int i = 0; i < c->nlocal; i++) {
      ranks[i] = hd_comm_rank(c, i);
      arr[i] = t->part[i].submitted ? t->part[i].t_sub : UINT64_MAX;
    }
    record(job, ranks, arr, c->nlocal);
  }
  if (ranks != rk) free(ranks);
  if (arr != at) free(arr);
}

unsigned char *hd_metrics_arrivals(struct hd_comm *c, struct hd_tensor *t,
                                   struct hp_nego_ready *m) {
  if (!c->job->metrics || t->meta.coll == HORA_COLL_JOIN || !c->nlocal ||
      (uint32_t)c->nlocal > HP_ARRIVE_MAX)
    return NULL;
  unsigned char *buf = malloc((size_t)c->nlocal * 8);
  if (!buf) return NULL;
  uint64_t now = hc_now_ns();
  for (int i = 0; i < c->nlocal; i++)
    hp_arrive_store(buf, (uint32_t)i,
                    t->part[i].submitted ? now - t->part[i].t_sub
                                         : UINT64_MAX);
  m->narrive = (uint32_t)c->nlocal;
  m->arrive = buf;
  return buf;
}

void hd_metrics_queued(struct hd_comm *c, struct hd_tensor *t) {
  struct hd_metrics *mx = c->job->metrics;
  if (!mx || t->meta.coll > HORA_COLL_MAX) return;
  hist_add(&mx->nego[t->meta.coll], hc_now_ns() - t->t_first);
}

void hd_metrics_done(struct hd_tensor *t, int status) {
  struct hd_metrics *mx = t->comm->job->metrics;
  if (!mx || t->meta.coll > HORA_COLL_MAX) return;
  struct mseries *s = series(mx, t->meta.coll, t->meta.dtype, t->comm->id);
  if (!s) return;
  if (status < 0) {
    s->failed++;
    return;
  }
  s->ops++;
  if (t->meta.dtype < HORA_DTYPE_COUNT && !ctrl(t->meta.coll))
    s->bytes += t->meta.count * hora_dtype_size(t->meta.dtype);
  hist_add(&mx->lat[t->meta.coll], hc_now_ns() - t->t_first);
}

/* A control collective (barrier, join, process sets) moves no data. */
static int ctrl(int coll) {
  const struct hd_coll *c = hd_coll(coll);
  return c && (c->traits & HORA_CF_CTRL);
}

static const char *dtype_label(int coll, int dtype) {
  return ctrl(coll) ? "none" : hora_dtype_name(dtype);
}

static unsigned pend_slot(uint32_t comm, const char *name) {
  return (unsigned)((hd_name_hash(name) ^ comm) & (NPEND - 1));
}

static struct mpend **pend_find(struct hd_metrics *mx, uint32_t comm,
                                const char *name) {
  struct mpend **pp = &mx->pend[pend_slot(comm, name)];
  while (*pp && ((*pp)->comm != comm || strcmp((*pp)->name, name)))
    pp = &(*pp)->next;
  return pp;
}

void hd_metrics_coord_ready(struct hd_comm *c, int host,
                            const struct hp_nego_ready *m) {
  struct hd_metrics *mx = c->job->metrics;
  if (!mx || host < 0 || host >= c->nhosts || m->coll == HORA_COLL_JOIN ||
      m->narrive != (uint32_t)c->host_n[host])
    return;
  uint64_t now = hc_now_ns();
  struct mpend **pp = pend_find(mx, c->id, m->name), *p = *pp;
  if (!p) {
    p = malloc(sizeof *p + (size_t)c->size * sizeof p->arr[0]);
    if (!p) return;
    p->next = NULL;
    p->comm = c->id;
    hc_fmt(p->name, sizeof p->name, "%s", m->name);
    p->n = c->size;
    for (int i = 0; i < c->size; i++) p->arr[i] = UINT64_MAX;
    *pp = p;
  }
  for (uint32_t i = 0; i < m->narrive; i++) {
    uint64_t before = hp_nego_ready_before(m, i);
    /* an offset past the time since the loop started is nonsense */
    if (before != UINT64_MAX && before <= now)
      p->arr[c->host_first[host] + (int)i] = now - before;
  }
}

void hd_metrics_coord_decided(struct hd_comm *c, const char *name, int ran) {
  struct hd_metrics *mx = c->job->metrics;
  if (!mx) return;
  struct mpend **pp = pend_find(mx, c->id, name), *p = *pp;
  if (!p) return;
  *pp = p->next;
  if (ran && p->n == c->size) record(c->job, c->members, p->arr, p->n);
  free(p);
}

void hd_metrics_coord_forget(struct hd_comm *c) {
  struct hd_metrics *mx = c->job->metrics;
  if (!mx) return;
  for (int i = 0; i < NPEND; i++)
    for (struct mpend **pp = &mx->pend[i]; *pp;) {
      struct mpend *p = *pp;
      if (p->comm != c->id) {
        pp = &p->next;
        continue;
      }
      *pp = p->next;
      free(p);
    }
}

unsigned char *hd_metrics_hold(struct hp_nego_ready *m) {
  uint32_t n = m->arrive ? m->narrive : 0;
  unsigned char *kept = n ? malloc((size_t)n * 8) : NULL;
  uint64_t now = hc_now_ns();
  for (uint32_t i = 0; kept && i < n; i++) {
    uint64_t b = hp_nego_ready_before(m, i);
    hp_arrive_store(kept, i, b == UINT64_MAX || b > now ? UINT64_MAX
                                                        : now - b);
  }
  m->arrive = NULL;
  m->narrive = kept ? n : 0;
  return kept;
}

void hd_metrics_unhold(struct hp_nego_ready *m, unsigned char *kept) {
  if (!kept) {
    m->narrive = 0;
    return;
  }
  uint64_t now = hc_now_ns();
  m->arrive = kept;
  for (uint32_t i = 0; i < m->narrive; i++) {
    uint64_t at = hp_nego_ready_before(m, i); /* an arrival time, here */
    hp_arrive_store(kept, i, at == UINT64_MAX || at > now ? UINT64_MAX
                                                          : now - at);
  }
}

void hd_metrics_stall(struct hd_job *job, int fail) {
  if (!job->metrics) return;
  if (fail) job->metrics->stall_fail++;
  else job->metrics->stall_warn++;
}

void hd_metrics_adopted(struct hd_job *job, const struct hp_shm_hdr *layout,
                        const struct hp_sqe *e) {
  if (!job->metrics || !layout->adopt_size) return;
  uint64_t es = hora_dtype_size(e->dtype), n = 0;
  if ((e->flags & HP_F_RESIDENT) && e->count && e->offset >= layout->adopt_off)
    n += e->count * es;
  if ((e->flags & HP_F_RECV) && e->recv_count &&
      e->recv_offset >= layout->adopt_off)
    n += e->recv_count * es;
  if (!n) return;
  job->metrics->adopted_ops++;
  job->metrics->adopted_bytes += n;
}

void hd_metrics_fused(struct hd_job *job, int n) {
  if (!job->metrics) return;
  job->metrics->fused_ops++;
  job->metrics->fused_tensors += (uint64_t)n;
}

void hd_metrics_nego_sent(struct hd_job *job, size_t bytes) {
  if (job->metrics) job->metrics->nego_bytes += bytes;
}

void hd_metrics_star_sent(struct hd_job *job, size_t bytes) {
  if (job->metrics) job->metrics->star_bytes += bytes;
}

void hd_metrics_deadlock(struct hd_job *job) {
  if (job->metrics) job->metrics->deadlocks++;
}

void hd_metrics_report(struct hd_job *job) {
  struct hd_metrics *mx = job->metrics;
  if (!mx || !mx->ranks) return;
  uint32_t n = 0;
  for (int r = 0; r < mx->nranks; r++) n += mx->ranks[r].ops > 0;
  if (!n || n > HP_LATE_MAX) return;
  struct hp_late_rank *v = calloc(n, sizeof *v);
  if (!v) return;
  uint32_t k = 0;
  for (int r = 0; r < mx->nranks; r++) {
    const struct mrank *m = &mx->ranks[r];
    if (!m->ops) continue;
    v[k].rank = r;
    v[k].ops = m->ops;
    v[k].last = m->last;
    for (unsigned b = 0; b < HC_LHIST_N; b++) v[k].hist[b] = m->fine[b];
    k++;
  }
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_enc_lateness(&w, v, n);
  if (!w.err) hd_control_send(job, &w);
  hp_wbuf_free(&w);
  free(v);
}

/* ---- rendering ----------------------------------------------------------- */

struct sbuf {
  char *p;
  size_t len, cap;
  int err;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *b, const char *fmt, ...) {
  if (b->err) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->err = 1;
      return;
    }
    if ((size_t)n < b->cap - b->len) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = 2 * b->cap + (size_t)n;
    char *q = realloc(b->p, cap);
    if (!q) {
      b->err = 1;
      return;
    }
    b->p = q;
    b->cap = cap;
  }
}

/* A label value: backslash, double quote and newline escaped. */
static void esc(char *out, size_t len, const char *s) {
  size_t k = 0;
  for (; s && *s && k + 3 < len; s++) {
    if (*s == '\\' || *s == '"') out[k++] = '\\';
    if (*s == '\n') {
      out[k++] = '\\';
      out[k++] = 'n';
      continue;
    }
    out[k++] = *s;
  }
  out[k] = '\0';
}

static void family(struct sbuf *b, const char *name, const char *type,
                   const char *help) {
  sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A counter family with this host's one series. */
static void host_counter(struct sbuf *b, const char *host, const char *name,
                         const char *help, uint64_t v) {
  family(b, name, "counter", help);
  sb_printf(b, "%s{host=\"%s\"} %llu\n", name, host, (unsigned long long)v);
}

/* A histogram's series; labels: "k=\"v\"," each, ending with a comma. */
static void hist_lines(struct sbuf *b, const char *name, const char *labels,
                       const struct mhist *h) {
  uint64_t cum = 0;
  for (size_t i = 0; i < NB; i++) {
    cum += h->b[i];
    sb_printf(b, "%s_bucket{%sle=\"%g\"} %llu\n", name, labels,
              (double)bounds_ns[i] / 1e9, (unsigned long long)cum);
  }
  sb_printf(b, "%s_bucket{%sle=\"+Inf\"} %llu\n", name, labels,
            (unsigned long long)h->n);
  size_t ll = strlen(labels);
  sb_printf(b, "%s_sum{%.*s} %.9f\n", name, (int)(ll ? ll - 1 : 0), labels,
            (double)h->sum_ns / 1e9);
  sb_printf(b, "%s_count{%.*s} %llu\n", name, (int)(ll ? ll - 1 : 0), labels,
            (unsigned long long)h->n);
}

static const char *rank_host(const struct hd_job *job, int rank) {
  for (uint32_t h = 0; h < job->desc.nhosts; h++)
    if (rank >= job->desc.hosts[h].first_rank &&
        rank < job->desc.hosts[h].first_rank + job->desc.hosts[h].nranks)
      return job->desc.hosts[h].name;
  return hd_here(job);
}

/* The fast path's operations of (coll, dtype) on this host: counted by
 * the ranks in the job's segment, and by earlier sessions' segments. */
static void fast_counts(const struct hd_job *job, int coll, int dtype,
                        uint64_t *ops, uint64_t *bytes) {
  uint32_t c = hp_fast_coll_index(coll);
  *ops = *bytes = 0;
  if (!c || dtype < 0 || dtype >= 16) return;
  *ops = job->fast_prev_ops[c][dtype];
  *bytes = job->fast_prev_bytes[c][dtype];
  if (job->fast) {
    *ops += atomic_load(&job->fast->ops[c][dtype]);
    *bytes += atomic_load(&job->fast->bytes[c][dtype]);
  }
}

static void render_job(struct sbuf *b, struct hd_job *job) {
  struct hd_metrics *mx = job->metrics;
  char host[600], lab[1400], hn[600];
  esc(host, sizeof host, hd_here(job));

  /* an operation goes to the fast path only once horad has completed it:
   * its series exists (comm 0) */
  family(b, "hora_operations_total", "counter",
         "Operations completed on this host, by collective, data type and "
         "communicator (0: the whole job, else the process set's id), the "
         "fast path's included.");
  for (size_t i = 0; i < mx->nseries; i++) {
    const struct mseries *s = &mx->series[i];
    uint64_t fo = 0, fb = 0;
    if (s->comm == 0) fast_counts(job, s->coll, s->dtype, &fo, &fb);
    sb_printf(b, "hora_operations_total{host=\"%s\",collective=\"%s\","
              "dtype=\"%s\",comm=\"%u\"} %llu\n", host, hd_coll_name(s->coll),
              dtype_label(s->coll, s->dtype), s->comm,
              (unsigned long long)(s->ops + fo));
  }
  family(b, "hora_operation_bytes_total", "counter",
         "Bytes of the operations completed on this host: each operation's "
         "element count times its element size, as its first rank here "
         "submitted it.");
  for (size_t i = 0; i < mx->nseries; i++) {
    const struct mseries *s = &mx->series[i];
    uint64_t fo = 0, fb = 0;
    if (s->comm == 0) fast_counts(job, s->coll, s->dtype, &fo, &fb);
    sb_printf(b, "hora_operation_bytes_total{host=\"%s\",collective=\"%s\","
              "dtype=\"%s\",comm=\"%u\"} %llu\n", host, hd_coll_name(s->coll),
              dtype_label(s->coll, s->dtype), s->comm,
              (unsigned long long)(s->bytes + fb));
  }
  family(b, "hora_fast_path_operations_total", "counter",
         "Of those, the operations the ranks did among themselves on the "
         "fast path (small allreduces and broadcasts on one host), without "
         "horad; the latency and negotiation histograms do not count them.");
  for (size_t i = 0; i < mx->nseries; i++) {
    const struct mseries *s = &mx->series[i];
    uint64_t fo = 0, fb = 0;
    if (s->comm == 0) fast_counts(job, s->coll, s->dtype, &fo, &fb);
    if (fo)
      sb_printf(b, "hora_fast_path_operations_total{host=\"%s\",collective="
                "\"%s\",dtype=\"%s\"} %llu\n", host, hd_coll_name(s->coll),
                dtype_label(s->coll, s->dtype), (unsigned long long)fo);
  }
  family(b, "hora_operation_failures_total", "counter",
         "Operations that failed on this host.");
  for (size_t i = 0; i < mx->nseries; i++) {
    const struct mseries *s = &mx->series[i];
    sb_printf(b, "hora_operation_failures_total{host=\"%s\",collective="
              "\"%s\",dtype=\"%s\",comm=\"%u\"} %llu\n", host,
              hd_coll_name(s->coll), dtype_label(s->coll, s->dtype), s->comm,
              (unsigned long long)s->failed);
  }
  family(b, "hora_operation_latency_seconds", "histogram",
         "From an operation's first submission on this host to its "
         "completion.");
  for (int c = 0; c <= HORA_COLL_MAX; c++) {
    if (!mx->lat[c].n) continue;
    hc_fmt(lab, sizeof lab, "host=\"%s\",collective=\"%s\",", host,
           hd_coll_name(c));
    hist_lines(b, "hora_operation_latency_seconds", lab, &mx->lat[c]);
  }
  family(b, "hora_negotiation_seconds", "histogram",
         "From an operation's first submission on this host until it is "
         "decided and goes to its engine.");
  for (int c = 0; c <= HORA_COLL_MAX; c++) {
    if (!mx->nego[c].n) continue;
    hc_fmt(lab, sizeof lab, "host=\"%s\",collective=\"%s\",", host,
           hd_coll_name(c));
    hist_lines(b, "hora_negotiation_seconds", lab, &mx->nego[c]);
  }
  family(b, "hora_operations_pending", "gauge",
         "Operations submitted on this host and not yet completed.");
  for (uint32_t k = 0; k < job->ncomms; k++)
    if (job->comms && job->comms[k])
      sb_printf(b, "hora_operations_pending{host=\"%s\",comm=\"%u\"} %zu\n",
                host, k, job->comms[k]->ntensors);
  host_counter(b, host, "hora_stall_warnings_total",
               "Stall warnings: an operation some ranks submitted waited "
               "past the warning time for the others.",
               mx->stall_warn);
  host_counter(b, host, "hora_stalled_operations_total",
               "Operations failed as stalled, past the shutdown time.",
               mx->stall_fail);
  host_counter(b, host, "hora_deadlocks_total",
               "Deadlocks found: every live rank of a communicator waiting, "
               "nothing able to progress.",
               mx->deadlocks);
  host_counter(b, host, "hora_fused_collectives_total",
               "Collectives that ran several tensors fused into one (tensor "
               "fusion across hosts).",
               mx->fused_ops);
  host_counter(b, host, "hora_fused_tensors_total",
               "Tensors that ran in those fused collectives.",
               mx->fused_tensors);
  host_counter(b, host, "hora_adopted_operations_total",
               "Ranks' operations whose input or output lay in memory libhora "
               "adopted into the rank's segment (a large malloc'd buffer "
               "reduced where it lies, not copied; --adopt-size).",
               mx->adopted_ops);
  host_counter(b, host, "hora_adopted_bytes_total",
               "Bytes of those inputs and outputs.", mx->adopted_bytes);
  host_counter(b, host, "hora_negotiation_sent_bytes_total",
               "Bytes of negotiation (readiness, decisions) sent to other "
               "hosts; the response cache (--cache-capacity) shrinks them.",
               mx->nego_bytes);
  host_counter(b, host, "hora_small_allreduce_sent_bytes_total",
               "Bytes of small allreduces' data sent with the negotiation "
               "(--small-allreduce): this host's parts, or the coordinator's "
               "results; not counted in hora_negotiation_sent_bytes_total.",
               mx->star_bytes);

  if (job->multi && job->peers) {
    family(b, "hora_link_up", "gauge",
           "1 while the link to that host carries the job.");
    for (uint32_t h = 0; h < job->desc.nhosts; h++) {
      if (h == job->desc.host_index) continue;
      esc(hn, sizeof hn, job->desc.hosts[h].name);
      sb_printf(b, "hora_link_up{host=\"%s\",peer=\"%s\"} %d\n", host, hn,
                job->peers[h].up && !job->peers[h].lost);
    }
    static const char *const dir[] = {"sent", "received"};
    for (int d = 0; d < 2; d++) {
      char name[64];
      hc_fmt(name, sizeof name, "hora_link_%s_bytes_total", dir[d]);
      family(b, name, "counter",
             d ? "Bytes received over the TCP connection from that host "
                 "(the kernel's count)."
               : "Bytes sent over the TCP connection to that host and "
                 "acknowledged (the kernel's count).");
      for (uint32_t h = 0; h < job->desc.nhosts; h++) {
        struct hp_conn *c = job->peers[h].c;
        uv_os_fd_t fd;
        uint64_t sent, got;
        if (h == job->desc.host_index || !c || c->closing || c->local ||
            uv_fileno((uv_handle_t *)&c->tcp, &fd) < 0 ||
            hd_tcp_bytes(fd, &sent, &got) < 0)
          continue;
        esc(hn, sizeof hn, job->desc.hosts[h].name);
        sb_printf(b, "%s{host=\"%s\",peer=\"%s\"} %llu\n", name, host, hn,
                  (unsigned long long)(d ? got : sent));
      }
    }
  }

  family(b, "hora_lateness_operations_total", "counter",
         "Operations of two or more submitting ranks whose lateness this "
         "host measured (it coordinates their communicator).");
  sb_printf(b, "hora_lateness_operations_total{host=\"%s\"} %llu\n", host,
            (unsigned long long)mx->measured);
  family(b, "hora_rank_lateness_seconds", "histogram",
         "How long after the first rank each rank submitted an operation.");
  for (int r = 0; mx->ranks && r < mx->nranks; r++) {
    if (!mx->ranks[r].ops) continue;
    esc(hn, sizeof hn, rank_host(job, r));
    hc_fmt(lab, sizeof lab, "host=\"%s\",rank=\"%d\",rank_host=\"%s\",", host,
           r, hn);
    hist_lines(b, "hora_rank_lateness_seconds", lab, &mx->ranks[r].h);
  }
  family(b, "hora_rank_last_total", "counter",
         "Operations each rank was the last to submit.");
  for (int r = 0; mx->ranks && r < mx->nranks; r++) {
    if (!mx->ranks[r].ops) continue;
    esc(hn, sizeof hn, rank_host(job, r));
    sb_printf(b, "hora_rank_last_total{host=\"%s\",rank=\"%d\",rank_host="
              "\"%s\"} %llu\n", host, r, hn,
              (unsigned long long)mx->ranks[r].last);
  }
}

char *hd_metrics_render(struct hd_daemon *dm, size_t *len) {
  struct sbuf b = {.cap = 8192};
  if (!(b.p = malloc(b.cap))) return NULL;
  b.p[0] = '\0';
  for (struct hd_job *job = dm->jobs; job; job = job->next)
    if (job->metrics) render_job(&b, job);
  if (b.err) {
    free(b.p);
    return NULL;
  }
  *len = b.len;
  return b.p;
}

/* ---- HTTP ---------------------------------------------------------------- */

int hd_http_request(const char *buf, size_t len, size_t max, int *head) {
  *head = 0;
  const char *nl = memchr(buf, '\n', len);
  if (!nl) return len >= max ? 431 : 0;
  size_t line = (size_t)(nl - buf);
  if (line && buf[line - 1] == '\r') line--;
  /* METHOD SP TARGET SP HTTP/1.x */
  size_t m = 0;
  while (m < line && buf[m] >= 'A' && buf[m] <= 'Z') m++;
  if (!m || m >= line || buf[m] != ' ') return 400;
  size_t t0 = m + 1, t1 = t0;
  while (t1 < line && buf[t1] > ' ' && buf[t1] < 127) t1++;
  if (t1 == t0 || t1 >= line || buf[t1] != ' ' || buf[t0] != '/') return 400;
  const char *ver = buf + t1 + 1;
  size_t vl = line - t1 - 1;
  if (vl < 8 || memcmp(ver, "HTTP/", 5)) return 400;
  if (vl != 8 || ver[5] != '1' || ver[6] != '.' ||
      (ver[7] != '0' && ver[7] != '1'))
    return 505;
  int get = m == 3 && !memcmp(buf, "GET", 3);
  *head = m == 4 && !memcmp(buf, "HEAD", 4);
  if (!get && !*head) return 405;
  size_t plen = 0;
  while (t0 + plen < t1 && buf[t0 + plen] != '?') plen++;
  int ours = plen == 8 && !memcmp(buf + t0, "/metrics", 8);
  /* the answer waits for the end of the header: an empty line */
  const char *end = buf + len;
  for (const char *p = nl; p;) {
    const char *q = p + 1; /* a line starts here */
    if (q < end && *q == '\n') return ours ? 200 : 404;
    if (q + 1 < end && q[0] == '\r' && q[1] == '\n') return ours ? 200 : 404;
    p = q < end ? memchr(q, '\n', (size_t)(end - q)) : NULL;
  }
  return len >= max ? 431 : 0;
}

struct hd_msrv {
  struct hd_msrv *next;
  struct hd_daemon *dm;
  uv_tcp_t tcp;
  int port;
  struct mconn *conns;
  int nconns;
};

struct mconn {
  struct mconn *next, **pprev;
  struct hd_msrv *s;
  uv_tcp_t tcp;
  uv_timer_t timer;
  int nclosing, answered, closing;
  uv_write_t wr;
  uv_shutdown_t sd;
  char *out;
  size_t len;
  char req[HD_HTTP_MAX];
};

static void mconn_closed(uv_handle_t *h) {
  struct mconn *c = h->data;
  if (--c->nclosing) return;
  free(c->out);
  free(c);
}

static void mconn_close(struct mconn *c) {
  if (c->closing) return;
  c->closing = 1;
  if (c->pprev) {
    *c->pprev = c->next;
    if (c->next) c->next->pprev = c->pprev;
    c->s->nconns--;
  }
  c->nclosing = 2;
  uv_close((uv_handle_t *)&c->timer, mconn_closed);
  uv_close((uv_handle_t *)&c->tcp, mconn_closed);
}

static void on_mtimer(uv_timer_t *t) { mconn_close(t->data); }

static void on_shutdown(uv_shutdown_t *req, int status) {
  (void)status;
  mconn_close(req->data);
}

static void on_written(uv_write_t *req, int status) {
  struct mconn *c = req->data;
  if (status < 0 || c->closing ||
      uv_shutdown(&c->sd, (uv_stream_t *)&c->tcp, on_shutdown) < 0)
    mconn_close(c);
}

static const char *reason(int status) {
  switch (status) {
  case 200: return "OK";
  case 400: return "Bad Request";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 431: return "Request Header Fields Too Large";
  case 505: return "HTTP Version Not Supported";
  default: return "Internal Server Error";
  }
}

static void answer(struct mconn *c, int status, int head) {
  c->answered = 1;
  uv_read_stop((uv_stream_t *)&c->tcp);
  size_t blen = 0;
  char *body = NULL;
  if (status == 200 && !(body = hd_metrics_render(c->s->dm, &blen)))
    status = 500;
  char msg[64];
  if (status != 200) {
    hc_fmt(msg, sizeof msg, "%d %s\n", status, reason(status));
    blen = strlen(msg);
  }
  char hdr[256];
  int hl = snprintf(hdr, sizeof hdr,
                    "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n"
                    "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                    status, reason(status),
                    status == 200 ? "text/plain; version=0.0.4; charset=utf-8"
                                  : "text/plain; charset=utf-8",
                    blen);
  size_t send = (size_t)hl + (head ? 0 : blen);
  c->out = malloc(send + 1);
  if (!c->out) {
    free(body);
    mconn_close(c);
    return;
  }
  memcpy(c->out, hdr, (size_t)hl);
  if (!head) memcpy(c->out + hl, body ? body : msg, blen);
  free(body);
  c->len = send;
  uv_buf_t b = uv_buf_init(c->out, (unsigned)send);
  c->wr.data = c;
  c->sd.data = c;
  if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, on_written) < 0)
    mconn_close(c);
}

static void on_malloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  struct mconn *c = h->data;
  (void)hint;
  size_t room = sizeof c->req - c->len;
  *buf = uv_buf_init(room ? c->req + c->len : NULL, (unsigned)room);
}

static void on_mread(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  struct mconn *c = s->data;
  (void)buf;
  if (n < 0 || c->answered) {
    if (n < 0) mconn_close(c);
    return;
  }
  c->len += (size_t)n;
  int head, st = hd_http_request(c->req, c->len, sizeof c->req, &head);
  if (st) answer(c, st, head);
}

static void on_mconnection(uv_stream_t *server, int status) {
  struct hd_msrv *s = server->data;
  if (status < 0) return;
  struct mconn *c = calloc(1, sizeof *c);
  if (!c) return;
  c->s = s;
  uv_tcp_init(s->dm->loop, &c->tcp);
  uv_timer_init(s->dm->loop, &c->timer);
  c->tcp.data = c->timer.data = c;
  if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
    mconn_close(c);
    return;
  }
  if (s->nconns >= HD_METRICS_CONNS) { /* the oldest makes room */
    struct mconn *old = NULL, *any = s->conns; /* still reading, or any */
    for (struct mconn *o = s->conns; o; o = o->next) {
      any = o;
      if (!o->answered) old = o;
    }
    if (!old) old = any;
    hc_warn_rl("metrics: more than %d connections at once on port %d; the "
               "oldest closed [H5002]", HD_METRICS_CONNS, s->port);
    mconn_close(old);
  }
  c->next = s->conns;
  if (c->next) c->next->pprev = &c->next;
  c->pprev = &s->conns;
  s->conns = c;
  s->nconns++;
  uv_timer_start(&c->timer, on_mtimer, HD_METRICS_TIMEOUT_MS, 0);
  if (uv_read_start((uv_stream_t *)&c->tcp, on_malloc, on_mread) < 0)
    mconn_close(c);
}

static void msrv_closed(uv_handle_t *h) { free(h->data); }

int hd_metrics_listen(struct hd_daemon *dm, int port) {
  for (struct hd_msrv *s = dm->msrv; s; s = s->next)
    if (s->port == port) return 0;
  struct hd_msrv *s = calloc(1, sizeof *s);
  if (!s) {
    hc_error("out of memory for the metrics server");
    return -1;
  }
  s->dm = dm;
  s->port = port;
  uv_tcp_init(dm->loop, &s->tcp);
  s->tcp.data = s;
  struct sockaddr_in a4;
  uv_ip4_addr("0.0.0.0", port, &a4);
  int rc = uv_tcp_bind(&s->tcp, (struct sockaddr *)&a4, 0);
  if (rc == 0) rc = uv_listen((uv_stream_t *)&s->tcp, 64, on_mconnection);
  if (rc < 0) {
    hc_error("cannot serve metrics on port %d: %s [H5001]", port,
             uv_strerror(rc));
    uv_close((uv_handle_t *)&s->tcp, msrv_closed);
    return -1;
  }
  s->next = dm->msrv;
  dm->msrv = s;
  hc_info("serving metrics at http://%s:%d/metrics", dm->hostname, port);
  return 0;
}

void hd_metrics_close(struct hd_daemon *dm) {
  while (dm->msrv) {
    struct hd_msrv *s = dm->msrv;
    dm->msrv = s->next;
    while (s->conns) mconn_close(s->conns);
    uv_close((uv_handle_t *)&s->tcp, msrv_closed);
  }
}
