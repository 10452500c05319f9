#!/bin/sh
# quickstart.sh -- set up, build and try hora on this machine.
#   ./quickstart.sh demo   install what is missing, build, and run a 4-rank
#                          data-parallel training job on localhost (CPU)
#   ./quickstart.sh test   install what is missing, build, run every test
# Missing Debian packages are installed with apt-get when run as root;
# otherwise the script names them and stops.
set -e
cd "$(dirname "$0")"
what=${1:-demo}
case "$what" in
demo | test) ;;
*)
  echo "usage: $0 demo|test" >&2
  exit 2
  ;;
esac
sh tests/deps.sh "$what"
jobs=$(nproc 2>/dev/null || echo 2)
make -j"$jobs"
if [ "$what" = demo ]; then
  exec build/bin/horarun -np 4 build/examples/logreg
fi
make -j"$jobs" check
