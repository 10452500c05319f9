#!/bin/sh
# colls.sh -- collective results across hosts (network namespaces with
# sshd, see lib.sh): it_coll (tests/integration/it_coll.c), whose every
# rank checks every result against a reference it computes itself, run
#   matrix  every dtype x every op x buffer kind x sizes 0..4099, broadcast
#           from every root, barriers: 3 hosts x 2 ranks (-H), 2 hosts x 1
#           rank (--hostfile), 2 x 2 from h1 itself (h1 is this machine);
#           the small allreduces' results come with the decisions, and
#           with HORA_SMALL_ALLREDUCE=0 they take the ring, 2 x 1;
#   edges   the limits of the documented arithmetic, 3 x 2 (--config-file);
#   mib     every dtype and op at just over 1 MiB (odd element counts), 3 x 1
#           (ring chunks that do not divide evenly over the hosts); again
#           with --wire-integrity (the data frames' tags cover the data)
#           and with --wire-encrypt (every frame encrypted);
#   avg     float averages of 8M elements (several windows of pieces), 2 x 1;
#   adopt   it_adopt (tests/integration/it_adopt.c): large malloc'd buffers
#           adopted into the ranks' segments, reduced, gathered and
#           broadcast across hosts where they lie, 2 x 2;
#   chunks  tensors streamed through 64 KiB staging chunks (1 MiB arena),
#           averages, products, broadcasts, 3 x 2;
#   async   names submitted in rank-dependent orders, hundreds in flight,
#           unnamed ones, awkward names: 3 x 2 (--config-file) and 2 x 1;
#   fusion  the same, its runs of alike allreduces fused (every dtype and
#           op), 2 x 2; and with HOROVOD_FUSION_THRESHOLD=0 none, 3 x 1;
#   threads several threads per rank submitting at once, 2 x 2;
# and allreduce_perf's checked sweep up to 16 MiB over 2 x 1.
. "$(dirname "$0")/lib.sh"
need "$HORARUN" "$HORAD" "$T/it_coll" "$T/it_adopt"
mh_setup 3

# ok NAME NP: exit 0, each of the NP ranks reports its checks, none failed
ok() {
  expect_rc "$1" 0 &&
    expect_count "$1" out "^\[[0-9]+\]<stdout>:rank [0-9]+ of $2: [0-9]+ checks, 0 failures" "$2" \
      "every rank reports its checks, none failed"
  expect_nogrep "$1" out "FAIL" "no check failed"
  expect_quiet "$1"
  mh_assert_no_job_procs "$MARK"
}

hrun matrix.3x2 240 -np 6 -H h1:2,h2:2,h3:2 "$T/it_coll" matrix -b -B "$MH_TMP/barrier.3x2" -x 6
ok matrix.3x2 6

mh_write_hostfile "$MH_TMP/hosts.2x1" h1:1 h2:1
hrun matrix.2x1 240 HORA_LOG=engine:debug --hostfile "$MH_TMP/hosts.2x1" "$T/it_coll" matrix -b -B "$MH_TMP/barrier.2x1" -x 2
ok matrix.2x1 2
# small allreduces (HORA_SMALL_ALLREDUCE, 4 KiB) go with the negotiation:
# the result comes with the coordinator's decision on both hosts, no ring;
# with 0 every one takes the ring, small ones included
for h in h1 h2; do
  expect_grep matrix.2x1 err "^horarun: host $h: horad\[[0-9]+\] DEBUG: allreduce '.*': the result came with the decision \([0-9]+ bytes\); no ring" \
    "$h's horad wrote small allreduces' results from the decision"
done
hrun ring.2x1 240 HORA_LOG=engine:debug HORA_SMALL_ALLREDUCE=0 --hostfile "$MH_TMP/hosts.2x1" "$T/it_coll" matrix -b -B "$MH_TMP/barrier.ring" -x 2
ok ring.2x1 2
expect_nogrep ring.2x1 err "the result came with the decision" \
  "HORA_SMALL_ALLREDUCE=0: every allreduce took the ring"

HRUN_FROM=h1 hrun matrix.fromh1 240 -np 4 -H h1:2,h2:2 "$T/it_coll" matrix -x 4 -q
ok matrix.fromh1 4

mh_write_config "$MH_TMP/3x2.yaml" hosts=h1:2,h2:2,h3:2
hrun edges.3x2 120 --config-file "$MH_TMP/3x2.yaml" "$T/it_coll" edges -x 6
expect_rc edges.3x2 0
expect_nogrep edges.3x2 out "FAIL" "no check failed"
mh_assert_no_job_procs "$MARK"

hrun mib.3x1 240 -np 3 -H h1:1,h2:1,h3:1 "$T/it_coll" matrix -s b1M+3 -m ip_alloc,oop_malloc -x 3 -q
ok mib.3x1 3

