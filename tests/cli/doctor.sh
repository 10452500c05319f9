#!/bin/sh
# doctor.sh -- horarun --doctor without sshd: its arguments, this machine
# alone, "remote" hosts through the fake ssh (use_fake_ssh in lib.sh), among
# them horads of another release and of another build, and horad --probe
# itself (its first line, strangers on its test port).
# tests/multihost/doctor.sh plants each problem on real ssh hosts.
. "$(dirname "$0")/lib.sh"
[ -x "$BUILD/bin/horad" ] ||
  { echo "no $BUILD/bin/horad: run make first"; exit 77; }
unset HORA_HORAD HORA_ARENA_SIZE HORA_CHUNK_SIZE

# expect_row HOST CHECK RESULT WHAT: the table has that row
expect_row() {
  grep -Eq -- "^$1 +$2 +$3" "$TMP/out" || fail "$4: no row /$1 $2 $3/"
}

# ---- arguments --------------------------------------------------------------
run_hr --doctor true
expect_rc 2 "--doctor with a program"
expect_in err "horarun: error: --doctor runs no program, but 'true' was given" \
  "the program is named"
run_hr --doctor -np 0
expect_rc 2 "--doctor -np 0"
expect_in err "invalid -np value '0'" "a bad -np is still an error"
run_hr --doctor=1
expect_rc 2 "--doctor=1"
expect_in err "option '--doctor' takes no value" "--doctor takes no value"
run_hr --doctor -H 'bad host:1'
expect_rc 2 "--doctor with a bad host"
run_hr --help
expect_in out "--doctor" "--help lists --doctor"
expect_in out "horarun --doctor [options]" "--help shows its usage"
note "--doctor: a program, a bad -np, a value, a bad host are usage errors"

# ---- this machine -----------------------------------------------------------
run_hr --doctor
expect_rc 0 "--doctor alone"
expect_in out "no problem" "the verdict"
for c in horad memory shm memlock gpu nccl; do
  expect_row localhost $c ok "--doctor alone: $c"
done
expect_not_in out "localhost  ssh" "no ssh to this machine"
expect_row localhost memory 'ok +.*its 1 rank can' "one rank by default"
run_hr --doctor -np 3
expect_rc 0 "--doctor -np 3"
expect_row localhost memory 'ok +.*its 3 ranks can' "-np 3: three ranks"
note "--doctor alone: this machine, one rank (or -np), exit 0"

run_hr --doctor --network-interface nosuch0
expect_rc 1 "an interface this machine lacks"
expect_row localhost iface "FAIL +no interface of 'nosuch0'" "the interface"
grep -A1 -E '^localhost +iface +FAIL' "$TMP/out" | grep -q 'fix: ' ||
  fail "no fix under the iface problem"
expect_in out "a job on these hosts would fail" "the verdict"
run_hr --doctor --network-interface lo
expect_rc 0 "--network-interface lo"
expect_row localhost iface 'ok +lo 127\.0\.0\.1' "lo's address"
note "--network-interface: one this machine lacks fails, lo does not"

run_hr --doctor --arena-size 1000000G -np 2
expect_rc 1 "arenas larger than memory"
expect_row localhost memory FAIL "arenas larger than memory"
expect_row localhost shm FAIL "arenas larger than /dev/shm"
expect_in out "fix: a smaller --arena-size (now 976.6 TiB per rank)" \
  "the memory fix names the arena size"
HORA_ARENA_SIZE=1000000G run_hr --doctor
expect_rc 1 "HORA_ARENA_SIZE counts too"
printf 'env:\n  HORA_ARENA_SIZE: "1000000G"\n' >"$TMP/arena.yaml"
run_hr --doctor --config-file "$TMP/arena.yaml"
expect_rc 1 "a config file's env counts too"
expect_row localhost memory FAIL "config env: memory"
note "--arena-size (flag, environment, config env) against memory, /dev/shm"

