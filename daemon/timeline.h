/* timeline.h -- Horovod's timeline: a Chrome trace (chrome://tracing,
 * Perfetto) of every operation, written by host 0's horad.
 *
 * One row (a trace "process") per tensor name, one thread in it per host:
 * NEGOTIATE_<COLL> from the host's first submission of the name to the
 * decision, with an instant "X" event per rank as it submits (named by the
 * rank), then <COLL> until the operation completes, holding the
 * activities QUEUE (decided, waiting for its engine) and CPU_<COLL> (the
 * engine runs it), this holding WAIT_FOR_DATA for each time the engine
 * had to wait 200 us or more (for the ranks' chunks of a streamed tensor,
 * for staging another operation holds, or for the other hosts' data on
 * the ring or in an exchange) before it went on, and, for the tensors of
 * a fused run, MEMCPY_IN_FUSION_BUFFER and MEMCPY_OUT_FUSION_BUFFER (their
 * parts reduced into the daemon's buffer, and written back from it).
 * With mark_cycles, CYCLE_START markers show the passes
 * of host 0's loop that took new submissions.
 *
 * The other hosts record their events with their own clock and send them
 * to host 0 in batches (TIMELINE frames); each measures its clock's offset
 * to host 0's by ping exchanges (the sample of the shortest round trip of
 * the last few) and sends the times corrected. A host's batch goes before
 * its next negotiation message to host 0, so whatever a host did before
 * an operation it is ready for is in the file before host 0 decides it.
 * When its ranks have ended, a host's DONE to horarun waits until host 0
 * has its last events, and host 0's until it has every host's (2 s at
 * most): the file of a job that ends well holds everything.
 *
 * The file is a JSON array that parses after every write: each write
 * replaces the closing ']' with the new records and a new ']'. */
#ifndef HORA_DAEMON_TIMELINE_H
#define HORA_DAEMON_TIMELINE_H

#include <stddef.h>
#include <stdint.h>

/* ---- the JSON writer (host 0) -------------------------------------------- */

struct hd_tl_row; /* a tensor's row */

struct hd_tl_writer {
  int fd;
  uint64_t file_len; /* bytes in the file; its last one is ']' */
  char *buf;         /* records not yet written, each starting ",\n" */
  size_t len, cap;
  int err;           /* errno of a failed write or allocation: stopped */
  struct hd_tl_row **rows; /* open addressing, by name */
  size_t nrows, caprows;
  int next_pid;
  /* names the thread of host `tid` in a row (tid < 64), or NULL */
  const char *(*tid_name)(void *arg, int tid, char *buf, size_t n);
  void *tid_arg;
};

/* Creates (truncates) path and writes the array's opening records, with
 * start_time_since_epoch_in_micros. 0, or -errno (why says so). */
int hd_tlw_open(struct hd_tl_writer *w, const char *path, int64_t epoch_us,
                char *why, size_t whylen);
/* A record of tensor `tensor` on thread tid: ph 'B' (name begins), 'E'
 * (the innermost ends; args: JSON members or NULL), 'X' (an instant of
 * duration 0). ts in microseconds since the start. */
void hd_tlw_event(struct hd_tl_writer *w, const char *tensor, int tid,
                  char ph, const char *name, int64_t ts, const char *args);
/* A global instant marker (CYCLE_START), with optional JSON members. */
void hd_tlw_marker(struct hd_tl_writer *w, const char *name, int64_t ts,
                   const char *args);
/* Writes what is buffered; the file is then a whole JSON document. 0, or
 * -errno (the writer then takes nothing more). */
int hd_tlw_flush(struct hd_tl_writer *w);
/* Flushes, closes the file and frees everything. */
int hd_tlw_close(struct hd_tl_writer *w);
/* Appends s to buf as a JSON string (quotes included), escaping what
 * JSON needs and bytes that are not UTF-8. Returns the length it needs
 * (without the NUL), as snprintf. */
size_t hd_tl_json_str(char *buf, size_t n, const char *s);

/* ---- the job's timeline -------------------------------------------------- */

struct hd_job;
struct hd_comm;
struct hd_tensor;
struct hd_rank;
struct hp_sqe;
struct hd_timeline;

/* Whether events are being recorded (cheap: the hooks test it first). */
static inline int hd_tl_on(const struct hd_timeline *tl) {
  return tl && *(const int *)tl;
}

/* The job starts (its mesh is up): the timeline_filename knob. */
void hd_tl_init(struct hd_job *job);
/* Closes the file and the timer (the job ends); hd_tl_free frees it. */
void hd_tl_close(struct hd_job *job);
void hd_tl_free(struct hd_job *job);
/* HP_SQ_TIMELINE from a rank: start or stop (rank 0's counts). */
void hd_tl_request(struct hd_rank *r, const struct hp_sqe *e);
/* A TIMELINE frame from host `from`; < 0 (why) for a bad one. */
int hd_tl_frame(struct hd_job *job, int from, const unsigned char *p,
                size_t len, char *why, size_t whylen);
/* Sends this host's recorded events to host 0 now. */
void hd_tl_flush(struct hd_job *job);
/* Every local rank has ended: 1 when the DONE to horarun is to wait for
 * the timeline's last events -- ours to reach host 0's file (host 0 says
 * so), or, on host 0, every other host's (each says it sent its last).
 * It calls hd_maybe_done() again when they have, or after 2 s. */
int hd_tl_hold_done(struct hd_job *job);
/* A pass of the loop took submissions (CYCLE_START). */
void hd_tl_cycle_(struct hd_job *job);

/* The hooks of negotiation. */
void hd_tl_submitted_(struct hd_tensor *t, int rank);
void hd_tl_queued_(struct hd_tensor *t);
void hd_tl_run_(struct hd_tensor *t);
/* The engine runs t but must wait: for its ranks' chunks in the staging
 * areas, for another operation's staging, or for the other hosts' data
 * (WAIT_FOR_DATA, inside CPU_<COLL>); and goes on with it. */
void hd_tl_wait_(struct hd_tensor *t);
void hd_tl_resume_(struct hd_tensor *t);
/* An activity of the running t begins (MEMCPY_IN_FUSION_BUFFER: its part
 * of a fused run reduced into the daemon's buffer; MEMCPY_OUT_...: written
 * back) and ends; a wait before it ends there. */
void hd_tl_act_(struct hd_tensor *t, const char *name);
void hd_tl_act_end_(struct hd_tensor *t);
void hd_tl_end_(struct hd_tensor *t, int status, const char *msg);

#define HD_TL_HOOK(job, call)                                                 \
  do {                                                                        \
    if (hd_tl_on((job)->tl)) call;                                            \
  } while (0)

#endif
