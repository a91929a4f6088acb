#!/usr/bin/env bash
# The tests under sanitizers, each sanitizer in a build tree of its own (gcc, -O1 -g1
# -fno-omit-frame-pointer, our targets instrumented; the libraries from Debian are not).
#   tools/ci/sanitize.sh asan   AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer: every
#                               target built, the test suite run but for what ASAN_SKIP says
#   tools/ci/sanitize.sh tsan   ThreadSanitizer over the threaded parts (TSAN_TESTS below)
#   tools/ci/sanitize.sh ci     what .ci/run runs: both, each over a set sized for CI (ASAN_CI_BINARIES,
#                               TSAN_CI_TESTS below; builds only those tests and what they load): about
#                               8.5 minutes from cold on 2 cores, 7.3 of them building (onednn-cpu's
#                               share, measured alone: 2.4 building, 0.5 testing)
# Every report of every process (the tests, the mlperf-run they start, mpirun's ranks) goes to a log
# file; the job fails if any was written or a test failed, and prints them. Suppressions
# (tools/ci/sanitize/*.supp) name only Debian's libraries, each with why.
# Environment: SANITIZE_BUILD_PREFIX (default build: trees build-asan and build-tsan, git-ignored),
# JOBS (default: all cores).
set -euo pipefail
mode=${1:-}
root=$(cd "$(dirname "$0")/../.." && pwd)
jobs=${JOBS:-$(nproc)}
suppressions=$root/tools/ci/sanitize

# Processes that run Open MPI. Its components are dlclose'd at MPI_Finalize, so what they leaked has
# stacks of unknown modules: under ASan these run with the slow unwinder, whose stacks reach the libmpi
# / libopen-rte frames the suppressions name (elsewhere it would only cost time).
MPI_TESTS="^(comms_mpi_|MpiFaults\.|MpiRun\.)"

# Not run under ASan: whole trainings, whose cost is the reference backend's arithmetic at -O1
# (10 to 50 times its release time) while their code paths run here in shorter tests:
#  Convergence  10 minutes in a release build; Run/BadInput run the same loop for a few steps.
#  Install      builds and installs a second tree: packaging, not memory.
#  Conformance  every op against the reference at release speed; reference_backend_test covers
#               the reference's ops, and the suite's own C++ is a driver.
#  MpiRun       2-rank mlperf-run to the end: 1 to 5 minutes each under ASan on 2 cores. Their
#               code runs in the 1-rank Run/BadInput/StageRun tests and comms_mpi_collectives.
#  comms_mpi_dp_equivalence  2 ranks training next to 1, past its 120 s limit under ASan; the
#               same gradient-bucket code runs under TSan and in comms_mpi_collectives here.
#  EndToEnd     three mini trainings for a submission tree; the tree and mlperf-score's log
#               parsing run here on the other Submission tests' fixtures.
#  StageRun.TimedAndUntimedStagingPassTheOfficialChecker  two mini trainings; staging itself
#               runs in every Stage test and the other StageRun tests.
#  DeepCamRun.EveryValidationSampleCountsOnceWhateverTheBatch, .AccumulationDefersUpdatesAcross-
#               Epochs  several DeepCAM trainings each; DeepCamRun.GenerateDataThenOneEpoch keeps
#               the HDF5 reading and the training loop here.
#  Resume, Stop, Export (but for the cheap refusal)  trainings killed or stopped by signals and
#               resumed, exported and loaded into PyTorch; the checkpoint files are written and read
#               here in CheckpointFile and BadCheckpoint, every refusal of a bad one included.
#  CosmoFlowDataSynthetic.IsFastEnough  a timing bound for release builds.
ASAN_SKIP='^(Convergence|Install|Conformance|MpiRun|EndToEnd|Resume|Stop)\.|^comms_mpi_dp_equivalence$'
ASAN_SKIP+='|^StageRun\.TimedAndUntimedStagingPassTheOfficialChecker$|^Export\.[A-Za-z]+LoadsInto'
ASAN_SKIP+='|^CosmoFlowDataSynthetic\.IsFastEnough$'
ASAN_SKIP+='|^DeepCamRun\.(EveryValidationSampleCountsOnceWhateverTheBatch|AccumulationDefersUpdatesAcrossEpochs)$'
# In CI, the unit tests of our own C++, every case of these binaries but ASAN_SKIP's: the readers
# (TFRecord, npy, HDF5, pack manifest and tar, posix storage), the SDK, configs and text input, the
# core (its loader with the broken plug-ins, logs, checkpoint files and hostile checkpoints, the
# export, atomic files, the ranks' facts), mlperf-score's reading of forged logs, storage/stage, the
# reference backend, the fused pool chain's body, and onednn-cpu (our layer over oneDNN: channel
# padding and folded taps, the pool chain, bf16 storage; 2.4 minutes of CI to build, 0.5 to run).
# Not the end-to-end binaries (integration, submission, MPI, workloads' runs): each builds and runs
# mlperf-run trainings, past CI's time under ASan on 2 cores.
ASAN_CI_BINARIES=(core_test score_input_test sdk_validate_test sdk_host_program_test sdk_pool_chain_test
                  cosmoflow_data_test deepcam_data_test storage_posix_test storage_stage_test
                  reference_backend_test reference_thread_pool_test onednn_backend_test)

