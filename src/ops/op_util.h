// Shared checks for abstract-eval rules: every failure is a pl::Error naming the op and the shapes.
#pragma once
#include <string>
#include <vector>

#include "src/ir/ir.h"
#include "src/ir/primitive.h"

namespace pallas::ops {

using ir::Aval;
using ir::Params;

[[noreturn]] void fail(const std::string& op, const std::string& msg);
void expect_arity(const std::string& op, const std::vector<Aval>& in, size_t n);
void expect_array(const std::string& op, const Aval& a, const char* which);
std::string avals_str(const std::vector<Aval>& in);
int normalize_axis(const std::string& op, int64_t axis, int ndim);

// Shape of ref[indexer]; dyn are the avals of the dynamic-index operands. Static slices (and
// ds sizes) that reach past the ref are errors unless the access is masked.
Shape indexed_shape(const std::string& op, const Aval& ref, const ir::NDIndexer& ix, const std::vector<Aval>& dyn,
                    bool masked = false);
int num_dynamic_indices(const ir::NDIndexer& ix);

enum class Family : uint8_t { Any, Numeric, Float, Int, IntOrBool };
bool in_family(DType t, Family f);
const char* family_name(Family f);

}  // namespace pallas::ops
