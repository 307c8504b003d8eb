// Golden tests on the real TensorFlow checkpoints in ../shared/testdata/tf (MANIFEST.md).
#include <doctest/doctest.h>

#include <cstring>
#include <map>

#include "test_util.h"
#include "format/bundle/bundle_proto.h"
#include "format/table/table.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/dtype.h"
#include "model/object_graph.h"
#include "tfckpt/open.h"
#include "model/values.h"

namespace tfckpt::testing {
bool NeedsTestData() { return true; }
}  // namespace tfckpt::testing

using tfckpt::testing::ReadFile;
using tfckpt::testing::TempDir;
using tfckpt::testing::TestDataDir;

namespace {

enum class Data { kPresent, kIndexOnly, kShardMissing, kTruncated };

struct Case {
  std::string path;  // relative to testdata/tf, as given to OpenCheckpoint
  tfckpt::Format format;
  size_t tensors;
  std::map<std::string, int> dtypes;
  int shards;  // V2 num_shards; V1 number of files
  bool snappy;
  Data data = Data::kPresent;
};

const std::vector<Case>& Cases() {
  using F = tfckpt::Format;
  static const std::vector<Case> cases = {
      {"empty_prefix_keras/.index", F::kV2, 12, {{"float32", 10}, {"int64", 1}, {"string", 1}}, 1, false},
      {"estimator_dnn_adam_2shards/model.ckpt-0", F::kV2, 66, {{"float32", 65}, {"int64", 1}}, 2, false},
      {"estimator_dnn_adam_2shards/model.ckpt-1000", F::kV2, 66, {{"float32", 65}, {"int64", 1}}, 2, false},
      {"estimator_dnn_adam_2shards/variables/variables", F::kV2, 26, {{"float32", 25}, {"int64", 1}}, 2, false},
      {"estimator_linear_ftrl_2shards/model.ckpt-0", F::kV2, 40, {{"float32", 39}, {"int64", 1}}, 2, false},
      {"estimator_linear_ftrl_2shards/model.ckpt-5000", F::kV2, 40, {{"float32", 39}, {"int64", 1}}, 2, false},
      {"estimator_tfx_adagrad_ftrl/model.ckpt-0", F::kV2, 60, {{"float32", 58}, {"int64", 2}}, 1, false},
      {"estimator_tfx_adagrad_ftrl/model.ckpt-999", F::kV2, 60, {{"float32", 58}, {"int64", 2}}, 1, false},
      {"estimator_tfx_adagrad_ftrl/model.ckpt-1000", F::kV2, 60, {{"float32", 58}, {"int64", 2}}, 1, false},
      {"index_only_lingvo_snappy/lenet_test_model", F::kV2, 23, {{"float32", 20}, {"int64", 3}}, 1, true,
       Data::kIndexOnly},
      {"index_only_minigo_snappy/minigo", F::kV2, 333, {{"float32", 332}, {"int64", 1}}, 1, true, Data::kIndexOnly},
      {"keras_tf2_adam_2shards/model.ckpt", F::kV2, 18, {{"float32", 16}, {"int64", 1}, {"string", 1}}, 2, false},
      {"keras_tuner_prefix_named_checkpoint/checkpoint", F::kV2, 18, {{"float32", 16}, {"int64", 1}, {"string", 1}},
       1, false},
      {"savedmodel_keras_tfx_slots/variables/variables", F::kV2, 28, {{"float32", 26}, {"int64", 1}, {"string", 1}},
       1, false},
      {"savedmodel_tf1_snappy_index/variables/variables", F::kV2, 5, {{"float32", 5}}, 1, true},
      {"savedmodel_tf2_snappy_index/variables/variables", F::kV2, 4, {{"float32", 3}, {"string", 1}}, 1, true},
      {"savedmodel_tfdf_bool_snappy/variables/variables", F::kV2, 6, {{"bool", 1}, {"float32", 4}, {"string", 1}}, 1,
       true},
      {"savedmodel_tfjs_int64/variables/variables", F::kV2, 3, {{"int64", 2}, {"string", 1}}, 1, false},
      {"t2t_transformer_2shards/model.ckpt-1", F::kV2, 250, {{"float32", 248}, {"int64", 1}, {"int32", 1}}, 2, false},
      {"t5x_mtf_bfloat16_missing_shard/model.ckpt-0", F::kV2, 105, {{"bfloat16", 52}, {"float32", 52}, {"int64", 1}},
       2, true, Data::kShardMissing},
      {"tf2_float64_variant_pinn/ckpt-3332", F::kV2, 45,
       {{"float64", 36}, {"float32", 4}, {"int64", 2}, {"int32", 1}, {"string", 1}, {"variant", 1}}, 1, false},
      {"tf2_iterator_variant_int32/ckpt-38", F::kV2, 15,
       {{"float32", 10}, {"int64", 2}, {"int32", 1}, {"string", 1}, {"variant", 1}}, 1, false},
      {"tf2_iterator_variant_int32/ckpt-39", F::kV2, 15,
       {{"float32", 10}, {"int64", 2}, {"int32", 1}, {"string", 1}, {"variant", 1}}, 1, false},
      {"tf2_iterator_variant_int32/ckpt-40", F::kV2, 15,
       {{"float32", 10}, {"int64", 2}, {"int32", 1}, {"string", 1}, {"variant", 1}}, 1, false},
      {"truncated_data_resnet_savedmodel/variables/variables", F::kV2, 252, {{"float32", 251}, {"int64", 1}}, 1, false,
       Data::kTruncated},
      {"v1_abs_path_state/export", F::kV1, 2, {{"float32", 2}}, 1, false},
      {"v1_session_bundle_sharded_name/export-00000-of-00001", F::kV1, 2, {{"float32", 2}}, 1, false},
      {"v1_traffic_signs_3mb/model.ckpt", F::kV1, 10, {{"float32", 10}}, 1, false},
      {"v1_vocal_autoencoder_multiblock/model.ckpt", F::kV1, 39, {{"float32", 39}}, 1, false},
  };
  return cases;
}

std::string P(const std::string& rel) { return TestDataDir() + "/" + rel; }

std::unique_ptr<tfckpt::Checkpoint> OpenOrDie(const std::string& spec) {
  auto c = tfckpt::OpenCheckpoint(spec);
  INFO(spec, ": ", c.status().ToString());
  REQUIRE(c.ok());
  return std::move(*c);
}

template <typename T>
T Scalar(const tfckpt::Checkpoint& c, const std::string& name) {
  const tfckpt::TensorEntry* t = c.Find(name);
  REQUIRE(t != nullptr);
  auto b = c.Read(*t, t->slices[0]);
  REQUIRE(b.ok());
  REQUIRE(b->data.size() == sizeof(T));
  T v;
  std::memcpy(&v, b->data.data(), sizeof v);
  return v;
}

}  // namespace

