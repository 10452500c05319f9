/* blame.c -- which host a lost link comes from (see blame.h). */
#include <stdlib.h>
#include <string.h>

#include "blame.h"

int hr_blame_init(struct hr_blame *b, int n, int me) {
  memset(b, 0, sizeof *b);
  b->n = n;
  b->nodes = me >= 0 && me < n ? n : n + 1;
  size_t cells = (size_t)b->nodes * (size_t)b->nodes;
  b->lost = calloc(cells, 1);
  b->trouble = calloc(cells, 1);
  if (!b->lost || !b->trouble) {
    hr_blame_free(b);
    return -1;
  }
  return 0;
}

void hr_blame_free(struct hr_blame *b) {
  free(b->lost);
  free(b->trouble);
  b->lost = b->trouble = NULL;
}

int hr_blame_self(const struct hr_blame *b, int me) {
  return me >= 0 && me < b->n ? me : b->n;
}

static int node_ok(const struct hr_blame *b, int a) {
  return b->lost && a >= 0 && a < b->nodes;
}

void hr_blame_lost(struct hr_blame *b, int from, int to) {
  if (node_ok(b, from) && node_ok(b, to) && from != to)
    b->lost[from * b->nodes + to] = 1;
}

void hr_blame_trouble_one(struct hr_blame *b, int from, int to, int on) {
  if (node_ok(b, from) && node_ok(b, to) && from != to)
    b->trouble[from * b->nodes + to] = on ? 1 : 0;
}

void hr_blame_trouble(struct hr_blame *b, int from, const int *to, int k) {
  if (!node_ok(b, from)) return;
  memset(b->trouble + from * b->nodes, 0, (size_t)b->nodes);
  for (int i = 0; i < k; i++) hr_blame_trouble_one(b, from, to[i], 1);
}

/* The link between a and b failed, as either end says. */
static int edge(const struct hr_blame *b, int a, int c) {
  int n = b->nodes;
  return b->lost[a * n + c] || b->lost[c * n + a] || b->trouble[a * n + c] ||
         b->trouble[c * n + a];
}

int hr_blame_lost_by(const struct hr_blame *b, int h) {
  int k = 0;
  for (int a = 0; b->lost && a < b->nodes; a++)
    k += a != h && b->lost[a * b->nodes + h];
  return k;
}

int hr_blame_score(const struct hr_blame *b, int h) {
  if (!b->lost || h < 0 || h >= b->nodes) return 0;
  int k = 0;
  for (int a = 0; a < b->nodes; a++)
    k += a != h && edge(b, a, h);
  return k;
}

int hr_blame_decide(const struct hr_blame *b, int *out, int max, int *clear) {
  int best = 0, nbest = 0, second = 0;
  *clear = 0;
  if (!b->lost) return 0;
  for (int h = 0; h < b->n; h++) {
    int s = hr_blame_score(b, h);
    if (s == 0) continue;
    if (s > best) {
      second = best;
      best = s;
      nbest = 0;
    } else if (s < best) {
      if (s > second) second = s;
      continue;
    }
    if (nbest < max) out[nbest] = h;
    nbest++;
  }
  if (nbest > max) nbest = max;
  /* beyond doubt: its links to every other node failed, and no other host
   * has more failed links than the one to it */
  *clear = nbest == 1 && best == b->nodes - 1 && second <= 1 && best >= 2;
  return nbest;
}
