/* params.c -- every knob in one described table. horarun's --help, the
 * environment horad and libhora read, and the man pages come from here. */
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

const struct hc_param hc_params[] = {
    {"arena_size", "HORA_ARENA_SIZE", NULL, "--arena-size", HC_P_SIZE, "128M",
     "bytes of shared arena per rank (hora_alloc memory, hora.torch's arena "
     "tensors and DDP buckets, staging of the tensors that fit); suffixes "
     "K, M, G",
     "bytes", 0},
    {"chunk_size", "HORA_CHUNK_SIZE", NULL, "--chunk-size", HC_P_SIZE, "8M",
     "bytes per chunk when a tensor is streamed through the staging area; "
     "on one host, also the piece of a larger one in the arena run at a "
     "time (higher priorities go between pieces)",
     "bytes", 0},
    {"spin_us", "HORA_SPIN_US", NULL, "--spin-us", HC_P_INT, "200",
     "microseconds a waiting side polls shared memory before it sleeps",
     "microseconds", 0},
    {"threads", "HORA_THREADS", NULL, "--threads", HC_P_INT, "0",
     "reduction threads in horad (0: one per online core)",
     "threads", 0},
    {"start_timeout", "HORA_START_TIMEOUT", "HOROVOD_START_TIMEOUT",
     "--start-timeout", HC_P_INT, "30",
     "seconds the job may take to start before horarun gives up",
     "seconds", 0},
    {"log_level", "HORA_LOG_LEVEL", "HOROVOD_LOG_LEVEL", "--log-level",
     HC_P_STRING, "warning",
     "trace, debug, info, warning, error or fatal",
     NULL, 0},
    {"stall_check_time", "HORA_STALL_CHECK_TIME_SECONDS",
     "HOROVOD_STALL_CHECK_TIME_SECONDS", "--stall-check-warning-time-seconds",
     HC_P_INT, "60",
     "seconds before horad warns that some ranks have not submitted a "
     "tensor others wait on (0: never)",
     "seconds", 0},
    {"stall_shutdown_time", "HORA_STALL_SHUTDOWN_TIME_SECONDS",
     "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS",
     "--stall-check-shutdown-time-seconds", HC_P_INT, "600",
     "seconds after which such a stalled operation fails with HORA_ESTALL "
     "on the ranks that wait (0: never; Horovod's default is never)",
     "seconds", 0},
    {"deadlock_action", "HORA_DEADLOCK_ACTION", NULL, "--deadlock-action",
     HC_P_STRING, "fail",
     "when every rank an operation needs waits in hora on an operation that "
     "cannot complete: fail (every wait fails with HORA_EDEADLOCK within a "
     "second, naming each rank's wait, and the job ends), warn (say so once "
     "and go on waiting), or off",
     NULL, 0},
    {"heartbeat_timeout", "HORA_HEARTBEAT_TIMEOUT", NULL, "--heartbeat-timeout",
     HC_P_DOUBLE, "3",
     "seconds of silence after which a host of a multi-host job is declared "
     "lost (its daemons exchange heartbeats several times a second)",
     "seconds", 0},
    {"max_pending", "HORA_MAX_PENDING", NULL, NULL, HC_P_INT, "1048576",
     "operations of one rank horad holds at most (submitted, their result "
     "not yet handed back; about 0.5 KiB each); a rank with more waits in "
     "submission until some complete. The default is libhora's own limit",
     "operations", 1048576},
    {"kill_grace", "HORA_KILL_GRACE", NULL, NULL, HC_P_DOUBLE, "5",
     "seconds between SIGTERM and SIGKILL when a job is torn down",
     "seconds", 0},
    /* Horovod's tuning parameters (horovodrun's flags and --config-file
     * keys). A flag sets them in the environment of every rank under both
     * names, as horovodrun would, so that code reading them sees the
     * value; horad acts on those whose help says so. */
    {"fusion_threshold", "HORA_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD",
     "--fusion-threshold-mb", HC_P_SIZE, "128M",
     "tensor fusion across hosts: allreduces decided together, alike in "
     "dtype, op and scale factors and in the ranks' arenas, run as one "
     "collective of at most this many bytes (and at most 256 KiB: larger "
     "ones gain nothing). The flag takes MiB (0: no fusion), the variables "
     "hold bytes, as with horovodrun",
     "bytes", 0},
    {"cycle_time", "HORA_CYCLE_TIME", "HOROVOD_CYCLE_TIME", "--cycle-time-ms",
     HC_P_DOUBLE, "1",
     "milliseconds a decision may wait at the coordinator for others to "
     "fuse with, while its host has work of the set queued (0: none "
     "waits, nothing is fused); hora negotiates as requests arrive, with "
     "no fixed cycle",
     "milliseconds", 0},
    {"cache_capacity", "HORA_CACHE_CAPACITY", "HOROVOD_CACHE_CAPACITY",
     "--cache-capacity", HC_P_INT, "1024",
     "entries of the response cache (0: off): operations negotiated "
     "before are named between hosts by a number, not by their name and "
     "metadata",
     "entries", 0},
    {"hierarchical_allreduce", "HORA_HIERARCHICAL_ALLREDUCE",
     "HOROVOD_HIERARCHICAL_ALLREDUCE", "--hierarchical-allreduce", HC_P_BOOL,
     "",
     "Horovod's hierarchical allreduce. Unset or 1: hierarchical (each "
     "host's ranks reduced there, then a ring of hosts); given as 0: one "
     "flat ring over every rank, which sends more between hosts when a "
     "host has several ranks. For Adasum, 1 averages each host's ranks "
     "and runs the tree over the hosts; otherwise the tree is over all "
     "ranks",
     NULL, 0},
    {"hierarchical_allgather", "HORA_HIERARCHICAL_ALLGATHER",
     "HOROVOD_HIERARCHICAL_ALLGATHER", "--hierarchical-allgather", HC_P_BOOL,
     "",
     "Horovod's hierarchical allgather. Unset or 1: hierarchical (each "
     "host's block straight to every other host); given as 0: round a "
     "flat ring, each host sending to the next one only",
     NULL, 0},
    {"torus_allreduce", "HORA_TORUS_ALLREDUCE", "HOROVOD_TORUS_ALLREDUCE",
     "--torus-allreduce", HC_P_BOOL, "0",
     "Horovod's 2-D torus allreduce; passed to the ranks, not used by hora",
     NULL, 0},
    {"autotune", "HORA_AUTOTUNE", "HOROVOD_AUTOTUNE", "--autotune", HC_P_BOOL,
     "0", "Horovod's autotuning: host 0's horad tunes the fusion threshold "
     "and cycle time (those not given) on the job's own steps, then keeps "
     "the best",
     NULL, 0},
    {"autotune_log_file", "HORA_AUTOTUNE_LOG", "HOROVOD_AUTOTUNE_LOG",
     "--autotune-log-file", HC_P_STRING, "",
     "CSV file of the autotuning samples (relative to the job's directory), "
     "the best trial last",
     NULL, 0},
    {"autotune_warmup_samples", "HORA_AUTOTUNE_WARMUP_SAMPLES",
     "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "--autotune-warmup-samples", HC_P_INT,
     "3", "autotuning samples discarded at the start",
     "samples", 0},
    {"autotune_steps_per_sample", "HORA_AUTOTUNE_STEPS_PER_SAMPLE",
     "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "--autotune-steps-per-sample",
     HC_P_INT, "10", "steps per autotuning sample (a step: a busy period "
     "of host 0 that moved data)",
     "steps", 0},
    {"autotune_bayes_opt_max_samples", "HORA_AUTOTUNE_BAYES_OPT_MAX_SAMPLES",
     "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES",
     "--autotune-bayes-opt-max-samples", HC_P_INT, "20",
     "trials of autotuning's Bayesian optimization, each the median of 3 "
     "samples",
     "samples", 0},
    {"autotune_gaussian_process_noise",
     "HORA_AUTOTUNE_GAUSSIAN_PROCESS_NOISE",
     "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE",
     "--autotune-gaussian-process-noise", HC_P_DOUBLE, "0.8",
     "noise of autotuning's Gaussian process, from 0 to 1",
     NULL, 1},
    {"timeline_filename", "HORA_TIMELINE", "HOROVOD_TIMELINE",
     "--timeline-filename", HC_P_STRING, "",
     "Horovod's timeline: a Chrome trace of every operation of every host, "
     "written by host 0's horad (relative to the job's directory; DYNAMIC: "
     "none until start_timeline())",
     NULL, 0},
    {"timeline_mark_cycles", "HORA_TIMELINE_MARK_CYCLES",
     "HOROVOD_TIMELINE_MARK_CYCLES", "--timeline-mark-cycles", HC_P_BOOL, "0",
     "CYCLE_START markers in the timeline: host 0's passes that took new "
     "submissions",
     NULL, 0},
    {"stall_check_disable", "HORA_STALL_CHECK_DISABLE",
     "HOROVOD_STALL_CHECK_DISABLE", "--no-stall-check", HC_P_BOOL, "0",
     "turn the stall check off: horarun then also sets the two stall check "
     "times above to 0 (never)",
     NULL, 0},
    {"mpi_threads_disable", "HORA_MPI_THREADS_DISABLE",
     "HOROVOD_MPI_THREADS_DISABLE", "--mpi-threads-disable", HC_P_BOOL, "0",
     "Horovod's MPI threading switch; hora uses no MPI, so the ranks only "
     "see the value",
     NULL, 0},
    {"num_nccl_streams", "HORA_NUM_NCCL_STREAMS", "HOROVOD_NUM_NCCL_STREAMS",
     "--num-nccl-streams", HC_P_INT, "1",
     "NCCL streams per device in Horovod; passed to the ranks, hora uses "
     "one",
     "streams", 0},
    {"thread_affinity", "HORA_THREAD_AFFINITY", "HOROVOD_THREAD_AFFINITY",
     "--thread-affinity", HC_P_INT, "0",
     "core for Horovod's background thread; passed to the ranks (hora has "
     "no background thread in the ranks)",
     NULL, 0},
    {"gloo_timeout_seconds", "HORA_GLOO_TIMEOUT_SECONDS",
     "HOROVOD_GLOO_TIMEOUT_SECONDS", "--gloo-timeout-seconds", HC_P_INT, "30",
     "Horovod's Gloo timeout; hora uses no Gloo, so the ranks only see the "
     "value",
     "seconds", 0},
    {"log_hide_timestamp", "HORA_LOG_HIDE_TIME", "HOROVOD_LOG_HIDE_TIME",
     "--log-without-timestamp", HC_P_BOOL, "0",
     "drop the time from Horovod's log lines; hora's log lines carry none, "
     "so the ranks only see the value",
     NULL, 0},
    {"log", "HORA_LOG", NULL, NULL, HC_P_STRING, "",
     "levels by subsystem, over log_level: comma-separated SUBSYSTEM:LEVEL "
     "entries or a bare LEVEL for all, applied in order "
     "(mesh:debug,engine:info); subsystems: general, mesh, engine, nego, "
     "coord, ctl, spawn, rings, local, session, metrics, client (libhora)",
     NULL, 0},
    {"metrics_port", "HORA_METRICS_PORT", NULL, "--metrics-port", HC_P_INT,
     "0",
     "TCP port on which each host's horad serves Prometheus metrics at "
     "/metrics, on every address of the host (0: none)",
     "port number", 65535},
    {"fast_path_disable", "HORA_FAST_PATH_DISABLE", NULL, "--no-fast-path",
     HC_P_BOOL, "0",
     "turn off the fast path for small operations: on one host, an "
     "allreduce or broadcast of at most 4 KiB per rank that every rank of "
     "its process set has already run once by the same name is otherwise "
     "done by those ranks themselves in a shared segment, without a round "
     "trip through horad",
     NULL, 0},
    {"fast_path_wait", "HORA_FAST_PATH_WAIT_US", NULL, NULL, HC_P_INT, "2000",
     "microseconds a rank waits for its peers on the fast path before it "
     "hands the operation to horad (which then waits as long as it takes, "
     "with stall and deadlock checks)",
     "microseconds", 10000000},
    {"adopt_size", "HORA_ADOPT_SIZE", NULL, "--adopt-size", HC_P_SIZE, "1G",
     "bytes of each rank's shared segment, after its arena, for adopted "
     "memory: a buffer of 64 KiB or more outside the arena that malloc gave "
     "a mapping of its own (glibc does for large allocations, PyTorch's "
     "large CPU tensors among them) is mapped into the segment at its "
     "second operation, and horad reads and writes it where it lies from "
     "then on, instead of a copy into the arena and back at each one; "
     "address space only (the adopted pages replace the buffer's own); 0 "
     "turns adoption off",
     "bytes", 0},
    {"small_allreduce", "HORA_SMALL_ALLREDUCE", NULL, "--small-allreduce",
     HC_P_SIZE, "4K",
     "across hosts, an allreduce of at most this many bytes per rank travels "
     "with the negotiation: each host sends its part to the set's first "
     "host, which sends the result back with its decision (one round trip; "
     "the ring takes two more hops); 0: every allreduce takes the ring. At "
     "most 16K (8K for float16 and bfloat16, 2K for integer averages)",
     "bytes", 16384},
    {"service_port", "HORA_SERVICE_PORT", NULL, "--service-port", HC_P_INT,
     "17970",
     "--launcher service: the TCP port of the hosts' horad services",
     "port", 65535},
    {"service_key_file", "HORA_SERVICE_KEY_FILE", NULL, "--service-key-file",
     HC_P_STRING, "/etc/hora/cluster.key",
     "--launcher service: the cluster key file (64 hex digits, mode 0600), "
     "the same as the services'",
     NULL, 0},
    {"wire_integrity", "HORA_WIRE_INTEGRITY", NULL, "--wire-integrity",
     HC_P_BOOL, "0",
     "across hosts every frame carries a tag (AES-256-GCM's, under a key "
     "drawn from its connection's handshake) that covers control frames "
     "whole and data frames' headers; this makes it cover their data too "
     "(GHASH over every byte sent and received)",
     NULL, 0},
    {"wire_encrypt", "HORA_WIRE_ENCRYPT", NULL, "--wire-encrypt", HC_P_BOOL,
     "0",
     "across hosts, encrypt every frame's payload (AES-256-GCM under a key "
     "drawn from its connection's handshake; its tag checks it whole, "
     "data included): the job's data, environment and output are not "
     "readable on the network",
     NULL, 0},
    {"service_auth", "HORA_SERVICE_AUTH", NULL, "--service-auth", HC_P_STRING,
     "key",
     "--launcher service: how horarun proves who runs the job to the hosts' "
     "services, as they are configured: key (the cluster key file; the job "
     "runs as the services' user) or munge (a MUNGE credential of this "
     "user's; the job runs as this user)",
     NULL, 0},
    {"munge_socket", "HORA_MUNGE_SOCKET", NULL, "--munge-socket", HC_P_STRING,
     "/run/munge/munge.socket.2",
     "--service-auth munge: the local munged's socket",
     NULL, 0},
    {"service_socket", "HORA_SERVICE_SOCKET", NULL, "--service-socket",
     HC_P_STRING, "/run/hora/horad.sock",
     "--launcher service: this machine's service's unix socket; when a "
     "service of root's or this user's listens there, this machine's horad "
     "starts through it too "
     "(the kernel tells it who runs the job: no key or credential), else "
     "directly as without the service. none: always directly",
     NULL, 0},
    {"min_np", "HORA_MIN_NP", NULL, "--min-np", HC_P_INT, "0",
     "elastic: the fewest ranks the job may go on with after a host or rank "
     "is lost (0: -np's number, i.e. none may be lost). --min-np, --max-np "
     "or --host-discovery-script makes the job elastic",
     "ranks", 1 << 20},
    {"max_np", "HORA_MAX_NP", NULL, "--max-np", HC_P_INT, "0",
     "elastic: the most ranks the job runs with when it starts again (0: "
     "-np's number, else every slot of the usable hosts)",
     "ranks", 1 << 20},
    {"host_discovery_script", "HORA_HOST_DISCOVERY_SCRIPT", NULL,
     "--host-discovery-script", HC_P_STRING, "",
     "elastic: a command that prints the usable hosts, one 'HOST:SLOTS' (or "
     "'HOST') per line; run before each start of the job, and every second "
     "while one runs or while too few hosts are usable",
     NULL, 0},
    {"slots_per_host", "HORA_SLOTS_PER_HOST", NULL, "--slots-per-host",
     HC_P_INT, "0",
     "elastic: the slots of a host the discovery script names without "
     "':SLOTS' (0: 1)",
     "slots", 1 << 20},
    {"elastic_timeout", "HORA_ELASTIC_TIMEOUT", "HOROVOD_ELASTIC_TIMEOUT",
     "--elastic-timeout", HC_P_INT, "600",
     "elastic: seconds to wait for enough usable hosts (--min-np) before "
     "the job ends; when under 30, also the ranks' wait for the job to "
     "re-form in place",
     "seconds", 0},
    {"reset_limit", "HORA_RESET_LIMIT", NULL, "--reset-limit", HC_P_INT, "0",
     "elastic: the most times the job re-forms in place or starts again "
     "after a failure before it ends with the failure (0: no limit)",
     "resets", 0},
    {"blacklist_cooldown_range", "HORA_BLACKLIST_COOLDOWN_RANGE", NULL,
     "--blacklist-cooldown-range", HC_P_STRING, "",
     "elastic: 'MIN MAX' (or MIN,MAX) seconds a failed host stays out: MIN "
     "after its first failure, doubling with each further one, at most MAX "
     "(unset: a failed host stays out for the rest of the job, as Horovod)",
     NULL, 0},
    {"restart_failed_ranks", "HORA_RESTART_FAILED_RANKS", NULL,
     "--restart-failed-ranks", HC_P_INT, "0",
     "the most times horad starts again one rank that crashed (killed by a "
     "signal, or an exit status not 0, before shutting hora down), while "
     "the others wait for it in their reset (hora.elastic.run) instead of "
     "the job ending; per rank (0: a crashed rank ends the job)",
     "restarts", 1 << 20},
    {"elastic_in_place", "HORA_ELASTIC_IN_PLACE", NULL, "--elastic-in-place",
     HC_P_INT, "1",
     "elastic: 1, a job that loses a rank or host goes on in place: the "
     "daemons of the hosts not to blame keep their ranks' processes, "
     "numbered anew, and hora.elastic.run goes on from the last commit "
     "(while at least --min-np ranks are left); 0, the job starts again "
     "on the usable hosts",
     NULL, 1},
};
const size_t hc_nparams = HC_ARRAY_SIZE(hc_params);
_Static_assert(HC_ARRAY_SIZE(hc_params) == HC_NKNOBS,
               "hc_params[] and HC_KNOBS differ");

