/* deadlock.c -- deadlock detection: ranks that wait on one another's
 * operations, none of which can ever complete.
 *
 * A rank's threads say in shared memory when they wait in hora_wait() and
 * on which operation (libclient/ops.c: wait_ids). Every DL_TICK_MS each
 * host takes a snapshot, a REPORT: its ranks whose every thread waits, on
 * which operations, and for each pending operation of its communicators
 * which of its ranks submitted it (or joined). Host 0 holds every host's
 * latest report and looks for a closed set of ranks: each of them waits
 * only on operations that are not decided and that no rank outside the set
 * is missing from. No rank of such a set can go on: what would let one go
 * on is a submission by another of them, which waits. That is a deadlock,
 * not a guess: it does not depend on how long anything took.
 *
 * A report is a snapshot, and host 0 sees them at different times: it
 * declares a deadlock only when the same set comes out of two ticks in a
 * row, with the same reports, and when each host with a rank in the set,
 * asked again (PROBE), still finds the report it sent (ACK). Then (FOUND,
 * to every host) each host sends the set's ranks their stack signal
 * (hora.torch prints each thread's Python stack), and, unless the action
 * is warn, DL_STACK_MS later fails every operation of the job with
 * HORA_EDEADLOCK, naming each rank of the set, what it waits on and which
 * ranks submitted that; host 0 tells horarun, which ends the job.
 *
 * Hosts send reports only when they hold a candidate (a rank whose every
 * thread waits on an operation not decided yet): a job that makes progress
 * sends none. */
#define HC_LOG_SUB HC_SUB_NEGO
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "metrics.h"

#define DL_TICK_MS 100
#define DL_STACK_MS 300   /* ranks print their stacks before waits fail */
#define DL_FAULT_MS 500   /* their errors reach horarun before its FAULT */
#define DL_MAX_TENSORS 4096u /* in one report; more: no verdict */
#define DL_LIST_RANKS 64     /* ranks named in horarun's report */

enum { DL_REPORT = 1, DL_PROBE = 2, DL_ACK = 3, DL_FOUND = 4 };

/* ---- what a host sees ---------------------------------------------------- */

/* Fills in a count written before what it counts (little-endian). */
static void patch_u32(struct hp_wbuf *w, size_t at, uint32_t v) {
  if (w->err || at + 4 > w->len) return;
  for (int i = 0; i < 4; i++) w->data[at + i] = (unsigned char)(v >> 8 * i);
}

/* The tensor of comm c that local member li submitted as id, or NULL. */
static struct hd_tensor *find_wait(struct hd_comm *c, int li, uint64_t id) {
  for (size_t i = 0; i < c->table_size; i++)
    for (struct hd_tensor *t = c->table[i]; t; t = t->next_hash)
      if (t->part[li].submitted && t->part[li].id == id) return t;
  return NULL;
}

/* Reads r's wait state: 1 when every thread of it that waits in hora is
 * waiting now, each on an operation in ids[] (*n of them). */
static int rank_blocked(const struct hd_rank *r, uint64_t *ids, int *n) {
  struct hp_shm_hdr *h = r->hdr;
  uint32_t g0 = atomic_load(&h->wait_gen);
  uint32_t threads = atomic_load(&h->wait_threads);
  uint32_t waiting = atomic_load(&h->waiting);
  *n = 0;
  for (unsigned i = 0; i < HP_WAIT_SLOTS; i++) {
    uint64_t id = atomic_load(&h->wait_ids[i]);
    if (id) ids[(*n)++] = id;
  }
  return waiting > 0 && waiting == threads && (uint32_t)*n == waiting &&
         atomic_load(&h->wait_gen) == g0;
}

/* Encodes this host's REPORT payload into w; returns 1 when it holds a
 * candidate (a rank blocked on operations none of which is decided). */
