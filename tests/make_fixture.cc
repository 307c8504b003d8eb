// Writes small checkpoints for the CLI tests with the library:
//   make_fixture non_utf8 PREFIX      a tensor whose name is not valid UTF-8
//   make_fixture partitioned PREFIX   a [10, 3] float32 tensor in 4 slices, values 0..29
//   make_fixture kinds PREFIX         float16, bfloat16, bool, strings, complex64, NaN/Inf
//   make_fixture family VARIANT PREFIX
//       the same logical tensors ("part" [10, 3] float32 = 0..29, "step" int64 = 42,
//       "words" string [3], and an object graph naming them) laid out as VARIANT:
//       base (4 row slices over 2 files), resliced (3 column slices over 3 files),
//       whole (unpartitioned), changed (resliced, part[7, 1] = 99.5), removed (no
//       "words"), added (an extra tensor), dtype ("step" int32), shape ("words" [1, 3]),
//       overlap (row slices [0, 4) and [3, 10)), gap (row slices [0, 3) and [4, 10)),
//       badgraph (the graph names a key that is not stored)
//   make_fixture distributed PREFIX
//       a simulated 3-task distributed save left unmerged: PREFIX_temp/part-0000i-of-00003,
//       each task one bundle; "emb" [9, 2] float32 has slice i in task i, "global_step"
//       int64 is in task 0, "bias_i" in task i. PREFIX_single holds the same tensors
//       written by a single writer.
//   make_fixture parallel VARIANT PREFIX
//       a TF2 checkpoint saved from a 3-device parallel device: "dense/kernel" [4, 3] and
//       "dense/bias" [3], "step" int64, an optimizer "iter" and an "m" slot for the
//       kernel, each with VARIABLE_VALUE and parallel_component_1, _2 attributes, and
//       the object graph. VARIANT: same (components equal), differ (kernel component 2
//       has [1, 2] = 99), single (no components at all)
//   make_fixture replicas VARIANT PREFIX
//       TPU replicas "w/0".."w/2" [5] float32 and "v/0".."v/1" [2, 2] in 2 slices,
//       "b/0" and "b/2" (not consecutive), "step". VARIANT: same or differ (w/2[3] = -1)
//   make_fixture avg K PREFIX
//       checkpoint K of an averaging set: "a" [6] float32 = K * i, "h" [2] float16,
//       "bf" [2] bfloat16, "d" [3] float64, "p" [4, 2] float32 in 2 row slices = K + i,
//       "step" int64 = 100 * K, "only_k" present when K == 1
//   make_fixture bigpart PREFIX
//       "big" [1024, 256] float32 (1 MiB, element i = i) in 4 row slices over 2 data files:
//       slices large enough to be copied in-kernel
//   make_fixture mutate MODE SRC_PREFIX DST_PREFIX
//       copies SRC's data files and writes a changed index: drop-slice (the first
//       slice-key entry), size (first fixed-size plain entry's size + 4), dtype (its
//       dtype = 99), num-shards (header num_shards + 1), alias (the second slice-key
//       entry points at the first one's bytes), huge-num-shards (header num_shards
//       2^31 - 1), negative-num-shards (-1), shard-past (the first entry's shard_id =
//       num_shards, one past the last data file)
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>

#include <filesystem>
#include <map>
#include <optional>

#include "model/tensor_encoding.h"
#include "format/bundle/bundle_proto.h"
#include "format/table/table.h"
#include "format/bundle/bundle_writer.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/open.h"
#include "trackable_object_graph.pb.h"

namespace {

template <typename T>
std::string Pod(std::initializer_list<T> v) {
  std::string s;
  for (T x : v) s.append(reinterpret_cast<const char*>(&x), sizeof x);
  return s;
}

int Check(const absl::Status& s) {
  if (s.ok()) return 0;
  std::cerr << "make_fixture: " << s.message() << "\n";
  std::exit(3);
}

}  // namespace