size_t hc_params_check(void) {
  static const char *const names[] = {
#define HC_KNOB_STR(n) #n,
      HC_KNOBS(HC_KNOB_STR)
#undef HC_KNOB_STR
  };
  for (size_t i = 0; i < hc_nparams; i++)
    if (strcmp(hc_params[i].name, names[i])) return i + 1;
  return 0;
}

const struct hc_param *hc_param_find(const char *name) {
  for (size_t i = 0; i < hc_nparams; i++)
    if (!strcmp(hc_params[i].name, name)) return &hc_params[i];
  return NULL;
}

/* The value of variable `name` in envv (see hc_knob_lookup), or NULL. */
static const char *env_get(char *const envv[], size_t n, const char *name) {
  size_t len = strlen(name);
  for (size_t i = 0; envv && i < n && envv[i]; i++)
    if (!strncmp(envv[i], name, len) && envv[i][len] == '=')
      return envv[i] + len + 1;
  return NULL;
}

const char *hc_knob_lookup(const struct hc_param *p, char *const envv[],
                           size_t n) {
  const char *v = env_get(envv, n, p->env);
  if ((!v || !*v) && p->hvd_env) v = env_get(envv, n, p->hvd_env);
  return v && *v ? v : NULL;
}

/* The value of knob p in this process's environment, when set and valid. */
static const char *own_env(const struct hc_param *p) {
  char why[160];
  const char *v = hc_knob_lookup(p, environ, SIZE_MAX);
  return v && hc_param_check(p, v, why, sizeof why) == 0 ? v : NULL;
}

