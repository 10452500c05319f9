#!/bin/sh
# elastic.sh -- elastic jobs across hosts (network namespaces, see lib.sh),
# with a real training loop (tests/python/workers/elastic_train.py: torch,
# DistributedOptimizer, ElasticSampler, a commit after every step):
#   lost      3 hosts x 1, --min-np 2: h3's horad is SIGKILLed mid-epoch;
#             horarun leaves h3 out and starts the job again on h1 and h2,
#             which take up the last commit within 10 s of the kill; every
#             sample of every epoch is used by exactly one committed step,
#             the two ranks end with the same weights, exit status 0
#   minnp     the same with --min-np 3: nothing can replace h3, so horarun
#             ends the job at once, saying why (exit status not 0)
#   discover  --host-discovery-script (a file the test rewrites): h1 and
#             h2 at first, --min-np 2; h2's horad is SIGKILLed; horarun
#             waits for a second host, and h3, added to the script's
#             output, takes part in the next start
#   grow      the script names h1 and h2, --max-np 3; h3 is added while
#             the job trains: horarun announces it, the ranks leave at
#             their next commit (HostsUpdatedInterrupt) and the job goes
#             on with 3 ranks from that commit, within 10 s
#   shrink    h2 removed from the script's output while 3 ranks train: the
#             job goes on on h1 and h3 from the last commit, none blamed
#   coordinator  host 0 (h1, rank 0, the coordinator) SIGKILLed: the job
#             goes on on h2 and h3
#   flap      --blacklist-cooldown-range 2 60: h3's horad killed, h3 left
#             out for 2 s; once back (a cooled-down host lets the job grow
#             to --max-np again) killed again: left out for 4 s
# After each, no process of the job is left on any host.
. "$(dirname "$0")/lib.sh"
need "$HORARUN" "$HORAD"
mh_python "torch" "python3-torch"
mh_setup 3

started() { # NAME START COUNT: COUNT ranks said they began start START
  wait_for "$1" out "^\[[0-9]+\]<stdout>:rank [0-9]+ of [0-9]+: start $2 at " "$3" 90
}

# kill_horad NAME HOST: SIGKILLs HOST's horad; T0 the time of the kill
kill_horad() {
  local _pids
  _pids=$(mh_host_pids "$2" horad)
  [ -n "$_pids" ] || fail "$1: no horad process in $2's namespace"
  T0=$(date +%s.%N)
  # shellcheck disable=SC2086
  kill -9 $_pids
}

# resumed NAME START LIMIT WHAT: the ranks of start START took up the last
# commit within LIMIT seconds of T0 (WHAT: the event at T0)
resumed() {
  expect_since_t0 "$1" "^\[0\]<stdout>:rank 0 of [0-9]+: start $2 at " "$3" \
    "start $2 took up the last commit" "$4"
}

# ---- a host lost: the job goes on without it ---------------------------------
HRUN_NOMARK=1 hrun_start lost EPOCHS=3 STEP_SLEEP=0.1 -np 3 -H h1:1,h2:1,h3:1 \
  --min-np 2 $PY "$W/elastic_train.py"
if started lost 1 3; then
  sleep 2
  kill_horad lost h3
  hrun_wait lost 180
  resumed lost 2 10 "the kill"
  expect_trained lost 2
  expect_grep lost err "elastic: host h3 is left out for the rest of the job" \
    "horarun says h3 is left out"
  expect_grep lost err "elastic: start 2: 2 rank\(s\) on h1:1,h2:1" \
    "the second start runs 2 ranks on h1 and h2"
  expect_grep lost out "^\[[01]\]<stdout>:rank [01] of 2: start 2 at epoch [0-9]+ batch [0-9]+ " \
    "the second start's ranks began from a commit"
else
  fail "lost: the 3 ranks did not start within 90 s"
  hrun_wait lost 10
  show lost
fi
mh_assert_no_job_procs "$MARK" 10

# ---- too few hosts left: the job ends, saying why ----------------------------
HRUN_NOMARK=1 hrun_start minnp EPOCHS=3 STEP_SLEEP=0.1 -np 3 -H h1:1,h2:1,h3:1 \
  --min-np 3 $PY "$W/elastic_train.py"
if started minnp 1 3; then
  sleep 1
  kill_horad minnp h3
  hrun_wait minnp 60
  expect_rc minnp nonzero
  expect_grep minnp err "fewer than --min-np 3 \(no host can come back" \
    "horarun ends the job: fewer slots than --min-np, and no host can come back"
  expect_nogrep minnp err "start 2:" "no second start"
else
  fail "minnp: the 3 ranks did not start within 90 s"
  hrun_wait minnp 10
  show minnp
fi
mh_assert_no_job_procs "$MARK" 10

# ---- hosts from a discovery script ---------------------------------------
list=$MH_TMP/discover.hosts
printf 'h1:1\nh2\n' >"$list"
cat >"$MH_TMP/discover.sh" <<EOF
#!/bin/sh
cat "$list"
EOF
chmod +x "$MH_TMP/discover.sh"
HRUN_NOMARK=1 hrun_start discover EPOCHS=3 STEP_SLEEP=0.1 --min-np 2 \
  --host-discovery-script "$MH_TMP/discover.sh" --slots-per-host 1 \
  --elastic-timeout 60 $PY "$W/elastic_train.py"
