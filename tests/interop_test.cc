// Zero-copy interop (issue 9, item 1): views of the caller's memory, DLPack import and export,
// and calls that write their outputs into given arrays. Runs on both backends; the tests named
// GpuOnly need a GPU (skipped, with the reason, without one).
#include <atomic>
#include <cstdlib>
#include <numeric>

#include <pallas/dlpack.h>

#include "tests/test_util.h"

namespace {
namespace pl = pallas;
namespace dl = pallas::dlpack;
using pt::throws_error;

// o = 2 x + y over blocks of 64; `alias`: output 0 aliased to input 0.
pl::Call axpy(int64_t n, bool alias = false) {
  auto spec = pl::BlockSpec({64}, [](pl::Value i) { return pl::idx(i); });
  pl::CallOptions o{.grid = {n / 64}, .in_specs = {spec, spec}, .out_specs = {spec}, .name = "axpy"};
  if (alias) o.input_output_aliases = {{0, 0}};
  return pl::pallas_call([](pl::Ref x, pl::Ref y, pl::Ref out) { out[pl::all] = 2.f * x[pl::all] + y[pl::all]; }, pl::ShapeDtype({n}, pl::f32), o);
}

TEST(Interop, HostViewsAreReadWithoutCopiesAndWrittenByInto) {
  const int64_t n = 256;
  std::vector<float> x(n), y(n), out(n, -1.f);
  std::iota(x.begin(), x.end(), 0.f);
  std::iota(y.begin(), y.end(), 1000.f);
  pl::Array xv = pl::Array::view(x.data(), {n}, pl::f32), yv = pl::Array::view(y.data(), {n}, pl::f32);
  pl::Array ov = pl::Array::view(out.data(), {n}, pl::f32);
  EXPECT_TRUE(xv.is_view());
  EXPECT_EQ(xv.raw_data(), x.data());
  EXPECT_EQ(xv.data(), x.data());
  axpy(n).into({ov}, {xv, yv});
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 2.f * x[i] + y[i]) << i;
  // the returning form reads the same views and leaves the caller's memory alone
  pl::Array r = axpy(n)(xv, yv);
  EXPECT_NE(r.raw_data(), out.data());
  EXPECT_EQ(r.to_vector<float>(), out);
}

TEST(Interop, AliasedOutputIntoItsInputUpdatesItInPlace) {
  const int64_t n = 128;
  std::vector<float> x(n), y(n, 0.5f);
  std::iota(x.begin(), x.end(), 0.f);
  std::vector<float> want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = 2.f * x[i] + y[i];
  pl::Array xv = pl::Array::view(x.data(), {n}, pl::f32);
  axpy(n, /*alias=*/true).into({xv}, {xv, pl::Array::view(y.data(), {n}, pl::f32)});
  EXPECT_EQ(x, want);
}

TEST(Interop, ViewReleaseRunsWhenTheLastArrayGoes) {
  std::vector<int32_t> m(12, 7);
  std::atomic<int> released{0};
  {
    pl::Array a = pl::Array::view(m.data(), {3, 4}, pl::i32, pl::Device::host(), {4, 1}, [&] { ++released; });
    pl::Array b = a.reshape({12});  // shares the view
    a = pl::Array();
    EXPECT_EQ(released.load(), 0);
    EXPECT_EQ(b.to_vector<int32_t>(), m);
  }
  EXPECT_EQ(released.load(), 1);
}

TEST(Interop, ViewErrorsSayWhatToFix) {
  std::vector<float> m(64);
  EXPECT_TRUE(throws_error([&] { pl::Array::view(m.data(), {4, 8}, pl::f32, pl::Device::host(), {1, 4}); },
                           {"Array::view of f32[4,8]", "strides [1,4]", "not row-major contiguous", ".contiguous()"}));
  EXPECT_TRUE(throws_error([&] { pl::Array::view(m.data(), {4, 8}, pl::f32, pl::Device::host(), {8}); }, {"1 strides for 2 dimensions"}));
  EXPECT_TRUE(throws_error([&] { pl::Array::view(reinterpret_cast<char*>(m.data()) + 2, {4}, pl::f32); }, {"not aligned", "4 bytes"}));
  EXPECT_TRUE(throws_error([&] { pl::Array::view(nullptr, {4}, pl::f32); }, {"null data pointer"}));
  EXPECT_TRUE(throws_error([&] { pl::Array::view(m.data(), {-1}, pl::f32); }, {"negative dimension"}));
  // a dimension of size 1 may have any stride (torch gives such views)
  pl::Array ok = pl::Array::view(m.data(), {4, 1, 8}, pl::f32, pl::Device::host(), {8, 99, 1});
  EXPECT_EQ(ok.shape(), (pl::Shape{4, 1, 8}));
}

