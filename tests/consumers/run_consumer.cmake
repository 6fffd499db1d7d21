# Builds and runs one consumer project against tenure, as a downstream user would.
# Run by CTest (see CMakeLists.txt here) with cmake -P and these -D variables:
#   MODE          find_package | add_subdirectory
#   TENURE_SOURCE the tenure checkout
#   TENURE_BUILD  the tenure build tree (find_package: installed from it)
#   WORK          a scratch directory, wiped first (a fixed path keeps ccache warm)
#   CXX           the C++ compiler;  BUILD_TYPE  the consumer's build type
#   LAUNCHER      optional compiler launcher (ccache)
#   TENURE_CLI    client_only: the tenure binary the consumer runs as its agent
#   NM            client_only: nm, to check the consumer holds no agent code
cmake_minimum_required(VERSION 3.25)

foreach(var IN ITEMS MODE TENURE_SOURCE TENURE_BUILD WORK CXX BUILD_TYPE)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_consumer.cmake: -D${var}=... is required")
  endif()
endforeach()

function(run)
  string(REPLACE ";" " " shown "${ARGN}")
  message(STATUS "$ ${shown}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${shown}")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

# ccache only caches precompiled-header builds with this sloppiness.
set(ENV{CCACHE_SLOPPINESS} "pch_defines,time_macros,include_file_mtime,include_file_ctime")

set(configure_args -G Ninja -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=${BUILD_TYPE})
if(LAUNCHER)
  list(APPEND configure_args -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()

if(MODE STREQUAL "find_package" OR MODE STREQUAL "client_only")
  set(prefix "${WORK}/prefix")
  run(${CMAKE_COMMAND} --install "${TENURE_BUILD}" --prefix "${prefix}")

  # The installed headers must stand alone: nothing from src/ or the build tree.
  file(GLOB_RECURSE headers "${prefix}/include/tenure/*")
  if(NOT headers)
    message(FATAL_ERROR "no headers installed under ${prefix}/include/tenure")
  endif()
  foreach(header IN LISTS headers)
    file(STRINGS "${header}" includes REGEX "^[ \t]*#[ \t]*include")
    foreach(line IN LISTS includes)
      if(line MATCHES "\"" OR line MATCHES "src/" OR line MATCHES "<tenure/")
        if(line MATCHES "<tenure/([^>]+)>")
          if(NOT EXISTS "${prefix}/include/tenure/${CMAKE_MATCH_1}")
            message(FATAL_ERROR "${header}: ${line}: not installed")
          endif()
        else()
          message(FATAL_ERROR "${header}: ${line}: installed headers include only <tenure/...> and system headers")
        endif()
      endif()
    endforeach()
  endforeach()
  list(LENGTH headers n)
  message(STATUS "${n} installed headers include only installed or system headers")

  foreach(f IN ITEMS lib/cmake/tenure/tenureConfig.cmake lib/cmake/tenure/tenureConfigVersion.cmake
                     lib/cmake/tenure/tenureTargets.cmake lib/pkgconfig/tenure.pc)
    if(NOT EXISTS "${prefix}/${f}")
      message(FATAL_ERROR "not installed: ${f}")
    endif()
  endforeach()

  if(EXISTS "${prefix}/include/tenure/detail/agent")
    message(FATAL_ERROR "the agent's internals were installed: ${prefix}/include/tenure/detail/agent")
  endif()
  run(${CMAKE_COMMAND} -S "${TENURE_SOURCE}/tests/consumers/${MODE}" -B "${WORK}/build"
      ${configure_args} "-DCMAKE_PREFIX_PATH=${prefix}")
elseif(MODE STREQUAL "add_subdirectory")
  # The vendoring project's Debug build, the one its developers compile
  # most: tenure's whole library is compiled again in it, and at -O0 that
  # takes about half as long as at the suite's own build type.
  list(FILTER configure_args EXCLUDE REGEX "^-DCMAKE_BUILD_TYPE=")
  run(${CMAKE_COMMAND} -S "${TENURE_SOURCE}/tests/consumers/add_subdirectory" -B "${WORK}/build"
      ${configure_args} -DCMAKE_BUILD_TYPE=Debug "-DTENURE_SOURCE_DIR=${TENURE_SOURCE}")
else()
  message(FATAL_ERROR "unknown MODE ${MODE}")
endif()

run(${CMAKE_COMMAND} --build "${WORK}/build")
if(MODE STREQUAL "client_only")
  # Linked with tenure::client alone, the program holds no agent code: no
  # symbol of tenure::agent or of the agent's internals.
  execute_process(COMMAND "${NM}" -C "${WORK}/build/consumer" OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "nm failed (${rc}) on ${WORK}/build/consumer")
  endif()
  string(REGEX MATCHALL "[^\n]*tenure::(agent|detail::agent)[^a-z_][^\n]*" agent_symbols "${symbols}")
  list(LENGTH agent_symbols n)
  if(n GREATER 0)
    list(SUBLIST agent_symbols 0 5 first)
    string(REPLACE ";" "\n  " first "${first}")
    message(FATAL_ERROR "the client-only consumer holds ${n} agent symbols, e.g.\n  ${first}")
  endif()
  string(REGEX MATCHALL "tenure::election::" election_symbols "${symbols}")
  if(NOT election_symbols)
    message(FATAL_ERROR "the consumer holds no tenure::election symbol: nm read the wrong binary?")
  endif()
  message(STATUS "the client-only consumer holds tenure::election and no agent symbol")
  run("${WORK}/build/consumer" "${TENURE_CLI}")
else()
  run("${WORK}/build/consumer")
endif()

# Passed: the scratch install and build (several hundred MB each) go. A failed
# run stops above and leaves them for a look.
file(REMOVE_RECURSE "${WORK}")
