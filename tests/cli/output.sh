#!/bin/sh
# output.sh -- every line of every rank comes back as [rank]<stdout>:line on
# stdout or [rank]<stderr>:line on stderr: '\r' progress lines, partial last
# lines, CRLF, many ranks without mid-line mixing, very long and binary lines,
# timestamps. Runs with the real horad when built, and the chunking cases
# also with the fake one, which can forward output byte by byte.
. "$(dirname "$0")/lib.sh"
use_horad

# ---- stdout and stderr -------------------------------------------------------
run_hr -np 2 sh -c 'echo "out $HORA_RANK"; echo "err $HORA_RANK" >&2'
expect_rc 0 "two ranks"
sort "$TMP/out" >"$TMP/sorted"
expect_file "$TMP/sorted" '[0]<stdout>:out 0\n[1]<stdout>:out 1\n' "stdout"
sort "$TMP/err" >"$TMP/sorted"
expect_file "$TMP/sorted" '[0]<stderr>:err 0\n[1]<stderr>:err 1\n' "stderr"
note "stdout and stderr prefixed, each on its own stream"

# ---- exact streams of one rank, through both horads and any chunking ---------
# check_exact WHAT PROGRAM EXPECTED-STDOUT [EXPECTED-STDERR]
check_exact() {
  run_hr -np 1 sh -c "$2"
  expect_rc 0 "$1"
  expect_file "$TMP/out" "$3" "$1 (stdout)"
  [ -n "${4:-}" ] && expect_file "$TMP/err" "$4" "$1 (stderr)"
  true
}

exact_cases() {
  check_exact "progress line" "printf '10%%\r20%%\r100%%\n'" \
    '[0]<stdout>:10%%\r[0]<stdout>:20%%\r[0]<stdout>:100%%\n'
  check_exact "tqdm style" "printf '\r 0%%|  |\r50%%|# |\r100%%|##|\n'" \
    '[0]<stdout>:\r[0]<stdout>: 0%%|  |\r[0]<stdout>:50%%|# |\r[0]<stdout>:100%%|##|\n'
  check_exact "partial last line" "printf 'line\nno newline'" \
    '[0]<stdout>:line\n[0]<stdout>:no newline\n'
  check_exact "partial last line on stderr" "printf 'e1\ne2' >&2" '' \
    '[0]<stderr>:e1\n[0]<stderr>:e2\n'
  check_exact "CRLF" "printf 'a\r\nb\r\n\r\nc'" \
    '[0]<stdout>:a\r\n[0]<stdout>:b\r\n[0]<stdout>:\r\n[0]<stdout>:c\n'
  check_exact "empty lines" "printf '\n\nx\n'" \
    '[0]<stdout>:\n[0]<stdout>:\n[0]<stdout>:x\n'
  check_exact "no output" "true" ''
  check_exact "ends on a progress line" "printf 'a\nb\r'" \
    '[0]<stdout>:a\n[0]<stdout>:b\r\n'
  check_exact "UTF-8" "printf 'h\303\251 \342\202\254\n'" \
    '[0]<stdout>:h\303\251 \342\202\254\n'
}

exact_cases
note "exact output with the $HORAD_KIND horad"
saved=${HORA_HORAD:-}
use_fake_horad
FAKE_HORAD_CHUNK=1 && export FAKE_HORAD_CHUNK
exact_cases
note "exact output with output forwarded byte by byte"
unset FAKE_HORAD_CHUNK
if [ -n "$saved" ]; then HORA_HORAD=$saved; else use_horad >/dev/null; fi

# ---- a '\r' line is printed when its '\r' arrives ----------------------------
: >"$TMP/out" # the background job's own redirection happens later
"$HORARUN" -np 1 sh -c "printf 'half\r'; sleep 5; printf 'done\n'" \
  >"$TMP/out" 2>"$TMP/err" &
pid=$!
i=0
while [ $i -lt 40 ]; do
  [ -s "$TMP/out" ] && break
  sleep 0.1
  i=$((i + 1))
done
printf '[0]<stdout>:half\r' | cmp -s - "$TMP/out" ||
  fail "the '\\r' line was not printed at once"
wait $pid || fail "progress job"
note "a '\\r' line is printed as soon as the '\\r' arrives"

