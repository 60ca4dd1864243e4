# Runs PROGRAM on NP processes twice: natively, then with PRELOAD in LD_PRELOAD
# and MDRING_REPORT=1 (and MDRING_PMPI_MIN_BYTES=0, so that every size is taken,
# unless ENV sets it). Both must print PASSED and the same "digest" lines; the
# preloaded run's stderr must match every regex in EXPECT.
#   cmake -DMPIEXEC=... -DNP=4 -DPROGRAM=... -DPRELOAD=.../libmdring-pmpi.so
#         "-DENV=VAR=value;..." "-DEXPECT=regex;..." -P run.cmake
function(run_program out_var err_var)
  execute_process(COMMAND ${MPIEXEC} -n ${NP} ${ARGN} ${PROGRAM}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 500)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "PASSED")
    message(FATAL_ERROR "${PROGRAM} on ${NP} processes (${ARGN}) failed (${rc}):\n${out}\n${err}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
  set(${err_var} "${err}" PARENT_SCOPE)
endfunction()

# Variables for the program itself go to both runs; MDRING_* only to the preloaded one.
set(both "")
set(preloaded -x LD_PRELOAD=${PRELOAD} -x MDRING_REPORT=1)
set(min_bytes_given OFF)
foreach(kv IN LISTS ENV)
  if(kv MATCHES "^MDRING_PMPI_MIN_BYTES=")
    set(min_bytes_given ON)
  endif()
  if(kv MATCHES "^MDRING_")
    list(APPEND preloaded -x ${kv})
  else()
    list(APPEND both -x ${kv})
  endif()
endforeach()
if(NOT min_bytes_given)
  list(APPEND preloaded -x MDRING_PMPI_MIN_BYTES=0)
endif()

run_program(native native_err ${both})
run_program(mdring report ${both} ${preloaded})
message(STATUS "native:\n${native}\npreloaded:\n${mdring}\nreport:\n${report}")

string(REGEX MATCHALL "digest [^\n]*" d_native "${native}")
string(REGEX MATCHALL "digest [^\n]*" d_mdring "${mdring}")
if(NOT d_native STREQUAL d_mdring)
  message(FATAL_ERROR "the results differ with the interposer:\nnative:  ${d_native}\nmdring:  ${d_mdring}")
endif()
if(NOT d_native)
  message(FATAL_ERROR "no digests printed")
endif()
string(REPLACE "\n" ";" report_lines "${report}")
foreach(re IN LISTS EXPECT)
  set(found OFF)
  foreach(line IN LISTS report_lines)
    if(line MATCHES "${re}")
      set(found ON)
      break()
    endif()
  endforeach()
  if(NOT found)
    message(FATAL_ERROR "the report has no line matching \"${re}\":\n${report}")
  endif()
endforeach()
