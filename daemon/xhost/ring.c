/* ring.c -- allreduce and broadcast across hosts: hierarchical unless
 * the decision says a flat ring (HP_DA_FLAT, hd_coord_algo; see below).
 *
 * A tensor is cut into pieces (at most XH_PIECE_MAX bytes, never across a
 * staging chunk) and up to XH_WINDOW pieces are in flight at once, so
 * that reducing one piece locally, moving others over the network and
 * copying finished ones back to the ranks all overlap. For each piece:
 *
 *  1. the local ranks' data are reduced into a working buffer W (this
 *     daemon's own memory; AVERAGE is summed here);
 *  2. allreduce: a ring reduce-scatter then allgather among the hosts over
 *     TCP: in step s (of 2(n-1)) each daemon sends one n-th of W to the
 *     next host and receives one from the previous; received data are
 *     reduced into W (the first n-1 steps) or copied (the rest), and what
 *     was received is what goes out in the next step. Broadcast: a chain
 *     from the root's host around the ring;
 *  3. W is written into every local rank's output (AVERAGE divides here,
 *     once, by the job's size).
 *
 * Sends go straight from W (no copy); a piece's buffer is reused only once
 * the socket has taken all of it. A float16/bfloat16 allreduce asked to
 * (HORA_REQ_WIRE16) keeps W in float32 but sends 16-bit values: each
 * segment is rounded into the slot's wire buffer before it goes, and
 * what arrives is widened into W (the reduce-scatter adds it there). The
 * host that completes a segment rounds its own W to what it sends, so
 * every host ends with the same bits. DATA that arrives for a piece (or an
 * operation) not started yet waits in a queue until it is.
 *
 * Flat: the ring's positions are the members, not the hosts (n of them,
 * this host's the k from a, adjacent in member order), and a piece has n
 * segments. A true ring of members moves segment g from position g round
 * to g - 1 (reduce-scatter), adding each position's input, then round
 * again (allgather). The daemon plays its k positions in W: a hop between
 * them is a reduction in place, so it sends only from its last position
 * and receives only into its first, and what arrives in step s leaves in
 * step s + k. Its first k sends are segments that start here (a + i: the
 * sum of members i..k-1); a segment that ends here (at a + j, arriving in
 * step n - 2 - j) takes the sum of members 0..j alone, read from their
 * inputs again. With k = 1 this is the ring of hosts above.
 *
 * Urgent lane: while the ring runs a large operation, a queued one of
 * higher priority (at most XH_LANE_MAX bytes, in the arenas) runs beside
 * it in a second hd_xop (c->xop2) instead of waiting for the whole
 * (negotiate.c's overtake asks hd_xhost_lane). DATA names its operation
 * (seq), so each frame finds its lane; what came for the urgent one
 * before it started here waits among the main lane's early data and moves
 * over when it starts. A host whose large one already ended runs it in
 * the main lane instead: the data meet all the same. */
#define HC_LOG_SUB HC_SUB_ENGINE
#include <stdlib.h>
#include <string.h>

#include "../daemon.h"
#include "reduce.h"
#include "../timeline.h"

#define XH_WINDOW 8
#define XH_PIECE_MAX (1u << 20)
#define XH_EARLY_PAUSE (64ull << 20) /* early bytes: stop reading the link */
#define XH_EARLY_MAX (256ull << 20)  /* a peer that ignores that: drop it */
/* The urgent lane's largest operation: what a host still in the large
 * one holds for it early stays well under XH_EARLY_PAUSE, so the link
 * that also brings the large one's data is never paused for it. */
#define XH_LANE_MAX (8ull << 20)

struct xh_slot {
  struct hd_job *job;
  struct hd_comm *c;
  unsigned char *w;   /* XH_PIECE_MAX bytes, for wide elements */
  unsigned char *buf; /* W of the piece: w, or a local rank's own memory */
  unsigned char *nb;  /* XH_PIECE_MAX / 2 bytes: W rounded for a 16-bit
                         wire (nes < wes) */
  int busy;         /* holds a piece of the running operation */
  int pending;      /* sends from w not yet taken by the socket */
  uint64_t piece, off, cnt;
  int recvd; /* ring steps received */
  int finalized;
  int divide_w; /* W is a rank's memory and an AVERAGE: divide it once the
                   socket has taken every send from it */
};

struct early {
  struct early *next;
  struct hp_data_hdr h;
  unsigned char *buf; /* the whole payload; data at + HP_DATA_HDR_LEN */
  size_t len;         /* data bytes */
};

struct hd_xop {
  struct hd_comm *c;
  int next_host, prev_host; /* global indices of next and prev */
  int ran;             /* some operation has run: seq means something */
  struct hd_tensor *t; /* the running operation (its first tensor), or NULL */
  int nt;              /* its tensors: tv[0..nt), fused when nt > 1 */
  uint64_t count;      /* their elements, together */
  int active;
  int in_step;
  uint64_t seq; /* of the running (or last) operation */
  int n, me, next, prev, root_host;
  /* The ring's positions: n of them, this host's [a, a + k). Hosts
   * (hierarchical): n hosts, a = me, k = 1. Flat: every member a position
   * (member order, so each host's are consecutive), k its members. */
  int a, k, flat;
  uint64_t es, chunk_elems, piece_elems, ppc, nchunks, npieces;
  uint64_t wes; /* bytes per element of W */
  uint64_t nes; /* bytes per element on the wire: wes, or 2 (WIRE16) */
  int wide;     /* W holds wider elements than the tensor: WIDE_INT: the
                   64-bit sums of an integer AVERAGE; WIDE_FLOAT: float32
                   for a float16/bfloat16 SUM, PRODUCT or AVERAGE, rounded
                   once at the end, as on one host (reduce.h) */
  uint64_t next_piece, nfinished;
  uint64_t *chunk_final; /* per chunk: pieces finished */
  uint64_t chunks_out; /* chunks whose pieces all finished */
  struct xh_slot slot[XH_WINDOW];
  unsigned char *scratch; /* a reduce-scatter step's data, read into it */
  struct early *early, *early_tail;
  uint64_t early_bytes;
  struct hd_tensor **tv; /* the running operation's tensors, */
  uint64_t *base;        /* where each starts in their concatenation */
  int cap;
};

/* ---- geometry ------------------------------------------------------------ */

