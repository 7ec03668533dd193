#!/bin/sh
# hbm bench replay: --help works, --json carries its keys and each policy's
# settings (--alloc-conf POLICY=CONF), --every runs the rounds without
# samples, an unknown policy or a bad setting exits 2, a request that fails
# mid-trace is timed and counted (exit 0), a start that does not fit is not
# timed (exit 1), and where no policy's start fits no table heading is
# printed over no rows. Small and short: timings are never asserted here.
set -u
fail=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT

"$HBM" bench replay --help > "$out" 2>&1 || { echo "FAIL --help exits non-zero"; fail=1; }
grep -q "usage: hbm bench replay" "$out" || { echo "FAIL --help prints no usage"; fail=1; }
grep -q -- "--alloc-conf" "$out" || { echo "FAIL --help does not name --alloc-conf"; fail=1; }
grep -q -- "--every" "$out" || { echo "FAIL --help does not name --every"; fail=1; }

"$HBM" bench replay --preset 7b-1gpu-80g --steps 2 --rounds 1 --policy caching,zoned \
  --alloc-conf zoned=moves:off,plan:off --json > "$out" 2>&1
rc=$?
[ $rc -eq 0 ] || { echo "FAIL --json exits $rc:"; cat "$out"; fail=1; }
for key in trace events rounds policies events_per_s ns_per_event ratio_to_first ratio_median ratio_quartiles failures alloc_conf; do
  grep -q "\"$key\":" "$out" || { echo "FAIL key $key missing: $(cat "$out")"; fail=1; }
done
grep -q '"policy":"caching","alloc_conf":null' "$out" || { echo "FAIL caching's settings not null: $(cat "$out")"; fail=1; }
grep -q '"policy":"zoned","alloc_conf":"moves:off,plan:off"' "$out" || { echo "FAIL zoned's settings not reported: $(cat "$out")"; fail=1; }
echo "ok   json: $(cat "$out")"

"$HBM" bench replay --preset 7b-1gpu-80g --steps 2 --rounds 2 --policy caching,zoned --every 1000000000 --json > "$out" 2>&1
rc=$?
[ $rc -eq 0 ] || { echo "FAIL --every exits $rc:"; cat "$out"; fail=1; }
[ "$(grep -o '"ns_per_event":' "$out" | wc -l)" -eq 2 ] || { echo "FAIL --every: not two policies timed: $(cat "$out")"; fail=1; }
echo "ok   --every: $(cat "$out")"

# per-round ratios: the first policy's are 1; the others' quartiles hold their
# median (test_bench_stats checks the order statistics themselves)
"$HBM" bench replay --preset 7b-1gpu-80g --steps 1 --rounds 5 --policy caching,zoned,bestfit --json > "$out" 2>&1
python3 - "$out" <<'PY' || { echo "FAIL per-round ratios: $(cat "$out")"; fail=1; }
import json, sys
r = json.load(open(sys.argv[1]))
p = r["policies"]
assert r["rounds"] == 5 and len(p) == 3, r
assert p[0]["ratio_median"] == 1 and p[0]["ratio_quartiles"] == [1, 1], p[0]
for q in p[1:]:
    lo, hi = q["ratio_quartiles"]
    assert 0 < lo <= q["ratio_median"] <= hi, q
PY
# one round: its ratio is the fastest rounds' ratio, the median and both quartiles
"$HBM" bench replay --preset 7b-1gpu-80g --steps 1 --rounds 1 --policy caching,zoned --json > "$out" 2>&1
python3 - "$out" <<'PY' || { echo "FAIL per-round ratios of one round: $(cat "$out")"; fail=1; }
import json, sys
z = json.load(open(sys.argv[1]))["policies"][1]
r = z["ratio_to_first"]
assert abs(z["ratio_median"] - r) < 1e-9 * r and all(abs(q - r) < 1e-9 * r for q in z["ratio_quartiles"]), z
PY
"$HBM" bench replay --preset 7b-1gpu-80g --steps 1 --rounds 3 --policy caching,zoned > "$out" 2>&1
grep -q "zoned .*x the first (per round: median .*x, middle half .*x)" "$out" || { echo "FAIL text per-round ratios: $(cat "$out")"; fail=1; }
grep "caching" "$out" | grep -q "per round" && { echo "FAIL the first policy has per-round ratios: $(cat "$out")"; fail=1; }
echo "ok   per-round ratios: $(grep zoned "$out")"
# one event and one round, each in the singular
one=$(mktemp)
printf 'hbm-trace 1\ncapacity 1GiB\na x 1MiB\n' > "$one"
"$HBM" bench replay --trace "$one" --rounds 1 --policy bestfit > "$out" 2>&1
grep -q "^replay speed on $one (1 event), fastest of 1 round$" "$out" || { echo "FAIL one event: $(head -1 "$out")"; fail=1; }
rm -f "$one"

