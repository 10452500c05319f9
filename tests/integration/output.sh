#!/bin/sh
# output.sh -- rank output through the real stack (rank -> horad ->
# horarun): '\r'-terminated progress segments, an empty line, tabs and
# double spaces, a stderr line, and a last line without a newline, from 2
# ranks. Every piece must come out on its own line as [<rank>]<stdout>:...
# (or <stderr>), unchanged, the partial line completed.
. "$(dirname "$0")/lib.sh"

hrun out2 60 -np 2 "$T/it_output"
expect_rc out2 0
expect_quiet out2
# '\r' ends a segment like '\n' does; look at the segments
tr '\r' '\n' <"$IT_TMP/out2.out" | grep -v '^$' >"$IT_TMP/segs.out"
tr '\r' '\n' <"$IT_TMP/out2.err" | grep -v '^$' >"$IT_TMP/segs.err"
cp "$IT_TMP/out2.cmd" "$IT_TMP/segs.cmd"
cp "$IT_TMP/out2.rc" "$IT_TMP/segs.rc"
tab=$(printf '\t')
for r in 0 1; do
  for k in 1 2 3; do
    expect_count segs out "^\[$r\]<stdout>:progress $r $k/3\$" 1 "progress segment $k of rank $r"
  done
  expect_count segs out "^\[$r\]<stdout>:done $r\$" 1 "line 'done $r'"
  expect_count segs out "^\[$r\]<stdout>:\$" 1 "the empty line of rank $r"
  expect_count segs out "^\[$r\]<stdout>:tab${tab}and  spaces $r\$" 1 "tabs and spaces kept (rank $r)"
  expect_count segs out "^\[$r\]<stdout>:partial $r\$" 1 "the last line without newline (rank $r)"
  expect_count segs err "^\[$r\]<stderr>:err $r\$" 1 "the stderr line of rank $r"
done
# nothing unprefixed, nothing mixed up between streams
expect_nogrep segs out '^([^[]|\[[0-9]+\][^<]|\[[0-9]+\]<[^s])' "every stdout segment carries a rank prefix"
expect_nogrep segs out '<stderr>' "no stderr line on stdout"
expect_nogrep segs err '^\[[0-9]+\]<stdout>' "no stdout line on stderr"
# the partial line is the last thing rank r printed, and it ends the line
if [ -n "$(tail -c 1 "$IT_TMP/out2.out")" ]; then
  fail "out2: horarun's stdout does not end with a newline"
fi
assert_no_leftovers "$MARK"
finish