# ---- another rank's line does not overwrite a progress line ------------------
# Files order the ranks: rank 1 prints after rank 0's progress line, and
# rank 0 ends its line after rank 1 printed.
run_hr -np 2 sh -c "if [ \$HORA_RANK = 0 ]; then printf 'prog\r'
    touch '$TMP/flag1'; while [ ! -f '$TMP/flag2' ]; do sleep 0.05; done
    sleep 0.3; echo end
  else while [ ! -f '$TMP/flag1' ]; do sleep 0.05; done; sleep 0.3
    echo other; touch '$TMP/flag2'; fi"
expect_rc 0 "progress and another rank"
expect_file "$TMP/out" \
  '[0]<stdout>:prog\r\n[1]<stdout>:other\n[0]<stdout>:end\n' \
  "progress line then another rank's line"
note "a progress line is ended by '\\n' before another rank prints"

# ---- many lines from several ranks never mix mid-line -------------------------
gen='awk -v r=$HORA_RANK -v lines=$LINES "BEGIN { for (i = 0; i < lines; i++) {
  s = sprintf(\"rank %d line %d \", r, i); n = 50 + (i * 37) % 3000;
  while (length(s) < n) s = s \"x\"; print s; if (i % 3 == 0) print s > \"/dev/stderr\" } }"'
check_mixed() { # WHAT LINES-PER-RANK
  LINES=$2 && export LINES
  run_hr -np 4 sh -c "$gen"
  expect_rc 0 "$1"
  for s in out err; do
    awk -v s=$s -v lines=$2 '
      { if (!match($0, /^\[[0-9]+\]<std(out|err)>:rank [0-9]+ line [0-9]+ x*$/)) {
          print "bad line " NR ": " substr($0, 1, 80); exit 1 }
        split($0, a, /[][ ]/); r = a[2]; split($0, b, " ");
        if (b[2] != r) { print "rank mismatch at " NR; exit 1 }
        if ((r in last) && b[4] <= last[r]) { print "order at " NR; exit 1 }
        last[r] = b[4]; n++ }
      END { want = (s == "out") ? 4 * lines : 4 * int((lines + 2) / 3)
            if (n != want) { print n " lines, not " want; exit 1 } }' \
      "$TMP/$s" || fail "$1: $s mixed up"
  done
  note "$1: 4 ranks x $2 lines, none mixed, order kept"
}
check_mixed "many lines ($HORAD_KIND horad)" 3000
(FAKE_HORAD_CHUNK=7 && export FAKE_HORAD_CHUNK && use_fake_horad &&
  check_mixed "many lines (fake horad, 7-byte chunks)" 600) || exit 1

# ---- very long lines are printed in 64 KiB pieces ----------------------------
run_hr -np 1 sh -c 'head -c 200000 /dev/zero | tr "\0" a; echo;
  head -c 70000 /dev/zero | tr "\0" b'
expect_rc 0 "long lines"
awk '{ sub(/^\[0\]<stdout>:/, ""); print length($0) }' "$TMP/out" \
  >"$TMP/lens"
expect_file "$TMP/lens" '65536\n65536\n65536\n3392\n65536\n4464\n' \
  "pieces of long lines"
[ "$(tr -cd a <"$TMP/out" | wc -c)" -eq 200000 ] || fail "lost bytes"
note "a 200000-byte line comes in 64 KiB pieces, none lost"

# ---- binary output: every record keeps its prefix -----------------------------
head -c 300000 /dev/urandom >"$TMP/random"
run_hr -np 1 cat "$TMP/random"
expect_rc 0 "binary output"
# Split on both terminators: each non-empty piece starts with the prefix.
LC_ALL=C tr '\r' '\n' <"$TMP/out" | LC_ALL=C grep -av '^$' |
  LC_ALL=C grep -avc '^\[0\]<stdout>:' >"$TMP/bad" && {
  fail "$(cat "$TMP/bad") binary records without prefix"
}
note "binary output keeps a prefix on every record"

# ---- timestamps ---------------------------------------------------------------
for flag in --prefix-output-with-timestamp -prefix-timestamp; do
  run_hr $flag -np 1 sh -c 'echo hello; echo oops >&2'
  expect_rc 0 "$flag"
  re='^[A-Z][a-z][a-z] [A-Z][a-z][a-z] [ 1-3][0-9] [0-2][0-9]:[0-5][0-9]:[0-6][0-9] [0-9]{4}\[0\]<std(out|err)>:'
  grep -Eq "${re}hello\$" "$TMP/out" || fail "$flag: $(cat "$TMP/out")"
  grep -Eq "${re}oops\$" "$TMP/err" || fail "$flag: $(cat "$TMP/err")"
done
note "timestamp prefix: $(cat "$TMP/out")"
exit 0
