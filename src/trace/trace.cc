#include "src/trace/trace.h"

#include <string>
#include <string_view>

namespace pallas::trace {

namespace {
thread_local Frame* g_current = nullptr;
thread_local ir::SourceLoc g_loc;   // the located op being traced (outermost in its frame)
thread_local ir::SourceLoc g_last;  // the last location recorded in this frame (see Here)

// The library's own sources (src/) and public headers: a location there is not the kernel's.
bool in_library(const char* file) {
  static const std::string src = [] {
    std::string f = __FILE__;  // <root>/src/trace/trace.cc
    size_t p = f.rfind("src/trace/");
    return p == std::string::npos ? std::string("\x01") : f.substr(0, p + 4);
  }();
  std::string_view f = file;
  return f.substr(0, src.size()) == src || f.find("include/pallas/") != std::string_view::npos;
}
}  // namespace

Frame* current_frame() { return g_current; }

}  // namespace pallas::trace

namespace pallas::detail {
// Called by every pl::Error's constructor: cheap, and empty outside a trace.
ErrorSite current_error_site() noexcept {
  if (!trace::g_current) return {};
  if (trace::g_loc.file) return {trace::g_loc.file, trace::g_loc.line, true};
  if (trace::g_last.file) return {trace::g_last.file, trace::g_last.line, false};
  return {};
}
}  // namespace pallas::detail

namespace pallas::trace {

Here::Here(SourceLocation loc) {
  if (g_loc.file || !loc.file || !*loc.file || !g_current || in_library(loc.file)) return;
  g_loc = {loc.file, loc.line};
  g_last = g_loc;
  set_ = true;
}
Here::~Here() {
  if (set_) g_loc = {};
}
ir::SourceLoc current_loc() { return g_loc; }

std::string with_site(const std::string& what, const Error& e) {
  std::string m = e.what();
  if (m.rfind(what + ": ", 0) == 0) m.erase(0, what.size() + 2);
  const detail::ErrorSite& s = e.site();
  std::string at;
  if (s.file) at = std::string(s.exact ? "at " : "at or after ") + ir::SourceLoc{s.file, s.line}.str() + ": ";
  if (!at.empty() && m.rfind(at, 0) == 0) at.clear();  // already said (a message passed on)
  return what + ": " + at + m;
}

Frame& require_frame(const char* op) {
  if (!g_current)
    throw Error(std::string("pl::") + op +
                " was called outside a kernel: in-kernel ops only work while pallas_call traces a kernel or index map");
  return *g_current;
}

Frame::Frame(const KernelContext* ctx, bool nested)
    : ctx_(ctx), parent_(g_current), nested_(nested), saved_loc_(g_loc), saved_last_(g_last) {
  g_current = this;
  g_loc = {};  // a body or branch traced here is not part of the op that traces it
  if (!nested) g_last = {};  // a new kernel or index map: no line before it
  // (a nested one starts with the enclosing statement's line: the loop's or the cond's)
}
Frame::~Frame() {
  g_current = parent_;
  g_loc = saved_loc_;
  g_last = saved_last_;
}

std::string KernelContext::ref_name(const Value& ref) const {
  if (ref.defined())
    if (auto* v = std::get_if<ir::Var>(&ref.impl()->atom))
      for (auto& [id, name] : ref_names)
        if (id == v->id) return name;
  return "the ref";
}

ir::Var Frame::add_invar(ir::Aval a) {
  ir::Var v = ir::new_var(std::move(a));
  owned_.insert(v.id);
  jaxpr_.invars.push_back(v);
  return v;
}

ir::Var Frame::capture(const ir::Var& v) {
  if (owned_.count(v.id)) return v;
  auto it = captured_.find(v.id);
  if (it != captured_.end()) return it->second;
  if (!nested_ || !parent_)
    throw Error(ctx_->what +
                ": uses a Value traced outside it (a Value from another kernel or a different trace); pass data "
                "in through the call's inputs instead");
  ir::Var outer = parent_->capture(v);
  ir::Var inner = ir::new_var(outer.aval);
  owned_.insert(inner.id);
  captured_[v.id] = inner;
  captured_inner_.push_back(inner);
  captured_outer_.push_back(outer);
  return inner;
}

ir::Atom Frame::localize(const ir::Atom& a) {
  if (auto* v = std::get_if<ir::Var>(&a)) return capture(*v);
  return a;
}

std::vector<ir::Atom> Frame::bind(const ir::Primitive& p, const std::vector<ir::Atom>& in, ir::Params params) {
  ir::Eqn e;
  e.prim = &p;
  e.params = std::move(params);
  e.loc = g_loc;
  std::vector<ir::Aval> avals;
  for (auto& a : in) {
    e.in.push_back(localize(a));
    avals.push_back(ir::atom_aval(a));
  }
  std::vector<ir::Aval> outs = p.abstract_eval(avals, e.params);
  std::vector<ir::Atom> res;
  for (auto& o : outs) {
    ir::Var v = ir::new_var(o);
    owned_.insert(v.id);
    e.out.push_back(v);
    res.emplace_back(v);
  }
  jaxpr_.eqns.push_back(std::move(e));
  return res;
}

ir::Jaxpr Frame::finish(const std::vector<ir::Atom>& outs, std::vector<ir::Atom>* captured_outer) {
  for (auto& o : outs) jaxpr_.outvars.push_back(localize(o));
  for (auto& v : captured_inner_) jaxpr_.invars.push_back(v);
  if (captured_outer) *captured_outer = captured_outer_;
  else if (!captured_outer_.empty())
    throw Error("internal: captured values dropped");
  return std::move(jaxpr_);
}

Value make_value(ir::Atom a) {
  ir::Aval av = ir::atom_aval(a);
  return Value(std::make_shared<const detail::ValueImpl>(detail::ValueImpl{std::move(a), std::move(av)}));
}

const ir::Atom& atom_of(const Value& v, const char* op) {
  if (!v.defined()) throw Error(std::string("pl::") + op + ": an operand is an empty (default-constructed) Value");
  return v.impl()->atom;
}
const ir::Aval& aval_of(const Value& v, const char* op) {
  if (!v.defined()) throw Error(std::string("pl::") + op + ": an operand is an empty (default-constructed) Value");
  return v.impl()->aval;
}

std::vector<Value> bind(ir::PrimId id, const std::vector<Value>& in, ir::Params params) {
  const ir::Primitive& p = ir::prim(id);
  Frame& f = require_frame(p.name.c_str());
  std::vector<ir::Atom> atoms;
  atoms.reserve(in.size());
  for (auto& v : in) atoms.push_back(atom_of(v, p.name.c_str()));
  std::vector<Value> out;
  for (auto& a : f.bind(p, atoms, std::move(params))) out.push_back(make_value(a));
  return out;
}

Value bind1(ir::PrimId id, const std::vector<Value>& in, ir::Params params) {
  auto outs = bind(id, in, std::move(params));
  return outs.at(0);
}

}  // namespace pallas::trace