static uint64_t pieces_in_chunk(const struct hd_xop *x, uint64_t k) {
  uint64_t len = HC_MIN(x->chunk_elems, x->count - k * x->chunk_elems);
  return (len + x->piece_elems - 1) / x->piece_elems;
}

static void piece_range(const struct hd_xop *x, uint64_t p, uint64_t *off,
                        uint64_t *cnt) {
  uint64_t k = p / x->ppc, j = p % x->ppc;
  uint64_t lo = k * x->chunk_elems + j * x->piece_elems;
  uint64_t hi = HC_MIN(lo + x->piece_elems,
                       HC_MIN((k + 1) * x->chunk_elems, x->count));
  *off = lo;
  *cnt = hi - lo;
}

static void seg_range(uint64_t cnt, int n, int s, uint64_t *lo,
                      uint64_t *len) {
  uint64_t a = cnt * (uint64_t)s / (uint64_t)n;
  uint64_t b = cnt * (uint64_t)(s + 1) / (uint64_t)n;
  *lo = a;
  *len = b - a;
}

static int mod(int a, int n) { return ((a % n) + n) % n; }

/* The segment this host sends in ring step s (from its last position,
 * a + k - 1) and the one it receives (into its first, a). */
static int send_seg(const struct hd_xop *x, int s) {
  int b = x->a + x->k - 1;
  return s < x->n - 1 ? mod(b - s, x->n) : mod(b + 1 - (s - (x->n - 1)), x->n);
}
static int recv_seg(const struct hd_xop *x, int s) {
  return s < x->n - 1 ? mod(x->a - 1 - s, x->n)
                      : mod(x->a - (s - (x->n - 1)), x->n);
}

/* Where local rank i's data for elements [off, ...) of tensor t are (of
 * chunk off / chunk_elems, when streamed). */
static unsigned char *part_of(struct hd_xop *x, struct hd_tensor *t, int i,
                              uint64_t off) {
  struct hd_rank *r = hd_comm_local(x->c, i);
  struct hd_part *p = &t->part[i];
  if (p->joined) /* a neutral input; never an output */
    return (unsigned char *)t->neutral + off * x->es;
  if (p->resident) return r->shm + p->offset + off * x->es;
  uint64_t k = off / x->chunk_elems;
  return r->shm + hd_staging_off(r, k) + (off - k * x->chunk_elems) * x->es;
}

/* The part of tensor j in elements [off, off + cnt) of the whole: its own
 * elements [*toff, *toff + *n), at *woff in the piece's W. 0: none. */
static int segment(const struct hd_xop *x, int j, uint64_t off, uint64_t cnt,
                   uint64_t *toff, uint64_t *n, uint64_t *woff) {
  uint64_t b = x->base[j], e = b + x->tv[j]->meta.count;
  uint64_t lo = HC_MAX(off, b), hi = HC_MIN(off + cnt, e);
  if (lo >= hi) return 0;
  *toff = lo - b;
  *n = hi - lo;
  *woff = lo - off;
  return 1;
}

