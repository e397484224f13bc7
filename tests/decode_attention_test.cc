// The library's decode and paged attention (kernels/decode_attention.cc): one query token per
// sequence against a KV cache of sequences of different lengths (0, partial, full), MHA, GQA and
// MQA, one split or several, every float dtype, against a plain f64 reference from the inputs as
// stored; paged caches with shuffled block tables against the same reference on the cache they
// describe; and the errors: bad shapes and options at construction, lengths and block-table
// entries past the cache under pl::checkify (and without it, results that never read outside
// the cache).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <pallas/kernels.h>

#include "tests/test_util.h"
#include "tests/transforms_util.h"

namespace pl = pallas;
using tu::rel_err;
using tu::vec;

namespace {

// o [B, H, D] of q [B, H, D] against keys/values given per (b, kv head, t) by kv(b, g, t, d, is_v).
template <class KV>
std::vector<double> decode_ref(int64_t B, int64_t H, int64_t KVH, int64_t D, const std::vector<int32_t>& len,
                               const std::vector<double>& q, double scale, KV kv) {
  std::vector<double> o(static_cast<size_t>(B * H * D), 0.0);
  const int64_t G = H / KVH;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      int64_t n = len[b];
      if (n == 0) continue;
      std::vector<double> s(n);
      double m = -INFINITY, l = 0;
      for (int64_t t = 0; t < n; ++t) {
        double a = 0;
        for (int64_t d = 0; d < D; ++d) a += q[(b * H + h) * D + d] * kv(b, h / G, t, d, false);
        s[t] = a * scale, m = std::max(m, s[t]);
      }
      for (int64_t t = 0; t < n; ++t) l += (s[t] = std::exp(s[t] - m));
      for (int64_t d = 0; d < D; ++d) {
        double acc = 0;
        for (int64_t t = 0; t < n; ++t) acc += s[t] * kv(b, h / G, t, d, true);
        o[(b * H + h) * D + d] = acc / l;
      }
    }
  return o;
}

double tolerance(pl::DType t) {
  // f32 dots round to tf32 on the GPU (Precision::Default); bf16/f16 round P for the P·V dot
  return t == pl::f64 ? 1e-12 : t == pl::f32 ? 2e-3 : t == pl::bf16 ? 3e-2 : 5e-3;
}

struct Case {
  int64_t B, H, KVH, S, D, block_k, splits;
};

}  // namespace

TEST(DecodeAttention, AgainstReferenceEveryDtypeHeadsAndSplits) {
  for (Case c : {Case{3, 4, 4, 128, 32, 32, 1}, Case{3, 8, 2, 128, 32, 32, 4}, Case{2, 4, 1, 256, 64, 64, 0},
                 Case{4, 16, 2, 128, 16, 16, 8}}) {
    for (pl::DType t : {pl::f32, pl::bf16, pl::f16, pl::f64}) {
      SCOPED_TRACE(std::string(pl::dtype_name(t)) + " B" + std::to_string(c.B) + " H" + std::to_string(c.H) + " KVH" +
                   std::to_string(c.KVH) + " S" + std::to_string(c.S) + " splits " + std::to_string(c.splits));
      pl::Array q = pl::random::normal({c.B, c.H, c.D}, t, 1);
      pl::Array k = pl::random::normal({c.B, c.KVH, c.S, c.D}, t, 2);
      pl::Array v = pl::random::normal({c.B, c.KVH, c.S, c.D}, t, 3);
      // full, empty, one key, and lengths that end inside a block and inside a split
      std::vector<int32_t> lens = {static_cast<int32_t>(c.S), 0, 1, static_cast<int32_t>(c.S / 2 + 3)};
      lens.resize(static_cast<size_t>(c.B));
      pl::kernels::DecodeAttention f =
          pl::kernels::decode_attention(c.B, c.H, c.S, c.D, t, {.kv_heads = c.KVH, .k_splits = c.splits, .block_k = c.block_k});
      pl::Array o = f({pl::Array::from_vector(lens, {c.B}), q, k, v})[0];
      EXPECT_EQ(o.dtype(), t);
      EXPECT_EQ(o.shape(), (pl::Shape{c.B, c.H, c.D}));
      auto kv_k = vec(k), kv_v = vec(v);
      auto want = decode_ref(c.B, c.H, c.KVH, c.D, lens, vec(q), 1 / std::sqrt(double(c.D)),
                             [&](int64_t b, int64_t g, int64_t tok, int64_t d, bool is_v) {
                               size_t i = static_cast<size_t>(((b * c.KVH + g) * c.S + tok) * c.D + d);
                               return is_v ? kv_v[i] : kv_k[i];
                             });
      auto got = vec(o);
      EXPECT_LT(rel_err(got, want), tolerance(t));
      // a sequence of length 0 gives zeros
      if (c.B > 1)
        for (int64_t i = 0; i < c.H * c.D; ++i) ASSERT_EQ(got[static_cast<size_t>(c.H * c.D + i)], 0.0);
    }
  }
}

