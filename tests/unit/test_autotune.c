/* test_autotune.c -- the autotuner (daemon/autotune.c) without a job: a
 * synthetic workload (a score that depends on the knobs the way fused
 * small tensors across hosts do: nothing fused is slow, a threshold near
 * 256 KiB best, a long cycle time a little worse) fed sample by sample.
 * Started from a deliberately bad setting (fusion off), it ends at a
 * better one, after the number of trials asked, with the best trial's
 * setting kept and every sample in the CSV; a knob given is held; both
 * given leaves nothing to tune; warm-up samples are discarded; the next
 * point of the Gaussian process is one not tried, and keeps a fixed
 * coordinate. The choices (hierarchical allreduce and allgather, the
 * cache) are tried the other way one at a time after the numbers, each
 * kept only where it scored better; a choice given or one that cannot
 * matter is not tried. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune.h"
#include "daemon.h"
#include "testlib.h"

/* bytes per microsecond of a step at these knobs */
static double workload(const struct hc_knobs *k) {
  double thr = (double)hk_int(k, fusion_threshold);
  double cyc = hk_double(k, cycle_time);
  if (thr <= 0) return 40;
  double d = log2(thr / (256.0 * 1024)) / 8;
  return 480 - 120 * d * d - 0.5 * cyc;
}

static int lines(FILE *f) {
  int n = 0, ch;
  rewind(f);
  while ((ch = fgetc(f)) != EOF) n += ch == '\n';
  return n;
}

/* Runs the tuner to its end; returns the number of samples it took. */
static int drive(struct hd_autotune *at, struct hc_knobs *k) {
  int n = 0;
  while (at->on && n < 10000) {
    hd_at_sample(at, workload(k));
    n++;
  }
  return n;
}

static void set(struct hc_knobs *k, const char *thr, const char *cyc,
                int given) {
  char why[128];
  CHECK(hk_set(k, fusion_threshold, thr, why, sizeof why) == 0);
  CHECK(hk_set(k, cycle_time, cyc, why, sizeof why) == 0);
  if (!given) { /* the values, not their being given */
    free(k->v[HC_KNOB_fusion_threshold].own);
    free(k->v[HC_KNOB_cycle_time].own);
    k->v[HC_KNOB_fusion_threshold].own = NULL;
    k->v[HC_KNOB_cycle_time].own = NULL;
  }
}

static void test_from_bad_to_better(void) {
  struct hc_knobs k;
  hc_knobs_init(&k);
  char why[128];
  CHECK(hk_set(&k, autotune_warmup_samples, "2", why, sizeof why) == 0);
  CHECK(hk_set(&k, autotune_bayes_opt_max_samples, "12", why,
               sizeof why) == 0);
  set(&k, "0", "1", 0); /* fusion off: the bad start */
  double start = workload(&k);
  FILE *log = tmpfile();
  CHECK(log != NULL);
  struct hd_autotune *at = hd_at_new(&k, NULL, log);
  CHECK(at && at->on);
  if (!at) return;
  int n = drive(at, &k);
  CHECK_EQ_INT(n, 2 + 12 * AT_SAMPLES_PER_TRIAL);
  CHECK_EQ_INT(at->ntrials, 12);
  CHECK(!at->on);
  double end = workload(&k);
  CHECK(end > 4 * start);
  /* the kept setting is the best trial's */
  double top = 0;
  for (int i = 0; i < at->ntrials; i++)
    if (at->y[i] > top) top = at->y[i];
  CHECK(fabs(end - top) < 1e-9);
  CHECK(hk_int(&k, fusion_threshold) > 0);
  /* header, warm-up, every sample, best */
  CHECK_EQ_INT(lines(log), 1 + 2 + 12 * AT_SAMPLES_PER_TRIAL + 1);
  char last[256] = "", line[256];
  rewind(log);
  while (fgets(line, sizeof line, log)) snprintf(last, sizeof last, "%s", line);
  CHECK(!strncmp(last, "best,,", 6));
  /* no more samples taken once done */
  long long thr = hk_int(&k, fusion_threshold);
  hd_at_sample(at, 1e9);
  CHECK(hk_int(&k, fusion_threshold) == thr);
  hd_at_delete(at);
  hc_knobs_free(&k);
}

