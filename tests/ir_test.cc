// The IR: a golden test of the printer (the text form is stable), structural hashes (equal
// kernels hash equal, different ones differ), the verifier, and the primitive registry
// (every primitive has abstract eval and an interpreter rule; a missing rule names both).
#include <map>

#include "src/backends/interpret/value.h"
#include "src/core/pallas_call.h"
#include "src/ir/ir.h"
#include "src/ir/primitive.h"
#include "tests/test_util.h"

namespace pt {
namespace {

const pallas::core::PallasCall& traced(const pl::Call& c) { return *c.state()->traced; }

void golden_kernel(pl::Ref x, pl::Ref y, pl::Ref o) {
  pl::Value a = x[pl::all];
  pl::Value b = y(pl::ds(pl::program_id(0) * 4, 4));
  pl::Value c = pl::exp(a) * 2.0 + b;
  pl::Value s = pl::fori_loop(0, 3, c, [](pl::Value i, pl::Value acc) { return acc + i.astype(pl::f32); });
  o[pl::all] = pl::where(s > 0, s, 0.0);
}

pl::Call make_golden(const std::string& name = "golden") {
  return pl::pallas_call(golden_kernel, pl::ShapeDtype({8}, pl::f32),
                         {.grid = {2},
                          .in_specs = {pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i); }), pl::BlockSpec({8}, [](pl::Value) { return pl::idx(0); })},
                          .out_specs = {pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i); })},
                          .name = name});
}

const char* kGoldenKernel =
    "{ lambda ; a:Ref{f32[4]} b:Ref{f32[8]} c:Ref{f32[4]}. let\n"
    "    d:f32[4] = load[idx=[0:4]] a\n"
    "    e:i32[] = program_id[axis=0]\n"
    "    f:i32[] = mul e 4:i32\n"
    "    g:f32[4] = load[idx=[ds(f, 4)]] b f\n"
    "    h:f32[4] = exp d\n"
    "    i:f32[4] = mul h 2.0:f32\n"
    "    j:f32[4] = add i g\n"
    "    k:f32[4] = fori_loop[body=\n"
    "        { lambda ; l:i32[] m:f32[4]. let\n"
    "            n:f32[] = convert_element_type[new_dtype=f32] l\n"
    "            o:f32[4] = add m n\n"
    "          in (o) }, num_carry=1, unroll=1] 0:i32 3:i32 j\n"
    "    p:bool[4] = gt k 0.0:f32\n"
    "    q:f32[4] = broadcast_in_dim[shape=(4,), broadcast_dimensions=()] 0.0:f32\n"
    "    r:f32[4] = select_n p q k\n"
    "    store[idx=[0:4]] c r\n"
    "  in () }";

TEST(IR, PrinterGolden) {
  pl::Call call = make_golden();
  call.trace({pl::ShapeDtype({8}, pl::f32), pl::ShapeDtype({8}, pl::f32)});
  EXPECT_EQ(pallas::ir::to_text(*traced(call).kernel), kGoldenKernel);
  std::string text = call.jaxpr_text();
  EXPECT_THAT(text, HasSubstr("pallas_call kernel 'golden'"));
  EXPECT_THAT(text, HasSubstr("  grid=(2,)\n"));
  EXPECT_THAT(text, HasSubstr("  input 0: f32[8] block=[4]\n    index_map={ lambda ; a:i32[]. let\n  in (a) }"));
  EXPECT_THAT(text, HasSubstr("  input 1: f32[8] block=[8]\n    index_map={ lambda ; a:i32[]. let\n  in (0:i32) }"));
  EXPECT_THAT(text, HasSubstr(std::string("  kernel=") + kGoldenKernel));
}

// Names in the text are assigned in order of appearance, so the text (and its hash) does
// not depend on variable ids: tracing the same kernel again gives the same text.
TEST(IR, TextAndHashStableAcrossTraces) {
  pl::Call a = make_golden(), b = make_golden();
  a.trace({pl::ShapeDtype({8}, pl::f32), pl::ShapeDtype({8}, pl::f32)});
  b.trace({pl::ShapeDtype({8}, pl::f32), pl::ShapeDtype({8}, pl::f32)});
  EXPECT_EQ(a.jaxpr_text(), b.jaxpr_text());
  EXPECT_EQ(traced(a).hash(), traced(b).hash());
  EXPECT_EQ(pallas::ir::structural_hash(*traced(a).kernel), pallas::ir::structural_hash(*traced(b).kernel));
}

