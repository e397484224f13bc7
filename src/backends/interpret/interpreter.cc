// The interpreter's grid loop: index maps per program, blocks in and out, programs in
// parallel where their output blocks cannot overlap.
//
// Blocks that lie inside their array are passed to the kernel as strided views (no copy);
// blocks that overhang are copied into a padded buffer (poison outside the array) and only
// their in-bounds part is written back. Programs that write a common block (revisited
// outputs, accumulation over a grid axis, atomics on a shared output) are put in one group
// and run in row-major order on one thread; groups run on the process-wide thread pool.
//
// Groups: programs that differ only along sequential axes share a group (as on the GPU,
// where they loop in one CUDA block), and so do programs along any axis that some written
// operand's index map ignores. Index maps that compute their block indices are evaluated for
// every program first and programs sharing a written block joined (up to kMaxJoinPrograms
// programs; beyond that, or when the kernel prints, the grid runs in row-major order on one
// thread). Nothing is stored per program otherwise: index maps run as each program starts.
#include <algorithm>
#include <numeric>
#include <unordered_map>

#include "src/backends/interpret/checks.h"
#include "src/backends/interpret/interpreter.h"
#include "src/backends/interpret/strided.h"
#include "src/backends/interpret/thread_pool.h"
#include "src/ir/dependence.h"

