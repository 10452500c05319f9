/* test_knobs.c -- the knobs parsed once (struct hc_knobs, params.c): the
 * defaults, a list of NAME=value strings as a job's environment brings
 * them, single settings, bad values, and the process-environment readers
 * that follow the same rules. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "testlib.h"

static void test_defaults(void) {
  struct hc_knobs k;
  hc_knobs_init(&k);
  CHECK_EQ_INT(hk_int(&k, spin_us), 200);
  CHECK_EQ_INT(hk_int(&k, arena_size), 128ll << 20);
  CHECK_EQ_INT(hk_int(&k, chunk_size), 8ll << 20);
  CHECK_EQ_INT(hk_int(&k, max_pending), 1048576);
  CHECK(hk_double(&k, heartbeat_timeout) == 3.0);
  CHECK(hk_double(&k, kill_grace) == 5.0);
  CHECK_EQ_STR(hk_str(&k, log_level), "warning");
  CHECK_EQ_STR(hk_str(&k, timeline_filename), "");
  CHECK_EQ_INT(hk_int(&k, stall_check_disable), 0);
  CHECK_EQ_INT(hk_given(&k, spin_us), 0);
  hc_knobs_free(&k); /* nothing given: nothing to free, still defaults */
  CHECK_EQ_INT(hk_int(&k, spin_us), 200);
}

static void test_parse(void) {
  struct hc_knobs k;
  char why[256] = "";
  hc_knobs_init(&k);
  char *env[] = {"PATH=/bin",
                 "HORA_SPIN_US=10",
                 "HORA_SPIN_USX=abc", /* not a knob's variable */
                 "HORA_ARENA_SIZE=1.5G",
                 "HOROVOD_CYCLE_TIME=0.5", /* the alias alone */
                 "HORA_KILL_GRACE=",       /* empty: unset */
                 "HORA_THREADS=3",
                 "HORA_THREADS=4", /* the first of a name counts */
                 "HORA_FUSION_THRESHOLD=1M",
                 "HOROVOD_FUSION_THRESHOLD=2M", /* HORA_* wins */
                 "HORA_CACHE_CAPACITY=",
                 "HOROVOD_CACHE_CAPACITY=7", /* HORA_* empty: the alias */
                 "HORA_STALL_CHECK_DISABLE=1",
                 "HORA_LOG_LEVEL=debug",
                 "HORA_TIMELINE=/tmp/t.json",
                 "HORA_HEARTBEAT_TIMEOUT=0.25",
                 NULL};
  CHECK_EQ_INT(hc_knobs_parse_env(&k, env, SIZE_MAX, "the job's environment",
                                  why, sizeof why),
               0);
  CHECK_EQ_INT(hk_int(&k, spin_us), 10);
  CHECK_EQ_INT(hk_given(&k, spin_us), 1);
  CHECK_EQ_INT(hk_int(&k, arena_size), 3ll << 29);
  CHECK(hk_double(&k, cycle_time) == 0.5);
  CHECK(hk_double(&k, kill_grace) == 5.0);
  CHECK_EQ_INT(hk_given(&k, kill_grace), 0);
  CHECK_EQ_INT(hk_int(&k, threads), 3);
  CHECK_EQ_INT(hk_int(&k, fusion_threshold), 1ll << 20);
  CHECK_EQ_INT(hk_int(&k, cache_capacity), 7);
  CHECK_EQ_INT(hk_int(&k, stall_check_disable), 1);
  CHECK_EQ_STR(hk_str(&k, log_level), "debug");
  CHECK_EQ_STR(hk_str(&k, timeline_filename), "/tmp/t.json");
  CHECK(hk_double(&k, heartbeat_timeout) == 0.25);
  CHECK_EQ_INT(hk_int(&k, heartbeat_timeout), 0); /* truncated */
  CHECK_EQ_STR(hk_str(&k, spin_us), "10");
  /* the values are copies: the list may go */
  char *mine = strdup("HORA_SPIN_US=77");
  char *one[] = {mine};
  CHECK_EQ_INT(hc_knobs_parse_env(&k, one, 1, "x", why, sizeof why), 0);
  free(mine);
  CHECK_EQ_INT(hk_int(&k, spin_us), 77);
  CHECK_EQ_STR(hk_str(&k, spin_us), "77");
  /* a later list overrides what it sets, and only that */
  char *later[] = {"HORA_THREADS=8", "HORA_SPIN_US=5"};
  CHECK_EQ_INT(hc_knobs_parse_env(&k, later, 1, "x", why, sizeof why), 0);
  CHECK_EQ_INT(hk_int(&k, threads), 8);
  CHECK_EQ_INT(hk_int(&k, spin_us), 77); /* past n: not read */
  CHECK_EQ_INT(hk_int(&k, arena_size), 3ll << 29);
  hc_knobs_free(&k);
  CHECK_EQ_INT(hk_int(&k, spin_us), 200);
  CHECK_EQ_INT(hk_given(&k, spin_us), 0);
  CHECK_EQ_STR(hk_str(&k, log_level), "warning");
  /* an empty list, or none */
  CHECK_EQ_INT(hc_knobs_parse_env(&k, NULL, 0, "x", why, sizeof why), 0);
  CHECK_EQ_INT(hk_int(&k, spin_us), 200);
}

