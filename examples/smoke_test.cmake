# Runs an example and checks both its exit status (0) and that its output
# matches EXPECT (CTest's PASS_REGULAR_EXPRESSION alone would ignore the
# exit status).
#   cmake -DEXAMPLE=<program> -DARGS=<arg;...> -DEXPECT=<regex> -P smoke_test.cmake
execute_process(COMMAND ${EXAMPLE} ${ARGS}
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE status)
message("${out}")
if(err)
  message("stderr:\n${err}")
endif()
if(NOT status STREQUAL "0")
  message(FATAL_ERROR "${EXAMPLE} exited with ${status}")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "${EXAMPLE}'s output does not match \"${EXPECT}\"")
endif()
