// Tracing: C++ lambdas over Values become Jaxprs. A Frame is one jaxpr being built (a
// kernel, an index map, a loop body); frames nest, and a value of an outer frame used in an
// inner one is captured as an extra input of the inner jaxpr (closure conversion).
#pragma once
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "pallas/kernel.h"
#include "src/ir/ir.h"
#include "src/ir/primitive.h"

namespace pallas::detail {
struct ValueImpl {
  ir::Atom atom;
  ir::Aval aval;
};
}  // namespace pallas::detail

namespace pallas::trace {

// What the kernel being traced knows about its call (for program_id/num_programs and errors).
struct KernelContext {
  std::string what;            // "kernel 'name'" or "index map of input 0 of kernel 'name'"
  std::vector<int64_t> grid;   // pl::dynamic entries for call-time sizes
  bool allows_program_id = false;
  // The kernel's refs by variable id ("input 1", "output 0", "scratch 0"): what a load or
  // store error calls the ref it accesses.
  std::vector<std::pair<int64_t, std::string>> ref_names;
  std::string ref_name(const Value& ref) const;  // "the ref" when not one of them
};

class Frame {
 public:
  // A root frame (no captures allowed) or a nested one.
  Frame(const KernelContext* ctx, bool nested);
  ~Frame();
  Frame(const Frame&) = delete;
  Frame& operator=(const Frame&) = delete;

  ir::Var add_invar(ir::Aval a);
  std::vector<ir::Atom> bind(const ir::Primitive& p, const std::vector<ir::Atom>& in, ir::Params params);
  ir::Atom localize(const ir::Atom& a);  // capture from outer frames when needed
  // Finish the jaxpr; captured values become trailing invars, their outer atoms are returned.
  ir::Jaxpr finish(const std::vector<ir::Atom>& outs, std::vector<ir::Atom>* captured_outer);
  const KernelContext& context() const { return *ctx_; }

 private:
  ir::Var capture(const ir::Var& v);
  const KernelContext* ctx_;
  Frame* parent_;
  bool nested_;
  ir::Jaxpr jaxpr_;
  std::unordered_set<int64_t> owned_;
  std::unordered_map<int64_t, ir::Var> captured_;
  std::vector<ir::Var> captured_inner_;
  std::vector<ir::Atom> captured_outer_;
  ir::SourceLoc saved_loc_, saved_last_;
};

Frame* current_frame();  // nullptr outside any trace

// The source location equations bound while it lives are stamped with: the outermost named
// op's caller (an op the library calls on its own behalf keeps its caller's place). Locations
// inside the library itself (its sources and public headers) are not the kernel's and are
// skipped. A nested frame (a loop body, a branch) starts with none.
//
// Each such location is also remembered as the frame's last one, for what has no location of
// its own: an elementwise function (pl::exp) binds its equation without one, and an error
// made in it is said to be "at or after" that last line (detail::ErrorSite::exact = false).
// The last line is the enclosing statement's whenever the statement reads a ref, calls a named
// op or applies an operator before it (operators and ref accesses have lines, see kernel.h),
// and never a line after the error; a loop body starts with its loop's line, and the line
// before the loop comes back after it.
class Here {
 public:
  explicit Here(SourceLocation loc);
  ~Here();
  Here(const Here&) = delete;
  Here& operator=(const Here&) = delete;

 private:
  bool set_ = false;
};
ir::SourceLoc current_loc();
Frame& require_frame(const char* op);

// An error made while tracing, as pallas_call reports it: "<what>: at matmul.cc:42: <message>"
// (the op's line; "at or after" when only the last line before it is known), the message's
// own leading "<what>: " dropped so that it is said once.
std::string with_site(const std::string& what, const Error& e);

// Helpers for the public API implementation.
Value make_value(ir::Atom a);
const ir::Atom& atom_of(const Value& v, const char* op);
const ir::Aval& aval_of(const Value& v, const char* op);
std::vector<Value> bind(ir::PrimId id, const std::vector<Value>& in, ir::Params params = {});
Value bind1(ir::PrimId id, const std::vector<Value>& in, ir::Params params = {});

}  // namespace pallas::trace
