// The interpreter's runtime values: whole tiles in arena memory, refs as strided views.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "pallas/dtype.h"
#include "src/ir/ir.h"
#include "src/ir/primitive.h"

namespace pallas::interp {

inline constexpr int kMaxRank = 8;

// A shape or stride list without heap allocation.
struct Dims {
  int8_t n = 0;
  int64_t d[kMaxRank] = {};
  Dims() = default;
  explicit Dims(const Shape& s);
  int64_t size() const {
    int64_t r = 1;
    for (int k = 0; k < n; ++k) r *= d[k];
    return r;
  }
  int64_t operator[](int k) const { return d[k]; }
  int64_t& operator[](int k) { return d[k]; }
  Shape shape() const { return Shape(d, d + n); }
  bool operator==(const Dims& o) const {
    if (n != o.n) return false;
    for (int k = 0; k < n; ++k)
      if (d[k] != o.d[k]) return false;
    return true;
  }
};
Dims contiguous_strides(const Dims& shape);

struct RefInfo;

// The part of a padded block (an edge block copied into a buffer with poison around it) that
// lies inside its array: [lo, hi) per ref dim. Writes outside it are dropped (the padding is
// poisoned again after every write), as on the GPU, which has no copy and masks them.
struct Padding {
  Dims lo, hi;
};

// A value (contiguous tile or scalar) or a ref (strided view of a block or scratch buffer).
// A value may also be a strided view of a ref (strides set): only loads whose results feed
// nothing but dots make those (see Instr::view_ok).
struct Val {
  DType dtype = DType::F32;
  bool is_ref = false;
  Dims shape;
  Dims strides;  // refs and value views, in elements; empty for contiguous values
  void* data = nullptr;
  const RefInfo* info = nullptr;  // refs, while the interpreter's checks are on
  const Padding* pad = nullptr;   // refs of padded edge blocks
  int64_t size() const { return shape.size(); }
  template <class T>
  T* as() const { return static_cast<T*>(data); }
};

// Bump allocator; a mark/reset pair frees everything allocated in between.
class Arena {
 public:
  Arena() = default;
  Arena(const Arena&) = delete;
  void* alloc(size_t bytes);
  struct Mark {
    size_t chunk, offset;
  };
  Mark mark() const { return {cur_, off_}; }
  void reset(Mark m) { cur_ = m.chunk, off_ = m.offset; }

