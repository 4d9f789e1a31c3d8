// ember's native wrapper: runs a compiled graph's straight-line program in C++.
//
// A generated Python wrapper pays the interpreter for every line: an allocation, a kernel
// launch or an extern call costs 2-15 us of host time on the GPU machine, and ResNet-50's
// training step has about 1,200 of them. This module runs the same program, translated
// once by ember-inductor (`codegen/native_wrapper.py`) into the instructions below, with the
// tensors held in a register file: allocations through ATen, Triton kernels launched
// through `cuLaunchKernel`, extern ops through the dispatcher's boxed call. Anything the
// program hands back to Python (a kernel without a native launch, a misaligned pointer) calls
// the Python object it was given. See the runtime README ("Native wrapper").
#include <dlfcn.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/as_strided.h>
#include <ATen/ops/empty_strided.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Layout.h>
#include <torch/csrc/MemoryFormat.h>
#include <torch/csrc/autograd/python_variable.h>
#include <pybind11/pybind11.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace py = pybind11;

namespace {

using LaunchFn = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void*, void**, void**);
using ErrorNameFn = int (*)(int, const char**);

constexpr int kInvalidContext = 201;  // CUDA_ERROR_INVALID_CONTEXT

struct Driver {
  LaunchFn launch = nullptr;
  ErrorNameFn error_name = nullptr;
};

const Driver& driver() {
  static Driver loaded = [] {
    Driver d;
    void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (library != nullptr) {
      d.launch = reinterpret_cast<LaunchFn>(dlsym(library, "cuLaunchKernel"));
      d.error_name = reinterpret_cast<ErrorNameFn>(dlsym(library, "cuGetErrorName"));
    }
    return d;
  }();
  return loaded;
}

std::vector<int64_t> ints(py::handle values) {
  std::vector<int64_t> out;
  for (auto value : values) out.push_back(value.cast<int64_t>());
  return out;
}

// ---- values --------------------------------------------------------------------------------

enum ArgKind {
  kConstant = 0,
  kRegister = 1,
  kView = 2,
  kTensorList = 3,
  kOptionalTensorList = 4,
  kAddress = 5,  // a register's data_ptr() (a C++ kernel's pointer argument)
};

struct View {
  std::vector<int64_t> size, stride;
  int64_t offset = 0;
  bool relative = false;  // offset counts from the register's own storage offset
};

struct Arg {
  int kind = kConstant;
  c10::IValue constant;
  py::object python;  // the constant as Python has it (for calls back into Python)
  int reg = -1;
  View view;
  std::vector<Arg> items;
};

// A Python constant as the boxed calling convention carries it; `hint` names a list's element
// type where the value alone cannot ("int", "float", "bool"; "" for anything else).
c10::IValue to_ivalue(py::handle value, const std::string& hint) {
  PyObject* object = value.ptr();
  // None for a (non-optional) Tensor argument: Python's binding passes an undefined tensor
  if (value.is_none()) return hint == "tensor" ? c10::IValue(at::Tensor()) : c10::IValue();
  if (PyBool_Check(object)) return c10::IValue(object == Py_True);
  if (PyLong_Check(object)) return c10::IValue(static_cast<int64_t>(value.cast<int64_t>()));
  if (PyFloat_Check(object)) return c10::IValue(value.cast<double>());
  if (PyComplex_Check(object)) {
    return c10::IValue(c10::complex<double>(PyComplex_RealAsDouble(object),
                                            PyComplex_ImagAsDouble(object)));
  }
  if (PyUnicode_Check(object)) return c10::IValue(value.cast<std::string>());
  if (THPDtype_Check(object)) return c10::IValue(reinterpret_cast<THPDtype*>(object)->scalar_type);
  if (THPLayout_Check(object)) return c10::IValue(reinterpret_cast<THPLayout*>(object)->layout);
  if (THPMemoryFormat_Check(object)) {
    return c10::IValue(reinterpret_cast<THPMemoryFormat*>(object)->memory_format);
  }
  if (THPDevice_Check(object)) return c10::IValue(reinterpret_cast<THPDevice*>(object)->device);
  if (PyList_Check(object) || PyTuple_Check(object)) {
    if (hint == "float") {
      c10::List<double> list;
      for (auto item : value) list.push_back(item.cast<double>());
      return c10::IValue(list);
    }
    if (hint == "bool") {
      c10::List<bool> list;
      for (auto item : value) list.push_back(item.cast<bool>());
      return c10::IValue(list);
    }
    c10::List<int64_t> list;
    for (auto item : value) list.push_back(item.cast<int64_t>());
    return c10::IValue(list);
  }
  throw std::invalid_argument("ember native wrapper: cannot pass the constant " +
                              std::string(py::str(value)) + " to an extern op");
}

