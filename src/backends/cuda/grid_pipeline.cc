// Block pipelining over a CUDA block's programs (grid_pipeline.h).
#include "src/backends/cuda/grid_pipeline.h"
#include "src/backends/cuda/plan/passes.h"

#include <algorithm>

namespace pallas::cuda {
using ir::PrimId;

namespace {

constexpr int64_t kMaxBox = 256;                 // TMA: elements per box dimension
constexpr size_t kPersistentBlock = 32 * 1024;   // an input block this large makes the kernel persistent

// Only top-level loads read the ref (no write, no loop, branch or other op takes it).
bool only_loaded(const ir::Jaxpr& k, int64_t ref) {
  for (const ir::Eqn& e : k.eqns)
    for (size_t i = 0; i < e.in.size(); ++i)
      if (auto* v = std::get_if<ir::Var>(&e.in[i]); v && v->id == ref && (e.prim->id != PrimId::load || i != 0)) return false;
  return true;
}

bool has_dot(const ir::Jaxpr& j) {
  for (const ir::Eqn& e : j.eqns) {
    if (e.prim->id == PrimId::dot) return true;
    for (const ir::Jaxpr* s : ir::sub_jaxprs(e))
      if (has_dot(*s)) return true;
  }
  return false;
}

// A loop whose body does a dot: the loop pipeliner (pipeline.h) streams its operands.
bool loop_with_dot(const ir::Jaxpr& j) {
  for (const ir::Eqn& e : j.eqns) {
    bool loop = e.prim->id == PrimId::fori_loop || e.prim->id == PrimId::while_loop;
    for (const ir::Jaxpr* s : ir::sub_jaxprs(e))
      if (loop ? has_dot(*s) : loop_with_dot(*s)) return true;
  }
  return false;
}

// The array as a view in which the block is one TMA box; false when there is none.
bool plan_view(const core::BlockMapping& bm, GridPipelinedInput& in) {
  const Shape& A = bm.array.shape;
  size_t item = itemsize(bm.array.dtype);
  if (A.empty() || (item != 1 && item != 2 && item != 4)) return false;
  TensorMapSpec& m = in.map;
  m.dtype = bm.array.dtype;
  m.swizzle = false;
  in.split.assign(A.size(), 0);
  for (size_t d = 0; d < A.size(); ++d) {
    int64_t b = bm.squeezed[d] ? 1 : bm.block_shape[d];
    if (b <= kMaxBox) {
      m.array_shape.push_back(A[d]);
      m.box.push_back(b);
      continue;
    }
    int64_t f = kMaxBox;
    while (f > 1 && (b % f || A[d] % f)) --f;
    if (f < 16 || b / f > kMaxBox) return false;
    in.split[d] = f;
    m.array_shape.insert(m.array_shape.end(), {A[d] / f, f});
    m.box.insert(m.box.end(), {b / f, f});
  }
  if (m.array_shape.size() > 5 || bm.squeezed.back()) return false;
  // rows of whole 16 bytes: the box's and the array's (TMA's global strides)
  if (m.box.back() * static_cast<int64_t>(item) % 16 || m.array_shape.back() * static_cast<int64_t>(item) % 16) return false;
  in.bytes = item;
  for (int64_t b : m.box) in.bytes *= static_cast<size_t>(b);
  return true;
}

}  // namespace

// budget: shared memory the stages may take, with what is below them (KernelPlan::budgets);
// stages: at most this many (the kernel's stages, capped by lower()'s retry), at least 2.
std::optional<GridPipeline> plan_grid_pipeline(const core::PallasCall& call, bool tma, size_t smem_base, size_t budget, int stages) {
  const core::GridMapping& gm = call.grid;
  if (!tma || gm.inputs.empty()) return std::nullopt;
  const ir::Jaxpr& k = *call.kernel;
  // A kernel that streams its own loop through the loop pipeliner (flash attention's K/V
  // blocks, a matmul's K loop) hides its latency there; its top-level blocks (attention's Q)
  // are read once per program, and stages of them would only take the shared memory that
  // keeps two such CUDA blocks on an SM (measured: attention D128's 3 stages of Q pushed it
  // past the device's 227 KiB).
  if (loop_with_dot(k)) return std::nullopt;
  size_t np = gm.prefetch.size();
  GridPipeline gp;
  gp.persistent = !gm.any_sequential();
  bool large = false;
  // The axes whose steps a CUDA block walks: the sequential ones, or every axis when persistent.
  std::vector<bool> walked(gm.grid.size());
  for (size_t a = 0; a < walked.size(); ++a) walked[a] = gp.persistent || gm.sequential(a);
  for (size_t a = 0; a < gm.inputs.size(); ++a) {
    const core::BlockMapping& bm = gm.inputs[a];
    if (call.aliases.count(static_cast<int>(np + a)) || !only_loaded(k, k.invars[np + a].id)) continue;
    // A block that is the same at every step a CUDA block walks (a norm's weight row) would be
    // copied again into every stage; read from global memory it stays in L1/L2, and its stage
    // space goes to the blocks that move (rms norm's backward missed the budget by 400 bytes
    // with its weight staged and ran at 0.1x the copy bandwidth).
    if (!bm.index_map_reads(walked, /*prefetch=*/true)) continue;
    GridPipelinedInput in;
    in.input = a;
    in.map.param = static_cast<int>(np + a);
    if (!plan_view(bm, in)) continue;
    large = large || in.bytes >= kPersistentBlock;
    gp.inputs.push_back(in);
  }
  // Programs of parallel axes only are pipelined when a block is large (the kernel then holds
  // few programs an SM) and the kernel keeps no scratch between programs.
  if (gp.inputs.empty() || (gp.persistent && (!large || !gm.scratch.empty()))) return std::nullopt;
  for (GridPipelinedInput& in : gp.inputs) {
    in.offset = gp.stage_bytes;
    gp.stage_bytes += (in.bytes + 127) & ~size_t{127};
  }
  gp.base = (smem_base + 127) & ~size_t{127};
  for (gp.stages = stages; gp.stages >= 2 && gp.base + gp.stages * gp.stage_bytes + 8 * gp.stages > budget; --gp.stages) {
  }
  if (gp.stages < 2) return std::nullopt;
  gp.bars = gp.base + gp.stages * gp.stage_bytes;
  gp.end = gp.bars + 8 * static_cast<size_t>(gp.stages);
  gp.text = std::string("grid pipeline: ") + (gp.persistent ? "persistent (each CUDA block runs programs blockIdx.x + i * gridDim.x)" : "over the sequential axes") +
            ", " + std::to_string(gp.stages) + " stages of " + std::to_string(gp.stage_bytes) + " bytes, copies " + std::to_string(gp.stages - 1) +
            " program(s) ahead\n";
  for (const GridPipelinedInput& in : gp.inputs) {
    std::string view, box;
    for (size_t i = 0; i < in.map.box.size(); ++i) {
      view += (i ? ", " : "") + std::to_string(in.map.array_shape[i]);
      box += (i ? ", " : "") + std::to_string(in.map.box[i]);
    }
    gp.text += "  " + gm.inputs[in.input].what + " " + gm.inputs[in.input].array.str() + ": one TMA box [" + box + "] of the view [" + view + "], " +
               std::to_string(in.bytes) + " bytes\n";
  }
  return gp;
}

void issue_grid_copies(Emitter& E, const GridPipeline& gp, const core::PallasCall& call, const std::vector<std::string>& pids, const std::string& buf) {
  const core::GridMapping& gm = call.grid;
  const ir::Jaxpr& k = *call.kernel;
  size_t np = gm.prefetch.size();
  Emitter::Block scope = E.block("{");
  std::vector<std::vector<std::string>> coords;  // per pipelined input: the view's coordinates, innermost first
  for (const GridPipelinedInput& in : gp.inputs) {
    const core::BlockMapping& bm = gm.inputs[in.input];
    const ir::Jaxpr& im = *bm.index_map;
    std::vector<std::string> c;
    for (size_t d = 0; d < bm.array.shape.size(); ++d) c.push_back(E.fresh("gc"));
    std::string decl;
    for (const std::string& n : c) decl += (decl.empty() ? "int " : ", ") + n;
    E.line(decl + ";");
    {
      Emitter::Block index_map = E.block("{");
      for (size_t g = 0; g < gm.grid.size() && g < im.invars.size(); ++g) E.bind_name(im.invars[g], pids[g]);
      for (size_t q = 0; q < np && gm.grid.size() + q < im.invars.size(); ++q) E.refs[im.invars[gm.grid.size() + q].id] = E.refs[k.invars[q].id];
      E.emit_eqns(im);
      for (size_t d = 0; d < c.size(); ++d) E.line(c[d] + " = (int)(" + E.name(im.outvars[d]) + ") * " + std::to_string(bm.block_shape[d]) + ";");
    }
    std::vector<std::string> view;  // outermost first
    for (size_t d = 0; d < c.size(); ++d) {
      if (in.split[d]) {
        view.push_back(c[d] + " / " + std::to_string(in.split[d]));
        view.push_back("0");
      } else {
        view.push_back(c[d]);
      }
    }
    std::reverse(view.begin(), view.end());
    coords.push_back(view);
  }
  std::string bars = "((u64*)(smem + " + std::to_string(gp.bars) + "))";
  Emitter::Block issuer = E.block("if (threadIdx.x == 0) {");
  size_t total = 0;
  for (const GridPipelinedInput& in : gp.inputs) total += in.bytes;
  E.line("pallas_dev::mbar_expect_tx(" + bars + " + " + buf + ", " + std::to_string(total) + ");");
  for (size_t i = 0; i < gp.inputs.size(); ++i) {
    const GridPipelinedInput& in = gp.inputs[i];
    std::string list;
    for (const std::string& c : coords[i]) list += (list.empty() ? "" : ", ") + c;
    E.line("pallas_dev::tma_load<" + std::to_string(coords[i].size()) + ">(smem + " + std::to_string(gp.base + in.offset) + " + (" + buf + ") * " +
           std::to_string(gp.stage_bytes) + ", &" + E.tensor_map(in.map) + ", " + bars + " + " + buf + ", {" + list + "});");
  }
}

}  // namespace pallas::cuda

namespace pallas::cuda {

// The grid-pipeline pass: its stages go above scratch and resident outputs.
void plan_grid_pipeline_pass(const core::PallasCall& call, KernelPlan& P) {
  std::optional<GridPipeline>& gp = P.grid.pipeline;
  gp = plan_grid_pipeline(call, P.tma && P.grid_pipeline_allowed, P.smem.top(), P.budgets.grid_stages, std::max(2, P.stages));
  if (gp) P.smem.regions.push_back({"grid pipeline: " + std::to_string(gp->stages) + " stages and their mbarriers", gp->base, gp->end - gp->base});
  const Target& t = P.target;
  std::string no_tma = !P.wgmma ? "no TMA on " + (t.arch.empty() ? std::string("this target") : t.arch)
                       : !t.tensor_maps ? "no tensor maps: an AOT kernel"
                       : !t.aligned     ? "an array is not 16-byte aligned"
                                        : "PALLAS_NO_TMA";
  P.sections.push_back({"grid-pipeline", gp                         ? gp->text
                                         : !P.tma                   ? "none (" + no_tma + ")\n"
                                         : !P.grid_pipeline_allowed ? "none (the kernel did not fit with its stages)\n"
                                                                    : "none\n"});
}

}  // namespace pallas::cuda
