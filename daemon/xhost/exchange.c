/* exchange.c -- allgather, alltoall and reducescatter across hosts.
 *
 * Hierarchical, each byte crossing the network once per host that needs
 * it, over direct links between the communicator's hosts (the mesh is
 * complete):
 *
 *  - allgather: the local members' inputs are gathered into W (the first
 *    local member's output, where the whole result goes); this host's
 *    block of W goes to every other host, theirs land in place in W; W
 *    is then copied to the other local members' outputs.
 *  - reducescatter: the local members' inputs are reduced into W (this
 *    daemon's memory, in a wider type where one host's result would be:
 *    64-bit sums for an integer AVERAGE, float32 for float16/bfloat16
 *    sums, products and averages); the part of W that each other host's
 *    members receive goes to that host, and what the others send for this
 *    host's part is reduced into W as it arrives; each local member then
 *    takes its block (AVERAGE divided by the set's size, postscale
 *    applied, narrowed once).
 *  - alltoall: for each other host, one message holds every local
 *    member's data for that host's members (source-major), after a
 *    header of their sizes (int64 elements per source and destination
 *    member; -1 for a source that has joined); local pairs are copied
 *    directly; what arrives is scattered into the outputs.
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
#include <stdlib.h>
#include <string.h>

#include "../daemon.h"
#include "../reduce.h"

#define XC_FRAME (4u << 20)
#define XC_EARLY_MAX (256ull << 20)
#define XC_LAST 1u            /* XDATA step: the last frame of a message */
#define XC_UNKNOWN UINT64_MAX /* want[k]: known at the last frame / header */
#define XC_JOINED (-1)        /* alltoall header: that source has joined */

struct xc_early {
  struct xc_early *next;
  int from; /* position in the communicator's hosts */
  struct hp_xdata_hdr h;
  unsigned char *payload; /* whole payload; data at + HP_XDATA_HDR_LEN */
  size_t len;             /* data bytes */
};

struct hd_xcoll {
  struct hd_comm *c;
  struct hd_tensor *t;
  int active, ran;
  uint64_t seq;
  int pending; /* sends not yet taken by the sockets */
  uint64_t es, wes;
  int wdtype, wop; /* how W is reduced */
  unsigned char *w, *wown; /* W; wown: when W is this daemon's memory */
  unsigned char **sendbuf; /* alltoall: per host position */
  unsigned char **recvbuf; /* alltoall: per host position */
  uint64_t *want, *got;    /* bytes expected from / received from each host */
  uint64_t *base;          /* where each host's bytes go in W (allgather,
                              reducescatter: offsets in bytes) */
  uint64_t *cap;           /* alltoall: bytes allocated in recvbuf */
  int sink;                /* allgather: every local member joined */
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
  x->sendbuf = calloc(n, sizeof *x->sendbuf);
  x->recvbuf = calloc(n, sizeof *x->recvbuf);
  x->want = calloc(n, sizeof *x->want);
  x->got = calloc(n, sizeof *x->got);
  x->base = calloc(n, sizeof *x->base);
  x->cap = calloc(n, sizeof *x->cap);
  if (!x->sendbuf || !x->recvbuf || !x->want || !x->got || !x->base ||
      !x->cap) {
    free(x->sendbuf);
    free(x->recvbuf);
    free(x->want);
    free(x->got);
    free(x->base);
    free(x->cap);
    free(x);
    return NULL;
  }
  return c->xc = x;
}

static void release_buffers(struct hd_xcoll *x) {
  for (int k = 0; k < x->c->nhosts; k++) {
    free(x->sendbuf[k]);
    free(x->recvbuf[k]);
    x->sendbuf[k] = x->recvbuf[k] = NULL;
    x->cap[k] = 0;
  }
  free(x->wown);
  x->wown = NULL;
  x->w = NULL;
}

static void end_op(struct hd_xcoll *x) {
  x->active = 0;
  x->t = NULL;
  if (!x->pending) release_buffers(x);
}

static void on_sent(void *arg, int status) {
  struct hd_xcoll *x = arg;
  (void)status; /* a failed send means a lost peer, reported there */
  x->pending--;
  if (x->pending) return;
  if (!x->active) release_buffers(x); /* an aborted one: the next may start */
  hd_comm_progress(x->c);
  hd_flush_wakeups(x->c->d);
}

