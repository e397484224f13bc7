// Reductions against references: sum / max / min / prod over one axis, several axes, all
// axes, negative axes and keepdims; argmax / argmin (first index on ties, NaN wins); cumsum.
// Floats accumulate in f32 (f64 for f64); integers wrap.
//
// Tolerances: sums use positive inputs in [0.5, 1.5] (condition number 1), so the f32
// accumulation error over R terms is below R * 2^-24 ~ 1e-6 for R <= 16; 16-bit results add
// one rounding of the output format (tol_for).
#include "tests/test_util.h"

namespace pt {
namespace {

const pl::Shape kShape{4, 6, 8};

// Reference reduction over the axes marked in `red` of a [4,6,8] array.
std::vector<double> ref_reduce(const std::vector<double>& x, std::vector<bool> red, double init,
                               double (*step)(double, double)) {
  std::vector<int64_t> os;
  for (int d = 0; d < 3; ++d)
    if (!red[d]) os.push_back(kShape[d]);
  int64_t on = 1;
  for (auto s : os) on *= s;
  std::vector<double> out(on, init);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 6; ++j)
      for (int k = 0; k < 8; ++k) {
        int64_t idx[3] = {i, j, k}, o = 0;
        for (int d = 0; d < 3; ++d)
          if (!red[d]) o = o * kShape[d] + idx[d];
        out[o] = step(out[o], x[(i * 6 + j) * 8 + k]);
      }
  return out;
}

double nan_max(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }
double nan_min(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); }

struct AxesCase {
  pl::Axes axes;
  std::vector<bool> red;
  const char* name;
};
std::vector<AxesCase> axes_cases() {
  return {{pl::Axes(2), {false, false, true}, "last"},
          {pl::Axes(0), {true, false, false}, "first"},
          {pl::Axes(-2), {false, true, false}, "negative"},
          {pl::Axes({0, 2}), {true, false, true}, "two"},
          {pl::Axes(), {true, true, true}, "all"}};
}
pl::Shape reduced_shape(const std::vector<bool>& red, bool keep) {
  pl::Shape s;
  for (int d = 0; d < 3; ++d)
    if (!red[d]) s.push_back(kShape[d]);
    else if (keep) s.push_back(1);
  return s;
}

using ReduceFn = pl::Value (*)(const pl::Value&, pl::Axes, bool, pl::SourceLocation);  // the located signature of pl::sum etc.

void check_float_reduce(const char* name, ReduceFn fn, double init, double (*step)(double, double), double lo,
                        double hi, bool edges) {
  for (pl::DType t : float_dtypes())
    for (auto& ac : axes_cases())
      for (bool keep : {false, true}) {
        SCOPED_TRACE(std::string(name) + " " + pl::dtype_name(t) + " axes=" + ac.name + (keep ? " keepdims" : ""));
        auto xv = uniform(192, 3, lo, hi);
        if (edges) {  // a NaN in one row, an inf in another, signed zeros
          xv[5] = NAN;
          xv[100] = INFINITY;
          xv[150] = -INFINITY;
          xv[60] = -0.0;
        }
        for (auto& x : xv) x = round_to(x, t);
        pl::Array x = make_array(xv, kShape, t);
        pl::Shape os = reduced_shape(ac.red, keep);
        pl::Axes axes = ac.axes;
        auto call = interp_call([fn, axes, keep](pl::Ref xr, pl::Ref o) {
          pl::Value r = fn(xr[pl::all], axes, keep, pl::SourceLocation::current());
          if (r.shape().empty()) pl::store(o, {}, r);
          else o[pl::all] = r;
        }, {pl::ShapeDtype(os, t)});
        pl::Array out = call({x})[0];
        ASSERT_EQ(out.shape(), os);
        auto want = ref_reduce(xv, ac.red, init, step);
        for (auto& w : want) w = round_to(w, t);
        EXPECT_TRUE(close(to_doubles(out), want, t == pl::f64 ? 1e-14 : std::max(tol_for(t), 2e-6), false));
      }
}