static int local_report(struct hd_job *job, struct hp_wbuf *w) {
  hp_put_u8(w, DL_REPORT);
  hp_put_u32(w, job->desc.host_index);
  size_t at_complete = w->len;
  hp_put_u8(w, 1);
  size_t at_nrank = w->len;
  hp_put_u32(w, 0);
  uint32_t nrank = 0;
  int candidate = 0;
  for (int i = 0; i < job->nlocal; i++) {
    struct hd_rank *r = &job->ranks[i];
    uint64_t ids[HP_WAIT_SLOTS];
    int n;
    if (!r->hdr || r->gone || r->broken || !rank_blocked(r, ids, &n)) continue;
    struct hd_tensor *ts[HP_WAIT_SLOTS];
    int li[HP_WAIT_SLOTS], found = 0, queued = 0;
    for (int k = 0; k < n; k++) {
      ts[k] = NULL;
      for (uint32_t c = 0; c < job->ncomms && !ts[k]; c++) {
        struct hd_comm *cm = job->comms[c];
        if (!cm || cm->part_of[i] < 0) continue;
        li[k] = cm->part_of[i];
        ts[k] = find_wait(cm, li[k], ids[k]);
      }
      if (ts[k]) found++;
      if (ts[k] && ts[k]->queued) queued++;
    }
    if (found < n || queued == n) continue; /* done, or not ours yet */
    if (!queued) candidate = 1;
    nrank++;
    hp_put_u32(w, (uint32_t)r->info.rank);
    hp_put_u8(w, (uint8_t)n);
    for (int k = 0; k < n; k++) {
      const struct hd_meta *m = &ts[k]->metas[li[k]];
      hp_put_u32(w, ts[k]->comm->id);
      hp_put_str(w, ts[k]->name);
      hp_put_u8(w, m->coll);
      hp_put_u8(w, m->dtype);
      hp_put_u64(w, m->count * hora_dtype_size(m->dtype));
    }
  }
  patch_u32(w, at_nrank, nrank);
  size_t at_nt = w->len;
  hp_put_u32(w, 0);
  uint32_t nt = 0;
  for (uint32_t c = 0; candidate && c < job->ncomms; c++) {
    struct hd_comm *cm = job->comms[c];
    if (!cm) continue;
    for (size_t i = 0; i < cm->table_size; i++)
      for (struct hd_tensor *t = cm->table[i]; t; t = t->next_hash) {
        if (nt == DL_MAX_TENSORS) {
          w->data[at_complete] = 0;
          continue;
        }
        nt++;
        hp_put_u32(w, cm->id);
        hp_put_u8(w, (uint8_t)(t->queued != 0));
        hp_put_str(w, t->name);
        size_t at_ns = w->len;
        hp_put_u32(w, 0);
        uint32_t ns = 0;
        for (int k = 0; k < cm->nlocal; k++)
          if (t->part[k].submitted) {
            hp_put_u32(w, (uint32_t)hd_comm_rank(cm, k));
            ns++;
          }
        patch_u32(w, at_ns, ns);
      }
  }
  patch_u32(w, at_nt, nt);
  /* joined ranks count as having submitted every operation of the set */
  struct hd_comm *g = job->ncomms ? job->comms[0] : NULL;
  size_t at_nj = w->len;
  hp_put_u32(w, 0);
  uint32_t nj = 0;
  for (int k = 0; candidate && g && g->joined && k < g->nlocal; k++)
    if (g->joined[k]) {
      hp_put_u32(w, (uint32_t)hd_comm_rank(g, k));
      nj++;
    }
  patch_u32(w, at_nj, nj);
  return candidate;
}

/* ---- host 0: the verdict ---------------------------------------------------
 */

struct dl_wait {
  uint32_t comm;
  char *name;
  uint8_t coll, dtype;
  uint64_t bytes;
  int tensor; /* index into the merged tensors, -1: none */
};
struct dl_rank {
  int32_t rank;
  int host;
  int nwait;
  struct dl_wait w[HP_WAIT_SLOTS];
};
struct dl_tensor {
  uint32_t comm;
  char *name;
  int queued;
  unsigned char *sub; /* by global rank: submitted or joined */
};
struct dl_view {
  int complete;
  int nrank, caprank;
  struct dl_rank *rank;
  int nt, capt;
  struct dl_tensor *t;
  int *slot; /* index of t by (comm, name): open addressing, -1 free */
  size_t nslot;
  unsigned char *joined; /* by global rank */
  unsigned char *blocked; /* by global rank: in rank[] */
};

static void view_free(struct dl_view *v) {
  for (int i = 0; i < v->nrank; i++)
    for (int k = 0; k < v->rank[i].nwait; k++) free(v->rank[i].w[k].name);
  for (int i = 0; i < v->nt; i++) {
    free(v->t[i].name);
    free(v->t[i].sub);
  }
  free(v->rank);
  free(v->t);
  free(v->slot);
  free(v->joined);
  free(v->blocked);
  memset(v, 0, sizeof *v);
}

static size_t tensor_slot(uint32_t comm, const char *name, size_t nslot) {
  return (size_t)(hd_name_hash(name) ^ ((uint64_t)comm * 0x9e3779b97f4a7c15u)) &
         (nslot - 1);
}

