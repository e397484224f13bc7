// Compiling a jaxpr to slots and instructions, and running it.
#include <cmath>
#include <limits>
#include <new>
#include <unordered_map>

#include "src/backends/interpret/value.h"

namespace pallas::interp {

Dims::Dims(const Shape& s) {
  if (s.size() > kMaxRank) throw Error("interpreter: rank " + std::to_string(s.size()) + " exceeds the maximum of 8");
  n = static_cast<int8_t>(s.size());
  for (int k = 0; k < n; ++k) d[k] = s[k];
}

Dims contiguous_strides(const Dims& shape) {
  Dims s;
  s.n = shape.n;
  int64_t st = 1;
  for (int k = shape.n - 1; k >= 0; --k) {
    s.d[k] = st;
    st *= shape.d[k];
  }
  return s;
}

void* Arena::alloc(size_t bytes) {
  bytes = (bytes + 63) & ~size_t{63};
  while (true) {
    if (cur_ < chunks_.size()) {
      Chunk& c = chunks_[cur_];
      if (off_ + bytes <= c.size) {
        void* p = c.mem.get() + off_;
        off_ += bytes;
        return p;
      }
      ++cur_;
      off_ = 0;
      continue;
    }
    size_t size = std::max<size_t>(bytes, size_t{1} << 22);
    Chunk c{std::unique_ptr<unsigned char[], AlignedDelete>(new (std::align_val_t{64}) unsigned char[size]), size};
    chunks_.push_back(std::move(c));
  }
}

void register_elementwise_rules();
void register_shape_rules();
void register_memory_rules();
void register_dot_rules();
void register_reduce_rules();
void register_control_rules();

namespace {
ir::RuleTable<Rule>& table() {
  static ir::RuleTable<Rule> t("interpreter");
  return t;
}
}  // namespace

ir::RuleTable<Rule>& rule_table_for_registration() { return table(); }

ir::RuleTable<Rule>& rules() {
  static bool filled = [] {
    register_elementwise_rules();
    register_shape_rules();
    register_memory_rules();
    register_dot_rules();
    register_reduce_rules();
    register_control_rules();
    return true;
  }();
  (void)filled;
  return table();
}

void fill_poison(DType t, void* p, int64_t n) {
  dispatch(t, [&]<class T>() {
    T* q = static_cast<T*>(p);
    T v{};
    if constexpr (std::is_same_v<T, f16_t>) v = f16_t{0x7e00};
    else if constexpr (std::is_same_v<T, bf16_t>) v = bf16_t{0x7fc0};
    else if constexpr (std::is_same_v<T, f8e4m3_t> || std::is_same_v<T, f8e5m2_t>) v = T{0x7f};
    else if constexpr (std::is_floating_point_v<T>) v = std::numeric_limits<T>::quiet_NaN();
    else if constexpr (std::is_same_v<T, bool>) v = true;
    else if constexpr (std::is_signed_v<T>) v = std::numeric_limits<T>::min();  // as Pallas: int min
    else v = std::numeric_limits<T>::max();
    for (int64_t i = 0; i < n; ++i) q[i] = v;
  });
}

namespace {
struct Compiler {
  std::unordered_map<int64_t, int> slots;
  Program* p;
  int slot(const ir::Var& v) {
    auto it = slots.find(v.id);
    if (it != slots.end()) return it->second;
    int s = p->num_slots++;
    slots[v.id] = s;
    return s;
  }
  int atom(const ir::Atom& a) {
    if (auto* v = std::get_if<ir::Var>(&a)) {
      auto it = slots.find(v->id);
      if (it == slots.end()) throw Error("interpreter: variable used before definition");
      return it->second;
    }
    const ir::Literal& l = std::get<ir::Literal>(a);
    int s = p->num_slots++;
    auto mem = std::unique_ptr<unsigned char[]>(new unsigned char[16]());
    double d = l.f;
    int64_t i = l.i;
    if (is_float(l.dtype))
      convert_elements(DType::F64, &d, l.dtype, mem.get(), 1);
    else if (l.dtype == DType::U64)
      std::memcpy(mem.get(), &i, 8);
    else
      convert_elements(DType::I64, &i, l.dtype, mem.get(), 1);
    Val v;
    v.dtype = l.dtype;
    v.data = mem.get();
    p->constants.emplace_back(s, v);
    p->constant_storage.push_back(std::move(mem));
    return s;
  }
};
}  // namespace

namespace {
bool writes_refs(const ir::Eqn& e) {
  switch (e.prim->id) {
    case ir::PrimId::store:
    case ir::PrimId::swap:
    case ir::PrimId::addupdate:
    case ir::PrimId::atomic_rmw:
    case ir::PrimId::atomic_cas:
    case ir::PrimId::fori_loop:  // bodies may write
    case ir::PrimId::while_loop:
    case ir::PrimId::cond: return true;
    default: return false;
  }
}

bool float_dot(const ir::Eqn& e) {
  if (e.prim->id != ir::PrimId::dot || e.out[0].aval.dtype != DType::F32) return false;
  DType t = ir::atom_aval(e.in[0]).dtype;
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || is_float8(t);
}
}  // namespace

void dot_acc_rule(const Instr& ins, Val* env, Ctx& ctx);  // rules_dot.cc

// Rewrites that save copies, decided once per jaxpr:
//  - `r = add(acc, dot(a, b))` (f32, either order) where acc is used by nothing else and its
//    buffer belongs to this jaxpr (a loop carry, or the fresh result of a dot or broadcast)
//    becomes one dot that accumulates into acc's buffer (the dot's products are summed onto
//    acc instead of being summed first, as a GPU's MMA accumulates);
//  - a load whose result only feeds dots, with no ref written until they run, may return a
//    strided view of the ref (Instr::view_ok) instead of a copy.
std::shared_ptr<Program> compile(const ir::JaxprPtr& j, const std::vector<bool>& owned_invars, bool fori_body) {
  auto prog = std::make_shared<Program>();
  prog->keep_alive = j;
  const auto& eqns = j->eqns;
  size_t n = eqns.size();
  // uses of every variable (operands of equations and results of the jaxpr)
  std::unordered_map<int64_t, int> uses;
  std::unordered_map<int64_t, size_t> def;  // var -> defining equation
  for (size_t i = 0; i < n; ++i) {
    for (auto& a : eqns[i].in)
      if (auto* v = std::get_if<ir::Var>(&a)) ++uses[v->id];
    for (auto& v : eqns[i].out) def[v.id] = i;
  }
  for (auto& a : j->outvars)
    if (auto* v = std::get_if<ir::Var>(&a)) ++uses[v->id];
  std::unordered_map<int64_t, bool> owned;
  for (size_t k = 0; k < j->invars.size() && k < owned_invars.size(); ++k) owned[j->invars[k].id] = owned_invars[k];

  // fuse[i] = j: the dot at i is folded into the add at j (and acc_operand[j] is acc's position)
  std::vector<int64_t> fused_into(n, -1), dot_of(n, -1);
  std::vector<int> acc_pos(n, -1);
  std::unordered_map<int64_t, size_t> use_at;  // var -> the equation of its single use
  for (size_t i = 0; i < n; ++i)
    for (auto& a : eqns[i].in)
      if (auto* v = std::get_if<ir::Var>(&a)) use_at[v->id] = i;
  for (size_t i = 0; i < n; ++i) {
    const ir::Eqn& d = eqns[i];
    if (!float_dot(d) || uses[d.out[0].id] != 1 || !use_at.count(d.out[0].id)) continue;
    size_t k = use_at[d.out[0].id];
    const ir::Eqn& add = eqns[k];
    if (add.prim->id != ir::PrimId::add || add.in.size() != 2 || add.out[0].aval.dtype != DType::F32) continue;
    for (int side = 0; side < 2; ++side) {
      auto* t = std::get_if<ir::Var>(&add.in[side]);
      auto* acc = std::get_if<ir::Var>(&add.in[1 - side]);
      if (!t || !acc || t->id != d.out[0].id || acc->id == t->id) continue;
      if (!(acc->aval == d.out[0].aval) || uses[acc->id] != 1 || dot_of[k] >= 0) continue;
      bool mine = owned.count(acc->id) && owned[acc->id];
      if (!mine && def.count(acc->id)) {
        size_t di = def[acc->id];
        auto id = eqns[di].prim->id;
        mine = di < k && (id == ir::PrimId::broadcast_in_dim || (float_dot(eqns[di]) && fused_into[di] < 0) || dot_of[di] >= 0);
      }
      if (!mine) continue;
      fused_into[i] = static_cast<int64_t>(k);
      dot_of[k] = static_cast<int64_t>(i);
      acc_pos[k] = 1 - side;
      break;
    }
  }

  Compiler c{{}, prog.get()};
  for (auto& v : j->invars) prog->invars.push_back(c.slot(v));
  for (size_t i = 0; i < n; ++i) {
    const ir::Eqn& e = eqns[i];
    if (fused_into[i] >= 0) continue;  // runs at its add
    Instr ins;
    ins.eqn = &e;
    ins.rule = rules().get(e.prim->id);
    auto dot_flags = [&](const ir::Eqn& d) {
      ins.trans_a = d.params.get_bool("trans_a");
      ins.trans_b = d.params.get_bool("trans_b");
      if (d.params.has("precision")) ins.precision = static_cast<Precision>(d.params.get_int("precision"));
    };
    if (e.prim->id == ir::PrimId::dot) dot_flags(e);
    if (dot_of[i] >= 0) {  // acc + dot(a, b), accumulated in place
      const ir::Eqn& d = eqns[static_cast<size_t>(dot_of[i])];
      dot_flags(d);
      ins.eqn = &d;
      ins.rule = dot_acc_rule;
      ins.in = {c.atom(d.in[0]), c.atom(d.in[1]), c.atom(e.in[acc_pos[i]])};
      for (auto& v : e.out) ins.out.push_back(c.slot(v));
      prog->instrs.push_back(std::move(ins));
      continue;
    }
    for (auto& a : e.in) ins.in.push_back(c.atom(a));
    for (auto& v : e.out) ins.out.push_back(c.slot(v));
    if (e.params.has("idx")) {
      ins.indexer = &e.params.get<ir::NDIndexer>("idx");
      ins.idx_start = static_cast<int>(e.params.get_int("idx_start"));
      int nops = 0;
      for (auto& d : ins.indexer->dims)
        if (d.operand >= 0) nops = std::max(nops, d.operand + 1);
      ins.after_idx = ins.idx_start + nops;
      ins.has_mask = e.params.get_bool("has_mask");
      ins.has_other = e.params.get_bool("has_other");
    }
    if (e.prim->id == ir::PrimId::load && !e.params.get_bool("has_mask")) {
      bool rect = true;
      for (auto& d : e.params.get<ir::NDIndexer>("idx").dims) rect = rect && d.kind != ir::IndexDim::Kind::Array;
      int64_t id = e.out[0].id;
      size_t last = i;
      bool only_dots = rect && uses[id] > 0;
      for (size_t k = i + 1; k < n && only_dots; ++k)
        for (size_t a = 0; a < eqns[k].in.size(); ++a)
          if (auto* v = std::get_if<ir::Var>(&eqns[k].in[a]); v && v->id == id) {
            bool dot_operand = eqns[k].prim->id == ir::PrimId::dot && a < 2;
            if (!dot_operand) only_dots = false;
            last = std::max<size_t>(last, fused_into[k] >= 0 ? static_cast<size_t>(fused_into[k]) : k);
          }
      for (auto& a : j->outvars)
        if (auto* v = std::get_if<ir::Var>(&a); v && v->id == id) only_dots = false;
      for (size_t k = i + 1; k < last && only_dots; ++k)
        if (writes_refs(eqns[k])) only_dots = false;
      ins.view_ok = only_dots;
    }
    if (e.prim->id == ir::PrimId::fori_loop) {
      size_t nc = static_cast<size_t>(e.params.get_int("num_carry"));
      for (size_t q = 0; q < nc && q < 64; ++q) {
        auto* v = std::get_if<ir::Var>(&e.in[2 + q]);
        if (!v || uses[v->id] != 1 || !def.count(v->id)) continue;
        auto id = eqns[def[v->id]].prim->id;  // rules that always return a fresh contiguous buffer
        bool fresh = id == ir::PrimId::broadcast_in_dim || id == ir::PrimId::iota ||
                     (id == ir::PrimId::dot && fused_into[def[v->id]] < 0);
        if (fresh) ins.adopt_init |= uint64_t{1} << q;
      }
    }
    for (auto& [k, v] : e.params.items) {
      std::vector<bool> own;
      if (auto* s = std::get_if<ir::JaxprPtr>(&v)) {
        size_t nc = e.params.has("num_carry") ? static_cast<size_t>(e.params.get_int("num_carry")) : 0;
        if (e.prim->id == ir::PrimId::fori_loop && k == "body") {
          own.assign((*s)->invars.size(), false);
          for (size_t q = 0; q < nc && 1 + q < own.size(); ++q) own[1 + q] = true;
        } else if (e.prim->id == ir::PrimId::while_loop && k == "body_jaxpr") {
          own.assign((*s)->invars.size(), false);
          for (size_t q = 0; q < nc && q < own.size(); ++q) own[q] = true;
        }
        ins.subs.push_back(compile(*s, own, e.prim->id == ir::PrimId::fori_loop && k == "body"));
      }
      if (auto* ss = std::get_if<std::vector<ir::JaxprPtr>>(&v))
        for (auto& s : *ss) ins.subs.push_back(compile(s));
    }
    prog->instrs.push_back(std::move(ins));
  }
  for (auto& a : j->outvars) prog->outvars.push_back(c.atom(a));

  // A fori body that writes no ref and whose carry q is only `acc + dot(loaded slices)`,
  // returned as carry q: the loop may defer those dots (Program::defer_carry).
  if (fori_body) {
    bool writes = false;
    for (auto& e : eqns) writes = writes || writes_refs(e);
    for (size_t k = 0; k < n && !writes; ++k) {
      if (dot_of[k] < 0) continue;
      const ir::Eqn& add = eqns[k];
      const ir::Eqn& d = eqns[static_cast<size_t>(dot_of[k])];
      auto* acc = std::get_if<ir::Var>(&add.in[acc_pos[k]]);
      int carry = -1;
      for (size_t q = 1; q < j->invars.size() && q <= j->outvars.size(); ++q)
        if (acc && j->invars[q].id == acc->id) carry = static_cast<int>(q) - 1;
      if (carry < 0) continue;
      auto* out = std::get_if<ir::Var>(&j->outvars[static_cast<size_t>(carry)]);
      if (!out || out->id != add.out[0].id || uses[add.out[0].id] != 1) continue;
      bool loaded = true;  // both operands come from loads (views at run time, when in bounds)
      for (int o = 0; o < 2; ++o) {
        auto* v = std::get_if<ir::Var>(&d.in[o]);
        loaded = loaded && v && def.count(v->id) && eqns[def[v->id]].prim->id == ir::PrimId::load;
      }
      if (loaded) {
        prog->defer_carry = carry;
        break;
      }
    }
  }
  return prog;
}

void run(const Program& p, const Val* args, Val* outs, Ctx& ctx) {
  Val* env = static_cast<Val*>(ctx.arena->alloc(sizeof(Val) * static_cast<size_t>(p.num_slots)));
  for (int s = 0; s < p.num_slots; ++s) new (env + s) Val();
  for (size_t k = 0; k < p.invars.size(); ++k) env[p.invars[k]] = args[k];
  for (auto& [s, v] : p.constants) env[s] = v;
  for (const Instr& ins : p.instrs) ins.rule(ins, env, ctx);
  for (size_t k = 0; k < p.outvars.size(); ++k) outs[k] = env[p.outvars[k]];
}

}  // namespace pallas::interp