namespace pallas::interp {

void CallRuntime::record_failure(int64_t linear_pid, const std::vector<int64_t>& pid, const std::string& msg) {
  std::lock_guard<std::mutex> g(check_mutex);
  if (failed && linear_pid >= failed_program) return;
  failed = true;
  failed_program = linear_pid;
  failed_program_id = pid;
  message = msg;
}

namespace {

// Compiled programs are cached per jaxpr (the jaxpr is kept alive by the program).
std::shared_ptr<Program> compiled(const ir::JaxprPtr& j) {
  static std::mutex mu;
  static std::unordered_map<const ir::Jaxpr*, std::shared_ptr<Program>> cache;
  std::lock_guard<std::mutex> g(mu);
  auto it = cache.find(j.get());
  if (it != cache.end()) return it->second;
  auto p = compile(j);
  cache[j.get()] = p;
  return p;
}

// One arena per thread (the pool's workers and callers), reused across calls; every user
// resets it to where it found it.
Arena& thread_arena() {
  thread_local Arena a;
  return a;
}

// Resets an arena to where it was, also when an exception leaves the scope.
struct ArenaScope {
  Arena& arena;
  Arena::Mark mark;
  explicit ArenaScope(Arena& a) : arena(a), mark(a.mark()) {}
  ~ArenaScope() { arena.reset(mark); }
};

constexpr int64_t kMaxInterpretPrograms = int64_t{1} << 32;
constexpr int64_t kMaxJoinPrograms = int64_t{1} << 22;

struct Operand {
  const core::BlockMapping* bm = nullptr;
  Array array;  // the storage the kernel's ref points into
  bool written = false;
  // The index map: read off directly when its results are grid indices or constants.
  bool direct = false;
  std::vector<int> src;  // per block dim: the grid axis it is, or -1 for the constant
  std::vector<int64_t> cst;
  std::shared_ptr<Program> map;
};

int find(std::vector<int64_t>& parent, int64_t x) {
  while (parent[x] != x) {
    parent[x] = parent[parent[x]];
    x = parent[x];
  }
  return static_cast<int>(x);
}

void prepare_index_map(Operand& op, size_t g) {
  const ir::Jaxpr& j = *op.bm->index_map;
  size_t rank = j.outvars.size();
  op.direct = j.eqns.empty();
  op.src.assign(rank, -1);
  op.cst.assign(rank, 0);
  if (op.direct)
    for (size_t d = 0; d < rank; ++d) {
      if (auto* l = std::get_if<ir::Literal>(&j.outvars[d])) {
        op.cst[d] = l->i;
      } else {
        int64_t id = std::get<ir::Var>(j.outvars[d]).id;
        for (size_t k = 0; k < g; ++k)
          if (j.invars[k].id == id) op.src[d] = static_cast<int>(k);
        if (op.src[d] < 0) op.direct = false;
      }
    }
  if (!op.direct) op.map = compiled(op.bm->index_map);
}

// The block indices of op for the program at pid (one per array dim, into out).
void eval_index_map(const Operand& op, const int64_t* pid, const std::vector<int64_t>& grid,
                    const std::vector<Val>& prefetch_refs, Arena& arena, CallRuntime& rt, int64_t* out) {
  size_t rank = op.src.size(), g = grid.size();
  if (op.direct) {
    for (size_t d = 0; d < rank; ++d) out[d] = op.src[d] >= 0 ? pid[op.src[d]] : op.cst[d];
    return;
  }
  ArenaScope scope(arena);
  size_t nargs = g + prefetch_refs.size();
  Val* args = static_cast<Val*>(arena.alloc(sizeof(Val) * (nargs + rank)));
  Val* outs = args + nargs;
  for (size_t k = 0; k < nargs + rank; ++k) new (args + k) Val();
  int32_t* pid32 = static_cast<int32_t*>(arena.alloc(sizeof(int32_t) * std::max<size_t>(g, 1)));
  for (size_t k = 0; k < g; ++k) {
    pid32[k] = static_cast<int32_t>(pid[k]);
    args[k].dtype = DType::I32;
    args[k].data = &pid32[k];
  }
  for (size_t k = 0; k < prefetch_refs.size(); ++k) args[g + k] = prefetch_refs[k];
  Ctx ctx{&arena, pid, grid.data(), static_cast<int>(g), &rt};
  run(*op.map, args, outs, ctx);
  for (size_t d = 0; d < rank; ++d) out[d] = *outs[d].as<int32_t>();
}

// A ref Val for an operand's block: a view when the block is inside the array, else a padded
// copy (the block start is kept for the write-back).
struct BlockRef {
  Val ref;
  bool padded = false;
  Dims start;  // element start of the block, per array dim
};

BlockRef block_ref(const Operand& op, const int64_t* bidx, Arena& arena) {
  const core::BlockMapping& bm = *op.bm;
  const Shape& ash = bm.array.shape;
  int rank = static_cast<int>(ash.size());
  DType t = bm.array.dtype;
  size_t w = itemsize(t);
  Dims astr = contiguous_strides(Dims(ash));
  BlockRef br;
  br.start.n = static_cast<int8_t>(rank);
  bool inside = true;
  int64_t off = 0;
  for (int d = 0; d < rank; ++d) {
    int64_t s = bidx[d] * bm.block_shape[d];
    br.start[d] = s;
    if (s < 0 || s + bm.block_shape[d] > ash[d]) inside = false;
    off += s * astr[d];
  }
  Val& v = br.ref;
  v.dtype = t;
  v.is_ref = true;
  for (int d = 0; d < rank; ++d)
    if (!bm.squeezed[d]) v.shape.d[v.shape.n++] = bm.block_shape[d];
  if (inside) {
    v.strides.n = v.shape.n;
    int k = 0;
    for (int d = 0; d < rank; ++d)
      if (!bm.squeezed[d]) v.strides[k++] = astr[d];
    v.data = static_cast<unsigned char*>(op.array.raw_data()) + off * w;
    return br;
  }
  br.padded = true;
  v.strides = contiguous_strides(v.shape);
  v.data = arena.alloc(static_cast<size_t>(v.shape.size()) * w);
  fill_poison(t, v.data, v.shape.size());
  auto* pad = static_cast<Padding*>(arena.alloc(sizeof(Padding)));
  new (pad) Padding();
  pad->lo.n = pad->hi.n = v.shape.n;
  bool empty = false;
  for (int d = 0, k = 0; d < rank; ++d) {
    int64_t lo = std::max<int64_t>(0, -br.start[d]), hi = std::min<int64_t>(bm.block_shape[d], ash[d] - br.start[d]);
    if (hi <= lo) empty = true;
    if (bm.squeezed[d]) continue;
    pad->lo[k] = lo, pad->hi[k] = hi, ++k;
  }
  if (empty)
    for (int k = 0; k < pad->hi.n; ++k) pad->hi[k] = pad->lo[k] = 0;
  v.pad = pad;
  // copy in the part inside the array (outputs too: a revisited block sees earlier writes)
  Dims full = Dims(bm.block_shape), bstr = contiguous_strides(full), region;
  region.n = static_cast<int8_t>(rank);
  int64_t src_off = 0, dst_off = 0;
  for (int d = 0; d < rank; ++d) {
    int64_t lo = std::max<int64_t>(br.start[d], 0), hi = std::min<int64_t>(br.start[d] + bm.block_shape[d], ash[d]);
    if (hi <= lo) return br;
    region[d] = hi - lo;
    src_off += lo * astr[d];
    dst_off += (lo - br.start[d]) * bstr[d];
  }
  strided_copy(static_cast<unsigned char*>(v.data) + dst_off * w, bstr,
               static_cast<const unsigned char*>(op.array.raw_data()) + src_off * w, astr, region, w);
  return br;
}

void write_back(const Operand& op, const BlockRef& br) {
  const core::BlockMapping& bm = *op.bm;
  const Shape& ash = bm.array.shape;
  int rank = static_cast<int>(ash.size());
  size_t w = itemsize(bm.array.dtype);
  Dims astr = contiguous_strides(Dims(ash)), bstr = contiguous_strides(Dims(bm.block_shape)), region;
  region.n = static_cast<int8_t>(rank);
  int64_t dst_off = 0, src_off = 0;
  for (int d = 0; d < rank; ++d) {
    int64_t lo = std::max<int64_t>(br.start[d], 0), hi = std::min<int64_t>(br.start[d] + bm.block_shape[d], ash[d]);
    if (hi <= lo) return;
    region[d] = hi - lo;
    dst_off += lo * astr[d];
    src_off += (lo - br.start[d]) * bstr[d];
  }
  strided_copy(static_cast<unsigned char*>(op.array.raw_data()) + dst_off * w, astr,
               static_cast<const unsigned char*>(br.ref.data) + src_off * w, bstr, region, w);
}

Val whole_ref(const Array& a) {
  Val v;
  v.dtype = a.dtype();
  v.is_ref = true;
  v.shape = Dims(a.shape());
  v.strides = contiguous_strides(v.shape);
  v.data = a.raw_data();
  return v;
}

std::string grid_str(const std::vector<int64_t>& grid) {
  std::string s = "(";
  for (size_t k = 0; k < grid.size(); ++k) s += (k ? ", " : "") + std::to_string(grid[k]);
  return s + (grid.size() == 1 ? ",)" : ")");
}

// Which programs run together, in order, on one thread.
struct Schedule {
  std::vector<int> par, seq;  // grid axes that separate groups / that a group walks
  int64_t num_groups = 1;
  bool joined = false;  // groups listed explicitly (index maps that compute their indices)
  std::vector<std::vector<int64_t>> members;  // joined: each group's programs, row-major
};

Schedule schedule(const core::GridMapping& gm, const std::vector<int64_t>& grid, int64_t nprog,
                  const std::vector<Operand>& ops, bool serial, const std::vector<Val>& prefetch_refs, CallRuntime& rt) {
  size_t g = grid.size();
  std::vector<bool> par(g, !serial);
  for (size_t a = 0; a < g; ++a)
    if (gm.sequential(a) || grid[a] <= 1) par[a] = false;
  bool computed = false;
  for (const Operand& op : ops) {
    if (!op.written) continue;
    if (!op.direct) {
      computed = true;
      continue;
    }
    std::vector<bool> used(g, false);
    for (int s : op.src)
      if (s >= 0) used[s] = true;
    for (size_t a = 0; a < g; ++a)
      if (!used[a]) par[a] = false;  // programs along a share this operand's blocks
  }
  Schedule sc;
  for (size_t a = 0; a < g; ++a) (par[a] ? sc.par : sc.seq).push_back(static_cast<int>(a));
  if (computed && !sc.par.empty() && nprog > kMaxJoinPrograms) {  // too many to join: one group
    sc.seq.clear();
    sc.par.clear();
    for (size_t a = 0; a < g; ++a) sc.seq.push_back(static_cast<int>(a));
  }
  for (int a : sc.par) sc.num_groups *= grid[a];
  if (!computed || sc.par.empty()) return sc;

  // Join the groups whose programs write a common block of an operand.
  auto group_of = [&](const int64_t* pid) {
    int64_t c = 0;
    for (int a : sc.par) c = c * grid[a] + pid[a];
    return c;
  };
  std::vector<int64_t> parent(static_cast<size_t>(sc.num_groups));
  std::iota(parent.begin(), parent.end(), 0);
  Arena& arena = thread_arena();
  for (const Operand& op : ops) {
    if (!op.written || op.direct) continue;
    size_t rank = op.src.size();
    std::unordered_map<std::string, int64_t> first;
    std::vector<int64_t> pid(g, 0), bidx(rank);
    for (int64_t p = 0; p < nprog; ++p) {
      eval_index_map(op, pid.data(), grid, prefetch_refs, arena, rt, bidx.data());
      std::string key(reinterpret_cast<const char*>(bidx.data()), rank * sizeof(int64_t));
      int64_t c = group_of(pid.data());
      auto [it, fresh] = first.emplace(std::move(key), c);
      if (!fresh) {
        int x = find(parent, it->second), y = find(parent, c);
        if (x != y) parent[std::max(x, y)] = std::min(x, y);
      }
      for (size_t k = g; k-- > 0;) {
        if (++pid[k] < grid[k]) break;
        pid[k] = 0;
      }
    }
  }
  std::unordered_map<int64_t, size_t> index;
  std::vector<int64_t> pid(g, 0);
  for (int64_t p = 0; p < nprog; ++p) {
    int64_t r = find(parent, group_of(pid.data()));
    auto [it, fresh] = index.emplace(r, sc.members.size());
    if (fresh) sc.members.emplace_back();
    sc.members[it->second].push_back(p);
    for (size_t k = g; k-- > 0;) {
      if (++pid[k] < grid[k]) break;
      pid[k] = 0;
    }
  }
  sc.joined = true;
  sc.num_groups = static_cast<int64_t>(sc.members.size());
  return sc;
}

}  // namespace

RunResult run_call(const core::PallasCall& call, const std::vector<Array>& args, bool collect_checks) {
  const core::GridMapping& gm = call.grid;
  int nd = gm.num_dynamic_bounds();
  std::vector<int64_t> grid = gm.grid;
  {
    int k = 0;
    for (auto& g : grid)
      if (g < 0) {
        int64_t v = 0;
        convert_elements(args[k].dtype(), args[k].data(), DType::I64, &v, 1);
        core::check_dynamic_bound(call, static_cast<size_t>(k), v);
        g = v;
        ++k;
      }
  }
  int64_t nprog = core::checked_num_programs(grid, call.what);
  if (nprog > kMaxInterpretPrograms)
    throw Error(call.what + ": the grid " + grid_str(grid) + " has " + std::to_string(nprog) +
                " programs; the interpreter runs at most 2^32 (4294967296) in one call (at a microsecond or more per "
                "program that is over an hour). Use larger blocks and fewer programs");
  ChecksOn checks_on = resolve_checks(call.interpret_params);
  if (checks_on.shadow() && nprog > INT32_MAX)
    throw Error(call.what + ": the interpreter's race and uninitialized-read checks track at most 2^31 - 1 programs; "
                "this grid has " + std::to_string(nprog) + ". Turn them off for this call (interpret_params)");

  size_t np = gm.prefetch.size(), nin = gm.inputs.size(), nout = gm.outputs.size();
  std::vector<Array> prefetch(args.begin() + nd, args.begin() + nd + static_cast<long>(np));
  for (size_t k = 0; k < np; ++k)  // a kernel that writes its scalar-prefetch ref gets a private copy
    if (ir::writes_ref(*call.kernel, call.kernel->invars[k].id)) prefetch[k] = prefetch[k].copy();
  std::vector<Val> prefetch_refs;
  for (auto& a : prefetch) prefetch_refs.push_back(whole_ref(a));

  std::vector<Operand> ops(nin + nout);
  std::vector<bool> preset(nin + nout, false);  // elements written before the call
  for (size_t k = 0; k < nin; ++k) {
    ops[k].bm = &gm.inputs[k];
    ops[k].array = args[nd + np + k];
    ops[k].written = ir::writes_ref(*call.kernel, call.kernel->invars[np + k].id);
    if (ops[k].written) ops[k].array = ops[k].array.copy();  // never write the caller's array
    preset[k] = true;
  }
  RunResult res;
  for (size_t k = 0; k < nout; ++k) {
    const core::BlockMapping& bm = gm.outputs[k];
    Array out;
    for (auto [i, o] : call.aliases)
      if (o == static_cast<int>(k)) out = args[nd + i].copy(), preset[nin + k] = true;
    if (!out.defined()) {
      out = Array(bm.array.shape, bm.array.dtype);
      fill_poison(bm.array.dtype, out.raw_data(), out.size());
    }
    ops[nin + k].bm = &bm;
    ops[nin + k].array = out;
    ops[nin + k].written = true;
    res.outputs.push_back(out);
  }
  for (auto& op : ops) prepare_index_map(op, grid.size());

  CallRuntime rt;
  rt.collect_checks = collect_checks;

  // The checks' state: shadows of the operands programs write, descriptions of the refs.
  std::unique_ptr<CheckState> cs;
  std::vector<std::string> scratch_names;
  std::vector<RefInfo> prefetch_infos(np);
  std::vector<std::string> prefetch_names(np);
  if (checks_on.any()) {
    cs = std::make_unique<CheckState>();
    cs->on = checks_on;
    cs->grid = grid;
    for (size_t a = 0; a < grid.size(); ++a) cs->parallel.push_back(!gm.sequential(a));
    cs->shadows.resize(nin + nout);
    if (checks_on.shadow())
      for (size_t k = 0; k < nin + nout; ++k)
        if (ops[k].written) {
          cs->shadows[k].resize(static_cast<size_t>(ops[k].array.size()));
          if (preset[k])
            for (auto& e : cs->shadows[k]) e.w = -2;
        }
    for (size_t k = 0; k < gm.scratch.size(); ++k) scratch_names.push_back("scratch " + std::to_string(k));
    for (size_t k = 0; k < np; ++k) {
      prefetch_names[k] = "scalar prefetch " + std::to_string(k);
      RefInfo& ri = prefetch_infos[k];
      ri.kind = RefKind::Prefetch;
      ri.what = &prefetch_names[k];
      ri.array_shape = ri.block = prefetch_refs[k].shape;
      ri.start.n = ri.array_shape.n;
      for (int d = 0; d < ri.array_shape.n; ++d) ri.ref_dim_to_array[d] = static_cast<int8_t>(d);
      prefetch_refs[k].info = &ri;
    }
  }

  // debug_print prints in row-major program order. (Races between reads of an aliased input
  // and writes of its output are not tracked: the input's reads see the caller's array.)
  bool serial = ir::any_eqn(*call.kernel, [](const ir::Eqn& e) { return e.prim->id == ir::PrimId::debug_print; });
  Schedule sc = schedule(gm, grid, nprog, ops, serial, prefetch_refs, rt);

  std::shared_ptr<Program> kernel = compiled(call.kernel);
  size_t nscratch = gm.scratch.size();
  size_t g = grid.size();

  auto run_group = [&](int64_t group) {
    Arena& arena = thread_arena();
    ArenaScope scope(arena);
    std::vector<Val> refs(np + nin + nout + nscratch);
    std::vector<BlockRef> brs(nin + nout);
    std::vector<RefInfo> infos(cs ? nin + nout + nscratch : 0);
    std::vector<int64_t> pid(g, 0), bidx;
    size_t maxrank = 0;
    for (auto& op : ops) maxrank = std::max(maxrank, op.src.size());
    bidx.resize(std::max<size_t>(maxrank, 1));
    for (size_t k = 0; k < np; ++k) refs[k] = prefetch_refs[k];

    auto run_program = [&](int64_t linear) {
      ArenaScope program_scope(arena);
      for (size_t k = 0; k < nin + nout; ++k) {
        eval_index_map(ops[k], pid.data(), grid, prefetch_refs, arena, rt, bidx.data());
        brs[k] = block_ref(ops[k], bidx.data(), arena);
        refs[np + k] = brs[k].ref;
        if (cs) {
          const core::BlockMapping& bm = *ops[k].bm;
          RefInfo& ri = infos[k];
          ri.kind = k < nin ? RefKind::Input : RefKind::Output;
          ri.what = &bm.what;
          ri.array_shape = Dims(bm.array.shape);
          ri.start = brs[k].start;
          ri.block = Dims(bm.block_shape);
          int r = 0;
          for (size_t d = 0; d < bm.squeezed.size(); ++d)
            if (!bm.squeezed[d]) ri.ref_dim_to_array[r++] = static_cast<int8_t>(d);
          ri.shadow = cs->shadows[k].empty() ? nullptr : cs->shadows[k].data();
          refs[np + k].info = &ri;
        }
      }
      for (size_t k = 0; k < nscratch; ++k) {
        Val& s = refs[np + nin + nout + k];
        s.dtype = gm.scratch[k].dtype;
        s.is_ref = true;
        s.shape = Dims(gm.scratch[k].shape);
        s.strides = contiguous_strides(s.shape);
        s.data = arena.alloc(static_cast<size_t>(s.shape.size()) * itemsize(s.dtype));
        fill_poison(s.dtype, s.data, s.shape.size());
        if (cs) {
          RefInfo& ri = infos[nin + nout + k];
          ri.kind = RefKind::Scratch;
          ri.what = &scratch_names[k];
          ri.array_shape = ri.block = s.shape;
          ri.start = Dims();
          ri.start.n = s.shape.n;
          for (int d = 0; d < s.shape.n; ++d) ri.ref_dim_to_array[d] = static_cast<int8_t>(d);
          ri.scratch_written = nullptr;
          if (checks_on.uninitialized) {
            ri.scratch_written = static_cast<uint8_t*>(arena.alloc(static_cast<size_t>(s.shape.size())));
            std::memset(ri.scratch_written, 0, static_cast<size_t>(s.shape.size()));
          }
          s.info = &ri;
        }
      }
      Ctx ctx{&arena, pid.data(), grid.data(), static_cast<int>(g), &rt, linear, cs.get()};
      try {
        run(*kernel, refs.data(), nullptr, ctx);
      } catch (const Error& e) {
        throw Error(call.what + ": " + e.what());
      }
      for (size_t k = 0; k < nin + nout; ++k)
        if (brs[k].padded && ops[k].written) write_back(ops[k], brs[k]);
    };

    if (sc.joined) {
      for (int64_t p : sc.members[group]) {
        int64_t rem = p;
        for (size_t k = g; k-- > 0;) pid[k] = grid[k] ? rem % grid[k] : 0, rem = grid[k] ? rem / grid[k] : 0;
        run_program(p);
      }
    } else {
      // the group's coordinates along the parallel axes, then every program along the others
      int64_t rem = group;
      for (size_t k = sc.par.size(); k-- > 0;) {
        int a = sc.par[k];
        pid[a] = rem % grid[a];
        rem /= grid[a];
      }
      int64_t count = 1;
      for (int a : sc.seq) count *= grid[a];
      for (int a : sc.seq) pid[a] = 0;
      for (int64_t q = 0; q < count; ++q) {
        int64_t linear = 0;
        for (size_t k = 0; k < g; ++k) linear = linear * grid[k] + pid[k];
        run_program(linear);
        for (size_t k = sc.seq.size(); k-- > 0;) {
          int a = sc.seq[k];
          if (++pid[a] < grid[a]) break;
          pid[a] = 0;
        }
      }
    }
  };

  if (nprog > 0) parallel_for(sc.num_groups, run_group);
  std::string report;
  if (cs && cs->reported(&report)) throw Error(call.what + ": " + report);
  if (cs && checks_on.unwritten && !rt.failed)  // a failed check stopped programs: their writes are missing
    for (size_t k = 0; k < nout; ++k)
      if (!preset[nin + k] && !gm.outputs[k].may_stay_unwritten)
        if (std::string r = unwritten_report(gm.outputs[k].what, gm.outputs[k].array, cs->shadows[nin + k]); !r.empty())
          throw Error(call.what + ": " + r);
  res.failed = rt.failed;
  res.message = rt.message;
  res.failed_program_id = rt.failed_program_id;
  return res;
}

}  // namespace pallas::interp