/* The merged tensor (comm, name), or -1 (a view holds thousands: not a
 * linear search, which a flood of names would make quadratic). */
static int find_tensor(const struct dl_view *v, uint32_t comm,
                       const char *name) {
  if (!v->nslot) return -1;
  for (size_t i = tensor_slot(comm, name, v->nslot); v->slot[i] >= 0;
       i = (i + 1) & (v->nslot - 1)) {
    const struct dl_tensor *t = &v->t[v->slot[i]];
    if (t->comm == comm && !strcmp(t->name, name)) return v->slot[i];
  }
  return -1;
}

/* Indexes v->t[k] (just added). < 0: out of memory. */
static int index_tensor(struct dl_view *v, int k) {
  if ((size_t)v->nt * 2 > v->nslot) {
    size_t n = v->nslot ? 2 * v->nslot : 256;
    int *s = malloc(n * sizeof *s);
    if (!s) return -1;
    for (size_t i = 0; i < n; i++) s[i] = -1;
    free(v->slot);
    v->slot = s;
    v->nslot = n;
    for (int j = 0; j < v->nt; j++) {
      if (j == k) continue;
      size_t i = tensor_slot(v->t[j].comm, v->t[j].name, n);
      while (s[i] >= 0) i = (i + 1) & (n - 1);
      s[i] = j;
    }
  }
  size_t i = tensor_slot(v->t[k].comm, v->t[k].name, v->nslot);
  while (v->slot[i] >= 0) i = (i + 1) & (v->nslot - 1);
  v->slot[i] = k;
  return 0;
}

/* Adds one host's report to v; < 0 when it is malformed. */
static int view_add(struct dl_view *v, int size, const unsigned char *p,
                    size_t len, int host) {
  struct hp_rbuf rb;
  hp_rbuf_init(&rb, p, len);
  if (hp_get_u8(&rb) != DL_REPORT) return -1;
  (void)hp_get_u32(&rb);
  if (!hp_get_u8(&rb)) v->complete = 0;
  uint32_t nrank = hp_get_u32(&rb);
  if (rb.err || nrank > (uint32_t)size) return -1;
  for (uint32_t i = 0; i < nrank; i++) {
    if (v->nrank == v->caprank) {
      int cap = v->caprank ? 2 * v->caprank : 16;
      void *n = realloc(v->rank, (size_t)cap * sizeof *v->rank);
      if (!n) return -1;
      v->rank = n;
      v->caprank = cap;
    }
    struct dl_rank *r = &v->rank[v->nrank];
    memset(r, 0, sizeof *r);
    r->rank = (int32_t)hp_get_u32(&rb);
    r->host = host;
    uint8_t nw = hp_get_u8(&rb);
    if (rb.err || r->rank < 0 || r->rank >= size || nw == 0 ||
        nw > HP_WAIT_SLOTS || v->blocked[r->rank])
      return -1;
    v->nrank++;
    v->blocked[r->rank] = 1;
    for (uint8_t k = 0; k < nw; k++) {
      struct dl_wait *w = &r->w[k];
      w->comm = hp_get_u32(&rb);
      w->name = hp_get_str(&rb, HP_NAME_MAX);
      if (w->name) r->nwait++;
      w->coll = hp_get_u8(&rb);
      w->dtype = hp_get_u8(&rb);
      w->bytes = hp_get_u64(&rb);
      w->tensor = -1;
      if (rb.err || !w->name) return -1;
    }
  }
  uint32_t nt = hp_get_u32(&rb);
  if (rb.err || nt > DL_MAX_TENSORS) return -1;
  for (uint32_t i = 0; i < nt; i++) {
    uint32_t comm = hp_get_u32(&rb);
    int queued = hp_get_u8(&rb);
    char *name = hp_get_str(&rb, HP_NAME_MAX);
    uint32_t ns = hp_get_u32(&rb);
    if (rb.err || !name || ns > (uint32_t)size) {
      free(name);
      return -1;
    }
    int k = find_tensor(v, comm, name);
    if (k < 0) {
      if (v->nt == v->capt) {
        int cap = v->capt ? 2 * v->capt : 64;
        void *n = realloc(v->t, (size_t)cap * sizeof *v->t);
        if (!n) {
          free(name);
          return -1;
        }
        v->t = n;
        v->capt = cap;
      }
      k = v->nt;
      v->t[k] = (struct dl_tensor){.comm = comm, .name = name,
                                   .sub = calloc((size_t)size, 1)};
      if (!v->t[k].sub) {
        free(name);
        return -1;
      }
      v->nt++;
      if (index_tensor(v, k) < 0) return -1; /* view_free() frees it */
    } else {
      free(name);
    }
    v->t[k].queued |= queued;
    for (uint32_t s = 0; s < ns; s++) {
      uint32_t gr = hp_get_u32(&rb);
      if (rb.err || gr >= (uint32_t)size) return -1;
      v->t[k].sub[gr] = 1;
    }
  }
  uint32_t nj = hp_get_u32(&rb);
  if (rb.err || nj > (uint32_t)size) return -1;
  for (uint32_t i = 0; i < nj; i++) {
    uint32_t gr = hp_get_u32(&rb);
    if (rb.err || gr >= (uint32_t)size) return -1;
    v->joined[gr] = 1;
  }
  return rb.off == len ? 0 : -1;
}

