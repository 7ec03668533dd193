#!/bin/sh
# Bad snapshots: hbm import and hbm fidelity exit 2 and say what is wrong and
# where (the file, and the byte offset or the entry), and write nothing.
set -u
fail=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
bad="$HBM_ROOT/tests/fixtures/snapshots/bad"

expect() { # name, file, expected-substring
  for cmd in import fidelity; do
    if [ $cmd = import ]; then
      "$HBM" import "$2" -o "$dir/out.trace" > /dev/null 2> "$dir/err"
    else
      "$HBM" fidelity "$2" > /dev/null 2> "$dir/err"
    fi
    rc=$?
    if [ $rc -ne 2 ]; then echo "FAIL $1 ($cmd): exit $rc, expected 2"; cat "$dir/err"; fail=1; continue; fi
    if ! grep -q "$2: .*$3" "$dir/err"; then
      echo "FAIL $1 ($cmd): message does not name the file and '$3':"; cat "$dir/err"; fail=1; continue
    fi
    if [ -e "$dir/out.trace" ]; then echo "FAIL $1: an output was written"; fail=1; rm -f "$dir/out.trace"; fi
  done
  echo "ok   $1: $(head -1 "$dir/err")"
}

# Pickles the reader refuses: the byte offset is named.
expect truncated        "$bad/truncated_p2.pickle"             "byte [0-9]*: .*truncated"
expect object           "$bad/global_reduce.pickle"            "byte 2: .*GLOBAL"
expect unknown_opcode   "$bad/unknown_opcode.pickle"           "byte 2: .*unknown opcode"
# Pickles that are not snapshots, or miss keys: the entry is named.
expect not_a_dict       "$bad/not_a_dict.pickle"               "top level is a list"
expect no_segments      "$bad/missing_segments.pickle"         "missing 'segments'"
expect no_traces        "$bad/missing_device_traces.pickle"    "missing 'device_traces'"
expect no_blocks        "$bad/segment_without_blocks.pickle"   "segments\[0\]: missing 'blocks'"
expect no_addr          "$bad/trace_entry_without_addr.pickle" "device_traces\[0\]\[3\] (free_completed): missing 'addr'"

# A snapshot packed in something the reader does not open: said so, not read
# as a text trace with a NUL byte, nor as a pickle of an unknown protocol.
printf '\037\213\010\000\000\000\000\000' > "$dir/snap.pickle.gz"
expect gzip             "$dir/snap.pickle.gz"                  "byte 0: compressed with gzip: decompress it first"
printf '\050\265\057\375\000' > "$dir/snap.pickle.zst"
expect zstd             "$dir/snap.pickle.zst"                 "byte 0: compressed with zstd"
printf 'PK\003\004\000\000' > "$dir/snap.pt"
expect zip              "$dir/snap.pt"                         "byte 0: a zip archive (as torch.save writes), not a memory snapshot"
"$HBM" replay "$dir/snap.pickle.gz" --capacity 1GiB > /dev/null 2> "$dir/err"; rc=$?
[ $rc -eq 2 ] && grep -q "snap.pickle.gz: byte 0: compressed with gzip" "$dir/err" ||
  { echo "FAIL replay of a gzip file: exit $rc, $(cat "$dir/err")"; fail=1; }

# Frees the snapshot cannot account for (small snapshots made for this test).
echo 'gAJ9cQAoWAgAAABzZWdtZW50c3EBXXECWA0AAABkZXZpY2VfdHJhY2VzcQNdcQRdcQV9cQYoWAYAAABhY3Rpb25xB1gOAAAAZnJlZV9jb21wbGV0ZWRxCFgEAAAAYWRkcnEJigYAEAAAAH9YBAAAAHNpemVxCk0AAlgGAAAAc3RyZWFtcQtLAHVhYXUu' \
  | base64 -d > "$dir/unknown_free.pickle"