// The object graph of the family: root -> model -> {part, step, words}.
std::string FamilyGraph(const std::string& missing_key) {
  tfckpt::pb::TrackableObjectGraph g;
  auto* root = g.add_nodes();
  auto* c = root->add_children();
  c->set_node_id(1);
  c->set_local_name("model");
  auto* model = g.add_nodes();
  int id = 2;
  for (const char* name : {"part", "step", "words"}) {
    auto* ch = model->add_children();
    ch->set_node_id(id++);
    ch->set_local_name(name);
    auto* a = g.add_nodes()->add_attributes();
    a->set_name("VARIABLE_VALUE");
    a->set_checkpoint_key(std::string("model/") + name + "/.ATTRIBUTES/VARIABLE_VALUE");
  }
  if (!missing_key.empty()) g.mutable_nodes(4)->mutable_attributes(0)->set_checkpoint_key(missing_key);
  std::string bytes, payload;
  g.SerializeToString(&bytes);
  tfckpt::EncodeStrings({bytes}, &payload);
  return payload;
}

int Family(const std::string& variant, const std::string& prefix) {
  const std::string part = "model/part/.ATTRIBUTES/VARIABLE_VALUE", step = "model/step/.ATTRIBUTES/VARIABLE_VALUE",
                    words = "model/words/.ATTRIBUTES/VARIABLE_VALUE";
  std::vector<float> v(30);
  for (int i = 0; i < 30; ++i) v[i] = static_cast<float>(i);
  if (variant == "changed") v[7 * 3 + 1] = 99.5f;
  auto rows = [&](int r0, int n) {
    return std::string(reinterpret_cast<const char*>(v.data() + r0 * 3), n * 12);
  };
  auto column = [&](int col) {
    std::string out;
    for (int r = 0; r < 10; ++r) out += Pod<float>({v[r * 3 + col]});
    return out;
  };
  tfckpt::BundleWriterOptions o;
  o.num_shards = variant == "resliced" || variant == "changed" ? 3 : 2;
  auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix), o);
  Check(w.status());
  const tfckpt::Shape full{10, 3};
  if (variant == "resliced" || variant == "changed") {
    for (int col = 0; col < 3; ++col) {
      Check((*w)->AddSlice(part, 1, full, tfckpt::Region{{0, col}, {10, 1}}, column(col), col));
    }
  } else if (variant == "whole") {
    Check((*w)->Add(part, 1, full, rows(0, 10), 1));
  } else if (variant == "overlap") {
    Check((*w)->AddSlice(part, 1, full, tfckpt::Region{{0, 0}, {4, 3}}, rows(0, 4), 0));
    Check((*w)->AddSlice(part, 1, full, tfckpt::Region{{3, 0}, {7, 3}}, rows(3, 7), 1));
  } else if (variant == "gap") {
    Check((*w)->AddSlice(part, 1, full, tfckpt::Region{{0, 0}, {3, 3}}, rows(0, 3), 0));
    Check((*w)->AddSlice(part, 1, full, tfckpt::Region{{4, 0}, {6, 3}}, rows(4, 6), 1));
  } else {
    const int cuts[] = {0, 3, 6, 8, 10};
    for (int i = 0; i < 4; ++i) {
      Check((*w)->AddSlice(part, 1, full, tfckpt::Region{{cuts[i], 0}, {cuts[i + 1] - cuts[i], 3}},
                           rows(cuts[i], cuts[i + 1] - cuts[i]), i % 2));
    }
  }
  const int last = o.num_shards - 1;
  if (variant == "dtype") {
    Check((*w)->Add(step, 3, {}, Pod<int32_t>({42}), last));
  } else {
    Check((*w)->Add(step, 9, {}, Pod<int64_t>({42}), last));
  }
  if (variant != "removed") {
    std::string s;
    tfckpt::EncodeStrings({"alpha", "", "gamma"}, &s);
    Check((*w)->Add(words, 7, variant == "shape" ? tfckpt::Shape{1, 3} : tfckpt::Shape{3}, s, last));
  }
  if (variant == "added") Check((*w)->Add("model/extra/.ATTRIBUTES/VARIABLE_VALUE", 1, {}, Pod<float>({1.0f}), 0));
  Check((*w)->Add("_CHECKPOINTABLE_OBJECT_GRAPH", 7, {},
                  FamilyGraph(variant == "badgraph" ? "model/missing/.ATTRIBUTES/VARIABLE_VALUE" : ""), 0));
  Check((*w)->Finish());
  return 0;
}