View parse_view(py::handle spec) {
  py::tuple t = py::reinterpret_borrow<py::tuple>(spec);
  return View{ints(t[0]), ints(t[1]), t[2].cast<int64_t>(), t[3].cast<bool>()};
}

// (kind, payload): (0, (hint, value)), (1, reg), (2, (reg, size, stride, offset, relative)),
// (3 or 4, [arg, ...])
Arg parse_arg(py::handle spec) {
  py::tuple t = py::reinterpret_borrow<py::tuple>(spec);
  Arg arg;
  arg.kind = t[0].cast<int>();
  switch (arg.kind) {
    case kConstant: {
      py::tuple payload = py::reinterpret_borrow<py::tuple>(t[1]);
      arg.python = py::reinterpret_borrow<py::object>(payload[1]);
      arg.constant = to_ivalue(payload[1], payload[0].cast<std::string>());
      break;
    }
    case kRegister:
    case kAddress:
      arg.reg = t[1].cast<int>();
      break;
    case kView: {
      py::tuple payload = py::reinterpret_borrow<py::tuple>(t[1]);
      arg.reg = payload[0].cast<int>();
      arg.view = parse_view(payload[1]);
      break;
    }
    case kTensorList:
    case kOptionalTensorList:
      for (auto item : t[1]) arg.items.push_back(parse_arg(item));
      break;
    default:
      throw std::invalid_argument("ember native wrapper: unknown argument kind");
  }
  return arg;
}

// ---- kernels --------------------------------------------------------------------------------

struct Kernel {
  std::string name;
  void* function = nullptr;  // null: every launch calls `fallback`
  int64_t block = 1;
  unsigned threads = 0;
  unsigned shared = 0;
  int device = 0;
  std::string codes;  // a struct code per parameter: 'P' pointer, else the scalar's
  py::object fallback;  // launch(numel, *args) in Python
  std::vector<uint64_t> buffer;  // one 8-byte slot per parameter, then two scratch pointers
  std::vector<void*> params;
};

void write_scalar(uint64_t* slot, char code, const Arg& arg) {
  *slot = 0;
  const c10::IValue& v = arg.constant;
  switch (code) {
    case 'b': { int8_t x = static_cast<int8_t>(v.toInt()); std::memcpy(slot, &x, 1); break; }
    case 'B': { uint8_t x = static_cast<uint8_t>(v.toInt()); std::memcpy(slot, &x, 1); break; }
    case 'h': { int16_t x = static_cast<int16_t>(v.toInt()); std::memcpy(slot, &x, 2); break; }
    case 'H': { uint16_t x = static_cast<uint16_t>(v.toInt()); std::memcpy(slot, &x, 2); break; }
    case 'i': { int32_t x = static_cast<int32_t>(v.toInt()); std::memcpy(slot, &x, 4); break; }
    case 'I': { uint32_t x = static_cast<uint32_t>(v.toInt()); std::memcpy(slot, &x, 4); break; }
    case 'q': { int64_t x = v.toInt(); std::memcpy(slot, &x, 8); break; }
    case 'Q': { uint64_t x = static_cast<uint64_t>(v.toInt()); std::memcpy(slot, &x, 8); break; }
    case 'f': {
      float x = static_cast<float>(v.isDouble() ? v.toDouble() : static_cast<double>(v.toInt()));
      std::memcpy(slot, &x, 4);
      break;
    }
    case 'd': {
      double x = v.isDouble() ? v.toDouble() : static_cast<double>(v.toInt());
      std::memcpy(slot, &x, 8);
      break;
    }
    default:
      throw std::invalid_argument("ember native wrapper: unknown parameter code");
  }
}

// ---- instructions ----------------------------------------------------------------------------

