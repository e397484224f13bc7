// The example ladder; each returns whether it matched its reference.
#pragma once
#include "examples/example_util.h"

namespace examples {
bool vector_add();
bool matmul();
bool softmax();
bool layer_norm();
bool flash_attention();
}  // namespace examples