# ThreadSanitizer, the threads: the reference backend's pool (ReferenceThreadPool, ReferenceApi) and
# gradient buckets' comms thread (comms_mpi_collectives' GradientBuckets; comms_mpi_dp_equivalence,
# the same buckets in a whole 2-rank training, passes its 120 s limit under TSan and is left out),
# the runner's batch prefetch and signal watcher (Run, BadInput: mlperf-run end to end; Pipeline: the
# reader threads against fake datasets),
# storage/stage's copy threads (inflating too: StageInflate) and abandon called from the signal
# watcher (Stage, StageRun). The rest of the suite is single-threaded (comms/mpi too: its timeouts
# poll), which is ASan's job.
TSAN_TESTS="^(ReferenceThreadPool|ReferenceApi|Pipeline|Stage|StageInflate|StageRun|Run|BadInput)\.|^comms_mpi_collectives$"
# In CI, one test or set per thread: the pool's own tests; the pipeline's readers (Pipeline, in
# core_test); the comms thread calling Open MPI
# (comms_mpi_collectives); the copy threads, inflating or not, and abandon (Stage, StageInflate); and
# one mlperf-run, the signal during a long step, that has the prefetch thread reading the next batch
# while the step runs on the pool and the signal watcher abandons the staging. (Run's trainings take minutes each under TSan on 2 cores.)
TSAN_CI_TESTS="^(ReferenceThreadPool|Pipeline|Stage|StageInflate)\.|^StageRun\.ASignalDuringALongStepLeavesNoStagedCopy$"
TSAN_CI_TESTS+="|^comms_mpi_collectives$"
TSAN_CI_TARGETS=(reference_thread_pool_test core_test storage_stage_test comms_mpi_collectives)

work=$(mktemp -d "${TMPDIR:-/tmp}/mlph-sanitize.XXXXXX")
trap 'rm -rf "$work"' EXIT
# cpu: the CPU seconds this shell's children have used so far (`times` run in this shell: in a
# command substitution it would count the subshell's children, none).
cpu_now() {
  times >"$work/times"
  cpu=$(awk 'NR == 2 { gsub(/[ms]/, " "); print int($1 * 60 + $2 + $3 * 60 + $4) }' "$work/times")
}
status=0

run_tests() {  # ctest arguments...
  echo "== ctest $*"
  TMPDIR=$work ctest --test-dir "$build" -j "$jobs" --output-on-failure --timeout 600 "$@" || status=1
}