TEST(Reduce, SumFloat) { check_float_reduce("sum", pl::sum, 0.0, [](double a, double b) { return a + b; }, 0.5, 1.5, false); }
TEST(Reduce, ProdFloat) { check_float_reduce("prod", pl::prod, 1.0, [](double a, double b) { return a * b; }, 0.8, 1.25, false); }
TEST(Reduce, MaxFloatWithNaN) { check_float_reduce("max", pl::max, -INFINITY, nan_max, -5, 5, true); }
TEST(Reduce, MinFloatWithNaN) { check_float_reduce("min", pl::min, INFINITY, nan_min, -5, 5, true); }

// Integer reductions are exact; sums and products wrap.
template <class T>
void check_int_reduce() {
  SCOPED_TRACE(pl::dtype_name(pl::dtype_of<T>()));
  auto xv = random_ints<T>(192, 4);
  pl::Array x = pl::Array::from_vector(xv, kShape);
  for (auto& ac : axes_cases()) {
    SCOPED_TRACE(ac.name);
    pl::Shape os = reduced_shape(ac.red, false);
    pl::Axes axes = ac.axes;
    auto call = interp_call(
        [axes](pl::Ref xr, pl::Ref o1, pl::Ref o2, pl::Ref o3, pl::Ref o4) {
          pl::Value v = xr[pl::all];
          pl::Value r[4] = {pl::sum(v, axes), pl::max(v, axes), pl::min(v, axes), pl::prod(v, axes)};
          pl::Ref os[4] = {o1, o2, o3, o4};
          for (int k = 0; k < 4; ++k) {
            if (r[k].shape().empty()) pl::store(os[k], {}, r[k]);
            else os[k][pl::all] = r[k];
          }
        },
        std::vector<pl::ShapeDtype>(4, pl::ShapeDtype(os, pl::dtype_of<T>())));
    auto outs = call({x});
    // references in T with wrapping (through uint64)
    int64_t on = pl::shape_size(os);
    std::vector<T> s(on, 0), mx(on, std::numeric_limits<T>::lowest()), mn(on, std::numeric_limits<T>::max()), p(on, 1);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 6; ++j)
        for (int k = 0; k < 8; ++k) {
          int64_t idx[3] = {i, j, k}, o = 0;
          for (int d = 0; d < 3; ++d)
            if (!ac.red[d]) o = o * kShape[d] + idx[d];
          T v = xv[(i * 6 + j) * 8 + k];
          s[o] = static_cast<T>(static_cast<uint64_t>(s[o]) + static_cast<uint64_t>(v));
          p[o] = static_cast<T>(static_cast<uint64_t>(p[o]) * static_cast<uint64_t>(v));
          mx[o] = std::max(mx[o], v);
          mn[o] = std::min(mn[o], v);
        }
    EXPECT_TRUE(equal(outs[0].template to_vector<T>(), s));
    EXPECT_TRUE(equal(outs[1].template to_vector<T>(), mx));
    EXPECT_TRUE(equal(outs[2].template to_vector<T>(), mn));
    EXPECT_TRUE(equal(outs[3].template to_vector<T>(), p));
  }
}
TEST(Reduce, Integers) {
  check_int_reduce<int8_t>();
  check_int_reduce<uint8_t>();
  check_int_reduce<int16_t>();
  check_int_reduce<int32_t>();
  check_int_reduce<uint32_t>();
  check_int_reduce<int64_t>();
  check_int_reduce<uint64_t>();
}

