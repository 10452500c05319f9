#!/bin/sh
# elastic.sh -- horarun's elastic jobs on this machine (--min-np, --max-np,
# --host-discovery-script; the flags of elastic jobs): a failed start is
# followed by another on the hosts still usable; a failed host is left out
# for good (Horovod's default) or for --blacklist-cooldown-range; the job
# ends when too few slots are left and none can come back, or when
# --reset-limit is reached; the ranks see HORA_ELASTIC_DIR and
# HORA_ELASTIC_RESETS; the flags of elastic jobs are refused elsewhere, and
# a cool-down range that does not read as MIN MAX. Across hosts, with a
# training loop: tests/multihost/elastic.sh.
. "$(dirname "$0")/lib.sh"

# a rank program: says which start it is in, and fails in the first ones
prog='echo "start $HORA_ELASTIC_RESETS dir $HORA_ELASTIC_DIR"; [ "$HORA_ELASTIC_RESETS" -ge "$1" ] || exit 3'

# a failed host is left out for good: nothing remains, the job ends
run_hr -np 2 --min-np 1 sh -c "$prog" sh 1
expect_rc 3 "host left out for good"
expect_in err "elastic: host localhost is left out for the rest of the job" "for good"
expect_in err "fewer than --min-np 1 (no host can come back" "ends: nothing can come back"
expect_not_in err "start 2:" "no second start"
note "a failed host is left out for good; the job ends with the rank's status"

# with a cool-down, the same host takes the next start
run_hr -np 2 --min-np 1 --blacklist-cooldown-range 1 2 sh -c "$prog" sh 1
expect_rc 0 "cool-down"
expect_in err "elastic: host localhost is left out for 1 s (failure 1)" "cool-down of 1 s"
expect_in err "elastic: start 2: 2 rank(s) on localhost:2" "second start"
[ "$(grep -c '<stdout>:start 1 dir /' "$TMP/out")" = 2 ] || fail "both ranks of start 2 see HORA_ELASTIC_RESETS=1"
dir=$(sed -n 's/^\[0\]<stdout>:start 0 dir //p' "$TMP/out")
case "$dir" in
*/hora-elastic-*) ;;
*) fail "HORA_ELASTIC_DIR is '$dir'" ;;
esac
[ "$(sed -n 's/^\[1\]<stdout>:start 1 dir //p' "$TMP/out")" = "$dir" ] ||
  fail "HORA_ELASTIC_DIR changed between starts"
note "a cool-down lets the host back; the ranks see the starts and one directory"

# the cool-down doubles with each failure, up to MAX (MIN,MAX form)
run_hr -np 1 --min-np 1 --blacklist-cooldown-range 1,2 sh -c "$prog" sh 3
expect_rc 0 "doubling"
expect_in err "left out for 1 s (failure 1)" "first: MIN"
expect_in err "left out for 2 s (failure 2)" "second: doubled"
expect_in err "left out for 2 s (failure 3)" "third: at most MAX"
expect_in err "elastic: start 4:" "a fourth start"
note "the cool-down doubles up to MAX"

# --reset-limit: the job ends with the failure once reached
run_hr -np 2 --min-np 1 --reset-limit 2 --blacklist-cooldown-range 0 0 sh -c 'exit 4'
expect_rc 4 "reset limit"
expect_in err "reset 2 of at most 2" "two resets"
expect_in err "the job failed 3 times; --reset-limit 2 reached" "then ends"
note "--reset-limit ends the job"

# a start runs as many ranks as the usable slots allow, at most --max-np
# (else -np's number)
run_hr -np 1 --max-np 3 -H localhost:4 --blacklist-cooldown-range 0 0 sh -c "$prog" sh 1
expect_rc 0 "max-np"
[ "$(grep -c '<stdout>:start 0 ' "$TMP/out")" = 3 ] || fail "--max-np 3: three ranks in the first start"
[ "$(grep -c '<stdout>:start 1 ' "$TMP/out")" = 3 ] || fail "--max-np 3: three ranks in the second start"
run_hr -np 2 --min-np 1 -H localhost:4 --blacklist-cooldown-range 0 0 sh -c "$prog" sh 1
expect_rc 0 "np without max-np"
[ "$(grep -c '<stdout>:start 0 ' "$TMP/out")" = 2 ] || fail "-np 2: two ranks in the first start"
[ "$(grep -c '<stdout>:start 1 ' "$TMP/out")" = 2 ] || fail "-np 2: two ranks in the second start"
note "--max-np (else -np) ranks where the slots allow"

