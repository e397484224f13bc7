// The loop pipeliner (pipeline.h): plan, then the copies before and inside the loop.
#include "src/backends/cuda/pipeline.h"

#include <algorithm>
#include <functional>
#include <unordered_map>
#include <unordered_set>

namespace pallas::cuda {
using ir::PrimId;

namespace {


// Any op of the jaxpr, or of the jaxprs inside its ops, writes a ref, prints or checks.
bool has_effects(const ir::Jaxpr& j) {
  bool any = false;
  ir::for_each_eqn(j, [&](const ir::Eqn& e) { any = any || e.prim->has_effects; });
  return any;
}

// A load of one element without a mask or index arrays.
bool scalar_load(const ir::Eqn& e) {
  if (e.prim->id != PrimId::load || e.params.get_bool("has_mask") || e.out[0].aval.size() != 1) return false;
  for (const ir::IndexDim& x : e.params.get<ir::NDIndexer>("idx").dims)
    if (x.kind == ir::IndexDim::Kind::Array) return false;
  return true;
}

// The body eqns that compute `a` from the loop index, literals and values from outside the
// loop, appended in order to `out`; false if `a` depends on anything else (a carry) or on an op
// that is not plain scalar arithmetic or a scalar load (a block table's entry: the body writes
// no ref, so reading it for a later iteration reads what that iteration would).
bool index_slice(const ir::Atom& a, const ir::Jaxpr& body, size_t num_carry, const std::unordered_map<int64_t, const ir::Eqn*>& def,
                 std::vector<const ir::Eqn*>& out, std::unordered_set<const ir::Eqn*>& seen) {
  const auto* v = std::get_if<ir::Var>(&a);
  if (!v) return true;  // a literal
  if (v->id == body.invars[0].id) return true;
  for (size_t c = 0; c < num_carry; ++c)
    if (v->id == body.invars[1 + c].id) return false;
  auto it = def.find(v->id);
  if (it == def.end()) return true;  // from outside the loop
  const ir::Eqn& e = *it->second;
  if (seen.count(&e)) return true;
  ir::PrimKind k = e.prim->kind;
  bool arithmetic = k == ir::PrimKind::Unary || k == ir::PrimKind::Binary || k == ir::PrimKind::Elementwise ||
                    e.prim->id == PrimId::multiple_of || e.prim->id == PrimId::max_contiguous || scalar_load(e);
  if (!arithmetic || e.prim->has_effects || e.out.size() != 1 || !Emitter::scalar_like(e.out[0].aval)) return false;
  for (const ir::Atom& x : e.in)
    if (!index_slice(x, body, num_carry, def, out, seen)) return false;
  seen.insert(&e);
  out.push_back(&e);
  return true;
}

// The transposing copy's order. A load [K, N] (rows K, columns N contiguous in memory) goes to
// a K-major tile (rows N, runs of K): each warp instruction copies 4 words of K x 8 of N (four
// 32-byte sectors read; the words land in 32 different banks: the swizzle spreads the 8 rows
// of N over the banks, and lane group a = lane / 8 copies its chunk's word (q + a) % 4 at
// step q), and each thread copies whole 16-byte chunks of the tile (4 words of K of one N),
// which it then rounds to tf32 in one access. f runs with C locals tn (the N) and tkc (the
// chunk: K = 4 tkc .. 4 tkc + 3) in scope.
bool transposable(const ir::Eqn& load) {
  const Shape& s = load.out[0].aval.shape;
  if (s.size() != 2 || s[0] % 16 || s[1] % 8 || load.params.get_bool("has_mask") || itemsize(load.out[0].aval.dtype) != 4) return false;
  for (const ir::IndexDim& x : load.params.get<ir::NDIndexer>("idx").dims)
    if (x.kind == ir::IndexDim::Kind::Array) return false;
  return true;
}

void foreach_transposed_chunk(Emitter& E, const PipelinedLoad& l, const std::function<void()>& f) {
  const Shape& s = l.load->out[0].aval.shape;
  int64_t nb = s[1] / 8, units = (s[0] / 16) * nb, warps = E.nt / 32;
  E.line("#pragma unroll");
  Emitter::Block chunks = E.block("for (int g = 0; g < " + std::to_string((units + warps - 1) / warps) + "; ++g) { const int u = (threadIdx.x >> 5) + g * " +
                                      std::to_string(warps) + "; " + (units % warps ? "if (u < " + std::to_string(units) + ") {" : "{"),
                                  "}}");
  E.line("const int tn = (u % " + std::to_string(nb) + ") * 8 + (threadIdx.x & 7), tkc = (u / " + std::to_string(nb) + ") * 4 + ((threadIdx.x >> 3) & 3);");
  f();
}

// The rows of one TMA box's destination (each box is 128 bytes wide): the tile's rows, or
// the load's own where it lands in a staging region.
int64_t box_rows(const PipelinedLoad& l) {
  if (l.landing == PipelinedLoad::Landing::TmaStaged) return l.load->out[0].aval.shape[0];
  return l.tile.k_major ? l.tile.mn : l.tile.kp;
}

// The staging region of a TmaStaged load, as TMA writes it: 128-byte columns of the load's
// rows, swizzled as a K-major tile whose "MN" is the load's rows.
SwizzledTile staging_tile(const PipelinedLoad& l) {
  const Shape& s = l.load->out[0].aval.shape;
  SwizzledTile t;
  t.k_major = true, t.item = static_cast<int64_t>(itemsize(l.load->out[0].aval.dtype)), t.mn = s[0], t.kp = s[1];
  t.bytes = static_cast<size_t>(s[0] * s[1] * t.item);
  return t;
}

// Whether the load can be a TMA copy into its tile, and the tensor map it then takes: the
// load reads a 2-D window [rows, cols] of an input's block with unit strides, the columns
// along the array's contiguous last dimension in whole 128-byte boxes, the rows along another
// dimension (at most 256 of them), the others indexed by integers or squeezed.
bool plan_tma(const KernelPlan& P, PipelinedLoad& l) {
  const ir::Eqn& load = *l.load;
  auto it = P.refs.find(std::get<ir::Var>(load.in[0]).id);
  if (!P.tma || it == P.refs.end() || it->second.param < 0) return false;
  const RefPlan& r = it->second;
  DType t = load.out[0].aval.dtype;
  const Shape& s = load.out[0].aval.shape;
  int64_t item = static_cast<int64_t>(itemsize(t)), per_box = 128 / item;
  size_t rank = r.array_shape.size();
  if ((item != 1 && item != 2 && !(item == 4 && l.landing != PipelinedLoad::Landing::Straight)) || s.size() != 2 || rank > 5 || s[0] > 256 || s[1] % per_box || (r.array_shape.back() * item) % 16) return false;
  const auto& ix = load.params.get<ir::NDIndexer>("idx");
  if (ix.dims.size() != r.array_dim.size()) return false;
  std::vector<int> slices;  // the array dims of the load's slices, in order
  for (size_t k = 0; k < ix.dims.size(); ++k) {
    const ir::IndexDim& x = ix.dims[k];
    if (x.kind == ir::IndexDim::Kind::Array) return false;
    bool slice = x.kind == ir::IndexDim::Kind::Slice || x.kind == ir::IndexDim::Kind::DynSlice;
    if (slice && x.stride != 1) return false;
    if (slice) slices.push_back(r.array_dim[k]);
  }
  if (slices.size() != 2 || slices[1] != static_cast<int>(rank) - 1) return false;
  if (box_rows(l) % 8) return false;  // each box's destination 1024-aligned, as the swizzle pattern needs
  l.row_dim = slices[0], l.col_dim = slices[1];
  l.map.param = r.param;
  l.map.dtype = t;
  l.map.array_shape = r.array_shape;
  l.map.box.assign(rank, 1);
  l.map.box[static_cast<size_t>(l.row_dim)] = s[0];
  l.map.box[static_cast<size_t>(l.col_dim)] = per_box;
  return true;
}

// Emits the load's TMA copies (thread 0) into the tile at dst, completing on mbarrier bar.
void issue_tma(Emitter& E, const PipelinedLoad& l, const std::string& dst, const std::string& bar) {
  const ir::Eqn& load = *l.load;
  const RefInfo& r = E.refs.at(std::get<ir::Var>(load.in[0]).id);
  const auto& ix = load.params.get<ir::NDIndexer>("idx");
  size_t start = static_cast<size_t>(load.params.get_int("idx_start"));
  std::vector<std::string> coord = r.origin;  // the block's origin, plus the load's offsets in it
  for (size_t k = 0; k < ix.dims.size(); ++k) {
    const ir::IndexDim& x = ix.dims[k];
    bool dynamic = x.kind == ir::IndexDim::Kind::DynSlice || x.kind == ir::IndexDim::Kind::DynIndex;
    std::string at = dynamic ? "(long long)" + E.name(load.in[start + static_cast<size_t>(x.operand)]) : std::to_string(x.start) + "ll";
    coord[static_cast<size_t>(r.array_dim[k])] += " + " + at;
  }
  std::string map = "&" + E.tensor_map(l.map);
  int64_t per_box = l.map.box[static_cast<size_t>(l.col_dim)], boxes = load.out[0].aval.shape[1] / per_box;
  int64_t box_bytes = box_rows(l) * 128;
  size_t rank = coord.size();
  for (int64_t j = 0; j < boxes; ++j) {
    std::string c;
    for (size_t d = rank; d-- > 0;)  // innermost first
      c += std::string(d + 1 == rank ? "" : ", ") + "(int)(" + coord[d] + (static_cast<int>(d) == l.col_dim && j ? " + " + std::to_string(j * per_box) : "") + ")";
    E.line("  pallas_dev::tma_load<" + std::to_string(rank) + ">(" + dst + " + " + std::to_string(j * box_bytes) + ", " + map + ", " + bar + ", {" + c + "});");
  }
}

// The copies of issue(), inside its guard.
void issue_copies(Emitter& E, const LoopPipeline& p, const ir::Jaxpr& body, const std::string& it, const std::string& stage, const std::string& issuer) {
  E.bind_name(body.invars[0], "(" + it + ")");
  std::unordered_set<const ir::Eqn*> done;  // index eqns two loads share are emitted once
  auto index_eqns = [&](const PipelinedLoad& l) {
    for (const ir::Eqn* x : l.index_eqns)
      if (done.insert(x).second) lowering_rules().get(x->prim->id)(E, *x);
  };
  if (p.tma_bytes) {  // one thread: the stage's transaction count, then its tensor copies
    for (const PipelinedLoad& l : p.loads)
      if (l.tma) index_eqns(l);
    std::string bar = p.bars + " + (" + stage + ")";
    E.line("if (" + issuer + ") {");
    E.line("  pallas_dev::mbar_expect_tx(" + bar + ", " + std::to_string(p.tma_bytes) + ");");
    for (const PipelinedLoad& l : p.loads)
      if (l.tma) issue_tma(E, l, "(" + p.base + " + (" + stage + ") * " + std::to_string(p.stage_bytes) + " + " + std::to_string(l.off) + ")", bar);
    E.line("}");
  }
  for (const PipelinedLoad& l : p.loads) {
    if (l.tma) continue;
    index_eqns(l);
    std::string dst = "(" + p.base + " + (" + stage + ") * " + std::to_string(p.stage_bytes) + " + " + std::to_string(l.off) + ")";
    int64_t cols = l.load->out[0].aval.shape[1];
    const SwizzledTile& L = l.tile;
    if (l.landing == PipelinedLoad::Landing::Transposed) {
      foreach_transposed_chunk(E, l, [&] {
        E.line("#pragma unroll");
        E.line("for (int q = 0; q < 4; ++q) { const int tk = tkc * 4 + ((q + (threadIdx.x >> 3)) & 3), e = tk * " + std::to_string(cols) + " + tn;");
        emit_async_copy_element(E, *l.load, dst + " + " + L.at("tn", "tk"));
        E.line("}");
      });
      continue;
    }
    bool rows_mn = l.rows_are_mn;
    bool issued = emit_async_load(E, *l.load, [&](const std::string& flat) {
      if (l.staged()) return dst + " + (" + flat + ") * 4";  // row-major, as loaded
      std::string r = "((" + flat + ") / " + std::to_string(cols) + ")", c = "((" + flat + ") % " + std::to_string(cols) + ")";
      return dst + " + " + (rows_mn ? L.at(r, c) : L.at(c, r));
    });
    if (!issued) throw Error(E.what + ": CUDA lowering: the loop pipeliner planned a load it cannot copy asynchronously (a bug)");
  }
}

// Emits iteration `it`'s copies into stage `stage` (C expressions), guarded by it < hi.
// `issuer`: the condition that picks the one thread issuing the TMA copies.
void issue(Emitter& E, const LoopPipeline& p, const ir::Jaxpr& body, const std::string& it, const std::string& stage, const std::string& hi,
           const std::string& issuer = "threadIdx.x == 0") {
  {
    Emitter::Block guard = E.block("if (" + it + " < " + hi + ") {");
    issue_copies(E, p, body, it, stage, issuer);
  }
  if (p.any_cp_async) E.line("cp_async_commit();");
}

}  // namespace

int count_dots(const ir::Jaxpr& j) {
  int n = 0;
  ir::for_each_eqn(j, [&](const ir::Eqn& e) { n += e.prim->id == PrimId::dot; });
  return n;
}

// The dot operands that read var `id` in the body, in order; empty when anything else reads it
// (another op, a nested jaxpr, the body's results).
static std::vector<PipelinedLoad::Reader> dot_readers(const ir::Jaxpr& body, int64_t id) {
  std::vector<PipelinedLoad::Reader> r;
  for (const ir::Eqn& e : body.eqns)
    for (size_t k = 0; k < e.in.size(); ++k)
      if (auto* w = std::get_if<ir::Var>(&e.in[k]); w && w->id == id) {
        if (e.prim->id != PrimId::dot || k > 1) return {};
        r.push_back({&e, static_cast<int>(k)});
      }
  return r;
}

// Whether two swizzled tiles, each filled as loaded (straight), put every element of the load
// at the same byte: both lay the load's rows out as 128-byte rows, 64-element column blocks
// one after another (SwizzledTile), so they agree when the element size and the rows per
// column block (MN for a K-major tile, K for an MN-major one) agree.
static bool same_image(const SwizzledTile& a, const SwizzledTile& b) {
  auto rows = [](const SwizzledTile& t) { return t.k_major ? t.mn : t.kp; };
  return a.item == b.item && rows(a) == rows(b) && a.bytes == b.bytes;
}

LoopPipeline plan_pipeline(const KernelPlan& P, const ir::Jaxpr& body, size_t num_carry, const std::vector<const ir::Eqn*>& fragment_dots,
                           const ir::Eqn* read_next_iteration, size_t below) {
  LoopPipeline p;
  if (!P.wgmma || P.stages < 2 || has_effects(body)) return p;
  BodyUses bu(body);
  auto& def = bu.def;
  auto& uses = bu.uses;
  for (const ir::Eqn& dot : body.eqns) {
    if (dot.prim->id != PrimId::dot) continue;
    for (int i = 0; i < 2; ++i) {
      const auto* v = std::get_if<ir::Var>(&dot.in[static_cast<size_t>(i)]);
      if (!v) continue;
      auto d = def.find(v->id);
      if (d == def.end() || d->second->prim->id != PrimId::load || d->second->params.get_bool("has_mask")) continue;
      const ir::Eqn& load = *d->second;
      PipelinedLoad l;
      int64_t kpad = 0;
      auto tile = dot_operand_tile(P, dot, i, &l.rows_are_mn, &kpad);
      // no K padding to zero; copies straight into the tile need the layout's runs along its
      // contiguous dimension, except f32 ones, which may transpose word by word (or be staged)
      if (!tile || kpad != 0) continue;
      bool straight = l.rows_are_mn == tile->k_major, vectorised = async_loadable(P, load);
      if (uses[v->id] != 1) {
        // Several users: all of them dot operands reading one tile image, planned at the first.
        std::vector<PipelinedLoad::Reader> readers = dot_readers(body, v->id);
        if (readers.size() != static_cast<size_t>(uses[v->id]) || readers[0].dot != &dot || readers[0].operand != i) continue;
        if (!straight || !vectorised || itemsize(load.out[0].aval.dtype) != 2) continue;
        bool same = true;
        for (size_t r = 1; r < readers.size() && same; ++r) {
          bool mn = false;
          int64_t pad = 0;
          auto t = dot_operand_tile(P, *readers[r].dot, readers[r].operand, &mn, &pad);
          same = t && pad == 0 && mn == t->k_major && same_image(*t, *tile);
        }
        if (!same) continue;
        l.also.assign(readers.begin() + 1, readers.end());
      }
      using Landing = PipelinedLoad::Landing;
      const Shape& ls = load.out[0].aval.shape;
      if (load.out[0].aval.dtype != DType::F32) {
        // 8-bit with rows K: by TMA into a staging region, then transposed (TmaStaged below)
        if (!straight && tile->k_major && vectorised && itemsize(load.out[0].aval.dtype) == 1 && ls.size() == 2 && ls[0] % 64 == 0 && ls[1] % 64 == 0)
          l.landing = Landing::Transposed;
        else if (!straight || !vectorised)
          continue;
      } else if (straight && vectorised) {
        l.landing = Landing::InPlace;
      } else if (!straight && transposable(load)) {
        l.landing = Landing::Transposed;  // (TmaStaged below where TMA takes it)
      } else if (vectorised) {
        l.landing = Landing::Staged;
      } else {
        continue;
      }
      std::unordered_set<const ir::Eqn*> seen;
      bool ok = true;
      for (size_t k = 1; k < load.in.size() && ok; ++k) ok = index_slice(load.in[k], body, num_carry, def, l.index_eqns, seen);
      if (!ok) continue;
      l.load = &load;
      l.dot = &dot;
      l.operand = i;
      l.tile = *tile;
      l.off = p.stage_bytes;
      size_t staging = static_cast<size_t>(load.out[0].aval.size()) * itemsize(load.out[0].aval.dtype);
      auto align = [](size_t b) { return (b + 1023) & ~size_t{1023}; };
      if (l.landing == Landing::Transposed) {  // by TMA if it takes the load as it is laid out
        l.landing = Landing::TmaStaged;
        if (!plan_tma(P, l)) {
          if (load.out[0].aval.dtype != DType::F32) continue;  // 8-bit: no word-by-word copy
          l.landing = Landing::Transposed;
        }
      }
      if (l.landing == Landing::TmaStaged) {
        l.tma = true;
        l.tile_off = l.off + align(staging);
        p.stage_bytes += align(staging) + align(tile->bytes);
      } else {
        p.stage_bytes += align(l.staged() ? staging : tile->bytes);
        l.tma = (l.landing == Landing::Straight || l.landing == Landing::InPlace) && plan_tma(P, l);
      }
      if (l.tma)
        p.tma_bytes += static_cast<size_t>(load.out[0].aval.size()) * itemsize(load.out[0].aval.dtype);
      else
        p.any_cp_async = true;
      if (l.staged()) {
        l.tile_off = p.tiles_bytes;
        p.tiles_bytes += (tile->bytes + 1023) & ~size_t{1023};
      }
      p.loads.push_back(std::move(l));
    }
  }
  if (p.loads.empty()) return p;
  // the dot may stay in flight across iterations when it is the body's only dot, both its
  // operands come from the pipeline and it accumulates into a fragment carry (nothing else
  // reads its registers until the loop ends)
  // (not with staged operands: their one tile is rewritten every iteration)
  const ir::Eqn* async_dot = nullptr;
  if (count_dots(body) == 1 && p.loads.size() == 2 && p.loads[0].dot == p.loads[1].dot && P.dot(*p.loads[0].dot).kind == DotPlan::Kind::Wgmma &&
      std::count(fragment_dots.begin(), fragment_dots.end(), p.loads[0].dot) &&
      !p.loads[0].staged() && !p.loads[1].staged())
    async_dot = p.loads[0].dot;
  p.barrier_free = std::all_of(p.loads.begin(), p.loads.end(), [](const PipelinedLoad& l) { return l.tma && l.landing == PipelinedLoad::Landing::Straight; });
  // a rotated loop's second dot reads its stage one iteration later (rotation.h)
  const ir::Eqn* rotated = nullptr;
  for (const PipelinedLoad& l : p.loads) {
    bool read = l.dot == read_next_iteration;
    for (const PipelinedLoad::Reader& r : l.also) read = read || r.dot == read_next_iteration;
    if (read_next_iteration && read && !l.staged()) rotated = read_next_iteration;
  }
  auto fits = [&](int buffers) {
    size_t bytes = static_cast<size_t>(buffers) * p.stage_bytes + p.tiles_bytes + 1024;
    return bytes <= P.budgets.loop_stages && below + bytes <= P.smem_limit;
  };
  // A rotated loop takes fewer stages before it gives up its rotation (its extra buffer):
  // the rotation overlaps the second dot with the next iteration's first, worth more to
  // flash attention's loop than a third stage (D128 with 128 keys a block, D256: 64 KB stages).
  // PALLAS_NO_ROTATION gives the other choice, for comparison. (A rotated body has two dots,
  // a dot in flight is the body's only one: never both.) A dot in flight gives up its extra
  // buffer stage by stage instead.
  if (rotated)
    for (int s = P.stages; s >= 2; --s)
      if (fits(s + 1)) {
        p.stages = s, p.buffers = s + 1, p.ahead = s - 1, p.rotated_dot = rotated;
        return p;
      }
  for (int s = P.stages; s >= 2; --s) {
    if (async_dot && fits(s + 1)) {
      p.stages = s, p.buffers = s + 1, p.ahead = s - 1, p.dot_in_flight = async_dot;
      return p;
    }
    if (fits(s)) {
      p.stages = s, p.buffers = s, p.ahead = s - 1;
      return p;
    }
  }
  return LoopPipeline();
}

static std::string landing_text(const PipelinedLoad& l) {
  if (l.landing == PipelinedLoad::Landing::TmaStaged && l.load->out[0].aval.dtype != DType::F32)
    return " into a staging region, moved into its transposed place in 4 x 4-byte blocks";
  switch (l.landing) {
    case PipelinedLoad::Landing::Straight: return "";
    case PipelinedLoad::Landing::InPlace: return ", rounded to tf32 in place";
    case PipelinedLoad::Landing::Transposed: return " word by word into its transposed place, rounded to tf32 in place";
    case PipelinedLoad::Landing::Staged: return " through a staging tile, rounded to tf32 each iteration";
    case PipelinedLoad::Landing::TmaStaged: return " into a staging region, rounded to tf32 into its transposed place";
  }
  return "";
}

static std::string pipeline_what(const LoopPipeline& p) {
  return std::to_string(p.buffers) + " buffers of " + std::to_string(p.stage_bytes) + " bytes, copies " + std::to_string(p.ahead) + " iteration(s) ahead" +
         (p.dot_in_flight ? ", the dot in flight across iterations" : "") + (p.rotated_dot ? ", the second dot's stage kept an iteration longer" : "") +
         (p.barrier_free ? ", no barrier per iteration" : "");
}

void begin_pipeline(Emitter& E, LoopPipeline& p, const ir::Jaxpr& body, const std::string& lo, const std::string& hi) {
  if (p.at != E.xoff) throw Error(E.what + ": CUDA lowering: a loop pipeline printed where the loop-shared-memory pass did not place it");
  p.base = E.fresh("pipe");
  E.line("unsigned char* " + p.base + " = smem + " + std::to_string(p.at) + ";");
  E.line(p.base + " += (1024 - ((u32)__cvta_generic_to_shared(" + p.base + ") & 1023)) & 1023;");
  const PipelineOffsets at = pipeline_offsets(p);
  p.saved_xoff = E.xoff;
  p.saved_fenced = E.operand_tiles_fenced;
  E.xoff = above(p.at, p.bytes);  // the exchange region moves above the buffers for the loop
  E.line("// loop pipeline: " + pipeline_what(p));
  if (p.tma_bytes) {
    p.bars = E.fresh("bars");
    E.line("u64* " + p.bars + " = (u64*)(" + p.base + " + " + std::to_string(at.bars) + ");");
    E.line("if (threadIdx.x == 0) { for (int s = 0; s < " + std::to_string(p.buffers) + "; ++s) pallas_dev::mbar_init(" + p.bars +
           " + s, 1); pallas_dev::mbar_fence_init(); }");
  }
  if (p.barrier_free) {
    p.counts = E.fresh("outs");
    E.line("u32* " + p.counts + " = (u32*)(" + p.base + " + " + std::to_string(at.counts) + ");");
    E.line("if (threadIdx.x < " + std::to_string(p.buffers) + ") " + p.counts + "[threadIdx.x] = 0;");
  }
  E.sync();  // the buffers may hold the exchange region's last use (and the mbarriers are set)
  if (p.dot_in_flight) E.wgmma_in_flight = p.dot_in_flight;
  // the prologue: iterations lo .. lo + ahead - 1 into buffers 0 .. ahead - 1 (a rolled loop:
  // one copy of the issue code, which NVRTC compiles once)
  std::string ps = E.fresh("ps");
  {
    Emitter::Block prologue = E.block("_Pragma(\"unroll 1\") for (int " + ps + " = 0; " + ps + " < " + std::to_string(p.ahead) + "; ++" + ps + ") {");
    issue(E, p, body, lo + " + " + ps, ps, hi);
  }
  for (const PipelinedLoad& l : p.loads) E.absorbed.insert(l.load);
}

std::string pipeline_text(const LoopPipeline& p) {
  std::string t = "loop: " + std::to_string(p.stages) + " stages, " + pipeline_what(p) + "\n";
  for (const PipelinedLoad& l : p.loads) {
    t += std::string(l.tma ? "  pipelined by TMA" : "  pipelined by cp.async") + landing_text(l) + ": operand " + (l.operand == 0 ? "A" : "B") + " (" +
         l.load->out[0].aval.str() + ", " + (l.tile.k_major ? "K-major" : "MN-major") + ") of the dot giving " + l.dot->out[0].aval.str();
    for (const PipelinedLoad::Reader& r : l.also)
      t += ", and operand " + std::string(r.operand == 0 ? "A" : "B") + " of the dot giving " + r.dot->out[0].aval.str();
    t += "\n";
  }
  return t;
}

// The C address `off` bytes into the stage buffer iteration `it` uses.
static std::string stage_at(const LoopPipeline& p, const std::string& it, const std::string& lo, size_t off) {
  return "(" + p.base + " + ((" + it + " - " + lo + ") % " + std::to_string(p.buffers) + ") * " + std::to_string(p.stage_bytes) + " + " +
         std::to_string(off) + ")";
}

std::string pipelined_operand_at(const LoopPipeline& p, const ir::Var& v, const std::string& it, const std::string& lo) {
  for (const PipelinedLoad& l : p.loads)
    if (l.load->out[0].id == v.id) return stage_at(p, it, lo, l.landing == PipelinedLoad::Landing::TmaStaged ? l.tile_off : l.off);
  return "";
}

// Each thread rounds the f32 words it copied for iteration `it` (its own copies are complete
// and visible to it after its wait), before the barrier that publishes the stage.
static void round_own_copies(Emitter& E, const LoopPipeline& p, const std::string& it, const std::string& lo) {
  for (const PipelinedLoad& l : p.loads) {
    if (l.tma || (l.landing != PipelinedLoad::Landing::InPlace && l.landing != PipelinedLoad::Landing::Transposed)) continue;
    std::string tile = stage_at(p, it, lo, l.off);
    if (l.landing == PipelinedLoad::Landing::Transposed) {
      foreach_transposed_chunk(E, l, [&] { E.line("tf32_round_shared<4>(" + tile + " + " + l.tile.at("tn", "tkc * 4") + ");"); });
      continue;
    }
    // the pieces of emit_async_load, in its order
    int W = access_width(E, *l.load);
    std::string C = std::to_string(l.load->out[0].aval.shape[1]);
    E.foreach_run(l.load->out[0].aval.shape, [&] {
      for (int q = 0; q < E.vec / W; ++q) {
        std::string f = "(e + " + std::to_string(q * W) + ")", r = f + " / " + C, c = f + " % " + C;
        E.line("tf32_round_shared<" + std::to_string(W) + ">(" + tile + " + " + (l.rows_are_mn ? l.tile.at(r, c) : l.tile.at(c, r)) + ");");
      }
    });
  }
}

// After the stage's TMA copies have landed, every thread rounds a share of the f32 operands
// they brought: 16-byte chunks spread over the threads (consecutive chunks to consecutive
// lanes, free of bank conflicts). A K-major tile is rounded in place; a staging region is
// rounded into the stage's K-major tile, transposing: the lanes of a warp read one 16-byte
// column chunk of consecutive rows (K) and write four words each into one 128-byte row of
// the tile. Every read comes first, then every write: the compiler cannot move a shared load
// above a shared store it may alias, and one load at a time would wait out the latency each
// time. Returns whether it wrote anything (the writes then need a proxy fence).
static bool round_tma_copies(Emitter& E, const LoopPipeline& p, const std::string& it, const std::string& lo) {
  struct Part {
    const PipelinedLoad* l;
    int64_t chunks, first;  // the load's chunks; its first slot in the registers
    std::string src, dst;
  };
  std::vector<Part> parts;
  int64_t slots = 0, nt = E.nt;
  for (const PipelinedLoad& l : p.loads) {
    if (!l.tma || l.landing == PipelinedLoad::Landing::Straight || l.load->out[0].aval.dtype != DType::F32) continue;
    const Shape& s = l.load->out[0].aval.shape;
    bool in_place = l.landing == PipelinedLoad::Landing::InPlace;
    int64_t chunks = in_place ? static_cast<int64_t>(l.tile.bytes / 16) : s[0] * s[1] / 4;
    parts.push_back({&l, chunks, slots, stage_at(p, it, lo, l.off), stage_at(p, it, lo, in_place ? l.off : l.tile_off)});
    slots += (chunks + nt - 1) / nt;
  }
  if (parts.empty()) return false;
  std::string regs = E.fresh("rt");
  E.line("float4 " + regs + "[" + std::to_string(slots) + "];");
  // Emits, for each part, a loop over its chunks z with r and c (the chunk's first element:
  // row, column of the load) in scope, then body(part, slot).
  auto each_chunk = [&](const std::function<void(const Part&, const std::string&)>& body) {
    for (const Part& q : parts) {
      const Shape& s = q.l->load->out[0].aval.shape;
      E.line("#pragma unroll");
      E.line("for (int j = 0; j < " + std::to_string((q.chunks + nt - 1) / nt) + "; ++j) { const int z = threadIdx.x + j * " + std::to_string(nt) + "; " +
             (q.chunks % nt ? "if (z < " + std::to_string(q.chunks) + ") {" : "{"));
      if (q.l->landing != PipelinedLoad::Landing::InPlace)
        E.line("  const int r = z % " + std::to_string(s[0]) + ", c = (z / " + std::to_string(s[0]) + ") * 4;");
      body(q, regs + "[" + std::to_string(q.first) + " + j]");
      E.line("}}");
    }
  };
  each_chunk([&](const Part& q, const std::string& v) {
    std::string at = q.l->landing == PipelinedLoad::Landing::InPlace ? "z * 16" : staging_tile(*q.l).at("r", "c");
    E.line("  " + v + " = *(const float4*)(" + q.src + " + " + at + ");");
  });
  each_chunk([&](const Part& q, const std::string& v) {
    if (q.l->landing == PipelinedLoad::Landing::InPlace) {
      E.line("  *(float4*)(" + q.dst + " + z * 16) = make_float4(tf32(" + v + ".x), tf32(" + v + ".y), tf32(" + v + ".z), tf32(" + v + ".w));");
      return;
    }
    const char* lane[4] = {"x", "y", "z", "w"};
    for (int i = 0; i < 4; ++i) {
      std::string c = "c + " + std::to_string(i);
      E.line("  *(float*)(" + q.dst + " + " + (q.l->rows_are_mn ? q.l->tile.at("r", c) : q.l->tile.at(c, "r")) + ") = tf32(" + v + "." + lane[i] + ");");
    }
  });
  return true;
}

// After the stage's TMA copies have landed, every thread moves a share of the 8-bit operands
// staged as loaded (rows K, columns N) into the stage's K-major tile: 4 x 4-byte blocks (rows
// r0 .. r0 + 3, columns c0 .. c0 + 3), read as four words (one per row), transposed with byte
// permutes into four words (one per column, its four K), written to the tile. Both sides are
// swizzled with 128-byte rows (16-byte chunk ^ row & 7), so a 4-byte access's bank is 4 x
// (chunk ^ row & 7) + (byte & 15) / 4. The warp's 32 lanes take 32 of the 256 blocks of a 64 x
// 64 region, at step s (0..7) of eight: rows r0 = 4 (l0 + 2 l1 + 4 l3 + 8 l4), columns c0 = 4
// (l2 + 2 (l3 ^ s0) + 4 (l1 ^ s1) + 8 (l4 ^ s2)) (l_i, s_i: the lane's and the step's bits), so
// that the reads' banks (column bits 2-6 against row bits 0-2) and the writes' (row bits 2-6
// against column bits 0-2) both take every lane bit: no bank conflicts. Every read comes
// first, then every write (as round_tma_copies). Returns whether it wrote anything.
static bool transpose_tma_bytes(Emitter& E, const LoopPipeline& p, const std::string& it, const std::string& lo) {
  std::vector<const PipelinedLoad*> parts;
  int64_t slots = 0, nt = E.nt;
  for (const PipelinedLoad& l : p.loads)
    if (l.tma && l.landing == PipelinedLoad::Landing::TmaStaged && l.load->out[0].aval.dtype != DType::F32) {
      parts.push_back(&l);
      const Shape& s = l.load->out[0].aval.shape;
      slots += (s[0] * s[1] / 16 + nt - 1) / nt;
    }
  if (parts.empty()) return false;
  std::string regs = E.fresh("bt");
  E.line("u32 " + regs + "[" + std::to_string(4 * slots) + "];");
  auto each_block = [&](const std::function<void(const PipelinedLoad&, const std::string&)>& body) {
    int64_t first = 0;
    for (const PipelinedLoad* l : parts) {
      const Shape& s = l->load->out[0].aval.shape;
      int64_t blocks = s[0] * s[1] / 16, per = (blocks + nt - 1) / nt;
      E.line("#pragma unroll");
      E.line("for (int j = 0; j < " + std::to_string(per) + "; ++j) { const int u = threadIdx.x + j * " + std::to_string(nt) + "; " +
             (blocks % nt ? "if (u < " + std::to_string(blocks) + ") {" : "{"));
      E.line("  const int l = u & 31, st = (u >> 5) & 7, region = u >> 8;");
      E.line("  const int r0 = (region / " + std::to_string(s[1] / 64) + ") * 64 + 4 * ((l & 1) | (l & 2) | ((l >> 1) & 4) | ((l >> 1) & 8));");
      E.line("  const int c0 = (region % " + std::to_string(s[1] / 64) +
             ") * 64 + 4 * (((l >> 2) & 1) | (((l >> 3) ^ st) & 1) << 1 | (((l >> 1) ^ (st >> 1)) & 1) << 2 | (((l >> 4) ^ (st >> 2)) & 1) << 3);");
      body(*l, regs + "[" + std::to_string(4 * first) + " + 4 * j");
      E.line("}}");
      first += per;
    }
  };
  each_block([&](const PipelinedLoad& l, const std::string& v) {
    std::string src = stage_at(p, it, lo, l.off);
    SwizzledTile staging = staging_tile(l);
    for (int i = 0; i < 4; ++i)
      E.line("  " + v + " + " + std::to_string(i) + "] = *(const u32*)(" + src + " + " + staging.at("r0 + " + std::to_string(i), "c0") + ");");
  });
  each_block([&](const PipelinedLoad& l, const std::string& v) {
    std::string dst = stage_at(p, it, lo, l.tile_off);
    auto w = [&](int i) { return v + " + " + std::to_string(i) + "]"; };
    // t0 = (w0.b0, w1.b0, w0.b1, w1.b1), t1 = (w0.b2, w1.b2, w0.b3, w1.b3), t2, t3 likewise of
    // w2, w3; then column j's word is (w0.bj, w1.bj, w2.bj, w3.bj)
    E.line("  const u32 t0 = __byte_perm(" + w(0) + ", " + w(1) + ", 0x5140), t1 = __byte_perm(" + w(0) + ", " + w(1) + ", 0x7362);");
    E.line("  const u32 t2 = __byte_perm(" + w(2) + ", " + w(3) + ", 0x5140), t3 = __byte_perm(" + w(2) + ", " + w(3) + ", 0x7362);");
    const char* col[4] = {"__byte_perm(t0, t2, 0x5410)", "__byte_perm(t0, t2, 0x7632)", "__byte_perm(t1, t3, 0x5410)", "__byte_perm(t1, t3, 0x7632)"};
    for (int j = 0; j < 4; ++j)
      E.line("  *(u32*)(" + dst + " + " + l.tile.at("c0 + " + std::to_string(j), "r0") + ") = " + col[j] + ";");
  });
  return true;
}

void pipeline_iteration(Emitter& E, const LoopPipeline& p, const ir::Jaxpr& body, const std::string& it, const std::string& lo, const std::string& hi) {
  std::string S = std::to_string(p.buffers), A = std::to_string(p.ahead);
  auto refill = [&] { issue(E, p, body, it + " + " + A, "(" + it + " - " + lo + " + " + A + ") % " + S, hi); };
  // Copy groups are committed one per iteration (empty past the end): `ahead - 1` are younger
  // than this iteration's when it is waited for. The refill comes after the barrier: by then
  // every warp has finished the dots of the iteration that last read the stage refilled (the
  // one before, or two before with the dot in flight), so the dots need no barrier after them.
  std::string buf = "((" + it + " - " + lo + ") % " + S + ")";
  if (p.barrier_free) {
    // This warp is done with the stage the refill overwrites (the iteration before, or two
    // before with the dot in flight, waited for its dots). Counters only grow: every warp
    // passes every iteration's top once, and a warp can be at most `buffers` iterations ahead
    // of the slowest (it waits for copies only the slowest's arrival lets be issued).
    std::string last = E.fresh("last");
    std::string warps = std::to_string(E.nt / 32);
    E.line("bool " + last + " = false;");
    E.line("__syncwarp();");
    E.line("if ((threadIdx.x & 31) == 0) " + last + " = count_arrival(" + p.counts + " + " + buf + ") % " + warps + " == " + warps + " - 1;");
    issue(E, p, body, it + " + " + A, "(" + it + " - " + lo + " + " + A + ") % " + S, hi, last);
    E.line("pallas_dev::mbar_wait(" + p.bars + " + " + buf + ", ((" + it + " - " + lo + ") / " + S + ") & 1);");
  }
  bool rounded = false;
  if (p.tma_bytes && !p.barrier_free) {  // the stage's tensor copies have landed: its mbarrier's phase for this use
    E.line("pallas_dev::mbar_wait(" + p.bars + " + " + buf + ", ((" + it + " - " + lo + ") / " + S + ") & 1);");
    rounded = round_tma_copies(E, p, it, lo);
    if (transpose_tma_bytes(E, p, it, lo)) rounded = true;
  }
  if (p.any_cp_async) {
    E.line("cp_async_wait<" + std::to_string(p.ahead - 1) + ">();");
    round_own_copies(E, p, it, lo);
    rounded = true;
  }
  if (rounded) E.line("fence_proxy_async();");  // generic-proxy writes, then the tensor cores' async proxy reads
  if (!p.barrier_free) {
    E.sync();  // every thread's copies of this stage have landed
    refill();
  }
  E.operand_tiles_fenced = true;
  E.bind_name(body.invars[0], it);
  bool staged = false;
  for (const PipelinedLoad& l : p.loads) {
    std::string stage = stage_at(p, it, lo, l.off);
    if (l.landing == PipelinedLoad::Landing::TmaStaged) {
      E.smem_operands[l.load->out[0].id] = stage_at(p, it, lo, l.tile_off);
      continue;
    }
    if (!l.staged()) {
      E.smem_operands[l.load->out[0].id] = stage;
      continue;
    }
    // staging -> the dot's tile, rounded to tf32 (the previous iteration's dot, which read the
    // tile, finished before the barrier above)
    std::string tile = "(" + p.base + " + " + std::to_string(static_cast<size_t>(p.buffers) * p.stage_bytes + l.tile_off) + ")";
    E.smem_operands[l.load->out[0].id] = tile;
    const Shape& sh = l.load->out[0].aval.shape;
    std::string C = std::to_string(sh[1]);
    E.line("for (int z = threadIdx.x; z < " + std::to_string(shape_size(sh)) + "; z += " + std::to_string(E.nt) + ") {");
    E.line("  const int r = z / " + C + ", c = z % " + C + ";");
    E.line("  *(float*)(" + tile + " + " + (l.rows_are_mn ? l.tile.at("r", "c") : l.tile.at("c", "r")) + ") = tf32(((const float*)" + stage + ")[z]);");
    E.line("}");
    staged = true;
  }
  if (staged) {  // st.shared writes, then the tensor cores' async proxy reads
    E.line("fence_proxy_async();");
    E.sync();
  }
}

void end_pipeline(Emitter& E, const LoopPipeline& p) {
  E.operand_tiles_fenced = p.saved_fenced;
  if (p.dot_in_flight) {
    E.line("asm volatile(\"wgmma.wait_group.sync.aligned 0;\" ::: \"memory\");");
    const ValueLayout L = *E.plan.dot(*p.dot_in_flight).result;
    fence_fragments(E, E.dot_into_fragments.at(p.dot_in_flight), L.slots(), p.dot_in_flight->out[0].aval.dtype != DType::I32);
    E.wgmma_in_flight = nullptr;
  }
  if (p.any_cp_async) E.line("cp_async_wait<0>();");
  E.sync();
  if (p.tma_bytes)  // before the memory is anything else (every copy was waited for in the loop)
    E.line("if (threadIdx.x == 0) for (int s = 0; s < " + std::to_string(p.buffers) + "; ++s) pallas_dev::mbar_inval(" + p.bars + " + s);");
  for (const PipelinedLoad& l : p.loads) {
    E.absorbed.erase(l.load);
    E.smem_operands.erase(l.load->out[0].id);
  }
  E.xoff = p.saved_xoff;
}

ResidentOperands plan_resident_operands(const KernelPlan& P, const ir::Jaxpr& body, size_t num_carry) {
  ResidentOperands r;
  if (!P.wgmma) return r;
  BodyUses bu(body);
  for (const ir::Eqn& dot : body.eqns) {
    if (dot.prim->id != PrimId::dot) continue;
    for (int i = 0; i < 2; ++i) {
      const auto* v = std::get_if<ir::Var>(&dot.in[static_cast<size_t>(i)]);
      if (!v || bu.uses[v->id] != 1) continue;
      const ir::Var* inv = nullptr;  // a body invar past the index and the carries: from outside
      for (size_t q = 1 + num_carry; q < body.invars.size(); ++q)
        if (body.invars[q].id == v->id) inv = &body.invars[q];
      if (!inv || inv->aval.is_ref) continue;
      ResidentOperand o;
      int64_t kpad = 0;
      auto tile = dot_operand_tile(P, dot, i, &o.rows_are_mn, &kpad);
      if (!tile || kpad != 0) continue;  // the dot's own path zeroes K padding; not done here yet
      o.var = inv, o.tile = *tile, o.dtype = inv->aval.dtype;
      r.ops.push_back(o);
    }
  }
  return r;
}

PipelineOffsets pipeline_offsets(const LoopPipeline& p) {
  PipelineOffsets o;
  if (!p.stages) return o;
  o.bars = static_cast<size_t>(p.buffers) * p.stage_bytes + p.tiles_bytes;
  o.counts = o.bars + (p.tma_bytes ? 8 * static_cast<size_t>(p.buffers) : 0);
  o.bytes = o.counts + (p.barrier_free ? 4 * static_cast<size_t>(p.buffers) : 0) + 1024;  // + 1024: the run-time alignment
  return o;
}

size_t pipeline_bytes(const LoopPipeline& p) { return pipeline_offsets(p).bytes; }

size_t resident_bytes(const ResidentOperands& r) {
  if (r.ops.empty()) return 0;
  size_t end = 0;
  for (const ResidentOperand& o : r.ops) end = (end + o.tile.bytes + 1023) & ~size_t{1023};
  return end + 1024;  // as begin_resident_operands aligns them
}

void begin_resident_operands(Emitter& E, ResidentOperands& r) {
  if (r.ops.empty()) return;
  if (r.at != E.xoff) throw Error(E.what + ": CUDA lowering: resident operands printed where the loop-shared-memory pass did not place them");
  r.saved_xoff = E.xoff;
  std::string base = E.fresh("res");
  E.line("// operands the loop does not change, in their swizzled tiles for the whole loop");
  E.line("unsigned char* " + base + " = smem + " + std::to_string(r.at) + ";");
  E.line(base + " += (1024 - ((u32)__cvta_generic_to_shared(" + base + ") & 1023)) & 1023;");
  E.sync();  // the tiles may hold the exchange region's last use
  size_t end = 0;
  for (const ResidentOperand& o : r.ops) {
    std::string at = "(" + base + " + " + std::to_string(end) + ")";
    put_swizzled(E, *o.var, at, o.tile, o.rows_are_mn, o.dtype);
    E.smem_operands[o.var->id] = at;
    end = (end + o.tile.bytes + 1023) & ~size_t{1023};
  }
  E.line("fence_proxy_async();");
  E.sync();
  E.xoff = above(r.at, r.bytes);
}

void end_resident_operands(Emitter& E, const ResidentOperands& r) {
  if (r.ops.empty()) return;
  for (const ResidentOperand& o : r.ops) E.smem_operands.erase(o.var->id);
  E.sync();  // the loop's last dots read the tiles; the exchange region comes back down over them
  E.xoff = r.saved_xoff;
}

}  // namespace pallas::cuda