// Each eqn keeps the kernel source line of the named op that made it (pl::SourceLocation,
// a defaulted last parameter): the ops a named op binds on its own behalf (the broadcast of
// where's scalar, astype of a ref view's load) take its line; operators and ref accesses take
// theirs from their operands' and indexers' conversions; a loop body's eqns take their own
// lines, not the loop's. Not part of the text or the hash.
int g_dot_line = 0, g_where_line = 0, g_loop_line = 0, g_sum_line = 0, g_astype_line = 0, g_mul_line = 0,
    g_add_line = 0;
void located_kernel(pl::Ref x, pl::Ref y, pl::Ref o) {
  pl::Value a = x.at({pl::all}).astype(pl::f32); g_astype_line = __LINE__;
  pl::Value d = pl::dot(a, y[pl::all]); g_dot_line = __LINE__;
  pl::Value e = d * 2.0f; g_mul_line = __LINE__;  // an operator
  auto body = [](pl::Value, pl::Value c) {
    pl::Value r = pl::sum(c, {1}, true); g_sum_line = __LINE__;
    g_add_line = __LINE__; return r + c;
  };
  pl::Value s = pl::fori_loop(0, 2, e, body); g_loop_line = __LINE__;
  o[pl::all] = pl::where(s > 0, s, 0.0f); g_where_line = __LINE__;
}

TEST(IR, EqnsKeepTheirSourceLines) {
  auto make = [] {
    pl::Call c = pl::pallas_call(located_kernel, pl::ShapeDtype({8, 8}, pl::f32), {.name = "located"});
    c.trace({pl::ShapeDtype({8, 8}, pl::bf16), pl::ShapeDtype({8, 8}, pl::f32)});
    return c;
  };
  pl::Call call = make();
  const pallas::ir::Jaxpr& k = *traced(call).kernel;
  std::map<std::string, std::vector<int>> lines;  // primitive -> lines of its eqns (0: none)
  auto file_ok = [](const pallas::ir::Eqn& e) { return !e.loc.file || std::string(e.loc.file).find("ir_test.cc") != std::string::npos; };
  for (const pallas::ir::Eqn& e : k.eqns) {
    EXPECT_TRUE(file_ok(e)) << e.loc.file;
    lines[e.prim->name].push_back(e.loc.line);
  }
  EXPECT_EQ(lines["load"], (std::vector<int>{g_astype_line, g_dot_line}));  // x's view read by astype; y[all]
  EXPECT_EQ(lines["convert_element_type"], std::vector<int>{g_astype_line});
  EXPECT_EQ(lines["dot"], std::vector<int>{g_dot_line});
  EXPECT_EQ(lines["mul"], std::vector<int>{g_mul_line});
  EXPECT_EQ(lines["store"], std::vector<int>{g_where_line});
  EXPECT_EQ(lines["fori_loop"], std::vector<int>{g_loop_line});
  EXPECT_EQ(lines["broadcast_in_dim"], std::vector<int>{g_where_line});  // where's scalar 0, broadcast
  EXPECT_EQ(lines["select_n"], std::vector<int>{g_where_line});
  EXPECT_EQ(lines["gt"], std::vector<int>{g_where_line});
  const pallas::ir::Eqn* loop = nullptr;
  for (const pallas::ir::Eqn& e : k.eqns)
    if (e.prim->name == "fori_loop") loop = &e;
  ASSERT_NE(loop, nullptr);
  std::map<std::string, std::vector<int>> body_lines;
  for (const pallas::ir::Eqn& e : loop->params.get<pallas::ir::JaxprPtr>("body")->eqns) {
    EXPECT_TRUE(file_ok(e));
    body_lines[e.prim->name].push_back(e.loc.line);
  }
  EXPECT_EQ(body_lines["reduce_sum"], std::vector<int>{g_sum_line});
  EXPECT_EQ(body_lines["add"], std::vector<int>{g_add_line});
  // the same kernel traced again has the same text and hash (the lines are not part of them)
  int dot_line = g_dot_line;
  g_dot_line = 0;
  pl::Call again = make();
  EXPECT_EQ(g_dot_line, dot_line);
  EXPECT_EQ(traced(call).hash(), traced(again).hash());
  // ... and a kernel with the same ops at other lines has the same kernel text and hash
  auto moved = [](pl::Ref x, pl::Ref y, pl::Ref o) {
    pl::Value a = x.at({pl::all}).astype(pl::f32);
    pl::Value e = pl::dot(a, y[pl::all]) * 2.0f;
    pl::Value s = pl::fori_loop(0, 2, e, [](pl::Value, pl::Value c) { return pl::sum(c, {1}, true) + c; });
    o[pl::all] = pl::where(s > 0, s, 0.0f);
  };
  pl::Call other = pl::pallas_call(moved, pl::ShapeDtype({8, 8}, pl::f32), {.name = "located"});
  other.trace({pl::ShapeDtype({8, 8}, pl::bf16), pl::ShapeDtype({8, 8}, pl::f32)});
  EXPECT_EQ(pallas::ir::to_text(*traced(other).kernel), pallas::ir::to_text(k));
  EXPECT_EQ(pallas::ir::structural_hash(*traced(other).kernel), pallas::ir::structural_hash(k));
}

