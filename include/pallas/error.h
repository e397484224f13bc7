// pallas::Error: the one exception type the library throws for user mistakes.
#pragma once
#include <stdexcept>
#include <string>

namespace pallas {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

}  // namespace pallas