/* The first tensor with elements at or past `off`. */
static int first_tensor(const struct hd_xop *x, uint64_t off) {
  int lo = 0, hi = x->nt - 1;
  while (lo < hi) { /* the last j with base[j] <= off */
    int mid = (lo + hi + 1) / 2;
    if (x->base[mid] <= off) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/* For each tensor j with elements in [off, off + cnt): its segment. */
#define FOR_SEGMENTS(x, off, cnt, j, toff, n, woff)                        \
  for (int j = first_tensor(x, off);                                       \
       j < (x)->nt && (x)->base[j] < (off) + (cnt); j++)                   \
    if (segment(x, j, off, cnt, &toff, &n, &woff))

static hora_op_t ring_op(const struct hd_tensor *t) {
  return t->meta.op == HORA_AVERAGE ? HORA_SUM : (hora_op_t)t->meta.op;
}

/* An integer AVERAGE is summed exactly in 64 bits (int64 wraps) and
 * divided once, as on one host (reduce.h): W holds those sums. */
static int64_t load_wide(const void *p, uint64_t i, int dtype) {
  switch (dtype) {
  case HORA_UINT8: return ((const uint8_t *)p)[i];
  case HORA_INT8: return ((const int8_t *)p)[i];
  case HORA_INT16: return ((const int16_t *)p)[i];
  case HORA_INT32: return ((const int32_t *)p)[i];
  default: return ((const int64_t *)p)[i];
  }
}

static void widen_sum(uint64_t *w, const void *const *src, int ns,
                      uint64_t cnt, int dtype) {
  for (uint64_t i = 0; i < cnt; i++) {
    uint64_t acc = 0;
    for (int k = 0; k < ns; k++) acc += (uint64_t)load_wide(src[k], i, dtype);
    w[i] = acc;
  }
}

static void narrow_avg(void *const *dst, int nd, const uint64_t *w,
                       uint64_t cnt, int dtype, int64_t div) {
  for (uint64_t i = 0; i < cnt; i++) {
    uint64_t u = w[i];
    int64_t s = u <= INT64_MAX ? (int64_t)u : -(int64_t)(~u) - 1;
    uint64_t q = (uint64_t)(s / div);
    for (int k = 0; k < nd; k++) {
      switch (dtype) {
      case HORA_UINT8:
      case HORA_INT8: ((uint8_t *)dst[k])[i] = (uint8_t)q; break;
      case HORA_INT16: ((uint16_t *)dst[k])[i] = (uint16_t)q; break;
      case HORA_INT32: ((uint32_t *)dst[k])[i] = (uint32_t)q; break;
      default: ((uint64_t *)dst[k])[i] = q;
      }
    }
  }
}

enum { WIDE_NONE, WIDE_INT, WIDE_FLOAT };

/* W of a float16/bfloat16 SUM, AVERAGE or PRODUCT: float32, filled and
 * emptied by common/reduce.c's conversions (vector kernels where the CPU
 * has them) */
static int is_bf(int dtype) { return dtype == HORA_BFLOAT16; }

static void widen_float(float *w, const void *const *src, int ns,
                        uint64_t cnt, int dtype, int op) {
  hc_widen16(w, src[0], cnt, is_bf(dtype));
  for (int k = 1; k < ns; k++)
    hc_fold16(w, src[k], cnt, is_bf(dtype), op == HORA_PRODUCT);
}

static void narrow_float(void *const *dst, int nd, const float *w,
                         uint64_t cnt, int dtype, int op, int size) {
  if (nd <= 0) return;
  hc_narrow16(dst[0], w, cnt, is_bf(dtype),
              op == HORA_AVERAGE ? (float)size : 1.0f);
  for (int k = 1; k < nd; k++)
    if (dst[k] != dst[0]) memcpy(dst[k], dst[0], cnt * sizeof(uint16_t));
}

/* A 16-bit wire (HORA_REQ_WIRE16): W's float32 rounded to the dtype for
 * sending, and what arrives widened into W or folded into it. */
static void wire_narrow(uint16_t *o, const float *w, uint64_t cnt,
                        int dtype) {
  hc_narrow16(o, w, cnt, is_bf(dtype), 1.0f);
}

static void wire_widen(float *w, const void *h, uint64_t cnt, int dtype) {
  hc_widen16(w, h, cnt, is_bf(dtype));
}

static void wire_fold(float *w, const void *h, uint64_t cnt, int dtype,
                      int op) {
  hc_fold16(w, h, cnt, is_bf(dtype), op == HORA_PRODUCT);
}

/* What W holds for a collective of that dtype and op (WIDE_*). */
static int wide_of(int coll, int dtype, int op) {
  if (coll != HORA_COLL_ALLREDUCE) return WIDE_NONE;
  if (op == HORA_AVERAGE && dtype <= HORA_INT64) return WIDE_INT;
  if ((dtype == HORA_FLOAT16 || dtype == HORA_BFLOAT16) &&
      (op == HORA_SUM || op == HORA_AVERAGE || op == HORA_PRODUCT))
    return WIDE_FLOAT;
  return WIDE_NONE;
}

static uint64_t wide_bytes(int wide, int dtype) {
  return wide == WIDE_INT ? 8 : wide == WIDE_FLOAT ? 4 : hora_dtype_size(dtype);
}

static int ring_dtype(const struct hd_xop *x) {
  return x->wide == WIDE_INT     ? HORA_INT64
         : x->wide == WIDE_FLOAT ? HORA_FLOAT32
                                 : x->t->meta.dtype;
}

/* W's elements [lo, lo + cnt) of the piece in sl: the sum (in W's type)
 * of local members i0..i1 - 1's inputs, prescaled already. */
static void local_sum(struct hd_job *job, struct hd_xop *x, struct xh_slot *sl,
                      uint64_t lo, uint64_t cnt, int i0, int i1) {
  uint64_t toff, n, woff;
  FOR_SEGMENTS(x, sl->off + lo, cnt, j, toff, n, woff) {
    struct hd_tensor *tj = x->tv[j];
    const void *src[256];
    int ns = 0;
    if (x->nt > 1) HD_TL_HOOK(job, hd_tl_act_(tj, "MEMCPY_IN_FUSION_BUFFER"));
    for (int i = i0; i < i1 && ns < 256; i++)
      src[ns++] = part_of(x, tj, i, toff);
    void *dst[1] = {sl->buf + (lo + woff) * x->wes};
    if (x->wide == WIDE_INT)
      widen_sum(dst[0], src, ns, n, tj->meta.dtype);
    else if (x->wide == WIDE_FLOAT)
      widen_float(dst[0], src, ns, n, tj->meta.dtype, tj->meta.op);
    else if (ns > 1 || dst[0] != src[0])
      hc_reduce(dst, 1, src, ns, n, tj->meta.dtype, ring_op(tj), 0);
    if (x->nt > 1) HD_TL_HOOK(job, hd_tl_act_end_(tj));
  }
}

/* ---- sending --------------------------------------------------------------
 */

static int in_step(const struct hd_comm *c) {
  return (c->xop && c->xop->in_step) || (c->xop2 && c->xop2->in_step);
}

/* What the communicator's lanes hold of data that came early. */
static uint64_t early_of(const struct hd_comm *c) {
  return (c->xop ? c->xop->early_bytes : 0) +
         (c->xop2 ? c->xop2->early_bytes : 0);
}

/* The lane whose operation `seq` is: the urgent one's, else the main. */
static struct hd_xop *lane_of(struct hd_comm *c, uint64_t seq) {
  if (c->xop2 && c->xop2->active && c->xop2->seq == seq) return c->xop2;
  return c->xop;
}

static void run_ready_later(struct hd_comm *c) {
  if ((c->xop || c->xop2) && !in_step(c)) {
    hd_comm_progress(c);
    hd_flush_wakeups(c->job);
  }
}

static void on_sent(void *arg, int status) {
  struct xh_slot *sl = arg;
  (void)status; /* a failed send means a lost peer, reported there */
  sl->pending--;
  if (!sl->pending) run_ready_later(sl->c);
}

static void send_step(struct hd_job *job, struct hd_xop *x,
                      struct xh_slot *sl, int step) {
  uint64_t lo = 0, len = sl->cnt;
  if (x->t->meta.coll == HORA_COLL_ALLREDUCE)
    seg_range(sl->cnt, x->n, send_seg(x, step), &lo, &len);
  unsigned char hdr[HP_FRAME_HDR + HP_DATA_HDR_LEN];
  struct hp_data_hdr h = {.seq = x->seq, .piece = sl->piece,
                          .step = (uint32_t)step, .comm = x->c->id};
  const unsigned char *from = sl->buf + lo * x->wes;
  if (x->nes < x->wes) { /* a 16-bit wire */
    float *w = (float *)(sl->buf + lo * x->wes);
    wire_narrow((uint16_t *)(sl->nb + lo * x->nes), w, len,
                x->t->meta.dtype);
    /* a segment this host completed: W becomes what the others get */
    if (step >= x->n - 1 && step < x->n - 1 + x->k)
      wire_widen(w, sl->nb + lo * x->nes, len, x->t->meta.dtype);
    from = sl->nb + lo * x->nes;
  }
  hp_data_frame_hdr(hdr, &h, (uint32_t)(len * x->nes));
  sl->pending++;
  if (job->link->send(job, x->next_host, hdr, sizeof hdr, from, len * x->nes,
                      on_sent, sl) < 0)
    sl->pending--; /* the host is lost: everything fails from there */
}

/* ---- the steps of a piece ---------------------------------------------------
 */

/* Writes W into the outputs of the tensor segment [toff, toff + n) of t,
 * which lies at w in W. */
static void finalize_segment(struct hd_xop *x, struct xh_slot *sl,
                             struct hd_tensor *t, uint64_t toff, uint64_t n,
                             unsigned char *w) {
  void *dst[256];
  int nd = 0;
  /* W itself is an output when it is a rank's memory: it needs writing
   * only to divide an AVERAGE, and not before the last send from it has
   * left (the next host must get the sum): see advance(). */
  for (int i = 0; i < x->c->nlocal && nd < 256; i++) {
    if (t->meta.coll != HORA_COLL_ALLREDUCE && hd_is_root(t, i)) continue;
    if (t->part[i].joined) continue;
    unsigned char *p = part_of(x, t, i, toff);
    if (p != w || x->wide) dst[nd++] = p;
    else if (t->meta.op == HORA_AVERAGE && t->meta.coll == HORA_COLL_ALLREDUCE)
      sl->divide_w = 1;
  }
  if (x->wide == WIDE_INT) {
    narrow_avg(dst, nd, (const uint64_t *)w, n, t->meta.dtype, x->c->size);
  } else if (x->wide == WIDE_FLOAT) {
    narrow_float(dst, nd, (const float *)w, n, t->meta.dtype, t->meta.op,
                 x->c->size);
  } else if (t->meta.coll == HORA_COLL_ALLREDUCE) {
    const void *src[1] = {w};
    if (nd)
      hc_reduce(dst, nd, src, 1, n, t->meta.dtype, t->meta.op, x->c->size);
  } else {
    for (int i = 0; i < nd; i++) memcpy(dst[i], w, n * x->es);
  }
}

static void finalize(struct hd_job *job, struct hd_xop *x, struct xh_slot *sl) {
  uint64_t toff, n, woff;
  FOR_SEGMENTS(x, sl->off, sl->cnt, j, toff, n, woff) {
    if (x->nt > 1)
      HD_TL_HOOK(job, hd_tl_act_(x->tv[j], "MEMCPY_OUT_FUSION_BUFFER"));
    finalize_segment(x, sl, x->tv[j], toff, n, sl->buf + woff * x->wes);
    if (x->nt > 1) HD_TL_HOOK(job, hd_tl_act_end_(x->tv[j]));
  }
  sl->finalized = 1;
}

/* Takes in one ring step's data for the piece in sl. */
static int take_step(struct hd_job *job, struct hd_xop *x, struct xh_slot *sl,
                     uint32_t step, const unsigned char *data, size_t len,
                     char *why, size_t whylen) {
  struct hd_tensor *t = x->t;
  if (sl->finalized || (int)step != sl->recvd) {
    hc_fmt(why, whylen, "ring step %u of piece %llu out of order (expected "
           "%d)", step, (unsigned long long)sl->piece, sl->recvd);
    return -1;
  }
  uint64_t lo = 0, cnt = sl->cnt;
  if (t->meta.coll == HORA_COLL_ALLREDUCE)
    seg_range(sl->cnt, x->n, recv_seg(x, (int)step), &lo, &cnt);
  if (len != cnt * x->nes) {
    hc_fmt(why, whylen, "ring step %u of piece %llu has %zu bytes, expected "
           "%llu", step, (unsigned long long)sl->piece, len,
           (unsigned long long)(cnt * x->nes));
    return -1;
  }
  unsigned char *w = sl->buf + lo * x->wes;
  int last;
  if (t->meta.coll == HORA_COLL_ALLREDUCE) {
    /* Flat: a segment that ends on one of this host's positions a + j
     * (j = n - 2 - step) takes the sum of positions a..a + j alone; W
     * held the others' part (sent on already) or all of this host's. */
    int j = x->n - 2 - (int)step;
    if (x->flat && j >= 0 && j < x->k - 1)
      local_sum(job, x, sl, lo, cnt, 0, j + 1);
    if (x->nes < x->wes && (int)step < x->n - 1) {
      wire_fold((float *)w, data, cnt, t->meta.dtype, ring_op(t));
    } else if (x->nes < x->wes) {
      wire_widen((float *)w, data, cnt, t->meta.dtype);
    } else if ((int)step < x->n - 1) {
      void *dst[1] = {w};
      const void *src[2] = {w, data};
      hc_reduce(dst, 1, src, 2, cnt, ring_dtype(x), ring_op(t), 0);
    } else if (data != w) {
      memcpy(w, data, len);
    }
    sl->recvd++;
    last = sl->recvd == 2 * (x->n - 1);
    /* what came into position a leaves from a + k - 1, k steps on */
    if ((int)step + x->k < 2 * (x->n - 1))
      send_step(job, x, sl, (int)step + x->k);
  } else {
    if (step != 0) {
      hc_fmt(why, whylen, "broadcast step %u", step);
      return -1;
    }
    if (data != w) memcpy(w, data, len);
    sl->recvd = 1;
    last = 1;
    if (x->next != x->root_host) send_step(job, x, sl, 0);
  }
  if (last) finalize(job, x, sl);
  return 0;
}

/* Takes *pp out of x's early data, and returns it. */
static struct early *unlink_early(struct hd_xop *x, struct early **pp) {
  struct early *e = *pp;
  *pp = e->next;
  e->next = NULL;
  if (x->early_tail == e) {
    x->early_tail = NULL;
    for (struct early *i = x->early; i; i = i->next) x->early_tail = i;
  }
  x->early_bytes -= e->len;
  return e;
}

static void drop_early(struct hd_xop *x, struct early **pp) {
  struct early *e = unlink_early(x, pp);
  free(e->buf);
  free(e);
}

/* Feeds the piece in sl what came for it before it started. */
static int take_early(struct hd_job *job, struct hd_xop *x,
                      struct xh_slot *sl) {
  struct early **pp = &x->early;
  while (*pp) {
    struct early *e = *pp;
    if (e->h.seq != x->seq || e->h.piece != sl->piece) {
      pp = &e->next;
      continue;
    }
    char why[256];
    int rc = take_step(job, x, sl, e->h.step, e->buf + HP_DATA_HDR_LEN, e->len,
                       why, sizeof why);
    drop_early(x, pp);
    if (rc < 0) {
      hc_error("bad data from host %d: %s", x->prev_host, why);
      return -1;
    }
  }
  return 0;
}

/* May piece p start: its slot free, its inputs copied in, room for its
 * outputs in the staging areas? */
static int can_start(struct hd_job *job, struct hd_xop *x, uint64_t p) {
  struct xh_slot *sl = &x->slot[p % XH_WINDOW];
  if (sl->busy || sl->pending) return 0;
  uint64_t k = p / x->ppc;
  for (int i = 0; i < x->c->nlocal; i++) {
    struct hd_part *pt = &x->t->part[i];
    if (hd_needs_in(x->t, i) && pt->ready <= k) return 0;
    if (hd_needs_out(x->t, i) && k >= 2 && pt->done < k - 1) return 0;
  }
  return 1;
}

static void start_piece(struct hd_job *job, struct hd_xop *x, uint64_t p) {
  struct hd_tensor *t = x->t;
  struct xh_slot *sl = &x->slot[p % XH_WINDOW];
  sl->busy = 1;
  sl->piece = p;
  sl->recvd = 0;
  sl->finalized = 0;
  sl->divide_w = 0;
  piece_range(x, p, &sl->off, &sl->cnt);
  /* W is the first local rank's own memory (the root's, for a
   * broadcast from here): reduced into in place, sent from, received into,
   * and copied to the other local ranks at the end. Only wide elements
   * need a buffer of the daemon's, and fused tensors (a piece spans
   * several of them). */
  sl->buf = part_of(x, t, 0, sl->off);
  if (t->meta.coll == HORA_COLL_ALLREDUCE) {
    /* flat: the members' inputs are read again (local_sum in take_step),
     * so W is never one of them */
    if (x->wide || x->nt > 1 || x->flat) sl->buf = sl->w;
    uint64_t toff, n, woff;
    FOR_SEGMENTS(x, sl->off, sl->cnt, j, toff, n, woff) {
      struct hd_tensor *tj = x->tv[j];
      for (int i = 0; i < x->c->nlocal; i++)
        if (!tj->part[i].joined)
          hd_scale_buf(tj, part_of(x, tj, i, toff), n, 1);
    }
    /* The first k steps send what this host alone holds: segment a + i
     * (i > 0) the sum of positions a + i..a + k - 1, as a flat ring's
     * step k - 1 - i would; every other segment all of its positions. */
    if (!x->flat) local_sum(job, x, sl, 0, sl->cnt, 0, x->c->nlocal);
    for (int g = 0; x->flat && g < x->n; g++) {
      int i = mod(g - x->a, x->n); /* g starts at position g: a + i */
      uint64_t lo, len;
      seg_range(sl->cnt, x->n, g, &lo, &len);
      local_sum(job, x, sl, lo, len, i < x->k ? i : 0, x->k);
    }
    for (int s = 0; s < x->k; s++) send_step(job, x, sl, s);
  } else if (x->root_host == x->me) {
    for (int i = 0; i < x->c->nlocal; i++)
      if (hd_is_root(t, i)) sl->buf = part_of(x, t, i, sl->off);
    send_step(job, x, sl, 0);
    finalize(job, x, sl);
  }
  x->next_piece++;
}

/* ---- the operation ----------------------------------------------------- */

/* The lane *pp, made when it does not exist yet. */
static struct hd_xop *lane(struct hd_comm *c, struct hd_xop **pp) {
  struct hd_job *job = c->job;
  if (*pp) return *pp;
  struct hd_xop *x = calloc(1, sizeof *x);
  if (!x) return NULL;
  if (!(x->scratch = malloc(XH_PIECE_MAX))) {
    free(x);
    return NULL;
  }
  x->c = c;
  for (int i = 0; i < XH_WINDOW; i++) {
    x->slot[i].job = job;
    x->slot[i].c = c;
    x->slot[i].w = malloc(XH_PIECE_MAX);
    x->slot[i].nb = malloc(XH_PIECE_MAX / 2);
    if (!x->slot[i].w || !x->slot[i].nb) {
      for (int k = 0; k <= i; k++) {
        free(x->slot[k].w);
        free(x->slot[k].nb);
      }
      free(x->scratch);
      free(x);
      return NULL;
    }
  }
  return *pp = x;
}

static struct hd_xop *xop(struct hd_comm *c) { return lane(c, &c->xop); }

/* The urgent lane starts x's operation: what came for it before, among
 * the main lane's early data, is x's now. */
static void adopt_early(struct hd_xop *main, struct hd_xop *x) {
  struct early **pp = &main->early;
  while (*pp) {
    struct early *e = *pp;
    if (e->h.seq != x->seq) {
      pp = &e->next;
      continue;
    }
    unlink_early(main, pp);
    if (x->early_tail) x->early_tail->next = e;
    else x->early = e;
    x->early_tail = e;
    x->early_bytes += e->len;
  }
}

static int start_op(struct hd_job *job, struct hd_xop *x,
                    struct hd_tensor *const *ts, int nt) {
  if (nt > x->cap) { /* grown once to the largest run, kept till freed */
    struct hd_tensor **tv = malloc((size_t)nt * sizeof *tv);
    uint64_t *base = malloc((size_t)nt * sizeof *base);
    if (!tv || !base) {
      free(tv);
      free(base);
      return -1;
    }
    free(x->tv);
    free(x->base);
    x->tv = tv;
    x->base = base;
    x->cap = nt;
  }
  struct hd_tensor *t = ts[0];
  memset(&x->t, 0, offsetof(struct hd_xop, slot) - offsetof(struct hd_xop, t));
  x->t = t;
  x->nt = nt;
  for (int j = 0; j < nt; j++) {
    x->tv[j] = ts[j];
    x->base[j] = x->count;
    x->count += ts[j]->meta.count;
  }
  x->active = 1;
  x->ran = 1;
  x->seq = t->seq;
  struct hd_comm *c = x->c;
  x->n = c->nhosts;
  x->me = c->me;
  x->next = (x->me + 1) % x->n;
  x->prev = (x->me + x->n - 1) % x->n;
  x->a = x->me;
  x->k = 1;
  x->flat = t->meta.coll == HORA_COLL_ALLREDUCE && t->flat &&
            c->size > c->nhosts && c->host_n[c->me] == c->nlocal;
  if (x->flat) {
    x->n = c->size;
    x->a = c->host_first[c->me];
    x->k = c->nlocal;
    hc_debug("allreduce '%s': a flat ring of %d members, positions %d-%d "
             "here", t->name, x->n, x->a, x->a + x->k - 1);
  }
  x->next_host = c->hosts[x->next];
  x->prev_host = c->hosts[x->prev];
  x->root_host = -1;
  if (t->meta.coll == HORA_COLL_BROADCAST)
    x->root_host = hd_comm_host_of(c, hd_comm_member(c, t->meta.root));
  x->es = hora_dtype_size(t->meta.dtype);
  x->wide = wide_of(t->meta.coll, t->meta.dtype, t->meta.op);
  x->wes = wide_bytes(x->wide, t->meta.dtype);
  x->nes = x->wide == WIDE_FLOAT && (t->meta.flags & HD_MF_WIRE16) ? 2
                                                                  : x->wes;
  /* fused tensors are resident: one chunk, the whole */
  x->chunk_elems = nt > 1 ? HC_MAX(1, x->count)
                          : HC_MAX(1, hd_comm_local(c, 0)->layout.chunk_size /
                                          x->es);
  x->ppc = (x->chunk_elems * x->wes + XH_PIECE_MAX - 1) / XH_PIECE_MAX;
  x->piece_elems = (x->chunk_elems + x->ppc - 1) / x->ppc;
  x->nchunks = (x->count + x->chunk_elems - 1) / x->chunk_elems;
  uint64_t last = x->count - (x->nchunks - 1) * x->chunk_elems;
  x->npieces = (x->nchunks - 1) * x->ppc +
               (last + x->piece_elems - 1) / x->piece_elems;
  x->chunk_final = calloc(x->nchunks, sizeof *x->chunk_final);
  for (int i = 0; i < XH_WINDOW; i++) x->slot[i].busy = 0;
  t->nchunks = x->nchunks;
  t->chunk_elems = x->chunk_elems;
  for (int i = 0; i < c->nlocal; i++)
    if (t->part[i].joined && !hd_neutral(t, t->meta.count)) x->root_host = -2;
  if (!x->chunk_final || x->root_host == -2 ||
      (x->root_host < 0 && t->meta.coll == HORA_COLL_BROADCAST)) {
    free(x->chunk_final);
    x->chunk_final = NULL;
    x->active = 0;
    x->t = NULL;
    return -1;
  }
  return 0;
}

static void end_op(struct hd_xop *x) {
  free(x->chunk_final);
  x->chunk_final = NULL;
  x->t = NULL;
  x->active = 0;
}

static int advance(struct hd_job *job, struct hd_xop *x) {
  struct hd_tensor *t = x->t;
  int progress = 0;
  struct hd_comm *c = x->c;
  /* copy-in requests for streamed inputs, as staging slots free up */
  for (int i = 0; i < c->nlocal; i++) {
    struct hd_part *p = &t->part[i];
    while (hd_needs_in(t, i) && p->issued < x->nchunks) {
      uint64_t k = p->issued;
      int free_slot = k < 2 || (hd_needs_out(t, i) ? p->done >= k - 1
                                                      : x->chunks_out >= k - 1);
      if (!free_slot) break;
      hd_copy_req(hd_comm_local(c, i), t, HP_CQ_COPY_IN, p->issued++);
      progress = 1;
    }
  }
  while (x->next_piece < x->npieces && can_start(job, x, x->next_piece)) {
    uint64_t p = x->next_piece;
    start_piece(job, x, p);
    if (take_early(job, x, &x->slot[p % XH_WINDOW]) < 0) return -1;
    progress = 1;
  }
  for (int s = 0; s < XH_WINDOW; s++) {
    struct xh_slot *sl = &x->slot[s];
    if (sl->busy && sl->finalized && !sl->pending) {
      if (sl->divide_w) { /* in place: dst and src the very same */
        void *dst[1] = {sl->buf};
        const void *src[1] = {sl->buf};
        hc_reduce(dst, 1, src, 1, sl->cnt, t->meta.dtype, t->meta.op,
                  x->c->size);
        sl->divide_w = 0;
      }
      /* fused tensors share their postscale (hd_coord_mark_fusion) */
      if (t->meta.coll == HORA_COLL_ALLREDUCE && t->meta.postscale != 1.0) {
        uint64_t toff, n, woff;
        FOR_SEGMENTS(x, sl->off, sl->cnt, j, toff, n, woff) {
          for (int i = 0; i < c->nlocal; i++)
            if (!x->tv[j]->part[i].joined)
              hd_scale_buf(x->tv[j], part_of(x, x->tv[j], i, toff), n, 0);
        }
      }
      /* a staging chunk is copied out once no send reads it any more */
      sl->busy = 0;
      x->nfinished++;
      x->chunk_final[sl->off / x->chunk_elems]++;
      progress = 1;
    }
  }
  while (x->chunks_out < x->nchunks &&
         x->chunk_final[x->chunks_out] == pieces_in_chunk(x, x->chunks_out)) {
    for (int i = 0; i < c->nlocal; i++)
      if (hd_needs_out(t, i))
        hd_copy_req(hd_comm_local(c, i), t, HP_CQ_COPY_OUT, x->chunks_out);
    x->chunks_out++;
    progress = 1;
  }
  return progress;
}

/* Reads the previous host's link again once the early data drained. */
static void maybe_resume(struct hd_job *job, struct hd_xop *x) {
  if (job->link->paused(job, x->prev_host) &&
      early_of(x->c) < XH_EARLY_PAUSE / 2)
    job->link->resume(job, x->prev_host);
}

int hd_xhost_lane(struct hd_comm *c, const struct hd_tensor *t) {
  int coll = t->meta.coll;
  if (c->nhosts < 2 || c->me < 0 || t->star || t->fuse ||
      (coll != HORA_COLL_ALLREDUCE && coll != HORA_COLL_BROADCAST) ||
      (coll == HORA_COLL_ALLREDUCE && t->meta.op == HORA_ADASUM) ||
      t->meta.count * hora_dtype_size(t->meta.dtype) > XH_LANE_MAX)
    return 0;
  if (!c->xop || !c->xop->active || c->xop->t == t) return 0;
  return !c->xop2 || !c->xop2->active || c->xop2->t == t;
}

static int fail_all(struct hd_job *job, struct hd_tensor *const *ts, int n,
                    const char *msg) {
  for (int j = 0; j < n; j++) hd_tensor_fail(job, ts[j], HORA_ENOMEM, msg);
  return 1;
}

int hd_xhost_step(struct hd_comm *cm, struct hd_tensor *t) {
  return hd_xhost_run(cm, &t, 1);
}

int hd_xhost_run(struct hd_comm *cm, struct hd_tensor *const *ts, int nt) {
  struct hd_job *job = cm->job;
  struct hd_tensor *t = ts[0];
  struct hd_xop *x;
  if (cm->xop2 && cm->xop2->active && cm->xop2->t == t) {
    x = cm->xop2;
  } else if (cm->xop && cm->xop->active && cm->xop->t != t) {
    /* the main lane is busy: t overtakes its operation (overtake) */
    if (nt != 1 || !hd_xhost_lane(cm, t)) return 0;
    x = lane(cm, &cm->xop2);
  } else {
    x = xop(cm);
  }
  if (!x) return fail_all(job, ts, nt, "horad is out of memory");
  if (x->t != t) {
    if (cm->nlocal > 256 || start_op(job, x, ts, nt) < 0)
      return fail_all(job, ts, nt, "horad cannot run this operation");
    if (x == cm->xop2) {
      hc_debug("%s '%s' overtakes '%s' in the urgent lane",
               hd_coll_name(t->meta.coll), t->name, cm->xop->t->name);
      adopt_early(cm->xop, x);
    }
  }
  x->in_step = 1;
  int rc;
  while ((rc = advance(job, x)) > 0) {}
  x->in_step = 0;
  maybe_resume(job, x);
  if (rc < 0) {
    /* as on the direct path: the link goes, and with it the host, so
     * every host learns of it (nobody waits for our ring data forever) */
    job->link->drop(job, x->prev_host, "bad data on the ring");
    return 0;
  }
  if (x->nfinished < x->npieces || x->chunks_out < x->nchunks) return 0;
  for (int i = 0; i < cm->nlocal; i++)
    if (hd_needs_out(t, i) && t->part[i].done < x->nchunks) return 0;
  end_op(x);
  for (int j = 0; j < nt; j++) hd_tensor_finish(job, ts[j]);
  return 1;
}

/* The communicator a DATA header names, when this host takes part in it
 * and `from` is its previous host there. */
static struct hd_comm *comm_of(struct hd_job *job, int from,
                               const struct hp_data_hdr *h) {
  struct hd_comm *c = hd_comm_get(job, h->comm);
  if (!c || c->removed || c->me < 0 || c->nhosts < 2) return NULL;
  return c->hosts[(c->me + c->nhosts - 1) % c->nhosts] == from ? c : NULL;
}

void *hd_xhost_place(struct hd_job *job, int from, const unsigned char *pre,
                     size_t len) {
  struct hp_data_hdr h;
  if (job->gone_rank != -1 || hp_dec_data_hdr(pre, HP_DATA_HDR_LEN, &h) < 0)
    return NULL;
  struct hd_comm *c = comm_of(job, from, &h);
  struct hd_xop *x = c ? lane_of(c, h.seq) : NULL;
  if (!x || !x->active || h.seq != x->seq || h.piece >= x->next_piece)
    return NULL;
  struct xh_slot *sl = &x->slot[h.piece % XH_WINDOW];
  if (!sl->busy || sl->piece != h.piece || sl->finalized ||
      (int)h.step != sl->recvd)
    return NULL;
  uint64_t lo = 0, cnt = sl->cnt, n = len - HP_DATA_HDR_LEN;
  if (x->t->meta.coll == HORA_COLL_ALLREDUCE) {
    seg_range(sl->cnt, x->n, recv_seg(x, (int)h.step), &lo, &cnt);
    /* reduce-scatter (or a 16-bit wire): reduced or widened from scratch */
    if ((int)h.step < x->n - 1 || x->nes < x->wes)
      return n == cnt * x->nes && n <= XH_PIECE_MAX ? x->scratch : NULL;
  } else if (h.step != 0) {
    return NULL;
  }
  /* allgather or broadcast: straight into its place in W */
  return n == cnt * x->wes ? sl->buf + lo * x->wes : NULL;
}

int hd_xhost_data(struct hd_job *job, int from, unsigned char *payload,
                  size_t len, unsigned char *placed, int *keep, char *why,
                  size_t whylen) {
  struct hp_data_hdr h;
  if (!payload || hp_dec_data_hdr(payload, len, &h) < 0) {
    hc_fmt(why, whylen, "bad DATA header");
    return -1;
  }
  /* the job is failing, or a failed session's data: ignored */
  if (job->gone_rank != -1 || HD_SEQ_STALE(job, h.seq)) return 0;
  struct hd_comm *cm = hd_comm_get(job, h.comm);
  if (cm && cm->removed) return 0; /* it went while the data came */
  cm = comm_of(job, from, &h);
  struct hd_xop *x = cm && xop(cm) ? lane_of(cm, h.seq) : NULL;
  if (!x) {
    hc_fmt(why, whylen, "DATA of process set %u from host %d, which is not "
           "the previous one there", h.comm, from);
    return -1;
  }
  size_t n = len - HP_DATA_HDR_LEN;
  if (placed) { /* hd_xhost_place() checked it: the data are there */
    struct xh_slot *sl = &x->slot[h.piece % XH_WINDOW];
    if (!x->active || h.seq != x->seq || !sl->busy || sl->piece != h.piece) {
      hc_fmt(why, whylen, "placed DATA no longer expected");
      return -1;
    }
    if (take_step(job, x, sl, h.step, placed, n, why, whylen) < 0) return -1;
    run_ready_later(cm);
    return 0;
  }
  if (x->active && h.seq == x->seq && h.piece < x->next_piece) {
    struct xh_slot *sl = &x->slot[h.piece % XH_WINDOW];
    if (!sl->busy || sl->piece != h.piece) {
      hc_fmt(why, whylen, "DATA for finished piece %llu",
             (unsigned long long)h.piece);
      return -1;
    }
    if (take_step(job, x, sl, h.step, payload + HP_DATA_HDR_LEN, n, why,
                  whylen) < 0)
      return -1;
    run_ready_later(cm);
    return 0;
  }
  if (h.seq < x->seq || (h.seq == x->seq && !x->active && x->ran)) {
    hc_fmt(why, whylen, "DATA for finished operation %llu",
           (unsigned long long)h.seq);
    return -1;
  }
  if (early_of(cm) + n > XH_EARLY_MAX) {
    hc_fmt(why, whylen, "the previous host ran too far ahead");
    return -1;
  }
  struct early *e = calloc(1, sizeof *e);
  if (!e) {
    hc_fmt(why, whylen, "out of memory");
    return -1;
  }
  e->h = h;
  e->buf = payload;
  e->len = n;
  *keep = 1;
  if (x->early_tail) x->early_tail->next = e;
  else x->early = e;
  x->early_tail = e;
  x->early_bytes += n;
  /* Backpressure: the previous host waits (in TCP) until we catch up. A
   * broadcast chain needs it when a host downstream is slow. */
  if (early_of(cm) >= XH_EARLY_PAUSE) job->link->pause(job, from);
  return 0;
}

static void lane_abort(struct hd_xop *x) {
  if (!x) return;
  if (x->active) end_op(x);
  for (int i = 0; i < XH_WINDOW; i++) x->slot[i].busy = 0;
  while (x->early) drop_early(x, &x->early);
}

void hd_xhost_abort(struct hd_comm *cm) {
  struct hd_job *job = cm->job;
  if (!cm->xop && !cm->xop2) return;
  /* A frame being read into a rank's memory must not land there once
   * the rank has its buffer back (with an error); a link paused for
   * backpressure must be read again (to hear of the end). */
  if (job->link && cm->nhosts > 1 && cm->me >= 0) {
    int prev = cm->hosts[(cm->me + cm->nhosts - 1) % cm->nhosts];
    job->link->unplace(job, prev);
    job->link->resume(job, prev);
  }
  lane_abort(cm->xop);
  lane_abort(cm->xop2);
}

static void xop_free(struct hd_xop *x) {
  if (!x) return;
  for (int i = 0; i < XH_WINDOW; i++) {
    free(x->slot[i].w);
    free(x->slot[i].nb);
  }
  free(x->scratch);
  free(x->tv);
  free(x->base);
  free(x);
}

void hd_xhost_free(struct hd_comm *c) {
  hd_xhost_abort(c);
  xop_free(c->xop);
  xop_free(c->xop2);
  c->xop = c->xop2 = NULL;
}

/* ---- small allreduces through the coordinator ------------------------------
 *
 * The ring costs a small tensor two network hops after the decision (its
 * reduce-scatter and allgather steps), on top of the two of the
 * negotiation. So a small allreduce goes with the negotiation instead:
 * each host puts its part -- its members' inputs prescaled and reduced,
 * as start_piece would into W -- in its NEGO_READY; the coordinator
 * reduces the hosts' parts in host order (the same bits whatever order
 * they came in) and puts the whole in its decision; each host writes it
 * into its members' outputs as finalize would. Two hops in all. Where a
 * host sent no part (a member joined, one not in the arena, another
 * horad setting), or the coordinator chose a flat ring (HP_DA_FLAT), the
 * decision carries none and the ring runs. */

uint32_t hd_star_bytes(const struct hd_job *job, int coll, int dtype, int op,
                       uint64_t count, int wire16) {
  uint64_t most = (uint64_t)HC_MAX(0, hk_int(&job->knobs, small_allreduce));
  if (coll != HORA_COLL_ALLREDUCE || op == HORA_ADASUM || wire16 ||
      count == 0 || (unsigned)dtype >= HORA_DTYPE_COUNT ||
      count * hora_dtype_size(dtype) > most)
    return 0;
  uint64_t b = count * wide_bytes(wide_of(coll, dtype, op), dtype);
  return b <= HP_STAR_MAX ? (uint32_t)b : 0;
}

int hd_star_part(struct hd_comm *c, const struct hd_tensor *t,
                 unsigned char *out) {
  const struct hd_meta *m = &t->meta;
  uint64_t n = m->count, es = hora_dtype_size(m->dtype);
  int nl = c->nlocal, wide = wide_of(m->coll, m->dtype, m->op);
  if (nl < 1 || nl > 256) return -1;
  /* copies, scaled: the inputs stay as they are, should the ring run */
  unsigned char *copy = malloc((size_t)(nl * n * es));
  if (!copy) return -1;
  const void *src[256];
  for (int i = 0; i < nl; i++) {
    struct hd_rank *r = hd_comm_local(c, i);
    unsigned char *dst = copy + (size_t)i * n * es;
    memcpy(dst, r->shm + t->part[i].offset, n * es);
    hd_scale_buf(t, dst, n, 1);
    src[i] = dst;
  }
  if (wide == WIDE_INT) {
    widen_sum((uint64_t *)out, src, nl, n, m->dtype);
  } else if (wide == WIDE_FLOAT) {
    widen_float((float *)out, src, nl, n, m->dtype, m->op);
  } else {
    void *dst[1] = {out};
    hora_op_t op = m->op == HORA_AVERAGE ? HORA_SUM : (hora_op_t)m->op;
    hc_reduce(dst, 1, src, nl, n, m->dtype, op, 0);
  }
  free(copy);
  return 0;
}

void hd_star_fold(int dtype, int op, unsigned char *acc,
                  const unsigned char *part, uint64_t count) {
  int wide = wide_of(HORA_COLL_ALLREDUCE, dtype, op);
  int wd = wide == WIDE_INT ? HORA_INT64 : wide == WIDE_FLOAT ? HORA_FLOAT32
                                                               : dtype;
  hora_op_t rop = op == HORA_AVERAGE ? HORA_SUM : (hora_op_t)op;
  void *dst[1] = {acc};
  const void *src[2] = {acc, part};
  hc_reduce(dst, 1, src, 2, count, wd, rop, 0);
}

void hd_star_finish(struct hd_comm *c, struct hd_tensor *t) {
  const struct hd_meta *m = &t->meta;
  uint64_t n = m->count;
  int wide = wide_of(m->coll, m->dtype, m->op);
  void *dst[256];
  int nd = 0;
  for (int i = 0; i < c->nlocal && nd < 256; i++)
    if (!t->part[i].joined)
      dst[nd++] = hd_comm_local(c, i)->shm + t->part[i].offset;
  if (wide == WIDE_INT) {
    narrow_avg(dst, nd, (const uint64_t *)t->star, n, m->dtype, c->size);
  } else if (wide == WIDE_FLOAT) {
    narrow_float(dst, nd, (const float *)t->star, n, m->dtype, m->op,
                 c->size);
  } else if (nd) {
    const void *src[1] = {t->star};
    hc_reduce(dst, nd, src, 1, n, m->dtype, m->op, c->size);
  }
  for (int i = 0; i < nd; i++) hd_scale_buf(t, dst[i], n, 0);
  hc_debug("allreduce '%s': the result came with the decision (%u bytes); "
           "no ring", t->name, t->nstar);
  free(t->star);
  t->star = NULL;
  t->nstar = 0;
  hd_tensor_finish(c->job, t);
}
