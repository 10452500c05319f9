/* common.h -- helpers every hora component shares: logging, time, the table
 * of parameters, small string utilities. Not protocol (that is proto/). */
#ifndef HORA_COMMON_H
#define HORA_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "hora.h"

#define HC_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define HC_MIN(a, b) ((a) < (b) ? (a) : (b))
#define HC_MAX(a, b) ((a) > (b) ? (a) : (b))
#define HC_CACHELINE 64

/* ---- logging ---------------------------------------------------------- */
enum hc_level { HC_TRACE, HC_DEBUG, HC_INFO, HC_WARNING, HC_ERROR, HC_FATAL };

/* Subsystems, each with its own level. A file says which it belongs to by
 * defining HC_LOG_SUB before it includes this header (#define HC_LOG_SUB
 * HC_SUB_MESH); the others log as "general". */
#define HC_LOG_SUBS(X)                                                         \
  X(GENERAL, "general")                                                        \
  X(MESH, "mesh")                                                              \
  X(ENGINE, "engine")                                                          \
  X(NEGO, "nego")                                                              \
  X(COORD, "coord")                                                            \
  X(CTL, "ctl")                                                                \
  X(SPAWN, "spawn")                                                            \
  X(RINGS, "rings")                                                            \
  X(LOCAL, "local")                                                            \
  X(SESSION, "session")                                                        \
  X(METRICS, "metrics")                                                        \
  X(CLIENT, "client")
enum hc_log_sub {
#define HC_SUB_ENUM(id, name) HC_SUB_##id,
  HC_LOG_SUBS(HC_SUB_ENUM)
#undef HC_SUB_ENUM
  HC_NSUBS
};
#ifndef HC_LOG_SUB
#define HC_LOG_SUB HC_SUB_GENERAL
#endif
extern unsigned char hc_log_levels[HC_NSUBS]; /* read by HC_LOG */

/* Sets the component name printed in front of each line ("horad") and the
 * level of every subsystem. */
void hc_log_start(const char *component, enum hc_level level);
/* hc_log_start() with the level of the log_level knob in this process's
 * environment (HORA_LOG_LEVEL / HOROVOD_LOG_LEVEL), else `deflevel`, then
 * the subsystems' levels of HORA_LOG (hc_log_apply_spec). */
void hc_log_init(const char *component, enum hc_level deflevel);
/* Sets the level of every subsystem. */
void hc_log_set_level(enum hc_level level);
/* The general subsystem's level. */
enum hc_level hc_log_level(void);
/* Parses "trace".."fatal" (any case, also "warn"); -1 when unknown. */
int hc_parse_level(const char *s);
/* A HORA_LOG value: comma-separated entries, each SUBSYSTEM:LEVEL
 * ("mesh:debug,engine:info") or a bare LEVEL for every subsystem, applied
 * in order. hc_log_check_spec() returns 0, or -1 naming the bad entry in
 * why; hc_log_apply_spec() sets the levels of a valid one (-1 and nothing
 * changed for a bad one). */
