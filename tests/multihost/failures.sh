#!/bin/sh
# failures.sh -- a multi-host job that cannot start, or whose rank fails
# (network namespaces with sshd, see lib.sh). Each time horarun exits
# non-zero with a message that names the host (and says why, in ssh's
# words where ssh is what failed), and afterwards no process of the job --
# no horad, no rank, no ssh -- is left on any host or on the client:
#   refused     a host where nothing listens on port 22 (hx)
#   badkey      -i with a key that no host authorizes (where ssh has no
#               other key)
#   noresolve   -H nosuchhost.invalid:1,h1:1
#   nohorad     horad_path: /nonexistent/horad in a config file
#   slowhorad   h2's horad never connects back (a stand-in that only logs
#               "still starting"), --start-timeout 3: gives up in ~3 s
#   exit3sleep  rank 3 (on h2) exits 3 while the others sleep: horarun
#               exits 3, names rank 3 and h2, shows its last stderr lines
#   exit3       rank 3 (on h2) exits 3 while the others are blocked in an
#               allreduce: they get HORA_EPEERGONE naming rank 3
#   reinit      hora_init() after hora_shutdown() across hosts: works, or
#               (where it is not supported) fails on each rank with a
#               message that says so, not a bare "connection closed"
#   noinit      rank 3 (on h2) exits 0 without calling hora_init while the
#               others are blocked in an allreduce: horarun names rank 3
#               and h2 as the cause, not the ranks of h1 that failed
. "$(dirname "$0")/lib.sh"
need "$HORARUN" "$HORAD"
mh_setup 3

sleeper='sleep 30'

hrun refused 60 -np 2 -H h1:1,hx:1 sh -c "$sleeper"
expect_rc refused nonzero
expect_grep refused err 'hx.*Connection refused|Connection refused.*hx' "stderr names hx and says Connection refused"
expect_within refused 20 "gives up at once"
mh_assert_no_job_procs "$MARK" 10

HRUN_FROM=client-nokey hrun badkey 60 -i "$MH_BADKEY" -np 2 -H h1:1,h2:1 sh -c "$sleeper"
expect_rc badkey nonzero
expect_grep badkey err 'h[12].*Permission denied|Permission denied.*h[12]' "stderr names a host and says Permission denied"
expect_within badkey 20 "gives up at once"
mh_assert_no_job_procs "$MARK" 10

hrun noresolve 60 -np 2 -H nosuchhost.invalid:1,h1:1 sh -c "$sleeper"
expect_rc noresolve nonzero
expect_grep noresolve err 'nosuchhost\.invalid.*Could not resolve hostname|Could not resolve hostname.*nosuchhost\.invalid' \
  "stderr names nosuchhost.invalid and says Could not resolve hostname"
expect_within noresolve 20 "gives up at once"
mh_assert_no_job_procs "$MARK" 10

mh_write_config "$MH_TMP/nohorad.yaml" horad=/nonexistent/horad
hrun nohorad 60 -np 2 -H h1:1,h2:1 --config-file "$MH_TMP/nohorad.yaml" sh -c "$sleeper"
expect_rc nohorad nonzero
expect_grep nohorad err 'No such file|not found' "stderr says horad is not there"
expect_grep nohorad err '(^|[^a-z0-9])h[12]([^a-z0-9]|$)' "stderr names a host"
expect_within nohorad 20 "gives up at once"
mh_assert_no_job_procs "$MARK" 10

# on h2, "horad" never connects back: it only says, twice a second on its
# stderr, that it is still starting (so it ends with SIGPIPE once its ssh
# session is gone, as a real one would on its next log line); on h1 it is
# the real one
cat >"$MH_TMP/slow-horad" <<EOF
#!/bin/sh
if [ "\$(hostname)" = h2 ]; then
  echo "\$\$" >>"$MH_TMP/slow-horad.ran"
  while :; do
    echo "stand-in horad on h2: still starting" >&2 || exit 0
    sleep 0.5
  done
