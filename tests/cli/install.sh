#!/bin/sh
# make install's layout works: the README's example (examples/quickstart.c)
# builds against the installed header and libraries with exactly the command
# lines its top comment gives (the README's, for app.c), shared and static,
# and each program starts with no LD_LIBRARY_PATH and prints what the README says.
set -eu
command -v pkg-config >/dev/null || { echo "skip: pkg-config is not installed"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cmake --install "$HBM_BUILD" --prefix "$dir/prefix" > /dev/null
libdir=$(ls -d "$dir"/prefix/lib*/pkgconfig | head -n 1)
test -f "$dir/prefix/include/hbm.h"
test -x "$dir/prefix/bin/hbm"
export PKG_CONFIG_PATH="$libdir"
unset LD_LIBRARY_PATH # the program must find the library by itself
# A sanitizer build installs instrumented libraries: link the example the same
# way. The documented lines run as written; only the compiler they call is
# stricter (and instrumented where the build is).
san=$(sed -n 's/^HBM_SANITIZE:STRING=//p' "$HBM_BUILD/CMakeCache.txt")
case "$san" in
  address) sanflags="-fsanitize=address,undefined" ;;
  thread) sanflags="-fsanitize=thread" ;;
  memory) sanflags="-fsanitize=memory" ;;
  *) sanflags="" ;;
esac
compiler=cc
[ "$san" = memory ] && compiler=clang # gcc has no MemorySanitizer
# shellcheck disable=SC2086
cc() { command $compiler -std=c11 -Wall -Werror $sanflags "$@"; }
sed -n 's/^ \*   \(cc quickstart\.c .*\)$/\1/p' "$HBM_ROOT/examples/quickstart.c" > "$dir/commands"
[ "$(grep -c . "$dir/commands")" -eq 2 ] || { echo "FAIL examples/quickstart.c does not give two cc lines:"; cat "$dir/commands"; exit 1; }
cp "$HBM_ROOT/examples/quickstart.c" "$dir/quickstart.c"
cd "$dir"
while read -r line; do
  readme=$(echo "$line" | sed 's/quickstart/app/g')
  grep -qxF "$readme" "$HBM_ROOT/README.md" || { echo "FAIL README does not give: $readme"; exit 1; }
  echo "\$ $line"
  rm -f quickstart
  eval "$line"
  out=$(./quickstart) || { echo "FAIL ./quickstart, built by '$line', does not run"; exit 1; }
  echo "$out"
  echo "$out" | grep -q "free total 16.0 GiB, largest free 4.0 GiB, fragmentation ratio 3.00"
  echo "$out" | grep -q "4.2 GiB AllReduce buffer: out of device memory"
