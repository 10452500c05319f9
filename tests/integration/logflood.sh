#!/bin/sh
# logflood.sh -- a rank that makes horad complain without end must not
# flood the log: rank 1 writes 2 x 150,000 entries of unknown kinds into its
# submission ring, a second apart. horad may write a few of its warnings
# each second, then one "N similar messages suppressed" line; every entry is
# accounted for (written or counted), and the job ends normally.
. "$(dirname "$0")/lib.sh"

n=150000
hrun unknown 120 -np 2 "$T/it_flood" unknown $n
expect_rc unknown 0
expect_grep unknown out "^\[1\]<stdout>:rank 1: wrote $((2 * n)) entries" "rank 1 wrote its entries"
lines=$(grep -c 'sent an entry of unknown kind' "$IT_TMP/unknown.err")
say "horad wrote $lines warnings about unknown entries"
# two bursts, each within a second or two: a few lines per second
[ "$lines" -le 30 ] || fail "unknown: horad wrote $lines warnings for one rank's flood (expected a few a second)"
expect_grep unknown err 'horad\[[0-9]+\] WARNING: [0-9]+ similar messages suppressed \(daemon/rings\.c:[0-9]+\)' \
  "horad says how many it suppressed"
supp=$(sed -n 's/.*WARNING: \([0-9]*\) similar messages suppressed (daemon\/rings.*/\1/p' "$IT_TMP/unknown.err" |
  awk '{ s += $1 } END { print s + 0 }')
[ $((supp + lines)) -eq $((2 * n)) ] ||
  fail "unknown: $lines written + $supp suppressed, expected $((2 * n)) in all"
[ "$(grep -c 'similar messages suppressed' "$IT_TMP/unknown.err")" -ge 2 ] ||
  fail "unknown: expected a count of suppressed messages for each burst"
assert_no_leftovers "$MARK"
assert_clean_tmp unknown
finish
