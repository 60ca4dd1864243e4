// Compiled only to build the precompiled header of tests/CMakeLists.txt
// (mdring_test_pch): the test files reuse it.
