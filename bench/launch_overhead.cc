// The host cost of a cached call: a 128-element `o = x + 1` kernel (as cuda_bench's
// tiny_call_host_overhead) called many times in each form a program uses, timed on the host
// clock. Run under the stub driver (scripts/launch_overhead.sh: cuLaunchKernel does nothing)
// it measures everything Pallas does around the launch, on any CPU; on a GPU it measures that
// plus the driver's launch (and, once the launch queue is full, the kernel's own time).
// LAUNCH_OVERHEAD_CALLS=n sets the calls per round (default 200000; fewer under callgrind).
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <pallas/pallas.h>

namespace pl = pallas;

namespace {

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One noinline function per form, so that a profile can collect just the timed loop
// (valgrind --tool=callgrind --toggle-collect='*calls_*').
__attribute__((noinline)) void calls_single(const pl::Call& k, const pl::Array& x, int n) {
  for (int i = 0; i < n; ++i) k(x);
}
__attribute__((noinline)) void calls_vector(const pl::Call& k, const std::vector<pl::Array>& args, int n) {
  for (int i = 0; i < n; ++i) k(args);
}
__attribute__((noinline)) void calls_into(const pl::Call& k, const std::vector<pl::Array>& outs, const std::vector<pl::Array>& args, int n) {
  for (int i = 0; i < n; ++i) k.into(outs, args);
}

// The stub driver's launch counter (bench/stub_driver), or -1 under the real driver.
long long stub_launches() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) return -1;
  auto f = reinterpret_cast<unsigned long long (*)()>(dlsym(h, "pallas_stub_launch_count"));
  long long n = f ? static_cast<long long>(f()) : -1;
  dlclose(h);
  return n;
}

}  // namespace

int main() {
  if (!pl::cuda_available()) {
    std::printf("no CUDA device (run scripts/launch_overhead.sh for the stub driver)\n");
    return 1;
  }
  const char* e = std::getenv("LAUNCH_OVERHEAD_CALLS");
  int n = e ? std::atoi(e) : 200000;
  const int rounds = n >= 100000 ? 5 : 1;
  bool stub = stub_launches() >= 0;
  std::printf("driver: %s; %d calls a round, best of %d rounds\n", stub ? "stub (no GPU: host-side cost only)" : "real", n, rounds);
  auto k = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] + 1.f; }, pl::ShapeDtype({128}, pl::f32),
                           {.name = "tiny"});
  auto x = pl::random::normal({128}, pl::f32, 1).to(pl::Device::cuda(0));
  pl::Array out(pl::Shape{128}, pl::f32, pl::Device::cuda(0));
  std::vector<pl::Array> args{x}, outs{out};
  for (int i = 0; i < 100; ++i) k(x), k.into(outs, args);  // traced, compiled, loaded, pool warm
  pl::synchronize();
  auto time = [&](const char* name, auto&& loop) {
    double best = 1e30;
    long long before = stub_launches();
    for (int r = 0; r < rounds; ++r) {
      double t0 = now_us();
      loop();
      pl::synchronize();
      best = std::min(best, (now_us() - t0) / n);
    }
    long long launched = stub ? stub_launches() - before : -1;
    std::printf("%-24s %8.3f us per call%s\n", name, best,
                stub && launched != static_cast<long long>(rounds) * n ? "  (launch count mismatch!)" : "");
  };
  time("k(x)", [&] { calls_single(k, x, n); });
  time("k({x})", [&] { calls_vector(k, args, n); });
  time("k.into({out}, {x})", [&] { calls_into(k, outs, args, n); });
  return 0;
}