/* Sends n bytes at p to host position k, in frames (at least one: the
 * last is marked). */
static void send_bytes(struct hd_xcoll *x, int k, const unsigned char *p,
                       uint64_t n) {
  struct hd_daemon *d = x->c->d;
  uint64_t off = 0;
  do {
    uint64_t len = HC_MIN((uint64_t)XC_FRAME, n - off);
    unsigned char hdr[HP_FRAME_HDR + HP_XDATA_HDR_LEN];
    struct hp_xdata_hdr h = {.comm = x->c->id, .seq = x->seq, .offset = off,
                             .step = off + len == n ? XC_LAST : 0};
    hp_xdata_frame_hdr(hdr, &h, (uint32_t)len);
    x->pending++;
    if (d->link->send(d, x->c->hosts[k], hdr, sizeof hdr, p + off, len,
                      on_sent, x) < 0) {
      x->pending--; /* the host is lost: everything fails from there */
      return;
    }
    off += len;
  } while (off < n);
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
    float *o = dst;
    const uint16_t *s = src;
    for (uint64_t i = 0; i < n; i++)
      o[i] = dt == HORA_FLOAT16 ? hd_half_to_float(s[i]) : hd_bf16_to_float(s[i]);
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
    if (n) hd_reduce(dst, 1, src, 1, n, dt, op == HORA_AVERAGE ? HORA_AVERAGE
                                                            : HORA_SUM, size);
    return;
  }
  if (wdt == HORA_FLOAT32) {
    const float *s = w;
    uint16_t *o = out;
    for (uint64_t i = 0; i < n; i++) {
      float f = op == HORA_AVERAGE ? s[i] / (float)size : s[i];
      o[i] = f != f ? (dt == HORA_FLOAT16 ? 0x7e00 : 0x7fc0)
                    : dt == HORA_FLOAT16 ? hd_float_to_half(f)
                                         : hd_float_to_bf16(f);
    }
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
    if (k != c->me) send_bytes(x, k, none, 0);
  return 0;
}

static int start_allgather(struct hd_xcoll *x) {
  struct hd_comm *c = x->c;
  struct hd_tensor *t = x->t;
  const int64_t *counts = t->part[t->first].aux;
  if (!counts) return start_allgather_joined(x);
  uint64_t total = 0, es = x->es;
  uint64_t *off = calloc((size_t)c->size + 1, sizeof *off);
  if (!off) return -1;
  for (int m = 0; m < c->size; m++) off[m + 1] = off[m] + (uint64_t)counts[m];
  total = off[c->size];
  int owner = -1;
  for (int i = 0; i < c->nlocal && owner < 0; i++)
    if (!t->part[i].joined) owner = i;
  if (owner >= 0) {
    x->w = hd_out_ptr(t, owner);
  } else if (!(x->w = x->wown = malloc(total * es + 1))) {
    free(off);
    return -1;
  }
  for (int i = 0; i < c->nlocal; i++) {
    int m = c->local_member[i];
    if (!t->part[i].joined && counts[m] && x->w + off[m] * es != hd_in_ptr(t, i))
      memcpy(x->w + off[m] * es, hd_in_ptr(t, i), (uint64_t)counts[m] * es);
  }
  for (int k = 0; k < c->nhosts; k++) {
    uint64_t lo = off[c->host_first[k]], hi = off[c->host_first[k] + c->host_n[k]];
    x->base[k] = lo * es;
    x->want[k] = k == c->me ? 0 : (hi - lo) * es;
  }
  uint64_t mlo = x->base[c->me];
  uint64_t mhi = off[c->host_first[c->me] + c->host_n[c->me]] * es;
  free(off);
  for (int k = 0; k < c->nhosts; k++)
    if (k != c->me) send_bytes(x, k, x->w + mlo, mhi - mlo);
  return 0;
}

