// The emitter and the kernel skeleton: parameters, program ids of a grid of any rank
// (folded into blockIdx.x/y), index maps evaluated on the device, block views of the
// operands (edges bounded by the array), scratch in shared memory.
#include "src/backends/cuda/lower.h"

#include <cmath>
#include <cstdio>
#include <algorithm>
#include <cstring>

#include "src/backends/cuda/grid_pipeline.h"
#include "src/backends/cuda/plan/passes.h"
#include "src/backends/cuda/rules.h"
#include "src/backends/cuda/device/device_sources.inc"
#include "src/ir/dependence.h"

namespace pallas::cuda {

std::string ctype(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::I8: return "i8";
    case DType::I16: return "i16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::U8: return "u8";
    case DType::U16: return "u16";
    case DType::U32: return "u32";
    case DType::U64: return "u64";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::F32: return "float";
    case DType::F64: return "double";
    case DType::F8E4M3: return "f8e4m3";
    case DType::F8E5M2: return "f8e5m2";
  }
  return "?";
}
std::vector<int64_t> row_major_strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int d = static_cast<int>(s.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * s[d + 1];
  return st;
}
std::string compute_type(DType t) { return t == DType::F16 || t == DType::BF16 || is_float8(t) ? "float" : ctype(t); }

// Loops over a thread's slots are unrolled, so its values stay in registers (every index a
// constant) — up to 256 slots: past the 255 registers a thread has, a value lives in local
// memory anyway, and unrolling only multiplies the code (NVRTC took 70 s over a transpose of
// 768 slots a thread, unrolled).
std::string unroll_pragma(int64_t slots) { return slots > 256 ? "#pragma unroll 4" : "#pragma unroll"; }

void Emitter::line(const std::string& s) { body_ << std::string(static_cast<size_t>(depth_) * 2, ' ') << s << "\n"; }

Emitter::Block Emitter::block(const std::string& open, std::string close) {
  line(open);
  ++depth_;
  return Block(*this, std::move(close));
}

void Emitter::Block::close() {
  if (!E_) return;
  Emitter& E = *std::exchange(E_, nullptr);
  --E.depth_;
  if (!close_.empty()) E.line(close_);
}

// Generated names count up within one lowering, so the same call always gives the same
// source (and the disk cache, keyed by the source, hits across processes).
std::string Emitter::fresh(const std::string& prefix) { return "_" + prefix + std::to_string(++name_counter_); }

void Emitter::fail(const ir::Eqn& e, const std::string& why) const {
  throw Error(what + ": the CUDA backend cannot lower primitive '" + e.prim->name + "': " + why +
              "; run it with interpret = true (Backend::Interpret) meanwhile");
}

std::string Emitter::lit(const ir::Literal& l) const {
  char buf[64];
  if (is_float(l.dtype)) {
    double v = l.f;
    std::string f;
    if (std::isnan(v)) f = "__longlong_as_double(0x7ff8000000000000ll)";
    else if (std::isinf(v)) f = v > 0 ? "__longlong_as_double(0x7ff0000000000000ll)" : "__longlong_as_double(0xfff0000000000000ll)";
    else {
      std::snprintf(buf, sizeof buf, "%.17g", v);
      f = buf;
      if (f.find_first_of(".eEn") == std::string::npos) f += ".0";
    }
    if (l.dtype == DType::F64) return "(" + f + ")";
    if (l.dtype == DType::F32) return "((float)" + f + ")";
    return "cv<" + ctype(l.dtype) + ">((float)" + f + ")";
  }
  if (l.dtype == DType::Bool) return l.i ? "true" : "false";
  std::snprintf(buf, sizeof buf, "((%s)%lldll)", ctype(l.dtype).c_str(), static_cast<long long>(l.i));
  if (l.dtype == DType::U64) std::snprintf(buf, sizeof buf, "((u64)%lluull)", static_cast<unsigned long long>(l.i));
  return buf;
}

std::string Emitter::name(const ir::Atom& a) const {
  if (auto* l = std::get_if<ir::Literal>(&a)) return lit(*l);
  const ir::Var& v = std::get<ir::Var>(a);
  auto it = names_.find(v.id);
  if (it == names_.end()) throw Error(what + ": CUDA lowering: variable %" + std::to_string(v.id) + " used before definition");
  return it->second;
}

void Emitter::bind_name(const ir::Var& v, std::string expr) { names_[v.id] = std::move(expr); }

std::optional<std::string> Emitter::bound_name(const ir::Var& v) const {
  auto it = names_.find(v.id);
  return it == names_.end() ? std::nullopt : std::optional<std::string>(it->second);
}

