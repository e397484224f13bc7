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

std::shared_ptr<Program> compile(const ir::JaxprPtr& j) {
  auto prog = std::make_shared<Program>();
  prog->keep_alive = j;
  Compiler c{{}, prog.get()};
  for (auto& v : j->invars) prog->invars.push_back(c.slot(v));
  for (auto& e : j->eqns) {
    Instr ins;
    ins.eqn = &e;
    ins.rule = rules().get(e.prim->id);
    for (auto& a : e.in) ins.in.push_back(c.atom(a));
    for (auto& v : e.out) ins.out.push_back(c.slot(v));
    for (auto& [k, v] : e.params.items) {
      if (auto* s = std::get_if<ir::JaxprPtr>(&v)) ins.subs.push_back(compile(*s));
      if (auto* ss = std::get_if<std::vector<ir::JaxprPtr>>(&v))
        for (auto& s : *ss) ins.subs.push_back(compile(s));
    }
    prog->instrs.push_back(std::move(ins));
  }
  for (auto& a : j->outvars) prog->outvars.push_back(c.atom(a));
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
