// DLPack import and export (include/pallas/dlpack.h): views both ways, no copies.
#include "pallas/dlpack.h"

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace pallas::dlpack {

// The layout is DLPack's ABI: check it where a mistake would be silent.
static_assert(sizeof(Device) == 8 && sizeof(DataType) == 4);
static_assert(offsetof(Tensor, device) == 8 && offsetof(Tensor, ndim) == 16 && offsetof(Tensor, dtype) == 20 && offsetof(Tensor, shape) == 24 &&
              offsetof(Tensor, strides) == 32 && offsetof(Tensor, byte_offset) == 40 && sizeof(Tensor) == 48);
static_assert(offsetof(ManagedTensor, manager_ctx) == 48 && offsetof(ManagedTensor, deleter) == 56 && sizeof(ManagedTensor) == 64);

namespace {

DataType to_dl(DType t) {
  uint8_t bits = static_cast<uint8_t>(itemsize(t) * 8);
  switch (t) {
    case DType::Bool: return {kBool, 8, 1};
    case DType::I8: case DType::I16: case DType::I32: case DType::I64: return {kInt, bits, 1};
    case DType::U8: case DType::U16: case DType::U32: case DType::U64: return {kUInt, bits, 1};
    case DType::F16: case DType::F32: case DType::F64: return {kFloat, bits, 1};
    case DType::BF16: return {kBfloat, 16, 1};
    case DType::F8E4M3: return {kFloat8_e4m3fn, 8, 1};
    case DType::F8E5M2: return {kFloat8_e5m2, 8, 1};
  }
  throw Error("to_dlpack: unknown dtype");
}

std::string dl_text(DataType d) {
  return "code " + std::to_string(d.code) + " bits " + std::to_string(d.bits) + " lanes " + std::to_string(d.lanes);
}

DType from_dl(DataType d) {
  if (d.lanes != 1) throw Error("from_dlpack: vector dtypes (" + dl_text(d) + ") are not supported");
  auto pick = [&](std::initializer_list<std::pair<int, DType>> l) {
    for (auto [bits, t] : l)
      if (bits == d.bits) return t;
    throw Error("from_dlpack: unsupported dtype (" + dl_text(d) + ")");
  };
  switch (d.code) {
    case kBool: return pick({{8, DType::Bool}});
    case kInt: return pick({{8, DType::I8}, {16, DType::I16}, {32, DType::I32}, {64, DType::I64}});
    case kUInt: return pick({{1, DType::Bool}, {8, DType::U8}, {16, DType::U16}, {32, DType::U32}, {64, DType::U64}});
    case kFloat: return pick({{16, DType::F16}, {32, DType::F32}, {64, DType::F64}});
    case kBfloat: return pick({{16, DType::BF16}});
    case kFloat8_e4m3fn: return pick({{8, DType::F8E4M3}});
    case kFloat8_e5m2: return pick({{8, DType::F8E5M2}});
    default: throw Error("from_dlpack: unsupported dtype (" + dl_text(d) + ")");
  }
}

// What an exported tensor owns: the array (its storage) and the shape/stride arrays.
struct Exported {
  ManagedTensor t{};
  Array array;
  std::vector<int64_t> shape, strides;
};

}  // namespace

Array from_dlpack(ManagedTensor* mt) {
  if (!mt) throw Error("from_dlpack: null tensor");
  const Tensor& t = mt->dl_tensor;
  pallas::Device dev;
  switch (t.device.device_type) {
    case kCPU: case kCUDAHost: dev = pallas::Device::host(); break;
    case kCUDA: case kCUDAManaged: dev = pallas::Device::cuda(t.device.device_id); break;
    default: throw Error("from_dlpack: device type " + std::to_string(t.device.device_type) + " is not supported (CPU and CUDA are)");
  }
  if (t.ndim < 0) throw Error("from_dlpack: negative ndim");
  Shape shape(t.shape, t.shape + t.ndim);
  std::vector<int64_t> strides;
  if (t.strides) strides.assign(t.strides, t.strides + t.ndim);
  DType dtype = from_dl(t.dtype);
  void* data = static_cast<char*>(t.data) + t.byte_offset;
  // view() validates; only then does the Array own the tensor (its deleter runs on release)
  Array a = Array::view(data, std::move(shape), dtype, dev, std::move(strides));
  return Array::view(a.raw_data(), a.shape(), dtype, dev, {}, [mt] {
    if (mt->deleter) mt->deleter(mt);
  });
}

ManagedTensor* to_dlpack(const Array& a) {
  if (!a.defined()) throw Error("to_dlpack: the array is empty");
  auto e = std::make_unique<Exported>();
  e->array = a;
  e->shape = a.shape();
  e->strides.assign(a.shape().size(), 1);
  for (size_t d = a.shape().size(); d-- > 1;) e->strides[d - 1] = e->strides[d] * a.shape()[d];
  Tensor& t = e->t.dl_tensor;
  t.data = a.raw_data();
  pallas::Device dev = a.device();
  t.device = {dev.is_host() ? kCPU : kCUDA, dev.is_host() ? 0 : dev.index};
  t.ndim = static_cast<int32_t>(a.shape().size());
  t.dtype = to_dl(a.dtype());
  t.shape = e->shape.data();
  t.strides = e->strides.data();
  t.byte_offset = 0;
  e->t.manager_ctx = e.get();
  e->t.deleter = [](ManagedTensor* self) { delete static_cast<Exported*>(self->manager_ctx); };
  return &e.release()->t;
}

}  // namespace pallas::dlpack
