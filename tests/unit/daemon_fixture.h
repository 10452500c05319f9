/* daemon_fixture.h -- a horad without processes, for unit tests of its
 * logic: a struct hd_job for host `me` of a job laid out over hosts,
 * its local ranks with shared-memory segments the test allocates (the
 * rings attached as local.c attaches them), and the global set. The test
 * plays the ranks: it builds submission entries, hands them to
 * hd_submit(), and reads the completions back from each rank's cq ring.
 * The mesh has no connections (peers[].c == NULL): what the daemon sends
 * to other hosts is dropped. */
#ifndef HORA_DAEMON_FIXTURE_H
#define HORA_DAEMON_FIXTURE_H

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "testlib.h"

#define FX_MAX_HOSTS 8
#define FX_MAX_LOCAL 8
#define FX_ARENA (1u << 20)
#define FX_CHUNK 4096u /* one page: streamed tensors take several chunks */

struct fx {
  struct hd_daemon daemon;
  struct hd_job job;
  struct hp_job_host hosts[FX_MAX_HOSTS];
  char hostnames[FX_MAX_HOSTS][16];
  struct hd_rank ranks[FX_MAX_LOCAL];
  struct hp_ring_cursor cq[FX_MAX_LOCAL]; /* the ranks' side of cq */
  struct hp_ring_cursor sq[FX_MAX_LOCAL]; /* the ranks' side of sq */
};

/* A job of nhosts hosts with per_host[k] ranks each (consecutive), seen
 * from host `me`. */
static inline void fx_init(struct fx *f, int nhosts, const int *per_host,
                           int me) {
  memset(f, 0, sizeof *f);
  struct hd_job *job = &f->job;
  snprintf(f->daemon.hostname, sizeof f->daemon.hostname, "h%d", me);
  job->daemon = &f->daemon;
  hc_knobs_init(&job->knobs);
  int first = 0, size = 0;
  for (int h = 0; h < nhosts; h++) {
    snprintf(f->hostnames[h], sizeof f->hostnames[h], "h%d", h);
    f->hosts[h].name = f->hostnames[h];
    f->hosts[h].addr = f->hostnames[h];
    f->hosts[h].first_rank = size;
    f->hosts[h].nranks = per_host[h];
    if (h == me) first = size;
    size += per_host[h];
  }
  job->desc.size = size;
  job->desc.local_size = per_host[me];
  job->desc.nlocal = (uint32_t)per_host[me];
  job->desc.host_index = (uint32_t)me;
  job->desc.nhosts = (uint32_t)nhosts;
  job->desc.hosts = f->hosts;
  job->multi = nhosts > 1;
  job->nlocal = per_host[me];
  job->ranks = f->ranks;
  job->gone_rank = -1;
  job->max_pending = 64;
  job->link = &hd_link_tcp; /* peers without connections: sends are dropped */
  job->up = &hd_job_upcalls;
  job->engines = hd_engines;
  job->efd = -1;
  job->chunk_size = FX_CHUNK;
  job->arena_size = FX_ARENA;
  if (nhosts > 1) job->peers = calloc((size_t)nhosts, sizeof *job->peers);
  for (int i = 0; i < job->nlocal; i++) {
    struct hd_rank *r = &f->ranks[i];
    struct hp_shm_hdr layout;
    memset(&layout, 0, sizeof layout);
    uint64_t sz = hp_shm_layout(&layout, job->chunk_size, job->arena_size, 0);
    r->job = job;
    r->idx = i;
    r->info.rank = first + i;
    r->info.local_rank = i;
    r->info.cross_rank = me;
    r->info.cross_size = nhosts;
    r->memfd = -1;
    r->shm = aligned_alloc(4096, (size_t)sz);
    if (!r->shm) abort();
    memset(r->shm, 0, (size_t)sz);
    r->shm_size = sz;
    r->hdr = (struct hp_shm_hdr *)r->shm;
    memcpy(r->hdr, &layout, sizeof layout);
    r->layout = layout;
    hp_ring_init(&r->hdr->sq);
    hp_ring_init(&r->hdr->cq);
    hp_ring_attach(&r->sq, &r->hdr->sq, r->shm + layout.sq_slots_off,
                   layout.sq_slots, layout.sqe_size, 0);
    hp_ring_attach(&r->cq, &r->hdr->cq, r->shm + layout.cq_slots_off,
                   layout.cq_slots, layout.cqe_size, 1);
    hp_ring_attach(&f->cq[i], &r->hdr->cq, r->shm + layout.cq_slots_off,
                   layout.cq_slots, layout.cqe_size, 0);
    hp_ring_attach(&f->sq[i], &r->hdr->sq, r->shm + layout.sq_slots_off,
                   layout.sq_slots, layout.sqe_size, 1);
    r->connected = 1;
  }
  if (hd_comms_init(job) < 0) abort();
}