# ---- hosts through the fake ssh ---------------------------------------------
use_fake_ssh
run_hr --doctor -H localhost:1,fakehost:2
expect_rc 0 "two hosts"
expect_row fakehost ssh ok "fakehost reached"
expect_row fakehost horad ok "fakehost's horad"
expect_row fakehost memory 'ok +.*its 2 ranks can' "fakehost's two ranks"
# (a WARN is a slow round trip on a busy machine: measured all the same)
measured='(ok|WARN) +(slow: )?round trip'
expect_row 'localhost->fakehost' link "$measured" "localhost->fakehost"
expect_row 'fakehost->localhost' link "$measured" "fakehost->localhost"
note "a local and a remote host: both links measured"

FAKE_SSH_FAIL=badhost run_hr --doctor -H localhost:1,fakehost:1,badhost:1
expect_rc 1 "a failed ssh"
expect_row badhost ssh \
  "FAIL +ssh failed: .*Could not resolve hostname badhost" \
  "ssh's words"
expect_row fakehost ssh ok "the other host"
expect_not_in out "badhost->" "no link from a host not reached"
note "a host ssh cannot reach: FAIL on its row only"

printf 'horad_path: /nonexistent/horad\n' >"$TMP/nohorad.yaml"
run_hr --doctor -H localhost:1,fakehost:1 --config-file "$TMP/nohorad.yaml"
expect_rc 1 "no horad on fakehost"
expect_row fakehost horad "FAIL +/nonexistent/horad is not there" "no horad"
expect_in out "fix: install hora" "the fix"
expect_row localhost horad ok "horad here"
note "horad_path to nothing: the remote horad FAILs"

# a horad that never answers: the start timeout, then it is ended
cat >"$TMP/slow-horad" <<EOF
#!/bin/sh
echo \$\$ >"$TMP/slow.pid"
echo "stand-in horad: still starting" >&2
exec sleep 60
EOF
chmod +x "$TMP/slow-horad"
printf 'horad_path: %s\n' "$TMP/slow-horad" >"$TMP/slow.yaml"
t0=$(date +%s)
run_hr --doctor -H localhost:1,fakehost:1 --config-file "$TMP/slow.yaml" \
  --start-timeout 2
expect_rc 1 "a horad that never answers"
[ $(($(date +%s) - t0)) -le 8 ] || fail "the start timeout of 2 s took longer"
expect_row fakehost ssh \
  "FAIL +no answer within the start timeout \(2 s\): stand-in horad" \
  "the timeout, and what it said"
! kill -0 "$(cat "$TMP/slow.pid")" 2>/dev/null ||
  fail "the stand-in horad is still running"
note "a horad that never answers: FAIL after --start-timeout, and ended"

# another release, and another build of this one, on the "remote" host
other_horad() { # NAME MAKE-VARS...: a horad built apart, in $BUILD/tests
  _d=$BUILD/tests/doctor-$1
  shift
  make -s -C "$HORA_TOP" BUILD="$_d" OPT=-O0 "$@" "$_d/bin/horad" \
    >"$TMP/make.log" 2>&1 || { cat "$TMP/make.log"; fail "cannot build it"; }
  echo "$_d/bin/horad"
}
rel=$(sed -n 's/^VERSION *:= *//p' "$HORA_TOP/Makefile")
old=$(other_horad v009 VERSION=0.0.9) || exit 1
printf 'horad_path: %s\n' "$old" >"$TMP/old.yaml"
run_hr --doctor -H localhost:1,fakehost:1 --config-file "$TMP/old.yaml"
expect_rc 1 "another release on fakehost"
expect_row fakehost horad "FAIL +horad 0\.0\.9 .* there, horarun $rel" \
  "both versions named"
expect_in out "fix: install the same hora on every host" "the fix"
build=$(other_horad build VERSION="$rel" GIT_SHA=0000000) || exit 1
printf 'horad_path: %s\n' "$build" >"$TMP/build.yaml"
run_hr --doctor -H localhost:1,fakehost:1 --config-file "$TMP/build.yaml"
expect_rc 0 "another build of the release"
expect_row fakehost horad "WARN +horad $rel \(0000000\) there" \
  "another build: a warning"