void Emitter::unbind_name(const ir::Var& v) { names_.erase(v.id); }

std::string Emitter::elem(const ir::Atom& a, const std::string& k) const {
  ir::Aval av = ir::atom_aval(a);
  return scalar_like(av) ? name(a) : name(a) + "[" + k + "]";
}

void Emitter::declare(const ir::Var& v) {
  std::string n = fresh("v");
  bind_name(v, n);
  if (scalar_like(v.aval)) line(ctype(v.aval.dtype) + " " + n + ";");
  else line(ctype(v.aval.dtype) + " " + n + "[" + std::to_string(slots(v)) + "];");
}

void Emitter::foreach(const Shape& s, const std::function<void()>& f) {
  int64_t n = shape_size(s);
  if (n == 1) {
    Block b = block("{ const int k = 0, e = 0; (void)k; (void)e;");
    f();
    return;
  }
  int64_t K = per_thread(s);
  std::string V = std::to_string(vec), S = std::to_string(int64_t{nt} * vec);
  std::string e = vec == 1 ? "threadIdx.x + k * " + S : "(k / " + V + ") * " + S + " + threadIdx.x * " + V + " + k % " + V;
  line(unroll_pragma(K));
  Block b = block("for (int k = 0; k < " + std::to_string(K) + "; ++k) { const int e = " + e + ";" +
                      (n % (int64_t{nt} * vec) ? " if (e < " + std::to_string(n) + ") {" : " {"),
                  "}}");
  f();
}

void Emitter::foreach_run(const Shape& s, const std::function<void()>& f) {
  int64_t n = shape_size(s), S = int64_t{nt} * vec;
  line(unroll_pragma((n + S - 1) / S * vec));
  Block b = block("for (int g = 0; g < " + std::to_string((n + S - 1) / S) + "; ++g) { const int e = g * " + std::to_string(S) + " + threadIdx.x * " +
                      std::to_string(vec) + ", k0 = g * " + std::to_string(vec) + "; (void)k0;" + (n % S ? " if (e < " + std::to_string(n) + ") {" : " {"),
                  "}}");
  f();
}

std::vector<std::string> Emitter::unravel(const std::string& e, const Shape& s) {
  std::vector<std::string> r(s.size());
  int64_t st = 1;
  for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
    r[d] = fresh("ix");
    std::string x = st == 1 ? e : "(" + e + " / " + std::to_string(st) + ")";
    if (d > 0) x += " % " + std::to_string(s[d]);
    line("const int " + r[d] + " = " + x + ";");
    st *= s[d];
  }
  return r;
}

size_t Emitter::reserve(size_t off, const ir::Aval& a) {
  size_t end = (off + static_cast<size_t>(a.size()) * itemsize(a.dtype) + 15) & ~size_t{15};
  if (end > xbytes_) xbytes_ = end;
  smem_peak = std::max(smem_peak, xoff + end);
  return end;
}

size_t Emitter::smem_bytes() const { return std::max(xoff + xbytes_, smem_peak); }

std::string Emitter::put_shared(const ir::Atom& a, size_t off) { return put_tile(a, "smem + " + std::to_string(xoff + off)); }

std::string Emitter::put_exchange(const ir::Atom& a) {
  ir::Aval av = ir::atom_aval(a);
  size_t bytes = (static_cast<size_t>(av.size()) * itemsize(av.dtype) + 15) & ~size_t{15};
  if (xoff + bytes <= plan.smem_limit) {
    reserve(0, av);
    return put_shared(a, 0);
  }
  // Past the device's shared memory: this CUDA block's region of global scratch (the kernel's
  // last parameter, sized by the runner), read back through L1/L2 after the same barrier.
  global_exchange_bytes_ = std::max(global_exchange_bytes_, bytes);
  return put_tile(a, "gx");
}

std::string Emitter::put_tile(const ir::Atom& a, const std::string& at) {
  ir::Aval av = ir::atom_aval(a);
  std::string p = fresh("xs");
  line(ctype(av.dtype) + "* " + p + " = (" + ctype(av.dtype) + "*)(" + at + ");");
  if (scalar_like(av)) {
    line("if (threadIdx.x == 0) " + p + "[0] = " + name(a) + ";");
  } else if (ValueLayout L = layout_of(a); L.kind == ValueLayout::Mma && (itemsize(av.dtype) == 2 || itemsize(av.dtype) == 4) && L.N % 2 == 0 &&
                                           !uniform.count(std::get<ir::Var>(a).id)) {
    // Slots r and r + 1 of a fragment are columns j and j + 1 (j even): one store of the pair,
    // half the shared stores (and half the code) of one per element.
    std::string T = ctype(av.dtype);
    foreach_fragments(L, [&] {
      if (itemsize(av.dtype) == 2)
        line("if ((r & 1) == 0) *(u32*)&" + p + "[e] = word_bits(" + elem(a, "k") + ") | (word_bits(" + elem(a, "k + 1") + ") << 16);");
      else
        line("if ((r & 1) == 0) *(Vec<" + T + ", 2>*)&" + p + "[e] = Vec<" + T + ", 2>{{" + elem(a, "k") + ", " + elem(a, "k + 1") + "}};");
    });
  } else {
    foreach_in(layout_of(a), av.shape, [&] { line(p + "[e] = " + elem(a, "k") + ";"); });
  }
  return p;
}

