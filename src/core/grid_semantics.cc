// Grid dimension semantics: which axes may run at once (parallel) and which must run in order
// (sequential), declared by the user or inferred from the output index maps.
//
// Inference: an axis stays parallel only if programs that differ along it can never write the
// same block of any output; otherwise its programs revisit blocks (the Pallas reduction idiom:
// init when program_id(g) == 0, then accumulate; or a map like i / 2), which is only
// deterministic if the axis runs in order, so it is sequential — the interpreter's row-major
// order, which the GPU then follows too. Proof of "never the same block": some block index of
// the output reads the axis and is an affine form one-to-one over the grid's box (i, 2 * i + 1,
// n - 1 - i, i * 8 + j with j < 8). Where the forms prove nothing (a div, a rem, a min: the
// grouped program order of a matmul), the maps are run over the whole grid at trace time and
// exactly the axes along which two programs write one block become sequential; only where
// they cannot be run (a call-time grid size, over 2^16 programs) is every unproven axis
// sequential — slower than parallel if the map was one-to-one, never a race.
// An output whose index map reads scalar-prefetch data may map two programs to one block along
// any axis, which no analysis of the map can rule out: without declared semantics that is an
// error that names the output and the fixes.
#include <algorithm>
#include <climits>
#include <optional>
#include <unordered_map>

#include "src/core/pallas_call.h"
#include "src/ir/dependence.h"
#include "src/ir/scalar_eval.h"

