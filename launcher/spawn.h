/* spawn.h -- starting horad for a job, and the environment it and the ranks
 * get. Locally horad is a child of horarun on a socketpair; the ssh
 * transport for remote hosts will sit beside hr_spawn_local(). */
#ifndef HORA_LAUNCHER_SPAWN_H
#define HORA_LAUNCHER_SPAWN_H

#include <stddef.h>
#include <sys/types.h>

#include "opts.h"

#define HR_CONTROL_FD 3 /* horad's end of the control socket */

/* Where horad is: $HORA_HORAD when set, else `horad` in the directory of
 * horarun's own executable when it is there, else "horad" (looked up on
 * PATH when started). Returns a malloc'd string (caller frees), or NULL
 * when out of memory. */
char *hr_horad_path(void);

/* The environment of horad and of every rank: horarun's own, without
 * BASH_FUNC_* and OLDPWD (as horovodrun), with PYTHONUNBUFFERED=1 unless
 * it is set, and with every knob given as a flag set as its HORA_*
 * variable. Returns a NULL-terminated malloc'd vector (free with
 * hr_strv_free()) and its length in *n; NULL when out of memory. */
char **hr_job_env(const struct hr_opts *o, size_t *n);
void hr_strv_free(char **v);

/* Starts `horad --control-fd 3` on this machine in a session of its own
 * (so the terminal's ^C reaches only horarun), stdin from /dev/null,
 * stdout/stderr shared with horarun, fd 3 one end of a new socketpair and
 * every other fd closed. On success returns 0, *pid and *fd (horarun's end,
 * close-on-exec; the caller owns it); returns -1 with a reason in err when
 * horad could not be started (including when exec failed). */
/* In a child between fork and exec (async-signal-safe): default
 * dispositions for what horarun caught or ignored for itself, and no
 * blocked signals. */
void hr_child_signals(void);

/* With `boot` (a bootstrap line, see remote.h) horad also gets
 * --bootstrap and reads that line from its standard input, a pipe; with
 * `iface`, --iface IFACE. With `service` (this machine's service's unix
 * socket) what runs is `horad --service-client SERVICE -- ...` instead,
 * which passes fd 3 to the service for the horad it starts; its output
 * goes to horarun's stderr. */
int hr_spawn_local(const char *path, char *const envp[], const char *boot,
                   const char *iface, const char *service, pid_t *pid,
                   int *fd, char *err, size_t errlen);

#endif
