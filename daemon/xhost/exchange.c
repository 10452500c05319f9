/* exchange.c -- allgather, alltoall and reducescatter across hosts.
 *
 * Hierarchical, each byte crossing the network once per host that needs
 * it, over direct links between the communicator's hosts (the mesh is
 * complete), sent from where it lies (the links read it there) and
 * written where it goes as it arrives:
 *
 *  - allgather: the local members' inputs are copied into every local
 *    output (W, the first local member's output, among them); this
 *    host's block of W goes to every other host; what they send is copied
 *    into W and every other local output as it arrives. Flat (the
 *    decision's HP_DA_FLAT: hd_flat_allgather, or autotune's trial): this
 *    host's block goes to the next host only, and what comes from the
 *    previous one (each frame naming the host
 *    whose block it carries, in its step's high bits) is sent on to the
 *    next from W, unless the next host is its origin; a host that keeps
 *    no W sends on a copy. The operation ends once every origin's last
 *    frame came, an empty one too.
 *  - reducescatter: the local members' inputs are reduced into W (this
 *    daemon's memory, in a wider type where one host's result would be:
 *    64-bit sums for an integer AVERAGE, float32 for float16/bfloat16
 *    sums, products and averages); the part of W that each other host's
 *    members receive goes to that host, and what the others send for this
 *    host's part is reduced into W as it arrives; each local member then
 *    takes its block (AVERAGE divided by the set's size, postscale
 *    applied, narrowed once). A host of one member, without widening,
 *    needs no W: the other hosts' parts go from its input, and its own
 *    part is reduced in its output.
 *  - Adasum (an allreduce of op HORA_ADASUM; see adasum_units()): the
 *    local members' inputs, widened, combined here and sent whole to
 *    every other host, or each member's when hosts hold different
 *    numbers of them; what arrives goes into W, and once all is in each
 *    daemon runs the rest of the tree over W in the same order.
 *  - alltoall: a header of sizes (int64 elements per source member here
 *    and destination member there; -1 for a source that has joined), then
 *    what each local member sends to the members of that host, which lies
 *    in one piece of its input: the pieces of all local members one after
 *    the other (source-major). What arrives is copied into the outputs
 *    (read there by the socket when a frame falls in one block). Local
 *    pairs are copied directly. In place (a member's output is its input),
 *    two local members trade their blocks, and what arrives waits until
 *    this host's data have left the input it lands in.
 *
 * Joined members (hora_join) take part with the neutral contribution: in
 * an allgather they send nothing (their receive counts must say 0), in a
 * reducescatter zeros, in an alltoall nothing (their part of the others'
 * outputs is zeros), and they receive nothing. A host whose members have
 * all joined knows the operation only from its coordinator's decision,
 * not its counts or splits: it sends an empty block, takes in and drops
 * what the others send, and learns where each host's bytes end from the
 * last frame (XC_LAST) or the alltoall header.
 *
 * Data travel in XDATA frames of at most XC_FRAME bytes, each naming its
 * communicator, decision and byte offset; the last one of a message is
 * marked (step XC_LAST). Frames for a decision this host has not started
 * yet wait (bounded) until it does. */
#define HC_LOG_SUB HC_SUB_ENGINE
#include <stdlib.h>
#include <string.h>

#include "../daemon.h"
#include "reduce.h"
#include "../adasum.h"

#define XC_FRAME (4u << 20)
#define XC_EARLY_MAX (256ull << 20)
#define XC_KEEP (256ull << 20) /* a W up to this size is kept for the next */
#define XC_PIECE (128u << 10)  /* read once, written to several outputs */
#define HD_XC_LOCAL_MAX 64 /* outputs written from one read (more: again) */
#define XC_LAST 1u            /* XDATA step: the last frame of a message */
#define XC_ORIGIN_SHIFT 8     /* flat allgather: step's bits 8.. the origin */
#define XC_UNKNOWN UINT64_MAX /* want[k]: known at the last frame / header */
#define XC_JOINED (-1)        /* alltoall header: that source has joined */

struct xc_early {
  struct xc_early *next;
  int from; /* position in the communicator's hosts */
  struct hp_xdata_hdr h;
  unsigned char *payload; /* whole payload; data at + HP_XDATA_HDR_LEN */
  size_t len;             /* data bytes */
};

/* A frame on its way out: its bytes stay where they are until done. */
struct xc_send {
  struct xc_send *next;
  struct hd_xcoll *x;
  const unsigned char *p;
  uint64_t n;
  int done;
  unsigned char *own; /* a copy the frame is sent from, freed with it */
};

struct xc_range { /* bytes [off, off + n) from host position k, staged */
  int k;
  uint64_t off, n;
};

struct hd_xcoll {
  struct hd_comm *c;
  struct hd_tensor *t;
  int active, ran;
  uint64_t seq;
  int pending; /* sends not yet taken by the sockets */
  uint64_t es, wes;
  int wdtype, wop; /* how W is reduced */
  unsigned char *w;        /* allgather: W; reducescatter: this host's part */
  unsigned char *wbuf;     /* this daemon's memory for W, kept between ops */
  size_t wcap;
  int hold;                /* alltoall in place: arrivals wait for the sends */
  unsigned char **stage;   /* ... per host position, kept between ops */
  size_t *scap;
  struct xc_range *staged; /* what waits there */
  size_t nstaged, cstaged;
  struct xc_send *sends;   /* this operation's frames out */
  uint64_t *want, *got;    /* bytes expected from / received from each host */
  uint64_t *base;          /* where each host's bytes go in W (allgather:
                              offsets in bytes) */
  unsigned char **shdr;    /* alltoall: the header sent to each host */
  unsigned char **rhdr;    /* alltoall: the header from each host */
  int sink;                /* allgather: every local member joined */
  int flat;                /* allgather round a ring (HP_DA_FLAT):
                              frames from the previous host only, each
                              naming its origin, sent on to the next */
  int nlast;               /* flat: origins whose last frame came */
  char bad[HP_MSG_MAX + 1]; /* the operation fails with this once all is in */
  int bad_rc;
  struct xc_early *early;
  uint64_t early_bytes;
};

static struct hd_xcoll *xc_of(struct hd_comm *c) {
  if (c->xc) return c->xc;
  struct hd_xcoll *x = calloc(1, sizeof *x);
  if (!x) return NULL;
  x->c = c;
  size_t n = (size_t)c->nhosts;
  x->want = calloc(n, sizeof *x->want);
  x->got = calloc(n, sizeof *x->got);
  x->base = calloc(n, sizeof *x->base);
  x->stage = calloc(n, sizeof *x->stage);
  x->scap = calloc(n, sizeof *x->scap);
  x->shdr = calloc(n, sizeof *x->shdr);
  x->rhdr = calloc(n, sizeof *x->rhdr);
  if (!x->want || !x->got || !x->base || !x->stage || !x->scap || !x->shdr ||
      !x->rhdr) {
    free(x->want);
    free(x->got);
    free(x->base);
    free(x->stage);
    free(x->scap);
    free(x->shdr);
    free(x->rhdr);
    free(x);
    return NULL;
  }
  return c->xc = x;
}

static void release_buffers(struct hd_xcoll *x) {
  while (x->sends) { /* none pending: no callback will come */
    struct xc_send *f = x->sends;
    x->sends = f->next;
    free(f->own);
    free(f);
  }
  x->nstaged = 0;
  if (x->wcap > XC_KEEP) {
    free(x->wbuf);
    x->wbuf = NULL;
    x->wcap = 0;
  }
  for (int k = 0; k < x->c->nhosts; k++) {
    if (x->scap[k] > XC_KEEP) {
      free(x->stage[k]);
      x->stage[k] = NULL;
      x->scap[k] = 0;
    }
    free(x->shdr[k]);
    free(x->rhdr[k]);
    x->shdr[k] = x->rhdr[k] = NULL;
  }
  x->w = NULL;
  x->hold = 0;
}

/* At least n bytes at *buf (capacity *cap), kept from one operation to
 * the next: memory the pages of which are already there. */
static unsigned char *room(unsigned char **buf, size_t *cap, size_t n) {
  if (n + 8 > *cap) {
    free(*buf);
    *cap = 0;
    if (!(*buf = malloc(n + 8))) return NULL;
    *cap = n + 8;
  }
  return *buf;
}

static unsigned char *w_room(struct hd_xcoll *x, size_t n) {
  return room(&x->wbuf, &x->wcap, n);
}

static void end_op(struct hd_xcoll *x) {
  x->active = 0;
  x->t = NULL;
  if (!x->pending) release_buffers(x);
}

static void place_held(struct hd_xcoll *x);

