#!/usr/bin/env bash
# What travels to a lent GPU machine (docs/cuda.md, "Checking on a GPU"): builds the programs, the
# plug-ins and the GPU tests in a build tree of their own, then lays out a git-ignored folder that
# tools/gpu/check.sh runs from there, packed as gpu-bundle.tar.xz for the device tool's call:
#   bin/                  mlperf-run, mlperf-conformance, mlperf-bench, mlph-cuda-probe (with the cuda backend)
#   lib/mlperf-hpc-1/     the plug-ins: reference, cuda (when built), cosmoflow, deepcam, local, nccl
#                         (when built), posix
#   lib/                  every library they need that glibc and the device do not provide
#   lib/cxx/              this machine's libstdc++ and libgcc_s (check.sh uses them where the device's
#                         glibc is new enough for them, else the device's own)
#   tests/                the test programs of the gpu tier (tests/CMakeLists.txt, ctest -L gpu) that ctest
#                         runs directly (those it runs under mpirun need a second GPU and a launcher)
#   configs/, tools/mllog-check, third_party/mlperf-logging   the mini configs and the official
#                         checker (../shared does not travel), reduced to what an HPC log needs
#   bundle.json           what was built from which commit, where, and what each file needs
# Not carried: glibc, the driver (libcuda) and cuDNN, cuBLAS/cuBLASLt and NCCL (470, 570 and 208 MiB):
# the device has them in PyTorch's wheels (check.sh puts them first on LD_LIBRARY_PATH). Datasets are
# not carried either: the CosmoFlow mini alone is 30 MB and DeepCAM's 145 MB, which mlperf-run
# generates on the device in a few seconds (check.sh does).
#
#   tools/gpu/bundle.sh [OUT_DIR]                     build tree GPU_BUILD_DIR, bundle into OUT_DIR
#   tools/gpu/bundle.sh --from-build build [OUT_DIR]  lay out an existing build tree's programs, no
#                         build: what CI's dry run checks (tools/gpu/check.sh --dry-run); its code is
#                         tuned for this machine's CPU (MLPH_NATIVE), so not for the device
# The separate tree is configured with -DMLPH_NATIVE=OFF (the device's CPU is unknown), oneDNN off
# (not carried), CUDA on, Release, and builds only the targets that travel (tools/gpu/targets.py).
# Environment: GPU_BUILD_DIR (default build-gpu), JOBS (default: all cores), MLPH_WERROR (default ON),
# BUNDLE_MAX_MIB (default 48: the device tool carries 64 MiB with the working tree).
# What travels is OUT_DIR.tar.xz (carry: ["gpu-bundle.tar.xz"]): 41 MiB of bundle with comms/nccl
# packs into 11; check.sh unpacks it there.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
here=tools/gpu
build=${GPU_BUILD_DIR:-build-gpu}
jobs=${JOBS:-$(nproc)}
max_mib=${BUNDLE_MAX_MIB:-48}
from_build=""
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --from-build) [ $# -ge 2 ] || { echo "bundle.sh: --from-build needs a build directory" >&2; exit 2; }
                  from_build=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    -*) echo "bundle.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) [ -z "$out" ] || { echo "bundle.sh: one OUT_DIR only" >&2; exit 2; }; out=$1; shift ;;
  esac
done
out=${out:-gpu-bundle}
fail() { echo "bundle.sh: error: $*" >&2; exit 1; }
say() { echo "== $*"; }
shared=$root/../shared
checker=yes
if [ ! -x "$shared/tools/mllog-check" ]; then
  # A fresh clone has no ../shared: a bundle for the dry run goes without the checker (check.sh says so).
  [ -n "$from_build" ] || fail "$shared/tools/mllog-check not found: the official checker travels from ../shared"
  echo "bundle.sh: warning: no ../shared/tools/mllog-check beside this checkout: the bundle has no official checker" >&2
  checker=no
fi
case "$(realpath -m "$out")" in
  "$root"|/|"$(realpath -m "$build")") fail "OUT_DIR $out would overwrite the checkout or the build tree" ;;