int Mutate(const std::string& mode, const std::string& src, const std::string& dst) {
  auto c = tfckpt::OpenCheckpoint(src);
  Check(c.status());
  namespace fs = std::filesystem;
  for (const auto& f : (*c)->info().data_files) {
    fs::copy_file(f, dst + f.substr(src.size()), fs::copy_options::overwrite_existing);
  }
  auto out = tfckpt::Storage::Local().Create(dst + ".index");
  Check(out.status());
  tfckpt::TableWriter table(out->get());
  bool done = false;
  std::optional<tfckpt::pb::BundleEntryProto> first_slice;
  int32_t num_shards = 0;
  Check((*c)->ForEachIndexEntry([&](std::string_view key, std::string_view value, uint64_t) -> absl::Status {
    std::string v(value);
    if (key.empty()) {
      tfckpt::pb::BundleHeaderProto h;
      h.ParseFromString(v);
      if (mode == "num-shards") h.set_num_shards(h.num_shards() + 1);
      if (mode == "huge-num-shards") h.set_num_shards(std::numeric_limits<int32_t>::max());
      if (mode == "negative-num-shards") h.set_num_shards(-1);
      num_shards = h.num_shards();
      v.clear();
      h.SerializeToString(&v);
      return table.Add(key, v);
    }
    tfckpt::pb::BundleEntryProto e;
    e.ParseFromString(v);
    if (!done && mode == "many-slices" && !tfckpt::IsSliceKey(key) && e.slices_size() > 0) {
      // A metadata entry listing two million slices (none of them stored).
      done = true;
      const int64_t n = 2'000'000;
      e.mutable_shape()->mutable_dim(0)->set_size(n);
      e.clear_slices();
      for (int64_t i = 0; i < n; ++i) {
        auto* sl = e.add_slices();
        auto* ext = sl->add_extent();
        ext->set_start(i);
        ext->set_length(1);
        for (int d = 1; d < e.shape().dim_size(); ++d) sl->add_extent();
      }
      v.clear();
      e.SerializeToString(&v);
      return table.Add(key, v);
    }
    if (!done && mode == "shard-past") {
      done = true;
      e.set_shard_id(num_shards);
      v.clear();
      e.SerializeToString(&v);
      return table.Add(key, v);
    }
    if (!done && mode == "drop-slice" && tfckpt::IsSliceKey(key)) {
      done = true;
      return absl::OkStatus();
    }
    if (!done && mode == "alias" && tfckpt::IsSliceKey(key)) {
      if (!first_slice) {
        first_slice = e;
      } else {
        done = true;
        e.set_shard_id(first_slice->shard_id());
        e.set_offset(first_slice->offset());
        e.set_crc32c(first_slice->crc32c());
        v.clear();
        e.SerializeToString(&v);
      }
    }
    const bool pod = e.dtype() != 7 && e.dtype() != 21;
    if (!done && pod && !tfckpt::IsSliceKey(key) && e.slices_size() == 0 &&
        (mode == "size" || mode == "dtype" || mode == "huge-shape" || mode == "billions")) {
      done = true;
      if (mode == "size") e.set_size(e.size() + 4);
      if (mode == "dtype") e.set_dtype(static_cast<tfckpt::pb::DataType>(99));
      if (mode == "huge-shape" || mode == "billions") {
        // Untrusted sizes: element counts that overflow int64, or billions of elements
        // behind a few stored bytes.
        e.mutable_shape()->clear_dim();
        const int64_t dims = mode == "huge-shape" ? 3 : 1;
        for (int64_t i = 0; i < dims; ++i) {
          e.mutable_shape()->add_dim()->set_size(mode == "huge-shape" ? (int64_t{1} << 31) : 4'000'000'000);
        }
      }
      v.clear();
      e.SerializeToString(&v);
    }
    return table.Add(key, v);
  }));
  Check(table.Finish());
  Check((*out)->Close());
  Check((*out)->Commit());
  return 0;
}

int Distributed(const std::string& prefix) {
  std::vector<float> emb(18);
  for (int i = 0; i < 18; ++i) emb[i] = 0.5f * static_cast<float>(i);
  auto rows = [&](int r0, int n) { return std::string(reinterpret_cast<const char*>(emb.data() + r0 * 2), n * 8); };
  auto single = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix + "_single"));
  Check(single.status());
  for (int task = 0; task < 3; ++task) {
    char part[64];
    std::snprintf(part, sizeof part, "_temp/part-%05d-of-00003", task);
    auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix + part));
    Check(w.status());
    const tfckpt::Region r{{3 * task, 0}, {3, 2}};
    Check((*w)->AddSlice("emb", 1, {9, 2}, r, rows(3 * task, 3)));
    Check((*single)->AddSlice("emb", 1, {9, 2}, r, rows(3 * task, 3)));
    const std::string bias = "bias_" + std::to_string(task);
    Check((*w)->Add(bias, 1, {2}, Pod<float>({1.0f * task, 2.0f * task})));
    Check((*single)->Add(bias, 1, {2}, Pod<float>({1.0f * task, 2.0f * task})));
    if (task == 0) {
      Check((*w)->Add("global_step", 9, {}, Pod<int64_t>({7})));
      Check((*single)->Add("global_step", 9, {}, Pod<int64_t>({7})));
    }
    Check((*w)->Finish());
  }
  Check((*single)->Finish());
  return 0;
}

