// Lowering rules for refs: load/store/swap/addupdate and atomics. Each thread addresses the
// elements it holds; an access outside the block view or past the array's edge reads
// poison (NaN / int min) and drops writes; masked-off lanes are not touched.
#include "src/backends/cuda/rules.h"

namespace pallas::cuda {
using ir::IndexDim;
using ir::PrimId;

namespace {

struct Plan {
  const ir::Eqn* e;
  RefInfo ref;
  Shape out_shape;
  size_t after_dyn = 0;
  std::vector<std::string> arr_shared;  // per dim: shared copy of an index array ("" if local/none)
  bool has_array = false;  // integer-array (gather/scatter) indices
  bool shared_indices = false;  // some index array went through the exchange region
  int arr_axis0 = 0, arr_rank = 0;
  Shape arr_shape;
  std::vector<int> axis;  // per ref dim: output axis for slices
};

Plan plan(Emitter& E, const ir::Eqn& e, const Shape& out_shape) {
  Plan p;
  p.e = &e;
  const ir::Var& rv = std::get<ir::Var>(e.in[0]);
  auto it = E.refs.find(rv.id);
  if (it == E.refs.end()) E.fail(e, "its ref is not known to the lowering");
  p.ref = it->second;
  p.out_shape = out_shape;
  const auto& ix = e.params.get<ir::NDIndexer>("idx");
  size_t start = static_cast<size_t>(e.params.get_int("idx_start"));
  int n = 0;
  for (auto& d : ix.dims)
    if (d.operand >= 0) n = std::max(n, d.operand + 1);
  p.after_dyn = start + static_cast<size_t>(n);
  for (size_t d = 0; d < ix.dims.size(); ++d)
    if (ix.dims[d].kind == IndexDim::Kind::Array) {
      p.arr_shape = ir::atom_aval(e.in[start + static_cast<size_t>(ix.dims[d].operand)]).shape;
      break;
    }
  // numpy placement, as the interpreter (ir::placement)
  ir::IndexPlacement pl = ir::placement(ix, static_cast<int>(p.arr_shape.size()));
  p.has_array = pl.has_array;
  p.arr_rank = pl.has_array ? static_cast<int>(p.arr_shape.size()) : 0;
  p.arr_axis0 = pl.arr_axis0;
  p.axis = pl.slice_axis;
  p.arr_shared.assign(ix.dims.size(), "");
  size_t xo = 0;
  for (size_t d = 0; d < ix.dims.size(); ++d) {
    const IndexDim& x = ix.dims[d];
    if (x.kind == IndexDim::Kind::Array) {
      const ir::Atom& a = e.in[start + static_cast<size_t>(x.operand)];
      ir::Aval av = ir::atom_aval(a);
      if (!Emitter::scalar_like(av) && av.shape != out_shape) {
        size_t next = E.reserve(xo, av);
        p.arr_shared[d] = E.put_shared(a, xo);
        xo = next;
      }
    }
  }
  if (xo) E.sync();
  p.shared_indices = xo > 0;
  return p;
}

// Inside foreach(out_shape): declares ok flag and returns the element's lvalue expression.
std::string address(Emitter& E, const Plan& p, std::string* ok) {
  const ir::Eqn& e = *p.e;
  const auto& ix = e.params.get<ir::NDIndexer>("idx");
  size_t start = static_cast<size_t>(e.params.get_int("idx_start"));
  auto oi = E.unravel("e", p.out_shape);
  std::string arr_flat;
  if (p.arr_rank) {
    arr_flat = "0";
    int64_t s = 1;
    for (int k = p.arr_rank - 1; k >= 0; --k) {
      arr_flat += " + " + oi[static_cast<size_t>(p.arr_axis0 + k)] + " * " + std::to_string(s);
      s *= p.arr_shape[static_cast<size_t>(k)];
    }
  }
  std::string cond = "true", off = "0ll";
  for (size_t d = 0; d < p.ref.shape.size(); ++d) {
    std::string c;
    bool static_ok = false;
    const IndexDim* x = d < ix.dims.size() ? &ix.dims[d] : nullptr;
    if (!x) {
      c = "0";
    } else {
      std::string dyn = x->operand >= 0 ? E.name(e.in[start + static_cast<size_t>(x->operand)]) : "";
      switch (x->kind) {
        case IndexDim::Kind::Slice:
          c = "(" + std::to_string(x->start) + "ll + " + std::to_string(x->stride) + "ll * " + oi[static_cast<size_t>(p.axis[d])] + ")";
          static_ok = x->start >= 0 && x->start + (x->size - 1) * x->stride < p.ref.shape[d] && x->stride > 0;
          break;
        case IndexDim::Kind::DynSlice:
          c = "((long long)" + dyn + " + " + std::to_string(x->stride) + "ll * " + oi[static_cast<size_t>(p.axis[d])] + ")";
          break;
        case IndexDim::Kind::Index:
          c = std::to_string(x->start) + "ll";
          static_ok = x->start >= 0 && x->start < p.ref.shape[d];
          break;
        case IndexDim::Kind::DynIndex: c = "((long long)" + dyn + ")"; break;
        case IndexDim::Kind::Array: {
          const ir::Atom& a = e.in[start + static_cast<size_t>(x->operand)];
          std::string v;
          if (Emitter::scalar_like(ir::atom_aval(a))) v = E.name(a);
          else if (p.arr_shared[d].empty()) v = E.elem(a, "k");
          else v = p.arr_shared[d] + "[" + arr_flat + "]";
          // a negative entry counts from the end of the dimension, as in the interpreter
          std::string raw = E.fresh("a");
          E.line("const long long " + raw + " = (long long)" + v + ";");
          c = "(" + raw + " < 0 ? " + raw + " + " + std::to_string(p.ref.shape[d]) + "ll : " + raw + ")";
          break;
        }
      }
    }
    std::string cn = E.fresh("c");
    E.line("const long long " + cn + " = " + c + ";");
    if (!static_ok) cond += " && " + cn + " >= 0 && " + cn + " < " + std::to_string(p.ref.shape[d]);
    if (!p.ref.lim[d].empty()) cond += " && " + cn + " < " + p.ref.lim[d];
    if (d < p.ref.low.size() && !p.ref.low[d].empty()) cond += " && " + cn + " >= " + p.ref.low[d];
    off += " + " + cn + " * " + std::to_string(p.ref.strides[d]) + "ll";
  }
  if (!p.ref.valid.empty()) cond += " && " + p.ref.valid;
  *ok = E.fresh("ok");
  E.line("const bool " + *ok + " = " + cond + ";");
  return p.ref.base + "[" + off + "]";
}

// The layout pass's vector width for this access (1: element by element).
int vector_width(const Emitter& E, const ir::Eqn& e) {
  const LayoutPlan::Access* a = E.plan.layout.find(e);
  return a ? a->width : 1;
}

// A vectorised access: each run of V elements of this thread is contiguous, aligned and in
// or out of the array as a whole (layout.h), so the run's first element decides for all;
// the run moves in pieces of W elements. f(piece, address, ok) emits one piece.
void foreach_vector_piece(Emitter& E, const Plan& p, int W, const std::function<void(int, const std::string&, const std::string&)>& f) {
  E.foreach_run(p.out_shape, [&] {
    std::string ok;
    std::string addr = address(E, p, &ok);
    for (int q = 0; q < E.vec / W; ++q) f(q, "(&" + addr + " + " + std::to_string(q * W) + ")", ok);
  });
}

void load(Emitter& E, const ir::Eqn& e) {
  const ir::Var& o = e.out[0];
  Plan p = plan(E, e, o.aval.shape);
  size_t k = p.after_dyn;
  const ir::Atom* mask = e.params.get_bool("has_mask") ? &e.in[k++] : nullptr;
  const ir::Atom* other = e.params.get_bool("has_other") ? &e.in[k++] : nullptr;
  std::string T = ctype(o.aval.dtype);
  E.declare(o);
  E.unsynced_reads = true;
  if (int W = vector_width(E, e); W > 1) {
    std::string VT = "Vec<" + T + ", " + std::to_string(W) + ">";
    foreach_vector_piece(E, p, W, [&](int q, const std::string& ptr, const std::string& ok) {
      std::string w = E.fresh("w");
      E.line(VT + " " + w + ";");
      E.line("if (" + ok + ") " + w + " = *(const " + VT + "*)" + ptr + "; else for (int i = 0; i < " + std::to_string(W) + "; ++i) " + w +
             ".v[i] = poison<" + T + ">();");
      for (int i = 0; i < W; ++i) E.line(E.name(o) + "[k0 + " + std::to_string(q * W + i) + "] = " + w + ".v[" + std::to_string(i) + "];");
    });
    if (mask)  // masked-off lanes take `other` (or poison); the run was inside the array
      E.foreach(o.aval.shape, [&] {
        E.line("if (!" + E.elem(*mask, "k") + ") " + E.elem(o, "k") + " = " + (other ? E.elem(*other, "k") : "poison<" + T + ">()") + ";");
      });
    return;
  }
  E.foreach(o.aval.shape, [&] {
    std::string ok;
    std::string addr = address(E, p, &ok);
    std::string v = "(" + ok + " ? " + addr + " : poison<" + T + ">())";
    if (mask) v = "(" + E.elem(*mask, "k") + " ? " + v + " : " + (other ? E.elem(*other, "k") : "poison<" + T + ">()") + ")";
    E.line(E.elem(o, "k") + " = " + v + ";");
  });
  // The exchange region is read until here: the next op that writes it must wait (a warp with
  // no elements would otherwise run ahead and overwrite the index arrays; found by the fuzzer).
  if (p.shared_indices) E.sync();
}

void store_like(Emitter& E, const ir::Eqn& e, bool returns_old) {
  const ir::Atom& val = e.in[1];
  ir::Aval va = ir::atom_aval(val);
  Shape shape = returns_old ? e.out[0].aval.shape : va.shape;
  Plan p = plan(E, e, shape);
  const ir::Atom* mask = e.params.get_bool("has_mask") ? &e.in[p.after_dyn] : nullptr;
  std::string T = ctype(p.ref.dtype);
  E.sync_before_write();
  if (returns_old) E.declare(e.out[0]);
  bool single = shape_size(shape) == 1;
  if (returns_old) {
    E.foreach(shape, [&] {
      std::string ok;
      std::string addr = address(E, p, &ok);
      // masked-off lanes return the operand (the value not stored), as the interpreter
      std::string v = "(" + ok + " ? " + addr + " : poison<" + T + ">())";
      if (mask) v = "(" + E.elem(*mask, "k") + " ? " + v + " : " + E.elem(val, "k") + ")";
      E.line(E.elem(e.out[0], "k") + " = " + v + ";");
    });
    E.sync();
  }
  if (int W = vector_width(E, e); W > 1 && !returns_old && !mask) {
    std::string VT = "Vec<" + T + ", " + std::to_string(W) + ">";
    foreach_vector_piece(E, p, W, [&](int q, const std::string& ptr, const std::string& ok) {
      std::string w = E.fresh("w");
      E.line(VT + " " + w + ";");
      for (int i = 0; i < W; ++i) {
        std::string k = "k0 + " + std::to_string(q * W + i);
        E.line(w + ".v[" + std::to_string(i) + "] = " + E.elem(val, k) + ";");
      }
      E.line("if (" + ok + ") st_vec(" + ptr + ", " + w + ");");
    });
    E.sync();
    return;
  }
  E.foreach(shape, [&] {
    std::string ok;
    std::string addr = address(E, p, &ok);
    std::string go = ok + (mask ? " && " + E.elem(*mask, "k") : "") + (single ? " && threadIdx.x == 0" : "");
    E.line("if (" + go + ") " + addr + " = " + E.elem(val, "k") + ";");
  });
  E.sync();
}

// ref[idx] += v. With index arrays, several lanes of the program may address one element;
// the interpreter then adds every contribution in lane order (numpy's np.add.at, not the
// last-write-wins of `x[idx] += v`), so the GPU adds atomically: the same sum, in some order
// (floats may round differently). Without index arrays every lane has its own element, and
// only a block that programs on parallel grid axes may share needs atomics.
void addupdate(Emitter& E, const ir::Eqn& e) {
  const ir::Atom& val = e.in[1];
  Shape shape = ir::atom_aval(val).shape;
  Plan p = plan(E, e, shape);
  std::string T = ctype(p.ref.dtype), C = compute_type(p.ref.dtype);
  bool single = shape_size(shape) == 1;
  E.sync_before_write();
  E.foreach(shape, [&] {
    std::string ok;
    std::string addr = address(E, p, &ok);
    std::string go = ok + (single ? " && threadIdx.x == 0" : "");
    // atomic when other CUDA blocks may add to the same element, or lanes of this one may
    if (p.has_array || p.ref.shared_by_parallel_programs) emit_atomic_add(E, p.ref.dtype, addr, E.elem(val, "k"), go);
    else E.line("if (" + go + ") " + addr + " = cv<" + T + ">(p_add<" + C + ">(ld(" + addr + "), ld(" + E.elem(val, "k") + ")));");
  });
  E.sync();
}

// The device prelude's op codes (atom_apply).
int opcode(const ir::Eqn& e, ir::AtomicOp op) {
  switch (op) {
    case ir::AtomicOp::Add: return 0;
    case ir::AtomicOp::Max: return 1;
    case ir::AtomicOp::Min: return 2;
    case ir::AtomicOp::And: return 3;
    case ir::AtomicOp::Or: return 4;
    case ir::AtomicOp::Xor: return 5;
    case ir::AtomicOp::Xchg: return 6;
  }
  ir::bad_enum(e.prim->name, "atomic op", static_cast<int>(op));
}

void atomic(Emitter& E, const ir::Eqn& e) {
  bool cas = e.prim->id == PrimId::atomic_cas;
  const ir::Var& o = e.out[0];
  Plan p = plan(E, e, o.aval.shape);
  const ir::Atom* mask = !cas && e.params.get_bool("has_mask") ? &e.in[p.after_dyn] : nullptr;
  std::string T = ctype(p.ref.dtype);
  DType t = p.ref.dtype;
  ir::AtomicOp op = cas ? ir::AtomicOp::Xchg : e.params.get<ir::AtomicOp>("op");
  int code = cas ? -1 : opcode(e, op);
  bool bitwise = !cas && (op == ir::AtomicOp::And || op == ir::AtomicOp::Or || op == ir::AtomicOp::Xor);
  if (bitwise && !is_integer(t)) E.fail(e, "bitwise atomics take integer refs");
  bool single = Emitter::scalar_like(o.aval);
  E.sync_before_write();
  E.declare(o);
  E.foreach(o.aval.shape, [&] {
    std::string ok;
    std::string addr = address(E, p, &ok);
    std::string go = ok + (mask ? " && " + E.elem(*mask, "k") : "");
    if (single) {
      // One element: thread 0 does it and shares the old value.
      std::string xs = E.fresh("xs");
      E.line(T + "* " + xs + " = (" + T + "*)(smem + " + std::to_string(E.xoff) + ");");
      E.reserve(0, ir::Aval::array({2}, DType::F64));
      E.line("if (threadIdx.x == 0) " + xs + "[0] = poison<" + T + ">();");
      go += " && threadIdx.x == 0";
      if (cas)
        E.line("if (" + go + ") " + xs + "[0] = atom_cas<" + T + ">(&" + addr + ", " + E.elem(e.in[1], "k") + ", " + E.elem(e.in[2], "k") + ");");
      else
        E.line("if (" + go + ") " + xs + "[0] = atom_rmw<" + T + ">(" + std::to_string(code) + ", &" + addr + ", " + E.elem(e.in[1], "k") + ");");
      E.sync();
      E.line(E.name(o) + " = " + xs + "[0];");
      E.sync();
      return;
    }
    E.line(E.elem(o, "k") + " = poison<" + T + ">();");
    std::string call;
    if (cas) call = "atom_cas<" + T + ">(&" + addr + ", " + E.elem(e.in[1], "k") + ", " + E.elem(e.in[2], "k") + ")";
    else if (op == ir::AtomicOp::Add) call = atomic_add_expr(t, addr, E.elem(e.in[1], "k"));
    else call = "atom_rmw<" + T + ">(" + std::to_string(code) + ", &" + addr + ", " + E.elem(e.in[1], "k") + ")";
    E.line("if (" + go + ") " + E.elem(o, "k") + " = " + call + ";");
  });
  E.sync();
}

}  // namespace

int access_width(const Emitter& E, const ir::Eqn& e) { return vector_width(E, e); }

bool async_loadable(const KernelPlan& P, const ir::Eqn& e) {
  const LayoutPlan::Access* a = P.layout.find(e);
  int W = a ? a->width : 1;
  int64_t bytes = W * static_cast<int64_t>(itemsize(e.out[0].aval.dtype));
  if (e.params.get_bool("has_mask") || W <= 1 || (bytes != 4 && bytes != 8 && bytes != 16)) return false;
  for (const ir::IndexDim& x : e.params.get<ir::NDIndexer>("idx").dims)
    if (x.kind == IndexDim::Kind::Array) return false;
  return true;
}

bool emit_async_load(Emitter& E, const ir::Eqn& e, const std::function<std::string(const std::string&)>& dst) {
  if (!async_loadable(E.plan, e)) return false;
  const ir::Var& o = e.out[0];
  int W = vector_width(E, e);
  int64_t bytes = W * static_cast<int64_t>(itemsize(o.aval.dtype));
  Plan p = plan(E, e, o.aval.shape);
  std::string B = std::to_string(bytes);
  foreach_vector_piece(E, p, W, [&](int q, const std::string& ptr, const std::string& ok) {
    // outside the array the (aligned) address is not read: src-size 0 zero-fills
    E.line("cp_async<" + B + ">(" + dst("e + " + std::to_string(q * W)) + ", " + ptr + ", " + ok + ");");
  });
  return true;
}

void emit_load_element(Emitter& E, const ir::Eqn& e, const std::string& flat, const std::string& dst) {
  Plan p = plan(E, e, e.out[0].aval.shape);
  if (p.shared_indices) throw Error(E.what + ": CUDA lowering: a folded load with index arrays (a bug)");
  Emitter::Block scope = E.block("{");
  E.line("const int e = " + flat + ";");  // address() reads the element as e
  std::string ok;
  std::string addr = address(E, p, &ok);
  E.line(dst + " = " + ok + " ? " + addr + " : poison<" + ctype(e.out[0].aval.dtype) + ">();");
}

void emit_async_copy_element(Emitter& E, const ir::Eqn& e, const std::string& dst) {
  Plan p = plan(E, e, e.out[0].aval.shape);
  if (p.shared_indices || itemsize(e.out[0].aval.dtype) != 4) throw Error(E.what + ": CUDA lowering: a word copy of a load with index arrays (a bug)");
  std::string ok;
  std::string addr = address(E, p, &ok);
  E.line("cp_async<4>(" + dst + ", &" + addr + ", " + ok + ");");
}

std::string atomic_add_expr(DType t, const std::string& addr, const std::string& value) {
  switch (t) {
    case DType::F32:
    case DType::F64:
    case DType::I32:
    case DType::U32:
    case DType::U64: return "atomicAdd(&" + addr + ", " + value + ")";
    case DType::I64: return "(i64)atomicAdd((u64*)&" + addr + ", (u64)" + value + ")";
    case DType::Bool:
    case DType::I8:
    case DType::I16:
    case DType::U8:
    case DType::U16:
    case DType::F16:
    case DType::BF16:
    case DType::F8E4M3:
    case DType::F8E5M2: return "atom_rmw<" + ctype(t) + ">(0, &" + addr + ", " + value + ")";
  }
  throw Error(std::string("atomic add: unknown dtype ") + std::to_string(static_cast<int>(t)));
}

void emit_atomic_add(Emitter& E, DType t, const std::string& addr, const std::string& value, const std::string& guard) {
  std::string s = "(void)" + atomic_add_expr(t, addr, value) + ";";
  E.line(guard.empty() ? s : "if (" + guard + ") " + s);
}

void register_memory_rules(ir::RuleTable<LowerRule>& t) {
  t.set(PrimId::load, load);
  t.set(PrimId::store, [](Emitter& E, const ir::Eqn& e) { store_like(E, e, false); });
  t.set(PrimId::swap, [](Emitter& E, const ir::Eqn& e) { store_like(E, e, true); });
  t.set(PrimId::addupdate, addupdate);
  t.set(PrimId::atomic_rmw, atomic);
  t.set(PrimId::atomic_cas, atomic);
}

}  // namespace pallas::cuda
