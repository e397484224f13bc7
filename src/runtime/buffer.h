// Storage behind Arrays. Host memory is allocated here; device memory through hooks the
// CUDA backend installs (so the runtime does not depend on it).
#pragma once
#include <cstddef>
#include <functional>
#include <memory>

#include "pallas/array.h"

namespace pallas {

struct Buffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  Device device;
  // A view of memory the library does not own (Array::view, from_dlpack): never freed here;
  // `release` (if set) runs when the last Array of it goes, e.g. a DLPack deleter.
  bool owned = true;
  std::function<void()> release;
  ~Buffer();
};

struct DeviceMemoryHooks {
  void* (*alloc)(int device, size_t bytes) = nullptr;
  void (*free)(int device, void* p) = nullptr;
  void (*copy_to_device)(int device, void* dst, const void* src, size_t bytes) = nullptr;
  void (*copy_to_host)(int device, void* dst, const void* src, size_t bytes) = nullptr;
  void (*copy_device)(int device, void* dst, const void* src, size_t bytes) = nullptr;
  void (*zero)(int device, void* dst, size_t bytes) = nullptr;  // on the launch stream
};
void set_device_memory_hooks(const DeviceMemoryHooks& h);
const DeviceMemoryHooks* device_memory_hooks();  // nullptr when no backend installed them

std::shared_ptr<Buffer> allocate_buffer(size_t bytes, Device device);

}  // namespace pallas
