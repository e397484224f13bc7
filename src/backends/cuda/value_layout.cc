// The value-layout pass (value_layout.h): which values live in a tensor-core dot's fragments
// (Mma) or in its rows (Rows), and which stay blocked. As Triton's layout propagation: a dot
// on the tensor cores anchors the Mma layout of its result, and the layout flows forward
// through elementwise ops, row reductions (to Rows), reshapes between [M] and [M, 1], and
// fori_loop carries (to a fixed point). Values that any layout computes as cheaply — iota,
// broadcasts of scalars, of Rows values and of vectors over a 2-D tile's rows or columns
// (gathered from shared memory in any layout), elementwise ops of those — take the layout all
// their users take them in ("flexible"), so a causal mask or a row statistic broadcast over
// the columns costs no conversion. Every other op takes blocked operands; emit_eqns converts
// where a value's layout and its user's differ.
#include <algorithm>
#include <sstream>
#include <unordered_set>

#include "src/backends/cuda/plan/passes.h"
#include "src/ir/dependence.h"
#include "src/backends/cuda/rules.h"

namespace pallas::cuda {
using ir::PrimId;

namespace {

bool elementwise(const ir::Eqn& e) {
  ir::PrimKind k = e.prim->kind;
  return (k == ir::PrimKind::Unary || k == ir::PrimKind::Binary || k == ir::PrimKind::Elementwise) && e.out.size() == 1;
}
// The value is [M] or [M, 1] (one value per row of an M-row tile).
bool per_row_shape(const Shape& s, int64_t M) { return (s.size() == 1 && s[0] == M) || (s.size() == 2 && s[0] == M && s[1] == 1); }
bool fits(const ValueLayout& L, const Shape& s) {
  if (L.kind == ValueLayout::Mma) return s.size() == 2 && s[0] == L.M && s[1] == L.N;
  if (L.kind == ValueLayout::Rows) return per_row_shape(s, L.M);
  return true;
}
// The jaxprs of a cond (its branches) or a while loop (its condition, then its body).
std::vector<ir::JaxprPtr> control_jaxprs(const ir::Eqn& e) {
  if (e.prim->id == PrimId::cond) return e.params.get<std::vector<ir::JaxprPtr>>("branches");
  return {e.params.get<ir::JaxprPtr>("cond_jaxpr"), e.params.get<ir::JaxprPtr>("body_jaxpr")};
}

struct Assign {
  const KernelPlan& P;
  std::unordered_map<int64_t, ValueLayout> lay;  // decided layouts (absent: blocked)
  // Flexible values, with the Rows layout they must line up with when they broadcast one.
  std::unordered_map<int64_t, std::optional<ValueLayout>> flex;
  std::unordered_set<const ir::Eqn*> absorbed;  // the fragment carries' adds and scales
  std::ostringstream text;

  ValueLayout of(const ir::Atom& a) const {
    auto* v = std::get_if<ir::Var>(&a);
    if (!v || Emitter::scalar_like(v->aval)) return {};
    auto it = lay.find(v->id);
    return it == lay.end() ? ValueLayout{} : it->second;
  }
  bool is_flex(const ir::Atom& a) const {
    auto* v = std::get_if<ir::Var>(&a);
    return v && flex.count(v->id);
  }
  void set(const ir::Var& v, const ValueLayout& L) {
    if (L.kind != ValueLayout::Blocked && !Emitter::scalar_like(v.aval)) lay[v.id] = L;
  }

