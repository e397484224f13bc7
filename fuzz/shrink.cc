// Shrinks a failing fuzz kernel: greedy passes that delete ops (their results become
// constants), inline branches and loops, drop outputs, inputs and grid axes, and replace
// operands by constants, keeping each change while the failure persists.
//
// A change must keep the kernel meaningful, not only well-typed (ill-typed candidates are
// rejected by the failing build): values that feed masks, indices, loop bounds and `when`
// predicates are never replaced (a constant index array would make a scatter race, a
// constant `true` mask would read poison), and every output keeps an unconditional full
// store (or its alias), so no candidate compares uninitialised memory.
#include <algorithm>
#include <chrono>
#include <functional>
#include <set>

#include "fuzz/kernel.h"

namespace fuzz {

namespace {

using Path = std::vector<int>;  // op index, body index, op index, ... (ends at an op index)

Program& program_at(Kernel& k, const Path& p, size_t upto) {
  Program* pr = &k.body;
  for (size_t i = 0; i + 1 < upto; i += 2) pr = &pr->ops.at(static_cast<size_t>(p[i])).body.at(static_cast<size_t>(p[i + 1]));
  return *pr;
}
Op& op_at(Kernel& k, const Path& p) { return program_at(k, p, p.size()).ops.at(static_cast<size_t>(p.back())); }

void all_paths(const Program& pr, Path prefix, std::vector<Path>& out) {
  for (size_t i = 0; i < pr.ops.size(); ++i) {
    Path p = prefix;
    p.push_back(static_cast<int>(i));
    out.push_back(p);
    for (size_t b = 0; b < pr.ops[i].body.size(); ++b) {
      Path q = p;
      q.push_back(static_cast<int>(b));
      all_paths(pr.ops[i].body[b], q, out);
    }
  }
}

void substitute(Program& pr, int from, int to) {
  auto s = [&](int& x) {
    if (x == from) x = to;
  };
  for (Op& op : pr.ops) {
    for (int& x : op.in) s(x);
    s(op.mask);
    s(op.other);
    for (Idx& x : op.idx) s(x.v);
    for (Program& b : op.body) substitute(b, from, to);
  }
  for (int& y : pr.yields) s(y);
}

bool has_effect(const Op& op) {
  switch (op.k) {
    case K::Store: case K::AddUpdate: case K::Swap: case K::Atomic: case K::AtomicCas: return true;
    default: break;
  }
  for (const Program& b : op.body)
    for (const Op& o : b.ops)
      if (has_effect(o)) return true;
  return false;
}

void op_operands(const Op& op, std::vector<int>& v) {
  v.insert(v.end(), op.in.begin(), op.in.end());
  if (op.mask >= 0) v.push_back(op.mask);
  if (op.other >= 0) v.push_back(op.other);
  for (const Idx& x : op.idx)
    if (x.v >= 0) v.push_back(x.v);
}

// Values that masks, indices, loop bounds, while counters and `when` predicates depend on.
std::set<int> protected_ids(const Kernel& k) {
  std::set<int> seeds;
  std::function<void(const Program&)> seed = [&](const Program& pr) {
    for (const Op& op : pr.ops) {
      if (op.mask >= 0) seeds.insert(op.mask);
      for (const Idx& x : op.idx)
        if (x.v >= 0) seeds.insert(x.v);
      if (op.k == K::Fori && op.f1) seeds.insert(op.in.at(0)), seeds.insert(op.in.at(1));
      if (op.k == K::While) {
        seeds.insert(op.in.at(0));
        for (int y : op.body.at(0).yields) seeds.insert(y);
        seeds.insert(op.body.at(1).yields.at(0));
        for (int pp : op.body.at(0).params) seeds.insert(pp);
        for (int pp : op.body.at(1).params) seeds.insert(pp);
      }
      if (op.k == K::When) seeds.insert(op.in.at(0));
      for (const Program& b : op.body) seed(b);
    }
  };
  seed(k.body);
  // backward closure through the ops defining them
  std::vector<const Op*> ops;
  std::function<void(const Program&)> collect = [&](const Program& pr) {
    for (const Op& op : pr.ops) {
      ops.push_back(&op);
      for (const Program& b : op.body) collect(b);
    }
  };
  collect(k.body);
  bool grew = true;
  while (grew) {
    grew = false;
    for (const Op* op : ops) {
      bool hit = false;
      for (int o : op->out) hit = hit || seeds.count(o);
      if (!hit) continue;
      std::vector<int> v;
      op_operands(*op, v);
      for (const Program& b : op->body) v.insert(v.end(), b.yields.begin(), b.yields.end());
      for (int x : v)
        if (seeds.insert(x).second) grew = true;
    }
  }
  return seeds;
}

bool uses_ref(const Program& pr, int r) {
  for (const Op& op : pr.ops) {
    if (op.ref == r) return true;
    for (const Program& b : op.body)
      if (uses_ref(b, r)) return true;
  }
  return false;
}

}  // namespace

// Every output not aliased has a top-level unmasked full store, or one inside a top-level
// `when` (a revisit's first write); scratch refs too.
bool initialised(const Kernel& k) {
  int nin = static_cast<int>(k.ins.size());
  std::set<int> aliased_outs;
  for (auto [i, o] : k.aliases) aliased_outs.insert(o);
  auto full_store = [&](const Op& op, int r) {
    if (op.k != K::Store || op.ref != r || op.mask >= 0) return false;
    for (const Idx& x : op.idx)
      if (x.kind != Idx::All) return false;
    return true;
  };
  for (int r = nin; r < k.num_refs(); ++r) {
    if (r < nin + static_cast<int>(k.outs.size()) && aliased_outs.count(r - nin)) continue;
    bool ok = false;
    for (const Op& op : k.body.ops) {
      if (full_store(op, r)) ok = true;
      if (op.k == K::When && op.body.at(0).ops.size() == 1 && full_store(op.body[0].ops[0], r)) ok = true;
      if (ok) break;
      // a read or partial write before the first full store would see uninitialised memory
      if (op.ref == r) return false;
      for (const Program& b : op.body)
        if (uses_ref(b, r)) return false;
    }
    if (!ok) return false;
  }
  return true;
}

namespace {

// Removes ops without effects whose results are unused (repeatedly).
bool dce(Kernel& k) {
  bool any = false;
  for (;;) {
    std::vector<int> uses;
    collect_uses(k.body, uses);
    std::set<int> used(uses.begin(), uses.end());
    bool removed = false;
    std::function<void(Program&)> go = [&](Program& pr) {
      for (size_t i = pr.ops.size(); i-- > 0;) {
        Op& op = pr.ops[i];
        for (Program& b : op.body) go(b);
        if (has_effect(op)) continue;
        bool live = false;
        for (int o : op.out) live = live || used.count(o);
        if (op.out.empty() && op.k != K::When && op.k != K::Fori) live = true;
        if (!live) {
          pr.ops.erase(pr.ops.begin() + static_cast<long>(i));
          removed = true;
        }
      }
    };
    go(k.body);
    if (!removed) return any;
    any = true;
  }
}

Op const_op(int id, const ValueType& t) {
  Op c;
  c.k = K::Full;
  c.p = t.shape;
  c.dt = t.dtype;
  c.c = t.dtype == pl::DType::Bool ? 1 : 1;
  c.out = {id};
  return c;
}

int new_id(Kernel& k) { return k.next_id++; }

// Replaces the op at p by constants for its results (effects dropped).
bool delete_op(Kernel& k, const Path& p, const std::vector<ValueType>& types) {
  Program& pr = program_at(k, p, p.size());
  size_t i = static_cast<size_t>(p.back());
  Op op = pr.ops.at(i);
  std::vector<int> uses;
  collect_uses(k.body, uses);
  std::set<int> used(uses.begin(), uses.end());
  std::vector<Op> repl;
  std::vector<std::pair<int, int>> subst;
  for (int o : op.out) {
    if (!used.count(o)) continue;  // an unused result needs no constant
    if (static_cast<size_t>(o) >= types.size() || !types[static_cast<size_t>(o)].defined) return false;
    int id = new_id(k);
    repl.push_back(const_op(id, types[static_cast<size_t>(o)]));
    subst.emplace_back(o, id);
  }
  pr.ops.erase(pr.ops.begin() + static_cast<long>(i));
  pr.ops.insert(pr.ops.begin() + static_cast<long>(i), repl.begin(), repl.end());
  for (auto [from, to] : subst) substitute(k.body, from, to);
  return true;
}

// Deletes ops [a, b) of the top-level program (results become constants where used).
bool delete_range(Kernel& k, size_t a, size_t b, const std::vector<ValueType>& types, const std::set<int>& prot) {
  bool any = false;
  for (size_t i = b; i-- > a;) {
    const Op& op = k.body.ops.at(i);
    bool p = op.k == K::Full || op.k == K::Const || op.k == K::Weak;  // would come back as a constant
    for (int o : op.out) p = p || prot.count(o);
    if (p) continue;
    if (!delete_op(k, {static_cast<int>(i)}, types)) return false;
    any = true;
  }
  return any;
}

// Renumbers values in order of definition (v0, v1, ...), for a tidy printed test.
void renumber(Kernel& k) {
  std::map<int, int> m;
  std::function<void(Program&)> def = [&](Program& pr) {
    for (int& p : pr.params) m.emplace(p, static_cast<int>(m.size()));
    for (Op& op : pr.ops) {
      for (Program& b : op.body) def(b);
      for (int o : op.out) m.emplace(o, static_cast<int>(m.size()));
    }
  };
  def(k.body);
  auto f = [&](int& x) {
    if (x >= 0 && m.count(x)) x = m[x];
  };
  std::function<void(Program&)> go = [&](Program& pr) {
    for (int& p : pr.params) f(p);
    for (Op& op : pr.ops) {
      for (int& x : op.in) f(x);
      f(op.mask);
      f(op.other);
      for (Idx& x : op.idx) f(x.v);
      for (int& o : op.out) f(o);
      for (Program& b : op.body) go(b);
    }
    for (int& y : pr.yields) f(y);
  };
  go(k.body);
  k.next_id = static_cast<int>(m.size());
}

// Replaces a control-flow op by one of its bodies (branch b; a loop's body run once; a
// while loop by its initial carries).
bool inline_body(Kernel& k, const Path& p, size_t b) {
  Program& pr = program_at(k, p, p.size());
  size_t i = static_cast<size_t>(p.back());
  Op op = pr.ops.at(i);
  std::vector<Op> ins;
  if (op.k == K::Cond || op.k == K::Switch) {
    if (b >= op.body.size()) return false;
    Program body = op.body[b];
    for (size_t j = 0; j < body.params.size(); ++j) substitute(body, body.params[j], op.in.at(j + 1));
    ins = body.ops;
    pr.ops.erase(pr.ops.begin() + static_cast<long>(i));
    pr.ops.insert(pr.ops.begin() + static_cast<long>(i), ins.begin(), ins.end());
    for (size_t r = 0; r < op.out.size(); ++r) substitute(k.body, op.out[r], body.yields.at(r));
    return true;
  }
  if (op.k == K::When) {
    if (b) return false;
    ins = op.body[0].ops;
    pr.ops.erase(pr.ops.begin() + static_cast<long>(i));
    pr.ops.insert(pr.ops.begin() + static_cast<long>(i), ins.begin(), ins.end());
    return true;
  }
  if (op.k == K::Fori) {
    if (b) return false;
    Program body = op.body[0];
    size_t first = op.f1 ? 2 : 0;
    Op lo;
    lo.k = K::Const;
    lo.dt = pl::DType::I32;
    lo.c = op.f1 ? 0 : static_cast<double>(op.p.at(0));
    lo.out = {new_id(k)};
    substitute(body, body.params.at(0), lo.out[0]);
    for (size_t j = 1; j < body.params.size(); ++j) substitute(body, body.params[j], op.in.at(first + j - 1));
    ins.push_back(lo);
    ins.insert(ins.end(), body.ops.begin(), body.ops.end());
    pr.ops.erase(pr.ops.begin() + static_cast<long>(i));
    pr.ops.insert(pr.ops.begin() + static_cast<long>(i), ins.begin(), ins.end());
    for (size_t r = 0; r < op.out.size(); ++r) substitute(k.body, op.out[r], body.yields.at(r));
    return true;
  }
  if (op.k == K::While) {
    if (b) return false;
    pr.ops.erase(pr.ops.begin() + static_cast<long>(i));
    for (size_t r = 0; r < op.out.size(); ++r) substitute(k.body, op.out[r], op.in.at(r));
    return true;
  }
  return false;
}

void renumber_refs(Program& pr, int removed) {
  for (Op& op : pr.ops) {
    if (op.ref > removed) --op.ref;
    for (Program& b : op.body) renumber_refs(b, removed);
  }
}
// Drops output o: its stores go, reads and returned old values become constants.
bool remove_output(Kernel& k, size_t o, const std::vector<ValueType>& types) {
  if (k.outs.size() <= 1) return false;
  int r = static_cast<int>(k.ins.size() + o);
  std::function<bool(Program&)> go = [&](Program& pr) -> bool {
    for (size_t i = pr.ops.size(); i-- > 0;) {
      for (Program& b : pr.ops[i].body)
        if (!go(b)) return false;
      if (pr.ops[i].ref != r) continue;
      Op op = pr.ops[i];
      std::vector<Op> repl;
      for (int out : op.out) {
        if (static_cast<size_t>(out) >= types.size() || !types[static_cast<size_t>(out)].defined) return false;
        repl.push_back(const_op(new_id(k), types[static_cast<size_t>(out)]));
      }
      pr.ops.erase(pr.ops.begin() + static_cast<long>(i));
      pr.ops.insert(pr.ops.begin() + static_cast<long>(i), repl.begin(), repl.end());
      for (size_t j = 0; j < op.out.size(); ++j) substitute(k.body, op.out[j], repl[j].out[0]);
    }
    return true;
  };
  if (!go(k.body)) return false;
  renumber_refs(k.body, r);
  k.outs.erase(k.outs.begin() + static_cast<long>(o));
  k.out_tol.erase(k.out_tol.begin() + static_cast<long>(o));
  std::map<int, int> al;
  for (auto [i, oo] : k.aliases)
    if (oo != static_cast<int>(o)) al[i] = oo > static_cast<int>(o) ? oo - 1 : oo;
  k.aliases = al;
  return true;
}

bool remove_input(Kernel& k, size_t i) {
  int r = static_cast<int>(i);
  if (uses_ref(k.body, r) || k.aliases.count(r)) return false;
  renumber_refs(k.body, r);
  k.ins.erase(k.ins.begin() + static_cast<long>(i));
  k.in_seeds.erase(k.in_seeds.begin() + static_cast<long>(i));
  if (i < k.in_edges.size()) k.in_edges.erase(k.in_edges.begin() + static_cast<long>(i));
  std::map<int, int> al;
  for (auto [a, o] : k.aliases) al[a > r ? a - 1 : a] = o;
  k.aliases = al;
  return true;
}

bool remove_scratch(Kernel& k, size_t s) {
  int r = static_cast<int>(k.ins.size() + k.outs.size() + s);
  std::function<bool(const Program&)> reads = [&](const Program& pr) {
    for (const Op& op : pr.ops) {
      if (op.ref == r && op.k != K::Store) return true;
      for (const Program& b : op.body)
        if (reads(b)) return true;
    }
    return false;
  };
  if (reads(k.body)) return false;
  std::function<void(Program&)> drop = [&](Program& pr) {
    for (size_t i = pr.ops.size(); i-- > 0;) {
      for (Program& b : pr.ops[i].body) drop(b);
      if (pr.ops[i].ref == r) pr.ops.erase(pr.ops.begin() + static_cast<long>(i));
    }
  };
  drop(k.body);
  renumber_refs(k.body, r);
  k.scratch.erase(k.scratch.begin() + static_cast<long>(s));
  return true;
}

// Grid axis a to extent e: arrays along it shrink to the blocks still visited.
bool shrink_axis(Kernel& k, size_t a, int64_t e) {
  if (k.grid.at(a) <= e) return false;
  k.grid[a] = e;
  auto fix = [&](ArrayDesc& d) {
    if (d.whole) return;
    for (size_t j = 0; j < d.map.size(); ++j) {
      DimMap& m = d.map[j];
      if (m.kind == MapKind::Zero || static_cast<size_t>(m.axis) != a) continue;
      if (m.kind == MapKind::Mod) m.mod = static_cast<int>(std::min<int64_t>(m.mod, e));
      int64_t nb = m.kind == MapKind::Mod || m.kind == MapKind::Pref ? m.mod : e;
      int64_t b = d.block[j] == pl::squeezed ? 1 : d.block[j];
      d.shape[j] = std::min(d.shape[j], nb * b);
    }
  };
  for (auto& d : k.ins) fix(d);
  for (auto& d : k.outs) fix(d);
  for (auto [i, o] : k.aliases) k.ins[static_cast<size_t>(i)].shape = k.outs[static_cast<size_t>(o)].shape;
  return true;
}

// A size that every accepted change must decrease (so shrinking ends): live non-constant
// ops, then every op, then the grid, arrays and warps.
std::vector<int64_t> size_of(const Kernel& k) {
  std::vector<const Op*> ops;
  std::function<void(const Program&)> collect = [&](const Program& pr) {
    for (const Op& op : pr.ops) {
      ops.push_back(&op);
      for (const Program& b : op.body) collect(b);
    }
  };
  collect(k.body);
  std::set<int> live_vals;
  std::set<const Op*> live;
  bool grew = true;
  while (grew) {
    grew = false;
    for (const Op* op : ops) {
      bool l = has_effect(*op) || live.count(op);
      for (int o : op->out) l = l || live_vals.count(o);
      if (!l) continue;
      if (live.insert(op).second) grew = true;
      std::vector<int> v;
      op_operands(*op, v);
      for (const Program& b : op->body) v.insert(v.end(), b.yields.begin(), b.yields.end());
      for (int x : v)
        if (live_vals.insert(x).second) grew = true;
    }
  }
  int64_t n_live = 0;
  for (const Op* op : live) n_live += !(op->k == K::Full || op->k == K::Const || op->k == K::Weak);
  int64_t grid = 0, arrays = 0;
  for (int64_t g : k.grid) grid += g;
  for (auto& a : k.ins) arrays += pl::shape_size(a.shape);
  for (auto& a : k.outs) arrays += pl::shape_size(a.shape);
  return {n_live, static_cast<int64_t>(ops.size()), grid,
          static_cast<int64_t>(k.ins.size() + k.outs.size() + k.scratch.size()), arrays, k.num_warps};
}

}  // namespace

Kernel shrink(const Kernel& start, const std::function<bool(const Kernel&)>& fails, double max_seconds, int* steps) {
  auto t0 = std::chrono::steady_clock::now();
  auto out_of_time = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > max_seconds;
  };
  Kernel best = start;
  int n = 0;
  auto attempt = [&](Kernel cand) {
    if (out_of_time() || !initialised(cand) || !(size_of(cand) < size_of(best))) return false;
    ++n;
    if (!fails(cand)) return false;
    best = std::move(cand);
    return true;
  };
  auto types_of = [&](const Kernel& k) {
    std::vector<ValueType> t;
    try {
      make_call(k, pl::Backend::Interpret, &t);
    } catch (...) {
    }
    return t;
  };
  bool progress = true;
  while (progress && !out_of_time()) {
    progress = false;
    {
      Kernel c = best;
      if (dce(c) && attempt(c)) progress = true;
    }
    std::vector<ValueType> types = types_of(best);
    // structure first: outputs, inputs, scratch, grid
    for (size_t o = best.outs.size(); o-- > 0;) {
      Kernel c = best;
      if (remove_output(c, o, types) && attempt(c)) progress = true, types = types_of(best);
    }
    for (size_t i = best.ins.size(); i-- > 0;) {
      Kernel c = best;
      if (remove_input(c, i) && attempt(c)) progress = true;
    }
    for (size_t s = best.scratch.size(); s-- > 0;) {
      Kernel c = best;
      if (remove_scratch(c, s) && attempt(c)) progress = true;
    }
    for (size_t a = 0; a < best.grid.size(); ++a) {
      for (int64_t e : {int64_t{1}, best.grid[a] / 2}) {
        Kernel c = best;
        if (e >= 1 && shrink_axis(c, a, e) && attempt(c)) {
          progress = true;
          break;
        }
      }
    }
    if (best.num_warps) {
      Kernel c = best;
      c.num_warps = 0;
      if (attempt(c)) progress = true;
    }
    // chunks of top-level ops, halving
    types = types_of(best);
    {
      std::set<int> pr0 = protected_ids(best);
      for (size_t chunk = best.body.ops.size() / 2; chunk >= 2 && !out_of_time(); chunk /= 2) {
        for (size_t a = 0; a < best.body.ops.size() && !out_of_time(); a += chunk) {
          Kernel c = best;
          size_t b = std::min(a + chunk, c.body.ops.size());
          if (delete_range(c, a, b, types, pr0) && attempt(c)) {
            progress = true;
            types = types_of(best);
            pr0 = protected_ids(best);
          }
        }
      }
    }
    // ops, last first
    types = types_of(best);
    std::vector<Path> paths;
    all_paths(best.body, {}, paths);
    std::set<int> prot = protected_ids(best);
    for (size_t pi = paths.size(); pi-- > 0 && !out_of_time();) {
      const Path& p = paths[pi];
      Op op = op_at(best, p);
      bool prot_op = false;
      for (int o : op.out) prot_op = prot_op || prot.count(o);
      bool done = false;
      if (!op.body.empty()) {
        for (size_t b = 0; b < std::max<size_t>(1, op.body.size()) && !done; ++b) {
          Kernel c = best;
          if (!prot_op && inline_body(c, p, b) && attempt(c)) done = true;
        }
      }
      bool constant = op.k == K::Full || op.k == K::Const || op.k == K::Weak;
      if (constant) {  // a constant is only worth deleting when nothing uses it
        std::vector<int> uses;
        collect_uses(best.body, uses);
        for (int u : uses) constant = constant && u != op.out.at(0);
        constant = !constant;
      }
      if (!done && !prot_op && !constant) {
        Kernel c = best;
        if (delete_op(c, p, types) && attempt(c)) done = true;
      }
      if (done) {
        progress = true;
        // paths after this one are stale; restart the pass
        break;
      }
    }
    if (progress) continue;
    // operands to constants
    types = types_of(best);
    paths.clear();
    all_paths(best.body, {}, paths);
    prot = protected_ids(best);
    for (size_t pi = paths.size(); pi-- > 0 && !out_of_time() && !progress;) {
      const Path& p = paths[pi];
      Op op = op_at(best, p);
      bool prot_op = false;
      for (int o : op.out) prot_op = prot_op || prot.count(o);
      if (prot_op || op.k == K::While || op.k == K::Fori) continue;
      for (size_t j = 0; j < op.in.size() && !progress; ++j) {
        int x = op.in[j];
        if (static_cast<size_t>(x) >= types.size() || !types[static_cast<size_t>(x)].defined || types[static_cast<size_t>(x)].weak) continue;
        // skip operands that are constants already
        Kernel c = best;
        Program& pr = program_at(c, p, p.size());
        size_t i = static_cast<size_t>(p.back());
        int id = new_id(c);
        Op k0 = const_op(id, types[static_cast<size_t>(x)]);
        bool is_const = false;
        std::function<void(const Program&)> look = [&](const Program& q) {
          for (const Op& o2 : q.ops) {
            if (!o2.out.empty() && o2.out[0] == x && (o2.k == K::Full || o2.k == K::Const || o2.k == K::Weak)) is_const = true;
            for (const Program& b : o2.body) look(b);
          }
        };
        look(best.body);
        if (is_const) continue;
        pr.ops[i].in[j] = id;
        pr.ops.insert(pr.ops.begin() + static_cast<long>(i), k0);
        if (attempt(c)) progress = true;
      }
    }
  }
  // tidy: drop what is dead, if that keeps the failure
  {
    Kernel c = best;
    if (dce(c)) attempt(c);
  }
  if (steps) *steps = n;
  Kernel tidy = best;
  renumber(tidy);
  if (fails(tidy)) return tidy;  // (renumbering keeps the size)
  return best;
}

}  // namespace fuzz
