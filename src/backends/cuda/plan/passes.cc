// The pass list and its driver (passes.h).
#include "src/backends/cuda/plan/passes.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "src/core/cache_dir.h"

namespace pallas::cuda {

const std::vector<PlanPass>& plan_passes() {
  static const std::vector<PlanPass> passes = {
      {"kernel", plan_target},                      // symbol, threads, stages, the target's features
      {"blocked-layout", plan_blocked_layout},      // the run length V, vector accesses
      {"dot-kinds", plan_dot_kinds},                // wgmma, mma.sync or SIMT per dot, its tiles
      {"value-layouts", plan_value_layouts},        // values kept in fragments or rows
      {"scratch", plan_scratch},                    // scratch operands in shared memory
      {"resident-outputs", plan_resident_outputs},  // revisited outputs kept in shared memory
      {"grid-pipeline", plan_grid_pipeline_pass},   // input blocks copied ahead by TMA
      {"shared-memory", plan_shared_memory},        // the top-level regions; where the body's start
      {"refs", plan_refs},                          // which refs are input blocks in global memory
      {"loop-plans", plan_loops},                   // fragment carries, resident operands, rotation, pipelines
      {"dot-operands", plan_dot_operands},          // where each wgmma dot reads its operands
      {"loop-shared-memory", plan_loop_shared_memory},  // each loop's resident tiles and stage buffers, nested
  };
  return passes;
}

std::string dump_passes_dir() {
  const char* d = std::getenv("PALLAS_DUMP_PASSES");
  return d && *d ? d : "";
}

void write_pass_dump(const std::string& dir, const std::string& kernel, int number, const std::string& what, const std::string& suffix,
                     const std::string& text) {
  char nn[8];
  std::snprintf(nn, sizeof nn, "%02d", number);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::string path = dir + "/" + kernel + "." + nn + "-" + what + suffix, why;
  if (!core::write_file_atomically(path, text, &why)) core::note_once("dump " + dir, "pallas: could not write " + path + ": " + why);
}

KernelPlan plan_kernel(const core::PallasCall& call, const Target& target, bool grid_pipeline, int up_to, int max_stages) {
  KernelPlan P;
  P.target = target;
  P.grid_pipeline_allowed = grid_pipeline;
  P.max_stages = max_stages;
  const std::vector<PlanPass>& passes = plan_passes();
  const std::string dir = dump_passes_dir();
  int n = up_to < 0 ? static_cast<int>(passes.size()) : std::min(up_to, static_cast<int>(passes.size()));
  for (int i = 0; i < n; ++i) {
    passes[static_cast<size_t>(i)].run(call, P);
    if (!dir.empty()) write_pass_dump(dir, P.name, i + 1, passes[static_cast<size_t>(i)].name, ".txt", P.text());
  }
  return P;
}

std::string KernelPlan::text() const {
  std::string t;
  for (const auto& [pass, section] : sections) {
    t += "== " + pass + "\n" + section;
    if (!section.empty() && section.back() != '\n') t += "\n";
  }
  return t;
}

size_t SharedPlan::allocate(const std::string& what, size_t bytes) {
  size_t at = top();
  regions.push_back({what, at, bytes});
  return at;
}

size_t SharedPlan::top() const { return regions.empty() ? 0 : (regions.back().offset + regions.back().bytes + 15) & ~size_t{15}; }

}  // namespace pallas::cuda