 private:
  // Chunks come from the 64-byte-aligned operator new[], so they go back to the aligned delete[].
  struct AlignedDelete {
    void operator()(unsigned char* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  struct Chunk {
    std::unique_ptr<unsigned char[], AlignedDelete> mem;
    size_t size;
  };
  std::vector<Chunk> chunks_;
  size_t cur_ = 0, off_ = 0;
};

struct Program;
struct CallRuntime;
struct CheckState;
struct DeferredDots;

// Everything a rule can see while a program of the grid runs.
struct Ctx {
  Arena* arena;
  const int64_t* program_ids;  // one per grid axis
  const int64_t* grid;         // sizes (dynamic ones resolved)
  int grid_rank;
  CallRuntime* call;  // shared by all programs of a call (printing, checks)
  int64_t linear_program = 0;   // row-major index of the program in the grid
  CheckState* checks = nullptr; // the interpreter's checks, when on (checks.h)
  DeferredDots* deferred = nullptr;  // set by a fori_loop whose body defers its dots (below)
  Val alloc(DType t, const Dims& shape) {
    Val v;
    v.dtype = t;
    v.shape = shape;
    v.data = arena->alloc(static_cast<size_t>(shape.size()) * itemsize(t));
    return v;
  }
};

struct Instr;
using Rule = void (*)(const Instr&, Val* env, Ctx& ctx);

struct Instr {
  Rule rule;
  const ir::Eqn* eqn;
  std::vector<int> in, out;                      // env slots
  std::vector<std::shared_ptr<Program>> subs;    // compiled sub-jaxprs (loops, branches)
  // load: the result feeds only dots and no ref is written before they run, so an in-bounds
  // rectangular load may return a strided view of the ref instead of a copy.
  bool view_ok = false;
  // Memory ops (params with an "idx"): the indexer and where the mask / other operands sit,
  // read from the params once (a params lookup compares strings).
  const ir::NDIndexer* indexer = nullptr;
  int idx_start = 0, after_idx = 0;
  bool has_mask = false, has_other = false;
  // dot: its flags, read once
  bool trans_a = false, trans_b = false;
  Precision precision = Precision::Default;
  // fori_loop: carries whose initial value is a fresh buffer nothing else uses (bit k for
  // carry k), which the loop adopts as the carry's buffer instead of copying it.
  uint64_t adopt_init = 0;
};

// A jaxpr compiled to a flat list of instructions over numbered slots.
struct Program {
  std::vector<Instr> instrs;
  int num_slots = 0;
  std::vector<int> invars, outvars;
  // A fori_loop body whose carry `defer_carry` is only accumulated into, by one in-place
  // acc + dot(a, b) of loaded ref slices, and which writes no ref: the loop may collect those
  // dots and run them as one multi-segment GEMM (the slices stay valid; same summation order).
  int defer_carry = -1;
  std::vector<std::pair<int, Val>> constants;  // literal slots and their values
  std::vector<std::unique_ptr<unsigned char[]>> constant_storage;
  ir::JaxprPtr keep_alive;
};

// owned_invars: invars whose buffers the program may overwrite once they are dead (loop
// carries, which the loop rule allocated).
// fori_body: j is a fori_loop body (invars: index, carries, captures; outvars: carries).
std::shared_ptr<Program> compile(const ir::JaxprPtr& j, const std::vector<bool>& owned_invars = {}, bool fori_body = false);
// Runs p; args are copied into the invar slots; returns pointers into env for the outputs.
void run(const Program& p, const Val* args, Val* outs, Ctx& ctx);

// The dots a deferring loop has collected for its carry (rules_dot.cc runs them).
struct DeferredDots {
  void* acc = nullptr;           // the carry's buffer (f32)
  const Instr* instr = nullptr;  // the acc + dot instruction (its params)
  std::vector<Val> operands;     // a0, b0, a1, b1, ...: strided views of refs
  int64_t k = 0;                 // their total contraction length
};
void flush_deferred(DeferredDots& d, Ctx& ctx);

// Rule table of the interpreter (filled by rules_*.cc).
ir::RuleTable<Rule>& rules();
// The same table without the one-time fill (used by the rules_*.cc files while filling it).
ir::RuleTable<Rule>& rule_table_for_registration();

// Element access helpers: every dtype is computed in a C++ type (16-bit floats in float).
template <class T>
struct Elem {
  using C = T;
  static C get(T v) { return v; }
  static T put(C v) { return v; }
};
template <class T>
  requires is_packed_float_v<T>
struct Elem<T> {
  using C = float;
  static C get(T v) { return packed_to_float(v); }
  static T put(C v) { return float_to_packed<T>(v); }
};

// Invoke f.template operator()<T>() for the storage type T of dtype t.
template <class F>
decltype(auto) dispatch(DType t, F&& f) {
  switch (t) {
#define PALLAS_X(name, type, str) \
  case DType::name: return f.template operator()<type>();
    PALLAS_DTYPES(PALLAS_X)
#undef PALLAS_X
  }
  return f.template operator()<float>();
}

// Invoke f.template operator()<B>() with B the unsigned integer of width w bytes: for code
// that only moves elements.
template <class F>
void by_width(size_t w, F&& f) {
  switch (w) {
    case 1: f.template operator()<uint8_t>(); break;
    case 2: f.template operator()<uint16_t>(); break;
    case 4: f.template operator()<uint32_t>(); break;
    default: f.template operator()<uint64_t>(); break;
  }
}

// Poison for out-of-bounds reads: NaN for floats, a recognisable pattern for integers.
void fill_poison(DType t, void* p, int64_t n);

}  // namespace pallas::interp
