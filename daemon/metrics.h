/* metrics.h -- what horad counts of a job's operations, served in
 * Prometheus' text format at /metrics (metrics.c), and how late each rank
 * submits (reported to horarun at the end of the job). The layers call
 * these hooks; none of them fails or blocks. A job without metrics (a
 * test's job never given to hd_metrics_job) makes every hook a no-op. */
#ifndef HORA_DAEMON_METRICS_H
#define HORA_DAEMON_METRICS_H

#include "daemon.h"

/* The job's knobs are parsed: sets up its counters, and serves /metrics
 * on its metrics_port unless the daemon serves that port already.
 * 0, or -1 (reported: the port cannot be had). */
int hd_metrics_job(struct hd_job *job);
void hd_metrics_free(struct hd_job *job);

/* horad --metrics-port: serves /metrics (every job of dm) on port, on
 * every address. 0, or -1 (reported). */
int hd_metrics_listen(struct hd_daemon *dm, int port);
/* Closes every listener and connection (the loop can end). */
void hd_metrics_close(struct hd_daemon *dm);

/* negotiate.c: local member i submitted t; t is ready here (every local
 * member has it); t goes to its engine (decided); t completed with
 * status (< 0: failed) */
void hd_metrics_submit(struct hd_tensor *t, int i);
/* a submission whose input or output lies in the rank's adopted memory */
struct hp_shm_hdr;
struct hp_sqe;
void hd_metrics_adopted(struct hd_job *job, const struct hp_shm_hdr *layout,
                        const struct hp_sqe *e);
void hd_metrics_ready(struct hd_comm *c, struct hd_tensor *t);
void hd_metrics_queued(struct hd_comm *c, struct hd_tensor *t);
void hd_metrics_done(struct hd_tensor *t, int status);
/* The arrival offsets of t's local members for its NEGO_READY (m->arrive,
 * m->narrive): a buffer to free after encoding (NULL: none). */
unsigned char *hd_metrics_arrivals(struct hd_comm *c, struct hd_tensor *t,
                                   struct hp_nego_ready *m);

/* coord.c: host (c->hosts[host]) said ready for m->name, now; the
 * coordinator decided (ran = 1: it runs) on it; c's coordinator is freed */
void hd_metrics_coord_ready(struct hd_comm *c, int host,
                            const struct hp_nego_ready *m);
void hd_metrics_coord_decided(struct hd_comm *c, const char *name, int ran);
void hd_metrics_coord_forget(struct hd_comm *c);
/* A READY held for a set not added yet (m: the held copy): its offsets
 * are kept as arrival times (a buffer to free; m's own cleared, they
 * point into the frame); hd_metrics_unhold() turns them back into
 * offsets from now, for m to be replayed. */
unsigned char *hd_metrics_hold(struct hp_nego_ready *m);
void hd_metrics_unhold(struct hp_nego_ready *m, unsigned char *kept);

/* A stall warning (fail 0) or a stalled operation failed (fail 1); a
 * deadlock found. */
void hd_metrics_stall(struct hd_job *job, int fail);
void hd_metrics_deadlock(struct hd_job *job);
/* The CPU engine ran n tensors fused as one collective. */
void hd_metrics_fused(struct hd_job *job, int n);
/* Bytes of negotiation (NEGO_READY, NEGO_DECIDE, NEGO_PLAN) sent to
 * another host. */
void hd_metrics_nego_sent(struct hd_job *job, size_t bytes);
/* Of such frames, bytes of small allreduces' parts and results (not
 * counted as negotiation). */
void hd_metrics_star_sent(struct hd_job *job, size_t bytes);

/* report.c, before DONE: the ranks' lateness, for horarun (LATENESS). */
void hd_metrics_report(struct hd_job *job);

/* ---- for the tests ---- */
/* What an HTTP request in buf[0..len) asks, as far as it came: 0 while
 * more bytes are needed, else the status to answer -- 200 (GET or HEAD
 * of /metrics; *head set for HEAD), 400 (not HTTP), 404, 405 (another
 * method), 431 (no end of its header within max bytes), 505 (another
 * HTTP version). */
int hd_http_request(const char *buf, size_t len, size_t max, int *head);
/* Renders every job of dm in Prometheus' text format (malloc'd, *len
 * bytes, NUL-terminated); NULL when out of memory. */
char *hd_metrics_render(struct hd_daemon *dm, size_t *len);

#endif