static void on_sent(void *arg, int status) {
  struct xc_send *f = arg;
  struct hd_xcoll *x = f->x;
  (void)status; /* a failed send means a lost peer, reported there */
  f->done = 1;
  x->pending--;
  if (x->pending) return;
  if (!x->active) release_buffers(x); /* an aborted one: the next may start */
  else if (x->hold) place_held(x);     /* the input may now be written */
  hd_comm_progress(x->c);
  hd_flush_wakeups(x->c->job);
}

/* Sends n bytes at p to host position k, in frames (at least one), as
 * the bytes at offset `at` of what goes there (of host position `origin`'s
 * block, flat); `last`: they end it (the last frame is marked). `own`: a
 * copy p lies in, freed once sent. -1: out of memory. */
static int send_from(struct hd_xcoll *x, int k, const unsigned char *p,
                     uint64_t n, uint64_t at, int last, int origin,
                     unsigned char *own) {
  struct hd_job *job = x->c->job;
  uint64_t off = 0;
  do {
    uint64_t len = HC_MIN((uint64_t)XC_FRAME, n - off);
    unsigned char hdr[HP_FRAME_HDR + HP_XDATA_HDR_LEN];
    struct hp_xdata_hdr h = {.comm = x->c->id,
                             .seq = x->seq,
                             .offset = at + off,
                             .step = last && off + len == n ? XC_LAST : 0};
    if (x->flat) h.step |= (uint32_t)origin << XC_ORIGIN_SHIFT;
    hp_xdata_frame_hdr(hdr, &h, (uint32_t)len);
    struct xc_send *f = calloc(1, sizeof *f);
    if (!f) {
      free(own);
      return -1;
    }
    *f = (struct xc_send){x->sends, x, p + off, len, 0,
                          off + len == n ? own : NULL};
    x->sends = f;
    x->pending++;
    if (job->link->send(job, x->c->hosts[k], hdr, sizeof hdr, p + off, len,
                      on_sent, f) < 0) {
      x->pending--; /* the host is lost: everything fails from there */
      f->done = 1;
      return 0;
    }
    off += len;
  } while (off < n);
  return 0;
}

static int send_bytes(struct hd_xcoll *x, int k, const unsigned char *p,
                      uint64_t n, uint64_t at, int last) {
  return send_from(x, k, p, n, at, last, x->c->me, NULL);
}

/* Flat: the host position frames come from, and the one they go on to. */
static int ring_prev(const struct hd_comm *c) {
  return (c->me + c->nhosts - 1) % c->nhosts;
}
static int ring_next(const struct hd_comm *c) {
  return (c->me + 1) % c->nhosts;
}

/* The host position whose data a frame from host position `from` holds:
 * the sender's own, or, flat, the origin it names (the sender must be the
 * previous host). -1 (why says so, unless NULL) when that cannot be. */
static int origin_of(const struct hd_xcoll *x, int from,
                     const struct hp_xdata_hdr *h, char *why, size_t whylen) {
  const struct hd_comm *c = x->c;
  if (!x->flat) return from;
  uint32_t o = h->step >> XC_ORIGIN_SHIFT;
  if (from == ring_prev(c) && o < (uint32_t)c->nhosts && (int)o != c->me)
    return (int)o;
  if (!why) return -1;
  char name[300];
  hd_host_name(c->job, c->hosts[from], name, sizeof name);
  hc_fmt(why, whylen, "allgather (decision %llu): a frame from %s of host "
         "position %u's data, where only the previous host's frames of the "
         "others' data belong (a flat ring)", (unsigned long long)x->seq,
         name, o);
  return -1;
}

/* Whether n bytes at p overlap a frame not yet taken by the sockets. */
static int unsent(const struct hd_xcoll *x, const unsigned char *p,
                  uint64_t n) {
  for (const struct xc_send *f = x->sends; f; f = f->next)
    if (!f->done && p < f->p + f->n && f->p < p + n) return 1;
  return 0;
}

/* Copies n bytes at src to each of the nd destinations, in pieces that
 * stay in cache, so that src is read once. */
static void copy_to(unsigned char *const *dst, int nd, const unsigned char *src,
                    uint64_t n) {
  if (nd == 1) {
    if (dst[0] != src) memcpy(dst[0], src, n);
    return;
  }
  for (uint64_t o = 0; o < n; o += XC_PIECE) {
    uint64_t m = HC_MIN((uint64_t)XC_PIECE, n - o);
    for (int k = 0; k < nd; k++)
      if (dst[k] != src) memcpy(dst[k] + o, src + o, m);
  }
}

/* ---- widening for reducescatter --------------------------------------- */

static void wide_kind(const struct hd_tensor *t, int *wdt, int *wop) {
  int dt = t->meta.dtype, op = t->meta.op;
  *wdt = dt;
  *wop = op == HORA_AVERAGE ? HORA_SUM : op;
  if (op == HORA_AVERAGE && dt <= HORA_INT64) *wdt = HORA_INT64;
  if ((dt == HORA_FLOAT16 || dt == HORA_BFLOAT16) &&
      (op == HORA_SUM || op == HORA_AVERAGE || op == HORA_PRODUCT))
    *wdt = HORA_FLOAT32;
}

static void widen(void *dst, int wdt, const void *src, int dt, uint64_t n) {
  if (wdt == dt) {
    memcpy(dst, src, n * hora_dtype_size(dt));
    return;
  }
  if (wdt == HORA_FLOAT32) {
    hc_widen16(dst, src, n, dt == HORA_BFLOAT16);
    return;
  }
  int64_t *o = dst;
  for (uint64_t i = 0; i < n; i++) {
    switch (dt) {
    case HORA_UINT8: o[i] = ((const uint8_t *)src)[i]; break;
    case HORA_INT8: o[i] = ((const int8_t *)src)[i]; break;
    case HORA_INT16: o[i] = ((const int16_t *)src)[i]; break;
    default: o[i] = ((const int32_t *)src)[i]; break;
    }
  }
}

/* Writes n elements of W (at w) into out: AVERAGE divided by size. */
static void narrow(const struct hd_tensor *t, void *out, const void *w,
                   int wdt, uint64_t n, int size) {
  int dt = t->meta.dtype, op = t->meta.op;
  if (wdt == dt) {
    const void *src[1] = {w};
    void *dst[1] = {out};
    if (n) hc_reduce(dst, 1, src, 1, n, dt, op == HORA_AVERAGE ? HORA_AVERAGE
                                                            : HORA_SUM, size);
    return;
  }
  if (wdt == HORA_FLOAT32) {
    hc_narrow16(out, w, n, dt == HORA_BFLOAT16,
                op == HORA_AVERAGE ? (float)size : 1.0f);
    return;
  }
  const int64_t *s = w; /* integer AVERAGE: 64-bit sums */
  for (uint64_t i = 0; i < n; i++) {
    int64_t q = s[i] / size;
    switch (dt) {
    case HORA_UINT8:
    case HORA_INT8: ((uint8_t *)out)[i] = (uint8_t)q; break;
    case HORA_INT16: ((uint16_t *)out)[i] = (uint16_t)q; break;
    default: ((uint32_t *)out)[i] = (uint32_t)q; break;
    }
  }
}

/* ---- starting an operation ------------------------------------------- */

/* Every local member has joined: this host knows no counts; it sends an
 * empty block and drops what the others send. */
static int start_allgather_joined(struct hd_xcoll *x) {
  struct hd_comm *c = x->c;
  x->sink = 1;
  for (int k = 0; k < c->nhosts; k++)
    x->want[k] = k == c->me ? 0 : XC_UNKNOWN;
  static const unsigned char none[1];
  for (int k = 0; k < c->nhosts; k++)
    if (k != c->me && (!x->flat || k == ring_next(c)) &&
        send_bytes(x, k, none, 0, 0, 1) < 0)
      return -1;
  return 0;
}