# sanitize asan|tsan full|ci: configures, builds and runs that sanitizer's set, then prints its reports.
sanitize() {
  local sanitizer=$1 scope=$2 flags configure targets tests=()
  build=${SANITIZE_BUILD_PREFIX:-$root/build}-$sanitizer
  case $sanitizer-$scope in
    asan-*)
      flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
      # onednn-cpu is built and instrumented; Debian's oneDNN under it (JIT kernels, OpenMP) is not.
      configure=(-DCMAKE_DISABLE_FIND_PACKAGE_dnnl=OFF)
      ;;&
    asan-full) targets=(all) ;;
    asan-ci)
      targets=("${ASAN_CI_BINARIES[@]}")
      tests=(-L "^($(IFS='|'; echo "${ASAN_CI_BINARIES[*]}"))\$")
      ;;
    tsan-*)
      flags="-fsanitize=thread"
      # HDF5 off: DeepCAM is not built (its reader is single-threaded; ASan and the fuzzers cover it).
      configure=(-DCMAKE_DISABLE_FIND_PACKAGE_dnnl=ON -DCMAKE_DISABLE_FIND_PACKAGE_HDF5=ON)
      ;;&
    tsan-full)
      targets=(mlperf-run mlph-backend-reference mlph-workload-cosmoflow mlph-comms-local mlph-comms-mpi
               mlph-storage-posix mlph-storage-stage mlph-pack-data mlph_broken_plugins tracing-backend
               reference_backend_test reference_thread_pool_test storage_stage_test integration_test
               comms_mpi_collectives)
      tests=(-R "$TSAN_TESTS")
      ;;
    tsan-ci)
      targets=("${TSAN_CI_TARGETS[@]}")
      tests=(-R "$TSAN_CI_TESTS")
      ;;
  esac

  local started=$SECONDS cpu_started build_cpu built
  cpu_now && cpu_started=$cpu
  echo "== configuring $build ($sanitizer)"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=None -DMLPH_WERROR=OFF -DMLPH_CUDA=OFF "${configure[@]}" \
    -DCMAKE_C_FLAGS="-O1 -g1 -fno-omit-frame-pointer $flags" \
    -DCMAKE_CXX_FLAGS="-O1 -g1 -fno-omit-frame-pointer $flags" \
    -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" -DCMAKE_MODULE_LINKER_FLAGS="$flags" \
    >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
  echo "== building ${targets[*]}"
  cmake --build "$build" -j "$jobs" --target "${targets[@]}"
  built=$SECONDS
  cpu_now && build_cpu=$((cpu - cpu_started))

  logs=$build/sanitizer-logs
  rm -rf "$logs" && mkdir -p "$logs"
  local common="log_path=$logs/report:print_stacktrace=1"
  local asan="$common:detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1"
  asan+=":check_initialization_order=1"
  export LSAN_OPTIONS="suppressions=$suppressions/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="$common:halt_on_error=1"
  export TSAN_OPTIONS="$common:halt_on_error=0:second_deadlock_stack=1:suppressions=$suppressions/tsan.supp"
  if [ "$sanitizer" = asan ]; then
    ASAN_OPTIONS=$asan run_tests "${tests[@]}" -E "$ASAN_SKIP|$MPI_TESTS"
    # (the CI set has no MPI test)
    [ "$scope" = ci ] || ASAN_OPTIONS=$asan:fast_unwind_on_malloc=0 run_tests -R "$MPI_TESTS" -E "$ASAN_SKIP"
  else
    run_tests "${tests[@]}"
  fi

  if compgen -G "$logs/report*" >/dev/null; then
    for report in "$logs"/report*; do
      echo "---- $(basename "$report")"
      head -n 80 "$report"
    done
    echo "sanitize $sanitizer: reports above ($(ls "$logs" | wc -l) processes)" >&2
    status=1
  fi
  cpu_now
  echo "== sanitize $sanitizer ($scope): build $((built - started)) s ($build_cpu s of CPU)," \
    "tests $((SECONDS - built)) s ($((cpu - cpu_started - build_cpu)) s of CPU), on $jobs cores"
}

case $mode in
  asan | tsan) sanitize "$mode" full ;;
  ci)
    sanitize asan ci
    sanitize tsan ci
    ;;
  *)
    echo "usage: tools/ci/sanitize.sh asan|tsan|ci" >&2
    exit 2
    ;;
esac
[ $status -eq 0 ] && echo "sanitize $mode: passed"
exit $status