// A TF2-like checkpoint of a model on a 3-device parallel device (see the top).
int Parallel(const std::string& variant, const std::string& prefix) {
  namespace pb = tfckpt::pb;
  pb::TrackableObjectGraph g;
  auto* root = g.add_nodes();  // 0
  auto child = [&](pb::TrackableObjectGraph::TrackableObject* n, int id, const char* name) {
    auto* c = n->add_children();
    c->set_node_id(id);
    c->set_local_name(name);
  };
  child(root, 1, "dense");
  child(root, 2, "step");
  child(root, 3, "optimizer");
  auto* dense = g.add_nodes();  // 1
  child(dense, 4, "kernel");
  child(dense, 5, "bias");
  const bool components = variant != "single";
  auto attrs = [&](pb::TrackableObjectGraph::TrackableObject* n, const std::string& path, bool parallel) {
    auto* a = n->add_attributes();
    a->set_name("VARIABLE_VALUE");
    a->set_full_name(path);
    a->set_checkpoint_key(path + "/.ATTRIBUTES/VARIABLE_VALUE");
    for (int k = 1; parallel && k < 3; ++k) {
      auto* p = n->add_attributes();
      p->set_name("parallel_component_" + std::to_string(k));
      p->set_full_name(path);
      p->set_checkpoint_key(path + "/.ATTRIBUTES/parallel_component_" + std::to_string(k));
    }
  };
  attrs(g.add_nodes(), "step", components);      // 2
  auto* opt = g.add_nodes();                      // 3
  child(opt, 7, "iter");
  attrs(g.add_nodes(), "dense/kernel", components);  // 4
  attrs(g.add_nodes(), "dense/bias", components);    // 5
  attrs(g.add_nodes(), "dense/kernel/.OPTIMIZER_SLOT/optimizer/m", components);  // 6
  attrs(g.add_nodes(), "optimizer/iter", components);  // 7
  auto* slot = opt->add_slot_variables();
  slot->set_original_variable_node_id(4);
  slot->set_slot_name("m");
  slot->set_slot_variable_node_id(6);
  std::string bytes, graph;
  g.SerializeToString(&bytes);
  tfckpt::EncodeStrings({bytes}, &graph);
  auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix));
  Check(w.status());
  Check((*w)->Add("_CHECKPOINTABLE_OBJECT_GRAPH", 7, {}, graph));
  std::vector<float> kernel(12);
  for (int i = 0; i < 12; ++i) kernel[i] = 0.25f * static_cast<float>(i);
  auto bytes_of = [](const std::vector<float>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4); };
  const std::vector<float> bias = {1.0f, -1.0f, 0.5f}, m(12, 0.125f);
  for (int k = 0; k < (components ? 3 : 1); ++k) {
    const std::string attr = k == 0 ? "VARIABLE_VALUE" : "parallel_component_" + std::to_string(k);
    std::vector<float> kk = kernel;
    if (k == 2 && variant == "differ") kk[1 * 3 + 2] = 99.0f;
    Check((*w)->Add("dense/kernel/.ATTRIBUTES/" + attr, 1, {4, 3}, bytes_of(kk)));
    Check((*w)->Add("dense/bias/.ATTRIBUTES/" + attr, 1, {3}, bytes_of(bias)));
    Check((*w)->Add("dense/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/" + attr, 1, {4, 3}, bytes_of(m)));
    Check((*w)->Add("step/.ATTRIBUTES/" + attr, 9, {}, Pod<int64_t>({5})));
    Check((*w)->Add("optimizer/iter/.ATTRIBUTES/" + attr, 9, {}, Pod<int64_t>({5})));
  }
  Check((*w)->Finish());
  return 0;
}