static int start_allgather(struct hd_xcoll *x) {
  struct hd_comm *c = x->c;
  struct hd_tensor *t = x->t;
  const int64_t *counts = t->part[t->first].aux;
  if (!counts) return start_allgather_joined(x);
  uint64_t total = 0, es = x->es;
  uint64_t *off = calloc((size_t)c->size + 1, sizeof *off);
  unsigned char **dst = calloc((size_t)c->nlocal + 1, sizeof *dst);
  if (!off || !dst) {
    free(off);
    free(dst);
    return -1;
  }
  for (int m = 0; m < c->size; m++) off[m + 1] = off[m] + (uint64_t)counts[m];
  total = off[c->size];
  int nd = 0;
  for (int i = 0; i < c->nlocal; i++)
    if (!t->part[i].joined) dst[nd++] = hd_out_ptr(t, i);
  if (nd) {
    x->w = dst[0];
  } else if (!(x->w = w_room(x, total * es))) {
    free(off);
    free(dst);
    return -1;
  }
  for (int i = 0; i < c->nlocal; i++) {
    int m = c->local_member[i];
    if (t->part[i].joined || !counts[m]) continue;
    unsigned char *at[HD_XC_LOCAL_MAX];
    const unsigned char *src = hd_in_ptr(t, i);
    int na = 0;
    for (int k = 0; k < nd; k++) {
      if (na == HD_XC_LOCAL_MAX) {
        copy_to(at, na, src, (uint64_t)counts[m] * es);
        na = 0;
      }
      at[na++] = dst[k] + off[m] * es;
    }
    if (na) copy_to(at, na, src, (uint64_t)counts[m] * es);
  }
  for (int k = 0; k < c->nhosts; k++) {
    uint64_t lo = off[c->host_first[k]],
             hi = off[c->host_first[k] + c->host_n[k]];
    x->base[k] = lo * es;
    x->want[k] = k == c->me ? 0 : (hi - lo) * es;
  }
  uint64_t mlo = x->base[c->me];
  uint64_t mhi = off[c->host_first[c->me] + c->host_n[c->me]] * es;
  free(off);
  free(dst);
  for (int k = 0; k < c->nhosts; k++)
    if (k != c->me && (!x->flat || k == ring_next(c)) &&
        send_bytes(x, k, x->w + mlo, mhi - mlo, 0, 1) < 0)
      return -1;
  return 0;
}

static void rs_block_of(const struct hd_comm *c, const struct hd_tensor *t,
                        int m, uint64_t *first, uint64_t *n);

/* Elements [*lo, *hi) of the input that host position k's members get. */
static void rs_host_range(const struct hd_comm *c, const struct hd_tensor *t,
                          int k, uint64_t *lo, uint64_t *hi) {
  uint64_t f0, n0, f1, n1;
  rs_block_of(c, t, c->host_first[k], &f0, &n0);
  rs_block_of(c, t, c->host_first[k] + c->host_n[k] - 1, &f1, &n1);
  *lo = f0;
  *hi = f1 + n1;
}

/* The local reduction into W, in slices on the reduction threads. */
struct rs_local {
  void *w;
  const void *src[HD_XC_LOCAL_MAX];
  int ns, dtype, op;
  uint64_t n;
};

static void rs_local_slice(void *arg, int i, int n) {
  const struct rs_local *j = arg;
  uint64_t es = hora_dtype_size(j->dtype), unit = 64 / es;
  uint64_t units = (j->n + unit - 1) / unit;
  uint64_t lo = HC_MIN(j->n, units * (uint64_t)i / (uint64_t)n * unit);
  uint64_t hi = HC_MIN(j->n, units * (uint64_t)(i + 1) / (uint64_t)n * unit);
  if (lo >= hi) return;
  const void *s[HD_XC_LOCAL_MAX];
  for (int k = 0; k < j->ns; k++)
    s[k] = (const unsigned char *)j->src[k] + lo * es;
  void *dst[1] = {(unsigned char *)j->w + lo * es};
  hc_reduce(dst, 1, s, j->ns, hi - lo, j->dtype, j->op, 0);
}

static int start_reducescatter(struct hd_xcoll *x) {
  struct hd_comm *c = x->c;
  struct hd_tensor *t = x->t;
  uint64_t n = t->meta.count, es = x->es, lo, hi;
  wide_kind(t, &x->wdtype, &x->wop);
  x->wes = hora_dtype_size(x->wdtype);
  rs_host_range(c, t, c->me, &lo, &hi);
  for (int k = 0; k < c->nhosts; k++) x->base[k] = 0;
  int live = 0;
  for (int i = 0; i < c->nlocal; i++)
    if (!t->part[i].joined) {
      hd_scale_buf(t, hd_in_ptr(t, i), n, 1);
      live++;
    }
  if (c->nlocal == 1 && live == 1 && x->wdtype == t->meta.dtype) {
    /* one member: its output is this host's part */
    const unsigned char *in = hd_in_ptr(t, 0);
    x->w = hd_out_ptr(t, 0);
    if (x->w != in + lo * es) memcpy(x->w, in + lo * es, (hi - lo) * es);
    for (int k = 0; k < c->nhosts; k++) {
      uint64_t klo, khi;
      rs_host_range(c, t, k, &klo, &khi);
      x->want[k] = k == c->me ? 0 : (hi - lo) * es;
      if (k != c->me &&
          send_bytes(x, k, in + klo * es, (khi - klo) * es, 0, 1) < 0)
        return -1;
    }
    return 0;
  }
  unsigned char *w = w_room(x, n * x->wes);
  if (!w) return -1;
  if (x->wdtype == t->meta.dtype && live <= HD_XC_LOCAL_MAX) {
    struct rs_local j = {.w = w, .dtype = x->wdtype, .op = x->wop, .n = n};
    for (int i = 0; i < c->nlocal; i++)
      if (!t->part[i].joined) j.src[j.ns++] = hd_in_ptr(t, i);
    if (!j.ns && !(j.src[j.ns++] = hd_neutral(t, n))) return -1;
    if (n) {
      int nt = n * es >= (256u << 10) ? hd_pool_size() : 1;
      hd_pool_run(rs_local_slice, &j, nt);
    }
  } else {
    unsigned char *tmp = NULL;
    int first = 1;
    for (int i = 0; i < c->nlocal; i++) {
      const void *in;
      if (t->part[i].joined) {
        if (!(in = hd_neutral(t, n))) goto fail;
      } else {
        in = hd_in_ptr(t, i);
      }
      if (first) {
        widen(w, x->wdtype, in, t->meta.dtype, n);
        first = 0;
        continue;
      }
      const void *src[2] = {w, in};
      if (x->wdtype != t->meta.dtype) {
        if (!tmp && !(tmp = malloc(n * x->wes + 8))) goto fail;
        widen(tmp, x->wdtype, in, t->meta.dtype, n);
        src[1] = tmp;
      }
      void *dst[1] = {w};
      if (n) hc_reduce(dst, 1, src, 2, n, x->wdtype, x->wop, 0);
    }
    free(tmp);
    if (0) {
    fail:
      free(tmp);
      return -1;
    }
  }
  for (int k = 0; k < c->nhosts; k++) {
    uint64_t klo, khi;
    rs_host_range(c, t, k, &klo, &khi);
    if (k != c->me &&
        send_bytes(x, k, w + klo * x->wes, (khi - klo) * x->wes, 0, 1) < 0)
      return -1;
    x->want[k] = k == c->me ? 0 : (hi - lo) * x->wes;
  }
  x->w = w + lo * x->wes;
  return 0;
}

/* Adasum: what each host contributes is a number of units, vectors of
 * the working type in W one after the other in host order. Where every
 * host has as many members (hence a power of two: the set's size is
 * one), a host's members form whole subtrees: it combines them itself
 * and sends one unit, as it does when hierarchical (their mean); else it
 * sends each member's vector and the tree runs on all of them. */
static int adasum_units(const struct hd_comm *c, int k, int hier) {
  if (hier) return 1;
  for (int j = 1; j < c->nhosts; j++)
    if (c->host_n[j] != c->host_n[0]) return c->host_n[k];
  return 1;
}

static int start_adasum(struct hd_xcoll *x) {
  struct hd_comm *c = x->c;
  struct hd_tensor *t = x->t;
  int hier = hk_int(&c->job->knobs, hierarchical_allreduce) != 0;
  int dt = t->meta.dtype, nl = c->nlocal;
  uint64_t n = t->meta.count, units = 0;
  x->wdtype = hd_adasum_wtype(dt);
  x->wes = hora_dtype_size(x->wdtype);
  uint64_t vb = n * x->wes; /* bytes of one vector */
  for (int k = 0; k < c->nhosts; k++) {
    int u = adasum_units(c, k, hier);
    x->base[k] = units * vb;
    x->want[k] = k == c->me ? 0 : (uint64_t)u * vb;
    units += (uint64_t)u;
  }
  int mine = adasum_units(c, c->me, hier);
  unsigned char *w = w_room(x, (size_t)(units + (uint64_t)nl) * vb);
  if (!w) return -1;
  unsigned char *at = w + x->base[c->me];
  unsigned char *v = mine == 1 && nl > 1 ? w + units * vb : at;
  for (int i = 0; i < nl; i++)
    hd_adasum_widen(v + (size_t)i * vb,
                    t->part[i].joined ? NULL : hd_in_ptr(t, i), n, dt,
                    t->meta.prescale);
  if (mine == 1 && nl > 1) {
    if (hier) hd_adasum_mean(v, nl, n, x->wdtype);
    else hd_adasum_tree(v, nl, n, x->wdtype);
    memcpy(at, v, vb);
  }
  x->w = w;
  for (int k = 0; k < c->nhosts; k++)
    if (k != c->me && send_bytes(x, k, at, (uint64_t)mine * vb, 0, 1) < 0)
      return -1;
  return 0;
}

