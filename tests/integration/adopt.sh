#!/bin/sh
# adopt.sh -- large malloc'd buffers reduced where they lie (it_adopt.c):
# results right in place, out of place, for a part of a buffer, for an
# allgather and a broadcast, after the program wrote new values, for a
# buffer freed and malloc'd again at the same address, for a pointer
# inside an allocation; the buffers' pages are the segment's (adopted)
# from their second operation on, not after one, and not with
# --adopt-size 0; a region too small for a second buffer copies
# it, and takes a third once the first is freed; /metrics counts the
# operations on adopted memory.
. "$(dirname "$0")/lib.sh"

# Under AddressSanitizer malloc is the sanitizer's: nothing is adopted
# (libhora finds that glibc's malloc does not serve the program), every
# buffer is copied, and the results must be as right.
yes=yes
asan_build && yes=no

ok() { # NAME NP
  expect_rc "$1" 0 &&
    expect_count "$1" out "^\[[0-9]+\]<stdout>:rank [0-9]+: adopt: [0-9]+ checks, 0 failures" "$2" \
      "every rank reports its checks, none failed"
  expect_nogrep "$1" out "FAIL" "no check failed"
}
seg() { # NAME NP BUFFER yes|no
  expect_count "$1" out "^\[[0-9]+\]<stdout>:rank [0-9]+: $3 in the segment: $4\$" "$2" \
    "every rank's $3 is in horad's segment: $4"
}

for np in 2 3; do
  hrun on.np$np 120 -np $np "$T/it_adopt" check
  ok on.np$np $np
  for b in a b d a2; do seg on.np$np $np $b $yes; done
  seg on.np$np $np "a after one operation" no
  [ $yes = yes ] &&
    expect_count on.np$np out "^\[[0-9]+\]<stdout>:rank [0-9]+: the new buffer is at the old one's address" $np \
      "the buffer malloc'd after a free lies where the freed one lay"
  expect_quiet on.np$np
done
hrun off 120 --adopt-size 0 -np 2 "$T/it_adopt" check
ok off 2
for b in a b d a2; do seg off 2 $b no; done
hrun full 120 HORA_ADOPT_SIZE=20M -np 2 "$T/it_adopt" full
ok full 2
seg full 2 x $yes
seg full 2 y no
seg full 2 z $yes

# /metrics: hora_adopted_operations_total and _bytes_total
if ! metrics_of metrics 120 "$IT_TMP/metrics.txt" -np 2 "$T/it_adopt" check; then
  say "metrics: no curl here; not checked"
  assert_no_leftovers "$MARK"
  finish
fi
ok metrics 2
ops=$(sed -n 's/^hora_adopted_operations_total{[^}]*} \([0-9]*\)$/\1/p' "$IT_TMP/metrics.txt")
bytes=$(sed -n 's/^hora_adopted_bytes_total{[^}]*} \([0-9]*\)$/\1/p' "$IT_TMP/metrics.txt")
if [ $yes = yes ] && [ -n "$ops" ] && [ "$ops" -gt 0 ] && [ -n "$bytes" ] &&
  [ "$bytes" -ge $((ops * 65536)) ]; then
  say "metrics: $ops operations on adopted memory, $bytes bytes"
elif [ $yes = no ] && [ "$ops" = 0 ] && [ "$bytes" = 0 ]; then
  say "metrics: no operation on adopted memory (nothing adopted)"
else
  fail "metrics: adopted operations '$ops', bytes '$bytes'"
  grep -i 'adopted' "$IT_TMP/metrics.txt" | sed 's/^/    | /'
fi
assert_no_leftovers "$MARK"
finish