// Reductions over the leading axes of wide tiles (a block's column sums): on the GPU these take
// the paths that combine in registers (rows a multiple of the layout's repeat), or by shuffles
// and a few partials per column (a repeat holds whole rows), or the general one; the shapes pick
// each, for several warps counts, with a ragged last repeat ([3, 64]). Integer-valued inputs keep
// f32 sums exact, so the only error is the output format's rounding.
TEST(Reduce, LeadingAxesOfWideTiles) {
  struct Case {
    pl::Shape shape;
    pl::Axes axes;
    int warps;
  };
  for (const Case& c : {Case{{64, 512}, pl::Axes(0), 4}, Case{{256, 32}, pl::Axes(0), 8}, Case{{3, 64}, pl::Axes(0), 4},
                        Case{{8, 4, 128}, pl::Axes({0, 1}), 4}, Case{{40, 24}, pl::Axes(0), 3}, Case{{16, 48}, pl::Axes(0), 4}})
    for (pl::DType t : {pl::f32, pl::bf16, pl::i32, pl::i8})
      for (bool keep : {false, true}) {
        int64_t n = 1, C = c.shape.back(), R;
        for (auto d : c.shape) n *= d;
        R = n / C;
        SCOPED_TRACE(pl::dtype_name(t) + std::string(" n=") + std::to_string(n) + " C=" + std::to_string(C) + " warps=" + std::to_string(c.warps) +
                     (keep ? " keepdims" : ""));
        auto xv = uniform(static_cast<size_t>(n), 11, -2.5, 2.5);
        for (auto& x : xv) x = std::round(x);
        pl::Shape os;
        for (size_t d = 0; d < c.shape.size(); ++d)
          if (d + 1 == c.shape.size()) os.push_back(C);
          else if (keep && (d == 0 || c.shape.size() == 3)) os.push_back(1);
        std::vector<double> sum(C, 0), mx(C, -1e9);
        for (int64_t r = 0; r < R; ++r)
          for (int64_t j = 0; j < C; ++j) sum[j] += xv[r * C + j], mx[j] = std::max(mx[j], xv[r * C + j]);
        if (t == pl::i8)
          for (auto& s : sum) s = static_cast<double>(static_cast<int8_t>(static_cast<int64_t>(s)));  // wraps
        for (auto& s : sum) s = round_to(s, t);
        pl::Axes axes = c.axes;
        auto call = pl::pallas_call(
            [axes, keep](pl::Ref xr, pl::Ref s, pl::Ref m) {
              s[pl::all] = pl::sum(xr[pl::all], axes, keep);
              m[pl::all] = pl::max(xr[pl::all], axes, keep);
            },
            {pl::ShapeDtype(os, t), pl::ShapeDtype(os, t)}, {.name = "column_reduce", .compiler_params = {.num_warps = c.warps}});
        auto outs = call({make_array(xv, c.shape, t)});
        EXPECT_TRUE(close(to_doubles(outs[0]), sum, 0, false));
        EXPECT_TRUE(close(to_doubles(outs[1]), mx, 0, false));
      }
}

