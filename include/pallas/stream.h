// Launching on the caller's CUDA stream. A StreamHandle is a CUstream / cudaStream_t (e.g.
// torch.cuda.current_stream().cuda_stream), opaque here; nullptr is the legacy default stream.
// While a StreamScope lives, calls on its thread launch on its stream asynchronously: copies the
// call makes on the device (aliased inputs, poison) go on that stream too, and outputs the
// library allocates come from a pool of that stream's freed blocks, so reuse is ordered after
// earlier work on it. Reading results (Array::to_host, to_vector) waits for the stream. Arrays
// used on another stream than the one they were made on are the caller's to synchronise.
#pragma once

namespace pallas {

using StreamHandle = void*;

class StreamScope {
 public:
  explicit StreamScope(StreamHandle stream);
  ~StreamScope();
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  StreamHandle previous_;
};

// The stream calls on this thread launch on (nullptr: the legacy default stream).
StreamHandle current_stream();

}  // namespace pallas