/* Finds the closed set in v: in[rank] = 1 for its members. Returns its
 * size. */
static int closed_set(struct hd_job *job, struct dl_view *v,
                      unsigned char *in) {
  int n = 0;
  for (int i = 0; i < v->nrank; i++) {
    struct dl_rank *r = &v->rank[i];
    int ok = 1;
    for (int k = 0; k < r->nwait; k++) {
      struct dl_wait *w = &r->w[k];
      w->tensor = find_tensor(v, w->comm, w->name);
      struct hd_comm *c = hd_comm_get(job, w->comm);
      if (w->tensor < 0 || v->t[w->tensor].queued || !c || c->removed ||
          hd_comm_member(c, r->rank) < 0)
        ok = 0;
    }
    in[r->rank] = (unsigned char)ok;
    n += ok;
  }
  for (int changed = 1; changed && n;) {
    changed = 0;
    for (int i = 0; i < v->nrank; i++) {
      struct dl_rank *r = &v->rank[i];
      if (!in[r->rank]) continue;
      for (int k = 0; k < r->nwait && in[r->rank]; k++) {
        const struct dl_tensor *t = &v->t[r->w[k].tensor];
        struct hd_comm *c = hd_comm_get(job, r->w[k].comm);
        int missing = 0, outside = 0;
        for (int m = 0; m < c->size && !outside; m++) {
          int32_t g = c->members[m];
          int joined = c->id == 0 && v->joined[g];
          if (t->sub[g] || joined) continue;
          missing++;
          outside = !in[g]; /* it may yet submit */
        }
        /* with nobody missing it is ready: a decision is on its way */
        if (outside || !missing) {
          in[r->rank] = 0;
          n--;
          changed = 1;
        }
      }
    }
  }
  return n;
}

static void fmt_size(char *buf, size_t len, uint64_t b) {
  static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double x = (double)b;
  while (x >= 1024 && u < 4) {
    x /= 1024;
    u++;
  }
  if (u == 0 || x == (double)(uint64_t)x)
    hc_fmt(buf, len, "%llu %s", (unsigned long long)x, unit[u]);
  else
    hc_fmt(buf, len, "%.1f %s", x, unit[u]);
}

/* Appends "0-3,8" for the ranks set in sub[0..size). */
static void fmt_ranks(struct hp_wbuf *w, const unsigned char *sub, int size) {
  int first = 1;
  for (int g = 0; g < size; g++) {
    if (!sub[g]) continue;
    int e = g;
    while (e + 1 < size && sub[e + 1]) e++;
    char b[32];
    int n = e == g ? snprintf(b, sizeof b, "%s%d", first ? "" : ",", g)
                   : snprintf(b, sizeof b, "%s%d-%d", first ? "" : ",", g, e);
    hp_put_raw(w, b, (size_t)n);
    first = 0;
    g = e;
  }
}

static void put_text(struct hp_wbuf *w, const char *s) {
  hp_put_raw(w, s, strlen(s));
}

/* The verdict, for people: "deadlock: rank 0 waits on allreduce 'a' (4 B
 * float32), submitted by rank 0; rank 1 waits on ...". NUL-terminated in
 * w. */