const char *hc_param_str_named(const char *name) {
  const struct hc_param *p = hc_param_find(name);
  if (!p) return NULL;
  const char *v = own_env(p);
  return v ? v : p->def;
}

long long hc_parse_size(const char *s) {
  if (!s || !*s) return -1;
  char *end;
  /* no " 1", "-1" or "inf" (strtod would take them) */
  if (!isdigit((unsigned char)*s) && *s != '.') return -1;
  double v = strtod(s, &end);
  if (end == s || !isfinite(v) || v < 0) return -1;
  double mult = 1;
  switch (toupper((unsigned char)*end)) {
  case 'K': mult = 1024.0; end++; break;
  case 'M': mult = 1024.0 * 1024; end++; break;
  case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
  case '\0': break;
  default: return -1;
  }
  if (toupper((unsigned char)*end) == 'B') end++;
  if (toupper((unsigned char)*end) == 'I') end++;
  if (*end || v * mult > 0x1p62) return -1;
  return (long long)(v * mult);
}

/* "a non-negative number of seconds", "a number from 0 to 1". */
static void expect_number(const struct hc_param *p, const char *what,
                          char *why, size_t whylen) {
  if (p->max > 0)
    hc_fmt(why, whylen, "expected %s from 0 to %g%s%s", what, p->max,
           p->unit ? " " : "", p->unit ? p->unit : "");
  else
    hc_fmt(why, whylen, "expected a non-negative %s%s%s", what,
           p->unit ? " of " : "", p->unit ? p->unit : "");
}

