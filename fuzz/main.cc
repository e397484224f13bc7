// pallas_fuzz: the differential fuzzer. Generates random well-typed kernels, runs each on
// backend A (the interpreter) and on backend B (the GPU, or, without one, an sm_90a compile
// of its lowering) and compares. A failure is shrunk and printed as a GoogleTest to paste
// into tests/fuzz_regressions_test.cc. docs/fuzzing.md describes it.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "fuzz/fuzz_check.h"
#include "fuzz/kernel.h"

namespace {

using namespace fuzz;
using Clock = std::chrono::steady_clock;

struct Options {
  uint64_t seed = 1;
  int64_t count = 100;
  int64_t start = 0;
  int64_t only = -1;
  std::string backend_a = "interpret";
  std::string backend_b;  // cuda | compile | none; default: cuda with a GPU, else compile
  std::string arch = "sm_90a";
  int threads = 0;
  double max_seconds = 0;
  double shrink_seconds = 120;
  double kernel_timeout = 300;
  double slow_seconds = 20;  // a kernel whose check takes longer is listed (compile time)
  bool print_passing = false;
  bool shrink = true;
  bool verbose = false;
  bool disk_cache = false;
  bool print_ir = false;
  bool vjp = false;    // also check pl::vjp against pl::jvp (the transpose identity) on the interpreter
  std::string inject;  // test of the shrinker: kernels whose IR contains this "fail"
  std::string emit_tests;
  GenOptions gen;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "%s\nusage: pallas_fuzz [--seed S] [--count N] [--start I] [--index I] [--backend-a interpret]\n"
               "         [--backend-b cuda|compile|none] [--arch sm_90a] [--threads T] [--max-seconds X]\n"
               "         [--print-passing] [--no-shrink] [--shrink-seconds X] [--kernel-timeout X] [--slow-seconds X]\n"
               "         [--disable f1,f2,...] [--dtypes f32,i32,...] [--max-ops N] [--emit-tests FILE]\n"
               "         [--disk-cache] [--print-ir] [--inject-failure TEXT] [--verbose] [--list-features] [--vjp]\n",
               why);
  std::exit(2);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> r;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');)
    if (!x.empty()) r.push_back(x);
  return r;
}

pl::DType dtype_named(const std::string& n) {
  for (int i = 0; i < pl::kNumDTypes; ++i)
    if (n == pl::dtype_name(static_cast<pl::DType>(i))) return static_cast<pl::DType>(i);
  usage(("unknown dtype " + n).c_str());
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 0; i < pl::kNumDTypes; ++i) o.gen.dtypes.insert(static_cast<pl::DType>(i));
  auto need = [&](int& i) -> std::string {
    if (i + 1 >= argc) usage((std::string(argv[i]) + " needs a value").c_str());
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--seed") o.seed = std::stoull(need(i));
    else if (a == "--count") o.count = std::stoll(need(i));
    else if (a == "--start") o.start = std::stoll(need(i));
    else if (a == "--index") o.only = std::stoll(need(i));
    else if (a == "--backend-a") o.backend_a = need(i);
    else if (a == "--backend-b") o.backend_b = need(i);
    else if (a == "--arch") o.arch = need(i);
    else if (a == "--threads") o.threads = std::stoi(need(i));
    else if (a == "--max-seconds") o.max_seconds = std::stod(need(i));
    else if (a == "--shrink-seconds") o.shrink_seconds = std::stod(need(i));
    else if (a == "--kernel-timeout") o.kernel_timeout = std::stod(need(i));
    else if (a == "--slow-seconds") o.slow_seconds = std::stod(need(i));
    else if (a == "--print-passing") o.print_passing = true;
    else if (a == "--no-shrink") o.shrink = false;
    else if (a == "--verbose") o.verbose = true;
    else if (a == "--disk-cache") o.disk_cache = true;
    else if (a == "--print-ir") o.print_ir = true;
    else if (a == "--vjp") o.vjp = true;
    else if (a == "--inject-failure") o.inject = need(i);
    else if (a == "--emit-tests") o.emit_tests = need(i);
    else if (a == "--max-ops") o.gen.max_ops = std::max(4, std::stoi(need(i)));
    else if (a == "--disable") {
      for (auto& f : split(need(i))) {
        bool known = false;
        for (const char* const* k = kFeatures; *k; ++k) known = known || f == *k;
        if (!known) usage(("unknown feature " + f + " (see --list-features)").c_str());
        o.gen.disabled.insert(f);
      }
    } else if (a == "--dtypes") {
      o.gen.dtypes.clear();
      for (auto& d : split(need(i))) o.gen.dtypes.insert(dtype_named(d));
    } else if (a == "--list-features") {
      for (const char* const* k = kFeatures; *k; ++k) std::printf("%s\n", *k);
      std::exit(0);
    } else {
      usage(("unknown argument " + a).c_str());
    }
  }
  if (o.backend_a != "interpret") usage("--backend-a: only interpret is supported (the interpreter defines the semantics)");
  if (o.backend_b.empty()) o.backend_b = pl::cuda_available() ? "cuda" : "compile";
  if (o.backend_b != "cuda" && o.backend_b != "compile" && o.backend_b != "none") usage("--backend-b: cuda, compile or none");
  if (o.gen.dtypes.empty()) usage("--dtypes: none left");
  if (o.threads <= 0) o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return o;
}

