# Compiles SOURCE and passes only if the compiler rejects it with the message that
# the file's "// expect: <regex>" line names. Run by ctest as `cmake -P`.
file(STRINGS ${SOURCE} expect_lines REGEX "^// expect: ")
if(NOT expect_lines)
  message(FATAL_ERROR "${SOURCE} has no '// expect: <regex>' line")
endif()
execute_process(
  COMMAND ${CXX} -std=c++20 -fsyntax-only -I${INCLUDE} ${SOURCE}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but it must be rejected")
endif()
foreach(line IN LISTS expect_lines)
  string(REGEX REPLACE "^// expect: " "" regex "${line}")
  if(NOT "${out}${err}" MATCHES "${regex}")
    message(FATAL_ERROR "${SOURCE} was rejected, but without the message /${regex}/:\n${out}${err}")
  endif()
endforeach()
message(STATUS "${SOURCE}: rejected with the expected message")
