/* comm.c -- communicators: the global set and the process sets.
 *
 * A communicator knows its members (global ranks, sorted), which of them
 * are this host's ranks, and which hosts have members, in member order
 * (hosts hold consecutive ranks, so each host's members are consecutive
 * members). Its first host coordinates its negotiation. Every daemon
 * builds the same communicators in the same order (process sets are
 * added by a collective of the global set), so ids agree everywhere. */
#define HC_LOG_SUB HC_SUB_NEGO
#include <stdlib.h>
#include <string.h>

#include "daemon.h"

static int host_of_rank(const struct hd_job *job, int32_t rank) {
  for (uint32_t h = 0; h < job->desc.nhosts; h++)
    if (rank >= job->desc.hosts[h].first_rank &&
        rank < job->desc.hosts[h].first_rank + job->desc.hosts[h].nranks)
      return (int)h;
  return job->desc.nhosts ? -1 : 0;
}

/* Frees what the communicator itself holds: its operations, plans and
 * groups, its members. What the coordinator and the engines keep for it
 * they free first (negotiate.c, hd_comms_free). */
void hd_comm_free(struct hd_comm *c) {
  if (!c) return;
  while (c->plan_head) {
    struct hd_plan *p = c->plan_head;
    c->plan_head = p->next;
    free(p);
  }
  while (c->groups) {
    struct hd_group *g = c->groups;
    c->groups = g->next;
    free(g);
  }
  for (size_t i = 0; i < c->table_size; i++)
    while (c->table[i]) {
      struct hd_tensor *t = c->table[i];
      c->table[i] = t->next_hash;
      for (int k = 0; k < c->nlocal; k++) free(t->part[k].aux);
      free(t->neutral);
      free(t);
    }
  while (c->spare) {
    struct hd_tensor *t = c->spare;
    c->spare = t->next_hash;
    free(t);
  }
  free(c->spare_plan);
  free(c->table);
  hp_wbuf_free(&c->ready_out);
  hd_nc_free(&c->nc_ready);
  hd_nc_free(&c->nc_decide);
  free(c->members);
  free(c->local);
  free(c->local_member);
  free(c->part_of);
  free(c->joined);
  free(c->hosts);
  free(c->host_first);
  free(c->host_n);
  free(c);
}

struct hd_comm *hd_comm_new(struct hd_job *job, const int32_t *ranks, int n) {
  if (n <= 0) return NULL;
  if (job->ncomms == UINT32_MAX) return NULL;
  struct hd_comm *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->job = job;
  c->id = job->ncomms;
  c->size = n;
  c->me = -1;
  c->last_joined = -1;
  c->members = malloc((size_t)n * sizeof *c->members);
  c->local = malloc((size_t)(job->nlocal ? job->nlocal : 1) * sizeof *c->local);
  c->local_member =
      malloc((size_t)(job->nlocal ? job->nlocal : 1) * sizeof *c->local_member);
  c->part_of =
      malloc((size_t)(job->nlocal ? job->nlocal : 1) * sizeof *c->part_of);
  c->joined = calloc((size_t)(job->nlocal ? job->nlocal : 1), 1);
  c->hosts = malloc((size_t)n * sizeof *c->hosts);
  c->host_first = malloc((size_t)n * sizeof *c->host_first);
  c->host_n = malloc((size_t)n * sizeof *c->host_n);
  if (!c->members || !c->local || !c->local_member || !c->hosts ||
      !c->host_first || !c->host_n || !c->part_of || !c->joined) {
    hd_comm_free(c);
    return NULL;
  }
  memcpy(c->members, ranks, (size_t)n * sizeof *ranks);
  for (int i = 0; i < job->nlocal; i++) c->part_of[i] = -1;
  for (int m = 0; m < n; m++) {
    int h = host_of_rank(job, ranks[m]);
    if (!c->nhosts || c->hosts[c->nhosts - 1] != h) {
      c->hosts[c->nhosts] = h;
      c->host_first[c->nhosts] = m;
      c->host_n[c->nhosts] = 0;
      if (h == (int)job->desc.host_index) c->me = c->nhosts;
      c->nhosts++;
    }
    c->host_n[c->nhosts - 1]++;
    for (int i = 0; i < job->nlocal; i++)
      if (job->ranks[i].info.rank == ranks[m]) {
        c->part_of[i] = c->nlocal;
        c->local[c->nlocal] = i;
        c->local_member[c->nlocal] = m;
        c->nlocal++;
      }
  }
  struct hd_comm **v = realloc(job->comms, (job->ncomms + 1) * sizeof *v);
  if (!v) {
    hd_comm_free(c);
    return NULL;
  }
  job->comms = v;
  job->comms[job->ncomms++] = c;
  return c;
}

struct hd_comm *hd_comm_get(struct hd_job *job, uint32_t id) {
  return id < job->ncomms ? job->comms[id] : NULL;
}

int hd_comm_member(const struct hd_comm *c, int32_t rank) {
  int lo = 0, hi = c->size - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (c->members[mid] == rank) return mid;
    if (c->members[mid] < rank) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

int hd_comm_host_of(const struct hd_comm *c, int member) {
  for (int k = 0; k < c->nhosts; k++)
    if (member >= c->host_first[k] && member < c->host_first[k] + c->host_n[k])
      return k;
  return -1;
}

void hd_host_name(struct hd_job *job, int host, char *buf, size_t len) {
  if (host >= 0 && (uint32_t)host < job->desc.nhosts) {
    const struct hp_job_host *h = &job->desc.hosts[host];
    if (h->nranks == 1)
      hc_fmt(buf, len, "host %s (rank %d)", h->name, h->first_rank);
    else
      hc_fmt(buf, len, "host %s (ranks %d-%d)", h->name, h->first_rank,
             h->first_rank + h->nranks - 1);
  } else {
    hc_fmt(buf, len, "host #%d", host);
  }
}

int hd_comm_host_left(const struct hd_comm *c) {
  const struct hd_job *job = c->job;
  for (int k = 0; job->peers && k < c->nhosts; k++)
    if (job->peers[c->hosts[k]].left) return 1;
  return 0;
}