void Emitter::bind(const ir::Var& inner, const ir::Atom& outer) {
  if (inner.aval.is_ref) {
    const ir::Var& o = std::get<ir::Var>(outer);
    auto it = refs.find(o.id);
    if (it == refs.end()) throw Error(what + ": CUDA lowering: unknown ref");
    refs[inner.id] = it->second;
    return;
  }
  bind_name(inner, name(outer));
}

void Emitter::emit_eqns(const ir::Jaxpr& j) {
  unsynced_reads = true;  // a loop's previous iteration, or the code before a branch, may have read
  conversions_.emplace_back();
  scopes.push_back(&j);
  auto of = [this](const ir::Atom& a) { return layout_of(a); };
  for (const ir::Eqn& e : j.eqns) {
    if (absorbed.count(&e) || plan.folded.count(&e)) continue;
    const LowerRule& r = lowering_rules().has(e.prim->id) ? lowering_rules().get(e.prim->id) : LowerRule();
    if (!r) throw Error(what + ": no CUDA lowering rule for primitive '" + e.prim->name + "'");
    // Operands held in another layout than the rule takes them in are converted first; the
    // rule sees the converted copy under the operand's own var (one layout per var: when an
    // eqn takes a var twice in two layouts, the last conversion serves both). fori_loop
    // converts its initial carries itself: the same var may also be a loop-invariant operand,
    // which the body takes as it is.
    std::vector<std::pair<int64_t, std::pair<std::string, ValueLayout>>> saved;
    for (size_t i = 0; i < e.in.size() && e.prim->id != ir::PrimId::fori_loop; ++i) {
      auto* v = std::get_if<ir::Var>(&e.in[i]);
      if (!v || v->aval.is_ref || scalar_like(v->aval)) continue;
      ValueLayout want = operand_layout(plan, e, i, of), have = layout_of(*v);
      if (want == have) continue;
      std::string n = as_layout(*v, want, /*reuse=*/true);
      saved.push_back({v->id, {names_.at(v->id), have}});
      names_[v->id] = n;
      if (want.kind == ValueLayout::Blocked) value_layouts_.erase(v->id);
      else value_layouts_[v->id] = want;
    }
    // The kernel source's line that made the eqn: NVRTC's messages and the line table
    // (-lineinfo, for profilers) point there; the eqns after it without a place of their own
    // (operators) stay with it.
    if (e.loc.file) {
      std::string f;
      for (const char* c = e.loc.file; *c; ++c) f += (*c == '"' || *c == '\\') ? std::string("\\") + *c : std::string(1, *c);
      line("#line " + std::to_string(e.loc.line) + " \"" + f + "\"");
    }
    if (eqn_text_)
      if (auto t = eqn_text_->find(&e); t != eqn_text_->end()) line("// " + t->second);
    r(*this, e);
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
      names_[it->first] = it->second.first;
      if (it->second.second.kind == ValueLayout::Blocked) value_layouts_.erase(it->first);
      else value_layouts_[it->first] = it->second.second;
    }
  }
  conversions_.pop_back();
  scopes.pop_back();
  unsynced_reads = true;
}

std::string Emitter::tensor_map(const TensorMapSpec& m) {
  size_t i = 0;
  while (i < tensor_maps_.size() && !(tensor_maps_[i] == m)) ++i;
  if (i == tensor_maps_.size()) tensor_maps_.push_back(m);
  return "tm" + std::to_string(i);
}

