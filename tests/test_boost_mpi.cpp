#include <doctest/doctest.h>
#include <mdring/boost_mpi.hpp>
TEST_CASE("placeholder") { CHECK(true); }