enum Op {
  kAlloc = 0,     // dst = empty_strided(size, stride, dtype, device)
  kAlias = 1,     // dst = src
  kViewOf = 2,    // dst = as_strided(src, ...)
  kFree = 3,      // regs... dropped
  kLaunch = 4,    // kernel(numel, args...)
  kExtern = 5,    // outputs... = op(args...)
  kDonated = 6,   // dst = src viewed if this call holds src alone, else a fresh allocation
  kReturn = 7,    // the results
};

struct Output {
  int reg = -1;  // -1: not kept
  bool declared = false;
  std::vector<int64_t> size, stride;
};

struct Result {
  Arg value;
  bool detach = false;
  bool restrided = false;
  std::vector<int64_t> size, stride;
};

struct Instruction {
  int op = 0;
  int dst = -1, src = -1;
  View view;
  bool same = false;  // kDonated: the donor itself (no view)
  at::ScalarType dtype = at::kFloat;
  c10::Device device{c10::kCPU};
  std::vector<int> regs;
  int target = -1;
  int64_t numel = 0;
  std::vector<Arg> args;
  std::vector<std::string> keywords;  // kExtern through Python: the last args' names
  std::vector<Output> outputs;
  std::vector<Result> results;
  std::string note;
};

struct Extern {
  std::string name;
  std::optional<c10::OperatorHandle> handle;  // none: call `python`
  py::object python;
};

at::Tensor restride(const at::Tensor& tensor, const std::vector<int64_t>& size,
                    const std::vector<int64_t>& stride) {
  if (!tensor.defined() || tensor.numel() <= 1) return tensor;
  auto actual = tensor.strides();
  if (actual.equals(stride)) return tensor;
  bool ones = size.size() == actual.size();
  for (size_t i = 0; ones && i < size.size(); ++i) {
    if (size[i] != 1 && actual[i] != stride[i]) ones = false;
  }
  if (ones) return at::as_strided(tensor, size, stride, tensor.storage_offset());
  at::Tensor copy = at::empty_strided(size, stride, tensor.options());
  copy.copy_(tensor);
  return copy;
}

class Program {
 public:
  Program(py::list instructions, py::list kernels, py::list externs, int registers,
          py::object fallback, py::list notes, std::string graph)
      : registers_(registers), fallback_(std::move(fallback)), graph_(std::move(graph)) {
    for (auto note : notes) notes_.push_back(note.cast<std::string>());
    for (auto spec : kernels) kernels_.push_back(parse_kernel(spec));
    for (auto spec : externs) externs_.push_back(parse_extern(spec));
    for (auto spec : instructions) program_.push_back(parse_instruction(spec));
    for (const Instruction& in : program_) {
      if (in.op == kDonated) donors_.insert(in.src);
    }
  }

  py::object run(py::list args, int64_t stream) {
    const size_t count = args.size();
    for (size_t i = 0; i < count; ++i) {
      if (!THPVariable_Check(args[i].ptr())) return fallback_(args);  // a non-tensor input
    }
    std::vector<at::Tensor> regs(registers_);
    // A donated input is written over only where the caller's list held it alone, as the
    // Python wrapper's reference-count check requires: judged here, where the list still
    // holds it, and again at its reuse against the count right after the list is emptied (a
    // Python object the list held may stay alive, owned by its tensor)
    std::vector<char> alone(count, 0);
    std::vector<int64_t> baseline(count, 0);
    for (size_t i = 0; i < count; ++i) {
      PyObject* object = PyList_GET_ITEM(args.ptr(), i);  // borrowed
      const at::Tensor& held = THPVariable_Unpack(object);
      if (donors_.count(static_cast<int>(i)) != 0) {
        alone[i] = Py_REFCNT(object) == 1 && held.use_count() == 1 &&
                   held.storage().use_count() == 1;
      }
      regs[i] = held;
    }
    args.attr("clear")();
    for (size_t i = 0; i < count; ++i) {
      if (alone[i]) baseline[i] = regs[i].use_count();
    }
    void* raw_stream = reinterpret_cast<void*>(stream);
    size_t pc = 0;
    try {
      for (; pc < program_.size(); ++pc) {
        const Instruction& in = program_[pc];
        if (!timing_) {
          py::object done = step(in, regs, raw_stream, count, alone, baseline);
          if (done) return done;
          continue;
        }
        auto start = std::chrono::steady_clock::now();
        py::object done = step(in, regs, raw_stream, count, alone, baseline);
        auto spent = std::chrono::steady_clock::now() - start;
        Timing& t = timings_[timing_key(in)];
        t.count += 1;
        t.nanoseconds += std::chrono::duration_cast<std::chrono::nanoseconds>(spent).count();
        if (done) return done;
      }
    } catch (py::error_already_set& error) {
      throw;  // a Python call-back's own exception, as it was raised
    } catch (const c10::OutOfMemoryError& error) {
      raise(torch_error("OutOfMemoryError").ptr(), error.what_without_backtrace(), pc);
    } catch (const c10::LinAlgError& error) {
      raise(torch_error("LinAlgError").ptr(), error.what_without_backtrace(), pc);
    } catch (const c10::IndexError& error) {
      raise(PyExc_IndexError, error.what_without_backtrace(), pc);
    } catch (const c10::ValueError& error) {
      raise(PyExc_ValueError, error.what_without_backtrace(), pc);
    } catch (const c10::TypeError& error) {
      raise(PyExc_TypeError, error.what_without_backtrace(), pc);
    } catch (const c10::NotImplementedError& error) {
      raise(PyExc_NotImplementedError, error.what_without_backtrace(), pc);
    } catch (const c10::Error& error) {
      raise(PyExc_RuntimeError, error.what_without_backtrace(), pc);
    } catch (const std::exception& error) {
      raise(PyExc_RuntimeError, error.what(), pc);
    }
    return py::tuple();
  }

