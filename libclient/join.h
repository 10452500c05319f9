/* join.h -- ranks started by another launcher (srun, mpirun, torchrun)
 * joining one hora job (join.c). */
#ifndef HORA_JOIN_H
#define HORA_JOIN_H

#include <stddef.h>

enum hl_launcher { HL_TORCHRUN, HL_OMPI, HL_SRUN, HL_PMI };

struct hl_foreign {
  enum hl_launcher kind;
  const char *who; /* "srun", "torchrun", ... as messages name it */
  long rank, size, local_rank, local_size; /* -1: the launcher did not say */
  long nodes;  /* how many nodes the ranks run on (at least) */
  int cyclic;  /* the ranks of a node are not consecutive */
  char key[160]; /* the launcher's job, as a file name part */
};

/* 1 and *f filled when this process is one of several ranks another
 * launcher started; 0 when not. */
int hl_foreign_detect(struct hl_foreign *f);
/* Joins the job of f's ranks (rank 0 starts horarun --join): the job
 * socket's name and this rank's token, or a HORA_E* error. */
int hl_join(const struct hl_foreign *f, char *sock, size_t socklen,
            char *token, size_t toklen);

/* join_hosts.c: the "HOST:N,..." of f's ranks on several hosts, for
 * horarun -H (HORA_JOIN_HOSTS, or MPI_Allgather of Open MPI or MPICH:
 * collective, every rank calls it); 0, or a HORA_E* error. */
int hl_join_hosts(const struct hl_foreign *f, char *out, size_t len);

#endif
