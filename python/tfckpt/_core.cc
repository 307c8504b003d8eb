// tfckpt._core: the C++ side of `import tfckpt` (pybind11). It exposes the slice map of an
// opened checkpoint, reads of whole tensors and of boxes inside them into numpy arrays, the
// object graph, and the command line run in-process. The Python package (__init__.py)
// builds the user-facing API (indexing, get_slice, load, the commands) on these.
//
// Reads release the GIL; a Checkpoint may be read from several threads at once (its data
// files are mapped on first use under a lock, reads are positional). A data file that
// shrank after it was mapped is an error of the read, never a SIGBUS (CheckMapped,
// tfckpt/storage.h). It uses the library's public API only (include/tfckpt/).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/commands.h"
#include "tfckpt/dtype.h"
#include "tfckpt/object_graph.h"
#include "tfckpt/options.h"
#include "tfckpt/open.h"
#include "tfckpt/read.h"
#include "tfckpt/region.h"
#include "tfckpt/status.h"
#include "tfckpt/storage.h"
#include "tfckpt/version.h"

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

// A new C-ordered numpy array of `dt` and `shape` (over `data`, kept by `base`, when given).
// Element size and strides come from numpy's own Python attribute, not from pybind11: before
// 2.12 (Debian 12 has 2.10), pybind11 reads the PyArray_Descr's elsize field in place, and
// numpy 2 moved it, so there its itemsize(), nbytes() and default strides are 0.
py::array NewArray(const py::dtype& dt, const Shape& shape, void* data = nullptr, py::handle base = {}) {
  const auto item = dt.attr("itemsize").cast<py::ssize_t>();
  std::vector<py::ssize_t> strides(shape.size());
  py::ssize_t stride = item;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= static_cast<py::ssize_t>(shape[i]);
  }
  return data == nullptr ? py::array(dt, shape, strides) : py::array(dt, shape, strides, data, base);
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

// The run a Python Checkpoint's reads are made in (a RunContext::Scope around each): the object store
// options given to open(), a store read from the environment when the run first talks to
// one (so each open reads the settings as they are then), and a stop request for Ctrl-C.
// A stopped run is replaced by a new one for the reads after it.
class Session {
 public:
  explicit Session(ObjectStoreOptions options)
      : options_(std::move(options)), hooked_(Hooked()) {
    current_ = Make();
  }
  // The test hook is set (TFCKPT_FAULT_PAUSE_AT): every call then runs on a thread of its
  // own, so that a signal reaches the call wherever the hook pauses it.
  bool hooked() const { return hooked_; }

  struct Current {
    std::shared_ptr<RunContext> run;
    std::shared_ptr<std::stop_source> stop;
  };
  Current Get() {
    std::lock_guard<std::mutex> lock(mu_);
    return current_;
  }
  // After `stopped` was stopped: a fresh run for what comes next (once per stop).
  void Renew(const Current& stopped) {
    std::lock_guard<std::mutex> lock(mu_);
    if (current_.run == stopped.run) current_ = Make();
  }

 private:
  static bool Hooked() {
    RunOptions probe;
    TestHooksFromEnvironment(&probe);
    return probe.at_point != nullptr;
  }
  Current Make() const {
    auto stop = std::make_shared<std::stop_source>();
    RunOptions o;
    o.stop = stop->get_token();
    o.object_store = options_;
    TestHooksFromEnvironment(&o);  // (tests: TFCKPT_FAULT_PAUSE_AT)
    return {std::make_shared<RunContext>(std::move(o)), std::move(stop)};
  }

  const ObjectStoreOptions options_;
  const bool hooked_;
  std::mutex mu_;
  Current current_;
};

// How often a waiting call looks for a pending signal: Ctrl-C is answered within this plus
// the run's unwinding (each stop check of the library is at most a chunk's copy apart).
constexpr std::chrono::milliseconds kSignalPoll{20};

// Reads larger than this (or from an object store) run on a thread of their own while the
// calling thread looks for Ctrl-C; smaller ones take a few milliseconds and run inline.
constexpr uint64_t kInlineReadBytes = 8 << 20;

