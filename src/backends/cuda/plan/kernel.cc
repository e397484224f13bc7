// The first pass: what the whole kernel is — its symbol, its threads and stages, the target's
// features the later passes may use.
#include <cstdlib>
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "src/backends/cuda/plan/passes.h"

namespace pallas::cuda {

using ir::PrimId;

namespace {

std::string sanitize(const std::string& s) {
  std::string r;
  for (char c : s) r += (std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  return r.substr(0, 40);
}

// The elements of the kernel's largest value, and whether it does a dot (anywhere).
void scan_values(const ir::Jaxpr& j, int64_t& largest, bool& dot) {
  for (const ir::Eqn& e : j.eqns) {
    dot = dot || e.prim->id == PrimId::dot;
    for (const ir::Var& v : e.out) largest = std::max(largest, v.aval.size());
    for (const ir::Jaxpr* s : ir::sub_jaxprs(e)) scan_values(*s, largest, dot);
  }
}

// num_warps when the call does not give it. A kernel with a dot takes 4 (Triton's and Pallas'
// default; its tiles and the dot plans are chosen for the warps it is given). A kernel without
// one is elementwise and reductions over blocks: its threads split its largest value, and at
// more than 32 elements a thread per value the values of a row block outgrow the registers
// (a norm backward over [4, 4096] blocks on 4 warps spilled 7 KB a thread and ran at 0.03x the
// copy bandwidth), so it takes as many warps, up to 16, as keep each thread at 32 or fewer —
// what Triton users pick by hand from the block size.
int default_warps(const core::PallasCall& call) {
  int64_t largest = 0;
  bool dot = false;
  scan_values(*call.kernel, largest, dot);
  int warps = 4;
  while (!dot && warps < 16 && largest > int64_t{32} * 32 * warps) warps *= 2;
  return warps;
}

}  // namespace

void plan_target(const core::PallasCall& call, KernelPlan& P) {
  const CompilerParams& cp = call.compiler_params;
  int warps = cp.num_warps > 0 ? cp.num_warps : default_warps(call);
  P.threads = warps * 32;
  P.stages = cp.num_stages > 0 ? cp.num_stages : 3;
  if (P.max_stages > 0) P.stages = std::min(P.stages, P.max_stages);
  P.wgmma = P.target.arch == "sm_90a";
  P.tma = P.wgmma && P.target.tensor_maps && P.target.aligned && !P.target.no_tma;
  P.fp8_mma = P.target.arch.rfind("sm_", 0) == 0 && std::atoi(P.target.arch.c_str() + 3) >= 89;
  P.checks = call.debug;
  // sm_90: 227 KiB; sm_80: 163 KiB; any other (sm_86, sm_89, "any sm_80+"): 99 KiB.
  const std::string& a = P.target.arch;
  P.smem_limit = a.rfind("sm_90", 0) == 0 ? 232448 : a == "sm_80" ? 166912 : 101376;
  // What each planner may take before the body's exchanges (sized only as the body prints):
  // 48 KiB for resident outputs, 160 KiB for grid stages, 200 KiB for loop stages — each
  // leaving the rest of sm_90's 227 KiB to the exchanges; lower() plans again with fewer stages
  // when they then do not fit. (Grid stages up to the whole 227 KiB gave the layer norm
  // backward three 64 KiB stages where it had none, and it ran 19% slower on an H100,
  // 0.365 -> 0.434 ms: docs/benchmarks.md, twentieth session.) The grid and loop pipelines
  // need TMA or wgmma: only sm_90a uses them.
  P.budgets = {48 * 1024, 160 * 1024, 200 * 1024};
  // The symbol names the call and everything else that changes its code but the arch (one
  // kernel traced for two stage counts or switches gets two names, so dumps and profiles never
  // mix them up). Not the arch: an AOT library's images of one kernel for several archs are
  // looked up by one name.
  uint64_t h = call.hash();
  Target keyed = P.target;
  keyed.arch.clear();
  const std::string params =
      "warps " + std::to_string(cp.num_warps) + " stages " + std::to_string(cp.num_stages) + (call.debug ? " debug " : " ") + keyed.text();
  for (unsigned char c : params) h = (h ^ c) * 1099511628211ull;
  char hb[32];
  std::snprintf(hb, sizeof hb, "%016llx", static_cast<unsigned long long>(h));
  P.name = "pallas_" + sanitize(call.name.empty() ? std::string("kernel") : call.name) + "_" + hb;
  std::ostringstream t;
  t << P.name << ": " << P.threads << " threads (" << warps << " warps), " << P.stages << " stages, target " << P.target.text()
    << (P.wgmma ? ", wgmma" : "") << (P.tma ? ", tma" : "") << (P.checks ? ", checks" : "") << ", " << P.smem_limit
    << " bytes of shared memory" << (P.grid_pipeline_allowed ? "" : ", no grid pipeline") << "\n";
  P.sections.push_back({"kernel", t.str()});
}

}  // namespace pallas::cuda
