// test_transport_cuda.cpp — device buffers through the transports (being written).
#include <catch2/catch.hpp>
