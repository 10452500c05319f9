/* autotune.c -- Horovod's autotuning on host 0 (see autotune.h). */
#define HC_LOG_SUB HC_SUB_COORD
#include "autotune.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"

/* Tried first, after the job's own setting: fusion off (does fusing pay
 * at all for these tensors?), then Horovod's seeds; (fusion threshold MB,
 * cycle time ms), a negative one: the job's own. */
#define NSEEDS 5
static const double seeds[NSEEDS][2] = {
    {0, -1}, {4, 5}, {32, 50}, {16, 25}, {8, 10}};

#define AT_LENGTH 0.25 /* the kernel's length scale, in [0,1] units */
#define AT_GRID 41     /* candidates per dimension for the next point */
#define AT_XI 0.01     /* expected improvement's margin */

static double clamp01(double v) { return v < 0 ? 0 : v > 1 ? 1 : v; }

void hd_at_point_knobs(const double p[2], double *threshold_bytes,
                       double *cycle_ms) {
  /* whole KiB */
  *threshold_bytes = round(clamp01(p[0]) * AT_THRESHOLD_MAX_MB * 1024) * 1024;
  *cycle_ms = AT_CYCLE_MIN_MS + clamp01(p[1]) * (AT_CYCLE_MAX_MS -
                                                 AT_CYCLE_MIN_MS);
}

void hd_at_knobs_point(double threshold_bytes, double cycle_ms, double p[2]) {
  p[0] = clamp01(threshold_bytes / (AT_THRESHOLD_MAX_MB * 1048576.0));
  p[1] = clamp01((cycle_ms - AT_CYCLE_MIN_MS) /
                 (AT_CYCLE_MAX_MS - AT_CYCLE_MIN_MS));
}

/* ---- the Gaussian process ------------------------------------------------ */

static double kernel(const double *a, const double *b) {
  double s = sqrt(5.0) * hypot(a[0] - b[0], a[1] - b[1]) / AT_LENGTH;
  return (1 + s + s * s / 3) * exp(-s); /* Matern 5/2, variance 1 */
}

/* L (n x n, lower) with L L^T = A, in place; 0, or -1 when A is not
 * positive definite. */
static int cholesky(double *a, int n) {
  for (int j = 0; j < n; j++) {
    double d = a[j * n + j];
    for (int k = 0; k < j; k++) d -= a[j * n + k] * a[j * n + k];
    if (d <= 0) return -1;
    d = sqrt(d);
    a[j * n + j] = d;
    for (int i = j + 1; i < n; i++) {
      double s = a[i * n + j];
      for (int k = 0; k < j; k++) s -= a[i * n + k] * a[j * n + k];
      a[i * n + j] = s / d;
    }
    for (int i = 0; i < j; i++) a[i * n + j] = 0;
  }
  return 0;
}

/* Solves L v = b (forward) into v. */
static void lsolve(const double *l, int n, const double *b, double *v) {
  for (int i = 0; i < n; i++) {
    double s = b[i];
    for (int k = 0; k < i; k++) s -= l[i * n + k] * v[k];
    v[i] = s / l[i * n + i];
  }
}

/* Solves L^T v = b (backward) into v. */
static void ltsolve(const double *l, int n, const double *b, double *v) {
  for (int i = n - 1; i >= 0; i--) {
    double s = b[i];
    for (int k = i + 1; k < n; k++) s -= l[k * n + i] * v[k];
    v[i] = s / l[i * n + i];
  }
}

void hd_at_suggest(const double (*x)[2], const double *y, int n,
                   double noise, const int fixed[2], double out[2]) {
  if (n <= 0) return;
  double mean = 0, var = 0;
  for (int i = 0; i < n; i++) mean += y[i] / n;
  for (int i = 0; i < n; i++) var += (y[i] - mean) * (y[i] - mean) / n;
  double sd = var > 0 ? sqrt(var) : 1;
  double *k = malloc(sizeof(double) * (size_t)(n * n + 4 * n));
  if (!k) return;
  double *yn = k + n * n, *alpha = yn + n, *kv = alpha + n, *v = kv + n;
  double best = -INFINITY;
  for (int i = 0; i < n; i++) {
    yn[i] = (y[i] - mean) / sd;
    if (yn[i] > best) best = yn[i];
    for (int j = 0; j < n; j++)
      k[i * n + j] = kernel(x[i], x[j]) + (i == j ? noise + 1e-6 : 0);
  }
  if (cholesky(k, n) < 0) { /* cannot happen with noise > 0; stay put */
    free(k);
    return;
  }
  lsolve(k, n, yn, v);
  ltsolve(k, n, v, alpha);
  double top = -1, c[2], pick[2] = {out[0], out[1]};
  for (int a = 0; a < AT_GRID; a++)
    for (int b = 0; b < AT_GRID; b++) {
      c[0] = fixed[0] ? out[0] : (double)a / (AT_GRID - 1);
      c[1] = fixed[1] ? out[1] : (double)b / (AT_GRID - 1);
      if ((fixed[0] && a) || (fixed[1] && b)) continue; /* the same point */
      double mu = 0, s2 = 1;
      for (int i = 0; i < n; i++) {
        kv[i] = kernel(c, x[i]);
        mu += kv[i] * alpha[i];
      }
      lsolve(k, n, kv, v);
      for (int i = 0; i < n; i++) s2 -= v[i] * v[i];
      if (s2 < 1e-12) continue; /* tried already */
      double s = sqrt(s2), d = mu - best - AT_XI, z = d / s;
      double ei = d * 0.5 * erfc(-z / sqrt(2.0)) +
                  s * exp(-0.5 * z * z) / sqrt(2 * M_PI);
      if (ei > top) {
        top = ei;
        pick[0] = c[0];
        pick[1] = c[1];
      }
    }
  out[0] = pick[0];
  out[1] = pick[1];
  free(k);
}

