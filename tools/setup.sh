#!/usr/bin/env bash
# One-command set-up on Debian 12: install what is missing, build, then
#   tools/setup.sh run    train CosmoFlow (mini config) to its target on the CPU, check the log
#   tools/setup.sh test   run the test suite
#   tools/setup.sh slurm  install Slurm and MUNGE too, start a one-node cluster on this machine
#                         (tools/slurm/local-cluster.sh, as root) and run the Slurm tests under it
#   tools/setup.sh cluster  start a two-node cluster of namespaces on this machine, with Slurm across it
#                         (tools/cluster/two-nodes.sh, as root), run the cluster tests across it, stop it
# Environment: BUILD_DIR (default build), JOBS (default: all cores), MLPH_WERROR (default ON under CI).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-run}
build=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}

packages=(cmake ninja-build g++ pkg-config python3 python3-yaml
          libboost-dev libboost-program-options-dev libboost-filesystem-dev
          libyaml-cpp-dev libfmt-dev libgtest-dev zlib1g-dev libdeflate-dev
          libdnnl-dev ocl-icd-opencl-dev libopenmpi-dev openmpi-bin libhdf5-dev libzstd-dev libarchive-dev
          python3-matplotlib)
# Only the tests need these: the official result summarizer (pandas) and the PyTorch models that
# load our exported weights (torch, a large download).
test_packages=(python3-pandas python3-torch)
[ "$mode" = test ] && packages+=("${test_packages[@]}")
# Only the Slurm tests need these (the daemons, the clients, srun's PMIx plug-in); their services are
# not started: tools/slurm/local-cluster.sh starts its own.
slurm_packages=(slurmctld slurmd slurm-client munge slurm-wlm-basic-plugins)
[ "$mode" = slurm ] && packages+=("${slurm_packages[@]}")
# Only the cluster tests need this: `ip` makes the two nodes' network (tools/cluster/two-nodes.sh;
# nsenter and unshare are util-linux's, on every Debian); they run Slurm across the nodes too.
cluster_packages=(iproute2)
[ "$mode" = cluster ] && packages+=("${cluster_packages[@]}" "${slurm_packages[@]}")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing: ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

werror=${MLPH_WERROR:-$([ -n "${CI:-}" ] && echo ON || echo OFF)}
echo "== configuring ($build, warnings as errors: $werror)"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLPH_WERROR="$werror" >"$build.configure.log" 2>&1 \
  || { cat "$build.configure.log"; exit 1; }
sed -n '/plug-ins built/,/^-- $/p' "$build.configure.log"
echo "== building"
cmake --build "$build" -j "$jobs"

case "$mode" in
  test)
    echo "== testing"
    ctest --test-dir "$build" --output-on-failure -j "$jobs"
    ;;
  run)
    data=${DATA_DIR:-data/cosmoflow-mini}
    out=${OUT_DIR:-out/cosmoflow-mini}
    if [ ! -d "$data/train" ]; then
      echo "== generating the synthetic CosmoFlow dataset in $data"
      "$build/bin/mlperf-run" --config configs/cosmoflow/mini.yaml --generate-data "$data"
    fi
    echo "== training CosmoFlow (configs/cosmoflow/mini.yaml) on the CPU"
    "$build/bin/mlperf-run" --config configs/cosmoflow/mini.yaml --data "$data" --output "$out"
    if [ -x ../shared/tools/mllog-check ]; then
      echo "== official MLCommons compliance checker"
      ../shared/tools/mllog-check "$out/result_0.txt" | tail -n 3
    fi
    ;;
  slurm)
    echo "== the Slurm tests, under a one-node cluster (tools/slurm/local-cluster.sh, as root)"
    as_root=""; [ "$(id -u)" -ne 0 ] && as_root="sudo"
    eval "$($as_root tools/slurm/local-cluster.sh start)"
    trap "$as_root tools/slurm/local-cluster.sh stop" EXIT
    ctest --test-dir "$build" --output-on-failure -L '^slurm$'
    ;;
  cluster)
    echo "== the cluster tests, across two nodes of namespaces (tools/cluster/two-nodes.sh, as root)"
    as_root=""; [ "$(id -u)" -ne 0 ] && as_root="sudo"
    trap "$as_root tools/cluster/two-nodes.sh stop" EXIT
    $as_root tools/cluster/two-nodes.sh start
    $as_root tools/cluster/two-nodes.sh slurm start
    ctest --test-dir "$build" --output-on-failure -L '^cluster$'
    ;;
  *) echo "usage: tools/setup.sh [run|test|slurm|cluster]" >&2; exit 2 ;;
esac