expect unknown_free "$dir/unknown_free.pickle" "device_traces\[0\]\[0\] (free_completed): free of 0x7f0000001000, which no allocation in the trace made and no segment at the start holds"
echo 'gAJ9cQAoWAgAAABzZWdtZW50c3EBXXECfXEDKFgGAAAAZGV2aWNlcQRLAFgHAAAAYWRkcmVzc3EFigYAAAAAAH9YCgAAAHRvdGFsX3NpemVxBkoAACAAWAYAAABzdHJlYW1xB0sAWAwAAABzZWdtZW50X3R5cGVxCFgFAAAAc21hbGxxCVgGAAAAYmxvY2tzcQpdcQt9cQwoaAWKBgAAAAAAf1gEAAAAc2l6ZXENSgAAIABYDgAAAHJlcXVlc3RlZF9zaXplcQ5LAFgFAAAAc3RhdGVxD1gIAAAAaW5hY3RpdmVxEHVhdWFYDQAAAGRldmljZV90cmFjZXNxEV1xEl1xEyh9cRQoWAYAAABhY3Rpb25xFVgFAAAAYWxsb2NxFlgEAAAAYWRkcnEXigYAAAAAAH9oDU0AAmgHSwB1fXEYKGgVWA4AAABmcmVlX2NvbXBsZXRlZHEZaBeKBgAAAAAAf2gNTQACaAdLAHV9cRooaBVoGWgXigYAAAAAAH9oDU0AAmgHSwB1ZWF1Lg==' \
  | base64 -d > "$dir/double_free.pickle"
expect double_free "$dir/double_free.pickle" "device_traces\[0\]\[2\] (free_completed): free of 0x7f0000000000, which no allocation holds"

echo 'gAJ9cQAoWAgAAABzZWdtZW50c3EBXXECWA0AAABkZXZpY2VfdHJhY2VzcQNdcQRdcQV9cQYoWAYAAABhY3Rpb25xB0sBWAQAAABhZGRycQhNABBYBAAAAHNpemVxCU0AAlgGAAAAc3RyZWFtcQpLAHVhYXUu' \
  | base64 -d > "$dir/int_action.pickle"
expect int_action "$dir/int_action.pickle" "device_traces\[0\]\[0\]: 'action' has type int, expected a str"

# Values no recording has: a block state PyTorch does not have, a request
# larger than its block, a segment past 1 PiB, a segment type or device
# index PyTorch has none of.
echo 'gAJ9cQAoWAgAAABzZWdtZW50c3EBXXECfXEDKFgGAAAAZGV2aWNlcQRLAFgHAAAAYWRkcmVzc3EFigYAAAAAAH9YCgAAAHRvdGFsX3NpemVxBkoAACAAWAYAAABzdHJlYW1xB0sAWAwAAABzZWdtZW50X3R5cGVxCFgFAAAAbGFyZ2VxCVgGAAAAYmxvY2tzcQpdcQt9cQwoWAQAAABzaXplcQ1KAAAgAFgFAAAAc3RhdGVxDlgFAAAAd2VpcmRxD2gFigYAAAAAAH91YXVhWA0AAABkZXZpY2VfdHJhY2VzcRBdcRFdcRJhdS4=' \
  | base64 -d > "$dir/weird_state.pickle"
expect weird_state "$dir/weird_state.pickle" "segments\\[0\\].blocks\\[0\\]: state 'weird': expected active_allocated, active_pending_free or inactive"
echo 'gAJ9cQAoWAgAAABzZWdtZW50c3EBXXECfXEDKFgGAAAAZGV2aWNlcQRLAFgHAAAAYWRkcmVzc3EFigYAAAAAAH9YCgAAAHRvdGFsX3NpemVxBkoAACAAWAYAAABzdHJlYW1xB0sAWAwAAABzZWdtZW50X3R5cGVxCFgFAAAAbGFyZ2VxCVgGAAAAYmxvY2tzcQpdcQsofXEMKFgEAAAAc2l6ZXENSgAAEABYDgAAAHJlcXVlc3RlZF9zaXplcQ5KAQAQAFgFAAAAc3RhdGVxD1gQAAAAYWN0aXZlX2FsbG9jYXRlZHEQaAWKBgAAAAAAf3V9cREoaA1KAAAQAGgPWAgAAABpbmFjdGl2ZXESaAWKBgAAEAAAf3VldWFYDQAAAGRldmljZV90cmFjZXNxE11xFF1xFWF1Lg==' \
  | base64 -d > "$dir/request_over_block.pickle"