/* Every unit is in: the tree over them, the result into each output. */
static void finish_adasum(struct hd_xcoll *x) {
  struct hd_comm *c = x->c;
  struct hd_tensor *t = x->t;
  uint64_t n = t->meta.count;
  int units = 0, hier = hk_int(&c->job->knobs, hierarchical_allreduce) != 0;
  for (int k = 0; k < c->nhosts; k++) units += adasum_units(c, k, hier);
  hd_adasum_tree(x->w, units, n, x->wdtype);
  for (int i = 0; i < c->nlocal; i++)
    if (!t->part[i].joined)
      hd_adasum_narrow(hd_in_ptr(t, i), x->w, n, t->meta.dtype,
                       t->meta.postscale);
}

static uint64_t split_off(const int64_t *v, int upto) {
  uint64_t s = 0;
  for (int i = 0; i < upto; i++) s += (uint64_t)v[i];
  return s;
}

/* Local pairs: two members in place trade their blocks; the copies into
 * outputs that are not inputs go first, since they may read blocks of an
 * input in place that a copy of the second round overwrites. */
static int a2a_local(struct hd_xcoll *x, int *any_in_place) {
  struct hd_comm *c = x->c;
  struct hd_tensor *t = x->t;
  uint64_t es = x->es;
  int size = c->size, nl = c->nlocal;
  int *ip = calloc((size_t)nl, sizeof *ip);
  if (!ip) return -1;
  for (int i = 0; i < nl; i++) *any_in_place |= ip[i] = hd_a2a_in_place(t, i);
  for (int round = 0; round < 2; round++)
    for (int i = 0; i < nl; i++)
      for (int j = 0; j < nl; j++) {
        const struct hd_part *pi = &t->part[i], *pj = &t->part[j];
        if (pi->joined || pj->joined || (i >= j && ip[i] && ip[j])) continue;
        int mi = c->local_member[i], mj = c->local_member[j];
        uint64_t n = (uint64_t)pi->aux[mj] * es;
        if (!n || round != (ip[j] && !ip[i])) continue;
        unsigned char *src = hd_in_ptr(t, i) + split_off(pi->aux, mj) * es;
        unsigned char *dst =
            hd_out_ptr(t, j) + split_off(pj->aux + size, mi) * es;
        if (ip[i] && ip[j])
          hc_swap_bytes(src, dst, n);
        else if (dst != src)
          memcpy(dst, src, n);
      }
  free(ip);
  /* a joined local member's part of the other local members' outputs:
   * zeros (as a joined member's part from another host) */
  for (int j = 0; j < nl; j++) {
    if (t->part[j].joined) continue;
    const int64_t *rs = t->part[j].aux + size;
    for (int i = 0; i < nl; i++) {
      int mi = c->local_member[i];
      if (t->part[i].joined && rs[mi])
        memset(hd_out_ptr(t, j) + split_off(rs, mi) * es, 0,
               (uint64_t)rs[mi] * es);
    }
  }
  return 0;
}

/* The alltoall header a host at position k sends this one: int64 sizes
 * per source member there and destination member here. */
static uint64_t a2a_hdr_bytes(const struct hd_comm *c, int k) {
  return (uint64_t)c->host_n[k] * (uint64_t)c->host_n[c->me] * 8u;
}

/* In the header from host position k: what its member s sends to member
 * m here (XC_JOINED: s has joined). */
static int64_t a2a_hdr_n(const struct hd_xcoll *x, int k, int s, int m) {
  const struct hd_comm *c = x->c;
  int64_t v;
  memcpy(&v, x->rhdr[k] + ((uint64_t)(s - c->host_first[k]) *
                               (uint64_t)c->host_n[c->me] +
                           (uint64_t)(m - c->host_first[c->me])) * 8u, 8);
  return v;
}

static int start_alltoall(struct hd_xcoll *x) {
  struct hd_comm *c = x->c;
  struct hd_tensor *t = x->t;
  uint64_t es = x->es;
  int hold = 0;
  x->hold = 0;
  if (a2a_local(x, &hold) < 0) return -1;
  for (int k = 0; k < c->nhosts; k++) {
    if (k == c->me) continue;
    int m0 = c->host_first[k], mn = c->host_n[k];
    uint64_t hb = (uint64_t)c->nlocal * (uint64_t)mn * 8u;
    x->want[k] = XC_UNKNOWN; /* its header says */
    x->base[k] = 0;
    if (!(x->rhdr[k] = malloc(a2a_hdr_bytes(c, k) + 1)) ||
        !(x->shdr[k] = malloc(hb + 1)))
      return -1;
    unsigned char *p = x->shdr[k];
    int nlast = -1; /* the last local member with data for k */
    for (int i = 0; i < c->nlocal; i++)
      for (int m = m0; m < m0 + mn; m++) {
        int64_t v = t->part[i].joined ? XC_JOINED : t->part[i].aux[m];
        memcpy(p, &v, 8);
        p += 8;
        if (v > 0) nlast = i;
      }
    if (send_bytes(x, k, x->shdr[k], hb, 0, nlast < 0) < 0) return -1;
    uint64_t at = hb;
    for (int i = 0; i <= nlast; i++) {
      const struct hd_part *pt = &t->part[i];
      if (pt->joined) continue;
      uint64_t n = split_off(pt->aux + m0, mn) * es;
      if (n && send_bytes(x, k, hd_in_ptr(t, i) + split_off(pt->aux, m0) * es,
                          n, at, i == nlast) < 0)
        return -1;
      at += n;
    }
  }
  x->hold = hold && x->pending; /* stage from each host's header on */
  return 0;
}

/* The header from host position k is in: the size of the whole message,
 * checked against what the local members expect (a disagreement fails
 * the operation: x->bad), or XC_UNKNOWN when it cannot be; and room to
 * stage what comes while this host's data still leave. */
static uint64_t a2a_header(struct hd_xcoll *x, int k) {
  struct hd_comm *c = x->c;
  struct hd_tensor *t = x->t;
  uint64_t hb = a2a_hdr_bytes(c, k), n = 0, lim = UINT64_MAX / 2 / x->es;
  for (int s = c->host_first[k]; s < c->host_first[k] + c->host_n[k]; s++)
    for (int j = 0; j < c->nlocal; j++) {
      int mj = c->local_member[j];
      int64_t v = a2a_hdr_n(x, k, s, mj);
      if (v == XC_JOINED) continue;
      if (v < 0 || (uint64_t)v > lim - n) return XC_UNKNOWN;
      n += (uint64_t)v;
      if (t->part[j].joined) continue; /* it receives nothing */
      int64_t want = t->part[j].aux[c->size + s];
      if (v != want && !x->bad[0]) {
        x->bad_rc = HORA_EMISMATCH;
        hc_fmt(x->bad, sizeof x->bad, "Mismatched alltoall splits on "
               "tensor '%s': rank %d sends %lld elements to rank %d, "
               "which expects %lld.", t->name, c->members[s], (long long)v,
               c->members[mj], (long long)want);
      }
    }
  if (x->hold && !room(&x->stage[k], &x->scap[k], n * x->es)) return XC_UNKNOWN;
  return hb + n * x->es;
}

/* Where bytes [off, off + n) of the message from host position k go in
 * one piece: NULL unless they fall in one block of one local output. */
static unsigned char *a2a_block(struct hd_xcoll *x, int k, uint64_t off,
                                uint64_t n) {
  struct hd_comm *c = x->c;
  struct hd_tensor *t = x->t;
  uint64_t es = x->es, hb = a2a_hdr_bytes(c, k), at = hb;
  if (x->want[k] == XC_UNKNOWN || off < hb || x->bad[0]) return NULL;
  for (int s = c->host_first[k]; s < c->host_first[k] + c->host_n[k]; s++)
    for (int j = 0; j < c->nlocal; j++) {
      int64_t v = a2a_hdr_n(x, k, s, c->local_member[j]);
      uint64_t bn = v > 0 ? (uint64_t)v * es : 0;
      if (off >= at && off + n <= at + bn) {
        if (t->part[j].joined) return NULL;
        const int64_t *rs = t->part[j].aux + c->size;
        return hd_out_ptr(t, j) + split_off(rs, s) * es + (off - at);
      }
      at += bn;
      if (at > off) return NULL; /* it spans blocks */
    }
  return NULL;
}