// ---- one kernel ----
enum class Kind { Ok, Gen, Build, Compile, Interp, Cuda, Mismatch, Vjp };
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Ok: return "ok";
    case Kind::Gen: return "generator: the library refused a generated op";
    case Kind::Build: return "build: rebuilding the description failed or traced differently";
    case Kind::Compile: return "compile: lowering or NVRTC failed";
    case Kind::Interp: return "interpreter: the run failed";
    case Kind::Cuda: return "cuda: the GPU run failed";
    case Kind::Mismatch: return "mismatch: outputs differ between the backends";
    case Kind::Vjp: return "vjp: pl::vjp failed (not a refusal) or disagrees with pl::jvp";
  }
  return "?";
}

struct Outcome {
  Kind kind = Kind::Ok;
  std::string detail;  // error message or the differing elements
  std::string signature;  // what must persist while shrinking
};

// A failure's signature: the message without numbers, variable names or paths.
std::string signature_of(const std::string& msg) {
  std::string first;
  std::istringstream in(msg);
  for (std::string l; std::getline(in, l);)
    if (l.find("error") != std::string::npos || first.empty()) {
      first = l;
      if (l.find("error") != std::string::npos) break;
    }
  size_t p = first.find(": ");
  if (first.rfind("kernel", 0) == 0 && p != std::string::npos) first = first.substr(p + 2);
  static const std::regex num("[0-9]+");
  static const std::regex ident("\\b(v|r|c|a)[0-9_]+\\b");
  first = std::regex_replace(first, ident, "#");
  first = std::regex_replace(first, num, "#");
  return first.substr(0, 160);
}