TEST(Interop, IntoChecksItsOutputs) {
  std::vector<float> x(128), o(64);
  pl::Array xv = pl::Array::view(x.data(), {128}, pl::f32);
  EXPECT_TRUE(throws_error([&] { axpy(128).into({}, {xv, xv}); }, {"kernel 'axpy'", "into() got 0 output arrays for 1 outputs"}));
  EXPECT_TRUE(throws_error([&] { axpy(128).into({pl::Array::view(o.data(), {64}, pl::f32)}, {xv, xv}); },
                           {"kernel 'axpy'", "output 0 is f32[64] but the call returns f32[128]"}));
  EXPECT_TRUE(throws_error([&] { axpy(128).into({pl::Array::view(x.data(), {128}, pl::i32)}, {xv, xv}); }, {"output 0 is i32[128]"}));
}

TEST(Interop, DlpackRoundTripSharesMemoryAndCallsDeleters) {
  pl::Array a = pl::random::normal({6, 10}, pl::f32, 3);
  std::vector<float> want = a.to_vector<float>();
  dl::ManagedTensor* t = dl::to_dlpack(a);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dl_tensor.data, a.raw_data());
  EXPECT_EQ(t->dl_tensor.ndim, 2);
  EXPECT_EQ(t->dl_tensor.shape[0], 6);
  EXPECT_EQ(t->dl_tensor.shape[1], 10);
  EXPECT_EQ(t->dl_tensor.strides[0], 10);
  EXPECT_EQ(t->dl_tensor.strides[1], 1);
  EXPECT_EQ(t->dl_tensor.device.device_type, dl::kCPU);
  EXPECT_EQ(t->dl_tensor.dtype.code, dl::kFloat);
  EXPECT_EQ(t->dl_tensor.dtype.bits, 32);
  void* p = a.raw_data();
  a = pl::Array();  // the exported tensor keeps the storage alive
  pl::Array b = dl::from_dlpack(t);
  EXPECT_EQ(b.raw_data(), p);
  EXPECT_TRUE(b.is_view());
  EXPECT_EQ(b.to_vector<float>(), want);
  // a call reads the imported array in place
  pl::Call twice = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] * 2.f; }, pl::ShapeDtype({6, 10}, pl::f32));
  std::vector<float> got = twice(b).to_vector<float>();
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i] * 2.f);
}

// A producer's tensor, as torch or numpy would hand it over.
struct Produced {
  std::vector<uint8_t> bytes;
  std::vector<int64_t> shape, strides;
  dl::ManagedTensor t{};
  bool* deleted;
};
dl::ManagedTensor* produce(dl::DataType dt, std::vector<int64_t> shape, std::vector<int64_t> strides, bool* deleted, uint64_t offset = 0) {
  auto* p = new Produced;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  p->bytes.assign(static_cast<size_t>(n * dt.bits / 8 + offset), 0);
  for (size_t i = 0; i < p->bytes.size(); ++i) p->bytes[i] = static_cast<uint8_t>(i);
  p->shape = std::move(shape);
  p->strides = std::move(strides);
  p->deleted = deleted;
  p->t.dl_tensor = {p->bytes.data(), {dl::kCPU, 0}, static_cast<int32_t>(p->shape.size()), dt, p->shape.data(),
                    p->strides.empty() ? nullptr : p->strides.data(), offset};
  p->t.manager_ctx = p;
  p->t.deleter = [](dl::ManagedTensor* self) {
    auto* q = static_cast<Produced*>(self->manager_ctx);
    *q->deleted = true;
    delete q;
  };
  return &p->t;
}

