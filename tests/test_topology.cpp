#include <doctest/doctest.h>
#include <mdring/mdring.hpp>
TEST_CASE("placeholder") { CHECK(true); }