// Runs `fn` in `session`'s run without the GIL: on this thread, or, with `worker`, on a
// thread of its own while this one looks for a signal every kSignalPoll (PyErr_CheckSignals:
// Python's handlers run on the main thread only). Ctrl-C (a pending KeyboardInterrupt)
// stops the run; `fn` unwinds within a chunk's read, and the KeyboardInterrupt is raised
// (py::error_already_set). A read stopped by another thread's Ctrl-C is made again.
absl::Status Interruptible(Session& session, bool worker, const std::function<absl::Status()>& fn) {
  worker = worker || session.hooked();
  for (int attempt = 0;; ++attempt) {
    const Session::Current cur = session.Get();
    absl::Status status;
    bool interrupted = false;
    if (!worker) {
      py::gil_scoped_release release;
      RunContext::Scope scope(*cur.run);
      status = fn();
    } else {
      std::mutex mu;
      std::condition_variable cv;
      bool done = false;
      std::thread thread([&] {
        absl::Status s;
        {
          RunContext::Scope scope(*cur.run);
          s = fn();
        }
        std::lock_guard<std::mutex> lock(mu);
        status = std::move(s);
        done = true;
        cv.notify_all();
      });
      for (;;) {
        {
          py::gil_scoped_release release;
          std::unique_lock<std::mutex> lock(mu);
          if (cv.wait_for(lock, kSignalPoll, [&] { return done; })) break;
        }
        if (!interrupted && PyErr_CheckSignals() != 0) {
          interrupted = true;
          cur.stop->request_stop();
        }
      }
      {
        py::gil_scoped_release release;
        thread.join();
      }
    }
    if (interrupted) {
      session.Renew(cur);
      throw py::error_already_set();
    }
    if (absl::IsCancelled(status) && cur.stop->stop_requested() && attempt < 3) {
      session.Renew(cur);  // (another thread's Ctrl-C stopped this read too)
      continue;
    }
    return status;
  }
}

class PyCheckpoint {
 public:
  PyCheckpoint(std::shared_ptr<const Checkpoint> c, std::shared_ptr<Session> session)
      : c_(std::move(c)), session_(std::move(session)), remote_(IsUrl(c_->info().prefix)) {}

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