esac
# An OUT_DIR that exists is replaced only when it is a bundle this script laid out: bundle.json
# beside nothing but the bundle's own folders (or it is empty). `bundle.sh ~` or `bundle.sh ..`
# must remove nothing of the user's. The new bundle is laid out beside it and renamed into place.
bundle_entries=" bin lib tests tools third_party configs bundle.json "
is_bundle() {  # DIR
  local entry any=
  for entry in "$1"/* "$1"/.[!.]* "$1"/..?*; do
    [ -e "$entry" ] || [ -L "$entry" ] || continue
    any=1
    case "$bundle_entries" in *" ${entry##*/} "*) ;; *) return 1 ;; esac
  done
  [ -z "$any" ] || [ -f "$1/bundle.json" ]
}
if [ -e "$out" ] || [ -L "$out" ]; then
  [ -d "$out" ] && [ ! -L "$out" ] || fail "OUT_DIR $out exists and is not a directory: not replaced"
  is_bundle "$out" || fail "OUT_DIR $out exists and is not a bundle (bundle.json beside bin/, lib/, ... only): not replaced; name another, or remove it yourself"
fi

# The build tree: asked for CMake's codemodel (which targets exist, where), configured, built.
if [ -n "$from_build" ]; then
  build=$from_build
  [ -f "$build/CMakeCache.txt" ] || fail "$build is not a configured build tree"
  if ! ls "$build"/.cmake/api/v1/reply/index-*.json >/dev/null 2>&1; then
    mkdir -p "$build/.cmake/api/v1/query" && touch "$build/.cmake/api/v1/query/codemodel-v2"
    say "asking $build for its targets (cmake re-run with the file-API query)"
    cmake "$build" >/dev/null || fail "re-running cmake in $build failed"
  fi
  native=$(sed -n 's/^MLPH_NATIVE:BOOL=//p' "$build/CMakeCache.txt")
else
  mkdir -p "$build/.cmake/api/v1/query" && touch "$build/.cmake/api/v1/query/codemodel-v2"
  say "configuring $build (Release, MLPH_NATIVE=OFF, oneDNN off, CUDA on)"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLPH_NATIVE=OFF -DMLPH_CUDA=ON \
    -DCMAKE_DISABLE_FIND_PACKAGE_dnnl=TRUE -DMLPH_WERROR="${MLPH_WERROR:-ON}" >"$build.configure.log" 2>&1 \
    || { cat "$build.configure.log"; fail "configuring $build failed"; }
  sed -n '/plug-ins built/,/^-- $/p' "$build.configure.log"
  native=OFF
fi
mapfile -t targets < <(python3 $here/targets.py "$build" targets)
if [ -z "$from_build" ]; then
  say "building ${#targets[@]} targets: ${targets[*]}"
  cmake --build "$build" -j "$jobs" --target "${targets[@]}"
fi

# The layout, beside OUT_DIR (a hidden folder of this process's), renamed over it once whole.
# Programs, plug-ins and tests are copied first; then every library they need.
say "laying out $out"
final=$out
out=$(dirname "$final")/.$(basename "$final").part-$$
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/bin" "$out/lib/mlperf-hpc-1" "$out/lib/cxx" "$out/tests" "$out/tools" "$out/third_party"
programs=() plugins=() tests=() left_behind=()
for t in "${targets[@]}"; do
  case "$t" in
    mlperf-*|mlph-cuda-probe) [ -x "$build/bin/$t" ] || fail "$build/bin/$t was not built"
              cp "$build/bin/$t" "$out/bin/"; programs+=("$t") ;;
    mlph-*-*) file=lib${t}.so
              [ -f "$build/lib/mlperf-hpc-1/$file" ] || fail "$build/lib/mlperf-hpc-1/$file was not built"
              cp "$build/lib/mlperf-hpc-1/$file" "$out/lib/mlperf-hpc-1/"; plugins+=("${t#mlph-}") ;;
  esac
