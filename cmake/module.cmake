# agentkv_module(NAME DEPS...) : a static library from every .cpp in the
# calling directory (an interface library while the module has none).
function(agentkv_module name)
  file(GLOB _srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp ${ARGV_EXTRA_DIRS})
  if(_srcs)
    add_library(${name} STATIC ${_srcs})
    target_link_libraries(${name} PUBLIC ${ARGN})
  else()
    add_library(${name} INTERFACE)
    target_link_libraries(${name} INTERFACE ${ARGN})
  endif()
endfunction()

# agentkv_test(NAME DIR DEPS...) : one gtest binary from every .cpp in DIR,
# labelled by where DIR is: e2e (tests/e2e, the real model), backend
# (tests/backend) or unit. `ctest -L unit` runs one kind.
function(agentkv_test name dir)
  file(GLOB _srcs CONFIGURE_DEPENDS ${dir}/*.cpp)
  if(NOT _srcs)
    return()
  endif()
  add_executable(${name} ${_srcs})
  target_link_libraries(${name} PRIVATE ${ARGN} GTest::gtest GTest::gtest_main)
  # The checkout path comes from the environment (tests/source_dir.h), not a
  # compile definition, so test objects are the same in every clone (ccache).
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  set(_label unit)
  if(dir MATCHES "/e2e$")
    set(_label e2e)
  elseif(dir MATCHES "/backend$")
    set(_label backend)
  endif()
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
    PROPERTIES ENVIRONMENT "AGENTKV_SOURCE_DIR=${CMAKE_SOURCE_DIR}" LABELS ${_label})
endfunction()

# agentkv_batched(TARGET N) : TARGET's .cpp files compiled as N translation
# units (batches), each including its share of them, for targets whose every
# file includes a costly header (CLI11, nlohmann/json): a batch parses it
# once. CMake's own UNITY_BUILD does the same, but its batch files name the
# sources by absolute path, so no clone's batch is ever a ccache hit for
# another's; these name them relative to src/. A name two files of a batch
# each define in an anonymous namespace is a compile error: rename one.
function(agentkv_batched target n)
  get_target_property(_srcs ${target} SOURCES)
  list(FILTER _srcs INCLUDE REGEX "\\.cpp$")
  list(LENGTH _srcs _len)
  math(EXPR _per "(${_len} + ${n} - 1) / ${n}")
  math(EXPR _last "(${_len} - 1) / ${_per}")
  set(_i 0)
  foreach(_f IN LISTS _srcs)
    math(EXPR _b "${_i} / ${_per}")
    file(RELATIVE_PATH _rel ${CMAKE_SOURCE_DIR}/src ${_f})
    string(APPEND _content_${_b} "#include \"${_rel}\"\n")
    math(EXPR _i "${_i} + 1")
  endforeach()
  foreach(_b RANGE ${_last})
    set(_out ${CMAKE_CURRENT_BINARY_DIR}/${target}_batch_${_b}.cpp)
    file(CONFIGURE OUTPUT ${_out} CONTENT "${_content_${_b}}")  # rewritten only when it changes
    target_sources(${target} PRIVATE ${_out})
  endforeach()
  set_source_files_properties(${_srcs} PROPERTIES HEADER_FILE_ONLY ON)
endfunction()
