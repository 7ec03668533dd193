#!/bin/sh
# hbm bench sweep: --help names the options and JSON keys; --json carries
# its keys and one object per job; the same seed gives the same JSON (the
# sweep is reproducible); a row's command regenerates its job (hbm gen llm
# with it, then hbm replay: the same peak reserved for zoned, and the same
# calls and allocations over the second half of the steps, counted from the
# replay's samples); every job's goals are what its figures give (with
# zoned's fixed zones too, where never_more fails); bad options exit 2 with a
# message, and so does a job too large for host memory, before it is
# generated; a job zoned does not complete meets none of its goals and its
# row prints no figures of zoned's.
# Small and short: timings are never asserted here.
set -u
fail=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

"$HBM" bench sweep --help > "$dir/help" 2>&1 || { echo "FAIL --help exits non-zero"; fail=1; }
grep -q "usage: hbm bench sweep" "$dir/help" || { echo "FAIL --help prints no usage"; fail=1; }
for opt in --jobs --seed --steps --capacity --alloc-conf --json "JSON keys"; do
  grep -q -- "$opt" "$dir/help" || { echo "FAIL --help does not name $opt"; fail=1; }
done
"$HBM" bench --help | grep -q "sweep" || { echo "FAIL hbm bench --help does not list sweep"; fail=1; }

args="--jobs 3 --steps 4 --seed 5 --json"
# shellcheck disable=SC2086
"$HBM" bench sweep $args > "$dir/a.json" 2> "$dir/a.err"
rc=$?
[ $rc -eq 0 ] || { echo "FAIL sweep --json exits $rc:"; cat "$dir/a.err"; exit 1; }
for key in bench seed steps capacity jobs command peak_live peak_reserved backend_calls \
           backend_calls_after_first_step alloc_events backend_calls_second_half alloc_events_second_half \
           oom completes allowance goals reserve never_more calls_after_first_step calls_second_half \
           redraws summary met total; do
  grep -q "\"$key\":" "$dir/a.json" || { echo "FAIL key $key missing: $(cat "$dir/a.json")"; fail=1; }
done
[ "$(grep -c . "$dir/a.json")" -eq 1 ] || { echo "FAIL --json stdout is not one line (progress in it?)"; fail=1; }

# the same seed, the same jobs, byte for byte
# shellcheck disable=SC2086
"$HBM" bench sweep $args > "$dir/b.json" 2>/dev/null
cmp -s "$dir/a.json" "$dir/b.json" || { echo "FAIL the same seed gives different JSON"; diff "$dir/a.json" "$dir/b.json" | head; fail=1; }
"$HBM" bench sweep --jobs 3 --steps 4 --seed 6 --json > "$dir/c.json" 2>/dev/null
cmp -s "$dir/a.json" "$dir/c.json" && { echo "FAIL another seed gives the same jobs"; fail=1; }

if command -v python3 >/dev/null; then
  python3 - "$dir/a.json" > "$dir/jobs" <<'EOF' || { echo "FAIL: JSON values"; fail=1; }
import json, sys
d = json.load(open(sys.argv[1]))
assert d["seed"] == 5 and d["steps"] == 4 and d["capacity"] == 141 << 30, d
assert isinstance(d["redraws"], int)
jobs = d["jobs"]
assert len(jobs) == 3, len(jobs)
goals = ("reserve", "never_more", "calls_after_first_step", "calls_second_half", "completes")
for g in goals:
    s = d["summary"][g]
    assert s["total"] == 3 and s["met"] == sum(1 for j in jobs if j["goals"][g]), (g, s)
