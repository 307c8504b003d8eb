// tfckpt._core: the C++ side of `import tfckpt` (pybind11). It exposes the slice map of an
// opened checkpoint, reads of whole tensors and of boxes inside them into numpy arrays, the
// object graph, and the command line run in-process. The Python package (__init__.py)
// builds the user-facing API (indexing, get_slice, load, the commands) on these.
//
// Reads release the GIL; a Checkpoint may be read from several threads at once (its data
// files are mapped on first use under a lock, reads are positional).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <signal.h>

#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "app.h"
#include "common.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/commands.h"
#include "tfckpt/copy.h"
#include "tfckpt/dtype.h"
#include "tfckpt/name_rules.h"
#include "tfckpt/object_graph.h"
#include "tfckpt/open.h"
#include "tfckpt/status.h"

namespace py = pybind11;

namespace tfckpt::python {
namespace {

// Raises the tfckpt.Error the command line's --json error document describes (the same
// id, message, file, key and offset; text as bytes: names and paths need not be UTF-8).
[[noreturn]] void Throw(const absl::Status& s) {
  const ErrorInfo info = ErrorInfoOf(s);
  py::object error_type = py::module_::import("tfckpt").attr("_error_for_status");
  py::object e = error_type(static_cast<int>(s.code()), ErrorId(s), py::bytes(std::string(s.message())),
                            py::bytes(info.file), py::bytes(info.key), info.offset);
  PyErr_SetObject(e.get_type().ptr(), e.ptr());
  throw py::error_already_set();
}

template <typename T>
T Check(absl::StatusOr<T> v) {
  if (!v.ok()) Throw(v.status());
  return std::move(*v);
}

// numpy's type string for the elements of `dtype` as returned to Python ("" when numpy has
// no such type). bfloat16 reads as float32 unless `raw` (then its uint16 bit pattern).
std::string NumpyType(int32_t dtype, bool raw) {
  switch (static_cast<DType>(dtype)) {
    case DType::kFloat: return "<f4";
    case DType::kDouble: return "<f8";
    case DType::kHalf: return "<f2";
    case DType::kBFloat16: return raw ? "<u2" : "<f4";
    case DType::kInt8: case DType::kQInt8: return "i1";
    case DType::kUInt8: case DType::kQUInt8: return "u1";
    case DType::kInt16: case DType::kQInt16: return "<i2";
    case DType::kUInt16: case DType::kQUInt16: return "<u2";
    case DType::kInt32: case DType::kQInt32: return "<i4";
    case DType::kUInt32: return "<u4";
    case DType::kInt64: return "<i8";
    case DType::kUInt64: return "<u8";
    case DType::kBool: return "?";
    case DType::kComplex64: return "<c8";
    case DType::kComplex128: return "<c16";
    case DType::kFloat8E5M2: case DType::kFloat8E4M3FN: case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E4M3B11FNUZ: case DType::kFloat8E5M2FNUZ:
      return raw ? "u1" : "";
    default: return "";
  }
}

// Appends copied bytes to a preallocated array buffer.
class BufferSink : public PieceSink {
 public:
  BufferSink(char* out, size_t capacity) : out_(out), capacity_(capacity) {}
  absl::Status Append(std::string_view bytes) override {
    if (bytes.size() > capacity_ - used_) return absl::InternalError("bug: region larger than its array");
    std::memcpy(out_ + used_, bytes.data(), bytes.size());
    used_ += bytes.size();
    return absl::OkStatus();
  }
  size_t used() const { return used_; }

 private:
  char* out_;
  size_t capacity_;
  size_t used_ = 0;
};

class PyCheckpoint {
 public:
  explicit PyCheckpoint(std::shared_ptr<const Checkpoint> c) : c_(std::move(c)) {}

  const Checkpoint& c() const { return *c_; }

  const TensorEntry& Entry(const std::string& name) const {
    const TensorEntry* t = c_->Find(name);
    if (t == nullptr) throw py::key_error(name);
    return *t;
  }

