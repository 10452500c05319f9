#!/bin/sh
# autotune.sh -- --autotune across hosts (network namespaces, see lib.sh):
# host 0's horad tunes the fusion threshold and the cycle time on the
# job's own steps (fusion_perf: 100 allreduces of 4 KiB per step, 2 x 1,
# where fusing pays most), then tries the response cache off, writes
# --autotune-log-file, and keeps the best setting. Checked: the CSV (a
# header, the warm-up sample, 3 samples per trial, 8 trials of the numbers
# and one with the cache off, the best trial last), the setting kept is
# the best trial's and fuses, the trial with fusion off scored at most
# half of the best (the tuner measures what the knobs do), the job's
# results are right; a knob given explicitly is held; a log file that
# cannot be written is said and the job goes on. On 3 hosts (h1 with 2
# ranks) and steps with an allgather too, each choice is tried the other
# way once -- a flat allreduce ring (run, as h1's horad says), a flat
# allgather ring, the cache off -- and every step's results are right.
. "$(dirname "$0")/lib.sh"
B="$BUILD/benchmarks"
need "$HORARUN" "$HORAD" "$B/fusion_perf"
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || skip "no $PY to read the CSV with"
mh_setup 3

TUNE="--autotune --autotune-warmup-samples 1 --autotune-steps-per-sample 4
  --autotune-bayes-opt-max-samples 8"
# shellcheck disable=SC2086
# (HORA_SMALL_ALLREDUCE=0: without fusion these small tensors would take
# the negotiation's shortcut, not the ring whose steps fusion saves)
HRUN_NOMARK=1 hrun tune.2x1 240 HORA_LOG=coord:info HORA_SMALL_ALLREDUCE=0 -np 2 -H h1:1,h2:1 $TUNE \
  --autotune-log-file "$MH_TMP/tune.csv" "$B/fusion_perf" -n 150
expect_rc tune.2x1 0
expect_grep tune.2x1 out "#wrong 0" "fusion_perf's results are right"
expect_count tune.2x1 err "horad\[[0-9]+\] INFO: autotune: trial [0-8]: " 9 \
  "host 0's horad ran 9 trials"
expect_grep tune.2x1 err "INFO: autotune: trial 8: .*, cache off: " \
  "the last one with the cache off"
expect_grep tune.2x1 err "INFO: autotune: done after 9 trials" "and kept the best"
if ! "$PY" - "$MH_TMP/tune.csv" >"$MH_TMP/tune.check" 2>&1 <<'EOS'; then
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [r["trial"] for r in rows[:1]] == ["warmup"], rows[:1]
trials = {}
for r in rows[1:-1]:
    trials.setdefault(int(r["trial"]), []).append(r)
assert sorted(trials) == list(range(9)), sorted(trials)
score = {}
for t, rs in trials.items():
    assert len(rs) == 3, (t, len(rs))
    assert len({(r["cycle_time_ms"], r["tensor_fusion_threshold"],
                 r["cache_enabled"]) for r in rs}) == 1, rs
    # 2 x 1: no host has two ranks, and two hosts' allgather is direct
    assert (rs[0]["hierarchical_allreduce"], rs[0]["hierarchical_allgather"],
            rs[0]["cache_enabled"]) == ("1", "1", "0" if t == 8 else "1"), rs
    score[t] = statistics.median(float(r["score"]) for r in rs)
best = rows[-1]
assert best["trial"] == "best", best
top = max(score, key=score.get)
assert abs(float(best["score"]) - score[top]) < 1e-3 * score[top], (best, score)
knobs = (trials[top][0]["cycle_time_ms"],
         trials[top][0]["tensor_fusion_threshold"],
         trials[top][0]["cache_enabled"])
assert (best["cycle_time_ms"], best["tensor_fusion_threshold"],
        best["cache_enabled"]) == knobs, (best, knobs)
assert int(best["tensor_fusion_threshold"]) > 0, best
off = [t for t, rs in trials.items() if rs[0]["tensor_fusion_threshold"] == "0"]
assert off == [1], off
assert score[1] * 2 <= score[top], ("fusion off scored", score[1], score[top])
print("9 trials; best %d (%.0f bytes/us, threshold %s, cycle %s ms, cache "
      "%s); fusion off: %.0f bytes/us (%.2f of the best); cache off: %.0f"
      % (top, score[top], knobs[1], knobs[0], knobs[2], score[1],
         score[1] / score[top], score[8]))
