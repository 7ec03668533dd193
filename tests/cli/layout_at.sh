#!/bin/sh
# hbm replay --layout-at: each policy's layout (live blocks with their
# purpose, and holes, in address order) after N events, at the first failure,
# at peak reserved or at the tightest sample, in text and JSON, on a trace
# whose layout is known by hand; the whole run's figures unchanged by it
# (peak_reserved_event among them); bad values exit 2.
set -u
fail=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# bestfit on 8 MiB: p [0,1) MiB, x [1,3), y [3,4); x freed leaves [1,3), and
# z, best fit, takes [1,2). Then 5 MiB cannot be placed: 5 MiB free, the
# largest piece 4 MiB (the failure at event 5, after 5 events).
cat > "$dir/t.trace" <<'EOF'
hbm-trace 1
capacity 8MiB
a p 1MiB param
a x 2MiB act
a y 1MiB temp
f x
a z 1MiB comm
a big 5MiB act
EOF

# The runs as offsets from the first: "offset bytes what" a line.
runs() {
  grep '^  0x' "$1" | while read -r addr bytes size unit what; do
    [ -n "${base:-}" ] || base=$addr
    echo "$((addr - base)) $bytes $what"
  done
}

check_runs() { # name, file, expected runs (one "offset bytes what" per line)
  got=$(runs "$2")
  [ "$got" = "$3" ] || { printf 'FAIL %s: runs\n%s\nexpected\n%s\n' "$1" "$got" "$3"; fail=1; }
}

after5='0 1048576 param
1048576 1048576 comm
2097152 1048576 hole
3145728 1048576 temp
4194304 4194304 hole'

"$HBM" replay "$dir/t.trace" --layout-at 5 > "$dir/five" 2> "$dir/err" || { echo "FAIL --layout-at 5: exit $?: $(cat "$dir/err")"; fail=1; }
grep -q '^layout of bestfit after 5 events (step 0): live 3.00 MiB; 3 blocks hold 3.00 MiB as placed; reserved 4.00 MiB; 2 holes, 5.00 MiB in all, the largest 4.00 MiB; largest free 4.00 MiB$' "$dir/five" ||
  { echo "FAIL --layout-at 5: header: $(grep '^layout' "$dir/five")"; fail=1; }
grep -q '^  placed by purpose: param 1.00 MiB comm 1.00 MiB temp 1.00 MiB$' "$dir/five" ||
  { echo "FAIL --layout-at 5: by purpose: $(grep 'by purpose' "$dir/five")"; fail=1; }
check_runs "--layout-at 5" "$dir/five" "$after5"
# the table is still the whole run's: the failure at event 5
grep -q '^bestfit .*step 0 (event 5): request 5.00 MiB.*fragmentation$' "$dir/five" ||
  { echo "FAIL --layout-at 5: the table is not the whole run's: $(grep '^bestfit' "$dir/five")"; fail=1; }

"$HBM" replay "$dir/t.trace" --layout-at 3 > "$dir/three" 2>&1
check_runs "--layout-at 3" "$dir/three" '0 1048576 param
1048576 2097152 act
3145728 1048576 temp
4194304 4194304 hole'
runs "$dir/three" > "$dir/three.runs"
# one block: said in the singular
"$HBM" replay "$dir/t.trace" --layout-at 1 > "$dir/one" 2>&1
grep -q '^layout of bestfit after 1 event (step 0): live 1.00 MiB; 1 block holds 1.00 MiB as placed; reserved 1.00 MiB; 1 hole, 7.00 MiB in all' "$dir/one" ||
  { echo "FAIL --layout-at 1: header: $(grep '^layout' "$dir/one")"; fail=1; }

"$HBM" replay "$dir/t.trace" --layout-at failure > "$dir/failure" 2>&1
grep -q '^layout of bestfit at its first failure (event 5, step 0): live 3.00 MiB;' "$dir/failure" ||
  { echo "FAIL --layout-at failure: header: $(grep '^layout' "$dir/failure")"; fail=1; }
check_runs "--layout-at failure" "$dir/failure" "$after5"

# peak: bestfit's reserved (the end of its highest block) reaches 4 MiB with y, after 3 events
"$HBM" replay "$dir/t.trace" --layout-at peak > "$dir/peak" 2>&1
grep -q '^layout of bestfit after 3 events, at peak reserved (step 0): live 4.00 MiB; 3 blocks hold 4.00 MiB as placed; reserved 4.00 MiB;' "$dir/peak" ||
  { echo "FAIL --layout-at peak: $(grep '^layout' "$dir/peak")"; fail=1; }
check_runs "--layout-at peak" "$dir/peak" "$(cat "$dir/three.runs")"