/* One host of n ranks. */
static inline void fx_init1(struct fx *f, int n) {
  int per[1] = {n};
  fx_init(f, 1, per, 0);
}

static inline void fx_free(struct fx *f) {
  struct hd_job *job = &f->job;
  hd_comms_free(job);
  for (int i = 0; i < job->nlocal; i++) {
    free(f->ranks[i].shm);
    free(f->ranks[i].backlog);
  }
  free(job->peers);
  hc_knobs_free(&job->knobs); /* what a test set in them */
}

static inline struct hd_rank *fx_rank(struct fx *f, int i) {
  return &f->ranks[i];
}

/* Pointer to byte `off` of rank i's arena, and its segment offset. */
static inline void *fx_arena(struct fx *f, int i, uint64_t off) {
  return f->ranks[i].shm + f->ranks[i].layout.arena_off + off;
}
static inline uint64_t fx_aoff(struct fx *f, int i, uint64_t off) {
  return f->ranks[i].layout.arena_off + off;
}

/* A submission: the rest zero (1-D, resident nowhere, global set). */
static inline struct hp_sqe fx_sqe(uint64_t id, int coll, int dtype, int op,
                                   uint64_t count, const char *name) {
  struct hp_sqe e;
  memset(&e, 0, sizeof e);
  e.id = id;
  e.kind = HP_SQ_SUBMIT;
  e.coll = (uint8_t)coll;
  e.dtype = (uint8_t)dtype;
  e.op = (uint8_t)op;
  e.count = count;
  e.prescale = e.postscale = 1.0;
  snprintf(e.name, sizeof e.name, "%s", name);
  e.name_len = (uint16_t)strlen(e.name);
  return e;
}

/* Its input lies at arena byte `off` of rank i. */
static inline void fx_in(struct fx *f, int i, struct hp_sqe *e, uint64_t off) {
  e->flags |= HP_F_RESIDENT;
  e->offset = fx_aoff(f, i, off);
}

/* Its output (recv_count elements) lies at arena byte `off`. */
static inline void fx_out(struct fx *f, int i, struct hp_sqe *e, uint64_t off,
                          uint64_t recv_count) {
  e->flags |= HP_F_RECV;
  e->recv_offset = fx_aoff(f, i, off);
  e->recv_count = recv_count;
}

/* Its array (n values) is written at arena byte `off`. */
static inline void fx_aux(struct fx *f, int i, struct hp_sqe *e, uint64_t off,
                          const int64_t *v, uint64_t n) {
  memcpy(fx_arena(f, i, off), v, (size_t)n * 8);
  e->flags |= HP_F_AUX;
  e->aux_offset = fx_aoff(f, i, off);
  e->aux_count = n;
}

static inline void fx_shape(struct hp_sqe *e, int ndims, const int64_t *shape) {
  e->ndims = (uint8_t)ndims;
  for (int k = 0; k < ndims; k++)
    e->shape[k] = shape[k];
}

/* Runs what is ready, again while an operation has pieces left
 * (job->resume: the loop's next polls of the rings would). */
static inline void fx_run(struct fx *f) {
  do
    hd_run_ready(&f->job);
  while (f->job.resume);
}

/* What rings.c does with one entry: hd_submit, then run what is ready. */
static inline void fx_submit(struct fx *f, int i, const struct hp_sqe *e) {
  hd_submit(&f->ranks[i], e);
  fx_run(f);
  hd_flush_wakeups(&f->job);
}