/* Bytes [off, off + len) of the message from host position k (data, past
 * its header), at p, into the outputs: source-major, each of k's
 * members' blocks for each local member in turn, as the header says; a
 * joined member's blocks are dropped, and so is everything once the
 * sizes disagree (the operation fails then). */
static void a2a_place(struct hd_xcoll *x, int k, uint64_t off,
                      const unsigned char *p, uint64_t len) {
  struct hd_comm *c = x->c;
  struct hd_tensor *t = x->t;
  uint64_t es = x->es, at = a2a_hdr_bytes(c, k), end = off + len;
  if (x->bad[0]) return;
  for (int s = c->host_first[k];
       s < c->host_first[k] + c->host_n[k] && at < end; s++)
    for (int j = 0; j < c->nlocal && at < end; j++) {
      int64_t v = a2a_hdr_n(x, k, s, c->local_member[j]);
      uint64_t n = v > 0 ? (uint64_t)v * es : 0;
      uint64_t a = HC_MAX(off, at), b = HC_MIN(end, at + n);
      if (a < b && !t->part[j].joined) {
        const int64_t *rs = t->part[j].aux + c->size;
        unsigned char *dst =
            hd_out_ptr(t, j) + split_off(rs, s) * es + (a - at);
        if (dst != p + (a - off)) memcpy(dst, p + (a - off), b - a);
      }
      at += n;
    }
}

/* Zeroes, in each local output, the part from a member that has joined
 * (the headers say which). */
static void a2a_zero_joined(struct hd_xcoll *x) {
  struct hd_comm *c = x->c;
  struct hd_tensor *t = x->t;
  uint64_t es = x->es;
  for (int k = 0; k < c->nhosts; k++) {
    if (k == c->me || x->want[k] == XC_UNKNOWN) continue;
    for (int s = c->host_first[k]; s < c->host_first[k] + c->host_n[k]; s++)
      for (int j = 0; j < c->nlocal; j++) {
        if (t->part[j].joined) continue;
        if (a2a_hdr_n(x, k, s, c->local_member[j]) != XC_JOINED) continue;
        const int64_t *rs = t->part[j].aux + c->size;
        memset(hd_out_ptr(t, j) + split_off(rs, s) * es, 0,
               (uint64_t)rs[s] * es);
      }
  }
}

/* Where bytes [off, off + n) from host position k go, when they go to one
 * place: W (allgather); the output block they fall in (alltoall), unless
 * it is in place and that block's data have not all left yet: then stage;
 * else NULL. */
static unsigned char *dest_of(struct hd_xcoll *x, int k, uint64_t off,
                              uint64_t n) {
  struct hd_tensor *t = x->t;
  if (t->meta.coll == HORA_COLL_ALLGATHER)
    return x->sink ? NULL : x->w + x->base[k] + off;
  if (t->meta.coll == HORA_COLL_ALLREDUCE) /* Adasum */
    return x->w + x->base[k] + off;
  if (t->meta.coll != HORA_COLL_ALLTOALL) return NULL;
  uint64_t hb = a2a_hdr_bytes(x->c, k);
  if (x->want[k] == XC_UNKNOWN || off < hb || x->bad[0]) return NULL;
  unsigned char *b = a2a_block(x, k, off, n);
  if (x->hold && (!b || unsent(x, b, n))) return x->stage[k] + (off - hb);
  return b;
}

/* Alltoall in place: this host's data have left, what waited in stage
 * goes to the outputs; from now on arrivals go there directly. */
static void place_held(struct hd_xcoll *x) {
  if (!x->hold) return;
  x->hold = 0;
  for (size_t i = 0; i < x->nstaged; i++) {
    const struct xc_range *r = &x->staged[i];
    uint64_t hb = a2a_hdr_bytes(x->c, r->k);
    a2a_place(x, r->k, r->off, x->stage[r->k] + (r->off - hb), r->n);
  }
  x->nstaged = 0;
}

static int add_staged(struct hd_xcoll *x, int k, uint64_t off, uint64_t n) {
  if (x->nstaged == x->cstaged) {
    size_t cap = x->cstaged ? 2 * x->cstaged : 32;
    struct xc_range *v = realloc(x->staged, cap * sizeof *v);
    if (!v) return -1;
    x->staged = v;
    x->cstaged = cap;
  }
  x->staged[x->nstaged++] = (struct xc_range){k, off, n};
  return 0;
}

/* ---- data -----------------------------------------------------------------
 */

/* Alltoall data from host position k, past its header: bytes [off, off +
 * len) at data. */
static int a2a_take(struct hd_xcoll *x, int k, uint64_t off,
                    const unsigned char *data, uint64_t len, char *why,
                    size_t whylen) {
  uint64_t hb = a2a_hdr_bytes(x->c, k);
  if (!len) return 0;
  if (!x->hold) { /* from the frame, or from stage: copied; placed: not */
    a2a_place(x, k, off, data, len);
    return 0;
  }
  /* in place: what would land where data still leave from waits in
   * stage until they have left (place_held()) */
  unsigned char *st = x->stage[k] + (off - hb);
  unsigned char *b = a2a_block(x, k, off, len);
  if (b && data == b) return 0; /* placed, dest_of() saw it could */
  if (b && data != st && !unsent(x, b, len)) {
    memcpy(b, data, len);
    return 0;
  }
  if (data != st) memcpy(st, data, len);
  if (add_staged(x, k, off, len) < 0) {
    hc_fmt(why, whylen, "out of memory");
    return -1;
  }
  return 0;
}

/* Data from host position k for the running operation (at `data`: where
 * dest_of() said, or in the frame), checked against what it has to send:
 * in order, within bounds. 0, or -1 when it is wrong or there is no
 * memory (why says how). */
static int take(struct hd_xcoll *x, int k, const struct hp_xdata_hdr *h,
                const unsigned char *data, size_t len, char *why,
                size_t whylen) {
  struct hd_tensor *t = x->t;
  struct hd_comm *c = x->c;
  if (h->offset != x->got[k] ||
      (x->want[k] != XC_UNKNOWN && len > x->want[k] - x->got[k]) ||
      len > UINT64_MAX / 4 - x->got[k]) {
    char name[300];
    hd_host_name(x->c->job, x->c->hosts[k], name, sizeof name);
    hc_fmt(why, whylen, "%s '%s' (decision %llu): data from %s out of order "
           "or beyond the operation's bounds: %zu bytes at offset %llu, "
           "expected offset %llu of %llu", hd_coll_name(t->meta.coll),
           t->name, (unsigned long long)x->seq, name, len,
           (unsigned long long)h->offset, (unsigned long long)x->got[k],
           (unsigned long long)x->want[k]);
    return -1;
  }
  switch (t->meta.coll) {
  case HORA_COLL_ALLGATHER: {
    if (x->sink) break;
    uint64_t at = x->base[k] + h->offset;
    unsigned char *dst[HD_XC_LOCAL_MAX];
    int nd = 0;
    for (int i = 0; i < c->nlocal; i++) {
      if (t->part[i].joined) continue;
      if (nd == HD_XC_LOCAL_MAX) {
        copy_to(dst, nd, data, len);
        nd = 0;
      }
      dst[nd++] = hd_out_ptr(t, i) + at;
    }
    if (nd) copy_to(dst, nd, data, len);
    else if (x->w + at != data) memcpy(x->w + at, data, len);
    break;
  }
  case HORA_COLL_ALLTOALL: {
    uint64_t hb = a2a_hdr_bytes(c, k), off = h->offset, end = off + len;
    if (off < hb) { /* (some of) the header */
      uint64_t n = HC_MIN(end, hb) - off;
      memcpy(x->rhdr[k] + off, data, n);
      if (off + n == hb) {
        x->want[k] = a2a_header(x, k);
        if (x->want[k] == XC_UNKNOWN || end > x->want[k]) {
          hc_fmt(why, whylen, "alltoall header with bad sizes");
          return -1;
        }
      }
      off += n;
      data += n;
    }
    if (off < end && a2a_take(x, k, off, data, end - off, why, whylen) < 0)
      return -1;
    break;
  }
  case HORA_COLL_ALLREDUCE: /* Adasum: a unit is in W once all is in */
    if (x->w + x->base[k] + h->offset != data)
      memcpy(x->w + x->base[k] + h->offset, data, len);
    break;
  default: { /* reducescatter */
    if (len % x->wes || h->offset % x->wes) {
      hc_fmt(why, whylen, "reducescatter '%s' (decision %llu): data not in "
             "whole elements of %llu bytes (%zu bytes at offset %llu)",
             t->name, (unsigned long long)x->seq,
             (unsigned long long)x->wes, len, (unsigned long long)h->offset);
      return -1;
    }
    void *dst[1] = {x->w + h->offset};
    const void *src[2] = {dst[0], data};
    if (len) hc_reduce(dst, 1, src, 2, len / x->wes, x->wdtype, x->wop, 0);
  }
  }
  /* flat: what came from the previous host goes on round the ring, from
   * W (where it now is) or, on a host that keeps none, from a copy */
  if (x->flat && k != ring_next(c)) {
    unsigned char *own = NULL;
    const unsigned char *from = x->sink ? data : x->w + x->base[k] + h->offset;
    if (x->sink && len && !(own = malloc(len))) {
      hc_fmt(why, whylen, "out of memory");
      return -1;
    }
    if (own) from = memcpy(own, data, len);
    if (send_from(x, ring_next(c), from, len, h->offset, h->step & XC_LAST, k,
                  own) < 0) {
      hc_fmt(why, whylen, "out of memory");
      return -1;
    }
  }
  x->got[k] += len;
  if (h->step & XC_LAST) x->nlast++;
  if (!(h->step & XC_LAST) || x->got[k] == x->want[k]) return 0;
  /* the sender's message ends here */
  if (x->want[k] == XC_UNKNOWN && t->meta.coll == HORA_COLL_ALLGATHER) {
    x->want[k] = x->got[k]; /* a host whose members all joined learns it */
    return 0;
  }
  if (t->meta.coll != HORA_COLL_ALLGATHER) {
    hc_fmt(why, whylen, "%s message ended at %llu bytes of %llu",
           hd_coll_name(t->meta.coll), (unsigned long long)x->got[k],
           (unsigned long long)x->want[k]);
    return -1;
  }
  /* an allgather from a host whose ranks have all joined: nothing came,
   * but the receive counts expected something */
  if (!x->bad[0]) {
    char name[300];
    x->bad_rc = HORA_EINVAL;
    hd_host_name(x->c->job, x->c->hosts[k], name, sizeof name);
    hc_fmt(x->bad, sizeof x->bad,
           "allgather '%s': every rank of %s has "
           "joined, but the receive counts expect %llu elements from them",
           t->name, name,
           (unsigned long long)((x->want[k] - x->got[k]) / x->es));
  }
  x->want[k] = x->got[k];
  return 0;
}