done
while IFS=$'\t' read -r name path_or_why _; do
  [ -n "$name" ] || continue
  if [ "${name:0:1}" = "#" ]; then left_behind+=("${name:1}: $path_or_why"); continue; fi
  cp "$path_or_why" "$out/tests/"; tests+=("$name")
done < <(python3 $here/targets.py "$build" tests)

# Libraries, by what ldd resolves here. glibc's own come from the device; so do the driver and the
# large CUDA libraries (PyTorch's wheels there). gcc's runtime goes to lib/cxx (check.sh chooses).
glibc_re='^(linux-vdso|ld-linux-x86-64|libc|libm|libpthread|libdl|librt|libresolv|libutil|libanl|libmvec|libBrokenLocale|libthread_db|libc_malloc_debug)\.so'
device_re='^(libcuda|libcudnn[a-z_]*|libcublas|libcublasLt|libnccl)\.so'
cxx_re='^(libstdc\+\+|libgcc_s)\.so'
declare -A device_libs=()
elves=("$out"/bin/* "$out"/lib/mlperf-hpc-1/*.so)
[ ${#tests[@]} -gt 0 ] && elves+=("$out"/tests/*)
for elf in "${elves[@]}"; do
  # "name => /path (0x...)", "name => not found", "/lib64/ld-linux-x86-64.so.2 (0x...)"
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    if [[ $name =~ $glibc_re ]]; then continue; fi
    if [[ $name =~ $device_re ]]; then device_libs[$name]=1; continue; fi
    [ "$path" != "not" ] || fail "$elf needs $name, which ldd does not find here"
    dest=$out/lib; [[ $name =~ $cxx_re ]] && dest=$out/lib/cxx
    [ -f "$dest/$name" ] || cp -L "$path" "$dest/$name"
  done < <(env -u LD_LIBRARY_PATH ldd "$elf")
done

# The official checker, reduced to the HPC rulesets (the training ones are 1.4 MB).
if [ $checker = yes ]; then
  cp "$shared/tools/mllog-check" "$out/tools/"
  logging=$shared/third_party/mlperf-logging
  mkdir -p "$out/third_party/mlperf-logging/mlperf_logging"
  cp "$logging"/{LICENSE.md,PROVENANCE,VERSION} "$out/third_party/mlperf-logging/"
  cp "$logging"/mlperf_logging/{__init__.py,benchmark_meta.py} "$out/third_party/mlperf-logging/mlperf_logging/"
  (cd "$logging/mlperf_logging" && tar cf - --exclude='training_*' --exclude='__pycache__' compliance_checker) \
    | tar xf - -C "$out/third_party/mlperf-logging/mlperf_logging"
fi
cp -r configs "$out/"

# What the files need of the device's glibc and libstdc++ (the highest symbol versions they use).
highest() {  # highest VERSION_x.y... among the files' dynamic symbols
  local prefix=$1; shift
  { objdump -T "$@" 2>/dev/null | grep -o "${prefix}_[0-9][0-9.]*" | sed "s/^${prefix}_//" | sort -uV | tail -1; } || true
}
ours=("${elves[@]}")
for f in "$out"/lib/*.so*; do [ -e "$f" ] && ours+=("$f"); done
glibc_needed=$(highest GLIBC "${ours[@]}")
glibcxx_needed=$(highest GLIBCXX "${ours[@]}")
glibc_cxx=$(highest GLIBC "$out"/lib/cxx/*)
glibcxx_carried=$(highest GLIBCXX "$out"/lib/cxx/libstdc++.so.6)

size=$(du -sb "$out" | cut -f1)
count=$(find "$out" -type f | wc -l)
lines() { [ $# -eq 0 ] || printf '%s\n' "$@"; }
B_OUT=$out B_ROOT=$root B_BUILD=$(realpath "$build") B_NATIVE=$native B_SIZE=$size B_FILES=$((count + 1)) \
B_COMMIT=$(git rev-parse HEAD) B_BRANCH=$(git rev-parse --abbrev-ref HEAD) \
B_DIRTY=$(git status --porcelain --untracked-files=no | head -1) \
B_ARCH=$({ grep -o -- '--generate-code=arch=[^ ]*' "$build/build.ninja" || true; } | sort -u | tr '\n' ' ') \
B_PROGRAMS=$(lines "${programs[@]}") B_PLUGINS=$(lines "${plugins[@]}") B_TESTS=$(lines "${tests[@]}") \
B_LEFT=$(lines "${left_behind[@]}") B_DEVICE_LIBS=$(lines "${!device_libs[@]}") \
B_GLIBC=$glibc_needed B_GLIBC_CXX=$glibc_cxx B_GLIBCXX=$glibcxx_needed B_GLIBCXX_CARRIED=$glibcxx_carried \
python3 - <<'EOF'
import datetime, json, os
e = os.environ
lines = lambda key: [line for line in e[key].split("\n") if line]
doc = dict(commit=e["B_COMMIT"], branch=e["B_BRANCH"], uncommitted_changes=bool(e["B_DIRTY"]),
           made=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           source_dir=e["B_ROOT"], build_dir=e["B_BUILD"], native=e["B_NATIVE"] == "ON",
           cuda_code=e["B_ARCH"].split(), programs=lines("B_PROGRAMS"), plugins=lines("B_PLUGINS"),
           tests=lines("B_TESTS"), tests_left_behind=lines("B_LEFT"), device_libraries=sorted(lines("B_DEVICE_LIBS")),
           glibc_needed=e["B_GLIBC"], glibc_needed_with_carried_cxx=e["B_GLIBC_CXX"], glibcxx_needed=e["B_GLIBCXX"],
           glibcxx_carried=e["B_GLIBCXX_CARRIED"], size_bytes=int(e["B_SIZE"]), files=int(e["B_FILES"]))
with open(os.path.join(e["B_OUT"], "bundle.json"), "w") as f:
    json.dump(doc, f, indent=1)
EOF
# Renamed into place: what was there is a bundle (checked above) or nothing.
if [ -e "$final" ]; then is_bundle "$final" || fail "OUT_DIR $final changed while the bundle was made: not replaced"; fi
rm -rf "$final"
mv "$out" "$final"
out=$final
trap - EXIT

# What travels: the folder packed with xz (a quarter of its size; check.sh unpacks it on the device),
# so that the cuda backend and its tests have room beside HDF5's 19 MiB of dependencies.
archive=$out.tar.xz
if [ -z "$from_build" ]; then
  say "packing $archive"
  tar -C "$(dirname "$out")" -cf - "$(basename "$out")" | xz -T0 -6 >"$archive.part"
  mv "$archive.part" "$archive"
  packed=$(stat -c %s "$archive")
else
  rm -f "$archive"  # a dry-run bundle does not travel
  packed=0
fi
mib=$(( (packed + 1048575) / 1048576 ))
say "$out: $(numfmt --to=iec-i --suffix=B "$size") in $((count + 1)) files$([ -z "$from_build" ] &&
    echo "; $archive: $(numfmt --to=iec-i --suffix=B "$packed") (limit ${max_mib} MiB)")"
echo "   programs: ${programs[*]}"
echo "   plug-ins: ${plugins[*]}"
echo "   tests:    ${tests[*]:-none}"
for why in "${left_behind[@]}"; do echo "   not carried: $why"; done
from_device="${!device_libs[*]}"
echo "   libraries from the device: ${from_device:-none}; needs glibc $glibc_needed ($glibc_cxx with the carried libstdc++), GLIBCXX $glibcxx_needed"
[ "$native" != ON ] || echo "   NOTE: $build was built with MLPH_NATIVE=ON (this CPU's instructions): for checks here, not for the device"
[ "$mib" -le "$max_mib" ] || fail "$archive is $mib MiB, over the ${max_mib} MiB it may take of the device tool's 64"
