#!/bin/sh
# sockbig.sh -- the job socket carries HELLO and BYE only: a connection
# that starts a large frame is dropped after a few KiB, so 200 connections
# each sending 1 MiB of a 16 MiB frame cannot make horad hold 200 MiB; the
# job goes on.
. "$(dirname "$0")/lib.sh"

hrun sockbig 120 -np 2 "$T/it_flood" sockbig 200
expect_rc sockbig 0 &&
  expect_count sockbig out '^\[[01]\]<stdout>:rank [01]: the job goes on' 2 "both ranks go on"
peak=$(sed -n "s/.*horad's peak memory: \([0-9-]*\) kB.*/\1/p" "$IT_TMP/sockbig.out")
say "sockbig: horad's peak memory ${peak:-?} kB"
if ! is_small && { [ -z "$peak" ] || [ "$peak" -gt 65536 ]; }; then
  fail "sockbig: horad's peak memory is ${peak:-?} kB (expected under 64 MiB)"
fi
expect_grep sockbig err 'job socket: a frame longer than 4096 bytes' "horad says why it drops them"
[ "$(grep -c 'job socket:' "$IT_TMP/sockbig.err")" -le 20 ] || fail "sockbig: too many log lines"
assert_no_leftovers "$MARK"
assert_clean_tmp sockbig
finish