# tightest: the sample with the smallest largest free (4 MiB from event 3 on; the first)
"$HBM" replay "$dir/t.trace" --every 1 --layout-at tightest > "$dir/tight" 2>&1
grep -q '^layout of bestfit after 3 events, the tightest sample (step 0):' "$dir/tight" ||
  { echo "FAIL --layout-at tightest: $(grep '^layout' "$dir/tight")"; fail=1; }

# JSON: the same layout, and the run's figures as without --layout-at
"$HBM" replay "$dir/t.trace" --policy bestfit,zoned --layout-at 5 --json > "$dir/five.json" 2> "$dir/err" ||
  { echo "FAIL --layout-at 5 --json: exit $?: $(cat "$dir/err")"; fail=1; }
"$HBM" replay "$dir/t.trace" --policy bestfit,zoned --json > "$dir/plain.json" 2> "$dir/err" ||
  { echo "FAIL --json: exit $?: $(cat "$dir/err")"; fail=1; }
python3 - "$dir/five.json" "$dir/plain.json" <<'EOF' || fail=1
import json, sys
d = json.load(open(sys.argv[1])); plain = json.load(open(sys.argv[2]))
ok = True
def bad(msg):
    global ok
    print("FAIL --layout-at --json:", msg); ok = False
b, z = d["policies"]
l = b["layout"]
if b.get("peak_reserved_event") != 3: bad("bestfit peak_reserved_event %r, expected 3" % b.get("peak_reserved_event"))
want = {"at": "event", "event": 5, "step": 0, "live": 3 << 20, "live_blocks": 3, "placed": 3 << 20,
        "reserved": 4 << 20, "holes": 2,
        "hole_bytes": 5 << 20, "largest_hole": 4 << 20, "largest_free": 4 << 20, "ranges": 1, "span": 8 << 20,
        "placed_by_purpose": {"param": 1 << 20, "comm": 1 << 20, "temp": 1 << 20}}
for k, v in want.items():
    if l.get(k) != v: bad("bestfit %s = %r, expected %r" % (k, l.get(k), v))
runs = [(r["addr"] - l["runs"][0]["addr"], r["size"], r["what"]) for r in l["runs"]]
if runs != [(0, 1 << 20, "param"), (1 << 20, 1 << 20, "comm"), (2 << 20, 1 << 20, "hole"), (3 << 20, 1 << 20, "temp"),
            (4 << 20, 4 << 20, "hole")]:
    bad("bestfit runs %r" % runs)
# zoned's runs tile its ranges and its live blocks are the three alive then
zl = z["layout"]
if zl is None or zl["live_blocks"] != 3 or zl["live"] != 3 << 20: bad("zoned layout %r" % zl)
else:
    whats = sorted(r["what"] for r in zl["runs"] if r["what"] != "hole")
    if whats != ["comm", "param", "temp"]: bad("zoned live blocks %r" % whats)
    if sum(r["size"] for r in zl["runs"]) != zl["span"]: bad("zoned runs do not sum to the span")
for p, q in zip(d["policies"], plain["policies"]):
    for k in q:
        if k != "ns_per_event" and p[k] != q[k]: bad("%s: %s %r with --layout-at, %r without" % (p["policy"], k, p[k], q[k]))
sys.exit(0 if ok else 1)
EOF

# at the failure, the free figures that would round to the request's text are
# given in bytes, as the table's line gives them: bestfit on 10 MiB with a 5 MiB
# hole fails a request 1 byte larger ("largest free 5.00 MiB" beside a 5.00 MiB
# request would read as a contradiction); after N events there is no request
printf 'hbm-trace 1\ncapacity 10MiB\na x 5MiB act\na y 1MiB temp\nf x\na big 5242881 act\n' > "$dir/round.trace"
"$HBM" replay "$dir/round.trace" --layout-at failure > "$dir/round" 2>&1
grep -q '^bestfit .*request 5242881 B, free total 9437184 B, largest free 5242880 B, ratio 0.80: fragmentation$' "$dir/round" &&
  grep -q '^layout of bestfit at its first failure (event 3, step 0): live 1.00 MiB; 1 block holds 1.00 MiB as placed; 2 holes, 9437184 B in all, the largest 5242880 B; largest free 5242880 B$' "$dir/round" ||
  { echo "FAIL --layout-at failure, sizes that round alike: $(grep '^layout\|^bestfit' "$dir/round")"; fail=1; }
"$HBM" replay "$dir/round.trace" --layout-at 2 > "$dir/round2" 2>&1
grep -q '^layout of bestfit after 2 events (step 0): .*1 hole, 4.00 MiB in all, the largest 4.00 MiB; largest free 4.00 MiB$' "$dir/round2" ||
  { echo "FAIL --layout-at 2 on round.trace: $(grep '^layout' "$dir/round2")"; fail=1; }

