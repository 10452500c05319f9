#!/bin/sh
# streaming.sh -- a small arena and small chunks (HORA_ARENA_SIZE=1M,
# HORA_CHUNK_SIZE=64K) with 3 ranks: tensors that fit the arena, tensors
# over half of it (streamed when malloc'd), and tensors of ~2 MiB streamed
# in ~32 chunks, for every dtype (every element size meets the chunk
# boundaries), in place and out of place, hora_alloc / malloc and mixed
# (some ranks' buffers in the arena, others streamed), broadcasts from
# every root; then the async tests in the same small arena, where
# hundreds of operations in flight compete for it. malloc'd buffers are
# not adopted into the segment (HORA_ADOPT_SIZE=0), so that they stream;
# chunks.adopt runs the same with adoption on (some ranks' buffers in the
# arena, others adopted).
. "$(dirname "$0")/lib.sh"

small="HORA_ARENA_SIZE=1M HORA_CHUNK_SIZE=64K HORA_ADOPT_SIZE=0"

# shellcheck disable=SC2086
hrun fit 120 $small -np 3 "$T/it_coll" matrix -s 0,1,7,4099,b600K+1 -o sum,min -b -x 3
expect_rc fit 0
expect_nogrep fit out "FAIL" "no check failed"
expect_quiet fit
# oop_alloc of 2 x 600 KiB cannot fit a 1 MiB arena: proof that horad and
# the ranks got HORA_ARENA_SIZE
expect_count fit out "^\[[0-9]\]<stdout>:rank [0-2] of 3: [0-9]+ checks, 0 failures, [1-9][0-9]* alloc fallbacks" 3 \
  "no failure, and some hora_alloc calls refused by the 1 MiB arena"

# shellcheck disable=SC2086
hrun chunks 120 $small -np 3 "$T/it_coll" matrix -s b2M+7 -o average,product \
  -m ip_malloc,oop_sm_ra,rankmix -b -x 3
expect_rc chunks 0
expect_nogrep chunks out "FAIL" "no check failed"
expect_quiet chunks

hrun chunks.adopt 120 HORA_ARENA_SIZE=1M HORA_CHUNK_SIZE=64K -np 3 \
  "$T/it_coll" matrix -s b2M+7 -o average,product -m ip_malloc,oop_sm_ra,rankmix -b -x 3
expect_rc chunks.adopt 0
expect_nogrep chunks.adopt out "FAIL" "no check failed"
expect_quiet chunks.adopt

# shellcheck disable=SC2086
hrun async 120 $small -np 3 "$T/it_coll" async -x 3
expect_rc async 0
expect_nogrep async out "FAIL" "no check failed"
expect_quiet async
expect_count async out "^\[[0-9]\]<stdout>:rank [0-2] of 3: [0-9]+ checks, 0 failures" 3 \
  "every rank reports its checks, none failed"
assert_no_leftovers "$MARK"
finish
