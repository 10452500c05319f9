#!/bin/sh
# horad_boot.sh -- horad's own start in a job on several hosts, when what
# it is given is wrong: the bootstrap line on its standard input (from
# horarun, over ssh or a pipe) malformed, truncated or absent; no way to
# find horarun; horarun not listening; a --network-interface this host
# lacks; the local service client without what it needs; the service
# given sockets by systemd that are not its. Each ends at once with a
# one-line error and a non-zero status,
# and the secret never shows in what horad prints.
. "$(dirname "$0")/lib.sh"
HORAD=$BUILD/bin/horad
[ -x "$HORAD" ] || { echo "no $HORAD: run make first"; exit 77; }
secret=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef

# run_hd STDIN-TEXT ARGS...: horad with that standard input
run_hd() {
  _in=$1
  shift
  printf '%s' "$_in" | timeout -k 5 20 "$HORAD" "$@" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  cat "$TMP/out" "$TMP/err" >>"$TMP/all"
}

for line in "garbage" "" "HORA1 0 5000" "HORA1 0 5000 ${secret%?} 3" \
  "HORA1 0 5000 ${secret}00 3" "HORA1 0 5000 $secret" "HORA1 0 5000 $secret 0" \
  "HORA1 -1 5000 $secret 3" "HORA1 0 70000 $secret 3" \
  "HORA1 0 5000 ${secret%??}zz 3" "HORA1 0 5000 $secret 3 extra"; do
  run_hd "$line
" --rendezvous --launcher 127.0.0.1
  expect_rc 2 "bootstrap line '$line'"
  expect_in err "malformed bootstrap line on standard input" "'$line'"
done
note "11 malformed bootstrap lines -> exit 2, 'malformed bootstrap line'"

# standard input closed without a line at all
run_hd "" --rendezvous --launcher 127.0.0.1
expect_rc 2 "no bootstrap line"
expect_in err "malformed bootstrap line" "no bootstrap line"

# a good line, but nothing tells horad where horarun is
(unset SSH_CONNECTION SLURM_LAUNCH_NODE_IPADDR
 run_hd "HORA1 0 5000 $secret 3
" --rendezvous
 expect_rc 2 "no SSH_CONNECTION"
 expect_in err 'no $SSH_CONNECTION or $SLURM_LAUNCH_NODE_IPADDR to find horarun by' "no SSH_CONNECTION") || exit 1
note "no \$SSH_CONNECTION, \$SLURM_LAUNCH_NODE_IPADDR or --launcher -> exit 2"

# horarun is not there: the connection is refused
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 9)
run_hd "HORA1 0 $port $secret 3
" --rendezvous --launcher 127.0.0.1
expect_rc 1 "horarun not listening"
expect_in err "connection to horarun (127.0.0.1:$port): cannot connect" "refused"
note "horarun not listening -> exit 1, $(grep -o 'cannot connect.*' "$TMP/err" | head -n 1)"

# an interface this host does not have
run_hd "HORA1 0 5000 $secret 3
" --rendezvous --launcher 127.0.0.1 --iface nosuch0,nosuch1
expect_rc 1 "unknown interface"
expect_in err "no network interface of 'nosuch0,nosuch1' has an address on this host" "iface"
note "--iface nosuch0,nosuch1 -> exit 1"

# the client of a service's unix socket (horad --service-client /PATH):
# no key options, horarun's connection on fd 3, a service at the path and,
# with --bootstrap, the line
run_hd "" --service-client "$TMP/svc.sock" --key-file "$TMP/k" -- --control-fd 3
expect_rc 2 "local client with --key-file"
expect_in err "(a unix socket) takes no --key-file, --auth or --munge-socket" "local --key-file"
run_hd "" --service-client "$TMP/svc.sock" -- --control-fd 3 3<&-
expect_rc 255 "local client without fd 3"
expect_in err "no connection to horarun on fd 3 to pass to the service" "no fd 3"
run_hd "" --service-client "$TMP/svc.sock" -- --control-fd 3 --bootstrap 3</dev/null
expect_rc 255 "local client without its bootstrap line"
expect_in err "no bootstrap line on standard input" "local, no line"
run_hd "HORA1 0 0 $secret 3
" --service-client "$TMP/svc.sock" -- --control-fd 3 --bootstrap 3</dev/null
expect_rc 255 "local client, no service"
expect_in err "cannot reach the service at $TMP/svc.sock: No such file or directory" "local, no service"
note "--service-client /PATH: key options, no fd 3, no line, no service -> said, exit 2/255"

# the service under socket activation given what is not horad's: three
# sockets, or a descriptor that is not a listening stream socket
openssl rand -hex 32 >"$TMP/skey" && chmod 600 "$TMP/skey"
root=""
[ "$(id -u)" = 0 ] && root=--allow-root
# activated NAME LISTEN_FDS: horad --service as systemd starts it (LISTEN_PID
# its own pid), with fd 3 a plain file
activated() {
  timeout -k 5 20 sh -c 'LISTEN_PID=$$ LISTEN_FDS=$1; export LISTEN_PID LISTEN_FDS; shift
exec "$@"' sh "$2" "$HORAD" --service --key-file "$TMP/skey" $root \
    3<"$TMP/skey" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  cat "$TMP/out" "$TMP/err" >>"$TMP/all"
}
activated three 3
expect_rc 1 "three sockets from systemd"
expect_in err "systemd passed LISTEN_FDS=3: horad takes one TCP socket and one unix socket" "LISTEN_FDS=3"
activated file 1
expect_rc 1 "a file from systemd"
expect_in err "descriptor 3 from systemd is not a listening stream socket" "a file on fd 3"
note "socket activation with LISTEN_FDS=3, or a file on fd 3 -> said, exit 1"

# the secret never appears in anything horad printed above
expect_not_in all "$secret" "the secret in horad's output"
note "the secret is not printed"