expect request_over_block "$dir/request_over_block.pickle" "segments\\[0\\].blocks\\[0\\]: requested_size 1048577 is more than the block's size 1048576"
echo 'gAJ9cQAoWAgAAABzZWdtZW50c3EBXXECfXEDKFgGAAAAZGV2aWNlcQRLAFgHAAAAYWRkcmVzc3EFigYAAAAAAH9YCgAAAHRvdGFsX3NpemVxBooIAAAAAAAAAEBYBgAAAHN0cmVhbXEHSwBYDAAAAHNlZ21lbnRfdHlwZXEIWAUAAABsYXJnZXEJWAYAAABibG9ja3NxCl1xC31xDChYBAAAAHNpemVxDYoIAAAAAAAAAEBYBQAAAHN0YXRlcQ5YCAAAAGluYWN0aXZlcQ9oBYoGAAAAAAB/dWF1YVgNAAAAZGV2aWNlX3RyYWNlc3EQXXERXXESYXUu' \
  | base64 -d > "$dir/segment_past_pib.pickle"
expect segment_past_pib "$dir/segment_past_pib.pickle" "segments\\[0\\]: total_size 4611686018427387904 is more than the 1 PiB a trace holds"

echo 'gAJ9cQAoWAgAAABzZWdtZW50c3EBXXECfXEDKFgGAAAAZGV2aWNlcQRLAFgHAAAAYWRkcmVzc3EFigYAAAAAAH9YCgAAAHRvdGFsX3NpemVxBkoAACAAWAYAAABzdHJlYW1xB0sAWAwAAABzZWdtZW50X3R5cGVxCFgBAAAAeHEJWAYAAABibG9ja3NxCl1xC31xDChYBAAAAHNpemVxDUoAACAAWAUAAABzdGF0ZXEOWAgAAABpbmFjdGl2ZXEPaAWKBgAAAAAAf3VhdWFYDQAAAGRldmljZV90cmFjZXNxEF1xEV1xEmF1Lg==' \
  | base64 -d > "$dir/bad_segment_type.pickle"
expect bad_segment_type "$dir/bad_segment_type.pickle" "segments\\[0\\]: segment_type 'x': expected small or large"
echo 'gAJ9cQAoWAgAAABzZWdtZW50c3EBXXECfXEDKFgGAAAAZGV2aWNlcQRK/////1gHAAAAYWRkcmVzc3EFigYAAAAAAH9YCgAAAHRvdGFsX3NpemVxBkoAACAAWAYAAABzdHJlYW1xB0sAWAwAAABzZWdtZW50X3R5cGVxCFgFAAAAbGFyZ2VxCVgGAAAAYmxvY2tzcQpdcQt9cQwoWAQAAABzaXplcQ1KAAAgAFgFAAAAc3RhdGVxDlgIAAAAaW5hY3RpdmVxD2gFigYAAAAAAH91YXVhWA0AAABkZXZpY2VfdHJhY2VzcRBdcRFdcRJhdS4=' \
  | base64 -d > "$dir/negative_device.pickle"
expect negative_device "$dir/negative_device.pickle" "segments\\[0\\]: device -1: expected a device index, 0 or more"
# a segment off the 512-byte grid, a block that does not follow the one before,
# a collection threshold of 1 (PyTorch takes 0 < T < 1)
echo 'gAJ9cQAoWAgAAABzZWdtZW50c3EBXXECfXEDKFgGAAAAZGV2aWNlcQRLAFgHAAAAYWRkcmVzc3EFigYAAQAAAH9YCgAAAHRvdGFsX3NpemVxBkoAACAAWAYAAABzdHJlYW1xB0sAWAwAAABzZWdtZW50X3R5cGVxCFgFAAAAbGFyZ2VxCVgGAAAAYmxvY2tzcQpdcQt9cQwoWAQAAABzaXplcQ1KAAAgAFgFAAAAc3RhdGVxDlgIAAAAaW5hY3RpdmVxD3VhdWFYDQAAAGRldmljZV90cmFjZXNxEF1xEV1xEmF1Lg==' \
  | base64 -d > "$dir/unaligned_segment.pickle"
