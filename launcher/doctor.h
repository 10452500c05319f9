/* doctor.h -- horarun --doctor: checks the hosts of a job before it runs
 * (ssh, horad and its version, the interfaces, the links between hosts in
 * both directions, /dev/shm, memory, locked memory, GPUs and NCCL), and
 * prints one table with a fix under each problem. */
#ifndef HORA_LAUNCHER_DOCTOR_H
#define HORA_LAUNCHER_DOCTOR_H

#include "hosts.h"
#include "opts.h"

/* Probes every host of l that has ranks with `horad --probe` (horad: the
 * path on this machine; o->horad_path, else the same, on the others) and
 * prints the table on stdout. Returns 0 when a job could run (warnings
 * allowed), HR_EXIT_LAUNCHER when a check failed or the probes could not
 * be started. */
int hr_doctor_run(const struct hr_opts *o, const struct hr_layout *l,
                  const char *horad);

#endif