  // (name, dtype name, shape) of every tensor, in name order.
  py::list Listing() const {
    py::list out(c_->tensors().size());
    size_t i = 0;
    for (const TensorEntry& t : c_->tensors()) {
      out[i++] = py::make_tuple(py::bytes(t.name), DTypeName(t.dtype), py::tuple(py::cast(t.shape)));
    }
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
      d["key"] = py::bytes(s.key);  // the table key it is stored under (V2: TF's slice key)
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

  // The box [start, start + shape) of tensor `name` as a numpy array of that shape: an
  // array of its own (writable, aligned), or with `mapped` a copy-on-write mapping of the
  // data file where the stored bytes already are the array (ZeroCopy; writable too).
  py::object Read(const std::string& name, const Shape& start, const Shape& shape, bool raw, bool verify,
                  bool mapped) const {
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
    if (info != nullptr && info->element_size > 0) {
      // Nothing is allocated from the shape before the pieces are known to be present: an
      // index cannot make the interpreter allocate more than its data files hold.
      const absl::Status present = Interruptible(*session_, remote_, [&] { return c_->CheckStored(t, &region); });
      if (!present.ok()) Throw(present);
    }
    if (info != nullptr && info->kind == ValueKind::kString) return ReadStrings(t, region);
    const std::string np_type = NumpyType(t.dtype, raw);
    if (info == nullptr || info->element_size == 0 || np_type.empty()) {
      throw py::type_error("tensor " + PrintableKey(t.name) + " has dtype " + DTypeName(t.dtype) +
                           ", which numpy cannot represent" +
                           (info != nullptr && info->kind == ValueKind::kFloat ? " (raw=True gives its bits)" : ""));
    }
    if (mapped) {
      if (auto zero_copy = ZeroCopy(t, region, np_type, raw, verify)) return *zero_copy;
    }
    const absl::StatusOr<int64_t> elements = NumElements(shape);
    if (!elements.ok()) Throw(elements.status());
    const py::dtype dt(np_type);
    py::array out = NewArray(dt, shape);
    char* dst = static_cast<char*>(out.mutable_data());
    const size_t capacity = static_cast<size_t>(*elements) * dt.attr("itemsize").cast<size_t>();
    const bool widen = static_cast<DType>(t.dtype) == DType::kBFloat16 && !raw;
    const absl::Status s = Interruptible(*session_, remote_ || capacity >= kInlineReadBytes, [&] {
      ReadOptions o;
      o.verify = verify;
      o.bfloat16_as_float32 = widen;
      return ReadTensor(*c_, t, region, dst, capacity, o);
    });
    if (!s.ok()) Throw(s);
    return out;
  }

  py::object ObjectGraph() const {
    absl::StatusOr<std::optional<std::vector<ObjectGraphNode>>> g;
    {
      py::gil_scoped_release release;
      RunContext::Scope scope(*session_->Get().run);
      g = ReadObjectGraph(*c_);
    }
    if (!g.ok()) Throw(g.status());
    if (!g->has_value()) return py::none();
    py::list nodes;
    for (const ObjectGraphNode& n : **g) {
      py::list children, attributes, slots;
      for (const auto& ch : n.children) children.append(py::make_tuple(py::bytes(ch.local_name), ch.node_id));
      for (const auto& a : n.attributes) {
        py::dict d;
        d["name"] = py::bytes(a.name);
        d["full_name"] = py::bytes(a.full_name);
        d["checkpoint_key"] = py::bytes(a.checkpoint_key);
        attributes.append(std::move(d));
      }
      for (const auto& sv : n.slot_variables) {
        py::dict d;
        d["original_variable_node_id"] = sv.original_variable_node_id;
        d["slot_name"] = py::bytes(sv.slot_name);
        d["slot_variable_node_id"] = sv.slot_variable_node_id;
        slots.append(std::move(d));
      }
      py::dict d;
      d["path"] = py::bytes(n.path);
      d["children"] = std::move(children);
      d["attributes"] = std::move(attributes);
      d["slot_variables"] = std::move(slots);
      nodes.append(std::move(d));
    }
    return nodes;
  }

  // (name, new name) of the tensors the command line's --include/--exclude/--rename and
  // --drop-optimizer rules keep, in name order; the object graph is never included.
  py::list Select(const std::vector<std::string>& include, const std::vector<std::string>& exclude,
                  const std::vector<std::string>& renames, bool drop_optimizer) const {
    absl::StatusOr<std::vector<std::pair<std::string, std::string>>> kept;
    {
      py::gil_scoped_release release;
      RunContext::Scope scope(*session_->Get().run);
      kept = SelectTensors(*c_, {include, exclude, renames, drop_optimizer});
    }
    if (!kept.ok()) Throw(kept.status());
    py::list out;
    for (const auto& [name, new_name] : *kept) out.append(py::make_tuple(py::bytes(name), py::bytes(new_name)));
    return out;
  }

 private:
  // An array backed by a private copy-on-write mapping of the data file (MAP_PRIVATE, as
  // numpy.memmap(mode="c") maps) when the stored bytes already are the array: the whole of
  // an unpartitioned tensor numpy holds as stored, aligned for its dtype (V2 little-endian,
  // safetensors; V1 and big-endian payloads are decoded). Writable: a write (numpy's or
  // torch's through from_numpy) copies the page it touches into this process; the file,
  // the checkpoint's own mapping and the other arrays are unchanged. The CRC is checked on
  // the checkpoint's mapping first; a data file that shrank since it was opened is a
  // CorruptInputError here, never a SIGBUS.
  std::optional<py::object> ZeroCopy(const TensorEntry& t, const Region& region, const std::string& np_type, bool raw,
                                     bool verify) const {
    const bool as_stored = static_cast<DType>(t.dtype) != DType::kBFloat16 || raw;
    if (!as_stored || t.slices.size() != 1 || !region.Covers(t.shape) || c_->info().format == Format::kV1 ||
        c_->info().big_endian || remote_) {
      return std::nullopt;
    }
    absl::StatusOr<TensorBytes> bytes;
    absl::StatusOr<std::shared_ptr<char>> view;
    {
      py::gil_scoped_release release;
      RunContext::Scope scope(*session_->Get().run);
      bytes = c_->Read(t, t.slices[0], verify);
      if (bytes.ok() && bytes->owner == nullptr && !bytes->data.empty()) {
        absl::StatusOr<const ReadableFile*> file = c_->DataFile(t.slices[0].data.shard);
        const std::optional<std::string_view> all = file.ok() ? (*file)->mapping() : std::nullopt;
        if (all && bytes->data.data() >= all->data() &&
            bytes->data.data() + bytes->data.size() <= all->data() + all->size()) {
          const auto at = static_cast<uint64_t>(bytes->data.data() - all->data());
          view = MapPrivate(**file, at, bytes->data.size());
          if (!view.ok()) {
            view = Locate(view.status(), "entry.bounds", (*file)->path(), t.name, static_cast<int64_t>(at));
          }
        } else {
          view = std::shared_ptr<char>();
        }
      } else {
        view = std::shared_ptr<char>();
      }
    }
    if (!bytes.ok()) Throw(bytes.status());
    if (!view.ok()) Throw(view.status());
    if (*view == nullptr) return std::nullopt;  // not a view of a local file's mapping
    const py::dtype dt(np_type);
    if (reinterpret_cast<uintptr_t>(view->get()) % static_cast<uintptr_t>(dt.attr("alignment").cast<int>())) {
      return std::nullopt;  // (copied: numpy and torch expect aligned elements)
    }
    // The capsule keeps the mapping as long as the array.
    auto* keep = new std::shared_ptr<char>(std::move(*view));
    py::capsule base(keep, [](void* p) { delete static_cast<std::shared_ptr<char>*>(p); });
    return NewArray(dt, region.shape, keep->get(), base);
  }

  py::object ReadStrings(const TensorEntry& t, const Region& region) const {
    std::vector<TensorBytes> keep;
    absl::StatusOr<std::vector<std::string_view>> elements;
    const absl::Status s = Interruptible(*session_, remote_, [&] {
      elements = tfckpt::ReadStrings(*c_, t, region, &keep);
      return elements.ok() ? absl::OkStatus() : elements.status();
    });
    if (!s.ok()) Throw(s);
    py::array out = NewArray(py::dtype("O"), region.shape);
    auto** items = static_cast<PyObject**>(out.mutable_data());
    for (size_t i = 0; i < elements->size(); ++i) {
      const std::string_view e = (*elements)[i];
      PyObject* b = PyBytes_FromStringAndSize(e.data(), static_cast<Py_ssize_t>(e.size()));
      if (b == nullptr) throw py::error_already_set();
      Py_XDECREF(items[i]);
      items[i] = b;
    }
    return out;
  }

  std::shared_ptr<const Checkpoint> c_;
  std::shared_ptr<Session> session_;
  bool remote_;
};

// The object store options of a request or an open: endpoint_url, profile, region (bytes)
// and no_sign_request (bool), each optional.
ObjectStoreOptions StoreOptions(const py::dict& d) {
  ObjectStoreOptions o;
  if (d.contains("endpoint_url")) o.endpoint_url = d["endpoint_url"].cast<std::string>();
  if (d.contains("profile")) o.profile = d["profile"].cast<std::string>();
  if (d.contains("region")) o.region = d["region"].cast<std::string>();
  if (d.contains("no_sign_request")) o.no_sign_request = d["no_sign_request"].cast<bool>();
  return o;
}

PyCheckpoint Open(const std::string& spec, const py::dict& store) {
  auto session = std::make_shared<Session>(StoreOptions(store));
  absl::StatusOr<std::unique_ptr<Checkpoint>> c;
  const absl::Status s = Interruptible(*session, IsUrl(spec), [&] {
    c = OpenCheckpoint(spec);
    return c.ok() ? absl::OkStatus() : c.status();
  });
  if (!s.ok()) Throw(s);
  return PyCheckpoint(std::shared_ptr<const Checkpoint>(std::move(*c)), std::move(session));
}

// For tfckpt.train.latest_checkpoint: the text of a small file (None when it cannot be
// read), and the paths matching a pattern, through the path's storage.
py::object ReadSmallFile(const std::string& path, const py::dict& store) {
  Session session(StoreOptions(store));
  absl::StatusOr<std::string> text;
  const absl::Status s = Interruptible(session, IsUrl(path), [&] {
    text = Location::Of(path).store().ReadSmallFile(path, kMaxStateFileBytes);
    return absl::OkStatus();
  });
  if (!s.ok()) Throw(s);
  if (!text.ok()) return py::none();
  return py::bytes(*text);
}

bool IsDirectoryPath(const std::string& path, const py::dict& store) {
  Session session(StoreOptions(store));
  bool out = false;
  const absl::Status s = Interruptible(session, IsUrl(path), [&] {
    out = Location::Of(path).IsDirectory();
    return absl::OkStatus();
  });
  if (!s.ok()) Throw(s);
  return out;
}

py::list GlobPaths(const std::string& pattern, const py::dict& store) {
  Session session(StoreOptions(store));
  std::vector<std::string> found;
  const absl::Status s = Interruptible(session, IsUrl(pattern), [&] {
    found = Location::Of(pattern).store().Glob(pattern);
    return absl::OkStatus();
  });
  if (!s.ok()) Throw(s);
  std::sort(found.begin(), found.end());
  py::list out;
  for (const std::string& f : found) out.append(py::bytes(f));
  return out;
}

// ---------------------------------------------------------------------------------------
// The commands (commands.h), called directly: the request from the keyword arguments
// __init__.py checked, the call on a thread of its own with the GIL released, and Ctrl-C
// (a pending KeyboardInterrupt) turned into the call's stop request.

// The values of command `command`'s options from the dict __init__.py built (keywords of the
// option table: bytes for text, lists of bytes, bools, ints, floats; True for an optional
// choice given bare), as text, for FillRequest: the library checks them as it checks the
// command line's, and its errors begin with the keyword as Python names an argument
// ("jobs -1: not a whole number ...").
OptionValues Values(const std::string& command, const py::dict& d) {
  OptionValues values;
  for (const OptionSpec* o : OptionsOf(command)) {
    const std::string keyword(o->keyword);
    if (keyword.empty() || !d.contains(keyword.c_str())) continue;
    const py::object v = d[keyword.c_str()];
    auto add = [&](const py::handle& x) {
      std::string text;
      if (py::isinstance<py::bool_>(x)) {
        text = x.cast<bool>() ? (o->kind == OptionKind::kOptionalChoice ? "" : "true") : "false";
      } else if (py::isinstance<py::int_>(x)) {
        text = py::str(x).cast<std::string>();
      } else if (py::isinstance<py::float_>(x)) {
        text = absl::StrFormat("%.17g", x.cast<double>());
      } else {
        text = x.cast<std::string>();
      }
      values.Add(*o, std::move(text), keyword + " ");
    };
    if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
      for (const py::handle& x : v) add(x);
    } else {
      add(v);
    }
  }
  return values;
}

