// Runs every example against its plain C++ reference, on the GPU when there is one, else
// in interpret mode; exits non-zero if any is off.
#include <cstdio>

#include "examples/examples.h"

int main() {
  std::printf("Pallas C++ examples (GPU %s)\n", pallas::cuda_available() ? "present" : "absent: interpret mode");
  bool ok = true;
  ok = examples::vector_add() && ok;
  ok = examples::matmul() && ok;
  ok = examples::softmax() && ok;
  ok = examples::layer_norm() && ok;
  ok = examples::flash_attention() && ok;
  std::printf("%s\n", ok ? "all examples match their references" : "SOME EXAMPLES FAILED");
  return ok ? 0 : 1;
}