  void forward(const ir::Jaxpr& j) {
    for (const ir::Eqn& e : j.eqns) {
      for (const ir::Var& o : e.out) lay.erase(o.id), flex.erase(o.id);
      PrimId id = e.prim->id;
      if (absorbed.count(&e)) continue;
      if (id == PrimId::fori_loop) {
        fori(e);
        continue;
      }
      if (id == PrimId::while_loop || id == PrimId::cond) {
        nested(e);
        continue;
      }
      if (e.out.empty() || Emitter::scalar_like(e.out[0].aval)) continue;
      const ir::Var& o = e.out[0];
      if (elementwise(e)) {
        std::optional<ValueLayout> anchor, need;
        bool all_flex = true, any = false;
        for (const ir::Atom& x : e.in) {
          if (Emitter::scalar_like(ir::atom_aval(x))) continue;
          any = true;
          if (is_flex(x)) {
            if (auto& n = flex.at(std::get<ir::Var>(x).id)) {
              if (need && !(*need == *n)) all_flex = false;  // rows of two grids: not both
              need = n;
            }
            continue;
          }
          all_flex = false;
          ValueLayout L = of(x);
          if (!anchor && L.kind != ValueLayout::Blocked && fits(L, o.aval.shape)) anchor = L;
        }
        if (anchor) set(o, *anchor);
        else if (any && all_flex) flex[o.id] = need;
        continue;
      }
      switch (id) {
        case PrimId::iota: flex[o.id] = std::nullopt; break;
        case PrimId::broadcast_in_dim: {
          ir::Aval in = ir::atom_aval(e.in[0]);
          if (Emitter::scalar_like(in)) {
            flex[o.id] = std::nullopt;
            break;
          }
          ValueLayout L = of(e.in[0]);
          if (L.kind != ValueLayout::Rows) {
            // a vector over the rows or columns of a tile (an epilogue's bias): gathered from
            // shared memory into whatever layout its users take (fragments: no conversion of
            // the [M, N] tile)
            const Shape& O = o.aval.shape;
            if (O.size() == 2 && O[0] > 1 && O[1] > 1) flex[o.id] = std::nullopt;
            break;
          }
          auto bd = e.params.get<std::vector<int64_t>>("broadcast_dimensions");
          if (bd.empty() || bd[0] != 0) break;
          if (per_row_shape(o.aval.shape, L.M)) set(o, L);                              // [M] -> [M, 1]
          else if (o.aval.shape.size() == 2 && o.aval.shape[0] == L.M) flex[o.id] = L;  // over the columns
          break;
        }
        case PrimId::reshape:
        case PrimId::squeeze: {
          ValueLayout L = of(e.in[0]);
          if (L.kind == ValueLayout::Rows && per_row_shape(o.aval.shape, L.M)) set(o, L);
          break;
        }
        case PrimId::reduce_sum:
        case PrimId::reduce_max:
        case PrimId::reduce_min:
        case PrimId::reduce_prod: {
          ValueLayout L = of(e.in[0]);
          auto axes = e.params.get<std::vector<int64_t>>("axes");
          bool last = axes.size() == 1 && (axes[0] == 1 || axes[0] == -1);
          if (L.kind == ValueLayout::Mma && L.grid.TN == 1 && last && shuffles(compute_type(ir::atom_aval(e.in[0]).dtype))) set(o, ValueLayout::rows_of(L));
          break;
        }
        case PrimId::dot:
          if (const auto& L = P.dot(e).result) set(o, *L);
          break;
        default: break;
      }
    }
  }

  // Loops and branches other than fori take and give blocked values; their bodies are assigned
  // on their own.
  void nested(const ir::Eqn& e) {
    for (auto& j : control_jaxprs(e)) {
      for (const ir::Var& v : j->invars) lay.erase(v.id), flex.erase(v.id);
      forward(*j);
      resolve(*j, std::vector<ValueLayout>(j->outvars.size()));
    }
  }

  // fori_loop: carries that accumulate tensor-core dots are their fragments; the others take the
  // layout their body gives them, found by iterating the body's assignment to a fixed point.
  void fori(const ir::Eqn& e) {
    const ir::Jaxpr& body = *e.params.get<ir::JaxprPtr>("body");
    size_t nc = static_cast<size_t>(e.params.get_int("num_carry"));
    for (size_t q = 1 + nc; q < body.invars.size(); ++q) {  // loop-invariant operands keep theirs
      const ir::Atom& outer = e.in[1 + q];
      lay.erase(body.invars[q].id);
      if (!is_flex(outer)) set(body.invars[q], of(outer));
    }
    std::vector<ValueLayout> carry(nc);
    std::vector<bool> fragments(nc, false);
    for (size_t c = 0; c < nc; ++c) {
      if (auto fc = plan_fragment_carry(P, body, c)) {
        fragments[c] = true;
        carry[c] = *P.dot(*fc->dot).result;
        for (const ir::Eqn* a : {fc->add, fc->scale_mul, fc->scale_bcast})
          if (a) absorbed.insert(a);
      } else if (!is_flex(e.in[2 + c])) {
        carry[c] = of(e.in[2 + c]);
      }
    }
    for (int round = 0;; ++round) {
      for (size_t c = 0; c < nc; ++c) {
        lay.erase(body.invars[1 + c].id);
        set(body.invars[1 + c], carry[c]);
      }
      forward(body);
      bool changed = false;
      for (size_t c = 0; c < nc; ++c) {
        if (fragments[c]) continue;
        ValueLayout out = is_flex(body.outvars[c]) ? ValueLayout{} : of(body.outvars[c]);
        if (out == carry[c]) continue;
        changed = true;
        carry[c] = round < 4 ? out : ValueLayout{};  // no fixed point: blocked
      }
      if (!changed) break;
    }
    resolve(body, carry);
    for (size_t c = 0; c < nc; ++c) set(e.out[c], carry[c]);
  }

