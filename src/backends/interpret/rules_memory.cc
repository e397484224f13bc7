// Interpreter rules for refs: load/store/swap/addupdate and atomics.
//
// Accesses outside the ref read poison (NaN / int min) and drop writes; masked-off lanes
// are never touched (a load gives `other`, or poison without it).
#include <algorithm>
#include <cmath>
#include <limits>

#include "src/backends/interpret/checks.h"
#include "src/backends/interpret/strided.h"
#include "src/backends/interpret/value.h"

namespace pallas::interp {
using ir::IndexDim;
using ir::PrimId;

namespace {

// How one ref dimension is addressed, resolved against this run's dynamic operands.
struct DimAccess {
  enum Kind : uint8_t { Fixed, Range, Array } kind;
  int64_t start = 0, step = 1;  // Fixed: coord = start; Range: start + step * out[axis]
  int axis = -1;                // output axis (Range)
  const int32_t* arr = nullptr; // Array: indices, laid out over the array-block output axes
};

struct Access {
  DimAccess dims[kMaxRank];
  int ndims = 0;
  Dims out_shape;
  bool has_array = false;
  int arr_axis0 = 0, arr_rank = 0;  // where the array-index block sits in the output
};

int64_t scalar_int(const Val& v) {
  switch (v.dtype) {
    case DType::I32: return *v.as<int32_t>();
    case DType::I64: return *v.as<int64_t>();
    case DType::U32: return *v.as<uint32_t>();
    case DType::I16: return *v.as<int16_t>();
    case DType::I8: return *v.as<int8_t>();
    case DType::U8: return *v.as<uint8_t>();
    case DType::U16: return *v.as<uint16_t>();
    case DType::U64: return static_cast<int64_t>(*v.as<uint64_t>());
    default: return 0;
  }
}

Access resolve(const Instr& ins, const Val* env) {
  const auto& ix = *ins.indexer;
  int start = ins.idx_start;
  const Val& ref = env[ins.in[0]];
  Access a;
  a.ndims = ref.shape.n;
  // Output axes (numpy, ir::placement): slices in order; the index-array block where the
  // first advanced index (array or integer) is when they are adjacent, else first.
  Dims arr_shape;
  for (int d = 0; d < a.ndims; ++d)
    if (ix.dims[d].kind == IndexDim::Kind::Array) {
      arr_shape = env[ins.in[start + ix.dims[d].operand]].shape;
      a.has_array = true;
      break;
    }
  int slice_axis[kMaxRank];
  if (a.has_array) {  // (without index arrays the slices are the axes, in order: no allocation)
    ir::IndexPlacement pl = ir::placement(ix, arr_shape.n);
    a.arr_rank = arr_shape.n;
    a.arr_axis0 = pl.arr_axis0;
    for (int d = 0; d < a.ndims; ++d) slice_axis[d] = pl.slice_axis[d];
  } else {
    for (int d = 0, axis = 0; d < a.ndims; ++d) {
      IndexDim::Kind k = ix.dims[d].kind;
      slice_axis[d] = k == IndexDim::Kind::Slice || k == IndexDim::Kind::DynSlice ? axis++ : -1;
    }
  }
  Dims out;
  out.n = static_cast<int8_t>(a.arr_rank);
  for (int d = 0; d < a.ndims; ++d) out.n = static_cast<int8_t>(out.n + (slice_axis[d] >= 0));
  for (int k = 0; k < a.arr_rank; ++k) out.d[a.arr_axis0 + k] = arr_shape[k];
  for (int d = 0; d < a.ndims; ++d) {
    const IndexDim& x = ix.dims[d];
    DimAccess& da = a.dims[d];
    switch (x.kind) {
      case IndexDim::Kind::Slice:
      case IndexDim::Kind::DynSlice:
        da.kind = DimAccess::Range;
        da.start = x.kind == IndexDim::Kind::Slice ? x.start : scalar_int(env[ins.in[start + x.operand]]);
        da.step = x.stride;
        da.axis = slice_axis[d];
        out.d[da.axis] = x.size;
        break;
      case IndexDim::Kind::Index:
      case IndexDim::Kind::DynIndex:
        da.kind = DimAccess::Fixed;
        da.start = x.kind == IndexDim::Kind::Index ? x.start : scalar_int(env[ins.in[start + x.operand]]);
        break;
      case IndexDim::Kind::Array:
        da.kind = DimAccess::Array;
        da.arr = env[ins.in[start + x.operand]].as<int32_t>();
        break;
    }
  }
  a.out_shape = out;
  return a;
}

// Strided view of the accessed region when it is rectangular and in bounds.
bool rectangular(const Access& a, const Val& ref, int64_t* offset, Dims* strides) {
  if (a.has_array) return false;
  int64_t off = 0;
  Dims st;
  st.n = a.out_shape.n;
  for (int d = 0; d < a.ndims; ++d) {
    const DimAccess& x = a.dims[d];
    if (x.kind == DimAccess::Fixed) {
      if (x.start < 0 || x.start >= ref.shape[d]) return false;
      off += x.start * ref.strides[d];
    } else {
      int64_t n = a.out_shape[x.axis];
      if (n > 0 && (x.start < 0 || x.start + (n - 1) * x.step >= ref.shape[d])) return false;
      off += x.start * ref.strides[d];
      st[x.axis] = x.step * ref.strides[d];
    }
  }
  *offset = off;
  *strides = st;
  return true;
}

// Calls f(out_index, ref_offset or -1 when outside the ref) for every accessed element.
template <class F>
void for_each_element(const Access& a, const Val& ref, F&& f) {
  const Dims& os = a.out_shape;
  int64_t n = os.size();
  if (n == 0) return;
  if (!a.has_array) {
    // Rectangular region (possibly overhanging the ref): walk it row by row, with the range of
    // the innermost output index that stays inside the ref computed once per row.
    int64_t base = 0;
    bool fixed_ok = true;
    Dims step;  // ref offset per unit of each output axis
    step.n = os.n;
    int inner_dim = -1;
    for (int d = 0; d < a.ndims; ++d) {
      const DimAccess& x = a.dims[d];
      if (x.kind == DimAccess::Fixed) {
        if (x.start < 0 || x.start >= ref.shape[d]) fixed_ok = false;
      } else {
        step[x.axis] = x.step * ref.strides[d];
        if (x.axis == os.n - 1) inner_dim = d;
      }
      base += x.start * ref.strides[d];
    }
    int64_t inner = os.n ? os[os.n - 1] : 1;
    int64_t lo = 0, hi = inner;
    if (inner_dim >= 0) {  // coord = start + step*j must lie in [0, dim)
      const DimAccess& x = a.dims[inner_dim];
      int64_t dim = ref.shape[inner_dim];
      lo = x.start >= 0 ? 0 : (-x.start + x.step - 1) / x.step;
      hi = x.start >= dim ? 0 : std::min<int64_t>(inner, (dim - x.start + x.step - 1) / x.step);
    }
    int64_t idx[kMaxRank] = {};
    for (int64_t row = 0; row < n / inner; ++row) {
      bool ok = fixed_ok;
      int64_t off = base;
      for (int d = 0; d < a.ndims; ++d) {
        const DimAccess& x = a.dims[d];
        if (x.kind != DimAccess::Range || x.axis == os.n - 1) continue;
        int64_t c = x.start + x.step * idx[x.axis];
        if (c < 0 || c >= ref.shape[d]) ok = false;
        off += x.step * idx[x.axis] * ref.strides[d];
      }
      int64_t st = os.n ? step[os.n - 1] : 0;
      int64_t o0 = row * inner;
      for (int64_t j = 0; j < inner; ++j) f(o0 + j, ok && j >= lo && j < hi ? off + j * st : -1);
      for (int k = os.n - 2; k >= 0; --k) {
        if (++idx[k] < os[k]) break;
        idx[k] = 0;
      }
    }
    return;
  }
  int64_t idx[kMaxRank] = {};
  int64_t arr_strides[kMaxRank];
  {
    int64_t s = 1;
    for (int k = a.arr_rank - 1; k >= 0; --k) {
      arr_strides[k] = s;
      s *= os[a.arr_axis0 + k];
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    bool inb = true;
    int64_t arr_flat = 0;
    for (int k = 0; k < a.arr_rank; ++k) arr_flat += idx[a.arr_axis0 + k] * arr_strides[k];
    for (int d = 0; d < a.ndims; ++d) {
      const DimAccess& x = a.dims[d];
      int64_t c = x.kind == DimAccess::Fixed ? x.start : x.kind == DimAccess::Range ? x.start + x.step * idx[x.axis] : x.arr[arr_flat];
      if (x.kind == DimAccess::Array && c < 0) c += ref.shape[d];  // negative entries count from the end
      if (c < 0 || c >= ref.shape[d]) inb = false;
      off += c * ref.strides[d];
    }
    f(i, inb ? off : -1);
    for (int k = os.n - 1; k >= 0; --k) {
      if (++idx[k] < os[k]) break;
      idx[k] = 0;
    }
  }
}

const bool* mask_at(const Instr& ins, const Val* env, size_t pos) {
  return pos < ins.in.size() ? env[ins.in[pos]].as<bool>() : nullptr;
}

size_t after_indices(const Instr& ins) { return static_cast<size_t>(ins.after_idx); }

// ---- the interpreter's checks (checks.h): one pass over the accessed elements ----

const char* verb(AccessKind k, PrimId id) {
  switch (id) {
    case PrimId::load: return "loads";
    case PrimId::store: return "stores to";
    case PrimId::swap: return "swaps";
    case PrimId::addupdate: return "adds to";
    default: return k == AccessKind::Atomic ? "atomically updates" : "accesses";
  }
}

std::string ref_desc(const RefInfo* info, const Val& ref) {
  std::string s = dtype_name(ref.dtype) + std::string("[");
  for (int k = 0; k < ref.shape.n; ++k) s += (k ? "," : "") + std::to_string(ref.shape[k]);
  s += "]";
  if (!info) return "its " + s + " ref";
  if (info->kind == RefKind::Scratch) return "its " + s + " buffer";
  if (info->kind == RefKind::Prefetch) return "the whole " + s + " array";
  return "its " + s + " block";
}

void check_access(const Instr& ins, const Val* env, Ctx& ctx, const Access& a, const bool* mask, AccessKind kind) {
  CheckState& cs = *ctx.checks;
  const Val& ref = env[ins.in[0]];
  const RefInfo* info = ref.info;
  const Dims& os = a.out_shape;
  int64_t n = os.size();
  if (n == 0) return;
  const bool reads = kind != AccessKind::Write;
  const bool value_read = kind == AccessKind::Read || ins.eqn->prim->id == PrimId::swap;  // padding reads count
  // A block wholly outside its array is no edge block but its index map's doing (block
  // indices count blocks, not elements): reading it is out of bounds, reported under that
  // check (which "all" turns on) as well as under padding reads.
  bool block_outside = false;
  if (info && value_read && (cs.on.out_of_bounds || cs.on.padding))
    for (int d = 0; d < info->array_shape.n; ++d)
      block_outside = block_outside || info->start[d] >= info->array_shape[d] || info->start[d] + info->block[d] <= 0;
  const bool per_element = info && ((info->shadow && cs.on.shadow()) ||
                                    (info->scratch_written && cs.on.uninitialized));

  // A rectangular access (no index arrays) is checked against the ref and the array by its
  // corners; only shadow and scratch bookkeeping then needs every element.
  bool rect_ok = false;
  if (!a.has_array) {
    rect_ok = true;
    int64_t lo[kMaxRank], hi[kMaxRank];
    for (int d = 0; d < a.ndims; ++d) {
      const DimAccess& x = a.dims[d];
      lo[d] = hi[d] = x.start;
      if (x.kind == DimAccess::Range) {
        int64_t last = x.start + x.step * (os[x.axis] - 1);
        lo[d] = std::min(x.start, last), hi[d] = std::max(x.start, last);
      }
      if (lo[d] < 0 || hi[d] >= ref.shape[d]) rect_ok = false;
    }
    if (rect_ok && info && value_read && (cs.on.padding || block_outside))
      for (int k = 0; k < a.ndims; ++k) {
        int d = info->ref_dim_to_array[k];
        if (info->start[d] + lo[k] < 0 || info->start[d] + hi[k] >= info->array_shape[d]) rect_ok = false;  // padding
      }
    if (rect_ok && !per_element) return;
  }

  const std::string what = info && info->what ? *info->what : std::string("a ref");
  const int64_t p = ctx.linear_program;
  const int32_t p32 = static_cast<int32_t>(p);
  int64_t idx[kMaxRank] = {}, c[kMaxRank], ac[kMaxRank], arr_strides[kMaxRank];
  {
    int64_t st = 1;
    for (int k = a.arr_rank - 1; k >= 0; --k) arr_strides[k] = st, st *= os[a.arr_axis0 + k];
  }
  Dims astr;
  int rank = info ? info->array_shape.n : 0;
  if (info) astr = contiguous_strides(info->array_shape);
  const int64_t pcls = cs.race_class(p);
  int64_t memo_q = -1, memo_cls = 0;
  auto cls = [&](int32_t q) {
    if (q != memo_q) memo_q = q, memo_cls = cs.race_class(q);
    return memo_cls;
  };
  auto other = [&](int32_t q) { return q >= 0 && q != p32 && cls(q) != pcls; };
  auto fail = [&](std::string m) { cs.report(p, "program " + cs.program_str(p) + " " + m); };
  auto coords_of = [&](int64_t lin) {  // array coordinates of a linear index, for messages
    for (int d = rank - 1; d >= 0; --d) {
      int64_t sz = info->array_shape[d];
      ac[d] = sz ? lin % sz : 0;
      lin = sz ? lin / sz : 0;
    }
    return coords_str(ac, rank);
  };
  auto race = [&](int64_t lin, int32_t q, const char* qdid) {
    int axis = cs.first_parallel_difference(q, p);
    cs.report(p, "race on " + what + " element " + coords_of(lin) + ": program " + cs.program_str(q) + " " + qdid +
                     " it and program " + cs.program_str(p) + " " + verb(kind, ins.eqn->prim->id) +
                     " it; they differ along grid axis " + std::to_string(axis) +
                     ", which is parallel, so they may run at once on the GPU. Give each program its own block, "
                     "declare that axis pl::sequential (dimension_semantics), or use atomics");
  };
  // The bookkeeping of one element inside the array (linear index lin); false: reported, stop.
  auto element = [&](int64_t lin) -> bool {
    if (info->scratch_written) {
      uint8_t& wr = info->scratch_written[lin];
      if (reads && !wr && cs.on.uninitialized) {
        fail(std::string(verb(kind, ins.eqn->prim->id)) + " " + what + " element " + coords_of(lin) +
             ", which it has not written: scratch starts uninitialised in every program. Write it first");
        return false;
      }
      if (kind != AccessKind::Read) wr = 1;
      return true;
    }
    if (!info->shadow) return true;
    ShadowElem& e = info->shadow[lin];
    if (reads && cs.on.uninitialized && e.w == -1 && e.a1 == -1) {
      fail(std::string(verb(kind, ins.eqn->prim->id)) + " " + what + " element " + coords_of(lin) +
           ", which no program has written: outputs start uninitialised (poison in the interpreter, stale memory on the "
           "GPU). Write it before reading it (e.g. under pl::when(pl::program_id(axis) == 0)), or alias an input to this "
           "output");
      return false;
    }
    if (cs.on.races) {
      int32_t q = -1;
      const char* did = "";
      if (other(e.w)) q = e.w, did = "writes";
      else if (kind != AccessKind::Atomic && other(e.a1)) q = e.a1, did = "atomically updates";
      else if (kind != AccessKind::Atomic && other(e.a2)) q = e.a2, did = "atomically updates";
      else if (kind != AccessKind::Read && other(e.r1)) q = e.r1, did = "reads";
      else if (kind != AccessKind::Read && other(e.r2)) q = e.r2, did = "reads";
      if (q >= 0) {
        race(lin, q, did);
        return false;
      }
    }
    auto note = [&](int32_t& s1, int32_t& s2) {
      if (s1 < 0) s1 = p32;
      else if (s1 != p32 && s2 < 0 && cls(s1) != pcls) s2 = p32;
    };
    if (kind == AccessKind::Atomic) note(e.a1, e.a2);
    else {
      if (reads) note(e.r1, e.r2);
      if (kind != AccessKind::Read) e.w = p32;
    }
    return true;
  };

  if (rect_ok) {  // in the ref and (for value reads) in the array: walk the array's linear index
    int64_t base = 0, step[kMaxRank] = {};
    for (int d = 0; d < rank; ++d) base += info->start[d] * astr[d];
    for (int k = 0; k < a.ndims; ++k) {
      const DimAccess& x = a.dims[k];
      int64_t s = astr[info->ref_dim_to_array[k]];
      base += x.start * s;
      if (x.kind == DimAccess::Range) step[x.axis] += x.step * s;
    }
    bool inside = true;  // the accessed box lies inside the array (else skip elements in the padding)
    for (int k = 0; k < a.ndims && inside; ++k) {
      const DimAccess& x = a.dims[k];
      int d = info->ref_dim_to_array[k];
      int64_t first = info->start[d] + x.start;
      int64_t last = x.kind == DimAccess::Range ? first + x.step * (os[x.axis] - 1) : first;
      if (std::min(first, last) < 0 || std::max(first, last) >= info->array_shape[d]) inside = false;
    }
    int64_t lin = base;
    for (int64_t i = 0; i < n; ++i) {
      if (i) {
        for (int k = os.n - 1; k >= 0; --k) {
          lin += step[k];
          if (++idx[k] < os[k]) break;
          lin -= step[k] * os[k];
          idx[k] = 0;
        }
      }
      if (mask && !mask[i]) continue;
      if (!inside) {  // writes (dropped) and += / atomics in the padding are not reported
        bool in = true;
        for (int k = 0; k < a.ndims; ++k) {
          const DimAccess& x = a.dims[k];
          int d = info->ref_dim_to_array[k];
          int64_t co = info->start[d] + (x.kind == DimAccess::Range ? x.start + x.step * idx[x.axis] : x.start);
          if (co < 0 || co >= info->array_shape[d]) in = false;
        }
        if (!in) continue;
      }
      if (!element(lin)) return;
    }
    return;
  }

  for (int64_t i = 0; i < n; ++i) {
    if (i) {
      for (int k = os.n - 1; k >= 0; --k) {
        if (++idx[k] < os[k]) break;
        idx[k] = 0;
      }
    }
    if (mask && !mask[i]) continue;
    int64_t arr_flat = 0;
    for (int k = 0; k < a.arr_rank; ++k) arr_flat += idx[a.arr_axis0 + k] * arr_strides[k];
    bool inref = true;
    for (int d = 0; d < a.ndims; ++d) {
      const DimAccess& x = a.dims[d];
      c[d] = x.kind == DimAccess::Fixed ? x.start : x.kind == DimAccess::Range ? x.start + x.step * idx[x.axis] : x.arr[arr_flat];
      if (x.kind == DimAccess::Array && c[d] < 0) c[d] += ref.shape[d];  // negative entries count from the end
      if (c[d] < 0 || c[d] >= ref.shape[d]) inref = false;
    }
    if (!inref) {
      if (!cs.on.out_of_bounds) continue;
      int bad = 0;
      while (bad < a.ndims && c[bad] >= 0 && c[bad] < ref.shape[bad]) ++bad;
      fail(std::string(verb(kind, ins.eqn->prim->id)) + " " + what + " at " + coords_str(c, a.ndims) + ", outside " +
           ref_desc(info, ref) + " (index " + std::to_string(c[bad]) + " on dim " + std::to_string(bad) + " of size " +
           std::to_string(ref.shape[bad]) + "): the interpreter reads poison there and drops writes, the GPU may touch "
           "other memory. Keep ds starts and indices within the ref, or mask the access");
      return;
    }
    if (!info) continue;
    bool inarr = true;
    for (int d = 0; d < rank; ++d) ac[d] = info->start[d];
    for (int k = 0; k < a.ndims; ++k) ac[info->ref_dim_to_array[k]] += c[k];
    int64_t lin = 0;
    for (int d = 0; d < rank; ++d) {
      if (ac[d] < 0 || ac[d] >= info->array_shape[d]) inarr = false;
      lin += ac[d] * astr[d];
    }
    if (!inarr) {  // the padding of an overhanging block: only reads that give a value count
      auto array_str = [&] {
        std::string shape;
        for (int d = 0; d < rank; ++d) shape += (d ? "," : "") + std::to_string(info->array_shape[d]);
        return dtype_name(ref.dtype) + std::string("[") + shape + "] array";
      };
      if (block_outside) {  // (value reads only)
        for (int d = 0; d < rank; ++d) {
          int64_t st = info->start[d], b = info->block[d], n = info->array_shape[d];
          if (st < n && st + b > 0) continue;
          int64_t bi = b > 0 ? (st >= 0 ? st / b : -((-st + b - 1) / b)) : st;
          std::string at = ins.eqn->loc.file ? " (at " + ins.eqn->loc.str() + ")" : "";
          fail(std::string(verb(kind, ins.eqn->prim->id)) + " " + what + at + " from a block wholly outside the " +
               array_str() + ": its index map put block index " + std::to_string(bi) +
               " of dim " + std::to_string(d) + " at element " + std::to_string(st) +
               (st >= n ? ", past the array's size " + std::to_string(n) + " there" : ", before the array's start") +
               ", so every element read is poison. The index map is the likely bug: it returns block indices (element "
               "start = index x block size " + std::to_string(b) + "), which must be in [0, " +
               std::to_string((n + b - 1) / std::max<int64_t>(b, 1)) + ") on that dim");
          return;
        }
      }
      if (cs.on.padding && value_read) {
        std::string range;
        for (int d = 0; d < rank; ++d)
          range += (d ? ", " : "") + std::to_string(info->start[d]) + ":" + std::to_string(info->start[d] + info->block[d]);
        fail(std::string(verb(kind, ins.eqn->prim->id)) + " " + what + " element " + coords_str(ac, rank) + ", beyond the edge of the " +
             array_str() + ": its block [" + range +
             "] overhangs the array and this unmasked lane reads the padding (poison). Mask the load "
             "(pl::load(ref, idx, {.mask = ...})) or use a block shape that divides the array");
        return;
      }
      continue;
    }
    if (!element(lin)) return;
  }
}

Val read(const Instr& ins, const Val* env, Ctx& ctx, const Access& a, const bool* mask, const Val* other) {
  const Val& ref = env[ins.in[0]];
  size_t w = itemsize(ref.dtype);
  int64_t off;
  Dims st;
  if (ins.view_ok && !mask && rectangular(a, ref, &off, &st)) {  // only dots read it (program.cc)
    Val v;
    v.dtype = ref.dtype;
    v.shape = a.out_shape;
    v.strides = st;
    v.data = static_cast<unsigned char*>(ref.data) + off * w;
    return v;
  }
  Val o = ctx.alloc(ref.dtype, a.out_shape);
  if (!mask && rectangular(a, ref, &off, &st)) {
    strided_copy(o.data, contiguous_strides(a.out_shape), static_cast<unsigned char*>(ref.data) + off * w, st,
                 a.out_shape, w);
    return o;
  }
  fill_poison(ref.dtype, o.data, o.size());
  by_width(w, [&]<class B>() {
    B* dst = o.as<B>();
    const B* src = ref.as<B>();
    const B* oth = other ? other->as<B>() : nullptr;
    for_each_element(a, ref, [&](int64_t i, int64_t roff) {
      if (mask && !mask[i]) {
        if (oth) dst[i] = oth[i];
        return;
      }
      if (roff >= 0) dst[i] = src[roff];
    });
  });
  return o;
}

void write(const Val& ref, const Access& a, const Val& v, const bool* mask) {
  size_t w = itemsize(ref.dtype);
  int64_t off;
  Dims st;
  if (!mask && rectangular(a, ref, &off, &st)) {
    strided_copy(static_cast<unsigned char*>(ref.data) + off * w, st, v.data, contiguous_strides(a.out_shape),
                 a.out_shape, w);
    return;
  }
  by_width(w, [&]<class B>() {
    B* dst = ref.as<B>();
    const B* src = v.as<B>();
    for_each_element(a, ref, [&](int64_t i, int64_t roff) {
      if ((mask && !mask[i]) || roff < 0) return;
      dst[roff] = src[i];
    });
  });
}

// Writes into the padding of an edge block are dropped: poison it again (Padding, value.h).
void drop_padding_writes(const Val& ref) {
  if (!ref.pad) return;
  const Padding& p = *ref.pad;
  size_t w = itemsize(ref.dtype);
  int64_t n = ref.size();
  int64_t idx[kMaxRank] = {};
  for (int64_t i = 0; i < n; ++i) {
    bool inside = true;
    for (int d = 0; d < ref.shape.n; ++d) inside = inside && idx[d] >= p.lo[d] && idx[d] < p.hi[d];
    if (!inside) fill_poison(ref.dtype, static_cast<unsigned char*>(ref.data) + i * w, 1);
    for (int d = ref.shape.n - 1; d >= 0; --d) {
      if (++idx[d] < ref.shape[d]) break;
      idx[d] = 0;
    }
  }
}

void load_rule(const Instr& ins, Val* env, Ctx& ctx) {
  Access a = resolve(ins, env);
  size_t k = after_indices(ins);
  const bool* mask = ins.has_mask ? env[ins.in[k++]].as<bool>() : nullptr;
  const Val* other = ins.has_other ? &env[ins.in[k++]] : nullptr;
  if (ctx.checks) check_access(ins, env, ctx, a, mask, AccessKind::Read);
  env[ins.out[0]] = read(ins, env, ctx, a, mask, other);
}

void store_rule(const Instr& ins, Val* env, Ctx& ctx) {
  Access a = resolve(ins, env);
  const bool* mask = ins.has_mask ? mask_at(ins, env, after_indices(ins)) : nullptr;
  if (ctx.checks) check_access(ins, env, ctx, a, mask, AccessKind::Write);
  write(env[ins.in[0]], a, env[ins.in[1]], mask);
  drop_padding_writes(env[ins.in[0]]);
}

// Masked-off lanes of the result are the operand (the value that was not stored), as Pallas.
void swap_rule(const Instr& ins, Val* env, Ctx& ctx) {
  Access a = resolve(ins, env);
  const bool* mask = ins.has_mask ? mask_at(ins, env, after_indices(ins)) : nullptr;
  if (ctx.checks) check_access(ins, env, ctx, a, mask, AccessKind::ReadWrite);
  Val old = read(ins, env, ctx, a, mask, &env[ins.in[1]]);
  write(env[ins.in[0]], a, env[ins.in[1]], mask);
  drop_padding_writes(env[ins.in[0]]);
  env[ins.out[0]] = old;
}

// Read-modify-write of every element; returns the old values. Programs that can touch the
// same ref run on one thread in order (see interpreter.cc), so plain updates are atomic.
template <class Update>
Val rmw(const Instr& ins, Val* env, Ctx& ctx, const Access& a, const bool* mask, Update&& upd) {
  const Val& ref = env[ins.in[0]];
  Val old = ctx.alloc(ref.dtype, a.out_shape);
  fill_poison(ref.dtype, old.data, old.size());
  dispatch(ref.dtype, [&]<class T>() {
    T* r = ref.as<T>();
    T* o = old.as<T>();
    for_each_element(a, ref, [&](int64_t i, int64_t roff) {
      if ((mask && !mask[i]) || roff < 0) return;
      o[i] = r[roff];
      r[roff] = upd.template operator()<T>(r[roff], i);
    });
  });
  drop_padding_writes(ref);
  return old;
}

using ir::AtomicOp;

template <class T>
T combine(AtomicOp op, T cur, T v) {
  using E = Elem<T>;
  using C = typename E::C;
  C a = E::get(cur), b = E::get(v);
  constexpr bool int_like = std::is_integral_v<C> && !std::is_same_v<C, bool>;
  switch (op) {
    case AtomicOp::Add:
      if constexpr (int_like)
        return E::put(static_cast<C>(static_cast<std::make_unsigned_t<C>>(a) + static_cast<std::make_unsigned_t<C>>(b)));
      else
        return E::put(static_cast<C>(a + b));
    // max/min propagate NaN and order -0 below +0 (as lax.max/min), so that atomics from
    // programs running in any order give one result
    case AtomicOp::Max:
    case AtomicOp::Min:
      if constexpr (std::is_floating_point_v<C>) {
        if (std::isnan(a) || std::isnan(b)) return E::put(std::numeric_limits<C>::quiet_NaN());
        if (a == b) return E::put((std::signbit(a) == (op == AtomicOp::Max)) ? b : a);
      }
      return E::put(op == AtomicOp::Max ? (a > b ? a : b) : (a < b ? a : b));
    case AtomicOp::Xchg: return v;
    case AtomicOp::And:
    case AtomicOp::Or:
    case AtomicOp::Xor:
      if constexpr (int_like) {
        if (op == AtomicOp::And) return static_cast<T>(a & b);
        if (op == AtomicOp::Or) return static_cast<T>(a | b);
        return static_cast<T>(a ^ b);
      } else {
        throw Error(std::string("atomic_") + ir::enum_name(op) + ": does not take " + dtype_name(dtype_of<T>()));
      }
  }
  ir::bad_enum("atomic_rmw", "atomic op", static_cast<int>(op));
}

void addupdate_rule(const Instr& ins, Val* env, Ctx& ctx) {
  Access a = resolve(ins, env);
  const Val& v = env[ins.in[1]];
  // `ref[...] += v` is atomic on the GPU where programs on parallel axes share the block
  if (ctx.checks) check_access(ins, env, ctx, a, nullptr, AccessKind::Atomic);
  rmw(ins, env, ctx, a, nullptr, [&]<class T>(T cur, int64_t i) { return combine<T>(AtomicOp::Add, cur, v.as<T>()[i]); });
}

void atomic_rmw_rule(const Instr& ins, Val* env, Ctx& ctx) {
  Access a = resolve(ins, env);
  const Val& v = env[ins.in[1]];
  AtomicOp op = ins.eqn->params.get<AtomicOp>("op");
  const bool* mask = ins.has_mask ? mask_at(ins, env, after_indices(ins)) : nullptr;
  if (ctx.checks) check_access(ins, env, ctx, a, mask, AccessKind::Atomic);
  env[ins.out[0]] = rmw(ins, env, ctx, a, mask, [&]<class T>(T cur, int64_t i) { return combine<T>(op, cur, v.as<T>()[i]); });
}

void atomic_cas_rule(const Instr& ins, Val* env, Ctx& ctx) {
  Access a = resolve(ins, env);
  const Val& cmp = env[ins.in[1]];
  const Val& v = env[ins.in[2]];
  if (ctx.checks) check_access(ins, env, ctx, a, nullptr, AccessKind::Atomic);
  env[ins.out[0]] = rmw(ins, env, ctx, a, nullptr, [&]<class T>(T cur, int64_t i) {
    return std::memcmp(&cur, &cmp.as<T>()[i], sizeof(T)) == 0 ? v.as<T>()[i] : cur;
  });
}

}  // namespace

void register_memory_rules() {
  auto& t = rule_table_for_registration();
  t.set(PrimId::load, load_rule);
  t.set(PrimId::store, store_rule);
  t.set(PrimId::swap, swap_rule);
  t.set(PrimId::addupdate, addupdate_rule);
  t.set(PrimId::atomic_rmw, atomic_rmw_rule);
  t.set(PrimId::atomic_cas, atomic_cas_rule);
}

}  // namespace pallas::interp