  // Every tensor's name, in name order (bytes: names need not be UTF-8).
  py::list Names() const {
    py::list out(c_->tensors().size());
    size_t i = 0;
    for (const TensorEntry& t : c_->tensors()) out[i++] = py::bytes(t.name);
    return out;
  }

  py::dict Describe(const std::string& name) const { return Describe(Entry(name)); }

  py::dict Describe(const TensorEntry& t) const {
    py::list slices;
    for (const StoredSlice& s : t.slices) {
      py::dict d;
      d["spec"] = SliceString(s.region, t.shape);
      d["start"] = s.region.start;
      d["shape"] = s.region.shape;
      if (s.data.v1_file < 0) {
        d["data_file"] = s.data.shard >= 0 && s.data.shard < static_cast<int32_t>(c_->info().data_files.size())
                             ? py::object(py::bytes(c_->info().data_files[s.data.shard]))
                             : py::none();
      } else {
        d["data_file"] = py::bytes(c_->info().v1_files[s.data.v1_file]);
      }
      slices.append(std::move(d));
    }
    py::dict d;
    d["name"] = py::bytes(t.name);
    d["dtype"] = DTypeName(t.dtype);
    d["shape"] = t.shape;
    d["bytes"] = t.bytes;
    d["partitioned"] = t.partitioned;
    d["slices"] = std::move(slices);
    d["defect"] = py::bytes(t.defect);
    return d;
  }

  // The box [start, start + shape) of tensor `name` as a numpy array of that shape.
  py::object Read(const std::string& name, const Shape& start, const Shape& shape, bool raw, bool verify) const {
    const TensorEntry& t = Entry(name);
    if (!t.defect.empty()) {
      Throw(DataLossAt(t.defect_check.empty() ? "entry" : t.defect_check, c_->info().index_path, t.name, -1,
                       t.defect));
    }
    Region region{start, shape};
    if (start.size() != t.shape.size() || shape.size() != t.shape.size() || !region.InsideOf(t.shape)) {
      throw py::index_error("region outside tensor " + PrintableKey(t.name) + " of shape " + ShapeString(t.shape));
    }
    const DTypeInfo* info = LookupDType(t.dtype);
    if (info != nullptr && info->kind == ValueKind::kString) return ReadStrings(t, region);
    const std::string np_type = NumpyType(t.dtype, raw);
    if (info == nullptr || info->element_size == 0 || np_type.empty()) {
      throw py::type_error("tensor " + PrintableKey(t.name) + " has dtype " + DTypeName(t.dtype) +
                           ", which numpy cannot represent" +
                           (info != nullptr && info->kind == ValueKind::kFloat ? " (raw=True gives its bits)" : ""));
    }
    if (auto zero_copy = ZeroCopy(t, region, np_type, raw, verify)) return *zero_copy;
    py::array out{py::dtype(np_type), shape};
    char* dst = static_cast<char*>(out.mutable_data());
    const size_t capacity = static_cast<size_t>(out.nbytes());
    absl::Status s;
    {
      py::gil_scoped_release release;
      BufferSink sink(dst, capacity);
      std::string buffer;
      const bool widen = static_cast<DType>(t.dtype) == DType::kBFloat16 && !raw;
      if (widen) {
        CastSink cast(t.dtype, static_cast<int32_t>(DType::kFloat), sink);
        s = CopyRegion(*c_, t, region, cast, &buffer, nullptr, verify);
      } else {
        s = CopyRegion(*c_, t, region, sink, &buffer, nullptr, verify);
      }
      if (s.ok() && sink.used() != capacity) s = absl::InternalError("bug: region copy left the array short");
    }
    if (!s.ok()) Throw(s);
    return std::move(out);
  }