TEST_CASE("every real case: names, dtypes, shards and formats as MANIFEST.md says") {
  for (const Case& k : Cases()) {
    CAPTURE(k.path);
    auto c = OpenOrDie(P(k.path));
    const auto& info = c->info();
    CHECK(info.format == k.format);
    CHECK(c->tensors().size() == k.tensors);
    std::map<std::string, int> dtypes;
    for (const auto& t : c->tensors()) {
      ++dtypes[tfckpt::DTypeName(t.dtype)];
      CHECK_FALSE(t.partitioned);
      CHECK(t.defect == "");
      CHECK(t.name[0] != '\0');  // listed under logical names, never raw slice keys
    }
    CHECK(dtypes == k.dtypes);
    if (k.format == tfckpt::Format::kV2) {
      CHECK(info.num_shards == k.shards);
      CHECK(info.index_has_snappy == k.snappy);
      CHECK(info.orphan_slice_keys.empty());
    } else {
      CHECK(static_cast<int>(info.v1_files.size()) == k.shards);
    }
  }
}

TEST_CASE("every real case: every tensor CRC verifies where the data is present") {
  for (const Case& k : Cases()) {
    CAPTURE(k.path);
    auto c = OpenOrDie(P(k.path));
    int ok = 0, missing = 0, damaged = 0;
    for (const auto& t : c->tensors()) {
      for (const auto& s : t.slices) {
        auto b = c->Read(t, s);
        if (b.ok()) {
          ++ok;
        } else if (absl::IsNotFound(b.status())) {
          ++missing;
        } else {
          CHECK(absl::IsDataLoss(b.status()));
          ++damaged;
        }
      }
    }
    switch (k.data) {
      case Data::kPresent:
        CHECK(ok == static_cast<int>(k.tensors));
        CHECK(missing + damaged == 0);
        if (k.format == tfckpt::Format::kV2) {
          // TF packs data files densely: the tensors of each file add up to its size.
          std::vector<uint64_t> used(c->info().num_shards, 0);
          for (const auto& t : c->tensors()) used[t.slices[0].data.shard] += t.slices[0].data.size;
          for (int32_t i = 0; i < c->info().num_shards; ++i) {
            CHECK(used[i] == std::filesystem::file_size(c->info().data_files[i]));
          }
        }
        break;
      case Data::kIndexOnly:
        CHECK(missing == static_cast<int>(k.tensors));
        break;
      case Data::kShardMissing:  // t5x: shard 0 holds global_step only
        CHECK(ok == 1);
        CHECK(missing == 104);
        break;
      case Data::kTruncated:  // resnet: empty data file, every entry points past its end
        CHECK(damaged == 252);
        break;
    }
  }
}

