// The interpreter as a BackendRunner: host copies of the arguments in, the outputs back on
// the arguments' device, every error naming the kernel, pl::check failures (debug = true)
// raised with the program id, or collected for checkify.
#include "src/backends/interpret/interpreter.h"
#include "src/core/backend_registry.h"

namespace pallas::interp {

namespace {

struct InterpretRunner final : core::BackendRunner {
  bool available() const override { return true; }
  std::string why_unavailable() const override { return ""; }

  static RunResult run_on_host(const core::PallasCall& call, const std::vector<Array>& args, bool collect, Device* dev, bool* moved) {
    std::vector<Array> host;
    for (auto& a : args) {
      if (!a.device().is_host()) *moved = true, *dev = a.device();
      host.push_back(a.device().is_host() ? a : a.to_host());
    }
    try {
      return run_call(call, host, collect);
    } catch (const Error& e) {  // every error names the kernel
      std::string m = e.what();
      if (m.rfind(call.what, 0) == 0) throw;
      throw Error(call.what + ": " + m);
    }
  }

  // Into given outputs: the interpreter computes in its own host buffers and copies (it is
  // the debugging backend; the GPU writes them in place).
  std::vector<Array> run(const core::PallasCall& call, const std::vector<Array>& args, const std::vector<Array>* outs) const override {
    std::vector<Array> r = run(call, args);
    if (!outs) return r;
    for (size_t k = 0; k < r.size(); ++k) (*outs)[k].copy_from(r[k]);
    return *outs;
  }

  std::vector<Array> run(const core::PallasCall& call, const std::vector<Array>& args) const {
    Device dev = Device::host();
    bool moved = false;
    RunResult r = run_on_host(call, args, /*collect=*/call.debug, &dev, &moved);
    // pl::check outside checkify: on with debug = true, on both backends alike.
    if (r.failed)
      throw Error(call.what + ": a check failed in program " + core::program_id_text(r.failed_program_id) + ": " + r.message);
    if (moved)
      for (auto& o : r.outputs) o = o.to(dev);
    return r.outputs;
  }

  core::CheckedRun run_checked(const core::PallasCall& call, const std::vector<Array>& args) const override {
    Device dev = Device::host();
    bool moved = false;
    RunResult r = run_on_host(call, args, /*collect=*/true, &dev, &moved);
    return {std::move(r.outputs), r.failed, r.message, r.failed_program_id};
  }
};

}  // namespace

}  // namespace pallas::interp

namespace pallas::core {
const BackendRunner* interpret_runner() {
  static interp::InterpretRunner r;
  return &r;
}
}  // namespace pallas::core
