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
# without --capacity and --steps, the figures are the preset's: 96 GiB for
# 910c-dense, 200 steps for 7b-1gpu-80g
grep -q '"capacity":103079215104,' json || { echo "FAIL demo --json: not the preset's capacity"; head -c 400 json; fail=1; }
"$HBM" demo --preset 7b-1gpu-80g --policy bestfit --json --html preset.html > json 2> err &&
  grep -q '"steps":200,' json && grep -q '^{"workload":"7b-1gpu-80g: .*, 200 steps, seed 1",' json ||
  { echo "FAIL demo --preset 7b-1gpu-80g --json: not the preset's steps"; head -c 400 json; cat err; fail=1; }

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
  # demo's figures are gen llm's and replay's for the same workload: the header
  # from the closed form and the trace, each policy's figures from a replay
  # sampled as demo samples (about 20000 times: every 5th of its 113151 events)
  "$HBM" gen llm --preset 910c-dense --steps 2 --capacity 73.6GiB -o tight.trace > /dev/null 2>&1 &&
    "$HBM" gen llm --preset 910c-dense --steps 2 --capacity 73.6GiB --estimate --json > est.json 2>&1 &&
    "$HBM" replay tight.trace --policy zoned,caching --capacity 73.6GiB --every 5 --json --html replay.html > replay.json 2>&1 &&
    python3 - json est.json replay.json <<'PY' || { echo "FAIL demo --json: figures against gen llm and replay"; cat json; fail=1; }
import json, sys
d, est, rep = (json.load(open(p)) for p in sys.argv[1:4])
assert d["workload"] == est["workload"], (d["workload"], est["workload"])
assert d["capacity"] == est["capacity"] == rep["capacity"] == 79026978816, d["capacity"]
assert (d["events"], d["steps"], d["peak_live"]) == (rep["events"], 2, rep["peak_live"]), d
assert d["peak_estimate"] == est["peak_estimate"] != est["peak_at_seq_max"], (d["peak_estimate"], est)
assert d["largest_comm_request"] == est["bucket_max_bytes"], d["largest_comm_request"]
assert [p["policy"] for p in d["policies"]] == [p["policy"] for p in rep["policies"]] == ["zoned", "caching"]
for p, r in zip(d["policies"], rep["policies"]):
    for k, v in p.items():
        assert k == "diagnosis" or r[k] == v, (p["policy"], k, v, r[k])
    assert p["diagnosis"].startswith("No request failed") == (p["oom"] is None), p["diagnosis"]
assert d["policies"][1]["oom"] and d["policies"][1]["oom"]["free_total"] != d["policies"][1]["oom"]["largest_free"]
PY
  # the pages' sections agree too, but for the time per event: each layout
  # drawn where replay draws it (the first failure, else the tightest moment).
  # sections.py DEMO REPLAY HEADING...: the policies' sections alike, each
  # heading in them once
  cat > sections.py <<'PY'
import re, sys
def sections(path):
    s = open(path).read()
    return re.sub(r"\d+ ns per event", "", s[s.index("<h2 id='p-"):s.index("<footer")])
demo, replay = sections(sys.argv[1]), sections(sys.argv[2])
assert demo == replay, "the sections differ"
for heading in sys.argv[3:]:
    assert demo.count(heading) == 1, heading
PY
  python3 sections.py tight.html replay.html \
    "<h3>Layout at the tightest moment sampled after steps 0 and 1 (step 2," \
    "<h3>Layout at the first failure (step 2, a 1.12 GiB request" ||
    { echo "FAIL demo's page: policy sections apart from replay's"; fail=1; }
  # at 72 GiB caching's tightest moment sampled is not its first failure (at
  # 73.6 GiB it is the event after): the layout drawn is still the failure's
  "$HBM" gen llm --preset 910c-dense --steps 2 --capacity 72GiB -o t72.trace > /dev/null 2>&1 &&
    "$HBM" demo --steps 2 --capacity 72GiB --policy caching --html d72.html > /dev/null 2>&1 &&
    "$HBM" replay t72.trace --policy caching --capacity 72GiB --every 5 --html r72.html > /dev/null 2>&1 &&
    python3 sections.py d72.html r72.html "<h3>Layout at the first failure (" ||
    { echo "FAIL demo's page at 72 GiB: caching's section apart from replay's"; fail=1; }
  # and the text table says the same first failure: step, request, free total, largest free, cause
  "$HBM" demo --steps 2 --capacity 73.6GiB --policy zoned,caching --html tight.html > out 2> err
  python3 - out json <<'PY' || { echo "FAIL demo: the table's first failure"; cat out; fail=1; }