if started discover 1 2; then
  sleep 1
  kill_horad discover h2
  if wait_for discover err "fewer than --min-np 2: waiting up to 60 s" 1 30; then
    printf 'h1:1\nh2\nh3:1\n' >"$list"
  else
    fail "discover: horarun did not wait for more hosts"
  fi
  hrun_wait discover 180
  expect_trained discover 2
  expect_grep discover err "elastic: start 2: 2 rank\(s\) on h1:1,h3:1" \
    "the second start runs on h1 and h3, which the script added"
else
  fail "discover: the 2 ranks did not start within 90 s"
  hrun_wait discover 10
  show discover
fi
mh_assert_no_job_procs "$MARK" 10

# ---- a host added while the job runs -----------------------------------------
printf 'h1:1\nh2:1\n' >"$list"
HRUN_NOMARK=1 hrun_start grow EPOCHS=3 STEP_SLEEP=0.1 --min-np 2 --max-np 3 \
  --host-discovery-script "$MH_TMP/discover.sh" $PY "$W/elastic_train.py"
if started grow 1 2; then
  sleep 1
  printf 'h1:1\nh2:1\nh3:1\n' >"$list"
  T0=$(date +%s.%N)
  hrun_wait grow 180
  resumed grow 2 10 "h3 was added"
  expect_trained grow 3
  expect_grep grow err "elastic: the hosts changed: starting again" \
    "horarun starts the job again for the new host"
  expect_grep grow err "elastic: start 2: 3 rank\(s\) on h1:1,h2:1,h3:1" \
    "the second start runs 3 ranks, one on h3"
  expect_nogrep grow err "left out" "no host is blamed"
else
  fail "grow: the 2 ranks did not start within 90 s"
  hrun_wait grow 10
  show grow
fi
mh_assert_no_job_procs "$MARK" 10

# ---- a host removed from the discovery output --------------------------------
printf 'h1:1\nh2:1\nh3:1\n' >"$list"
HRUN_NOMARK=1 hrun_start shrink EPOCHS=3 STEP_SLEEP=0.1 --min-np 2 \
  --host-discovery-script "$MH_TMP/discover.sh" $PY "$W/elastic_train.py"
if started shrink 1 3; then
  sleep 1
  printf 'h1:1\nh3:1\n' >"$list"
  T0=$(date +%s.%N)
  hrun_wait shrink 180
  resumed shrink 2 10 "h2 was removed"
  expect_trained shrink 2
  expect_grep shrink err "elastic: start 2: 2 rank\(s\) on h1:1,h3:1" \
    "the second start runs on h1 and h3"
  expect_nogrep shrink err "left out" "no host is blamed"
else
  fail "shrink: the 3 ranks did not start within 90 s"
  hrun_wait shrink 10
  show shrink
fi
mh_assert_no_job_procs "$MARK" 10

# ---- the coordinator's host (host 0, rank 0) lost -----------------------------
HRUN_NOMARK=1 hrun_start coordinator EPOCHS=3 STEP_SLEEP=0.1 -np 3 \
  -H h1:1,h2:1,h3:1 --min-np 2 $PY "$W/elastic_train.py"
if started coordinator 1 3; then
  sleep 2
  kill_horad coordinator h1
  hrun_wait coordinator 180
  resumed coordinator 2 10 "the kill"
  expect_trained coordinator 2
  expect_grep coordinator err "elastic: host h1 is left out for the rest of the job" \
    "horarun leaves h1 out"
  expect_grep coordinator err "elastic: start 2: 2 rank\(s\) on h2:1,h3:1" \
    "the second start runs on h2 and h3"
else
  fail "coordinator: the 3 ranks did not start within 90 s"
  hrun_wait coordinator 10
  show coordinator
fi
mh_assert_no_job_procs "$MARK" 10

# ---- a flapping host: left out longer after each failure ---------------------
HRUN_NOMARK=1 hrun_start flap EPOCHS=4 STEP_SLEEP=0.1 -np 3 -H h1:1,h2:1,h3:1 \
  --min-np 2 --max-np 3 --blacklist-cooldown-range 2 60 $PY "$W/elastic_train.py"
if started flap 1 3; then
  sleep 1
  kill_horad flap h3
  # h3 is back after 2 s (the job then grows again); killed again, it is
  # left out for 4 s
  if started flap 3 3; then
    sleep 1
    kill_horad flap h3
  else
    fail "flap: h3 did not come back into a start of 3 ranks"
  fi
  hrun_wait flap 240
  expect_trained flap 3
  expect_grep flap err "elastic: host h3 is left out for 2 s \(failure 1\)" \
    "first failure: left out for MIN seconds"
  expect_grep flap err "elastic: host h3 is left out for 4 s \(failure 2\)" \
    "second failure: twice as long"
else
  fail "flap: the 3 ranks did not start within 90 s"
  hrun_wait flap 10
  show flap
fi
mh_assert_no_job_procs "$MARK" 10
finish
