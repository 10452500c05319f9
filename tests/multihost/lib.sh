# lib.sh -- N "hosts" on this one machine, for the multi-host tests
# (tests/multihost/*.sh) and benchmarks/multihost.sh.
#
# Each host is a network namespace with its own sshd, its own hostname (a
# UTS namespace) and its own /etc/hosts and /etc/ssh (ip netns exec binds
# /etc/netns/NS/* over /etc/*), all on one bridge that lives in a namespace
# of its own: nothing changes in this machine's own network namespace, and
# there is no route out. Addresses are link-local (169.254.99.0/24).
#
#   name     address          what
#   h1..hN   169.254.99.<i>   a host: sshd on port 22, hostname hI
#   hx       169.254.99.99    a host where nothing listens (Connection refused)
#   client   169.254.99.100   a machine that is none of the hosts; horarun
#                             runs here by default
# Every name resolves in every namespace; nothing else does (no DNS).
# ssh from any of them reaches any host as root with a fresh key, no
# prompts (BatchMode), no known_hosts questions.
#
# A driver sources it:   . "$(dirname "$0")/lib.sh"
# and then, typically:
#   mh_setup 3                                   # h1 h2 h3 (+ hx, client)
#   hrun NAME 120 -np 6 -H h1:2,h2:2,h3:2 "$T/it_coll" matrix -x 6
#   expect_rc NAME 0
#   expect_grep NAME out '^\[5\]<stdout>:rank 5 of 6' "rank 5 reports 6 ranks"
#   mh_assert_no_job_procs "$MARK"
#   finish                                       # exit 0 / 1; tears down
#
# Helpers:
#   mh_setup N            create h1..hN (+ hx, client); skip (77) when this
#                         machine cannot (not root, no ip netns, no sshd)
#   mh_exec HOST CMD...   run CMD on HOST (its network, UTS and mount
#                         namespaces: the sshd's view), in the current dir
#   mh_client CMD...      run CMD on the client
#   mh_client_nokey CMD...  the same, but ssh there has no default key (for
#                         -i tests)
#   mh_ns HOST / mh_addr HOST   namespace name / address of HOST
#   mh_pids_all           "PID NAMESPACE" of every process in our namespaces
#   mh_host_pids HOST [COMM]  pids in HOST's namespace (of command COMM)
#   mh_job_pids MARK      processes of a job: MARK in their command line or
#                         environment (anywhere on the machine), or anything
#                         in our namespaces that is not our sshd/holders
#   mh_assert_no_job_procs MARK [SECONDS]   none of those may remain (polled
#                         for SECONDS, default 5); leftovers are listed,
#                         counted as a failure, and killed
#   mh_kill_job_procs MARK   kill them without a verdict
#   mh_link_down HOST / mh_link_up HOST   cut / restore HOST's cable (its
#                         veth end in the bridge namespace)
#   mh_teardown           remove everything (also run on EXIT/INT/TERM/HUP)
#   mh_write_hostfile FILE HOST:SLOTS...   / mh_write_config FILE ... :
#                         the file formats horarun reads, in one place
# Test helpers (as in tests/integration/lib.sh): say, fail, skip, show,
# hrun, hrun_bg, hrun_wait, wait_for, expect_rc, expect_grep, expect_nogrep,
# expect_count, expect_quiet, finish. hrun runs horarun on the client, or
# on the host named by HRUN_FROM (e.g. HRUN_FROM=h1 hrun ...).
#
# Environment: BUILD, HORA_TOP, HORARUN as in tests/integration/lib.sh;
# HORA_MULTIHOST=require turns "cannot set up namespaces here" from a skip
# into a failure (for CI, where it must run); MH_KEEP=1 leaves everything in
# place at exit for debugging (remove it later with: sh lib.sh --clean).
#
# Run directly (sh lib.sh, as tests/run.sh does for every *.sh here), it
# tests itself: 3 hosts, ssh between all of them by name, hostnames, a cut
# link, leftover detection, and that teardown leaves nothing behind.
# sh lib.sh --clean removes what crashed earlier runs left.

HORA_TOP=${HORA_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=$(cd "${BUILD:-$HORA_TOP/build}" 2>/dev/null && pwd) || BUILD=${BUILD:-$HORA_TOP/build}
. "$HORA_TOP/tests/expect.sh"
HORARUN=${HORARUN:-$BUILD/bin/horarun}
HORAD=${HORAD:-$(dirname "$HORARUN")/horad}
# shellcheck disable=SC2034 # used by the drivers
T=$BUILD/tests
IT_NAME=$(basename "$0" .sh)
IT_START=$(date +%s.%N)
IT_FAILURES=0
MARK="hora-mh-$IT_NAME-$$-$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')"
unset XDG_RUNTIME_DIR
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1"
export ASAN_OPTIONS

# ---- the regular expressions that depend on horarun's wording -------------
# (one place to adjust when the runtime's messages settle)
# horarun --verbose: the port it waits for daemons on...
# shellcheck disable=SC2034 # used by the drivers
MH_RE_RDV_PORT='rendezvous on port ([0-9]+)'
# ...and each daemon's mesh port: \1 host name, \2 port
# shellcheck disable=SC2034 # used by the drivers
MH_RE_MESH_PORT='host ([^ :]+): horad registered, mesh port ([0-9]+)'
# a connection that failed authentication or framing, as logged
# shellcheck disable=SC2034 # used by the drivers
MH_RE_REJECT='rejected|dropped'
# a host that did not come up in time
# shellcheck disable=SC2034 # used by the drivers
MH_RE_TIMEOUT='did not (come up|start|register|connect)|timed? ?out'

# ---- names and addresses ----------------------------------------------------
MH_PFX=hmh                 # every namespace: hmh<creator pid>-<name>
MH_ID="$MH_PFX$$"
MH_NET=169.254.99          # /24, inside the bridge namespace only
MH_BR="$MH_ID-br"
MH_SSHD=${MH_SSHD:-$(command -v sshd 2>/dev/null || echo /usr/sbin/sshd)}
MH_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
MH_TMP=""
T_JOBS=""                  # each job's files (tests/expect.sh): MH_TMP
MH_HOSTS=""                # h1 .. hN
MH_NODES=""                # every namespace but the bridge's: client hx h1..
MH_BG=""                   # background pids of this driver (killed at exit)
MH_UP=0

mh_ns() { echo "$MH_ID-$1"; }
mh_addr() {
  case "$1" in
  client) echo "$MH_NET.100" ;;
  hx) echo "$MH_NET.99" ;;
  h[0-9]*) echo "$MH_NET.${1#h}" ;;
  *) return 1 ;;
  esac
}