// argmax / argmin over the rows of wide and narrow tiles: on the GPU (value, index) pairs fold
// in registers, by shuffles and through a few partials per row, in any order, so ties (few
// distinct values) and NaNs (the first wins) check that the order does not show.
TEST(Reduce, ArgmaxArgminOfWideRows) {
  struct Case {
    int64_t R, C;
    int warps;
  };
  for (const Case& c : {Case{8, 4096, 8}, Case{4, 1024, 4}, Case{64, 16, 4}, Case{16, 32, 8}, Case{5, 1000, 4}, Case{3, 256, 4}})
    for (pl::DType t : {pl::f32, pl::bf16, pl::i32}) {
      SCOPED_TRACE(pl::dtype_name(t) + std::string(" ") + std::to_string(c.R) + "x" + std::to_string(c.C) + " warps=" + std::to_string(c.warps));
      auto xv = uniform(static_cast<size_t>(c.R * c.C), 5, 0, 40);
      for (auto& x : xv) x = std::floor(x);  // many ties
      if (pl::is_float(t))
        for (int64_t r = 1; r < c.R; r += 3) xv[r * c.C + (r * 7) % c.C] = NAN, xv[r * c.C + c.C - 1] = NAN;
      pl::Array x = make_array(xv, {c.R, c.C}, t);
      auto call = pl::pallas_call(
          [](pl::Ref xr, pl::Ref amax, pl::Ref amin) {
            amax[pl::all] = pl::argmax(xr[pl::all], 1);
            amin[pl::all] = pl::argmin(xr[pl::all], -1);
          },
          {pl::ShapeDtype({c.R}, pl::i32), pl::ShapeDtype({c.R}, pl::i32)}, {.name = "row_arg", .compiler_params = {.num_warps = c.warps}});
      auto outs = call({x});
      auto o1 = outs[0].to_vector<int32_t>(), o2 = outs[1].to_vector<int32_t>();
      for (int64_t r = 0; r < c.R; ++r) {
        int64_t bmax = 0, bmin = 0;
        for (int64_t k = 1; k < c.C; ++k) {
          double v = xv[r * c.C + k], vmax = xv[r * c.C + bmax], vmin = xv[r * c.C + bmin];
          if (!std::isnan(vmax) && (std::isnan(v) || v > vmax)) bmax = k;
          if (!std::isnan(vmin) && (std::isnan(v) || v < vmin)) bmin = k;
        }
        EXPECT_EQ(o1[static_cast<size_t>(r)], bmax) << "row " << r;
        EXPECT_EQ(o2[static_cast<size_t>(r)], bmin) << "row " << r;
      }
    }
}

// argmax / argmin of one element (found by the fuzzer: the rows path took the one-element
// value, held as a scalar, for an array of slots).
TEST(Reduce, ArgOfOneElement) {
  auto call = interp_call(
      [](pl::Ref x, pl::Ref y, pl::Ref a, pl::Ref b) {
        pl::store(a, {}, pl::argmin(x[pl::all], 0));
        b[pl::all] = pl::argmax(y[pl::all], 1);
      },
      {pl::ShapeDtype({}, pl::i32), pl::ShapeDtype({1}, pl::i32)});
  auto outs = call({make_array({2.5}, {1}, pl::f32), make_array({-1.0}, {1, 1}, pl::f32)});
  EXPECT_EQ(outs[0].to_vector<int32_t>(), std::vector<int32_t>{0});
  EXPECT_EQ(outs[1].to_vector<int32_t>(), std::vector<int32_t>{0});
}

// max / min of bools are any / all.
TEST(Reduce, BoolMaxMin) {
  std::vector<bool> b(32, false);
  b[3] = true;  // row 0 has one true
  for (int k = 16; k < 32; ++k) b[k] = true;  // row 2, 3 all true
  auto call = interp_call(
      [](pl::Ref xr, pl::Ref any, pl::Ref all) {
        any[pl::all] = pl::max(xr[pl::all], 1);
        all[pl::all] = pl::min(xr[pl::all], 1);
      },
      {pl::ShapeDtype({4}, pl::bool_), pl::ShapeDtype({4}, pl::bool_)});
  auto outs = call({pl::Array::from_vector(b, {4, 8})});
  EXPECT_EQ(outs[0].to_vector<bool>(), (std::vector<bool>{true, false, true, true}));
  EXPECT_EQ(outs[1].to_vector<bool>(), (std::vector<bool>{false, false, true, true}));
}

