/* state.c -- what every part of libhora shares: the process's one hora
 * state (struct hl_state) and the calling thread's last error. The bottom
 * of libhora: arena.c, ops.c and client.c call it; it calls none of them. */
#define HC_LOG_SUB HC_SUB_CLIENT
#include <stdarg.h>
#include <stdio.h>

#include "client.h"

struct hl_state hl = {
    .sock = -1,
    .efd = -1,
    .sq_lock = PTHREAD_MUTEX_INITIALIZER,
    .ps_lock = PTHREAD_MUTEX_INITIALIZER,
    .cq_lock = PTHREAD_MUTEX_INITIALIZER,
    .op_lock = PTHREAD_MUTEX_INITIALIZER,
    .arena_lock = PTHREAD_MUTEX_INITIALIZER,
};

static __thread char last_error[HP_MSG_MAX + 128];

int hl_error(int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return err;
}

void hl_clear_error(void) { last_error[0] = '\0'; }

const char *hora_last_error(void) { return last_error; }
