// Prints a fuzz kernel as a self-contained GoogleTest (public API only). Mirrors build.cc
// call for call, so the printed kernel traces to the same IR.
#include <cmath>
#include <cstdio>

#include "fuzz/kernel.h"

namespace fuzz {

namespace {

std::string dt(pl::DType t) { return t == pl::DType::Bool ? "pl::bool_" : std::string("pl::") + pl::dtype_name(t); }

std::string num(double c, bool force_float) {
  if (std::isinf(c)) return c > 0 ? "std::numeric_limits<double>::infinity()" : "-std::numeric_limits<double>::infinity()";
  if (std::isnan(c)) return "std::numeric_limits<double>::quiet_NaN()";
  char b[64];
  std::snprintf(b, sizeof b, "%.17g", c);
  std::string s = b;
  if (force_float && s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string ints(const std::vector<int64_t>& v, size_t from = 0) {
  std::string s = "{";
  for (size_t i = from; i < v.size(); ++i) s += (i > from ? ", " : "") + std::to_string(v[i]);
  return s + "}";
}
std::string shape(const std::vector<int64_t>& v, size_t from = 0) { return "pl::Shape" + ints(v, from); }

std::string v(int id) { return "v" + std::to_string(id); }

const char* const kAxisNames[] = {"i", "j", "k", "l", "m", "n"};

class Printer {
 public:
  explicit Printer(const Kernel& k) : k_(k) {}
  std::string out;

  void program(const Program& p, const std::string& ind) {
    for (const Op& op : p.ops) statement(op, ind);
  }

 private:
  const Kernel& k_;

  std::string ref(int r) const { return "r[" + std::to_string(r) + "]"; }

  std::string indexers(const Op& op) const {
    std::string s = "{";
    for (size_t i = 0; i < op.idx.size(); ++i) {
      const Idx& x = op.idx[i];
      s += i ? ", " : "";
      switch (x.kind) {
        case Idx::All: s += "pl::all"; break;
        case Idx::Static: s += std::to_string(x.start); break;
        case Idx::Dyn: s += v(x.v); break;
        case Idx::Slice:
          s += "pl::ds(" + std::to_string(x.start) + ", " + std::to_string(x.size) + (x.stride != 1 ? ", " + std::to_string(x.stride) : "") + ")";
          break;
        case Idx::DynSlice:
          s += "pl::ds(" + v(x.v) + ", " + std::to_string(x.size) + (x.stride != 1 ? ", " + std::to_string(x.stride) : "") + ")";
          break;
        case Idx::Array: s += v(x.v); break;
      }
    }
    return s + "}";
  }

  std::string axes(const std::vector<int64_t>& p) const {
    if (p.empty()) return "pl::Axes()";
    return "pl::Axes({" + [&] {
      std::string s;
      for (size_t i = 0; i < p.size(); ++i) s += (i ? ", " : "") + std::to_string(p[i]);
      return s;
    }() + "})";
  }

  std::string expr(const Op& op) const {
    auto in = [&](size_t i) { return v(op.in.at(i)); };
    switch (op.k) {
      case K::ProgramId: return "pl::program_id(" + std::to_string(op.p.at(0)) + ")";
      case K::NumPrograms: return "pl::num_programs(" + std::to_string(op.p.at(0)) + ")";
      case K::Const: return "pl::Value::constant(" + num(op.c, false) + ", " + dt(op.dt) + ")";
      case K::Weak: return op.f1 ? "pl::Value(" + num(op.c, true) + ")" : "pl::Value(int64_t{" + num(op.c, false) + "})";
      case K::Full: return "pl::full(" + shape(op.p) + ", " + num(op.c, false) + ", " + dt(op.dt) + ").value_()";
      case K::Iota: return "pl::iota(" + dt(op.dt) + ", " + shape(op.p, 1) + ", " + std::to_string(op.p.at(0)) + ")";
      case K::Unary: return "pl::" + op.fn + "(" + in(0) + ")";
      case K::Binary: return "pl::" + op.fn + "(" + in(0) + ", " + in(1) + ")";
      case K::Where: return "pl::where(" + in(0) + ", " + in(1) + ", " + in(2) + ")";
      case K::SelectN: {
        std::string s = "pl::select_n(" + in(0) + ", {";
        for (size_t i = 1; i < op.in.size(); ++i) s += (i > 1 ? ", " : "") + in(i);
        return s + "})";
      }
      case K::Clamp: return "pl::clamp(" + in(0) + ", " + in(1) + ", " + in(2) + ")";
      case K::IntPow: return "pl::integer_pow(" + in(0) + ", " + std::to_string(op.p.at(0)) + ")";
      case K::Convert: return in(0) + ".astype(" + dt(op.dt) + ")";
      case K::Bitcast: return "pl::bitcast(" + in(0) + ", " + dt(op.dt) + ")";
      case K::StopGrad: return "pl::stop_gradient(" + in(0) + ")";
      case K::Hint: return "pl::" + op.fn + "(" + in(0) + ", " + ints(op.p) + ")";
      case K::Broadcast: return "pl::broadcast_to(" + in(0) + ", " + shape(op.p) + ")";
      case K::Reshape: return "pl::reshape(" + in(0) + ", " + shape(op.p) + ")";
      case K::Transpose: {
        std::string s = "pl::transpose(" + in(0) + ", {";
        for (size_t i = 0; i < op.p.size(); ++i) s += (i ? ", " : "") + std::to_string(op.p[i]);
        return s + "})";
      }
      case K::ExpandDims: return "pl::expand_dims(" + in(0) + ", " + std::to_string(op.p.at(0)) + ")";
      case K::Squeeze: return "pl::squeeze(" + in(0) + ", " + axes(op.p) + ")";
      case K::Reduce: return "pl::" + op.fn + "(" + in(0) + ", " + axes(op.p) + ", " + (op.f1 ? "true" : "false") + ")";
      case K::ArgReduce: return "pl::" + op.fn + "(" + in(0) + ", " + std::to_string(op.p.at(0)) + ", " + (op.f1 ? "true" : "false") + ")";
      case K::Cumsum: return "pl::cumsum(" + in(0) + ", " + std::to_string(op.p.at(0)) + ")";
      case K::Dot: {
        std::string o;
        auto add = [&](const std::string& f) { o += (o.empty() ? "" : ", ") + f; };
        if (op.f1) add(".trans_a = true");
        if (op.f2) add(".trans_b = true");
        if (op.prec == 1) add(".precision = pl::Precision::High");
        if (op.prec == 2) add(".precision = pl::Precision::Highest");
        if (op.pref >= 0) add(".preferred_type = " + dt(static_cast<pl::DType>(op.pref)));
        return "pl::dot(" + in(0) + ", " + in(1) + (o.empty() ? "" : ", {" + o + "}") + ")";
      }
      case K::Load: {
        std::string o;
        if (op.mask >= 0) o += ".mask = " + v(op.mask);
        if (op.other >= 0) o += ", .other = " + v(op.other);
        return "pl::load(" + ref(op.ref) + ", " + indexers(op) + (o.empty() ? "" : ", {" + o + "}") + ")";
      }
      case K::Swap:
        return "pl::swap(" + ref(op.ref) + ", " + indexers(op) + ", " + in(0) + (op.mask >= 0 ? ", {.mask = " + v(op.mask) + "}" : "") + ")";
      case K::Atomic: {
        std::string f = op.fn == "and" || op.fn == "or" || op.fn == "xor" ? op.fn + "_" : op.fn;
        return "pl::atomic_" + f + "(" + ref(op.ref) + ", " + indexers(op) + ", " + in(0) + (op.mask >= 0 ? ", " + v(op.mask) : "") + ")";
      }
      case K::AtomicCas: return "pl::atomic_cas(" + ref(op.ref) + ", " + indexers(op) + ", " + in(0) + ", " + in(1) + ")";
      default: return "";
    }
  }

  std::string value_list(const std::vector<int>& ids, size_t from = 0) const {
    std::string s = "std::vector<pl::Value>{";
    for (size_t i = from; i < ids.size(); ++i) s += (i > from ? ", " : "") + v(ids[i]);
    return s + "}";
  }

  // Binds a lambda's vector parameter `c` to the body's parameter ids (from index `from`).
  void bind_params(const Program& b, size_t from, const std::string& cname, const std::string& ind) {
    for (size_t i = from; i < b.params.size(); ++i)
      out += ind + "pl::Value " + v(b.params[i]) + " = " + cname + "[" + std::to_string(i - from) + "];\n";
  }
  void body_and_yield(const Program& b, const std::string& ind, bool single) {
    program(b, ind);
    if (single)
      out += ind + "return " + v(b.yields.at(0)) + ";\n";
    else
      out += ind + "return " + value_list(b.yields) + ";\n";
  }
  void results(const Op& op, const std::string& vec, const std::string& ind) {
    for (size_t i = 0; i < op.out.size(); ++i)
      out += ind + "pl::Value " + v(op.out[i]) + " = " + vec + "[" + std::to_string(i) + "];\n";
  }

  void statement(const Op& op, const std::string& ind) {
    std::string in2 = ind + "  ";
    switch (op.k) {
      case K::Store:
        out += ind + "pl::store(" + ref(op.ref) + ", " + indexers(op) + ", " + v(op.in.at(0)) +
               (op.mask >= 0 ? ", {.mask = " + v(op.mask) + "}" : "") + ");\n";
        return;
      case K::AddUpdate: out += ind + ref(op.ref) + ".at(" + indexers(op) + ") += " + v(op.in.at(0)) + ";\n"; return;
      case K::Fori: {
        const Program& b = op.body.at(0);
        std::string r = "r" + std::to_string(op.out.empty() ? b.params.at(0) : op.out[0]);
        std::string lo = op.f1 ? v(op.in.at(0)) : std::to_string(op.p.at(0));
        std::string hi = op.f1 ? v(op.in.at(1)) : std::to_string(op.p.at(1));
        std::string c = "c" + std::to_string(b.params.at(0));
        out += ind + "std::vector<pl::Value> " + r + " = pl::fori_loop(" + lo + ", " + hi + ", " + value_list(op.in, op.f1 ? 2 : 0) +
               ", [&](const pl::Value& " + v(b.params.at(0)) + ", const std::vector<pl::Value>& " + c + ") {\n";
        bind_params(b, 1, c, in2);
        body_and_yield(b, in2, false);
        out += ind + "}" + (op.p.at(2) != 1 ? ", " + std::to_string(op.p.at(2)) : "") + ");\n";
        results(op, r, ind);
        return;
      }
      case K::While: {
        const Program& cb = op.body.at(0);
        const Program& bb = op.body.at(1);
        std::string r = "r" + std::to_string(op.out.at(0));
        std::string c1 = "c" + std::to_string(op.out[0]) + "a", c2 = "c" + std::to_string(op.out[0]) + "b";
        out += ind + "std::vector<pl::Value> " + r + " = pl::while_loop(" + value_list(op.in) + ",\n";
        out += in2 + "[&](const std::vector<pl::Value>& " + c1 + ") {\n";
        bind_params(cb, 0, c1, in2 + "  ");
        body_and_yield(cb, in2 + "  ", true);
        out += in2 + "},\n" + in2 + "[&](const std::vector<pl::Value>& " + c2 + ") {\n";
        bind_params(bb, 0, c2, in2 + "  ");
        body_and_yield(bb, in2 + "  ", false);
        out += in2 + "});\n";
        results(op, r, ind);
        return;
      }
      case K::Cond:
      case K::Switch: {
        std::string r = op.out.empty() ? "" : "r" + std::to_string(op.out[0]);
        bool sw = op.k == K::Switch;
        out += ind + (r.empty() ? "" : "std::vector<pl::Value> " + r + " = ") + (sw ? "pl::switch_case(" : "pl::cond(") + v(op.in.at(0)) +
               (sw ? ", {\n" : ",\n");
        for (size_t b = 0; b < op.body.size(); ++b) {
          const Program& p = op.body[b];
          std::string a = "a" + std::to_string(op.in.at(0)) + "_" + std::to_string(b);
          out += in2 + "[&](const std::vector<pl::Value>& " + a + ") -> std::vector<pl::Value> {\n";
          bind_params(p, 0, a, in2 + "  ");
          body_and_yield(p, in2 + "  ", false);
          out += in2 + "}" + (b + 1 < op.body.size() ? ",\n" : "");
        }
        out += std::string(sw ? "}" : "") + ",\n" + in2 + value_list(op.in, 1) + ");\n";
        if (!r.empty()) results(op, r, ind);
        return;
      }
      case K::When: {
        out += ind + "pl::when(" + v(op.in.at(0)) + ", [&] {\n";
        program(op.body.at(0), in2);
        out += ind + "});\n";
        return;
      }
      default: break;
    }
    out += ind + "pl::Value " + v(op.out.at(0)) + " = " + expr(op) + ";\n";
  }
};

std::string spec_text(const ArrayDesc& a, const std::vector<int64_t>& grid, int nprefetch, int64_t plen) {
  if (a.any) return "pl::BlockSpec(" + shape(a.shape) + ", pl::MemorySpace::Any)";
  if (a.whole) return "pl::BlockSpec()";
  std::string s = "pl::BlockSpec({";
  for (size_t i = 0; i < a.block.size(); ++i) s += (i ? ", " : "") + (a.block[i] == pl::squeezed ? std::string("pl::squeezed") : std::to_string(a.block[i]));
  s += "}, [](";
  for (size_t g = 0; g < grid.size(); ++g) s += (g ? ", " : "") + std::string("pl::Value ") + kAxisNames[g];
  for (int p = 0; p < nprefetch; ++p) s += (grid.size() || p ? ", " : "") + std::string("pl::Ref s") + std::to_string(p);
  // Non-trivial block indices are computed one statement each, in order: the arguments of
  // pl::idx(...) would be traced in an unspecified order.
  s += ") {";
  std::string args;
  int tmp = 0;
  for (size_t d = 0; d < a.map.size(); ++d) {
    const DimMap& m = a.map[d];
    args += d ? ", " : "";
    switch (m.kind) {
      case MapKind::Zero: args += "0"; break;
      case MapKind::Axis: args += kAxisNames[m.axis]; break;
      case MapKind::Pref: {
        std::string t = "b" + std::to_string(tmp++), u = "b" + std::to_string(tmp++), n = std::to_string(m.mod);
        s += " pl::Value " + t + " = s0(" + kAxisNames[m.axis] + " % " + std::to_string(plen) + "); pl::Value " + u + " = ((" + t +
             " % " + n + ") + " + n + ") % " + n + ";";
        args += u;
        break;
      }
      case MapKind::Rev:
      case MapKind::Mod: {
        std::string t = "b" + std::to_string(tmp++);
        s += " pl::Value " + t + " = " +
             (m.kind == MapKind::Rev ? std::to_string(grid.at(static_cast<size_t>(m.axis)) - 1) + " - " + kAxisNames[m.axis]
                                     : kAxisNames[m.axis] + std::string(" % ") + std::to_string(m.mod)) +
             ";";
        args += t;
        break;
      }
    }
  }
  return s + " return pl::idx(" + args + "); })";
}

}  // namespace

int count_ops(const Program& p) {
  int n = 0;
  for (const Op& op : p.ops) {
    ++n;
    for (const Program& b : op.body) n += count_ops(b);
  }
  return n;
}

std::string cpp_kernel_lambda(const Kernel& k, const std::string& ind) {
  Printer pr(k);
  pr.out = "[](const std::vector<pl::Ref>& r) {\n";
  pr.program(k.body, ind + "  ");
  pr.out += ind + "}";
  return pr.out;
}

std::string cpp_test(const Kernel& k, const std::string& test_name, const std::string& comment, const std::string& expect_ir_hash) {
  std::string s;
  if (!comment.empty()) {
    size_t a = 0;
    while (a < comment.size()) {
      size_t b = comment.find('\n', a);
      if (b == std::string::npos) b = comment.size();
      s += "// " + comment.substr(a, b - a) + "\n";
      a = b + 1;
    }
  }
  s += "TEST(FuzzRegression, " + test_name + ") {\n";
  s += "  auto kernel = " + cpp_kernel_lambda(k, "  ") + ";\n";
  std::string grid = "{";
  for (size_t a = 0; a < k.grid.size(); ++a)
    grid += (a ? ", " : "") + (a < k.dynamic.size() && k.dynamic[a] ? std::string("pl::dynamic") : std::to_string(k.grid[a]));
  grid += "}";
  s += "  pl::CallOptions opts{.grid = " + grid;
  if (!k.dim_sem.empty()) {
    s += ",\n                       .dimension_semantics = {";
    for (size_t a = 0; a < k.dim_sem.size(); ++a) s += (a ? ", " : "") + std::string(k.dim_sem[a] ? "pl::sequential" : "pl::parallel");
    s += "}";
  }
  int np = k.num_prefetch();
  int64_t plen = np ? k.ins[0].shape.at(0) : 1;
  auto specs = [&](const std::vector<ArrayDesc>& as) {
    std::string r = "{";
    bool first = true;
    for (size_t i = 0; i < as.size(); ++i)
      if (!as[i].prefetch) r += (first ? "" : ",\n                  ") + spec_text(as[i], k.grid, np, plen), first = false;
    return r + "}";
  };
  s += ",\n                       .in_specs = " + specs(k.ins);
  s += ",\n                       .out_specs = " + specs(k.outs);
  if (!k.scratch.empty()) {
    s += ",\n                       .scratch_shapes = {";
    for (size_t i = 0; i < k.scratch.size(); ++i) s += (i ? ", " : "") + std::string("pl::ShapeDtype(") + shape(k.scratch[i].shape) + ", " + dt(k.scratch[i].dtype) + ")";
    s += "}";
  }
  if (np) s += ",\n                       .num_scalar_prefetch = " + std::to_string(np);
  if (!k.aliases.empty()) {
    s += ",\n                       .input_output_aliases = {";
    bool first = true;
    for (auto [i, o] : k.aliases) s += (first ? "" : ", ") + std::string("{") + std::to_string(i) + ", " + std::to_string(o) + "}", first = false;
    s += "}";
  }
  s += ",\n                       .name = \"" + k.name() + "\"";
  if (k.num_warps) s += ",\n                       .compiler_params = {.num_warps = " + std::to_string(k.num_warps) + "}";
  s += "};\n";
  s += "  std::vector<pl::ShapeDtype> outs = {";
  for (size_t i = 0; i < k.outs.size(); ++i) s += (i ? ", " : "") + std::string("pl::ShapeDtype(") + shape(k.outs[i].shape) + ", " + dt(k.outs[i].dtype) + ")";
  s += "};\n  std::vector<pl::Array> ins = {";  // dynamic grid sizes first
  std::string sep;
  for (size_t a = 0; a < k.dynamic.size(); ++a)
    if (k.dynamic[a]) s += sep + "pl::Array::scalar(int32_t{" + std::to_string(k.grid[a]) + "})", sep = ", ";
  for (size_t i = 0; i < k.ins.size(); ++i)
    s += (i || !sep.empty() ? ", " : "") + std::string("fuzz::input(") + shape(k.ins[i].shape) + ", " + dt(k.ins[i].dtype) + ", " + std::to_string(k.in_seeds[i]) + "u" +
         (i < k.in_edges.size() && k.in_edges[i] >= 0 ? ", " + std::to_string(k.in_edges[i]) : std::string()) + ")";
  s += "};\n";
  if (!expect_ir_hash.empty()) s += "  EXPECT_EQ(fuzz::ir_hash(kernel, outs, opts, ins), " + expect_ir_hash + ");\n";
  s += "  EXPECT_EQ(fuzz::run_and_compare(kernel, outs, opts, ins, {";
  for (size_t i = 0; i < k.out_tol.size(); ++i) s += (i ? ", " : "") + num(k.out_tol[i], false);
  s += "}), \"\");\n}\n";
  return s;
}

}  // namespace fuzz
