"""The C tensor guard: one C++ function that checks a tuple of tensors against expectations.

A tensor guard in Python reads six attributes through torch's getters (0.45-0.9 us a
tensor); the same checks in C++ take tens of nanoseconds. The extension is built once per
machine with `torch.utils.cpp_extension.load_inline`, in a background thread so that no
call waits for the compiler, and kept on disk under a name hashed from its source, torch's
and Python's versions. Where no compiler is found, or the build fails, the Python check
stays in use (the `guards` log says why).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import sys
import sysconfig
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, TypeAlias

import torch

from ember.capture import logs
from ember.capture.config import CaptureConfig
from ember.prims.config import load

# The tensor types whose getters torch answers in C++ without calling Python (outside a
# torch-function mode): a guard expecting one of them can be checked in C with the same result.
NATIVE_TYPES = (torch.Tensor, torch.nn.Parameter)

# What to do with an object waiting for the module, once it is built.
Upgrade: TypeAlias = Callable[[Any, ModuleType], None]

SOURCE = r"""
#include <ATen/PythonTorchFunctionTLS.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include <memory>
#include <stdexcept>
#include <vector>

namespace {

const char* const kCapsule = "ember.capture.tensor_guards";

// What one tensor guard expects: the facts of the tensor seen while capturing.
struct Expected {
  PyObject* type;  // torch.Tensor or torch.nn.Parameter (a reference is held)
  at::ScalarType dtype;
  at::Device device;
  std::vector<int64_t> sizes;  // a dim the Graph keeps symbolic holds -1
  std::vector<int64_t> strides;  // empty where sizes are symbolic: checked by contiguity
  bool dynamic;
  bool requires_grad;
};

// The Python guard's expression, in its order: type(t) is T and t.dtype is dtype and
// t.device == device and (t.shape == sizes and t.stride() == strides, or with symbolic dims
// t.dim() == n and t.shape[d] == sizes[d] for the static dims and t.is_contiguous()) and
// t.requires_grad is requires_grad.
bool holds(const Expected& expected, PyObject* value) {
  if (reinterpret_cast<PyObject*>(Py_TYPE(value)) != expected.type) {
    return false;
  }
  const at::Tensor& tensor = THPVariable_Unpack(value);
  if (tensor.scalar_type() != expected.dtype || tensor.device() != expected.device) {
    return false;
  }
  if (!expected.dynamic) {
    if (tensor.sizes() != at::IntArrayRef(expected.sizes) ||
        tensor.strides() != at::IntArrayRef(expected.strides)) {
      return false;
    }
  } else {
    if (tensor.dim() != static_cast<int64_t>(expected.sizes.size())) {
      return false;
    }
    at::IntArrayRef sizes = tensor.sizes();
    for (size_t dim = 0; dim < expected.sizes.size(); ++dim) {
      if (expected.sizes[dim] >= 0 && sizes[dim] != expected.sizes[dim]) {
        return false;
      }
    }
    if (!tensor.is_contiguous()) {
      return false;
    }
  }
  return tensor.requires_grad() == expected.requires_grad;
}

void destroy(PyObject* capsule) {
  auto* guards = static_cast<std::vector<Expected>*>(PyCapsule_GetPointer(capsule, kCapsule));
  for (Expected& expected : *guards) {
    Py_DECREF(expected.type);
  }
  delete guards;
}

// check(tensors): True when every guard holds, False when one fails (or a tensor's metadata
// cannot be read: a miss, as the Python check's exception is), None when a torch-function
// mode is active: torch's getters then call into Python, so the Python check decides.
PyObject* check(PyObject* capsule, PyObject* values) {
  auto* guards = static_cast<std::vector<Expected>*>(PyCapsule_GetPointer(capsule, kCapsule));
  if (guards == nullptr) {
    return nullptr;
  }
  if (!PyTuple_CheckExact(values) ||
      PyTuple_GET_SIZE(values) != static_cast<Py_ssize_t>(guards->size())) {
    PyErr_SetString(PyExc_TypeError, "tensor guards: expected a tuple of one value a guard");
    return nullptr;
  }
  if (at::impl::torch_function_mode_enabled()) {
    Py_RETURN_NONE;
  }
  try {
    for (size_t index = 0; index < guards->size(); ++index) {
      if (!holds((*guards)[index], PyTuple_GET_ITEM(values, index))) {
        Py_RETURN_FALSE;
      }
    }
  } catch (const std::exception&) {
    Py_RETURN_FALSE;
  }
  Py_RETURN_TRUE;
}

PyMethodDef kCheck = {"check", check, METH_O, "True when every tensor guard holds."};

// tensor_guards([(type, dtype, device, sizes, strides or None, requires_grad), ...]):
// the check of those guards, a function of one tuple of values (one a guard).
py::object tensor_guards(const py::list& specs) {
  auto guards = std::make_unique<std::vector<Expected>>();
  for (const py::handle& item : specs) {
    auto spec = item.cast<py::tuple>();
    if (spec.size() != 6 || !PyType_Check(spec[0].ptr()) || !THPDtype_Check(spec[1].ptr()) ||
        !THPDevice_Check(spec[2].ptr())) {
      throw std::invalid_argument("tensor guard spec: (type, dtype, device, sizes, strides, "
                                  "requires_grad)");
    }
    Expected expected{
        spec[0].ptr(),
        reinterpret_cast<THPDtype*>(spec[1].ptr())->scalar_type,
        reinterpret_cast<THPDevice*>(spec[2].ptr())->device,
        spec[3].cast<std::vector<int64_t>>(),
        {},
        spec[4].is_none(),
        spec[5].cast<bool>()};
    if (!expected.dynamic) {
      expected.strides = spec[4].cast<std::vector<int64_t>>();
    }
    Py_INCREF(expected.type);
    guards->push_back(std::move(expected));
  }
  PyObject* capsule = PyCapsule_New(guards.get(), kCapsule, destroy);
  if (capsule == nullptr) {
    for (Expected& expected : *guards) {
      Py_DECREF(expected.type);
    }
    throw py::error_already_set();
  }
  guards.release();
  PyObject* function = PyCFunction_New(&kCheck, capsule);
  Py_DECREF(capsule);
  if (function == nullptr) {
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(function);
}

const char* const kWalkCapsule = "ember.capture.module_walk";

// One step of a module walk: read `getattr(slots[parent], table)[key]` into the next slot
// (table null: no read, the step checks slots[parent]), then check the value's identity
// (expected non-null) and its `training` flag (training 0 or 1; -1: not checked).
struct Step {
  Py_ssize_t parent;
  PyObject* table;  // the references are held
  PyObject* key;
  PyObject* expected;
  int training;
  // The parent's type when last seen, its version tag then, and whether `table` (and
  // `training`) are then plain instance-dict entries of such an object (plain_attributes).
  PyTypeObject* seen_type;
  unsigned int seen_tag;
  bool plain;
};

struct Walk {
  Py_ssize_t roots;
  Py_ssize_t reads;
  std::vector<Step> steps;
};

PyObject* training_name = nullptr;
PyObject* getattribute_name = nullptr;

// Whether reading `name` from an object of type `type` is the generic lookup that finds it
// in the instance dict when it is there: the type's __getattribute__ is object's (a Python
// __getattr__ runs only when the lookup fails), and no class of its MRO holds `name` or
// `training` (no descriptor or class attribute comes first). nn.Module and its subclasses,
// for `_modules`, `_parameters`, `_buffers` and `training`.
bool plain_attributes(PyTypeObject* type, PyObject* name) {
  static PyObject* object_getattribute = nullptr;
  if (object_getattribute == nullptr) {
    object_getattribute = _PyType_Lookup(&PyBaseObject_Type, getattribute_name);
  }
  return object_getattribute != nullptr &&
         _PyType_Lookup(type, getattribute_name) == object_getattribute &&
         _PyType_Lookup(type, name) == nullptr && _PyType_Lookup(type, training_name) == nullptr;
}

// getattr(value, name) (a new reference; null with an exception set). Where `step` saw the
// value's type unchanged (the same type object and the same valid version tag: a change to
// the type or a base resets the tag) with plain attributes, the instance dict answers first;
// a name it lacks takes the full lookup.
PyObject* read_attribute(Step& step, PyObject* value, PyObject* name) {
  PyTypeObject* type = Py_TYPE(value);
  if (type != step.seen_type || type->tp_version_tag != step.seen_tag ||
      !(type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG)) {
    step.plain = plain_attributes(type, name);  // _PyType_Lookup gives the type a valid tag
    bool valid = (type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) != 0;
    step.seen_type = valid ? type : nullptr;
    step.seen_tag = type->tp_version_tag;
  }
  if (step.plain && step.seen_type == type) {
    PyObject** dict = _PyObject_GetDictPtr(value);
    if (dict != nullptr && *dict != nullptr && PyDict_CheckExact(*dict)) {
      PyObject* found = PyDict_GetItemWithError(*dict, name);
      if (found != nullptr) {
        Py_INCREF(found);
        return found;
      }
      if (PyErr_Occurred()) {
        return nullptr;
      }
    }
  }
  return PyObject_GetAttr(value, name);
}

void destroy_walk(PyObject* capsule) {
  auto* walk = static_cast<Walk*>(PyCapsule_GetPointer(capsule, kWalkCapsule));
  for (Step& step : walk->steps) {
    Py_XDECREF(step.table);
    Py_XDECREF(step.key);
    Py_XDECREF(step.expected);
  }
  delete walk;
}

// A read that raised: an Exception is a miss (as in the Python check, which catches
// Exception); anything else (KeyboardInterrupt) propagates.
bool miss_on_error() {
  if (!PyErr_ExceptionMatches(PyExc_Exception)) {
    return false;
  }
  PyErr_Clear();
  return true;
}

// walk(roots): the tuple of values the reads found, in step order, when every check holds;
// None on a miss.
PyObject* run_walk(PyObject* capsule, PyObject* roots) {
  auto* walk = static_cast<Walk*>(PyCapsule_GetPointer(capsule, kWalkCapsule));
  if (walk == nullptr) {
    return nullptr;
  }
  if (!PyTuple_CheckExact(roots) || PyTuple_GET_SIZE(roots) != walk->roots) {
    PyErr_SetString(PyExc_TypeError, "module walk: expected a tuple of its root values");
    return nullptr;
  }
  PyObject* found = PyTuple_New(walk->reads);
  if (found == nullptr) {
    return nullptr;
  }
  std::vector<PyObject*> slots(walk->roots + walk->reads, nullptr);  // borrowed
  for (Py_ssize_t index = 0; index < walk->roots; ++index) {
    slots[index] = PyTuple_GET_ITEM(roots, index);
  }
  Py_ssize_t next = 0;
  for (Step& step : walk->steps) {
    PyObject* value = slots[step.parent];
    if (step.table != nullptr) {
      PyObject* table = read_attribute(step, value, step.table);
      value = nullptr;
      if (table != nullptr) {
        value = PyDict_CheckExact(table) ? PyDict_GetItemWithError(table, step.key) : nullptr;
        if (value != nullptr) {
          Py_INCREF(value);
        } else if (!PyErr_Occurred()) {
          value = PyObject_GetItem(table, step.key);  // a missing key raises KeyError here
        }
      }
      Py_XDECREF(table);
      if (value == nullptr) {
        Py_DECREF(found);
        if (miss_on_error()) {
          Py_RETURN_NONE;
        }
        return nullptr;
      }
      PyTuple_SET_ITEM(found, next, value);  // the tuple owns it
      slots[walk->roots + next] = value;
      ++next;
    }
    if (step.expected != nullptr && value != step.expected) {
      Py_DECREF(found);
      Py_RETURN_NONE;
    }
    if (step.training >= 0) {
      PyObject* flag = read_attribute(step, value, training_name);
      if (flag == nullptr) {
        Py_DECREF(found);
        if (miss_on_error()) {
          Py_RETURN_NONE;
        }
        return nullptr;
      }
      bool holds = flag == (step.training ? Py_True : Py_False);
      Py_DECREF(flag);
      if (!holds) {
        Py_DECREF(found);
        Py_RETURN_NONE;
      }
    }
  }
  return found;
}

PyMethodDef kWalk = {"walk", run_walk, METH_O, "The values a module walk reads, or None."};

// module_walk(roots, [(parent, table or None, key or None, expected or None, training), ...])
py::object module_walk(Py_ssize_t roots, const py::list& specs) {
  auto walk = std::make_unique<Walk>();
  walk->roots = roots;
  walk->reads = 0;
  for (const py::handle& item : specs) {
    auto spec = item.cast<py::tuple>();
    if (spec.size() != 5) {
      throw std::invalid_argument("module walk step: (parent, table, key, expected, training)");
    }
    Step step{spec[0].cast<Py_ssize_t>(), nullptr, nullptr, nullptr, spec[4].cast<int>(),
              nullptr, 0, false};
    if (step.parent < 0 || step.parent >= roots + walk->reads) {
      throw std::invalid_argument("module walk step: its parent is not an earlier slot");
    }
    if (!spec[1].is_none()) {
      step.table = spec[1].ptr();
      step.key = spec[2].ptr();
      Py_INCREF(step.table);
      Py_INCREF(step.key);
      walk->reads += 1;
    }
    if (!spec[3].is_none()) {
      step.expected = spec[3].ptr();
      Py_INCREF(step.expected);
    }
    walk->steps.push_back(step);
  }
  if (training_name == nullptr) {
    training_name = PyUnicode_InternFromString("training");
    getattribute_name = PyUnicode_InternFromString("__getattribute__");
    if (training_name == nullptr || getattribute_name == nullptr) {
      throw py::error_already_set();
    }
  }
  PyObject* capsule = PyCapsule_New(walk.get(), kWalkCapsule, destroy_walk);
  if (capsule == nullptr) {
    throw py::error_already_set();  // the steps' references leak: only on out-of-memory
  }
  walk.release();
  PyObject* function = PyCFunction_New(&kWalk, capsule);
  Py_DECREF(capsule);
  if (function == nullptr) {
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(function);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.def("tensor_guards", &tensor_guards, "The C check of a list of tensor guards.");
  module.def("module_walk", &module_walk, "The C walk of module tables with its checks.");
}
"""


def extension_name() -> str:
    """The module's name: its source, torch's build and the Python ABI, hashed (a change of
    any of them builds a new module beside the old ones)."""
    key = "\n".join(
        [
            SOURCE,
            torch.__version__,
            str(torch.version.git_version),
            sys.version,
            sysconfig.get_config_var("EXT_SUFFIX") or "",
        ]
    )
    return f"ember_tensor_guards_{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def default_directory() -> Path:
    """`EMBER_NATIVE_GUARDS_DIR`, else `~/.cache/ember/native-guards`."""
    configured = load(CaptureConfig).native_guards_dir
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "ember" / "native-guards"


class NativeGuards:
    """The C tensor-guard module of this process: loaded from disk, built in the background,
    or unavailable (with the reason). `module()` never waits for a build.

    `build(name, library)` builds the module and leaves its library at `library`
    (default `build_library`: torch.utils.cpp_extension.load_inline)."""

    def __init__(
        self,
        directory: Path | None = None,
        enabled: bool | None = None,
        build: Callable[[str, Path], ModuleType] | None = None,
    ) -> None:
        self._directory = directory
        self._enabled = enabled
        self._build = build or build_library
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._module: ModuleType | None = None
        self._started = False
        self._waiting: list[tuple[weakref.ref[Any], Upgrade]] = []
        self.reason: str | None = None  # why there is no module, once that is known

    @property
    def directory(self) -> Path:
        return self._directory if self._directory is not None else default_directory()

    def module(self) -> ModuleType | None:
        """The loaded module; on the first call, load it from disk or start building it."""
        if self._done.is_set():
            return self._module
        with self._lock:
            start, self._started = not self._started, True
        if start:
            self._start()
        return self._module

    def when_ready(self, owner: Any, upgrade: Upgrade) -> None:
        """`upgrade(owner, module)` now if the module is loaded (the first call loads it from
        disk if it is there), else once it is built, from the building thread, unless `owner`
        is collected by then. `upgrade` must not hold `owner` (a plain function)."""
        self.module()
        with self._lock:
            module = self._module
            if module is None and self.reason is None:
                self._waiting.append((weakref.ref(owner), upgrade))
                return
        if module is not None:
            upgrade_quietly(owner, upgrade, module)

    def wait(self, timeout: float | None = None) -> ModuleType | None:
        """Block until the module is built or known to be unavailable (tests, benchmarks)."""
        self.module()
        self._done.wait(timeout)
        return self._module

    def _start(self) -> None:
        enabled = self._enabled if self._enabled is not None else load(CaptureConfig).native_guards
        if not enabled:
            self._finish(None, "switched off (EMBER_NATIVE_GUARDS=0)")
            return
        name = extension_name()
        library = self.directory / f"{name}{_suffix()}"
        if library.exists():
            try:
                module = _import(name, library)
            except Exception as error:  # noqa: BLE001 - a damaged file: build it again
                logs.guards.debug("C tensor guards: %s did not load (%s)", library, error)
            else:
                logs.guards.info("C tensor guards loaded from %s", library)
                self._finish(module, None)
                return
        threading.Thread(
            target=self._build_in_background,
            args=(name, library),
            name="ember-native-guards",
            daemon=True,
        ).start()

    def _build_in_background(self, name: str, library: Path) -> None:
        started = time.perf_counter()
        try:
            module = self._build(name, library)
        except Unavailable as error:
            self._finish(None, str(error))
            return
        except Exception as error:  # noqa: BLE001 - any failure leaves the Python check
            self._finish(None, f"the build failed ({type(error).__name__}: {error})")
            return
        seconds = time.perf_counter() - started
        logs.guards.info("C tensor guards built in %.1f s: %s", seconds, library)
        self._finish(module, None)

    def _finish(self, module: ModuleType | None, reason: str | None) -> None:
        if module is None:
            logs.guards.info("C tensor guards unavailable: %s; the Python check is used", reason)
        with self._lock:  # from here on, when_ready upgrades by itself
            self._module = module
            self.reason = reason
            waiting, self._waiting = self._waiting, []
        if module is not None:
            for ref, upgrade in waiting:
                owner = ref()
                if owner is not None:
                    upgrade_quietly(owner, upgrade, module)
        self._done.set()  # after the upgrades: wait() returns with every check upgraded


def upgrade_quietly(owner: Any, upgrade: Upgrade, module: ModuleType) -> None:
    """`upgrade(owner, module)`; should it fail, the Python check stays and the log says why."""
    try:
        upgrade(owner, module)
    except Exception as error:  # noqa: BLE001 - the Python check is always right
        logs.guards.info(
            "C tensor guards not used for one check: %s: %s", type(error).__name__, error
        )


class Unavailable(Exception):
    """The C tensor guards cannot be built here (no compiler, no ninja); says why."""


def build_library(name: str, library: Path) -> ModuleType:
    """Build the module with load_inline in a scratch directory of this process, then move its
    library to `library` in one rename, so that a process killed mid-build leaves no
    half-written library under the final name. One process of the machine builds at a time
    (a lock file holding its pid): the others wait for its library instead of compiling the
    same source beside it."""
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        raise Unavailable(f"no C++ compiler ({compiler!r} is not on PATH; CXX names another)")
    from torch.utils.cpp_extension import is_ninja_available, load_inline

    if not is_ninja_available():
        raise Unavailable("torch.utils.cpp_extension needs ninja, which is not installed")
    library.parent.mkdir(parents=True, exist_ok=True)
    lock = library.parent / f"{name}.lock"
    while not _take(lock):
        if library.exists():  # built by the process that held the lock
            return _import(name, library)
        time.sleep(0.5)
    scratch = library.parent / f"{name}.build-{os.getpid()}"
    try:
        if library.exists():
            return _import(name, library)
        for stale in library.parent.glob(f"{name}.build-*"):  # left by killed processes
            shutil.rmtree(stale, ignore_errors=True)
        scratch.mkdir()
        module = load_inline(
            name,
            cpp_sources=SOURCE,
            extra_cflags=["-O2"],
            build_directory=str(scratch),
            verbose=False,
        )
        shutil.copyfile(str(module.__file__), scratch / "library.partial")
        os.replace(scratch / "library.partial", library)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        lock.unlink(missing_ok=True)
    return module


def _take(lock: Path) -> bool:
    """Create `lock` holding this process's pid; False while a living process holds it (one
    that died holding it loses it)."""
    try:
        descriptor = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        try:
            holder = int(lock.read_text() or "0")
            if holder > 0:  # 0: its holder is writing its pid
                os.kill(holder, 0)
        except (ValueError, ProcessLookupError, FileNotFoundError):
            lock.unlink(missing_ok=True)  # its holder is gone: take it over on the next try
        except PermissionError:  # a living process of another user
            pass
        return False
    with os.fdopen(descriptor, "w") as file:
        file.write(str(os.getpid()))
    return True


def _suffix() -> str:
    return importlib.machinery.EXTENSION_SUFFIXES[0]


def _import(name: str, library: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, library)
    if spec is None or spec.loader is None:
        raise ImportError(f"no loader for {library}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


NATIVE = NativeGuards()
