#!/bin/sh
# elastic.sh -- elastic jobs across hosts (network namespaces, see lib.sh),
# with a real training loop (tests/python/workers/elastic_train.py: torch,
# DistributedOptimizer, ElasticSampler, a commit after every step):
#   lost      3 hosts x 1, --min-np 2: h3's horad is SIGKILLed mid-epoch;
#             horarun leaves h3 out and the job re-forms in place on h1
#             and h2: their rank processes (the same pids) go on from the
#             last commit as ranks 0 and 1 of 2 within 5 s of the kill;
#             every sample of every epoch is used by exactly one committed
#             step, the two ranks end with the same weights, exit status 0
#   restart   the same with --elastic-in-place 0: horarun starts the job
#             again on h1 and h2 (new processes), within 10 s
#   crash     3 hosts x 2, --min-np 4: rank 2 (on h2) is SIGKILLed: h2 is
#             left out (its horad stops its other rank), and h1's and h3's
#             ranks go on in place, numbered 0-3 (h3's 4 and 5 become 2
#             and 3, local ranks as before)
#   minnp     h3 lost with --min-np 3: nothing can replace h3, so horarun
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
#             re-forms in place on h2 and h3 (h2 is host 0 from then on)
#   twice     --min-np 1: h2's horad SIGKILLed, and h3's while that
#             re-forming still waits for h3's rank (stopped): horarun
#             re-forms again, on h1 alone; h1's rank (the same process)
#             goes on from the last commit within 5 s of the second kill
#   flap      --blacklist-cooldown-range 2 60: h3's horad killed, h3 left
#             out for 2 s (the job re-forms in place); once back (a
#             cooled-down host lets the job grow to --max-np again, a new
#             start) killed again: left out for 4 s
# After each, no process of the job is left on any host.
. "$(dirname "$0")/lib.sh"
need "$HORARUN" "$HORAD"
mh_python "torch" "python3-torch"
mh_setup 3

started() { # NAME START COUNT: COUNT ranks said they began start START
  wait_for "$1" out "^\[[0-9]+\]<stdout>:rank [0-9]+ of [0-9]+: start $2 at " "$3" 90
}

# not_started NAME COUNT: job NAME's COUNT ranks never began: a failure,
# and the job is ended and shown
not_started() {
  fail "$1: the $2 ranks did not start within 90 s"
  hrun_wait "$1" 10
  show "$1"
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
  expect_since_t0 "$1" "^\[[0-9]+\]<stdout>:rank 0 of [0-9]+: start $2 at " "$3" \
    "start $2 took up the last commit" "$4"
}

# pids NAME START [PREFIX]: the pids of start START's ranks (of the one
# whose output has that rank prefix), sorted
pids() {
  sed -n -E "s/^\[${3:-[0-9]+}\]<stdout>:rank [0-9]+ of [0-9]+: start $2 at .* pid ([0-9]+) \(.*/\1/p" \
    "$MH_TMP/$1.out" | sort -n | tr '\n' ' '
}

# in_place NAME NP LEFT: the job re-formed in place without host LEFT,
# with NP ranks, and start 2's ranks are processes of start 1
in_place() {
  expect_grep "$1" err "elastic: host $3 left out; the job goes on in place with $2 rank\(s\)" \
    "horarun leaves $3 out and re-forms the job in place"
  expect_grep "$1" err "elastic: the job re-formed in place in [0-9.]+ s: $2 rank\(s\) train on" \
    "every kept host's ranks are back"
  expect_nogrep "$1" err "elastic: start 2:" "no new start"
  local _p1 _p2 _p
  _p1=" $(pids "$1" 1)"
  _p2=$(pids "$1" 2)
  [ -n "$_p2" ] || fail "$1: no rank said start 2"
  for _p in $_p2; do
    case "$_p1" in
    *" $_p "*) ;;
    *) fail "$1: start 2's pid $_p is not one of start 1's ($_p1)" ;;
    esac
  done
}

# ---- a host lost: the job goes on without it, in place -----------------------
HRUN_NOMARK=1 hrun_start lost EPOCHS=2 STEP_SLEEP=0.1 -np 3 -H h1:1,h2:1,h3:1 \
  --min-np 2 $PY "$W/elastic_train.py"
if started lost 1 3; then
  sleep 2
  kill_horad lost h3
  hrun_wait lost 180
  resumed lost 2 5 "the kill"
  expect_trained lost 2
  expect_grep lost err "elastic: host h3 is left out for the rest of the job" \
    "horarun says h3 is left out"
  in_place lost 2 h3
  expect_grep lost out "^\[[01]\]<stdout>:rank [01] of 2: start 2 at epoch [0-9]+ batch [0-9]+ " \
    "the re-formed job's ranks began from a commit"
else
  not_started lost 3
fi
mh_assert_no_job_procs "$MARK" 10