# the same with --wire-integrity: the ring's data frames' tags cover their
# data (placed straight into the result as it arrives, then checked)
hrun integrity.3x1 240 --wire-integrity -np 3 -H h1:1,h2:1,h3:1 "$T/it_coll" matrix \
  -s b1M+3 -m ip_alloc,oop_malloc -x 3 -q
ok integrity.3x1 3
# and with --wire-encrypt: every frame between hosts encrypted (AES-GCM),
# the data decrypted in place where it lands
hrun encrypt.3x1 240 --wire-encrypt -np 3 -H h1:1,h2:1,h3:1 "$T/it_coll" matrix \
  -s b1M+3 -m ip_alloc,oop_malloc -x 3 -q
ok encrypt.3x1 3

# large float averages: the last division must wait until every send of
# the (undivided) sum has left, or the next host divides twice
hrun avg.2x1 240 -np 2 -H h1:1,h2:1 "$T/it_coll" matrix -t float32,float64 \
  -o average -s 8M+1 -m ip_alloc,oop_malloc -x 2 -q
ok avg.2x1 2

# malloc'd buffers adopted into the segments (not under AddressSanitizer,
# whose malloc is its own): the ring reads and writes them where they lie
adopted=yes
asan_build && adopted=no
hrun adopt.2x2 240 -np 4 -H h1:2,h2:2 "$T/it_adopt" check
expect_rc adopt.2x2 0 &&
  expect_count adopt.2x2 out "^\[[0-9]+\]<stdout>:rank [0-9]+: adopt: [0-9]+ checks, 0 failures" 4 \
    "every rank reports its checks, none failed"
expect_nogrep adopt.2x2 out "FAIL" "no check failed"
for b in a b d a2; do
  expect_count adopt.2x2 out "^\[[0-9]+\]<stdout>:rank [0-9]+: $b in the segment: $adopted\$" 4 \
    "every rank's $b is in its segment: $adopted"
done
mh_assert_no_job_procs "$MARK"

# tensors larger than a small arena: streamed through the staging chunks
# of each rank while the pieces cross hosts (copy-in, ring, copy-out of
# different chunks overlap); averages, products and broadcasts
hrun chunks.3x2 240 HORA_ARENA_SIZE=1M HORA_CHUNK_SIZE=64K HORA_ADOPT_SIZE=0 -np 6 \
  -H h1:2,h2:2,h3:2 "$T/it_coll" matrix -s b2M+7 -o average,product \
  -m ip_malloc,oop_sm_ra,rankmix -b -x 6 -q
ok chunks.3x2 6

# the order test: every rank submits the same names in its own order
hrun async.3x2 240 --config-file "$MH_TMP/3x2.yaml" "$T/it_coll" async -x 6
ok async.3x2 6
hrun async.2x1 240 -np 2 -H h1:1,h2:1 "$T/it_coll" async -x 2
ok async.2x1 2

# tensor fusion: the runs of alike allreduces go round the ring fused on
# every host (each horad says so at debug level), results checked; with
# HOROVOD_FUSION_THRESHOLD=0 nothing is fused
hrun fusion.2x2 240 HORA_LOG=engine:debug -np 4 -H h1:2,h2:2 "$T/it_coll" async -x 4 -q
ok fusion.2x2 4
for h in h1 h2; do
  expect_grep fusion.2x2 err "^horarun: host $h: horad\[[0-9]+\] DEBUG: ran [0-9]+ allreduces fused into one" \
    "$h's horad ran fused allreduces"
done
hrun nofusion.3x1 240 HORA_LOG=engine:debug HOROVOD_FUSION_THRESHOLD=0 -np 3 \
  -H h1:1,h2:1,h3:1 "$T/it_coll" async -x 3 -q
ok nofusion.3x1 3
expect_nogrep nofusion.3x1 err "fused into one" "HOROVOD_FUSION_THRESHOLD=0: nothing fused"

hrun threads.2x2 240 -np 4 -H h1:2,h2:2 "$T/it_coll" threads -x 4
ok threads.2x2 4

# larger tensors streamed between hosts, checked (#wrong 0)
if [ -x "$BUILD/benchmarks/allreduce_perf" ]; then
  HRUN_NOMARK=1 hrun perf.2x1 240 -np 2 -H h1:1,h2:1 "$BUILD/benchmarks/allreduce_perf" -b 1M -e 16M -f 4 -n 3 -w 1
  expect_rc perf.2x1 0 &&
    expect_count perf.2x1 out '^\[0\]<stdout>: +[0-9]+ +[0-9]+ +float32 +sum .* 0$' 3 \
      "three sizes, each with #wrong 0"
  mh_assert_no_job_procs "$MARK"
else
  say "no $BUILD/benchmarks/allreduce_perf; its sweep is not run"
fi
finish