  py::object ObjectGraph() const {
    auto g = Check(LoadObjectGraph(*c_));
    if (!g.has_value()) return py::none();
    const std::vector<std::string> paths = ObjectPaths(*g);
    py::list nodes;
    for (int i = 0; i < g->nodes_size(); ++i) {
      const auto& n = g->nodes(i);
      py::list children, attributes, slots;
      for (const auto& ch : n.children()) children.append(py::make_tuple(py::bytes(ch.local_name()), ch.node_id()));
      for (const auto& a : n.attributes()) {
        py::dict d;
        d["name"] = py::bytes(a.name());
        d["full_name"] = py::bytes(a.full_name());
        d["checkpoint_key"] = py::bytes(a.checkpoint_key());
        attributes.append(std::move(d));
      }
      for (const auto& s : n.slot_variables()) {
        py::dict d;
        d["original_variable_node_id"] = s.original_variable_node_id();
        d["slot_name"] = py::bytes(s.slot_name());
        d["slot_variable_node_id"] = s.slot_variable_node_id();
        slots.append(std::move(d));
      }
      py::dict d;
      d["path"] = py::bytes(paths[i]);
      d["children"] = std::move(children);
      d["attributes"] = std::move(attributes);
      d["slot_variables"] = std::move(slots);
      nodes.append(std::move(d));
    }
    return std::move(nodes);
  }

  // (name, new name) of the tensors the command line's --include/--exclude/--rename and
  // --drop-optimizer rules keep, in name order; the object graph is never included.
  py::list Select(const std::vector<std::string>& include, const std::vector<std::string>& exclude,
                  const std::vector<std::string>& renames, bool drop_optimizer) const {
    std::vector<RenameRule> rules;
    for (const std::string& r : renames) rules.push_back(Check(ParseRenameRule(r)));
    const NameRules names = Check(NameRules::Create(include, exclude, rules));
    std::vector<std::string> optimizer_paths;
    if (drop_optimizer) {
      if (auto g = Check(LoadObjectGraph(*c_)); g.has_value()) optimizer_paths = OptimizerPaths(*g);
    }
    py::list out;
    for (const TensorEntry& t : c_->tensors()) {
      if (t.name == kObjectGraphKey || !names.Selected(t.name)) continue;
      if (drop_optimizer && IsOptimizerState(t.name, optimizer_paths)) continue;
      out.append(py::make_tuple(py::bytes(t.name), py::bytes(names.Rename(t.name))));
    }
    return out;
  }


 private:
  // An array backed by the data file's mapping when the stored bytes already are the
  // array: the whole of an unpartitioned tensor numpy holds as stored, read as a view of
  // the mapping (V2 little-endian, safetensors; V1 and big-endian payloads are decoded).
  std::optional<py::object> ZeroCopy(const TensorEntry& t, const Region& region, const std::string& np_type, bool raw,
                                     bool verify) const {
    const bool as_stored = static_cast<DType>(t.dtype) != DType::kBFloat16 || raw;
    if (!as_stored || t.slices.size() != 1 || !region.Covers(t.shape) || c_->info().format == Format::kV1 ||
        c_->info().big_endian) {
      return std::nullopt;
    }
    absl::StatusOr<TensorBytes> bytes;
    {
      py::gil_scoped_release release;
      bytes = c_->Read(t, t.slices[0], verify);
    }
    if (!bytes.ok()) Throw(bytes.status());
    if (bytes->owner != nullptr) return std::nullopt;  // not a view of the mapping
    // The capsule keeps the checkpoint (and so the mapping) alive as long as the array.
    auto* keep = new std::shared_ptr<const Checkpoint>(c_);
    py::capsule base(keep, [](void* p) { delete static_cast<std::shared_ptr<const Checkpoint>*>(p); });
    py::array out{py::dtype(np_type), region.shape, {}, bytes->data.data(), base};
    py::detail::array_proxy(out.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
    return std::move(out);
  }

  py::object ReadStrings(const TensorEntry& t, const Region& region) const {
    std::vector<TensorBytes> keep;
    absl::StatusOr<std::vector<std::string_view>> elements;
    {
      py::gil_scoped_release release;
      elements = GatherStrings(*c_, t, region, &keep);
    }
    if (!elements.ok()) Throw(elements.status());
    py::array out{py::dtype("O"), region.shape};
    auto** items = static_cast<PyObject**>(out.mutable_data());
    for (size_t i = 0; i < elements->size(); ++i) {
      const std::string_view e = (*elements)[i];
      PyObject* b = PyBytes_FromStringAndSize(e.data(), static_cast<Py_ssize_t>(e.size()));
      if (b == nullptr) throw py::error_already_set();
      Py_XDECREF(items[i]);
      items[i] = b;
    }
    return std::move(out);
  }

  std::shared_ptr<const Checkpoint> c_;
};

// Runs the command line in-process with stdout and stderr captured: (exit code, stdout,
// stderr). Serialized: the command line's streams are process-wide.
// What a command run in-process changes for the process, put back when it ends however
// it ends: the standard streams (captured), the interrupt handlers (Python's), and the
// checkpoints the command line keeps until exit (this process goes on).
class InProcessRun {
 public:
  InProcessRun(std::ostream& out, std::ostream& err)
      : old_out_(std::cout.rdbuf(out.rdbuf())), old_err_(std::cerr.rdbuf(err.rdbuf())) {
    for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], nullptr, &saved_[i]);
  }
  ~InProcessRun() {
    std::cout.rdbuf(old_out_);
    std::cerr.rdbuf(old_err_);
    for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &saved_[i], nullptr);
  }
  InProcessRun(const InProcessRun&) = delete;
  InProcessRun& operator=(const InProcessRun&) = delete;

