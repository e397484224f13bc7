
namespace pt {
namespace {
TEST(ArrayErrors, DeviceArraysWithoutGpu) {
  if (pl::cuda_available()) {
    pl::Array d = pl::Array::from_vector(std::vector<float>{1, 2}).to(pl::Device::cuda());
    EXPECT_EQ(d.to_host().to_vector<float>(), (std::vector<float>{1, 2}));
  } else {
    EXPECT_TRUE(throws_error([] { pl::Array::from_vector(std::vector<float>{1, 2}).to(pl::Device::cuda()); }, {"cuda:0", "no CUDA backend"}));
    EXPECT_TRUE(throws_error([] { pl::Array a({4}, pl::f32, pl::Device::cuda(1)); }, {"cuda:1"}));
  }
  EXPECT_TRUE(throws_error([] { pl::Array().data(); }, {"empty"}));
  EXPECT_TRUE(throws_error([] { pl::Array().to_vector<float>(); }, {"empty"}));
}
}  // namespace
}  // namespace pt
