#!/bin/sh
# killd.sh -- a horad that is killed (SIGKILL, SIGTERM) or crashes
# (SIGSEGV, SIGABRT) during a job leaves nothing behind: its socket lives in
# the abstract namespace (the ranks get "@..."), so there is no file or
# directory to remove, in the job's TMPDIR or anywhere, and the name is
# gone from /proc/net/unix once horad is. The job ends, non-zero, and no
# process of it is left.
. "$(dirname "$0")/lib.sh"

for s in KILL:9 TERM:15 SEGV:11 ABRT:6; do # Linux's numbers
  sig=${s%:*} num=${s#*:}
  name=sig$sig
  # a sanitized horad would report the SIGSEGV itself: let it just die
  hrun $name 60 ASAN_OPTIONS="$ASAN_OPTIONS:handle_segv=0" -np 2 "$T/it_killd" "$num"
  expect_rc $name nonzero
  expect_grep $name out '^\[0\]<stdout>:rank 0: socket @hora-' "the rank is given an abstract socket"
  expect_nogrep $name out 'returned HORA_SUCCESS|returned 0' "no operation succeeds without horad"
  assert_no_leftovers "$MARK"
  assert_clean_tmp $name
  left=$(ls -A "$IT_TMP/tmp.$name" 2>/dev/null)
  [ -z "$left" ] || fail "$name: left in the job's TMPDIR: $left"
  sock=$(sed -n 's/^\[0\]<stdout>:rank 0: socket @\(.*\)$/\1/p' "$IT_TMP/$name.out")
  if [ -n "$sock" ] && grep -q -- "@$sock\$" /proc/net/unix 2>/dev/null; then
    fail "$name: the socket @$sock is still bound after horad died"
  fi
done
# and a job that ends normally leaves nothing either
hrun normal 60 -np 2 "$T/it_coll" matrix -x 2
expect_rc normal 0
assert_clean_tmp normal
[ -z "$(ls -A "$IT_TMP/tmp.normal" 2>/dev/null)" ] || fail "normal: left files in the job's TMPDIR"
finish