mh_elapsed() {
  awk -v s="$1" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }'
}
# mh_past T0 SECONDS: true once SECONDS have passed since T0
mh_past() {
  awk -v s="$1" -v e="$(date +%s.%N)" -v l="$2" 'BEGIN { exit !(e - s >= l) }'
}

# say MESSAGE: a progress line with the time since the driver started.
say() { echo "[$IT_NAME +$(mh_elapsed "$IT_START")s] $*"; }

# fail MESSAGE: one failure; the driver goes on and exits 1 in finish.

# skip REASON: this machine cannot run the test (exit 77, or a failure with
# HORA_MULTIHOST=require).
skip() {
  if [ "${HORA_MULTIHOST:-}" = require ]; then
    echo "FAIL: HORA_MULTIHOST=require, but: $*"
    exit 1
  fi
  echo "$*"
  exit 77
}

# ---- process bookkeeping ----------------------------------------------------
# mh_starttime PID: the process's start time (field 22 of /proc/PID/stat)
mh_starttime() {
  sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f20
}
mh_state() { sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1; }
mh_comm() { cat "/proc/$1/comm" 2>/dev/null; }

# mh_nspid HOST: the process whose namespaces are HOST's (its sshd, or
# the client's holder process)
mh_nspid() {
  cat "$MH_TMP/$1.nspid" 2>/dev/null
}

mh_enter() { # PIDFILE-NAME CMD...
  local _mh_p
  _mh_p=$(mh_nspid "$1")
  if [ -z "$_mh_p" ] || [ ! -d "/proc/$_mh_p" ]; then
    echo "mh_enter: no namespace holder for $1 (not set up?)" >&2
    return 125
  fi
  shift
  nsenter -t "$_mh_p" -n -u -m --wd="$PWD" "$@"
}
mh_exec() { mh_enter "$@"; }
mh_client() { mh_enter client "$@"; }
mh_client_nokey() { mh_enter client-nokey "$@"; }

# mh_host_pids HOST [COMM]: processes in HOST's network namespace
mh_host_pids() {
  local _p
  for _p in $(ip netns pids "$(mh_ns "$1")" 2>/dev/null); do
    if [ -z "${2:-}" ] || [ "$(mh_comm "$_p")" = "$2" ]; then echo "$_p"; fi
  done
}

# mh_pids_all: "PID NAMESPACE" for every process in any of our namespaces
mh_pids_all() {
  local _n _p
  for _n in $MH_NODES; do
    for _p in $(ip netns pids "$(mh_ns "$_n")" 2>/dev/null); do
      echo "$_p $_n"
    done
  done
}

# it_marked_pids MARKER: processes (not this shell) whose command line or
# environment holds MARKER (the same as tests/integration/lib.sh).
it_marked_pids() {
  local _p _st
  {
    pgrep -f -- "$1" 2>/dev/null
    grep -laF -- "$1" /proc/[0-9]*/environ 2>/dev/null |
      sed -n 's|^/proc/\([0-9]*\)/environ$|\1|p'
  } | sort -un | while read -r _p; do
    [ "$_p" = "$$" ] && continue
    _st=$(mh_state "$_p")
    [ -z "$_st" ] || [ "$_st" = Z ] && continue
    echo "$_p"
  done
}

# mh_job_pids MARK: the job's processes: MARK in the command line or the
# environment, or any process in our namespaces except our sshd listeners,
# their session processes (comm sshd) and the namespace holders.
mh_job_pids() {
  local _n _p _st
  {
    [ -n "${1:-}" ] && it_marked_pids "$1"
    mh_pids_all | while read -r _p _n; do
      grep -qx "$_p" "$MH_TMP/infra.pids" 2>/dev/null && continue
      [ "$(mh_comm "$_p")" = sshd ] && continue
      _st=$(mh_state "$_p")
      [ -z "$_st" ] || [ "$_st" = Z ] && continue
      echo "$_p"
    done
  } | sort -un
}

mh_describe_pids() { # PID...: one ps line each, with its namespace
  local _line _n _p _where
  for _p in "$@"; do
    _where=root
    for _n in $MH_NODES; do
      if ip netns pids "$(mh_ns "$_n")" 2>/dev/null | grep -qx "$_p"; then
        _where=$_n
        break
      fi
    done
    _line=$(ps -o pid=,ppid=,stat=,etime=,args= -p "$_p" 2>/dev/null | cut -c1-180)
    [ -n "$_line" ] && echo "    | [$_where] $_line"
  done
}

mh_kill_job_procs() { # MARK
  local _p
  for _p in $(mh_job_pids "${1:-}"); do kill -9 "$_p" 2>/dev/null; done
}

# mh_assert_no_job_procs MARK [SECONDS]: within SECONDS (default 5), no
# process of the job may be left, on any host or the client. Leftovers are
# listed, then killed.
mh_assert_no_job_procs() {
  local _left _mark _p _secs _t0
  _mark=$1 _secs=${2:-5}
  _t0=$(date +%s.%N)
  while :; do
    _left=$(mh_job_pids "$_mark")
    [ -z "$_left" ] && return 0
    mh_past "$_t0" "$_secs" && break
    sleep 0.2
  done
  # shellcheck disable=SC2086
  fail "processes of the job are still alive ${_secs}s after it ended (marker $_mark):
$(mh_describe_pids $_left)"
  for _p in $_left; do kill -9 "$_p" 2>/dev/null; done
  return 1
}

# ---- links --------------------------------------------------------------------
mh_link_down() { ip -n "$MH_BR" link set "p-$1" down; }
# mh_link_up HOST: the cable back, and the neighbour entries that failed
# meanwhile forgotten everywhere (else connects fail at once with "No route
# to host" for a while); returns when the client can ssh to HOST again
# (1 after 15 s).
mh_link_up() {
  local _h _t0
  ip -n "$MH_BR" link set "p-$1" up
  for _h in $MH_NODES; do ip -n "$(mh_ns "$_h")" neigh flush all 2>/dev/null; done
  _t0=$(date +%s.%N)
  until mh_client ssh -o ConnectTimeout=2 "$1" true 2>/dev/null; do
    mh_past "$_t0" 15 && { echo "mh_link_up: $1 still unreachable" >&2; return 1; }
    sleep 0.2
  done
}

# ---- the files horarun reads ----------------------------------------------------
# mh_write_hostfile FILE HOST:SLOTS...: lines "HOST slots=N"
mh_write_hostfile() {
  local _f _hs
  _f=$1
  shift
  : >"$_f"
  for _hs in "$@"; do echo "${_hs%%:*} slots=${_hs#*:}" >>"$_f"; done
}