namespace {

// The range [lo, hi] of each block index an index map returns over a static grid (program id
// g in [0, grid[g] - 1]), where the map is adds, subtracts, multiplies, min and max of program
// ids and constants (what `idx(i, 0)`, `idx(2 * i + 1)` or `idx(n - 1 - i)` trace to); nullopt
// where it is anything else (scalar-prefetch data, a dynamic extent). A block whose indices
// stay where the block lies wholly inside the array needs no bounds checks there.
using Range = std::optional<std::pair<int64_t, int64_t>>;
std::vector<Range> block_index_ranges(const ir::Jaxpr& im, const std::vector<int64_t>& grid) {
  constexpr int64_t kBig = int64_t{1} << 40;  // past this, give up (no overflow below)
  std::unordered_map<int64_t, Range> r;
  for (size_t g = 0; g < im.invars.size() && g < grid.size(); ++g)
    if (grid[g] > 0) r[im.invars[g].id] = std::make_pair(int64_t{0}, grid[g] - 1);
  auto of = [&](const ir::Atom& a) -> Range {
    if (auto* l = std::get_if<ir::Literal>(&a)) return is_float(l->dtype) ? Range{} : Range{std::make_pair(l->i, l->i)};
    auto it = r.find(std::get<ir::Var>(a).id);
    return it == r.end() ? Range{} : it->second;
  };
  for (const ir::Eqn& e : im.eqns) {
    if (e.out.size() != 1 || !is_integer(e.out[0].aval.dtype) || e.out[0].aval.ndim() != 0) continue;
    std::vector<Range> in;
    for (const ir::Atom& a : e.in) in.push_back(of(a));
    bool known = !in.empty() && std::all_of(in.begin(), in.end(), [&](const Range& x) { return x && x->first > -kBig && x->second < kBig; });
    if (!known) continue;
    Range out;
    auto [a0, a1] = *in[0];
    switch (e.prim->id) {
      case ir::PrimId::convert_element_type: out = in[0]; break;
      case ir::PrimId::neg: out = std::make_pair(-a1, -a0); break;
      case ir::PrimId::add: out = std::make_pair(a0 + in[1]->first, a1 + in[1]->second); break;
      case ir::PrimId::sub: out = std::make_pair(a0 - in[1]->second, a1 - in[1]->first); break;
      case ir::PrimId::max: out = std::make_pair(std::max(a0, in[1]->first), std::max(a1, in[1]->second)); break;
      case ir::PrimId::min: out = std::make_pair(std::min(a0, in[1]->first), std::min(a1, in[1]->second)); break;
      case ir::PrimId::mul: {
        auto [b0, b1] = *in[1];
        if (std::max({std::abs(a0), std::abs(a1)}) > (int64_t{1} << 20) || std::max({std::abs(b0), std::abs(b1)}) > (int64_t{1} << 20)) break;
        int64_t p[4] = {a0 * b0, a0 * b1, a1 * b0, a1 * b1};
        out = std::make_pair(*std::min_element(p, p + 4), *std::max_element(p, p + 4));
        break;
      }
      default: break;
    }
    if (out) r[e.out[0].id] = out;
  }
  std::vector<Range> res;
  for (const ir::Atom& o : im.outvars) res.push_back(of(o));
  return res;
}

}  // namespace

