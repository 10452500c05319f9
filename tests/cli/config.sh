#!/bin/sh
# config.sh -- horarun --config-file on local jobs: horovodrun's params and
# hora's env reach every rank (under HORA_* and HOROVOD_* names); hosts, np,
# verbose and output_filename take effect; the file overrides the flags
# before it and the flags after it override the file; the example
# configs/cluster.yaml loads; every bad file exits 2 with one
# "horarun: error:" line naming the file, the line and the key.
. "$(dirname "$0")/lib.sh"
use_horad
cd "$TMP" || fail "cd"

# only_line WHAT TEXT: every rank printed exactly TEXT (and nothing else).
only_line() {
  n=$(grep -c '<stdout>:' "$TMP/out")
  m=$(grep -c "^\[[0-9]*\]<stdout>:$2\$" "$TMP/out")
  [ "$n" -ge 1 ] && [ "$n" -eq "$m" ] || fail "$1: expected '$2' from every rank"
}

# ---- params and env reach the ranks ---------------------------------------------
cat >c.yaml <<'EOF'
params:
  fusion_threshold_mb: 64
  cycle_time_ms: 2.5
  hierarchical_allreduce: true
stall_check:
  enabled: false
  warning_time_seconds: 30
logging: {level: error, with_timestamp: false}
timeline: {filename: /tmp/tl.json}
env:
  GREETING: hello world
  OMP_NUM_THREADS: 4
  HORA_THREADS: 9
hosts:
  - localhost:2
EOF
show='echo "$HOROVOD_FUSION_THRESHOLD $HORA_FUSION_THRESHOLD $HOROVOD_CYCLE_TIME'
show="$show"' $HOROVOD_HIERARCHICAL_ALLREDUCE $HOROVOD_STALL_CHECK_DISABLE'
show="$show"' $HORA_STALL_CHECK_TIME_SECONDS $HORA_LOG_LEVEL'
show="$show"' $HOROVOD_LOG_LEVEL $HOROVOD_LOG_HIDE_TIME $HOROVOD_TIMELINE'
show="$show"' [$GREETING] $OMP_NUM_THREADS $HORA_THREADS $HORA_SIZE"'
run_hr --config-file c.yaml sh -c "$show"
expect_rc 0 "params and env"
only_line "params and env" \
  "67108864 67108864 2.5 1 1 0 error error 1 /tmp/tl.json \[hello world\] 4 9 2"
note "params (as HOROVOD_* and HORA_*), env and hosts reach both ranks"

# An explicit knob beats a variable of the same name in env.
run_hr --config-file c.yaml --threads 3 sh -c 'echo "$HORA_THREADS"'
expect_rc 0 "knob over env"
only_line "knob over env" 3
note "--threads beats env's HORA_THREADS"

# ---- precedence: the file overrides what comes before it, not after --------------
cat >p.yaml <<'EOF'
np: 2
params: {cycle_time_ms: 2.5}
EOF
run_hr -np 1 --cycle-time-ms 7 --config-file p.yaml sh -c 'echo "$HORA_SIZE $HOROVOD_CYCLE_TIME"'
expect_rc 0 "flags before the file"
only_line "flags before the file" "2 2.5"
[ "$(grep -c '<stdout>:' "$TMP/out")" -eq 2 ] || fail "np from the file"
run_hr --config-file p.yaml -np 1 --cycle-time-ms 7 sh -c 'echo "$HORA_SIZE $HOROVOD_CYCLE_TIME"'
expect_rc 0 "flags after the file"
only_line "flags after the file" "1 7"
run_hr -H localhost:3 --config-file c.yaml sh -c 'echo "$HORA_SIZE"'
only_line "hosts of the file after -H" 2
run_hr --config-file c.yaml -H localhost:3 sh -c 'echo "$HORA_SIZE"'
only_line "-H after the file" 3
note "flags before --config-file lose to it, flags after it win"

# ---- verbose, output_filename -------------------------------------------------------
cat >v.yaml <<'EOF'
np: 1
verbose: true
output_filename: outdir
EOF
run_hr --config-file v.yaml sh -c 'echo hi'
expect_rc 0 "verbose, output_filename"
expect_in err "horarun: rank 0: host" "verbose prints the layout"
expect_file "$TMP/outdir/rank.0/stdout" 'hi\n' "output_filename"
note "verbose and output_filename"

# ---- the example file loads and works with a local host ------------------------------
mkdir ex && cd ex || fail "cd"
run_hr --config-file "$HORA_TOP/configs/cluster.yaml" -H localhost:1 -np 1 \
  sh -c 'echo "$OMP_NUM_THREADS $HOROVOD_FUSION_THRESHOLD $HORA_START_TIMEOUT"'