expect unaligned_segment "$dir/unaligned_segment.pickle" "segments\\[0\\]: total_size 2097152 at 0x7f0000000100: expected a positive multiple of 512 bytes on a 512-byte boundary"
echo 'gAJ9cQAoWAgAAABzZWdtZW50c3EBXXECfXEDKFgGAAAAZGV2aWNlcQRLAFgHAAAAYWRkcmVzc3EFigYAAAAAAH9YCgAAAHRvdGFsX3NpemVxBkoAAEAAWAYAAABzdHJlYW1xB0sAWAwAAABzZWdtZW50X3R5cGVxCFgFAAAAbGFyZ2VxCVgGAAAAYmxvY2tzcQpdcQsofXEMKFgEAAAAc2l6ZXENSgAAIABYBQAAAHN0YXRlcQ5YCAAAAGluYWN0aXZlcQ9oBYoGAAAAAAB/dX1xEChoDUoAACAAaA5oD2gFigYAADAAAH91ZXVhWA0AAABkZXZpY2VfdHJhY2VzcRFdcRJdcRNhdS4=' \
  | base64 -d > "$dir/block_gap.pickle"
expect block_gap "$dir/block_gap.pickle" "segments\\[0\\].blocks\\[1\\]: block 0x7f0000300000+2097152 does not follow the previous block at 0x7f0000200000"
echo 'gAJ9cQAoWAgAAABzZWdtZW50c3EBXXECWA0AAABkZXZpY2VfdHJhY2VzcQNdcQRdcQVhWBIAAABhbGxvY2F0b3Jfc2V0dGluZ3NxBn1xB1gcAAAAZ2FyYmFnZV9jb2xsZWN0aW9uX3RocmVzaG9sZHEIRz/wAAAAAAAAc3Uu' \
  | base64 -d > "$dir/gc_threshold_one.pickle"
expect gc_threshold_one "$dir/gc_threshold_one.pickle" "allocator_settings: 'garbage_collection_threshold' is not a number in \\[0, 1)"
# settings PyTorch would have refused: a damaged recording, not settings to drop
echo 'gAJ9cQAoWAgAAABzZWdtZW50c3EBXXECWA0AAABkZXZpY2VfdHJhY2VzcQNdcQRdcQVhWBIAAABhbGxvY2F0b3Jfc2V0dGluZ3NxBn1xB1gcAAAAZ2FyYmFnZV9jb2xsZWN0aW9uX3RocmVzaG9sZHEIR0AUAAAAAAAAc3Uu' \
  | base64 -d > "$dir/bad_setting.pickle"
expect bad_setting "$dir/bad_setting.pickle" "allocator_settings: 'garbage_collection_threshold' is not a number in \\[0, 1)"

# Two allocations live at once whose ranges share bytes (in a small segment of
# the start): a damaged recording (PyTorch never hands out a byte twice), at the
# later entry, naming the other.
echo 'gAJ9cQAoWAgAAABzZWdtZW50c3EBXXECfXEDKFgGAAAAZGV2aWNlcQRLAFgHAAAAYWRkcmVzc3EFigYAAAAAAH9YCgAAAHRvdGFsX3NpemVxBkoAACAAWAYAAABzdHJlYW1xB0sAWAwAAABzZWdtZW50X3R5cGVxCFgFAAAAc21hbGxxCVgGAAAAYmxvY2tzcQpdcQt9cQwoaAWKBgAAAAAAf1gEAAAAc2l6ZXENSgAAIABYBQAAAHN0YXRlcQ5YCAAAAGluYWN0aXZlcQ91YXVhWA0AAABkZXZpY2VfdHJhY2VzcRBdcRFdcRIofXETKFgGAAAAYWN0aW9ucRRYBQAAAGFsbG9jcRVYBAAAAGFkZHJxFooGAAAAAAB/aA1NAARoB0sAdX1xFyhoFGgVaBaKBgACAAAAf2gNTQACaAdLAHVlYXUu' \
  | base64 -d > "$dir/overlap.pickle"
