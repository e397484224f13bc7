#include "src/backends/cuda/sm90/matmul_plan.h"

#include "src/backends/cuda/sm90/device_sources.inc"
#include "src/ir/primitive.h"

namespace pallas::cuda::sm90 {
using ir::IndexDim;
using ir::PrimId;

namespace {

struct NoMatch {
  std::string why;
};

void need(bool c, const char* why) {
  if (!c) throw NoMatch{why};
}

const ir::Var* as_var(const ir::Atom& a) { return std::get_if<ir::Var>(&a); }
bool is_lit(const ir::Atom& a, double v) {
  auto* l = std::get_if<ir::Literal>(&a);
  return l && l->as_double() == v;
}
bool same(const ir::Atom& a, const ir::Var& v) {
  auto* x = as_var(a);
  return x && x->id == v.id;
}

// The equation of j that defines var v (or nullptr).
const ir::Eqn* def(const ir::Jaxpr& j, const ir::Atom& a) {
  auto* v = as_var(a);
  if (!v) return nullptr;
  for (auto& e : j.eqns)
    for (auto& o : e.out)
      if (o.id == v->id) return &e;
  return nullptr;
}

// An index map returning exactly (grid index g0 or literal 0, grid index g1 or literal 0).
bool map_is(const core::BlockMapping& b, int d0, int d1) {
  const ir::Jaxpr& j = *b.index_map;
  if (!j.eqns.empty() || j.outvars.size() != 2) return false;
  auto ok = [&](const ir::Atom& a, int g) { return g < 0 ? is_lit(a, 0) : same(a, j.invars[g]); };
  return ok(j.outvars[0], d0) && ok(j.outvars[1], d1);
}

// The load in the body that reads `ref` (a body invar) at [0:rows, ds(i*bk, bk)] (dyn_dim = 1)
// or [ds(i*bk, bk), 0:cols] (dyn_dim = 0); i is the loop index.
void check_load(const ir::Jaxpr& body, const ir::Atom& loaded, const ir::Var& ref, int dyn_dim, int64_t bk) {
  const ir::Eqn* e = def(body, loaded);
  need(e && e->prim->id == PrimId::load, "dot operand is not a load");
  need(same(e->in[0], ref), "dot operand does not load the expected input");
  need(!e->params.get_bool("has_mask"), "masked load");
  const auto& ix = e->params.get<ir::NDIndexer>("idx");
  need(ix.dims.size() == 2, "load is not 2-D");
  const IndexDim& full = ix.dims[1 - dyn_dim];
  const IndexDim& dyn = ix.dims[dyn_dim];
  need(full.kind == IndexDim::Kind::Slice && full.start == 0 && full.stride == 1 &&
           full.size == ref.aval.shape[1 - dyn_dim],
       "load does not take the whole other dimension");
  need(dyn.kind == IndexDim::Kind::DynSlice && dyn.size == bk && dyn.stride == 1, "load is not ds(., bk)");
  const ir::Atom& start = e->in[static_cast<size_t>(e->params.get_int("idx_start") + dyn.operand)];
  const ir::Eqn* m = def(body, start);
  need(m && m->prim->id == PrimId::mul, "ds start is not i * bk");
  bool ok = (same(m->in[0], body.invars[0]) && is_lit(m->in[1], static_cast<double>(bk))) ||
            (same(m->in[1], body.invars[0]) && is_lit(m->in[0], static_cast<double>(bk)));
  need(ok, "ds start is not i * bk");
}

MatmulPlan match(const core::PallasCall& c) {
  const core::GridMapping& g = c.grid;
  need(g.grid.size() == 2 && g.grid[0] > 0 && g.grid[1] > 0, "grid is not 2-D static");
  need(g.prefetch.empty() && g.scratch.empty() && c.aliases.empty(), "prefetch, scratch or aliases");
  need(g.inputs.size() == 2 && g.outputs.size() == 1, "not two inputs and one output");
  const auto &A = g.inputs[0], &B = g.inputs[1], &C = g.outputs[0];
  DType in = A.array.dtype;
  need((in == DType::BF16 || in == DType::F16) && B.array.dtype == in, "inputs are not both bf16 or both f16");
  need(A.array.shape.size() == 2 && B.array.shape.size() == 2 && C.array.shape.size() == 2, "not 2-D");
  int64_t M = A.array.shape[0], K = A.array.shape[1], N = B.array.shape[1];
  need(B.array.shape[0] == K && C.array.shape[0] == M && C.array.shape[1] == N, "shapes do not chain");
  need(A.space == MemorySpace::Default && B.space == MemorySpace::Default && C.space == MemorySpace::Default,
       "memory spaces");
  need(A.block_shape[1] == K && B.block_shape[0] == K, "blocks do not span K");
  need(A.block_shape[0] == C.block_shape[0] && B.block_shape[1] == C.block_shape[1], "blocks do not tile C");
  need(!A.squeezed[0] && !A.squeezed[1] && !B.squeezed[0] && !B.squeezed[1] && !C.squeezed[0] && !C.squeezed[1],
       "squeezed dims");
  need(map_is(A, 0, -1) && map_is(B, -1, 1) && map_is(C, 0, 1), "index maps are not (i,0), (0,j), (i,j)");
  int64_t bm = C.block_shape[0], bn = C.block_shape[1];
  need(g.grid[0] * bm == M && g.grid[1] * bn == N, "grid does not cover C exactly");
  DType out = C.array.dtype;
  need(out == DType::F32 || out == DType::BF16 || out == DType::F16, "output dtype");

  const ir::Jaxpr& k = *c.kernel;
  need(k.invars.size() == 3, "kernel arity");
  // Find: init = zeros, acc = fori_loop(0, steps, init, a, b), [cast], store c[...] = acc
  const ir::Eqn* st = nullptr;
  for (auto& e : k.eqns) {
    if (e.prim->has_effects) {
      need(e.prim->id == PrimId::store && !st, "other effects than one store");
      st = &e;
    }
  }
  need(st && same(st->in[0], k.invars[2]), "no store to the output");
  need(!st->params.get_bool("has_mask"), "masked store");
  for (auto& d : st->params.get<ir::NDIndexer>("idx").dims)
    need(d.kind == IndexDim::Kind::Slice && d.start == 0 && d.stride == 1, "store is not the whole block");
  const ir::Eqn* v = def(k, st->in[1]);
  if (v && v->prim->id == PrimId::convert_element_type) v = def(k, v->in[0]);
  need(v && v->prim->id == PrimId::fori_loop, "stored value is not the loop's result");
  const ir::Eqn& loop = *v;
  need(loop.params.get_int("num_carry") == 1 && loop.in.size() == 5, "loop carries");
  need(is_lit(loop.in[0], 0), "loop does not start at 0");
  auto* hi = std::get_if<ir::Literal>(&loop.in[1]);
  need(hi != nullptr, "loop bound is not static");
  int64_t steps = hi->as_int();
  need(steps > 0 && K % steps == 0, "K is not steps * bk");
  int64_t bk = K / steps;
  const ir::Eqn* init = def(k, loop.in[2]);
  need(init && init->prim->id == PrimId::broadcast_in_dim && is_lit(init->in[0], 0), "init is not zeros");
  need(same(loop.in[3], k.invars[0]) && same(loop.in[4], k.invars[1]), "loop does not read a and b");
  const ir::Jaxpr& body = *loop.params.get<ir::JaxprPtr>("body");
  // body(i, acc, a, b) -> add(acc, dot(load a, load b))
  need(body.outvars.size() == 1, "body results");
  const ir::Eqn* add = def(body, body.outvars[0]);
  need(add && add->prim->id == PrimId::add, "body does not accumulate");
  const ir::Atom* other = same(add->in[0], body.invars[1]) ? &add->in[1]
                          : same(add->in[1], body.invars[1]) ? &add->in[0] : nullptr;
  need(other, "body does not add to the carry");
  const ir::Eqn* dot = def(body, *other);
  need(dot && dot->prim->id == PrimId::dot, "body does not add a dot");
  need(!dot->params.get_bool("trans_a") && !dot->params.get_bool("trans_b"), "transposed dot");
  need(dot->out[0].aval.dtype == DType::F32, "dot does not accumulate in f32");
  need(body.eqns.size() <= 6, "extra work in the body");
  check_load(body, dot->in[0], body.invars[2], 1, bk);
  check_load(body, dot->in[1], body.invars[3], 0, bk);

  MatmulPlan p;
  p.m = M, p.n = N, p.k = K, p.in = in, p.out = out;
  need(M % 128 == 0 && K % 64 == 0 && N % 128 == 0, "shape not a multiple of the 128 x 128 x 64 tile");
  p.bn = N % 256 == 0 ? 256 : 128;
  p.stages = p.bn == 256 ? 4 : 6;
  int stage_bytes = 128 * 64 * 2 + 64 * p.bn * 2;
  p.smem_bytes = p.stages * stage_bytes + 1024;
  p.grid = (M / 128) * (N / p.bn);
  return p;
}

const char* ctype(DType t) { return t == DType::F32 ? "float" : "unsigned short"; }

}  // namespace

const std::string& device_sources() {
  static const std::string s = std::string(kHopperCuh) + "\n" + kGemmSm90Cuh;
  return s;
}

std::optional<MatmulPlan> plan_matmul(const core::PallasCall& call, std::string* why_not) {
  MatmulPlan p;
  try {
    p = match(call);
  } catch (const NoMatch& n) {
    if (why_not) *why_not = n.why;
    return std::nullopt;
  }
  p.entry = "pallas_matmul_sm90";
  std::string store;
  if (p.out == DType::F32) {
    store = "*reinterpret_cast<float2*>(&c[row * N + col]) = make_float2(acc[i], acc[i + 1]);";
  } else {
    const char* cvt = p.out == DType::BF16 ? "cvt.rn.bf16x2.f32" : "cvt.rn.f16x2.f32";
    store = std::string("unsigned packed; asm(\"") + cvt +
            " %0, %2, %1;\" : \"=r\"(packed) : \"f\"(acc[i]), \"f\"(acc[i + 1]));\n"
            "      *reinterpret_cast<unsigned*>(&c[row * N + col]) = packed;";
  }
  int elt = p.in == DType::BF16 ? 0 : 1;
  p.source = device_sources() + "\n" +
             "using namespace pallas_dev;\n"
             "extern \"C\" __global__ void __launch_bounds__(384, 1)\n"
             "pallas_matmul_sm90(const __grid_constant__ TensorMap ta, const __grid_constant__ TensorMap tb, " +
             std::string(ctype(p.out)) + "* c, int M, int N, int K) {\n"
             "  extern __shared__ unsigned char smem_raw[];\n"
             "  __shared__ u64 full[" + std::to_string(p.stages) + "], empty[" + std::to_string(p.stages) + "];\n"
             "  unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);\n"
             "  if (threadIdx.x == 0) {\n"
             "    for (int s = 0; s < " + std::to_string(p.stages) + "; ++s) { mbar_init(&full[s], 1); mbar_init(&empty[s], 2); }\n"
             "    mbar_fence_init();\n"
             "  }\n"
             "  __syncthreads();\n"
             "  int tm, tn;\n"
             "  grouped_tile(blockIdx.x, M / 128, N / " + std::to_string(p.bn) + ", &tm, &tn);\n"
             "  float acc[" + std::to_string(p.bn / 2) + "];\n"
             "  if (gemm_mainloop<" + std::to_string(p.bn) + ", " + std::to_string(p.stages) + ", " + std::to_string(elt) +
             ">(&ta, &tb, smem, full, empty, tm * 128, tn * " + std::to_string(p.bn) + ", K / 64, acc)) {\n"
             "    int cw = threadIdx.x / 128 - 1;\n"
             "#pragma unroll\n"
             "    for (int i = 0; i < " + std::to_string(p.bn / 2) + "; i += 2) {\n"
             "      int r, cc;\n"
             "      acc_coord(i, &r, &cc);\n"
             "      long long row = tm * 128 + 64 * cw + r, col = tn * " + std::to_string(p.bn) + " + cc;\n"
             "      " + store + "\n"
             "    }\n"
             "  }\n"
             "}\n";
  return p;
}

}  // namespace pallas::cuda::sm90
