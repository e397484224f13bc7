// Registration of the CUDA lowering rules, one file per op family.
#pragma once
#include <functional>
#include <optional>

#include "src/backends/cuda/lower.h"

namespace pallas::cuda {
void register_elementwise_rules(ir::RuleTable<LowerRule>& t);
void register_shape_rules(ir::RuleTable<LowerRule>& t);   // shape, reduce
void register_dot_rules(ir::RuleTable<LowerRule>& t);     // dot: tensor cores (mma.sync) or SIMT
void register_memory_rules(ir::RuleTable<LowerRule>& t);
void register_control_rules(ir::RuleTable<LowerRule>& t);  // loops, cond, grid queries, print, check

// Whether values of compute type T (compute_type) move by warp shuffles: 4- and 8-byte types.
inline bool shuffles(const std::string& T) { return T == "float" || T == "double" || T == "i32" || T == "u32" || T == "i64" || T == "u64"; }

// Where each var of a loop body is defined and how often it is used (by its eqns and outputs):
// the loop plans (fragment carries, the pipeliner) look for single-use chains with it.
struct BodyUses {
  std::unordered_map<int64_t, const ir::Eqn*> def;
  std::unordered_map<int64_t, int> uses;
  explicit BodyUses(const ir::Jaxpr& body) {
    for (const ir::Eqn& e : body.eqns) {
      for (const ir::Atom& x : e.in)
        if (auto* v = std::get_if<ir::Var>(&x)) ++uses[v->id];
      for (const ir::Var& o : e.out) def[o.id] = &e;
    }
    for (const ir::Atom& x : body.outvars)
      if (auto* v = std::get_if<ir::Var>(&x)) ++uses[v->id];
  }
};

// A fori_loop carry kept in tensor-core fragments across the loop (rules_dot.cc).
// The carry may first be scaled row by row, `acc = acc * r[:, None] + dot(a, b)` (flash
// attention's rescaling): the fragments are multiplied by r in place before the dot.
struct FragmentCarry {
  const ir::Eqn* dot = nullptr;  // the body's dot whose result is added to the carry
  const ir::Eqn* add = nullptr;  // the body's add (absorbed: the mma accumulates in place)
  const ir::Eqn* scale_mul = nullptr, *scale_bcast = nullptr;  // acc * broadcast(r) (absorbed)
  ir::Atom scale_rows;           // r: M values, one per row
  std::string frag;              // the fragments' C name
};
std::optional<FragmentCarry> plan_fragment_carry(const KernelPlan& P, const ir::Jaxpr& body, size_t carry);
// Fills fc.frag (the loop output) from `init`, the initial value's C name in the carry's
// layout (a scalar when `scalar`).
void begin_fragment_carry(Emitter& E, const FragmentCarry& fc, const std::string& init, bool scalar);
void end_fragment_carry(Emitter& E, const FragmentCarry& fc);
// acc * r[:, None] of the carry a dot accumulates into, when the body scales it (else nothing):
// the dot's rule does it before its mma; a rotated loop does it at the top of the iteration.
void scale_fragment_carry(Emitter& E, const ir::Eqn& dot);
// After a wgmma wait: pins the accumulator registers there (no read moves above the wait).
void fence_fragments(Emitter& E, const std::string& frag, int64_t slots, bool is_float, bool arithmetic_users = false);
// Whether wgmma takes the dot's A from registers when A is in layout `a` (rules_dot.cc).
bool wgmma_a_from_registers(const KernelPlan& P, const ir::Eqn& dot, const ValueLayout& a);
// Such an A operand as wgmma reads it: 16-bit pairs packed into 32-bit registers, `dst`
// (declared by the caller, packed_a_words of them) <- the dot's operand 0.
int64_t packed_a_words(const Emitter& E, const ir::Eqn& dot);
void pack_a_operand(Emitter& E, const ir::Eqn& dot, const std::string& dst);

// The layout eqn's rule takes operand i in, given the layouts of the values (`of`); emit_eqns
// converts an operand held otherwise. Scalars are taken as they are.
ValueLayout operand_layout(const KernelPlan& P, const ir::Eqn& e, size_t i, const std::function<ValueLayout(const ir::Atom&)>& of);
// An operand of wgmma in shared memory with the 128-byte swizzle, as the tensor cores read it:
// K-major (rows of MN, K contiguous: 128-byte rows of 128/item elements, column blocks of K one
// after another) or MN-major (rows of K, MN contiguous: blocks of 64 MN columns one after
// another; 16-bit inputs only). Within each 8-row, 128-byte atom, 16-byte chunk c of row r sits
// at chunk c ^ (r % 8), so the 8 rows a fragment read (or a warp's 16-byte store) touches fall
// in different banks. The wgmma descriptor of a 64-row (MN) block at k step ks: start(),
// leading byte offset lbo() (between MN blocks, MN-major), stride byte offset 1024 (8 rows).
struct SwizzledTile {
  bool k_major = true;
  int64_t item = 2, mn = 0, kp = 0;  // element size; MN and K extents as allocated
  size_t off = 0, bytes = 0;         // from the 1024-aligned operand region
  int64_t per_row() const { return 128 / item; }
  std::string at(const std::string& m, const std::string& k) const {  // byte offset of (m, k)
    std::string E = std::to_string(per_row()), I = std::to_string(item);
    if (k_major)
      return "((" + k + ") / " + E + ") * " + std::to_string(mn * 128) + " + (" + m + ") * 128 + (((((" + k + ") % " + E + ") * " + I +
             " >> 4) ^ ((" + m + ") & 7)) << 4) + (((" + k + ") * " + I + ") & 15)";
    return "((" + m + ") / " + E + ") * " + std::to_string(kp * 128) + " + (" + k + ") * 128 + (((((" + m + ") % " + E + ") * " + I +
           " >> 4) ^ ((" + k + ") & 7)) << 4) + (((" + m + ") * " + I + ") & 15)";
  }
  std::string start(const std::string& m0, const std::string& ks, int64_t kinstr) const {
    if (k_major)  // every instruction takes 32 bytes of K
      return "((" + ks + ") * 32 / 128) * " + std::to_string(mn * 128) + " + (" + m0 + ") * 128 + ((" + ks + ") * 32) % 128";
    return "((" + m0 + ") / 64) * " + std::to_string(kp * 128) + " + (" + ks + ") * " + std::to_string(kinstr * 128);
  }
  int64_t lbo() const { return k_major ? 16 : kp * 128; }
};

SwizzledTile swizzled_tile(bool k_major, int64_t item, int64_t mn, int64_t k, int64_t kinstr);

// The shared tile a tensor-core dot reads operand `operand` (0: A, 1: B) from, when the dot
// takes wgmma (else nullopt); rows_are_mn: the operand's rows as the program holds it are the
// tile's MN (else K). The loop pipeline (pipeline.cc) copies loads straight into such tiles.
std::optional<SwizzledTile> wgmma_operand_tile(const KernelPlan& P, const ir::Eqn& dot, int operand, bool* rows_are_mn, int64_t* k_padding);
// The same for a dot of either tensor-core kind: an mma.sync dot reads an operand the loop keeps
// in shared memory (pipelined, resident) from such a tile too (mma_sync_operand_tile).
std::optional<SwizzledTile> mma_sync_operand_tile(const KernelPlan& P, const ir::Eqn& dot, int operand, bool* rows_are_mn, int64_t* k_padding);
std::optional<SwizzledTile> dot_operand_tile(const KernelPlan& P, const ir::Eqn& dot, int operand, bool* rows_are_mn, int64_t* k_padding);

// Writes a tile value into a swizzled operand tile at `base` (rows_are_mn as above; 16-byte
// stores where the blocked layout allows).
void put_swizzled(Emitter& E, const ir::Atom& x, const std::string& base, const SwizzledTile& L, bool rows_are_mn, DType t);

// Emits cp.async copies of a load eqn's tile into shared memory, element (flat) f of the tile
// going to byte `dst(f)` (a C expression; runs of the layout are contiguous there); elements
// outside the array are zero-filled (they read poison in the interpreter). False (and nothing
// emitted) unless the access is vectorised in 4, 8 or 16-byte pieces, unmasked and without
// index arrays (rules_memory.cc).
bool emit_async_load(Emitter& E, const ir::Eqn& load, const std::function<std::string(const std::string&)>& dst);
bool async_loadable(const KernelPlan& P, const ir::Eqn& load);  // whether emit_async_load takes it
// dst = element `flat` (a C expression, the flat index into the load's result) of a plain load
// (no mask, no index arrays), or poison outside the array: a folded load (KernelPlan::
// fragment_loads) read by its broadcast, slot by slot.
void emit_load_element(Emitter& E, const ir::Eqn& load, const std::string& flat, const std::string& dst);
int access_width(const Emitter& E, const ir::Eqn& access);    // elements per piece (the layout pass's)
// One 4-byte cp.async of element `e` (a C local the caller's loop defines, the flat element
// of the load's tile) to byte address `dst`, zero-filled outside the array: for copies in an
// order of the caller's (a transposing copy). Loads without index arrays, 4-byte elements.
void emit_async_copy_element(Emitter& E, const ir::Eqn& load, const std::string& dst);

}  // namespace pallas::cuda
