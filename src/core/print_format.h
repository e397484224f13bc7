// debug_print's (and check's) text, one implementation for both backends, so a kernel prints
// the same characters in interpret mode and on the GPU (docs/design.md): a scalar prints as
// its value; a tile as its dtype and shape, a space, then its elements in row-major order in
// nested brackets: "f32[2,3] [[1 2 3] [4 5 6]]". Floats print as printf's %g of the value as
// a double (16-bit floats exactly), integers in decimal, bools as True / False.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "pallas/array.h"
#include "src/ir/ir.h"

namespace pallas::core {

// One element as a 64-bit "print slot": a float as the bits of its value as a double,
// a signed integer sign-extended, an unsigned one zero-extended, a bool as 0 or 1. The
// GPU writes values in this form into its print log; the interpreter converts to it.
uint64_t print_slot(DType t, const void* element);
std::string format_print_value(DType t, const Shape& shape, const uint64_t* slots);
// fmt with each "{}" replaced by the next value (extra "{}" stay as written).
std::string fill_print_format(const std::string& fmt, const std::vector<std::string>& vals);
// A failed check's message as every backend and checkify report it: "at kernel.cc:42: " (the
// pl::check's line, when known) and the filled message.
std::string check_failure_text(const ir::SourceLoc& loc, const std::string& message);

}  // namespace pallas::core
