#!/bin/sh
# big.sh -- large tensors with 2 ranks, float32 sum, malloc'd buffers not
# adopted into the segment (--adopt-size 0) but copied or streamed:
#   64 MiB + 20 bytes: larger than half of the default 128 MiB arena, so a
#     malloc'd buffer is streamed in chunks; also in place in a hora_alloc
#     block (zero copy), out of place from malloc / into the arena, and
#     with one rank's buffer in the arena and the other's streamed;
#   256 MiB: larger than the whole arena (in place and out of place), and a
#     broadcast of it from each root.
# With HORA_TEST_SCALE=small (ASan build) the arena is shrunk to 16 MiB and
# the sizes to 8 MiB + 20 bytes and 32 MiB: the same paths (and a tensor
# twice the arena's size) at an eighth of the memory traffic. half.adopt:
# the first set again with adoption on (malloc'd buffers adopted; one
# rank's in the arena, the other's adopted).
. "$(dirname "$0")/lib.sh"

if is_small; then
  arena=16M half=2M+5 whole=8M
else
  arena=128M half=16M+5 whole=64M
fi
say "arena $arena; float32 counts $half (over half the arena) and $whole (the arena's size in bytes x 2)"

hrun half 120 HORA_ARENA_SIZE=$arena HORA_ADOPT_SIZE=0 -np 2 "$T/it_coll" matrix -t float32 -o sum \
  -s "$half" -m ip_alloc,ip_malloc,oop_malloc,oop_sm_ra,oop_sa_rm,rankmix -x 2
expect_rc half 0
expect_nogrep half out "FAIL" "no check failed"
expect_quiet half
expect_count half out "^\[[0-9]\]<stdout>:rank [01] of 2: 6 checks, 0 failures, 0 alloc fallbacks" 2 \
  "6 allreduces checked on each rank, every hora_alloc served by the arena"

hrun half.adopt 120 HORA_ARENA_SIZE=$arena -np 2 "$T/it_coll" matrix -t float32 -o sum \
  -s "$half" -m ip_alloc,ip_malloc,oop_malloc,oop_sm_ra,oop_sa_rm,rankmix -x 2
expect_rc half.adopt 0
expect_nogrep half.adopt out "FAIL" "no check failed"
expect_quiet half.adopt

hrun whole 120 HORA_ARENA_SIZE=$arena HORA_ADOPT_SIZE=0 -np 2 "$T/it_coll" matrix -t float32 -o sum \
  -s "$whole" -m ip_malloc,oop_malloc -b -x 2
expect_rc whole 0
expect_nogrep whole out "FAIL" "no check failed"
expect_quiet whole
# 2 allreduces + a broadcast from each root
expect_count whole out "^\[[0-9]\]<stdout>:rank [01] of 2: 4 checks, 0 failures" 2 \
  "4 operations checked on each rank"
assert_no_leftovers "$MARK"
finish
