/* params.c -- every knob in one described table. horarun's --help, the
 * environment horad and libhora read, and the man pages come from here. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

const struct hc_param hc_params[] = {
    {"arena_size", "HORA_ARENA_SIZE", NULL, "--arena-size", HC_P_SIZE, "128M",
     "bytes of shared arena per rank (hora_alloc memory and staging of small "
     "tensors); suffixes K, M, G"},
    {"chunk_size", "HORA_CHUNK_SIZE", NULL, "--chunk-size", HC_P_SIZE, "8M",
     "bytes per chunk when a tensor is streamed through the staging area"},
    {"spin_us", "HORA_SPIN_US", NULL, "--spin-us", HC_P_INT, "200",
     "microseconds a waiting side polls shared memory before it sleeps"},
    {"threads", "HORA_THREADS", NULL, "--threads", HC_P_INT, "0",
     "reduction threads in horad (0: one per online core)"},
    {"start_timeout", "HORA_START_TIMEOUT", "HOROVOD_START_TIMEOUT",
     "--start-timeout", HC_P_INT, "30",
     "seconds the job may take to start before horarun gives up"},
    {"log_level", "HORA_LOG_LEVEL", "HOROVOD_LOG_LEVEL", "--log-level",
     HC_P_STRING, "warning",
     "trace, debug, info, warning, error or fatal"},
    {"stall_check_time", "HORA_STALL_CHECK_TIME_SECONDS",
     "HOROVOD_STALL_CHECK_TIME_SECONDS", "--stall-check-warning-time-seconds",
     HC_P_INT, "60",
     "seconds before horad warns that some ranks have not submitted a "
     "tensor others wait on (0: never)"},
    {"stall_shutdown_time", "HORA_STALL_SHUTDOWN_TIME_SECONDS",
     "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS",
     "--stall-check-shutdown-time-seconds", HC_P_INT, "0",
     "seconds after which such a stalled operation fails with HORA_ESTALL "
     "on the ranks that wait (0: never)"},
    {"kill_grace", "HORA_KILL_GRACE", NULL, NULL, HC_P_DOUBLE, "5",
     "seconds between SIGTERM and SIGKILL when a job is torn down"},
};
const size_t hc_nparams = HC_ARRAY_SIZE(hc_params);

const struct hc_param *hc_param_find(const char *name) {
  for (size_t i = 0; i < hc_nparams; i++)
    if (!strcmp(hc_params[i].name, name)) return &hc_params[i];
  return NULL;
}

const char *hc_param_str(const char *name) {
  const struct hc_param *p = hc_param_find(name);
  if (!p) return NULL;
  const char *v = getenv(p->env);
  if ((!v || !*v) && p->hvd_env) v = getenv(p->hvd_env);
  return v && *v ? v : p->def;
}

long long hc_parse_size(const char *s) {
  if (!s || !*s) return -1;
  char *end;
  double v = strtod(s, &end);
  if (end == s || v < 0) return -1;
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
  if (*end) return -1;
  return (long long)(v * mult);
}

long long hc_param_int(const char *name) {
  const struct hc_param *p = hc_param_find(name);
  const char *v = hc_param_str(name);
  if (!p || !v) return 0;
  if (p->type == HC_P_SIZE) {
    long long n = hc_parse_size(v);
    return n >= 0 ? n : hc_parse_size(p->def);
  }
  char *end;
  long long n = strtoll(v, &end, 10);
  if (end == v || *end) n = strtoll(p->def, NULL, 10);
  return n;
}

double hc_param_double(const char *name) {
  const struct hc_param *p = hc_param_find(name);
  const char *v = hc_param_str(name);
  if (!p || !v) return 0;
  char *end;
  double d = strtod(v, &end);
  if (end == v || *end) d = strtod(p->def, NULL);
  return d;
}
