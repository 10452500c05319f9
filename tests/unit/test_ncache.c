/* test_ncache.c -- the response cache (daemon/ncache.c) and its wire form
 * (proto/msg.c): a sender's dictionary and a receiver's, fed the same
 * frames in order, agree on every name and its metadata through random
 * traffic (names that come back, metadata that changes, a dictionary far
 * too small, so numbers are reused all the time); the first mention is
 * whole (SET), a repeat is a number (USE), changed metadata renumbers;
 * numbers a receiver never learnt are refused; NEGO_READY, NEGO_DECIDE
 * and NEGO_PLAN carry numbered entries both ways and are smaller for it;
 * a numbered entry with a failure, or a cref out of range, is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "msg.h"
#include "testlib.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng % n);
}

static struct hd_meta key_of(uint32_t count, int dtype) {
  struct hd_meta k;
  memset(&k, 0, sizeof k);
  k.coll = HORA_COLL_ALLREDUCE;
  k.dtype = (uint8_t)dtype;
  k.op = HORA_SUM;
  k.count = count;
  k.prescale = k.postscale = 1.0;
  return k;
}

static void test_sync(void) {
  for (uint32_t cap = 1; cap <= 64; cap *= 4) {
    struct hd_ncache tx, rx;
    memset(&tx, 0, sizeof tx);
    memset(&rx, 0, sizeof rx);
    int uses = 0, sets = 0;
    for (int i = 0; i < 5000; i++) {
      char name[32], got[HP_NAME_MAX + 1];
      snprintf(name, sizeof name, "grad.%u", rnd(24));
      uint32_t count = 64 + (rnd(10) ? 0 : rnd(3)); /* mostly the same */
      struct hd_meta k = key_of(count, HORA_FLOAT32), r;
      uint32_t cid = 0;
      int cref = hd_nc_encode(&tx, cap, name, &k, &cid);
      CHECK(cref == HP_CREF_SET || cref == HP_CREF_USE);
      CHECK(cid < cap);
      /* what the wire carries: all of it for a SET, the number for a USE */
      memset(&r, 0, sizeof r);
      got[0] = '\0';
      if (cref == HP_CREF_SET) {
        r = k;
        snprintf(got, sizeof got, "%s", name);
        sets++;
      } else {
        uses++;
      }
      CHECK_EQ_INT(hd_nc_decode(&rx, cap, cref, cid, got, sizeof got, &r), 0);
      CHECK_EQ_STR(got, name);
      CHECK(!memcmp(&r, &k, sizeof r));
    }
    CHECK(sets > 0);
    if (cap == 64) CHECK(uses > 4 * sets); /* 24 names fit, sizes change */
    hd_nc_free(&tx);
    hd_nc_free(&rx);
  }
}

static void test_numbers(void) {
  struct hd_ncache tx, rx;
  memset(&tx, 0, sizeof tx);
  memset(&rx, 0, sizeof rx);
  struct hd_meta a = key_of(8, HORA_FLOAT32), b = key_of(9, HORA_FLOAT32);
  uint32_t c1, c2, c3;
  CHECK_EQ_INT(hd_nc_encode(&tx, 4, "x", &a, &c1), HP_CREF_SET);
  CHECK_EQ_INT(hd_nc_encode(&tx, 4, "x", &a, &c2), HP_CREF_USE);
  CHECK_EQ_INT(c1, c2);
  CHECK_EQ_INT(hd_nc_encode(&tx, 4, "x", &b, &c3), HP_CREF_SET);
  CHECK_EQ_INT(c3, c1); /* renumbered in place */
  CHECK_EQ_INT(hd_nc_encode(&tx, 0, "y", &a, &c1), HP_CREF_NONE);
  /* a receiver refuses what it cannot have */
  char name[HP_NAME_MAX + 1] = "";
  struct hd_meta k;
  CHECK(hd_nc_decode(&rx, 4, HP_CREF_USE, 0, name, sizeof name, &k) < 0);
  CHECK(hd_nc_decode(&rx, 4, HP_CREF_SET, 4, name, sizeof name, &k) < 0);
  CHECK(hd_nc_decode(&rx, 4, HP_CREF_USE, 1u << 31, name, sizeof name,
                     &k) < 0);
  CHECK_EQ_INT(hd_nc_decode(&rx, 4, HP_CREF_NONE, 99, name, sizeof name, &k),
               0);
  hd_nc_free(&tx);
  hd_nc_free(&rx);
}

static const unsigned char *frame(struct hp_wbuf *w, size_t *n) {
  *n = w->len - HP_FRAME_HDR;
  return w->data + HP_FRAME_HDR;
}

