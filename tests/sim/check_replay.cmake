# Runs one schedule twice with --verbose and requires the same trace, byte
# for byte (the seed determines everything: faults, clocks, the library's
# random draws, the agent's jitter).
foreach(run a b)
  execute_process(COMMAND ${SIM} --seed ${SEED} --verbose OUTPUT_VARIABLE out_${run} RESULT_VARIABLE rc_${run})
endforeach()
# The closing summary line has the wall time: not part of the schedule.
foreach(run a b)
  string(REGEX REPLACE "tenure_sim: [^\n]*" "" out_${run} "${out_${run}}")
endforeach()
string(LENGTH "${out_a}" len)
if(NOT out_a STREQUAL out_b)
  message(FATAL_ERROR "tenure_sim --seed ${SEED} --verbose printed two different traces")
endif()
if(len LESS 1000)
  message(FATAL_ERROR "the trace of seed ${SEED} is suspiciously short (${len} bytes):\n${out_a}")
endif()
message(STATUS "seed ${SEED} replayed identically (${len} bytes of trace, exit ${rc_a})")
