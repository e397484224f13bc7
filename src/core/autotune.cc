// pl::autotune (include/pallas/autotune.h): trace and compile every candidate (in parallel),
// time them on the real arguments, keep the fastest in memory and on disk.
#include "pallas/autotune.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "src/core/backend_registry.h"
#include "src/core/cache_dir.h"
#include "src/core/pallas_call.h"
#include "src/ir/ir.h"

namespace pallas {

int64_t Config::get(const std::string& name) const {
  auto it = params.find(name);
  if (it == params.end()) throw Error("autotune: the configuration {" + str() + "} has no parameter '" + name + "'");
  return it->second;
}

std::string Config::str() const {
  std::string s;
  for (auto& [k, v] : params) s += (s.empty() ? "" : " ") + k + "=" + std::to_string(v);
  return s;
}

struct Autotuned::State {
  KernelFactory factory;
  std::vector<Config> space;
  AutotuneOptions opts;
  std::mutex mu;
  struct Entry {
    Call call;
    TuningReport report;
  };
  std::map<std::string, Entry> chosen;  // by key text (device, shapes, candidates)
  // The entry for arguments of these shapes, found without running the factory again (every
  // call of the tuned kernel looks here first).
  std::map<std::string, const Entry*> by_args;
  std::string what() const { return "autotune" + (opts.name.empty() ? std::string() : " '" + opts.name + "'"); }
};

namespace {

// The file of a tuning's choice in the cache directory's autotune/ ("" without a usable one:
// core::private_cache_dir refuses a directory others can write, since the file picks the code
// that runs).
std::string cache_path(const std::string& name, uint64_t key) {
  std::string dir = core::private_cache_dir("autotune");
  if (dir.empty()) return "";
  char hex[32];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(key));
  std::string n;
  for (char c : name.substr(0, 40)) n += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return dir + "/" + (n.empty() ? "kernel" : n) + "_" + hex + ".txt";
}

// The file: the chosen configuration's line, then the whole key text it was chosen for (the
// file's name holds only its hash), so a choice is recalled only for exactly that key and a
// damaged or cut file is ignored (and replaced by the next tuning).
std::string cache_entry(const std::string& config, const std::string& key_text) { return config + "\n" + key_text + "\n"; }

// The dynamic grid bounds a call takes before its inputs (i32 scalars).
size_t num_dynamic(const Call& c) {
  size_t nd = 0;
  for (int64_t g : c.state()->opts.grid) nd += g < 0;
  return nd;
}

}  // namespace

// Tunes or recalls the entry for these arguments (st.mu held).
static const Autotuned::State::Entry& tune_candidates(Autotuned::State& st, const std::vector<Array>& args);

static const Autotuned::State::Entry& tune_locked(Autotuned::State& st, const std::vector<Array>& args) {
  std::string shapes;
  for (const Array& a : args) shapes += a.shape_dtype().str() + ";";
  if (auto it = st.by_args.find(shapes); it != st.by_args.end()) return *it->second;
  const Autotuned::State::Entry& e = tune_candidates(st, args);
  st.by_args[shapes] = &e;
  return e;
}

