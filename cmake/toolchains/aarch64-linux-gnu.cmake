# Cross build for aarch64 Linux (Debian 12 multiarch; tools/cross/setup-aarch64.sh installs what it needs):
#   cmake -S . -B build-aarch64 -G Ninja --toolchain cmake/toolchains/aarch64-linux-gnu.cmake
# Programs and tests run under qemu-aarch64 through tools/cross/qemu-aarch64.sh, so ctest, gtest's
# test discovery and add_test work unchanged: MLPH_QEMU_CPU picks the emulated CPU (default a64fx;
# e.g. max,sve256=on for 256-bit SVE).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_CROSSCOMPILING_EMULATOR ${CMAKE_CURRENT_LIST_DIR}/../../tools/cross/qemu-aarch64.sh)

# Libraries and CMake packages: the arm64 multiarch directories under /usr, and the private prefix
# holding the -dev packages that cannot sit beside their amd64 twins. Programs (ccache, ninja) are
# the host's.
set(MLPH_AARCH64_PREFIX /opt/mlph-aarch64 CACHE PATH "where tools/cross/setup-aarch64.sh unpacked arm64 -dev packages")
list(APPEND CMAKE_PREFIX_PATH ${MLPH_AARCH64_PREFIX}/usr)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)

# -march=native means the build machine, not the target.
set(MLPH_NATIVE OFF CACHE BOOL "Optimize for the build machine's CPU (-march=native)")
# Debian's MPI and HDF5 are found through compiler wrappers (mpicc, h5cc) that are host programs
# naming amd64 libraries: the cross build does without comms/mpi and the deepcam workload.
set(CMAKE_DISABLE_FIND_PACKAGE_MPI ON CACHE BOOL "")
set(CMAKE_DISABLE_FIND_PACKAGE_HDF5 ON CACHE BOOL "")
