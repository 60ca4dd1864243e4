#include <doctest/doctest.h>
#include <mdring/mpi.hpp>
TEST_CASE("placeholder") { CHECK(true); }