TEST_CASE("concrete values") {
  auto hpt = OpenOrDie(P("savedmodel_tf1_snappy_index/variables/variables"));
  CHECK(Scalar<float>(*hpt, "a") == 0.5f);
  CHECK(Scalar<float>(*hpt, "b") == 2.0f);
  CHECK(Scalar<int64_t>(*OpenOrDie(P("estimator_dnn_adam_2shards/model.ckpt-1000")), "global_step") == 1000);
  CHECK(Scalar<int64_t>(*OpenOrDie(P("estimator_linear_ftrl_2shards/model.ckpt-5000")), "global_step") == 5000);
  CHECK(Scalar<int64_t>(*OpenOrDie(P("estimator_tfx_adagrad_ftrl/model.ckpt-999")), "global_step") == 999);
  CHECK(Scalar<int64_t>(*OpenOrDie(P("t5x_mtf_bfloat16_missing_shard/model.ckpt-0")), "global_step") == 0);
  auto v1 = OpenOrDie(P("v1_abs_path_state/export"));
  CHECK(Scalar<float>(*v1, "Variable") == 0.5f);
  CHECK(Scalar<float>(*v1, "Variable_1") == 2.0f);
  // The t5x index lists bfloat16 weights; the bool of TF-DF sits at offset 0.
  auto tfdf = OpenOrDie(P("savedmodel_tfdf_bool_snappy/variables/variables"));
  bool found_bool = false;
  for (const auto& t : tfdf->tensors()) {
    if (t.dtype == 10) {
      found_bool = true;
      CHECK(t.slices[0].data.offset == 0);
      CHECK(t.slices[0].data.size == 1);
    }
  }
  CHECK(found_bool);
  auto pinn = OpenOrDie(P("tf2_float64_variant_pinn"));
  const auto* it = pinn->Find("iterator/.ATTRIBUTES/ITERATOR_STATE");
  REQUIRE(it != nullptr);
  CHECK(it->shape == tfckpt::Shape{8004});
  CHECK(it->bytes == 1097152);
  // Statistics stream over the data: the V1 kernel has 6144*128 finite floats.
  auto traffic = OpenOrDie(P("v1_traffic_signs_3mb"));
  auto st = tfckpt::ComputeStats(*traffic, *traffic->Find("Variable_2"));
  REQUIRE(st.ok());
  CHECK(st->count == 6144 * 128);
  CHECK(st->nan == 0);
  CHECK(st->min <= st->max);
}

