#!/bin/sh
# Runs every test: the C test programs in BUILD/tests, the fuzz targets over
# their regression corpus, and the CLI scripts in tests/cli/*.sh.
# A program passes with exit 0, is skipped with exit 77, fails otherwise.
# Ends with the plain line "N passed, N failed, N skipped".
# Usage: tests/run.sh BUILD_DIR [FILTER...]   (runs tests whose name contains any FILTER;
#        a FILTER =NAME runs the test NAME only)
# HBM_TEST_WRAP, when set, is a command every test program, fuzz target and
# hbm run of the CLI scripts runs under (make check VALGRIND=1 sets it to
# valgrind's memcheck, which then fails a test with exit 99 on any error).
build=${1:-build}
[ $# -gt 0 ] && shift
filters="$*"
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$build" && pwd)
logdir="$build/test-logs"
mkdir -p "$logdir"
passed=0; failed=0; skipped=0; failures=""
export HBM="$build/hbm" HBM_ROOT="$root" HBM_BUILD="$build"
wrap=${HBM_TEST_WRAP:-}
if [ -n "$wrap" ]; then
  # The CLI scripts run "$HBM": point it at a script that runs hbm under the wrapper.
  export HBM="$build/hbm-wrapped"
  printf '#!/bin/sh\nexec %s "%s" "$@"\n' "$wrap" "$build/hbm" > "$HBM"
  chmod +x "$HBM"
fi

run_one() { # name, command...
  name=$1; shift
  if [ -n "$filters" ]; then
    match=0
    for f in $filters; do
      case "$f" in
        =*) [ "$name" = "${f#=}" ] && match=1 ;;
        *) case "$name" in *"$f"*) match=1 ;; esac ;;
      esac
    done
    [ $match -eq 1 ] || return
  fi
  start=$(date +%s)
  "$@" >"$logdir/$name.log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  if [ $rc -eq 0 ]; then
    passed=$((passed + 1)); echo "PASS $name (${secs}s)"
  elif [ $rc -eq 77 ]; then
    skipped=$((skipped + 1)); echo "SKIP $name: $(tail -n 1 "$logdir/$name.log")"
  else
    failed=$((failed + 1)); failures="$failures $name"
    echo "FAIL $name (exit $rc, ${secs}s); last lines of $logdir/$name.log:"
    tail -n 15 "$logdir/$name.log" | sed 's/^/    /'
  fi
}

for t in "$build"/tests/test_*; do
  [ -x "$t" ] || continue
  run_one "$(basename "$t")" $wrap "$t"
done
for f in "$build"/fuzz/fuzz_*; do
  [ -x "$f" ] || continue
  name=$(basename "$f")
  corpus="$root/fuzz/corpus/${name#fuzz_}"
  [ -d "$corpus" ] || continue
  run_one "$name-corpus" $wrap "$f" "$corpus"
done
for s in "$root"/tests/cli/*.sh; do
  [ -f "$s" ] || continue
  run_one "cli_$(basename "$s" .sh)" sh "$s"
done

[ -n "$failures" ] && echo "failed:$failures"
echo "$passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
