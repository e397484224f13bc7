// The interpreter's grid loop: index maps per program, blocks in and out, programs in
// parallel where their output blocks cannot overlap.
//
// Blocks that lie inside their array are passed to the kernel as strided views (no copy);
// blocks that overhang are copied into a padded buffer (poison outside the array) and only
// their in-bounds part is written back. Programs that write a common block (revisited
// outputs, accumulation over a grid axis, atomics on a shared output) are put in one group
// and run in row-major order on one thread; groups run on all cores.
#include <algorithm>
#include <atomic>
#include <exception>
#include <numeric>
#include <thread>
#include <unordered_map>

#include "src/backends/interpret/interpreter.h"
#include "src/backends/interpret/strided.h"
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

// Arenas are reused across calls.
struct ArenaPool {
  std::mutex mu;
  std::vector<std::unique_ptr<Arena>> free;
  std::unique_ptr<Arena> get() {
    std::lock_guard<std::mutex> g(mu);
    if (free.empty()) return std::make_unique<Arena>();
    auto a = std::move(free.back());
    free.pop_back();
    return a;
  }
  void put(std::unique_ptr<Arena> a) {
    std::lock_guard<std::mutex> g(mu);
    free.push_back(std::move(a));
  }
};
ArenaPool& arena_pool() {
  static ArenaPool p;
  return p;
}

struct Operand {
  const core::BlockMapping* bm = nullptr;
  Array array;  // the storage the kernel's ref points into
  std::vector<int64_t> block_idx;  // [program][dim]
  bool written = false;
};

int find(std::vector<int64_t>& parent, int64_t x) {
  while (parent[x] != x) {
    parent[x] = parent[parent[x]];
    x = parent[x];
  }
  return static_cast<int>(x);
}

// Evaluate an index map for every program. Maps whose outputs are grid indices or constants
// are read off directly.
std::vector<int64_t> eval_index_map(const core::BlockMapping& bm, const std::vector<int64_t>& grid, int64_t nprog,
                                    const std::vector<Val>& prefetch_refs, Arena& arena, CallRuntime& rt) {
  const ir::Jaxpr& j = *bm.index_map;
  size_t rank = j.outvars.size(), g = grid.size();
  std::vector<int64_t> out(static_cast<size_t>(nprog) * rank);
  std::vector<int64_t> pid(g, 0);
  bool direct = j.eqns.empty();
  std::vector<int> src(rank, -1);
  std::vector<int64_t> cst(rank, 0);
  if (direct)
    for (size_t d = 0; d < rank; ++d) {
      if (auto* l = std::get_if<ir::Literal>(&j.outvars[d])) {
        cst[d] = l->i;
      } else {
        int64_t id = std::get<ir::Var>(j.outvars[d]).id;
        for (size_t k = 0; k < g; ++k)
          if (j.invars[k].id == id) src[d] = static_cast<int>(k);
        if (src[d] < 0) direct = false;
      }
    }
  std::shared_ptr<Program> prog = direct ? nullptr : compiled(bm.index_map);
  std::vector<Val> args(g + prefetch_refs.size()), outs(rank);
  std::vector<int32_t> pid32(g);
  for (size_t k = 0; k < prefetch_refs.size(); ++k) args[g + k] = prefetch_refs[k];
  for (int64_t p = 0; p < nprog; ++p) {
    int64_t* o = out.data() + p * rank;
    if (direct) {
      for (size_t d = 0; d < rank; ++d) o[d] = src[d] >= 0 ? pid[src[d]] : cst[d];
    } else {
      Arena::Mark m = arena.mark();
      for (size_t k = 0; k < g; ++k) {
        pid32[k] = static_cast<int32_t>(pid[k]);
        args[k].dtype = DType::I32;
        args[k].shape = Dims();
        args[k].data = &pid32[k];
      }
      Ctx ctx{&arena, pid.data(), grid.data(), static_cast<int>(g), &rt};
      run(*prog, args.data(), outs.data(), ctx);
      for (size_t d = 0; d < rank; ++d) o[d] = *outs[d].as<int32_t>();
      arena.reset(m);
    }
    for (int k = static_cast<int>(g) - 1; k >= 0; --k) {
      if (++pid[k] < grid[k]) break;
      pid[k] = 0;
    }
  }
  return out;
}

// A ref Val for operand o at program p: a view when the block is inside the array, else a
// padded copy (returned in *padded with the block start for the write-back).
struct BlockRef {
  Val ref;
  bool padded = false;
  Dims start;  // element start of the block, per array dim
};

