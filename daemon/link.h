/* link.h -- what negotiation and the cross-host algorithms (xhost/) need of the
 * links between the daemons of a job. The TCP mesh (links/mesh.c) provides it;
 * an RDMA link would register beside it. Hosts are global host indices. */
#ifndef HORA_DAEMON_LINK_H
#define HORA_DAEMON_LINK_H

#include <stddef.h>

struct hd_job;
struct hp_wbuf;

struct hd_link {
  const char *name;
  /* Queues a frame made of hdr (hdrlen bytes, copied) and n bytes at p,
   * which stay untouched until done(arg, status) (status < 0: it did not
   * go; the host is then lost and reported as such). Returns -1, without
   * calling done, when there is no link to the host. */
  int (*send)(struct hd_job *job, int host, const void *hdr, size_t hdrlen,
              const void *p, size_t n, void (*done)(void *, int), void *arg);
  /* Backpressure: stop and resume reading what the host sends. */
  void (*pause)(struct hd_job *job, int host);
  void (*resume)(struct hd_job *job, int host);
  int (*paused)(struct hd_job *job, int host);
  /* A frame being read in place (see mesh.c) goes to a buffer instead. */
  void (*unplace)(struct hd_job *job, int host);
  /* The host sent something wrong: drop its link (it is then lost). */
  void (*drop)(struct hd_job *job, int host, const char *why);
  /* Queues the whole frames in w (negotiation); < 0: no link to it. */
  int (*send_frames)(struct hd_job *job, int host, struct hp_wbuf *w);
};

extern const struct hd_link hd_link_tcp;

#endif
