/* autotune.h -- Horovod's autotuning (--autotune): host 0's horad tunes
 * the two knobs it uses as coordinator, the fusion threshold and the
 * cycle time, online, from the throughput of the job's own steps.
 *
 * A step is a busy period of this host: from a submission that finds no
 * operation pending to the moment none is pending again (a training
 * step's gradients; fusion_perf's burst), or 1 s at most, that moved
 * data (a barrier alone is no step). Its score is
 * the bytes of the operations it completed over its duration, so the
 * compute between steps does not count. A sample is steps_per_sample
 * steps; the first warmup_samples samples are discarded; a trial is one
 * setting of the knobs, scored by the median of AT_SAMPLES_PER_TRIAL
 * samples. The trials are: the job's own setting, fusion off, Horovod's
 * four seeds, then the points a Gaussian process (Matern 5/2, noise
 * gaussian_process_noise) gives the highest expected improvement, up to
 * bayes_opt_max_samples trials in all. Then, as Horovod's chain of
 * categorical parameters, the choices (hierarchical allreduce,
 * hierarchical allgather, the response cache) that can matter in this
 * job are tried one at a time the other way, each from the best setting
 * so far, one trial each; and the best trial's setting is kept for the
 * rest of the job. A knob given explicitly (flag, variable, YAML) is held
 * constant, as Horovod does. The choices take effect through host 0's
 * decisions (hd_coord_algo): every host runs an operation as its
 * coordinator says. Every sample is a row of autotune_log_file (CSV), the
 * best trial last. */
#ifndef HORA_DAEMON_AUTOTUNE_H
#define HORA_DAEMON_AUTOTUNE_H

#include <stdint.h>
#include <stdio.h>

struct hd_job;
struct hd_tensor;
struct hc_knobs;

#define AT_SAMPLES_PER_TRIAL 3
#define AT_TRIALS_MAX 64
#define AT_STEP_MAX_NS 1000000000ull

/* The search space: fusion threshold 0-64 MiB, cycle time 1-100 ms (as
 * Horovod's), each mapped linearly onto [0, 1]. */
#define AT_THRESHOLD_MAX_MB 64.0
#define AT_CYCLE_MIN_MS 1.0
#define AT_CYCLE_MAX_MS 100.0

/* The choices tuned after the two numbers (1: on, as hora's defaults). */
enum {
  AT_HIER_ALLREDUCE, /* hierarchical allreduce across hosts (0: flat) */
  AT_HIER_ALLGATHER, /* hierarchical allgather across hosts (0: flat) */
  AT_CACHE,          /* the response cache (0: off) */
  AT_NCHOICES
};

struct hd_autotune {
  int on;   /* first: hd_at_on() reads it; 0 once tuning is done */
  struct hc_knobs *knobs;
  int fixed[2]; /* the knob was given: held */
  int choice[AT_NCHOICES]; /* in effect (also once tuning is done) */
  int tuned[AT_NCHOICES];  /* tuned: not given, and it matters here */
  int chain; /* the choice on trial; -1: the numbers' trials */
  int numeric_trials; /* the numbers' trials (max_trials, or 1 if fixed) */
  int warmup_left, steps_per_sample, max_trials;
  double noise;
  /* the step being measured, and the sample */
  int step_open;
  uint64_t step_t0, step_bytes;
  uint64_t sample_ns, sample_bytes;
  int sample_steps, nsamples;
  double samples[AT_SAMPLES_PER_TRIAL]; /* the current trial's */
  int ntrial_samples;
  /* the trials so far: the point (in [0,1]^2), the choices and the score */
  double x[AT_TRIALS_MAX + AT_NCHOICES][2], y[AT_TRIALS_MAX + AT_NCHOICES];
  int xc[AT_TRIALS_MAX + AT_NCHOICES][AT_NCHOICES];
  int ntrials;
  double cur[2]; /* the point being tried */
  double start_thr, start_cyc; /* the job's own setting (trial 0) */
  FILE *log;
  char *log_path;
};

static inline int hd_at_on(const struct hd_autotune *at) {
  return at && at->on;
}

/* Choice `which` (AT_*) as the tuner has it now, or dflt where it does
 * not tune it (no tuner, given, or it cannot matter in this job). */
static inline int hd_at_choice(const struct hd_autotune *at, int which,
                               int dflt) {
  return at && at->tuned[which] ? at->choice[which] : dflt;
}

#define HD_AT_HOOK(job, call)                                                 \
  do {                                                                        \
    if (hd_at_on((job)->at)) call;                                            \
  } while (0)

/* The job starts: --autotune on host 0 starts tuning. */
void hd_at_init(struct hd_job *job);
void hd_at_free(struct hd_job *job);
/* A new operation was submitted on this host (a step may begin). */
void hd_at_submitted_(struct hd_job *job);
/* An operation completed (bytes of the step). */
void hd_at_done_(struct hd_job *job, const struct hd_tensor *t, int status);
/* An operation left this host (the step may end). */
void hd_at_removed_(struct hd_job *job);

/* ---- the tuner itself, without a job (unit tests) ------------------------ */

/* A tuner over `knobs` (whose fusion_threshold and cycle_time it sets),
 * reading its settings from them; matter[AT_*]: the choices that can
 * change anything in this job (NULL: none), tuned unless given; log: NULL
 * or an open CSV file. */
struct hd_autotune *hd_at_new(struct hc_knobs *knobs,
                              const int matter[AT_NCHOICES], FILE *log);
void hd_at_delete(struct hd_autotune *at);
/* One sample's score (bytes per microsecond) of the knobs and choices
 * now set; moves to the next trial when this one has its samples, and
 * freezes the best after the last (at->on 0). */
void hd_at_sample(struct hd_autotune *at, double score);
/* The point of highest expected improvement over the n trials x, y (fixed
 * coordinates keep out[] as given). */
void hd_at_suggest(const double (*x)[2], const double *y, int n,
                   double noise, const int fixed[2], double out[2]);
/* The knobs' values at point p, and back. */
void hd_at_point_knobs(const double p[2], double *threshold_bytes,
                       double *cycle_ms);
void hd_at_knobs_point(double threshold_bytes, double cycle_ms, double p[2]);

#endif
