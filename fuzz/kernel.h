// A fuzz kernel as plain data: arrays with their block specs, a grid, and a small program (a
// list of ops over numbered values, with nested programs for loops and conds). The same
// description is
//   - built into a real pallas_call through the public API (build.cc),
//   - printed as a self-contained GoogleTest (print.cc),
//   - shrunk while a failure persists (shrink.cc).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <pallas/pallas.h>

namespace fuzz {
namespace pl = pallas;

// Block index of one array dimension as a function of the program ids.
enum class MapKind : uint8_t {
  Zero,  // 0
  Axis,  // program_id(axis)
  Rev,   // num_programs(axis) - 1 - program_id(axis)
  Mod,   // program_id(axis) % mod
  Pref,  // ((s[program_id(axis) % len(s)] % mod) + mod) % mod, s the scalar-prefetch operand
};
struct DimMap {
  MapKind kind = MapKind::Zero;
  int axis = 0;
  int mod = 1;
};

struct ArrayDesc {
  pl::DType dtype = pl::DType::F32;
  pl::Shape shape;
  bool whole = true;          // BlockSpec(): the kernel sees the whole array
  bool any = false;           // whole, as BlockSpec(shape, pl::MemorySpace::Any)
  bool prefetch = false;      // a scalar-prefetch operand (i32, rank 1; leads the inputs)
  pl::Shape block;            // pl::squeezed (-1) for a dropped dimension
  std::vector<DimMap> map;    // one per dimension
  pl::Shape view() const;     // the shape the kernel's ref has
};

// One indexer of a ref access.
struct Idx {
  enum Kind : uint8_t { All, Static, Dyn, Slice, DynSlice, Array } kind = All;
  int64_t start = 0, size = 0, stride = 1;
  int v = -1;  // Dyn: index value; DynSlice: start value; Array: index array
};

enum class K : uint8_t {
  ProgramId, NumPrograms,
  Const,   // typed scalar constant (dt, c)
  Weak,    // weak C++ scalar (c; f1: float)
  Full, Iota,
  Unary, Binary, Where, SelectN, Clamp, IntPow, Convert, Bitcast, StopGrad, Hint,
  Broadcast, Reshape, Transpose, ExpandDims, Squeeze,
  Reduce, ArgReduce, Cumsum, Dot,
  Load, Store, AddUpdate, Swap, Atomic, AtomicCas,
  Fori, While, Cond, Switch, When,
};

struct Program;

struct Op {
  K k = K::Const;
  std::string fn;           // Unary/Binary/Reduce/ArgReduce/Atomic/Hint name
  std::vector<int> in;      // value operands
  std::vector<int64_t> p;   // shape, axes, perm, loop bounds ...
  pl::DType dt = pl::DType::F32;
  double c = 0;
  bool f1 = false, f2 = false;  // keepdims; trans_a/trans_b; dynamic loop bounds; weak float
  int prec = 0;             // dot precision (0 default, 1 high, 2 highest); -1 absent
  int pref = -1;            // dot preferred type (a DType as int), -1 none
  int ref = -1;             // ref operand: inputs, then outputs, then scratch
  std::vector<Idx> idx;
  int mask = -1, other = -1;
  std::vector<Program> body;  // Fori: {body}; While: {cond, body}; Cond: {then, else}; Switch: branches; When: {body}
  std::vector<int> out;       // result value ids
};

struct Program {
  std::vector<int> params;  // value ids bound on entry (loop index, carries, branch operands)
  std::vector<Op> ops;
  std::vector<int> yields;
};

struct Kernel {
  uint64_t seed = 0;
  int64_t index = 0;
  std::vector<int64_t> grid;
  std::vector<bool> dynamic;  // per grid axis: pl::dynamic, its size passed as an i32 scalar
  std::vector<int> dim_sem;   // per grid axis: 0 pl::parallel, 1 pl::sequential; empty: inferred
  std::vector<ArrayDesc> ins, outs;
  std::vector<pl::ShapeDtype> scratch;
  std::map<int, int> aliases;  // input -> output
  int num_warps = 0;
  Program body;
  std::vector<double> out_tol;     // per output: 0 compare bit for bit, else relative tolerance
  std::vector<uint64_t> in_seeds;  // per input: fuzz::input(shape, dtype, seed, edges)
  std::vector<int> in_edges;       // per input: -1 (the seed decides), 0 or 1
  int next_id = 0;
  std::set<std::string> features;  // what the generator used (reported as coverage)
  std::string name() const { return "fuzz_" + std::to_string(seed) + "_" + std::to_string(index); }
  int num_refs() const { return static_cast<int>(ins.size() + outs.size() + scratch.size()); }
  int num_prefetch() const {
    int n = 0;
    while (n < static_cast<int>(ins.size()) && ins[static_cast<size_t>(n)].prefetch) ++n;
    return n;
  }
};

// ---- build (build.cc) ----
struct ValueType {
  pl::Shape shape;
  pl::DType dtype = pl::DType::F32;
  bool weak = false;
  bool defined = false;
};

// Applies ops through the public API while a kernel is traced. Subclasses (the generator)
// hook into the bodies of control flow.
class Builder {
 public:
  explicit Builder(Kernel& k) : k_(k) {}
  virtual ~Builder() = default;
  void run_kernel(const std::vector<pl::Ref>& refs);
  void run_program(Program& prog);
  void apply(Op& op);  // one op; its results go to vals
  pl::Value& val(int id);
  std::vector<pl::Value> vals;
  std::vector<ValueType> types;  // recorded as ops are applied
  std::vector<pl::Ref> refs;

