// Shape primitives: iota, broadcast_in_dim, reshape, squeeze, transpose.
#include <algorithm>

#include "src/ops/op_util.h"

namespace pallas::ops {
using ir::PrimId;

void register_shape() {
  define_primitive(PrimId::iota, ir::PrimKind::Shape, [](const std::vector<Aval>& in, const Params& p) {
    expect_arity("iota", in, 0);
    Shape s = p.get<std::vector<int64_t>>("shape");
    for (int64_t d : s)
      if (d < 0) fail("iota", "negative dimension in shape " + shape_str(s));
    DType t = p.get<DType>("dtype");
    if (!is_integer(t) && !is_float(t)) fail("iota", std::string("needs a numeric dtype, got ") + dtype_name(t));
    normalize_axis("iota", p.get_int("dimension"), static_cast<int>(s.size()));
    return std::vector<Aval>{Aval::array(s, t)};
  });

  define_primitive(PrimId::broadcast_in_dim, ir::PrimKind::Shape, [](const std::vector<Aval>& in, const Params& p) {
    expect_arity("broadcast_in_dim", in, 1);
    expect_array("broadcast_in_dim", in[0], "the operand");
    Shape s = p.get<std::vector<int64_t>>("shape");
    auto dims = p.get<std::vector<int64_t>>("broadcast_dimensions");
    for (int64_t d : s)
      if (d < 0) fail("broadcast_in_dim", "negative dimension in shape " + shape_str(s));
    if (static_cast<int>(dims.size()) != in[0].ndim())
      fail("broadcast_in_dim", "broadcast_dimensions has " + std::to_string(dims.size()) + " entries for operand " + in[0].str());
    for (size_t k = 0; k < dims.size(); ++k) {
      if (dims[k] < 0 || dims[k] >= static_cast<int64_t>(s.size()) || (k && dims[k] <= dims[k - 1]))
        fail("broadcast_in_dim", "broadcast_dimensions must be increasing and within the result rank");
      int64_t d = in[0].shape[k];
      if (d != 1 && d != s[dims[k]])
        fail("broadcast_in_dim", "cannot broadcast " + in[0].str() + " to " + shape_str(s));
    }
    return std::vector<Aval>{Aval::array(s, in[0].dtype, in[0].weak)};
  });

  define_primitive(PrimId::reshape, ir::PrimKind::Shape, [](const std::vector<Aval>& in, const Params& p) {
    expect_arity("reshape", in, 1);
    expect_array("reshape", in[0], "the operand");
    Shape s = p.get<std::vector<int64_t>>("new_sizes");
    for (int64_t d : s)
      if (d < 0) fail("reshape", "negative dimension in shape " + shape_str(s));
    if (shape_size(s) != in[0].size())
      fail("reshape", "cannot reshape " + in[0].str() + " to " + shape_str(s) + " (sizes differ)");
    return std::vector<Aval>{Aval::array(s, in[0].dtype, in[0].weak)};
  });

  define_primitive(PrimId::squeeze, ir::PrimKind::Shape, [](const std::vector<Aval>& in, const Params& p) {
    expect_arity("squeeze", in, 1);
    expect_array("squeeze", in[0], "the operand");
    auto dims = p.get<std::vector<int64_t>>("dimensions");
    std::vector<bool> drop(in[0].ndim(), false);
    for (int64_t d : dims) {
      int a = normalize_axis("squeeze", d, in[0].ndim());
      if (in[0].shape[a] != 1)
        fail("squeeze", "dimension " + std::to_string(d) + " of " + in[0].str() + " is not of size 1");
      drop[a] = true;
    }
    Shape s;
    for (int k = 0; k < in[0].ndim(); ++k)
      if (!drop[k]) s.push_back(in[0].shape[k]);
    return std::vector<Aval>{Aval::array(s, in[0].dtype, in[0].weak)};
  });

  define_primitive(PrimId::transpose, ir::PrimKind::Shape, [](const std::vector<Aval>& in, const Params& p) {
    expect_arity("transpose", in, 1);
    expect_array("transpose", in[0], "the operand");
    auto perm = p.get<std::vector<int64_t>>("permutation");
    auto sorted = perm;
    std::sort(sorted.begin(), sorted.end());
    bool ok = static_cast<int>(perm.size()) == in[0].ndim();
    for (size_t k = 0; ok && k < sorted.size(); ++k) ok = sorted[k] == static_cast<int64_t>(k);
    if (!ok) fail("transpose", "permutation " + ir::param_text(perm) + " is not a permutation of the axes of " + in[0].str());
    Shape s;
    for (int64_t d : perm) s.push_back(in[0].shape[d]);
    return std::vector<Aval>{Aval::array(s, in[0].dtype, in[0].weak)};
  });
}

}  // namespace pallas::ops
