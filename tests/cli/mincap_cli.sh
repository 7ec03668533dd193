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
# The table says what the JSON says, row by row, each figure in its column:
# min capacity, over peak live (signed, in percent), backend calls, replays;
# one row per policy, no more. The JSON's keys are these and no others, and
# below_fails is bestfit's (it failed one step below) but not zoned's (below
# peak live nothing completes: certain, not replayed).
"$HBM" mincap "$trace" --policy bestfit,zoned > "$dir/table" || { echo "FAIL text mincap bestfit,zoned exited $?"; fail=1; }
echo "$out" | python3 -c '
import json, sys
d = json.load(sys.stdin)
rows = open(sys.argv[1]).read().split("\n")
assert rows[0] == "trace %s: 21 events, peak live 96.00 GiB" % d["trace"], rows[0]
assert rows[2:4] == ["", "policy        min capacity  over peak live  backend calls  replays"], rows[2:4]
assert [x["policy"] for x in d["policies"]] == ["bestfit", "zoned"], d["policies"]
keys = ["policy", "alloc_conf", "error", "min_capacity", "backend_calls", "over_peak_live", "below_fails", "replays"]
want = []
for p in d["policies"]:
    assert list(p) == keys, list(p)
    assert p["over_peak_live"] == p["min_capacity"] / d["peak_live"] - 1, p
    want.append("%-11s %14s %15s %14d %8d" % (p["policy"], "%.2f GiB" % (p["min_capacity"] / 2**30),
                "%+.2f%%" % (100 * p["over_peak_live"]), p["backend_calls"], p["replays"]))
assert rows[4:] == want + [""], (rows[4:], want)
assert want[0].split()[3] == "+4.38%" and want[0].split()[4] != want[0].split()[5], want[0]
assert [p["below_fails"] for p in d["policies"]] == [True, False], d["policies"]
print("ok   the table says what the JSON says")' "$dir/table" || { cat "$dir/table"; fail=1; }
# one event, not "1 events"
printf 'hbm-trace 1\na x 100MiB\n' > "$dir/one.trace"
"$HBM" mincap "$dir/one.trace" --policy bestfit | grep -q "^trace $dir/one.trace: 1 event, peak live 100.00 MiB$" ||
  { echo "FAIL one event: $("$HBM" mincap "$dir/one.trace" --policy bestfit)"; fail=1; }
# a search at a resolution equal to the limit has one capacity to try: 96 GiB, where zoned completes
"$HBM" mincap "$trace" --policy zoned --resolution 96GiB --limit 96GiB > "$dir/eq" 2>&1 &&
  grep -q "^zoned  *96.00 GiB  *+0.00% " "$dir/eq" || { echo "FAIL --resolution equal to --limit: $(cat "$dir/eq")"; fail=1; }
# a limit off the resolution's grid is rounded down to it, and the row of a
# search that never completed gives that, with null figures in the JSON
"$HBM" mincap "$trace" --policy bestfit --limit 100GiB --resolution 48GiB > "$dir/off" 2>&1 &&
  grep -q "^search 96.00 GiB to 96.00 GiB in steps of 48.00 GiB$" "$dir/off" &&
  grep -q "^bestfit  *none  *-  *-  *1  (fails up to the limit, 96.00 GiB)$" "$dir/off" ||
  { echo "FAIL a limit off the grid: $(cat "$dir/off")"; fail=1; }
"$HBM" mincap "$trace" --policy bestfit --limit 96GiB --json |
  grep -q '"policies":\[{"policy":"bestfit","alloc_conf":null,"error":null,"min_capacity":null,"backend_calls":null,"over_peak_live":null,"below_fails":false,"replays":1}\]}$' ||
  { echo "FAIL a search that never completed, JSON: $("$HBM" mincap "$trace" --policy bestfit --limit 96GiB --json)"; fail=1; }
# settings reach the search: under half the device, caching needs twice peak live
"$HBM" mincap "$trace" --policy caching --alloc-conf per_process_memory_fraction:0.5 --json |
  grep -q '"policy":"caching","alloc_conf":"per_process_memory_fraction:0.5","error":null,"min_capacity":206158430208,' ||
  { echo "FAIL --alloc-conf in the search: $("$HBM" mincap "$trace" --policy caching --alloc-conf per_process_memory_fraction:0.5 --json)"; fail=1; }
# and the text names them under the row, as the JSON's alloc_conf
"$HBM" mincap "$trace" --policy caching,bestfit --alloc-conf caching=per_process_memory_fraction:0.5 > "$dir/conf" 2>&1 &&
  grep -A1 '^caching ' "$dir/conf" | grep -q '^  *settings: per_process_memory_fraction:0.5$' &&
  [ "$(grep -c 'settings: ' "$dir/conf")" -eq 1 ] || { echo "FAIL the text names no settings: $(cat "$dir/conf")"; fail=1; }
# what cannot be searched is said with the right figures and names
msg() { # expected message, args...
  want=$1; shift
  "$HBM" mincap "$@" > "$dir/out" 2> "$dir/err"; rc=$?
  [ $rc -eq 2 ] && [ "$(cat "$dir/err")" = "hbm: $want" ] || { echo "FAIL mincap $*: exit $rc, $(cat "$dir/err")"; fail=1; }
}
msg "$trace: --limit 1.00 GiB is below the trace's peak live 96.00 GiB: nothing can complete there" "$trace" --limit 1GiB
msg "--resolution 64.00 MiB is above --limit 32.00 MiB: no capacity to try" "$trace" --resolution 64MiB --limit 32MiB
# a --limit whole granules round down is named as typed too, not only as the figure it became
printf 'hbm-trace 1\na a 105MiB\n' > "$dir/p105.trace"
msg "$dir/p105.trace: --limit 104.00 MiB ('105MiB' in whole 2 MiB granules) is below the trace's peak live 105.00 MiB: nothing can complete there" \
  "$dir/p105.trace" --limit 105MiB
msg "--resolution: expected a multiple of 2MiB (the device granule) up to 1PiB, got '3MiB'" "$trace" --resolution 3MiB
printf 'hbm-trace 1\na x 98MiB\n' > "$dir/p98.trace"
msg "$dir/p98.trace: --limit 98.00 MiB leaves no capacity to try: the first is peak live 98.00 MiB rounded up to the resolution, 112.00 MiB" \
  "$dir/p98.trace" --limit 98MiB
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
