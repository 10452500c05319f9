# expect.sh -- the verdicts the test drivers share (sourced by
# tests/integration/lib.sh and tests/multihost/lib.sh, which run the jobs).
#
# A job NAME leaves its files in $T_JOBS: NAME.cmd (the command line),
# NAME.rc, NAME.time, NAME.out, NAME.err. Failures are counted in
# IT_FAILURES, not fatal: a driver runs all its steps and reports each
# failed one with what was expected and what happened. QUIET_RE is what
# expect_quiet refuses on stderr (each lib sets its own).

# asan_build: the build under test is make asan's (build-asan)
asan_build() {
  case "$BUILD" in *build-asan | *build-asan/) return 0 ;; esac
  return 1
}

fail() {
  IT_FAILURES=$((IT_FAILURES + 1))
  echo "FAIL: $*"
}

# show NAME [LINES]: the job's command, status and last output lines, once
# per job (later failures of the same job refer to it).
show() {
  if [ -e "$T_JOBS/$1.shown" ]; then
    echo "    (output of $1 shown above)"
    return
  fi
  : >"$T_JOBS/$1.shown"
  echo "    --- $1: $(cat "$T_JOBS/$1.cmd" 2>/dev/null)"
  echo "    --- exit status $(cat "$T_JOBS/$1.rc" 2>/dev/null), $(cat "$T_JOBS/$1.time" 2>/dev/null)s; last lines of stdout:"
  tail -n "${2:-25}" "$T_JOBS/$1.out" 2>/dev/null | sed 's/^/    | /'
  echo "    --- last lines of stderr:"
  tail -n "${2:-25}" "$T_JOBS/$1.err" 2>/dev/null | sed 's/^/    | /'
}

# expect_rc NAME STATUS: STATUS is a number, or "nonzero" (a failure, but
# not the test runner's timeout, 124).
expect_rc() {
  local _rc
  _rc=$(cat "$T_JOBS/$1.rc" 2>/dev/null)
  case "$2" in
  nonzero) [ -n "$_rc" ] && [ "$_rc" != 0 ] && [ "$_rc" != 124 ] && return 0 ;;
  *) [ "$_rc" = "$2" ] && return 0 ;;
  esac
  fail "$1: expected exit status $2, got ${_rc:-?}"
  show "$1"
  return 1
}

# expect_grep / expect_nogrep NAME out|err REGEX WHAT
expect_grep() {
  if ! grep -Eq -- "$3" "$T_JOBS/$1.$2"; then
    fail "$1: $4: expected a line of $2 matching /$3/, found none"
    show "$1"
    return 1
  fi
  return 0
}
expect_nogrep() {
  if grep -Eq -- "$3" "$T_JOBS/$1.$2"; then
    fail "$1: $4: expected no line of $2 matching /$3/, found:"
    grep -E -- "$3" "$T_JOBS/$1.$2" | head -n 10 | sed 's/^/    | /'
    show "$1" 10
    return 1
  fi
  return 0
}

# expect_count NAME out|err REGEX N WHAT
expect_count() {
  local _n
  _n=$(grep -Ec -- "$3" "$T_JOBS/$1.$2")
  if [ "$_n" != "$4" ]; then
    fail "$1: $5: expected $4 lines of $2 matching /$3/, found $_n"
    show "$1"
    return 1
  fi
  return 0
}

# expect_quiet NAME: nothing logged at warning level or above.
expect_quiet() {
  expect_nogrep "$1" err "$QUIET_RE" "nothing logged at warning level or above"
}