TEST_CASE("argument resolution: directories, state files, .index paths, V1 names") {
  // Newest checkpoint from the state file.
  CHECK(OpenOrDie(P("estimator_tfx_adagrad_ftrl"))->info().prefix == P("estimator_tfx_adagrad_ftrl/model.ckpt-1000"));
  // The prefix is the directory itself ("." in the state file).
  CHECK(OpenOrDie(P("empty_prefix_keras"))->tensors().size() == 12);
  // A prefix literally named "checkpoint" beside the state file.
  CHECK(OpenOrDie(P("keras_tuner_prefix_named_checkpoint"))->tensors().size() == 18);
  // The .index path itself.
  CHECK(OpenOrDie(P("keras_tf2_adam_2shards/model.ckpt.index"))->info().prefix == P("keras_tf2_adam_2shards/model.ckpt"));
  // A directory with a single *.index and no state file.
  CHECK(OpenOrDie(P("index_only_minigo_snappy"))->tensors().size() == 333);
  // A SavedModel directory.
  CHECK(OpenOrDie(P("savedmodel_tfjs_int64"))->tensors().size() == 3);
  // An absolute path in the state file that no longer exists: found beside it, noted.
  auto abs = OpenOrDie(P("v1_abs_path_state"));
  CHECK(abs->info().format == tfckpt::Format::kV1);
  CHECK_FALSE(abs->info().notes.empty());
  // V1 by shard file name, by prefix, and by pattern.
  CHECK(OpenOrDie(P("v1_session_bundle_sharded_name/export"))->tensors().size() == 2);
  CHECK(OpenOrDie(P("v1_session_bundle_sharded_name/export-?????-of-00001"))->tensors().size() == 2);
  // A directory holding several checkpoints and no state file is ambiguous.
  TempDir dir;
  for (const char* n : {"a.index", "b.index"}) {
    std::filesystem::copy_file(P("savedmodel_tfjs_int64/variables/variables.index"), dir / n);
  }
  auto several = tfckpt::OpenCheckpoint(dir.path());
  CHECK(absl::IsInvalidArgument(several.status()));
  CHECK(std::string(several.status().message()).find("a.index, b.index") != std::string::npos);
  CHECK(absl::IsNotFound(tfckpt::OpenCheckpoint(dir / "nothing").status()));
}

TEST_CASE("fidelity: re-encoding every uncompressed real index gives identical bytes") {
  int checked = 0;
  for (const Case& k : Cases()) {
    if (k.format != tfckpt::Format::kV2 || k.snappy) continue;
    CAPTURE(k.path);
    auto c = OpenOrDie(P(k.path));
    TempDir dir;
    const std::string out_path = dir / "re.index";
    auto out = tfckpt::Storage::Local().Create(out_path);
    REQUIRE(out.ok());
    {
      tfckpt::TableWriter w(out->get());
      // Header and entries rebuilt from the slice map, not copied.
      std::string value;
      tfckpt::MakeHeader(c->info().num_shards, c->info().big_endian).SerializeToString(&value);
      CHECK(value == c->raw_header());
      REQUIRE(w.Add("", value).ok());
      for (const auto& t : c->tensors()) {
        const auto& s = t.slices[0];
        value.clear();
        tfckpt::MakeEntry(t.dtype, t.shape, s.data.shard, s.data.offset, s.data.size, s.data.masked_crc)
            .SerializeToString(&value);
        REQUIRE(w.Add(t.name, value).ok());
      }
      REQUIRE(w.Finish().ok());
    }
    REQUIRE((*out)->Close().ok());
    REQUIRE((*out)->Commit().ok());
    CHECK(ReadFile(out_path) == ReadFile(c->info().index_path));
    ++checked;
  }
  CHECK(checked == 19);  // 25 V2 cases less the 6 with Snappy blocks
}

