/* blame.h -- which host a lost link comes from, from what every daemon
 * and horarun itself say about their links.
 *
 * A host that is cut off, or whose network drops packets, looks lost from
 * every other host, and every other host looks lost from it: whoever
 * reports first is no guide. So every node (the hosts, and horarun unless
 * it runs on one of them) says which of its links it lost and which have
 * been in trouble lately (retransmissions, silences); a link counts when
 * either end says so. The host whose links to the most other nodes failed
 * is the culprit: the one every other lost, or the one that lost everyone.
 * A tie is reported as such: which end of a single failed link is the
 * cause cannot be told (nor which of two hosts alone was cut off). */
#ifndef HORA_LAUNCHER_BLAME_H
#define HORA_LAUNCHER_BLAME_H

struct hr_blame {
  int n;     /* hosts */
  int nodes; /* n, plus horarun when it runs on none of them */
  unsigned char *lost;    /* [a * nodes + b]: a lost its link to b */
  unsigned char *trouble; /* [a * nodes + b]: a's link to b was in trouble */
};

/* n hosts; horarun runs on host `me`, or on none of them (me < 0: it is
 * node n). Returns 0 or -1 (out of memory). */
int hr_blame_init(struct hr_blame *b, int n, int me);
void hr_blame_free(struct hr_blame *b);
/* The node that stands for horarun. */
int hr_blame_self(const struct hr_blame *b, int me);
void hr_blame_lost(struct hr_blame *b, int from, int to);
/* Replaces what `from` says about its links' trouble with `to[0..k)`. */
void hr_blame_trouble(struct hr_blame *b, int from, const int *to, int k);
void hr_blame_trouble_one(struct hr_blame *b, int from, int to, int on);
/* The hosts to blame, most likely first, into out (at most max); returns
 * how many are tied (0: nothing points at any host). *clear is set when
 * the evidence is already beyond doubt: one host whose links to every
 * other node failed while no other host has more than that one. */
int hr_blame_decide(const struct hr_blame *b, int *out, int max, int *clear);
/* How many nodes lost their link to host h. */
int hr_blame_lost_by(const struct hr_blame *b, int h);
/* How many other nodes have a failed link (lost or in trouble) with h. */
int hr_blame_score(const struct hr_blame *b, int h);

#endif
