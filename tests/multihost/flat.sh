#!/bin/sh
# flat.sh -- hierarchical_allreduce given as 0: allreduce across hosts as
# one flat ring over every rank; hierarchical_allgather given as 0:
# allgather round the ring of hosts (network namespaces, see lib.sh). Results
# by it_coll and it_xcoll (every rank checks every result against its own
# reference), bytes by tests/python/workers/flat.py:
#   matrix  every dtype x op x buffer kind x sizes 0..4099, 2 x 2
#           (HOROVOD_HIERARCHICAL_ALLREDUCE=0, Horovod's name), each horad
#           saying at debug level that it ran the flat ring;
#   uneven  hosts of 3, 1 and 2 ranks (--no-hierarchical-allreduce), just
#           over 1 MiB (segments that do not divide evenly, several
#           pieces), in place and out of place;
#   chunks  tensors streamed through 64 KiB staging chunks (1 MiB arena),
#           averages and products, 2 x 2;
#   fusion  fused runs of alike allreduces, 2 x 2;
#   ag      hierarchical_allgather given as 0: allgather round the ring
#           of hosts, with every other collective and with join (hosts
#           whose ranks have all joined), 3 x 2 and 3 x 1;
#   bytes   what each host sends, hosts of 2, 1 and 1 ranks: allreduce
#           2 (N - 1) / N of a tensor flat, 2 (H - 1) / H hierarchical
#           (the knobs unset); the same for a process set of 3 of the 4
#           ranks, its members the positions; allgather to the next host
#           alone (all blocks but its own) flat, each host's block to
#           every other host hierarchical;
#   wire16  Compression.fp16/.bf16 over the flat ring, within its bound
#           (one rounding more than hierarchical), 2 x 2.
. "$(dirname "$0")/lib.sh"
need "$HORARUN" "$HORAD" "$T/it_coll" "$T/it_xcoll"
mh_python "torch, numpy" "python3-torch python3-numpy"
mh_setup 3

ok() { # NAME NP [WHAT]: exit 0, each of the NP ranks reports, none failed
  expect_rc "$1" 0 &&
    expect_count "$1" out "^\[[0-9]+\]<stdout>:rank [0-9]+ of $2: ${3:+$3: }[0-9]+ checks, 0 failures" "$2" \
      "every rank reports its checks, none failed"
  expect_nogrep "$1" out "FAIL" "no check failed"
  mh_assert_no_job_procs "$MARK"
}

hrun matrix.2x2 240 HORA_LOG=engine:debug HOROVOD_HIERARCHICAL_ALLREDUCE=0 \
  -np 4 -H h1:2,h2:2 "$T/it_coll" matrix -x 4 -q
ok matrix.2x2 4
expect_grep matrix.2x2 err "^horarun: host h1: horad\[[0-9]+\] DEBUG: allreduce '.*': a flat ring of 4 members, positions 0-1 here" \
  "h1's horad ran the flat ring (positions 0-1)"
expect_grep matrix.2x2 err "^horarun: host h2: horad\[[0-9]+\] DEBUG: allreduce '.*': a flat ring of 4 members, positions 2-3 here" \
  "h2's horad ran the flat ring (positions 2-3)"
expect_nogrep matrix.2x2 err "the result came with the decision" \
  "flat: small allreduces take the ring too"

hrun uneven.3+1+2 240 HORA_LOG=engine:debug --no-hierarchical-allreduce \
  -np 6 -H h1:3,h2:1,h3:2 "$T/it_coll" matrix -s b1M+3 \
  -m ip_alloc,oop_malloc -x 6 -q
ok uneven.3+1+2 6
expect_grep uneven.3+1+2 err "^horarun: host h3: horad\[[0-9]+\] DEBUG: allreduce '.*': a flat ring of 6 members, positions 4-5 here" \
  "h3's horad ran the flat ring (positions 4-5)"

hrun chunks.2x2 240 HORA_HIERARCHICAL_ALLREDUCE=0 HORA_ADOPT_SIZE=0 HORA_ARENA_SIZE=1M \
  HORA_CHUNK_SIZE=64K -np 4 -H h1:2,h2:2 "$T/it_coll" matrix -s b2M+7 \
  -o average,product -m ip_malloc,oop_sm_ra,rankmix -x 4 -q
ok chunks.2x2 4

hrun fusion.2x2 240 HORA_LOG=engine:debug HORA_HIERARCHICAL_ALLREDUCE=0 \
  -np 4 -H h1:2,h2:2 "$T/it_coll" async -x 4 -q
ok fusion.2x2 4
expect_grep fusion.2x2 err "DEBUG: ran [0-9]+ allreduces fused into one" \
  "fused allreduces ran"


# the workers take no --marker argument
# hierarchical_allgather given as 0: allgather round the ring of hosts,
# every collective's results (allgather among them) and join (a host whose
# ranks have all joined forwards what it does not keep)
for mode in colls join; do
  hrun ag.$mode.3x2 240 HORA_LOG=engine:debug HORA_HIERARCHICAL_ALLGATHER=0 \
    -np 6 -H h1:2,h2:2,h3:2 "$T/it_xcoll" $mode -x 6
  ok ag.$mode.3x2 6 $mode
done
expect_grep ag.colls.3x2 err "^horarun: host h2: horad\[[0-9]+\] DEBUG: allgather '.*': round a ring of 3 hosts, to host position 2" \
  "h2's horad sent its allgathers to h3 alone"
hrun ag.join.3x1 240 HORA_HIERARCHICAL_ALLGATHER=0 -np 3 -H h1:1,h2:1,h3:1 \
  "$T/it_xcoll" join -x 3
ok ag.join.3x1 3 join

HRUN_NOMARK=1 hrun bytes.flat 240 HORA_HIERARCHICAL_ALLREDUCE=0 \
  HOROVOD_HIERARCHICAL_ALLGATHER=0 --metrics-port 9465 -np 4 \
  -H h1:2,h2:1,h3:1 $PY "$W/flat.py" 9465
ok bytes.flat 4 flat
HRUN_NOMARK=1 hrun bytes.unset 240 --metrics-port 9465 -np 4 \
  -H h1:2,h2:1,h3:1 $PY "$W/flat.py" 9465
ok bytes.unset 4 flat
grep -h "bytes sent" "$MH_TMP"/bytes.*.out | sed 's/^/    /'

HRUN_NOMARK=1 hrun wire16.2x2 240 HORA_HIERARCHICAL_ALLREDUCE=0 \
  --metrics-port 9465 -np 4 -H h1:2,h2:2 $PY "$W/wire16.py" 9465
ok wire16.2x2 4 wire16
finish