import json, re, sys
text, d = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))
def size(v):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if v >= 1 << shift: return "%.2f %s" % (v / (1 << shift), unit)
    return "%d B" % v
o = d["policies"][1]["oom"]
row = re.search(r"^caching .*\| step (\d+) +([\d.]+ \w+) +([\d.]+ \w+) +([\d.]+ \w+)  (\w+)$", text, re.M)
assert row and row.groups() == (str(o["step"]), size(o["request"]), size(o["free_total"]), size(o["largest_free"]),
                                o["cause"]), (row and row.groups(), o)
assert re.search(r"^zoned .*\| none +- +- +-  -$", text, re.M), text
# the max fragmentation ratio as replay's table and the page give it: three decimals
for p in d["policies"]:
    cols = re.search(r"^%s +[\d.]+ \w+ +[\d.]+ +(\S+) \|" % p["policy"], text, re.M)
    assert cols and cols.group(1) == "%.3f" % p["max_frag"], (cols and cols.group(1), p["max_frag"])
table = text.split("\n\n")[1].split("\n")  # the header, a row per policy
assert [line.split()[0] for line in table[1:]] == ["zoned", "caching"], table
PY
  # sizes that round alike are given in bytes, as replay gives them: at 2 MiB
  # below bestfit's smallest capacity (hbm mincap) its first failure is a
  # 1.09 GiB request beside a largest free block of 1.09 GiB, in the table, the
  # words and the page's layout heading alike
  "$HBM" demo --steps 2 --capacity 80331407360 --policy bestfit --html round.html > out 2> err &&
    "$HBM" demo --steps 2 --capacity 80331407360 --policy bestfit --json --html round.html > json 2>> err &&
    python3 - out json round.html <<'PY' || { echo "FAIL demo: sizes that round alike"; cat out err; fail=1; }
import json, re, sys
text, d, page = open(sys.argv[1]).read(), json.load(open(sys.argv[2])), open(sys.argv[3]).read()
o = d["policies"][0]["oom"]
req, free, largest = ("%d B" % o[k] for k in ("request", "free_total", "largest_free"))
assert "%.2f GiB" % (o["request"] / 2**30) == "%.2f GiB" % (o["largest_free"] / 2**30) != "%.2f GiB" % (
    o["free_total"] / 2**30) and o["request"] != o["largest_free"], o  # the case this checks
row = re.search(r"^bestfit .*\| step 2 +(\d+ B) (\d+ B) (\d+ B)  fragmentation$", text, re.M)
assert row and row.groups() == (req, free, largest), (row and row.groups(), o)
assert "At step 2 a %s request failed with %s free in total" % (req, free) in text, text
assert "but the largest free block only %s: fragmentation" % largest in text, text
assert "<h3>Layout at the first failure (step 2, a %s request, largest free %s)</h3>" % (req, largest) in page
PY
fi
# Every option given: the page's command reproduces the run (the capacity in
# bytes, whole 2 MiB granules), the seed reaches the workload, the title names
# the preset and capacity; a default run's command names only what was given.
grep -q "Reproduce: <span class='mono'>hbm demo --steps 3</span>" report.html ||
  { echo "FAIL demo: the page's command: $(grep -o "Reproduce: <span class='mono'>[^<]*" report.html)"; fail=1; }
