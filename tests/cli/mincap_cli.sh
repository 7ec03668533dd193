#!/bin/sh
# hbm mincap: --help, bad input exits 2, the JSON keys, and the field
# report's layout: zoned needs no more than peak live, a flat arena more.
set -u
fail=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
trace="$HBM_ROOT/tests/fixtures/step437.trace"

"$HBM" mincap --help > "$dir/help" || { echo "FAIL --help exited $?"; fail=1; }
grep -q -- "--policy" "$dir/help" && grep -q -- "--json" "$dir/help" || { echo "FAIL --help lacks the options"; fail=1; }

bad() { # name, args...
  name=$1; shift
  "$HBM" mincap "$@" > "$dir/out" 2> "$dir/err"
  rc=$?
  if [ $rc -ne 2 ]; then echo "FAIL $name: exit $rc, expected 2"; cat "$dir/err"; fail=1; else echo "ok   $name: $(head -n 1 "$dir/err")"; fi
}
bad no_input
bad two_inputs "$trace" "$trace"
bad missing_file "$dir/nosuch.trace" --policy zoned
bad unknown_policy "$trace" --policy nosuch
bad empty_policy "$trace" --policy ,
bad trailing_comma "$trace" --policy caching,
bad empty_item "$trace" --policy caching,,zoned
bad repeated_policy "$trace" --policy caching,zoned,caching
bad bad_resolution "$trace" --resolution 3MiB
# nothing to try is bad input up front, not "none ... 0 replays (fails up to the limit)"
for opts in "--resolution 1PiB" "--resolution 2PiB" "--limit 1B" "--limit 1GiB" "--resolution 64MiB --limit 32MiB" \
            "--limit 2PiB" "--limit 96GiB --resolution 1TiB"; do
  bad "nothing to try ($opts)" "$trace" --policy bestfit $opts
  [ ! -s "$dir/out" ] || { echo "FAIL nothing to try ($opts) printed: $(cat "$dir/out")"; fail=1; }
done
"$HBM" mincap "$trace" --policy bestfit --limit 1GiB 2>&1 | grep -q "below the trace's peak live 96.00 GiB" ||
  { echo "FAIL a limit below peak live does not say the peak live"; fail=1; }
"$HBM" mincap "$trace" --policy bestfit --resolution 1PiB 2>&1 | grep -q "above the default limit 769.00 GiB" ||
  { echo "FAIL a resolution above the default limit does not say the limit"; fail=1; }
"$HBM" mincap --help | grep -q "^usage: hbm mincap TRACE|SNAPSHOT \[options\]$" || { echo "FAIL usage shows --policy as required"; fail=1; }
bad bad_size "$trace" --resolution lots
bad bad_conf "$trace" --policy zoned --alloc-conf zones:maybe
bad unknown_option "$trace" --frobnicate
printf 'hbm-trace 1\na x\n' > "$dir/malformed.trace"
bad malformed "$dir/malformed.trace" --policy zoned
grep -q "malformed.trace:2:" "$dir/err" || { echo "FAIL malformed: message does not name file:line"; fail=1; }

out=$("$HBM" mincap "$trace" --policy bestfit,zoned --json) || { echo "FAIL mincap exited $?"; exit 1; }
echo "$out"
for key in '"trace"' '"events":21,' '"peak_live":103079215104' '"resolution":16777216,"limit":825707462656,' \
           '"policies"' '"policy":"bestfit"' '"policy":"zoned"' '"min_capacity"' '"backend_calls"'; do
  echo "$out" | grep -q "$key" || { echo "FAIL: JSON lacks $key"; fail=1; }
done
if command -v python3 >/dev/null; then
  echo "$out" | python3 -c '
import json, sys
d = json.load(sys.stdin)
p = {x["policy"]: x for x in d["policies"]}
assert p["zoned"]["min_capacity"] == d["peak_live"], p["zoned"]      # zoned: exactly peak live
assert p["bestfit"]["min_capacity"] > d["peak_live"], p["bestfit"]   # the 4.2 GiB buffer needs a contiguous hole
assert isinstance(p["zoned"]["backend_calls"], int)
' || { echo "FAIL: JSON values"; fail=1; }
fi
text=$("$HBM" mincap "$trace" --policy zoned) || { echo "FAIL text mincap exited $?"; fail=1; }
echo "$text"
echo "$text" | grep -q "^zoned  *96.00 GiB" || { echo "FAIL: text table lacks zoned's answer"; fail=1; }
echo "$text" | grep -q "^search 96.00 GiB to 769.00 GiB in steps of 16.00 MiB$" || { echo "FAIL: text lacks the limit and resolution"; fail=1; }
# a resolution that is no power of two starts at peak live rounded up to a
# multiple of it: 96 GiB is one of 96 GiB (a mask gave 160 GiB, and zoned's
# answer 160 GiB, +66.67%)
text=$("$HBM" mincap "$trace" --policy zoned --resolution 96GiB) || { echo "FAIL --resolution 96GiB exited $?"; fail=1; }
echo "$text" | grep -q "^search 96.00 GiB to 768.00 GiB in steps of 96.00 GiB$" && echo "$text" | grep -q "^zoned  *96.00 GiB  *+0.00% " ||
  { echo "FAIL --resolution 96GiB: $text"; fail=1; }
