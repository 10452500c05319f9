#!/bin/sh
# scribble.sh -- a rank that writes nonsense into its shared memory, or
# whose wrapper outlives it, must never crash or wedge horad: the other
# rank gets an error naming rank 1 and the job ends.
. "$(dirname "$0")/lib.sh"

hrun arena 60 -np 2 "$T/it_scribble" arena
expect_nogrep arena err 'exited unexpectedly' "horad survives a forged arena size"
expect_grep arena out '^\[0\]<stdout>:rank 0: HORA_EPEERGONE: .*rank 1' "rank 0 is told rank 1 left"

hrun tail 60 -np 2 "$T/it_scribble" tail
expect_nogrep tail err 'exited unexpectedly' "horad survives a ring tail 2^40 ahead"
expect_grep tail err 'rank 1 corrupted its submission ring' "horad names the rank that corrupted its ring"
expect_grep tail out '^\[0\]<stdout>:rank 0: HORA_EPEERGONE: .*rank 1 corrupted its submission ring' "rank 0 gets the cause"

hrun trunc 60 -np 2 "$T/it_scribble" trunc
expect_grep trunc out '^\[1\]<stdout>:rank 1: ftruncate refused' "the segment is sealed at its size"
expect_nogrep trunc err 'exited unexpectedly' "horad survives the attempt"

# A rank that dies inside a wrapper shell that goes on: the others learn
# of it from the closed connection, long before the wrapper ends.
hrun wrapper 60 -np 2 sh -c "'$T/it_fail' sigkill; sleep 3"
expect_grep wrapper out 'HORA_EPEERGONE.*rank 1 on host .* closed its connection to horad' "a rank dead behind a wrapper is noticed"
# The same with --restart-failed-ranks: rank 1's wrapper, which lives on
# behind the closed connection, is ended and started again at once (not
# after its sleep), and horarun says why, not the SIGKILL horad sent; rank
# 0's operation names the restart, and its exit (4, 1.5 s later) then
# ends the job.
hrun wraprestart 60 IT_FAIL_LINGER_MS=1500 -np 2 --restart-failed-ranks 1 sh -c \
  "if [ \$HORA_RANK = 1 ]; then '$T/it_fail' sigkill; sleep 30; else exec '$T/it_fail' sigkill; fi"
expect_rc wraprestart 4
expect_grep wraprestart err 'rank 1 on host .* closed its connection to horad without shutting down hora, and horad ended its process, which lived on: horad starts it again \(restart 1 of 1\)' \
  "horarun says why rank 1 is started again"
expect_grep wraprestart out '^\[0\]<stdout>:rank 0: got HORA_EPEERGONE as expected: .*rank 1 on host .* closed its connection to horad.*; horad starts it again' \
  "rank 0's operation fails naming the restart"
expect_grep wraprestart err 'rank 0 on host .* exited with code 4' "horarun names rank 0's exit"
awk -v t="$(cat "$IT_TMP/wraprestart.time")" 'BEGIN { exit !(t < 20) }' ||
  fail "wraprestart: the job took $(cat "$IT_TMP/wraprestart.time")s: a wrapper's sleep was waited for"
assert_no_leftovers "$MARK"
finish
