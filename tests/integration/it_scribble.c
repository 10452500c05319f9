/* it_scribble.c -- a rank that abuses the shared memory horad gave it
 * (args: MODE). Rank 1 misbehaves, rank 0 runs an allreduce and prints
 * what it got; horad must survive and name rank 1.
 *   arena  write a huge arena_size into the header and submit a buffer far
 *          outside the real arena (horad must use its own copy of the layout)
 *   tail   move the submission ring's tail 2^40 entries ahead
 *   trunc  shrink the segment (it is sealed: ftruncate must fail) */
#include <dirent.h>
#include <fcntl.h>
#include <hora.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shm.h"

/* The rank's segment, found through its mapping's name. */
static unsigned char *find_segment(char *path, size_t plen) {
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512];
  unsigned char *res = NULL;
  while (f && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (strstr(line, "hora-rank") && sscanf(line, "%lx-%lx", &lo, &hi) == 2) {
      snprintf(path, plen, "/proc/self/map_files/%lx-%lx", lo, hi);
      res = (unsigned char *)lo;
      break;
    }
  }
  if (f) fclose(f);
  return res;
}

/* Writes every eventfd the rank holds (horad's), so horad looks at once. */
static void kick_daemon(void) {
  DIR *d = opendir("/proc/self/fd");
  struct dirent *e;
  while (d && (e = readdir(d))) {
    char p[300], l[300];
    snprintf(p, sizeof p, "/proc/self/fd/%s", e->d_name);
    ssize_t n = readlink(p, l, sizeof l - 1);
    if (n <= 0) continue;
    l[n] = '\0';
    uint64_t one = 1;
    if (strstr(l, "eventfd") && write(atoi(e->d_name), &one, 8) < 0)
      perror("write eventfd");
  }
  if (d) closedir(d);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "arena";
  if (hora_init() != 0) return 1;
  float *buf = hora_alloc(1024 * sizeof(float));
  if (!buf || hora_barrier() != 0) return 1;
  if (hora_rank() == 1) {
    char path[128];
    unsigned char *shm = find_segment(path, sizeof path);
    if (!shm) return 1;
    struct hp_shm_hdr *h = (struct hp_shm_hdr *)shm;
    if (!strcmp(mode, "trunc")) {
      int fd = open(path, O_RDWR);
      int rc = fd >= 0 ? ftruncate(fd, 0) : -1;
      printf("rank 1: ftruncate %s\n", rc == 0 ? "succeeded" : "refused");
      fflush(stdout);
      return 0;
    }
    uint64_t tail = atomic_load(&h->sq.tail);
    struct hp_sqe *s =
        (struct hp_sqe *)(shm + h->sq_slots_off + (tail & (h->sq_slots - 1)) *
                                                       sizeof *s);
    memset(s, 0, sizeof *s);
    s->id = 12345;
    s->kind = HP_SQ_SUBMIT;
    s->coll = HORA_COLL_ALLREDUCE;
    s->dtype = HORA_FLOAT32;
    s->op = HORA_SUM;
    s->count = 1024;
    strcpy(s->name, "x");
    s->name_len = 1;
    if (!strcmp(mode, "arena")) {
      h->arena_size = 1ull << 50;
      s->flags = HP_F_RESIDENT;
      s->offset = h->arena_off + (1ull << 44);
      atomic_store(&h->sq.tail, tail + 1);
    } else {
      atomic_store(&h->sq.tail, tail + (1ull << 40));
    }
    kick_daemon();
    sleep(1);
    return 0;
  }
  int rc = hora_allreduce("x", buf, buf, 1024, HORA_FLOAT32, HORA_SUM);
  printf("rank 0: %s: %s\n", hora_err_name(rc), hora_last_error());
  return 0;
}
