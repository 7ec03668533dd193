#!/bin/sh
# Bad input to the CLI: each case exits 2 with "file:line: what was expected",
# and a failed command leaves no output file behind.
set -u
fail=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

expect() { # name, expected-substring, trace text
  name=$1; want=$2
  printf '%b' "$3" > "$dir/$name.trace"
  "$HBM" replay "$dir/$name.trace" --policy bestfit --capacity 1GiB > "$dir/out" 2> "$dir/err"
  rc=$?
  if [ $rc -ne 2 ]; then echo "FAIL $name: exit $rc, expected 2"; fail=1; return; fi
  if ! grep -q "$dir/$name.trace:[0-9]*: .*$want" "$dir/err"; then
    echo "FAIL $name: message does not name file:line and '$want':"; cat "$dir/err"; fail=1; return
  fi
  echo "ok   $name: $(cat "$dir/err")"
}

expect malformed      "expected 'a ID SIZE"  'hbm-trace 1\na x\n'
expect unknown_id     "unknown id"           'hbm-trace 1\nf ghost\n'
expect double_free    "double free"          'hbm-trace 1\na x 1KiB\nf x\nf x\n'
expect duplicate_live "already live"         'hbm-trace 1\na x 1KiB\na x 2KiB\n'
expect zero_size      "at least 1 byte"      'hbm-trace 1\na x 0\n'
expect absurd_size    "absurd"               'hbm-trace 1\na x 5000TiB\n'
expect missing_header "header"               'a x 1KiB\n'
expect bad_suffix     "expected a size"      'hbm-trace 1\na x 12QB\n'

# usage errors exit 2 too
"$HBM" replay > /dev/null 2>&1; [ $? -eq 2 ] || { echo "FAIL no input: expected exit 2"; fail=1; }
"$HBM" replay "$dir/none.trace" > /dev/null 2> "$dir/err"; rc=$?
[ $rc -eq 2 ] && grep -q "none.trace" "$dir/err" || { echo "FAIL missing file: exit $rc"; cat "$dir/err"; fail=1; }
"$HBM" replay "$dir/malformed.trace" --policy nosuch > /dev/null 2>&1; [ $? -eq 2 ] || { echo "FAIL unknown policy: expected exit 2"; fail=1; }
"$HBM" replay "$dir/malformed.trace" --capacity 12QB > /dev/null 2>&1; [ $? -eq 2 ] || { echo "FAIL bad capacity: expected exit 2"; fail=1; }
"$HBM" nosuchcommand > /dev/null 2>&1; [ $? -eq 2 ] || { echo "FAIL unknown command: expected exit 2"; fail=1; }
"$HBM" --help | grep -q "replay" || { echo "FAIL --help lists no commands"; fail=1; }
"$HBM" replay --help | grep -q -- "--policy" || { echo "FAIL replay --help"; fail=1; }
exit $fail