/* Elements [*lo, *hi) of the input that host position k's members get. */
static void rs_host_range(const struct hd_comm *c, const struct hd_tensor *t,
                          int k, uint64_t *lo, uint64_t *hi) {
  uint64_t rows = t->meta.ndims ? (uint64_t)t->meta.shape[0] : t->meta.count;
  uint64_t row = hd_row_elems(&t->meta), f0, n0, f1, n1;
  hd_rs_block(rows, c->size, c->host_first[k], &f0, &n0);
  hd_rs_block(rows, c->size, c->host_first[k] + c->host_n[k] - 1, &f1, &n1);
  *lo = f0 * row;
  *hi = (f1 + n1) * row;
}

static int start_reducescatter(struct hd_xcoll *x) {
  struct hd_comm *c = x->c;
  struct hd_tensor *t = x->t;
  uint64_t n = t->meta.count;
  wide_kind(t, &x->wdtype, &x->wop);
  x->wes = hora_dtype_size(x->wdtype);
  if (!(x->w = x->wown = malloc(n * x->wes + 8))) return -1;
  unsigned char *tmp = NULL;
  int first = 1;
  for (int i = 0; i < c->nlocal; i++) {
    const void *in;
    if (t->part[i].joined) {
      if (!(in = hd_neutral(t, n))) goto fail;
    } else {
      hd_scale_buf(t, hd_in_ptr(t, i), n, 1);
      in = hd_in_ptr(t, i);
    }
    if (first) {
      widen(x->w, x->wdtype, in, t->meta.dtype, n);
      first = 0;
      continue;
    }
    const void *src[2] = {x->w, in};
    if (x->wdtype != t->meta.dtype) {
      if (!tmp && !(tmp = malloc(n * x->wes + 8))) goto fail;
      widen(tmp, x->wdtype, in, t->meta.dtype, n);
      src[1] = tmp;
    }
    void *dst[1] = {x->w};
    if (n) hd_reduce(dst, 1, src, 2, n, x->wdtype, x->wop, 0);
  }
  free(tmp);
  for (int k = 0; k < c->nhosts; k++) {
    uint64_t lo, hi;
    rs_host_range(c, t, k, &lo, &hi);
    if (k != c->me) send_bytes(x, k, x->w + lo * x->wes, (hi - lo) * x->wes);
  }
  uint64_t lo, hi;
  rs_host_range(c, t, c->me, &lo, &hi);
  for (int k = 0; k < c->nhosts; k++) {
    x->want[k] = k == c->me ? 0 : (hi - lo) * x->wes;
    x->base[k] = lo * x->wes;
  }
  return 0;
fail:
  free(tmp);
  return -1;
}

static uint64_t split_off(const int64_t *v, int upto) {
  uint64_t s = 0;
  for (int i = 0; i < upto; i++) s += (uint64_t)v[i];
  return s;
}

/* The alltoall header a host at position k sends this one: int64 sizes
 * per source member there and destination member here. */
static uint64_t a2a_hdr_bytes(const struct hd_comm *c, int k) {
  return (uint64_t)c->host_n[k] * (uint64_t)c->host_n[c->me] * 8u;
}

