// The library of separate compilation (mdring/separate/api.hpp): CMake target
// mdring::separate compiles this file into the target that links it.
#include <mdring/separate/src.hpp>