 private:
  static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};
  std::streambuf* old_out_;
  std::streambuf* old_err_;
  struct sigaction saved_[3];
};

// Runs the command line in-process with stdout and stderr captured: (exit code, stdout,
// stderr), the text as bytes. Serialized: the command line's streams are process-wide.
py::tuple RunCommand(const std::vector<std::string>& args) {
  static std::mutex mu;
  std::ostringstream out, err;
  int code = 3;
  std::string failure;
  {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mu);
    std::vector<std::string> argv_store = {"tfckpt"};
    argv_store.insert(argv_store.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_store) argv.push_back(a.data());
    argv.push_back(nullptr);
    InProcessRun run(out, err);
    try {
      code = cli::RunTfckpt(static_cast<int>(argv_store.size()), argv.data());
    } catch (const std::exception& e) {  // a bug: reported, never a crash of the interpreter
      failure = e.what();
    }
  }
  if (!failure.empty()) throw std::runtime_error("tfckpt: internal error: " + failure);
  return py::make_tuple(code, py::bytes(out.str()), py::bytes(err.str()));
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "C++ core of the tfckpt package (use `import tfckpt`).";
  py::class_<PyCheckpoint>(m, "Checkpoint")
      .def("names", &PyCheckpoint::Names, "Every tensor's name (bytes), in name order.")
      .def("__len__", [](const PyCheckpoint& p) { return p.c().tensors().size(); })
      .def("__contains__", [](const PyCheckpoint& p, const std::string& name) { return p.c().Find(name) != nullptr; })
      .def("describe", py::overload_cast<const std::string&>(&PyCheckpoint::Describe, py::const_), py::arg("name"),
           "One tensor as a dict: name (bytes), dtype, shape, bytes, partitioned, slices, defect.")
      .def("read", &PyCheckpoint::Read, py::arg("name"), py::arg("start"), py::arg("shape"), py::arg("raw") = false,
           py::arg("verify") = true, "The box [start, start + shape) of a tensor as a numpy array.")
      .def("object_graph", &PyCheckpoint::ObjectGraph, "The TF2 object graph's nodes, or None.")
      .def("select", &PyCheckpoint::Select, py::arg("include"), py::arg("exclude"), py::arg("renames"),
           py::arg("drop_optimizer"), "(name, new name) of the tensors the command line's rules keep.");
  m.def(
      "open",
      [](const std::string& spec) {
        absl::StatusOr<std::unique_ptr<Checkpoint>> c;
        {
          py::gil_scoped_release release;
          c = OpenCheckpoint(spec);
        }
        if (!c.ok()) Throw(c.status());
        return PyCheckpoint(std::shared_ptr<const Checkpoint>(std::move(*c)));
      },
      py::arg("spec"), "Opens a checkpoint (any CKPT the command line takes).");
  m.def("run", &RunCommand, py::arg("args"), "Runs `tfckpt ARGS...` in-process: (exit code, stdout, stderr).");
}

}  // namespace tfckpt::python