# mh_write_config FILE [hosts=H:S,...] [identity=KEY] [port=N]
#   [horad=PATH] [env=NAME=VALUE] [opt=SSH-ARG]...: a YAML cluster config.
# Hosts alternate between the {name:, slots:} and "h:s" item forms.
mh_write_config() {
  local _a _e _envs _f _horad _hosts _hs _i _id _o _opts _port
  _f=$1
  shift
  _hosts="" _id="" _port="" _horad="" _envs="" _opts=""
  for _a in "$@"; do
    case "$_a" in
    hosts=*) _hosts=${_a#hosts=} ;;
    identity=*) _id=${_a#identity=} ;;
    port=*) _port=${_a#port=} ;;
    horad=*) _horad=${_a#horad=} ;;
    env=*) _envs="$_envs ${_a#env=}" ;;
    opt=*) _opts="$_opts ${_a#opt=}" ;;
    esac
  done
  {
    echo "# written by tests/multihost/lib.sh"
    if [ -n "$_hosts" ]; then
      echo "hosts:"
      _i=0
      for _hs in $(echo "$_hosts" | tr ',' ' '); do
        if [ $((_i % 2)) -eq 0 ]; then
          echo "  - {name: ${_hs%%:*}, slots: ${_hs#*:}}"
        else
          echo "  - \"$_hs\""
        fi
        _i=$((_i + 1))
      done
    fi
    if [ -n "$_id$_port$_opts" ]; then
      echo "ssh:"
      [ -n "$_id" ] && echo "  identity_file: \"$_id\""
      [ -n "$_port" ] && echo "  port: $_port"
      if [ -n "$_opts" ]; then
        echo "  options:"
        for _o in $_opts; do echo "    - \"$_o\""; done
      fi
    fi
    [ -n "$_horad" ] && echo "horad_path: \"$_horad\""
    if [ -n "$_envs" ]; then
      echo "env:"
      for _e in $_envs; do echo "  ${_e%%=*}: \"${_e#*=}\""; done
    fi
  } >"$_f"
}

# ---- setup ----------------------------------------------------------------------
mh_prereq() {
  local _c
  [ "$(id -u)" -eq 0 ] || skip "multi-host tests need root (network namespaces, sshd)"
  for _c in ip ssh ssh-keygen nsenter unshare mount timeout; do
    command -v "$_c" >/dev/null 2>&1 ||
      skip "multi-host tests need '$_c' (Debian: iproute2 openssh-client util-linux)"
  done
  [ -x "$MH_SSHD" ] || skip "multi-host tests need sshd (Debian: openssh-server)"
  ip netns list >/dev/null 2>&1 || skip "'ip netns' does not work here"
}

# mh_cleanup_stale: remove namespaces, /etc/netns dirs, processes and temp
# dirs that earlier runs whose creator is gone left behind.
mh_cleanup_stale() {
  local _n _own _p _pid _sig _stale
  _stale=""
  for _n in $(ip netns list 2>/dev/null | awk '{ print $1 }') $(ls /etc/netns 2>/dev/null); do
    case "$_n" in "$MH_PFX"[0-9]*-*) ;; *) continue ;; esac
    _own=$(mh_owner_of "$_n")
    _pid=${_n#"$MH_PFX"}
    _pid=${_pid%%-*}
    if [ -n "$_own" ]; then
      # shellcheck disable=SC2086 # three words
      set -- $_own
      _pid=$1
      if [ -n "$_pid" ] && [ "$(mh_starttime "$_pid")" = "${2:-}" ] &&
        [ "$(mh_state "$_pid")" != Z ]; then continue; fi
    elif [ -d "/proc/$_pid" ] && [ "$(mh_state "$_pid")" != Z ]; then
      continue # no owner record yet: perhaps being created right now
    fi
    case " $_stale " in *" $_n "*) ;; *) _stale="$_stale $_n" ;; esac
  done
  [ -z "$_stale" ] && return 0
  echo "lib.sh: removing what an earlier run left:$_stale" >&2
  for _sig in TERM KILL; do
    for _n in $_stale; do
      for _p in $(ip netns pids "$_n" 2>/dev/null); do kill -"$_sig" "$_p" 2>/dev/null; done
    done
    sleep 0.3
  done
  for _n in $_stale; do
    _own=$(mh_owner_of "$_n")
    # shellcheck disable=SC2086 # three words
    set -- $_own
    case "${3:-}" in
    */hora-mh.??????)
      # it made /etc/netns: that is ours to remove now
      [ -e "$3/made-etc-netns" ] && [ -n "$MH_TMP" ] && : >"$MH_TMP/made-etc-netns"
      rm -rf "$3"
      ;;
    esac
    ip netns del "$_n" 2>/dev/null
    rm -rf "/etc/netns/$_n"
  done
}

# The owner of a namespace: "PID STARTTIME TMPDIR" of the shell that made it,
# kept as a comment in its /etc/netns/NS/hosts (any other file there would
# be bind-mounted over /etc by ip netns exec / ip -n).
mh_owner_line() { echo "# hora-mh owner $$ $(mh_starttime $$) $MH_TMP"; }
mh_owner_of() { sed -n 's/^# hora-mh owner //p' "/etc/netns/$1/hosts" 2>/dev/null | head -n 1; }

mh_die() { # reason: setup failed where it should not have
  local _f
  echo "lib.sh: $*" >&2
  for _f in "$MH_TMP"/sshd.*.log; do
    [ -s "$_f" ] && { echo "--- $_f:" >&2; tail -n 20 "$_f" >&2; }
  done
  exit 1
}

# mh_add_node NAME: a namespace with lo and eth0 (on the bridge) up
mh_add_node() {
  local _a _ns
  _ns=$(mh_ns "$1")
  _a=$(mh_addr "$1")
  ip netns add "$_ns" || return 1
  mkdir -p "/etc/netns/$_ns/ssh" || return 1
  mh_owner_line >"/etc/netns/$_ns/hosts"
  MH_NODES="$MH_NODES $1"
  ip -n "$_ns" link set lo up &&
    ip -n "$MH_BR" link add "p-$1" type veth peer name eth0 netns "$_ns" &&
    ip -n "$MH_BR" link set "p-$1" master br0 &&
    ip -n "$MH_BR" link set "p-$1" up &&
    ip -n "$_ns" addr add "$_a/24" dev eth0 &&
    ip -n "$_ns" link set eth0 up
}