# a failure no host is blamed for ends the job (the next start would fail
# alike): rank 0 exits 0 without initialising hora, then rank 1 fails
run_hr -np 2 --min-np 1 --blacklist-cooldown-range 0 0 sh -c '[ "$HORA_RANK" = 0 ] || { sleep 0.5; exit 3; }'
expect_rc 1 "no host to blame"
expect_in err "error: elastic: the job failed (exit status 1) and no host is to blame; ending it" "ends at once"
expect_not_in err "start 2:" "no second start"

# the exit status after a start left for the hosts' change: covered across
# hosts (tests/multihost/elastic.sh); a bad -H is a usage error, as ever
run_hr -np 2 --min-np 1 -H 'bad host' true
expect_rc 2 "bad -H in an elastic job"
note "usage error for bad hosts"

# a discovery script's hosts (HOST and HOST:SLOTS lines, --slots-per-host)
printf '#!/bin/sh\necho "# the hosts"\necho localhost\n' >"$TMP/disc.sh"
chmod +x "$TMP/disc.sh"
run_hr --host-discovery-script "$TMP/disc.sh" --slots-per-host 3 sh -c 'echo rank $HOROVOD_RANK'
expect_rc 0 "discovery"
[ "$(grep -c '<stdout>:rank ' "$TMP/out")" = 3 ] || fail "--slots-per-host 3: three ranks"
printf '#!/bin/sh\necho\necho "# hosts"\necho localhost:x\n' >"$TMP/bad.sh"
chmod +x "$TMP/bad.sh"
run_hr --host-discovery-script "$TMP/bad.sh" true
expect_rc 1 "bad discovery output"
expect_in err "error: elastic: the host discovery script's line 3: bad host 'localhost:x'" "names the script's line"
printf '#!/bin/sh\nexit 5\n' >"$TMP/fails.sh"
chmod +x "$TMP/fails.sh"
run_hr --host-discovery-script "$TMP/fails.sh" true
expect_rc 1 "failing discovery script"
expect_in err "the host discovery script '$TMP/fails.sh' failed with status 5" "names the script and its status"
printf '#!/bin/sh\necho localhost\necho $$ >"%s"\nexec sleep 100\n' "$TMP/hang.pid" >"$TMP/hangs.sh"
chmod +x "$TMP/hangs.sh"
run_hr --host-discovery-script "$TMP/hangs.sh" true
expect_rc 1 "a discovery script that hangs"
expect_in err "the host discovery script '$TMP/hangs.sh' did not finish within 10 s" "gives up on it"
[ -s "$TMP/hang.pid" ] || fail "the hanging script did not run"
# (killed, it may linger a moment as a zombie of whoever adopted it)
st=$(sed 's/^.*) //' "/proc/$(cat "$TMP/hang.pid")/stat" 2>/dev/null | cut -d' ' -f1)
[ -z "$st" ] || [ "$st" = Z ] || fail "the hanging script's process was left running ($st)"
note "discovery script: hosts, slots, bad output, failure, a hang"

# usage errors
run_hr -np 2 --reset-limit 3 true
expect_rc 2 "elastic flag on a plain job"
expect_in err "--reset-limit is for elastic jobs" "says so"
run_hr -np 2 --min-np 1 --blacklist-cooldown-range 5 1 true
expect_rc 2 "MIN > MAX"
expect_in err "invalid --blacklist-cooldown-range value '5 1'" "names the value"
run_hr -np 2 --min-np 3 true
expect_rc 2 "min-np above np"
expect_in err "--min-np 3 is more than the -np 2" "says so"
run_hr -np 4 --max-np 2 true
expect_rc 2 "np above max-np"
expect_in err "-np 4 is more than --max-np 2" "says so"
note "usage errors"