TEST(Interop, DlpackImportsEveryDtypeAndTakesOwnership) {
  struct Case {
    dl::DataType dt;
    pl::DType want;
  };
  const Case cases[] = {{{dl::kBool, 8, 1}, pl::bool_},  {{dl::kInt, 8, 1}, pl::i8},     {{dl::kInt, 16, 1}, pl::i16},
                        {{dl::kInt, 32, 1}, pl::i32},    {{dl::kInt, 64, 1}, pl::i64},   {{dl::kUInt, 8, 1}, pl::u8},
                        {{dl::kUInt, 16, 1}, pl::u16},   {{dl::kUInt, 32, 1}, pl::u32},  {{dl::kUInt, 64, 1}, pl::u64},
                        {{dl::kFloat, 16, 1}, pl::f16},  {{dl::kBfloat, 16, 1}, pl::bf16}, {{dl::kFloat, 32, 1}, pl::f32},
                        {{dl::kFloat, 64, 1}, pl::f64}};
  for (const Case& c : cases) {
    bool deleted = false;
    {
      dl::ManagedTensor* t = produce(c.dt, {2, 3}, {}, &deleted, 8);
      pl::Array a = dl::from_dlpack(t);
      EXPECT_EQ(a.dtype(), c.want) << pl::dtype_name(c.want);
      EXPECT_EQ(a.raw_data(), static_cast<char*>(t->dl_tensor.data) + 8);
      // and back: the same dtype code and bits
      dl::ManagedTensor* back = dl::to_dlpack(a);
      EXPECT_EQ(back->dl_tensor.dtype.bits, c.dt.bits);
      EXPECT_EQ(back->dl_tensor.dtype.code, c.dt.code);
      back->deleter(back);
      EXPECT_FALSE(deleted);
    }
    EXPECT_TRUE(deleted) << pl::dtype_name(c.want);
  }
}

TEST(Interop, DlpackErrorsLeaveTheTensorWithTheCaller) {
  bool deleted = false;
  dl::ManagedTensor* t = produce({dl::kFloat, 32, 1}, {4, 8}, {1, 4}, &deleted);
  EXPECT_TRUE(throws_error([&] { dl::from_dlpack(t); }, {"not row-major contiguous"}));
  EXPECT_FALSE(deleted);
  t->deleter(t);
  EXPECT_TRUE(deleted);
  deleted = false;
  t = produce({dl::kFloat, 8, 1}, {4}, {}, &deleted);
  EXPECT_TRUE(throws_error([&] { dl::from_dlpack(t); }, {"unsupported dtype", "code 2 bits 8"}));
  t->dl_tensor.dtype = {dl::kFloat, 32, 4};
  EXPECT_TRUE(throws_error([&] { dl::from_dlpack(t); }, {"vector dtypes"}));
  t->dl_tensor.dtype = {dl::kFloat, 32, 1};
  t->dl_tensor.device = {8, 0};  // Metal
  EXPECT_TRUE(throws_error([&] { dl::from_dlpack(t); }, {"device type 8 is not supported"}));
  t->deleter(t);
  EXPECT_TRUE(throws_error([&] { dl::from_dlpack(nullptr); }, {"null tensor"}));
}

// On the GPU, Call::into writes device views in place: the output is the caller's memory.
TEST(InteropGpuOnly, IntoDeviceViewsWritesInPlace) {
  if (!pl::cuda_available()) GTEST_SKIP() << "needs a CUDA device";
  const int64_t n = 512;
  pl::Array x = pl::random::normal({n}, pl::f32, 1).to(pl::Device::cuda(0));
  pl::Array y = pl::random::normal({n}, pl::f32, 2).to(pl::Device::cuda(0));
  pl::Array mem(pl::Shape{n}, pl::f32, pl::Device::cuda(0));  // stands for a torch tensor's storage
  pl::Array ov = pl::Array::view(mem.raw_data(), {n}, pl::f32, pl::Device::cuda(0));
  pl::Call k = axpy(n);
  k.into({ov}, {pl::Array::view(x.raw_data(), {n}, pl::f32, pl::Device::cuda(0)), y});
  EXPECT_EQ(ov.raw_data(), mem.raw_data());
  std::vector<float> xs = x.to_vector<float>(), ys = y.to_vector<float>(), got = mem.to_vector<float>();
  for (int64_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(got[i], 2.f * xs[i] + ys[i]) << i;
  // aliased in place on the device: x <- 2 x + y with no copy
  axpy(n, true).into({x}, {x, y});
  std::vector<float> x2 = x.to_vector<float>();
  for (int64_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(x2[i], 2.f * xs[i] + ys[i]) << i;
  // a DLPack export of a device array says CUDA and shares the pointer
  dl::ManagedTensor* t = dl::to_dlpack(x);
  EXPECT_EQ(t->dl_tensor.device.device_type, dl::kCUDA);
  EXPECT_EQ(t->dl_tensor.data, x.raw_data());
  pl::Array back = dl::from_dlpack(t);
  EXPECT_EQ(back.device(), pl::Device::cuda(0));
  EXPECT_EQ(back.raw_data(), x.raw_data());
}

}  // namespace
