// The launch path (src/backends/cuda/runner.cc): a call binds its compiled kernel and launch
// layout on its first run and reuses them. Repeated calls must still do everything per call
// that depends on the arguments: private copies of inputs the kernel writes, aliased inputs
// copied into outputs, outputs written where into() says, dynamic bounds read afresh.
// In the gpu half these run on the device; in the interpret half they check the same results.
#include "src/core/pallas_call.h"
#include "tests/test_util.h"

#include <thread>

namespace pt {
namespace {

struct Marker final : pl::core::BoundState {
  explicit Marker(int* alive) : alive(alive) { ++*alive; }
  ~Marker() override { --*alive; }
  int* alive;
};

// The bound state belongs to the PallasCall it was made for: copies start without it (they
// may be changed before they run), assignment drops it, the first install wins.
TEST(LaunchPath, BoundSlotIsNotCopied) {
  int alive = 0;
  pl::core::PallasCall a;
  EXPECT_EQ(a.bound.get(), nullptr);
  const pl::core::BoundState* first = a.bound.install(std::make_unique<Marker>(&alive));
  EXPECT_EQ(a.bound.get(), first);
  EXPECT_EQ(a.bound.install(std::make_unique<Marker>(&alive)), first) << "a second install keeps the first";
  EXPECT_EQ(alive, 1);
  pl::core::PallasCall b = a;
  EXPECT_EQ(b.bound.get(), nullptr);
  b.bound.install(std::make_unique<Marker>(&alive));
  EXPECT_EQ(alive, 2);
  b = a;
  EXPECT_EQ(b.bound.get(), nullptr);
  EXPECT_EQ(alive, 1);
  { pl::core::PallasCall moved = std::move(a); EXPECT_EQ(moved.bound.get(), nullptr); }
  a = pl::core::PallasCall{};
  EXPECT_EQ(alive, 0);
}

pl::Device where() { return pl::cuda_available() ? pl::Device::cuda(0) : pl::Device::host(); }

// A kernel writing its input ref, called again and again in each form: the caller's array
// never changes, and each call sees the caller's values.
TEST(LaunchPath, RepeatedCallsCopyWrittenInputsEachTime) {
  std::vector<float> xs{1, 2, 3, 4};
  pl::Array x = pl::Array::from_vector(xs).to(where());
  auto call = pl::pallas_call(
      [](pl::Ref xr, pl::Ref o) {
        xr[pl::all] = xr[pl::all] * 10.0;
        o[pl::all] = xr[pl::all] + 1.0;
      },
      pl::ShapeDtype({4}, pl::f32), {.name = "writes_input"});
  pl::Array out(pl::Shape{4}, pl::f32, where());
  pl::Array host_out(pl::Shape{4}, pl::f32);
  for (int rep = 0; rep < 3; ++rep) {
    SCOPED_TRACE(rep);
    EXPECT_EQ(call(x).to_vector<float>(), (std::vector<float>{11, 21, 31, 41}));
    call.into({out}, {x});
    EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{11, 21, 31, 41}));
    call.into({host_out}, {x});  // a host output: made on the device, copied back
    EXPECT_EQ(host_out.to_vector<float>(), (std::vector<float>{11, 21, 31, 41}));
    EXPECT_EQ(x.to_vector<float>(), xs);
  }
}

// An aliased output, called repeatedly with different arrays: each call copies that call's
// input, or updates it in place when into() is given the input itself.
TEST(LaunchPath, RepeatedAliasedCalls) {
  auto call = pl::pallas_call(
      [](pl::Ref xr, pl::Ref yr, pl::Ref o) { pl::when(pl::program_id(0) == 0, [&] { o[pl::all] = xr[pl::all] + yr[pl::all]; }); },
      pl::ShapeDtype({2, 4}, pl::f32),
      {.grid = {2},
       .in_specs = {pl::BlockSpec({1, 4}, [](pl::Value i) { return pl::idx(i, 0); }),
                    pl::BlockSpec({1, 4}, [](pl::Value i) { return pl::idx(i, 0); })},
       .out_specs = {pl::BlockSpec({1, 4}, [](pl::Value i) { return pl::idx(i, 0); })},
       .input_output_aliases = {{1, 0}},
       .name = "alias_again"});
  pl::Array x = pl::Array::from_vector(std::vector<float>(8, 1.f), {2, 4}).to(where());
  for (int rep = 0; rep < 3; ++rep) {
    SCOPED_TRACE(rep);
    float v = static_cast<float>(10 * (rep + 1));
    pl::Array y = pl::Array::from_vector(std::vector<float>(8, v), {2, 4}).to(where());
    auto o = call(x, y).to_vector<float>();
    for (int k = 0; k < 8; ++k) EXPECT_EQ(o[k], k < 4 ? v + 1 : v);
    EXPECT_EQ(y.to_vector<float>(), std::vector<float>(8, v)) << "the caller's input is not changed";
    call.into({y}, {x, y});  // in place
    auto yi = y.to_vector<float>();
    for (int k = 0; k < 8; ++k) EXPECT_EQ(yi[k], k < 4 ? v + 1 : v);
  }
}

// One call from several threads at once, first run included, in both forms.
TEST(LaunchPath, OneCallFromThreads) {
  std::vector<float> xs(128);
  for (int k = 0; k < 128; ++k) xs[k] = static_cast<float>(k);
  pl::Array x = pl::Array::from_vector(xs).to(where());
  auto call = pl::pallas_call([](pl::Ref xr, pl::Ref o) { o[pl::all] = xr[pl::all] + 1.0; }, pl::ShapeDtype({128}, pl::f32),
                              {.name = "threads"});
  std::vector<int> bad(4, 0);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      pl::Array out(pl::Shape{128}, pl::f32, where());
      for (int rep = 0; rep < 20; ++rep) {
        auto a = call(x).to_vector<float>();
        call.into({out}, {x});
        auto b = out.to_vector<float>();
        for (int k = 0; k < 128; ++k) bad[t] += (a[k] != xs[k] + 1) + (b[k] != xs[k] + 1);
      }
    });
  for (auto& th : ts) th.join();
  EXPECT_EQ(bad, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace pt
