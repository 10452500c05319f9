/* job.c -- a job's life in its daemon: made when horarun's connection
 * arrives, freed once its handles are closed. */
#define HC_LOG_SUB HC_SUB_CTL
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "autotune.h"
#include "daemon.h"
#include "metrics.h"
#include "timeline.h"

struct hd_job *hd_job_new(struct hd_daemon *dm) {
  struct hd_job *job = calloc(1, sizeof *job);
  if (!job) return NULL;
  job->daemon = dm;
  job->up = &hd_job_upcalls;
  job->engines = hd_engines;
  hc_knobs_init(&job->knobs);
  job->efd = -1;
  job->fast_fd = -1;
  job->gone_rank = -1;
  job->next = dm->jobs;
  dm->jobs = job;
  return job;
}

void hd_job_free(struct hd_job *job) {
  if (!job) return;
  for (struct hd_job **p = &job->daemon->jobs; *p; p = &(*p)->next)
    if (*p == job) {
      *p = job->next;
      break;
    }
  /* the communicators first: their engines' state still reaches the
   * ranks and the peers */
  hd_comms_free(job);
  hd_metrics_free(job);
  hd_session_free(job);
  hd_tl_free(job);
  hd_at_free(job);
  for (int i = 0; job->ranks && i < job->nlocal; i++) {
    struct hd_rank *r = &job->ranks[i];
    free(r->backlog);
    free(r->spawn_msg);
    if (r->shm) munmap(r->shm, r->shm_size);
    if (r->memfd >= 0) close(r->memfd);
  }
  free(job->ranks);
  hd_fast_free(job);
  free(job->peers);
  free(job->early);
  free(job->early_hello);
  free(job->late_fault);
  if (job->efd >= 0) close(job->efd);
  hp_job_free(&job->desc);
  hc_knobs_free(&job->knobs);
  free(job);
}

void hd_job_path(const struct hd_job *job, const char *path, char *out,
                 size_t n) {
  if (path[0] == '/' || !job->desc.cwd || !job->desc.cwd[0])
    hc_fmt(out, n, "%s", path);
  else
    hc_fmt(out, n, "%s/%s", job->desc.cwd, path);
}