TEST_CASE("fidelity: V1 tables re-encode byte for byte") {
  for (const char* rel : {"v1_abs_path_state/export", "v1_session_bundle_sharded_name/export-00000-of-00001",
                          "v1_traffic_signs_3mb/model.ckpt", "v1_vocal_autoencoder_multiblock/model.ckpt"}) {
    CAPTURE(rel);
    auto t = tfckpt::TableReader::Open(P(rel));
    REQUIRE(t.ok());
    TempDir dir;
    auto out = tfckpt::Storage::Local().Create(dir / "v1");
    REQUIRE(out.ok());
    {
      tfckpt::TableWriter w(out->get());
      REQUIRE((*t)->ForEach([&](std::string_view k, std::string_view v, uint64_t) { return w.Add(k, v); }).ok());
      REQUIRE(w.Finish().ok());
    }
    REQUIRE((*out)->Close().ok());
    REQUIRE((*out)->Commit().ok());
    CHECK(ReadFile(dir / "v1") == ReadFile(P(rel)));
  }
}

TEST_CASE("object graphs: every attribute's key is in the bundle and matches its path") {
  int graphs = 0;
  for (const Case& k : Cases()) {
    if (k.format != tfckpt::Format::kV2 || k.dtypes.count("string") == 0) continue;
    CAPTURE(k.path);
    auto c = OpenOrDie(P(k.path));
    auto g = tfckpt::LoadObjectGraph(*c);
    REQUIRE(g.ok());
    REQUIRE(g->has_value());
    ++graphs;
    const auto paths = tfckpt::ObjectPaths(**g);
    for (int i = 0; i < (*g)->nodes_size(); ++i) {
      for (const auto& a : (*g)->nodes(i).attributes()) {
        CAPTURE(a.checkpoint_key());
        CHECK_FALSE(tfckpt::AttributeTensors(*c, a.checkpoint_key()).empty());
        CHECK(a.checkpoint_key() == paths[i] + "/.ATTRIBUTES/" + tfckpt::EscapeLocalName(a.name()));
      }
    }
    const std::string tree = tfckpt::FormatObjectTree(*c, **g);
    CHECK(tree.find("(not in checkpoint)") == std::string::npos);
  }
  CHECK(graphs >= 9);
  // TF1 checkpoints have none.
  auto tf1 = tfckpt::LoadObjectGraph(*OpenOrDie(P("estimator_tfx_adagrad_ftrl")));
  REQUIRE(tf1.ok());
  CHECK_FALSE(tf1->has_value());
}

#include "tfckpt/object_graph.h"