  // Flexible values take the layout every user takes them in (users come later, so in reverse
  // order each one's users are decided); blocked when they disagree or cannot hold it.
  void resolve(const ir::Jaxpr& j, const std::vector<ValueLayout>& out_wants) {
    std::unordered_map<int64_t, std::vector<std::pair<const ir::Eqn*, size_t>>> users;
    for (const ir::Eqn& e : j.eqns)
      for (size_t i = 0; i < e.in.size(); ++i)
        if (auto* v = std::get_if<ir::Var>(&e.in[i]); v && !absorbed.count(&e)) users[v->id].push_back({&e, i});
    auto of_fn = [this](const ir::Atom& a) { return of(a); };
    for (auto it = j.eqns.rbegin(); it != j.eqns.rend(); ++it) {
      for (const ir::Var& v : it->out) {
        auto f = flex.find(v.id);
        if (f == flex.end()) continue;
        std::optional<ValueLayout> need = f->second, pick;
        bool ok = true;
        auto want = [&](const ValueLayout& L) {
          if (!pick) pick = L;
          else if (!(*pick == L)) ok = false;
        };
        for (auto& [u, i] : users[v.id]) {
          bool loop_const = u->prim->id == PrimId::fori_loop && i >= 2 + static_cast<size_t>(u->params.get_int("num_carry"));
          want(loop_const ? ValueLayout{} : operand_layout(P, *u, i, of_fn));
        }
        for (size_t c = 0; c < j.outvars.size(); ++c)
          if (auto* w = std::get_if<ir::Var>(&j.outvars[c]); w && w->id == v.id) want(out_wants[c]);
        flex.erase(f);
        if (!ok || !pick || pick->kind == ValueLayout::Blocked || !fits(*pick, v.aval.shape)) continue;
        if (need && !(need->rows_match(*pick) || *need == *pick)) continue;
        set(v, *pick);
      }
    }
  }

