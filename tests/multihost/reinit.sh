#!/bin/sh
# reinit.sh -- hora_shutdown() then hora_init() again across hosts
# (network namespaces, see lib.sh), with it_reinit
# (tests/integration/it_reinit.c): 4 rounds of init, an allreduce, an
# allgather and a process set, shutdown, ranks arriving at different
# times; every session starts clean (same rank and size, process sets
# numbered from 1 again). On 3 hosts x 1 rank, 3 x 2 and 2 x 2; then a
# rank that exits after shutting down instead of coming back: the job
# ends naming it, and the others do not hang.
. "$(dirname "$0")/lib.sh"
need "$HORARUN" "$HORAD" "$T/it_reinit"
mh_setup 3

ok() { # NAME NP
  expect_rc "$1" 0 &&
    expect_count "$1" out "^\[[0-9]+\]<stdout>:rank [0-9]+: reinit: 4 rounds, 0 failures" "$2" \
      "every rank ran every round"
  expect_nogrep "$1" out "FAIL" "no check failed"
  expect_quiet "$1"
  mh_assert_no_job_procs "$MARK"
}

hrun reinit.3x1 120 -np 3 -H h1:1,h2:1,h3:1 "$T/it_reinit" 4
ok reinit.3x1 3
hrun reinit.3x2 120 -np 6 -H h1:2,h2:2,h3:2 "$T/it_reinit" 4
ok reinit.3x2 6
hrun reinit.2x2 120 -np 4 -H h1:2,h2:2 "$T/it_reinit" 4
ok reinit.2x2 4

# rank 2 (on h3) does not come back: the job fails with its status
hrun reinit.dies 60 -np 3 -H h1:1,h2:1,h3:1 "$T/it_reinit" 4 -d 2
expect_rc reinit.dies 3
expect_within reinit.dies 30 "the others do not wait for it"
expect_grep reinit.dies err "rank 2" "horarun names the rank"
mh_assert_no_job_procs "$MARK"
finish
