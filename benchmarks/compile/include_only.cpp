// The compile-cost benchmark: including mdring's main header, nothing called.
#include <mdring/mdring.hpp>

int main() { return 0; }
