#!/bin/sh
# deps.sh -- installs the Debian packages hora needs to build ("demo") and
# to run its tests ("test"), or names them when not run as root.
want="make gcc libc6-dev pkg-config libuv1-dev libyaml-dev libssl-dev"
if [ "${1:-demo}" = test ]; then
  want="$want procps psmisc openmpi-bin libopenmpi-dev python3 python3-torch python3-numpy python3-pytest python3-mpi4py mpich python3-prometheus-client curl iproute2 openssh-client openssh-server iptables iperf3 slurmctld slurmd slurm-client munge systemd man-db"
fi
missing=""
for p in $want; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
    missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "hora needs these Debian packages:$missing" >&2
  echo "install them with: sudo apt-get install$missing" >&2
  exit 1
fi
echo "installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q $missing >/dev/null 2>&1 ||
  { apt-get update -q >/dev/null && apt-get install -y -q $missing; }
