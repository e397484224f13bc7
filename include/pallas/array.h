// pallas::Array: an owning n-d array on the host or on a device.
#pragma once
#include <cstdint>
#include <cstring>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "pallas/dtype.h"
#include "pallas/error.h"

namespace pallas {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s, DType t);
std::string shape_str(const Shape& s);
int64_t shape_size(const Shape& s);

struct Device {
  enum class Kind : uint8_t { Host, Cuda };
  Kind kind = Kind::Host;
  int index = 0;
  static Device host() { return {Kind::Host, 0}; }
  static Device cuda(int n = 0) { return {Kind::Cuda, n}; }
  bool is_host() const { return kind == Kind::Host; }
  bool operator==(const Device&) const = default;
  std::string str() const;
};

// Storage behind an Array; host memory or a device allocation (see src/runtime).
struct Buffer;

struct ShapeDtype {
  Shape shape;
  DType dtype = DType::F32;
  ShapeDtype() = default;
  ShapeDtype(Shape s, DType t) : shape(std::move(s)), dtype(t) {}
  bool operator==(const ShapeDtype&) const = default;
  std::string str() const { return shape_str(shape, dtype); }
};

class Array {
 public:
  Array() = default;
  // Uninitialised storage of the given shape and dtype.
  Array(Shape shape, DType dtype, Device device = Device::host());

  template <class T>
  static Array from_vector(const std::vector<T>& v, Shape shape) {
    constexpr DType t = dtype_of<storage_t<T>>();
    if (static_cast<int64_t>(v.size()) != shape_size(shape))
      throw Error("Array::from_vector: " + std::to_string(v.size()) + " values for shape " +
                  shape_str(shape) + " of " + std::to_string(shape_size(shape)) + " elements");
    Array a(std::move(shape), t);
    if constexpr (std::is_same_v<T, bool>) {
      auto* p = static_cast<bool*>(a.data());
      for (size_t i = 0; i < v.size(); ++i) p[i] = v[i];
    } else {
      std::memcpy(a.data(), v.data(), v.size() * sizeof(T));
    }
    return a;
  }
  template <class T>
  static Array from_vector(const std::vector<T>& v) {
    return from_vector(v, Shape{static_cast<int64_t>(v.size())});
  }
  // A rank-0 array (dynamic grid bounds and scalar prefetch take these).
  template <class T>
  static Array scalar(T v) {
    return from_vector(std::vector<T>{v}, Shape{});
  }
  // A view of memory the caller owns, on the host or a device (zero-copy: calls read it and,
  // through Call::into, write it in place). Row-major contiguous: `strides` (in elements,
  // empty = row-major) are checked, since kernels address blocks of row-major arrays. The
  // memory must outlive every Array of the view; `release`, if given, runs when the last one
  // goes (hand-over of ownership, e.g. a DLPack deleter). See also from_dlpack (dlpack.h).
  static Array view(void* data, Shape shape, DType dtype, Device device = Device::host(), std::vector<int64_t> strides = {},
                    std::function<void()> release = {});
  bool is_view() const;  // made by view() or from_dlpack: storage the library does not own
  static Array zeros(Shape shape, DType dtype);
  // Zeros on `device`: set there (a memset on the device's launch stream), not copied from the
  // host.
  static Array zeros(Shape shape, DType dtype, Device device);
  static Array full(Shape shape, double value, DType dtype);

  // Converts element by element to T (any dtype to any arithmetic T, f16_t or bf16_t).
  template <class T>
  std::vector<T> to_vector() const {
    if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> has no data()
      std::unique_ptr<bool[]> tmp(new bool[static_cast<size_t>(size())]);
      copy_to_host_as(DType::Bool, tmp.get());
      return std::vector<bool>(tmp.get(), tmp.get() + size());
    } else {
      std::vector<T> out(static_cast<size_t>(size()));
      copy_to_host_as(dtype_of<storage_t<T>>(), out.data());
      return out;
    }
  }

  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t size() const { return shape_size(shape_); }
  size_t nbytes() const { return static_cast<size_t>(size()) * itemsize(dtype_); }
  Device device() const;
  bool defined() const { return buffer_ != nullptr; }
  ShapeDtype shape_dtype() const { return {shape_, dtype_}; }

  // Host pointer; throws for device arrays (move them with to_host() first).
  void* data();
  const void* data() const;
  // Raw storage pointer, host or device.
  void* raw_data() const;

  Array to(Device d) const;
  Array to_host() const { return to(Device::host()); }
  Array copy() const;
  // Copies src's elements into this array's storage (same shape and dtype; any devices).
  void copy_from(const Array& src) const;  // writes the shared storage, not the handle
  Array astype(DType t) const;
  Array reshape(Shape s) const;  // shares storage
  // The shape, dtype, device and values, as NumPy prints an array (copied from the device when
  // the array lives there):
  //   f32[2,3] on host:
  //   [[  1 2.5   3]
  //    [  4   5   6]]
  // Floats print in at most 6 significant digits, as few as give back the same value of the
  // dtype (bf16 0.1 prints 0.1, not 0.100098); integers exactly; bools as True / False. An
  // array of more than 64 elements shows the first and last `edge_items` of each dimension
  // longer than 2 * edge_items, with "..." between (pass a large edge_items to see everything).
  std::string str(int64_t edge_items = 3) const;
  std::shared_ptr<Buffer> buffer() const { return buffer_; }
  Array(std::shared_ptr<Buffer> buf, Shape shape, DType dtype)
      : buffer_(std::move(buf)), shape_(std::move(shape)), dtype_(dtype) {}

 private:
  template <class T>
  using storage_t = std::conditional_t<
      std::is_same_v<T, long long>, int64_t,
      std::conditional_t<std::is_same_v<T, unsigned long long>, uint64_t, T>>;
  void copy_to_host_as(DType t, void* out) const;

  std::shared_ptr<Buffer> buffer_;
  Shape shape_;
  DType dtype_ = DType::F32;
};

// Prints a.str(): `std::cout << out << "\n";`
std::ostream& operator<<(std::ostream& os, const Array& a);

// Convert a contiguous run of n elements between dtypes (saturating float→int, NaN → 0, as XLA).
void convert_elements(DType from, const void* src, DType to, void* dst, int64_t n);

namespace random {
// Counter-based (splitmix64) so the same seed gives the same array on every machine.
Array normal(Shape shape, DType dtype, uint64_t seed, double mean = 0.0, double stddev = 1.0);
Array uniform(Shape shape, DType dtype, uint64_t seed, double lo = 0.0, double hi = 1.0);
// Integers uniformly in [lo, hi).
Array randint(Shape shape, DType dtype, uint64_t seed, int64_t lo, int64_t hi);
}  // namespace random

}  // namespace pallas