"$HBM" demo --preset 7b-1gpu-80g --steps 1 --seed 3 --capacity 80GiB --policy bestfit,caching --html seven.html > out 2> err
rc=$?
[ $rc -eq 0 ] && grep -q "Reproduce: <span class='mono'>hbm demo --preset 7b-1gpu-80g --steps 1 --seed 3 --capacity 85899345920 --policy bestfit,caching</span>" seven.html &&
  grep -q "<title>hbm demo: 7b-1gpu-80g at 80.00 GiB</title>" seven.html &&
  head -n 1 out | grep -q "^7b-1gpu-80g: .*, 1 step, seed 3$" &&
  grep -q "^capacity 80.00 GiB, [0-9]* events, 1 step, peak live [0-9.]* GiB (closed form [0-9.]* GiB)$" out ||
  { echo "FAIL demo with every option: exit $rc, $(cat out err; grep -o "Reproduce: <span class='mono'>[^<]*" seven.html)"; fail=1; }
"$HBM" gen llm --preset 7b-1gpu-80g --steps 1 --seed 3 --estimate --json > est.json 2>&1
if command -v python3 > /dev/null; then
  python3 - out seven.html est.json <<'PY' || { echo "FAIL demo: closed-form figures in the table's header and the page's notes"; fail=1; }
import json, re, sys
text, page, est = open(sys.argv[1]).read(), open(sys.argv[2]).read(), json.load(open(sys.argv[3]))
gib = lambda v: "%.2f GiB" % (v / (1 << 30))
assert "(closed form %s)\n" % gib(est["peak_estimate"]) in text, text
assert "closed-form peak live %s (%s), %s with every sequence at its maximum length" % (
    gib(est["peak_estimate"]), est["peak_phase"], gib(est["peak_at_seq_max"])) in page
assert est["peak_estimate"] != est["peak_at_seq_max"]
PY
fi

"$HBM" demo --help | grep -q -- "--html" || { echo "FAIL demo --help"; fail=1; }
"$HBM" demo input.trace > /dev/null 2> err; rc=$?
[ $rc -eq 2 ] && grep -q "no input files" err || { echo "FAIL demo with an argument: exit $rc"; fail=1; }
"$HBM" demo --policy nosuch > /dev/null 2> err; rc=$?
[ $rc -eq 2 ] && grep -q "nosuch" err || { echo "FAIL demo --policy nosuch: exit $rc"; fail=1; }
"$HBM" demo --preset nosuch > /dev/null 2> err; rc=$?
[ $rc -eq 2 ] && grep -q "unknown preset 'nosuch'" err || { echo "FAIL demo --preset nosuch: exit $rc"; fail=1; }
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
# A layout the page could not draw (the replay up to it made to run out of
# host memory) is said on the page and in the exit, as replay's: 1, not 0.
if command -v gdb > /dev/null 2>&1; then
  printf 'set pagination off\nset confirm off\ntbreak hbm_report_layout_at\nrun\ntbreak hbm_replay\ncontinue\nreturn (int)-7\ncontinue\n' > undrawn.gdb
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" gdb -q -batch -x undrawn.gdb --args "$HBM" demo --preset 7b-1gpu-80g \
    --steps 1 --policy bestfit --jobs 1 --html undrawn.html > undrawn.txt 2>&1
  if ! grep -q 'exited with code 0[12]\|exited normally' undrawn.txt; then
    echo "skip a layout not drawn: gdb could not run hbm: $(tail -1 undrawn.txt)"
  elif grep -q 'exited with code 01' undrawn.txt && grep -q "layout at event [0-9]* is not drawn: out of host memory" undrawn.txt &&
    grep -q "its layout at the tightest moment was not drawn: out of host memory" undrawn.html; then
    echo "ok   a layout not drawn: said, and exit 1"
  else
    echo "FAIL a layout not drawn:"; tail -3 undrawn.txt; fail=1
  fi
else
  echo "skip a layout not drawn: no gdb"
fi
exit $fail