int Replicas(const std::string& variant, const std::string& prefix) {
  auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix));
  Check(w.status());
  for (int k = 0; k < 3; ++k) {
    const float x = (k == 2 && variant == "differ") ? -1.0f : 3.0f;
    Check((*w)->Add("w/" + std::to_string(k), 1, {5}, Pod<float>({0.0f, 1.0f, 2.0f, x, 4.0f})));
  }
  for (int k = 0; k < 2; ++k) {
    const std::string name = "v/" + std::to_string(k);
    Check((*w)->AddSlice(name, 1, {2, 2}, tfckpt::Region{{0, 0}, {1, 2}}, Pod<float>({1.0f, 2.0f})));
    Check((*w)->AddSlice(name, 1, {2, 2}, tfckpt::Region{{1, 0}, {1, 2}}, Pod<float>({3.0f, 4.0f})));
  }
  Check((*w)->Add("b/0", 1, {}, Pod<float>({1.0f})));
  Check((*w)->Add("b/2", 1, {}, Pod<float>({1.0f})));
  Check((*w)->Add("step", 9, {}, Pod<int64_t>({3})));
  Check((*w)->Finish());
  return 0;
}

int Average(int k, const std::string& prefix) {
  auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix));
  Check(w.status());
  std::string a, p;
  for (int i = 0; i < 6; ++i) a += Pod<float>({static_cast<float>(k * i)});
  for (int i = 0; i < 8; ++i) p += Pod<float>({static_cast<float>(k + i)});
  Check((*w)->Add("a", 1, {6}, a));
  // float16 k and -k/2; bfloat16 k and 0.5.
  const uint16_t halves[] = {0x3C00, 0x4000, 0x4200}, neg_halves[] = {0xB800, 0xBC00, 0xBE00};
  Check((*w)->Add("h", 19, {2}, Pod<uint16_t>({halves[k - 1], neg_halves[k - 1]})));
  const uint16_t bfs[] = {0x3F80, 0x4000, 0x4040};
  Check((*w)->Add("bf", 14, {2}, Pod<uint16_t>({bfs[k - 1], 0x3F00})));
  Check((*w)->Add("d", 2, {3}, Pod<double>({0.1 * k, 1e300, -k * 1.0})));
  Check((*w)->AddSlice("p", 1, {4, 2}, tfckpt::Region{{0, 0}, {2, 2}}, std::string_view(p).substr(0, 16)));
  Check((*w)->AddSlice("p", 1, {4, 2}, tfckpt::Region{{2, 0}, {2, 2}}, std::string_view(p).substr(16, 16)));
  Check((*w)->Add("step", 9, {}, Pod<int64_t>({100 * k})));
  if (k == 1) Check((*w)->Add("only_k", 1, {}, Pod<float>({7.0f})));
  Check((*w)->Finish());
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "distributed") return Distributed(argv[2]);
  if (argc == 4 && std::string(argv[1]) == "parallel") return Parallel(argv[2], argv[3]);
  if (argc == 4 && std::string(argv[1]) == "replicas") return Replicas(argv[2], argv[3]);
  if (argc == 4 && std::string(argv[1]) == "avg") return Average(std::stoi(argv[2]), argv[3]);
  if (argc == 4 && std::string(argv[1]) == "family") return Family(argv[2], argv[3]);
  if (argc == 5 && std::string(argv[1]) == "mutate") return Mutate(argv[2], argv[3], argv[4]);
  if (argc != 3) {
    std::cerr << "usage: make_fixture non_utf8|partitioned|kinds PREFIX | family VARIANT PREFIX |"
                 " mutate MODE SRC DST\n";
    return 2;
  }
  const std::string mode = argv[1], prefix = argv[2];
  tfckpt::BundleWriterOptions o;
  o.num_shards = mode == "partitioned" || mode == "bigpart" ? 2 : 1;
  auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix), o);
  Check(w.status());
  if (mode == "non_utf8") {
    Check((*w)->Add(std::string("bad\xff\xfe name"), 1, {}, Pod<float>({1.5f})));
    Check((*w)->Add("good", 1, {}, Pod<float>({2.5f})));
    Check((*w)->Add("quote\"back\\slash\nnewline\ttab", 1, {}, Pod<float>({3.5f})));
  } else if (mode == "partitioned") {
    std::string all;
    for (int i = 0; i < 30; ++i) all += Pod<float>({static_cast<float>(i)});
    const int rows[] = {3, 3, 2, 2};
    int at = 0;
    for (int i = 0; i < 4; ++i) {
      Check((*w)->AddSlice("part", 1, {10, 3}, tfckpt::Region{{at, 0}, {rows[i], 3}},
                           std::string_view(all).substr(at * 12, rows[i] * 12), i % 2));
      at += rows[i];
    }
  } else if (mode == "bigpart") {
    std::vector<float> v(1024 * 256);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
    const std::string_view all(reinterpret_cast<const char*>(v.data()), v.size() * 4);
    for (int i = 0; i < 4; ++i) {
      Check((*w)->AddSlice("big", 1, {1024, 256}, tfckpt::Region{{256 * i, 0}, {256, 256}},
                           all.substr(static_cast<size_t>(i) * 256 * 256 * 4, 256 * 256 * 4), i % 2));
    }
  } else if (mode == "kinds") {
    Check((*w)->Add("half", 19, {3}, Pod<uint16_t>({0x3C00, 0xC000, 0x3555})));   // 1, -2, 0.333
    Check((*w)->Add("bf16", 14, {2}, Pod<uint16_t>({0x3F80, 0x4049})));           // 1, 3.140625
    Check((*w)->Add("flags", 10, {3}, Pod<uint8_t>({1, 0, 1})));
    Check((*w)->Add("cplx", 8, {1}, Pod<float>({1.0f, -2.0f})));
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    Check((*w)->Add("specials", 1, {5}, Pod<float>({nan, inf, 0.0f, 1.0f, 3.0f})));
    std::string strings;
    tfckpt::EncodeStrings({"plain", std::string_view("tab\there\x01", 9), ""}, &strings);
    Check((*w)->Add("words", 7, {3}, strings));
    std::string big;
    for (int i = 0; i < 2000; ++i) big += Pod<int32_t>({i});
    Check((*w)->Add("big", 3, {2000}, big));
  } else {
    std::cerr << "unknown mode " << mode << "\n";
    return 2;
  }
  Check((*w)->Finish());
  return 0;
}