expect overlap "$dir/overlap.pickle" "device_traces\[0\]\[1\] (alloc): its recorded range \[0x7f0000000200, 0x7f0000000400) overlaps the block \[0x7f0000000000, 0x7f0000000400) (device_traces\[0\]\[0\]), live at once"
# ... the same bytes after the first one's free_completed are fine
echo 'gAJ9cQAoWAgAAABzZWdtZW50c3EBXXECfXEDKFgGAAAAZGV2aWNlcQRLAFgHAAAAYWRkcmVzc3EFigYAAAAAAH9YCgAAAHRvdGFsX3NpemVxBkoAACAAWAYAAABzdHJlYW1xB0sAWAwAAABzZWdtZW50X3R5cGVxCFgFAAAAc21hbGxxCVgGAAAAYmxvY2tzcQpdcQt9cQwoaAWKBgAAAAAAf1gEAAAAc2l6ZXENSgAAIABYBQAAAHN0YXRlcQ5YCAAAAGluYWN0aXZlcQ91YXVhWA0AAABkZXZpY2VfdHJhY2VzcRBdcRFdcRIofXETKFgGAAAAYWN0aW9ucRRYBQAAAGFsbG9jcRVYBAAAAGFkZHJxFooGAAAAAAB/aA1NAARoB0sAdX1xFyhoFFgOAAAAZnJlZV9jb21wbGV0ZWRxGGgWigYAAAAAAH9oDU0ABGgHSwB1fXEZKGgUaBVoFooGAAIAAAB/aA1NAAJoB0sAdWVhdS4=' \
  | base64 -d > "$dir/reuse.pickle"
"$HBM" import "$dir/reuse.pickle" -q -o "$dir/reuse.trace" 2> "$dir/err" && "$HBM" fidelity "$dir/reuse.trace" > /dev/null 2>> "$dir/err" ||
  { echo "FAIL a range reused after its free: exit $?"; cat "$dir/err"; fail=1; }

# A free_completed of another size than its alloc's request (PyTorch records
# the request at both).
echo 'gAJ9cQAoWAgAAABzZWdtZW50c3EBXXECWA0AAABkZXZpY2VfdHJhY2VzcQNdcQRdcQUofXEGKFgGAAAAYWN0aW9ucQdYBQAAAGFsbG9jcQhYBAAAAGFkZHJxCYoGAAAAAAB/WAQAAABzaXplcQpNAAJYBgAAAHN0cmVhbXELSwB1fXEMKGgHWA4AAABmcmVlX2NvbXBsZXRlZHENaAmKBgAAAAAAf2gKTQAEaAtLAHVlYXUu' \
  | base64 -d > "$dir/free_size.pickle"
expect free_size "$dir/free_size.pickle" "device_traces\[0\]\[1\] (free_completed): size 1024, but the allocation of 0x7f0000000000 it frees (device_traces\[0\]\[0\]) asked for 512"

# A segment released while a block in it is live (PyTorch releases only free
# blocks).
echo 'gAJ9cQAoWAgAAABzZWdtZW50c3EBXXECWA0AAABkZXZpY2VfdHJhY2VzcQNdcQRdcQUofXEGKFgGAAAAYWN0aW9ucQdYDQAAAHNlZ21lbnRfYWxsb2NxCFgEAAAAYWRkcnEJigYAAAAAAH9YBAAAAHNpemVxCkoAAEABWAYAAABzdHJlYW1xC0sAdX1xDChoB1gFAAAAYWxsb2NxDWgJigYAAAAAAH9oCkoAADAAaAtLAHV9cQ4oaAdYDAAAAHNlZ21lbnRfZnJlZXEPaAmKBgAAAAAAf2gKSgAAQAFoC0sAdWVhdS4=' \
  | base64 -d > "$dir/release_live.pickle"
expect release_live "$dir/release_live.pickle" "device_traces\[0\]\[2\] (segment_free): releases \[0x7f0000000000, 0x7f0001400000) while the block \[0x7f0000000000, 0x7f0000300000) allocated by device_traces\[0\]\[1\] is live"

