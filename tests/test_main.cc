// The suite's main: runs every test on the backend PALLAS_TEST_BACKEND names (CTest registers
// the suite twice: "interpret." and "gpu."), and says how many kernels ran where.
//
//   PALLAS_TEST_BACKEND=interpret  every call left to Backend::Auto runs on the interpreter
//                                  and, in a build with the CUDA toolkit, is also compiled for
//                                  sm_90a (PALLAS_CUDA_COMPILE_CHECK, unless set to 0);
//   PALLAS_TEST_BACKEND=cuda       every such call runs on the GPU, with poisoned outputs
//                                  and scratch as in the interpreter. Without a usable GPU the
//                                  test exits with code 77, which CTest reports as skipped —
//                                  its kernels were compiled for sm_90a by the interpret half.
//   unset                          Backend::Auto as a user gets it.
// PALLAS_TEST_COUNTS_FILE=path appends "interpreter N cuda M" per process (for gpu-status.md).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <pallas/pallas.h>

int main(int argc, char** argv) {
  const char* b = std::getenv("PALLAS_TEST_BACKEND");
  std::string backend = b ? b : "";
  // Compiled kernels go under the build tree, not the user's ~/.cache (unless asked otherwise).
#ifdef PALLAS_TEST_CACHE_DIR
  setenv("PALLAS_CACHE_DIR", PALLAS_TEST_CACHE_DIR, 0);
#endif
  bool listing = false;
  for (int k = 1; k < argc; ++k) listing = listing || std::strncmp(argv[k], "--gtest_list_tests", 18) == 0;
  if (backend == "interpret") {
    setenv("PALLAS_BACKEND", "interpret", 1);
#ifdef PALLAS_TEST_HAVE_CUDA
    setenv("PALLAS_CUDA_COMPILE_CHECK", "1", 0);  // unless the caller set it (=0 turns it off)
#endif
  } else if (backend == "cuda") {
    setenv("PALLAS_BACKEND", "cuda", 1);
    setenv("PALLAS_CUDA_POISON", "1", 1);
    if (!listing && !pallas::cuda_available()) {
      std::printf("[  SKIPPED ] no usable CUDA device here; the interpret half compiles this test's kernels for sm_90a\n");
      return 77;
    }
  } else if (!backend.empty()) {
    std::fprintf(stderr, "PALLAS_TEST_BACKEND is '%s'; use interpret or cuda\n", backend.c_str());
    return 2;
  }
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  pallas::RunCounts n = pallas::run_counts();
  if (!listing) std::printf("[ BACKENDS ] kernels run: %lld on the interpreter, %lld on the GPU\n",
                            static_cast<long long>(n.interpreter), static_cast<long long>(n.cuda));
  if (const char* f = std::getenv("PALLAS_TEST_COUNTS_FILE"); f && *f && !listing) {
    if (FILE* out = std::fopen(f, "a")) {
      std::fprintf(out, "interpreter %lld cuda %lld\n", static_cast<long long>(n.interpreter), static_cast<long long>(n.cuda));
      std::fclose(out);
    }
  }
  return rc;
}
