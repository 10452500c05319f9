#!/bin/sh
# usage.sh -- horarun's command line: --help, --version, and every usage
# error exits 2 with one "horarun: error:" line and the short usage.
. "$(dirname "$0")/lib.sh"

# ---- --help / --version ---------------------------------------------------
for h in -h --help; do
  run_hr $h
  expect_rc 0 "$h"
  for flag in -np --num-proc -H --hosts --verbose --output-filename \
    -prefix-timestamp --prefix-output-with-timestamp --version --help \
    --start-timeout --log-level -hostfile --hostfile -p --ssh-port -i \
    --ssh-identity-file --network-interface --network-interfaces \
    --config-file --fusion-threshold-mb --no-hierarchical-allreduce \
    --no-stall-check --stall-check --log-with-timestamp; do
    expect_in out "$flag" "$h lists $flag"
  done
  [ -s "$TMP/err" ] && fail "$h wrote on stderr"
done
# Every knob of the parameter table that has a flag is listed with its env.
grep -o '"--[a-z-]*"' "$HORA_TOP/common/params.c" | tr -d '"' |
  while read -r flag; do
    grep -qF -- "$flag" "$TMP/out" || fail "--help misses knob $flag"
  done || exit 1
expect_in out "HORA_START_TIMEOUT or HOROVOD_START_TIMEOUT" "knob env names"
expect_in out "default 30" "knob defaults"
note "--help lists every option and knob"

# The man page documents every flag --help lists.
sed -n 's/^  \(-[^ ,]*\)\(, \(-[^ ,]*\)\)\{0,1\}.*/\1 \3/p' "$TMP/out" |
  tr ' ' '\n' | grep . | while read -r flag; do
    roff=$(printf '%s' "$flag" | sed 's/-/\\-/g')
    grep -qF -- "$roff" "$HORA_TOP/man/horarun.1" ||
      fail "man/horarun.1 does not document $flag"
  done || exit 1
note "man/horarun.1 documents every flag"

version=$(sed -n 's/^VERSION *:= *//p' "$HORA_TOP/Makefile")
for v in -v --version; do
  run_hr $v
  expect_rc 0 "$v"
  grep -q "^horarun $version" "$TMP/out" || fail "$v: $(cat "$TMP/out")"
done
# Options after the program belong to the program.
run_hr -np 1 sh -c 'echo "$1"' prog --version
expect_rc 0 "program's own --version"
grep -qx '\[0\]<stdout>:--version' "$TMP/out" || fail "program got --version"
note "--version prints 'horarun $version'"
"$BUILD/bin/horad" --version >"$TMP/out" 2>&1 || fail "horad --version: exit $?"
grep -q "^horad $version" "$TMP/out" && grep -qx "engines: cpu" "$TMP/out" &&
  grep -q "^CUDA tensors: staged" "$TMP/out" ||
  fail "horad --version names its version, engines and CUDA tensors' path: $(cat "$TMP/out")"
note "horad --version prints its version and engines"

# ---- usage errors -----------------------------------------------------------
# usage_error WHAT EXPECTED-FRAGMENT ARGS...
usage_error() {
  what=$1 frag=$2
  shift 2
  run_hr "$@"
  expect_rc 2 "$what"
  [ -s "$TMP/out" ] && fail "$what: wrote on stdout"
  n=$(grep -c '^horarun: error: ' "$TMP/err")
  [ "$n" -eq 1 ] || fail "$what: $n error lines"
  head -n 1 "$TMP/err" | grep -q '^horarun: error: ' ||
    fail "$what: the error is not the first line"
  expect_in err "$frag" "$what"
  expect_in err "usage: horarun" "$what shows the usage"
  echo "ok: $what -> $(head -n 1 "$TMP/err")"
}

usage_error "no program" "no program" -np 2
usage_error "nothing at all" "no program"
usage_error "no program after --" "no program" -np 2 --
usage_error "-np 0" "invalid -np value '0'" -np 0 true
usage_error "-np negative" "invalid -np value '-3'" -np -3 true
usage_error "-np not a number" "invalid -np value 'two'" -np two true
usage_error "-np with junk" "invalid -np value '2x'" -np 2x true
usage_error "--num-proc=0" "invalid -np value '0'" --num-proc=0 true
usage_error "-np missing value" "needs a value" -np
usage_error "--log-level missing value" "needs a value" --log-level
usage_error "bad --log-level" "invalid --log-level value 'loud'" \
  --log-level loud -np 1 true
usage_error "bad --start-timeout" "invalid --start-timeout value 'soon'" \
  --start-timeout soon -np 1 true
usage_error "unknown flag" "unrecognized option '--frobnicate'" \
  --frobnicate -np 1 true
usage_error "unknown short flag" "unrecognized option '-x'" -x -np 1 true
usage_error "value to a flag without one" "takes no value" --verbose=yes \
  -np 1 true
usage_error "too many processes" \
  "requested 5 processes but the hosts give only 4 slots" \
  -np 5 -H localhost:4 true
usage_error "too many processes, two entries" \
  "requested 4 processes but the hosts give only 3 slots" \
  -np 4 -H localhost:2,127.0.0.1 true
