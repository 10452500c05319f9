#!/bin/sh
# cuda.sh -- device (CUDA) buffers through libhora (it_cuda.c), against the
# stand-in driver of tests/fakecuda, whose "device memory" faults when
# anything but the driver touches it: every collective on device buffers,
# streamed ones, mixed host and device buffers, many at once, a group;
# the driver loaded after hora_init(); a failed copy in and out; a job of
# one; a program without the driver never loads it; a device tensor on
# some ranks and a host tensor on others fails with the mismatch.
. "$(dirname "$0")/lib.sh"

FAKECUDA_LIB=$T/fakecuda/libcuda.so.1
[ -f "$FAKECUDA_LIB" ] || skip "no $FAKECUDA_LIB (make check builds it)"
export FAKECUDA_LIB

ok() { # NAME NP MODE
  expect_rc "$1" 0 &&
    expect_count "$1" out "^\[[0-9]+\]<stdout>:rank [0-9]+: cuda $3: [0-9]+ checks, 0 failures" "$2" \
      "every rank reports its checks, none failed"
}

for np in 2 3; do
  hrun matrix.np$np 300 --arena-size 4M -np $np "$T/it_cuda" matrix
  ok matrix.np$np $np matrix
done
hrun matrix.arena 300 -np 2 "$T/it_cuda" matrix
ok matrix.arena 2 matrix
hrun late 120 --arena-size 4M -np 2 "$T/it_cuda" late
ok late 2 late
for m in failin failout; do
  hrun $m 120 -np 3 "$T/it_cuda" $m
  ok $m 3 $m &&
    expect_grep $m out "^\[1\]<stdout>:rank 1: $m error: copying 400 bytes between device and host memory failed: unknown error \(injected by the test\) \(rank 1\)" \
      "rank 1 got the driver's error, naming the rank"
done
hrun host 60 -np 2 "$T/it_cuda" host
ok host 2 host
solo solo 60 "$T/it_cuda" solo
expect_rc solo 0 &&
  expect_grep solo out "^rank 0: cuda solo: [0-9]+ checks, 0 failures" \
    "the job of one reports its checks, none failed"
assert_no_leftovers "$MARK"
finish
