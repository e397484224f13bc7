// Grid queries, compiler hints, debug printing and checks.
#include "src/ops/op_util.h"

namespace pallas::ops {
using ir::PrimId;

void register_misc() {
  auto grid_query = [](const std::vector<Aval>& in, const Params&) {
    expect_arity("program_id", in, 0);
    return std::vector<Aval>{Aval::array({}, DType::I32)};
  };
  define_primitive(PrimId::program_id, ir::PrimKind::Misc, grid_query);
  define_primitive(PrimId::num_programs, ir::PrimKind::Misc, grid_query);

  auto hint = [](const char* op) {
    return [op](const std::vector<Aval>& in, const Params&) {
      expect_arity(op, in, 1);
      expect_array(op, in[0], "the operand");
      if (!is_integer(in[0].dtype)) fail(op, "takes integer values, got " + in[0].str());
      return std::vector<Aval>{in[0]};
    };
  };
  define_primitive(PrimId::multiple_of, ir::PrimKind::Misc, hint("multiple_of"));
  define_primitive(PrimId::max_contiguous, ir::PrimKind::Misc, hint("max_contiguous"));

  define_primitive(
      PrimId::debug_print, ir::PrimKind::Misc,
      [](const std::vector<Aval>& in, const Params& p) {
        const std::string& fmt = p.get<std::string>("fmt");
        size_t holes = 0;
        for (size_t k = 0; k + 1 < fmt.size(); ++k)
          if (fmt[k] == '{' && fmt[k + 1] == '}') ++holes;
        if (holes != in.size())
          fail("debug_print", "the format has " + std::to_string(holes) + " {} placeholders for " + std::to_string(in.size()) + " values");
        for (auto& a : in) expect_array("debug_print", a, "a printed value");
        return std::vector<Aval>{};
      },
      true);

  // check(pred, values...): a user check for checkify; pred is a bool scalar or tile.
  define_primitive(
      PrimId::check, ir::PrimKind::Misc,
      [](const std::vector<Aval>& in, const Params&) {
        if (in.empty() || in[0].dtype != DType::Bool) fail("check", "the predicate must be bool");
        return std::vector<Aval>{};
      },
      true);
}

}  // namespace pallas::ops
