// Control flow: fori_loop, while, cond (n branches). Sub-jaxprs are closed; values they
// capture are explicit operands.
//   fori_loop [lo, hi, init..., consts...]           body(i, carry..., consts...) -> carry...
//   while     [init..., cond_consts..., body_consts...] cond(carry..., cc...) -> bool,
//                                                     body(carry..., bc...) -> carry...
//   cond      [index, operands...]                    branch_k(operands...) -> outs...
#include "src/ops/op_util.h"

namespace pallas::ops {
using ir::PrimId;

namespace {
void expect_types(const std::string& op, const std::string& what, const std::vector<Aval>& want,
                  const std::vector<ir::Aval>& got) {
  bool ok = want.size() == got.size();
  for (size_t k = 0; ok && k < want.size(); ++k) ok = want[k].same_type(got[k]);
  if (!ok) fail(op, what + " has types (" + avals_str(got) + ") but must have (" + avals_str(want) + ")");
}
std::vector<Aval> avals(const std::vector<ir::Var>& v, size_t from, size_t n) {
  std::vector<Aval> r;
  for (size_t k = from; k < from + n && k < v.size(); ++k) r.push_back(v[k].aval);
  return r;
}
std::vector<Aval> out_avals(const ir::Jaxpr& j) {
  std::vector<Aval> r;
  for (auto& a : j.outvars) r.push_back(ir::atom_aval(a));
  return r;
}
}  // namespace

void register_control() {
  define_primitive(PrimId::fori_loop, ir::PrimKind::Control, [](const std::vector<Aval>& in, const Params& p) {
    const auto& body = *p.get<ir::JaxprPtr>("body");
    size_t nc = static_cast<size_t>(p.get_int("num_carry"));
    if (in.size() < 2 + nc) fail("fori_loop", "missing operands");
    for (int k = 0; k < 2; ++k)
      if (!in[k].shape.empty() || !is_integer(in[k].dtype))
        fail("fori_loop", std::string(k ? "upper" : "lower") + " bound must be an integer scalar, got " + in[k].str());
    if (in[0].dtype != in[1].dtype) fail("fori_loop", "bounds must have the same dtype, got " + avals_str({in[0], in[1]}));
    std::vector<Aval> carry(in.begin() + 2, in.begin() + 2 + nc);
    if (body.invars.size() != in.size() - 1) fail("fori_loop", "body takes the wrong number of operands");
    expect_types("fori_loop", "the body's carry input", carry, avals(body.invars, 1, nc));
    expect_types("fori_loop", "the body's result", carry, out_avals(body));
    return carry;
  });

  define_primitive(PrimId::while_loop, ir::PrimKind::Control, [](const std::vector<Aval>& in, const Params& p) {
    const auto& cj = *p.get<ir::JaxprPtr>("cond_jaxpr");
    const auto& bj = *p.get<ir::JaxprPtr>("body_jaxpr");
    size_t nc = static_cast<size_t>(p.get_int("num_carry"));
    size_t ncc = static_cast<size_t>(p.get_int("cond_nconsts"));
    std::vector<Aval> carry(in.begin(), in.begin() + nc);
    if (cj.invars.size() != nc + ncc || bj.invars.size() != in.size() - ncc)
      fail("while", "cond or body takes the wrong number of operands");
    auto c = out_avals(cj);
    if (c.size() != 1 || !c[0].shape.empty() || c[0].dtype != DType::Bool)
      fail("while", "the condition must return a bool scalar, got (" + avals_str(c) + ")");
    expect_types("while", "the body's result", carry, out_avals(bj));
    return carry;
  });

  define_primitive(PrimId::cond, ir::PrimKind::Control, [](const std::vector<Aval>& in, const Params& p) {
    const auto& branches = p.get<std::vector<ir::JaxprPtr>>("branches");
    if (in.empty() || !in[0].shape.empty() || in[0].dtype != DType::I32)
      fail("cond", "the branch index must be an i32 scalar");
    if (branches.empty()) fail("cond", "needs at least one branch");
    std::vector<Aval> ops(in.begin() + 1, in.end());
    std::vector<Aval> outs = out_avals(*branches[0]);
    for (size_t b = 0; b < branches.size(); ++b) {
      expect_types("cond", "branch " + std::to_string(b) + "'s operands", ops, avals(branches[b]->invars, 0, 1 << 30));
      expect_types("cond", "branch " + std::to_string(b) + "'s result", outs, out_avals(*branches[b]));
    }
    return outs;
  });
}

}  // namespace pallas::ops
