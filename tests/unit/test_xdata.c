/* test_xdata.c -- XDATA frames (allgather, alltoall and reducescatter data
 * across hosts, xhost/exchange.c) from an authenticated peer, handed to
 * hd_xcoll_data() as the mesh does. The daemon under test is host 0 of a
 * 2-host job (2 ranks per host): it runs an allgather decided by its own
 * coordinator and waits for host 1's data. A frame that is malformed,
 * names a set or decision it has no business with, or lies outside what
 * the operation expects from that host (out of order, beyond its bounds,
 * not in whole elements) is refused with a message saying what and where
 * (the mesh then drops the link, naming the host), and the daemon neither
 * crashes nor writes outside the operation's buffers; good frames
 * complete it. Data for a decision not started yet wait and are checked
 * when it starts: bad ones fail it on every local rank, with the message. */
#include "daemon_fixture.h"

static uint64_t next_id = 1;

#define AT(f, i, type, off) ((type *)fx_arena(f, i, off))

/* The payload of an XDATA frame: its header, then n bytes of data (value
 * `fill`), in a malloc'd buffer (the daemon frees it when it keeps it). */
static unsigned char *xdata(uint32_t comm, uint64_t seq, uint64_t offset,
                            size_t n, int fill) {
  unsigned char *p = malloc(HP_FRAME_HDR + HP_XDATA_HDR_LEN + n + 1);
  struct hp_xdata_hdr h = {.comm = comm, .seq = seq, .offset = offset};
  hp_xdata_frame_hdr(p, &h, (uint32_t)n);
  memmove(p, p + HP_FRAME_HDR, HP_XDATA_HDR_LEN);
  memset(p + HP_XDATA_HDR_LEN, fill, n);
  return p;
}

/* Hands one frame to the daemon as the mesh does; returns its answer and
 * the reason in why. Frees the payload unless the daemon kept it. */
static int feed(struct fx *f, int from, unsigned char *p, size_t n,
                char *why, size_t whylen) {
  int keep = 0;
  why[0] = '\0';
  int rc = hd_xcoll_data(&f->job, from, p, HP_XDATA_HDR_LEN + n, NULL, &keep,
                         why, whylen);
  if (!keep) free(p);
  return rc;
}

static void expect_refused(struct fx *f, int from, unsigned char *p, size_t n,
                           const char *want, int line) {
  char why[512];
  int rc = feed(f, from, p, n, why, sizeof why);
  tl_checks++;
  if (rc >= 0 || !strstr(why, want)) {
    tl_failures++;
    fprintf(stderr, "%s:%d: expected a refusal saying \"%s\"; got %d \"%s\"\n",
            __FILE__, line, want, rc, why);
  }
}
#define REFUSED(f, from, p, n, want)                                           \
  expect_refused(f, from, p, n, want, __LINE__)

/* Ranks 0 and 1 submit an allgather of 2 int32 each (4 ranks, 8 in all)
 * and host 1 says ready: it is decided and runs, waiting for host 1's 16
 * bytes. */
static void start_allgather(struct fx *f, const char *name,
                            struct hp_sqe e[2]) {
  const int64_t counts[4] = {2, 2, 2, 2};
  for (int r = 0; r < 2; r++) {
    e[r] = fx_sqe(next_id++, HORA_COLL_ALLGATHER, HORA_INT32, 0, 2, name);
    fx_in(f, r, &e[r], 0);
    fx_out(f, r, &e[r], 64, 8);
    fx_aux(f, r, &e[r], 512, counts, 4);
    AT(f, r, int32_t, 0)[0] = 10 * r;
    AT(f, r, int32_t, 0)[1] = 10 * r + 1;
    for (int k = 0; k < 9; k++)
      AT(f, r, int32_t, 64)[k] = -1; /* the output, and a guard past it */
    fx_submit(f, r, &e[r]);
  }
  struct hd_tensor *t = fx_find(f->job.comms[0], name);
  CHECK(t && t->awaiting);
  struct hp_nego_ready m;
  memset(&m, 0, sizeof m);
  if (t) hd_meta_to_ready(&t->meta, &m);
  snprintf(m.name, sizeof m.name, "%s", name);
  m.rank = 2;
  hd_coord_ready(f->job.comms[0], 1, &m);
  hd_run_ready(&f->job);
  hd_flush_wakeups(&f->job);
}