// Traces the candidates, then recalls (memory, disk) or times them.
static const Autotuned::State::Entry& tune_candidates(Autotuned::State& st, const std::vector<Array>& args) {
  // The candidates, traced for these arguments.
  struct Candidate {
    Config cfg;
    Call call;
    std::string error;
  };
  std::vector<Candidate> cands;
  for (const Config& cfg : st.space) {
    Candidate c{cfg, {}, ""};
    try {
      std::vector<ShapeDtype> all;
      for (const Array& a : args) all.push_back(a.shape_dtype());
      c.call = st.factory(cfg, all);
      // trace for the inputs proper (after the dynamic grid bounds the call's grid asks for)
      size_t nd = std::min(num_dynamic(c.call), all.size());
      c.call.trace(std::vector<ShapeDtype>(all.begin() + static_cast<std::ptrdiff_t>(nd), all.end()));
    } catch (const Error& e) {
      c.error = e.what();
    }
    cands.push_back(std::move(c));
  }
  // The key: the device, the arguments, and what each candidate is.
  std::string device = "interpreter";
  for (const Candidate& c : cands)
    if (c.error.empty()) {
      if (c.call.backend_name() == "cuda") device = "cuda " + core::cuda_runner()->device_name();
      break;
    }
  std::string text = st.what() + "|" + device;
  for (const Array& a : args) text += "|" + a.shape_dtype().str();
  for (const Candidate& c : cands) {
    text += "|" + c.cfg.str() + ":";
    if (!c.error.empty()) {
      text += "error";
      continue;
    }
    // The traced call's hash leaves out what it is compiled with: a factory may change those alone.
    const core::PallasCall& pc = c.call.state()->get_traced();
    text += std::to_string(pc.hash()) + " warps " + std::to_string(pc.compiler_params.num_warps) + " stages " +
            std::to_string(pc.compiler_params.num_stages) + (pc.debug ? " debug" : "");
  }
  uint64_t key = ir::hash_text(text);  // names the file on disk; memory compares the whole text
  const std::string& skey = text;
  if (auto it = st.chosen.find(skey); it != st.chosen.end()) return it->second;

  TuningReport rep;
  auto keep = [&](const Candidate& c) -> const Autotuned::State::Entry& {
    rep.best = c.cfg;
    return st.chosen[skey] = {c.call, rep};
  };
  std::string path = st.opts.disk_cache ? cache_path(st.opts.name, key) : "";
  if (std::string file; !path.empty() && core::read_whole_file(path, &file))
    for (const Candidate& c : cands)
      if (c.error.empty() && file == cache_entry(c.cfg.str(), text)) {
        rep.from_cache = true;
        return keep(c);
      }
  // Compile every candidate in parallel (the GPU's NVRTC; nothing for the interpreter).
  if (device != "interpreter") {
    unsigned n = st.opts.compile_threads > 0 ? static_cast<unsigned>(st.opts.compile_threads) : std::max(1u, std::thread::hardware_concurrency());
    std::atomic<size_t> next{0};
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < std::min<size_t>(n, cands.size()); ++t)
      pool.emplace_back([&] {
        for (size_t i; (i = next.fetch_add(1)) < cands.size();) {
          Candidate& c = cands[i];
          if (!c.error.empty()) continue;
          try {
            core::cuda_runner()->precompile(c.call.state()->get_traced());
          } catch (const Error& e) {
            c.error = e.what();
          }
        }
      });
    for (auto& t : pool) t.join();
  }
  // Time each on the real arguments.
  const Candidate* best = nullptr;
  double best_ms = 0;
  for (Candidate& c : cands) {
    if (c.error.empty()) {
      try {
        c.call(args);  // the first run: load, and any run-time error
        double ms = do_bench([&] { c.call(args); }, st.opts.bench).median_ms;
        rep.timings_ms.emplace_back(c.cfg, ms);
        if (!best || ms < best_ms) best = &c, best_ms = ms;
        continue;
      } catch (const Error& e) {
        c.error = e.what();
      }
    }
    rep.rejected.emplace_back(c.cfg, c.error);
  }
  if (!best) {
    std::string inputs, why;
    for (const Array& a : args) inputs += " " + a.shape_dtype().str();
    for (auto& [cfg, e] : rep.rejected) why += "\n  {" + cfg.str() + "}: " + e;
    throw Error(st.what() + ": every configuration failed for inputs" + (inputs.empty() ? " ()" : inputs) + ":" + why);
  }
  // Temp file + rename (safe against concurrent tuners); a failed write is only not remembered.
  if (!path.empty()) core::write_file_atomically(path, cache_entry(best->cfg.str(), text));
  return keep(*best);
}

TuningReport Autotuned::tune(const std::vector<Array>& args) const {
  if (!state_) throw Error("autotune: an empty Autotuned");
  std::lock_guard<std::mutex> lock(state_->mu);
  return tune_locked(*state_, args).report;
}

Call Autotuned::best_call(const std::vector<Array>& args) const {
  if (!state_) throw Error("autotune: an empty Autotuned");
  std::lock_guard<std::mutex> lock(state_->mu);
  return tune_locked(*state_, args).call;
}

std::vector<Array> Autotuned::operator()(const std::vector<Array>& args) const { return best_call(args)(args); }

Autotuned autotune(KernelFactory factory, std::vector<Config> space, AutotuneOptions options) {
  if (!factory) throw Error("autotune: no kernel factory");
  if (space.empty()) throw Error("autotune" + (options.name.empty() ? std::string() : " '" + options.name + "'") + ": the configuration space is empty");
  auto s = std::make_shared<Autotuned::State>();
  s->factory = std::move(factory);
  s->space = std::move(space);
  s->opts = std::move(options);
  return Autotuned(std::move(s));
}

}  // namespace pallas
