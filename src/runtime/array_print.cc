// Array::str and operator<<: an array as NumPy prints one, with its device.
#include <algorithm>
#include <ostream>

#include "src/runtime/host_values.h"

namespace pallas {

namespace {

// Arrays up to this many elements print whole; larger ones show the edges of each dimension.
constexpr int64_t kPrintAllUpTo = 64;
// Floats print in at most this many significant digits (fewer when they read back the same).
constexpr int kPrintDigits = 6;

class Printer {
 public:
  Printer(const Array& a, int64_t edge_items)
      : shape_(a.shape()), values_(a), edge_(std::max<int64_t>(edge_items, 1)), summarise_(a.size() > kPrintAllUpTo) {
    stride_.assign(shape_.size(), 1);
    for (size_t d = shape_.size(); d-- > 1;) stride_[d - 1] = stride_[d] * shape_[d];
    width_ = measure(0, 0);
  }
  std::string block(size_t dim, int64_t offset) const {
    std::string s = "[";
    // Between rows: a newline, plus a blank line per further dimension, indented under the '['.
    std::string sep = dim + 1 == shape_.size() ? " " : std::string(shape_.size() - dim - 1, '\n') + std::string(dim + 1, ' ');
    bool first = true;
    for_shown(dim, [&](int64_t i) {
      if (!first) s += sep;
      first = false;
      if (i < 0) s += "...";
      else if (dim + 1 == shape_.size()) s += padded(offset + i);
      else s += block(dim + 1, offset + i * stride_[dim]);
    });
    return s + "]";
  }

 private:
  // Calls f(i) for each shown index of dimension dim in order, and f(-1) where some are elided.
  template <class F>
  void for_shown(size_t dim, F&& f) const {
    int64_t n = shape_[dim];
    bool elide = summarise_ && n - edge_ > edge_;
    for (int64_t i = 0; i < n; ++i) {
      if (elide && i == edge_) {
        f(-1);
        i = n - edge_;
      }
      f(i);
    }
  }
  // The widest element text of the shown part: every column is padded to it.
  size_t measure(size_t dim, int64_t offset) const {
    size_t w = 0;
    for_shown(dim, [&](int64_t i) {
      if (i < 0) return;
      int64_t at = offset + i * stride_[dim];
      w = std::max(w, dim + 1 == shape_.size() ? values_.text(at, kPrintDigits).size() : measure(dim + 1, at));
    });
    return w;
  }
  std::string padded(int64_t k) const {
    std::string t = values_.text(k, kPrintDigits);
    return std::string(width_ - std::min(width_, t.size()), ' ') + t;
  }

  const Shape& shape_;
  runtime::HostValues values_;
  int64_t edge_;
  bool summarise_;
  std::vector<int64_t> stride_;
  size_t width_ = 0;
};

}  // namespace

std::string Array::str(int64_t edge_items) const {
  if (!defined()) return "<empty Array>";
  std::string head = shape_str(shape_, dtype_) + " on " + device().str() + ":";
  if (shape_.empty()) return head + " " + runtime::HostValues(*this).text(0, kPrintDigits);
  if (size() == 0) return head + " []";
  return head + (shape_.size() == 1 ? " " : "\n") + Printer(*this, edge_items).block(0, 0);
}

std::ostream& operator<<(std::ostream& os, const Array& a) { return os << a.str(); }

}  // namespace pallas