namespace pallas::core {

bool BlockMapping::index_map_reads(const std::vector<bool>& axes, bool prefetch) const {
  std::vector<bool> taint(index_map->invars.size(), false);
  for (size_t k = 0; k < taint.size(); ++k) taint[k] = k < axes.size() ? axes[k] : prefetch;
  for (bool b : ir::outvars_depending_on(*index_map, taint))
    if (b) return true;
  return false;
}

namespace {
// Whether the block index f gives any two programs that differ along axis a different values:
// f reads a and is one-to-one over the box of all the axes it reads (parallel or not: programs
// of different sequential steps overlap in time too) — sorted by |coefficient|, each exceeds
// the widest span the smaller ones can cover — and that span stays below 2^bits, so the
// wrapped values the backends compute differ too. Coefficients are taken as their residues
// modulo 2^bits (i * 65536 * 65536 is 0 in i32); a call-time extent counts as 2^31 - 1.
bool separates(const ir::AffineForm& f, size_t a, const std::vector<int64_t>& grid) {
  if (!f.affine || a >= f.coef.size()) return false;
  auto residue = [&](int64_t c) {
    if (f.bits >= 64) return c;
    int sh = 64 - f.bits;
    return static_cast<int64_t>(static_cast<uint64_t>(c) << sh) >> sh;
  };
  if (residue(f.coef[a]) == 0) return false;
  std::vector<std::pair<int64_t, int64_t>> terms;  // |coef|, extent
  for (size_t k = 0; k < f.coef.size(); ++k) {
    int64_t c = residue(f.coef[k]);
    if (c == 0 || grid[k] == 1) continue;
    if (c == INT64_MIN) return false;
    terms.push_back({c < 0 ? -c : c, grid[k] < 0 ? int64_t{INT32_MAX} : grid[k]});
  }
  std::sort(terms.begin(), terms.end());
  int64_t span = 0;  // the widest difference the terms so far can make
  for (auto [c, n] : terms) {
    if (c <= span) return false;
    if (__builtin_mul_overflow(c, n - 1, &n) || __builtin_add_overflow(span, n, &span)) return false;
  }
  return f.bits >= 64 || span < (int64_t{1} << f.bits);
}

// Run an output's index map over the whole grid (static, at most kMaxEvaluatedPrograms
// programs, maps of integer arithmetic only) and return the axes along which two programs that
// write one block of it differ: those must run in order, in one CUDA block, for the
// two to be ordered. nullopt where the maps cannot be run so. The limit keeps tracing cheap
// (11 ms at the limit, one output, on a 2-core CI machine): a matmul's grouped order over a 16384² output in
// 64x64 tiles has 65536 programs.
constexpr int64_t kMaxEvaluatedPrograms = int64_t{1} << 16;
struct BlockKeyHash {
  size_t operator()(const std::vector<int64_t>& v) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t x : v) h = (h ^ static_cast<uint64_t>(x)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};
std::optional<std::vector<bool>> revisited_axes(const GridMapping& g, const BlockMapping& o) {
  size_t rank = g.grid.size();
  int64_t n = 1;
  for (int64_t e : g.grid) {
    if (e < 0 || (e > 0 && n > kMaxEvaluatedPrograms / e)) return std::nullopt;
    n *= e;
  }
  std::vector<bool> seq(rank, false);
  std::vector<int64_t> pid(rank), first(rank), slots;
  std::optional<ir::ScalarProgram> map = ir::ScalarProgram::compile(*o.index_map, rank);
  if (!map) return std::nullopt;
  std::unordered_map<std::vector<int64_t>, int64_t, BlockKeyHash> writer;  // block indices -> first program
  writer.reserve(static_cast<size_t>(n));
  std::vector<int64_t> block(map->num_outputs());
  for (int64_t p = 0; p < n; ++p) {
    map->run(pid.data(), block.data(), slots);
    auto [it, fresh] = writer.emplace(block, p);
    if (!fresh) {
      int64_t q = it->second;
      for (size_t a = rank; a-- > 0;) {  // q's coordinates
        first[a] = q % g.grid[a];
        q /= g.grid[a];
      }
      for (size_t a = 0; a < rank; ++a) seq[a] = seq[a] || first[a] != pid[a];
    }
    for (size_t a = rank; a-- > 0;) {
      if (++pid[a] < g.grid[a]) break;
      pid[a] = 0;
    }
  }
  return seq;
}
}  // namespace

bool GridMapping::any_sequential() const {
  for (auto s : semantics)
    if (s == DimensionSemantics::Sequential) return true;
  return false;
}

void resolve_semantics(GridMapping& g, const std::vector<DimensionSemantics>& declared, const std::string& what) {
  size_t rank = g.grid.size();
  if (!declared.empty()) {
    if (declared.size() != rank)
      throw Error(what + ": dimension_semantics has " + std::to_string(declared.size()) + " entries but the grid has " +
                  std::to_string(rank) + (rank == 1 ? " axis" : " axes") + "; give one per grid axis, or none to infer them");
    for (auto s : declared)
      if (s != DimensionSemantics::Parallel && s != DimensionSemantics::Sequential)
        throw Error(what + ": dimension_semantics holds an unknown value; use pl::parallel or pl::sequential");
    g.semantics = declared;
    return;
  }
  g.semantics.assign(rank, DimensionSemantics::Parallel);
  for (const BlockMapping& o : g.outputs)
    if (o.index_map_reads(std::vector<bool>(rank, false), /*prefetch=*/true))
      throw Error(what + ": the index map of " + o.what + " reads scalar-prefetch data, so two programs may write the "
                  "same block of it and the grid cannot be checked for races; declare dimension_semantics "
                  "(pl::sequential for the axes along which its blocks may repeat, pl::parallel for the others), or "
                  "write that output with atomics");
  for (const BlockMapping& o : g.outputs) {
    std::vector<bool> r = revisit_axes(g, o);
    for (size_t a = 0; a < rank; ++a)
      if (r[a]) g.semantics[a] = DimensionSemantics::Sequential;
  }
}

std::vector<bool> revisit_axes(const GridMapping& g, const BlockMapping& o) {
  size_t rank = g.grid.size();
  std::vector<bool> unproven(rank, false);
  std::vector<ir::AffineForm> forms = ir::affine_outvars(*o.index_map, rank);
  for (size_t a = 0; a < rank; ++a) {
    if (g.grid[a] == 1) continue;  // a size-1 axis has no two programs
    bool apart = false;
    for (const ir::AffineForm& f : forms) apart = apart || separates(f, a, g.grid);
    unproven[a] = !apart;
  }
  // An axis the map ignores is a revisit for certain (the K axis of a matmul): only an unproven
  // axis the map reads needs the map run.
  bool doubt = false;
  for (size_t a = 0; a < rank; ++a) {
    if (!unproven[a]) continue;
    std::vector<bool> axis(rank, false);
    axis[a] = true;
    doubt = doubt || o.index_map_reads(axis, false);
  }
  if (!doubt) return unproven;
  // The forms could not prove every axis apart: run the map over the whole grid, and the axes
  // along which two programs that write one block differ are exactly the revisits.
  if (std::optional<std::vector<bool>> exact = revisited_axes(g, o)) return *exact;
  return unproven;
}

}  // namespace pallas::core
