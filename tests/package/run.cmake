# Consumes mdring as a user would, in a fresh build tree:
#   MODE=find_package      install mdring from BUILD_DIR into a prefix, then
#                          find_package(mdring) from tests/package/consumer
#   MODE=add_subdirectory  add_subdirectory(SOURCE_DIR) from the same consumer
#   MODE=headers_only      configure SOURCE_DIR afresh and install it without
#                          building anything, then find_package it
# then builds the consumer and runs its programs. OPTIMIZE: the consumer's -O.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()

set(args -S ${SOURCE_DIR}/tests/package/consumer -B ${WORK_DIR}/build -DCMAKE_CXX_COMPILER=${CXX}
         -DCMAKE_BUILD_TYPE=Release -DMDRING_MODE=${MODE})
# MDRING_TEST_OPTIMIZE (CI: -O0) compiles the consumer's programs the same way as
# the tests: what they check (the package) does not depend on it.
if(OPTIMIZE)
  list(APPEND args "-DCMAKE_CXX_FLAGS_RELEASE=${OPTIMIZE} -DNDEBUG")
endif()
if(MODE STREQUAL "headers_only")
  # What one does with a header-only library: configure, then install, nothing
  # built. The headers and the package must be there, the compiled parts not; the
  # consumer then finds mdring::mdring, mdring::mpi and mdring::ucx (headers).
  run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/src -DCMAKE_CXX_COMPILER=${CXX} -DMDRING_BUILD_TESTS=OFF
      -DMDRING_BUILD_EXAMPLES=OFF -DMDRING_BUILD_BENCHMARKS=OFF -DMDRING_CUDA=OFF -DMDRING_BUILD_TORCH=OFF)
  run(${CMAKE_COMMAND} --install ${WORK_DIR}/src --prefix ${WORK_DIR}/prefix)
  foreach(f include/mdring/mdring.hpp share/cmake/mdring/mdringConfig.cmake share/cmake/mdring/mdringTargets.cmake)
    if(NOT EXISTS ${WORK_DIR}/prefix/${f})
      message(FATAL_ERROR "the install of an unbuilt tree has no ${f}")
    endif()
  endforeach()
  file(GLOB_RECURSE built ${WORK_DIR}/prefix/*.so ${WORK_DIR}/prefix/bin/*)
  if(built)
    message(FATAL_ERROR "the install of an unbuilt tree has compiled files: ${built}")
  endif()
  list(TRANSFORM args REPLACE "^-DMDRING_MODE=headers_only$" "-DMDRING_MODE=find_package")
  list(APPEND args -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DMDRING_SEPARATE_BUILD=OFF)
elseif(MODE STREQUAL "find_package")
  run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
  if(NOT EXISTS ${WORK_DIR}/prefix/share/cmake/mdring/mdringConfigVersion.cmake)
    message(FATAL_ERROR "the install has no share/cmake/mdring/mdringConfigVersion.cmake")
  endif()
  if(HAVE_MPI)
    file(GLOB pmpi ${WORK_DIR}/prefix/lib*/libmdring-pmpi.so ${WORK_DIR}/prefix/lib/*/libmdring-pmpi.so)
    if(NOT pmpi)
      message(FATAL_ERROR "the install has no lib/libmdring-pmpi.so (the MPI interposer)")
    endif()
  endif()
  if(HAVE_TORCH)  # the Python package, imported from the prefix
    run(${CMAKE_COMMAND} -E env --unset=PYTHONPATH ${PYTHON} ${SOURCE_DIR}/tests/package/torch_check.py
        ${WORK_DIR}/prefix/${PYDIR})
  endif()
  list(APPEND args -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DMDRING_RUN=${WORK_DIR}/prefix/bin/mdring-run)
  if(NOT EXISTS ${WORK_DIR}/prefix/bin/mdring-run)
    message(FATAL_ERROR "the install has no bin/mdring-run (the launcher)")
  endif()
else()
  list(APPEND args -DMDRING_SOURCE_DIR=${SOURCE_DIR})
endif()
list(APPEND args -DEXPECT_MPI=${HAVE_MPI} -DEXPECT_BOOST_MPI=${HAVE_BOOST_MPI} -DEXPECT_UCX=${HAVE_UCX})
run(${CMAKE_COMMAND} ${args})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${CMAKE_CTEST_COMMAND} --test-dir ${WORK_DIR}/build --output-on-failure)
