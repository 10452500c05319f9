#!/bin/sh
# deadlock.sh -- script mistakes that would hang a job (it_deadlock): each
# must end within 2 s of the wait, every waiting rank failing with
# HORA_EDEADLOCK and horarun naming, per rank, what it waits on and who
# submitted that; a rank that is late but alive is no deadlock; warn and
# off leave it to the stall inspector; a stopped or spinning rank is
# caught by the stall inspector's shutdown time.
. "$(dirname "$0")/lib.sh"

W='\(16 B float32\)'
# rank R's wait failed within 2 s with HORA_EDEADLOCK
expect_fast() { # NAME RANK TENSOR
  expect_grep "$1" out "^\[$2\]<stdout>:rank $2: $3 failed after [01]\.[0-9]+ s: HORA_EDEADLOCK: allreduce '$3' cannot complete: deadlock: " \
    "rank $2's wait on '$3' fails with HORA_EDEADLOCK within 2 s"
}
expect_verdict() { # NAME REGEX WHAT
  expect_grep "$1" err "horarun: error: deadlock: $2" "horarun names $3"
}

hrun order 30 -np 3 "$T/it_deadlock" order
expect_rc order nonzero
expect_fast order 0 a
expect_fast order 1 b
expect_fast order 2 b
expect_verdict order "rank 0 waits on allreduce 'a' $W, submitted by rank 0; rank 1 waits on allreduce 'b' $W, submitted by ranks 1-2; rank 2 waits on allreduce 'b' $W, submitted by ranks 1-2\. " \
  "each rank's wait and who submitted it"
expect_nogrep order out "\] = " "no allreduce completed"

hrun skip 30 -np 3 "$T/it_deadlock" skip
expect_rc skip nonzero
expect_fast skip 0 loss
expect_fast skip 2 epoch.end
expect_verdict skip "rank 0 waits on allreduce 'loss' $W, submitted by ranks 0-1; rank 1 waits on allreduce 'loss' $W, submitted by ranks 0-1; rank 2 waits on allreduce 'epoch.end' $W, submitted by rank 2\. " \
  "the rank that skipped 'loss'"

hrun names 30 -np 4 "$T/it_deadlock" names
expect_rc names nonzero
expect_fast names 1 grad_0
expect_fast names 3 grad.0
expect_verdict names "rank 0 waits on allreduce 'grad.0' $W, submitted by ranks 0,2-3; rank 1 waits on allreduce 'grad_0' $W, submitted by rank 1; " \
  "the mismatched names"

hrun threads 30 -np 2 "$T/it_deadlock" threads
expect_rc threads nonzero
expect_fast threads 0 t.0
expect_fast threads 0 m.0
expect_fast threads 1 m.1
expect_verdict threads "rank 0 waits on allreduce '[tm]\.0' $W, submitted by rank 0 and on allreduce '[tm]\.0' $W, submitted by rank 0; rank 1 waits on " \
  "both threads' waits"

hrun thread-exit 30 -np 2 "$T/it_deadlock" thread-exit
expect_rc thread-exit nonzero
expect_grep thread-exit out '^\[0\]<stdout>:rank 0: y = 2$' "the second threads' allreduce completed"
expect_fast thread-exit 0 m.0
expect_verdict thread-exit "rank 0 waits on allreduce 'm\.0' $W, submitted by rank 0; rank 1 waits on allreduce 'm\.1' $W, submitted by rank 1\. " \
  "the main threads only (the others have ended)"

hrun pset 30 -np 3 "$T/it_deadlock" pset
expect_rc pset nonzero
expect_grep pset out "^\[0\]<stdout>:rank 0: p\.a failed after [01]\.[0-9]+ s: HORA_EDEADLOCK" "rank 0's wait in its set fails within 2 s"
expect_verdict pset "rank 0 waits on allreduce 'p\.a' of process set 1 \(4 B float32\), submitted by rank 0; rank 1 waits on allreduce 'p\.b' of process set 1 \(4 B float32\), submitted by rank 1\. " \
  "the two ranks of the set, while rank 2 goes on in its own"
expect_nogrep pset out "rank 2 waits" "rank 2 (busy in another set) is not named"

# late, not stuck: the others wait 1.5 s for the last rank
hrun busy 30 -np 3 "$T/it_deadlock" busy
expect_rc busy 0
expect_count busy out '<stdout>:rank [0-2]: late = 3$' 3 "every rank's allreduce completed"
expect_nogrep busy out "deadlock" "no deadlock is declared"
expect_quiet busy

hrun warn 30 HORA_DEADLOCK_ACTION=warn HORA_STALL_SHUTDOWN_TIME_SECONDS=2 \
  -np 2 "$T/it_deadlock" order
expect_rc warn nonzero
expect_grep warn err "WARNING: deadlock: rank 0 waits on allreduce 'a' $W, submitted by rank 0; rank 1 waits on allreduce 'b' $W, submitted by rank 1\. .*The job goes on" \
  "horad warns once, naming the waits"
expect_count warn err "WARNING: deadlock:" 1 "the same deadlock is reported once"
expect_grep warn out "^\[[01]\]<stdout>:rank [01]: [ab] failed after [2-4]\.[0-9]+ s: HORA_ESTALL" "the stall inspector ends a wait (the other may fail first as its rank ended)"

hrun off 30 HORA_DEADLOCK_ACTION=off HORA_STALL_SHUTDOWN_TIME_SECONDS=2 \
  -np 2 "$T/it_deadlock" order
expect_rc off nonzero
expect_nogrep off err "deadlock" "detection is off"
expect_grep off out "^\[[01]\]<stdout>:rank [01]: [ab] failed after [2-4]\.[0-9]+ s: HORA_ESTALL" "the stall inspector ends a wait (the other may fail first as its rank ended)"

hrun bad 30 HORA_DEADLOCK_ACTION=sometimes -np 2 "$T/it_deadlock" busy
expect_rc bad nonzero
expect_grep bad err "HORA_DEADLOCK_ACTION.*expected fail, warn or off" "a bad action is refused, naming the variable"

# alive but never submitting: the stall inspector fails the others' wait
# after its shutdown time, naming the rank, and the job ends at once
for m in stop spin; do
  hrun $m 30 HORA_STALL_SHUTDOWN_TIME_SECONDS=2 -np 3 "$T/it_deadlock" $m
  expect_rc $m nonzero
  expect_grep $m out "^\[0\]<stdout>:rank 0: after\.$m failed after [2-3]\.[0-9]+ s: HORA_ESTALL: allreduce 'after\.$m' stalled for 2 s: rank\(s\) 2 never submitted it" \
    "rank 0's wait fails after the shutdown time, naming rank 2"
  if awk -v e="$ELAPSED" 'BEGIN { exit !(e > 6) }'; then
    fail "$m: the job took ${ELAPSED}s to end after a 2 s stall shutdown time"
  fi
done
assert_no_leftovers "$MARK"
finish