// The partial call's outputs: each split normalised with its logsumexp; a split past the
// sequence's length holds zeros and -inf.
TEST(DecodeAttention, PartialOutputsPerSplit) {
  const int64_t B = 1, H = 2, S = 64, D = 16;
  pl::kernels::DecodeAttention f = pl::kernels::decode_attention(B, H, S, D, pl::f64, {.k_splits = 4, .block_k = 16});
  pl::Array q = pl::random::normal({B, H, D}, pl::f64, 5), k = pl::random::normal({B, H, S, D}, pl::f64, 6),
            v = pl::random::normal({B, H, S, D}, pl::f64, 7);
  std::vector<pl::Array> parts = f.partial({pl::Array::from_vector(std::vector<int32_t>{20}, {1}), q, k, v});
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].shape(), (pl::Shape{B, H, 4, 1, D}));
  EXPECT_EQ(parts[1].shape(), (pl::Shape{B, H, 4, 1}));
  auto lse = vec(parts[1]), qv = vec(q), kv = vec(k);
  for (int64_t h = 0; h < H; ++h) {
    // split 0 holds keys 0..15, split 1 keys 16..19, splits 2 and 3 none
    for (int64_t sp = 0; sp < 2; ++sp) {
      double m = -INFINITY, l = 0;
      std::vector<double> s;
      for (int64_t t = sp * 16; t < std::min<int64_t>(20, sp * 16 + 16); ++t) {
        double a = 0;
        for (int64_t d = 0; d < D; ++d) a += qv[h * D + d] * kv[(h * S + t) * D + d];
        s.push_back(a / 4), m = std::max(m, a / 4);
      }
      for (double x : s) l += std::exp(x - m);
      EXPECT_NEAR(lse[h * 4 + sp], m + std::log(l), 1e-12);
    }
    EXPECT_EQ(lse[h * 4 + 2], -INFINITY);
    EXPECT_EQ(lse[h * 4 + 3], -INFINITY);
  }
}

TEST(PagedAttention, ShuffledBlockTablesAgainstReference) {
  for (pl::DType t : {pl::f32, pl::bf16, pl::f64}) {
    for (int64_t splits : {1, 2, 0}) {
      SCOPED_TRACE(std::string(pl::dtype_name(t)) + " splits " + std::to_string(splits));
      const int64_t B = 3, H = 8, KVH = 2, D = 32, page = 16, per_seq = 8, total = B * per_seq + 5;
      pl::Array q = pl::random::normal({B, H, D}, t, 11);
      pl::Array kp = pl::random::normal({KVH, total, page, D}, t, 12);
      pl::Array vp = pl::random::normal({KVH, total, page, D}, t, 13);
      // every sequence's pages somewhere in the pool, in no order
      std::vector<int32_t> pool(static_cast<size_t>(total));
      std::iota(pool.begin(), pool.end(), 0);
      std::shuffle(pool.begin(), pool.end(), std::mt19937(7));
      std::vector<int32_t> table(pool.begin(), pool.begin() + B * per_seq);
      std::vector<int32_t> lens = {static_cast<int32_t>(per_seq * page), 37, 0};
      pl::kernels::DecodeAttention f = pl::kernels::paged_attention(B, H, per_seq, page, total, D, t, {.kv_heads = KVH, .k_splits = splits});
      pl::Array o = f({pl::Array::from_vector(lens, {B}), pl::Array::from_vector(table, {B, per_seq}), q, kp, vp})[0];
      auto pk = vec(kp), pv = vec(vp);
      auto want = decode_ref(B, H, KVH, D, lens, vec(q), 1 / std::sqrt(double(D)), [&](int64_t b, int64_t g, int64_t tok, int64_t d, bool is_v) {
        int64_t pg = table[static_cast<size_t>(b * per_seq + tok / page)];
        size_t i = static_cast<size_t>(((g * total + pg) * page + tok % page) * D + d);
        return is_v ? pv[i] : pk[i];
      });
      EXPECT_LT(rel_err(vec(o), want), tolerance(t));
    }
  }
}