# mh_wait_exec PID COMM SECONDS: wait until PID has become COMM (the end of
# its exec chain)
mh_wait_exec() {
  local _t0
  _t0=$(date +%s.%N)
  while [ "$(mh_comm "$1")" != "$2" ]; do
    [ -d "/proc/$1" ] || return 1
    mh_past "$_t0" "$3" && return 1
    sleep 0.05
  done
}

mh_ssh_config() { # IDENTITY-or-empty
  echo "# hora multi-host tests (tests/multihost/lib.sh)"
  echo "Host *"
  [ -n "$1" ] && echo "  IdentityFile $1"
  echo "  IdentitiesOnly yes"
  echo "  UserKnownHostsFile $MH_TMP/known_hosts"
  echo "  GlobalKnownHostsFile /dev/null"
  echo "  StrictHostKeyChecking no"
  echo "  User root"
  echo "  BatchMode yes"
  echo "  LogLevel ERROR"
  echo "  ConnectTimeout 5"
}

# mh_setup N: hosts h1..hN, hx and client; exits 77 when this machine
# cannot (see skip), 1 when it should but setup fails.
mh_setup() {
  local _bind _d _h _i _n _t0 _v
  _n=${1:-3}
  mh_prereq
  MH_TMP=$(mktemp -d "/tmp/hora-mh.XXXXXX") || exit 1
  T_JOBS=$MH_TMP
  MH_UP=1
  trap 'mh_on_exit' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'exit 129' HUP
  mh_cleanup_stale
  : >"$MH_TMP/infra.pids"
  if [ ! -d /etc/netns ]; then
    mkdir -p /etc/netns && : >"$MH_TMP/made-etc-netns"
  fi
  # keys: one host key for every sshd, the authorized client key, and a
  # key that is authorized nowhere
  MH_KEY=$MH_TMP/id_ed25519
  MH_BADKEY=$MH_TMP/id_bad
  ssh-keygen -q -N '' -t ed25519 -C mh-host -f "$MH_TMP/ssh_host_ed25519_key" &&
    ssh-keygen -q -N '' -t ed25519 -C mh-client -f "$MH_KEY" &&
    ssh-keygen -q -N '' -t ed25519 -C mh-unauthorized -f "$MH_BADKEY" &&
    cp "$MH_KEY.pub" "$MH_TMP/authorized_keys" || mh_die "ssh-keygen failed"

  # the bridge, in a namespace of its own
  ip netns add "$MH_BR" 2>"$MH_TMP/netns.err" ||
    skip "cannot create network namespaces here: $(head -n 1 "$MH_TMP/netns.err")"
  mkdir -p "/etc/netns/$MH_BR"
  mh_owner_line >"/etc/netns/$MH_BR/hosts"
  ip -n "$MH_BR" link set lo up &&
    ip -n "$MH_BR" link add br0 type bridge &&
    ip -n "$MH_BR" link set br0 up || mh_die "cannot create the bridge"

  MH_HOSTS=""
  _i=1
  while [ $_i -le "$_n" ]; do
    MH_HOSTS="$MH_HOSTS h$_i"
    _i=$((_i + 1))
  done
  MH_HOSTS=${MH_HOSTS# }
  for _h in client hx $MH_HOSTS; do
    mh_add_node "$_h" || mh_die "cannot create the namespace of $_h"
  done

  # name resolution and the ssh client's settings, the same everywhere
  {
    mh_owner_line
    echo "127.0.0.1 localhost"
    echo "::1 localhost ip6-localhost ip6-loopback"
    for _h in client hx $MH_HOSTS; do echo "$(mh_addr "$_h") $_h"; done
  } >"$MH_TMP/hosts"
  printf '# no DNS in the hora multi-host test network\noptions timeout:1 attempts:1\n' \
    >"$MH_TMP/resolv.conf"
  mh_ssh_config "$MH_KEY" >"$MH_TMP/ssh_config"
  mkdir -p "$MH_TMP/ssh-nokey"
  mh_ssh_config "" >"$MH_TMP/ssh-nokey/ssh_config"
  for _h in $MH_NODES; do
    _d=/etc/netns/$(mh_ns "$_h")
    cp "$MH_TMP/hosts" "$MH_TMP/resolv.conf" "$_d/" &&
      cp "$MH_TMP/ssh_config" "$_d/ssh/ssh_config" || mh_die "cannot write $_d"
  done

  # the client: a holder process owns its hostname (and mount namespace);
  # a second one sees an ssh config without a default key
  for _v in client client-nokey; do
    _bind=""
    [ "$_v" = client-nokey ] && _bind="mount --bind $MH_TMP/ssh-nokey /etc/ssh &&"
    env -i PATH="$MH_PATH" ip netns exec "$(mh_ns client)" \
      unshare --uts --mount --propagation private \
      sh -c "$_bind hostname client && exec sleep infinity" </dev/null >/dev/null 2>&1 &
    echo $! >"$MH_TMP/$_v.nspid"
    echo $! >>"$MH_TMP/infra.pids"
    mh_wait_exec $! sleep 10 || mh_die "the $_v holder did not start"
  done

  # an sshd on each host, in the host's own UTS and mount namespaces (a
  # private /run holds sshd's privilege separation directory)
  for _h in $MH_HOSTS; do
    cat >"$MH_TMP/sshd_config.$_h" <<EOF
ListenAddress $(mh_addr "$_h")
Port 22
HostKey $MH_TMP/ssh_host_ed25519_key
AuthorizedKeysFile $MH_TMP/authorized_keys
PidFile $MH_TMP/sshd.$_h.pid
StrictModes no
UsePAM no
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
PrintMotd no
PrintLastLog no
MaxStartups 100:30:200
MaxSessions 100
ClientAliveInterval 2
ClientAliveCountMax 3
EOF
    env -i PATH="$MH_PATH" ip netns exec "$(mh_ns "$_h")" \
      unshare --uts --mount --propagation private \
      sh -c 'mount -t tmpfs -o mode=755 hora-mh-run /run && mkdir -m 755 /run/sshd &&
             hostname "$1" && exec "$2" -D -e -f "$3"' \
      sh "$_h" "$MH_SSHD" "$MH_TMP/sshd_config.$_h" \
      </dev/null >"$MH_TMP/sshd.$_h.log" 2>&1 &
    echo $! >"$MH_TMP/$_h.nspid"
    echo $! >>"$MH_TMP/infra.pids"
  done
  for _h in $MH_HOSTS; do
    mh_wait_exec "$(mh_nspid "$_h")" sshd 10 || mh_die "sshd on $_h did not start"
  done
  # ready when the client can log in to every host
  _t0=$(date +%s.%N)
  for _h in $MH_HOSTS; do
    until [ "$(mh_client ssh "$_h" hostname 2>"$MH_TMP/ssh.err")" = "$_h" ]; do
      if mh_past "$_t0" 20; then
        mh_die "cannot ssh from the client to $_h within 20s: $(tail -n 3 "$MH_TMP/ssh.err")"
      fi
      sleep 0.2
    done
  done
}

# mh_teardown: end every process in our namespaces, remove the namespaces,
# their /etc/netns directories and the temp dir.
mh_teardown() {
  local _h _p _sig _t0
  [ "$MH_UP" = 1 ] || return 0
  if [ "${MH_KEEP:-}" = 1 ]; then
    echo "lib.sh: MH_KEEP=1: leaving namespaces $MH_ID-* and $MH_TMP in place" >&2
    return 0
  fi
  trap '' INT TERM HUP
  for _p in $MH_BG; do kill -9 "$_p" 2>/dev/null; done
  [ -n "${MARK:-}" ] && for _p in $(it_marked_pids "$MARK"); do kill -9 "$_p" 2>/dev/null; done
  for _sig in TERM KILL; do
    for _p in $(mh_pids_all | awk '{ print $1 }'); do kill -"$_sig" "$_p" 2>/dev/null; done
    _t0=$(date +%s.%N)
    while [ -n "$(mh_pids_all)" ] && ! mh_past "$_t0" 1.5; do sleep 0.05; done
  done
  for _h in $MH_NODES; do
    ip netns del "$(mh_ns "$_h")" 2>/dev/null
    rm -rf "/etc/netns/$(mh_ns "$_h")"
  done
  ip netns del "$MH_BR" 2>/dev/null
  rm -rf "/etc/netns/$MH_BR"
  [ -e "$MH_TMP/made-etc-netns" ] && rmdir /etc/netns 2>/dev/null
  case "$MH_TMP" in /tmp/hora-mh.??????) rm -rf "$MH_TMP" ;; esac
  MH_UP=0
}