// The call, made with `run`: the JSON document of its report, or its error. A report that
// says a check failed (validate's findings, merge's differing replicas) is an error of its
// own (check id and location of the first), with the document.
struct CallResult {
  absl::Status status;
  std::string document;
};
// A call with its request read from the keyword arguments (with the GIL held), to be run
// later without it.
using Job = std::function<CallResult(const RunOptions& run)>;

template <typename Report>
CallResult Document(const absl::StatusOr<Report>& r) {
  if (!r.ok()) return {r.status(), ""};
  return {absl::OkStatus(), ToJson(*r)};
}

Job InspectJob(const py::dict& d, RunOptions* run) {
  InspectRequest r;
  if (absl::Status s = FillRequest(Values("inspect", d), &r, run); !s.ok()) {
    return [s](const RunOptions&) { return CallResult{s, ""}; };
  }
  r.json_values = true;
  return [r](const RunOptions& run) -> CallResult {
    absl::StatusOr<InspectReport> report = Inspect(r, run);
    if (!report.ok()) return {report.status(), ""};
    std::string doc;
    WriteJson(*report, [&](std::string_view piece) { doc.append(piece); });
    return {report->problem, doc};
  };
}

Job ValidateJob(const py::dict& d, RunOptions* run) {
  ValidateRequest r;
  if (absl::Status s = FillRequest(Values("validate", d), &r, run); !s.ok()) {
    return [s](const RunOptions&) { return CallResult{s, ""}; };
  }
  return [r](const RunOptions& run) {
    absl::StatusOr<ValidateCommandReport> report = ValidateCommand(r, run);
    CallResult out = Document(report);
    if (report.ok() && !report->ok()) {
      const Finding& first = *std::find_if(report->findings.begin(), report->findings.end(),
                                           [](const Finding& x) { return x.severity == Severity::kError; });
      out.status = DataLossAt(first.check, first.file, first.key, first.offset,
                              StrCat(report->errors, " check(s) failed, the first: ", first.message));
    }
    return out;
  };
}

