#!/bin/sh
# gpu_check_fidelity.sh: is hbm's model of PyTorch's caching allocator true to
# the PyTorch installed on this machine? Run it on a machine with an NVIDIA GPU
# and torch (not in CI, which has no GPU):
#   sh tools/gpu_check_fidelity.sh [OUTDIR]        (default: fidelity-snapshots/)
#
# Records memory snapshots of two small training jobs (a transformer whose
# sequence length changes every step, and ResNet-50) with
# tools/record_pytorch_snapshot.py, one process per allocator setting:
#   default, expandable_segments:True, max_split_size_mb:64,
#   roundup_power2_divisions:4, a recording that starts mid-run, gradients
#   reduced on a second stream (record_stream) with empty_cache every 2 steps,
#   a memory fraction just above the job's peak (PyTorch frees its cache and
#   retries), and one below it (the job runs out of memory);
# then runs `hbm fidelity --check` on each (same addresses for >= 99% of
# allocations, the same segment allocations, peak reserved within 0.5%, every
# recorded release applied) and `hbm replay` on the one that ran out of memory,
# and prints a table.
# The snapshots stay in OUTDIR for `hbm replay` (--html for the page), `hbm mincap`.
# hbm is $HBM, else build/hbm (built with `make` where missing).
# About a minute on an H200.
# Exit: 0 every snapshot agrees, 1 a disagreement or a failed recording,
# 2 usage, or OUTDIR not empty; 77 no usable GPU or no torch (nothing checked).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
case ${1:-} in
  -h|--help) sed -n '2,/^set -eu/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
  -*) echo "gpu_check_fidelity: unknown option '$1' (usage: sh tools/gpu_check_fidelity.sh [OUTDIR])" >&2; exit 2 ;;
esac
[ $# -le 1 ] || { echo "gpu_check_fidelity: one folder at most (usage: sh tools/gpu_check_fidelity.sh [OUTDIR])" >&2; exit 2; }
out=${1:-fidelity-snapshots}
py=${PYTHON:-python3}
if ! "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu_check_fidelity: no torch with a usable CUDA device ($py)"
  exit 77
fi
if [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
  echo "gpu_check_fidelity: $out is not empty; give a new folder" >&2
  exit 2
fi
mkdir -p "$out"
hbm=${HBM:-$root/build/hbm}
if [ ! -x "$hbm" ]; then
  echo "gpu_check_fidelity: building hbm (make) in the background"
  (cd "$root" && make build >"$out/build.log" 2>&1) &
  build_pid=$!
else
  build_pid=
fi

rec="$root/tools/record_pytorch_snapshot.py"
record() { # NAME CONF ARGS...
  name=$1; conf=$2; shift 2
  PYTORCH_CUDA_ALLOC_CONF=$conf "$py" "$rec" -o "$out/$name.pickle" "$@" >"$out/$name.json" 2>"$out/$name.err" ||
    echo "gpu_check_fidelity: $name: recording failed (rc $?): $(tail -n 3 "$out/$name.err")" >&2
}

echo "gpu_check_fidelity: recording (first round, in parallel)"
record gpt-default "" --workload gpt &
record gpt-midrun "" --workload gpt --record-from 3 &
record gpt-expandable "expandable_segments:True" --workload gpt &
record gpt-max-split "max_split_size_mb:64" --workload gpt &
record gpt-roundup "roundup_power2_divisions:4" --workload gpt &
record gpt-streams "" --workload gpt --side-stream --empty-cache-every 2 &
record resnet-default "" --workload resnet --steps 4 &
record resnet-expandable "expandable_segments:True" --workload resnet --steps 4 &
wait
# The fractions come from the default run's peak: just above it, PyTorch must
# free cached segments and retry; below it, the job runs out of memory.
if [ -s "$out/gpt-default.json" ]; then
  above=$("$py" -c 'import json,sys; j=json.load(open(sys.argv[1])); print("%.4f" % ((j["peak_allocated"]*1.04 + (96<<20)) / j["total_memory"] + 0.00005))' "$out/gpt-default.json")
  below=$("$py" -c 'import json,sys; j=json.load(open(sys.argv[1])); print("%.4f" % (j["peak_allocated"]*0.85 / j["total_memory"]))' "$out/gpt-default.json")
  echo "gpu_check_fidelity: recording (second round: fractions $above and $below)"
  record gpt-fraction-tight "per_process_memory_fraction:$above" --workload gpt &
  record gpt-oom "per_process_memory_fraction:$below" --workload gpt --oom-ok &
  wait
fi
[ -z "$build_pid" ] || wait "$build_pid" || { echo "gpu_check_fidelity: building hbm failed: $out/build.log" >&2; exit 1; }

status=0
printf '%-22s %-34s %9s %9s %8s %11s %10s %s\n' snapshot settings events match segments "peak diff" retries check
for j in "$out"/*.json; do
  name=$(basename "$j" .json)
  case $name in *.fidelity|*.replay) continue ;; esac
  snap="$out/$name.pickle"
  if [ ! -s "$snap" ]; then printf '%-22s recording failed\n' "$name"; status=1; continue; fi
  rc=0
  "$hbm" fidelity "$snap" --check --json >"$out/$name.fidelity.json" 2>"$out/$name.fidelity.err" || rc=$?
  "$py" - "$j" "$out/$name.fidelity.json" "$rc" <<'EOF' || status=1
import json, sys
rec = json.load(open(sys.argv[1]))
try:
    f = json.load(open(sys.argv[2]))
except Exception:
    print("%-22s hbm fidelity exit %s (see .fidelity.err)" % (rec["output"].split("/")[-1][:-7], sys.argv[3]))
    sys.exit(1)
name = rec["output"].split("/")[-1][:-7]
seg = "%d/%d" % (f["segment_allocs_model"], f["segment_allocs_real"])
diff = f["peak_reserved_diff"]
check = f["check"] or {}
# the match cut, not rounded, to four decimals: 1.0000 only where all matched
compared = f["alloc_events"] - f["refused"] - f["unrecorded"]
cut = f["address_matches"] * 10000 // compared if compared else 10000
match = "%d.%04d" % divmod(cut, 10000)
print("%-22s %-34s %9d %9s %8s %11s %10d %s" % (
    name, rec["conf"] or "(default)", f["alloc_events"], match, seg,
    "n/a" if diff is None else "%+.3f%%" % (100 * diff), rec["num_alloc_retries"],
    "passed" if check.get("passed") else "FAILED: " + ", ".join(check.get("failed", []))))
sys.exit(0 if check.get("passed") else 1)
EOF
done
if [ -s "$out/gpt-oom.pickle" ]; then
  echo "gpu_check_fidelity: what PyTorch said: $("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["oom"])' "$out/gpt-oom.json")"
  # At the capacity the recording gives: under a memory fraction, the most
  # PyTorch held (docs/snapshot-import.md), not the GPU's memory.
  echo "gpu_check_fidelity: what hbm says of the same run:"
  "$hbm" replay "$out/gpt-oom.pickle" --policy caching,expandable,zoned --html "$out/gpt-oom.html" || true
fi
echo "gpu_check_fidelity: torch $("$py" -c 'import torch; print(torch.__version__)'); snapshots in $out"
exit $status