static void describe(struct hd_job *job, const struct dl_view *v,
                     const unsigned char *in, struct hp_wbuf *w) {
  put_text(w, "deadlock: ");
  int named = 0, total = 0;
  for (int g = 0; g < job->desc.size; g++) {
    if (!in[g]) continue;
    total++;
    if (named == DL_LIST_RANKS) continue;
    const struct dl_rank *r = NULL;
    for (int i = 0; i < v->nrank && !r; i++)
      if (v->rank[i].rank == g) r = &v->rank[i];
    char b[400];
    snprintf(b, sizeof b, "%srank %d waits on ", named ? "; " : "", g);
    put_text(w, b);
    for (int k = 0; k < r->nwait; k++) {
      const struct dl_wait *x = &r->w[k];
      char sz[32], what[64] = "", set[48] = "";
      const struct hd_coll *hc = hd_coll(x->coll);
      if (hc && !(hc->traits & HORA_CF_CTRL)) { /* barrier, join: no data */
        fmt_size(sz, sizeof sz, x->bytes);
        snprintf(what, sizeof what, " (%s %s)", sz,
                 hora_dtype_name((hora_dtype_t)x->dtype));
      }
      if (x->comm) snprintf(set, sizeof set, " of process set %u", x->comm);
      snprintf(b, sizeof b, "%s%s '%s'%s%s, submitted by ", k ? " and on " : "",
               hd_coll_name(x->coll), x->name, set, what);
      put_text(w, b);
      const unsigned char *sub = v->t[x->tensor].sub;
      int cnt = 0;
      for (int g2 = 0; g2 < job->desc.size; g2++) cnt += sub[g2] != 0;
      put_text(w, cnt == 1 ? "rank " : "ranks "); /* "rank 2", "ranks 0,2" */
      fmt_ranks(w, sub, job->desc.size);
    }
    named++;
  }
  if (total > named) {
    char b[64];
    snprintf(b, sizeof b, "; and %d more ranks", total - named);
    put_text(w, b);
  }
  put_text(w, ". Each waits on an operation that another of them has not "
              "submitted: the ranks call collectives in different orders, or "
              "one skips a collective the others call.");
  hp_put_u8(w, 0);
}

/* ---- the detector's state -------------------------------------------------
 */

struct hd_dl {
  int action; /* HD_DL_WARN, HD_DL_FAIL */
  uv_timer_t tick, fail_timer, fault_timer;
  int timers;
  /* this host */
  uint64_t sent_hash; /* of the last report sent to host 0 (0: none) */
  /* host 0 */
  unsigned char **rep; /* latest report of each host (NULL: none) */
  size_t *rep_len;
  uint64_t *rep_hash;
  uint64_t last_key, warned_key, probe_key;
  uint32_t probe_id;
  int acks_needed, probe_ok;
  unsigned char *probe_host; /* hosts asked */
  /* the verdict being carried out */
  int found;
};

static uint64_t hash_bytes(const unsigned char *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h | 1;
}

static void send_frame(struct hd_job *job, int host, struct hp_wbuf *body) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  hp_frame_begin(&w, HP_MSG_DEADLOCK, 0);
  hp_put_raw(&w, body->data, body->len);
  if (hp_frame_end(&w) == 0 && !w.err) hd_mesh_send(job, host, &w);
  hp_wbuf_free(&w);
}

/* Sends the stack signal to the local ranks of the set. */
static void signal_stacks(struct hd_job *job, const unsigned char *in) {
  for (int i = 0; i < job->nlocal; i++) {
    struct hd_rank *r = &job->ranks[i];
    uint32_t sig = r->hdr ? atomic_load(&r->hdr->stack_signal) : 0;
    if (!in[r->info.rank] || !sig || sig >= 65 || r->pid <= 0 || r->reaped)
      continue;
    kill(r->pid, (int)sig);
  }
}

static void on_fault_timer(uv_timer_t *t) {
  struct hd_job *job = t->data;
  if (job->late_fault) hd_control_fault(job, job->late_fault);
  free(job->late_fault);
  job->late_fault = NULL;
}

/* Every operation of the job fails with HORA_EDEADLOCK. */
static void on_fail_timer(uv_timer_t *t) {
  struct hd_job *job = t->data;
  struct hd_dl *d = job->dl;
  if (job->gone_rank == HD_GONE_DEADLOCK) hd_fail_all(job);
  /* horarun hears of it once the ranks have had a moment to say what
   * failed (or before DONE, if they all end first: report.c) */
  if (job->late_fault)
    uv_timer_start(&d->fault_timer, on_fault_timer, DL_FAULT_MS, 0);
}

