/* remote.h -- starting horad on another host over ssh. */
#ifndef HORA_LAUNCHER_REMOTE_H
#define HORA_LAUNCHER_REMOTE_H

#include <stddef.h>
#include <sys/types.h>

#include "opts.h"
#include "hosts.h"

/* The line horad reads first on its standard input: host index, the
 * rendezvous port (0 for horad on this machine), the job secret in hex
 * (never on a command line or in the environment: `ps` would show it) and
 * the heartbeat timeout in seconds, then "integrity" with --wire-integrity
 * and "encrypt" with --wire-encrypt (both ends of every link need these
 * before the job). */
void hr_boot_line(char *buf, size_t len, int host, int port,
                  const unsigned char *secret, size_t secret_len,
                  double heartbeat_timeout, int integrity, int encrypt);

/* The --iface value for host h: its own interface from the config, else
 * every --network-interface, comma separated; NULL when none. Returns a
 * malloc'd string (caller frees). */
char *hr_iface_arg(const struct hr_opts *o, const struct hr_host *h);

/* The ssh command that starts horad on host h: the system ssh, so the
 * user's ~/.ssh/config applies, in batch mode (a password prompt would
 * hang), with -p / -i / -l and the config's extra options, and as remote
 * command `exec 'horad' --rendezvous [--iface IF]`. Returns a
 * NULL-terminated malloc'd vector (free with hr_strv_free()), or NULL. */
char **hr_ssh_argv(const struct hr_opts *o, const struct hr_host *h,
                   const char *horad);
/* The same with another first argument than --rendezvous (a fixed word:
 * it is not quoted), such as --probe. */
char **hr_ssh_argv_mode(const struct hr_opts *o, const struct hr_host *h,
                        const char *horad, const char *mode);

/* The srun command that starts horad on host h as a job step of the
 * Slurm allocation horarun runs in (--launcher srun): one task on that
 * node, sharing the allocation's resources with the other steps
 * (--overlap), not bound to cores (its ranks are spawned by horad), ended
 * with its step; as command `horad MODE [--iface IF]`. Returns a
 * NULL-terminated malloc'd vector, or NULL. */
char **hr_srun_argv(const struct hr_opts *o, const struct hr_host *h,
                    const char *horad, const char *mode);

/* The address of this machine that traffic to host h leaves from (a UDP
 * socket connected towards it: no packet is sent), as text into buf; -1
 * when h does not resolve. */
int hr_route_addr(const struct hr_host *h, char *buf, size_t len);

/* The mpirun command that starts horad on host h (--launcher mpirun,
 * horovodrun's --mpi): one process on that host, which mpirun reaches
 * its own way (its rsh agent, ssh, given -p and -i; or a resource
 * manager's launcher); as command `horad MODE --launcher ADDR [--iface
 * IF]`, ADDR being where horarun listens as seen from h. NULL when out
 * of memory. */
char **hr_mpirun_argv(const struct hr_opts *o, const struct hr_host *h,
                      const char *horad, const char *mode, const char *addr);

/* The command that has the hora service on host h start horad
 * (--launcher service): this machine's `horad --service-client
 * HOST:PORT --key-file FILE -- --rendezvous [--iface IF]` (`--auth munge
 * --munge-socket PATH` in place of the key file with service_auth munge),
 * which relays horad's output and exit status as ssh would. Port, key
 * file and authentication are o's knobs. NULL when out of memory. */
char **hr_service_argv(const struct hr_opts *o, const struct hr_host *h,
                       const char *horad);

/* Whether horarun can reach every host of l other than this machine
 * through its hora service: the credentials of o's service_auth are here
 * (a readable key file, or munged's socket) and each host's service_port
 * accepts a connection within wait_ms (the connections are closed
 * unused; the service takes them for probes). Returns 1, or 0 with the
 * reason in why. */
int hr_service_answers(const struct hr_opts *o, const struct hr_layout *l,
                       int wait_ms, char *why, size_t whylen);

/* This machine's service's unix socket (o's service_socket) when a
 * service of root's or this user's listens there (a connection taken at
 * once and closed unused), else NULL: then this machine's horad starts
 * directly. */
const char *hr_service_socket(const struct hr_opts *o);

/* Starts argv[0] (looked up on PATH) in a session of its own with `line`
 * written to its standard input (then closed), stdout and stderr on a new
 * pipe: *out_fd, horarun's end, close-on-exec. Returns 0 with *pid, or -1
 * with a reason in err. */
int hr_spawn_ssh(char *const argv[], const char *line, pid_t *pid,
                 int *out_fd, char *err, size_t errlen);

#endif
