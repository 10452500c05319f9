#!/bin/sh
# horad_job.sh -- horad on its control socketpair, driven by a minimal
# launcher (tests/cli/ctl_launcher.c) rather than horarun, so that a job
# can carry what horarun would refuse. A job runs and horad says READY,
# OUTPUT, EXIT and DONE over the socketpair; the job's knobs are parsed
# once from its environment: a bad value refuses the job with a message
# naming the variable, and horad's own environment is not where it reads
# them.
. "$(dirname "$0")/lib.sh"
HORAD=$BUILD/bin/horad
[ -x "$HORAD" ] || { echo "no $HORAD: run make first"; exit 77; }
drv=$BUILD/tests/ctl_launcher
srcs="$HORA_TOP/tests/cli/ctl_launcher.c $HORA_TOP/proto/msg.c \
  $HORA_TOP/common/log.c $HORA_TOP/common/err.c $HORA_TOP/common/params.c"
mkdir -p "$BUILD/tests"
${CC:-cc} -std=c11 -D_GNU_SOURCE -DHORA_VERSION_STRING='"test"' -O1 -g -Wall \
  -Wextra -I"$HORA_TOP/include" -I"$HORA_TOP/common" -I"$HORA_TOP/proto" \
  $srcs -o "$drv" -lm || fail "cannot build ctl_launcher"

# run_drv ARGS...: the driver, its stdout in out, horad's stderr in err
run_drv() {
  timeout -k 5 30 "$drv" "$HORAD" "$@" >"$TMP/out" 2>"$TMP/err"
  rc=$?
}

# ---- a job over the socketpair ------------------------------------------------
run_drv HORA_SPIN_US=10 HOROVOD_CYCLE_TIME=0.5 -- sh -c 'echo hello'
expect_rc 0 "driver"
expect_in out "READY" "a job"
expect_in out "OUTPUT 0 1 hello" "a job"
expect_in out "EXIT 0 0 0" "a job"
expect_in out "DONE" "a job"
expect_in out "horad exit 0" "a job"
note "a job over the socketpair: READY, OUTPUT, EXIT, DONE, exit 0"

run_drv -- sh -c 'exit 3'
expect_in out "EXIT 0 0 3" "a failing rank"
expect_in out "horad exit 0" "a failing rank"

# ---- a bad knob in the job's environment ---------------------------------------
run_drv HORA_SPIN_US=-3 -- true
expect_in err "invalid HORA_SPIN_US value '-3' in the job's environment: \
expected a non-negative whole number of microseconds" "bad HORA_SPIN_US"
expect_not_in out "READY" "bad HORA_SPIN_US: no job"
expect_in out "horad exit 1" "bad HORA_SPIN_US"
note "HORA_SPIN_US=-3 -> $(grep -o 'invalid.*' "$TMP/err" | head -n 1)"

run_drv HORA_CYCLE_TIME=1 HOROVOD_CYCLE_TIME=fast -- true
expect_in err "invalid HOROVOD_CYCLE_TIME value 'fast' in the job's \
environment: expected a non-negative number of milliseconds" "bad alias"
expect_in out "horad exit 1" "bad alias"

run_drv HORA_ARENA_SIZE=lots -- true
expect_in err "invalid HORA_ARENA_SIZE value 'lots'" "bad size"
expect_in out "horad exit 1" "bad size"

# ---- from the job, not from horad's own environment ------------------------------
run_drv HORA_LOG_LEVEL=debug -- true
expect_in out "horad exit 0" "job log level"
expect_in err "DEBUG" "HORA_LOG_LEVEL=debug in the job"
(export HORA_LOG_LEVEL=debug HORA_SPIN_US=-3
 run_drv -HORA_LOG_LEVEL -HORA_SPIN_US -- true
 expect_in out "horad exit 0" "own environment"
 expect_not_in err "DEBUG" "HORA_LOG_LEVEL in horad's own environment"
 expect_not_in err "invalid" "HORA_SPIN_US in horad's own environment") || exit 1
note "knobs come from the job's environment, not horad's own"