static void test_held_knobs(void) {
  struct hc_knobs k;
  hc_knobs_init(&k);
  char why[128];
  CHECK(hk_set(&k, autotune_warmup_samples, "0", why, sizeof why) == 0);
  CHECK(hk_set(&k, autotune_bayes_opt_max_samples, "9", why,
               sizeof why) == 0);
  CHECK(hk_set(&k, fusion_threshold, "2M", why, sizeof why) == 0);
  struct hd_autotune *at = hd_at_new(&k, NULL, NULL);
  CHECK(at && at->on && at->fixed[0] && !at->fixed[1]);
  if (!at) return;
  double cycles[64];
  int n = 0;
  while (at->on && n < 64) {
    CHECK_EQ_INT(hk_int(&k, fusion_threshold), 2 << 20);
    cycles[n] = hk_double(&k, cycle_time);
    hd_at_sample(at, workload(&k));
    n++;
  }
  CHECK_EQ_INT(n, 9 * AT_SAMPLES_PER_TRIAL);
  CHECK_EQ_INT(hk_int(&k, fusion_threshold), 2 << 20);
  int moved = 0;
  for (int i = 1; i < n; i++) moved |= cycles[i] != cycles[0];
  CHECK(moved); /* the cycle time was tuned */
  hd_at_delete(at);
  hc_knobs_free(&k);

  /* both given: nothing to tune, nothing changes */
  hc_knobs_init(&k);
  set(&k, "0", "3", 1);
  at = hd_at_new(&k, NULL, NULL);
  CHECK(at && !at->on);
  hd_at_sample(at, 100);
  CHECK_EQ_INT(hk_int(&k, fusion_threshold), 0);
  CHECK(hk_double(&k, cycle_time) == 3);
  hd_at_delete(at);
  hc_knobs_free(&k);
}

/* The workload above, where a flat allgather and the cache off pay and a
 * flat allreduce costs (as the tuner sees them: hd_at_choice). */
static double workload_choices(const struct hd_autotune *at,
                               const struct hc_knobs *k) {
  double f = 1;
  if (!hd_at_choice(at, AT_HIER_ALLREDUCE, 1)) f *= 0.5;
  if (!hd_at_choice(at, AT_HIER_ALLGATHER, 1)) f *= 1.3;
  if (!hd_at_choice(at, AT_CACHE, 1)) f *= 1.2;
  return workload(k) * f;
}