static int start_alltoall(struct hd_xcoll *x) {
  struct hd_comm *c = x->c;
  struct hd_tensor *t = x->t;
  uint64_t es = x->es;
  int size = c->size;
  /* local pairs */
  for (int i = 0; i < c->nlocal; i++)
    for (int j = 0; j < c->nlocal; j++) {
      const struct hd_part *pi = &t->part[i], *pj = &t->part[j];
      if (pi->joined || pj->joined) continue;
      int mi = c->local_member[i], mj = c->local_member[j];
      uint64_t n = (uint64_t)pi->aux[mj];
      if (n)
        memcpy(hd_out_ptr(t, j) + split_off(pj->aux + size, mi) * es,
               hd_in_ptr(t, i) + split_off(pi->aux, mj) * es, n * es);
    }
  /* a joined local member's part of the other local members' outputs:
   * zeros (as a joined member's part from another host) */
  for (int j = 0; j < c->nlocal; j++) {
    if (t->part[j].joined) continue;
    const int64_t *rs = t->part[j].aux + size;
    for (int i = 0; i < c->nlocal; i++) {
      int mi = c->local_member[i];
      if (t->part[i].joined && rs[mi])
        memset(hd_out_ptr(t, j) + split_off(rs, mi) * es, 0,
               (uint64_t)rs[mi] * es);
    }
  }
  for (int k = 0; k < c->nhosts; k++) {
    if (k == c->me) continue;
    int m0 = c->host_first[k], mn = c->host_n[k];
    uint64_t out = 0, hb = (uint64_t)c->nlocal * (uint64_t)mn * 8u;
    for (int i = 0; i < c->nlocal; i++)
      for (int m = m0; m < m0 + mn && !t->part[i].joined; m++)
        out += (uint64_t)t->part[i].aux[m];
    x->want[k] = XC_UNKNOWN; /* its header says */
    x->base[k] = 0;
    if (!(x->sendbuf[k] = malloc(hb + out * es + 1))) return -1;
    unsigned char *p = x->sendbuf[k];
    for (int i = 0; i < c->nlocal; i++)
      for (int m = m0; m < m0 + mn; m++) {
        int64_t v = t->part[i].joined ? XC_JOINED : t->part[i].aux[m];
        memcpy(p, &v, 8);
        p += 8;
      }
    for (int i = 0; i < c->nlocal; i++)
      for (int m = m0; m < m0 + mn && !t->part[i].joined; m++) {
        uint64_t n = (uint64_t)t->part[i].aux[m] * es;
        memcpy(p, hd_in_ptr(t, i) + split_off(t->part[i].aux, m) * es, n);
        p += n;
      }
    send_bytes(x, k, x->sendbuf[k], hb + out * es);
  }
  return 0;
}

/* The alltoall header from host position k has arrived: the size of the
 * whole message (or XC_UNKNOWN for one that cannot be). */
static uint64_t a2a_total(const struct hd_xcoll *x, int k) {
  const struct hd_comm *c = x->c;
  uint64_t hb = a2a_hdr_bytes(c, k), n = 0, lim = UINT64_MAX / 2 / x->es;
  const unsigned char *p = x->recvbuf[k];
  for (uint64_t o = 0; o < hb; o += 8) {
    int64_t v;
    memcpy(&v, p + o, 8);
    if (v == XC_JOINED) continue;
    if (v < 0 || (uint64_t)v > lim - n) return XC_UNKNOWN;
    n += (uint64_t)v;
  }
  return hb + n * x->es;
}

/* Scatters what arrived into the outputs; a size that disagrees with the
 * receiver's splits fails the operation (x->bad). */
static void scatter_alltoall(struct hd_xcoll *x) {
  struct hd_comm *c = x->c;
  struct hd_tensor *t = x->t;
  uint64_t es = x->es;
  int me0 = c->host_first[c->me], mme = c->host_n[c->me];
  for (int k = 0; k < c->nhosts; k++) {
    if (k == c->me) continue;
    const unsigned char *h = x->recvbuf[k];
    const unsigned char *p = h + a2a_hdr_bytes(c, k);
    for (int s = c->host_first[k]; s < c->host_first[k] + c->host_n[k]; s++)
      for (int j = 0; j < c->nlocal; j++) {
        int64_t n;
        int mj = c->local_member[j];
        memcpy(&n, h + ((uint64_t)(s - c->host_first[k]) * (uint64_t)mme +
                        (uint64_t)(mj - me0)) * 8u, 8);
        if (t->part[j].joined) { /* it receives nothing */
          if (n > 0) p += (uint64_t)n * es;
          continue;
        }
        const int64_t *rs = t->part[j].aux + c->size;
        unsigned char *o = hd_out_ptr(t, j) + split_off(rs, s) * es;
        if (n == XC_JOINED) { /* from a joined rank: zeros */
          memset(o, 0, (uint64_t)rs[s] * es);
          continue;
        }
        if (n != rs[s]) {
          x->bad_rc = HORA_EMISMATCH;
          if (!x->bad[0])
            hc_fmt(x->bad, sizeof x->bad, "Mismatched alltoall splits on "
                   "tensor '%s': rank %d sends %lld elements to rank %d, "
                   "which expects %lld.", t->name, c->members[s],
                   (long long)n, c->members[mj], (long long)rs[s]);
          p += (uint64_t)n * es;
          continue;
        }
        memcpy(o, p, (uint64_t)n * es);
        p += (uint64_t)n * es;
      }
  }
}

