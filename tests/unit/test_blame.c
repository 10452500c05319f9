/* test_blame.c -- whom horarun blames for lost links (launcher/blame.c),
 * from what the hosts and horarun say: the host whose links to the most
 * other nodes failed, not the one reported first. The cases are those of
 * a cut cable and a lossy one, seen in different orders. */
#include "blame.h"
#include "testlib.h"

/* Decides; returns the one culprit, -1 for none, -2 for a tie. */
static int culprit(const struct hr_blame *b, int *clear) {
  int who[8];
  int n = hr_blame_decide(b, who, 8, clear);
  return n == 1 ? who[0] : n == 0 ? -1 : -2;
}

/* 3 hosts, horarun on none (node 3): h1 (index 1) is cut off. */
static void test_cut_host(void) {
  struct hr_blame b;
  int clear;
  CHECK_EQ_INT(hr_blame_init(&b, 3, -1), 0);
  CHECK_EQ_INT(b.nodes, 4);
  CHECK_EQ_INT(hr_blame_self(&b, -1), 3);
  CHECK_EQ_INT(culprit(&b, &clear), -1); /* nothing known */
  /* the cut host's report comes first: it lost host 2 */
  hr_blame_lost(&b, 1, 2);
  CHECK_EQ_INT(culprit(&b, &clear), -2); /* 1 or 2: cannot tell yet */
  CHECK(!clear);
  /* host 0's heartbeat: its link to 1 has been in trouble */
  const int t0[1] = {1};
  hr_blame_trouble(&b, 0, t0, 1);
  CHECK_EQ_INT(culprit(&b, &clear), 1);
  CHECK(!clear); /* horarun has not said anything about it yet */
  hr_blame_trouble_one(&b, 3, 1, 1); /* horarun's own link to it too */
  CHECK_EQ_INT(culprit(&b, &clear), 1);
  CHECK(clear);
  CHECK_EQ_INT(hr_blame_score(&b, 1), 3);
  CHECK_EQ_INT(hr_blame_score(&b, 2), 1);
  CHECK_EQ_INT(hr_blame_lost_by(&b, 2), 1); /* the first report: no guide */
  hr_blame_free(&b);
}

/* The host every other lost, though it lost none (it is silent). */
static void test_lost_by_all(void) {
  struct hr_blame b;
  int clear;
  hr_blame_init(&b, 3, -1);
  hr_blame_lost(&b, 0, 2);
  CHECK_EQ_INT(culprit(&b, &clear), -2); /* 0 or 2 */
  hr_blame_lost(&b, 1, 2);
  CHECK_EQ_INT(culprit(&b, &clear), 2);
  CHECK(!clear);
  hr_blame_lost(&b, 3, 2);
  CHECK_EQ_INT(culprit(&b, &clear), 2);
  CHECK(clear);
  hr_blame_free(&b);
}

/* A lossy host: one link lost (either end may report it), and every link
 * of the lossy host in trouble, as its peers and horarun see them. */
static void test_lossy_host(void) {
  struct hr_blame b;
  int clear;
  hr_blame_init(&b, 3, -1);
  hr_blame_lost(&b, 2, 1); /* host 2 (healthy) lost host 1 */
  hr_blame_lost(&b, 1, 2); /* and host 1 lost host 2 */
  CHECK_EQ_INT(culprit(&b, &clear), -2);
  const int t1[3] = {0, 2, 3}, t0[1] = {1};
  hr_blame_trouble(&b, 1, t1, 3); /* host 1's links all retransmit */
  hr_blame_trouble(&b, 0, t0, 1);
  CHECK_EQ_INT(culprit(&b, &clear), 1);
  CHECK(clear);
  /* a heartbeat replaces what its sender said before */
  hr_blame_trouble(&b, 1, NULL, 0);
  hr_blame_trouble(&b, 0, NULL, 0);
  CHECK_EQ_INT(culprit(&b, &clear), -2);
  hr_blame_free(&b);
}

/* One link between healthy hosts had a retransmission: blames nobody for
 * more than that link (score 1: too little to blame a host for a rank's
 * failure). */
static void test_one_bad_link(void) {
  struct hr_blame b;
  int clear;
  hr_blame_init(&b, 3, -1);
  hr_blame_trouble_one(&b, 0, 2, 1);
  int c = culprit(&b, &clear);
  CHECK(c == -2);
  CHECK_EQ_INT(hr_blame_score(&b, 0), 1);
  CHECK_EQ_INT(hr_blame_score(&b, 2), 1);
  CHECK(!clear);
  hr_blame_free(&b);
}

/* 2 hosts. With horarun apart, its own link tells them apart; with
 * horarun on host 0, nothing can. */
static void test_two_hosts(void) {
  struct hr_blame b;
  int clear;
  hr_blame_init(&b, 2, -1);
  hr_blame_lost(&b, 0, 1);
  hr_blame_lost(&b, 1, 0);
  CHECK_EQ_INT(culprit(&b, &clear), -2);
  hr_blame_trouble_one(&b, 2, 1, 1);
  CHECK_EQ_INT(culprit(&b, &clear), 1);
  CHECK(clear);
  hr_blame_free(&b);

  hr_blame_init(&b, 2, 0);
  CHECK_EQ_INT(b.nodes, 2);
  CHECK_EQ_INT(hr_blame_self(&b, 0), 0);
  hr_blame_lost(&b, 0, 1);
  CHECK_EQ_INT(culprit(&b, &clear), -2); /* cut: 0 or 1? */
  CHECK(!clear);
  hr_blame_free(&b);
}

/* Out of range and self links are ignored. */
static void test_bounds(void) {
  struct hr_blame b;
  int clear;
  hr_blame_init(&b, 3, 1);
  CHECK_EQ_INT(b.nodes, 3);
  hr_blame_lost(&b, 0, 0);
  hr_blame_lost(&b, -1, 2);
  hr_blame_lost(&b, 0, 3);
  hr_blame_trouble_one(&b, 5, 1, 1);
  const int bad[2] = {7, -3};
  hr_blame_trouble(&b, 2, bad, 2);
  CHECK_EQ_INT(culprit(&b, &clear), -1);
  CHECK_EQ_INT(hr_blame_score(&b, 9), 0);
  hr_blame_free(&b);
  CHECK_EQ_INT(culprit(&b, &clear), -1); /* freed: nothing */
}

int main(void) {
  RUN(test_cut_host);
  RUN(test_lost_by_all);
  RUN(test_lossy_host);
  RUN(test_one_bad_link);
  RUN(test_two_hosts);
  RUN(test_bounds);
  TL_EXIT();
}