static void test_choices(void) {
  struct hc_knobs k;
  hc_knobs_init(&k);
  char why[128];
  CHECK(hk_set(&k, autotune_warmup_samples, "0", why, sizeof why) == 0);
  CHECK(hk_set(&k, autotune_bayes_opt_max_samples, "6", why,
               sizeof why) == 0);
  FILE *log = tmpfile();
  CHECK(log != NULL);
  int all[AT_NCHOICES] = {1, 1, 1};
  struct hd_autotune *at = hd_at_new(&k, all, log);
  CHECK(at && at->on);
  if (!at) return;
  for (int c = 0; c < AT_NCHOICES; c++) CHECK_EQ_INT(hd_at_choice(at, c, 7), 1);
  int n = 0, seen_off[AT_NCHOICES] = {0, 0, 0};
  while (at->on && n < 1000) {
    /* one choice off at a time, and only after the numbers' trials */
    int off = 0;
    for (int c = 0; c < AT_NCHOICES; c++) {
      int v = hd_at_choice(at, c, 7);
      CHECK(v == 0 || v == 1);
      off += !v && at->chain == c;
      if (!v && at->chain == c) seen_off[c] = 1;
    }
    CHECK(at->ntrials >= 6 || (hd_at_choice(at, 0, 7) &&
                               hd_at_choice(at, 1, 7) &&
                               hd_at_choice(at, 2, 7)));
    CHECK(off <= 1);
    hd_at_sample(at, workload_choices(at, &k));
    n++;
  }
  CHECK_EQ_INT(at->ntrials, 6 + AT_NCHOICES);
  CHECK_EQ_INT(n, (6 + AT_NCHOICES) * AT_SAMPLES_PER_TRIAL);
  for (int c = 0; c < AT_NCHOICES; c++) CHECK(seen_off[c]);
  /* kept: what paid, after the tuning too */
  CHECK_EQ_INT(hd_at_choice(at, AT_HIER_ALLREDUCE, 7), 1);
  CHECK_EQ_INT(hd_at_choice(at, AT_HIER_ALLGATHER, 7), 0);
  CHECK_EQ_INT(hd_at_choice(at, AT_CACHE, 7), 0);
  /* the CSV names them, the best last */
  char line[256], last[256] = "";
  rewind(log);
  CHECK(fgets(line, sizeof line, log) != NULL);
  CHECK(!strcmp(line, "trial,sample,hierarchical_allreduce,"
                      "hierarchical_allgather,cache_enabled,cycle_time_ms,"
                      "tensor_fusion_threshold,score\n"));
  while (fgets(line, sizeof line, log)) snprintf(last, sizeof last, "%s", line);
  CHECK(!strncmp(last, "best,,1,0,0,", 12));
  hd_at_delete(at);
  hc_knobs_free(&k);

  /* given ones are held (and say the job's value), the others tuned; the
   * numbers both given: one trial of them, then the choice */
  hc_knobs_init(&k);
  CHECK(hk_set(&k, autotune_warmup_samples, "0", why, sizeof why) == 0);
  CHECK(hk_set(&k, hierarchical_allreduce, "0", why, sizeof why) == 0);
  CHECK(hk_set(&k, cache_capacity, "64", why, sizeof why) == 0);
  set(&k, "1M", "2", 1);
  at = hd_at_new(&k, all, NULL);
  CHECK(at && at->on);
  if (!at) return;
  CHECK(!at->tuned[AT_HIER_ALLREDUCE] && at->tuned[AT_HIER_ALLGATHER] &&
        !at->tuned[AT_CACHE]);
  CHECK_EQ_INT(hd_at_choice(at, AT_HIER_ALLREDUCE, 7), 7);
  n = 0;
  while (at->on && n < 1000) {
    hd_at_sample(at, workload_choices(at, &k));
    n++;
  }
  CHECK_EQ_INT(at->ntrials, 2);
  CHECK_EQ_INT(hd_at_choice(at, AT_HIER_ALLGATHER, 7), 0);
  CHECK_EQ_INT(hk_int(&k, fusion_threshold), 1 << 20);
  hd_at_delete(at);
  hc_knobs_free(&k);

  /* none matters (one host): nothing but the numbers */
  hc_knobs_init(&k);
  int none[AT_NCHOICES] = {0, 0, 0};
  set(&k, "1M", "2", 1);
  at = hd_at_new(&k, none, NULL);
  CHECK(at && !at->on);
  hd_at_delete(at);
  hc_knobs_free(&k);
}

static void test_suggest(void) {
  double x[3][2] = {{0, 0}, {1, 1}, {0.5, 0.5}}, y[3] = {1, 2, 5};
  int free2[2] = {0, 0}, fix1[2] = {0, 1};
  double out[2] = {0, 0};
  hd_at_suggest((const double (*)[2])x, y, 3, 0.1, free2, out);
  for (int i = 0; i < 3; i++)
    CHECK(fabs(out[0] - x[i][0]) + fabs(out[1] - x[i][1]) > 1e-9);
  /* near the best so far, where the improvement is expected */
  CHECK(hypot(out[0] - 0.5, out[1] - 0.5) < 0.5);
  double held[2] = {0, 0.3};
  hd_at_suggest((const double (*)[2])x, y, 3, 0.1, fix1, held);
  CHECK(held[1] == 0.3);
  /* the knobs' scale both ways */
  double p[2], thr, cyc;
  hd_at_knobs_point(4.0 * 1048576, 5, p);
  hd_at_point_knobs(p, &thr, &cyc);
  CHECK(thr == 4.0 * 1048576 && fabs(cyc - 5) < 1e-9);
  hd_at_knobs_point(1e12, 1e6, p); /* clamped */
  CHECK(p[0] == 1 && p[1] == 1);
}

int main(void) {
  RUN(test_from_bad_to_better);
  RUN(test_choices);
  RUN(test_held_knobs);
  RUN(test_suggest);
  TL_EXIT();
}