/* A bad value is an error naming the variable, and nothing of the list is
 * taken. */
static void bad_case(char **env, const char *want) {
  struct hc_knobs k;
  char why[256] = "";
  hc_knobs_init(&k);
  char why2[64];
  CHECK_EQ_INT(hk_set(&k, threads, "2", why2, sizeof why2), 0);
  CHECK_EQ_INT(hc_knobs_parse_env(&k, env, SIZE_MAX, "the job's environment",
                                  why, sizeof why),
               -1);
  CHECK_EQ_STR(why, want);
  CHECK_EQ_INT(hk_int(&k, threads), 2);
  CHECK_EQ_INT(hk_int(&k, spin_us), 200);
  hc_knobs_free(&k);
}

static void test_bad_values(void) {
  char *spin[] = {"HORA_THREADS=4", "HORA_SPIN_US=-3x", NULL};
  bad_case(spin, "invalid HORA_SPIN_US value '-3x' in the job's environment: "
                 "expected a non-negative whole number of microseconds");
  char *grace[] = {"HORA_SPIN_US=1", "HORA_THREADS=4", "HORA_KILL_GRACE=soon",
                   NULL};
  bad_case(grace, "invalid HORA_KILL_GRACE value 'soon' in the job's "
                  "environment: expected a non-negative number of seconds");
  /* a bad alias is refused even behind a good HORA_* value (as horarun
   * refuses it) */
  char *alias[] = {"HORA_CYCLE_TIME=1", "HOROVOD_CYCLE_TIME=fast", NULL};
  bad_case(alias, "invalid HOROVOD_CYCLE_TIME value 'fast' in the job's "
                  "environment: expected a non-negative number of "
                  "milliseconds");
  char *size[] = {"HORA_ARENA_SIZE=lots", NULL};
  bad_case(size, "invalid HORA_ARENA_SIZE value 'lots' in the job's "
                 "environment: expected a size in bytes, like 64M (suffixes "
                 "K, M, G)");
  char *bool_[] = {"HORA_STALL_CHECK_DISABLE=true", NULL};
  bad_case(bool_, "invalid HORA_STALL_CHECK_DISABLE value 'true' in the "
                  "job's environment: expected 0 or 1");
  char *level[] = {"HOROVOD_LOG_LEVEL=loud", NULL};
  bad_case(level, "invalid HOROVOD_LOG_LEVEL value 'loud' in the job's "
                  "environment: expected trace, debug, info, warning, error "
                  "or fatal");
  char *noise[] = {"HORA_AUTOTUNE_GAUSSIAN_PROCESS_NOISE=1.5", NULL};
  bad_case(noise, "invalid HORA_AUTOTUNE_GAUSSIAN_PROCESS_NOISE value '1.5' "
                  "in the job's environment: expected a number from 0 to 1");
}

static void test_set(void) {
  struct hc_knobs k;
  char why[256] = "";
  hc_knobs_init(&k);
  CHECK_EQ_INT(hk_set(&k, heartbeat_timeout, "0.5", why, sizeof why), 0);
  CHECK(hk_double(&k, heartbeat_timeout) == 0.5);
  CHECK_EQ_INT(hk_set(&k, heartbeat_timeout, "1e+06", why, sizeof why), 0);
  CHECK(hk_double(&k, heartbeat_timeout) == 1e6);
  CHECK_EQ_INT(hk_set(&k, heartbeat_timeout, "-1", why, sizeof why), -1);
  CHECK_EQ_STR(why, "expected a non-negative number of seconds");
  CHECK(hk_double(&k, heartbeat_timeout) == 1e6); /* unchanged */
  CHECK_EQ_INT(hc_knobs_set(&k, (enum hc_knob)HC_NKNOBS, "1", why, sizeof why),
               -1);
  /* a job's environment goes over what was set before it */
  char *env[] = {"HORA_HEARTBEAT_TIMEOUT=2", NULL};
  CHECK_EQ_INT(hc_knobs_parse_env(&k, env, SIZE_MAX, "x", why, sizeof why), 0);
  CHECK(hk_double(&k, heartbeat_timeout) == 2.0);
  char *none[] = {"HORA_SPIN_US=1", NULL};
  CHECK_EQ_INT(hc_knobs_parse_env(&k, none, SIZE_MAX, "x", why, sizeof why), 0);
  CHECK(hk_double(&k, heartbeat_timeout) == 2.0);
  hc_knobs_free(&k);
}

