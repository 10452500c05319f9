#!/bin/sh
# timeline.sh -- Horovod's timeline across hosts (network namespaces, see
# lib.sh), with it_timeline (tests/integration/it_timeline.c), checked by
# tests/integration/timeline_check.py: host 0's file holds every host's
# events, on a thread per host, with each rank's arrival, and the
# corrected times are causal (an operation ends on each host after host 0
# began negotiating it, begins on each host before host 0 completed it):
#   ops.3x2: --timeline-filename, 3 hosts x 2 ranks;
#   skew: the same with h2's and h3's monotonic clocks 1000 s and 3000 s
#     ahead (time namespaces: horad_path is a wrapper that runs horad under
#     unshare --time): without the correction no time would fit;
#   dynamic: hora_start_timeline / hora_stop_timeline on 3 x 1: each file
#     complete when rank 0's stop returns, the other hosts' events in it;
#   waits: allreduces of 24 MiB (streamed, and around the ring) on 3 x 1:
#     WAIT_FOR_DATA within CPU_ALLREDUCE on every host;
#   fused: fusion_perf on 2 x 1: a fused tensor's MEMCPY_IN_FUSION_BUFFER
#     and MEMCPY_OUT_FUSION_BUFFER within CPU_ALLREDUCE on both hosts;
#   kill: rank 1 (h2) SIGKILLed mid-job: the file still parses.
# The times may disagree by the error of the clock estimate (half a round
# trip between the namespaces): --slack 250 us.
. "$(dirname "$0")/lib.sh"
need "$HORARUN" "$HORAD" "$T/it_timeline" "$T/it_priority" \
  "$BUILD/benchmarks/fusion_perf"
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || skip "no $PY to parse the timeline with"
CHECK="$HORA_TOP/tests/integration/timeline_check.py"
mh_setup 3

check() { # NAME FILE ARGS...
  _n=$1 _f=$2
  shift 2
  if ! "$PY" "$CHECK" "$_f" "$@" >"$MH_TMP/$_n.check" 2>&1; then
    fail "$_n: the timeline $_f does not pass timeline_check.py $*" \
      "(kept as $BUILD/test-logs/mh-timeline-$_n.json):"
    cp "$_f" "$BUILD/test-logs/mh-timeline-$_n.json"
    sed 's/^/    | /' "$MH_TMP/$_n.check"
    show "$_n"
    return 1
  fi
  say "$_n: $(tail -n 1 "$MH_TMP/$_n.check")"
}

EXPECT="--expect grad.fc7.0=ALLREDUCE --expect grad.fc7.2=ALLREDUCE
  --expect gather.1=ALLGATHER --expect bcast.2=BROADCAST"
# shellcheck disable=SC2086
hrun ops.3x2 120 -np 6 -H h1:2,h2:2,h3:2 --timeline-filename \
  "$MH_TMP/ops.json" --timeline-mark-cycles "$T/it_timeline" ops 3
expect_rc ops.3x2 0
expect_count ops.3x2 out "rank [0-9]: ok" 6 "every rank checked its results"
# shellcheck disable=SC2086
check ops.3x2 "$MH_TMP/ops.json" --ranks 6 --hosts 3 --cycles --odd \
  --causal --slack 250 $EXPECT
mh_assert_no_job_procs "$MARK"

cat >"$MH_TMP/skewed-horad" <<EOS
#!/bin/sh
case \$(hostname) in
h2) exec unshare --time --monotonic 1000 "$HORAD" "\$@" ;;
h3) exec unshare --time --monotonic 3000 "$HORAD" "\$@" ;;
*) exec "$HORAD" "\$@" ;;
esac
EOS
chmod +x "$MH_TMP/skewed-horad"
if unshare --time --monotonic 1000 true 2>/dev/null; then
  mh_write_config "$MH_TMP/skew.yaml" hosts=h1:1,h2:1,h3:1 \
    horad="$MH_TMP/skewed-horad"
  # shellcheck disable=SC2086
  hrun skew 120 -np 3 --config-file "$MH_TMP/skew.yaml" --timeline-filename \
    "$MH_TMP/skew.json" "$T/it_timeline" ops 3
  expect_rc skew 0
  # shellcheck disable=SC2086
  check skew "$MH_TMP/skew.json" --ranks 3 --hosts 3 --causal --slack 250 $EXPECT
  mh_assert_no_job_procs "$MARK"
else
  say "skew: skipped, no time namespaces here (unshare --time)"
fi

mkdir -p "$MH_TMP/dyn"
hrun dynamic 120 -np 3 -H h1:1,h2:1,h3:1 "$T/it_timeline" dynamic \
  "$MH_TMP/dyn"
expect_rc dynamic 0
expect_grep dynamic out "rank 0: ok" "rank 0's checks passed"
check dynamic "$MH_TMP/dyn/one.json" --ranks 3 --hosts 3 --cycles --partial \
  --causal --slack 250 --expect in.one=ALLREDUCE --absent between --absent in.two
check dynamic "$MH_TMP/dyn/two.json" --ranks 3 --hosts 3 --no-cycles \
  --partial --causal --slack 250 --expect in.two=ALLREDUCE --absent between
mh_assert_no_job_procs "$MARK"

# allreduces of 24 MiB, streamed and around the ring: every host's engine
# waits (for its rank's chunks, for the others' data), WAIT_FOR_DATA
# within CPU_ALLREDUCE on each host
hrun waits 120 --arena-size 16M -np 3 -H h1:1,h2:1,h3:1 \
  --timeline-filename "$MH_TMP/waits.json" "$T/it_priority" fifo 3 24
expect_rc waits 0
check waits "$MH_TMP/waits.json" --ranks 3 --hosts 3 --causal --slack 250 \
  --expect low.0=ALLREDUCE --waits low.0 --expect high=ALLREDUCE --waits high
mh_assert_no_job_procs "$MARK"

# fused allreduces (fusion_perf's 100 tensors of 4 KiB a step, 2 x 1): the
# tensors of a fused run show MEMCPY_IN_FUSION_BUFFER and
# MEMCPY_OUT_FUSION_BUFFER within CPU_ALLREDUCE on both hosts
# (HORA_SMALL_ALLREDUCE=0: the ring's fused runs, not the negotiation's
# shortcut for small allreduces)
HRUN_NOMARK=1 hrun fused 120 HORA_SMALL_ALLREDUCE=0 -np 2 -H h1:1,h2:1 \
  --timeline-filename "$MH_TMP/fused.json" "$BUILD/benchmarks/fusion_perf" \
  -n 5 -w 2
expect_rc fused 0
check fused "$MH_TMP/fused.json" --ranks 2 --hosts 2 --causal --slack 250 \
  --expect fusion.60=ALLREDUCE --act fusion.60=MEMCPY_IN_FUSION_BUFFER \
  --act fusion.60=MEMCPY_OUT_FUSION_BUFFER
mh_assert_no_job_procs "$MARK"

hrun kill 120 -np 3 -H h1:1,h2:1,h3:1 --timeline-filename "$MH_TMP/kill.json" \
  "$T/it_timeline" kill 20
expect_rc kill 137
check kill "$MH_TMP/kill.json" --ranks 3 --hosts 3 --partial --causal --slack 250 \
  --expect round.0=ALLREDUCE --expect round.9=ALLREDUCE
mh_assert_no_job_procs "$MARK"
finish