mh_on_exit() {
  _mh_exit_rc=$?
  mh_teardown
  exit $_mh_exit_rc
}

# ---- jobs -----------------------------------------------------------------------
# show NAME: the command, exit status and the end of the output of job NAME.

# hrun_start NAME [VAR=value ...] HORARUN-ARGS...: horarun in the
# background, on the client (or on $HRUN_FROM), with the job's marker
# (HORA_IT_MARK in its environment, --marker=MARK after the program's
# arguments unless HRUN_NOMARK=1, for programs that refuse it), in a
# private TMPDIR; stdout/stderr go to $MH_TMP/NAME.{out,err}. HRUN_PID is
# horarun's own pid (no wrapper in between). With HRUN_AS=USER, horarun
# runs as that user (its uid, gid and groups; MH_TMP must let it in).
hrun_start() {
  local _as _envs _from _mark _name _nsp
  _name=$1
  shift
  _envs=""
  while [ $# -gt 0 ]; do
    case "$1" in
    [A-Z_]*=*) _envs="$_envs $1"; shift ;;
    *) break ;;
    esac
  done
  _from=${HRUN_FROM:-client}
  mkdir -p "$MH_TMP/tmp.$_name"
  rm -f "$MH_TMP/$_name.shown"
  echo "on $_from:${_envs} horarun $*" >"$MH_TMP/$_name.cmd"
  date +%s.%N >"$MH_TMP/$_name.t0"
  _mark="--marker=$MARK"
  [ "${HRUN_NOMARK:-}" = 1 ] && _mark=""
  _nsp=$(mh_nspid "$_from")
  [ -n "$_nsp" ] || { echo "hrun_start: no host $_from" >&2; return 1; }
  _as=""
  if [ -n "${HRUN_AS:-}" ]; then
    chown "$HRUN_AS" "$MH_TMP/tmp.$_name"
    _as="setpriv --reuid=$HRUN_AS --regid=$(id -g "$HRUN_AS") --init-groups"
  fi
  # a simple command, not a function: $! is the process that execs into
  # nsenter, setpriv, env and then horarun
  # shellcheck disable=SC2086
  nsenter -t "$_nsp" -n -u -m --wd="$PWD" $_as \
    env HORA_IT_MARK="$MARK" TMPDIR="$MH_TMP/tmp.$_name" \
    $_envs "$HORARUN" "$@" ${_mark:+"$_mark"} \
    </dev/null >"$MH_TMP/$_name.out" 2>"$MH_TMP/$_name.err" &
  HRUN_PID=$!
  MH_BG="$MH_BG $HRUN_PID"
  echo "$HRUN_PID" >"$MH_TMP/$_name.pid"
}

# hrun_running NAME: horarun of job NAME has not ended yet
hrun_running() {
  local _st
  _st=$(mh_state "$(cat "$MH_TMP/$1.pid" 2>/dev/null)")
  [ -n "$_st" ] && [ "$_st" != Z ]
}

# hrun_wait NAME TIMEOUT: waits for job NAME's horarun (killing it after
# TIMEOUT seconds); sets RC and ELAPSED (since its start).
hrun_wait() {
  local _killed _limit _name _pid _t0
  _name=$1 _limit=$2
  _pid=$(cat "$MH_TMP/$_name.pid")
  _t0=$(cat "$MH_TMP/$_name.t0")
  _killed=0
  while hrun_running "$_name"; do
    if mh_past "$_t0" "$_limit"; then
      kill -9 "$_pid" 2>/dev/null
      _killed=1
      break
    fi
    sleep 0.1
  done
  wait "$_pid"
  RC=$?
  [ $_killed = 1 ] && RC=124
  MH_BG=$(echo "$MH_BG" | tr ' ' '\n' | grep -vx "$_pid" | tr '\n' ' ')
  ELAPSED=$(mh_elapsed "$_t0")
  echo "$RC" >"$MH_TMP/$_name.rc"
  echo "$ELAPSED" >"$MH_TMP/$_name.time"
  say "$_name: exit $RC in ${ELAPSED}s"
  mh_sanitized "$_name"
  if [ $_killed = 1 ]; then
    fail "$_name: did not finish within ${_limit}s (killed)"
    show "$_name"
  fi
  return 0
}

# hrun NAME TIMEOUT [VAR=value ...] HORARUN-ARGS...: hrun_start + hrun_wait.
hrun() {
  local _hlimit _hname
  _hname=$1 _hlimit=$2
  shift 2
  hrun_start "$_hname" "$@"
  hrun_wait "$_hname" "$_hlimit"
}

