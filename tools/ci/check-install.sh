#!/usr/bin/env bash
# CI: the installed SDK builds a plug-in outside this tree. Installs a build tree to a temporary
# prefix, compiles each SDK header there on its own, builds examples/mlp-backend against that prefix
# alone, from a copy outside this checkout, then checks with the installed programs that the plug-in
# loads and passes the conformance suite.
# Exits non-zero at the first step that fails.
#   tools/ci/check-install.sh [BUILD_DIR]     (default: build)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" 2>/dev/null && pwd) || { echo "check-install: no build tree at ${1:-$root/build}" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/mlph-check-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix example=$work/mlp-backend example_build=$work/mlp-backend-build
plugin=$example_build/libmlph-backend-mlp.so
started=$SECONDS

step() { echo "== $*"; }
fail() { echo "check-install: FAILED: $*" >&2; exit 1; }
# Runs a command quietly; on failure shows its output and fails naming it.
quiet() {
  local what=$1; shift
  "$@" >"$work/step.log" 2>&1 || { cat "$work/step.log"; fail "$what"; }
}

step "cmake --install $build --prefix $prefix"
quiet "cmake --install" cmake --install "$build" --prefix "$prefix"
for file in bin/mlperf-run bin/mlperf-conformance lib/mlperf-hpc-1/libmlph-backend-reference.so \
            include/mlph/sdk/model/backend.hpp include/mlph/sdk/host/executor.hpp include/mlph/sdk/program/program.hpp \
            include/mlph/sdk/model/protocol.hpp include/mlph/sdk/model/compute.hpp include/mlph/sdk/program/program.hpp \
            include/mlph/sdk/comms/plugin.hpp include/mlph/sdk/kernels/pool_chain.hpp include/mlph/sdk/README.md \
            lib/cmake/mlperf_hpc/mlperf_hpcConfig.cmake share/mlperf-hpc/plot_report.py; do
  [ -e "$prefix/$file" ] || fail "$prefix/$file was not installed"
done
# A plug-in may include any SDK header alone: each compiles on its own against the prefix.
# The SDK's folders (sdk/README.md) included: find, not a glob of the top folder.
headers=$(cd "$prefix/include" && find mlph/sdk -name '*.hpp' | sort)
[ "$(echo "$headers" | wc -l)" -ge 30 ] || fail "only $(echo "$headers" | wc -l) SDK headers installed under $prefix/include/mlph/sdk"
for header in $headers; do
  echo "#include \"$header\"" |
    quiet "compiling $header alone" c++ -std=c++20 -fsyntax-only -Wall -Wextra -Wpedantic -Werror \
      -I"$prefix/include" -x c++ -
done
# Every program starts from the prefix (a missing library would exit 127); --help is usage (0 or 2).
for program in "$prefix"/bin/*; do
  status=0; "$program" --help >/dev/null 2>&1 || status=$?
  [ "$status" -le 2 ] || fail "$program --help exited $status"
done
if readelf -d "$prefix"/bin/* "$prefix"/lib/mlperf-hpc-1/*.so | grep -E 'R(UN)?PATH' | grep -qF "$build"; then
  fail "an installed file's RUNPATH points into the build tree $build"
fi

step "building examples/mlp-backend against $prefix, from a copy outside the checkout"
cp -r "$root/examples/mlp-backend" "$example"
launcher=$(command -v ccache || true)
generator=$(command -v ninja >/dev/null && echo Ninja || echo "Unix Makefiles")
quiet "configuring the example" cmake -S "$example" -B "$example_build" -G "$generator" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DCMAKE_CXX_COMPILER_LAUNCHER="$launcher" \
  -DCMAKE_CXX_FLAGS="-Wall -Wextra -Wpedantic -Werror"
quiet "building the example" cmake --build "$example_build"
# The package and every header came from the prefix: nothing of this checkout was visible.
grep -qxF "mlperf_hpc_DIR:PATH=$prefix/lib/cmake/mlperf_hpc" "$example_build/CMakeCache.txt" ||
  fail "find_package(mlperf_hpc) did not take the package from $prefix"
grep -qF -- "$prefix/include" "$example_build/compile_commands.json" ||
  fail "the example was not compiled against $prefix/include"
! grep -F -- "$root" "$example_build/compile_commands.json" ||
  fail "the example's compile commands name this checkout ($root)"
[ -f "$plugin" ] || fail "$plugin was not built"

step "mlperf-run --plugin-dir $example_build --list-plugins"
"$prefix/bin/mlperf-run" --plugin-dir "$example_build" --list-plugins | tee "$work/plugins.txt"
grep -qE "^backend +mlp +1\.0\.0 +[0-9]+\.[0-9]+ +$plugin\$" "$work/plugins.txt" ||
  fail "mlperf-run does not list backend mlp from $plugin"
! grep -F -- "$build" "$work/plugins.txt" || fail "mlperf-run found plug-ins in the build tree $build"

step "ctest in the example: the installed mlperf-conformance --backend-file $plugin"
status=0; ctest --test-dir "$example_build" -V >"$work/ctest.log" 2>&1 || status=$?
[ "$status" -eq 0 ] || { cat "$work/ctest.log"; fail "mlperf-conformance: the example does not conform"; }
grep -E "Test command|checks:|not implemented:" "$work/ctest.log"

step "cmake --install of the example puts it where the installed mlperf-run looks"
quiet "installing the example" cmake --install "$example_build" --prefix "$prefix"
"$prefix/bin/mlperf-run" --list-plugins | grep -E "^backend +mlp " | grep -qF "$prefix/lib/mlperf-hpc-1/libmlph-backend-mlp.so" ||
  fail "the installed example is not found in $prefix/lib/mlperf-hpc-1"

echo "check-install: PASSED in $((SECONDS - started)) s"