int hc_log_check_spec(const char *spec, char *why, size_t whylen);
int hc_log_apply_spec(const char *spec);
/* The name of subsystem s ("mesh"), or NULL. */
const char *hc_log_sub_name(int s);
void hc_log(enum hc_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
#define HC_LOG_ON(lvl) ((int)(lvl) >= (int)hc_log_levels[HC_LOG_SUB])
#define HC_LOG(lvl, ...)                                                       \
  do {                                                                         \
    if (HC_LOG_ON(lvl)) hc_log((lvl), __VA_ARGS__);                            \
  } while (0)
#define hc_debug(...) HC_LOG(HC_DEBUG, __VA_ARGS__)
#define hc_info(...) HC_LOG(HC_INFO, __VA_ARGS__)
#define hc_warn(...) HC_LOG(HC_WARNING, __VA_ARGS__)
#define hc_error(...) HC_LOG(HC_ERROR, __VA_ARGS__)

/* Rate-limited logging, for messages a rank or a peer can cause again and
 * again. Each call site keeps its own state (a static hc_ratelimit): the
 * first HC_LOG_BURST messages of a second are written, the rest counted,
 * and "N similar messages suppressed" is written once a second (from the
 * next message of that site, or from hc_log_flush_suppressed()). */
#define HC_LOG_BURST 5
struct hc_ratelimit {
  const char *site; /* "file.c:123" */
  uint64_t window;  /* start of the current second, hc_now_ns() */
  unsigned passed;  /* messages written in it */
  unsigned long long suppressed;
  enum hc_level level;
  struct hc_ratelimit *next; /* every site that has suppressed something */
  int listed;
};
/* 1 when the message may be written now; counts it otherwise. */
int hc_ratelimit_pass(struct hc_ratelimit *rl, enum hc_level level,
                      const char *site);
/* Writes the counts of suppressed messages whose second is over (all of
 * them when `all`); a daemon calls it from a periodic timer and at exit. */
void hc_log_flush_suppressed(int all);
#define HC_STR_(x) #x
#define HC_STR(x) HC_STR_(x)
#define HC_LOG_RL(lvl, ...)                                                    \
  do {                                                                         \
    static struct hc_ratelimit hc_rl_;                                         \
    if (HC_LOG_ON(lvl) &&                                                      \
        hc_ratelimit_pass(&hc_rl_, (lvl), __FILE__ ":" HC_STR(__LINE__)))      \
      hc_log((lvl), __VA_ARGS__);                                              \
  } while (0)
#define hc_info_rl(...) HC_LOG_RL(HC_INFO, __VA_ARGS__)
#define hc_warn_rl(...) HC_LOG_RL(HC_WARNING, __VA_ARGS__)
#define hc_error_rl(...) HC_LOG_RL(HC_ERROR, __VA_ARGS__)

/* Returns the code and, at debug level, leaves a file:line breadcrumb. */
#define HC_CHECK(call)                                                         \
  do {                                                                         \
    int hc_rc_ = (call);                                                       \
    if (hc_rc_ < 0) {                                                          \
      hc_debug("%s:%d: %s -> %s", __FILE__, __LINE__, #call,                   \
               hora_err_name(hc_rc_));                                         \
      return hc_rc_;                                                           \
    }                                                                          \
  } while (0)

/* ---- time ------------------------------------------------------------- */
uint64_t hc_now_ns(void); /* CLOCK_MONOTONIC */

/* One pause of a spin-wait loop (the CPU's hint; nothing elsewhere). */
static inline void hc_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* ---- parameters ------------------------------------------------------- */
enum hc_ptype { HC_P_INT, HC_P_SIZE, HC_P_DOUBLE, HC_P_STRING, HC_P_BOOL };

struct hc_param {
  const char *name;    /* key used in code and YAML */
  const char *env;     /* HORA_* variable */
  const char *hvd_env; /* Horovod alias, or NULL */
  const char *flag;    /* horarun flag, or NULL */
  enum hc_ptype type;
  const char *def;  /* default, as text */
  const char *help; /* one line */
  const char *unit; /* of a number: "seconds", "bytes", ...; or NULL */
  double max;       /* largest value of a number; 0: the type's */
};

extern const struct hc_param hc_params[];
extern const size_t hc_nparams;

const struct hc_param *hc_param_find(const char *name);
/* Every knob's name, in the order of hc_params[] (params.c checks it). The
 * accessors below take the bare name, so a misspelt one does not compile:
 * hc_param_int(spin_us). *_named() look a name up at run time. */
#define HC_KNOBS(X) \
  X(arena_size) \
  X(chunk_size) \
  X(spin_us) \
  X(threads) \
  X(start_timeout) \
  X(log_level) \
  X(stall_check_time) \
  X(stall_shutdown_time) \
  X(deadlock_action) \
  X(heartbeat_timeout) \
  X(max_pending) \
  X(kill_grace) \
  X(fusion_threshold) \
  X(cycle_time) \
  X(cache_capacity) \
  X(hierarchical_allreduce) \
  X(hierarchical_allgather) \
  X(torus_allreduce) \
  X(autotune) \
  X(autotune_log_file) \
  X(autotune_warmup_samples) \
  X(autotune_steps_per_sample) \
  X(autotune_bayes_opt_max_samples) \
  X(autotune_gaussian_process_noise) \
  X(timeline_filename) \
  X(timeline_mark_cycles) \
  X(stall_check_disable) \
  X(mpi_threads_disable) \
  X(num_nccl_streams) \
  X(thread_affinity) \
  X(gloo_timeout_seconds) \
  X(log_hide_timestamp) \
  X(log) \
  X(metrics_port) \
  X(fast_path_disable) \
  X(fast_path_wait) \
  X(adopt_size) \
  X(small_allreduce) \
  X(service_port) \
  X(service_key_file) \
  X(wire_integrity) \
  X(wire_encrypt) \
  X(service_auth) \
  X(munge_socket) \
  X(service_socket) \
  X(min_np) \
  X(max_np) \
  X(host_discovery_script) \
  X(slots_per_host) \
  X(elastic_timeout) \
  X(reset_limit) \
  X(blacklist_cooldown_range) \
  X(restart_failed_ranks) \
  X(elastic_in_place)

enum hc_knob {
#define HC_KNOB_ENUM(n) HC_KNOB_##n,
  HC_KNOBS(HC_KNOB_ENUM)
#undef HC_KNOB_ENUM
  HC_NKNOBS
};
#define HC_KNOB_NAME(n) ((void)HC_KNOB_##n, #n)

/* A knob's value in this process's environment, read as
 * hc_knob_lookup() reads a list (HORA_*, then the Horovod alias; empty is
 * unset), or the default when unset or not valid (hc_param_check). For
 * horarun and libhora; horad reads a job's knobs from its struct hc_knobs
 * and never from its environment. */
const char *hc_param_str_named(const char *name);
long long hc_param_int_named(const char *name);
double hc_param_double_named(const char *name);
#define hc_param_str(n) hc_param_str_named(HC_KNOB_NAME(n))
#define hc_param_int(n) hc_param_int_named(HC_KNOB_NAME(n))
#define hc_param_double(n) hc_param_double_named(HC_KNOB_NAME(n))
/* 0 when hc_params[] holds exactly HC_KNOBS, in order; else the index of
 * the first that differs, plus one. */
size_t hc_params_check(void);
/* Parses "64M", "1G", "4096" into bytes; -1 when malformed or past
 * 2^62. */
long long hc_parse_size(const char *s);
/* Checks `value` for knob p: INT a whole number 0..INT_MAX (digits only),
 * SIZE one hc_parse_size() reads, DOUBLE a finite number >= 0, each at
 * most p->max when set; BOOL 0 or 1; log_level a level; another STRING
 * anything not empty. Returns 0, or -1 with "expected ..." (the type and
 * the unit, e.g. "expected a non-negative number of seconds") in why.
 * Every component that reads a knob from outside can call it. */
int hc_param_check(const struct hc_param *p, const char *value, char *why,
                   size_t whylen);

/* ---- knobs parsed once ------------------------------------------------- */
/* The rules every component reads knobs' variables by, from a list of
 * "NAME=value" strings (an environment vector: n entries, or fewer when a
 * NULL comes first; SIZE_MAX for a NULL-terminated one): a knob's HORA_*
 * variable when it is not empty, else its Horovod alias when that is not
 * empty, else it is unset. The first entry of a name counts (as getenv). */
const char *hc_knob_lookup(const struct hc_param *p, char *const envv[],
                           size_t n);

/* The value of every knob, one typed slot each, parsed once: a job's knobs
 * in horad. Read with the bare name, so a misspelt one does not compile:
 * hk_int(&job->knobs, spin_us). */
struct hc_knob_value {
  const char *str; /* as text: the default, or own */
  char *own;       /* a copy of the value given, or NULL */
  long long i;     /* INT, BOOL; SIZE in bytes; DOUBLE truncated */
  double d;        /* any number */
};
struct hc_knobs {
  struct hc_knob_value v[HC_NKNOBS];
};
#define hk_int(k, n) ((k)->v[HC_KNOB_##n].i)
#define hk_double(k, n) ((k)->v[HC_KNOB_##n].d)
#define hk_str(k, n) ((k)->v[HC_KNOB_##n].str)
/* 1 when the knob was given (set or parsed), 0 at its default. */
#define hk_given(k, n) ((k)->v[HC_KNOB_##n].own != NULL)
#define hk_set(k, n, value, why, whylen)                                       \
  hc_knobs_set((k), HC_KNOB_##n, (value), (why), (whylen))

/* Every knob at its default (nothing to free). */
void hc_knobs_init(struct hc_knobs *k);
/* Frees the values given; every knob is at its default again. */
void hc_knobs_free(struct hc_knobs *k);
/* Sets knob i to a copy of value after checking it (hc_param_check).
 * Returns 0, or -1 with "expected ..." (or "out of memory") in why, k
 * unchanged. */
int hc_knobs_set(struct hc_knobs *k, enum hc_knob i, const char *value,
                 char *why, size_t whylen);
/* Takes every knob set in envv (hc_knob_lookup's rules) into k; the others
 * keep their values. Every knob variable that is set is checked first, the
 * Horovod alias too, so that nothing is taken from a list that holds a bad
 * one: -1 with "invalid NAME value 'v' in WHERE: expected ..." in why, k
 * unchanged (or "out of memory"), else 0. `where` names the list: "the
 * environment". */
int hc_knobs_parse_env(struct hc_knobs *k, char *const envv[], size_t n,
                       const char *where, char *why, size_t whylen);

/* ---- strings ---------------------------------------------------------- */
/* snprintf into a fixed buffer; never overflows, always terminated. */
void hc_fmt(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const char *hc_signal_name(int sig); /* "SIGKILL" */

/* ---- join directories (files.c) ------------------------------------------ */
/* Ranks that another launcher started find their way in to the job in
 * DIR/hora-UID/join-KEY (libclient/join.c, daemon/spawn.c). */
#define HC_JOIN_KEY_MAX 150
/* 1 when key is a join key: 1 to HC_JOIN_KEY_MAX of [A-Za-z0-9._-], not
 * starting with '.' (a file name part). */
int hc_join_key_ok(const char *key);
/* Makes dir (0700) when missing. 0, or -1 with why ("cannot create ...",
 * "... is not a directory private to uid N (mode 0700)") when it is not a
 * directory of this user that no one else may use. */
int hc_private_dir(const char *dir, char *why, size_t whylen);

/* A connection to the unix stream socket at path (blocking, or not: then
 * a listener with a full backlog answers -EAGAIN), close-on-exec; *owner
 * (when not NULL): the uid of the process that listens there (the
 * kernel's word, SO_PEERCRED), or (uid_t)-1 when it cannot be told.
 * Returns the descriptor, or -errno (-ENAMETOOLONG for a path too long,
 * -ECONNREFUSED where nothing listens). */
int hc_unix_connect(const char *path, int nonblock, uid_t *owner);

#endif
