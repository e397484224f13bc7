// The thread's current stream (include/pallas/stream.h).
#include "pallas/stream.h"

namespace pallas {
namespace {
thread_local StreamHandle g_current = nullptr;
}
StreamScope::StreamScope(StreamHandle stream) : previous_(g_current) { g_current = stream; }
StreamScope::~StreamScope() { g_current = previous_; }
StreamHandle current_stream() { return g_current; }
}  // namespace pallas
