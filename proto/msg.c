/* msg.c -- codec for hora's framed messages (see msg.h). */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "msg.h"

#define HP_MAX_RANKS 65536u
#define HP_MAX_STR (1u << 20)

void hp_wbuf_init(struct hp_wbuf *w) { memset(w, 0, sizeof *w); }
void hp_wbuf_free(struct hp_wbuf *w) {
  free(w->data);
  memset(w, 0, sizeof *w);
}
void hp_wbuf_reset(struct hp_wbuf *w) {
  w->len = 0;
  w->err = 0;
}

static unsigned char *wbuf_grow(struct hp_wbuf *w, size_t n) {
  if (w->err) return NULL;
  if (w->len + n > w->cap) {
    size_t cap = w->cap ? w->cap : 256;
    while (cap < w->len + n) cap *= 2;
    unsigned char *d = realloc(w->data, cap);
    if (!d) {
      w->err = HORA_ENOMEM;
      return NULL;
    }
    w->data = d;
    w->cap = cap;
  }
  unsigned char *p = w->data + w->len;
  w->len += n;
  return p;
}

static void le_store(unsigned char *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t le_load(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

#define PUT(bits)                                                              \
  void hp_put_u##bits(struct hp_wbuf *w, uint##bits##_t v) {                   \
    unsigned char *p = wbuf_grow(w, bits / 8);                                 \
    if (p) le_store(p, v, bits / 8);                                           \
  }
PUT(8)
PUT(16)
PUT(32)
PUT(64)
#undef PUT

void hp_put_bytes(struct hp_wbuf *w, const void *src, size_t n) {
  if (n > UINT32_MAX) {
    w->err = HORA_EINVAL;
    return;
  }
  hp_put_u32(w, (uint32_t)n);
  unsigned char *p = wbuf_grow(w, n);
  if (p && n) memcpy(p, src, n);
}

void hp_put_raw(struct hp_wbuf *w, const void *src, size_t n) {
  unsigned char *p = wbuf_grow(w, n);
  if (p && n) memcpy(p, src, n);
}

void hp_put_str(struct hp_wbuf *w, const char *s) {
  hp_put_bytes(w, s ? s : "", s ? strlen(s) : 0);
}

void hp_frame_begin(struct hp_wbuf *w, uint16_t type, uint32_t reqid) {
  w->frame_start = w->len;
  hp_put_u32(w, HP_FRAME_MAGIC);
  hp_put_u16(w, HP_PROTO_VERSION);
  hp_put_u16(w, type);
  hp_put_u32(w, 0);
  hp_put_u32(w, reqid);
}

int hp_frame_end(struct hp_wbuf *w) {
  if (w->err) return w->err;
  size_t payload = w->len - w->frame_start - HP_FRAME_HDR;
  if (payload > HP_FRAME_MAX) {
    w->len = w->frame_start;
    w->err = HORA_EINVAL;
    return HORA_EINVAL;
  }
  le_store(w->data + w->frame_start + 8, payload, 4);
  return 0;
}

void hp_rbuf_init(struct hp_rbuf *r, const void *p, size_t len) {
  r->p = p;
  r->len = len;
  r->off = 0;
  r->err = 0;
}

static const unsigned char *rbuf_take(struct hp_rbuf *r, size_t n) {
  if (r->err || n > r->len - r->off) {
    r->err = HORA_EPROTO;
    return NULL;
  }
  const unsigned char *p = r->p + r->off;
  r->off += n;
  return p;
}

#define GET(bits)                                                              \
  uint##bits##_t hp_get_u##bits(struct hp_rbuf *r) {                           \
    const unsigned char *p = rbuf_take(r, bits / 8);                           \
    return p ? (uint##bits##_t)le_load(p, bits / 8) : 0;                      \
  }
GET(8)
GET(16)
GET(32)
GET(64)
#undef GET

const unsigned char *hp_get_bytes(struct hp_rbuf *r, size_t *n) {
  uint32_t len = hp_get_u32(r);
  const unsigned char *p = rbuf_take(r, len);
  *n = p ? len : 0;
  return p;
}

char *hp_get_str(struct hp_rbuf *r, size_t max) {
  size_t n;
  const unsigned char *p = hp_get_bytes(r, &n);
  if (!p) return NULL;
  if (n > max || memchr(p, 0, n)) {
    r->err = HORA_EPROTO;
    return NULL;
  }
  char *s = malloc(n + 1);
  if (!s) {
    r->err = HORA_ENOMEM;
    return NULL;
  }
  memcpy(s, p, n);
  s[n] = '\0';
  return s;
}

/* Copies a string field into a fixed array. */
static void get_fixed_str(struct hp_rbuf *r, char *dst, size_t cap) {
  size_t n;
  const unsigned char *p = hp_get_bytes(r, &n);
  if (!p) return;
  if (n >= cap || memchr(p, 0, n)) {
    r->err = HORA_EPROTO;
    return;
  }
  memcpy(dst, p, n);
  dst[n] = '\0';
}

int hp_frame_parse(const void *buf, struct hp_frame_hdr *h, char *why,
                   size_t whylen) {
  const unsigned char *p = buf;
  h->magic = (uint32_t)le_load(p, 4);
  h->version = (uint16_t)le_load(p + 4, 2);
  h->type = (uint16_t)le_load(p + 6, 2);
  h->len = (uint32_t)le_load(p + 8, 4);
  h->reqid = (uint32_t)le_load(p + 12, 4);
  if (h->magic != HP_FRAME_MAGIC) {
    hc_fmt(why, whylen, "bad magic 0x%08x (not a hora peer)", h->magic);
    return HORA_EPROTO;
  }
  if (h->version != HP_PROTO_VERSION) {
    hc_fmt(why, whylen, "protocol version %u, expected %u", h->version,
           HP_PROTO_VERSION);
    return HORA_EPROTO;
  }
  if (h->type == 0 || h->type > HP_MSG_TYPE_MAX) {
    hc_fmt(why, whylen, "unknown message type %u", h->type);
    return HORA_EPROTO;
  }
  if (h->len > HP_FRAME_MAX) {
    hc_fmt(why, whylen, "frame length %u over the limit of %u", h->len,
           HP_FRAME_MAX);
    return HORA_EPROTO;
  }
  return 0;
}

void hp_decoder_init(struct hp_decoder *d) { memset(d, 0, sizeof *d); }
void hp_decoder_free(struct hp_decoder *d) {
  free(d->buf);
  memset(d, 0, sizeof *d);
}

static void decoder_drop_consumed(struct hp_decoder *d) {
  if (!d->consumed) return;
  memmove(d->buf, d->buf + d->consumed, d->len - d->consumed);
  d->len -= d->consumed;
  d->consumed = 0;
}

int hp_decoder_feed(struct hp_decoder *d, const void *p, size_t n) {
  decoder_drop_consumed(d);
  if (d->len + n > d->cap) {
    size_t cap = d->cap ? d->cap : 4096;
    while (cap < d->len + n) cap *= 2;
    unsigned char *b = realloc(d->buf, cap);
    if (!b) return HORA_ENOMEM;
    d->buf = b;
    d->cap = cap;
  }
  if (n) memcpy(d->buf + d->len, p, n);
  d->len += n;
  return 0;
}

int hp_decoder_next(struct hp_decoder *d, struct hp_frame_hdr *h,
                    const unsigned char **payload, char *why, size_t whylen) {
  decoder_drop_consumed(d);
  if (d->len < HP_FRAME_HDR) {
    /* Reject a bad magic as soon as it is visible. */
    static const unsigned char magic[4] = {'H', 'O', 'R', 'A'};
    size_t k = HC_MIN(d->len, (size_t)4);
    if (k && memcmp(d->buf, magic, k)) {
      hc_fmt(why, whylen, "bad magic (not a hora peer)");
      return HORA_EPROTO;
    }
    return 0;
  }
  int rc = hp_frame_parse(d->buf, h, why, whylen);
  if (rc < 0) return rc;
  if (d->len - HP_FRAME_HDR < h->len) return 0;
  *payload = d->buf + HP_FRAME_HDR;
  d->consumed = HP_FRAME_HDR + h->len;
  return 1;
}

/* ---- messages ----------------------------------------------------------- */

void hp_enc_hello(struct hp_wbuf *w, const struct hp_hello *m) {
  hp_frame_begin(w, HP_MSG_HELLO, 0);
  hp_put_u32(w, (uint32_t)m->rank);
  hp_put_u32(w, (uint32_t)m->pid);
  hp_put_str(w, m->token);
  hp_put_u32(w, m->shm_version);
  hp_frame_end(w);
}

static int finish(struct hp_rbuf *r) {
  if (r->err) return r->err;
  return r->off == r->len ? 0 : HORA_EPROTO; /* trailing bytes */
}

int hp_dec_hello(const unsigned char *p, size_t n, struct hp_hello *m) {
  struct hp_rbuf r;
  hp_rbuf_init(&r, p, n);
  memset(m, 0, sizeof *m);
  m->rank = (int32_t)hp_get_u32(&r);
  m->pid = (int32_t)hp_get_u32(&r);
  get_fixed_str(&r, m->token, sizeof m->token);
  m->shm_version = hp_get_u32(&r);
  return finish(&r);
}

void hp_enc_refuse(struct hp_wbuf *w, const struct hp_refuse *m) {
  hp_frame_begin(w, HP_MSG_REFUSE, 0);
  hp_put_u32(w, (uint32_t)m->status);
  hp_put_str(w, m->msg);
  hp_frame_end(w);
}

int hp_dec_refuse(const unsigned char *p, size_t n, struct hp_refuse *m) {
  struct hp_rbuf r;
  hp_rbuf_init(&r, p, n);
  memset(m, 0, sizeof *m);
  m->status = (int32_t)hp_get_u32(&r);
  get_fixed_str(&r, m->msg, sizeof m->msg);
  int rc = finish(&r);
  if (rc == 0 && m->status >= 0) rc = HORA_EPROTO;
  return rc;
}

void hp_enc_welcome(struct hp_wbuf *w, const struct hp_welcome *m) {
  hp_frame_begin(w, HP_MSG_WELCOME, 0);
  const int32_t v[] = {m->rank,       m->size,       m->local_rank,
                       m->local_size, m->cross_rank, m->cross_size,
                       m->daemon_pid};
  for (size_t i = 0; i < HC_ARRAY_SIZE(v); i++) hp_put_u32(w, (uint32_t)v[i]);
  hp_put_u64(w, m->shm_size);
  hp_put_str(w, m->hostname);
  hp_put_u64(w, m->fast_size);
  hp_frame_end(w);
}

int hp_dec_welcome(const unsigned char *p, size_t n, struct hp_welcome *m) {
  struct hp_rbuf r;
  hp_rbuf_init(&r, p, n);
  memset(m, 0, sizeof *m);
  int32_t *v[] = {&m->rank,       &m->size,       &m->local_rank,
                  &m->local_size, &m->cross_rank, &m->cross_size,
                  &m->daemon_pid};
  for (size_t i = 0; i < HC_ARRAY_SIZE(v); i++) *v[i] = (int32_t)hp_get_u32(&r);
  m->shm_size = hp_get_u64(&r);
  get_fixed_str(&r, m->hostname, sizeof m->hostname);
  m->fast_size = hp_get_u64(&r);
  return finish(&r);
}

static void put_strv(struct hp_wbuf *w, uint32_t n, char *const *v) {
  hp_put_u32(w, n);
  for (uint32_t i = 0; i < n; i++) hp_put_str(w, v[i]);
}

static char **get_strv(struct hp_rbuf *r, uint32_t *n) {
  *n = hp_get_u32(r);
  if (r->err || *n > HP_MAX_ARGS || *n > r->len - r->off) {
    r->err = HORA_EPROTO;
    *n = 0;
    return NULL;
  }
  char **v = calloc((size_t)*n + 1, sizeof *v);
  if (!v) {
    r->err = HORA_ENOMEM;
    *n = 0;
    return NULL;
  }
  for (uint32_t i = 0; i < *n; i++) v[i] = hp_get_str(r, HP_MAX_STR);
  return v;
}

/* A JOB's or a REFORM's ranks: rank, local rank, cross rank, cross size. */
static void put_job_ranks(struct hp_wbuf *w, uint32_t n,
                          const struct hp_job_rank *k) {
  for (uint32_t i = 0; i < n; i++) {
    hp_put_u32(w, (uint32_t)k[i].rank);
    hp_put_u32(w, (uint32_t)k[i].local_rank);
    hp_put_u32(w, (uint32_t)k[i].cross_rank);
    hp_put_u32(w, (uint32_t)k[i].cross_size);
  }
}

static void get_job_rank(struct hp_rbuf *r, struct hp_job_rank *k) {
  k->rank = (int32_t)hp_get_u32(r);
  k->local_rank = (int32_t)hp_get_u32(r);
  k->cross_rank = (int32_t)hp_get_u32(r);
  k->cross_size = (int32_t)hp_get_u32(r);
}

void hp_enc_job(struct hp_wbuf *w, const struct hp_job *m) {
  hp_frame_begin(w, HP_MSG_JOB, 0);
  hp_put_u32(w, (uint32_t)m->size);
  hp_put_u32(w, (uint32_t)m->local_size);
  hp_put_u32(w, m->nlocal);
  put_job_ranks(w, m->nlocal, m->ranks);
  hp_put_str(w, m->hostname);
  hp_put_str(w, m->cwd);
  put_strv(w, m->argc, m->argv);
  put_strv(w, m->envc, m->envp);
  hp_put_u32(w, m->host_index);
  hp_put_u32(w, m->nhosts);
  for (uint32_t i = 0; i < m->nhosts; i++) {
    const struct hp_job_host *h = &m->hosts[i];
    hp_put_str(w, h->name);
    hp_put_str(w, h->addr);
    hp_put_u16(w, h->port);
    hp_put_u32(w, (uint32_t)h->first_rank);
    hp_put_u32(w, (uint32_t)h->nranks);
  }
  hp_frame_end(w);
}

void hp_job_free(struct hp_job *m) {
  free(m->ranks);
  free(m->hostname);
  free(m->cwd);
  for (uint32_t i = 0; m->argv && i < m->argc; i++) free(m->argv[i]);
  free(m->argv);
  for (uint32_t i = 0; m->envp && i < m->envc; i++) free(m->envp[i]);
  free(m->envp);
  for (uint32_t i = 0; m->hosts && i < m->nhosts; i++) {
    free(m->hosts[i].name);
    free(m->hosts[i].addr);
  }
  free(m->hosts);
  memset(m, 0, sizeof *m);
}

int hp_dec_job(const unsigned char *p, size_t n, struct hp_job *m) {
  struct hp_rbuf r;
  hp_rbuf_init(&r, p, n);
  memset(m, 0, sizeof *m);
  m->size = (int32_t)hp_get_u32(&r);
  m->local_size = (int32_t)hp_get_u32(&r);
  m->nlocal = hp_get_u32(&r);
  if (r.err || m->nlocal > HP_MAX_RANKS || m->nlocal * 16ull > r.len - r.off)
    return HORA_EPROTO;
  m->ranks = calloc(m->nlocal ? m->nlocal : 1, sizeof *m->ranks);
  if (!m->ranks) return HORA_ENOMEM;
  for (uint32_t i = 0; i < m->nlocal; i++) get_job_rank(&r, &m->ranks[i]);
  m->hostname = hp_get_str(&r, 255);
  m->cwd = hp_get_str(&r, 4096);
  m->argv = get_strv(&r, &m->argc);
  m->envp = get_strv(&r, &m->envc);
  m->host_index = hp_get_u32(&r);
  m->nhosts = hp_get_u32(&r);
  if (r.err || m->nhosts == 0 || m->nhosts > HP_MAX_HOSTS ||
      m->nhosts > r.len - r.off)
    return HORA_EPROTO;
  m->hosts = calloc(m->nhosts, sizeof *m->hosts);
  if (!m->hosts) {
    m->nhosts = 0;
    return HORA_ENOMEM;
  }
  for (uint32_t i = 0; i < m->nhosts && !r.err; i++) {
    struct hp_job_host *h = &m->hosts[i];
    h->name = hp_get_str(&r, 255);
    h->addr = hp_get_str(&r, 63);
    h->port = hp_get_u16(&r);
    h->first_rank = (int32_t)hp_get_u32(&r);
    h->nranks = (int32_t)hp_get_u32(&r);
  }
  int rc = finish(&r);
  if (rc == 0 && m->host_index >= m->nhosts) rc = HORA_EPROTO;
  for (uint32_t i = 0; rc == 0 && i < m->nhosts; i++) {
    const struct hp_job_host *h = &m->hosts[i];
    if (h->first_rank < 0 || h->nranks <= 0 || h->first_rank >= m->size ||
        h->nranks > m->size - h->first_rank)
      rc = HORA_EPROTO;
  }
  if (rc == 0 && (m->size <= 0 || m->local_size <= 0 || m->argc == 0 ||
                  m->nlocal > (uint32_t)m->size))
    rc = HORA_EPROTO;
  for (uint32_t i = 0; rc == 0 && i < m->nlocal; i++) {
    const struct hp_job_rank *k = &m->ranks[i];
    if (k->rank < 0 || k->rank >= m->size || k->local_rank < 0 ||
        k->local_rank >= m->local_size || k->cross_rank < 0 ||
        k->cross_size <= 0 || k->cross_rank >= k->cross_size)
      rc = HORA_EPROTO;
  }
  return rc;
}

void hp_enc_exit(struct hp_wbuf *w, const struct hp_exit *m) {
  hp_frame_begin(w, HP_MSG_EXIT, 0);
  hp_put_u32(w, (uint32_t)m->rank);
  hp_put_u8(w, m->how);
  hp_put_u32(w, (uint32_t)m->code);
  hp_put_str(w, m->msg);
  hp_put_u8(w, m->noinit ? 1 : 0);
  hp_put_u32(w, m->restart);
  hp_frame_end(w);
}

int hp_dec_exit(const unsigned char *p, size_t n, struct hp_exit *m) {
  struct hp_rbuf r;
  hp_rbuf_init(&r, p, n);
  memset(m, 0, sizeof *m);
  m->rank = (int32_t)hp_get_u32(&r);
  m->how = hp_get_u8(&r);
  m->code = (int32_t)hp_get_u32(&r);
  m->msg = hp_get_str(&r, 65536);
  m->noinit = hp_get_u8(&r);
  m->restart = hp_get_u32(&r);
  int rc = finish(&r);
  if (rc == 0 && (m->how > HP_EXIT_SPAWN || m->noinit > 1)) rc = HORA_EPROTO;
  if (rc) {
    free(m->msg);
    m->msg = NULL;
  }
  return rc;
}

void hp_enc_output(struct hp_wbuf *w, const struct hp_output *m) {
  hp_frame_begin(w, HP_MSG_OUTPUT, 0);
  hp_put_u32(w, (uint32_t)m->rank);
  hp_put_u8(w, m->stream);
  hp_put_bytes(w, m->data, m->len);
  hp_frame_end(w);
}

int hp_dec_output(const unsigned char *p, size_t n, struct hp_output *m) {
  struct hp_rbuf r;
  hp_rbuf_init(&r, p, n);
  memset(m, 0, sizeof *m);
  m->rank = (int32_t)hp_get_u32(&r);
  m->stream = hp_get_u8(&r);
  m->data = hp_get_bytes(&r, &m->len);
  int rc = finish(&r);
  if (rc == 0 && (m->stream < 1 || m->stream > 2)) rc = HORA_EPROTO;
  return rc;
}

void hp_enc_text(struct hp_wbuf *w, uint16_t type, const char *text) {
  hp_frame_begin(w, type, 0);
  hp_put_str(w, text);
  hp_frame_end(w);
}

char *hp_dec_text(const unsigned char *p, size_t n) {
  struct hp_rbuf r;
  hp_rbuf_init(&r, p, n);
  char *s = hp_get_str(&r, 65536);
  if (s && finish(&r)) {
    free(s);
    s = NULL;
  }
  return s;
}

/* ---- multi-host messages ------------------------------------------------ */

void hp_enc_register(struct hp_wbuf *w, const struct hp_register *m) {
  hp_frame_begin(w, HP_MSG_REGISTER, 0);
  hp_put_u32(w, m->host_index);
  hp_put_str(w, m->hostname);
  hp_put_u16(w, m->mesh_port);
  hp_put_str(w, m->mesh_addr);
  hp_put_u32(w, (uint32_t)m->pid);
  hp_put_str(w, m->version);
  hp_frame_end(w);
}

int hp_dec_register(const unsigned char *p, size_t n, struct hp_register *m) {
  struct hp_rbuf r;
  hp_rbuf_init(&r, p, n);
  memset(m, 0, sizeof *m);
  m->host_index = hp_get_u32(&r);
  get_fixed_str(&r, m->hostname, sizeof m->hostname);
  m->mesh_port = hp_get_u16(&r);
  get_fixed_str(&r, m->mesh_addr, sizeof m->mesh_addr);
  m->pid = (int32_t)hp_get_u32(&r);
  get_fixed_str(&r, m->version, sizeof m->version);
  int rc = finish(&r);
  if (rc == 0 && m->mesh_port == 0) rc = HORA_EPROTO;
  return rc;
}

void hp_enc_peer_hello(struct hp_wbuf *w, uint32_t host_index,
                       uint32_t nhosts) {
  hp_frame_begin(w, HP_MSG_PEER_HELLO, 0);
  hp_put_u32(w, host_index);
  hp_put_u32(w, nhosts);
  hp_frame_end(w);
}

int hp_dec_peer_hello(const unsigned char *p, size_t n, uint32_t *host_index,
                      uint32_t *nhosts) {
  struct hp_rbuf r;
  hp_rbuf_init(&r, p, n);
  *host_index = hp_get_u32(&r);
  *nhosts = hp_get_u32(&r);
  return finish(&r);
}

static void put_f64(struct hp_wbuf *w, double v) {
  uint64_t u;
  memcpy(&u, &v, sizeof u);
  hp_put_u64(w, u);
}

static double get_f64(struct hp_rbuf *r) {
  uint64_t u = hp_get_u64(r);
  double v;
  memcpy(&v, &u, sizeof v);
  return v;
}

/* The operation's metadata, as NEGO_READY and NEGO_DECIDE carry it. */
static void put_meta(struct hp_wbuf *w, const struct hp_nego_ready *m) {
  hp_put_u8(w, m->coll);
  hp_put_u8(w, m->dtype);
  hp_put_u8(w, m->op);
  hp_put_u8(w, m->ndims);
  hp_put_u32(w, (uint32_t)m->root);
  hp_put_u64(w, m->count);
  for (int i = 0; i < 8; i++) hp_put_u64(w, (uint64_t)m->shape[i]);
  put_f64(w, m->prescale);
  put_f64(w, m->postscale);
  hp_put_u64(w, m->aux_hash);
  hp_put_u64(w, m->group);
  hp_put_u32(w, m->group_n);
  hp_put_u32(w, m->group_idx);
  hp_put_u32(w, m->flags);
  hp_put_u32(w, (uint32_t)m->priority);
}

static void get_meta(struct hp_rbuf *rb, struct hp_nego_ready *m) {
  m->coll = hp_get_u8(rb);
  m->dtype = hp_get_u8(rb);
  m->op = hp_get_u8(rb);
  m->ndims = hp_get_u8(rb);
  m->root = (int32_t)hp_get_u32(rb);
  m->count = hp_get_u64(rb);
  for (int i = 0; i < 8; i++) m->shape[i] = (int64_t)hp_get_u64(rb);
  m->prescale = get_f64(rb);
  m->postscale = get_f64(rb);
  m->aux_hash = hp_get_u64(rb);
  m->group = hp_get_u64(rb);
  m->group_n = hp_get_u32(rb);
  m->group_idx = hp_get_u32(rb);
  m->flags = hp_get_u32(rb);
  m->priority = (int32_t)hp_get_u32(rb);
}

/* HP_CREF_USE: the flags and priority of the metadata travel alone */
static void put_ref(struct hp_wbuf *w, const struct hp_nego_ready *m) {
  hp_put_u32(w, m->flags);
  hp_put_u32(w, (uint32_t)m->priority);
}

static void get_ref(struct hp_rbuf *rb, struct hp_nego_ready *m) {
  m->flags = hp_get_u32(rb);
  m->priority = (int32_t)hp_get_u32(rb);
}

/* A part or result of a small allreduce: its length, then its bytes. */
static void put_data(struct hp_wbuf *w, const unsigned char *p, uint32_t n) {
  n = p ? n : 0;
  hp_put_u32(w, n);
  if (n) hp_put_raw(w, p, n);
}

static void get_data(struct hp_rbuf *r, const unsigned char **p,
                     uint32_t *n) {
  *n = hp_get_u32(r);
  *p = NULL;
  if (*n > HP_STAR_MAX || r->len - r->off < *n) {
    r->err = HORA_EPROTO;
    *n = 0;
  } else if (*n) {
    *p = r->p + r->off;
    r->off += *n;
  }
}

void hp_enc_nego_ready(struct hp_wbuf *w, const struct hp_nego_ready *m) {
  int use = m->cref == HP_CREF_USE;
  hp_frame_begin(w, HP_MSG_NEGO_READY, 0);
  hp_put_u32(w, m->comm);
  hp_put_u8(w, m->cref);
  hp_put_u32(w, m->cid);
  if (use) {
    put_ref(w, m);
  } else {
    hp_put_str(w, m->name);
    put_meta(w, m);
  }
  hp_put_u32(w, (uint32_t)m->rank);
  if (!use) {
    hp_put_u32(w, (uint32_t)m->status);
    hp_put_str(w, m->msg);
  }
  uint32_t na = m->arrive ? m->narrive : 0;
  hp_put_u32(w, na);
  for (uint32_t i = 0; i < na; i++)
    hp_put_u64(w, le_load(m->arrive + (size_t)i * 8, 8));
  put_data(w, m->data, m->ndata);
  hp_frame_end(w);
}

uint64_t hp_nego_ready_before(const struct hp_nego_ready *m, uint32_t i) {
  return i < m->narrive && m->arrive ? le_load(m->arrive + (size_t)i * 8, 8)
                                     : UINT64_MAX;
}

void hp_arrive_store(unsigned char *buf, uint32_t i, uint64_t v) {
  le_store(buf + (size_t)i * 8, v, 8);
}

int hp_dec_nego_ready(const unsigned char *p, size_t n,
                      struct hp_nego_ready *m) {
  struct hp_rbuf r;
  hp_rbuf_init(&r, p, n);
  memset(m, 0, sizeof *m);
  m->comm = hp_get_u32(&r);
  m->cref = hp_get_u8(&r);
  m->cid = hp_get_u32(&r);
  int use = m->cref == HP_CREF_USE;
  if (use) {
    get_ref(&r, m);
  } else {
    get_fixed_str(&r, m->name, sizeof m->name);
    get_meta(&r, m);
  }
  m->rank = (int32_t)hp_get_u32(&r);
  if (!use) {
    m->status = (int32_t)hp_get_u32(&r);
    get_fixed_str(&r, m->msg, sizeof m->msg);
  }
  m->narrive = hp_get_u32(&r);
  if (m->narrive > HP_ARRIVE_MAX || r.len - r.off < (size_t)m->narrive * 8) {
    r.err = HORA_EPROTO;
    m->narrive = 0;
  } else {
    m->arrive = m->narrive ? r.p + r.off : NULL;
    r.off += (size_t)m->narrive * 8;
  }
  get_data(&r, &m->data, &m->ndata);
  int rc = finish(&r);
  if (rc == 0 && (m->ndims > 8 || m->status > 0 || m->cref > HP_CREF_USE ||
                  (m->group_n && m->group_idx >= m->group_n) ||
                  (m->cref != HP_CREF_NONE && (m->status || m->msg[0])) ||
                  (m->ndata && (m->status || m->msg[0]))))
    rc = HORA_EPROTO;
  return rc;
}

static void put_decide(struct hp_wbuf *w, const struct hp_nego_decide *m) {
  hp_put_u8(w, m->cref);
  hp_put_u32(w, m->cid);
  hp_put_u64(w, m->seq);
  if (m->cref == HP_CREF_USE) {
    hp_put_u32(w, (uint32_t)m->value);
    hp_put_u32(w, m->fuse);
    hp_put_u32(w, m->algo);
    put_ref(w, &m->meta);
    put_data(w, m->data, m->ndata);
    return;
  }
  hp_put_str(w, m->name);
  hp_put_u32(w, (uint32_t)m->status);
  hp_put_u32(w, (uint32_t)m->value);
  hp_put_u32(w, m->fuse);
  hp_put_u32(w, m->algo);
  hp_put_str(w, m->msg);
  put_meta(w, &m->meta);
  put_data(w, m->data, m->ndata);
}

static int get_decide(struct hp_rbuf *r, struct hp_nego_decide *m) {
  m->cref = hp_get_u8(r);
  m->cid = hp_get_u32(r);
  m->seq = hp_get_u64(r);
  if (m->cref == HP_CREF_USE) {
    m->value = (int32_t)hp_get_u32(r);
    m->fuse = hp_get_u32(r);
    m->algo = hp_get_u32(r);
    get_ref(r, &m->meta);
    get_data(r, &m->data, &m->ndata);
    return m->fuse > 1 || (m->fuse && m->ndata) || (m->algo & ~HP_DA_ALL);
  }
  get_fixed_str(r, m->name, sizeof m->name);
  m->status = (int32_t)hp_get_u32(r);
  m->value = (int32_t)hp_get_u32(r);
  m->fuse = hp_get_u32(r);
  m->algo = hp_get_u32(r);
  get_fixed_str(r, m->msg, sizeof m->msg);
  get_meta(r, &m->meta);
  get_data(r, &m->data, &m->ndata);
  if (m->cref > HP_CREF_USE || (m->ndata && (m->status || m->fuse)) ||
      (m->cref == HP_CREF_SET && (m->status || m->msg[0])) ||
      m->status > 0 || m->fuse > 1 || (m->fuse && m->status) ||
      (m->algo & ~HP_DA_ALL) ||
      m->meta.ndims > 8 ||
      (m->meta.group_n && m->meta.group_idx >= m->meta.group_n))
    return HORA_EPROTO;
  return 0;
}

void hp_enc_nego_decide(struct hp_wbuf *w, const struct hp_nego_decide *m) {
  hp_frame_begin(w, HP_MSG_NEGO_DECIDE, 0);
  hp_put_u32(w, m->comm);
  put_decide(w, m);
  hp_frame_end(w);
}

int hp_dec_nego_decide(const unsigned char *p, size_t n,
                       struct hp_nego_decide *m) {
  struct hp_rbuf r;
  hp_rbuf_init(&r, p, n);
  memset(m, 0, sizeof *m);
  m->comm = hp_get_u32(&r);
  int bad = get_decide(&r, m) || m->fuse; /* fused: only in a plan */
  int rc = finish(&r);
  return rc == 0 && bad ? HORA_EPROTO : rc;
}

void hp_enc_nego_plan(struct hp_wbuf *w, const struct hp_nego_decide *v,
                      uint32_t n) {
  hp_frame_begin(w, HP_MSG_NEGO_PLAN, 0);
  hp_put_u32(w, n ? v[0].comm : 0);
  hp_put_u32(w, n);
  for (uint32_t i = 0; i < n; i++) put_decide(w, &v[i]);
  hp_frame_end(w);
}

int hp_dec_nego_plan(const unsigned char *p, size_t n,
                     struct hp_nego_decide **out, uint32_t *count) {
  struct hp_rbuf r;
  hp_rbuf_init(&r, p, n);
  *out = NULL;
  *count = 0;
  uint32_t comm = hp_get_u32(&r), k = hp_get_u32(&r);
  /* every entry takes at least 29 bytes (one by number): a count the
   * frame cannot hold is refused before anything is allocated */
  if (k == 0 || k > HP_PLAN_MAX || k > n / 29) return HORA_EPROTO;
  struct hp_nego_decide *v = calloc(k, sizeof *v);
  if (!v) return HORA_ENOMEM;
  int bad = 0;
  for (uint32_t i = 0; i < k; i++) {
    v[i].comm = comm;
    bad |= get_decide(&r, &v[i]);
  }
  bad |= v[0].fuse != 0; /* the first has nothing before it to join */
  int rc = finish(&r);
  if (rc == 0 && bad) rc = HORA_EPROTO;
  if (rc < 0) {
    free(v);
    return rc;
  }
  *out = v;
  *count = k;
  return 0;
}

void hp_data_frame_hdr(unsigned char *out, const struct hp_data_hdr *m,
                       uint32_t bytes) {
  le_store(out, HP_FRAME_MAGIC, 4);
  le_store(out + 4, HP_PROTO_VERSION, 2);
  le_store(out + 6, HP_MSG_DATA, 2);
  le_store(out + 8, (uint64_t)bytes + HP_DATA_HDR_LEN, 4);
  le_store(out + 12, 0, 4);
  le_store(out + 16, m->seq, 8);
  le_store(out + 24, m->piece, 8);
  le_store(out + 32, m->step, 4);
  le_store(out + 36, m->comm, 4);
}

int hp_dec_data_hdr(const unsigned char *p, size_t n, struct hp_data_hdr *m) {
  if (n < HP_DATA_HDR_LEN) return HORA_EPROTO;
  m->seq = le_load(p, 8);
  m->piece = le_load(p + 8, 8);
  m->step = (uint32_t)le_load(p + 16, 4);
  m->comm = (uint32_t)le_load(p + 20, 4);
  return 0;
}

void hp_xdata_frame_hdr(unsigned char *out, const struct hp_xdata_hdr *m,
                        uint32_t bytes) {
  le_store(out, HP_FRAME_MAGIC, 4);
  le_store(out + 4, HP_PROTO_VERSION, 2);
  le_store(out + 6, HP_MSG_XDATA, 2);
  le_store(out + 8, (uint64_t)bytes + HP_XDATA_HDR_LEN, 4);
  le_store(out + 12, 0, 4);
  le_store(out + 16, m->comm, 4);
  le_store(out + 20, m->step, 4);
  le_store(out + 24, m->seq, 8);
  le_store(out + 32, m->offset, 8);
}

int hp_dec_xdata_hdr(const unsigned char *p, size_t n,
                     struct hp_xdata_hdr *m) {
  if (n < HP_XDATA_HDR_LEN) return HORA_EPROTO;
  m->comm = (uint32_t)le_load(p, 4);
  m->step = (uint32_t)le_load(p + 4, 4);
  m->seq = le_load(p + 8, 8);
  m->offset = le_load(p + 16, 8);
  return 0;
}

void hp_enc_peer_lost(struct hp_wbuf *w, const struct hp_peer_lost *m) {
  hp_frame_begin(w, HP_MSG_PEER_LOST, 0);
  hp_put_u32(w, m->host);
  hp_put_str(w, m->msg);
  hp_frame_end(w);
}

int hp_dec_peer_lost(const unsigned char *p, size_t n,
                     struct hp_peer_lost *m) {
  struct hp_rbuf r;
  hp_rbuf_init(&r, p, n);
  memset(m, 0, sizeof *m);
  m->host = hp_get_u32(&r);
  get_fixed_str(&r, m->msg, sizeof m->msg);
  return finish(&r);
}

void hp_enc_heartbeat(struct hp_wbuf *w, const uint32_t *hosts, uint32_t n) {
  hp_frame_begin(w, HP_MSG_HEARTBEAT, 0);
  if (n) {
    hp_put_u32(w, n);
    for (uint32_t i = 0; i < n; i++) hp_put_u32(w, hosts[i]);
  }
  hp_frame_end(w);
}

int hp_dec_heartbeat(const unsigned char *p, size_t n, uint32_t *hosts,
                     uint32_t max, uint32_t *count) {
  *count = 0;
  if (n == 0) return 0;
  struct hp_rbuf r;
  hp_rbuf_init(&r, p, n);
  uint32_t k = hp_get_u32(&r);
  if (r.err || k > max || k > HP_TROUBLE_MAX) return HORA_EPROTO;
  for (uint32_t i = 0; i < k; i++) hosts[i] = hp_get_u32(&r);
  int rc = finish(&r);
  if (rc == 0) *count = k;
  return rc;
}

void hp_enc_rank_gone(struct hp_wbuf *w, const struct hp_rank_gone *m) {
  hp_frame_begin(w, HP_MSG_RANK_GONE, 0);
  hp_put_u32(w, (uint32_t)m->rank);
  hp_put_u32(w, (uint32_t)m->host);
  hp_put_u8(w, m->restart ? 1 : 0);
  hp_put_str(w, m->msg);
  hp_frame_end(w);
}

int hp_dec_rank_gone(const unsigned char *p, size_t n, struct hp_rank_gone *m) {
  struct hp_rbuf r;
  hp_rbuf_init(&r, p, n);
  memset(m, 0, sizeof *m);
  m->rank = (int32_t)hp_get_u32(&r);
  m->host = (int32_t)hp_get_u32(&r);
  m->restart = hp_get_u8(&r);
  get_fixed_str(&r, m->msg, sizeof m->msg);
  int rc = finish(&r);
  return rc == 0 && m->restart > 1 ? HORA_EPROTO : rc;
}

void hp_enc_reform(struct hp_wbuf *w, const struct hp_reform *m) {
  hp_frame_begin(w, HP_MSG_REFORM, 0);
  hp_put_u32(w, m->number);
  hp_put_u32(w, m->host_index);
  hp_put_u32(w, m->nhosts);
  hp_put_u32(w, (uint32_t)m->size);
  for (uint32_t i = 0; i < m->nhosts; i++) {
    hp_put_u32(w, m->old_index[i]);
    hp_put_u32(w, (uint32_t)m->first_rank[i]);
    hp_put_u32(w, (uint32_t)m->nranks[i]);
  }
  hp_put_u32(w, m->nlocal);
  put_job_ranks(w, m->nlocal, m->ranks);
  hp_put_str(w, m->why);
  hp_frame_end(w);
}

void hp_enc_reformed(struct hp_wbuf *w, uint32_t number) {
  hp_frame_begin(w, HP_MSG_REFORM, 0);
  hp_put_u32(w, number);
  hp_frame_end(w);
}

int hp_dec_reformed(const unsigned char *p, size_t n, uint32_t *number) {
  struct hp_rbuf r;
  hp_rbuf_init(&r, p, n);
  *number = hp_get_u32(&r);
  int rc = finish(&r);
  return rc == 0 && *number == 0 ? HORA_EPROTO : rc;
}

void hp_reform_free(struct hp_reform *m) {
  free(m->old_index);
  free(m->first_rank);
  free(m->nranks);
  free(m->ranks);
  m->old_index = NULL;
  m->first_rank = m->nranks = NULL;
  m->ranks = NULL;
}

int hp_dec_reform(const unsigned char *p, size_t n, struct hp_reform *m) {
  struct hp_rbuf r;
  hp_rbuf_init(&r, p, n);
  memset(m, 0, sizeof *m);
  m->number = hp_get_u32(&r);
  m->host_index = hp_get_u32(&r);
  m->nhosts = hp_get_u32(&r);
  m->size = (int32_t)hp_get_u32(&r);
  /* each host takes 12 bytes: a count the payload cannot hold is a lie */
  if (r.err || m->nhosts == 0 || m->nhosts > HP_MAX_HOSTS ||
      m->nhosts > n / 12 || m->host_index >= m->nhosts || m->size <= 0 ||
      m->number == 0)
    return HORA_EPROTO;
  m->old_index = calloc(m->nhosts, sizeof *m->old_index);
  m->first_rank = calloc(m->nhosts, sizeof *m->first_rank);
  m->nranks = calloc(m->nhosts, sizeof *m->nranks);
  if (!m->old_index || !m->first_rank || !m->nranks) {
    hp_reform_free(m);
    return HORA_ENOMEM;
  }
  int64_t next = 0;
  for (uint32_t i = 0; i < m->nhosts; i++) {
    m->old_index[i] = hp_get_u32(&r);
    m->first_rank[i] = (int32_t)hp_get_u32(&r);
    m->nranks[i] = (int32_t)hp_get_u32(&r);
    if ((i > 0 && m->old_index[i] <= m->old_index[i - 1]) ||
        m->first_rank[i] != next || m->nranks[i] <= 0)
      r.err = HORA_EPROTO;
    next += m->nranks[i] > 0 ? m->nranks[i] : 0;
  }
  if (!r.err && next != m->size) r.err = HORA_EPROTO;
  m->nlocal = hp_get_u32(&r);
  if (!r.err && m->nlocal != (uint32_t)m->nranks[m->host_index])
    r.err = HORA_EPROTO;
  if (!r.err) {
    m->ranks = calloc(m->nlocal, sizeof *m->ranks);
    if (!m->ranks) {
      hp_reform_free(m);
      return HORA_ENOMEM;
    }
  }
  for (uint32_t i = 0; !r.err && i < m->nlocal; i++) {
    struct hp_job_rank *k = &m->ranks[i];
    get_job_rank(&r, k);
    if (k->rank != m->first_rank[m->host_index] + (int32_t)i ||
        k->local_rank != (int32_t)i || k->cross_size <= 0 ||
        k->cross_size > (int32_t)m->nhosts || k->cross_rank < 0 ||
        k->cross_rank >= k->cross_size)
      r.err = HORA_EPROTO;
  }
  get_fixed_str(&r, m->why, sizeof m->why);
  int rc = finish(&r);
  if (rc < 0) hp_reform_free(m);
  return rc;
}

void hp_enc_session(struct hp_wbuf *w, const struct hp_session *m) {
  hp_frame_begin(w, HP_MSG_SESSION, 0);
  hp_put_u32(w, m->number);
  hp_put_u32(w, m->phase);
  hp_put_u32(w, m->session);
  hp_frame_end(w);
}

void hp_enc_lateness(struct hp_wbuf *w, const struct hp_late_rank *v,
                     uint32_t n) {
  hp_frame_begin(w, HP_MSG_LATENESS, 0);
  hp_put_u32(w, n);
  for (uint32_t i = 0; i < n; i++) {
    uint32_t nb = 0;
    for (unsigned b = 0; b < 512; b++) nb += v[i].hist[b] != 0;
    hp_put_u32(w, (uint32_t)v[i].rank);
    hp_put_u64(w, v[i].ops);
    hp_put_u64(w, v[i].last);
    hp_put_u32(w, nb);
    for (unsigned b = 0; b < 512; b++) {
      if (!v[i].hist[b]) continue;
      hp_put_u16(w, (uint16_t)b);
      hp_put_u64(w, v[i].hist[b]);
    }
  }
  hp_frame_end(w);
}

int hp_dec_lateness(const unsigned char *p, size_t n,
                    struct hp_late_rank **out, uint32_t *count) {
  struct hp_rbuf r;
  hp_rbuf_init(&r, p, n);
  *out = NULL;
  *count = 0;
  uint32_t k = hp_get_u32(&r);
  /* every entry takes at least 24 bytes */
  if (r.err || k > HP_LATE_MAX || k > n / 24) return HORA_EPROTO;
  struct hp_late_rank *v = k ? calloc(k, sizeof *v) : NULL;
  if (k && !v) return HORA_ENOMEM;
  int bad = 0;
  for (uint32_t i = 0; i < k && !r.err && !bad; i++) {
    v[i].rank = (int32_t)hp_get_u32(&r);
    v[i].ops = hp_get_u64(&r);
    v[i].last = hp_get_u64(&r);
    uint32_t nb = hp_get_u32(&r);
    uint64_t sum = 0;
    int prev = -1;
    bad = v[i].rank < 0 || v[i].last > v[i].ops || nb > 512;
    for (uint32_t j = 0; j < nb && !r.err && !bad; j++) {
      int b = hp_get_u16(&r);
      uint64_t c = hp_get_u64(&r);
      bad = b <= prev || b >= 512 || !c || sum + c < sum;
      if (bad) break;
      v[i].hist[b] = c;
      sum += c;
      prev = b;
    }
    bad |= !r.err && sum != v[i].ops;
  }
  int rc = finish(&r);
  if (rc == 0 && bad) rc = HORA_EPROTO;
  if (rc < 0) {
    free(v);
    return rc;
  }
  *out = v;
  *count = k;
  return 0;
}

int hp_dec_session(const unsigned char *p, size_t n, struct hp_session *m) {
  struct hp_rbuf r;
  hp_rbuf_init(&r, p, n);
  m->number = hp_get_u32(&r);
  m->phase = hp_get_u32(&r);
  m->session = hp_get_u32(&r);
  int rc = finish(&r);
  if (rc == 0 && m->phase != HP_SESSION_BACK &&
      m->phase != HP_SESSION_START && m->phase != HP_SESSION_FENCE)
    rc = HORA_EPROTO;
  return rc;
}
