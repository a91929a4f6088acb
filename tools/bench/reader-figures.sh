#!/usr/bin/env bash
# The readers' figures of docs/architecture.md ("How a sample travels"): each format with 1 and 2
# readers, its rate and its share of the pread ceiling measured in the same run (mlperf-bench --data).
#   tools/bench/reader-figures.sh [BUILD_DIR] [DATA_DIR]   (defaults: build, /tmp/mlph-reader-figures)
# The splits are generated once (CosmoFlow 128³ npy, plain and GZIP TFRecord; DeepCAM 768×1152 HDF5:
# about 4 GB) and kept for the next run.
set -euo pipefail
build=${1:-build}
data=${2:-/tmp/mlph-reader-figures}
run=$build/bin/mlperf-run
bench=$build/bin/mlperf-bench

for format in npy tfrecord tfrecord_gzip; do
  [ -d "$data/cosmoflow-$format/train" ] ||
    "$run" --workload cosmoflow --generate-data "$data/cosmoflow-$format" --set data.edge=128 \
      --set data.synthetic.train=64 --set data.synthetic.valid=4 --set data.synthetic.format=$format > /dev/null
done
[ -d "$data/deepcam/train" ] ||
  "$run" --workload deepcam --generate-data "$data/deepcam" --set data.height=768 --set data.width=1152 \
    --set data.synthetic.train=32 --set data.synthetic.valid=4 > /dev/null

# name workload split steps [--set ...]: --steps keeps a timed pass at 60 samples (deepcam: 28 of 32)
measure() {
  local name=$1 workload=$2 split=$3 steps=$4
  shift 4
  for readers in 1 2; do
    local line
    line=$("$bench" --workload "$workload" --data "$data/$split" --data-only --set train.batch_size=4 \
             --set data.readers=$readers --steps "$steps" "$@" | grep -o "[0-9] readers\? alone.*")
    printf '%-28s %s\n' "$name" "$line"
  done
}
measure "cosmoflow npy" cosmoflow cosmoflow-npy 15 --set data.edge=128 --set data.format=npy
measure "cosmoflow tfrecord" cosmoflow cosmoflow-tfrecord 15 --set data.edge=128
measure "cosmoflow gzip libdeflate" cosmoflow cosmoflow-tfrecord_gzip 15 --set data.edge=128
measure "cosmoflow gzip zlib" cosmoflow cosmoflow-tfrecord_gzip 15 --set data.edge=128 --set data.inflate=zlib
measure "deepcam hdf5" deepcam deepcam 7 --set data.height=768 --set data.width=1152