BlockRef block_ref(const Operand& op, int64_t p, Arena& arena) {
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
    int64_t s = op.block_idx[p * rank + d] * bm.block_shape[d];
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
        if (v < 0) throw Error(call.what + ": dynamic grid bound " + std::to_string(k) + " is negative (" + std::to_string(v) + ")");
        g = v;
        ++k;
      }
  }
  int64_t nprog = 1;
  for (int64_t g : grid) nprog *= g;

  size_t np = gm.prefetch.size(), nin = gm.inputs.size(), nout = gm.outputs.size();
  std::vector<Array> prefetch(args.begin() + nd, args.begin() + nd + static_cast<long>(np));
  for (size_t k = 0; k < np; ++k)  // a kernel that writes its scalar-prefetch ref gets a private copy
    if (ir::writes_ref(*call.kernel, call.kernel->invars[k].id)) prefetch[k] = prefetch[k].copy();
  std::vector<Val> prefetch_refs;
  for (auto& a : prefetch) prefetch_refs.push_back(whole_ref(a));

  std::vector<Operand> ops(nin + nout);
  for (size_t k = 0; k < nin; ++k) {
    ops[k].bm = &gm.inputs[k];
    ops[k].array = args[nd + np + k];
    ops[k].written = ir::writes_ref(*call.kernel, call.kernel->invars[np + k].id);
    if (ops[k].written) ops[k].array = ops[k].array.copy();  // never write the caller's array
  }
  RunResult res;
  for (size_t k = 0; k < nout; ++k) {
    const core::BlockMapping& bm = gm.outputs[k];
    Array out;
    for (auto [i, o] : call.aliases)
      if (o == static_cast<int>(k)) out = args[nd + i].copy();
    if (!out.defined()) {
      out = Array(bm.array.shape, bm.array.dtype);
      fill_poison(bm.array.dtype, out.raw_data(), out.size());
    }
    ops[nin + k].bm = &bm;
    ops[nin + k].array = out;
    ops[nin + k].written = true;
    res.outputs.push_back(out);
  }

  CallRuntime rt;
  rt.collect_checks = collect_checks;
  std::unique_ptr<Arena> main_arena = arena_pool().get();
  for (auto& op : ops) op.block_idx = eval_index_map(*op.bm, grid, nprog, prefetch_refs, *main_arena, rt);

  // Group programs that share a written block.
  std::vector<int64_t> parent(static_cast<size_t>(nprog));
  std::iota(parent.begin(), parent.end(), 0);
  for (auto& op : ops) {
    if (!op.written) continue;
    size_t rank = op.bm->array.shape.size();
    std::unordered_map<std::string, int64_t> first;
    first.reserve(static_cast<size_t>(nprog));
    for (int64_t p = 0; p < nprog; ++p) {
      std::string key(reinterpret_cast<const char*>(op.block_idx.data() + p * rank), rank * sizeof(int64_t));
      auto [it, fresh] = first.emplace(std::move(key), p);
      if (!fresh) {
        int a = find(parent, it->second), b = find(parent, p);
        if (a != b) parent[std::max(a, b)] = std::min(a, b);
      }
    }
  }
  std::vector<std::vector<int64_t>> groups;
  {
    std::unordered_map<int64_t, size_t> gi;
    for (int64_t p = 0; p < nprog; ++p) {
      int64_t r = find(parent, p);
      auto [it, fresh] = gi.emplace(r, groups.size());
      if (fresh) groups.emplace_back();
      groups[it->second].push_back(p);
    }
  }

  std::shared_ptr<Program> kernel = compiled(call.kernel);
  size_t nscratch = gm.scratch.size();

  auto run_group = [&](const std::vector<int64_t>& progs, Arena& arena) {
    std::vector<Val> refs(np + nin + nout + nscratch);
    std::vector<BlockRef> brs(nin + nout);
    std::vector<int64_t> pid(grid.size());
    for (size_t k = 0; k < np; ++k) refs[k] = prefetch_refs[k];
    for (int64_t p : progs) {
      int64_t rem = p;
      for (int k = static_cast<int>(grid.size()) - 1; k >= 0; --k) {
        pid[k] = grid[k] ? rem % grid[k] : 0;
        rem = grid[k] ? rem / grid[k] : 0;
      }
      Arena::Mark m = arena.mark();
      for (size_t k = 0; k < nin + nout; ++k) {
        brs[k] = block_ref(ops[k], p, arena);
        refs[np + k] = brs[k].ref;
      }
      for (size_t k = 0; k < nscratch; ++k) {
        Val& s = refs[np + nin + nout + k];
        s.dtype = gm.scratch[k].dtype;
        s.is_ref = true;
        s.shape = Dims(gm.scratch[k].shape);
        s.strides = contiguous_strides(s.shape);
        s.data = arena.alloc(static_cast<size_t>(s.shape.size()) * itemsize(s.dtype));
        fill_poison(s.dtype, s.data, s.shape.size());
      }
      Ctx ctx{&arena, pid.data(), grid.data(), static_cast<int>(grid.size()), &rt};
      try {
        run(*kernel, refs.data(), nullptr, ctx);
      } catch (const Error& e) {
        throw Error(call.what + ": " + e.what());
      }
      for (size_t k = 0; k < nin + nout; ++k)
        if (brs[k].padded && ops[k].written) write_back(ops[k], brs[k]);
      arena.reset(m);
    }
  };

  unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  size_t nthreads = std::min<size_t>(hw, groups.size());
  if (nthreads <= 1) {
    for (auto& g : groups) run_group(g, *main_arena);
  } else {
    std::atomic<size_t> next{0};
    std::exception_ptr err;
    std::mutex err_mu;
    auto worker = [&](Arena* arena) {
      try {
        for (size_t g; (g = next.fetch_add(1)) < groups.size();) run_group(groups[g], *arena);
      } catch (...) {
        std::lock_guard<std::mutex> l(err_mu);
        if (!err) err = std::current_exception();
        next = groups.size();
      }
    };
    std::vector<std::unique_ptr<Arena>> arenas;
    std::vector<std::thread> threads;
    for (size_t t = 1; t < nthreads; ++t) {
      arenas.push_back(arena_pool().get());
      threads.emplace_back(worker, arenas.back().get());
    }
    worker(main_arena.get());
    for (auto& t : threads) t.join();
    for (auto& a : arenas) arena_pool().put(std::move(a));
    if (err) {
      arena_pool().put(std::move(main_arena));
      std::rethrow_exception(err);
    }
  }
  arena_pool().put(std::move(main_arena));
  res.failed = rt.failed;
  res.message = rt.message;
  res.failed_program_id = rt.failed_program_id;
  return res;
}

}  // namespace pallas::interp
