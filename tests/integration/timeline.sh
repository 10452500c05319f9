#!/bin/sh
# timeline.sh -- Horovod's timeline, written by horad (checked with
# timeline_check.py, which parses it with Python's json module):
#   knob: --timeline-filename with --timeline-mark-cycles, 3 ranks, it_timeline
#     ops: a row per tensor with NEGOTIATE_<COLL> and each rank's arrival,
#     <COLL> with QUEUE and CPU_<COLL>, dtype and shape at the end, a name
#     that JSON must escape, CYCLE_START markers;
#   env: HOROVOD_TIMELINE with a path relative to the job's directory, no
#     markers;
#   dynamic: hora_start_timeline / hora_stop_timeline at run time, two
#     files (each complete when the stop returns), what ran between them
#     in neither, a file that cannot be made refused with its name;
#     HOROVOD_TIMELINE=DYNAMIC writes nothing at start (what is in flight
#     at a stop is left open in its file, as in Horovod);
#   waits: allreduces larger than the arena, streamed: WAIT_FOR_DATA within
#     CPU_ALLREDUCE while the engine waits for the ranks' chunks;
#   kill: rank 1 SIGKILLed mid-job: the file still parses, holds the
#     rounds before and the failed one with its error.
. "$(dirname "$0")/lib.sh"
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || skip "no $PY to parse the timeline with"
CHECK="$HORA_TOP/tests/integration/timeline_check.py"
D=$IT_TMP/files
mkdir -p "$D"

check() { # NAME FILE ARGS...: timeline_check.py must accept FILE
  _n=$1 _f=$2
  shift 2
  if ! "$PY" "$CHECK" "$_f" "$@" >"$IT_TMP/$_n.check" 2>&1; then
    fail "$_n: the timeline $_f does not pass timeline_check.py $*:"
    sed 's/^/    | /' "$IT_TMP/$_n.check"
    show "$_n"
    return 1
  fi
  say "$_n: $(tail -n 1 "$IT_TMP/$_n.check")"
}

hrun knob 60 -np 3 --timeline-filename "$D/knob.json" --timeline-mark-cycles \
  "$T/it_timeline" ops 3
expect_rc knob 0
expect_count knob out "rank [0-9]: ok" 3 2>/dev/null ||
  expect_grep knob out "rank 2: ok" "every rank checked its results"
check knob "$D/knob.json" --ranks 3 --cycles --odd \
  --expect grad.fc7.0=ALLREDUCE --expect grad.fc7.2=ALLREDUCE \
  --expect gather.1=ALLGATHER --expect bcast.2=BROADCAST
expect_quiet knob

# a path relative to the job's directory, Horovod's variable, no markers
mkdir -p "$D/cwd"
(cd "$D/cwd" && hrun env 60 HOROVOD_TIMELINE=rel.json -np 2 \
  "$T/it_timeline" ops 1)
expect_rc env 0
check env "$D/cwd/rel.json" --ranks 2 --no-cycles \
  --expect grad.fc7.0=ALLREDUCE --expect gather.0=ALLGATHER

mkdir -p "$D/dyn"
(cd "$D/dyn" && hrun dynamic 60 HOROVOD_TIMELINE=DYNAMIC -np 3 \
  "$T/it_timeline" dynamic "$D/dyn")
expect_rc dynamic 0
expect_grep dynamic out "^\[0\]<stdout>:stopped .*/two.json" \
  "rank 0 stopped both timelines"
expect_grep dynamic out "rank 0: ok" "rank 0's checks passed"
[ -e "$D/dyn/DYNAMIC" ] && fail "dynamic: HOROVOD_TIMELINE=DYNAMIC made a file"
check dynamic "$D/dyn/one.json" --ranks 3 --cycles --partial \
  --expect in.one=ALLREDUCE --absent between --absent in.two
check dynamic "$D/dyn/two.json" --ranks 3 --no-cycles --partial \
  --expect in.two=ALLREDUCE --absent between --absent in.one

# tensors streamed through a small arena: the engine waits for the ranks'
# chunks, WAIT_FOR_DATA within CPU_ALLREDUCE (it_priority's allreduces, of
# 24 MiB: larger than the arena, and not adopted, so always streamed)
hrun waits 60 --arena-size 16M --adopt-size 0 -np 2 --timeline-filename "$D/waits.json" \
  "$T/it_priority" fifo 3 24
expect_rc waits 0
check waits "$D/waits.json" --ranks 2 --expect low.0=ALLREDUCE \
  --waits low.0 --expect low.2=ALLREDUCE --waits low.2 \
  --expect high=ALLREDUCE --waits high

hrun kill 60 -np 3 --timeline-filename "$D/kill.json" "$T/it_timeline" kill 20
expect_rc kill 137
expect_grep kill out "round 10 failed as expected" "the survivors' round failed"
check kill "$D/kill.json" --ranks 3 --partial \
  --expect round.0=ALLREDUCE --expect round.9=ALLREDUCE --failed round.10
assert_no_leftovers "$MARK"
finish
