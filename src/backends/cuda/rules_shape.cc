// Lowering rules that move data between threads: iota, broadcast, reshape, transpose,
// reductions, cumsum, argmax/argmin (dot: rules_dot.cc). Data crosses threads through the shared
// memory exchange region; reshape/squeeze keep the row-major order and so are free.
#include "src/backends/cuda/rules.h"

namespace pallas::cuda {
using ir::PrimId;

namespace {

std::string init_value(PrimId id, DType t) {
  std::string T = compute_type(t);
  if (id == PrimId::reduce_sum) return "(" + T + ")0";
  if (id == PrimId::reduce_prod) return "(" + T + ")1";
  bool mx = id == PrimId::reduce_max;
  if (is_float(t)) return std::string(mx ? "-" : "") + "(" + T + ")__longlong_as_double(0x7ff0000000000000ll)";
  if (t == DType::Bool) return mx ? "false" : "true";
  return mx ? "lim_lo<" + T + ">()" : "(" + T + ")~lim_lo<" + T + ">()";
}
std::string combine(PrimId id, const std::string& T, const std::string& a, const std::string& b) {
  switch (id) {
    case PrimId::reduce_sum: return "p_add<" + T + ">(" + a + ", " + b + ")";
    case PrimId::reduce_prod: return "p_mul<" + T + ">(" + a + ", " + b + ")";
    case PrimId::reduce_max: return "p_max<" + T + ">(" + a + ", " + b + ")";
    default: return "p_min<" + T + ">(" + a + ", " + b + ")";
  }
}


// How a row reduction folds its elements: the accumulator's components (one for sum / max /
// min / prod; the value and its index for argmax / argmin), their initial values, the update of
// an accumulator by another (elements, shuffled partners and partials alike: the fold must be
// associative and commutative, argmax breaking ties by index), an element's components from
// its value and its column, and the output from the accumulator. A thread folds its own
// elements of a row in increasing column order: `merge_later` folds in an element whose column
// comes after every column already in the accumulator (argmax's ties then never move the
// index: a cheaper test than the general merge; empty: the general one).
struct RowFold {
  std::vector<std::string> types, init;
  using Merge = std::function<std::string(const std::vector<std::string>& acc, const std::vector<std::string>& other)>;
  Merge merge;  // a statement
  std::function<std::vector<std::string>(const std::string& value, const std::string& col)> element;
  std::function<std::string(const std::vector<std::string>& acc)> result;
  Merge merge_later;
  size_t n() const { return types.size(); }
  std::string fold_element(const std::vector<std::string>& acc, const std::string& value, const std::string& col) const {
    return (merge_later ? merge_later : merge)(acc, element(value, col));
  }
};

RowFold reduce_fold(PrimId id, DType in_t, DType out_t) {
  std::string T = compute_type(in_t), O = ctype(out_t);
  return {{T}, {init_value(id, in_t)},
          [id, T](const std::vector<std::string>& a, const std::vector<std::string>& b) { return a[0] + " = " + combine(id, T, a[0], b[0]) + ";"; },
          [](const std::string& v, const std::string&) { return std::vector<std::string>{v}; },
          [O](const std::vector<std::string>& a) { return "cv<" + O + ">(" + a[0] + ")"; }};
}

// argmax / argmin: (value, index) pairs; index -1 is the empty accumulator (p_arg_wins).
RowFold arg_fold(bool mx, DType in_t, DType out_t) {
  std::string T = compute_type(in_t), O = ctype(out_t), M = mx ? "true" : "false";
  return {{T, "int"}, {"(" + T + ")0", "-1"},
          [M](const std::vector<std::string>& a, const std::vector<std::string>& b) {
            return "if (p_arg_wins<" + M + ">(" + b[0] + ", " + b[1] + ", " + a[0] + ", " + a[1] + ")) { " + a[0] + " = " + b[0] + "; " + a[1] + " = " + b[1] + "; }";
          },
          [](const std::string& v, const std::string& col) { return std::vector<std::string>{v, col}; },
          [O](const std::vector<std::string>& a) { return "(" + O + ")" + a[1]; },
          [M, T](const std::vector<std::string>& a, const std::vector<std::string>& b) {
            return "{ const " + T + " v_ = " + b[0] + "; const bool w_ = p_arg_later<" + M + ">(v_, " + a[0] + ", " + a[1] + "); " + a[0] + " = w_ ? v_ : " + a[0] +
                   "; " + a[1] + " = w_ ? (" + b[1] + ") : " + a[1] + "; }";
          }};
}

// Reduction over the trailing axes (rows of L elements, R rows) without a serial loop per
// output: each thread combines the elements it holds of a row, the threads of a row combine
// by warp shuffles, and only partials of different warps meet in shared memory. Two cases of
// the blocked layout (S = threads * V elements per repeat):
//  - long rows, L % S == 0: a row is L / S whole repeats, so the row of a slot is known at
//    compile time; every thread holds a part of every row (partials pa[R]);
//  - short rows, S % L == 0 and L % V == 0: a run of V lies in one row, and a row is LT = L / V
//    consecutive threads; the thread's rows are one per repeat (partials pg[G]).
// Other shapes take the general path through shared memory.
bool reduce_rows(Emitter& E, const ir::Eqn& e, const std::vector<bool>& red, const RowFold& F) {
  const ir::Var& o = e.out[0];
  ir::Aval in = ir::atom_aval(e.in[0]);
  for (const std::string& t : F.types)
    if (t != "int" && !shuffles(t)) return false;
  if (E.nt % 32 || Emitter::scalar_like(in)) return false;  // one element: no slots to fold
  size_t q = 0;
  while (q < red.size() && !red[q]) ++q;
  for (size_t d = q; d < red.size(); ++d)
    if (!red[d]) return false;  // not the trailing axes
  int64_t L = 1, R = 1;
  for (size_t d = 0; d < in.shape.size(); ++d) (red[d] ? L : R) *= in.shape[d];
  int64_t V = E.vec, S = int64_t{E.nt} * V, W = E.nt / 32;
  bool long_rows = L % S == 0, short_rows = S % L == 0 && L % V == 0;
  if (!long_rows && !short_rows) return false;
  std::string x = E.name(e.in[0]), Vs = std::to_string(V), Ss = std::to_string(S), Ls = std::to_string(L);
  // accumulator component c of a partial array `arr` at index `i`
  auto comps = [&](const std::string& arr, const std::string& i) {
    std::vector<std::string> c;
    for (size_t j = 0; j < F.n(); ++j) c.push_back(arr + "_" + std::to_string(j) + "[" + i + "]");
    return c;
  };
  auto declare = [&](const std::string& arr, int64_t n) {
    for (size_t j = 0; j < F.n(); ++j) E.line(F.types[j] + " " + arr + "_" + std::to_string(j) + "[" + std::to_string(n) + "];");
  };
  auto set_init = [&](const std::vector<std::string>& acc) {
    std::string l;
    for (size_t j = 0; j < F.n(); ++j) l += acc[j] + " = " + F.init[j] + "; ";
    return l;
  };
  auto shfl = [&](const std::vector<std::string>& acc, int64_t lanes) {  // combine over aligned groups of `lanes` lanes
    if (lanes <= 1) return;
    std::vector<std::string> other;
    std::string l = "for (int o_ = " + std::to_string(lanes / 2) + "; o_ > 0; o_ >>= 1) { ";
    for (size_t j = 0; j < F.n(); ++j) {
      other.push_back("s" + std::to_string(j) + "_");
      l += F.types[j] + " " + other[j] + " = __shfl_xor_sync(0xffffffffu, " + acc[j] + ", o_); ";
    }
    E.line(l + F.merge(acc, other) + " }");
  };
  // shared partials: component j of partial i at xs_j[i]
  std::string xs = E.fresh("xs");
  int64_t parts = 0;  // partials per row in shared memory
  auto bind_partials = [&] {
    E.reserve(0, ir::Aval::array({R * parts * static_cast<int64_t>(F.n())}, DType::F64));
    for (size_t j = 0; j < F.n(); ++j)
      E.line(F.types[j] + "* " + xs + "_" + std::to_string(j) + " = (" + F.types[j] + "*)(smem + " + std::to_string(E.xoff + 8 * j * R * parts) + ");");
  };
  auto store_partial = [&](const std::string& cond, const std::string& idx, const std::vector<std::string>& acc) {
    std::string l = "if (" + cond + ") { ";
    for (size_t j = 0; j < F.n(); ++j) l += xs + "_" + std::to_string(j) + "[" + idx + "] = " + acc[j] + "; ";
    E.line(l + "}");
  };
  if (long_rows) {
    // slot k is in row (k / V) / (L / S), at column ((k / V) % (L / S)) * S + t * V + k % V; all
    // slots of the thread are valid (N % S == 0)
    std::string pa = E.fresh("pa"), LS = std::to_string(L / S);
    declare(pa, R);
    E.line("for (int r = 0; r < " + std::to_string(R) + "; ++r) { " + set_init(comps(pa, "r")) + "}");
    E.line("#pragma unroll");
    {
      Emitter::Block slots = E.block("for (int k = 0; k < " + std::to_string(E.per_thread(in.shape)) + "; ++k) {");
      std::string col = "((k / " + Vs + ") % " + LS + ") * " + Ss + " + (int)threadIdx.x * " + Vs + " + k % " + Vs;
      E.line(F.fold_element(comps(pa, "(k / " + Vs + ") / " + LS), "ld(" + x + "[k])", col));
    }
    parts = W;
    bind_partials();
    E.line("#pragma unroll");
    Emitter::Block rows = E.block("for (int r = 0; r < " + std::to_string(R) + "; ++r) {");
    shfl(comps(pa, "r"), 32);
    store_partial("(threadIdx.x & 31) == 0", "r * " + std::to_string(W) + " + (threadIdx.x >> 5)", comps(pa, "r"));
  } else {
    // run g of this thread (flat e = g * S + t * V) is in row g * (S / L) + t / LT
    int64_t LT = L / V, G = E.per_thread(in.shape) / V, N = in.size();
    if (LT & (LT - 1)) return false;  // xor shuffles pair lanes within aligned powers of two
    std::string pg = E.fresh("pg");
    declare(pg, G);
    E.line("#pragma unroll");
    {
      Emitter::Block runs = E.block("for (int g = 0; g < " + std::to_string(G) + "; ++g) {");
      E.line(set_init(comps(pg, "g")));
      E.line("if (g * " + Ss + " + threadIdx.x * " + Vs + " < " + std::to_string(N) + ")");
      std::string col = "((int)threadIdx.x * " + Vs + " + i) % " + Ls;
      E.line("  for (int i = 0; i < " + Vs + "; ++i) { " + F.fold_element(comps(pg, "g"), "ld(" + x + "[g * " + Vs + " + i])", col) + " }");
      shfl(comps(pg, "g"), std::min<int64_t>(LT, 32));  // every lane takes part (full-warp shuffles)
    }
    parts = LT > 32 ? LT / 32 : 1;
    bind_partials();
    E.line("#pragma unroll");
    Emitter::Block runs = E.block("for (int g = 0; g < " + std::to_string(G) + "; ++g) {");
    std::string row = "(g * " + std::to_string(S / L) + " + (int)threadIdx.x / " + std::to_string(LT) + ")";
    if (LT > 32)
      store_partial("(threadIdx.x & 31) == 0 && " + row + " < " + std::to_string(R),
                    row + " * " + std::to_string(parts) + " + ((int)threadIdx.x >> 5) % " + std::to_string(parts), comps(pg, "g"));
    else
      store_partial("(int)threadIdx.x % " + std::to_string(LT) + " == 0 && " + row + " < " + std::to_string(R), row, comps(pg, "g"));
  }
  E.sync();
  auto finish = [&](const std::string& dst, const std::string& r) {
    std::string acc = E.fresh("acc");
    std::vector<std::string> a, b;
    std::string l;
    for (size_t j = 0; j < F.n(); ++j) {
      a.push_back(acc + "_" + std::to_string(j));
      b.push_back(xs + "_" + std::to_string(j) + "[" + r + " * " + std::to_string(parts) + " + j]");
      l += F.types[j] + " " + a[j] + " = " + xs + "_" + std::to_string(j) + "[" + r + " * " + std::to_string(parts) + "]; ";
    }
    E.line(l);
    if (parts > 1) E.line("for (int j = 1; j < " + std::to_string(parts) + "; ++j) { " + F.merge(a, b) + " }");
    E.line(dst + " = " + F.result(a) + ";");
  };
  if (Emitter::scalar_like(o.aval)) finish(E.name(o), "0");
  else E.foreach(o.aval.shape, [&] { finish(E.elem(o, "k"), "e"); });
  E.sync();
  return true;
}

// Reduction over the leading axes (R rows of C columns reduced to the C columns; a column sum,
// a reduction of a block over its rows) without writing the tile to shared memory. With the
// blocked layout (S = threads * V):
//  - long rows, C % S == 0: the column of a slot does not depend on the row, and the output's
//    slot that holds that column is in the same thread; every thread combines its own slots, no
//    shared memory, no barrier;
//  - short rows, S % C == 0 and C % V == 0: thread t always holds columns (t % CT) * V + i
//    (CT = C / V threads a row); it combines its runs, the lanes that share columns combine by
//    xor shuffles (CT a power of two below 32), and the partials of the warps (or threads)
//    meet in shared memory: P partials per column, P * C values, not the tile.
// Other shapes take the general path through shared memory.
bool reduce_columns(Emitter& E, const ir::Eqn& e, const std::vector<bool>& red) {
  PrimId id = e.prim->id;
  const ir::Var& o = e.out[0];
  ir::Aval in = ir::atom_aval(e.in[0]);
  std::string T = compute_type(in.dtype);
  size_t q = 0;
  while (q < red.size() && red[q]) ++q;
  if (q == 0) return false;
  for (size_t d = q; d < red.size(); ++d)
    if (red[d]) return false;  // not the leading axes
  if (Emitter::scalar_like(in)) return false;
  int64_t R = 1, C = 1;
  for (size_t d = 0; d < in.shape.size(); ++d) (red[d] ? R : C) *= in.shape[d];
  int64_t V = E.vec, S = int64_t{E.nt} * V, N = in.size();
  std::string x = E.name(e.in[0]), init = init_value(id, in.dtype), Vs = std::to_string(V);
  std::string out_t = ctype(o.aval.dtype);
  if (C % S == 0) {
    // input slot (a * C/S + b) * V + i holds column b * S + t * V + i = the output's slot b * V + i
    int64_t CS = C / S;
    E.line("#pragma unroll");
    Emitter::Block slots = E.block("for (int k = 0; k < " + std::to_string(CS * V) + "; ++k) {");
    std::string acc = E.fresh("acc");
    E.line(T + " " + acc + " = " + init + ";");
    E.line("#pragma unroll");
    E.line("for (int a = 0; a < " + std::to_string(R) + "; ++a) " + acc + " = " +
           combine(id, T, acc, "ld(" + x + "[(a * " + std::to_string(CS) + " + k / " + Vs + ") * " + Vs + " + k % " + Vs + "])") + ";");
    E.line(E.elem(o, "k") + " = cv<" + out_t + ">(" + acc + ");");
    return true;
  }
  if (S % C || C % V) return false;
  int64_t CT = C / V, G = E.per_thread(in.shape) / V, W = E.nt / 32;
  bool shfl = shuffles(T) && E.nt % 32 == 0 && CT < 32 && (CT & (CT - 1)) == 0;
  int64_t P = shfl ? W : E.nt / CT;  // partials per column
  std::string pv = E.fresh("pv");
  E.line(T + " " + pv + "[" + Vs + "];");
  E.line("#pragma unroll");
  E.line("for (int i = 0; i < " + Vs + "; ++i) " + pv + "[i] = " + init + ";");
  E.line("#pragma unroll");
  E.line("for (int g = 0; g < " + std::to_string(G) + "; ++g)");
  std::string valid = N % S ? "if (g * " + std::to_string(S) + " + (int)threadIdx.x * " + Vs + " < " + std::to_string(N) + ") " : "";
  E.line("  " + valid + "for (int i = 0; i < " + Vs + "; ++i) " + pv + "[i] = " + combine(id, T, pv + "[i]", "ld(" + x + "[g * " + Vs + " + i])") + ";");
  if (shfl) {
    E.line("#pragma unroll");
    E.line("for (int i = 0; i < " + Vs + "; ++i)");
    E.line("  for (int o_ = 16; o_ >= " + std::to_string(CT) + "; o_ >>= 1) " + pv + "[i] = " +
           combine(id, T, pv + "[i]", "__shfl_xor_sync(0xffffffffu, " + pv + "[i], o_)") + ";");
  }
  E.reserve(0, ir::Aval::array({P * C}, DType::F64));
  std::string xs = E.fresh("xs");
  E.line(T + "* " + xs + " = (" + T + "*)(smem + " + std::to_string(E.xoff) + ");");
  std::string part = shfl ? "((int)threadIdx.x >> 5)" : "((int)threadIdx.x / " + std::to_string(CT) + ")";
  std::string col = "((int)threadIdx.x % " + std::to_string(CT) + ") * " + Vs;
  E.line((shfl ? "if ((threadIdx.x & 31) < " + std::to_string(CT) + ") " : std::string()) + "for (int i = 0; i < " + Vs + "; ++i) " + xs + "[" +
         part + " * " + std::to_string(C) + " + " + col + " + i] = " + pv + "[i];");
  E.sync();
  E.foreach(o.aval.shape, [&] {
    std::string acc = E.fresh("acc");
    E.line(T + " " + acc + " = " + xs + "[e];");
    E.line("for (int p = 1; p < " + std::to_string(P) + "; ++p) " + acc + " = " + combine(id, T, acc, xs + "[p * " + std::to_string(C) + " + e]") + ";");
    E.line(E.elem(o, "k") + " = cv<" + out_t + ">(" + acc + ");");
  });
  E.sync();
  return true;
}

// A row reduction of a tensor-core dot's fragments (value_layout.h) into its Rows layout: each
// thread combines its 2 NS slots of each of its two rows per tile as a tree (depth log2(2 NS),
// not a chain of 2 NS dependent steps: few warps hide little latency), then the four lanes of
// a quad (which hold the rest of those rows) by xor shuffles 1 and 2. No shared memory, no
// barrier.
void reduce_fragment_rows(Emitter& E, const ir::Eqn& e) {
  PrimId id = e.prim->id;
  const ir::Var& o = e.out[0];
  ValueLayout L = E.layout_of(e.in[0]);
  DType in_t = ir::atom_aval(e.in[0]).dtype;
  std::string T = compute_type(in_t), x = E.name(e.in[0]), NS = std::to_string(L.grid.NS);
  int64_t n = 2 * L.grid.NS;
  E.line("#pragma unroll");
  Emitter::Block tiles = E.block("for (int t = 0; t < " + std::to_string(L.grid.TPW) + "; ++t)", "");  // its body: the h loop
  E.line("#pragma unroll");
  Emitter::Block rows = E.block("for (int h = 0; h < 2; ++h) {");
  E.line(T + " v_[" + std::to_string(n) + "];");
  E.line("#pragma unroll");
  E.line("for (int u = 0; u < " + std::to_string(n) + "; ++u)");
  std::string slot = "ld(" + x + "[(t * " + NS + " + u / 2) * 4 + 2 * h + u % 2])";
  if (L.N % (8 * L.grid.NS))  // the columns past N hold nothing
    E.line("  v_[u] = (u / 2) * 8 + 2 * (threadIdx.x & 3) + u % 2 < " + std::to_string(L.N) + " ? " + slot + " : " + init_value(id, in_t) + ";");
  else
    E.line("  v_[u] = " + slot + ";");
  for (int64_t w = n; w > 1; w = (w + 1) / 2) {
    int64_t half = (w + 1) / 2;
    for (int64_t u = 0; u + half < w; ++u)
      E.line("v_[" + std::to_string(u) + "] = " + combine(id, T, "v_[" + std::to_string(u) + "]", "v_[" + std::to_string(u + half) + "]") + ";");
  }
  E.line(T + " acc = v_[0];");
  E.line("acc = " + combine(id, T, "acc", "__shfl_xor_sync(0xffffffffu, acc, 1)") + ";");
  E.line("acc = " + combine(id, T, "acc", "__shfl_xor_sync(0xffffffffu, acc, 2)") + ";");
  E.line(E.name(o) + "[t * 2 + h] = cv<" + ctype(o.aval.dtype) + ">(acc);");
}

void reduce(Emitter& E, const ir::Eqn& e) {
  PrimId id = e.prim->id;
  const ir::Var& o = e.out[0];
  ir::Aval in = ir::atom_aval(e.in[0]);
  DType t = in.dtype;
  std::string T = compute_type(t);
  E.declare(o);
  if (E.layout_of(o).kind == ValueLayout::Rows) {
    reduce_fragment_rows(E, e);
    return;
  }
  if (Emitter::scalar_like(in)) {
    E.line(E.name(o) + " = " + E.name(e.in[0]) + ";");
    return;
  }
  if (Emitter::scalar_like(o.aval)) {
    // Whole-tile reduction: per-thread partial, then partials through shared memory.
    std::string acc = E.fresh("acc");
    E.line(T + " " + acc + " = " + init_value(id, t) + ";");
    E.foreach(in.shape, [&] { E.line(acc + " = " + combine(id, T, acc, "ld(" + E.elem(e.in[0], "k") + ")") + ";"); });
    // Warp shuffles (4/8-byte compute types), then one partial per warp through shared memory.
    bool shfl = shuffles(T);
    int parts = shfl ? E.nt / 32 : E.nt;
    if (shfl)
      E.line("for (int o_ = 16; o_ > 0; o_ >>= 1) " + acc + " = " + combine(id, T, acc, "__shfl_xor_sync(0xffffffffu, " + acc + ", o_)") + ";");
    E.reserve(0, ir::Aval::array({E.nt}, DType::F64));
    std::string p = E.fresh("xs");
    E.line(T + "* " + p + " = (" + T + "*)(smem + " + std::to_string(E.xoff) + ");");
    if (shfl) E.line("if ((threadIdx.x & 31) == 0) " + p + "[threadIdx.x >> 5] = " + acc + ";");
    else E.line(p + "[threadIdx.x] = " + acc + ";");
    E.sync();
    E.line(acc + " = " + p + "[0];");
    E.line("for (int j = 1; j < " + std::to_string(parts) + "; ++j) " + acc + " = " + combine(id, T, acc, p + "[j]") + ";");
    E.sync();
    E.line(E.name(o) + " = cv<" + ctype(o.aval.dtype) + ">(" + acc + ");");
    return;
  }
  auto axes = e.params.get<std::vector<int64_t>>("axes");
  std::vector<bool> red(in.shape.size(), false);
  for (auto a : axes) red[static_cast<size_t>(a < 0 ? a + in.ndim() : a)] = true;
  if (reduce_rows(E, e, red, reduce_fold(e.prim->id, t, o.aval.dtype)) || reduce_columns(E, e, red)) return;
  std::string xs = E.put_exchange(e.in[0]);
  E.sync();
  auto st = row_major_strides(in.shape);
  Shape kept, rs;
  std::vector<int64_t> kst, rst;
  for (size_t d = 0; d < in.shape.size(); ++d) (red[d] ? rs : kept).push_back(in.shape[d]), (red[d] ? rst : kst).push_back(st[d]);
  E.foreach(o.aval.shape, [&] {
    auto oi = E.unravel("e", kept);
    std::string base = "0";
    for (size_t d = 0; d < kept.size(); ++d) base += " + " + oi[d] + " * " + std::to_string(kst[d]);
    std::string acc = E.fresh("acc");
    E.line(T + " " + acc + " = " + init_value(id, t) + ";");
    {
      Emitter::Block rows = E.block("for (int r = 0; r < " + std::to_string(shape_size(rs)) + "; ++r) {");
      auto ri = E.unravel("r", rs);
      std::string off = base;
      for (size_t d = 0; d < rs.size(); ++d) off += " + " + ri[d] + " * " + std::to_string(rst[d]);
      E.line(acc + " = " + combine(id, T, acc, "ld(" + xs + "[" + off + "])") + ";");
    }
    E.line(E.elem(o, "k") + " = cv<" + ctype(o.aval.dtype) + ">(" + acc + ");");
  });
  E.sync();
}

// Gathers out[k] = in[src] through shared memory; src (emitted inside the loop over slots) is a
// C expression of the slot k and the thread.
void gather_slots(Emitter& E, const ir::Eqn& e, const std::function<std::string()>& src) {
  const ir::Var& o = e.out[0];
  E.declare(o);
  std::string xs = E.put_exchange(e.in[0]);
  E.sync();
  E.foreach(o.aval.shape, [&] { E.line(E.elem(o, "k") + " = " + xs + "[" + src() + "];"); });
  E.sync();
}
void gather_slots(Emitter& E, const ir::Eqn& e, const std::string& src) {
  gather_slots(E, e, [&] { return src; });
}

// The same with src computed from out's multi-index.
void gather(Emitter& E, const ir::Eqn& e, const std::function<std::string(const std::vector<std::string>&)>& src) {
  gather_slots(E, e, [&] { return src(E.unravel("e", e.out[0].aval.shape)); });
}

// broadcast_in_dim. In the blocked layout (slot k of thread t holds flat element
// e = (k / V) * S + t * V + k % V, S = threads * V), the two broadcasts norms and epilogues use
// most need little or no data movement:
//  - along leading dims (a row vector over rows: src = e % C, C the input's size): when
//    C % S == 0 each thread already holds the elements it needs, in slot
//    ((k / V) % (C / S)) * V + k % V: a copy between registers, no shared memory; when
//    S % C == 0, src = (t * V + k % V) % C: V distinct reads per thread;
//  - along trailing dims (a column of row statistics: src = e / C', C' the broadcast extent):
//    when C' % S == 0 the row of slot k, (k / V) / (C' / S), is the same in every thread, so
//    the reads are few and uniform; when S % C' == 0 it is (k / V) * (S / C') + t / (C' / V).
// Writing the source index in those terms (not through e) lets the compiler share the reads
// instead of keeping one register per slot alive. Other broadcasts gather through shared
// memory by the flat index.
void broadcast(Emitter& E, const ir::Eqn& e) {
  ir::Aval in = ir::atom_aval(e.in[0]);
  const ir::Var& o = e.out[0];
  if (Emitter::scalar_like(in)) {
    if (Emitter::scalar_like(o.aval)) { E.bind_name(o, E.name(e.in[0])); return; }
    E.declare(o);
    E.foreach_value(o, [&] { E.line(E.elem(o, "k") + " = " + E.name(e.in[0]) + ";"); });
    E.uniform[o.id] = E.name(e.in[0]);
    return;
  }
  if (E.layout_of(e.in[0]).kind == ValueLayout::Rows) {  // row statistics: in registers already
    ValueLayout out = E.layout_of(o);
    if (out.kind == ValueLayout::Rows) { E.bind_name(o, E.name(e.in[0])); return; }  // [M] -> [M, 1]
    E.declare(o);
    E.foreach_value(o, [&] { E.line(E.elem(o, "k") + " = " + E.name(e.in[0]) + "[rk];"); });
    return;
  }
  auto bd = e.params.get<std::vector<int64_t>>("broadcast_dimensions");
  auto st = row_major_strides(in.shape);
  if (E.layout_of(o).kind == ValueLayout::Mma) {  // a vector over a tile's rows or columns, into fragments (i, j)
    E.declare(o);
    std::string src = "0";
    for (size_t j = 0; j < in.shape.size(); ++j)
      if (in.shape[j] != 1) src += std::string(" + ") + (bd[j] == 0 ? "i" : "j") + " * " + std::to_string(st[j]);
    if (auto f = E.plan.fragment_loads.find(&e); f != E.plan.fragment_loads.end()) {  // each slot read from memory
      E.foreach_value(o, [&] { emit_load_element(E, *f->second, src, E.elem(o, "k")); });
      return;
    }
    std::string xs = E.put_exchange(e.in[0]);
    E.sync();
    E.foreach_value(o, [&] { E.line(E.elem(o, "k") + " = " + xs + "[" + src + "];"); });
    E.sync();
    return;
  }
  const Shape& O = o.aval.shape;
  std::vector<bool> varies(O.size(), false);  // output dims the input varies along
  for (size_t j = 0; j < in.shape.size(); ++j)
    if (in.shape[j] != 1) varies[static_cast<size_t>(bd[j])] = true;
  std::vector<bool> kept;  // the same, over the output dims longer than 1
  for (size_t d = 0; d < O.size(); ++d)
    if (O[d] != 1) kept.push_back(varies[d]);
  size_t first = 0, last = kept.size();
  while (first < kept.size() && !kept[first]) ++first;
  while (last > first && !kept[last - 1]) --last;
  bool contiguous = std::all_of(kept.begin() + static_cast<std::ptrdiff_t>(first), kept.begin() + static_cast<std::ptrdiff_t>(last), [](bool b) { return b; });
  int64_t V = E.vec, S = int64_t{E.nt} * V, C = in.size();
  std::string Vs = std::to_string(V);
  if (contiguous && last == kept.size()) {  // src = e % C
    if (C % S == 0) {
      E.declare(o);
      E.foreach(O, [&] { E.line(E.elem(o, "k") + " = " + E.name(e.in[0]) + "[((k / " + Vs + ") % " + std::to_string(C / S) + ") * " + Vs + " + k % " + Vs + "];"); });
      return;
    }
    if (S % C == 0 && C % V == 0) {
      gather_slots(E, e, "(threadIdx.x * " + Vs + " + k % " + Vs + ") % " + std::to_string(C));
      return;
    }
  }
  if (contiguous && first == 0) {  // src = e / C'
    int64_t Cb = o.aval.size() / C;
    if (Cb % S == 0) {
      gather_slots(E, e, "(k / " + Vs + ") / " + std::to_string(Cb / S));
      return;
    }
    if (S % Cb == 0 && Cb % V == 0) {
      gather_slots(E, e, "(k / " + Vs + ") * " + std::to_string(S / Cb) + " + (int)threadIdx.x / " + std::to_string(Cb / V));
      return;
    }
  }
  gather(E, e, [&](const std::vector<std::string>& oi) {
    std::string s = "0";
    for (size_t j = 0; j < in.shape.size(); ++j)
      if (in.shape[j] != 1) s += " + " + oi[static_cast<size_t>(bd[j])] + " * " + std::to_string(st[j]);
    return s;
  });
}

}  // namespace

void register_shape_rules(ir::RuleTable<LowerRule>& t) {
  t.set(PrimId::iota, [](Emitter& E, const ir::Eqn& e) {
    const ir::Var& o = e.out[0];
    int dim = static_cast<int>(e.params.get_int("dimension"));
    if (dim < 0) dim += o.aval.ndim();
    E.declare(o);
    E.foreach_value(o, [&] {
      auto oi = E.unravel("e", o.aval.shape);
      E.line(E.elem(o, "k") + " = cv<" + ctype(o.aval.dtype) + ">(" + (oi.empty() ? std::string("0") : oi[static_cast<size_t>(dim)]) + ");");
    });
  });
  t.set(PrimId::broadcast_in_dim, broadcast);
  auto same_order = [](Emitter& E, const ir::Eqn& e) { E.bind_name(e.out[0], E.name(e.in[0])); };
  t.set(PrimId::reshape, same_order);
  t.set(PrimId::squeeze, same_order);
  t.set(PrimId::transpose, [](Emitter& E, const ir::Eqn& e) {
    ir::Aval in = ir::atom_aval(e.in[0]);
    if (Emitter::scalar_like(in)) { E.bind_name(e.out[0], E.name(e.in[0])); return; }
    auto perm = e.params.get<std::vector<int64_t>>("permutation");
    auto st = row_major_strides(in.shape);
    gather(E, e, [&](const std::vector<std::string>& oi) {
      std::string s = "0";
      for (size_t d = 0; d < perm.size(); ++d) s += " + " + oi[d] + " * " + std::to_string(st[static_cast<size_t>(perm[d])]);
      return s;
    });
  });
  for (PrimId id : {PrimId::reduce_sum, PrimId::reduce_max, PrimId::reduce_min, PrimId::reduce_prod}) t.set(id, reduce);
  auto arg = [](Emitter& E, const ir::Eqn& e) {
    bool mx = e.prim->id == PrimId::argmax;
    ir::Aval in = ir::atom_aval(e.in[0]);
    const ir::Var& o = e.out[0];
    int ax = static_cast<int>(e.params.get_int("axis"));
    if (ax < 0) ax += in.ndim();
    std::string T = compute_type(in.dtype);
    auto st = row_major_strides(in.shape);
    Shape kept;
    std::vector<int64_t> kst;
    for (int d = 0; d < in.ndim(); ++d)
      if (d != ax) kept.push_back(in.shape[static_cast<size_t>(d)]), kst.push_back(st[static_cast<size_t>(d)]);
    E.declare(o);
    std::vector<bool> red(in.shape.size(), false);
    red[static_cast<size_t>(ax)] = true;
    if (reduce_rows(E, e, red, arg_fold(mx, in.dtype, o.aval.dtype))) return;
    std::string xs = E.put_exchange(e.in[0]);
    E.sync();
    E.foreach(o.aval.shape, [&] {
      auto oi = E.unravel("e", kept);
      std::string base = "0";
      for (size_t d = 0; d < kept.size(); ++d) base += " + " + oi[d] + " * " + std::to_string(kst[d]);
      E.line("{ int bi = 0; " + T + " bv = ld(" + xs + "[" + base + "]);");
      E.line("  for (int r = 1; r < " + std::to_string(in.shape[static_cast<size_t>(ax)]) + "; ++r) { " + T + " v = ld(" + xs + "[" +
             base + " + r * " + std::to_string(st[static_cast<size_t>(ax)]) + "]);");
      E.line(std::string("    if (bv != bv) break; if (v != v || v ") + (mx ? ">" : "<") + " bv) { bv = v; bi = r; } }");
      E.line("  " + E.elem(o, "k") + " = (" + ctype(o.aval.dtype) + ")bi; }");
    });
    E.sync();
  };
  t.set(PrimId::argmax, arg);
  t.set(PrimId::argmin, arg);
  t.set(PrimId::cumsum, [](Emitter& E, const ir::Eqn& e) {
    ir::Aval in = ir::atom_aval(e.in[0]);
    if (Emitter::scalar_like(in)) { E.bind_name(e.out[0], E.name(e.in[0])); return; }
    int ax = static_cast<int>(e.params.get_int("axis"));
    if (ax < 0) ax += in.ndim();
    std::string T = compute_type(in.dtype);
    auto st = row_major_strides(in.shape);
    const ir::Var& o = e.out[0];
    E.declare(o);
    std::string xs = E.put_exchange(e.in[0]);
    E.sync();
    E.foreach(o.aval.shape, [&] {
      auto oi = E.unravel("e", in.shape);
      std::string s = std::to_string(st[static_cast<size_t>(ax)]);
      E.line("{ " + T + " acc = 0; for (int r = 0; r <= " + oi[static_cast<size_t>(ax)] + "; ++r) acc = p_add<" + T + ">(acc, ld(" + xs +
             "[e - (" + oi[static_cast<size_t>(ax)] + " - r) * " + s + "]));");
      E.line("  " + E.elem(o, "k") + " = cv<" + ctype(o.aval.dtype) + ">(acc); }");
    });
    E.sync();
  });
}

}  // namespace pallas::cuda
