// Launching on the caller's stream (include/pallas/stream.h). The scope's semantics run
// everywhere; the GpuOnly tests use a real non-blocking stream and a CUDA graph, and are
// skipped (with the reason) without a GPU.
#include <pallas/pallas.h>

#include <cstdlib>
#include <thread>

#include "tests/test_util.h"
#ifdef PALLAS_TEST_HAVE_CUDA
#include "src/backends/cuda/driver.h"
#endif

namespace {
namespace pl = pallas;

pl::Call axpy(int64_t n, pl::Backend backend = pl::Backend::Auto) {
  auto spec = pl::BlockSpec({256}, [](pl::Value i) { return pl::idx(i); });
  return pl::pallas_call([](pl::Ref x, pl::Ref y, pl::Ref o) { o[pl::all] = 2.f * x[pl::all] + y[pl::all]; }, pl::ShapeDtype({n}, pl::f32),
                         {.grid = {n / 256}, .in_specs = {spec, spec}, .out_specs = {spec}, .name = "stream_axpy", .backend = backend});
}

TEST(Streams, ScopesNestPerThread) {
  EXPECT_EQ(pl::current_stream(), nullptr);
  int a = 0, b = 0;
  {
    pl::StreamScope s1(&a);
    EXPECT_EQ(pl::current_stream(), &a);
    {
      pl::StreamScope s2(&b);
      EXPECT_EQ(pl::current_stream(), &b);
      std::thread([] { EXPECT_EQ(pl::current_stream(), nullptr); }).join();  // per thread
    }
    EXPECT_EQ(pl::current_stream(), &a);
  }
  EXPECT_EQ(pl::current_stream(), nullptr);
}

// Device routing without GPUs: under the stub driver (bench/stub_driver, STUB_CUDA_DEVICES=2;
// CTest's stub.DeviceRouting runs this test so) the library sees two devices; kernels do not
// run there, so only where calls and their arrays go is checked.
TEST(DevicesStubDriver, CallsGoWhereTheirArgumentsLive) {
  if (!std::getenv("STUB_CUDA_DEVICES")) GTEST_SKIP() << "runs under the stub driver only (ctest -R stub.DeviceRouting)";
  ASSERT_EQ(pl::cuda_device_count(), 2);
  pl::Call k = axpy(1024, pl::Backend::Cuda);
  pl::Array x = pl::Array::full({1024}, 1, pl::f32), y = pl::Array::full({1024}, 2, pl::f32);
  for (int d : {1, 0, 1}) EXPECT_EQ(k(x.to(pl::Device::cuda(d)), y.to(pl::Device::cuda(d))).device(), pl::Device::cuda(d));
  EXPECT_EQ(k(x, y.to(pl::Device::cuda(1))).device(), pl::Device::cuda(1));  // a host argument joins its partner
  EXPECT_EQ(k(x, y).device(), pl::Device::cuda(0));                         // all on the host: cuda:0
  EXPECT_TRUE(pt::throws_error([&] { k(x.to(pl::Device::cuda(0)), y.to(pl::Device::cuda(1))); }, {"stream_axpy", "cuda:0 and cuda:1", "move them to one"}));
  EXPECT_TRUE(pt::throws_error([&] { x.to(pl::Device::cuda(2)); }, {"cuda:2 does not exist", "2 CUDA devices (cuda:0 to cuda:1)"}));
  // a negative index too, on a thread that has made no device current yet (on the H200 this
  // fell through to an allocation's "invalid device context")
  std::thread([] {
    EXPECT_TRUE(pt::throws_error([] { pl::Array(pl::Shape{4}, pl::f32, pl::Device::cuda(-1)); }, {"cuda:-1 does not exist"}));
  }).join();
  pl::synchronize();
}

#ifdef PALLAS_TEST_HAVE_CUDA
namespace cu = pallas::cuda;

struct OwnStream {
  CUstream s = nullptr;
  OwnStream() { cu::check(cu::driver().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "creating a stream"); }
  ~OwnStream() { cu::driver().cuStreamDestroy(s); }
};

// Devices: a device that does not exist is a clear error (naming how many there are); with two
// GPUs, a call runs on the device its arguments live on, and arguments on two devices are an
// error. (Only the first runs on a one-GPU machine; the second says it is skipped.)
TEST(DevicesGpuOnly, ADeviceThatDoesNotExistIsAClearError) {
  if (!pl::cuda_available()) GTEST_SKIP() << "needs a CUDA device";
  int n = pl::cuda_device_count();
  EXPECT_GE(n, 1);
  EXPECT_TRUE(pt::throws_error([&] { pl::Array::zeros({4}, pl::f32).to(pl::Device::cuda(n)); },
                               {"cuda:" + std::to_string(n) + " does not exist", "this machine has " + std::to_string(n) + " CUDA device"}));
  EXPECT_TRUE(pt::throws_error([&] { pl::Array(pl::Shape{4}, pl::f32, pl::Device::cuda(-1)); }, {"cuda:-1 does not exist"}));
  // and device 0 still works after the errors
  std::vector<float> v = axpy(256)(pl::Array::full({256}, 1, pl::f32).to(pl::Device::cuda(0)), pl::Array::full({256}, 2, pl::f32)).to_vector<float>();
  EXPECT_EQ(v[0], 4.f);
}

TEST(DevicesGpuOnly, CallsRunWhereTheirArgumentsLive) {
  if (pl::cuda_device_count() < 2)
    GTEST_SKIP() << "needs 2 CUDA devices; this machine has " << pl::cuda_device_count();
  const int64_t n = 1 << 16;
  pl::Array x = pl::random::normal({n}, pl::f32, 3), y = pl::random::normal({n}, pl::f32, 4);
  pl::Call k = axpy(n);
  std::vector<float> want = axpy(n, pl::Backend::Interpret)(x, y).to_vector<float>();
  for (int d : {1, 0, 1}) {  // the same call on two devices, each with its own module
    pl::Array out = k(x.to(pl::Device::cuda(d)), y.to(pl::Device::cuda(d)));
    EXPECT_EQ(out.device(), pl::Device::cuda(d));
    EXPECT_EQ(out.to_vector<float>(), want);
  }
  pl::Array out = k(x, y.to(pl::Device::cuda(1)));  // a host argument goes to its partner's device
  EXPECT_EQ(out.device(), pl::Device::cuda(1));
  EXPECT_TRUE(pt::throws_error([&] { k(x.to(pl::Device::cuda(0)), y.to(pl::Device::cuda(1))); },
                               {"stream_axpy", "cuda:0 and cuda:1", "move them to one"}));
  pl::synchronize();
}

// Calls, copies and reads on a non-blocking stream: the results are the legacy stream's.
TEST(StreamsGpuOnly, CallsRunOnTheCallersStream) {
  if (!pl::cuda_available()) GTEST_SKIP() << "needs a CUDA device";
  if (!cu::driver().cuStreamCreate) GTEST_SKIP() << "the driver lacks cuStreamCreate";
  const int64_t n = 1 << 20;
  pl::Array x = pl::random::normal({n}, pl::f32, 1).to(pl::Device::cuda(0)), y = pl::random::normal({n}, pl::f32, 2).to(pl::Device::cuda(0));
  std::vector<float> want = axpy(n)(x, y).to_vector<float>();
  OwnStream st;
  pl::StreamScope scope(st.s);
  pl::Call k = axpy(n);
  pl::Array out = k(x, y);
  for (int i = 0; i < 5; ++i) out = k(out, y);  // a chain on the stream, pooled outputs reused in order
  std::vector<float> got = out.to_vector<float>();
  std::vector<float> ref = want;
  std::vector<float> ys = y.to_vector<float>();
  for (int i = 0; i < 5; ++i)
    for (int64_t j = 0; j < n; ++j) ref[j] = 2.f * ref[j] + ys[j];
  for (int64_t j = 0; j < n; j += 997) ASSERT_FLOAT_EQ(got[j], ref[j]) << j;
  pl::BenchResult b = pl::do_bench([&] { k.into({out}, {x, y}); }, {.warmup = 1, .reps = 3});
  EXPECT_GT(b.median_ms, 0.0);
  pl::synchronize();
}

// A call captured into a CUDA graph on the caller's stream and replayed: nothing on the launch
// path synchronises or allocates (outputs given with into()).
TEST(StreamsGpuOnly, CallsAreCapturedIntoGraphsAndReplayed) {
  if (!pl::cuda_available()) GTEST_SKIP() << "needs a CUDA device";
  const cu::Driver& d = cu::driver();
  if (!d.cuStreamBeginCapture || !d.cuGraphInstantiate) GTEST_SKIP() << "the driver lacks graph capture";
  const int64_t n = 1 << 16;
  pl::Array x = pl::random::normal({n}, pl::f32, 3).to(pl::Device::cuda(0)), y = pl::random::normal({n}, pl::f32, 4).to(pl::Device::cuda(0));
  pl::Array out(pl::Shape{n}, pl::f32, pl::Device::cuda(0));
  OwnStream st;
  pl::StreamScope scope(st.s);
  pl::Call k = axpy(n);
  k.into({out}, {x, y});  // compiled and loaded before the capture
  pl::synchronize();
  CUgraph g;
  CUgraphExec ge;
  cu::check(d.cuStreamBeginCapture(st.s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "begin capture");
  k.into({out}, {x, y});
  k.into({x}, {out, y});  // x <- 2 out + y
  cu::check(d.cuStreamEndCapture(st.s, &g), "end capture");
  cu::check(d.cuGraphInstantiate(&ge, g, 0), "instantiate");
  std::vector<float> xs = x.to_vector<float>(), ys = y.to_vector<float>();
  for (int rep = 0; rep < 3; ++rep) cu::check(d.cuGraphLaunch(ge, st.s), "replay");
  pl::synchronize();
  std::vector<float> got = x.to_vector<float>();
  for (int64_t j = 0; j < n; j += 101) {
    float v = xs[j];
    for (int rep = 0; rep < 3; ++rep) v = 2.f * (2.f * v + ys[j]) + ys[j];
    ASSERT_FLOAT_EQ(got[j], v) << j;
  }
  d.cuGraphExecDestroy(ge);
  d.cuGraphDestroy(g);
}
#endif

}  // namespace