/* Every knob of the table is read from its variable, and from its Horovod
 * alias, with its default as the value. */
static void test_every_knob(void) {
  char why[256] = "";
  for (size_t i = 0; i < hc_nparams; i++) {
    const struct hc_param *p = &hc_params[i];
    if (!*p->def) continue; /* an empty value is no value */
    const char *names[] = {p->env, p->hvd_env};
    for (size_t a = 0; a < 2; a++) {
      if (!names[a]) continue;
      char kv[256];
      hc_fmt(kv, sizeof kv, "%s=%s", names[a], p->def);
      char *env[] = {kv, NULL};
      struct hc_knobs k;
      hc_knobs_init(&k);
      struct hc_knob_value before = k.v[i];
      CHECK_EQ_INT(
          hc_knobs_parse_env(&k, env, SIZE_MAX, "x", why, sizeof why), 0);
      if (!k.v[i].own) TL_FAIL("%s not taken", names[a]);
      CHECK_EQ_STR(k.v[i].str, p->def);
      CHECK_EQ_INT(k.v[i].i, before.i);
      CHECK(k.v[i].d == before.d);
      CHECK(hc_knob_lookup(p, env, SIZE_MAX) == kv + strlen(names[a]) + 1);
      hc_knobs_free(&k);
    }
  }
}

static void test_lookup(void) {
  const struct hc_param *p = hc_param_find("fusion_threshold");
  char *both[] = {"HOROVOD_FUSION_THRESHOLD=2M", "HORA_FUSION_THRESHOLD=1M"};
  CHECK_EQ_STR(hc_knob_lookup(p, both, 2), "1M");
  CHECK_EQ_STR(hc_knob_lookup(p, both, 1), "2M");
  CHECK(hc_knob_lookup(p, both, 0) == NULL);
  char *empty[] = {"HORA_FUSION_THRESHOLD=", "HOROVOD_FUSION_THRESHOLD=", NULL};
  CHECK(hc_knob_lookup(p, empty, SIZE_MAX) == NULL);
  char *prefix[] = {"HORA_FUSION_THRESHOLDX=1", "HORA_FUSION_THRESHOL=2",
                    "HORA_FUSION_THRESHOLD", NULL};
  CHECK(hc_knob_lookup(p, prefix, SIZE_MAX) == NULL);
}

/* libhora and horarun read their own environment by the same rules; a bad
 * value there reads as the default. */
static void test_process_env(void) {
  unsetenv("HORA_SPIN_US");
  CHECK_EQ_INT(hc_param_int(spin_us), 200);
  setenv("HORA_SPIN_US", "33", 1);
  CHECK_EQ_INT(hc_param_int(spin_us), 33);
  setenv("HORA_SPIN_US", "-3", 1);
  CHECK_EQ_INT(hc_param_int(spin_us), 200);
  setenv("HORA_SPIN_US", " 5", 1);
  CHECK_EQ_INT(hc_param_int(spin_us), 200);
  unsetenv("HORA_SPIN_US");
  setenv("HORA_CACHE_CAPACITY", "", 1);
  setenv("HOROVOD_CACHE_CAPACITY", "9", 1);
  CHECK_EQ_INT(hc_param_int(cache_capacity), 9);
  unsetenv("HORA_CACHE_CAPACITY");
  unsetenv("HOROVOD_CACHE_CAPACITY");
  setenv("HORA_ARENA_SIZE", "64M", 1);
  CHECK_EQ_INT(hc_param_int(arena_size), 64ll << 20);
  CHECK(hc_param_double(arena_size) == (double)(64ll << 20));
  unsetenv("HORA_ARENA_SIZE");
  setenv("HORA_KILL_GRACE", "0.5", 1);
  CHECK(hc_param_double(kill_grace) == 0.5);
  unsetenv("HORA_KILL_GRACE");
  CHECK_EQ_STR(hc_param_str(log_level), "warning");
  CHECK(hc_param_str_named("no_such_knob") == NULL);
}

int main(void) {
  RUN(test_defaults);
  RUN(test_parse);
  RUN(test_bad_values);
  RUN(test_set);
  RUN(test_every_knob);
  RUN(test_lookup);
  RUN(test_process_env);
  TL_EXIT();
}
