# The embeddable engine: one static library, libagentkv.a, of the modules the
# serving API (include/agentkv/serving.h, text.h) needs, installed with those
# headers and a package config, so that another CMake project links it with
#   find_package(agentkv REQUIRED)
#   target_link_libraries(app PRIVATE agentkv::engine)
# (examples/embed.cpp; scripts/test.sh builds and runs it against an install).
# The HTTP server, grammars (xgrammar), cluster glue and workloads stay out:
# a program that embeds the engine brings its own front end.
set(_engine_modules agentkv_runtime agentkv_sharing agentkv_sched agentkv_adapter agentkv_model agentkv_kv
                    agentkv_backend agentkv_tokenizer agentkv_jinja agentkv_format agentkv_util)
set(_engine_objects)
foreach(_m ${_engine_modules})
  list(APPEND _engine_objects $<TARGET_OBJECTS:${_m}>)
endforeach()
add_library(agentkv_engine STATIC ${_engine_objects})
add_library(agentkv::engine ALIAS agentkv_engine)
set_target_properties(agentkv_engine PROPERTIES OUTPUT_NAME agentkv EXPORT_NAME engine)
target_compile_features(agentkv_engine INTERFACE cxx_std_20)
target_include_directories(agentkv_engine INTERFACE $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include>
                                                    $<INSTALL_INTERFACE:include>)
# What the objects link against: the same libraries the modules name.
if(AGENTKV_GEMM STREQUAL "dnnl")
  set(_engine_gemm DNNL::dnnl)
else()
  set(_engine_gemm PkgConfig::OPENBLAS)
endif()
target_link_libraries(agentkv_engine INTERFACE Threads::Threads PkgConfig::XXHASH ${_engine_gemm})

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
install(TARGETS agentkv_engine EXPORT agentkvTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${CMAKE_SOURCE_DIR}/include/agentkv/constraint.h ${CMAKE_SOURCE_DIR}/include/agentkv/kv_events.h
              ${CMAKE_SOURCE_DIR}/include/agentkv/kv_remote.h ${CMAKE_SOURCE_DIR}/include/agentkv/kv_sharing_params.h
              ${CMAKE_SOURCE_DIR}/include/agentkv/sampling.h ${CMAKE_SOURCE_DIR}/include/agentkv/serving.h
              ${CMAKE_SOURCE_DIR}/include/agentkv/status.h ${CMAKE_SOURCE_DIR}/include/agentkv/text.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/agentkv)
set(_engine_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/agentkv)
install(EXPORT agentkvTargets NAMESPACE agentkv:: DESTINATION ${_engine_cmake_dir})
set(AGENTKV_CONFIG_GEMM ${AGENTKV_GEMM})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/agentkvConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/agentkvConfig.cmake INSTALL_DESTINATION ${_engine_cmake_dir})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/agentkvConfigVersion.cmake VERSION 0.1.0
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/agentkvConfig.cmake ${CMAKE_BINARY_DIR}/agentkvConfigVersion.cmake
        DESTINATION ${_engine_cmake_dir})