// Equal kernels written at different places hash equal as jaxprs; different kernels,
// shapes or dtypes differ.
TEST(IR, StructuralHash) {
  auto kernel_hash = [](pl::Call c, pl::DType t, int64_t n) {
    c.trace({pl::ShapeDtype({n}, t)});
    return pallas::ir::structural_hash(*traced(c).kernel);
  };
  auto exp1 = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::exp(x[pl::all]); }, pl::ShapeDtype({8}, pl::f32), {});
  auto exp2 = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::exp(x[pl::all]); }, pl::ShapeDtype({8}, pl::f32), {});
  auto log1 = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::log(x[pl::all]); }, pl::ShapeDtype({8}, pl::f32), {});
  auto exp16 = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::exp(x[pl::all]); }, pl::ShapeDtype({8}, pl::f16), {});
  auto exp4 = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::exp(x[pl::all]); }, pl::ShapeDtype({4}, pl::f32), {});
  uint64_t h1 = kernel_hash(exp1, pl::f32, 8);
  EXPECT_EQ(h1, kernel_hash(exp2, pl::f32, 8));
  EXPECT_NE(h1, kernel_hash(log1, pl::f32, 8));
  EXPECT_NE(h1, kernel_hash(exp16, pl::f16, 8));
  EXPECT_NE(h1, kernel_hash(exp4, pl::f32, 4));
  // the call's hash also covers the grid and the block mappings
  auto g1 = make_golden("same"), g2 = make_golden("same");
  g1.trace({pl::ShapeDtype({8}, pl::f32), pl::ShapeDtype({8}, pl::f32)});
  g2.trace({pl::ShapeDtype({16}, pl::f32), pl::ShapeDtype({8}, pl::f32)});
  EXPECT_NE(traced(g1).hash(), traced(g2).hash());
  // literals of different values and params of different values differ
  auto c1 = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] + 1.0; }, pl::ShapeDtype({8}, pl::f32), {});
  auto c2 = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] + 2.0; }, pl::ShapeDtype({8}, pl::f32), {});
  EXPECT_NE(kernel_hash(c1, pl::f32, 8), kernel_hash(c2, pl::f32, 8));
  auto s1 = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::sum(x[pl::all], 0); }, pl::ShapeDtype({8}, pl::f32), {});
  auto s2 = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::sum(x[pl::all], 1); }, pl::ShapeDtype({8}, pl::f32), {});
  s1.trace({pl::ShapeDtype({8, 8}, pl::f32)});
  s2.trace({pl::ShapeDtype({8, 8}, pl::f32)});
  EXPECT_NE(pallas::ir::structural_hash(*traced(s1).kernel), pallas::ir::structural_hash(*traced(s2).kernel));
}

