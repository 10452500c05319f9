#!/bin/sh
# solo.sh -- programs run without horarun are a job of one: rank 0, size 1,
# collectives are local copies (every dtype, op, buffer kind, size;
# broadcast; barrier; async; unnamed), hora_alloc works, exit 0. And a
# rank whose daemon socket does not exist, or whose environment is half
# there, gets a clean error from hora_init instead of a crash.
. "$(dirname "$0")/lib.sh"

solo matrix 120 "$T/it_coll" matrix -b -B "$IT_TMP/barrier" -s 0,1,7,33,4099,b1M+3 -x 1
expect_rc matrix 0
expect_grep matrix out "^rank 0 of 1: [0-9]+ checks, 0 failures, 0 alloc fallbacks" \
  "rank 0 of 1, every check passed, hora_alloc served every request"

solo async 120 "$T/it_coll" async -x 1
expect_rc async 0
expect_grep async out "^rank 0 of 1: [0-9]+ checks, 0 failures" "rank 0 of 1, every check passed"

solo output 60 "$T/it_output"
expect_rc output 0
if [ "$(tr '\r' '\n' <"$IT_TMP/output.out" | grep -c '^progress 0 [123]/3$')" != 3 ] ||
  ! tr '\r' '\n' <"$IT_TMP/output.out" | grep -q '^done 0$'; then
  fail "output: a job of one writes its output unchanged (no prefix)"
  show output
fi

# a socket path that does not exist: hora_init fails cleanly
echo "it_coll with HORA_DAEMON_SOCKET=$IT_TMP/nonexistent.sock" >"$IT_TMP/nosock.cmd"
env HORA_DAEMON_SOCKET="$IT_TMP/nonexistent.sock" HORA_RANK=0 HORA_RANK_TOKEN=0123 \
  "$T/it_coll" matrix -s 1 "--marker=$MARK" >"$IT_TMP/nosock.out" 2>"$IT_TMP/nosock.err"
echo $? >"$IT_TMP/nosock.rc"
expect_rc nosock 1
expect_grep nosock out "hora_init returned -?[0-9]+ \(HORA_E[A-Z]+\): .*nonexistent\.sock" \
  "hora_init reports an error naming the socket"

# the socket variable without HORA_RANK / HORA_RANK_TOKEN
echo "it_coll with HORA_DAEMON_SOCKET but no HORA_RANK" >"$IT_TMP/norank.cmd"
env -u HORA_RANK -u HORA_RANK_TOKEN HORA_DAEMON_SOCKET="$IT_TMP/nonexistent.sock" \
  "$T/it_coll" matrix -s 1 "--marker=$MARK" >"$IT_TMP/norank.out" 2>"$IT_TMP/norank.err"
echo $? >"$IT_TMP/norank.rc"
expect_rc norank 1
expect_grep norank out "hora_init returned -?[0-9]+ \(HORA_E[A-Z]+\): .*HORA_RANK" \
  "hora_init reports the missing variable"

# a regular file where the socket should be
: >"$IT_TMP/notasocket"
echo "it_coll with HORA_DAEMON_SOCKET naming a regular file" >"$IT_TMP/notsock.cmd"
env HORA_DAEMON_SOCKET="$IT_TMP/notasocket" HORA_RANK=0 HORA_RANK_TOKEN=0123 \
  "$T/it_coll" matrix -s 1 "--marker=$MARK" >"$IT_TMP/notsock.out" 2>"$IT_TMP/notsock.err"
echo $? >"$IT_TMP/notsock.rc"
expect_rc notsock 1
assert_no_leftovers "$MARK"
finish
