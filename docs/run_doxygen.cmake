# Runs Doxygen for the docs.reference test: fails on any warning.
#   cmake -DDOXYGEN=<doxygen> -DDOXYFILE=<Doxyfile> -DOUTPUT=<dir> -P run_doxygen.cmake
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE "${OUTPUT}")
execute_process(COMMAND "${DOXYGEN}" "${DOXYFILE}" RESULT_VARIABLE status ERROR_VARIABLE err OUTPUT_VARIABLE out)
if(NOT status STREQUAL "0" OR err)
  message(FATAL_ERROR "doxygen failed (exit ${status}):\n${err}${out}")
endif()
if(NOT EXISTS "${OUTPUT}/html/index.html")
  message(FATAL_ERROR "doxygen wrote no ${OUTPUT}/html/index.html")
endif()
message(STATUS "reference built without warnings: ${OUTPUT}/html/index.html")
