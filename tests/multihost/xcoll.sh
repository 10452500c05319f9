#!/bin/sh
# xcoll.sh -- allgather, alltoall, reducescatter, scale factors, shapes,
# process sets and join across hosts (network namespaces, see lib.sh),
# with it_xcoll (tests/integration/it_xcoll.c), whose every rank checks
# every result against a reference it computes itself:
#   3 hosts x 1 rank, 3 x 2, 2 x 2; process sets whose ranks lie on some
#   of the hosts only (the odd ranks of 3 x 1 are on h2 alone; the last
#   rank's set is one host's), two disjoint sets busy at once; 2 x 2
#   again with --wire-integrity and with --wire-encrypt; bursts of
#   asynchronous allgathers whose runs every host fuses into one exchange
#   (3 x 2, and round a flat ring on 3 x 1; inputs carved one after the
#   other from the arena read in place, 3 x 2), none fused with
#   HOROVOD_FUSION_THRESHOLD=0 (2 x 1); bursts of reducescatters fused
#   likewise (3 x 2, 2 x 1).
. "$(dirname "$0")/lib.sh"
need "$HORARUN" "$HORAD" "$T/it_xcoll"
mh_setup 3

ok() { # NAME NP MODE
  expect_rc "$1" 0 &&
    expect_count "$1" out "^\[[0-9]+\]<stdout>:rank [0-9]+ of $2: $3: [0-9]+ checks, 0 failures" "$2" \
      "every rank reports its checks, none failed"
  expect_nogrep "$1" out "FAIL" "no check failed"
  mh_assert_no_job_procs "$MARK"
}

for mode in colls sets join groups; do
  hrun $mode.3x1 240 -np 3 -H h1:1,h2:1,h3:1 "$T/it_xcoll" $mode -x 3
  ok $mode.3x1 3 $mode
  hrun $mode.3x2 240 -np 6 -H h1:2,h2:2,h3:2 "$T/it_xcoll" $mode -x 6
  ok $mode.3x2 6 $mode
done
hrun colls.2x2 240 HORA_LOG=mesh:debug -np 4 -H h1:2,h2:2 "$T/it_xcoll" colls -x 4
ok colls.2x2 4 colls
expect_nogrep colls.2x2 err "the data frames' tags cover their data" "no link checks the data"
# the exchanges' XDATA frames with their data covered by the tags
hrun integrity.2x2 240 HORA_LOG=mesh:debug --wire-integrity -np 4 -H h1:2,h2:2 "$T/it_xcoll" colls -x 4
ok integrity.2x2 4 colls
expect_grep integrity.2x2 err "the data frames' tags cover their data" "each link checks the data"
# and encrypted
hrun encrypt.2x2 240 HORA_LOG=mesh:debug --wire-encrypt -np 4 -H h1:2,h2:2 "$T/it_xcoll" colls -x 4
ok encrypt.2x2 4 colls
expect_grep encrypt.2x2 err "every frame encrypted" "each link encrypts"
# allgathers and reducescatters (packed member-major) fused across hosts:
# every horad packs each run into one exchange (it says so at debug
# level), and every result is right
for burst in agburst:allgathers rsburst:reducescatters; do
  mode=${burst%%:*} what=${burst#*:}
  hrun $mode.3x2 240 HORA_LOG=engine:debug -np 6 -H h1:2,h2:2,h3:2 "$T/it_xcoll" $mode -x 6
  ok $mode.3x2 6 $mode
  for h in h1 h2 h3; do
    expect_grep $mode.3x2 err "^horarun: host $h: horad\[[0-9]+\] DEBUG: ran [0-9]+ $what fused into one" \
      "$h's horad ran fused $what"
  done
done
# inputs that lie one after the other in the arena, as the fused run's
# block lays them out, are read there: no packing copy
hrun agarena.3x2 240 HORA_LOG=engine:debug -np 6 -H h1:2,h2:2,h3:2 "$T/it_xcoll" agarena -x 6
ok agarena.3x2 6 agarena
for h in h1 h2 h3; do
  expect_grep agarena.3x2 err "^horarun: host $h: horad\[[0-9]+\] DEBUG: allgathers .* fused: the inputs of 2 of 2 local ranks read in place" \
    "$h's horad read its ranks' contiguous arena inputs in place"
done
expect_nogrep agarena.3x2 err "fused: the inputs of [01] of 2" "no run of them packed"
hrun agflat.3x1 240 HORA_LOG=engine:debug HOROVOD_HIERARCHICAL_ALLGATHER=0 -np 3 \
  -H h1:1,h2:1,h3:1 "$T/it_xcoll" agburst -x 3
ok agflat.3x1 3 agburst
expect_grep agflat.3x1 err "DEBUG: ran [0-9]+ allgathers fused into one" "fused round the flat ring"
expect_grep agflat.3x1 err "DEBUG: allgather 'agb\.[0-9]+': round a ring of 3 hosts" "the flat ring ran"
hrun agnofuse.2x1 240 HORA_LOG=engine:debug HOROVOD_FUSION_THRESHOLD=0 -np 2 \
  -H h1:1,h2:1 "$T/it_xcoll" agburst -x 2
ok agnofuse.2x1 2 agburst
expect_nogrep agnofuse.2x1 err "fused into one" "HOROVOD_FUSION_THRESHOLD=0: nothing fused"
# reducescatters fused with one rank a host
hrun rsburst.2x1 240 HORA_LOG=engine:debug -np 2 -H h1:1,h2:1 "$T/it_xcoll" rsburst -x 2
ok rsburst.2x1 2 rsburst
expect_grep rsburst.2x1 err "DEBUG: ran [0-9]+ reducescatters fused into one" "fused with one rank a host"
finish