# ---- the same, starting the job again (--elastic-in-place 0) -----------------
HRUN_NOMARK=1 hrun_start restart EPOCHS=2 STEP_SLEEP=0.1 -np 3 -H h1:1,h2:1,h3:1 \
  --min-np 2 --elastic-in-place 0 $PY "$W/elastic_train.py"
if started restart 1 3; then
  sleep 2
  kill_horad restart h3
  hrun_wait restart 180
  resumed restart 2 10 "the kill"
  expect_trained restart 2
  expect_grep restart err "elastic: start 2: 2 rank\(s\) on h1:1,h2:1" \
    "the second start runs 2 ranks on h1 and h2"
  expect_nogrep restart err "in place" "nothing re-forms in place"
else
  not_started restart 3
fi
mh_assert_no_job_procs "$MARK" 10

# ---- a rank crashed: its host left out, the others renumbered in place -------
HRUN_NOMARK=1 hrun_start crash EPOCHS=2 STEP_SLEEP=0.1 -np 6 -H h1:2,h2:2,h3:2 \
  --min-np 4 $PY "$W/elastic_train.py"
if started crash 1 6; then
  sleep 2
  victim=$(pids crash 1 2)
  T0=$(date +%s.%N)
  [ -n "$victim" ] && kill -9 $victim # (one pid)
  hrun_wait crash 180
  resumed crash 2 5 "the crash"
  expect_trained crash 4
  expect_grep crash err "rank 2 on host h2 was killed by signal SIGKILL" \
    "horarun names the crashed rank"
  in_place crash 4 h2
  # h3's ranks (4 and 5 at first) are ranks 2 and 3 now, with their output
  # still under their first numbers
  expect_grep crash out "^\[4\]<stdout>:rank 2 of 4: start 2 " \
    "h3's first rank is rank 2 of 4"
  expect_grep crash out "^\[5\]<stdout>:rank 3 of 4: start 2 " \
    "h3's second rank is rank 3 of 4"
else
  not_started crash 6
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
  not_started minnp 3
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
HRUN_NOMARK=1 hrun_start discover EPOCHS=2 STEP_SLEEP=0.1 --min-np 2 \
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
  not_started discover 2
fi
mh_assert_no_job_procs "$MARK" 10

# ---- a host added while the job runs -----------------------------------------
printf 'h1:1\nh2:1\n' >"$list"
HRUN_NOMARK=1 hrun_start grow EPOCHS=2 STEP_SLEEP=0.1 --min-np 2 --max-np 3 \
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
  not_started grow 2
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
  not_started shrink 3
fi
mh_assert_no_job_procs "$MARK" 10

# ---- the coordinator's host (host 0, rank 0) lost -----------------------------
HRUN_NOMARK=1 hrun_start coordinator EPOCHS=2 STEP_SLEEP=0.1 -np 3 \
  -H h1:1,h2:1,h3:1 --min-np 2 $PY "$W/elastic_train.py"
if started coordinator 1 3; then
  sleep 2
  kill_horad coordinator h1
  hrun_wait coordinator 180
  resumed coordinator 2 5 "the kill"
  expect_trained coordinator 2
  expect_grep coordinator err "elastic: host h1 is left out for the rest of the job" \
    "horarun leaves h1 out"
  in_place coordinator 2 h1
else
  not_started coordinator 3
fi
mh_assert_no_job_procs "$MARK" 10

# ---- a second host lost while the job re-forms --------------------------------
HRUN_NOMARK=1 hrun_start twice EPOCHS=2 STEP_SLEEP=0.05 -np 3 -H h1:1,h2:1,h3:1 \
  --min-np 1 $PY "$W/elastic_train.py"
if started twice 1 3; then
  sleep 1
  r3=$(pids twice 1 2)
  # h3's rank cannot come back: the first re-forming waits for it
  [ -n "$r3" ] && kill -STOP $r3
  kill_horad twice h2
  if wait_for twice err "\(re-forming 1\)" 1 20; then
    sleep 0.5 # (the REFORM reaches h1 and h3)
    T0=$(date +%s.%N)
    # shellcheck disable=SC2046
    kill -9 $(mh_host_pids h3 horad) $r3
  else
    fail "twice: horarun did not re-form the job without h2"
  fi
  hrun_wait twice 180
  resumed twice 2 5 "the second kill"
  expect_trained twice 1
  expect_grep twice err "elastic: host h2 left out; the job goes on in place with 2 rank\(s\) on 2 host\(s\), numbered anew \(re-forming 1\)" \
    "the first re-forming leaves h2 out"
  expect_nogrep twice err "re-formed in place in [0-9.]+ s: 2 rank" \
    "the first re-forming never ends"
  in_place twice 1 h3
else
  not_started twice 3
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
  not_started flap 3
fi
mh_assert_no_job_procs "$MARK" 10
finish