  // Host time by kind of instruction (an extern by its op, a launch by native or Python):
  // {key: (count, seconds)} since timing was switched on.
  void set_timing(bool on) {
    timing_ = on;
    timings_.clear();
  }

  py::dict timings() const {
    py::dict out;
    for (const auto& [key, t] : timings_) {
      out[py::str(key)] = py::make_tuple(t.count, static_cast<double>(t.nanoseconds) * 1e-9);
    }
    return out;
  }

 private:
  struct Timing {
    int64_t count = 0;
    int64_t nanoseconds = 0;
  };

  std::string timing_key(const Instruction& in) const {
    static const char* names[] = {"alloc", "alias", "view", "free", "launch", "extern",
                                  "donated", "return"};
    if (in.op == kExtern) return "extern " + externs_[in.target].name;
    if (in.op == kLaunch) {
      return kernels_[in.target].function != nullptr ? "launch native" : "launch python";
    }
    return names[in.op];
  }

  // torch.OutOfMemoryError, torch.linalg.LinAlgError: torch_python does not export them to C++
  static py::object torch_error(const char* name) {
    py::module_ torch = py::module_::import("torch");
    if (std::string(name) == "LinAlgError") return torch.attr("linalg").attr(name);
    return torch.attr(name);
  }

  // The error a failed instruction raises: the type Python's call would raise (torch's
  // OutOfMemoryError, IndexError, ...), its message, and where: the op and the user's
  // source line it came from, and the switch that runs the same call in Python.
  [[noreturn]] void raise(PyObject* type, const std::string& what, size_t pc) {
    std::string where = pc < notes_.size() ? notes_[pc] : std::string("?");
    std::string message = what + "\n(ember: raised by " + where + " in graph " + graph_ +
                          "'s native wrapper; EMBER_INDUCTOR_NATIVE_WRAPPER=never runs its "
                          "Python wrapper instead)";
    PyErr_SetString(type, message.c_str());
    throw py::error_already_set();
  }