static void test_bad_frames(void) {
  struct fx f;
  const int per[2] = {2, 2};
  fx_init(&f, 2, per, 0);
  struct hp_sqe e[2];
  start_allgather(&f, "ag", e);
  struct hd_tensor *t = fx_find(f.job.comms[0], "ag");
  CHECK(t && t->queued); /* running, waiting for host 1 */
  char why[512];

  /* malformed: shorter than its header, or no payload at all */
  unsigned char *p = xdata(0, 0, 0, 0, 0);
  int keep = 0;
  tl_checks++;
  if (hd_xcoll_data(&f.job, 1, p, 10, NULL, &keep, why, sizeof why) >= 0 ||
      !strstr(why, "malformed XDATA frame: 10 bytes"))
    TL_FAIL("a 10-byte XDATA: %s", why);
  free(p);
  tl_checks++;
  if (hd_xcoll_data(&f.job, 1, NULL, 0, NULL, &keep, why, sizeof why) >= 0)
    TL_FAIL("an empty XDATA was taken");
  CHECK(!keep);

  /* sets and senders it has no business with */
  REFUSED(&f, 1, xdata(9, 0, 0, 4, 1), 4,
          "XDATA for process set 9, which does not exist here");
  REFUSED(&f, 0, xdata(0, 0, 0, 4, 1), 4, "as if from this host itself");
  const int32_t mine[2] = {0, 1};
  struct hd_comm *s = hd_comm_new(&f.job, mine, 2);
  CHECK(s && s->nhosts == 1);
  REFUSED(&f, 1, xdata(s ? s->id : 1, 0, 0, 4, 1), 4,
          "of which it is not a member");

  /* outside what host 1 has to send for this operation: 16 bytes */
  REFUSED(&f, 1, xdata(0, 0, 8, 4, 1), 4,
          "allgather 'ag' (decision 0): data from host h1 (ranks 2-3) out of "
          "order or beyond the operation's bounds: 4 bytes at offset 8, "
          "expected offset 0 of 16");
  REFUSED(&f, 1, xdata(0, 0, 0, 20, 1), 20,
          "20 bytes at offset 0, expected offset 0 of 16");
  REFUSED(&f, 1, xdata(0, 0, UINT64_MAX - 3, 4, 1), 4,
          "at offset 18446744073709551612");
  EXPECT_NONE(&f, 0);
  for (int r = 0; r < 2; r++) /* nothing was written */
    CHECK_EQ_INT(AT(&f, r, int32_t, 64)[4], -1);

  /* good frames, in order: it completes */
  CHECK_EQ_INT(feed(&f, 1, xdata(0, 0, 0, 8, 0x11), 8, why, sizeof why), 0);
  REFUSED(&f, 1, xdata(0, 0, 0, 8, 0x11), 8, "expected offset 8 of 16");
  CHECK_EQ_INT(feed(&f, 1, xdata(0, 0, 8, 8, 0x22), 8, why, sizeof why), 0);
  for (int r = 0; r < 2; r++) {
    EXPECT_DONE(&f, r, e[r].id, 0);
    CHECK_EQ_INT(AT(&f, r, int32_t, 64)[0], 0);
    CHECK_EQ_INT(AT(&f, r, int32_t, 64)[3], 11);
    CHECK_EQ_INT(AT(&f, r, int32_t, 64)[4], 0x11111111);
    CHECK_EQ_INT(AT(&f, r, int32_t, 64)[7], 0x22222222);
    CHECK_EQ_INT(AT(&f, r, int32_t, 64)[8], -1);
  }
  /* ... and nothing more is taken for it */
  REFUSED(&f, 1, xdata(0, 0, 16, 4, 1), 4,
          "XDATA for decision 0 of process set 0, which has finished");

  /* data for a decision not started here wait; bad ones fail it when it
   * starts, on every local rank, saying what and from where */
  p = xdata(0, 1, 4, 4, 1);
  keep = 0;
  CHECK_EQ_INT(hd_xcoll_data(&f.job, 1, p, HP_XDATA_HDR_LEN + 4, NULL, &keep,
                             why, sizeof why),
               0);
  CHECK(keep); /* the daemon frees it */
  if (!keep) free(p);
  start_allgather(&f, "ag2", e);
  for (int r = 0; r < 2; r++)
    EXPECT_MSG(&f, r, e[r].id, HORA_EPROTO,
               "allgather 'ag2' (decision 1): data from host h1 (ranks 2-3) "
               "out of order or beyond the operation's bounds",
               "4 bytes at offset 4, expected offset 0 of 16");
  fx_free(&f);
}

/* Reducescatter data come in whole elements of what the hosts reduce in. */
static void test_reducescatter_elements(void) {
  struct fx f;
  const int per[2] = {2, 2};
  fx_init(&f, 2, per, 0);
  struct hp_sqe e[2];
  for (int r = 0; r < 2; r++) {
    e[r] = fx_sqe(next_id++, HORA_COLL_REDUCESCATTER, HORA_INT32, HORA_SUM, 8,
                  "rs");
    fx_in(&f, r, &e[r], 0);
    fx_out(&f, r, &e[r], 64, 2);
    for (int k = 0; k < 8; k++)
      AT(&f, r, int32_t, 0)[k] = k;
    fx_submit(&f, r, &e[r]);
  }
  struct hd_tensor *t = fx_find(f.job.comms[0], "rs");
  struct hp_nego_ready m;
  memset(&m, 0, sizeof m);
  if (t) hd_meta_to_ready(&t->meta, &m);
  snprintf(m.name, sizeof m.name, "rs");
  m.rank = 2;
  hd_coord_ready(f.job.comms[0], 1, &m);
  REFUSED(&f, 1, xdata(0, 0, 0, 3, 1), 3,
          "reducescatter 'rs' (decision 0): data not in whole elements of 4 "
          "bytes (3 bytes at offset 0)");
  char why[512];
  int32_t v[4] = {100, 200, 300, 400}; /* host 1's part of this host's rows */
  unsigned char *p = xdata(0, 0, 0, sizeof v, 0);
  memcpy(p + HP_XDATA_HDR_LEN, v, sizeof v);
  CHECK_EQ_INT(feed(&f, 1, p, sizeof v, why, sizeof why), 0);
  for (int r = 0; r < 2; r++) {
    EXPECT_DONE(&f, r, e[r].id, 0);
    /* rows 2r and 2r + 1: 2k from this host's ranks, v[k] from host 1 */
    CHECK_EQ_INT(AT(&f, r, int32_t, 64)[0], 4 * r + v[2 * r]);
    CHECK_EQ_INT(AT(&f, r, int32_t, 64)[1], 4 * r + 2 + v[2 * r + 1]);
  }
  fx_free(&f);
}

int main(void) {
  hc_log_init("test_xdata", HC_FATAL);
  RUN(test_bad_frames);
  RUN(test_reducescatter_elements);
  TL_EXIT();
}
