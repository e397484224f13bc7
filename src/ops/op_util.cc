#include "src/ops/op_util.h"

#include <algorithm>

namespace pallas::ops {

void fail(const std::string& op, const std::string& msg) { throw Error(op + ": " + msg); }

std::string avals_str(const std::vector<Aval>& in) {
  std::string s;
  for (size_t i = 0; i < in.size(); ++i) s += (i ? ", " : "") + in[i].str();
  return s;
}

void expect_arity(const std::string& op, const std::vector<Aval>& in, size_t n) {
  if (in.size() != n)
    fail(op, "takes " + std::to_string(n) + " operands, got " + std::to_string(in.size()) + " (" + avals_str(in) + ")");
}

void expect_array(const std::string& op, const Aval& a, const char* which) {
  if (a.is_ref) fail(op, std::string(which) + " must be a value, got the ref " + a.str() + "; read it first (ref[pl::all])");
}

int normalize_axis(const std::string& op, int64_t axis, int ndim) {
  int64_t a = axis < 0 ? axis + ndim : axis;
  if (a < 0 || a >= ndim)
    fail(op, "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(ndim));
  return static_cast<int>(a);
}

int num_dynamic_indices(const ir::NDIndexer& ix) {
  int n = 0;
  for (auto& d : ix.dims)
    if (d.operand >= 0) n = std::max(n, d.operand + 1);
  return n;
}

Shape indexed_shape(const std::string& op, const Aval& ref, const ir::NDIndexer& ix, const std::vector<Aval>& dyn,
                    bool masked) {
  using K = ir::IndexDim::Kind;
  if (static_cast<int>(ix.dims.size()) != ref.ndim())
    fail(op, "indexer has " + std::to_string(ix.dims.size()) + " entries for the rank-" + std::to_string(ref.ndim()) +
                 " ref " + ref.str());
  Shape arr_shape;
  int n_arrays = 0;
  for (int d = 0; d < ref.ndim(); ++d) {
    const auto& x = ix.dims[d];
    auto dyn_aval = [&]() -> const Aval& {
      if (x.operand < 0 || x.operand >= static_cast<int>(dyn.size())) fail(op, "internal: bad indexer operand");
      return dyn[x.operand];
    };
    switch (x.kind) {
      case K::Slice:
        if (x.size < 0 || x.stride < 1) fail(op, "slice of size " + std::to_string(x.size) + " and stride " + std::to_string(x.stride) + " is invalid");
        // With a mask, a static slice may reach past the ref: the mask guards those lanes
        // (the Triton idiom ds(0, next_power_of_2(n)) on a row of n).
        if (!masked && (x.start < 0 || x.start + (x.size - 1) * x.stride >= ref.shape[d] + (x.size == 0 ? 1 : 0)))
          fail(op, "static slice " + std::to_string(x.start) + ":" + std::to_string(x.start + x.size * x.stride) +
                       " is out of bounds for dimension " + std::to_string(d) + " of " + ref.str() +
                       "; pass a mask (pl::load / pl::store / atomics take .mask) that is false on the lanes outside the ref");
        break;
      case K::DynSlice: {
        const Aval& s = dyn_aval();
        if (!s.shape.empty() || !is_integer(s.dtype))
          fail(op, "ds() start must be an integer scalar, got " + s.str());
        if (!masked && x.size > ref.shape[d])
          fail(op, "ds(start, " + std::to_string(x.size) + ") is larger than dimension " + std::to_string(d) + " of " +
                       ref.str() + "; pass a mask that is false on the lanes outside the ref");
        if (x.size < 0 || x.stride < 1)
          fail(op, "ds(start, " + std::to_string(x.size) + ", " + std::to_string(x.stride) +
                       ") is invalid: the size must be non-negative and the stride positive");
        break;
      }
      case K::Index:
        if (x.start < 0 || x.start >= ref.shape[d])
          fail(op, "index " + std::to_string(x.start) + " is out of bounds for dimension " + std::to_string(d) + " of " + ref.str());
        break;
      case K::DynIndex: {
        const Aval& s = dyn_aval();
        if (!s.shape.empty() || !is_integer(s.dtype)) fail(op, "an index must be an integer scalar, got " + s.str());
        break;
      }
      case K::Array: {
        const Aval& s = dyn_aval();
        if (!is_integer(s.dtype)) fail(op, "an index array must have an integer dtype, got " + s.str());
        if (n_arrays++ == 0) arr_shape = s.shape;
        else if (s.shape != arr_shape)
          fail(op, "index arrays must have the same shape (pl::load and friends broadcast them), got " + shape_str(arr_shape) +
                       " and " + shape_str(s.shape));
        break;
      }
    }
  }
  // numpy advanced indexing (ir::placement): slices in order, the index shape as one block
  ir::IndexPlacement pl = ir::placement(ix, static_cast<int>(arr_shape.size()));
  Shape res(static_cast<size_t>(std::count_if(pl.slice_axis.begin(), pl.slice_axis.end(), [](int a) { return a >= 0; })) +
            (pl.has_array ? arr_shape.size() : 0));
  for (int d = 0; d < ref.ndim(); ++d)
    if (pl.slice_axis[d] >= 0) res[static_cast<size_t>(pl.slice_axis[d])] = ix.dims[d].size;
  if (pl.has_array)
    for (size_t k = 0; k < arr_shape.size(); ++k) res[static_cast<size_t>(pl.arr_axis0) + k] = arr_shape[k];
  return res;
}

bool in_family(DType t, Family f) {
  switch (f) {
    case Family::Any: return true;
    case Family::Numeric: return is_float(t) || is_integer(t);
    case Family::Float: return is_float(t);
    case Family::Int: return is_integer(t);
    case Family::IntOrBool: return is_integer(t) || t == DType::Bool;
  }
  return false;
}

const char* family_name(Family f) {
  switch (f) {
    case Family::Any: return "any dtype";
    case Family::Numeric: return "integer or floating dtypes";
    case Family::Float: return "floating dtypes";
    case Family::Int: return "integer dtypes";
    case Family::IntOrBool: return "integer or bool dtypes";
  }
  return "";
}

}  // namespace pallas::ops