for bad in "--policy nosuch" "--policy zoned --alloc-conf zoned=moves:maybe" "--rounds 0" "--every 0" "--every -5" "--frobnicate" \
           "--snapshot-device 0"; do
  # shellcheck disable=SC2086
  "$HBM" bench replay --steps 1 --rounds 1 $bad > "$out" 2>&1
  rc=$?
  if [ $rc -ne 2 ]; then echo "FAIL '$bad' exits $rc, expected 2"; fail=1
  else echo "ok   '$bad': $(tail -n 1 "$out")"; fi
done
# A snapshot names no capacity: said once, before anything is printed, JSON or
# text; --preset or --steps beside --trace is refused, not ignored.
snap="$HBM_ROOT/tests/fixtures/snapshots/snapshot_basic_p4.pickle"
err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
for mode in --json ""; do
  # shellcheck disable=SC2086
  "$HBM" bench replay --trace "$snap" --rounds 1 $mode > "$out" 2> "$err"
  rc=$?
  if [ $rc -ne 2 ] || [ -s "$out" ] || [ "$(wc -l < "$err")" -ne 1 ] || ! grep -q "names no capacity" "$err"; then
    echo "FAIL snapshot without --device ($mode): exit $rc, stdout '$(cat "$out")', stderr '$(cat "$err")'"; fail=1
  else echo "ok   snapshot without --device ($mode): $(cat "$err")"; fi
done
"$HBM" bench replay --trace "$snap" --device sim:1GiB --rounds 1 --policy caching --json > "$out" 2> "$err" ||
  { echo "FAIL snapshot with --device: $(cat "$err")"; fail=1; }
for extra in "--preset 7b-1gpu-80g" "--steps 2"; do
  # shellcheck disable=SC2086
  "$HBM" bench replay --trace "$snap" --device sim:1GiB --rounds 1 $extra > "$out" 2> "$err"
  rc=$?
  [ $rc -eq 2 ] && [ ! -s "$out" ] && grep -q "give one or the other" "$err" ||
    { echo "FAIL --trace with $extra: exit $rc, $(cat "$out" "$err")"; fail=1; }
done
"$HBM" bench replay --steps 1 --rounds 1 --policy caching,zoned --alloc-conf zoned=moves:maybe > "$out" 2> "$err"
rc=$?
[ $rc -eq 2 ] && [ ! -s "$out" ] || { echo "FAIL a bad setting printed a report or exit $rc: $(cat "$out")"; fail=1; }
# one round: said in the singular
"$HBM" bench replay --preset 7b-1gpu-80g --steps 1 --rounds 1 --policy bestfit > "$out" 2>&1
head -n 1 "$out" | grep -q "7b-1gpu-80g, 1 step (.*), fastest of 1 round$" || { echo "FAIL plurals: $(head -n 1 "$out")"; fail=1; }
# a generated trace larger than the host's memory is refused before generating
"$HBM" bench replay --steps 1000000 --rounds 1 > "$out" 2>&1; rc=$?
if [ $rc -ne 2 ] || ! grep -q "host memory, more than the .* available" "$out"; then
  echo "FAIL --steps 1000000: exit $rc, expected 2 naming host memory: $(cat "$out")"; fail=1