TEST_CASE("the public object graph and selection (tfckpt/object_graph.h) on a real TF2 checkpoint") {
  auto c = OpenOrDie(P("keras_tf2_adam_2shards"));
  auto g = tfckpt::LoadObjectGraph(*c);
  REQUIRE(g.ok());
  REQUIRE(g->has_value());
  auto nodes = tfckpt::ReadObjectGraph(*c);
  REQUIRE(nodes.ok());
  REQUIRE(nodes->has_value());
  // Node by node as the protobuf holds it, each with its object path.
  const auto paths = tfckpt::ObjectPaths(**g);
  REQUIRE((*nodes)->size() == static_cast<size_t>((*g)->nodes_size()));
  int attributes = 0, slots = 0;
  for (int i = 0; i < (*g)->nodes_size(); ++i) {
    const tfckpt::ObjectGraphNode& n = (**nodes)[static_cast<size_t>(i)];
    const auto& p = (*g)->nodes(i);
    CHECK(n.path == paths[static_cast<size_t>(i)]);
    REQUIRE(n.children.size() == static_cast<size_t>(p.children_size()));
    for (int j = 0; j < p.children_size(); ++j) {
      CHECK(n.children[static_cast<size_t>(j)].node_id == p.children(j).node_id());
      CHECK(n.children[static_cast<size_t>(j)].local_name == p.children(j).local_name());
    }
    REQUIRE(n.attributes.size() == static_cast<size_t>(p.attributes_size()));
    for (int j = 0; j < p.attributes_size(); ++j) {
      CHECK(n.attributes[static_cast<size_t>(j)].checkpoint_key == p.attributes(j).checkpoint_key());
      ++attributes;
    }
    REQUIRE(n.slot_variables.size() == static_cast<size_t>(p.slot_variables_size()));
    slots += p.slot_variables_size();
  }
  CHECK(attributes > 0);
  CHECK(slots > 0);  // (Adam's m and v)

  // Everything but the graph's own tensor, in name order, under its own name.
  auto all = tfckpt::SelectTensors(*c, {});
  REQUIRE(all.ok());
  CHECK(all->size() == c->tensors().size() - 1);
  for (const auto& [name, new_name] : *all) {
    CHECK(name != tfckpt::kObjectGraphKey);
    CHECK(new_name == name);
  }
  // --drop-optimizer leaves out the slots and the optimizer's variables, and keeps the rest.
  auto model = tfckpt::SelectTensors(*c, {.drop_optimizer = true});
  REQUIRE(model.ok());
  CHECK(!model->empty());
  CHECK(model->size() < all->size());
  for (const auto& [name, new_name] : *model) {
    CAPTURE(name);
    CHECK(name.find(".OPTIMIZER_SLOT") == std::string::npos);
    CHECK(name.find("optimizer/") == std::string::npos);
  }
  // include, exclude and renames in order.
  auto picked = tfckpt::SelectTensors(*c, {.include = {"OPTIMIZER_SLOT"}, .exclude = {"/m/"},
                                           .renames = {"^(.*)/\\.OPTIMIZER_SLOT/optimizer/v/(.*)$=\\1/v/\\2"}});
  REQUIRE(picked.ok());
  CHECK(!picked->empty());
  for (const auto& [name, new_name] : *picked) {
    CAPTURE(name);
    CHECK(name.find("/.OPTIMIZER_SLOT/optimizer/v/") != std::string::npos);
    CHECK(new_name.find(".OPTIMIZER_SLOT") == std::string::npos);
    CHECK(new_name.find("/v/") != std::string::npos);
  }
  // A pattern that does not compile and a rule without "=" are InvalidArgument.
  CHECK(absl::IsInvalidArgument(tfckpt::SelectTensors(*c, {.include = {"("}}).status()));
  CHECK(absl::IsInvalidArgument(tfckpt::SelectTensors(*c, {.renames = {"no-equals"}}).status()));
  // A TF1 checkpoint has no graph.
  auto tf1 = tfckpt::ReadObjectGraph(*OpenOrDie(P("estimator_tfx_adagrad_ftrl")));
  REQUIRE(tf1.ok());
  CHECK_FALSE(tf1->has_value());
}

#include <regex>

#include "copy/copy.h"
#include "reshard/partition.h"
#include "reshard/reshard.h"
#include "validate/compare.h"

TEST_CASE("reshard every real case: float tensors with >= 2 rows to fixed:3, back with none") {
  int cases = 0;
  for (const Case& k : Cases()) {
    if (k.data != Data::kPresent) continue;
    CAPTURE(k.path);
    auto c = OpenOrDie(P(k.path));
    tfckpt::ReshardOptions there;
    for (const auto& t : c->tensors()) {
      if ((t.dtype == 1 || t.dtype == 2) && !t.shape.empty() && t.shape[0] >= 2) {
        auto rule = tfckpt::ParsePartitionRule("fixed:3");
        REQUIRE(rule.ok());
        std::string escaped = std::regex_replace(t.name, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)");
        rule->pattern = "^" + escaped + "$";
        there.rules.push_back(*rule);
      }
    }
    TempDir dir;
    auto plan = tfckpt::PlanReshard(*c, there);
    REQUIRE(plan.ok());
    REQUIRE(tfckpt::ExecutePlan(*c, *plan, dir / "sliced", {}).ok());
    auto sliced = OpenOrDie(dir / "sliced");
    for (const auto& t : sliced->tensors()) {
      if ((t.dtype == 1 || t.dtype == 2) && !t.shape.empty() && t.shape[0] >= 2) {
        CHECK(t.slices.size() == static_cast<size_t>(std::min<int64_t>(3, t.shape[0])));
      }
    }
    tfckpt::ReshardOptions back;
    back.rules.push_back(*tfckpt::ParsePartitionRule("none"));
    back.policy = *tfckpt::ParsePolicy("single");
    auto plan2 = tfckpt::PlanReshard(*sliced, back);
    REQUIRE(plan2.ok());
    REQUIRE(tfckpt::ExecutePlan(*sliced, *plan2, dir / "whole", {}).ok());
    // TF1 slots of a primary cut into slices are keyed PRIMARY/SLOT (slot_creator), and stay
    // so when it is whole again: estimator_linear_ftrl_2shards' PRIMARY/part_0/Ftrl.
    std::map<std::string, std::string> names;  // output -> input
    for (const auto& tp : plan->tensors) names[tp.out_name()] = tp.source->name;
    auto whole = OpenOrDie(dir / "whole");
    tfckpt::ValidateReport report;
    REQUIRE(tfckpt::CompareCheckpoints(*whole, *c, &names, {}, &report).ok());
    CHECK(report.findings.empty());
    REQUIRE(whole->tensors().size() == c->tensors().size());
    for (size_t i = 0; i < c->tensors().size(); ++i) {
      const auto& a = c->tensors()[i];
      const tfckpt::TensorEntry* found = nullptr;
      for (const auto& [out, in] : names) {
        if (in == a.name) found = whole->Find(out);
      }
      REQUIRE(found != nullptr);
      const auto& b = *found;
      CHECK((a.name == b.name || a.name.find("/part_0/Ftrl") != std::string::npos));
      CHECK_FALSE(b.partitioned);
      auto x = c->Read(a, a.slices[0]);
      auto y = whole->Read(b, b.slices[0]);
      REQUIRE(x.ok());
      REQUIRE(y.ok());
      CHECK(x->data == y->data);
      if (k.format == tfckpt::Format::kV2) CHECK(a.slices[0].data.masked_crc == b.slices[0].data.masked_crc);
    }
    ++cases;
  }
  CHECK(cases == 25);  // the 29 cases less the 4 without usable data
}

