#!/bin/sh
# Runs every test: the C test programs in BUILD/tests, the fuzz targets over
# their regression corpus (fuzz/corpus/NAME; a target whose corpus is missing
# or holds no file fails), and the CLI scripts in tests/cli/*.sh.
# A program passes with exit 0, is skipped with exit 77, fails otherwise.
# Ends with the plain line "N passed, N failed, N skipped".
# Usage: tests/run.sh BUILD_DIR [FILTER...]   (runs tests whose name contains any FILTER;
#        a FILTER =NAME runs the test NAME only)
# Tests run HBM_TEST_JOBS at a time (default: the machine's processors), each
# line said as its test ends; no test depends on another, nor on how long it
# takes. HBM_TEST_JOBS=1 runs them one by one, in order.
# HBM_TEST_WRAP, when set, is a command every test program, fuzz target and
# hbm run of the CLI scripts runs under (make check VALGRIND=1 sets it to
# valgrind's memcheck, which then fails a test with exit 99 on any error).

if [ "${1:-}" = "--one" ]; then # one test: --one LOGDIR NAME KIND PATH CORPUS
  logdir=$2 name=$3 kind=$4 path=$5 corpus=$6
  wrap=${HBM_TEST_WRAP:-}
  start=$(date +%s)
  case "$kind" in
    test) $wrap "$path" ;;
    fuzz) # a corpus missing or empty is a broken tree, not a pass
      if [ ! -d "$corpus" ]; then
        echo "run.sh: $(basename "$path") has no regression corpus: $corpus is missing"; false
      elif [ -z "$(find "$corpus" -type f ! -name '.*' | head -n 1)" ]; then
        echo "run.sh: $(basename "$path")'s regression corpus $corpus holds no input"; false
      else
        $wrap "$path" "$corpus"
      fi ;;
    cli) sh "$path" ;;
  esac >"$logdir/$name.log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  if [ $rc -eq 0 ]; then
    said="PASS $name (${secs}s)"
  elif [ $rc -eq 77 ]; then
    said="SKIP $name: $(tail -n 1 "$logdir/$name.log")"
  else
    said="FAIL $name (exit $rc, ${secs}s); last lines of $logdir/$name.log:
$(tail -n 15 "$logdir/$name.log" | sed 's/^/    /')"
  fi
  printf '%s\n' "$said" > "$logdir/$name.result"
  printf '%s\n' "$said" # one write: the lines of tests that end together do not mix
  exit 0
fi

build=${1:-build}
[ $# -gt 0 ] && shift
filters="$*"
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$build" && pwd)
logdir="$build/test-logs"
mkdir -p "$logdir"
rm -f "$logdir"/*.result
jobs=${HBM_TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
case "$jobs" in
  '' | *[!0-9]* | 0) echo "run.sh: HBM_TEST_JOBS must be a count of 1 or more, got '$jobs'" >&2; exit 2 ;;
esac
export HBM="$build/hbm" HBM_ROOT="$root" HBM_BUILD="$build"
if [ -n "${HBM_TEST_WRAP:-}" ]; then
  # The CLI scripts run "$HBM": point it at a script that runs hbm under the wrapper.
  export HBM="$build/hbm-wrapped"
  printf '#!/bin/sh\nexec %s "%s" "$@"\n' "$HBM_TEST_WRAP" "$build/hbm" > "$HBM"
  chmod +x "$HBM"
fi

picked() { # name: whether the filters take it
  [ -z "$filters" ] && return 0
  for f in $filters; do
    case "$f" in
      =*) [ "$name" = "${f#=}" ] && return 0 ;;
      *) case "$name" in *"$f"*) return 0 ;; esac ;;
    esac
  done
  return 1
}

# The tests, in order: five NUL-ended words each (paths may hold spaces),
# handed to --one by xargs.
list="$logdir/tests.list"
: > "$list"
names=""
add() { # name kind path corpus
  name=$1
  picked || return 0
  printf '%s\0' "$logdir" "$@" >> "$list"
  names="$names $name"
}
for t in "$build"/tests/test_*; do
  [ -x "$t" ] || continue
  add "$(basename "$t")" test "$t" -
done
for f in "$build"/fuzz/fuzz_*; do
  [ -x "$f" ] || continue
  name=$(basename "$f")
  add "$name-corpus" fuzz "$f" "$root/fuzz/corpus/${name#fuzz_}"
done
for s in "$root"/tests/cli/*.sh; do
  [ -f "$s" ] || continue
  add "cli_$(basename "$s" .sh)" cli "$s" -
done
[ -s "$list" ] && xargs -0 -n 5 -P "$jobs" sh "$self" --one < "$list"

passed=0; failed=0; skipped=0; failures=""
for name in $names; do
  case "$(head -c 4 "$logdir/$name.result" 2>/dev/null)" in
    PASS) passed=$((passed + 1)) ;;
    SKIP) skipped=$((skipped + 1)) ;;
    *) failed=$((failed + 1)); failures="$failures $name" ;; # FAIL, or never ran to its end
  esac
done
[ -n "$failures" ] && echo "failed:$failures"
echo "$passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