// The transpose identity: for tangents t of the floating inputs and cotangents c of the
// floating outputs, sum(c . jvp(t)) == sum(vjp(c) . t), each side in f64 from the arrays. A
// kernel vjp refuses (its message says "cannot transpose") passes; any other error, or sides
// that differ beyond rounding, is a failure. "" when it holds.
std::atomic<int64_t> g_vjp_checked{0}, g_vjp_refused{0};
std::string check_vjp(const pl::Call& call, const std::vector<pl::Array>& ins) {
  std::vector<pl::Array> t(ins.size()), outs;
  for (size_t k = 0; k < ins.size(); ++k)
    if (pl::is_float(ins[k].dtype())) t[k] = pl::random::normal(ins[k].shape(), ins[k].dtype(), 9000 + k);
  try {
    auto [o, pullback] = pl::vjp(call, ins);
    std::vector<pl::Array> ct(o.size());
    for (size_t k = 0; k < o.size(); ++k)
      if (pl::is_float(o[k].dtype())) ct[k] = pl::random::normal(o[k].shape(), o[k].dtype(), 9100 + k);
    std::vector<pl::Array> g = pullback(ct);
    auto [po, tan] = pl::jvp(call, ins, t);
    double lhs = 0, rhs = 0, scale = 0;
    bool nonfinite = false;
    for (size_t k = 0; k < ct.size(); ++k) {
      if (!ct[k].defined() || k >= tan.size() || !tan[k].defined()) continue;
      auto a = ct[k].to_vector<double>(), b = tan[k].to_vector<double>();
      for (size_t i = 0; i < a.size(); ++i)
        if (std::isfinite(a[i] * b[i])) lhs += a[i] * b[i], scale += std::fabs(a[i] * b[i]);
        else nonfinite = true;
    }
    for (size_t k = 0; k < g.size(); ++k) {
      if (!g[k].defined() || !t[k].defined()) continue;
      auto a = g[k].to_vector<double>(), b = t[k].to_vector<double>();
      for (size_t i = 0; i < a.size(); ++i)
        if (std::isfinite(a[i] * b[i])) rhs += a[i] * b[i], scale += std::fabs(a[i] * b[i]);
        else nonfinite = true;
    }
    ++g_vjp_checked;
    // Overflowing kernels say nothing, nor do kernels with a NaN or inf tangent or cotangent on
    // either side: a NaN under a reduction (max over a block holding a NaN) makes that
    // reduction's tangent NaN, and the vjp sums it into every element the block shares with
    // other programs, so the finite parts of the two sides no longer match (seed 21, kernels
    // 13346 and 198496; JAX's rules give the same NaNs).
    if (nonfinite || !std::isfinite(lhs) || !std::isfinite(rhs)) return "";
    if (std::fabs(lhs - rhs) > 1e-2 * std::max(1.0, scale))
      return "sum(ct . jvp(t)) = " + std::to_string(lhs) + " but sum(vjp(ct) . t) = " + std::to_string(rhs) + " (scale " +
             std::to_string(scale) + ")";
  } catch (const pl::Error& e) {
    std::string m = e.what();
    if (m.find("cannot transpose") != std::string::npos || m.find("jvp of") != std::string::npos) return ++g_vjp_refused, "";
    return m;
  }
  return "";
}

Outcome check(const Kernel& k, const Options& o, const std::string* expect_ir) {
  Outcome r;
  pl::Call ca;
  try {
    ca = make_call(k, pl::Backend::Interpret);
  } catch (const pl::Error& e) {
    return {Kind::Build, e.what(), "build: " + signature_of(e.what())};
  } catch (const std::exception& e) {
    return {Kind::Build, std::string("fuzz builder: ") + e.what(), "builder"};
  }
  if (expect_ir && ir_text(ca) != *expect_ir)
    return {Kind::Build, "the rebuilt kernel traces to different IR than the generated one", "ir"};
  if (expect_ir && !initialised(k))
    return {Kind::Build, "generator: an output is touched before its first full write", "init"};
  if (!o.inject.empty() && ir_text(ca).find(o.inject) != std::string::npos)
    return {Kind::Mismatch, "  (injected: the IR contains '" + o.inject + "')\n", "injected"};
  if (o.backend_b == "compile") {
    try {
      ca.compile_for(o.arch);
    } catch (const pl::Error& e) {
      return {Kind::Compile, e.what(), "compile: " + signature_of(e.what())};
    }
  }
  std::vector<pl::Array> ins = make_inputs(k);
  std::vector<pl::Array> ra;
  try {
    ra = ca(ins);
  } catch (const std::exception& e) {
    return {Kind::Interp, e.what(), "interp: " + signature_of(e.what())};
  }
  if (o.vjp) {
    std::string v = check_vjp(ca, ins);
    if (!v.empty()) return {Kind::Vjp, v, "vjp: " + signature_of(v)};
  }
  if (o.backend_b != "cuda") return r;
  std::vector<pl::Array> rb;
  try {
    pl::Call cb = make_call(k, pl::Backend::Cuda);
    rb = cb(ins);
  } catch (const std::exception& e) {
    return {Kind::Cuda, e.what(), "cuda: " + signature_of(e.what())};
  }
  std::string d;
  for (size_t i = 0; i < ra.size(); ++i) {
    std::string c = compare(ra[i], rb[i], k.out_tol.at(i));
    if (!c.empty()) d += "output " + std::to_string(i) + " (" + ra[i].shape_dtype().str() + "):\n" + c;
  }
  if (!d.empty()) return {Kind::Mismatch, d, "mismatch"};
  return r;
}