else echo "ok   --steps 1000000: $(cat "$out")"; fi
# bench gen's most steps need ~166 GiB: checked only where that is more than the host has
avail=$(sed -n 's/^MemAvailable: *\([0-9]*\) kB/\1/p' /proc/meminfo 2>/dev/null)
if [ -n "$avail" ] && [ "$avail" -lt 150000000 ]; then
  "$HBM" bench gen --steps 100000 > "$out" 2>&1; rc=$?
  if [ $rc -ne 2 ] || ! grep -q "host memory, more than the .* available" "$out"; then
    echo "FAIL bench gen --steps 100000: exit $rc, expected 2 naming host memory: $(cat "$out")"; fail=1
  else echo "ok   bench gen --steps 100000: $(cat "$out")"; fi
fi

# A policy whose starting state does not fit replays no event: it has no time
# to report (it once read as billions of events a second). The others are
# timed; the run exits 1. A trace with no events is refused.
trace=$(mktemp)
printf 'hbm-trace 1\ncapacity 64MiB\ninit-seg 0x0 40MiB 0 large\ninit-blk 0x0 1MiB a\ninit-blk 0x100000 39MiB -\ninit-seg 0x10000000 40MiB 0 large\ninit-blk 0x10000000 1MiB b\ninit-blk 0x10100000 39MiB -\na c 1MiB\nf a\nf b\nf c\n' > "$trace"
"$HBM" bench replay --trace "$trace" --policy caching,zoned --rounds 2 --json > "$out" 2>"$out.err"; rc=$?
if [ $rc -ne 1 ] || grep -q '"policy":"caching"' "$out" || ! grep -q '"policy":"zoned"' "$out" \
   || ! grep -q "caching: the trace's starting state does not fit" "$out.err" || [ "$(grep -c caching "$out.err")" -ne 1 ]; then
  echo "FAIL unfit start: exit $rc: $(cat "$out" "$out.err")"; fail=1
else echo "ok   unfit start: $(cat "$out.err")"; fi
# No policy's start fits: each says so, and the text prints no table (a
# heading with no row under it); the JSON's policies are empty. Exit 1.
printf 'hbm-trace 1\ncapacity 4GiB\ninit-seg 0x0 6GiB 0 large\ninit-blk 0x0 6GiB a\na b 1MiB\nf b\nf a\n' > "$trace"
"$HBM" bench replay --trace "$trace" --policy caching,zoned --rounds 1 > "$out" 2>"$out.err"; rc=$?
if [ $rc -ne 1 ] || [ -s "$out" ] || [ "$(grep -c "the trace's starting state does not fit" "$out.err")" -ne 2 ]; then
  echo "FAIL no start fits: exit $rc, stdout '$(cat "$out")', stderr '$(cat "$out.err")'"; fail=1
else echo "ok   no start fits: nothing on stdout, exit 1"; fi
"$HBM" bench replay --trace "$trace" --policy caching,zoned --rounds 1 --json > "$out" 2>"$out.err"; rc=$?
[ $rc -eq 1 ] && grep -q '"policies":\[\]}$' "$out" || { echo "FAIL no start fits --json: exit $rc, $(cat "$out")"; fail=1; }
# A request that fails mid-trace is a result: the policy is timed, the failure
# counted, and the run exits 0 (step 437's buffer under bestfit).
"$HBM" bench replay --trace "$HBM_ROOT/tests/fixtures/step437.trace" --policy bestfit,zoned --rounds 2 --json > "$out" 2>"$out.err"; rc=$?
if python3 - "$out" <<'PY' && [ $rc -eq 0 ]
import json, sys
p = json.load(open(sys.argv[1]))["policies"]
assert [q["policy"] for q in p] == ["bestfit", "zoned"], p
assert p[0]["failures"] == 1 and p[0]["ns_per_event"] > 0 and p[1]["failures"] == 0, p
PY
then echo "ok   a failed request is timed and counted"
else echo "FAIL a failed request: exit $rc: $(cat "$out" "$out.err")"; fail=1; fi
printf 'hbm-trace 1\ncapacity 1GiB\n' > "$trace"
"$HBM" bench replay --trace "$trace" > "$out" 2>&1; rc=$?
if [ $rc -ne 2 ] || ! grep -q "no events to time" "$out"; then
  echo "FAIL no events: exit $rc: $(cat "$out")"; fail=1
else echo "ok   no events: $(cat "$out")"; fi
rm -f "$trace" "$out.err"
exit $fail