int hc_param_check(const struct hc_param *p, const char *v, char *why,
                   size_t whylen) {
  char *end;
  switch (p->type) {
  case HC_P_INT: {
    size_t n = strspn(v, "0123456789");
    long long x = n && !v[n] && n <= 10 ? strtoll(v, &end, 10) : -1;
    if (x >= 0 && x <= INT_MAX && (p->max <= 0 || x <= p->max)) return 0;
    expect_number(p, p->max > 0 ? "a whole number" : "whole number", why,
                  whylen);
    return -1;
  }
  case HC_P_SIZE: {
    long long x = hc_parse_size(v);
    if (x >= 0 && (p->max <= 0 || x <= p->max)) return 0;
    if (x >= 0)
      hc_fmt(why, whylen, "expected a size of at most %.0f bytes", p->max);
    else
      hc_fmt(why, whylen,
             "expected a size in bytes, like 64M (suffixes K, M, G)");
    return -1;
  }
  case HC_P_DOUBLE: {
    int lead = isdigit((unsigned char)*v) || (*v == '.' && v[1]);
    double d = lead ? strtod(v, &end) : -1;
    if (lead && !*end && isfinite(d) && d >= 0 && (p->max <= 0 || d <= p->max))
      return 0;
    expect_number(p, p->max > 0 ? "a number" : "number", why, whylen);
    return -1;
  }
  case HC_P_STRING:
    if (!strcmp(p->name, "deadlock_action")) {
      if (!strcmp(v, "fail") || !strcmp(v, "warn") || !strcmp(v, "off"))
        return 0;
      hc_fmt(why, whylen, "expected fail, warn or off");
      return -1;
    }
    if (!strcmp(p->name, "service_auth")) {
      if (!strcmp(v, "key") || !strcmp(v, "munge")) return 0;
      hc_fmt(why, whylen, "expected key or munge");
      return -1;
    }
    if (!strcmp(p->name, "log_level")) {
      if (hc_parse_level(v) >= 0) return 0;
      hc_fmt(why, whylen, "expected trace, debug, info, warning, error or "
             "fatal");
      return -1;
    }
    if (!strcmp(p->name, "log")) return hc_log_check_spec(v, why, whylen);
    if (*v) return 0;
    hc_fmt(why, whylen, "expected a non-empty value");
    return -1;
  case HC_P_BOOL:
    if (!strcmp(v, "0") || !strcmp(v, "1")) return 0;
    hc_fmt(why, whylen, "expected 0 or 1");
    return -1;
  }
  hc_fmt(why, whylen, "expected a value of a known type");
  return -1;
}