static void drop_early(struct hd_xcoll *x, struct xc_early **pp) {
  struct xc_early *e = *pp;
  *pp = e->next;
  x->early_bytes -= e->len;
  free(e->payload);
  free(e);
}

static int take_early(struct hd_xcoll *x, char *why, size_t whylen) {
  struct xc_early **pp = &x->early;
  while (*pp) {
    struct xc_early *e = *pp;
    if (e->h.seq != x->seq) {
      pp = &e->next;
      continue;
    }
    int k = origin_of(x, e->from, &e->h, why, whylen);
    int rc = k < 0 ? -1
                   : take(x, k, &e->h, e->payload + HP_XDATA_HDR_LEN, e->len,
                          why, whylen);
    drop_early(x, pp);
    if (rc < 0) {
      hc_error("%s", why);
      return -1;
    }
  }
  return 0;
}

static int all_in(const struct hd_xcoll *x) {
  /* flat: every origin's last frame, an empty one too, since a host
   * further on may not know that it is empty */
  if (x->flat && x->nlast < x->c->nhosts - 1) return 0;
  for (int k = 0; k < x->c->nhosts; k++)
    if (x->got[k] < x->want[k]) return 0;
  return 1;
}

static void finish(struct hd_xcoll *x) {
  struct hd_comm *c = x->c;
  struct hd_tensor *t = x->t;
  switch (t->meta.coll) {
  case HORA_COLL_ALLGATHER: /* every output has it all */
    break;
  case HORA_COLL_ALLTOALL:
    place_held(x);
    a2a_zero_joined(x);
    break;
  case HORA_COLL_ALLREDUCE:
    finish_adasum(x);
    break;
  default: { /* reducescatter */
    uint64_t lo, hi;
    rs_host_range(c, t, c->me, &lo, &hi);
    for (int i = 0; i < c->nlocal; i++) {
      if (t->part[i].joined) continue;
      uint64_t f, n;
      rs_block_of(c, t, c->local_member[i], &f, &n);
      narrow(t, hd_out_ptr(t, i), x->w + (f - lo) * x->wes, x->wdtype, n,
             c->size);
      hd_scale_buf(t, hd_out_ptr(t, i), n, 0);
    }
  }
  }
}

int hd_xcoll_step(struct hd_comm *c, struct hd_tensor *t) {
  struct hd_job *job = c->job;
  struct hd_xcoll *x = xc_of(c);
  if (!x) {
    hd_tensor_fail(job, t, HORA_ENOMEM, "horad is out of memory");
    return 1;
  }
  if (x->t != t) {
    if (x->pending) return 0; /* the last one's sends still read W */
    release_buffers(x);
    x->t = t;
    x->active = 1;
    x->ran = 1;
    x->seq = t->seq;
    x->es = hora_dtype_size(t->meta.dtype);
    x->wes = x->es;
    x->sink = 0;
    x->flat = t->meta.coll == HORA_COLL_ALLGATHER && t->flat;
    x->nlast = 0;
    x->bad[0] = '\0';
    memset(x->got, 0, (size_t)c->nhosts * sizeof *x->got);
    memset(x->want, 0, (size_t)c->nhosts * sizeof *x->want);
    if (x->flat)
      hc_debug("allgather '%s': round a ring of %d hosts, to host position "
               "%d", t->name, c->nhosts, ring_next(c));
    int rc = t->meta.coll == HORA_COLL_ALLGATHER   ? start_allgather(x)
             : t->meta.coll == HORA_COLL_ALLTOALL  ? start_alltoall(x)
             : t->meta.coll == HORA_COLL_ALLREDUCE ? start_adasum(x)
                                                   : start_reducescatter(x);
    if (rc < 0) {
      /* the other hosts wait for our data: as with bad data, the job
       * cannot go on */
      hc_error("%s '%s': out of memory", hd_coll_name(t->meta.coll), t->name);
      end_op(x);
      hd_tensor_fail(job, t, HORA_ENOMEM, "horad is out of memory");
      hd_teardown(job, "horad is out of memory", 0);
      return 1;
    }
    char why[HP_MSG_MAX + 1];
    if (take_early(x, why, sizeof why) < 0) {
      end_op(x);
      hd_tensor_fail(job, t, HORA_EPROTO, why);
      hd_teardown(job, why, 0);
      return 1;
    }
  }
  if (!all_in(x) || x->pending) return 0;
  if (!x->bad[0]) finish(x);
  end_op(x);
  if (x->bad[0]) {
    hc_info("%s", x->bad);
    hd_tensor_fail(job, t, x->bad_rc, x->bad);
  } else {
    hd_tensor_finish(job, t);
  }
  return 1;
}

void *hd_xcoll_place(struct hd_job *job, int from, const unsigned char *pre,
                     size_t len) {
  struct hp_xdata_hdr h;
  if (job->gone_rank != -1 || len <= HP_XDATA_HDR_LEN ||
      hp_dec_xdata_hdr(pre, HP_XDATA_HDR_LEN, &h) < 0)
    return NULL;
  struct hd_comm *c = hd_comm_get(job, h.comm);
  if (!c || c->removed || c->me < 0 || !c->xc) return NULL;
  struct hd_xcoll *x = c->xc;
  int k = -1;
  for (int i = 0; i < c->nhosts; i++)
    if (c->hosts[i] == from) k = i;
  uint64_t n = len - HP_XDATA_HDR_LEN;
  if (k >= 0 && k != c->me && x->active && h.seq == x->seq)
    k = origin_of(x, k, &h, NULL, 0); /* refused with why when taken */
  if (k < 0 || k == c->me || !x->active || h.seq != x->seq ||
      h.offset != x->got[k] ||
      (x->want[k] != XC_UNKNOWN && n > x->want[k] - x->got[k]))
    return NULL;
  return dest_of(x, k, h.offset, n);
}

