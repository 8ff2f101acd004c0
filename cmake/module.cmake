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
