// DLPack interop: exchange arrays with PyTorch, JAX, CuPy and other DLPack users without
// copying. The structs below have the memory layout of DLPack's `dlpack.h` (ABI v0.x, the
// `DLManagedTensor` that torch.utils.dlpack, jax.dlpack and cupy hand over; the Python
// capsule around it is the caller's business), so a pointer to one can be passed to or taken
// from any DLPack producer or consumer in the same process.
#pragma once
#include <cstdint>

#include "pallas/array.h"

namespace pallas::dlpack {

enum DeviceType : int32_t { kCPU = 1, kCUDA = 2, kCUDAHost = 3, kCUDAManaged = 13 };
// DLPack 1.1's codes; the 8-bit floats are float8_e4m3fn and float8_e5m2.
enum TypeCode : uint8_t { kInt = 0, kUInt = 1, kFloat = 2, kBfloat = 4, kBool = 6, kFloat8_e4m3fn = 10, kFloat8_e5m2 = 12 };

struct Device {
  int32_t device_type;  // DeviceType
  int32_t device_id;
};
struct DataType {
  uint8_t code;  // TypeCode
  uint8_t bits;
  uint16_t lanes;  // 1: no vector types here
};
struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; nullptr: row-major contiguous
  uint64_t byte_offset;
};
struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor* self);  // the consumer calls it when done; may be null
};

// Takes ownership of `t`: the Array is a view of its memory (no copy), and t->deleter runs
// when the last Array of it goes. Throws pl::Error (and leaves `t` with the caller) for dtypes,
// devices or strides the library cannot take.
Array from_dlpack(ManagedTensor* t);

// A DLPack tensor of the array's memory (no copy). It keeps the storage alive until the
// consumer calls its deleter; the caller hands it to the consumer (e.g. wrapped in a
// "dltensor" capsule for torch.utils.dlpack.from_dlpack).
ManagedTensor* to_dlpack(const Array& a);

}  // namespace pallas::dlpack
