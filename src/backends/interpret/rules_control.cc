// Interpreter rules for control flow, grid queries, printing and checks.
#include <cstdio>
#include <sstream>

#include "src/backends/interpret/interpreter.h"
#include "src/backends/interpret/value.h"
#include "src/core/print_format.h"

namespace pallas::interp {
using ir::PrimId;

namespace {

int64_t scalar_as_int(const Val& v) {
  int64_t r = 0;
  convert_elements(v.dtype, v.data, DType::I64, &r, 1);
  return r;
}

bool scalar_as_bool(const Val& v) { return *v.as<bool>(); }

// Copies v into storage that outlives an arena reset (carries across loop iterations).
void copy_into(Val& dst, const Val& src) {
  std::memcpy(dst.data, src.data, static_cast<size_t>(src.size()) * itemsize(src.dtype));
}

Val make_like(const ir::Aval& a, Ctx& ctx) { return ctx.alloc(a.dtype, Dims(a.shape)); }

// After a loop body: carry k's new value goes to its other buffer, unless the body computed it
// in place in the buffer it was given (program.cc lets a body overwrite a dead carry).
void next_carries(std::vector<Val>& bufs, std::vector<int>& cur, const std::vector<Val>& outs) {
  size_t nc = outs.size();
  for (size_t k = 0; k < nc; ++k) {
    if (outs[k].data == bufs[cur[k] * nc + k].data) continue;
    int nxt = 1 - cur[k];
    copy_into(bufs[nxt * nc + k], outs[k]);
    cur[k] = nxt;
  }
}

void fori_rule(const Instr& ins, Val* env, Ctx& ctx) {
  const Program& body = *ins.subs[0];
  size_t nc = static_cast<size_t>(ins.eqn->params.get_int("num_carry"));
  size_t nconst = ins.in.size() - 2 - nc;
  const Val& lo_v = env[ins.in[0]];
  int64_t lo = scalar_as_int(lo_v), hi = scalar_as_int(env[ins.in[1]]);
  DType it = lo_v.dtype;
  // Two carry buffers, ping-ponged, allocated before the per-iteration mark.
  std::vector<Val> bufs(2 * nc);
  for (size_t k = 0; k < nc; ++k) {
    const ir::Aval& a = ins.eqn->out[k].aval;
    if (k < 64 && (ins.adopt_init >> k & 1)) {
      bufs[k] = env[ins.in[2 + k]];  // a fresh buffer only this loop uses (program.cc)
    } else {
      bufs[k] = make_like(a, ctx);
      copy_into(bufs[k], env[ins.in[2 + k]]);
    }
    bufs[nc + k] = make_like(a, ctx);
  }
  Val ival = ctx.alloc(it, Dims());
  std::vector<Val> args(1 + nc + nconst), outs(nc);
  for (size_t k = 0; k < nconst; ++k) args[1 + nc + k] = env[ins.in[2 + nc + k]];
  std::vector<int> cur(nc, 0);  // which buffer holds each carry
  // A body that only accumulates dots of ref slices into a carry: collect them (program.cc).
  DeferredDots deferred;
  struct Restore {
    Ctx& ctx;
    DeferredDots* saved;
    ~Restore() { ctx.deferred = saved; }
  } restore{ctx, ctx.deferred};
  ctx.deferred = nullptr;
  if (body.defer_carry >= 0) {
    deferred.acc = bufs[static_cast<size_t>(body.defer_carry)].data;
    ctx.deferred = &deferred;
  }
  for (int64_t i = lo; i < hi; ++i) {
    Arena::Mark m = ctx.arena->mark();
    convert_elements(DType::I64, &i, it, ival.data, 1);
    args[0] = ival;
    for (size_t k = 0; k < nc; ++k) args[1 + k] = bufs[cur[k] * nc + k];
    run(body, args.data(), outs.data(), ctx);
    next_carries(bufs, cur, outs);
    ctx.arena->reset(m);
  }
  if (ctx.deferred) flush_deferred(deferred, ctx);
  for (size_t k = 0; k < nc; ++k) env[ins.out[k]] = bufs[cur[k] * nc + k];
}

void while_rule(const Instr& ins, Val* env, Ctx& ctx) {
  const Program& cond = *ins.subs[0];
  const Program& body = *ins.subs[1];
  const auto& p = ins.eqn->params;
  size_t nc = static_cast<size_t>(p.get_int("num_carry"));
  size_t ncc = static_cast<size_t>(p.get_int("cond_nconsts"));
  size_t nbc = ins.in.size() - nc - ncc;
  std::vector<Val> bufs(2 * nc);
  for (size_t k = 0; k < nc; ++k) {
    const ir::Aval& a = ins.eqn->out[k].aval;
    bufs[k] = make_like(a, ctx);
    bufs[nc + k] = make_like(a, ctx);
    copy_into(bufs[k], env[ins.in[k]]);
  }
  std::vector<Val> cargs(nc + ncc), bargs(nc + nbc), outs(nc);
  Val pred;
  for (size_t k = 0; k < ncc; ++k) cargs[nc + k] = env[ins.in[nc + k]];
  for (size_t k = 0; k < nbc; ++k) bargs[nc + k] = env[ins.in[nc + ncc + k]];
  std::vector<int> cur(nc, 0);
  while (true) {
    Arena::Mark m = ctx.arena->mark();
    for (size_t k = 0; k < nc; ++k) cargs[k] = bargs[k] = bufs[cur[k] * nc + k];
    run(cond, cargs.data(), &pred, ctx);
    if (!scalar_as_bool(pred)) {
      ctx.arena->reset(m);
      break;
    }
    run(body, bargs.data(), outs.data(), ctx);
    next_carries(bufs, cur, outs);
    ctx.arena->reset(m);
  }
  for (size_t k = 0; k < nc; ++k) env[ins.out[k]] = bufs[cur[k] * nc + k];
}

void cond_rule(const Instr& ins, Val* env, Ctx& ctx) {
  int64_t b = scalar_as_int(env[ins.in[0]]);
  b = std::clamp<int64_t>(b, 0, static_cast<int64_t>(ins.subs.size()) - 1);
  std::vector<Val> args(ins.in.size() - 1), outs(ins.out.size());
  for (size_t k = 1; k < ins.in.size(); ++k) args[k - 1] = env[ins.in[k]];
  run(*ins.subs[b], args.data(), outs.data(), ctx);
  for (size_t k = 0; k < outs.size(); ++k) env[ins.out[k]] = outs[k];
}

void program_id_rule(const Instr& ins, Val* env, Ctx& ctx) {
  Val v = ctx.alloc(DType::I32, Dims());
  *v.as<int32_t>() = static_cast<int32_t>(ctx.program_ids[ins.eqn->params.get_int("axis")]);
  env[ins.out[0]] = v;
}

void num_programs_rule(const Instr& ins, Val* env, Ctx& ctx) {
  Val v = ctx.alloc(DType::I32, Dims());
  *v.as<int32_t>() = static_cast<int32_t>(ctx.grid[ins.eqn->params.get_int("axis")]);
  env[ins.out[0]] = v;
}

// debug_print's text is shared with the CUDA backend (src/core/print_format.h).
std::string format_value(const Val& v) {
  int64_t n = v.size();
  std::vector<uint64_t> slots(static_cast<size_t>(n));
  size_t w = itemsize(v.dtype);
  for (int64_t i = 0; i < n; ++i) slots[static_cast<size_t>(i)] = core::print_slot(v.dtype, static_cast<const char*>(v.data) + i * w);
  Shape shape(v.shape.d, v.shape.d + v.shape.n);
  return core::format_print_value(v.dtype, shape, slots.data());
}

std::string pid_str(const Ctx& ctx) {
  std::string s = "(";
  for (int k = 0; k < ctx.grid_rank; ++k) s += (k ? ", " : "") + std::to_string(ctx.program_ids[k]);
  return s + (ctx.grid_rank == 1 ? ",)" : ")");
}

void debug_print_rule(const Instr& ins, Val* env, Ctx& ctx) {
  std::vector<std::string> vals;
  for (int s : ins.in) vals.push_back(format_value(env[s]));
  std::string line = "[program " + pid_str(ctx) + "] " + core::fill_print_format(ins.eqn->params.get<std::string>("fmt"), vals);
  std::lock_guard<std::mutex> g(ctx.call->print_mutex);
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void check_rule(const Instr& ins, Val* env, Ctx& ctx) {
  if (!ctx.call->collect_checks) return;
  const Val& pred = env[ins.in[0]];
  const bool* p = pred.as<bool>();
  bool ok = true;
  for (int64_t i = 0; i < pred.size(); ++i) ok = ok && p[i];
  if (ok) return;
  std::vector<std::string> vals;
  for (size_t k = 1; k < ins.in.size(); ++k) vals.push_back(format_value(env[ins.in[k]]));
  std::vector<int64_t> pid(ctx.program_ids, ctx.program_ids + ctx.grid_rank);
  int64_t linear = 0;
  for (int k = 0; k < ctx.grid_rank; ++k) linear = linear * ctx.grid[k] + ctx.program_ids[k];
  ctx.call->record_failure(linear, pid,
                           core::check_failure_text(ins.eqn->loc, core::fill_print_format(ins.eqn->params.get<std::string>("fmt"), vals)));
}

}  // namespace

void register_control_rules() {
  auto& t = rule_table_for_registration();
  t.set(PrimId::fori_loop, fori_rule);
  t.set(PrimId::while_loop, while_rule);
  t.set(PrimId::cond, cond_rule);
  t.set(PrimId::program_id, program_id_rule);
  t.set(PrimId::num_programs, num_programs_rule);
  t.set(PrimId::debug_print, debug_print_rule);
  t.set(PrimId::check, check_rule);
}

}  // namespace pallas::interp
