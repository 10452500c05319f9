#!/bin/sh
# fetch-debs.sh -- downloads the Debian packages hora builds with (libuv,
# libyaml, libssl headers) into benchmarks/gpu/debs/, on a Debian machine
# with apt, for benchmarks/gpu/run.sh to unpack on a GPU machine that has
# neither them nor a network. The folder is not committed.
set -eu
dir=$(cd "$(dirname "$0")" && pwd)/debs
mkdir -p "$dir"
cd "$dir"
apt-get download libuv1 libuv1-dev libyaml-0-2 libyaml-dev libssl3 libssl-dev
ls -l "$dir"