std::string summary_line(const Kernel& k) {
  std::string g = "(";
  for (size_t i = 0; i < k.grid.size(); ++i) g += (i ? "," : "") + std::to_string(k.grid[i]);
  g += k.grid.size() == 1 ? ",)" : ")";
  std::string s = "grid " + g + ", " + std::to_string(k.ins.size()) + " inputs, " + std::to_string(k.outs.size()) + " outputs, " +
                  std::to_string(count_ops(k.body)) + " ops";
  return s;
}

// ---- crash and hang reporting ----
struct Slot {
  std::atomic<int64_t> index{-1};
  std::atomic<int64_t> started_ms{0};
  char text[1 << 16];  // the running kernel's C++ (for a crash report)
};
std::vector<std::unique_ptr<Slot>> g_slots;
thread_local Slot* t_slot = nullptr;
uint64_t g_seed = 0;

void on_signal(int sig) {
  char b[256];
  int n = std::snprintf(b, sizeof b, "\npallas_fuzz: signal %d while running seed %llu kernel %lld; its test:\n", sig,
                        static_cast<unsigned long long>(g_seed), t_slot ? static_cast<long long>(t_slot->index.load()) : -1LL);
  if (write(2, b, static_cast<size_t>(n)) < 0) {}
  if (t_slot && write(2, t_slot->text, strnlen(t_slot->text, sizeof t_slot->text)) < 0) {}
  _exit(3);
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  g_seed = o.seed;
  // a kernel is compiled here explicitly, not by every interpreted call; no cubins on disk
  unsetenv("PALLAS_CUDA_COMPILE_CHECK");
  if (!o.disk_cache) setenv("PALLAS_NO_DISK_CACHE", "1", 1);
  // GPU outputs start as poison (4-byte dtypes), so an element a GPU kernel fails to write
  // never matches by accident
  setenv("PALLAS_CUDA_POISON", "1", 0);
  if (o.backend_b == "cuda" && !pl::cuda_available()) {
    std::fprintf(stderr, "pallas_fuzz: --backend-b cuda but no usable GPU\n");
    return 2;
  }

  int64_t first = o.only >= 0 ? o.only : o.start;
  int64_t last = o.only >= 0 ? o.only + 1 : o.start + o.count;

  if (!o.emit_tests.empty()) {
    // Print the kernels as GoogleTests that also check their IR against the generator's.
    std::ofstream f(o.emit_tests);
    f << "// Generated by pallas_fuzz --seed " << o.seed << " --emit-tests: each kernel printed as a test, checked to\n"
      << "// trace to the IR the fuzzer built (so printed regression tests reproduce what was fuzzed).\n"
      << "#include <gtest/gtest.h>\n#include <limits>\n#include <pallas/pallas.h>\n#include \"fuzz/fuzz_check.h\"\n\n"
      << "namespace pl = pallas;\n\n";
    int n = 0;
    for (int64_t i = first; i < last; ++i) {
      Generated g = generate(o.seed, i, o.gen);
      if (!g.error.empty()) continue;
      char h[32];
      std::snprintf(h, sizeof h, "0x%016llxull", static_cast<unsigned long long>(text_hash(g.ir)));
      std::string t = cpp_test(g.kernel, "Seed" + std::to_string(o.seed) + "Kernel" + std::to_string(i), summary_line(g.kernel), h);
      f << t << "\n";
      ++n;
    }
    std::printf("pallas_fuzz: wrote %d tests to %s\n", n, o.emit_tests.c_str());
    return 0;
  }

  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, on_signal);
  for (int t = 0; t < o.threads; ++t) g_slots.push_back(std::make_unique<Slot>());

  char date[64];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::printf("pallas_fuzz: seed %llu, kernels %lld..%lld, backend A %s, backend B %s%s, %d threads; %s, commit %s\n",
              static_cast<unsigned long long>(o.seed), static_cast<long long>(first), static_cast<long long>(last - 1),
              o.backend_a.c_str(), o.backend_b.c_str(), o.backend_b == "compile" ? (" (" + o.arch + ")").c_str() : "",
              o.threads, date, PALLAS_FUZZ_COMMIT);
  if (!o.gen.disabled.empty()) {
    std::string d;
    for (auto& f : o.gen.disabled) d += (d.empty() ? "" : ",") + f;
    std::printf("pallas_fuzz: disabled: %s\n", d.c_str());
  }
  std::fflush(stdout);

  auto t0 = Clock::now();
  std::atomic<int64_t> next{first};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::map<Kind, int64_t> counts;
  std::map<std::string, int64_t> coverage;
  int64_t run = 0, total_ops = 0;
  std::vector<std::string> failures, slow;
  double gen_s = 0, check_s = 0;

  auto report_failure = [&](const Kernel& k, const Outcome& out, const std::string& when) {
    std::string s;
    s += "\n=== FAILURE: " + std::string(kind_name(out.kind)) + " — seed " + std::to_string(o.seed) + " kernel " + std::to_string(k.index) + "\n";
    s += "kernel: " + summary_line(k) + when + "\n";
    s += out.detail;
    if (s.back() != '\n') s += "\n";
    s += "--- the kernel (pallas_fuzz --seed " + std::to_string(o.seed) + " --index " + std::to_string(k.index) + ") ---\n";
    s += cpp_test(k, "Seed" + std::to_string(o.seed) + "Kernel" + std::to_string(k.index), "", "");
    if (o.shrink && out.kind != Kind::Gen) {
      auto ts = Clock::now();
      int steps = 0;
      std::string sig = out.signature;
      Kernel small = shrink(k, [&](const Kernel& c) { return check(c, o, nullptr).signature == sig; }, o.shrink_seconds, &steps);
      Outcome again = check(small, o, nullptr);
      double secs = std::chrono::duration<double>(Clock::now() - ts).count();
      char b[160];
      std::snprintf(b, sizeof b, "--- shrunk from %d to %d ops (%d tries, %.1f s); paste into tests/fuzz_regressions_test.cc ---\n",
                    count_ops(k.body), count_ops(small.body), steps, secs);
      s += b;
      std::string comment = "pallas_fuzz --seed " + std::to_string(o.seed) + " --index " + std::to_string(k.index) + " (shrunk): " +
                            kind_name(out.kind) + "\n" + summary_line(small);
      s += cpp_test(small, "Seed" + std::to_string(o.seed) + "Kernel" + std::to_string(k.index), comment, "");
      s += "--- the shrunk kernel fails with ---\n" + again.detail;
      if (s.back() != '\n') s += "\n";
    }
    return s;
  };

  auto worker = [&](int tid) {
    Slot* slot = g_slots[static_cast<size_t>(tid)].get();
    t_slot = slot;
    for (;;) {
      if (stop) return;
      int64_t i = next.fetch_add(1);
      if (i >= last) return;
      if (o.max_seconds > 0 && std::chrono::duration<double>(Clock::now() - t0).count() > o.max_seconds) {
        stop = true;
        return;
      }
      slot->index = i;
      slot->started_ms = now_ms();
      std::snprintf(slot->text, sizeof slot->text, "(generating)\n");
      auto ta = Clock::now();
      Generated g = generate(o.seed, i, o.gen);
      auto tb = Clock::now();
      std::string text = cpp_test(g.kernel, "Seed" + std::to_string(o.seed) + "Kernel" + std::to_string(i), "", "");
      std::snprintf(slot->text, sizeof slot->text, "%s", text.c_str());
      Outcome out;
      if (!g.error.empty()) {
        out = {Kind::Gen, g.error, "gen"};
      } else {
        out = check(g.kernel, o, &g.ir);
      }
      auto tc = Clock::now();
      std::string rep;
      if (out.kind != Kind::Ok) rep = report_failure(g.kernel, out, "");
      slot->started_ms = 0;
      std::lock_guard<std::mutex> l(mu);
      ++run;
      ++counts[out.kind];
      total_ops += count_ops(g.kernel.body);
      gen_s += std::chrono::duration<double>(tb - ta).count();
      check_s += std::chrono::duration<double>(tc - tb).count();
      for (auto& f : g.kernel.features) ++coverage[f];
      double secs = std::chrono::duration<double>(tc - tb).count();
      if (secs > o.slow_seconds) {
        char b[200];
        std::snprintf(b, sizeof b, "seed %llu kernel %lld: %.1f s (%s)", static_cast<unsigned long long>(o.seed),
                      static_cast<long long>(i), secs, summary_line(g.kernel).c_str());
        slow.push_back(b);
        std::printf("SLOW: %s\n%s", b, text.c_str());
      }
      if (out.kind != Kind::Ok) {
        std::fputs(rep.c_str(), stdout);
        failures.push_back("seed " + std::to_string(o.seed) + " kernel " + std::to_string(i) + ": " + kind_name(out.kind));
      } else if (o.print_ir) {
        std::printf("--- seed %llu kernel %lld IR:\n%s", static_cast<unsigned long long>(o.seed), static_cast<long long>(i), g.ir.c_str());
      } else if (o.print_passing) {
        std::printf("--- seed %llu kernel %lld passed: %s\n%s", static_cast<unsigned long long>(o.seed), static_cast<long long>(i),
                    summary_line(g.kernel).c_str(), text.c_str());
      } else if (o.verbose) {
        std::printf("kernel %lld ok: %s\n", static_cast<long long>(i), summary_line(g.kernel).c_str());
      }
      std::fflush(stdout);
    }
  };

  // a watchdog for hangs: a kernel running longer than --kernel-timeout is reported
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    while (!done) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      for (auto& s : g_slots) {
        int64_t st = s->started_ms;
        if (st && (now_ms() - st) / 1000.0 > o.kernel_timeout) {
          std::fprintf(stderr, "\npallas_fuzz: seed %llu kernel %lld has run for over %.0f s (a hang?); its test:\n%s",
                       static_cast<unsigned long long>(o.seed), static_cast<long long>(s->index.load()), o.kernel_timeout, s->text);
          std::fflush(stderr);
          _exit(4);
        }
      }
    }
  });
  std::vector<std::thread> ts;
  for (int t = 0; t < o.threads; ++t) ts.emplace_back(worker, t);
  for (auto& t : ts) t.join();
  done = true;
  watchdog.join();

  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("\npallas_fuzz: %lld kernels in %.1f s (%.1f ms/kernel of thread time: generate %.1f, check %.1f), %.1f ops/kernel\n",
              static_cast<long long>(run), secs, run ? 1000 * (gen_s + check_s) / static_cast<double>(run) : 0.0,
              run ? 1000 * gen_s / static_cast<double>(run) : 0.0, run ? 1000 * check_s / static_cast<double>(run) : 0.0,
              run ? static_cast<double>(total_ops) / static_cast<double>(run) : 0.0);
  if (stop) std::printf("pallas_fuzz: stopped after --max-seconds %.0f\n", o.max_seconds);
  if (o.vjp)
    std::printf("pallas_fuzz: vjp checked against jvp on %lld kernels, refused (with its message) on %lld, the rest failed earlier\n",
                static_cast<long long>(g_vjp_checked.load()), static_cast<long long>(g_vjp_refused.load()));
  for (auto [k, n] : counts) std::printf("  %-60s %lld\n", kind_name(k), static_cast<long long>(n));
  if (o.verbose || !failures.empty() || true) {
    std::string cov;
    for (auto& [f, n] : coverage) cov += " " + f + "=" + std::to_string(n);
    std::printf("coverage (kernels using each feature):%s\n", cov.c_str());
  }
  if (!slow.empty()) {
    std::printf("slow kernels (over %.0f s to check; compile time): %zu\n", o.slow_seconds, slow.size());
    for (auto& f : slow) std::printf("  %s\n", f.c_str());
  }
  if (!failures.empty()) {
    std::printf("FAILED: %zu kernels\n", failures.size());
    for (auto& f : failures) std::printf("  %s\n", f.c_str());
    return 1;
  }
  std::printf("OK: 0 failures\n");
  return 0;
}
