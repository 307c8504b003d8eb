// Scale-out resharding: the plan document, one task, finalize (see the header).
#include "reshard/scale_out.h"


#include <cstdlib>
#include <set>

#include <nlohmann/json.hpp>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/crc32c.h"
#include "format/bundle/bundle_merge.h"
#include "format/bundle/bundle_writer.h"
#include "publish/publication.h"
#include "copy/copy.h"
#include "tfckpt/dtype.h"
#include "tfckpt/open.h"
#include "base/path.h"
#include "reshard/sharding.h"
#include "tfckpt/status.h"
#include "tfckpt/strings.h"
#include "verify/verify.h"

namespace tfckpt {

namespace {

using json = nlohmann::ordered_json;

constexpr const char* kPlanFormat = "tfckpt-reshard-plan";
constexpr int kPlanVersion = 2;  // 2: "slice" is the stored slice string ("-" = a full extent)

// (The paths here are read from a plan, or are a checkpoint's: each resolved where it is used.)
std::string Absolute(const std::string& path) { return Location::Of(path).store().Absolute(path); }

constexpr uint64_t kMaxPlanBytes = uint64_t{1} << 30;

json RegionJson(const Region& r) { return json{{"start", r.start}, {"shape", r.shape}}; }

absl::StatusOr<Region> RegionFromJson(const json& j) {
  Region r;
  r.start = j.at("start").get<std::vector<int64_t>>();
  r.shape = j.at("shape").get<std::vector<int64_t>>();
  if (r.start.size() != r.shape.size()) return absl::InvalidArgumentError("plan: region rank mismatch");
  return r;
}

// Size and modification time of a file, as recorded in the plan.
absl::StatusOr<json> FileIdentity(const std::string& path) {
  TFCKPT_ASSIGN_OR_RETURN(const FileStat st, Location::Of(path).Stat());
  return json{{"path", Absolute(path)}, {"size", st.size}, {"mtime_ns", st.mtime_ns}};
}

absl::StatusOr<uint32_t> FileCrc(const std::string& path) {
  TFCKPT_ASSIGN_OR_RETURN(auto f, Location::Of(path).OpenForRead());
  std::string read;
  TFCKPT_ASSIGN_OR_RETURN(const std::string_view all, f->Range(0, f->size(), &read));
  return crc32c::Value(all.data(), all.size());
}

absl::StatusOr<json> SourceIdentity(const Checkpoint& c) {
  const CheckpointInfo& info = c.info();
  TFCKPT_ASSIGN_OR_RETURN(json index, FileIdentity(info.index_path));
  TFCKPT_ASSIGN_OR_RETURN(uint32_t crc, FileCrc(info.index_path));
  index["crc32c"] = crc;
  json data = json::array();
  for (const auto& f : info.data_files) {
    TFCKPT_ASSIGN_OR_RETURN(json id, FileIdentity(f));
    data.push_back(std::move(id));
  }
  return json{{"prefix", Absolute(info.prefix)}, {"format", "v2"}, {"index", std::move(index)},
              {"data_files", std::move(data)}};
}

// Error naming the first file of the recorded source that is not as it was.
absl::Status CheckSourceUnchanged(const json& recorded) {
  auto same = [](const json& then) -> absl::Status {
    const std::string path = then.at("path").get<std::string>();
    auto now = FileIdentity(path);
    if (!now.ok()) return absl::InvalidArgumentError(StrCat(path, ": source file gone since planning (re-plan)"));
    if ((*now)["size"] != then.at("size") || (*now)["mtime_ns"] != then.at("mtime_ns")) {
      return absl::InvalidArgumentError(StrCat(path, ": source changed since planning (size ", then.at("size").dump(),
                                               " -> ", (*now)["size"].dump(), ", mtime changed: ",
                                               (*now)["mtime_ns"] != then.at("mtime_ns") ? "yes" : "no",
                                               "); re-plan"));
    }
    return absl::OkStatus();
  };
  const json& index = recorded.at("index");
  TFCKPT_RETURN_IF_ERROR(same(index));
  TFCKPT_ASSIGN_OR_RETURN(uint32_t crc, FileCrc(index.at("path").get<std::string>()));
  if (crc != index.at("crc32c").get<uint32_t>()) {
    return absl::InvalidArgumentError(
        StrCat(index.at("path").get<std::string>(), ": source index changed since planning (crc32c); re-plan"));
  }
  for (const json& f : recorded.at("data_files")) TFCKPT_RETURN_IF_ERROR(same(f));
  return absl::OkStatus();
}

std::string PartPrefix(const std::string& temp_dir, int task, int num_tasks) {
  return absl::StrFormat("%s/part-%05d-of-%05d", temp_dir, task, num_tasks);
}

absl::StatusOr<json> LoadPlan(const std::string& plan_path) {
  TFCKPT_ASSIGN_OR_RETURN(const std::string text, Location::Of(plan_path).store().ReadSmallFile(plan_path, kMaxPlanBytes));
  json plan = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (plan.is_discarded() || !plan.is_object() || plan.value("format", "") != kPlanFormat) {
    return absl::InvalidArgumentError(StrCat(plan_path, ": not a tfckpt reshard plan"));
  }
  if (plan.value("version", 0) != kPlanVersion) {
    return absl::InvalidArgumentError(StrCat(plan_path, ": plan version ", plan.value("version", 0),
                                             " (this tfckpt reads version ", kPlanVersion, ")"));
  }
  return plan;
}

// Runs `fn` on a parsed plan, turning JSON type errors into one clear error.
template <typename Fn>
auto WithPlan(const std::string& plan_path, Fn&& fn) -> decltype(fn(std::declval<const json&>())) {
  TFCKPT_ASSIGN_OR_RETURN(json plan, LoadPlan(plan_path));
  try {
    return fn(plan);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(StrCat(plan_path, ": malformed plan (", e.what(), ")"));
  }
}

// The plan's entries, every task's, checked as TF's validate_shards checks a callback's
// shards (sharding_util.py): each tensor of the source exactly once, with its dtype and
// shape, from its task (the "task" each entry records), nothing added. A task's file may
// hold several input files' pieces (by-task:1, shards:N): that rule is not applied.
absl::Status CheckPlanEntries(const std::string& plan_path, const json& plan, const Checkpoint& c) {
  std::vector<ShardableTensor> tensors;
  for (const TensorEntry& t : c.tensors()) {
    for (const StoredSlice& s : t.slices) {
      ShardableTensor st;
      st.checkpoint_key = t.name;
      st.region = s.region;
      st.extents = s.extents;
      st.slice_spec = t.partitioned ? StrCat(absl::StrJoin(t.shape, " "), " ", ExtentsString(s.extents)) : "";
      st.shape = s.region.shape;
      st.full_shape = t.shape;
      st.dtype = t.dtype;
      st.task = s.data.shard;
      tensors.push_back(std::move(st));
    }
  }
  const std::string description = StrCat("reshard plan ", plan_path);
  std::vector<Shard> shards;
  for (const json& task : plan.at("tasks")) {
    Shard& shard = shards.emplace_back();
    for (const json& e : task.at("entries")) {
      ShardEntry entry;
      entry.checkpoint_key = e.value("source", e.at("name").get<std::string>());
      entry.slice_spec = e.at("slice").is_null() ? "" : e.at("slice").get<std::string>();
      entry.shape = e.at("shape").get<Shape>();
      const std::string dtype = e.at("dtype").get<std::string>();
      const std::optional<DType> d = ParseDType(dtype);
      if (!d) return absl::InvalidArgumentError(StrCat(plan_path, ": entry \"", entry.checkpoint_key, "\": dtype \"", dtype, "\" is unknown"));
      entry.dtype = static_cast<int32_t>(*d);
      if (e.contains("task") && !e.at("task").is_null()) entry.device = StrCat("/job:worker/task:", e.at("task").get<int64_t>());
      if (const TensorEntry* t = c.Find(entry.checkpoint_key); t != nullptr && e.at("full_shape").get<Shape>() != t->shape) {
        entry.shape = e.at("full_shape").get<Shape>();  // reported as the altered shape of the whole tensor
        entry.slice_spec = "";
      }
      shard.push_back(std::move(entry));
    }
  }
  return ValidateShards(tensors, shards, description, {.one_task_per_shard = false}).status();
}

// Checks that the part at `prefix` holds exactly the planned entries of `task`.
absl::Status CheckPart(const std::string& prefix, const json& task, bool data_in_place) {
  // With the data in place (an object store), the part's one data file is the task's
  // data_file, read under the part's name.
  const std::string data_file = task.at("data_file").get<std::string>(), part_data = DataFileName(prefix, 0, 1);
  const FileOpener in_place = [&](const std::string& path) -> absl::StatusOr<std::unique_ptr<ReadableFile>> {
    if (path != part_data) return Location::Of(path).OpenForRead();
    TFCKPT_ASSIGN_OR_RETURN(auto f, Location::Of(data_file).OpenForRead());
    return Renamed(std::move(f), path);
  };
  TFCKPT_ASSIGN_OR_RETURN(auto part, OpenResolved({.format = Format::kV2, .prefix = prefix}, nullptr,
                                                  data_in_place ? &in_place : nullptr));
  int64_t pieces = 0;
  for (const auto& t : part->tensors()) pieces += static_cast<int64_t>(t.slices.size());
  const json& entries = task.at("entries");
  if (pieces != static_cast<int64_t>(entries.size())) {
    return absl::DataLossError(StrCat(prefix, ": holds ", Count(pieces, "piece"), ", the plan says ", entries.size()));
  }
  for (const json& e : entries) {
    const std::string name = e.at("name").get<std::string>();
    const TensorEntry* t = part->Find(name);
    TFCKPT_ASSIGN_OR_RETURN(Region r, RegionFromJson(e.at("region")));
    const StoredSlice* s = t == nullptr ? nullptr : StoredSliceOf(*t, r);
    if (s == nullptr) return absl::DataLossError(StrCat(prefix, ": planned entry \"", name, "\" is missing"));
    if ((!e.at("offset").is_null() && e.at("offset").get<uint64_t>() != s->data.offset) ||
        (!e.at("size").is_null() && e.at("size").get<uint64_t>() != s->data.size)) {
      return absl::DataLossError(StrCat(prefix, ": entry \"", name, "\" is not where the plan puts it"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> MakeTaskPlan(const Checkpoint& c, const WritePlan& plan, const TaskPlanOptions& o) {
  if (c.info().format != Format::kV2) {
    return absl::InvalidArgumentError(
        StrCat(c.info().prefix, ": scale-out plans read V2 checkpoints (tfckpt convert can make one)"));
  }
  const std::string out = Absolute(o.out);
  const std::string temp_dir = out + "_temp";
  TFCKPT_ASSIGN_OR_RETURN(json source, SourceIdentity(c));
  const int n = plan.num_files;
  json tasks = json::array();
  for (int f = 0; f < n; ++f) {
    json entries = json::array();
    std::optional<uint64_t> offset = 0;  // known while every earlier piece has a fixed size
    uint64_t bytes = 0;
    for (size_t k = 0; k < plan.tensors.size(); ++k) {  // (in the order ExecutePlan lays them out)
      const TensorPlan& tp = plan.tensors[plan.order.empty() ? k : plan.order[k]];
      const TensorEntry& t = *tp.source;
      const DTypeInfo* info = LookupDType(t.dtype);
      const int64_t esize = info ? info->element_size : 0;
      for (const PlannedPiece& p : tp.pieces) {
        if (p.file != f) continue;
        const bool whole = p.region.Covers(t.shape);
        std::optional<uint64_t> size;
        if (esize > 0) size = static_cast<uint64_t>(p.region.num_elements() * esize);
        json copies = json::array();
        std::set<int32_t> tasks;
        for (const StoredSlice& s : t.slices) {
          auto inter = Intersect(p.region, s.region);
          if (!inter) continue;
          tasks.insert(s.data.shard);
          json copy{{"src_file", Absolute(c.info().data_files.at(s.data.shard))},
                    {"src_offset", s.data.offset},
                    {"src_size", s.data.size},
                    {"src_region", RegionJson(s.region)},
                    {"region", RegionJson(*inter)},
                    {"range", nullptr}};
          if (esize > 0) {
            const RunPlan rp = PlanRuns(*inter, {&s.region});
            const auto span = RunSpan(rp, *inter, 0);
            if (span.second - span.first == inter->num_elements()) {
              copy["range"] = {s.data.offset + static_cast<uint64_t>(span.first * esize),
                               s.data.offset + static_cast<uint64_t>(span.second * esize)};
            }
          }
          copies.push_back(std::move(copy));
        }
        json entry{{"name", tp.out_name()},
                               {"slice", whole ? json(nullptr) : json(StoredSpec(t, p))},
                               {"dtype", DTypeName(t.dtype)},
                               {"shape", p.region.shape},
                               {"full_shape", t.shape},
                               // The input data file its bytes come from (null: several),
                               // checked by --execute as validate_shards checks a task.
                               {"task", tasks.size() == 1 ? json(*tasks.begin()) : json(nullptr)},
                               {"region", RegionJson(p.region)},
                               {"offset", offset ? json(*offset) : json(nullptr)},
                               {"size", size ? json(*size) : json(nullptr)},
                               {"copies", std::move(copies)}};
        // A renamed TF1 slot: the source tensor it is read from.
        if (tp.out_name() != t.name) entry["source"] = t.name;
        entries.push_back(std::move(entry));
        offset = offset && size ? std::optional<uint64_t>(*offset + *size) : std::nullopt;
        bytes += p.bytes;
      }
    }
    tasks.push_back(json{{"task", f},
                         {"part", PartPrefix(temp_dir, f, n)},
                         {"data_file", DataFileName(out, f, n)},
                         {"bytes", bytes},
                         {"entries", std::move(entries)}});
  }
  json doc{{"format", kPlanFormat},
           {"version", kPlanVersion},
           {"num_tasks", n},
           {"source", std::move(source)},
           {"output", json{{"prefix", out},
                           {"temp_dir", temp_dir},
                           {"num_files", n},
                           {"overwrite", o.overwrite},
                           {"verify", o.verify},
                           {"server_side", ServerSideName(o.server_side)}}},
           {"options", json{{"partition", o.partitions},
                            {"policy", o.policy},
                            {"bytes_per_string", o.bytes_per_string}}},
           {"tasks", std::move(tasks)}};
  return doc.dump(1, ' ', false, json::error_handler_t::replace) + "\n";
}

absl::StatusOr<TaskReport> ExecuteTask(const std::string& plan_path, int task, std::atomic<uint64_t>* progress) {
  return WithPlan(plan_path, [&](const json& plan) -> absl::StatusOr<TaskReport> {
    const int n = plan.at("num_tasks").get<int>();
    if (task < 0 || task >= n) {
      return absl::InvalidArgumentError(StrCat(plan_path, ": task ", task, " out of range (0..", n - 1, ")"));
    }
    TFCKPT_RETURN_IF_ERROR(CheckSourceUnchanged(plan.at("source")));
    TFCKPT_ASSIGN_OR_RETURN(auto c, OpenResolved({.format = Format::kV2, .prefix = plan.at("source").at("prefix").get<std::string>()}));
    TFCKPT_RETURN_IF_ERROR(CheckPlanEntries(plan_path, plan, *c));
    const json& t = plan.at("tasks").at(task);
    TaskReport r;
    r.task = task;
    r.num_tasks = n;
    r.part = t.at("part").get<std::string>();
    BundleWriterOptions wo;
    wo.num_shards = 1;
    wo.overwrite = true;  // a re-run after a crash replaces the part with the same bytes
    const std::string out = plan.at("output").at("prefix").get<std::string>();
    if (IsUrl(out)) {
      // An object store has no rename: the task's data object goes straight under its final
      // name, the part's index beside the others; --finalize writes only the index. An old
      // checkpoint there must lose its index first (--force), so that no reader pairs it
      // with these data objects.
      TFCKPT_RETURN_IF_ERROR(Publication::ClearIndexForDataInPlace(
          Location::Of(out), plan.at("output").at("overwrite").get<bool>(),
          StrCat(out, ".index: output exists (plan with --force to replace it)")));
      wo.data_files = {t.at("data_file").get<std::string>()};
    }
    r.source = plan.at("source").at("prefix").get<std::string>();
    r.out = out;
    // (A plan written before the option existed has none: auto, the option's default.)
    absl::StatusOr<ServerSideCopy> server_side = ParseServerSide(plan.at("output").value("server_side", "auto"));
    if (!server_side.ok()) {
      return absl::InvalidArgumentError(StrCat(plan_path, ": output.server_side ", server_side.status().message()));
    }
    // (The part and its data file -- in place: the output's -- are in the part's store.)
    TFCKPT_ASSIGN_OR_RETURN(auto w, BundleWriter::Create(Location::Of(r.part), wo));
    PieceCopier copier(*c, *w, progress);
    struct Entry {
      std::string name;
      const TensorEntry* source;
      PlannedPiece piece;
    };
    std::vector<Entry> entries;
    for (const json& e : t.at("entries")) {
      const std::string name = e.at("name").get<std::string>();
      const TensorEntry* te = c->Find(e.value("source", name));
      if (te == nullptr) return absl::InvalidArgumentError(StrCat(plan_path, ": tensor \"", name, "\" not in the source"));
      PlannedPiece p;
      TFCKPT_ASSIGN_OR_RETURN(p.region, RegionFromJson(e.at("region")));
      if (!p.region.InsideOf(te->shape)) {
        return absl::InvalidArgumentError(StrCat(plan_path, ": planned region of \"", name, "\" is outside the tensor"));
      }
      if (!e.at("slice").is_null()) {
        SliceExtents extents;
        auto described = ParseSliceString(e.at("slice").get<std::string>(), te->shape, &extents);
        if (!described.ok() || *described != p.region) {
          return absl::InvalidArgumentError(StrCat(plan_path, ": planned slice of \"", name, "\" is not its region"));
        }
        p.extents = extents;
      }
      p.file = 0;
      p.bytes = e.at("size").is_null() ? 0 : e.at("size").get<uint64_t>();
      entries.push_back({name, te, std::move(p)});
    }
    // Where the source and the output are in one s3:// store, what moves unchanged is
    // copied inside it (as ExecutePlan does): the data object is laid out first (each
    // entry's size is known), told which ranges are copies, and filled positionally; an
    // entry made of whole stored pieces (its CRC theirs) is not read here at all, and the
    // others are read once for their CRC but not uploaded. Elsewhere the entries are
    // appended.
    std::vector<RegionCopies> copies(entries.size());
    std::vector<uint64_t> at(entries.size(), 0), sizes(entries.size(), 0);
    const bool in_store = *server_side != ServerSideCopy::kNever && IsUrl(out);
    if (in_store) {
      uint64_t end = 0;
      std::vector<PlannedCopy> all;
      for (size_t k = 0; k < entries.size(); ++k) {
        at[k] = end;
        TFCKPT_ASSIGN_OR_RETURN(sizes[k], PieceSize(*c, *entries[k].source, entries[k].piece.region));
        TFCKPT_ASSIGN_OR_RETURN(copies[k], PlannedCopiesOf(*c, *entries[k].source, entries[k].piece.region, end));
        all.insert(all.end(), copies[k].copies.begin(), copies[k].copies.end());
        end += sizes[k];
      }
      TFCKPT_RETURN_IF_ERROR(w->PlanCopies(0, end, all, *server_side).status());
    }
    for (size_t k = 0; k < entries.size(); ++k) {
      const Entry& e = entries[k];
      if (in_store) {
        TFCKPT_RETURN_IF_ERROR(copier.WriteCopiedAt(*e.source, e.piece, e.name, at[k], sizes[k], copies[k]));
      } else {
        TFCKPT_RETURN_IF_ERROR(copier.Write(*e.source, e.piece, e.name));
      }
      ++r.entries;
      r.bytes += e.piece.bytes;
    }
    TFCKPT_RETURN_IF_ERROR(w->Finish());
    TFCKPT_RETURN_IF_ERROR(CheckPart(r.part, t, IsUrl(out)));
    return r;
  });
}

absl::StatusOr<int> TaskFromEnvironment() {
  for (const char* var : {"SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX", "TASK_INDEX"}) {
    const char* v = std::getenv(var);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    const long i = std::strtol(v, &end, 10);
    if (*end != '\0' || i < 0 || i > 1'000'000) {
      return absl::InvalidArgumentError(StrCat("--task auto: ", var, "=\"", v, "\" is not a task number"));
    }
    return static_cast<int>(i);
  }
  return absl::InvalidArgumentError(
      "--task auto: none of SLURM_ARRAY_TASK_ID, JOB_COMPLETION_INDEX, TASK_INDEX is set");
}

absl::StatusOr<FinalizeReport> FinalizeTasks(const std::string& plan_path) {
  return WithPlan(plan_path, [&](const json& plan) -> absl::StatusOr<FinalizeReport> {
    const int n = plan.at("num_tasks").get<int>();
    const json& output = plan.at("output");
    FinalizeReport r;
    r.out = output.at("prefix").get<std::string>();
    r.num_tasks = n;
    std::vector<std::string> parts, missing;
    for (const json& t : plan.at("tasks")) {
      parts.push_back(t.at("part").get<std::string>());
      if (!Location::Of(parts.back()).Sibling(".index").Exists()) {
        missing.push_back(StrCat(t.at("task").get<int>(), " (", parts.back(), ")"));
      }
    }
    if (!missing.empty()) {
      return absl::InvalidArgumentError(StrCat(plan_path, ": ", missing.size(), " of ", n, " tasks have not finished: ",
                                               absl::StrJoin(missing, ", "), "; run them with --execute"));
    }
    TFCKPT_RETURN_IF_ERROR(CheckSourceUnchanged(plan.at("source")));
    const bool in_place = IsUrl(r.out);
    for (int i = 0; i < n; ++i) TFCKPT_RETURN_IF_ERROR(CheckPart(parts[i], plan.at("tasks").at(i), in_place));
    MergeOptions mo;
    mo.move = true;
    mo.data_in_place = in_place;
    mo.keep_empty = true;
    mo.overwrite = output.at("overwrite").get<bool>();
    // The parts are this run's temporaries: OUT_temp goes once they are consumed, and an
    // output that fails its verification is removed (the source stays).
    mo.temporaries = output.at("temp_dir").get<std::string>();
    if (output.at("verify").get<bool>()) {
      TFCKPT_ASSIGN_OR_RETURN(std::shared_ptr<Checkpoint> source,
                              OpenCheckpoint(plan.at("source").at("prefix").get<std::string>()));
      mo.after_commit = [&, source]() -> absl::Status {
        std::map<std::string, std::string> names;  // output tensor -> source tensor
        for (const json& t : plan.at("tasks")) {
          for (const json& e : t.at("entries")) names[e.at("name").get<std::string>()] = e.value("source", e.at("name").get<std::string>());
        }
        TFCKPT_RETURN_IF_ERROR(VerifyWritten(r.out, {{source.get(), std::move(names)}}, {}).status());
        r.verified = true;
        return absl::OkStatus();
      };
    }
    TFCKPT_ASSIGN_OR_RETURN(MergeReport m, MergeBundles(parts, r.out, mo));
    r.entries = m.entries;
    return r;
  });
}

}  // namespace tfckpt
