// Tracing a pallas_call: validate options, trace index maps and the kernel, build the GridMapping.
#include <cstdio>

#include "src/core/pallas_call.h"
#include "src/ir/primitive.h"
#include "src/trace/api_util.h"
#include "src/trace/trace.h"

namespace pallas::core {

Shape BlockMapping::ref_shape() const {
  Shape s;
  for (size_t k = 0; k < block_shape.size(); ++k)
    if (!squeezed[k]) s.push_back(block_shape[k]);
  return s;
}

bool BlockMapping::index_map_is_constant_zero() const {
  for (auto& a : index_map->outvars) {
    auto* l = std::get_if<ir::Literal>(&a);
    if (!l || l->i != 0) return false;
  }
  return index_map->eqns.empty();
}

int GridMapping::num_dynamic_bounds() const {
  int n = 0;
  for (int64_t g : grid) n += g < 0;
  return n;
}

int64_t checked_num_programs(const std::vector<int64_t>& grid, const std::string& what) {
  auto grid_str = [&] {
    std::string s = "(";
    for (size_t k = 0; k < grid.size(); ++k) s += (k ? ", " : "") + std::to_string(grid[k]);
    return s + (grid.size() == 1 ? ",)" : ")");
  };
  int64_t n = 1;
  for (size_t k = 0; k < grid.size(); ++k) {
    if (grid[k] > INT32_MAX)
      throw Error(what + ": grid axis " + std::to_string(k) + " has " + std::to_string(grid[k]) +
                  " programs; program_id is an i32, so an axis has at most 2147483647. Use larger blocks, or split the "
                  "axis in two");
    if (grid[k] == 0) return 0;
  }
  for (int64_t g : grid)
    if (__builtin_mul_overflow(n, g, &n))
      throw Error(what + ": the grid " + grid_str() + " has more programs than an int64 can count (the product of its "
                  "sizes overflows); use larger blocks and fewer programs");
  return n;
}

int64_t GridMapping::num_programs_static() const {
  int64_t n = 1;
  for (int64_t g : grid)
    if (g == 0) return 0;  // no program, whatever the call-time sizes
  for (int64_t g : grid) {
    if (g < 0) return -1;
    n *= g;
  }
  return n;
}

std::string output_left_unwritten(const PallasCall& call) {
  for (size_t o = 0; o < call.grid.outputs.size(); ++o) {
    bool aliased = false;
    for (auto [i, oo] : call.aliases) aliased = aliased || oo == static_cast<int>(o);
    const ShapeDtype& sd = call.grid.outputs[o].array;
    if (!aliased && shape_size(sd.shape) > 0) return "output " + std::to_string(o) + " " + sd.str();
  }
  return "";
}

void check_dynamic_bound(const PallasCall& call, size_t k, int64_t v) {
  if (v < 0) throw Error(call.what + ": dynamic grid bound " + std::to_string(k) + " is negative (" + std::to_string(v) + ")");
  if (v == 0)
    if (std::string o = output_left_unwritten(call); !o.empty())
      throw Error(call.what + ": dynamic grid bound " + std::to_string(k) + " is 0, so no program runs and " + o +
                  " would be written by none; pass at least 1, or skip the call when there is no work");
}

std::vector<ShapeDtype> PallasCall::input_shapes() const {
  std::vector<ShapeDtype> r = grid.prefetch;
  for (auto& b : grid.inputs) r.push_back(b.array);
  return r;
}
std::vector<ShapeDtype> PallasCall::output_shapes() const {
  std::vector<ShapeDtype> r;
  for (auto& b : grid.outputs) r.push_back(b.array);
  return r;
}

std::string PallasCall::text() const {
  std::string s = "pallas_call " + what + "\n  grid=(";
  for (size_t k = 0; k < grid.grid.size(); ++k)
    s += (k ? ", " : "") + (grid.grid[k] < 0 ? std::string("dynamic") : std::to_string(grid.grid[k]));
  s += grid.grid.size() == 1 ? ",)\n" : ")\n";
  if (grid.any_sequential()) {  // printed only then, so all-parallel calls keep their text
    s += "  dimension_semantics=(";
    for (size_t k = 0; k < grid.semantics.size(); ++k)
      s += std::string(k ? ", " : "") + (grid.sequential(k) ? "sequential" : "parallel");
    s += grid.semantics.size() == 1 ? ",)\n" : ")\n";
  }
  auto block = [&](const BlockMapping& b) {
    s += "  " + b.what + ": " + b.array.str() + " block=" + shape_str(b.block_shape);
    for (size_t k = 0; k < b.squeezed.size(); ++k)
      if (b.squeezed[k]) s += " squeezed(" + std::to_string(k) + ")";
    if (b.space == MemorySpace::Any) s += " memory_space=any";
    s += "\n    index_map=" + ir::to_text(*b.index_map) + "\n";
  };
  for (size_t k = 0; k < grid.prefetch.size(); ++k) s += "  scalar prefetch " + std::to_string(k) + ": " + grid.prefetch[k].str() + "\n";
  for (auto& b : grid.inputs) block(b);
  for (auto& b : grid.outputs) block(b);
  for (size_t k = 0; k < grid.scratch.size(); ++k) s += "  scratch " + std::to_string(k) + ": " + grid.scratch[k].str() + "\n";
  for (auto& [i, o] : aliases) s += "  alias input " + std::to_string(i) + " -> output " + std::to_string(o) + "\n";
  s += "  kernel=" + ir::to_text(*kernel) + "\n";
  return s;
}

uint64_t PallasCall::hash() const { return ir::hash_text(text()); }

namespace {

std::string plural(size_t n, const char* w, const char* many = nullptr) {
  return std::to_string(n) + " " + (n == 1 ? std::string(w) : many ? std::string(many) : std::string(w) + "s");
}

ir::JaxprPtr trace_index_map(const std::string& what, const BlockSpec& spec, const BlockMapping& bm,
                             const std::vector<int64_t>& grid, const std::vector<ShapeDtype>& prefetch) {
  trace::KernelContext ctx{what, grid, false};
  trace::Frame f(&ctx, false);
  std::vector<Value> args;
  for (size_t k = 0; k < grid.size(); ++k) args.push_back(trace::make_value(f.add_invar(ir::Aval::array({}, DType::I32))));
  for (auto& p : prefetch) args.push_back(trace::make_value(f.add_invar(ir::Aval::ref(p.shape, p.dtype, MemorySpace::Smem))));
  std::vector<Value> outs;
  size_t rank = bm.array.shape.size();
  if (!spec.index_map || spec.memory_space == MemorySpace::Any) {
    for (size_t k = 0; k < rank; ++k) outs.push_back(Value(0));
  } else {
    size_t want = grid.size() + prefetch.size();
    if (spec.index_map_arity >= 0 && static_cast<size_t>(spec.index_map_arity) != want)
      throw Error(what + " takes " + plural(spec.index_map_arity, "argument") + " but the grid has " +
                  plural(grid.size(), "axis", "axes") + (prefetch.empty() ? "" : " and " + plural(prefetch.size(), "scalar-prefetch operand")) +
                  ", so it must take " + std::to_string(want));
    try {
      outs = spec.index_map(args);
    } catch (const Error& e) {  // an op's error: name the map and the op's line
      throw Error(trace::with_site(what, e));
    }
    if (outs.size() != rank)
      throw Error(what + " returns " + plural(outs.size(), "index", "indices") + " but the operand " + bm.array.str() +
                  " has rank " + std::to_string(rank) + ": return one block index per dimension");
  }
  std::vector<ir::Atom> atoms;
  for (size_t k = 0; k < outs.size(); ++k) {
    Value v = outs[k];
    if (!v.defined()) throw Error(what + " returns an empty Value for dimension " + std::to_string(k));
    if (!v.shape().empty() || !is_integer(v.dtype()))
      throw Error(what + " returns " + v.str() + " for dimension " + std::to_string(k) + "; block indices must be integer scalars");
    atoms.push_back(trace::atom_of(api::convert(v, DType::I32, false), "index_map"));
  }
  auto j = std::make_shared<const ir::Jaxpr>(f.finish(atoms, nullptr));
  ir::verify(*j, what);
  return j;
}

BlockMapping make_block(const std::string& kernel_what, const std::string& which, const ShapeDtype& array,
                        const BlockSpec* spec, const std::vector<int64_t>& grid, const std::vector<ShapeDtype>& prefetch) {
  BlockMapping b;
  b.what = which;
  b.array = array;
  BlockSpec whole;
  const BlockSpec& s = spec ? *spec : whole;
  b.space = s.memory_space;
  size_t rank = array.shape.size();
  if (!s.block_shape || s.memory_space == MemorySpace::Any) {
    b.block_shape = array.shape;
    b.squeezed.assign(rank, false);
  } else {
    const Shape& bs = *s.block_shape;
    if (bs.size() != rank)
      throw Error(kernel_what + ": the block shape " + shape_str(bs) + " of " + which + " has rank " +
                  std::to_string(bs.size()) + " but the array " + array.str() + " has rank " + std::to_string(rank) +
                  "; give one block size per dimension (pl::squeezed for a dropped one)");
    for (size_t k = 0; k < rank; ++k) {
      if (bs[k] == squeezed) {
        b.block_shape.push_back(1);
        b.squeezed.push_back(true);
      } else if (bs[k] <= 0) {
        throw Error(kernel_what + ": block dimension " + std::to_string(k) + " of " + which + " is " +
                    std::to_string(bs[k]) + "; block sizes must be positive (or pl::squeezed)");
      } else {
        b.block_shape.push_back(bs[k]);
        b.squeezed.push_back(false);
      }
    }
  }
  b.index_map = trace_index_map(kernel_what + ": the index map of " + which, s, b, grid, prefetch);
  return b;
}

}  // namespace

PallasCall trace_call(const detail::KernelBody& body, const std::vector<ShapeDtype>& out_shapes,
                      const CallOptions& opts, const std::string& what, const std::vector<ShapeDtype>& inputs) {
  PallasCall c;
  c.name = opts.name;
  c.what = what;
  c.compiler_params = opts.compiler_params;
  c.cost_estimate = opts.cost_estimate;
  c.backend = opts.interpret ? Backend::Interpret : opts.backend;
  c.debug = opts.debug;
  c.interpret_params = opts.interpret_params;
  c.grid.grid = opts.grid;
  for (int64_t g : opts.grid)
    if (g < 0 && g != dynamic) throw Error(what + ": grid size " + std::to_string(g) + " is negative");
  // No outputs is allowed (Pallas' out_shape=()): a kernel run for its effects (debug_print,
  // checks); the call returns an empty vector.
  {  // the static part of the grid: each axis an i32, the product an int64
    std::vector<int64_t> known;
    for (int64_t g : opts.grid)
      if (g >= 0) known.push_back(g);
    checked_num_programs(known, what);
  }

  int np = opts.num_scalar_prefetch;
  if (np < 0 || np > static_cast<int>(inputs.size()))
    throw Error(what + ": num_scalar_prefetch is " + std::to_string(np) + " but the call has " +
                plural(inputs.size(), "input"));
  for (int k = 0; k < np; ++k) {
    if (!is_integer(inputs[k].dtype))
      throw Error(what + ": scalar-prefetch operand " + std::to_string(k) + " is " + inputs[k].str() +
                  "; scalar prefetch takes integer arrays");
    c.grid.prefetch.push_back(inputs[k]);
  }
  size_t nin = inputs.size() - np;
  if (!opts.in_specs.empty() && opts.in_specs.size() != nin)
    throw Error(what + ": " + plural(opts.in_specs.size(), "in_spec") + " given for " + plural(nin, "input") +
                (np ? " (after " + plural(np, "scalar-prefetch operand") + ")" : "") + "; give one BlockSpec per input, or none");
  if (!opts.out_specs.empty() && opts.out_specs.size() != out_shapes.size())
    throw Error(what + ": " + plural(opts.out_specs.size(), "out_spec") + " given for " + plural(out_shapes.size(), "output") +
                "; give one BlockSpec per output, or none");

  for (size_t k = 0; k < nin; ++k)
    c.grid.inputs.push_back(make_block(what, "input " + std::to_string(k + np), inputs[np + k],
                                       opts.in_specs.empty() ? nullptr : &opts.in_specs[k], opts.grid, c.grid.prefetch));
  for (size_t k = 0; k < out_shapes.size(); ++k)
    c.grid.outputs.push_back(make_block(what, "output " + std::to_string(k), out_shapes[k],
                                        opts.out_specs.empty() ? nullptr : &opts.out_specs[k], opts.grid, c.grid.prefetch));
  c.grid.scratch = opts.scratch_shapes;
  // A limit of the language, not of one backend (the interpreter's fixed-size index vectors).
  auto check_rank = [&](const ShapeDtype& sd, const std::string& which) {
    if (sd.shape.size() > 8)
      throw Error(what + ": " + which + " " + sd.str() + " has rank " + std::to_string(sd.shape.size()) +
                  "; arrays may have at most 8 dimensions (reshape it first)");
  };
  for (size_t k = 0; k < inputs.size(); ++k) check_rank(inputs[k], "input " + std::to_string(k));
  for (size_t k = 0; k < out_shapes.size(); ++k) check_rank(out_shapes[k], "output " + std::to_string(k));
  for (size_t k = 0; k < opts.scratch_shapes.size(); ++k) check_rank(opts.scratch_shapes[k], "scratch " + std::to_string(k));
  resolve_semantics(c.grid, opts.dimension_semantics, what);

  for (auto [i, o] : opts.input_output_aliases) {
    if (i < 0 || i >= static_cast<int>(inputs.size()))
      throw Error(what + ": input_output_aliases names input " + std::to_string(i) + " but the call has " +
                  plural(inputs.size(), "input"));
    if (o < 0 || o >= static_cast<int>(out_shapes.size()))
      throw Error(what + ": input_output_aliases names output " + std::to_string(o) + " but the call has " +
                  plural(out_shapes.size(), "output"));
    if (!(inputs[i] == out_shapes[o]))
      throw Error(what + ": input_output_aliases maps input " + std::to_string(i) + " " + inputs[i].str() + " to output " +
                  std::to_string(o) + " " + out_shapes[o].str() + "; aliased arrays must have the same shape and dtype");
    for (auto [i2, o2] : opts.input_output_aliases)
      if (i2 != i && o2 == o)
        throw Error(what + ": output " + std::to_string(o) + " is aliased to inputs " + std::to_string(i) + " and " +
                    std::to_string(i2) + "; alias each output at most once");
  }
  c.aliases = opts.input_output_aliases;
  // A grid axis of size 0 runs no program: every output not aliased to an input would come back
  // unwritten (poison, or stale memory on the GPU). Legal only when there is nothing to write.
  for (size_t a = 0; a < opts.grid.size(); ++a)
    if (opts.grid[a] == 0)
      if (std::string o = output_left_unwritten(c); !o.empty())
        throw Error(what + ": grid axis " + std::to_string(a) + " has size 0, so no program runs and " + o +
                    " would be written by none; give each grid axis at least one program (pl::cdiv(size, block) is 0 "
                    "only for an empty array), or alias the output to an input");

  // The kernel: refs for scalar prefetch, inputs, outputs, scratch.
  size_t nrefs = np + nin + out_shapes.size() + c.grid.scratch.size();
  if (body.returns_value)
    throw Error(what + ": the kernel returns a value; kernels must return void and write their results to the output refs");
  if (body.arity >= 0 && static_cast<size_t>(body.arity) != nrefs)
    throw Error(what + ": the kernel takes " + plural(body.arity, "ref") + " but the call passes " + std::to_string(nrefs) + " (" +
                (np ? plural(np, "scalar-prefetch ref") + ", " : "") + plural(nin, "input") + ", " +
                plural(out_shapes.size(), "output") + (c.grid.scratch.empty() ? "" : ", " + plural(c.grid.scratch.size(), "scratch buffer")) + ")");
  trace::KernelContext ctx{what, opts.grid, true, {}};
  ir::Jaxpr kj;
  {
    trace::Frame f(&ctx, false);
    std::vector<Ref> refs;
    auto add_ref = [&](ir::Aval a, std::string name) {
      ir::Var v = f.add_invar(std::move(a));
      ctx.ref_names.emplace_back(v.id, std::move(name));
      refs.emplace_back(trace::make_value(v));
    };
    for (size_t k = 0; k < c.grid.prefetch.size(); ++k) {
      const ShapeDtype& p = c.grid.prefetch[k];
      add_ref(ir::Aval::ref(p.shape, p.dtype, MemorySpace::Smem), "scalar-prefetch operand " + std::to_string(k));
    }
    for (auto& b : c.grid.inputs) add_ref(ir::Aval::ref(b.ref_shape(), b.array.dtype, b.space), b.what);
    for (auto& b : c.grid.outputs) add_ref(ir::Aval::ref(b.ref_shape(), b.array.dtype, b.space), b.what);
    for (size_t k = 0; k < c.grid.scratch.size(); ++k) {
      const ShapeDtype& s = c.grid.scratch[k];
      add_ref(ir::Aval::ref(s.shape, s.dtype, MemorySpace::Scratch), "scratch " + std::to_string(k));
    }
    try {
      body.fn(refs);
    } catch (const Error& e) {  // the kernel's name, then the op's line (the error's site)
      throw Error(trace::with_site(what, e));
    }
    kj = f.finish({}, nullptr);
  }
  c.kernel = std::make_shared<const ir::Jaxpr>(std::move(kj));
  ir::verify(*c.kernel, what);
  if (c.debug) std::printf("%s", c.text().c_str());
  return c;
}

Error wrong_argument_count(const std::string& what, size_t given, size_t dynamic, size_t prefetch, size_t inputs,
                           const std::string& why) {
  std::vector<std::string> parts;
  if (dynamic) parts.push_back(plural(dynamic, "dynamic grid bound"));
  if (prefetch) parts.push_back(plural(prefetch, "scalar-prefetch operand"));
  parts.push_back(plural(inputs, "input") + (why.empty() ? "" : " (" + why + ")"));
  std::string list = parts[0];
  for (size_t k = 1; k < parts.size(); ++k) list += (k + 1 == parts.size() ? " and " : ", ") + parts[k];
  return Error(what + ": called with " + plural(given, "array") + " but it takes " + std::to_string(dynamic + prefetch + inputs) +
               ": " + list + (parts.size() > 1 ? ", in that order" : "") +
               (dynamic ? "; dynamic grid bounds are i32 scalars (pl::Array::scalar)" : ""));
}

// On every call: compares in place (no copies of shapes), strings only for the error.
void check_arguments(const PallasCall& call, const std::vector<Array>& args) {
  const GridMapping& gm = call.grid;
  size_t nd = static_cast<size_t>(gm.num_dynamic_bounds());
  size_t n_ins = gm.prefetch.size() + gm.inputs.size();
  if (args.size() != nd + n_ins)
    throw wrong_argument_count(call.what, args.size(), nd, gm.prefetch.size(), gm.inputs.size(), "");
  for (size_t k = 0; k < nd; ++k)
    if (!args[k].defined() || !args[k].shape().empty() || !is_integer(args[k].dtype()))
      throw Error(call.what + ": argument " + std::to_string(k) +
                  " is a dynamic grid bound and must be an integer scalar Array (pl::Array::scalar(n))");
  for (size_t k = 0; k < n_ins; ++k) {
    const Array& a = args[nd + k];
    if (!a.defined()) throw Error(call.what + ": input " + std::to_string(k) + " is an empty Array");
    const ShapeDtype& want = k < gm.prefetch.size() ? gm.prefetch[k] : gm.inputs[k - gm.prefetch.size()].array;
    if (a.dtype() != want.dtype || a.shape() != want.shape)
      throw Error(call.what + ": input " + std::to_string(k) + " is " + a.shape_dtype().str() + " but the call was traced for " +
                  want.str() + "; make a new pallas_call for other shapes");
  }
}

}  // namespace pallas::core