/* Reads text, a valid value of p (or its default), into v. */
static void knob_value(const struct hc_param *p, const char *text,
                       struct hc_knob_value *v) {
  v->str = text;
  v->i = 0;
  v->d = 0;
  switch (p->type) {
  case HC_P_SIZE:
    v->i = hc_parse_size(text);
    v->d = (double)v->i;
    break;
  case HC_P_INT:
  case HC_P_BOOL:
    v->i = strtoll(text, NULL, 10);
    v->d = (double)v->i;
    break;
  case HC_P_DOUBLE:
    v->d = strtod(text, NULL);
    v->i = (long long)v->d;
    break;
  case HC_P_STRING:
    break;
  }
}

long long hc_param_int_named(const char *name) {
  const char *v = hc_param_str_named(name);
  if (!v) return 0;
  struct hc_knob_value kv;
  knob_value(hc_param_find(name), v, &kv);
  return kv.i;
}

double hc_param_double_named(const char *name) {
  const char *v = hc_param_str_named(name);
  if (!v) return 0;
  struct hc_knob_value kv;
  knob_value(hc_param_find(name), v, &kv);
  return kv.d;
}

/* ---- knobs parsed once ---------------------------------------------------- */

void hc_knobs_init(struct hc_knobs *k) {
  for (size_t i = 0; i < HC_NKNOBS; i++) {
    k->v[i].own = NULL;
    knob_value(&hc_params[i], hc_params[i].def, &k->v[i]);
  }
}