/* The verdict on this host: stacks, then (fail) the waits fail. */
static void carry_out(struct hd_job *job, const char *msg,
                      const unsigned char *in, int fail) {
  struct hd_dl *d = job->dl;
  signal_stacks(job, in);
  if (!fail) {
    hd_metrics_deadlock(job);
    hc_warn("%s The job goes on (--deadlock-action warn): the stall "
            "inspector ends it after its shutdown time. [H1005]", msg);
    return;
  }
  if (d->found || job->gone_rank != -1) return;
  d->found = 1;
  hd_metrics_deadlock(job);
  /* The job is failing from now on: what fails before the stacks are out
   * (a host whose ranks ended first) fails with this */
  job->gone_rank = HD_GONE_DEADLOCK;
  hc_fmt(job->gone_msg, sizeof job->gone_msg, "%s", msg);
  hc_error("%s [H1006]", msg);
  uv_timer_start(&d->fail_timer, on_fail_timer, DL_STACK_MS, 0);
}

/* Host 0: the set is confirmed. */
static void declare(struct hd_job *job, struct dl_view *v,
                    const unsigned char *in) {
  struct hd_dl *d = job->dl;
  int fail = d->action == HD_DL_FAIL;
  if (!fail && d->last_key == d->warned_key) return;
  d->warned_key = d->last_key;
  struct hp_wbuf text;
  hp_wbuf_init(&text);
  describe(job, v, in, &text);
  if (text.err) {
    hp_wbuf_free(&text);
    return;
  }
  const char *msg = (const char *)text.data;
  /* FOUND: action, the message, the set */
  struct hp_wbuf b;
  hp_wbuf_init(&b);
  hp_put_u8(&b, DL_FOUND);
  hp_put_u8(&b, (uint8_t)fail);
  hp_put_str(&b, msg);
  hp_put_bytes(&b, in, (size_t)job->desc.size);
  for (uint32_t h = 1; h < job->desc.nhosts; h++) send_frame(job, (int)h, &b);
  hp_wbuf_free(&b);
  if (fail && !job->late_fault && job->gone_rank == -1)
    job->late_fault = strdup(msg);
  carry_out(job, msg, in, fail);
  hp_wbuf_free(&text);
}

/* Host 0: builds the view of every host's latest report; the set's size,
 * its members in in[] (job size bytes). */
static int verdict(struct hd_job *job, struct dl_view *v, unsigned char *in) {
  struct hd_dl *d = job->dl;
  int size = job->desc.size;
  memset(v, 0, sizeof *v);
  v->complete = 1;
  v->joined = calloc((size_t)size, 1);
  v->blocked = calloc((size_t)size, 1);
  if (!v->joined || !v->blocked) return 0;
  for (uint32_t h = 0; h < job->desc.nhosts; h++)
    if (d->rep[h] && view_add(v, size, d->rep[h], d->rep_len[h], (int)h) < 0)
      return 0; /* checked when it arrived: only out of memory */
  if (!v->complete) return 0;
  memset(in, 0, (size_t)size);
  return closed_set(job, v, in);
}

/* A key for the set and the reports it came from. */
static uint64_t set_key(struct hd_job *job, const unsigned char *in) {
  struct hd_dl *d = job->dl;
  uint64_t k = hash_bytes(in, (size_t)job->desc.size);
  for (uint32_t h = 0; h < job->desc.nhosts; h++)
    k = (k ^ (d->rep[h] ? d->rep_hash[h] : 0)) * 1099511628211ull;
  return k | 1;
}

static void store_report(struct hd_dl *d, int host, const unsigned char *p,
                         size_t len) {
  free(d->rep[host]);
  d->rep[host] = NULL;
  d->rep_len[host] = 0;
  d->rep_hash[host] = 0;
  if (!len) return;
  if (!(d->rep[host] = malloc(len))) return;
  memcpy(d->rep[host], p, len);
  d->rep_len[host] = len;
  d->rep_hash[host] = hash_bytes(p, len);
}

static void host0_tick(struct hd_job *job, struct hp_wbuf *mine, int cand) {
  struct hd_dl *d = job->dl;
  store_report(d, 0, cand ? mine->data : NULL, cand ? mine->len : 0);
  int any = 0;
  for (uint32_t h = 0; h < job->desc.nhosts; h++) any |= d->rep[h] != NULL;
  if (!any) {
    d->last_key = d->probe_key = 0;
    return;
  }
  struct dl_view v;
  unsigned char *in = calloc((size_t)job->desc.size, 1);
  int n = in ? verdict(job, &v, in) : 0;
  uint64_t key = n ? set_key(job, in) : 0;
  if (!n || key != d->last_key) {
    d->last_key = key; /* once more, to be sure */
    d->probe_key = 0;
  } else if (d->probe_key != key) {
    /* the same twice: ask the hosts of the set whether it still holds */
    d->probe_key = key;
    d->probe_id++;
    d->acks_needed = 0;
    d->probe_ok = 1;
    memset(d->probe_host, 0, job->desc.nhosts);
    for (int i = 0; i < v.nrank; i++)
      if (in[v.rank[i].rank] && v.rank[i].host)
        d->probe_host[v.rank[i].host] = 1;
    for (uint32_t h = 1; h < job->desc.nhosts; h++) {
      if (!d->probe_host[h]) continue;
      struct hp_wbuf b;
      hp_wbuf_init(&b);
      hp_put_u8(&b, DL_PROBE);
      hp_put_u32(&b, d->probe_id);
      hp_put_u64(&b, d->rep_hash[h]);
      send_frame(job, (int)h, &b);
      hp_wbuf_free(&b);
      d->acks_needed++;
    }
    if (!d->acks_needed) declare(job, &v, in);
  }
  if (in) view_free(&v);
  free(in);
}