// Block-table entries of pages past a sequence's length are never read: garbage there changes
// nothing, and needs no check.
TEST(PagedAttention, EntriesPastTheLengthAreNotRead) {
  const int64_t B = 2, H = 2, D = 16, page = 8, per_seq = 4, total = 8;
  pl::kernels::DecodeAttention f = pl::kernels::paged_attention(B, H, per_seq, page, total, D, pl::f32);
  pl::Array q = pl::random::normal({B, H, D}, pl::f32, 1), kp = pl::random::normal({H, total, page, D}, pl::f32, 2),
            vp = pl::random::normal({H, total, page, D}, pl::f32, 3);
  pl::Array lens = pl::Array::from_vector(std::vector<int32_t>{10, 8}, {B});
  std::vector<int32_t> table = {3, 1, 0, 0, 5, 2, 0, 0};
  pl::Array a = f({lens, pl::Array::from_vector(table, {B, per_seq}), q, kp, vp})[0];
  table = {3, 1, -99, 1 << 30, 5, 1 << 20, -1, 12345};
  auto checked = pl::checkify(f.partial)({lens, pl::Array::from_vector(table, {B, per_seq}), q, kp, vp});
  EXPECT_TRUE(checked.error.ok()) << checked.error.message();
  pl::Array b = f.merge({checked.outputs[0], checked.outputs[1]})[0];
  EXPECT_EQ(vec(a), vec(b));
}

