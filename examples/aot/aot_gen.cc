// The generator of the AOT example: compiles aot_kernels.h's calls at build time.
#include <pallas/aot.h>

#include "examples/aot/aot_kernels.h"

int main(int argc, char** argv) { return pallas::aot::generator_main(argc, argv, aot_example::entries()); }
