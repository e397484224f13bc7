// N-d strided copies (strides in elements; a stride of 0 broadcasts).
#pragma once
#include "src/backends/interpret/value.h"

namespace pallas::interp {
void strided_copy(void* dst, const Dims& dst_strides, const void* src, const Dims& src_strides, const Dims& shape,
                  size_t width);
}