expect_rc 0 "configs/cluster.yaml"
only_line "configs/cluster.yaml" "4 67108864 60"
[ -f logs/rank.0/stdout ] || fail "configs/cluster.yaml: no logs/rank.0/stdout"
cd "$TMP" || fail "cd"
note "configs/cluster.yaml loads; -H after it runs the job here"

# ---- the man page documents every key and knob name --------------------------------
man5=$HORA_TOP/man/hora.yaml.5
sed -n 's/^ *-\{0,1\} *\([a-z_]*\):.*/\1/p' "$HORA_TOP/configs/cluster.yaml" |
  grep . | sort -u | while read -r key; do
    grep -qw -- "$key" "$man5" || fail "hora.yaml(5) does not document '$key'"
  done || exit 1
sed -n 's/^    {"\([a-z_]*\)",.*/\1/p' "$HORA_TOP/common/params.c" |
  while read -r name; do
    grep -qx -- "$name	HORA_.*" "$man5" ||
      fail "hora.yaml(5) does not list knob '$name'"
  done || exit 1
note "hora.yaml(5) documents every key of configs/cluster.yaml and every knob"

# ---- errors ------------------------------------------------------------------------------
# bad_config WHAT YAML EXPECTED-MESSAGE-AFTER-"horarun: error: "
bad_config() {
  printf '%s' "$2" >bad.yaml
  run_hr --config-file bad.yaml -np 1 true
  expect_rc 2 "$1"
  [ -s "$TMP/out" ] && fail "$1: wrote on stdout"
  [ "$(grep -c '^horarun: error: ' "$TMP/err")" -eq 1 ] || fail "$1: lines"
  head -n 1 "$TMP/err" | grep -qxF -- "horarun: error: $3" ||
    fail "$1: expected 'horarun: error: $3'"
  expect_in err "usage: horarun" "$1 shows the usage"
  note "$1 -> $(head -n 1 "$TMP/err")"
}
bad_config "unknown nested key" 'stall_check:
  enabled: true
  stall_chek: 3
' "bad.yaml:3: unknown key 'stall_chek' in 'stall_check' (expected one of: enabled, warning_time_seconds, shutdown_time_seconds)"
bad_config "wrong type" 'params:
  cycle_time_ms: [1, 2]
' "bad.yaml:2: 'params.cycle_time_ms' must be a number, not a list"
bad_config "bad number" 'np: 2
params: {cache_capacity: -3}
' "bad.yaml:2: 'params.cache_capacity': bad value '-3': expected a non-negative whole number of entries"
bad_config "bad launcher" 'np: 1
launcher: rsh
' "bad.yaml:2: 'launcher': bad value 'rsh': expected ssh, srun, mpirun or service"
bad_config "duplicate key" 'np: 1
verbose: true
np: 2
' "bad.yaml:3: duplicate key 'np' at the top level (first at line 1)"
bad_config "syntax error" 'params:
  a: 1
 b: 2
' "bad.yaml:3: YAML syntax error: did not find expected key (while parsing a block mapping at line 1)"
bad_config "bad host" 'hosts:
  - localhost:2
  - {name: "no such"}
' "bad.yaml:3: 'hosts[1].name': bad host name 'no such' (letters, digits, '.', '-' and '_', or an IP address; the slots go in 'slots')"
bad_config "bad env name" 'env:
  NOT-A-NAME: 1
' "bad.yaml:2: 'env': bad variable name 'NOT-A-NAME' (letters, digits and '_', not starting with a digit)"

run_hr --config-file missing.yaml -np 1 true
expect_rc 2 "missing file"
expect_in err "horarun: error: cannot read config file 'missing.yaml': No such file or directory" \
  "missing file"
# The file is read where --config-file stands: its error comes even when a
# later flag would override every value in it.
printf 'np: zero\n' >bad.yaml
run_hr --config-file bad.yaml -np 1 true
expect_rc 2 "error before later flags"
expect_in err "bad.yaml:1: 'np': bad value 'zero'" "error before later flags"
run_hr_bounded 10 --config-file /dev/zero -np 1 true
expect_rc 2 "/dev/zero"
expect_in err "/dev/zero:1: NUL byte in the line (not a text file?)" "/dev/zero"
yes '# a comment' | head -c 2000000 >big.yaml
run_hr_bounded 10 --config-file big.yaml -np 1 true
expect_rc 2 "huge file"
expect_in err "big.yaml: larger than 1 MiB (the most a config file may hold)" \
  "huge file"
note "missing file, /dev/zero, a 2 MB file and bad values exit 2"
exit 0