# wait_for NAME out|err ERE COUNT SECONDS: until COUNT lines of the job's
# stdout/stderr match ERE (0), or SECONDS pass or horarun ends first (1).
wait_for() {
  local _t0
  _t0=$(date +%s.%N)
  while :; do
    [ "$(grep -Ec -- "$3" "$MH_TMP/$1.$2" 2>/dev/null)" -ge "$4" ] && return 0
    hrun_running "$1" || {
      [ "$(grep -Ec -- "$3" "$MH_TMP/$1.$2" 2>/dev/null)" -ge "$4" ] && return 0
      return 1
    }
    mh_past "$_t0" "$5" && return 1
    sleep 0.1
  done
}

# mh_sanitized NAME: a sanitizer report in the job's output is a failure.
mh_sanitized() {
  if grep -Eq 'ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error:|SUMMARY: UndefinedBehaviorSanitizer' \
    "$MH_TMP/$1.out" "$MH_TMP/$1.err" 2>/dev/null; then
    fail "$1: a sanitizer reported an error:"
    grep -Eh -A12 'ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error:' \
      "$MH_TMP/$1.out" "$MH_TMP/$1.err" | head -n 40 | sed 's/^/    | /'
  fi
}

# show, fail, expect_rc (also "nonzero"), expect_grep, expect_nogrep,
# expect_count, expect_quiet: tests/expect.sh. expect_quiet here: no
# warning or error logged by horad (also as relayed by horarun: "horarun:
# host h1: horad[PID] WARNING: ..."), libhora, horarun or ssh (a healthy job
# has nothing to complain about).
QUIET_RE='(^|>:|: )(horad|hora|libhora|horarun)(\[[0-9]+\])?:? (WARNING|ERROR|FATAL)|^horarun: (error|warning)|^ssh:'

# expect_within NAME SECONDS WHAT: the job took at most SECONDS.
expect_within() {
  local _e
  _e=$(cat "$MH_TMP/$1.time" 2>/dev/null)
  if ! awk -v e="${_e:-1e9}" -v l="$2" 'BEGIN { exit !(e <= l) }'; then
    fail "$1: $3: expected at most ${2}s, took ${_e:-?}s"
    show "$1"
    return 1
  fi
  return 0
}

# expect_since_t0 NAME ERE LIMIT WHAT EVENT: the first stdout line of job
# NAME matching ERE ends in "(TIME)" (seconds since the epoch), at most
# LIMIT seconds after T0, when EVENT happened (elastic_train.py's lines).
expect_since_t0() {
  local _late _t
  _t=$(grep -E -- "$2" "$MH_TMP/$1.out" | head -n 1 |
    sed -n 's/^.*(\([0-9.]*\))$/\1/p')
  if [ -z "$_t" ]; then
    fail "$1: $4: no line of its stdout matches /$2/"
    return 1
  fi
  _late=$(awk -v a="$T0" -v b="$_t" 'BEGIN { printf "%.2f", b - a }')
  say "$1: $4 ${_late}s after $5"
  awk -v l="$_late" -v m="$3" 'BEGIN { exit !(l <= m) }' && return 0
  fail "$1: $4 ${_late}s after $5 (expected at most $3s)"
  return 1
}

# expect_trained NAME NP: elastic_train.py's ranks (NP of them in the last
# start) passed their checks and hold the same weights; exit status 0.
expect_trained() {
  expect_rc "$1" 0
  expect_count "$1" out "^\[[0-9]+\]<stdout>:rank [0-9]+ of $2: elastic_train: [0-9]+ checks, 0 failures, weights " "$2" \
    "each of the $2 ranks of the last start passed its checks"
  expect_nogrep "$1" out "FAIL" "no check failed (every sample used once per epoch)"
  [ "$(sed -n 's/^.*elastic_train: .* weights //p' "$MH_TMP/$1.out" | sort -u | wc -l)" = 1 ] ||
    fail "$1: the ranks ended with different weights"
}

# mh_port NAME ERE GROUP [KEY]: a port horarun --verbose printed (the
# GROUP-th parenthesized part of ERE; with KEY, on the line whose first
# group is KEY)
mh_port() {
  if [ -n "${4:-}" ]; then
    sed -n -E "s/.*$2.*/\\1 \\$3/p" "$MH_TMP/$1.err" | awk -v k="$4" '$1 == k { print $2; exit }'
  else
    sed -n -E "s/.*$2.*/\\$3/p" "$MH_TMP/$1.err" | head -n 1
  fi
}