void hc_knobs_free(struct hc_knobs *k) {
  for (size_t i = 0; i < HC_NKNOBS; i++) free(k->v[i].own);
  hc_knobs_init(k);
}

int hc_knobs_set(struct hc_knobs *k, enum hc_knob i, const char *value,
                 char *why, size_t whylen) {
  if ((size_t)i >= HC_NKNOBS) {
    hc_fmt(why, whylen, "no such knob");
    return -1;
  }
  const struct hc_param *p = &hc_params[i];
  if (hc_param_check(p, value, why, whylen) < 0) return -1;
  char *copy = strdup(value);
  if (!copy) {
    hc_fmt(why, whylen, "out of memory");
    return -1;
  }
  free(k->v[i].own);
  k->v[i].own = copy;
  knob_value(p, copy, &k->v[i]);
  return 0;
}

int hc_knobs_parse_env(struct hc_knobs *k, char *const envv[], size_t n,
                       const char *where, char *why, size_t whylen) {
  char expect[200];
  for (size_t i = 0; i < HC_NKNOBS; i++) {
    const struct hc_param *p = &hc_params[i];
    const char *names[] = {p->env, p->hvd_env};
    for (size_t a = 0; a < HC_ARRAY_SIZE(names); a++) {
      const char *v = names[a] ? env_get(envv, n, names[a]) : NULL;
      if (!v || !*v || hc_param_check(p, v, expect, sizeof expect) == 0)
        continue;
      hc_fmt(why, whylen, "invalid %s value '%s' in %s: %s", names[a], v,
             where, expect);
      return -1;
    }
  }
  for (size_t i = 0; i < HC_NKNOBS; i++) {
    const char *v = hc_knob_lookup(&hc_params[i], envv, n);
    if (v && hc_knobs_set(k, (enum hc_knob)i, v, why, whylen) < 0) return -1;
  }
  return 0;
}

/* The log level knobs (log_level, then log) from the process environment;
 * the log itself (log.c) knows no knobs. */
void hc_log_init(const char *component, enum hc_level deflevel) {
  int l = hc_parse_level(
      hc_knob_lookup(hc_param_find("log_level"), environ, SIZE_MAX));
  hc_log_start(component, l >= 0 ? (enum hc_level)l : deflevel);
  const char *spec = hc_knob_lookup(hc_param_find("log"), environ, SIZE_MAX);
  if (spec) hc_log_apply_spec(spec); /* a bad one changes nothing */
}