fi
exec "$HORAD" "\$@"
EOF
chmod +x "$MH_TMP/slow-horad"
mh_write_config "$MH_TMP/slow.yaml" horad="$MH_TMP/slow-horad"
hrun slowhorad 60 -np 2 -H h1:1,h2:1 --config-file "$MH_TMP/slow.yaml" --start-timeout 3 sh -c "$sleeper"
expect_rc slowhorad nonzero
[ -s "$MH_TMP/slow-horad.ran" ] || fail "slowhorad: the stand-in horad never ran on h2"
expect_grep slowhorad err "h2.*($MH_RE_TIMEOUT)|($MH_RE_TIMEOUT).*h2" "stderr names h2 and says it did not come up in time"
if awk -v e="$ELAPSED" 'BEGIN { exit !(e < 2.5 || e > 10) }'; then
  fail "slowhorad: horarun gave up after ${ELAPSED}s; expected about 3 s (--start-timeout 3)"
fi
mh_assert_no_job_procs "$MARK" 10

# a rank on a remote host fails while the others sleep outside hora
hrun exit3sleep 60 -np 4 -H h1:2,h2:2 \
  sh -c 'if [ "$HOROVOD_RANK" = 3 ]; then echo "rank three gives up" >&2; exit 3; fi; sleep 30'
expect_rc exit3sleep 3
expect_grep exit3sleep err 'rank 3.*h2|h2.*rank 3' "stderr names rank 3 and host h2"
expect_grep exit3sleep err 'rank three gives up' "stderr shows the rank's last words"
expect_within exit3sleep 15 "the sleeping ranks are stopped within seconds"
mh_assert_no_job_procs "$MARK" 10

# ... and while the others wait for it in an allreduce
if [ -x "$T/it_fail" ]; then
  hrun exit3 60 -np 4 -H h1:2,h2:2 "$T/it_fail" exit3 3
  expect_rc exit3 3
  for r in 0 1 2; do
    expect_grep exit3 out "^\[$r\]<stdout>:rank $r: got HORA_EPEERGONE as expected: .*rank 3" \
      "rank $r reports HORA_EPEERGONE naming rank 3"
  done
  expect_nogrep exit3 out "FAIL" "no rank saw anything unexpected"
  expect_grep exit3 err 'rank 3.*h2|h2.*rank 3' "stderr names rank 3 and host h2"
  expect_within exit3 15 "ends within seconds"
  mh_assert_no_job_procs "$MARK" 10

  hrun reinit 60 -np 2 -H h1:1,h2:1 "$T/it_reinit" 2
  if [ "$RC" = 0 ]; then
    expect_count reinit out "^\[[01]\]<stdout>:rank [01]: reinit: 2 rounds, 0 failures" 2 \
      "every rank ran both sessions"
  else
    expect_grep reinit out "^\[[01]\]<stdout>:rank [01]: FAIL init in round 1: horad refused this rank: rank [01] initialised hora again after shutting it down: that works in jobs on one host only" \
      "hora_init() again says why it is refused"
  fi
  mh_assert_no_job_procs "$MARK" 10

  hrun noinit 60 -np 4 -H h1:2,h2:2 "$T/it_fail" noinit 3
  expect_rc noinit 1
  for r in 0 1 2; do
    expect_grep noinit out "^\[$r\]<stdout>:rank $r: got HORA_EPEERGONE as expected: .*rank 3 on host h2 exited with code 0 without initialising hora" \
      "rank $r reports HORA_EPEERGONE naming rank 3 and saying it never initialised hora"
  done
  expect_grep noinit err '^horarun: error: rank 3 on host h2 exited with code 0 without initialising hora' \
    "horarun names rank 3 on h2 as the cause"
  first=$(grep -E '^horarun: (error: )?rank [0-9]' "$MH_TMP/noinit.err" | head -n 1)
  case "$first" in
  *"rank 3 "*) ;;
  *) fail "noinit: horarun's first word on a rank should name rank 3, the cause; it said: $first" ;;
  esac
  expect_within noinit 15 "ends within seconds"
  mh_assert_no_job_procs "$MARK" 10
fi
finish