# An allocation that runs past the end of the segment it starts in.
echo 'gAJ9cQAoWAgAAABzZWdtZW50c3EBXXECWA0AAABkZXZpY2VfdHJhY2VzcQNdcQRdcQUofXEGKFgGAAAAYWN0aW9ucQdYDQAAAHNlZ21lbnRfYWxsb2NxCFgEAAAAYWRkcnEJigYAAAAAAH9YBAAAAHNpemVxCkoAAEABWAYAAABzdHJlYW1xC0sAdX1xDChoB1gFAAAAYWxsb2NxDWgJigYAACABAH9oCkoAADAAaAtLAHVlYXUu' \
  | base64 -d > "$dir/alloc_past_segment.pickle"
expect alloc_past_segment "$dir/alloc_past_segment.pickle" "device_traces\[0\]\[1\] (alloc): its recorded range \[0x7f0001200000, 0x7f0001500000) runs past the end of its segment \[0x7f0000000000, 0x7f0001400000) (reserved by device_traces\[0\]\[0\])"

# An allocation in no segment (of the start, or one the trace reserved): PyTorch
# carves every block inside a segment, so the recording is damaged.
echo 'gAJ9cQAoWAgAAABzZWdtZW50c3EBXXECfXEDKFgGAAAAZGV2aWNlcQRLAFgHAAAAYWRkcmVzc3EFigYAAAAAAH9YCgAAAHRvdGFsX3NpemVxBkoAACAAWAYAAABzdHJlYW1xB0sAWAwAAABzZWdtZW50X3R5cGVxCFgFAAAAc21hbGxxCVgGAAAAYmxvY2tzcQpdcQt9cQwoaAWKBgAAAAAAf1gEAAAAc2l6ZXENSgAAIABYBQAAAHN0YXRlcQ5YCAAAAGluYWN0aXZlcQ91YXVhWA0AAABkZXZpY2VfdHJhY2VzcRBdcRFdcRIofXETKFgGAAAAYWN0aW9ucRRYBQAAAGFsbG9jcRVYBAAAAGFkZHJxFooGAAAAAAB/aA1NAAJoB0sAdX1xFyhoFGgVaBaKBgAAAAQAf2gNSgAAMABoB0sAdWVhdS4=' \
  | base64 -d > "$dir/alloc_no_segment.pickle"
expect alloc_no_segment "$dir/alloc_no_segment.pickle" "device_traces\[0\]\[1\] (alloc): its recorded range \[0x7f0004000000, 0x7f0004300000) lies in no segment"

# A text trace is not a snapshot to import.
printf 'hbm-trace 1\na x 1KiB\n' > "$dir/plain.trace"
"$HBM" import "$dir/plain.trace" -o "$dir/out.trace" > /dev/null 2> "$dir/err"; rc=$?
[ $rc -eq 2 ] && grep -q "not a pickle" "$dir/err" || { echo "FAIL import of a text trace: exit $rc"; cat "$dir/err"; fail=1; }
grep -q "^hbm: $dir/plain.trace: byte 0: not a pickle of protocol 2 to 5 (a PyTorch snapshot starts with the PROTO opcode, 0x80); an hbm text trace needs no import$" "$dir/err" ||
  { echo "FAIL import of a text trace, message: $(cat "$dir/err")"; fail=1; }
# ... and a text trace without recorded addresses has nothing to compare.
"$HBM" fidelity "$dir/plain.trace" > /dev/null 2> "$dir/err"; rc=$?
[ $rc -eq 2 ] && grep -q "no addresses" "$dir/err" || { echo "FAIL fidelity of a plain trace: exit $rc"; cat "$dir/err"; fail=1; }
# A text trace whose free names an unknown block.
printf 'hbm-trace 1\na x 1KiB @0x7f0000000000\nf ghost\n' > "$dir/ghost.trace"
"$HBM" fidelity "$dir/ghost.trace" > /dev/null 2> "$dir/err"; rc=$?
[ $rc -eq 2 ] && grep -q "ghost.trace:3:" "$dir/err" || { echo "FAIL fidelity of an unknown free: exit $rc"; cat "$dir/err"; fail=1; }
exit $fail