 protected:
  virtual std::vector<pl::Value> run_body(Op& op, size_t b, const std::vector<pl::Value>& params);
  void set(int id, const pl::Value& v);
  Kernel& k_;
};

pl::CallOptions call_options(const Kernel& k, pl::Backend backend);
std::vector<pl::ShapeDtype> out_shapes(const Kernel& k);
std::vector<pl::Array> make_inputs(const Kernel& k);
// A call whose kernel replays the description (a copy is kept by the call).
pl::Call make_call(const Kernel& k, pl::Backend backend, std::vector<ValueType>* types = nullptr);
// Value ids used anywhere (operands, masks, indices, yields).
void collect_uses(const Program& p, std::vector<int>& uses);

// ---- print (print.cc) ----
std::string cpp_kernel_lambda(const Kernel& k, const std::string& indent);
std::string cpp_test(const Kernel& k, const std::string& test_name, const std::string& comment,
                     const std::string& expect_ir_hash = "");
int count_ops(const Program& p);

// ---- generate (generate.cc) ----
struct GenOptions {
  std::set<std::string> disabled;  // feature families (see kFeatures)
  std::set<pl::DType> dtypes;      // allowed dtypes
  int max_ops = 24;
};
extern const char* const kFeatures[];
// Generates kernel `index` of `seed`. The kernel is traced while it is generated, so the
// library types every value; `error` is set when the library refused a choice (a generator
// bug, or a bug in the library's abstract evaluation), and `kernel` then holds the ops up to
// the refused one. `ir` is the traced call's text (without its first line, which names the
// source location).
struct Generated {
  Kernel kernel;
  std::string ir;
  std::string error;
};
Generated generate(uint64_t seed, int64_t index, const GenOptions& opts);
// The traced text of a call without its first line.
std::string ir_text(const pl::Call& c);

// ---- shrink (shrink.cc) ----
// Shrinks k while `fails` holds; returns the smallest failing kernel found.
Kernel shrink(const Kernel& k, const std::function<bool(const Kernel&)>& fails, double max_seconds, int* steps);
// Every output and scratch ref is fully written (or aliased) before anything else touches it.
bool initialised(const Kernel& k);

}  // namespace fuzz