// The verifier re-checks SSA order and every equation's types.
TEST(IR, Verifier) {
  namespace ir = pallas::ir;
  ir::Var x = ir::new_var(ir::Aval::array({4}, pl::f32));
  ir::Var y = ir::new_var(ir::Aval::array({4}, pl::f32));
  ir::Var z = ir::new_var(ir::Aval::array({4}, pl::f32));
  ir::Jaxpr ok;
  ok.invars = {x, y};
  ok.eqns.push_back(ir::Eqn{&ir::prim(ir::PrimId::add), {}, {x, y}, {z}});
  ok.outvars = {z};
  EXPECT_NO_THROW(ir::verify(ok, "kernel 'v'"));

  ir::Jaxpr undefined = ok;
  undefined.invars = {x};  // y is never defined
  EXPECT_TRUE(throws_error([&] { ir::verify(undefined, "kernel 'v'"); }, {"kernel 'v'", "IR verifier", "used before definition", "'add'"}));

  ir::Jaxpr bad_out = ok;
  bad_out.eqns[0].out[0].aval = ir::Aval::array({4}, pl::i32);
  EXPECT_TRUE(throws_error([&] { ir::verify(bad_out, "kernel 'v'"); }, {"kernel 'v'", "IR verifier", "'add' output 0 is i32[4]", "f32[4]"}));

  ir::Jaxpr bad_types = ok;
  bad_types.invars[1] = y = ir::new_var(ir::Aval::array({8}, pl::f32));
  bad_types.eqns[0].in[1] = y;
  EXPECT_TRUE(throws_error([&] { ir::verify(bad_types, "kernel 'v'"); }, {"add", "f32[4]", "f32[8]"}));

  ir::Jaxpr bad_outvar = ok;
  bad_outvar.outvars = {ir::new_var(ir::Aval::array({4}, pl::f32))};
  EXPECT_TRUE(throws_error([&] { ir::verify(bad_outvar, "kernel 'v'"); }, {"used before definition in outputs"}));

  ir::Jaxpr arity = ok;
  arity.eqns[0].out.push_back(ir::new_var(ir::Aval::array({4}, pl::f32)));
  EXPECT_TRUE(throws_error([&] { ir::verify(arity, "kernel 'v'"); }, {"'add' has 2 outputs, abstract eval gives 1"}));
}

// Every primitive is registered with a name and abstract eval, and the interpreter has a
// rule for each (a new primitive without one fails this test, by name).
TEST(IR, RegistryIsComplete) {
  namespace ir = pallas::ir;
  auto all = ir::all_primitives();
  EXPECT_EQ(static_cast<int>(all.size()), ir::kNumPrims);
  for (int k = 0; k < ir::kNumPrims; ++k) {
    auto id = static_cast<ir::PrimId>(k);
    const ir::Primitive& p = ir::prim(id);
    SCOPED_TRACE(p.name);
    EXPECT_EQ(p.id, id);
    EXPECT_FALSE(p.name.empty());
    EXPECT_TRUE(static_cast<bool>(p.abstract_eval));
    EXPECT_EQ(ir::find_primitive(p.name), &p);
    EXPECT_TRUE(pallas::interp::rules().has(id)) << "the interpreter has no rule for '" << p.name << "'";
  }
  EXPECT_EQ(ir::find_primitive("no_such_primitive"), nullptr);
  // effects are marked, so that they are never dropped
  EXPECT_TRUE(ir::prim(ir::PrimId::store).has_effects);
  EXPECT_TRUE(ir::prim(ir::PrimId::atomic_rmw).has_effects);
  EXPECT_TRUE(ir::prim(ir::PrimId::debug_print).has_effects);
  EXPECT_FALSE(ir::prim(ir::PrimId::add).has_effects);
}

TEST(IR, MissingRuleNamesPrimitiveAndTable) {
  namespace ir = pallas::ir;
  ir::RuleTable<int (*)()> t("test backend");
  t.set(ir::PrimId::add, [] { return 1; });
  EXPECT_TRUE(t.has(ir::PrimId::add));
  EXPECT_FALSE(t.has(ir::PrimId::exp));
  EXPECT_EQ(t.get(ir::PrimId::add)(), 1);
  EXPECT_TRUE(throws_error([&] { t.get(ir::PrimId::exp); }, {"no test backend rule for primitive 'exp'"}));
}

// Abstract eval of an op called directly reports the op and the operand types.
TEST(IR, AbstractEvalErrors) {
  namespace ir = pallas::ir;
  const auto& add = ir::prim(ir::PrimId::add);
  EXPECT_TRUE(throws_error([&] { add.abstract_eval({ir::Aval::array({4}, pl::f32)}, {}); }, {"add", "takes 2 operands, got 1"}));
  EXPECT_TRUE(throws_error([&] { add.abstract_eval({ir::Aval::array({4}, pl::f32), ir::Aval::array({4}, pl::i32)}, {}); },
                           {"add", "same dtype", "f32[4]", "i32[4]"}));
  EXPECT_TRUE(throws_error([&] { add.abstract_eval({ir::Aval::ref({4}, pl::f32), ir::Aval::array({4}, pl::f32)}, {}); },
                           {"add", "Ref{f32[4]}", "read it first"}));
  auto out = add.abstract_eval({ir::Aval::array({4}, pl::f16), ir::Aval::array({}, pl::f16, true)}, {});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].str(), "f16[4]");
}

}  // namespace
}  // namespace pt