expect_in out "another build of the release" "the warning says why"
note "horad of another release FAILs, of another build WARNs"

# ---- horad --probe ----------------------------------------------------------
HORAD=$BUILD/bin/horad
echo garbage | timeout 10 "$HORAD" --probe >"$TMP/out" 2>"$TMP/err"
rc=$?
expect_rc 2 "a probe without its first line"
expect_in err "--probe expects the line 'HORA-DOCTOR 1 <token>'" "the error"
timeout 10 "$HORAD" --probe --rendezvous </dev/null >"$TMP/out" 2>"$TMP/err"
rc=$?
expect_rc 2 "--probe with --rendezvous"
note "horad --probe: a bad first line, a mode beside it"

# Two probes; strangers on B's port (wrong token, garbage after the right
# token, a chunk longer than allowed, and 20 silent ones, more than it
# holds, kept open): A's test of B still works.
command -v python3 >/dev/null ||
  { echo "doctor: skipped the probe fuzz: no python3"; exit 0; }
timeout 60 python3 - "$HORAD" >"$TMP/out" 2>"$TMP/err" <<'PY'
import socket, subprocess, sys, time
horad = sys.argv[1]
tok = "0123456789abcdef0123456789abcdef"
def probe():
    p = subprocess.Popen([horad, "--probe", "--launcher", "127.0.0.1"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, bufsize=1)
    p.stdin.write("HORA-DOCTOR 1 %s\n" % tok)
    p.stdin.flush()
    port = None
    for line in p.stdout:
        if line.startswith("listen "):
            port = int(line.split()[1])
        if line.strip() == "ready":
            return p, port
    sys.exit("probe ended before ready")
a, _ = probe()
b, bport = probe()
def stranger(data, keep=False):
    s = socket.create_connection(("127.0.0.1", bport))
    if data:
        s.sendall(data)
    if keep:
        return s
    time.sleep(0.05)
    s.close()
held = [stranger(b"", keep=True) for _ in range(20)]  # more than it serves
stranger(b"x" * 40)
stranger(tok.encode() + b"zzz")
stranger(tok.encode() + b"b\xff\xff\xff\xff")
stranger(tok.encode() + b"b\x00\x00\x00\x10" + b"\x00" * 3)
time.sleep(0.2)
a.stdin.write("test 127.0.0.1 %d\n" % bport)  # the silent ones still held
a.stdin.flush()
print(a.stdout.readline().strip())
for s in held:
    s.close()
a.stdin.write("test 127.0.0.1 1\n")  # nothing listens there
a.stdin.flush()
print(a.stdout.readline().strip())
a.stdin.write("test 127.0.0.1 %d rtt\n" % bport)  # round trips alone
a.stdin.flush()
print("rtt", a.stdout.readline().strip())
a.stdin.write("test 127.0.0.1 %d bw\n" % bport)  # bandwidth alone
a.stdin.flush()
print("bw", a.stdout.readline().strip())
for bad in ("nonsense", "test 127.0.0.1 %d fast" % bport,
            "test 127.0.0.1 %d bw x" % bport):
    a.stdin.write(bad + "\n")
    a.stdin.flush()
    print(a.stdout.readline().strip())
for p in (a, b):
    p.stdin.close()
    print("exit", p.wait(timeout=10))
PY
rc=$?
expect_rc 0 "the probe fuzz"
expect_in out "result ok " "A's test of B after the strangers"
expect_in out "result fail connect: Connection refused" "a port nobody holds"
grep -Eq '^rtt result ok [1-9][0-9]* 0 0$' "$TMP/out" || fail "rtt alone"
grep -Eq '^bw result ok 0 [1-9][0-9]* [1-9][0-9]*$' "$TMP/out" ||
  fail "bandwidth alone"
[ "$(grep -c '^error unknown command$' "$TMP/out")" -eq 3 ] ||
  fail "three unknown commands"
[ "$(grep -c '^exit 0$' "$TMP/out")" -eq 2 ] || fail "both probes exit 0"
note "horad --probe: strangers on its port do not stop a test"