done < "$dir/commands"
# One version everywhere: hbm.pc's, the installed program's, hbm.h's macros.
hv=$(sed -n 's/^#define HBM_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' "$dir/prefix/include/hbm.h" | paste -sd.)
pv=$(pkg-config --modversion hbm)
bv=$("$dir/prefix/bin/hbm" --version | sed -n '1s/^hbm \([^ ]*\).*/\1/p')
[ "$hv" = "$pv" ] && [ "$pv" = "$bv" ] || { echo "FAIL versions differ: hbm.h $hv, hbm.pc $pv, hbm --version $bv"; exit 1; }
# The shared library exports the functions hbm.h declares and nothing else
# (src/libhbm.map): a program can neither call the library's internals nor
# meet their names. The one exception is what libhbm_cuda takes from libhbm,
# so that `-lhbm_cuda -lhbm` links against the shared library too. The static
# libraries' own names all carry the hbm_ prefix, so none clash with a symbol
# of the program that links them.
# (A MemorySanitizer build links libhbm.so without the list: CMakeLists.txt.)
if command -v nm >/dev/null && [ "$san" != memory ]; then
  lib=$(dirname "$libdir")
  so=$(ls "$lib"/libhbm.so* | head -n 1)
  for_cuda="hbm_adamw_scalars_init hbm_adamw_validate hbm_report_error"
  { grep -E '^[A-Za-z_][A-Za-z0-9_ *]*[ *]hbm_[a-z0-9_]+\(' "$HBM_ROOT/include/hbm.h" | grep -v '^typedef' |
      sed -E 's/^[^(]*[ *](hbm_[a-z0-9_]+)\(.*/\1/' | grep -vx hbm_adamw_step_cuda
    # shellcheck disable=SC2086 # one name a line
    printf '%s\n' $for_cuda; } | sort > "$dir/declared"
  [ "$(grep -c . "$dir/declared")" -gt 40 ] || { echo "FAIL found no function declarations in hbm.h"; exit 1; }
  nm -D --defined-only "$so" | awk '$3 !~ /^_/ { sub(/@.*/, "", $3); print $3 }' | sort > "$dir/exported"
  stray=$(comm -13 "$dir/declared" "$dir/exported" | tr '\n' ' ')
  [ -z "$stray" ] || { echo "FAIL libhbm.so exports names hbm.h does not declare: $stray"; exit 1; }
  missing=$(comm -23 "$dir/declared" "$dir/exported" | tr '\n' ' ')
  [ -z "$missing" ] || { echo "FAIL libhbm.so does not export: $missing"; exit 1; }
  if [ -f "$lib/libhbm_cuda.a" ]; then
    needs=$(nm -u "$lib/libhbm_cuda.a" | awk '$2 ~ /^hbm_/ { print $2 }' | sort -u | tr '\n' ' ')
    [ "$needs" = "$for_cuda " ] || { echo "FAIL libhbm_cuda.a takes from libhbm: $needs (src/libhbm.map and this test say: $for_cuda)"; exit 1; }
    # its kernels are its own (C++ names, mangled: none may stay global);
    # DW.ref.__gxx_personality_v0 is the C++ runtime's, weak and hidden
    stray=$(nm -g --defined-only "$lib/libhbm_cuda.a" | awk 'NF == 3 && $3 !~ /^hbm_/ && $3 !~ /^DW\.ref\./ { print $3 }')
    [ -z "$stray" ] || { echo "FAIL libhbm_cuda.a defines names without the hbm_ prefix: $stray"; exit 1; }
  fi
  stray=$(nm -g --defined-only "$lib/libhbm.a" | awk 'NF == 3 && $3 !~ /^(hbm_|_)/ { print $3 }')
  [ -z "$stray" ] || { echo "FAIL libhbm.a defines names without the hbm_ prefix: $stray"; exit 1; }
fi
# Where nvcc built libhbm_cuda, the README's line for it links a program
# against the shared libhbm, which must give libhbm_cuda what it takes.
lib=$(dirname "$libdir")
if [ -f "$lib/libhbm_cuda.a" ] && ls /usr/local/cuda/lib64/libcudart.so* > /dev/null 2>&1; then
  cat > cuda_app.c <<'C'
#include <hbm.h>
#include <stdio.h>
int main(void) {
  hbm_adamw_options o;
  hbm_adamw_options_init(&o);
  printf("%d\n", hbm_adamw_step_cuda(NULL, 0, &o, NULL)); /* refused before any CUDA call */
  return 0;
}
C
  # shellcheck disable=SC2046 # pkg-config gives several words, as in the README
  cc cuda_app.c $(pkg-config --cflags hbm) -lhbm_cuda $(pkg-config --libs hbm) -L/usr/local/cuda/lib64 \
    -lcudart -lstdc++ -Wl,-rpath,"$(pkg-config --variable=libdir hbm)" -Wl,-rpath,/usr/local/cuda/lib64 -o cuda_app ||
    { echo "FAIL the README's libhbm_cuda line does not link against the installed libraries"; exit 1; }
  [ "$(./cuda_app)" = "-2" ] || { echo "FAIL hbm_adamw_step_cuda(NULL, 0, ...) is not HBM_EINVAL"; exit 1; }
fi