Job ReshardJob(const py::dict& d, RunOptions* run) {
  ReshardRequest r;
  if (absl::Status s = FillRequest(Values("reshard", d), &r, run); !s.ok()) {
    return [s](const RunOptions&) { return CallResult{s, ""}; };
  }
  return [r](const RunOptions& run) { return Document(Reshard(r, run)); };
}

Job MergeJob(const py::dict& d, RunOptions* run) {
  MergeRequest r;
  if (absl::Status s = FillRequest(Values("merge", d), &r, run); !s.ok()) {
    return [s](const RunOptions&) { return CallResult{s, ""}; };
  }
  return [r](const RunOptions& run) {
    absl::StatusOr<MergeCommandReport> report = Merge(r, run);
    CallResult out = Document(report);
    if (report.ok() && !report->mismatches.empty()) {
      const Finding& first = report->mismatches[0];
      out.status = DataLossAt(first.check, first.file, first.key, first.offset,
                              StrCat(report->mismatches.size(), " check(s) failed, the first: ", first.message,
                                     "; nothing written"));
    }
    return out;
  };
}

Job ConvertJob(const py::dict& d, RunOptions* run) {
  ConvertRequest r;
  if (absl::Status s = FillRequest(Values("convert", d), &r, run); !s.ok()) {
    return [s](const RunOptions&) { return CallResult{s, ""}; };
  }
  return [r](const RunOptions& run) { return Document(Convert(r, run)); };
}