/* Host 0: an ACK completes a probe; declares when every host agreed and
 * nothing changed meanwhile. */
static void on_ack(struct hd_job *job, int from, uint32_t id, int same) {
  struct hd_dl *d = job->dl;
  if (!d->probe_key || id != d->probe_id || !d->probe_host[from]) return;
  d->probe_host[from] = 0;
  if (!same) d->probe_ok = 0;
  if (--d->acks_needed > 0) return;
  if (!d->probe_ok) {
    d->probe_key = d->last_key = 0;
    return;
  }
  struct hp_wbuf mine;
  hp_wbuf_init(&mine);
  int cand = local_report(job, &mine);
  if (!mine.err)
    store_report(d, 0, cand ? mine.data : NULL, cand ? mine.len : 0);
  hp_wbuf_free(&mine);
  struct dl_view v;
  unsigned char *in = calloc((size_t)job->desc.size, 1);
  int n = in ? verdict(job, &v, in) : 0;
  if (n && set_key(job, in) == d->probe_key) declare(job, &v, in);
  else d->probe_key = d->last_key = 0;
  if (in) view_free(&v);
  free(in);
}

static void on_tick(uv_timer_t *t) {
  struct hd_job *job = t->data;
  struct hd_dl *d = job->dl;
  if (d->found || job->gone_rank != -1 || job->aborting || !job->have_job)
    return;
  hd_poll_rings(job); /* what was submitted before a wait began is known */
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  int cand = local_report(job, &w);
  if (w.err) {
    hp_wbuf_free(&w);
    return;
  }
  if (job->desc.host_index == 0) {
    host0_tick(job, &w, cand);
  } else {
    uint64_t h = cand ? hash_bytes(w.data, w.len) : 0;
    if (h != d->sent_hash) {
      if (!cand) { /* withdraws the last one */
        hp_wbuf_reset(&w);
        hp_put_u8(&w, DL_REPORT);
        hp_put_u32(&w, job->desc.host_index);
        hp_put_u8(&w, 1);
        hp_put_u32(&w, 0);
        hp_put_u32(&w, 0);
        hp_put_u32(&w, 0);
      }
      send_frame(job, 0, &w);
      d->sent_hash = h;
    }
  }
  hp_wbuf_free(&w);
}

/* ---- frames ------------------------------------------------------------- */