# mh_slurm_up: a real Slurm cluster of two namespace hosts (mh_setup 2 is
# done here): munged with a fresh key, slurmctld on the client, one slurmd
# per host (node names h1, h2, their own addresses), up and idle. Sets S
# (its directory) and exports SLURM_CONF. Skips the test without Slurm's
# daemons.
mh_slurm_up() {
for t in slurmctld slurmd srun salloc sbatch squeue munged munge; do
  command -v $t >/dev/null 2>&1 ||
    skip "no $t (Debian: slurmctld slurmd slurm-client munge; tests/deps.sh test installs them)"
done
mh_setup 2

S=$MH_TMP/slurm
mkdir -p "$S/state" "$S/spool" "$S/log" "$S/out" || exit 1
chmod 755 "$MH_TMP" "$S" "$S/out" # munge's socket: reachable by all
# munge: a fresh key, its own socket; one munged (on the client) serves
# every namespace (the socket is a file)
dd if=/dev/urandom of="$S/munge.key" bs=1024 count=1 2>/dev/null
chmod 600 "$S/munge.key"
mh_client munged -f --key-file="$S/munge.key" --socket="$S/munge.sock" \
  --pid-file="$S/munged.pid" --log-file="$S/log/munged.log" \
  --seed-file="$S/munge.seed" || fail "munged did not start"
cpus=$(nproc)
cat >"$S/slurm.conf" <<CONF
ClusterName=hora
SlurmctldHost=client($(mh_addr client))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$S/munge.sock
SlurmctldPort=16817
SlurmdPort=16818
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool/%n
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.%n.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
NodeName=h1 NodeAddr=$(mh_addr h1) CPUs=$cpus State=UNKNOWN
NodeName=h2 NodeAddr=$(mh_addr h2) CPUs=$cpus State=UNKNOWN
PartitionName=hora Nodes=h1,h2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
export SLURM_CONF="$S/slurm.conf"
mh_client slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start"
# the hosts' /sys is a sysfs of their own: slurmd wants the cgroup
# hierarchies there as on a real node, the same as this machine's
# (linuxproc tracks the processes; nothing is confined)
awk '$3 == "cgroup2" && $2 == "/sys/fs/cgroup" { print "cgroup2", $2 }
     $3 == "cgroup" && $2 ~ "^/sys/fs/cgroup/" { print $4, $2 }' /proc/mounts \
  >"$S/cgroups"
for h in h1 h2; do
  mkdir -p "$S/spool/$h"
  mh_exec $h sh -c '
    mountpoint -q /sys/fs/cgroup && exit 0
    if grep -q "^cgroup2 " "$1"; then
      exec mount -t cgroup2 none /sys/fs/cgroup
    fi
    mount -t tmpfs -o mode=755 cgroup_root /sys/fs/cgroup || exit 1
    while read -r opts dir; do
      mkdir -p "$dir" && mount -t cgroup -o "$opts" cgroup "$dir" || exit 1
    done <"$1"' sh "$S/cgroups" || fail "cannot give $h a /sys/fs/cgroup"
  mh_exec $h slurmd -f "$SLURM_CONF" -N $h || fail "slurmd on $h did not start"
done
t0=$(date +%s.%N)
until [ "$(mh_client sinfo -h -o '%T %D' 2>/dev/null)" = "idle 2" ]; do
  if mh_past "$t0" 30; then
    fail "the nodes did not come up: $(mh_client sinfo 2>&1 | tr '\n' ' ')"
    tail -n 5 "$S"/log/*.log | sed 's/^/    | /'
    finish
  fi
  sleep 0.3
done
say "cluster up: $(mh_client sinfo -h -o '%P %D %T %N')"
# the cluster's daemons are infrastructure, not a job's leftovers
ctld=$(cat "$S/slurmctld.pid" 2>/dev/null)
{
  pgrep -f "$S/slurm.conf"
  pgrep -f "$S/munge.sock"
  [ -n "$ctld" ] && pgrep -P "$ctld"
} >>"$MH_TMP/infra.pids"
}

# need FILE...: the build products a driver uses; missing ones are a
# failure (run make first), not a skip.
need() {
  local _f
  for _f in "$@"; do
    if [ ! -x "$_f" ]; then
      echo "FAIL: $_f is missing (make; make $_f)"
      exit 1
    fi
  done
}

# mh_python MODULES PACKAGES: PYTHON (default /usr/bin/python3) must import
# MODULES (a comma list; else FAIL, naming the Debian PACKAGES). Sets W (the
# workers of tests/python/workers) and PY (the ranks' interpreter: under a
# sanitized libhora, with the sanitizer runtime preloaded, in the ranks
# only, as tests/python/pytest.sh does), and exports what the ranks need.
# mh_wait_log FILE ERE [TENTHS]: until a line of FILE matches, at most
# TENTHS tenths of a second (default 50); 1 when it never did.
mh_wait_log() {
  _mw_t=0
  until grep -Eq "$2" "$1" 2>/dev/null; do
    _mw_t=$((_mw_t + 1))
    [ $_mw_t -gt "${3:-50}" ] && return 1
    sleep 0.1
  done
}

# mh_key_file PATH...: a fresh cluster key in each (64 hex digits, 0600),
# as horad --service --key-file reads it
mh_key_file() {
  local _k
  for _k in "$@"; do
    openssl rand -hex 32 >"$_k" && chmod 600 "$_k" || return 1
  done
}

# horarun --launcher service never takes this machine's own service's
# socket for a test's (the hosts share one file system): tests name theirs
HORA_SERVICE_SOCKET=${HORA_SERVICE_SOCKET:-none}
export HORA_SERVICE_SOCKET

# mh_service LOG HOST ARGS...: starts `horad --service ARGS` on HOST, its
# output in LOG, waits until it listens (10 s) and counts it as
# infrastructure, not a job's leftover; MH_SERVICE_PID is its pid. Its
# local socket is LOG's name with .sock for .log (the hosts share one
# file system: not the default path) unless ARGS give --socket or
# --config.
mh_service() {
  _ms_log=$1 _ms_host=$2
  shift 2
  case " $* " in
  *" --socket "* | *" --config "*) ;;
  *) set -- "$@" --socket "${_ms_log%.log}.sock" ;;
  esac
  mh_exec "$_ms_host" setsid "$HORAD" --service "$@" </dev/null >"$_ms_log" 2>&1 &
  mh_wait_log "$_ms_log" "listening on" 100 ||
    mh_die "the service on $_ms_host did not start: $(cat "$_ms_log")"
  MH_SERVICE_PID=$(sed -n 's/^horad\[\([0-9]*\)\].*listening on.*/\1/p' "$_ms_log" | head -n 1)
  echo "$MH_SERVICE_PID" >>"$MH_TMP/infra.pids"
}

mh_python() {
  PYTHON=${PYTHON:-/usr/bin/python3}
  "$PYTHON" -c "import $1" 2>/dev/null || {
    echo "FAIL: $PYTHON lacks $1 (Debian: $2)"
    exit 1
  }
  W=$HORA_TOP/tests/python/workers
  export PYTHONPATH="$HORA_TOP/python${PYTHONPATH:+:$PYTHONPATH}"
  export HORA_LIBRARY="$BUILD/lib/libhora.so" OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
  PY=$PYTHON
  if ldd "$HORA_LIBRARY" | grep -q libasan; then
    PY="env LD_PRELOAD=$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)
      ASAN_OPTIONS=detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS} $PYTHON"
  fi
}

# finish: the driver's verdict, with its total time (teardown runs at exit).
finish() {
  local _t
  _t=$(mh_elapsed "$IT_START")
  [ -d "$BUILD/test-logs" ] && echo "multihost/$IT_NAME $_t" >>"$BUILD/test-logs/integration-times.txt"
  if [ "$IT_FAILURES" -gt 0 ]; then
    echo "$IT_NAME: $IT_FAILURES failure(s) in ${_t}s"
    exit 1
  fi
  echo "$IT_NAME: all passed in ${_t}s"
  exit 0
}