TEST(DecodeAttention, BadInputIsAnErrorNeverAReadOutsideTheCache) {
  const int64_t B = 2, H = 4, S = 64, D = 16;
  pl::kernels::DecodeAttention f = pl::kernels::decode_attention(B, H, S, D, pl::f32, {.kv_heads = 2, .block_k = 16});
  pl::Array q = pl::random::normal({B, H, D}, pl::f32, 1), k = pl::random::normal({B, 2, S, D}, pl::f32, 2),
            v = pl::random::normal({B, 2, S, D}, pl::f32, 3);
  // a length past the cache: reported under checkify, naming the kernel, the sequence and the bound
  auto bad = pl::checkify(f.partial)({pl::Array::from_vector(std::vector<int32_t>{64, 65}, {B}), q, k, v});
  ASSERT_FALSE(bad.error.ok());
  EXPECT_NE(bad.error.message().find("decode_attention: lengths[1] is 65, past the cache's 64 keys"), std::string::npos)
      << bad.error.message();
  auto neg = pl::checkify(f.partial)({pl::Array::from_vector(std::vector<int32_t>{-3, 5}, {B}), q, k, v});
  ASSERT_FALSE(neg.error.ok());
  EXPECT_NE(neg.error.message().find("lengths[0] is -3; a length must be at least 0"), std::string::npos) << neg.error.message();
  // without checkify: clamped to the cache (65 reads the 64 keys there are), finite
  auto clamped = vec(f({pl::Array::from_vector(std::vector<int32_t>{64, 65}, {B}), q, k, v})[0]);
  auto full = vec(f({pl::Array::from_vector(std::vector<int32_t>{64, 64}, {B}), q, k, v})[0]);
  EXPECT_EQ(clamped, full);

  // paged: a block-table entry past the pool or negative
  pl::kernels::DecodeAttention p = pl::kernels::paged_attention(1, 2, 2, 8, 4, D, pl::f32);
  pl::Array pq = pl::random::normal({1, 2, D}, pl::f32, 4), pk = pl::random::normal({2, 4, 8, D}, pl::f32, 5),
            pv = pl::random::normal({2, 4, 8, D}, pl::f32, 6);
  pl::Array len = pl::Array::from_vector(std::vector<int32_t>{16}, {1});
  auto past = pl::checkify(p.partial)({len, pl::Array::from_vector(std::vector<int32_t>{1, 4}, {1, 2}), pq, pk, pv});
  ASSERT_FALSE(past.error.ok());
  EXPECT_NE(past.error.message().find("paged_attention: block_tables[0, 1] is 4, past the cache's 4 pages"), std::string::npos)
      << past.error.message();
  auto negp = pl::checkify(p.partial)({len, pl::Array::from_vector(std::vector<int32_t>{-1, 2}, {1, 2}), pq, pk, pv});
  ASSERT_FALSE(negp.error.ok());
  EXPECT_NE(negp.error.message().find("block_tables[0, 0] is -1; a page index must be at least 0"), std::string::npos)
      << negp.error.message();
  auto long_len = pl::checkify(p.partial)({pl::Array::from_vector(std::vector<int32_t>{17}, {1}),
                                           pl::Array::from_vector(std::vector<int32_t>{0, 1}, {1, 2}), pq, pk, pv});
  ASSERT_FALSE(long_len.error.ok());
  EXPECT_NE(long_len.error.message().find("lengths[0] is 17, past the cache's 16 keys"), std::string::npos) << long_len.error.message();
}

TEST(DecodeAttention, BadArgumentsNameTheKernel) {
  EXPECT_THROW_MSG(pl::kernels::decode_attention(2, 6, 64, 16, pl::f32, {.kv_heads = 4}), "pl::kernels::decode_attention: kv_heads is 4");
  EXPECT_THROW_MSG(pl::kernels::decode_attention(2, 4, 64, 16, pl::i32), "pl::kernels::decode_attention: dtype is i32");
  EXPECT_THROW_MSG(pl::kernels::decode_attention(2, 4, 64, 16, pl::f32, {.k_splits = 3, .block_k = 16}),
                   "pl::kernels::decode_attention: k_splits (3) must divide the key blocks (64 keys / block_k 16 = 4)");
  EXPECT_THROW_MSG(pl::kernels::decode_attention(2, 4, 64, 16, pl::f32, {.k_splits = -1}), "k_splits is -1");
  EXPECT_THROW_MSG(pl::kernels::decode_attention(2, 4, 64, 16, pl::f32, {.block_k = 48}), "seq=64 must be a multiple of block_k (48)");
  EXPECT_THROW_MSG(pl::kernels::paged_attention(2, 4, 4, 16, 0, 16, pl::f32), "pl::kernels::paged_attention: pages_per_seq, page_size and total_pages must be positive");
  EXPECT_THROW_MSG(pl::kernels::paged_attention(2, 4, 4, 16, 8, 16, pl::f32, {.block_k = 32}),
                   "pl::kernels::paged_attention: block_k is 32; the kernel reads one page a step");
  EXPECT_THROW_MSG(pl::kernels::paged_attention(2, 4, 4, 16, 8, 16, pl::f32, {.k_splits = 3}), "k_splits (3) must divide");
  // arrays of other shapes: the call names the kernel and the input
  pl::kernels::DecodeAttention f = pl::kernels::decode_attention(2, 4, 64, 16, pl::f32);
  EXPECT_THROW_MSG(f({pl::Array::from_vector(std::vector<int32_t>{1, 2}, {2}), pl::random::normal({2, 4, 16}, pl::f32, 1),
                      pl::random::normal({2, 4, 32, 16}, pl::f32, 2), pl::random::normal({2, 4, 64, 16}, pl::f32, 3)}),
                   "decode_attention");
}