/* The next completion of rank i, or 0 when there is none. */
static inline int fx_pop(struct fx *f, int i, struct hp_cqe *out) {
  const void *p = hp_ring_peek(&f->cq[i]);
  if (!p) return 0;
  memcpy(out, p, sizeof *out);
  hp_ring_release(&f->cq[i]);
  return 1;
}

/* Expects rank i's next completion to be DONE for `id` with `status`, its
 * message holding each of the NULL-terminated strings. Returns the
 * message (static buffer) for further checks. */
static inline const char *fx_expect_done_at(const char *file, int line,
                                            struct fx *f, int i, uint64_t id,
                                            int status, ...) {
  static char msg[HP_MSG_MAX + 1];
  struct hp_cqe e;
  tl_checks++;
  msg[0] = '\0';
  if (!fx_pop(f, i, &e)) {
    tl_failures++;
    fprintf(stderr, "%s:%d: rank %d: no completion (expected id %llu, %s)\n",
            file, line, fx_rank(f, i)->info.rank, (unsigned long long)id,
            hora_err_name(status));
    return msg;
  }
  memcpy(msg, e.msg, sizeof msg);
  msg[HP_MSG_MAX] = '\0';
  if (e.kind != HP_CQ_DONE || e.id != id || e.status != status) {
    tl_failures++;
    fprintf(stderr,
            "%s:%d: rank %d: got kind %u id %llu status %d (%s) "
            "\"%s\", expected DONE id %llu status %d (%s)\n",
            file, line, fx_rank(f, i)->info.rank, e.kind,
            (unsigned long long)e.id, e.status,
            e.status < 0 ? hora_err_name(e.status) : "value", msg,
            (unsigned long long)id, status,
            status < 0 ? hora_err_name(status) : "value");
    return msg;
  }
  if (e.msg_len != strlen(msg)) {
    tl_failures++;
    fprintf(stderr, "%s:%d: msg_len %u for a message of %zu bytes\n", file,
            line, e.msg_len, strlen(msg));
  }
  va_list ap;
  va_start(ap, status);
  const char *want;
  while ((want = va_arg(ap, const char *))) {
    tl_checks++;
    if (!strstr(msg, want)) {
      tl_failures++;
      fprintf(stderr, "%s:%d: rank %d: message \"%s\" lacks \"%s\"\n", file,
              line, fx_rank(f, i)->info.rank, msg, want);
    }
  }
  va_end(ap);
  return msg;
}
#define EXPECT_DONE(f, i, id, status)                                          \
  fx_expect_done_at(__FILE__, __LINE__, f, i, id, status, (const char *)NULL)
#define EXPECT_MSG(f, i, id, status, ...)                                      \
  fx_expect_done_at(__FILE__, __LINE__, f, i, id, status, __VA_ARGS__,         \
                    (const char *)NULL)

/* Expects no completion on rank i. */
#define EXPECT_NONE(f, i)                                                      \
  do {                                                                         \
    struct hp_cqe fx_e_;                                                       \
    tl_checks++;                                                               \
    if (fx_pop(f, i, &fx_e_))                                                  \
      TL_FAIL("rank %d: unexpected completion id %llu kind %u status %d "      \
              "\"%s\"",                                                        \
              fx_rank(f, i)->info.rank, (unsigned long long)fx_e_.id,          \
              fx_e_.kind, fx_e_.status, fx_e_.msg);                            \
  } while (0)

/* The operation of that name on communicator c, or NULL. */
static inline struct hd_tensor *fx_find(struct hd_comm *c, const char *name) {
  for (size_t i = 0; i < c->table_size; i++)
    for (struct hd_tensor *t = c->table[i]; t; t = t->next_hash)
      if (!strcmp(t->name, name)) return t;
  return NULL;
}


/* Operations of local rank idx the daemon still holds (submitted, not
 * completed), over every communicator. */
static inline int fx_pending(struct hd_job *job, int idx) {
  int n = 0;
  for (uint32_t k = 0; k < job->ncomms; k++) {
    struct hd_comm *c = job->comms[k];
    if (!c || c->part_of[idx] < 0) continue;
    for (size_t b = 0; b < c->table_size; b++)
      for (struct hd_tensor *t = c->table[b]; t; t = t->next_hash)
        n += t->part[c->part_of[idx]].submitted;
  }
  return n;
}

#endif
