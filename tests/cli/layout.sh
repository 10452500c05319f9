#!/bin/sh
# layout.sh -- the rank layout follows horovodrun's rule on multi-host lists
# (hosts in order, filled host by host; cross_rank/cross_size per
# local_rank), checked through launcher/hosts.c directly, without starting
# anything on the (made-up) hosts.
. "$(dirname "$0")/lib.sh"

bin=$TMP/layout_test
${CC:-cc} -std=c11 -D_GNU_SOURCE -DHORA_VERSION_STRING='"test"' -Wall \
  -Wextra -I"$HORA_TOP/include" -I"$HORA_TOP/common" -I"$HORA_TOP/launcher" \
  "$HORA_TOP/tests/cli/layout_test.c" "$HORA_TOP/launcher/hosts.c" \
  "$HORA_TOP/launcher/textfile.c" \
  "$HORA_TOP/common/log.c" "$HORA_TOP/common/params.c" -o "$bin" -lm \
  || fail "cannot build layout_test"

# layout HOSTS NP EXPECTED: "rank host local_rank local_size cross_rank
# cross_size" per rank.
layout() {
  "$bin" "$1" "$2" >"$TMP/out" 2>&1
  expect_file "$TMP/out" "$3" "layout of $1 with np $2"
  note "$1, np $2"
}

layout a:2,b:1,c:2 5 \
'0 a 0 2 0 3\n1 a 1 2 0 2\n2 b 0 1 1 3\n3 c 0 2 2 3\n4 c 1 2 1 2\n'
layout a:2,b:1,c:2 4 \
'0 a 0 2 0 3\n1 a 1 2 0 1\n2 b 0 1 1 3\n3 c 0 1 2 3\n'
layout a:4,b:4 8 \
'0 a 0 4 0 2\n1 a 1 4 0 2\n2 a 2 4 0 2\n3 a 3 4 0 2\n4 b 0 4 1 2\n5 b 1 4 1 2\n6 b 2 4 1 2\n7 b 3 4 1 2\n'
layout a:4,b:4 3 '0 a 0 3 0 1\n1 a 1 3 0 1\n2 a 2 3 0 1\n'
layout a,b,a 3 '0 a 0 2 0 2\n1 a 1 2 0 1\n2 b 0 1 1 2\n'
layout "[fe80::1]:2,node-1.example.com" 3 \
'0 fe80::1 0 2 0 2\n1 fe80::1 1 2 0 1\n2 node-1.example.com 0 1 1 2\n'
layout a:2,b:2 5 'error: requested 5 processes but the hosts give only 4 slots\n'
exit 0
