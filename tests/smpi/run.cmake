# ctest "smpi_smoke": compiles smoke.cpp with smpicxx and runs it on 8 simulated
# ranks (two nodes of platform.xml) with smpirun: on the ideal network model, then
# one natural-input row on SMPI's default one. Run as cmake -P with SMPICXX,
# SMPIRUN, SOURCE_DIR, INCLUDE and WORK_DIR set (OPTIMIZE optional).
file(MAKE_DIRECTORY ${WORK_DIR})
# OPTIMIZE (MDRING_TEST_OPTIMIZE; CI: -O0) compiles it the way the tests are; -O1 otherwise.
if(NOT OPTIMIZE)
  set(OPTIMIZE -O1)
endif()
execute_process(
  COMMAND ${SMPICXX} -std=c++20 ${OPTIMIZE} -I${INCLUDE} ${SOURCE_DIR}/smoke.cpp -o ${WORK_DIR}/smpi-smoke
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "smpicxx failed:\n${out}${err}")
endif()
file(WRITE ${WORK_DIR}/hosts "node0:4\nnode1:4\n")
execute_process(
  COMMAND ${SMPIRUN} -np 8 -platform ${SOURCE_DIR}/platform.xml -hostfile ${WORK_DIR}/hosts
          --cfg=smpi/simulate-computation:no --cfg=smpi/bw-factor:0:1 --cfg=smpi/lat-factor:0:1
          --cfg=network/crosstraffic:0 --log=root.thres:error ${WORK_DIR}/smpi-smoke
  WORKING_DIRECTORY ${WORK_DIR}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "${out}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "smpi smoke: ok")
  message(FATAL_ERROR "smpirun failed (${rc}):\n${out}${err}")
endif()
# One natural-input row on SMPI's default network model (its size-dependent
# factors and TCP cross-traffic: no factor settings).
execute_process(
  COMMAND ${SMPIRUN} -np 8 -platform ${SOURCE_DIR}/platform.xml -hostfile ${WORK_DIR}/hosts
          --cfg=smpi/simulate-computation:no --log=root.thres:error ${WORK_DIR}/smpi-smoke natural
  WORKING_DIRECTORY ${WORK_DIR}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "${out}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "smpi smoke natural: ok")
  message(FATAL_ERROR "smpirun (natural input, default network) failed (${rc}):\n${out}${err}")
endif()
