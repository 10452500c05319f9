#!/bin/sh
# lib.sh -- helpers for horarun's CLI tests; the tests source it.
#
# Finds the binaries ($BUILD/bin, BUILD absolute, default build/), makes a
# scratch directory removed at exit, builds the fake horad
# (tests/cli/fake_horad.c) on demand, and offers small assertions. Run
# directly, it checks that horarun runs and the fake horad builds.
#
# Which horad: the real $BUILD/bin/horad when it exists (horarun finds it
# beside itself), else the fake one. HORA_TEST_FAKE_HORAD=1 forces the fake.

HORA_TOP=${HORA_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${BUILD:-$HORA_TOP/build}
case "$BUILD" in /*) ;; *) BUILD=$HORA_TOP/$BUILD ;; esac
HORARUN=$BUILD/bin/horarun
export HORA_TOP BUILD
unset HORA_HORAD HORA_START_TIMEOUT HOROVOD_START_TIMEOUT HORA_LOG_LEVEL \
  HOROVOD_LOG_LEVEL

if [ ! -x "$HORARUN" ]; then
  echo "no $HORARUN: run make first"
  exit 77
fi

# A marker unique to this test run, for finding leftover processes.
MARK=hrtest$$x$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')
TMP=$(mktemp -d "${TMPDIR:-/tmp}/horarun-test.XXXXXX") || exit 1
trap 'kill_marked; rm -rf "$TMP"' EXIT
trap 'exit 1' INT TERM HUP

fail() {
  printf 'FAIL: %s\n' "$*"
  for f in out err; do
    if [ -s "$TMP/$f" ]; then
      echo "--- $f (first 20 lines):"
      head -n 20 "$TMP/$f" | cat -A | cut -c1-200
    fi
  done
  exit 1
}

note() { printf 'ok: %s\n' "$*"; }

# run_hr ARGS...: runs horarun with stdout in $TMP/out, stderr in $TMP/err
# and the exit status in $rc, under a 60 s timeout.
run_hr() {
  timeout -k 5 60 "$HORARUN" "$@" >"$TMP/out" 2>"$TMP/err"
  rc=$?
}

# run_hr_bounded SECONDS ARGS...: run_hr under a time limit and, except
# under AddressSanitizer (which reserves terabytes of address space), a
# 2 GiB address space limit, so that a horarun that grows without bound
# fails the test instead of the machine.
run_hr_bounded() {
  _limit=$1
  shift
  (
    ldd "$HORARUN" 2>/dev/null | grep -q libasan || ulimit -v 2097152
    exec timeout -k 2 "$_limit" "$HORARUN" "$@"
  ) >"$TMP/out" 2>"$TMP/err"
  rc=$?
}

expect_rc() { # expected what
  [ "$rc" -eq "$1" ] || fail "$2: exit status $rc, expected $1"
}

# expect_in FILE PATTERN WHAT: a line of FILE matches the fixed string.
expect_in() {
  grep -qF -- "$2" "$TMP/$1" || fail "$3: no '$2' in $1"
}

expect_not_in() {
  if grep -qF -- "$2" "$TMP/$1"; then fail "$3: unexpected '$2' in $1"; fi
}

# expect_file FILE EXPECTED-TEXT WHAT: FILE is exactly the text (printf
# escapes allowed in EXPECTED-TEXT).
expect_file() {
  printf "$2" >"$TMP/expected"
  cmp -s "$TMP/expected" "$1" || {
    echo "--- expected:"; cat -A "$TMP/expected" | head -n 20
    echo "--- got:"; cat -A "$1" | head -n 20
    fail "$3"
  }
}

# Builds the fake horad (cached in $BUILD/tests) and prints its path.
fake_horad() {
  f=$BUILD/tests/fake_horad
  srcs="$HORA_TOP/tests/cli/fake_horad.c $HORA_TOP/proto/msg.c \
    $HORA_TOP/common/log.c $HORA_TOP/common/err.c $HORA_TOP/common/params.c"
  stale=1
  if [ -x "$f" ]; then
    stale=0
    for s in $srcs $HORA_TOP/proto/msg.h $HORA_TOP/common/common.h; do
      [ "$s" -nt "$f" ] && stale=1
    done
  fi
  if [ $stale -eq 1 ]; then
    mkdir -p "$BUILD/tests" || return 1
    ${CC:-cc} -std=c11 -D_GNU_SOURCE -DHORA_VERSION_STRING='"test"' -O1 -g \
      -Wall -Wextra -I"$HORA_TOP/include" -I"$HORA_TOP/common" \
      -I"$HORA_TOP/proto" $srcs -o "$f.tmp.$$" -lm >&2 &&
      mv "$f.tmp.$$" "$f" || return 1
  fi
  echo "$f"
}

# Builds tests/cli/flood.c (cached in $BUILD/tests) and prints its path.
flood_bin() {
  f=$BUILD/tests/flood
  if [ ! -x "$f" ] || [ "$HORA_TOP/tests/cli/flood.c" -nt "$f" ]; then
    mkdir -p "$BUILD/tests" || return 1
    ${CC:-cc} -std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra \
      "$HORA_TOP/tests/cli/flood.c" -o "$f.tmp.$$" >&2 &&
      mv "$f.tmp.$$" "$f" || return 1
  fi
  echo "$f"
}

# use_fake_ssh: puts an `ssh` first on PATH that runs the remote command
# (horad --rendezvous) on this machine, told where horarun is
# (--launcher 127.0.0.1), so that "remote" hosts need no sshd. It appends
# the host it was given to $TMP/ssh.hosts, one line each. Set before the
# job:
#   FAKE_SSH_FAIL="h1 h2"  these hosts fail as unresolvable (exit 255)
#   FAKE_SSH_FLOOD=N       first open N silent connections to the
#                          rendezvous port (from the bootstrap line), held
#                          for 20 s, and start horad once they are up
use_fake_ssh() {
  mkdir -p "$TMP/bin" || fail "mkdir"
  FAKE_SSH_FLOODER=$(flood_bin) || fail "cannot build tests/cli/flood.c"
  export FAKE_SSH_FLOODER FAKE_SSH_TMP="$TMP" FAKE_SSH_MARK="$MARK"
  cat >"$TMP/bin/ssh" <<'SSH'
#!/bin/sh
while [ $# -gt 0 ] && [ "$1" != "--" ]; do shift; done
shift
host=$1
shift
echo "$host" >>"$FAKE_SSH_TMP/ssh.hosts"
case " ${FAKE_SSH_FAIL:-} " in
*" $host "*)
  echo "ssh: Could not resolve hostname $host: Name or service not known" >&2
  exit 255 ;;
esac
if [ -n "${FAKE_SSH_FLOOD:-}" ]; then
  IFS= read -r line || exit 255
  port=$(echo "$line" | cut -d ' ' -f 3)
  fifo=$FAKE_SSH_TMP/flood.$$
  mkfifo "$fifo" || exit 255
  "$FAKE_SSH_FLOODER" "$port" "$FAKE_SSH_FLOOD" 20 "$FAKE_SSH_MARK" \
    >"$fifo" 2>&1 </dev/null &
  read -r ready <"$fifo"
  rm -f "$fifo"
  case "$ready" in ready*) ;; *) echo "fake ssh: $ready" >&2; exit 255 ;; esac
  printf '%s\n' "$line" | sh -c "$* --launcher 127.0.0.1"
  exit $?
fi
exec sh -c "$* --launcher 127.0.0.1"
SSH
  chmod +x "$TMP/bin/ssh" || fail "chmod"
  PATH=$TMP/bin:$PATH
  export PATH
}

# use_fake_horad: makes horarun start the fake horad.
use_fake_horad() {
  HORA_HORAD=$(fake_horad) || fail "cannot build the fake horad"
  export HORA_HORAD
  HORAD_KIND=fake
}

# use_horad: the real horad when built, else the fake one.
use_horad() {
  if [ -x "$BUILD/bin/horad" ] && [ -z "${HORA_TEST_FAKE_HORAD:-}" ]; then
    unset HORA_HORAD
    HORAD_KIND=real
  else
    use_fake_horad
  fi
  echo "using the $HORAD_KIND horad"
}


# leftovers: prints processes whose command line holds $MARK.
leftovers() {
  pgrep -af "$MARK" | grep -v -e "pgrep" -e "^$$ " || true
}

# kill_marked: kills what this test started that holds $MARK (after a
# failure, so that no sleeping rank outlives the test).
kill_marked() {
  [ -n "${MARK:-}" ] || return 0
  for p in $(pgrep -f "$MARK"); do
    [ "$p" != "$$" ] && kill -KILL "$p" 2>/dev/null
  done
  true
}

case "$0" in
*lib.sh)
  "$HORARUN" --version >/dev/null || fail "horarun --version"
  fake_horad >/dev/null || fail "the fake horad does not build"
  note "horarun runs and the fake horad builds"
  ;;
esac