"$HBM" mincap "$trace" --policy bestfit --limit 96GiB | grep -q "^bestfit  *none .* 1  (fails up to the limit, 96.00 GiB)$" ||
  { echo "FAIL: a search up to the limit: $("$HBM" mincap "$trace" --policy bestfit --limit 96GiB)"; fail=1; }
# Nothing live: over peak live is null in the JSON and n/a in the text, not +0.00%.
printf 'hbm-trace 1\ncapacity 1GiB\n' > "$dir/empty.trace"
"$HBM" mincap "$dir/empty.trace" --policy bestfit --json | grep -q '"over_peak_live":null' || { echo "FAIL: empty trace's JSON"; fail=1; }
"$HBM" mincap "$dir/empty.trace" --policy bestfit | grep -q "^bestfit  *[0-9.]* MiB  *n/a " ||
  { echo "FAIL: empty trace's text: $("$HBM" mincap "$dir/empty.trace" --policy bestfit)"; fail=1; }
# a limit just below peak live prints the same rounded: the message gives bytes
printf 'hbm-trace 1\na b0 100\na b1 1125899906842624\n' > "$dir/pib.trace"
"$HBM" mincap "$dir/pib.trace" > /dev/null 2> "$dir/err"; rc=$?
[ $rc -eq 2 ] && grep -q "(1125899906842624 B) is below the trace's peak live 1125899906842724 B" "$dir/err" ||
  { echo "FAIL: limit below peak live by 100 B: exit $rc, $(cat "$dir/err")"; fail=1; }
# A policy whose search cannot go on (host memory, here made to run out in
# its first call under gdb) costs the comparison one row: the next policy
# is still searched, and the exit says something failed. An error that is
# the input's fault (here "bad argument") would be every policy's: the
# comparison stops at once, exit 2, no rows.
if command -v gdb > /dev/null 2>&1; then
  for err in 7 2; do
    printf 'set pagination off\nset confirm off\ntbreak hbm_mincap\nrun\nreturn (int)-%s\ncontinue\n' $err > "$dir/fail.gdb"
    for fmt in text json; do
      flag=; [ $fmt = json ] && flag=--json
      # (LeakSanitizer cannot run under ptrace: in the sanitizer build it would change the exit)
      ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" gdb -q -batch -x "$dir/fail.gdb" --args "$HBM" mincap "$trace" --policy zoned,bestfit $flag > "$dir/gdb$err.$fmt" 2>&1
    done
  done
  if ! grep -q 'exited with code 0[12]\|exited normally' "$dir/gdb7.text"; then
    echo "skip a policy whose search cannot go on: gdb could not run hbm: $(tail -1 "$dir/gdb7.text")"
  else
    grep -q 'exited with code 01' "$dir/gdb7.text" && grep -q '^zoned  *error: out of host memory$' "$dir/gdb7.text" &&
      grep -q '^bestfit  *[0-9]' "$dir/gdb7.text" || { echo "FAIL a policy whose search cannot go on:"; cat "$dir/gdb7.text"; fail=1; }
    grep -q 'exited with code 01' "$dir/gdb7.json" || { echo "FAIL a policy whose search cannot go on, JSON:"; cat "$dir/gdb7.json"; fail=1; }
    grep '^{' "$dir/gdb7.json" | python3 -c '
import json, sys
p = json.load(sys.stdin)["policies"]
assert [x["policy"] for x in p] == ["zoned", "bestfit"], p
assert p[0]["error"] == "out of host memory" and "min_capacity" not in p[0], p[0]
assert p[1]["error"] is None and p[1]["min_capacity"], p[1]
print("ok   a policy whose search cannot go on: an error row, the next policy searched")' || fail=1
    for fmt in text json; do
      grep -q 'exited with code 02' "$dir/gdb2.$fmt" && grep -q 'through zoned failed: ' "$dir/gdb2.$fmt" &&
        ! grep -q '^zoned\|^bestfit\|"policy":\|through bestfit\|^trace \|^{' "$dir/gdb2.$fmt" ||
        { echo "FAIL bad input in the first policy does not stop the comparison ($fmt):"; cat "$dir/gdb2.$fmt"; fail=1; }
    done
  fi
else
  echo "skip a policy whose search cannot go on: no gdb"
fi
exit $fail
