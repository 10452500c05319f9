#!/bin/sh
# env.sh -- what each rank gets: HORA_* and HOROVOD_* layout variables,
# horarun's environment (minus BASH_FUNC_* and OLDPWD), knobs given as
# flags, the working directory, its arguments intact, and /dev/null as
# stdin.
. "$(dirname "$0")/lib.sh"
use_horad
host=$(hostname)

# ---- layout variables, both spellings ------------------------------------------
show='for v in RANK SIZE LOCAL_RANK LOCAL_SIZE CROSS_RANK CROSS_SIZE HOSTNAME; do
  eval "a=\${HORA_$v-unset} b=\${HOROVOD_$v-unset}"; echo "$v=$a/$b"; done'
run_hr -np 3 sh -c "$show"
expect_rc 0 "layout variables"
for r in 0 1 2; do
  for kv in "RANK=$r/$r" "SIZE=3/3" "LOCAL_RANK=$r/$r" "LOCAL_SIZE=3/3" \
    "CROSS_RANK=0/0" "CROSS_SIZE=1/1" "HOSTNAME=$host/$host"; do
    grep -qxF "[$r]<stdout>:$kv" "$TMP/out" || fail "rank $r lacks $kv"
  done
done
note "HORA_* and HOROVOD_* layout variables for 3 ranks"

# ---- horarun's environment, filtered like horovodrun's ---------------------------
cd "$TMP" || fail "cd"
mkdir -p "sub dir" && cd "sub dir" || fail "cd"
OLDPWD=/somewhere && export OLDPWD
env "FOO_$MARK=bar baz" 'BASH_FUNC_hrtest%%=() {  echo hi; }' \
  timeout 60 "$HORARUN" -np 1 sh -c 'env; echo "cwd=$(pwd)"' \
  >"$TMP/out" 2>"$TMP/err"
rc=$?
expect_rc 0 "environment"
expect_in out "[0]<stdout>:FOO_$MARK=bar baz" "environment passes"
expect_in out "[0]<stdout>:PYTHONUNBUFFERED=1" "PYTHONUNBUFFERED"
expect_in out "[0]<stdout>:cwd=$TMP/sub dir" "working directory"
expect_not_in out "BASH_FUNC_hrtest" "BASH_FUNC_* dropped"
expect_not_in out "OLDPWD=/somewhere" "OLDPWD dropped"
cd "$HORA_TOP" || fail "cd"
PYTHONUNBUFFERED=0 && export PYTHONUNBUFFERED
run_hr -np 1 sh -c 'echo "py=$PYTHONUNBUFFERED"'
expect_in out "[0]<stdout>:py=0" "PYTHONUNBUFFERED kept when set"
unset PYTHONUNBUFFERED
note "environment and cwd pass; BASH_FUNC_*, OLDPWD dropped"

# ---- knobs given as flags become env vars; a flag beats the environment -----------
HORA_THREADS=9 && export HORA_THREADS
run_hr --log-level error --threads 3 --arena-size=64M --spin-us 10 \
  --chunk-size 1M -np 1 sh -c 'echo "$HORA_LOG_LEVEL $HORA_THREADS
  $HORA_ARENA_SIZE $HORA_SPIN_US $HORA_CHUNK_SIZE"'
expect_rc 0 "knobs"
expect_in out "[0]<stdout>:error 3" "log level and threads"
expect_in out "[0]<stdout>:  64M 10 1M" "sizes"
run_hr -np 1 sh -c 'echo "threads=$HORA_THREADS"'
expect_in out "[0]<stdout>:threads=9" "the environment's value without a flag"
unset HORA_THREADS
note "knob flags reach the ranks as HORA_* variables"

# ---- arguments intact; stdin is /dev/null ------------------------------------------
run_hr -np 1 sh -c 'printf "<%s>" "$@"; echo' prog "a b" "" "c'd" '$HOME' '*'
expect_rc 0 "arguments"
expect_file "$TMP/out" "[0]<stdout>:<a b><><c'd><\$HOME><*>\n" "arguments"
echo "data on horarun's stdin" |
  timeout 30 "$HORARUN" -np 1 sh -c 'cat; echo "read done"' >"$TMP/out" 2>&1
expect_file "$TMP/out" '[0]<stdout>:read done\n' "stdin is /dev/null"
note "arguments reach the program intact; stdin is /dev/null"
exit 0
