// Grid dimension semantics: which axes may run at once (parallel) and which must run in order
// (sequential), declared by the user or inferred from the output index maps.
//
// Inference: programs that differ only along axis g write the same block of output o when o's
// index map does not depend on g; such revisits (the Pallas reduction idiom: init when
// program_id(g) == 0, then accumulate) are only deterministic if g runs in order, so g is
// sequential. An output whose index map reads scalar-prefetch data may map two programs to one
// block along any axis, which no analysis of the map can rule out: without declared semantics
// that is an error that names the output and the fixes.
#include "src/core/pallas_call.h"
#include "src/ir/dependence.h"

namespace pallas::core {

bool BlockMapping::index_map_reads(const std::vector<bool>& axes, bool prefetch) const {
  std::vector<bool> taint(index_map->invars.size(), false);
  for (size_t k = 0; k < taint.size(); ++k) taint[k] = k < axes.size() ? axes[k] : prefetch;
  for (bool b : ir::outvars_depending_on(*index_map, taint))
    if (b) return true;
  return false;
}

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
  for (const BlockMapping& o : g.outputs) {
    if (o.index_map_reads(std::vector<bool>(rank, false), /*prefetch=*/true))
      throw Error(what + ": the index map of " + o.what + " reads scalar-prefetch data, so two programs may write the "
                  "same block of it and the grid cannot be checked for races; declare dimension_semantics "
                  "(pl::sequential for the axes along which its blocks may repeat, pl::parallel for the others), or "
                  "write that output with atomics");
    for (size_t a = 0; a < rank; ++a) {
      if (g.grid[a] == 1 || g.semantics[a] == DimensionSemantics::Sequential) continue;
      std::vector<bool> axis(rank, false);
      axis[a] = true;
      bool moves = o.index_map_reads(axis, false);
      if (!moves) g.semantics[a] = DimensionSemantics::Sequential;
    }
  }
}

}  // namespace pallas::core