usage_error "-np over what one host's horad takes" \
  "100000 processes would put 100000 ranks on host 'localhost'; horad runs at most 65536 ranks on one host" \
  -np 100000 true
usage_error "-np over the maximum" \
  "invalid -np value '1048577': expected a whole number from 1 to 1048576" \
  -np 1048577 true
usage_error "-H empty slots" "bad host 'localhost:'" -np 1 -H localhost: true
usage_error "-H zero slots" "bad host 'localhost:0'" -np 1 -H localhost:0 true
usage_error "-H letters as slots" "bad host 'localhost:x'" \
  -np 1 -H localhost:x true
usage_error "-H no name" "bad host ':2'" -np 1 -H :2 true
usage_error "-H empty entry" "empty entry" -np 1 -H localhost:1,,localhost:1 \
  true
usage_error "-H trailing comma" "empty entry" -np 1 -H localhost:1, true
usage_error "-H bad character" "bad host 'a/b:1'" -np 1 -H a/b:1 true
usage_error "-H empty" "empty host list" -np 1 -H "" true
usage_error "no -np and no -H" "-np is required" true
usage_error "-H host starting with -" "bad host '-oProxyCommand=x'" \
  -np 1 -H -oProxyCommand=x true
usage_error "-p 0" \
  "invalid -p value '0': expected a port number from 1 to 65535" -p 0 true
usage_error "--ssh-port too big" "invalid --ssh-port value '65536'" \
  --ssh-port=65536 -np 1 true
usage_error "-i empty" "-i needs a file name" -i "" -np 1 true
usage_error "--hostfile missing" "cannot read host file '/nonexistent/h'" \
  --hostfile /nonexistent/h true
usage_error "--config-file missing" \
  "cannot read config file '/nonexistent/c.yaml': No such file or directory" \
  --config-file /nonexistent/c.yaml true
usage_error "--network-interface empty entry" \
  "--network-interface: empty interface name in 'eth0,'" \
  --network-interface eth0, -np 1 true
usage_error "--fusion-threshold-mb fraction" \
  "invalid --fusion-threshold-mb value '1.5': expected a whole number" \
  --fusion-threshold-mb 1.5 -np 1 true
usage_error "--launcher unknown" \
  "invalid --launcher value 'rsh': expected ssh, srun, mpirun or service" --launcher rsh -np 1 true
usage_error "--launcher srun outside an allocation" \
  "--launcher srun starts horad in a job step of the Slurm allocation" \
  --launcher srun -np 1 true
usage_error "--small-allreduce above its most" \
  "invalid --small-allreduce value '32K': expected a size of at most 16384 bytes" \
  --small-allreduce 32K -np 1 true
usage_error "--autotune-gaussian-process-noise above 1" \
  "expected a number from 0 to 1" --autotune-gaussian-process-noise 2 \
  -np 1 true
usage_error "boolean knob with a value" "option '--autotune' takes no value" \
  --autotune=1 -np 1 true
# Knobs in the environment are checked as horad will read them.
# env_error VAR=VALUE EXPECTED-FRAGMENT: horarun -np 1 true with it set
env_error() {
  ( export "$1" && usage_error "$1" "$2" -np 1 true ) || exit 1
}
env_error HORA_KILL_GRACE=abc "invalid HORA_KILL_GRACE value 'abc' in the \
environment: expected a non-negative number of seconds"
env_error HORA_SPIN_US=-3x "invalid HORA_SPIN_US value '-3x' in the \
environment: expected a non-negative whole number of microseconds"
env_error HOROVOD_CYCLE_TIME=fast "invalid HOROVOD_CYCLE_TIME value 'fast' \
in the environment: expected a non-negative number of milliseconds"
# A remote host's ssh key is checked before anything starts.
usage_error "unreadable -i with a remote host" \
  "cannot read the ssh identity file '/nonexistent/key'" \
  -i /nonexistent/key -np 2 -H localhost:1,remote.invalid:1 true

# ---- accepted spellings ------------------------------------------------------
use_horad
run_hr --num-proc=2 --hosts=localhost:2 --start-timeout=20 --log-level=error \
  -- sh -c 'echo $HORA_SIZE'
expect_rc 0 "--opt=value forms"
[ "$(grep -c '<stdout>:2$' "$TMP/out")" -eq 2 ] || fail "--opt=value forms"
run_hr -np 1 -H 127.0.0.1 true
expect_rc 0 "-H host without slots"
run_hr -H localhost:3 sh -c 'echo $HORA_SIZE'
expect_rc 0 "-np from the slots of -H"
[ "$(grep -c '<stdout>:3$' "$TMP/out")" -eq 3 ] || fail "-np from -H slots"
run_hr -np 2 -H "[::1]:1,$(hostname):1" sh -c 'echo $HORA_LOCAL_SIZE'
expect_rc 0 "local aliases merge into one host"
[ "$(grep -c '<stdout>:2$' "$TMP/out")" -eq 2 ] || fail "aliases merge"
ip=$(hostname -I 2>/dev/null | awk '{ print $1 }')
if [ -n "$ip" ]; then
  run_hr -np 2 -H "$ip,127.0.0.2" true
  expect_rc 0 "an address of this machine is local"
fi
note "--opt=value, bare host, -np from -H, local aliases and addresses"
exit 0
