#!/bin/sh
# pending.sh -- what a rank can make horad hold through its rings is
# bounded by HORA_MAX_PENDING:
#   names: rank 1 writes 300,000 valid submissions of names nobody else
#     submits straight into its ring; with HORA_MAX_PENDING=10000 horad
#     takes 10,000 (and the ring holds 256 more), then nothing more, says
#     so, and its memory stays small; the job then fails normally;
#   many: libhora ranks with more operations in flight than the limit wait
#     in submission, and every result is still right.
. "$(dirname "$0")/lib.sh"

max=10000
hrun names 120 HORA_MAX_PENDING=$max -np 2 "$T/it_flood" names 300000
expect_rc names 5
took=$(sed -n 's/.*horad took \([0-9]*\) of .*/\1/p' "$IT_TMP/names.out")
peak=$(sed -n 's/.*its peak memory: \([0-9-]*\) kB.*/\1/p' "$IT_TMP/names.out")
say "names: horad took ${took:-?} submissions, peak memory ${peak:-?} kB"
if [ -z "$took" ] || [ "$took" -lt $max ] || [ "$took" -gt $((max + 256)) ]; then
  fail "names: horad took ${took:-?} submissions (expected $max, plus the 256 the ring holds)"
  show names
fi
if ! is_small && { [ -z "$peak" ] || [ "$peak" -gt 65536 ]; }; then
  fail "names: horad's peak memory is ${peak:-?} kB (expected under 64 MiB)"
fi
expect_grep names err "WARNING: rank 1 has $max operations pending in horad" "horad says why it stops"
expect_grep names out "^\[0\]<stdout>:rank 0: got HORA_EPEERGONE as expected: .*rank 1" \
  "rank 0 is told rank 1 left"
expect_nogrep names err "exited unexpectedly" "horad survives"
assert_no_leftovers "$MARK"
assert_clean_tmp names

hrun many 120 HORA_MAX_PENDING=1000 -np 2 "$T/it_flood" many 30000
expect_rc many 0 &&
  expect_count many out "^\[[0-9]\]<stdout>:rank [0-9]: 30000 operations: .*, 0 wrong" 2 \
    "every rank checked its 30000 operations"
assert_no_leftovers "$MARK"
finish