/* ---- data ----------------------------------------------------------------- */

/* Room for n bytes in recvbuf[k]. */
static int a2a_room(struct hd_xcoll *x, int k, uint64_t n) {
  if (n <= x->cap[k]) return 0;
  uint64_t cap = HC_MAX(n, x->cap[k] * 2);
  if (x->want[k] != XC_UNKNOWN) cap = HC_MAX(n, x->want[k]);
  unsigned char *p = realloc(x->recvbuf[k], cap + 1);
  if (!p) return -1;
  x->recvbuf[k] = p;
  x->cap[k] = cap;
  return 0;
}

/* Data from host position k for the running operation, checked against
 * what it has to send: in order, within bounds. */
static int take(struct hd_xcoll *x, int k, const struct hp_xdata_hdr *h,
                const unsigned char *data, size_t len, char *why,
                size_t whylen) {
  struct hd_tensor *t = x->t;
  if (h->offset != x->got[k] ||
      (x->want[k] != XC_UNKNOWN && len > x->want[k] - x->got[k]) ||
      len > UINT64_MAX / 4 - x->got[k]) {
    char name[300];
    hd_host_name(x->c->d, x->c->hosts[k], name, sizeof name);
    hc_fmt(why, whylen, "%s '%s' (decision %llu): data from %s out of order "
           "or beyond the operation's bounds: %zu bytes at offset %llu, "
           "expected offset %llu of %llu", hd_coll_name(t->meta.coll),
           t->name, (unsigned long long)x->seq, name, len,
           (unsigned long long)h->offset, (unsigned long long)x->got[k],
           (unsigned long long)x->want[k]);
    return -1;
  }
  switch (t->meta.coll) {
  case HORA_COLL_ALLGATHER:
    if (!x->sink) memcpy(x->w + x->base[k] + h->offset, data, len);
    break;
  case HORA_COLL_ALLTOALL: {
    uint64_t hb = a2a_hdr_bytes(x->c, k), end = x->got[k] + len;
    if (a2a_room(x, k, end) < 0) {
      hc_fmt(why, whylen, "out of memory");
      return -1;
    }
    memcpy(x->recvbuf[k] + h->offset, data, len);
    if (x->want[k] == XC_UNKNOWN && end >= hb) {
      x->want[k] = a2a_total(x, k);
      if (x->want[k] == XC_UNKNOWN || end > x->want[k]) {
        hc_fmt(why, whylen, "alltoall header with bad sizes");
        return -1;
      }
    }
    break;
  }
  default: { /* reducescatter */
    if (len % x->wes || h->offset % x->wes) {
      hc_fmt(why, whylen, "reducescatter '%s' (decision %llu): data not in "
             "whole elements of %llu bytes (%zu bytes at offset %llu)",
             t->name, (unsigned long long)x->seq,
             (unsigned long long)x->wes, len, (unsigned long long)h->offset);
      return -1;
    }
    void *dst[1] = {x->w + x->base[k] + h->offset};
    const void *src[2] = {dst[0], data};
    if (len) hd_reduce(dst, 1, src, 2, len / x->wes, x->wdtype, x->wop, 0);
  }
  }
  x->got[k] += len;
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
    hd_host_name(x->c->d, x->c->hosts[k], name, sizeof name);
    hc_fmt(x->bad, sizeof x->bad, "allgather '%s': every rank of %s has "
           "joined, but the receive counts expect %llu elements from them",
           t->name, name, (unsigned long long)((x->want[k] - x->got[k]) / x->es));
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
    int rc = take(x, e->from, &e->h, e->payload + HP_XDATA_HDR_LEN, e->len,
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
  for (int k = 0; k < x->c->nhosts; k++)
    if (x->got[k] < x->want[k]) return 0;
  return 1;
}

static void finish(struct hd_xcoll *x) {
  struct hd_comm *c = x->c;
  struct hd_tensor *t = x->t;
  uint64_t es = x->es;
  switch (t->meta.coll) {
  case HORA_COLL_ALLGATHER: {
    if (x->sink) break; /* no outputs here */
    uint64_t total = 0;
    for (int m = 0; m < c->size; m++) total += (uint64_t)t->part[t->first].aux[m];
    for (int i = 0; i < c->nlocal; i++)
      if (!t->part[i].joined && hd_out_ptr(t, i) != x->w)
        memcpy(hd_out_ptr(t, i), x->w, total * es);
    break;
  }
  case HORA_COLL_ALLTOALL:
    scatter_alltoall(x);
    break;
  default: { /* reducescatter */
    uint64_t rows = t->meta.ndims ? (uint64_t)t->meta.shape[0] : t->meta.count;
    uint64_t row = hd_row_elems(&t->meta);
    for (int i = 0; i < c->nlocal; i++) {
      if (t->part[i].joined) continue;
      uint64_t f, n;
      hd_rs_block(rows, c->size, c->local_member[i], &f, &n);
      narrow(t, hd_out_ptr(t, i), x->w + f * row * x->wes, x->wdtype,
             n * row, c->size);
      hd_scale_buf(t, hd_out_ptr(t, i), n * row, 0);
    }
  }
  }
}

int hd_xcoll_step(struct hd_comm *c, struct hd_tensor *t) {
  struct hd_daemon *d = c->d;
  struct hd_xcoll *x = xc_of(c);
  if (!x) {
    hd_tensor_fail(d, t, HORA_ENOMEM, "horad is out of memory");
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
    x->bad[0] = '\0';
    memset(x->got, 0, (size_t)c->nhosts * sizeof *x->got);
    memset(x->want, 0, (size_t)c->nhosts * sizeof *x->want);
    int rc = t->meta.coll == HORA_COLL_ALLGATHER   ? start_allgather(x)
             : t->meta.coll == HORA_COLL_ALLTOALL ? start_alltoall(x)
                                                  : start_reducescatter(x);
    if (rc < 0) {
      /* the other hosts wait for our data: as with bad data, the job
       * cannot go on */
      hc_error("%s '%s': out of memory", hd_coll_name(t->meta.coll), t->name);
      end_op(x);
      hd_tensor_fail(d, t, HORA_ENOMEM, "horad is out of memory");
      hd_teardown(d, "horad is out of memory", 0);
      return 1;
    }
    char why[HP_MSG_MAX + 1];
    if (take_early(x, why, sizeof why) < 0) {
      end_op(x);
      hd_tensor_fail(d, t, HORA_EPROTO, why);
      hd_teardown(d, why, 0);
      return 1;
    }
  }
  if (!all_in(x) || x->pending) return 0;
  if (!x->bad[0]) finish(x);
  end_op(x);
  if (x->bad[0]) {
    hc_info("%s", x->bad);
    hd_tensor_fail(d, t, x->bad_rc, x->bad);
  } else {
    hd_tensor_finish(d, t);
  }
  return 1;
}

int hd_xcoll_data(struct hd_daemon *d, int from, unsigned char *payload,
                  size_t len, int *keep, char *why, size_t whylen) {
  struct hp_xdata_hdr h;
  if (!payload || hp_dec_xdata_hdr(payload, len, &h) < 0) {
    hc_fmt(why, whylen, "malformed XDATA frame: %zu bytes, shorter than its "
           "header (%u)", len, HP_XDATA_HDR_LEN);
    return -1;
  }
  if (d->gone_rank != -1) return 0; /* the job is failing: ignore */
  struct hd_comm *c = hd_comm_get(d, h.comm);
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
  if (x->active && h.seq == x->seq) {
    if (take(x, k, &h, payload + HP_XDATA_HDR_LEN, n, why, whylen) < 0)
      return -1;
    if (all_in(x) && !x->pending) {
      hd_comm_progress(c);
      hd_flush_wakeups(d);
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
  if (x->active) end_op(x);
  while (x->early) drop_early(x, &x->early);
}

void hd_xcoll_free(struct hd_comm *c) {
  struct hd_xcoll *x = c->xc;
  if (!x) return;
  hd_xcoll_abort(c);
  release_buffers(x);
  free(x->sendbuf);
  free(x->recvbuf);
  free(x->want);
  free(x->got);
  free(x->base);
  free(x->cap);
  free(x);
  c->xc = NULL;
}