  void drop_from(size_t at) {  // removes the text written since `at`
    std::string t = text.str().substr(0, at);
    text.str(t);
    text.seekp(0, std::ios_base::end);
  }
  void dump(const ir::Jaxpr& j, int depth) {
    std::string ind(static_cast<size_t>(depth) * 2, ' ');
    for (const ir::Eqn& e : j.eqns) {
      if (e.prim->id == PrimId::fori_loop) {
        const ir::Jaxpr& body = *e.params.get<ir::JaxprPtr>("body");
        size_t at = static_cast<size_t>(text.tellp());
        text << ind << "fori_loop:\n";
        size_t head = static_cast<size_t>(text.tellp());
        dump(body, depth + 1);
        for (size_t c = 0; c < e.out.size(); ++c)
          if (lay.count(e.out[c].id)) text << ind << "  carry " << c << " " << e.out[c].aval.str() << ": " << lay.at(e.out[c].id).str() << "\n";
        if (static_cast<size_t>(text.tellp()) == head) drop_from(at);  // nothing inside: no heading
        continue;
      }
      if (e.prim->id == PrimId::cond || e.prim->id == PrimId::while_loop) {  // blocked outputs; their insides
        std::vector<ir::JaxprPtr> subs = control_jaxprs(e);
        for (size_t k = 0; k < subs.size(); ++k) {
          size_t at = static_cast<size_t>(text.tellp());
          text << ind << e.prim->name << (e.prim->id == PrimId::cond ? " branch " + std::to_string(k) : k ? " body" : " cond") << ":\n";
          size_t head = static_cast<size_t>(text.tellp());
          dump(*subs[k], depth + 1);
          if (static_cast<size_t>(text.tellp()) == head) drop_from(at);  // nothing inside: no heading
        }
        continue;
      }
      for (const ir::Var& o : e.out)
        if (lay.count(o.id))
          text << ind << e.prim->name << " " << o.aval.str() << ": " << lay.at(o.id).str() << (absorbed.count(&e) ? " (absorbed)" : "") << "\n";
    }
  }
};

// A write, or a loop or branch (it may write).
bool writes_memory(const ir::Eqn& e) { return ir::is_ref_write(e) || !ir::sub_jaxprs(e).empty(); }

// Vector loads read again where a broadcast puts them in a dot's fragments (KernelPlan::
// fragment_loads): the gather of the broadcast would otherwise go through shared memory with a
// barrier on each side, twice a step in an attention backward's loop (its logsumexp and delta
// over the key rows' columns). Each thread reads its slots' elements itself (L1 serves the
// repeats). Taken when the load is plain (no mask, no index arrays), its value reaches the
// broadcast through reshapes only, each value used once, and nothing between the load and the
// broadcast may write memory.
void fold_fragment_loads(const ir::Jaxpr& j, KernelPlan& P) {
  BodyUses bu(j);
  auto& def = bu.def;
  auto& uses = bu.uses;
  std::unordered_map<const ir::Eqn*, size_t> at;
  for (size_t n = 0; n < j.eqns.size(); ++n) {
    at[&j.eqns[n]] = n;
    for (const ir::Jaxpr* s : ir::sub_jaxprs(j.eqns[n])) fold_fragment_loads(*s, P);
  }
  for (const ir::Eqn& b : j.eqns) {
    if (b.prim->id != PrimId::broadcast_in_dim || P.layout_of(b.out[0]).kind != ValueLayout::Mma) continue;
    ir::Aval in = ir::atom_aval(b.in[0]);
    if (Emitter::scalar_like(in) || P.layout_of(b.in[0]).kind != ValueLayout::Blocked) continue;
    std::vector<const ir::Eqn*> chain;
    const ir::Eqn* src = nullptr;
    for (const ir::Atom* a = &b.in[0];;) {
      auto* v = std::get_if<ir::Var>(a);
      auto d = v ? def.find(v->id) : def.end();
      if (d == def.end() || uses[v->id] != 1) break;
      const ir::Eqn& e = *d->second;
      chain.push_back(&e);
      if (e.prim->id == PrimId::load) {
        src = &e;
        break;
      }
      if (e.prim->id != PrimId::reshape && e.prim->id != PrimId::squeeze) break;
      a = &e.in[0];
    }
    if (!src || src->params.get_bool("has_mask") || src->params.get_bool("has_other")) continue;
    bool plain = true;
    for (const ir::IndexDim& x : src->params.get<ir::NDIndexer>("idx").dims) plain = plain && x.kind != ir::IndexDim::Kind::Array;
    for (size_t n = at[src] + 1; n < at[&b] && plain; ++n) plain = !writes_memory(j.eqns[n]);
    if (!plain) continue;
    P.fragment_loads[&b] = src;
    P.folded.insert(chain.begin(), chain.end());
  }
}

}  // namespace

ValueLayout operand_layout(const KernelPlan& P, const ir::Eqn& e, size_t i, const std::function<ValueLayout(const ir::Atom&)>& of) {
  const ir::Atom& x = e.in[i];
  ir::Aval a = ir::atom_aval(x);
  if (a.is_ref || Emitter::scalar_like(a)) return of(x);
  ValueLayout out = e.out.empty() ? ValueLayout{} : of(e.out[0]);
  ValueLayout mine = of(x);
  if (elementwise(e)) return out;
  switch (e.prim->id) {
    case PrimId::reduce_sum:
    case PrimId::reduce_max:
    case PrimId::reduce_min:
    case PrimId::reduce_prod:
      return out.kind == ValueLayout::Rows ? mine : ValueLayout{};
    case PrimId::reshape:
    case PrimId::squeeze:
      return out.kind == ValueLayout::Rows ? mine : ValueLayout{};
    case PrimId::broadcast_in_dim:
      return mine.kind == ValueLayout::Rows && out.kind != ValueLayout::Blocked ? mine : ValueLayout{};
    case PrimId::dot:
      return i == 0 && wgmma_a_from_registers(P, e, mine) ? mine : ValueLayout{};
    case PrimId::fori_loop: {
      size_t nc = static_cast<size_t>(e.params.get_int("num_carry"));
      // an initial carry: the carry's layout (the fori rule converts it); loop-invariant: as it is
      if (i >= 2 && i < 2 + nc) return of(e.out[i - 2]);
      return mine;
    }
    default: return {};
  }
}

void plan_value_layouts(const core::PallasCall& call, KernelPlan& P) {
  const ir::Jaxpr& kernel = *call.kernel;
  Assign A{P, {}, {}, {}, {}};
  A.forward(kernel);
  A.resolve(kernel, std::vector<ValueLayout>(kernel.outvars.size()));
  P.values = A.lay;
  fold_fragment_loads(kernel, P);
  std::string text = "every value blocked\n";
  if (!P.values.empty()) {
    A.text << "values not in the blocked layout (mma: a tensor-core dot's fragments; rows: one value per fragment row)\n";
    A.dump(kernel, 1);
    text = A.text.str();
  }
  if (!P.fragment_loads.empty()) {
    std::vector<std::string> lines;
    for (auto& [b, load] : P.fragment_loads)
      lines.push_back("  load " + load->out[0].aval.str() + " read again by its broadcast to " + b->out[0].aval.str() + "\n");
    std::sort(lines.begin(), lines.end());  // (a map's order is not the kernel's)
    text += "vector loads read where a broadcast puts them in fragments\n";
    for (const std::string& l : lines) text += l;
  }
  P.sections.push_back({"value-layouts", text});
}

}  // namespace pallas::cuda