  py::object step(const Instruction& in, std::vector<at::Tensor>& regs, void* raw_stream,
                  size_t count, const std::vector<char>& alone,
                  const std::vector<int64_t>& baseline) {
      switch (in.op) {
        case kAlloc:
          regs[in.dst] = at::empty_strided(in.view.size, in.view.stride,
                                           at::TensorOptions().dtype(in.dtype).device(in.device));
          break;
        case kAlias:
          regs[in.dst] = regs[in.src];
          break;
        case kViewOf:
          regs[in.dst] = view_of(regs[in.src], in.view);
          break;
        case kFree:
          for (int r : in.regs) regs[r].reset();
          break;
        case kLaunch:
          launch(in, regs, raw_stream);
          break;
        case kExtern:
          call(in, regs);
          break;
        case kDonated: {
          const at::Tensor& donor = regs[in.src];
          bool sole = in.src < static_cast<int>(count) && alone[in.src] && donor.defined() &&
                      donor.use_count() == baseline[in.src] &&
                      donor.storage().use_count() == 1;
          if (!sole) {
            regs[in.dst] = at::empty_strided(
                in.view.size, in.view.stride,
                at::TensorOptions().dtype(in.dtype).device(in.device));
          } else if (in.same) {
            regs[in.dst] = donor;
          } else {
            regs[in.dst] = view_of(donor, in.view);
          }
          break;
        }
        case kReturn: {
          py::tuple out(in.results.size());
          for (size_t i = 0; i < in.results.size(); ++i) {
            const Result& r = in.results[i];
            if (r.value.kind == kConstant) {
              out[i] = r.value.python;
              continue;
            }
            at::Tensor t = tensor(r.value, regs);
            if (r.detach) t = t.detach();
            if (r.restrided) t = restride(t, r.size, r.stride);
            out[i] = py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(t)));
          }
          return out;
        }
        default:
          throw std::runtime_error("ember native wrapper: unknown instruction");
      }
      return py::object();
  }

  static at::Tensor view_of(const at::Tensor& base, const View& view) {
    int64_t offset = view.offset + (view.relative ? base.storage_offset() : 0);
    return at::as_strided(base, view.size, view.stride, offset);
  }

  static at::Tensor tensor(const Arg& arg, const std::vector<at::Tensor>& regs) {
    if (arg.kind == kView) return view_of(regs[arg.reg], arg.view);
    return regs[arg.reg];
  }

  c10::IValue value(const Arg& arg, const std::vector<at::Tensor>& regs) {
    switch (arg.kind) {
      case kConstant:
        return arg.constant;
      case kRegister:
      case kView:
        return c10::IValue(tensor(arg, regs));
      case kTensorList: {
        c10::List<at::Tensor> list;
        list.reserve(arg.items.size());
        for (const Arg& item : arg.items) list.push_back(tensor(item, regs));
        return c10::IValue(list);
      }
      default: {
        c10::List<std::optional<at::Tensor>> list;
        list.reserve(arg.items.size());
        for (const Arg& item : arg.items) {
          if (item.kind == kConstant) {
            list.push_back(std::nullopt);
          } else {
            list.push_back(tensor(item, regs));
          }
        }
        return c10::IValue(list);
      }
    }
  }

  py::object python_value(const Arg& arg, const std::vector<at::Tensor>& regs) {
    switch (arg.kind) {
      case kConstant:
        return arg.python;
      case kRegister:
      case kView:
        return py::reinterpret_steal<py::object>(THPVariable_Wrap(tensor(arg, regs)));
      case kAddress:
        return py::int_(reinterpret_cast<uint64_t>(regs[arg.reg].data_ptr()));
      default: {
        py::list list;
        for (const Arg& item : arg.items) list.append(python_value(item, regs));
        return list;
      }
    }
  }

  void launch(const Instruction& in, std::vector<at::Tensor>& regs, void* stream) {
    Kernel& k = kernels_[in.target];
    int64_t grid = (in.numel + k.block - 1) / k.block;
    if (k.function != nullptr && in.numel >= 0) {
      if (grid <= 0) return;
      bool aligned = true;
      for (size_t i = 0; i < in.args.size(); ++i) {
        const Arg& arg = in.args[i];
        if (k.codes[i] == 'P') {
          auto address = reinterpret_cast<uint64_t>(regs[arg.reg].data_ptr());
          aligned = aligned && (address & 15) == 0;
          k.buffer[i] = address;
        } else {
          write_scalar(&k.buffer[i], k.codes[i], arg);
        }
      }
      if (aligned) {
        const Driver& d = driver();
        auto go = [&]() {
          return d.launch(k.function, static_cast<unsigned>(grid), 1, 1, k.threads, 1, 1,
                          k.shared, stream, k.params.data(), nullptr);
        };
        int result = go();
        if (result == kInvalidContext) {  // autograd's device thread: no context current yet
          py::module_::import("ember.runtime.cubin.driver").attr("ensure_context")(k.device);
          result = go();
        }
        if (result != 0) {
          const char* name = nullptr;
          if (d.error_name != nullptr) d.error_name(result, &name);
          throw std::runtime_error("launching " + k.name + " failed: " +
                                   (name != nullptr ? name : std::to_string(result)));
        }
        return;
      }
    }
    // numel < 0: a kernel that takes no numel (C++ kernels get their sizes compiled in)
    size_t first = in.numel < 0 ? 0 : 1;
    py::tuple call(in.args.size() + first);
    if (first) call[0] = py::int_(in.numel);
    for (size_t i = 0; i < in.args.size(); ++i) call[i + first] = python_value(in.args[i], regs);
    k.fallback(*call);
  }

  void call(const Instruction& in, std::vector<at::Tensor>& regs) {
    Extern& e = externs_[in.target];
    std::vector<c10::IValue> flat;
    if (e.handle.has_value()) {
      torch::jit::Stack stack;
      stack.reserve(in.args.size());
      for (const Arg& arg : in.args) stack.push_back(value(arg, regs));
      e.handle->callBoxed(&stack);
      for (c10::IValue& returned : stack) flatten(std::move(returned), flat);
    } else {
      size_t positional = in.args.size() - in.keywords.size();
      py::tuple args(positional);
      py::dict kwargs;
      for (size_t i = 0; i < in.args.size(); ++i) {
        py::object v = python_value(in.args[i], regs);
        if (i < positional) {
          args[i] = v;
        } else {
          kwargs[py::str(in.keywords[i - positional])] = v;
        }
      }
      py::object result = e.python(*args, **kwargs);
      flatten_python(result, flat);
    }
    for (size_t i = 0; i < in.outputs.size() && i < flat.size(); ++i) {
      const Output& o = in.outputs[i];
      if (o.reg < 0) continue;
      if (!flat[i].isTensor()) {
        regs[o.reg].reset();
        continue;
      }
      at::Tensor t = std::move(flat[i]).toTensor();
      regs[o.reg] = o.declared ? restride(t, o.size, o.stride) : std::move(t);
    }
  }

  static void flatten(c10::IValue value, std::vector<c10::IValue>& flat) {
    if (value.isTuple()) {
      for (const auto& item : value.toTupleRef().elements()) flatten(item, flat);
    } else if (value.isTensorList()) {
      for (const at::Tensor& t : value.toTensorVector()) flat.emplace_back(t);
    } else if (value.isList()) {
      for (const auto& item : value.toListRef()) flatten(item, flat);
    } else {
      flat.push_back(std::move(value));
    }
  }

  static void flatten_python(py::handle value, std::vector<c10::IValue>& flat) {
    if (THPVariable_Check(value.ptr())) {
      flat.emplace_back(THPVariable_Unpack(value.ptr()));
    } else if (py::isinstance<py::tuple>(value) || py::isinstance<py::list>(value)) {
      for (auto item : value) flatten_python(item, flat);
    } else {
      flat.emplace_back();
    }
  }

  Kernel parse_kernel(py::handle spec) {
    // (name, function address or 0, block, threads, shared, device, codes, fallback)
    py::tuple t = py::reinterpret_borrow<py::tuple>(spec);
    Kernel k;
    k.name = t[0].cast<std::string>();
    k.function = reinterpret_cast<void*>(t[1].cast<uint64_t>());
    k.block = t[2].cast<int64_t>();
    k.threads = t[3].cast<unsigned>();
    k.shared = t[4].cast<unsigned>();
    k.device = t[5].cast<int>();
    k.codes = t[6].cast<std::string>();
    k.fallback = py::reinterpret_borrow<py::object>(t[7]);
    if (k.function != nullptr && driver().launch == nullptr) k.function = nullptr;
    k.buffer.assign(k.codes.size() + 2, 0);
    for (auto& slot : k.buffer) k.params.push_back(&slot);
    return k;
  }

  Extern parse_extern(py::handle spec) {
    // (name, overload or None for a Python call, callable)
    py::tuple t = py::reinterpret_borrow<py::tuple>(spec);
    Extern e;
    e.name = t[0].cast<std::string>();
    e.python = py::reinterpret_borrow<py::object>(t[2]);
    if (!t[1].is_none()) {
      e.handle = c10::Dispatcher::singleton().findSchemaOrThrow(
          e.name.c_str(), t[1].cast<std::string>().c_str());
    }
    return e;
  }

  Instruction parse_instruction(py::handle spec) {
    py::tuple t = py::reinterpret_borrow<py::tuple>(spec);
    Instruction in;
    in.op = t[0].cast<int>();
    switch (in.op) {
      case kAlloc:  // (op, dst, size, stride, dtype, device)
        in.dst = t[1].cast<int>();
        in.view = View{ints(t[2]), ints(t[3]), 0, false};
        in.dtype = reinterpret_cast<THPDtype*>(t[4].ptr())->scalar_type;
        in.device = reinterpret_cast<THPDevice*>(t[5].ptr())->device;
        break;
      case kAlias:  // (op, dst, src)
        in.dst = t[1].cast<int>();
        in.src = t[2].cast<int>();
        break;
      case kViewOf:  // (op, dst, src, view)
        in.dst = t[1].cast<int>();
        in.src = t[2].cast<int>();
        in.view = parse_view(t[3]);
        break;
      case kFree:  // (op, [regs])
        for (auto r : t[1]) in.regs.push_back(r.cast<int>());
        break;
      case kLaunch:  // (op, kernel, numel, [args])
        in.target = t[1].cast<int>();
        in.numel = t[2].cast<int64_t>();
        for (auto a : t[3]) in.args.push_back(parse_arg(a));
        if (in.args.size() != kernels_[in.target].codes.size()) {
          throw std::invalid_argument("ember native wrapper: " + kernels_[in.target].name +
                                      " takes " +
                                      std::to_string(kernels_[in.target].codes.size()) +
                                      " arguments");
        }
        break;
      case kExtern:  // (op, extern, [args], [keywords], [(reg, size or None, stride)], note)
        in.target = t[1].cast<int>();
        for (auto a : t[2]) in.args.push_back(parse_arg(a));
        for (auto k : t[3]) in.keywords.push_back(k.cast<std::string>());
        for (auto o : t[4]) {
          py::tuple ot = py::reinterpret_borrow<py::tuple>(o);
          Output out;
          out.reg = ot[0].cast<int>();
          out.declared = !ot[1].is_none();
          if (out.declared) {
            out.size = ints(ot[1]);
            out.stride = ints(ot[2]);
          }
          in.outputs.push_back(out);
        }
        in.note = t[5].cast<std::string>();
        break;
      case kDonated:  // (op, dst, donor, view or None, size, stride, dtype, device)
        in.dst = t[1].cast<int>();
        in.src = t[2].cast<int>();
        in.same = t[3].is_none();
        // a fresh allocation takes the layout the donor's view would have
        in.view = in.same ? View{ints(t[4]), ints(t[5]), 0, false} : parse_view(t[3]);
        in.dtype = reinterpret_cast<THPDtype*>(t[6].ptr())->scalar_type;
        in.device = reinterpret_cast<THPDevice*>(t[7].ptr())->device;
        break;
      case kReturn:  // (op, [(arg, detach, size or None, stride)])
        for (auto r : t[1]) {
          py::tuple rt = py::reinterpret_borrow<py::tuple>(r);
          Result result;
          result.value = parse_arg(rt[0]);
          result.detach = rt[1].cast<bool>();
          result.restrided = !rt[2].is_none();
          if (result.restrided) {
            result.size = ints(rt[2]);
            result.stride = ints(rt[3]);
          }
          in.results.push_back(std::move(result));
        }
        break;
      default:
        throw std::invalid_argument("ember native wrapper: unknown instruction");
    }
    return in;
  }

  int registers_;
  py::object fallback_;
  std::vector<Kernel> kernels_;
  std::vector<Extern> externs_;
  std::vector<Instruction> program_;
  std::unordered_set<int> donors_;  // registers (inputs) a kDonated instruction may reuse
  std::vector<std::string> notes_;  // per instruction: what it runs, for error messages
  std::string graph_;
  bool timing_ = false;
  std::unordered_map<std::string, Timing> timings_;
};

}  // namespace

PYBIND11_MODULE(EMBER_MODULE_NAME, m) {
  m.doc() = "ember's native wrapper interpreter";
  m.attr("DRIVER") = py::bool_(driver().launch != nullptr);
  py::class_<Program>(m, "Program")
      .def(py::init<py::list, py::list, py::list, int, py::object, py::list, std::string>())
      .def("run", &Program::run)
      .def("set_timing", &Program::set_timing)
      .def("timings", &Program::timings);
}
