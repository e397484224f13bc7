#include "src/backends/interpret/checks.h"

#include <cstdlib>
#include <sstream>

namespace pallas::interp {

namespace {
ChecksOn from_env() {
  ChecksOn c;
  const char* e = std::getenv("PALLAS_INTERPRET_CHECKS");
  if (!e || !*e) return c;
  std::string s = e;
  if (s == "0" || s == "none" || s == "false") return c;
  if (s == "1" || s == "all" || s == "true") return {true, true, true};
  std::stringstream ss(s);
  for (std::string w; std::getline(ss, w, ',');) {
    if (w == "races") c.races = true;
    else if (w == "uninitialized") c.uninitialized = true;
    else if (w == "out_of_bounds") c.out_of_bounds = true;
    else
      throw Error("PALLAS_INTERPRET_CHECKS='" + s + "': unknown check '" + w +
                  "'; use 1 (all), or a comma list of races, uninitialized, out_of_bounds");
  }
  return c;
}
}  // namespace

ChecksOn resolve_checks(const InterpretParams& p) {
  static const ChecksOn env = from_env();
  return {p.detect_races.value_or(env.races), p.detect_uninitialized.value_or(env.uninitialized),
          p.detect_out_of_bounds.value_or(env.out_of_bounds)};
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

}  // namespace pallas::interp
