// Regression tests found by the differential fuzzer (fuzz/, docs/fuzzing.md).
//
// To add one: paste the test that pallas_fuzz prints after "paste into
// tests/fuzz_regressions_test.cc" below, and keep its comment (the seed and index that found
// it, and what failed). Each test runs its kernel on the interpreter (under ctest also
// compiled for sm_90a, PALLAS_CUDA_COMPILE_CHECK=1) and, where a GPU is present, on the GPU,
// comparing the outputs with the fuzzer's tolerances (fuzz::run_and_compare). Inputs come
// from fuzz::input(shape, dtype, seed), deterministic on every machine.
#include <gtest/gtest.h>

#include <limits>

#include <pallas/pallas.h>

#include "fuzz/fuzz_check.h"

namespace pl = pallas;