namespace {

// Prints the kernel the plan describes: the parameters, the program loop, the block views, the
// body (the rules, emit_eqns), as one CUDA C++ translation unit.
Lowered print_kernel(const core::PallasCall& call, const KernelPlan& plan) {
  const core::GridMapping& gm = call.grid;
  Lowered L;
  L.threads = plan.threads;
  L.name = plan.name;
  L.plan_text = plan.text();
  std::unordered_map<const ir::Eqn*, std::string> eqn_text = ir::eqn_lines(*call.kernel);
  Emitter E(plan, call.what, &eqn_text);

  size_t np = gm.prefetch.size(), nin = gm.inputs.size(), nout = gm.outputs.size();
  const ir::Jaxpr& k = *call.kernel;
  const std::vector<bool>& resident = plan.grid.resident;
  const std::optional<GridPipeline>& gp = plan.grid.pipeline;
  E.xoff = plan.smem.body;  // the exchange region, and the loops' buffers, start there
  E.smem_peak = plan.smem.loops_end;  // the loops' regions (loop-shared-memory); the exchanges add theirs as printed

  // Parameters.
  std::string params;
  for (size_t a = 0; a < np + nin + nout; ++a) params += "char* __restrict__ p" + std::to_string(a) + ", ";
  params += "int* __restrict__ perr, unsigned long long* __restrict__ plog, int poison_on";
  std::vector<std::string> G(gm.grid.size());
  int nd = 0;
  for (size_t d = 0; d < gm.grid.size(); ++d) {
    if (gm.grid[d] < 0) {
      G[d] = "gd" + std::to_string(nd++);
      params += ", int " + G[d];
    } else {
      G[d] = std::to_string(gm.grid[d]);
    }
  }

  // Program ids. The parallel axes, row-major, are the launch grid (blockIdx.x + y); the
  // sequential axes are loops inside the CUDA block, in axis order, so that the programs along
  // them run in the interpreter's order and each sees the writes of the one before. A
  // persistent kernel (grid_pipeline.h) loops over parallel programs too.
  std::vector<std::string> pid(gm.grid.size());
  for (size_t d = 0; d < gm.grid.size(); ++d) pid[d] = "pid" + std::to_string(d);
  std::string num_parallel = "1ll", num_sequential = "1ll";
  for (size_t d = 0; d < G.size(); ++d) (gm.sequential(d) ? num_sequential : num_parallel) += " * " + G[d];
  // Declares the ids of the program at linear index `lin` over the axes `seq` says (row-major),
  // as `names`.
  auto unravel_program = [&](const std::string& lin, bool seq, const std::vector<std::string>& names) {
    std::string rest = lin;
    for (int d = static_cast<int>(gm.grid.size()) - 1; d >= 0; --d) {
      if (gm.sequential(static_cast<size_t>(d)) != seq) continue;
      E.line("const int " + names[d] + " = (int)(" + rest + " % " + G[d] + ");");
      rest = "(" + rest + " / " + G[d] + ")";
    }
  };
  if (!gp || !gp->persistent) {
    E.line("const long long blin = blockIdx.x + (long long)blockIdx.y * gridDim.x;");
    E.line("if (blin >= " + num_parallel + ") return;");
    unravel_program("blin", false, pid);
  }
  // Prefetch refs: whole arrays.
  auto whole_ref = [&](const ir::Var& v, const ShapeDtype& sd, const std::string& ptr) {
    RefInfo r;
    r.base = "((" + ctype(sd.dtype) + "*)" + ptr + ")";
    r.dtype = sd.dtype;
    r.shape = sd.shape;
    r.strides = row_major_strides(sd.shape);
    r.lim.assign(sd.shape.size(), "");
    E.refs[v.id] = r;
  };
  for (size_t a = 0; a < np; ++a) whole_ref(k.invars[a], gm.prefetch[a], "p" + std::to_string(a));

  // Block views of inputs and outputs, from the index maps.
  auto block_ref = [&](const ir::Var& v, const core::BlockMapping& bm, size_t a) {
    const ir::Jaxpr& im = *bm.index_map;
    E.line("// " + bm.what);
    // The index-map code runs in a scope, which assigns its outputs (the origins) to outer variables.
    Emitter::Block scope = E.block("{");
    for (size_t g = 0; g < gm.grid.size() && g < im.invars.size(); ++g) E.bind_name(im.invars[g], pid[g]);
    for (size_t q = 0; q < np && gm.grid.size() + q < im.invars.size(); ++q)
      E.refs[im.invars[gm.grid.size() + q].id] = E.refs[k.invars[q].id];
    E.emit_eqns(im);
    std::vector<std::string> idx;
    for (auto& o : im.outvars) idx.push_back(E.name(o));
    std::string off = "off" + std::to_string(a);
    const Shape& as = bm.array.shape;
    size_t rank = as.size();
    std::vector<int64_t> st(rank, 1);
    for (int d = static_cast<int>(rank) - 2; d >= 0; --d) st[d] = st[d + 1] * as[d + 1];
    std::string offexpr = "0ll";
    for (size_t d = 0; d < rank; ++d) {
      E.line("org" + std::to_string(a) + "_" + std::to_string(d) + " = (long long)(" + idx[d] + ") * " +
             std::to_string(bm.block_shape[d]) + ";");
      offexpr += " + org" + std::to_string(a) + "_" + std::to_string(d) + " * " + std::to_string(st[d]) + "ll";
    }
    scope.close();
    E.line(off + " = " + offexpr + ";");
    RefInfo r;
    r.dtype = bm.array.dtype;
    r.base = "(((" + ctype(r.dtype) + "*)p" + std::to_string(a) + ") + " + off + ")";
    std::vector<Range> ranges = block_index_ranges(im, gm.grid);
    if (a >= np && a < np + nin) {
      r.param = static_cast<int>(a);
      r.array_shape = as;
      for (size_t d = 0; d < rank; ++d) r.origin.push_back("org" + std::to_string(a) + "_" + std::to_string(d));
    }
    // Blocks may overhang the array on either side (an index map may return any block
    // index): coordinates are bounded below by -origin and above by size - origin, and a
    // squeezed dimension's one index must lie inside the array, as in the interpreter.
    for (size_t d = 0; d < rank; ++d) {
      std::string org = "org" + std::to_string(a) + "_" + std::to_string(d);
      if (bm.squeezed[d]) {
        r.valid += std::string(r.valid.empty() ? "" : " && ") + "(" + org + " >= 0 && " + org + " < " + std::to_string(as[d]) + "ll)";
        continue;
      }
      r.shape.push_back(bm.block_shape[d]);
      r.strides.push_back(st[d]);
      if (r.param >= 0) r.array_dim.push_back(static_cast<int>(d));
      // no bound where every block the index map can return lies inside the array there
      bool above = ranges[d] && (ranges[d]->second + 1) * bm.block_shape[d] <= as[d], below = ranges[d] && ranges[d]->first >= 0;
      r.lim.push_back(above ? "" : "(" + std::to_string(as[d]) + "ll - " + org + ")");
      r.low.push_back(below ? "" : "(-" + org + ")");
    }
    if (a >= np + nin) r.shared_by_parallel_programs = shared_by_parallel_programs(gm, bm);  // an output
    E.refs[v.id] = r;
  };
  // Origins are declared before the index-map scope that assigns them.
  auto declare_origins = [&](size_t a) {
    const core::BlockMapping& bm = a < nin ? gm.inputs[a] : gm.outputs[a - nin];
    std::string decl = "long long off" + std::to_string(np + a);
    for (size_t d = 0; d < bm.array.shape.size(); ++d) decl += ", org" + std::to_string(np + a) + "_" + std::to_string(d);
    E.line(decl + ";");
  };
  // Outputs kept in shared memory over the sequential loop (the resident-outputs pass): their
  // views point there; the copies in and out go through their views of the array.
  std::vector<RefInfo> resident_global(nout);
  for (size_t o = 0; o < nout; ++o) {
    if (!resident[o]) continue;
    const core::BlockMapping& bm = gm.outputs[o];
    std::vector<std::string> saved = pid;
    for (size_t d = 0; d < gm.grid.size(); ++d)
      if (gm.sequential(d)) pid[d] = "0";  // not read by this index map
    declare_origins(nin + o);
    const ir::Var& v = k.invars[np + nin + o];
    block_ref(v, bm, np + nin + o);
    pid = saved;
    RefInfo& r = E.refs[v.id];
    resident_global[o] = r;
    r.base = "((" + ctype(r.dtype) + "*)(smem + " + std::to_string(plan.smem.resident[o]) + "))";
    r.strides = row_major_strides(r.shape);
  }
  // Copies between a resident output's block in shared memory and its array (elements inside
  // the array only; the others read poison in shared memory, as the interpreter's padding).
  auto copy_resident = [&](size_t o, bool in) {
    const RefInfo& g = resident_global[o];
    const RefInfo& r = E.refs[k.invars[np + nin + o].id];
    std::string n = std::to_string(shape_size(r.shape));
    Emitter::Block loop = E.block("for (long long e = threadIdx.x; e < " + n + "ll; e += " + std::to_string(L.threads) + ") {");
    auto c = E.unravel("e", r.shape);
    std::string cond = g.valid.empty() ? "true" : g.valid, off = "0ll";
    for (size_t d = 0; d < r.shape.size(); ++d) {
      if (!g.lim[d].empty()) cond += " && " + c[d] + " < " + g.lim[d];
      if (!g.low[d].empty()) cond += " && " + c[d] + " >= " + g.low[d];
      off += " + (long long)" + c[d] + " * " + std::to_string(g.strides[d]) + "ll";
    }
    if (in) E.line(r.base + "[e] = (" + cond + ") ? " + g.base + "[" + off + "] : poison<" + ctype(r.dtype) + ">();");
    else E.line("if (" + cond + ") " + g.base + "[" + off + "] = " + r.base + "[e];");
  };
  for (size_t o = 0; o < nout; ++o)
    if (resident[o]) copy_resident(o, true);
  if (std::find(resident.begin(), resident.end(), true) != resident.end()) E.sync();

  // The program loop with its blocks pipelined (grid_pipeline.h): one step per program, the
  // copies of step + stages - 1 issued at the top of each step into the buffer the step before
  // read (every thread passed the barrier that ends a step).
  const std::string step = "gstep", S = gp ? std::to_string(gp->stages) : "";
  // Opens `if (step st is a program of this CUDA block) {` (the Block returned) and declares its ids.
  auto program_of_step = [&](const std::string& st, const std::vector<std::string>& names) {
    if (gp->persistent) {
      std::string bl = E.fresh("bl");
      E.line("const long long " + bl + " = blockIdx.x + (" + st + ") * (long long)gridDim.x;");
      Emitter::Block b = E.block("if (" + bl + " < " + num_parallel + ") {");
      unravel_program(bl, false, names);
      return b;
    }
    Emitter::Block b = E.block("if ((" + st + ") < " + num_sequential + ") {");
    unravel_program("(" + st + ")", true, names);
    return b;
  };
  auto issue_step = [&](const std::string& st) {
    std::vector<std::string> ids = pid;
    for (size_t d = 0; d < ids.size(); ++d)
      if (gp->persistent || gm.sequential(d)) ids[d] = E.fresh("gp");
    Emitter::Block outer = E.block("{");
    Emitter::Block program = program_of_step(st, ids);
    issue_grid_copies(E, *gp, call, ids, "(int)((" + st + ") % " + S + ")");
  };
  std::optional<Emitter::Block> step_loop;  // open until the body is printed
  if (gp) {
    E.line("// " + gp->text.substr(0, gp->text.find('\n')));
    E.line("if (threadIdx.x == 0) { for (int s = 0; s < " + S + "; ++s) pallas_dev::mbar_init((u64*)(smem + " + std::to_string(gp->bars) +
           ") + s, 1); pallas_dev::mbar_fence_init(); }");
    E.sync();
    std::string ps = E.fresh("ps");
    E.line("_Pragma(\"unroll 1\") for (int " + ps + " = 0; " + ps + " < " + std::to_string(gp->stages - 1) + "; ++" + ps + ")");
    issue_step(ps);
    step_loop.emplace(E.block("for (long long " + step + " = 0;; ++" + step + ") {"));
    if (gp->persistent) {
      E.line("const long long blin = blockIdx.x + " + step + " * (long long)gridDim.x;");
      E.line("if (blin >= " + num_parallel + ") break;");
      unravel_program("blin", false, pid);
    } else {
      E.line("if (" + step + " >= " + num_sequential + ") break;");
      unravel_program(step, true, pid);
    }
    issue_step(step + " + " + std::to_string(gp->stages - 1));
  }
  // The sequential axes: loops inside the CUDA block (open until the body is printed).
  std::vector<Emitter::Block> sequential_loops;
  for (size_t d = 0; d < gm.grid.size() && !gp; ++d)
    if (gm.sequential(d)) sequential_loops.push_back(E.block("for (int " + pid[d] + " = 0; " + pid[d] + " < " + G[d] + "; ++" + pid[d] + ") {"));
  {
    // The program's row-major linear id over the whole grid (messages, debug_print).
    std::string lin = "0ll";
    for (size_t d = 0; d < gm.grid.size(); ++d) lin = "(" + lin + " * " + G[d] + " + " + pid[d] + ")";
    E.line("const long long lin = " + lin + "; (void)lin;");
  }
  for (size_t a = 0; a < nin + nout; ++a)
    if (a < nin || !resident[a - nin]) declare_origins(a);
  for (size_t a = 0; a < nin; ++a) block_ref(k.invars[np + a], gm.inputs[a], np + a);
  if (gp) {  // the pipelined blocks are read from this step's stage, dense and row-major, with the same bounds
    for (const GridPipelinedInput& in : gp->inputs) {
      RefInfo& r = E.refs[k.invars[np + in.input].id];
      r.base = "((" + ctype(r.dtype) + "*)(smem + " + std::to_string(gp->base + in.offset) + " + (int)(" + step + " % " + S + ") * " +
               std::to_string(gp->stage_bytes) + "))";
      r.strides = row_major_strides(r.shape);
      r.param = -1;  // not an array's block for the loop pipeliner's tensor copies
    }
    E.line("pallas_dev::mbar_wait((u64*)(smem + " + std::to_string(gp->bars) + ") + (int)(" + step + " % " + S + "), (int)((" + step + " / " + S +
           ") & 1));");
  }
  for (size_t a = 0; a < nout; ++a)
    if (!resident[a]) block_ref(k.invars[np + nin + a], gm.outputs[a], np + nin + a);
  for (size_t s = 0; s < gm.scratch.size(); ++s) {
    RefInfo r;
    const ShapeDtype& sd = gm.scratch[s];
    r.dtype = sd.dtype;
    r.base = "((" + ctype(sd.dtype) + "*)(smem + " + std::to_string(plan.smem.scratch[s]) + "))";
    r.shape = sd.shape;
    r.strides = row_major_strides(sd.shape);
    r.lim.assign(sd.shape.size(), "");
    E.refs[k.invars[np + nin + nout + s].id] = r;
    // Scratch starts as poison when the runner asks for it (debug / PALLAS_CUDA_POISON), so
    // reads of unwritten scratch show up as on the interpreter.
    E.line("if (poison_on) for (long long e = threadIdx.x; e < " + std::to_string(shape_size(sd.shape)) + "ll; e += " +
           std::to_string(L.threads) + ") " + r.base + "[e] = poison<" + ctype(sd.dtype) + ">();");
  }
  if (!gm.scratch.empty()) E.line("if (poison_on) __syncthreads();");
  // Program ids and grid sizes for the program_id / num_programs rules.
  E.program_ids = pid;
  E.grid_sizes = G;
  E.line("// kernel body");
  E.emit_eqns(k);
  if (gp) {
    E.sync();  // the next step reads what this one wrote, and refills the stage this one read
    step_loop.reset();
  }
  while (!sequential_loops.empty()) {
    E.sync();  // the next program along the sequential axes reads what this one wrote
    sequential_loops.pop_back();
  }
  for (size_t o = 0; o < nout; ++o)
    if (resident[o]) copy_resident(o, false);

  L.smem_bytes = E.smem_bytes();
  L.global_exchange_bytes = E.global_exchange_bytes();
  L.smem_limit = plan.smem_limit;
  L.check_messages = E.check_messages;
  L.has_check = !E.check_messages.empty();
  L.print_sites = E.print_sites;
  L.tensor_maps = E.tensor_maps();
  L.persistent = gp && gp->persistent;
  for (size_t m = 0; m < L.tensor_maps.size(); ++m) params += ", const __grid_constant__ pallas_dev::TensorMap tm" + std::to_string(m);
  // Tiles exchanged through global memory (Emitter::put_exchange): the last parameter, one
  // region per CUDA block.
  std::string global_exchange;
  if (L.global_exchange_bytes) {
    params += ", unsigned char* __restrict__ pgx";
    global_exchange = "  unsigned char* gx = pgx + (blockIdx.x + (unsigned long long)blockIdx.y * gridDim.x) * " +
                      std::to_string(L.global_exchange_bytes) + "ull;\n";
  }
  std::ostringstream src;
  src << prelude() << (L.tensor_maps.empty() ? "" : kTmaCuh) << "\nextern \"C\" __global__ void __launch_bounds__(" << L.threads << ") " << L.name << "(" << params
      << ") {\n  extern __shared__ __align__(16) unsigned char smem[]; (void)smem; (void)perr; (void)plog; (void)poison_on;\n"
      << global_exchange << E.text() << "}\n";
  L.source = src.str();
  L.grid_pipelined = gp.has_value();
  return L;
}

}  // namespace

