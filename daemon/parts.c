/* parts.c -- what an operation's parts (one per local member) hold, as
 * the CPU engine and the cross-host algorithms both need it: where each
 * member's input and output lie, who needs its data streamed, the neutral
 * input of a joined member, scale factors, and the staging chunks. */
#define HC_LOG_SUB HC_SUB_ENGINE
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "half.h"
#include "reduce.h"

/* ---- where the data are ------------------------------------------------- */

int hd_is_root(struct hd_tensor *t, int i) {
  return t->meta.coll == HORA_COLL_BROADCAST &&
         hd_comm_rank(t->comm, i) == t->meta.root;
}
int hd_needs_in(struct hd_tensor *t, int i) {
  return !t->part[i].resident && !t->part[i].joined &&
         (t->meta.coll == HORA_COLL_ALLREDUCE || hd_is_root(t, i));
}
int hd_needs_out(struct hd_tensor *t, int i) {
  return !t->part[i].resident && !t->part[i].joined && !hd_is_root(t, i);
}

unsigned char *hd_in_ptr(struct hd_tensor *t, int i) {
  if (t->own) return t->own[2 * i]; /* a fused run's (exchange.c) */
  return hd_comm_local(t->comm, i)->shm + t->part[i].offset;
}

unsigned char *hd_out_ptr(struct hd_tensor *t, int i) {
  if (t->own) return t->own[2 * i + 1];
  return hd_comm_local(t->comm, i)->shm + t->part[i].recv_offset;
}

/* The identity of the reduction, or zeros. */
void *hd_neutral(struct hd_tensor *t, uint64_t count) {
  if (t->neutral) return t->neutral;
  uint64_t es = hora_dtype_size(t->meta.dtype);
  unsigned char *p = calloc(count ? count : 1, es);
  if (!p) return NULL;
  int op = t->meta.op;
  int red = t->meta.coll == HORA_COLL_ALLREDUCE ||
            t->meta.coll == HORA_COLL_REDUCESCATTER;
  if (red && (op == HORA_PRODUCT || op == HORA_MIN || op == HORA_MAX)) {
    unsigned char one[8];
    memset(one, 0, sizeof one);
    int dt = t->meta.dtype;
    switch (dt) {
    case HORA_UINT8: one[0] = op == HORA_PRODUCT ? 1 : op == HORA_MIN ? 0xff : 0; break;
    case HORA_INT8: one[0] = op == HORA_PRODUCT ? 1 : op == HORA_MIN ? 0x7f : 0x80; break;
    case HORA_INT16: { int16_t v = op == HORA_PRODUCT ? 1 : op == HORA_MIN ? INT16_MAX : INT16_MIN; memcpy(one, &v, 2); break; }
    case HORA_INT32: { int32_t v = op == HORA_PRODUCT ? 1 : op == HORA_MIN ? INT32_MAX : INT32_MIN; memcpy(one, &v, 4); break; }
    case HORA_INT64: { int64_t v = op == HORA_PRODUCT ? 1 : op == HORA_MIN ? INT64_MAX : INT64_MIN; memcpy(one, &v, 8); break; }
    case HORA_FLOAT16: { uint16_t v = op == HORA_PRODUCT ? 0x3c00 : op == HORA_MIN ? 0x7c00 : 0xfc00; memcpy(one, &v, 2); break; }
    case HORA_BFLOAT16: { uint16_t v = op == HORA_PRODUCT ? 0x3f80 : op == HORA_MIN ? 0x7f80 : 0xff80; memcpy(one, &v, 2); break; }
    case HORA_FLOAT32: { float v = op == HORA_PRODUCT ? 1.0f : op == HORA_MIN ? __builtin_inff() : -__builtin_inff(); memcpy(one, &v, 4); break; }
    default: { double v = op == HORA_PRODUCT ? 1.0 : op == HORA_MIN ? __builtin_inf() : -__builtin_inf(); memcpy(one, &v, 8); break; }
    }
    for (uint64_t i = 0; i < count; i++) memcpy(p + i * es, one, es);
  }
  return t->neutral = p;
}

void hd_scale_buf(const struct hd_tensor *t, void *p, uint64_t count,
                  int pre) {
  double f = pre ? t->meta.prescale : t->meta.postscale;
  if (f != 1.0) hc_scale(p, count, t->meta.dtype, f);
}

uint64_t hd_chunk_count(struct hd_tensor *t, uint64_t k) {
  uint64_t lo = k * t->chunk_elems;
  return HC_MIN(t->chunk_elems, t->meta.count - lo);
}

uint64_t hd_staging_off(struct hd_rank *r, uint64_t k) {
  return r->layout.staging_off + (k & 1) * r->layout.chunk_size;
}

void hd_copy_req(struct hd_rank *r, struct hd_tensor *t, int kind,
                 uint64_t k) {
  struct hp_cqe e;
  memset(&e, 0, offsetof(struct hp_cqe, msg));
  e.id = t->part[t->comm->part_of[r->idx]].id;
  e.kind = (uint32_t)kind;
  e.chunk = k;
  e.elem_off = k * t->chunk_elems;
  e.elem_count = hd_chunk_count(t, k);
  e.staging_off = hd_staging_off(r, k);
  e.msg[0] = '\0';
  hd_push_cqe(r, &e);
}


int hd_a2a_in_place(const struct hd_tensor *t, int i) {
  const struct hd_part *p = &t->part[i];
  int size = t->comm->size;
  if (p->joined || p->offset != p->recv_offset) return 0;
  for (int m = 0; m < size; m++)
    if (p->aux[m] != p->aux[size + m]) return 0;
  return 1;
}