/* ---- the tuner ----------------------------------------------------------- */

static void set_knobs(struct hd_autotune *at, double thr, double cyc) {
  struct hc_knobs *kn = at->knobs;
  if (!at->fixed[0]) {
    hk_int(kn, fusion_threshold) = (long long)thr;
    hk_double(kn, fusion_threshold) = thr;
  }
  if (!at->fixed[1]) {
    hk_double(kn, cycle_time) = cyc;
    hk_int(kn, cycle_time) = (long long)cyc;
  }
}

static void apply(struct hd_autotune *at, const double p[2]) {
  double thr, cyc;
  hd_at_point_knobs(p, &thr, &cyc);
  at->cur[0] = p[0];
  at->cur[1] = p[1];
  set_knobs(at, thr, cyc);
}

static const char *const choice_name[AT_NCHOICES] = {
    "hierarchical allreduce", "hierarchical allgather", "cache"};

/* ", cache off" and the like: the tuned choices as they are now. */
static void choices_str(const struct hd_autotune *at, char *buf, size_t len) {
  size_t o = 0;
  buf[0] = '\0';
  for (int k = 0; k < AT_NCHOICES && o < len; k++)
    if (at->tuned[k])
      o += (size_t)snprintf(buf + o, len - o, ", %s %s", choice_name[k],
                            at->choice[k] ? "on" : "off");
}

static void log_row(struct hd_autotune *at, const char *trial, int sample,
                    double score) {
  if (!at->log) return;
  struct hc_knobs *kn = at->knobs;
  char s[16] = "";
  if (sample >= 0) hc_fmt(s, sizeof s, "%d", sample);
  fprintf(at->log, "%s,%s,%d,%d,%d,%g,%lld,%.3f\n", trial, s,
          at->choice[AT_HIER_ALLREDUCE], at->choice[AT_HIER_ALLGATHER],
          at->choice[AT_CACHE], hk_double(kn, cycle_time),
          hk_int(kn, fusion_threshold), score);
  fflush(at->log);
}

struct hd_autotune *hd_at_new(struct hc_knobs *knobs,
                              const int matter[AT_NCHOICES], FILE *log) {
  struct hd_autotune *at = calloc(1, sizeof *at);
  if (!at) return NULL;
  at->knobs = knobs;
  at->log = log;
  at->fixed[0] = hk_given(knobs, fusion_threshold);
  at->fixed[1] = hk_given(knobs, cycle_time);
  /* the job's choices: the cache on unless its capacity is 0 */
  int given[AT_NCHOICES] = {hk_given(knobs, hierarchical_allreduce),
                            hk_given(knobs, hierarchical_allgather),
                            hk_given(knobs, cache_capacity)};
  at->choice[AT_HIER_ALLREDUCE] = !hd_flat_allreduce(knobs);
  at->choice[AT_HIER_ALLGATHER] = !hd_flat_allgather(knobs);
  at->choice[AT_CACHE] = hk_int(knobs, cache_capacity) > 0;
  int any = 0;
  for (int k = 0; k < AT_NCHOICES; k++)
    any |= at->tuned[k] = matter && matter[k] && !given[k];
  at->chain = -1;
  at->warmup_left = (int)HC_MAX(0, hk_int(knobs, autotune_warmup_samples));
  at->steps_per_sample =
      (int)HC_MAX(1, hk_int(knobs, autotune_steps_per_sample));
  at->max_trials = (int)HC_MIN(AT_TRIALS_MAX,
                               HC_MAX(1, hk_int(knobs,
                                                autotune_bayes_opt_max_samples)));
  /* both numbers given: their one trial is the job's setting */
  at->numeric_trials = at->fixed[0] && at->fixed[1] ? 1 : at->max_trials;
  at->noise = hk_double(knobs, autotune_gaussian_process_noise);
  if (!(at->noise > 0)) at->noise = 1e-3; /* 0 asks for none: a jitter */
  at->start_thr = (double)hk_int(knobs, fusion_threshold);
  at->start_cyc = hk_double(knobs, cycle_time);
  hd_at_knobs_point(at->start_thr, at->start_cyc, at->cur);
  at->on = !(at->fixed[0] && at->fixed[1]) || any;
  if (log)
    fprintf(log, "trial,sample,hierarchical_allreduce,hierarchical_allgather,"
                 "cache_enabled,cycle_time_ms,tensor_fusion_threshold,score\n");
  return at;
}

