#!/bin/sh
# hbm demo: no input files, a table with every policy, a self-contained
# report.html written atomically where it says, no progress bar when stderr is
# not a terminal, JSON on request, bad options exit 2. (A short run: the full
# 500-step demo is `make demo`.)
set -u
fail=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1

"$HBM" demo --steps 3 > out 2> err
rc=$?
[ $rc -eq 0 ] || { echo "FAIL demo: exit $rc"; cat err; fail=1; }
[ -s err ] && { echo "FAIL demo: stderr not empty without a terminal:"; cat err; fail=1; }
grep -q "^policy .*peak reserved.*efficiency.*max frag.*first failure.*request.*free total.*largest free.*cause" out ||
  { echo "FAIL demo: no table header"; cat out; fail=1; }
for p in $("$HBM" --help | sed -n 's/^policies: //p' | tr ',' ' '); do
  grep -q "^$p " out || { echo "FAIL demo: no row for policy $p"; fail=1; }
  grep -q "id='p-$p'" report.html || { echo "FAIL demo: no section for $p in report.html"; fail=1; }
done
grep -q "^report: $dir/report.html" out || grep -q "^report: .*/report.html" out || { echo "FAIL demo: does not say where the report is"; fail=1; }
head -c 15 report.html | grep -q "<!DOCTYPE html>" || { echo "FAIL demo: report.html is not HTML"; fail=1; }
grep -q "<script\|https\?://" report.html && { echo "FAIL demo: report.html is not self-contained"; fail=1; }
ls report.html.tmp* > /dev/null 2>&1 && { echo "FAIL demo: temporary file left behind"; fail=1; }

"$HBM" demo --steps 2 --json --html other.html > json 2> err || { echo "FAIL demo --json"; cat err; fail=1; }
grep -q '"policies":\[' json || { echo "FAIL demo --json: no policies"; cat json; fail=1; }
grep -q '"report":".*other.html"' json || { echo "FAIL demo --json: no report path"; fail=1; }
[ -s other.html ] || { echo "FAIL demo --html: nothing written"; fail=1; }

# A first failure has one shape in every report: demo's is replay's.
if command -v python3 > /dev/null; then
  "$HBM" demo --steps 2 --capacity 73.6GiB --policy zoned,caching --json --html tight.html > json 2> err
  python3 - json <<'PY' || { echo "FAIL demo --json: first failure's shape"; cat json; fail=1; }
import json, sys
d = json.load(open(sys.argv[1]))
ooms = [p["oom"] for p in d["policies"]]
assert any(ooms), ooms
for o in ooms:
    assert o is None or sorted(o) == sorted(["event", "step", "request", "free_total", "largest_free",
                                             "fragmentation", "allocated", "limit", "cause", "refused_too"]), o
assert d["report"].endswith("tight.html"), d["report"]
PY
fi

"$HBM" demo --help | grep -q -- "--html" || { echo "FAIL demo --help"; fail=1; }
"$HBM" demo input.trace > /dev/null 2> err; rc=$?
[ $rc -eq 2 ] && grep -q "no input files" err || { echo "FAIL demo with an argument: exit $rc"; fail=1; }
"$HBM" demo --policy nosuch > /dev/null 2> err; rc=$?
[ $rc -eq 2 ] && grep -q "nosuch" err || { echo "FAIL demo --policy nosuch: exit $rc"; fail=1; }
"$HBM" demo --steps 0 > /dev/null 2>&1; [ $? -eq 2 ] || { echo "FAIL demo --steps 0: expected exit 2"; fail=1; }
"$HBM" demo --frobnicate > /dev/null 2>&1; [ $? -eq 2 ] || { echo "FAIL demo --frobnicate: expected exit 2"; fail=1; }
# a capacity below the static state points to demo's --capacity and to gen llm's
# split options with hbm replay, not to options demo does not have
"$HBM" demo --capacity 10GiB --html small.html > /dev/null 2> err; rc=$?
[ $rc -eq 2 ] && grep -q "give a larger --capacity, or split the model with hbm gen llm --preset 910c-dense (--tp.*hbm replay" err ||
  { echo "FAIL demo --capacity 10GiB: exit $rc: $(cat err)"; fail=1; }
# the trace is held in memory: a million steps (1.6 TiB) are refused up front,
# naming the memory and the steps that fit, not left to grow until the OOM killer
"$HBM" demo --steps 1000000 --html big.html > /dev/null 2> err; rc=$?
[ $rc -eq 2 ] && grep -q "host memory, more than the .* available; give --steps [0-9]* or fewer" err ||
  { echo "FAIL demo --steps 1000000: exit $rc, expected 2 naming host memory: $(cat err)"; fail=1; }
[ -e big.html ] && { echo "FAIL demo --steps 1000000: wrote a report"; fail=1; }
exit $fail
