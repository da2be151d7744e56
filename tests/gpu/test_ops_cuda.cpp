// test_ops_cuda.cpp — the CUDA ops against their CPU twins (being written).
#include <catch2/catch.hpp>