void hd_at_delete(struct hd_autotune *at) {
  if (!at) return;
  if (at->log) fclose(at->log);
  free(at->log_path);
  free(at);
}

static double median(double *v, int n) {
  for (int i = 1; i < n; i++) /* n is small */
    for (int k = i; k > 0 && v[k - 1] > v[k]; k--) {
      double t = v[k];
      v[k] = v[k - 1];
      v[k - 1] = t;
    }
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int best_trial(const struct hd_autotune *at) {
  int b = 0;
  for (int i = 1; i < at->ntrials; i++)
    if (at->y[i] > at->y[b]) b = i;
  return b;
}

/* Sets the knobs and choices of trial b. */
static void take_trial(struct hd_autotune *at, int b) {
  if (b == 0) { /* the job's own setting, exactly */
    set_knobs(at, at->start_thr, at->start_cyc);
    at->cur[0] = at->x[0][0];
    at->cur[1] = at->x[0][1];
  } else {
    apply(at, at->x[b]);
  }
  memcpy(at->choice, at->xc[b], sizeof at->choice);
}

static void freeze(struct hd_autotune *at) {
  int b = best_trial(at);
  take_trial(at, b);
  at->on = 0;
  log_row(at, "best", -1, at->y[b]);
  char ch[128];
  choices_str(at, ch, sizeof ch);
  hc_info("autotune: done after %d trials: fusion threshold %lld bytes, "
          "cycle time %g ms%s (trial %d: %.1f bytes/us; the job's own "
          "setting gave %.1f)", at->ntrials, hk_int(at->knobs, fusion_threshold),
          hk_double(at->knobs, cycle_time), ch, b, at->y[b], at->y[0]);
}

/* The next trial of the chain: from the best setting so far, the next
 * tuned choice after at->chain the other way; or the end. */
static void next_choice(struct hd_autotune *at) {
  int k = at->chain + 1;
  while (k < AT_NCHOICES && !at->tuned[k]) k++;
  if (k >= AT_NCHOICES || at->ntrials >= AT_TRIALS_MAX + AT_NCHOICES) {
    freeze(at);
    return;
  }
  take_trial(at, best_trial(at));
  at->chain = k;
  at->choice[k] = !at->choice[k];
}

void hd_at_sample(struct hd_autotune *at, double score) {
  if (!at || !at->on) return;
  char trial[16];
  if (at->warmup_left > 0) {
    at->warmup_left--;
    log_row(at, "warmup", at->nsamples++, score);
    return;
  }
  hc_fmt(trial, sizeof trial, "%d", at->ntrials);
  log_row(at, trial, at->nsamples++, score);
  at->samples[at->ntrial_samples++] = score;
  if (at->ntrial_samples < AT_SAMPLES_PER_TRIAL) return;
  int t = at->ntrials++;
  at->x[t][0] = at->cur[0];
  at->x[t][1] = at->cur[1];
  memcpy(at->xc[t], at->choice, sizeof at->choice);
  at->y[t] = median(at->samples, at->ntrial_samples);
  at->ntrial_samples = 0;
  char ch[128];
  choices_str(at, ch, sizeof ch);
  hc_info("autotune: trial %d: fusion threshold %lld bytes, cycle time %g "
          "ms%s: %.1f bytes/us", t, hk_int(at->knobs, fusion_threshold),
          hk_double(at->knobs, cycle_time), ch, at->y[t]);
  if (at->chain >= 0 || at->ntrials >= at->numeric_trials) {
    next_choice(at);
    return;
  }
  double next[2] = {at->x[0][0], at->x[0][1]}; /* fixed ones stay */
  if (at->ntrials <= NSEEDS) {
    double p[2];
    const double *s = seeds[at->ntrials - 1];
    hd_at_knobs_point(s[0] * 1048576.0, s[1] < 0 ? at->start_cyc : s[1], p);
    if (!at->fixed[0]) next[0] = p[0];
    if (!at->fixed[1]) next[1] = p[1];
  } else {
    hd_at_suggest((const double (*)[2])at->x, at->y, at->ntrials, at->noise,
                  at->fixed, next);
  }
  apply(at, next);
}

/* ---- measuring the job's steps -------------------------------------------- */

void hd_at_init(struct hd_job *job) {
  struct hc_knobs *kn = &job->knobs;
  if (!hk_int(kn, autotune) || job->desc.host_index != 0) return;
  FILE *log = NULL;
  const char *f = hk_str(kn, autotune_log_file);
  char path[4096];
  if (f && *f) {
    hd_job_path(job, f, path, sizeof path);
    if (!(log = fopen(path, "w")))
      hc_error("cannot write the autotune log %s (HOROVOD_AUTOTUNE_LOG, "
               "--autotune-log-file): %s; tuning goes on without it", path,
               strerror(errno));
  }
  /* what the choices change: the cache and a flat allreduce (when a host
   * has several ranks) need several hosts; a flat allgather differs from
   * the direct exchange from three hosts on */
  uint32_t nh = job->desc.nhosts, most = 0;
  for (uint32_t h = 0; h < nh; h++)
    most = HC_MAX(most, (uint32_t)job->desc.hosts[h].nranks);
  int matter[AT_NCHOICES] = {[AT_HIER_ALLREDUCE] = nh > 1 && most > 1,
                             [AT_HIER_ALLGATHER] = nh > 2,
                             [AT_CACHE] = nh > 1};
  struct hd_autotune *at = hd_at_new(kn, matter, log);
  if (!at) {
    if (log) fclose(log);
    hc_error("out of memory: the job runs without autotuning");
    return;
  }
  job->at = at;
  if (!at->on) {
    hc_warn("autotune: the fusion threshold and the cycle time were both "
            "given explicitly, and no other choice can change anything in "
            "this job, so there is nothing to tune; they are kept");
    return;
  }
  char what[256];
  size_t o;
  if (at->fixed[0] && at->fixed[1])
    o = (size_t)snprintf(what, sizeof what, "keeping %lld bytes and %g ms",
                         hk_int(kn, fusion_threshold),
                         hk_double(kn, cycle_time));
  else
    o = (size_t)snprintf(what, sizeof what, "tuning %s from %lld bytes and "
                         "%g ms", at->fixed[0] ? "the cycle time"
                         : at->fixed[1] ? "the fusion threshold"
                                        : "the fusion threshold and the "
                                          "cycle time",
                         hk_int(kn, fusion_threshold),
                         hk_double(kn, cycle_time));
  int nchoices = 0;
  for (int k = 0; k < AT_NCHOICES; k++)
    if (at->tuned[k] && o < sizeof what)
      o += (size_t)snprintf(what + o, sizeof what - o, "%s%s",
                            nchoices++ ? " and " : ", then trying ",
                            choice_name[k]);
  if (nchoices && o < sizeof what)
    snprintf(what + o, sizeof what - o, " the other way");
  hc_info("autotune: %s: %d warm-up samples, then at most %d trials of %d "
          "samples of %d steps", what, at->warmup_left,
          at->numeric_trials + nchoices, AT_SAMPLES_PER_TRIAL,
          at->steps_per_sample);
}

void hd_at_free(struct hd_job *job) {
  hd_at_delete(job->at);
  job->at = NULL;
}

void hd_at_submitted_(struct hd_job *job) {
  struct hd_autotune *at = job->at;
  if (at->step_open) return;
  at->step_open = 1;
  at->step_t0 = hc_now_ns();
  at->step_bytes = 0;
}

void hd_at_done_(struct hd_job *job, const struct hd_tensor *t, int status) {
  struct hd_autotune *at = job->at;
  if (status >= 0 && at->step_open)
    at->step_bytes += t->meta.count * hora_dtype_size(t->meta.dtype);
}

static int busy(const struct hd_job *job) {
  for (uint32_t k = 0; k < job->ncomms; k++)
    if (job->comms[k] && job->comms[k]->ntensors) return 1;
  return 0;
}

void hd_at_removed_(struct hd_job *job) {
  struct hd_autotune *at = job->at;
  if (!at->step_open) return;
  uint64_t now = hc_now_ns(), ns = now - at->step_t0;
  int more = busy(job);
  if (more && ns < AT_STEP_MAX_NS) return;
  uint64_t bytes = at->step_bytes;
  at->step_open = more; /* a step that lasts goes on as the next one */
  at->step_t0 = now;
  at->step_bytes = 0;
  if (!bytes) return; /* barriers, joins: no data moved, no step */
  at->sample_ns += ns;
  at->sample_bytes += bytes;
  if (++at->sample_steps < at->steps_per_sample) return;
  double score = at->sample_ns ? at->sample_bytes * 1e3 / at->sample_ns : 0;
  at->sample_ns = at->sample_bytes = 0;
  at->sample_steps = 0;
  hd_at_sample(at, score);
}
