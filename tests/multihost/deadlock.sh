#!/bin/sh
# deadlock.sh -- deadlock detection across hosts (network namespaces, see
# lib.sh), with it_deadlock (tests/integration/it_deadlock.c): ranks on
# different hosts that wait on one another's operations fail with
# HORA_EDEADLOCK within 2 s, host 0 naming every rank's wait from every
# host's report; a rank of another host that is only late is no deadlock;
# a process set's deadlock is found while the other hosts go on.
. "$(dirname "$0")/lib.sh"
need "$HORARUN" "$HORAD" "$T/it_deadlock"
mh_setup 3

W='\(16 B float32\)'
fast() { # NAME RANK TENSOR
  expect_grep "$1" out "^\[$2\]<stdout>:rank $2: $3 failed after [01]\.[0-9]+ s: HORA_EDEADLOCK: allreduce '$3' cannot complete: deadlock: " \
    "rank $2's wait on '$3' fails with HORA_EDEADLOCK within 2 s"
}
verdict() { # NAME REGEX WHAT
  expect_grep "$1" err "horarun: error: deadlock: $2" "horarun names $3"
}

hrun order.3x1 60 -np 3 -H h1:1,h2:1,h3:1 "$T/it_deadlock" order
expect_rc order.3x1 nonzero
fast order.3x1 0 a
fast order.3x1 1 b
fast order.3x1 2 b
verdict order.3x1 "rank 0 waits on allreduce 'a' $W, submitted by rank 0; rank 1 waits on allreduce 'b' $W, submitted by ranks 1-2; rank 2 waits on allreduce 'b' $W, submitted by ranks 1-2\. " \
  "each host's ranks' waits"
mh_assert_no_job_procs "$MARK"

hrun skip.3x2 60 -np 6 -H h1:2,h2:2,h3:2 "$T/it_deadlock" skip
expect_rc skip.3x2 nonzero
fast skip.3x2 0 loss
fast skip.3x2 3 loss
fast skip.3x2 5 epoch.end
verdict skip.3x2 "rank 0 waits on allreduce 'loss' $W, submitted by ranks 0-4; .*rank 5 waits on allreduce 'epoch\.end' $W, submitted by rank 5\. " \
  "the rank of h3 that skipped 'loss'"
mh_assert_no_job_procs "$MARK"

hrun pset.3x1 60 -np 3 -H h1:1,h2:1,h3:1 "$T/it_deadlock" pset
expect_rc pset.3x1 nonzero
expect_grep pset.3x1 out "^\[1\]<stdout>:rank 1: p\.b failed after [01]\.[0-9]+ s: HORA_EDEADLOCK" "rank 1 (h2) fails within 2 s"
verdict pset.3x1 "rank 0 waits on allreduce 'p\.a' of process set 1 \(4 B float32\), submitted by rank 0; rank 1 waits on allreduce 'p\.b' of process set 1 \(4 B float32\), submitted by rank 1\. " \
  "the set's ranks on h1 and h2"
mh_assert_no_job_procs "$MARK"

hrun busy.2x2 60 -np 4 -H h1:2,h2:2 "$T/it_deadlock" busy
expect_rc busy.2x2 0
expect_count busy.2x2 out '<stdout>:rank [0-3]: late = 4$' 4 "every rank's allreduce completed"
expect_nogrep busy.2x2 err "deadlock" "no deadlock is declared"
mh_assert_no_job_procs "$MARK"
finish
