# mlph_add_plugin(KIND NAME SOURCES... [LIBS ...])
# Builds libmlph-<kind>-<name>.so into the plug-in directory. Only the ABI headers are visible to
# it, and a version script exports the single entry symbol `mlph_plugin`: nothing else leaks.
function(mlph_add_plugin kind name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  set(target mlph-${kind}-${name})
  add_library(${target} MODULE ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE mlph_abi ${ARG_LIBS})
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    LIBRARY_OUTPUT_DIRECTORY ${MLPH_PLUGIN_OUTPUT_DIR}
    INSTALL_RPATH "$ORIGIN"
    BUILD_RPATH "$ORIGIN")
  target_link_options(${target} PRIVATE
    "-Wl,--version-script=${PROJECT_SOURCE_DIR}/plugins/mlph_plugin.map" "-Wl,--no-undefined")
  install(TARGETS ${target} LIBRARY DESTINATION ${MLPH_PLUGIN_SUBDIR})
  set_property(GLOBAL APPEND PROPERTY MLPH_PLUGINS "${kind}/${name}")
endfunction()
