# What `cmake --install build --prefix P` adds beyond each target's own install rule (programs in
# bin/, plug-ins in lib/mlperf-hpc-<ABI major>/, the headers in include/mlph/):
#  - the SDK as a CMake package, lib/cmake/mlperf_hpc/, so that a project outside this tree builds
#    a plug-in with find_package(mlperf_hpc <major>.<minor> REQUIRED) and mlph_add_plugin
#    (examples/mlp-backend, docs/writing-a-backend.md). Its version is the ABI's and so is its
#    promise: a plug-in built against <major>.<minor> loads in every core of that major from that
#    minor on (SameMajorVersion);
#  - shared files the programs read at run time, in share/mlperf-hpc/: the example configs.
include(CMakePackageConfigHelpers)
set(MLPH_PACKAGE_DIR lib/cmake/mlperf_hpc)

set_target_properties(mlph_abi PROPERTIES EXPORT_NAME abi)
install(TARGETS mlph_abi EXPORT mlperf_hpc_targets)
install(EXPORT mlperf_hpc_targets NAMESPACE mlperf_hpc:: FILE mlperf_hpcTargets.cmake DESTINATION ${MLPH_PACKAGE_DIR})
configure_package_config_file(cmake/mlperf_hpcConfig.cmake.in ${CMAKE_BINARY_DIR}/mlperf_hpcConfig.cmake
  INSTALL_DESTINATION ${MLPH_PACKAGE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/mlperf_hpcConfigVersion.cmake
  VERSION ${MLPH_ABI_MAJOR}.${MLPH_ABI_MINOR} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/mlperf_hpcConfig.cmake ${CMAKE_BINARY_DIR}/mlperf_hpcConfigVersion.cmake
  cmake/MlphPlugin.cmake ${MLPH_PLUGIN_MAP} DESTINATION ${MLPH_PACKAGE_DIR})

install(DIRECTORY configs/ DESTINATION share/mlperf-hpc/configs)
