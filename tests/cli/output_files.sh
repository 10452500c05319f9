#!/bin/sh
# output_files.sh -- --output-filename DIR writes each rank's raw output to
# DIR/rank.<N>/stdout and DIR/rank.<N>/stderr, N zero-padded to the digits
# of np-1 as horovodrun does, creating the directories, and still prints
# the prefixed lines.
. "$(dirname "$0")/lib.sh"
use_horad

# ---- raw bytes, two ranks -------------------------------------------------
dir=$TMP/logs/deep/er
run_hr --output-filename "$dir" -np 2 sh -c \
  'printf "out %s\r50%%\rdone\n" $HORA_RANK; printf "err %s" $HORA_RANK >&2'
expect_rc 0 "two ranks"
for r in 0 1; do
  expect_file "$dir/rank.$r/stdout" "out $r\r50%%\rdone\n" "rank $r stdout"
  expect_file "$dir/rank.$r/stderr" "err $r" "rank $r stderr"
done
expect_in out "[1]<stdout>:done" "still printed with prefixes"
expect_in err "[0]<stderr>:err 0" "still printed with prefixes"
note "raw bytes in DIR/rank.N/{stdout,stderr}, directories created"

# ---- binary data is copied exactly --------------------------------------------
head -c 200000 /dev/urandom >"$TMP/random"
run_hr --output-filename="$TMP/bin" -np 1 sh -c "cat '$TMP/random';
  cat '$TMP/random' >&2"
expect_rc 0 "binary"
cmp -s "$TMP/random" "$TMP/bin/rank.0/stdout" || fail "binary stdout differs"
cmp -s "$TMP/random" "$TMP/bin/rank.0/stderr" || fail "binary stderr differs"
note "200000 random bytes copied exactly"

# ---- zero padding: width of np-1 ----------------------------------------------
run_hr --output-filename "$TMP/pad" -np 11 sh -c 'echo $HORA_RANK'
expect_rc 0 "eleven ranks"
[ -d "$TMP/pad/rank.00" ] && [ -d "$TMP/pad/rank.10" ] ||
  fail "np 11: $(ls "$TMP/pad" | tr '\n' ' ')"
expect_file "$TMP/pad/rank.07/stdout" '7\n' "rank.07"
run_hr --output-filename "$TMP/pad10" -np 10 true
[ -d "$TMP/pad10/rank.9" ] && [ ! -d "$TMP/pad10/rank.09" ] ||
  fail "np 10: $(ls "$TMP/pad10" | tr '\n' ' ')"
run_hr --output-filename "$TMP/pad1" -np 1 true
[ -d "$TMP/pad1/rank.0" ] || fail "np 1: $(ls "$TMP/pad1" | tr '\n' ' ')"
note "names: rank.0..rank.9 for np 10, rank.00..rank.10 for np 11"

# ---- silent ranks get empty files; a rerun truncates -----------------------------
[ -f "$TMP/pad1/rank.0/stdout" ] && [ ! -s "$TMP/pad1/rank.0/stdout" ] &&
  [ -f "$TMP/pad1/rank.0/stderr" ] || fail "empty files for a silent rank"
run_hr --output-filename "$dir" -np 2 sh -c 'echo again'
expect_rc 0 "rerun"
expect_file "$dir/rank.1/stdout" 'again\n' "rerun truncates"
expect_file "$dir/rank.1/stderr" '' "rerun truncates stderr"
note "empty files for silent ranks; a rerun starts the files afresh"

# ---- a directory that cannot be made is an error before anything runs -------------
: >"$TMP/plainfile"
run_hr --output-filename "$TMP/plainfile/sub" -np 1 sh -c "echo ran"
[ "$rc" -ne 0 ] || fail "unusable --output-filename accepted"
expect_not_in out "ran" "nothing runs"
expect_in err "$TMP/plainfile" "error names the path"
note "unusable DIR -> $(head -n 1 "$TMP/err")"
exit 0
