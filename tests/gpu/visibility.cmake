# cmake -DNM=<nm> -DLIB=<shared object> -P visibility.cmake
# The probe's own function is exported; no mdring kernel (fold_kernel) is.
execute_process(COMMAND ${NM} -D --defined-only ${LIB} RESULT_VARIABLE rc OUTPUT_VARIABLE syms ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} failed on ${LIB}: ${err}")
endif()
if(NOT syms MATCHES "mdring_visibility_probe")
  message(FATAL_ERROR "the probe function is not exported (is nm reading the dynamic symbols?):\n${syms}")
endif()
if(syms MATCHES "fold_kernel")
  string(REGEX MATCHALL "[^\n]*fold_kernel[^\n]*" leaked "${syms}")
  message(FATAL_ERROR "mdring kernels are exported from a shared object (expected hidden visibility):\n${leaked}")
endif()
message(STATUS "no mdring kernel symbol is exported from ${LIB}")
