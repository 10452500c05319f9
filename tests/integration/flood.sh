#!/bin/sh
# flood.sh -- horad under a rank that dies, or misbehaves, with far more in
# flight than its completion ring holds. horad must survive (no recursion
# when a rank is marked gone), drop the completions of a gone rank instead
# of queueing them, blame only the rank that failed, and horarun must exit
# with that rank's status:
#   others: rank 0 has N async allreduces in flight, reads no completion,
#     and rank 1 dies: rank 0 gets N errors naming rank 1 (it is not
#     dropped for having that many completions waiting);
#   self: rank 1 has N in flight that rank 0 never submits, and dies;
#   garbage: rank 1 writes random entries into its ring, reads nothing,
#     exits 7;
#   names: rank 1 submits 300,000 distinct names nobody else does, exits 5;
#   names.big: the same with 1,000,000 (failing them all keeps horad busy
#     for a while: rank 0's last output must still reach horarun).
. "$(dirname "$0")/lib.sh"

n=70000 # more than horad used to queue for one rank (65,536)
is_small && n=20000

blamed_once() { # NAME VICTIM: horad and horarun name only the victim
  expect_nogrep "$1" err "rank [^$2] .*(dropping|exited|killed|corrupted)" "no other rank is blamed"
  expect_nogrep "$1" err "exited unexpectedly|SIGSEGV|SIGABRT" "horad survives"
  expect_count "$1" err "^horarun: rank $2 on host" 1 "horarun names rank $2 once"
}

hrun others 120 HORA_KILL_GRACE=20 -np 2 "$T/it_flood" inflight others $n exit3
expect_rc others 3
expect_grep others out "^\[0\]<stdout>:rank 0: $n of $n operations failed naming rank 1" \
  "rank 0 gets an error naming rank 1 for each of its $n operations"
expect_nogrep others out "FAIL" "no rank saw anything unexpected"
expect_nogrep others err "dropping it from the job" "rank 0 is not dropped for its waiting completions"
blamed_once others 1
assert_no_leftovers "$MARK"
assert_clean_tmp others

hrun self 120 -np 2 "$T/it_flood" inflight self $n sigkill
expect_rc self 137
expect_grep self out "^\[0\]<stdout>:rank 0: got HORA_EPEERGONE as expected: .*rank 1.*SIGKILL" \
  "rank 0 is told rank 1 was killed"
blamed_once self 1
assert_no_leftovers "$MARK"
assert_clean_tmp self

hrun garbage 120 -np 2 "$T/it_flood" garbage 300000
expect_rc garbage 7
expect_grep garbage out "^\[0\]<stdout>:rank 0: got HORA_EPEERGONE as expected: .*rank 1" \
  "rank 0 is told rank 1 left"
blamed_once garbage 1
assert_no_leftovers "$MARK"
assert_clean_tmp garbage

hrun names 120 -np 2 "$T/it_flood" names 300000
expect_rc names 5
expect_grep names out "^\[0\]<stdout>:rank 0: got HORA_EPEERGONE as expected: .*rank 1" \
  "rank 0 is told rank 1 left"
blamed_once names 1
assert_no_leftovers "$MARK"
assert_clean_tmp names

big=1000000
is_small && big=200000
hrun names.big 120 -np 2 "$T/it_flood" names $big
expect_rc names.big 5
expect_grep names.big out "^\[1\]<stdout>:rank 1: horad took $big of $big" "horad took every submission"
expect_grep names.big out "^\[0\]<stdout>:rank 0: got HORA_EPEERGONE as expected: .*rank 1" \
  "rank 0's output reaches horarun"
blamed_once names.big 1
assert_no_leftovers "$MARK"
assert_clean_tmp names.big
finish
