# mlph_add_plugin(KIND NAME SOURCES... [LIBS ...])
# Builds libmlph-<kind>-<name>.so. Only the ABI headers and SDK (mlperf_hpc::abi) are visible to it,
# and a version script exports the single entry symbol `mlph_plugin`: nothing else leaks. Installs
# it in lib/mlperf-hpc-<ABI major>/, where mlperf-run looks beside its bin/.
#
# One definition for both sides: this tree includes this file, and the installed SDK package
# (lib/cmake/mlperf_hpc) ships it, so a plug-in built outside the tree does
#   find_package(mlperf_hpc 1.4 REQUIRED)
#   mlph_add_plugin(backend mine SOURCES mine.cpp)
# Needs MLPH_ABI_MAJOR before the include. MLPH_PLUGIN_OUTPUT_DIR, when set, is where plug-ins are
# built (this tree: build/lib/mlperf-hpc-<major>/); otherwise the usual library output directory.
set(MLPH_PLUGIN_SUBDIR lib/mlperf-hpc-${MLPH_ABI_MAJOR})
set(MLPH_PLUGIN_MAP ${CMAKE_CURRENT_LIST_DIR}/mlph_plugin.map)

function(mlph_add_plugin kind name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  set(target mlph-${kind}-${name})
  add_library(${target} MODULE ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE mlperf_hpc::abi ${ARG_LIBS})
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    CXX_VISIBILITY_PRESET hidden
    CUDA_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    INSTALL_RPATH "$ORIGIN"
    BUILD_RPATH "$ORIGIN")
  if(MLPH_PLUGIN_OUTPUT_DIR)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${MLPH_PLUGIN_OUTPUT_DIR})
  endif()
  target_link_options(${target} PRIVATE "-Wl,--version-script=${MLPH_PLUGIN_MAP}" "-Wl,--no-undefined")
  install(TARGETS ${target} LIBRARY DESTINATION ${MLPH_PLUGIN_SUBDIR})
  set_property(GLOBAL APPEND PROPERTY MLPH_PLUGINS "${kind}/${name}")
endfunction()
