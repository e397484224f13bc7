// pallas::Error: the one exception type the library throws for user mistakes.
#pragma once
#include <stdexcept>
#include <string>

namespace pallas {

namespace detail {
// Where in a kernel's source an error was made: while a kernel (or an index map) is traced,
// the line of the op being traced (exact), else the line of the last op that recorded one
// (exact = false: the error comes from an op at or after it, e.g. pl::exp, which records
// none). Empty outside a trace.
struct ErrorSite {
  const char* file = nullptr;
  int line = 0;
  bool exact = false;
};
ErrorSite current_error_site() noexcept;  // src/trace/trace.cc
}  // namespace detail

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg), site_(detail::current_error_site()) {}
  // pallas_call uses it to name the op's line in the message ("at matmul.cc:42: dot: ...").
  const detail::ErrorSite& site() const { return site_; }

 private:
  detail::ErrorSite site_;
};

}  // namespace pallas
