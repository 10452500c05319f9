/* log.c -- leveled logging to stderr, one whole line per write, and the
 * rate limiter for messages that others can cause without end. */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

static const char *log_component = "hora";
unsigned char hc_log_levels[HC_NSUBS] = {
#define HC_SUB_INIT(id, name) HC_WARNING,
    HC_LOG_SUBS(HC_SUB_INIT)
#undef HC_SUB_INIT
};
static const char *const sub_names[] = {
#define HC_SUB_NAME(id, name) name,
    HC_LOG_SUBS(HC_SUB_NAME)
#undef HC_SUB_NAME
};

int hc_parse_level(const char *s) {
  static const char *const names[] = {"trace", "debug", "info",
                                      "warning", "error", "fatal"};
  if (!s) return -1;
  for (size_t i = 0; i < HC_ARRAY_SIZE(names); i++)
    if (!strcasecmp(s, names[i])) return (int)i;
  if (!strcasecmp(s, "warn")) return HC_WARNING;
  return -1;
}

void hc_log_start(const char *component, enum hc_level level) {
  log_component = component;
  hc_log_set_level(level);
}

void hc_log_set_level(enum hc_level level) {
  for (size_t i = 0; i < HC_NSUBS; i++) hc_log_levels[i] = (unsigned char)level;
}
enum hc_level hc_log_level(void) {
  return (enum hc_level)hc_log_levels[HC_SUB_GENERAL];
}

const char *hc_log_sub_name(int s) {
  return s >= 0 && s < HC_NSUBS ? sub_names[s] : NULL;
}

/* Walks spec; with `set`, applies each entry. 0, or -1 (why). */
static int walk_spec(const char *spec, int set, char *why, size_t whylen) {
  const char *p = spec ? spec : "";
  if (!*p) {
    hc_fmt(why, whylen, "expected SUBSYSTEM:LEVEL or LEVEL entries, "
           "comma-separated");
    return -1;
  }
  while (*p) {
    size_t n = strcspn(p, ",");
    char ent[64], *colon;
    if (n == 0 || n >= sizeof ent) {
      hc_fmt(why, whylen, "%s entry '%.*s': expected SUBSYSTEM:LEVEL or "
             "LEVEL", n ? "overlong" : "empty", (int)HC_MIN(n, 40), p);
      return -1;
    }
    memcpy(ent, p, n);
    ent[n] = '\0';
    int sub = -1; /* all */
    const char *lv = ent;
    if ((colon = strchr(ent, ':'))) {
      *colon = '\0';
      lv = colon + 1;
      for (int i = 0; i < HC_NSUBS && sub < 0; i++)
        if (!strcasecmp(ent, sub_names[i])) sub = i;
      if (sub < 0) {
        char list[256];
        size_t k = 0;
        for (int i = 0; i < HC_NSUBS && k + 16 < sizeof list; i++)
          k += (size_t)snprintf(list + k, sizeof list - k, "%s%s",
                                i ? ", " : "", sub_names[i]);
        hc_fmt(why, whylen, "unknown subsystem '%s' (one of %s)", ent, list);
        return -1;
      }
    }
    int l = hc_parse_level(lv);
    if (l < 0) {
      hc_fmt(why, whylen, "unknown level '%s' in entry '%.*s' (trace, debug, "
             "info, warning, error or fatal)", lv, (int)n, p);
      return -1;
    }
    if (set && sub < 0) hc_log_set_level((enum hc_level)l);
    else if (set) hc_log_levels[sub] = (unsigned char)l;
    p += n;
    if (*p == ',') p++;
  }
  return 0;
}

int hc_log_check_spec(const char *spec, char *why, size_t whylen) {
  return walk_spec(spec, 0, why, whylen);
}

int hc_log_apply_spec(const char *spec) {
  char why[8];
  if (walk_spec(spec, 0, why, sizeof why) < 0) return -1;
  return walk_spec(spec, 1, why, sizeof why);
}

void hc_log(enum hc_level level, const char *fmt, ...) {
  static const char *const tag[] = {"TRACE", "DEBUG", "INFO",
                                    "WARNING", "ERROR", "FATAL"};
  int saved = errno;
  char line[2048];
  int n = snprintf(line, sizeof line, "%s[%d] %s: ", log_component,
                   (int)getpid(), tag[level]);
  va_list ap;
  va_start(ap, fmt);
  if (n > 0 && (size_t)n < sizeof line)
    n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  if ((size_t)n >= sizeof line - 1) n = (int)sizeof line - 2;
  line[n++] = '\n';
  ssize_t w = write(STDERR_FILENO, line, (size_t)n);
  (void)w;
  errno = saved;
}

/* ---- rate limiting (HC_LOG_RL) ------------------------------------------ */

#define RL_WINDOW_NS 1000000000ull

static pthread_mutex_t rl_lock = PTHREAD_MUTEX_INITIALIZER;
static struct hc_ratelimit *rl_sites; /* sites that have suppressed some */

static void rl_report(const struct hc_ratelimit *rl, unsigned long long n) {
  hc_log(rl->level, "%llu similar message%s suppressed (%s)", n,
         n == 1 ? "" : "s", rl->site);
}

int hc_ratelimit_pass(struct hc_ratelimit *rl, enum hc_level level,
                      const char *site) {
  uint64_t now = hc_now_ns();
  unsigned long long n = 0;
  pthread_mutex_lock(&rl_lock);
  if (!rl->site) {
    rl->site = site;
    rl->level = level;
  }
  if (!rl->window || now - rl->window >= RL_WINDOW_NS) {
    n = rl->suppressed; /* of a second that is over */
    rl->suppressed = 0;
    rl->window = now;
    rl->passed = 0;
  }
  int pass = rl->passed < HC_LOG_BURST;
  if (pass) {
    rl->passed++;
  } else {
    rl->suppressed++;
    if (!rl->listed) {
      rl->listed = 1;
      rl->next = rl_sites;
      rl_sites = rl;
    }
  }
  pthread_mutex_unlock(&rl_lock);
  if (n) rl_report(rl, n);
  return pass;
}

void hc_log_flush_suppressed(int all) {
  uint64_t now = hc_now_ns();
  pthread_mutex_lock(&rl_lock);
  for (struct hc_ratelimit *rl = rl_sites; rl; rl = rl->next) {
    if (!rl->suppressed || (!all && now - rl->window < RL_WINDOW_NS)) continue;
    rl_report(rl, rl->suppressed); /* hc_log takes no lock: no deadlock */
    rl->suppressed = 0;
  }
  pthread_mutex_unlock(&rl_lock);
}

void hc_fmt(char *buf, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, len, fmt, ap);
  va_end(ap);
  if (n < 0 && len) buf[0] = '\0';
}

uint64_t hc_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
