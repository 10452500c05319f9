/* err.c -- error names and messages, dtype and op names. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

const char *hora_strerror(int err) {
  switch (err) {
  case 0:
    return "success";
#define HORA_ERR_MSG(name, val, msg)                                           \
  case (val):                                                                  \
    return msg;
    HORA_ERRNO_MAP(HORA_ERR_MSG)
#undef HORA_ERR_MSG
  default:
    return "unknown error";
  }
}

const char *hora_err_name(int err) {
  switch (err) {
  case 0:
    return "HORA_OK";
#define HORA_ERR_NAME(name, val, msg)                                          \
  case (val):                                                                  \
    return "HORA_" #name;
    HORA_ERRNO_MAP(HORA_ERR_NAME)
#undef HORA_ERR_NAME
  default:
    return "HORA_E?";
  }
}

size_t hora_dtype_size(hora_dtype_t dtype) {
  static const size_t sz[HORA_DTYPE_COUNT] = {1, 1, 2, 4, 8, 2, 2, 4, 8};
  return (unsigned)dtype < HORA_DTYPE_COUNT ? sz[dtype] : 0;
}

const char *hora_dtype_name(hora_dtype_t dtype) {
  static const char *const names[HORA_DTYPE_COUNT] = {
      "uint8",   "int8",     "int16",   "int32",  "int64",
      "float16", "bfloat16", "float32", "float64"};
  return (unsigned)dtype < HORA_DTYPE_COUNT ? names[dtype] : "invalid-dtype";
}

const char *hora_op_name(hora_op_t op) {
  static const char *const names[HORA_OP_COUNT] = {
      "average", "sum", "min", "max", "product", "adasum"};
  return (unsigned)op < HORA_OP_COUNT ? names[op] : "invalid-op";
}

const char *hora_version(void) {
#ifdef HORA_GIT_SHA
  return HORA_VERSION_STRING " (" HORA_GIT_SHA ")";
#else
  return HORA_VERSION_STRING;
#endif
}

const char *hc_signal_name(int sig) {
  static __thread char buf[16];
  switch (sig) {
#define S(x)                                                                   \
  case x:                                                                      \
    return #x;
    S(SIGHUP) S(SIGINT) S(SIGQUIT) S(SIGILL) S(SIGTRAP) S(SIGABRT) S(SIGBUS)
    S(SIGFPE) S(SIGKILL) S(SIGUSR1) S(SIGSEGV) S(SIGUSR2) S(SIGPIPE)
    S(SIGALRM) S(SIGTERM) S(SIGCHLD) S(SIGCONT) S(SIGSTOP) S(SIGTSTP)
    S(SIGTTIN) S(SIGTTOU) S(SIGXCPU) S(SIGXFSZ) S(SIGSYS)
#undef S
  default:
    snprintf(buf, sizeof buf, "signal %d", sig);
    return buf;
  }
}
