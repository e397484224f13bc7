#include "src/backends/interpret/checks.h"

#include <cstdlib>
#include <sstream>

#include "src/runtime/host_values.h"

namespace pallas::interp {

namespace {
ChecksOn from_env() {
  ChecksOn c;
  const char* e = std::getenv("PALLAS_INTERPRET_CHECKS");
  if (!e || !*e) return c;
  std::string s = e;
  if (s == "0" || s == "none" || s == "false") return c;
  if (s == "1" || s == "all" || s == "true") return {true, true, true, true, false};
  std::stringstream ss(s);
  for (std::string w; std::getline(ss, w, ',');) {
    if (w == "races") c.races = true;
    else if (w == "uninitialized") c.uninitialized = true;
    else if (w == "out_of_bounds") c.out_of_bounds = true;
    else if (w == "unwritten_outputs") c.unwritten = true;
    else if (w == "padding") c.padding = true;
    else if (w == "all") c.races = c.uninitialized = c.out_of_bounds = c.unwritten = true;
    else
      throw Error("PALLAS_INTERPRET_CHECKS='" + s + "': unknown check '" + w +
                  "'; use 1 (all), or a comma list of races, uninitialized, out_of_bounds, unwritten_outputs, padding");
  }
  return c;
}
}  // namespace

ChecksOn resolve_checks(const InterpretParams& p) {
  static const ChecksOn env = from_env();
  return {p.detect_races.value_or(env.races), p.detect_uninitialized.value_or(env.uninitialized),
          p.detect_out_of_bounds.value_or(env.out_of_bounds), p.detect_unwritten_outputs.value_or(env.unwritten),
          p.detect_padding_reads.value_or(env.padding)};
}

void CheckState::report(int64_t program, std::string message) {
  std::lock_guard<std::mutex> g(mu_);
  if (report_program_ >= 0 && program >= report_program_) return;
  report_program_ = program;
  report_ = std::move(message);
}

bool CheckState::reported(std::string* message) const {
  std::lock_guard<std::mutex> g(mu_);
  if (report_program_ < 0) return false;
  *message = report_;
  return true;
}

std::string CheckState::program_str(int64_t linear) const {
  std::vector<int64_t> c(grid.size());
  for (size_t k = grid.size(); k-- > 0;) {
    c[k] = grid[k] ? linear % grid[k] : 0;
    linear = grid[k] ? linear / grid[k] : 0;
  }
  std::string s = "(";
  for (size_t k = 0; k < c.size(); ++k) s += (k ? ", " : "") + std::to_string(c[k]);
  return s + (c.size() == 1 ? ",)" : ")");
}

int64_t CheckState::race_class(int64_t linear) const {
  int64_t cls = 0, mul = 1;
  for (size_t k = grid.size(); k-- > 0;) {
    int64_t c = grid[k] ? linear % grid[k] : 0;
    linear = grid[k] ? linear / grid[k] : 0;
    if (parallel[k]) cls += c * mul, mul *= grid[k];
  }
  return cls;
}

int CheckState::first_parallel_difference(int64_t a, int64_t b) const {
  int r = -1;
  for (size_t k = grid.size(); k-- > 0;) {
    int64_t ca = grid[k] ? a % grid[k] : 0, cb = grid[k] ? b % grid[k] : 0;
    a = grid[k] ? a / grid[k] : 0;
    b = grid[k] ? b / grid[k] : 0;
    if (parallel[k] && ca != cb) r = static_cast<int>(k);
  }
  return r;
}

std::string coords_str(const int64_t* c, int n) {
  std::string s = "[";
  for (int k = 0; k < n; ++k) s += (k ? ", " : "") + std::to_string(c[k]);
  return s + "]";
}

std::string unwritten_report(const std::string& what, const ShapeDtype& array, const std::vector<ShadowElem>& shadow) {
  int64_t count = 0, first = -1, last = -1;
  for (size_t k = 0; k < shadow.size(); ++k)
    if (shadow[k].w == -1 && shadow[k].a1 == -1) {
      if (first < 0) first = static_cast<int64_t>(k);
      last = static_cast<int64_t>(k);
      ++count;
    }
  if (count == 0) return "";
  auto coords = [&](int64_t lin) { return runtime::index_str(array.shape, lin); };
  return std::to_string(count) + " of " + std::to_string(shadow.size()) + " elements of " + what + " " + array.str() +
         " were written by no program (the first at " + coords(first) + ", the last at " + coords(last) +
         "); they come back as poison (NaN for floats in the interpreter, stale memory on the GPU). Make the grid cover "
         "every block of the output (e.g. grid = pl::cdiv(size, block) along each axis), check that its index map "
         "reaches each block, and that the kernel's stores (and their masks) cover each block";
}

}  // namespace pallas::interp