// argmax / argmin: the first index of the extreme; a NaN counts as the extreme (first NaN).
TEST(Reduce, ArgmaxArgmin) {
  for (pl::DType t : {pl::f32, pl::f16, pl::bf16, pl::f64, pl::i32, pl::u8, pl::i64}) {
    SCOPED_TRACE(pl::dtype_name(t));
    std::vector<double> xv;
    for (int k = 0; k < 48; ++k) xv.push_back(static_cast<double>((k * 37) % 23));  // values 0..22 with ties
    if (pl::is_float(t)) {
      xv[9] = NAN;   // row 1 (cols 8..15): NaN at col 1
      xv[13] = NAN;  // second NaN in the row: the first wins
      xv[40] = -INFINITY;
    }
    pl::Array x = make_array(xv, {6, 8}, t);
    auto call = interp_call(
        [](pl::Ref xr, pl::Ref a1, pl::Ref a2, pl::Ref a3, pl::Ref a4) {
          pl::Value v = xr[pl::all];
          a1[pl::all] = pl::argmax(v, 1);
          a2[pl::all] = pl::argmin(v, -1);
          a3[pl::all] = pl::argmax(v, 0);
          a4[pl::all] = pl::argmin(v, 1, /*keepdims=*/true);
        },
        {pl::ShapeDtype({6}, pl::i32), pl::ShapeDtype({6}, pl::i32), pl::ShapeDtype({8}, pl::i32),
         pl::ShapeDtype({6, 1}, pl::i32)});
    auto outs = call({x});
    auto arg = [&](bool mx, bool rows, int line) {
      int n = rows ? 8 : 6, best = -1;
      double bv = 0;
      for (int k = 0; k < n; ++k) {
        double v = rows ? xv[line * 8 + k] : xv[k * 8 + line];
        if (best < 0) { best = k, bv = v; continue; }
        if (std::isnan(bv)) break;
        if (std::isnan(v) || (mx ? v > bv : v < bv)) best = k, bv = v;
      }
      return best;
    };
    auto o1 = outs[0].to_vector<int32_t>(), o2 = outs[1].to_vector<int32_t>(), o3 = outs[2].to_vector<int32_t>();
    auto o4 = outs[3].to_vector<int32_t>();
    for (int r = 0; r < 6; ++r) {
      EXPECT_EQ(o1[r], arg(true, true, r)) << "row " << r;
      EXPECT_EQ(o2[r], arg(false, true, r)) << "row " << r;
      EXPECT_EQ(o4[r], arg(false, true, r)) << "row " << r;
    }
    for (int c = 0; c < 8; ++c) EXPECT_EQ(o3[c], arg(true, false, c)) << "col " << c;
    if (pl::is_float(t)) EXPECT_EQ(o1[1], 1);  // the first NaN
  }
}

// cumsum along each axis; integers wrap, floats accumulate in f32.
TEST(Reduce, Cumsum) {
  for (pl::DType t : {pl::f32, pl::f16, pl::i32, pl::i8, pl::f64}) {
    for (int axis : {0, 1, -1}) {
      SCOPED_TRACE(std::string(pl::dtype_name(t)) + " axis " + std::to_string(axis));
      std::vector<double> xv = pl::is_float(t) ? uniform(48, 6, 0.5, 1.5) : std::vector<double>();
      if (!pl::is_float(t))
        for (int k = 0; k < 48; ++k) xv.push_back((k * 53) % 120 - 20);  // i8 sums wrap
      for (auto& x : xv) x = round_to(x, pl::is_float(t) ? t : pl::f64);
      pl::Array x = make_array(xv, {6, 8}, t);
      auto call = interp_call([axis](pl::Ref xr, pl::Ref o) { o[pl::all] = pl::cumsum(xr[pl::all], axis); },
                              {pl::ShapeDtype({6, 8}, t)});
      auto got = to_doubles(call({x})[0]);
      int a = axis < 0 ? axis + 2 : axis;
      std::vector<double> want(48);
      for (int i = 0; i < 6; ++i)
        for (int j = 0; j < 8; ++j) {
          double s = 0;
          for (int k = 0; k <= (a == 0 ? i : j); ++k) s += a == 0 ? xv[k * 8 + j] : xv[i * 8 + k];
          if (t == pl::i8) s = static_cast<double>(static_cast<int8_t>(static_cast<int64_t>(s)));
          want[i * 8 + j] = pl::is_float(t) ? round_to(s, t) : s;
        }
      if (pl::is_float(t)) EXPECT_TRUE(close(got, want, std::max(tol_for(t), 2e-6), false));
      else EXPECT_EQ(got, want);
    }
  }
}

}  // namespace
}  // namespace pt