for j in jobs:
    assert j["command"].startswith("hbm gen llm ") and "--steps 4 " in j["command"], j["command"]
    assert "--seed " in j["command"] and "--capacity 141GiB" in j["command"], j["command"]
    assert j["allowance"] == max(j["peak_live"] // 50, 64 << 20), j
    pol = {p["policy"]: p for p in j["policies"]}
    assert sorted(pol) == ["caching", "expandable", "zoned"], pol
    for p in pol.values():
        for k in ("peak_reserved", "backend_calls", "backend_calls_after_first_step", "alloc_events",
                  "backend_calls_second_half", "alloc_events_second_half"):
            assert isinstance(p[k], int), (k, p)
        # steps 3 and 4 of 4: after the first step, and some of its allocations
        assert p["backend_calls_second_half"] <= p["backend_calls_after_first_step"], p
        assert 0 < p["alloc_events_second_half"] < p["alloc_events"], p
        assert p["completes"] == (p.get("oom") is None and p["error"] is None), p
    assert all(isinstance(j["goals"][g], bool) for g in goals), j["goals"]
    assert j["goals"]["completes"] == pol["zoned"]["completes"]
    z = pol["zoned"]
    held = max(z["peak_reserved"], z["peak_device"])  # the device's high-water mark counts too
    assert j["goals"]["reserve"] == (held - j["peak_live"] <= j["allowance"]), j
    assert j["goals"]["calls_second_half"] == (z["backend_calls_second_half"] * 100 <= z["alloc_events_second_half"]), j
    print(z["peak_reserved"], z["backend_calls_second_half"], z["alloc_events_second_half"], j["command"])
EOF
  # ... and a job of an odd number of steps, whose second half runs from the
  # end of step steps / 2 rounded down: of 3 steps, steps 2 and 3
  "$HBM" bench sweep --jobs 1 --steps 3 --seed 5 --json 2> /dev/null | python3 -c '
import json, sys
j = json.load(sys.stdin)["jobs"][0]
z = {p["policy"]: p for p in j["policies"]}["zoned"]
print(z["peak_reserved"], z["backend_calls_second_half"], z["alloc_events_second_half"], j["command"])' >> "$dir/jobs"
  # each row's command regenerates its job: zoned's peak reserved, and what the
  # samples from the end of step steps / 2 to the end say of the second half,
  # replayed from the file
  while read -r reserved late_calls late_allocs cmd; do
    steps=$(echo "$cmd" | sed -n 's/.* --steps \([0-9]*\) .*/\1/p')
    # shellcheck disable=SC2086
    "$HBM" ${cmd#hbm } -o "$dir/job.trace" > /dev/null 2> "$dir/gen.err" || { echo "FAIL '$cmd' exits $?: $(cat "$dir/gen.err")"; fail=1; continue; }
    got=$("$HBM" replay "$dir/job.trace" --policy zoned --samples --json | python3 -c '
import json, sys
steps = int(sys.argv[1])
p = json.load(sys.stdin)["policies"][0]
s = p["samples"]
assert len(s) == steps + 1, len(s)  # the end of the build phase and of each step
print(p["peak_reserved"], s[-1]["backend_calls"] - s[steps // 2]["backend_calls"], s[-1]["alloc_events"] - s[steps // 2]["alloc_events"])' "$steps")
    if [ "$got" = "$reserved $late_calls $late_allocs" ]; then echo "ok   regenerated: zoned peak reserved, second-half calls, allocations $got: $cmd"
    else echo "FAIL '$cmd': hbm replay gives zoned $got, the sweep $reserved $late_calls $late_allocs"; fail=1; fi
  done < "$dir/jobs"
  [ "$(grep -c -- '--steps 4 ' "$dir/jobs")" -eq 3 ] && [ "$(grep -c -- '--steps 3 ' "$dir/jobs")" -eq 1 ] ||
    { echo "FAIL: not 3 jobs of 4 steps and 1 of 3 to regenerate"; fail=1; }
else
  echo "SKIP JSON values and regeneration: no python3"
fi

# Every goal of every job, worked out again from the job's figures: with the
# defaults, and with zoned's fixed zones (vmm:off), which take the whole
# device as one segment and so hold more than the others (never_more fails).
"$HBM" bench sweep --jobs 2 --steps 2 --seed 5 --alloc-conf zoned=vmm:off --json > "$dir/vmm.json" 2> "$dir/vmm.err" ||
  { echo "FAIL vmm:off sweep exits $?: $(cat "$dir/vmm.err")"; fail=1; }
if command -v python3 >/dev/null; then
  python3 - "$dir/a.json" "$dir/vmm.json" <<'EOF' || { echo "FAIL: a goal the figures do not give"; fail=1; }
import json, sys
def held(p):
    return max(p["peak_reserved"], p["peak_device"])
for path, expect_never_more in ((sys.argv[1], None), (sys.argv[2], False)):
    d = json.load(open(path))
    jobs = d["jobs"]
    assert [j["index"] for j in jobs] == list(range(1, len(jobs) + 1)), [j["index"] for j in jobs]
    for j in jobs:
        pol = {p["policy"]: p for p in j["policies"]}
        z = pol["zoned"]
        done = z["completes"]
        others = [p for name, p in pol.items() if name != "zoned" and not (p["error"] is None and p.get("oom"))]
        want = {"completes": done,
                "reserve": done and held(z) - j["peak_live"] <= j["allowance"],
                "never_more": done and all(p["error"] is None and held(z) <= held(p) for p in others),
                "calls_after_first_step": done and z["backend_calls_after_first_step"] <= 0.01 * z["alloc_events"],
                "calls_second_half": done and z["backend_calls_second_half"] <= 0.01 * z["alloc_events_second_half"]}
        assert j["goals"] == want, (path, j["index"], j["goals"], want)
        if expect_never_more is not None:
            assert j["goals"]["never_more"] == expect_never_more, (path, j["index"], j["goals"])
EOF
fi

# text: a row per job, numbered from 1, and a summary line per goal
"$HBM" bench sweep --jobs 3 --steps 4 --seed 5 > "$dir/text" 2>&1 || { echo "FAIL text exits $?"; fail=1; }
[ "$(grep -c "hbm gen llm " "$dir/text")" -eq 3 ] || { echo "FAIL text: not 3 rows: $(cat "$dir/text")"; fail=1; }
[ "$(awk '$1 ~ /^[0-9]+$/ { printf "%s ", $1 }' "$dir/text")" = "1 2 3 " ] ||
  { echo "FAIL text: rows not numbered 1 to 3: $(cat "$dir/text")"; fail=1; }
for g in reserve never_more calls_after_first_step calls_second_half completes; do
  grep -q "^$g  *[0-9]*/3 jobs" "$dir/text" || { echo "FAIL text: no summary line for $g: $(cat "$dir/text")"; fail=1; }
done

# A job zoned does not complete (1 GiB leaves seed 1's first job without
# room) meets no goal, counted so in the summary, and its row prints - for
# zoned's figures rather than those of a run cut short.
oom_args="--capacity 1GiB --jobs 2 --steps 2 --seed 1"
# shellcheck disable=SC2086
"$HBM" bench sweep $oom_args --json > "$dir/oom.json" 2> "$dir/oom.err" || { echo "FAIL $oom_args --json exits $?: $(cat "$dir/oom.err")"; fail=1; }
if command -v python3 >/dev/null; then
  python3 - "$dir/oom.json" <<'EOF' || { echo "FAIL: a job zoned did not complete counts as meeting a goal"; fail=1; }
import json, sys
d = json.load(open(sys.argv[1]))
jobs = d["jobs"]
cut = [j for j in jobs if not {p["policy"]: p for p in j["policies"]}["zoned"]["completes"]]
assert cut, "no job where zoned fails: the case is not exercised"
for j in cut:
    assert not any(j["goals"].values()), (j["index"], j["goals"])
for g, s in d["summary"].items():
    assert s["total"] == len(jobs) and s["met"] == sum(1 for j in jobs if j["goals"][g]), (g, s)
EOF
fi
# shellcheck disable=SC2086
"$HBM" bench sweep $oom_args > "$dir/oom.txt" 2>&1
# columns: job, peak live (number and unit), caching, expandable, zoned, at end, calls, 2nd half, misses
rows=$(awk '$6 == "oom" || $6 == "error"' "$dir/oom.txt")
if [ -z "$rows" ]; then echo "FAIL $oom_args: no row where zoned fails: $(cat "$dir/oom.txt")"; fail=1
elif echo "$rows" | awk '$7 != "-" || $8 != "-" || $9 != "-" { bad = 1 } END { exit !bad }'; then
  echo "FAIL $oom_args: a row where zoned fails prints its figures: $rows"; fail=1
elif ! echo "$rows" | grep -q " reserve,never_more,"; then
  echo "FAIL $oom_args: a row where zoned fails does not miss reserve and never_more: $rows"; fail=1
else echo "ok   zoned did not complete: no goal met, no figures: $(echo "$rows" | cut -c1-120)"; fi

# one job: said in the singular
"$HBM" bench sweep --jobs 1 --steps 2 > "$dir/one" 2>&1
head -n 1 "$dir/one" | grep -q "^sweep: 1 random job from" || { echo "FAIL plurals: $(head -n 1 "$dir/one")"; fail=1; }

# A job whose trace would not fit in host memory is refused before it is
# generated, as bench replay refuses one (seed 1's first job needs ~233 GiB at
# a million steps). Under a 4 GiB address-space limit, so that a sweep that
# generates it anyway fails fast instead of meeting the OOM killer.
avail=$(sed -n 's/^MemAvailable: *\([0-9]*\) kB/\1/p' /proc/meminfo 2>/dev/null)
# (Skipped where the limit stops the program starting at all: a sanitizer
# build reserves its shadow memory up front.)
if ! (ulimit -v 4000000 && "$HBM" --help) > /dev/null 2>&1; then
  echo "skip --steps 1000000: the program does not start under ulimit -v"
elif [ -n "$avail" ] && [ "$avail" -lt 150000000 ]; then
  (ulimit -v 4000000; "$HBM" bench sweep --jobs 1 --seed 1 --steps 1000000) > "$dir/out" 2> "$dir/err"; rc=$?
  if [ $rc -ne 2 ] || [ -s "$dir/out" ] ||
     ! grep -q "bench sweep: job 1: --steps 1000000 .* host memory, more than the .* available; give --steps" "$dir/err"; then
    echo "FAIL --steps 1000000: exit $rc, expected 2 naming host memory: $(cat "$dir/err")"; fail=1
  else echo "ok   --steps 1000000: $(cat "$dir/err")"; fi
fi

for bad in "--jobs 0" "--jobs x" "--steps 1" "--capacity lots" "--alloc-conf zoned=moves:maybe" "--frobnicate" "extra"; do
  base="--steps 2" # short, should a bad option be taken; not beside a bad --steps (given twice)
  case "$bad" in --steps*) base="" ;; esac
  # shellcheck disable=SC2086
  "$HBM" bench sweep $base $bad > "$dir/out" 2> "$dir/err"
  rc=$?
  if [ $rc -ne 2 ]; then echo "FAIL '$bad' exits $rc, expected 2"; fail=1
  elif ! grep -q "hbm: " "$dir/err"; then echo "FAIL '$bad': no message"; fail=1
  elif [ "$bad" = "--steps 1" ] && ! grep -q "bench sweep: --steps: expected" "$dir/err"; then
    echo "FAIL '$bad': not the range of --steps: $(cat "$dir/err")"; fail=1
  else echo "ok   '$bad': $(tail -n 1 "$dir/err")"; fi
done

# a job past host memory is refused before it is generated or estimated,
# naming the steps that would fit
"$HBM" bench sweep --jobs 1 --steps 1000000 > "$dir/out" 2> "$dir/err"
rc=$?
if [ $rc -ne 2 ] || ! grep -q "bench sweep: job 1: --steps 1000000 (.*) needs about .* of host memory, more than the .* available; give --steps [0-9]* or fewer" "$dir/err"; then
  echo "FAIL --steps 1000000: exit $rc, expected 2 naming host memory: $(cat "$dir/err")"; fail=1
else echo "ok   --steps 1000000: $(tail -n 1 "$dir/err")"; fi
exit $fail