int hd_xcoll_data(struct hd_job *job, int from, unsigned char *payload,
                  size_t len, unsigned char *placed, int *keep, char *why,
                  size_t whylen) {
  struct hp_xdata_hdr h;
  if (!payload || hp_dec_xdata_hdr(payload, len, &h) < 0) {
    hc_fmt(why, whylen, "malformed XDATA frame: %zu bytes, shorter than its "
           "header (%u)", len, HP_XDATA_HDR_LEN);
    return -1;
  }
  /* the job is failing, or a failed session's data: ignored */
  if (job->gone_rank != -1 || HD_SEQ_STALE(job, h.seq)) return 0;
  struct hd_comm *c = hd_comm_get(job, h.comm);
  if (c && c->removed) return 0;
  int k = -1;
  for (int i = 0; c && i < c->nhosts; i++)
    if (c->hosts[i] == from) k = i;
  struct hd_xcoll *x = c && c->me >= 0 && k >= 0 && k != c->me ? xc_of(c)
                                                                : NULL;
  if (!x) { /* (the caller names the sender) */
    hc_fmt(why, whylen, "XDATA for process set %u, %s", h.comm,
           !c            ? "which does not exist here"
           : c->me < 0   ? "of which this host is not a member"
           : k < 0       ? "of which it is not a member"
           : k == c->me  ? "as if from this host itself"
                         : "but horad is out of memory");
    return -1;
  }
  size_t n = len - HP_XDATA_HDR_LEN;
  if (placed && !(x->active && h.seq == x->seq)) {
    hc_fmt(why, whylen, "placed XDATA no longer expected");
    return -1;
  }
  if (x->active && h.seq == x->seq) {
    /* placed: the data are where hd_xcoll_place() said (take() copies
     * only what has to go further) */
    if ((k = origin_of(x, k, &h, why, whylen)) < 0 ||
        take(x, k, &h, placed ? placed : payload + HP_XDATA_HDR_LEN, n, why,
             whylen) < 0)
      return -1;
    if (all_in(x) && !x->pending) {
      hd_comm_progress(c);
      hd_flush_wakeups(job);
    }
    return 0;
  }
  if (x->ran && (h.seq < x->seq || (h.seq == x->seq && !x->active))) {
    if (n == 0) return 0; /* an empty block a host expected nothing of */
    hc_fmt(why, whylen, "XDATA for decision %llu of process set %u, which "
           "has finished", (unsigned long long)h.seq, h.comm);
    return -1;
  }
  if (x->early_bytes + n > XC_EARLY_MAX) {
    hc_fmt(why, whylen, "XDATA for decisions of process set %u not started "
           "here: more than %llu MiB ahead", h.comm,
           (unsigned long long)(XC_EARLY_MAX >> 20));
    return -1;
  }
  struct xc_early *e = calloc(1, sizeof *e);
  if (!e) {
    hc_fmt(why, whylen, "out of memory");
    return -1;
  }
  e->from = k;
  e->h = h;
  e->payload = payload;
  e->len = n;
  *keep = 1;
  struct xc_early **tail = &x->early; /* in arrival order */
  while (*tail) tail = &(*tail)->next;
  *tail = e;
  x->early_bytes += n;
  return 0;
}

void hd_xcoll_abort(struct hd_comm *c) {
  struct hd_xcoll *x = c->xc;
  if (!x) return;
  /* A frame being read into a rank's memory must not land there once the
   * rank has its buffer back (with an error). */
  struct hd_job *job = c->job;
  if (x->active && job->link && c->me >= 0)
    for (int k = 0; k < c->nhosts; k++)
      if (k != c->me) job->link->unplace(job, c->hosts[k]);
  if (x->active) end_op(x);
  while (x->early) drop_early(x, &x->early);
}

void hd_xcoll_free(struct hd_comm *c) {
  struct hd_xcoll *x = c->xc;
  if (!x) return;
  hd_xcoll_abort(c);
  release_buffers(x);
  free(x->wbuf);
  for (int k = 0; k < c->nhosts; k++) free(x->stage[k]);
  free(x->stage);
  free(x->scap);
  free(x->shdr);
  free(x->rhdr);
  free(x->staged);
  free(x->want);
  free(x->got);
  free(x->base);
  free(x);
  c->xc = NULL;
}

/* ---- fused allgathers and reducescatters ------------------------------
 *
 * A run of allgathers or of reducescatters the coordinator fused
 * (hd_coord_mark_fusion: every member's data in its arena, none joined;
 * reducescatters alike in dtype, op and scale factors) runs as one
 * operation over this daemon's own memory, as Horovod's fusion buffer
 * does it: one exchange between the hosts (one message to each, or round
 * the ring) instead of one per tensor.
 *  - allgathers: one allgather of bytes, each local member's inputs packed
 *    one after the other, so that every member's block is the
 *    concatenation of its parts of the run's tensors (read where they lie
 *    when they lie so in the member's arena already: no packing copy);
 *    then each tensor's part of every member's block is copied into every
 *    local output;
 *  - reducescatters: one reducescatter whose input is packed member-major
 *    (for each member, its blocks of the run's tensors), so that each
 *    member's block of it (rs_block_of) is its blocks of them all; then
 *    each is copied into its tensor's output.
 * Every host packs the same way: the counts it packs by are the
 * operations' metadata. */

struct hd_xfused {
  struct hd_tensor *first; /* the run's first tensor (which run this is) */
  int n;
  struct hd_tensor *f; /* the allgather of bytes, or the reducescatter */
  unsigned char *mem;  /* its inputs and outputs */
  /* reducescatter: each member's block of f, elements (and the first) */
  uint64_t *blk, *blk_first;
  int ended, status;
  char msg[HP_MSG_MAX + 1];
};

/* Member m's block of reducescatter t: its first element and its count
 * (a fused run's: the blocks of its tensors, one after the other). */
static void rs_block_of(const struct hd_comm *c, const struct hd_tensor *t,
                        int m, uint64_t *first, uint64_t *n) {
  if (t->run && t->run->blk) {
    *first = t->run->blk_first[m];
    *n = t->run->blk[m];
    return;
  }
  uint64_t rows = t->meta.ndims ? (uint64_t)t->meta.shape[0] : t->meta.count;
  uint64_t row = hd_row_elems(&t->meta), f, k;
  hd_rs_block(rows, c->size, m, &f, &k);
  *first = f * row;
  *n = k * row;
}

void hd_xcoll_fused_free(struct hd_comm *c) {
  struct hd_xfused *fu = c->xfused;
  if (!fu) return;
  if (fu->f) {
    free(fu->f->part[fu->f->first].aux);
    free(fu->f->own);
    free(fu->f);
  }
  free(fu->blk);
  free(fu->blk_first);
  free(fu->mem);
  free(fu);
  c->xfused = NULL;
}

void hd_xcoll_fused_end(struct hd_tensor *f, int status, const char *msg) {
  struct hd_xfused *fu = f->run;
  fu->ended = 1;
  fu->status = status;
  hc_fmt(fu->msg, sizeof fu->msg, "%s", msg ? msg : "");
}

/* Member m's elements of allgather ts[k] (its receive counts, the
 * metadata). */
static uint64_t fcount(struct hd_tensor *const *ts, int k, int m) {
  return (uint64_t)ts[k]->part[ts[k]->first].aux[m];
}

/* The run's own operation, like t, its data in this daemon's memory
 * (fu->mem: in_bytes[i] of input, then out_bytes[i] of output, for each
 * local member i); -1: out of memory. */
static int fused_op(struct hd_comm *c, struct hd_xfused *fu,
                    const struct hd_tensor *t, const uint64_t *in_bytes,
                    const uint64_t *out_bytes) {
  int nl = c->nlocal;
  struct hd_tensor *f =
      calloc(1, sizeof *f + (size_t)nl * sizeof(struct hd_part));
  if (!f) return -1;
  fu->f = f;
  uint64_t all = 1;
  for (int i = 0; i < nl; i++) all += in_bytes[i] + out_bytes[i];
  if (!(f->own = calloc((size_t)nl * 2, sizeof *f->own)) ||
      !(fu->mem = malloc(all)))
    return -1;
  f->comm = c;
  hc_fmt(f->name, sizeof f->name, "%s", t->name);
  f->meta = t->meta;
  f->meta.ndims = 0;
  f->meta.group = 0;
  f->meta.group_n = f->meta.group_idx = 0;
  f->first = t->first;
  f->seq = t->seq;
  f->flat = t->flat;
  f->run = fu;
  unsigned char *p = fu->mem;
  for (int i = 0; i < nl; i++) {
    f->own[2 * i] = p;
    f->own[2 * i + 1] = p + in_bytes[i];
    p += in_bytes[i] + out_bytes[i];
    f->part[i].submitted = 1;
    f->part[i].resident = 1;
  }
  return 0;
}

/* Whether local member i's inputs of the run lie one after the other in
 * its arena, as the run's block of it is laid out (a rank that carved
 * them from one hora_alloc, or whose copies were staged so): the fused
 * allgather then reads them there, and only reads them. */