#include "format/bundle/bundle_merge.h"
#include "format/bundle/bundle_writer.h"
#include "merge/merge.h"

TEST_CASE("merge: real two-shard checkpoints split into per-file bundles merge back to TF's exact index") {
  int merged = 0;
  for (const Case& k : Cases()) {
    if (k.format != tfckpt::Format::kV2 || k.shards != 2 || k.data != Data::kPresent) continue;
    CAPTURE(k.path);
    auto c = OpenOrDie(P(k.path));
    TempDir dir;
    std::vector<std::string> parts;
    for (int32_t shard = 0; shard < 2; ++shard) {
      const std::string part = dir / ("part-" + std::to_string(shard));
      auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(part));
      REQUIRE(w.ok());
      std::vector<const tfckpt::TensorEntry*> mine;
      for (const auto& t : c->tensors()) {
        if (t.slices[0].data.shard == shard) mine.push_back(&t);
      }
      std::sort(mine.begin(), mine.end(), [](auto* a, auto* b) { return a->slices[0].data.offset < b->slices[0].data.offset; });
      for (const auto* t : mine) {
        auto bytes = c->Read(*t, t->slices[0]);
        REQUIRE(bytes.ok());
        REQUIRE((*w)->Add(t->name, t->dtype, t->shape, bytes->data).ok());
      }
      REQUIRE((*w)->Finish().ok());
      // The part's data file is the original data file, byte for byte.
      CHECK(ReadFile(tfckpt::DataFileName(part, 0, 1)) == ReadFile(c->info().data_files[shard]));
      parts.push_back(part);
    }
    auto report = tfckpt::MergeBundles(parts, dir / "merged", {});
    REQUIRE(report.ok());
    CHECK(report->num_files == 2);
    CHECK(ReadFile(dir / "merged.index") == ReadFile(c->info().index_path));
    for (int32_t shard = 0; shard < 2; ++shard) {
      CHECK(ReadFile(tfckpt::DataFileName(dir / "merged", shard, 2)) == ReadFile(c->info().data_files[shard]));
    }
    // Inputs are untouched by default.
    CHECK(tfckpt::Location::Of(parts[0] + ".index").Exists());
    CHECK(tfckpt::Location::Of(tfckpt::DataFileName(parts[1], 0, 1)).Exists());
    ++merged;
  }
  CHECK(merged == 7);  // dnn (3), ftrl (2), keras, t2t
}