static void test_wire(void) {
  struct hp_wbuf w;
  hp_wbuf_init(&w);
  struct hp_nego_ready m, o;
  memset(&m, 0, sizeof m);
  m.comm = 3;
  snprintf(m.name, sizeof m.name, "a.rather.long.gradient.name.weight");
  m.coll = HORA_COLL_ALLREDUCE;
  m.dtype = HORA_FLOAT32;
  m.count = 1000;
  m.prescale = m.postscale = 1;
  m.rank = 5;
  m.flags = HP_NR_RESIDENT;
  m.priority = -3;
  size_t n, whole, byno;
  m.cref = HP_CREF_SET;
  m.cid = 17;
  hp_enc_nego_ready(&w, &m);
  whole = w.len;
  const unsigned char *p = frame(&w, &n);
  CHECK_EQ_INT(hp_dec_nego_ready(p, n, &o), 0);
  CHECK(o.cref == HP_CREF_SET && o.cid == 17 && !strcmp(o.name, m.name) &&
        o.count == 1000 && o.rank == 5);
  hp_wbuf_reset(&w);
  m.cref = HP_CREF_USE;
  hp_enc_nego_ready(&w, &m);
  byno = w.len;
  p = frame(&w, &n);
  CHECK_EQ_INT(hp_dec_nego_ready(p, n, &o), 0);
  CHECK(o.cref == HP_CREF_USE && o.cid == 17 && o.name[0] == '\0' &&
        o.count == 0 && o.rank == 5 && o.flags == HP_NR_RESIDENT &&
        o.priority == -3);
  CHECK(byno * 4 < whole);
  /* a failure is never numbered; a cref past USE is refused */
  hp_wbuf_reset(&w);
  m.cref = HP_CREF_SET;
  m.status = HORA_EMISMATCH;
  snprintf(m.msg, sizeof m.msg, "they differ");
  hp_enc_nego_ready(&w, &m);
  p = frame(&w, &n);
  CHECK(hp_dec_nego_ready(p, n, &o) < 0);
  hp_wbuf_reset(&w);
  m.cref = 3;
  m.status = 0;
  m.msg[0] = '\0';
  hp_enc_nego_ready(&w, &m);
  p = frame(&w, &n);
  CHECK(hp_dec_nego_ready(p, n, &o) < 0);

  /* decisions, alone and in a plan: numbered entries are small */
  struct hp_nego_decide v[3], *out = NULL, d;
  memset(v, 0, sizeof v);
  for (int i = 0; i < 3; i++) {
    v[i].comm = 3;
    v[i].seq = 40 + (uint64_t)i;
    snprintf(v[i].name, sizeof v[i].name, "layer.%d.bias", i);
    v[i].meta = m;
    v[i].meta.cref = 0;
    v[i].cref = i == 0 ? HP_CREF_SET : HP_CREF_USE;
    v[i].cid = (uint32_t)i;
    v[i].fuse = i > 0;
  }
  hp_wbuf_reset(&w);
  hp_enc_nego_plan(&w, v, 3);
  p = frame(&w, &n);
  uint32_t k = 0;
  CHECK_EQ_INT(hp_dec_nego_plan(p, n, &out, &k), 0);
  CHECK_EQ_INT(k, 3);
  for (uint32_t i = 0; out && i < 3; i++) {
    CHECK(out[i].cref == v[i].cref && out[i].cid == v[i].cid &&
          out[i].seq == v[i].seq && out[i].fuse == v[i].fuse);
    CHECK(i == 0 ? !strcmp(out[i].name, v[0].name) : !out[i].name[0]);
    CHECK(out[i].meta.flags == HP_NR_RESIDENT && out[i].meta.priority == -3);
  }
  free(out);
  hp_wbuf_reset(&w);
  hp_enc_nego_decide(&w, &v[1]); /* a lone USE, not fused */
  p = frame(&w, &n);
  CHECK(hp_dec_nego_decide(p, n, &d) < 0); /* fused alone: refused */
  v[1].fuse = 0;
  hp_wbuf_reset(&w);
  hp_enc_nego_decide(&w, &v[1]);
  p = frame(&w, &n);
  CHECK_EQ_INT(hp_dec_nego_decide(p, n, &d), 0);
  CHECK(d.cref == HP_CREF_USE && d.cid == 1 && d.seq == 41);
  CHECK(w.len < 64);
  hp_wbuf_free(&w);
}

int main(void) {
  RUN(test_sync);
  RUN(test_numbers);
  RUN(test_wire);
  TL_EXIT();
}
