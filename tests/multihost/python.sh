#!/bin/sh
# python.sh -- hora.torch across hosts (network namespaces, see lib.sh),
# with the workers of tests/python/workers:
#   join.py         each rank in turn joins first while the others run
#                   every collective (allreduce ops, grouped allreduce,
#                   allgather, alltoall, reducescatter, broadcast,
#                   barrier): 3 hosts x 1 rank (a joined rank is a whole
#                   host) and 3 x 2;
#   errors.py reinit  shutdown() and init() again, many times, with
#                   collectives between, and an operation pending at
#                   shutdown: 3 x 1 and 2 x 2;
#   adasum.py       op=Adasum against a reference computed in numpy:
#                   2 x 2 (a host combines its ranks and sends one
#                   vector), 3 + 1 and 2 + 1 + 1 (hosts of unequal sizes
#                   send each rank's vector), hierarchical over 2 + 1, and
#                   hierarchical over 3 hosts, which horad refuses;
#   wire16.py       Compression.fp16/.bf16 send 16-bit values between
#                   hosts: within the error bound, the same on every
#                   rank, about half the bytes (/metrics): 2 x 1, 3 x 1,
#                   2 x 2;
#   cache.py        the response cache on 2 x 2: results right with it,
#                   without it and with 8 entries for 40 names; each host
#                   sends at most half the negotiation bytes with it.
# Needs PYTHON (default /usr/bin/python3) with torch and numpy, as
# tests/python/pytest.sh does.
. "$(dirname "$0")/lib.sh"
need "$HORARUN" "$HORAD"
mh_python "torch, numpy" "python3-torch python3-numpy"
mh_setup 3

ok() { # NAME NP WHAT
  expect_rc "$1" 0 &&
    expect_count "$1" out "^\[[0-9]+\]<stdout>:rank [0-9]+ of $2: $3: [0-9]+ checks, 0 failures" "$2" \
      "every rank reports its checks, none failed"
  expect_nogrep "$1" out "FAIL" "no check failed"
  mh_assert_no_job_procs "$MARK"
}

# the workers take no --marker argument
HRUN_NOMARK=1 hrun join.3x1 180 -np 3 -H h1:1,h2:1,h3:1 $PY "$W/join.py"
ok join.3x1 3 join
HRUN_NOMARK=1 hrun join.3x2 180 -np 6 -H h1:2,h2:2,h3:2 $PY "$W/join.py"
ok join.3x2 6 join
HRUN_NOMARK=1 hrun reinit.3x1 180 -np 3 -H h1:1,h2:1,h3:1 $PY "$W/errors.py" reinit
ok reinit.3x1 3 "errors reinit"
HRUN_NOMARK=1 hrun reinit.2x2 180 -np 4 -H h1:2,h2:2 $PY "$W/errors.py" reinit
ok reinit.2x2 4 "errors reinit"
HRUN_NOMARK=1 hrun adasum.2x2 240 -np 4 -H h1:2,h2:2 $PY "$W/adasum.py"
ok adasum.2x2 4 adasum
HRUN_NOMARK=1 hrun adasum.3+1 240 -np 4 -H h1:3,h2:1 $PY "$W/adasum.py"
ok adasum.3+1 4 adasum
HRUN_NOMARK=1 hrun adasum.2+1+1 240 -np 4 -H h1:2,h2:1,h3:1 $PY "$W/adasum.py"
ok adasum.2+1+1 4 adasum
HRUN_NOMARK=1 hrun adasum.hier.2+1 240 --hierarchical-allreduce -np 3 \
  -H h1:2,h2:1 $PY "$W/adasum.py"
ok adasum.hier.2+1 3 adasum
HRUN_NOMARK=1 hrun adasum.refused.3x1 120 --hierarchical-allreduce -np 3 \
  -H h1:1,h2:1,h3:1 $PY "$W/adasum.py" refused
ok adasum.refused.3x1 3 adasum
HRUN_NOMARK=1 hrun wire16.2x1 240 --metrics-port 9465 -np 2 -H h1:1,h2:1 \
  $PY "$W/wire16.py" 9465
ok wire16.2x1 2 wire16
HRUN_NOMARK=1 hrun wire16.3x1 240 --metrics-port 9465 -np 3 \
  -H h1:1,h2:1,h3:1 $PY "$W/wire16.py" 9465
ok wire16.3x1 3 wire16
HRUN_NOMARK=1 hrun wire16.2x2 240 --metrics-port 9465 -np 4 -H h1:2,h2:2 \
  $PY "$W/wire16.py" 9465
ok wire16.2x2 4 wire16
grep -h "bytes sent compressed" "$MH_TMP"/wire16.*.out | sed 's/^/    /'

# the response cache: the same steps with it (the default, 1024), without
# it, and too small for the 40 names (numbers reused all the time); every
# result right each way, and with it each host sends at most half the
# bytes of negotiation per step that it sends without
for cap in 1024 0 8; do
  HRUN_NOMARK=1 hrun cache.$cap 240 --metrics-port 9465 --cache-capacity $cap \
    -np 4 -H h1:2,h2:2 $PY "$W/cache.py" 9465
  ok cache.$cap 4 cache
done
per_step() { # NAME RANK: the bytes per step that rank printed
  sed -n "s/^\[$2\]<stdout>:rank $2: negotiation: \([0-9]*\) bytes per step$/\1/p" \
    "$MH_TMP/$1.out"
}
for r in 0 2; do
  on=$(per_step cache.1024 $r) off=$(per_step cache.0 $r)
  say "cache: rank $r's host: $on bytes of negotiation per step with the cache, $off without, $(per_step cache.8 $r) with 8 entries"
  if [ -z "$on" ] || [ -z "$off" ] || [ $((on * 2)) -gt "$off" ]; then
    fail "cache: rank $r's host sent $on bytes per step with the cache, $off without (expected at most half)"
  fi
done
finish
