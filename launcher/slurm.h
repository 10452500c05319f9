/* slurm.h -- the hosts of a Slurm allocation, for horarun run inside one
 * (sbatch, salloc, srun): SLURM_JOB_NODELIST in Slurm's hostlist syntax
 * and the slots of each node from SLURM_TASKS_PER_NODE. */
#ifndef HORA_LAUNCHER_SLURM_H
#define HORA_LAUNCHER_SLURM_H

#include <stddef.h>

#include "hosts.h"

/* Expands a Slurm hostlist: comma-separated names, each of which may hold
 * bracketed ranges ("node[01-04,07]", "rack[1-2]-n[1-3]": every
 * combination, in order; a range keeps the width of its first number's
 * zero padding). At most max names. Returns 0 and a malloc'd array of
 * malloc'd names (free with hr_slurm_names_free()), or -1 with a reason in
 * err that quotes the list. */
int hr_slurm_hostlist(const char *spec, size_t max, char ***names, size_t *n,
                      char *err, size_t errlen);
void hr_slurm_names_free(char **names, size_t n);

/* Expands SLURM_TASKS_PER_NODE's syntax, "2(x3),1" (2 on each of three
 * nodes, then 1), into counts[0..n), which must be exactly n nodes. 0, or
 * -1 with a reason in err. */
int hr_slurm_tasks(const char *spec, int *counts, size_t n, char *err,
                   size_t errlen);

/* The hosts of the allocation described by nodelist (SLURM_JOB_NODELIST)
 * and tasks (SLURM_TASKS_PER_NODE, or NULL: one slot per node), in its
 * order. Returns 0 and a host list (free with hr_hosts_free()), or -1 with
 * a reason in err naming the variable. */
int hr_slurm_hosts(const char *nodelist, const char *tasks,
                   struct hr_host **hosts, size_t *nhosts, char *err,
                   size_t errlen);

/* The allocation's variables in this process's environment: 1 and the
 * node list and tasks (NULL when absent) when horarun runs inside one,
 * else 0. */
int hr_slurm_env(const char **nodelist, const char **tasks);

#endif
