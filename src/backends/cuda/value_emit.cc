// Emitting values in their layouts (value_layout.h): declarations, loops over a thread's
// slots, and the conversions emit_eqns inserts where two layouts meet.
#include <algorithm>

#include "src/backends/cuda/lower.h"

namespace pallas::cuda {

std::string ValueLayout::str() const {
  if (kind == Blocked) return "blocked";
  std::string workers = std::to_string(grid.W) + (grid.wg ? " warpgroup(s)" : " warp(s)");
  std::string tiles = std::to_string(grid.TM * grid.TN) + " tile(s) of " + std::to_string(grid.rows()) + " x " + std::to_string(8 * grid.NS);
  if (kind == Mma) return "mma [" + std::to_string(M) + ", " + std::to_string(N) + "] (" + tiles + " over " + workers + ")";
  return "rows [" + std::to_string(M) + "] (" + std::to_string(grid.TM) + " tile(s) of " + std::to_string(grid.rows()) + " rows over " + workers + ")";
}

ValueLayout Emitter::layout_of(const ir::Atom& a) const {
  auto* v = std::get_if<ir::Var>(&a);
  if (!v || scalar_like(v->aval)) return {};
  auto it = value_layouts_.find(v->id);
  return it == value_layouts_.end() ? ValueLayout{} : it->second;
}

int64_t Emitter::slots(const ir::Var& v) const {
  ValueLayout L = layout_of(v);
  return L.kind == ValueLayout::Blocked ? per_thread(v.aval.shape) : L.slots();
}

void Emitter::foreach_in(const ValueLayout& L, const Shape& s, const std::function<void()>& f) {
  if (L.kind == ValueLayout::Blocked) foreach(s, f);
  else foreach_fragments(L, f);
}

// Tile t of this thread's worker is tile w + t * W of the grid (w: the warp, or the warpgroup);
// its origin (m0, n0), and for wgmma the warp's 16 rows of it. Slots of tiles past the grid,
// rows past M and columns past N are skipped (they hold nothing; j and i are unused by the
// code for other slots, so (void) silences them).
void Emitter::foreach_fragments(const ValueLayout& L, const std::function<void()>& f) {
  const MmaGrid& q = L.grid;
  // The guard keeps only the conditions that can fail (each costs a compare per slot).
  std::string guard;
  auto need = [&](bool can_fail, const std::string& c) {
    if (can_fail) guard += (guard.empty() ? "" : " && ") + c;
  };
  need(q.TPW * q.W != q.TM * q.TN, "tile < " + std::to_string(q.TM * q.TN));
  need(L.M % q.rows() != 0, "i < " + std::to_string(L.M));
  line("#pragma unroll");
  Block tiles = block("for (int t = 0; t < " + std::to_string(q.TPW) + "; ++t) {");
  line("const int tile = (threadIdx.x >> " + std::string(q.wg ? "7" : "5") + ") + t * " + std::to_string(q.W) +
       ", g = (threadIdx.x & 31) >> 2, q = threadIdx.x & 3; (void)tile; (void)q;");
  line("const int m0 = (tile / " + std::to_string(q.TN) + ") * " + std::to_string(q.rows()) + (q.wg ? " + 16 * ((threadIdx.x >> 5) & 3)" : "") +
       ", n0 = (tile % " + std::to_string(q.TN) + ") * " + std::to_string(8 * q.NS) + "; (void)n0;");
  line("#pragma unroll");
  if (L.kind == ValueLayout::Rows) {
    Block rows = block("for (int h = 0; h < 2; ++h) {");
    line("const int k = t * 2 + h, rk = k, i = m0 + g + 8 * h, e = i; (void)rk; (void)e;");
    Block in = block("if (" + (guard.empty() ? std::string("true") : guard) + ") {");
    f();
    return;
  }
  // accumulator r of n-block s: row g + 8 (r / 2), column 8 s + 2 q + r % 2. The s loop's
  // Block holds the r loop, printed as it always was: the r loop's body at the depth of its
  // `for`, its closing brace (the s Block's) one level out.
  Block blocks = block("for (int s = 0; s < " + std::to_string(q.NS) + "; ++s)");
  line("#pragma unroll");
  line("for (int r = 0; r < 4; ++r) {");
  line("const int k = (t * " + std::to_string(q.NS) + " + s) * 4 + r, rk = t * 2 + r / 2, i = m0 + g + 8 * (r / 2), j = n0 + s * 8 + 2 * q + r % 2; (void)rk; (void)i; (void)j;");
  line("const int e = i * " + std::to_string(L.N) + " + j; (void)e;");
  need(L.N % (8 * q.NS) != 0, "j < " + std::to_string(L.N));
  Block in = block("if (" + (guard.empty() ? std::string("true") : guard) + ") {");
  f();
}

// Any layout to any other: the value goes to shared memory row-major (put_shared writes from
// any layout by the flat index), each thread reads its slots of the other layout back. A
// value that is one scalar broadcast is filled in directly.
std::string Emitter::as_layout(const ir::Atom& a, const ValueLayout& want, bool reuse) {
  if (layout_of(a) == want || scalar_like(ir::atom_aval(a))) return name(a);
  const ir::Var& v = std::get<ir::Var>(a);
  std::string key = std::to_string(v.id) + " " + want.str();
  for (auto it = conversions_.rbegin(); it != conversions_.rend(); ++it)
    if (auto c = it->find(key); c != it->end()) return c->second;
  std::string n = fresh("cv"), T = ctype(v.aval.dtype);
  int64_t count = want.kind == ValueLayout::Blocked ? per_thread(v.aval.shape) : want.slots();
  line(T + " " + n + "[" + std::to_string(count) + "];");
  if (auto u = uniform.find(v.id); u != uniform.end()) {
    foreach_in(want, v.aval.shape, [&] { line(n + "[k] = " + u->second + ";"); });
  } else {
    std::string xs = put_exchange(a);
    sync();
    foreach_in(want, v.aval.shape, [&] { line(n + "[k] = " + xs + "[e];"); });
    sync();
  }
  if (reuse && !conversions_.empty()) conversions_.back()[key] = n;
  return n;
}

}  // namespace pallas::cuda