int hd_deadlock_frame(struct hd_job *job, int from, const unsigned char *p,
                      size_t len, char *why, size_t whylen) {
  struct hd_dl *d = job->dl;
  struct hp_rbuf rb;
  hp_rbuf_init(&rb, p, len);
  uint8_t kind = hp_get_u8(&rb);
  int me = (int)job->desc.host_index;
  if (!d) return 0; /* detection is off here: nothing to say */
  switch (kind) {
  case DL_REPORT: {
    if (me != 0 || from == 0) break;
    /* checked now, so that host 0's verdicts read only good reports */
    struct dl_view v = {.complete = 1};
    v.joined = calloc((size_t)job->desc.size, 1);
    v.blocked = calloc((size_t)job->desc.size, 1);
    int bad = !v.joined || !v.blocked ||
              view_add(&v, job->desc.size, p, len, from) < 0;
    int empty = v.nrank == 0;
    view_free(&v);
    if (bad) {
      hc_fmt(why, whylen, "bad deadlock REPORT");
      return -1;
    }
    store_report(d, from, empty ? NULL : p, empty ? 0 : len);
    return 0;
  }
  case DL_PROBE: {
    uint32_t id = hp_get_u32(&rb);
    uint64_t expect = hp_get_u64(&rb);
    if (rb.err || rb.off != len || me == 0 || from != 0) break;
    hd_poll_rings(job);
    struct hp_wbuf w;
    hp_wbuf_init(&w);
    int cand = local_report(job, &w);
    int same = cand && !w.err && hash_bytes(w.data, w.len) == expect;
    if (!same && cand && !w.err) { /* the news first, then the answer */
      send_frame(job, 0, &w);
      d->sent_hash = hash_bytes(w.data, w.len);
    }
    hp_wbuf_reset(&w);
    hp_put_u8(&w, DL_ACK);
    hp_put_u32(&w, id);
    hp_put_u8(&w, (uint8_t)same);
    send_frame(job, 0, &w);
    hp_wbuf_free(&w);
    return 0;
  }
  case DL_ACK: {
    uint32_t id = hp_get_u32(&rb);
    uint8_t same = hp_get_u8(&rb);
    if (rb.err || rb.off != len || me != 0 || from == 0) break;
    on_ack(job, from, id, same);
    return 0;
  }
  case DL_FOUND: {
    uint8_t fail = hp_get_u8(&rb);
    char *msg = hp_get_str(&rb, 1u << 20);
    size_t n = 0;
    const unsigned char *in = hp_get_bytes(&rb, &n);
    if (rb.err || !msg || !in || rb.off != len || me == 0 || from != 0 ||
        n != (size_t)job->desc.size) {
      free(msg);
      break;
    }
    if (!d->found && job->gone_rank == -1) carry_out(job, msg, in, fail);
    free(msg);
    return 0;
  }
  default:
    break;
  }
  hc_fmt(why, whylen, "bad deadlock message (kind %u)", kind);
  return -1;
}

/* ---- start and end ------------------------------------------------- */

static void on_closed(uv_handle_t *h) {
  struct hd_job *job = h->data;
  struct hd_dl *d = job->dl;
  if (--d->timers) return;
  for (uint32_t i = 0; d->rep && i < job->desc.nhosts; i++) free(d->rep[i]);
  free(d->rep);
  free(d->rep_len);
  free(d->rep_hash);
  free(d->probe_host);
  free(d);
  job->dl = NULL;
}

void hd_deadlock_forget(struct hd_job *job, uint32_t nhosts) {
  struct hd_dl *d = job->dl;
  if (!d) return;
  for (uint32_t i = 0; i < nhosts; i++) {
    free(d->rep[i]);
    d->rep[i] = NULL;
    d->rep_len[i] = 0;
    d->rep_hash[i] = 0;
    d->probe_host[i] = 0;
  }
  d->sent_hash = 0;
  d->last_key = d->probe_key = 0;
  d->acks_needed = d->probe_ok = 0;
}

int hd_deadlock_init(struct hd_job *job) {
  const char *a = hk_str(&job->knobs, deadlock_action);
  int action = !strcmp(a, "fail") ? HD_DL_FAIL
               : !strcmp(a, "warn") ? HD_DL_WARN
                                     : HD_DL_OFF;
  if (action == HD_DL_OFF) return 0;
  struct hd_dl *d = calloc(1, sizeof *d);
  uint32_t n = job->desc.nhosts ? job->desc.nhosts : 1;
  if (!d) return -1;
  d->action = action;
  d->rep = calloc(n, sizeof *d->rep);
  d->rep_len = calloc(n, sizeof *d->rep_len);
  d->rep_hash = calloc(n, sizeof *d->rep_hash);
  d->probe_host = calloc(n, 1);
  if (!d->rep || !d->rep_len || !d->rep_hash || !d->probe_host) {
    free(d->rep);
    free(d->rep_len);
    free(d->rep_hash);
    free(d->probe_host);
    free(d);
    return -1;
  }
  job->dl = d;
  uv_timer_t *tm[] = {&d->tick, &d->fail_timer, &d->fault_timer};
  for (int i = 0; i < 3; i++) {
    uv_timer_init(job->daemon->loop, tm[i]);
    tm[i]->data = job;
  }
  d->timers = 3;
  uv_timer_start(&d->tick, on_tick, DL_TICK_MS, DL_TICK_MS);
  return 0;
}

void hd_deadlock_close(struct hd_job *job) {
  struct hd_dl *d = job->dl;
  if (!d || uv_is_closing((uv_handle_t *)&d->tick)) return;
  uv_close((uv_handle_t *)&d->tick, on_closed);
  uv_close((uv_handle_t *)&d->fail_timer, on_closed);
  uv_close((uv_handle_t *)&d->fault_timer, on_closed);
}
