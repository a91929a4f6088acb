#!/usr/bin/env bash
# Issue 36, defect 1: tools/gpu/bundle.sh OUT_DIR removed whatever OUT_DIR named (`bundle.sh ~`). An
# existing OUT_DIR that is not a bundle (bundle.json beside the bundle's own folders only), a file or a
# symbolic link is refused before anything is built or removed, naming it; nothing of it is touched.
# The refusals come before the build tree is looked at (here: none).
set -u
here=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failures=0
refused() {  # OUT_DIR WHAT
  local out
  out=$("$here/bundle.sh" --from-build "$scratch/no-build" "$1" 2>&1)
  local status=$?
  if [ $status -ne 1 ] || [[ $out != *"bundle.sh: error: OUT_DIR $1 exists and $2"* ]]; then
    echo "FAIL: bundle.sh $1: status $status, said: $out"; failures=$((failures + 1))
  fi
}
mkdir -p "$scratch/home/.ssh" && echo key >"$scratch/home/.ssh/id" && echo work >"$scratch/home/thesis.tex"
refused "$scratch/home" "is not a bundle"
mkdir -p "$scratch/almost/bin" && echo '{}' >"$scratch/almost/bundle.json" && echo mine >"$scratch/almost/notes.txt"
refused "$scratch/almost" "is not a bundle"          # a bundle.json does not make the rest of it ours
mkdir -p "$scratch/hidden/bin" && echo '{}' >"$scratch/hidden/bundle.json" && echo x >"$scratch/hidden/.profile"
refused "$scratch/hidden" "is not a bundle"
mkdir -p "$scratch/nojson/bin"
refused "$scratch/nojson" "is not a bundle"          # no bundle.json
echo data >"$scratch/file"
refused "$scratch/file" "is not a directory"
ln -s "$scratch/home" "$scratch/link"
refused "$scratch/link" "is not a directory"
for f in home/.ssh/id home/thesis.tex almost/notes.txt almost/bundle.json hidden/.profile file; do
  [ -f "$scratch/$f" ] || { echo "FAIL: $f was removed"; failures=$((failures + 1)); }
done
# A bundle's own layout (or an empty folder) passes the check: the run goes on to the build tree.
mkdir -p "$scratch/old/bin" "$scratch/old/lib" "$scratch/empty" && echo '{}' >"$scratch/old/bundle.json"
for ok in old empty; do
  out=$("$here/bundle.sh" --from-build "$scratch/no-build" "$scratch/$ok" 2>&1)
  [[ $out == *"$scratch/no-build is not a configured build tree"* ]] || { echo "FAIL: $ok: $out"; failures=$((failures + 1)); }
done
[ -f "$scratch/old/bundle.json" ] || { echo "FAIL: the old bundle went before a new one was made"; failures=$((failures + 1)); }
[ $failures -eq 0 ] && echo "bundle_out_dir_test: all refusals held"
exit $((failures > 0))