EOS
  fail "tune.2x1: the autotune log is not what was expected:"
  sed 's/^/    | /' "$MH_TMP/tune.check" "$MH_TMP/tune.csv"
else
  say "tune.2x1: $(tail -n 1 "$MH_TMP/tune.check")"
fi
mh_assert_no_job_procs "$MARK"

# a knob given is held: only the cycle time moves
# shellcheck disable=SC2086
HRUN_NOMARK=1 hrun held.2x1 240 HORA_LOG=coord:info HOROVOD_FUSION_THRESHOLD=1048576 -np 2 \
  -H h1:1,h2:1 $TUNE --autotune-log-file "$MH_TMP/held.csv" \
  "$B/fusion_perf" -n 150
expect_rc held.2x1 0
expect_grep held.2x1 err "INFO: autotune: tuning the cycle time from 1048576 bytes" \
  "horad says it tunes the cycle time alone"
expect_count held.2x1 err "INFO: autotune: trial [0-8]: fusion threshold 1048576 bytes" 9 \
  "every trial keeps the threshold given"

# an unwritable log: said, and the job goes on tuning
# shellcheck disable=SC2086
HRUN_NOMARK=1 hrun nolog.2x1 240 HORA_LOG=coord:info -np 2 -H h1:1,h2:1 $TUNE \
  --autotune-log-file /proc/no/such.csv "$B/fusion_perf" -n 150
expect_rc nolog.2x1 0
expect_grep nolog.2x1 err "cannot write the autotune log /proc/no/such.csv" \
  "the unwritable log is named"
expect_grep nolog.2x1 err "INFO: autotune: done after 9 trials" "tuning went on"
# 3 hosts, h1 with 2 ranks, an allgather in each step: every choice
# matters, and each is tried the other way once; every step is checked
# shellcheck disable=SC2086
HRUN_NOMARK=1 hrun choices.3 240 HORA_LOG=coord:info,engine:debug HORA_SMALL_ALLREDUCE=0 \
  -np 4 -H h1:2,h2:1,h3:1 --autotune --autotune-warmup-samples 1 \
  --autotune-steps-per-sample 4 --autotune-bayes-opt-max-samples 3 \
  --autotune-log-file "$MH_TMP/choices.csv" "$B/fusion_perf" -n 100 -g 2K -c
expect_rc choices.3 0
expect_grep choices.3 out "#wrong 0" "every step's results are right"
expect_grep choices.3 err "INFO: autotune: tuning the fusion threshold and the cycle time from .*, then trying hierarchical allreduce and hierarchical allgather and cache the other way" \
  "horad says it tries the three choices"
expect_grep choices.3 err "INFO: autotune: done after 6 trials" "3 trials of the numbers, 3 of the choices"
expect_grep choices.3 err "DEBUG: allreduce 'fusion\.[0-9]+': a flat ring of 4 members" \
  "the flat allreduce trial ran round a flat ring"
if ! "$PY" - "$MH_TMP/choices.csv" >"$MH_TMP/choices.check" 2>&1 <<'EOS'; then
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
cols = ("hierarchical_allreduce", "hierarchical_allgather", "cache_enabled")
seen = {}
for r in rows[1:-1]:
    seen.setdefault(int(r["trial"]), {tuple(r[c] for c in cols)}).add(
        tuple(r[c] for c in cols))
assert sorted(seen) == list(range(6)), sorted(seen)
for t in range(6):
    assert len(seen[t]) == 1, (t, seen[t])
offs = [sum(v == "0" for v in next(iter(seen[t]))) for t in range(6)]
# the numbers' trials with every choice on; then each one off (the others
# as the best so far had them)
assert offs[:3] == [0, 0, 0], offs
for k, t in enumerate((3, 4, 5)):
    assert next(iter(seen[t]))[k] == "0", (t, seen[t])
print("choices tried: %s" % [next(iter(seen[t])) for t in range(6)])
EOS
  fail "choices.3: the autotune log is not what was expected:"
  sed 's/^/    | /' "$MH_TMP/choices.check" "$MH_TMP/choices.csv"
else
  say "choices.3: $(tail -n 1 "$MH_TMP/choices.check")"
fi
mh_assert_no_job_procs "$MARK"
finish