# ---- run directly: a self-test ---------------------------------------------------
if [ "$IT_NAME" = lib ]; then
  if [ "${1:-}" = --clean ]; then
    mh_prereq
    MH_TMP=$(mktemp -d "/tmp/hora-mh.XXXXXX") || exit 1
  T_JOBS=$MH_TMP
    mh_cleanup_stale
    [ -e "$MH_TMP/made-etc-netns" ] && rmdir /etc/netns 2>/dev/null
    rm -rf "$MH_TMP"
    exit 0
  fi
  say "self-test of the multi-host helpers"
  _had_etc_netns=""
  [ -d /etc/netns ] && _had_etc_netns=1
  mh_setup 3
  say "up: hosts $MH_HOSTS, client, hx in $MH_ID-*, files in $MH_TMP"
  # every namespace reaches every host by name, and each host has its name
  for _from in client $MH_HOSTS; do
    [ "$(mh_exec "$_from" hostname)" = "$_from" ] ||
      fail "hostname on $_from says '$(mh_exec "$_from" hostname)'"
    for _to in $MH_HOSTS; do
      _got=$(mh_exec "$_from" ssh "$_to" 'hostname; cat /proc/sys/kernel/hostname' 2>&1 | tr '\n' ' ')
      [ "$_got" = "$_to $_to " ] || fail "ssh from $_from to $_to: '$_got'"
    done
  done
  # a host's namespace sees the others by their addresses
  [ "$(mh_exec h2 getent hosts h3 | awk '{ print $1 }')" = "$(mh_addr h3)" ] ||
    fail "h2 does not resolve h3 to $(mh_addr h3)"
  # the machine's own network namespace is untouched: no hN there
  if getent hosts h1 2>/dev/null | grep -q "$MH_NET"; then fail "h1 resolves outside the namespaces"; fi
  if ip -o addr 2>/dev/null | grep -q "$MH_NET\."; then fail "a $MH_NET.x address in the root namespace"; fi
  # no route out of a namespace
  if mh_exec h1 ip route get 8.8.8.8 >/dev/null 2>&1; then fail "h1 has a route out"; fi
  # hx refuses; an unknown name does not resolve; the nokey client is refused
  _e=$(mh_client ssh hx true 2>&1) && fail "ssh to hx worked"
  echo "$_e" | grep -q "Connection refused" || fail "ssh to hx: '$_e' (expected Connection refused)"
  _e=$(mh_client ssh nosuchhost.invalid true 2>&1) && fail "ssh to nosuchhost.invalid worked"
  echo "$_e" | grep -q "Could not resolve hostname" || fail "ssh to nosuchhost.invalid: '$_e'"
  _e=$(mh_client_nokey ssh h1 true 2>&1) && fail "ssh without a key worked"
  echo "$_e" | grep -q "Permission denied" || fail "ssh without a key: '$_e' (expected Permission denied)"
  _e=$(mh_client_nokey ssh -i "$MH_BADKEY" h1 true 2>&1) && fail "ssh with the bad key worked"
  echo "$_e" | grep -q "Permission denied" || fail "ssh with the bad key: '$_e'"
  [ "$(mh_client_nokey ssh -i "$MH_KEY" h1 hostname 2>&1)" = h1 ] || fail "ssh -i KEY from the nokey client"
  [ "$(mh_client_nokey hostname)" = client ] || fail "the nokey client's hostname"
  # a cut link: h2 unreachable, h1 still fine; restored: h2 back
  mh_link_down h2
  if mh_client ssh -o ConnectTimeout=2 h2 true 2>/dev/null; then fail "ssh to h2 worked with its link down"; fi
  mh_client ssh h1 true || fail "ssh to h1 failed while h2's link was down"
  mh_link_up h2
  _t0=$(date +%s.%N)
  until mh_client ssh -o ConnectTimeout=2 h2 true 2>/dev/null; do
    mh_past "$_t0" 10 && { fail "ssh to h2 still fails 10s after its link came back"; break; }
    sleep 0.2
  done
  # leftover detection: a process started over ssh on h2 (no marker), one
  # with the marker on the client, one with it only in its environment
  _f0=$IT_FAILURES
  mh_assert_no_job_procs "$MARK" 1 || echo "  (unexpected: the fresh setup has job processes)"
  # (started in subshells: not jobs of this shell, which would report
  # their SIGKILL)
  mh_client ssh h2 'sleep 60 </dev/null >/dev/null 2>&1 &'
  (mh_client sh -c 'sleep 60' "$MARK" </dev/null >/dev/null 2>&1 &)
  (env "HORA_IT_MARK=$MARK" sh -c 'sleep 60' </dev/null >/dev/null 2>&1 &)
  sleep 1
  _n=$(mh_job_pids "$MARK" | wc -l)
  # sleep on h2, sh + sleep on the client, sh (+ its sleep: no mark) here
  [ "$_n" -ge 4 ] || fail "mh_job_pids found $_n processes, expected at least 4: $(mh_job_pids "$MARK" | tr '\n' ' ')"
  mh_job_pids "$MARK" | grep -qx "$(mh_host_pids h2 sleep | head -n 1)" ||
    fail "mh_job_pids missed the sleep on h2"
  _f1=$IT_FAILURES
  mh_assert_no_job_procs "$MARK" 0.5 >/dev/null
  if [ $IT_FAILURES -eq "$_f1" ]; then fail "mh_assert_no_job_procs missed leftovers"; else IT_FAILURES=$_f1; fi
  mh_assert_no_job_procs "$MARK" 3
  [ "$IT_FAILURES" -eq "$_f0" ] || echo "  (leftover detection failed)"
  # the infrastructure survived that
  for _h in $MH_HOSTS client client-nokey; do
    [ -d "/proc/$(mh_nspid "$_h")" ] || fail "the sshd/holder of $_h is gone after the leftover checks"
  done
  [ "$(mh_client ssh h3 hostname)" = h3 ] || fail "ssh to h3 after the leftover checks"

  # teardown leaves nothing behind
  _id=$MH_ID _tmp=$MH_TMP
  _sshd_pids=$(for _h in $MH_HOSTS; do mh_nspid "$_h"; done)
  mh_teardown
  [ -z "$(ip netns list | grep "^$_id-")" ] || fail "namespaces left: $(ip netns list | grep "^$_id-" | tr '\n' ' ')"
  [ -z "$(ls -d /etc/netns/"$_id"-* 2>/dev/null)" ] || fail "/etc/netns dirs left: $(ls -d /etc/netns/"$_id"-*)"
  [ ! -e "$_tmp" ] || fail "$_tmp left"
  for _p in $_sshd_pids; do
    [ -d "/proc/$_p" ] && fail "sshd $_p left: $(ps -o args= -p "$_p")"
  done
  [ -z "$(pgrep -f "$_tmp" 2>/dev/null)" ] || fail "processes naming $_tmp left: $(pgrep -af "$_tmp")"
  [ -z "$(it_marked_pids "$MARK")" ] || fail "marked processes left"
  if [ -z "$_had_etc_netns" ] && [ -d /etc/netns ] && [ -z "$(ls -A /etc/netns)" ]; then
    fail "/etc/netns did not exist before; an empty one is left"
  fi
  finish
fi