// Runs command `name` with the request `d` on a thread of its own, the GIL released; the
// calling thread waits, and every kSignalPoll looks for a signal (PyErr_CheckSignals: Python's
// handlers run on the main thread only). A KeyboardInterrupt (Ctrl-C) stops the call, which
// unwinds, leaving nothing behind, and is then raised. Returns (document, error fields,
// late): the document of the report (or of the failure), for a failure (code, check id,
// message, file, key, offset), and whether a Ctrl-C came after the call's point of no
// return (it finished: the caller raises KeyboardInterrupt once it has said so).
py::tuple RunCommand(const std::string& name, const py::dict& d) {
  static const std::map<std::string, Job (*)(const py::dict&, RunOptions*)> kJobs = {
      {"inspect", InspectJob}, {"validate", ValidateJob}, {"reshard", ReshardJob},
      {"merge", MergeJob},     {"convert", ConvertJob}};
  const auto make = kJobs.find(name);
  if (make == kJobs.end()) throw py::value_error("no command " + name);
  std::stop_source stop;
  RunOptions run;
  const Job job = make->second(d, &run);  // (jobs, connections, the object store options)
  run.stop = stop.get_token();
  TestHooksFromEnvironment(&run);  // (tests: TFCKPT_FAULT_PAUSE_AT, TFCKPT_FAULT_FLIP_OUTPUT_BYTE)
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  CallResult result;
  std::thread worker([&] {
    CallResult r = job(run);
    std::lock_guard<std::mutex> lock(mu);
    result = std::move(r);
    done = true;
    cv.notify_all();
  });
  bool interrupted = false;
  for (;;) {
    {
      py::gil_scoped_release release;
      std::unique_lock<std::mutex> lock(mu);
      if (cv.wait_for(lock, kSignalPoll, [&] { return done; })) break;
    }
    if (!interrupted && PyErr_CheckSignals() != 0) {
      interrupted = true;  // (KeyboardInterrupt is pending: the call unwinds, then it is raised)
      stop.request_stop();
    }
  }
  {
    py::gil_scoped_release release;
    worker.join();
  }
  if (interrupted) {
    if (!result.status.ok()) throw py::error_already_set();  // the KeyboardInterrupt, after the unwinding
    // Past its point of no return the call finished (its output is complete): the caller
    // says so, then raises KeyboardInterrupt all the same.
    PyErr_Clear();
    return py::make_tuple(py::bytes(result.document), py::none(), true);
  }
  if (result.status.ok()) return py::make_tuple(py::bytes(result.document), py::none(), false);
  const ErrorInfo info = ErrorInfoOf(result.status);
  return py::make_tuple(py::bytes(result.document.empty() ? ErrorDocument(result.status) : result.document),
                        py::make_tuple(static_cast<int>(result.status.code()), ErrorId(result.status),
                                       py::bytes(std::string(result.status.message())), py::bytes(info.file),
                                       py::bytes(info.key), info.offset),
                        false);
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "C++ core of the tfckpt package (use `import tfckpt`).";
  m.attr("__version__") = TFCKPT_VERSION;
  py::class_<PyCheckpoint>(m, "Checkpoint")
      .def("names", &PyCheckpoint::Names, "Every tensor's name (bytes), in name order.")
      .def("listing", &PyCheckpoint::Listing, "(name, dtype, shape) of every tensor, in name order.")
      .def("__len__", [](const PyCheckpoint& p) { return p.c().tensors().size(); })
      .def("__contains__", [](const PyCheckpoint& p, const std::string& name) { return p.c().Find(name) != nullptr; })
      .def("describe", py::overload_cast<const std::string&>(&PyCheckpoint::Describe, py::const_), py::arg("name"),
           "One tensor as a dict: name (bytes), dtype, shape, bytes, partitioned, slices, defect.")
      .def("read", &PyCheckpoint::Read, py::arg("name"), py::arg("start"), py::arg("shape"), py::arg("raw") = false,
           py::arg("verify") = true, py::arg("mapped") = false,
           "The box [start, start + shape) of a tensor as a numpy array.")
      .def("object_graph", &PyCheckpoint::ObjectGraph, "The TF2 object graph's nodes, or None.")
      .def("select", &PyCheckpoint::Select, py::arg("include"), py::arg("exclude"), py::arg("renames"),
           py::arg("drop_optimizer"), "(name, new name) of the tensors the command line's rules keep.");
  m.def("open", &Open, py::arg("spec"), py::arg("store"),
        "Opens a checkpoint (any CKPT the command line takes) with object store options STORE.");
  m.def("command", &RunCommand, py::arg("name"), py::arg("request"),
        "Runs command NAME (commands.h) with REQUEST, the GIL released, Ctrl-C stopping it: (its JSON document, "
        "None or the error's (code, id, message, file, key, offset), whether Ctrl-C came too late to stop it).");
  m.def("read_small_file", &ReadSmallFile, py::arg("path"), py::arg("store"),
        "The bytes of a small file (a state file), or None when it cannot be read.");
  m.def("is_directory", &IsDirectoryPath, py::arg("path"), py::arg("store"), "Whether PATH is a directory.");
  m.def("glob", &GlobPaths, py::arg("pattern"), py::arg("store"), "The paths matching PATTERN, sorted (bytes).");
  m.def(
      "dtype_name",
      [](const std::string& name) -> py::object {
        const std::optional<DType> d = ParseDType(name);
        if (!d.has_value()) return py::none();
        return py::str(DTypeName(static_cast<int32_t>(*d)));
      },
      py::arg("name"), "The dtype name tfckpt uses for NAME (float32 for float, ...), or None.");
}

}  // namespace tfckpt::python