# a run without a failure has no layout at one: said, not invented
"$HBM" replay "$dir/t.trace" --capacity 16MiB --layout-at failure > "$dir/none" 2>&1
grep -q '^layout of bestfit: none (no request failed)$' "$dir/none" ||
  { echo "FAIL --layout-at failure without one: $(grep '^layout' "$dir/none")"; fail=1; }
"$HBM" replay "$dir/t.trace" --capacity 16MiB --layout-at failure --json > "$dir/none.json" 2>&1
grep -q '"layout":null,"layout_note":"no request failed"' "$dir/none.json" ||
  { echo "FAIL --layout-at failure --json without one: $(cat "$dir/none.json")"; fail=1; }

# reserved at its peak with the starting state: the layout then, before any
# event (caching holds the recorded segment, its block live); and 0 events
# without a starting state: bestfit's device, one hole
cat > "$dir/start.trace" <<'EOF'
hbm-trace 1
capacity 8MiB
init-seg 0x100000 2MiB 0 large
init-blk 0x100000 2MiB s0 2MiB act
f s0
EOF
"$HBM" replay "$dir/start.trace" --policy caching --layout-at peak --json > "$dir/start.json" 2>&1
grep -q '"peak_reserved_event":0,.*"layout":{"at":"peak","event":0,"step":0,"live":2097152,"live_blocks":1,"placed":2097152,"reserved":2097152,"holes":0,.*"runs":\[{"addr":1048576,"size":2097152,"what":"act"}\]}' "$dir/start.json" ||
  { echo "FAIL --layout-at peak at the starting state: $(cat "$dir/start.json")"; fail=1; }
"$HBM" replay "$dir/start.trace" --policy caching --layout-at peak > "$dir/start" 2>&1
grep -q '^layout of caching after its starting state, before any event, at peak reserved: live 2.00 MiB;' "$dir/start" ||
  { echo "FAIL --layout-at peak at the starting state, text: $(grep '^layout' "$dir/start")"; fail=1; }
"$HBM" replay "$dir/t.trace" --layout-at 0 > "$dir/zero" 2>&1
grep -q '^layout of bestfit after its starting state, before any event: live 0 B; 0 blocks hold 0 B as placed; reserved 0 B; 1 hole, 8.00 MiB in all' "$dir/zero" ||
  { echo "FAIL --layout-at 0: $(grep '^layout' "$dir/zero")"; fail=1; }
check_runs "--layout-at 0" "$dir/zero" '0 8388608 hole'
# the tightest moment may be the starting state's sample, before any event: its layout, not "none"
printf 'hbm-trace 1\ncapacity 64MiB\ninit-seg 0x0 64MiB 0 large\ninit-blk 0x0 40MiB w0 40MiB param\ninit-blk 0x2800000 24MiB -\ns 0\nf w0\ns 1\na z 1MiB act\n' > "$dir/start.trace"
"$HBM" replay "$dir/start.trace" --policy bestfit --layout-at tightest > "$dir/tight0" 2>&1 || { echo "FAIL tightest at event 0: exit $?"; fail=1; }
grep -q '^layout of bestfit after its starting state, before any event: live 40.00 MiB; 1 block holds 40.00 MiB as placed' "$dir/tight0" ||
  { echo "FAIL --layout-at tightest at the starting state: $(grep '^layout' "$dir/tight0")"; fail=1; }
"$HBM" replay "$dir/start.trace" --policy bestfit --html "$dir/tight0.html" > /dev/null 2>&1 || fail=1
grep -q "Layout at the tightest moment sampled (step 0, largest free 24.00 MiB, live 40.00 MiB" "$dir/tight0.html" ||
  { echo "FAIL the page leaves out the layout at the starting state's sample"; fail=1; }

bad() { # name, expected message, args...
  name=$1 msg=$2; shift 2
  "$HBM" replay "$dir/t.trace" "$@" > "$dir/out" 2> "$dir/err"
  rc=$?
  if [ $rc -ne 2 ] || ! grep -qF -- "$msg" "$dir/err"; then
    echo "FAIL $name: exit $rc, expected 2 and '$msg': $(cat "$dir/err")"; fail=1
  fi
}
bad negative "--layout-at: expected a number of events (0 or more), failure, peak or tightest, got '-1'" --layout-at -1
bad word "got 'top'" --layout-at top
bad past_the_end "--layout-at: $dir/t.trace has 6 events: expected 0..6, failure, peak or tightest, got 7" --layout-at 7
bad no_value "--layout-at needs a value" --layout-at
bad twice "given twice" --layout-at 1 --layout-at 2

[ $fail -eq 0 ] && echo "ok   replay --layout-at: after N events (0: the starting state), at the failure, at peak, tightest; text and JSON; bad values exit 2"
exit $fail
