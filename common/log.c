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
static enum hc_level log_level = HC_WARNING;

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
  log_level = level;
}

void hc_log_set_level(enum hc_level level) { log_level = level; }
enum hc_level hc_log_level(void) { return log_level; }

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