static int ag_in_place(struct hd_comm *c, struct hd_tensor *const *ts, int n,
                       int i) {
  int m = c->local_member[i];
  const unsigned char *at = hd_in_ptr(ts[0], i);
  for (int k = 0; k < n; k++) {
    uint64_t b = fcount(ts, k, m) * hora_dtype_size(ts[k]->meta.dtype);
    if (b && hd_in_ptr(ts[k], i) != at) return 0;
    at += b;
  }
  return 1;
}

/* An allgather of bytes: each member's block its parts of the run's
 * tensors one after the other (packed, unless they lie so already). */
static int ag_start(struct hd_comm *c, struct hd_xfused *fu,
                    struct hd_tensor *const *ts, int n) {
  int nl = c->nlocal, size = c->size;
  for (int k = 0; k < n; k++)
    if (!ts[k]->part[ts[k]->first].aux ||
        ts[k]->part[ts[k]->first].naux < (uint64_t)size)
      return -2;
  int64_t *bytes = calloc((size_t)size, sizeof *bytes);
  uint64_t *inb = calloc((size_t)nl * 2, sizeof *inb), *outb = inb + nl;
  if (!bytes || !inb) {
    free(bytes);
    free(inb);
    return -1;
  }
  uint64_t total = 0;
  for (int m = 0; m < size; m++) {
    for (int k = 0; k < n; k++)
      bytes[m] += (int64_t)(fcount(ts, k, m) *
                            hora_dtype_size(ts[k]->meta.dtype));
    total += (uint64_t)bytes[m];
  }
  int inplace = 0;
  for (int i = 0; i < nl; i++) {
    int ip = ag_in_place(c, ts, n, i);
    inplace += ip;
    inb[i] = ip ? 0 : (uint64_t)bytes[c->local_member[i]];
    outb[i] = total;
  }
  int rc = fused_op(c, fu, ts[0], inb, outb);
  free(inb);
  if (rc < 0) {
    free(bytes);
    return -1;
  }
  struct hd_tensor *f = fu->f;
  f->part[f->first].aux = bytes; /* the counts, in bytes */
  f->part[f->first].naux = (uint64_t)size;
  f->meta.dtype = HORA_UINT8;
  f->meta.count = (uint64_t)bytes[c->local_member[f->first]];
  for (int i = 0; i < nl; i++) {
    int m = c->local_member[i];
    f->part[i].count = (uint64_t)bytes[m];
    if (ag_in_place(c, ts, n, i)) { /* read where they lie */
      f->own[2 * i] = hd_in_ptr(ts[0], i);
      continue;
    }
    unsigned char *p = f->own[2 * i];
    for (int k = 0; k < n; k++) { /* packed */
      uint64_t b = fcount(ts, k, m) * hora_dtype_size(ts[k]->meta.dtype);
      if (b) memcpy(p, hd_in_ptr(ts[k], i), b);
      p += b;
    }
  }
  hc_debug("allgathers '%s' to '%s' fused: the inputs of %d of %d local "
           "ranks read in place, the rest packed", ts[0]->name,
           ts[n - 1]->name, inplace, nl);
  return 0;
}

/* A reducescatter of the run's dtype and op: the input member-major (for
 * each member, its blocks of the run's tensors one after the other), so
 * that each member's block of it is its blocks of them all. */
static int rs_start(struct hd_comm *c, struct hd_xfused *fu,
                    struct hd_tensor *const *ts, int n) {
  int nl = c->nlocal, size = c->size;
  uint64_t es = hora_dtype_size(ts[0]->meta.dtype), total = 0;
  fu->blk = calloc((size_t)size, sizeof *fu->blk);
  fu->blk_first = calloc((size_t)size, sizeof *fu->blk_first);
  uint64_t *inb = calloc((size_t)nl * 2, sizeof *inb), *outb = inb + nl;
  if (!fu->blk || !fu->blk_first || !inb) {
    free(inb);
    return -1;
  }
  for (int m = 0; m < size; m++) {
    for (int k = 0; k < n; k++) {
      uint64_t f0, k0;
      rs_block_of(c, ts[k], m, &f0, &k0);
      fu->blk[m] += k0;
    }
    fu->blk_first[m] = total;
    total += fu->blk[m];
  }
  for (int i = 0; i < nl; i++) {
    inb[i] = total * es;
    outb[i] = fu->blk[c->local_member[i]] * es;
  }
  int rc = fused_op(c, fu, ts[0], inb, outb);
  free(inb);
  if (rc < 0) return -1;
  struct hd_tensor *f = fu->f;
  f->meta.count = total;
  for (int i = 0; i < nl; i++) {
    unsigned char *p = f->own[2 * i];
    for (int m = 0; m < size; m++)
      for (int k = 0; k < n; k++) {
        uint64_t f0, k0;
        rs_block_of(c, ts[k], m, &f0, &k0);
        if (k0) memcpy(p, hd_in_ptr(ts[k], i) + f0 * es, k0 * es);
        p += k0 * es;
      }
    f->part[i].count = total;
  }
  return 0;
}

/* Builds the run's operation and packs the inputs; -1: out of memory, -2:
 * an allgather without its counts (none fused has a member joined, so
 * none lacks them). */
static int xfused_start(struct hd_comm *c, struct hd_tensor *const *ts,
                        int n) {
  struct hd_xfused *fu = calloc(1, sizeof *fu);
  if (!fu) return -1;
  c->xfused = fu;
  fu->first = ts[0];
  fu->n = n;
  return ts[0]->meta.coll == HORA_COLL_ALLGATHER ? ag_start(c, fu, ts, n)
                                                  : rs_start(c, fu, ts, n);
}

/* Copies each tensor's part of the result into every local member's
 * output of it; -1: out of memory. */
static int xfused_unpack(struct hd_comm *c, struct hd_tensor *const *ts,
                         int n) {
  struct hd_tensor *f = c->xfused->f;
  if (ts[0]->meta.coll != HORA_COLL_ALLGATHER) { /* each its own block */
    uint64_t es = hora_dtype_size(ts[0]->meta.dtype);
    for (int i = 0; i < c->nlocal; i++) {
      const unsigned char *src = f->own[2 * i + 1];
      for (int k = 0; k < n; k++) {
        uint64_t f0, k0;
        rs_block_of(c, ts[k], c->local_member[i], &f0, &k0);
        if (k0) memcpy(hd_out_ptr(ts[k], i), src, k0 * es);
        src += k0 * es;
      }
    }
    return 0;
  }
  const unsigned char *src = f->own[1]; /* local member 0's output */
  uint64_t *at = calloc((size_t)n, sizeof *at); /* elements before member m */
  if (!at) return -1;
  for (int m = 0; m < c->size; m++)
    for (int k = 0; k < n; k++) {
      uint64_t es = hora_dtype_size(ts[k]->meta.dtype);
      uint64_t b = fcount(ts, k, m) * es;
      for (int i = 0; i < c->nlocal && b; i++)
        memcpy(hd_out_ptr(ts[k], i) + at[k] * es, src, b);
      at[k] += fcount(ts, k, m);
      src += b;
    }
  free(at);
  return 0;
}

int hd_xcoll_fused(struct hd_comm *c, struct hd_tensor *const *ts, int n) {
  struct hd_job *job = c->job;
  if (!c->xfused || c->xfused->first != ts[0]) {
    hd_xcoll_fused_free(c);
    int rc = xfused_start(c, ts, n);
    if (rc < 0) {
      /* the other hosts wait for our data: the job cannot go on */
      hd_xcoll_fused_free(c);
      char why[HP_MSG_MAX + 1];
      hc_fmt(why, sizeof why, "%s '%s' and %d fused with it: %s",
             hd_coll_name(ts[0]->meta.coll), ts[0]->name, n - 1,
             rc == -1 ? "horad is out of memory"
                      : "a tensor without its receive counts");
      hc_error("%s", why);
      for (int k = 0; k < n; k++)
        hd_tensor_fail(job, ts[k], rc == -1 ? HORA_ENOMEM : HORA_EPROTO, why);
      hd_teardown(job, why, 0);
      return 1;
    }
  }
  struct hd_xfused *fu = c->xfused;
  if (!hd_xcoll_step(c, fu->f)) return 0;
  int status = fu->ended ? fu->status : HORA_EPROTO; /* step ends it */
  char msg[HP_MSG_MAX + 1];
  hc_fmt(msg, sizeof msg, "%s", fu->ended ? fu->msg : "the fused run did not end");
  if (status >= 0 && xfused_unpack(c, ts, n) < 0) {
    status = HORA_ENOMEM;
    hc_fmt(msg, sizeof msg, "horad is out of memory");
  }
  hd_xcoll_fused_free(c);
  for (int k = 0; k < n; k++) {
    if (status >= 0) hd_tensor_finish(job, ts[k]);
    else hd_tensor_fail(job, ts[k], status, msg);
  }
  return 1;
}