std::string Lowered::section(const std::string& pass) const {
  const std::string head = "== " + pass + "\n";
  size_t at = plan_text.rfind(head);
  if (at == std::string::npos) return "";
  at += head.size();
  size_t end = plan_text.find("\n== ", at - 1);
  return plan_text.substr(at, end == std::string::npos ? std::string::npos : end + 1 - at);
}

Lowered lower(const core::PallasCall& call, const std::string& arch, bool tensor_maps, bool aligned) {
  return lower(call, target_from_env(call.what, arch, tensor_maps, aligned));
}

Lowered lower(const core::PallasCall& call, const Target& target) {
  const std::string dump = dump_passes_dir();
  const int printed = static_cast<int>(plan_passes().size()) + 1;
  auto plan_and_print = [&](bool grid_pipeline, int max_stages = 0) {
    KernelPlan plan = plan_kernel(call, target, grid_pipeline, -1, max_stages);
    Lowered L = print_kernel(call, plan);
    if (!dump.empty()) {
      write_pass_dump(dump, L.name, printed, "print", ".cu", L.source);
    }
    return L;
  };
  Lowered L = plan_and_print(/*grid_pipeline=*/true);
  // The grid and loop pipelines plan their stages before the body's exchanges take their place
  // above them: a kernel then over the limit is planned again with a stage fewer, down to the
  // fewest a pipeline runs with, and then without the grid pipeline (it fitted before the
  // stages were added, or fails with the same error as without them), instead of being refused
  // at launch (the dQ kernel of an f32 attention backward with 128 x 128 blocks came out 16
  // bytes over on an H100). One allocator that sees the exchanges before the buffers are placed
  // would decide this once.
  const int stages = call.compiler_params.num_stages > 0 ? call.compiler_params.num_stages : 3;
  auto fewer_stages = [&] {
    for (int cap = stages - 1; cap >= 1 && L.smem_bytes > L.smem_limit; --cap) {
      Lowered again = plan_and_print(L.grid_pipelined, cap);
      if (again.smem_bytes < L.smem_bytes) L = std::move(again);
    }
  };
  fewer_stages();
  if (L.grid_pipelined && L.smem_bytes > L.smem_limit) {
    L = plan_and_print(/*grid_pipeline=*/false);
    fewer_stages();
  }
  return L;
}

}  // namespace pallas::cuda
