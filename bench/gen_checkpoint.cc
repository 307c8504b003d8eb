// Synthetic checkpoints for the benchmarks.
//   gen_checkpoint many PREFIX N     N small float32 tensors [4] in one data file
//   gen_checkpoint tables PREFIX MIB N_TABLES SLICES
//                                    N_TABLES embedding tables of MIB MiB float32 each, in
//                                    SLICES row slices over SLICES data files, plus dense layers
//   gen_checkpoint one-file PREFIX N_TABLES ROWS COLS SLICES
//                                    N_TABLES float32 tables [ROWS, COLS], each in SLICES row
//                                    slices, all in ONE data file (no dense layers)
//   gen_checkpoint dense PREFIX N_LAYERS ROWS COLS FILES
//                                    N_LAYERS dense layers: a float32 kernel [ROWS, COLS] and
//                                    its bias [COLS] each, whole, layer i in data file
//                                    i % FILES, in TF's order (by name: each small bias just
//                                    before its large kernel)
//   gen_checkpoint index-only PREFIX GIB N_TABLES SLICES
//                                    the index of N_TABLES float32 tables totalling GIB GiB, in
//                                    SLICES row slices over SLICES data files that are sparse
//                                    (no bytes written; metadata-only, for planning at scale)
#include <fcntl.h>
#include <unistd.h>

#include <map>
#include <cstring>
#include <iostream>
#include <random>
#include <string>

#include "absl/strings/str_format.h"
#include "tensor_bundle.pb.h"
#include "format/bundle/bundle_proto.h"
#include "format/table/table.h"
#include "format/bundle/bundle_writer.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/status.h"
#include "tfckpt/ordered_code.h"

namespace {

int Fail(const absl::Status& s) {
  std::cerr << "gen_checkpoint: " << s.message() << "\n";
  return 3;
}

// Writes table NAME [ROWS, COLS] float32 in SLICES row slices, slice s into data file
// s % FILES, its bytes repeated from CHUNK.
absl::Status AddTable(tfckpt::BundleWriter& w, const std::string& name, int64_t rows, int64_t cols, int64_t slices,
                      int64_t files, const std::string& chunk) {
  int64_t at = 0;
  for (int64_t s = 0; s < slices; ++s) {
    const int64_t n = rows / slices + (s < rows % slices ? 1 : 0);
    tfckpt::Region r{{at, 0}, {n, cols}};
    auto stream = w.BeginEntry(name, 1, {rows, cols}, r, static_cast<int32_t>(s % files));
    if (!stream.ok()) return stream.status();
    int64_t left = n * cols * 4;
    while (left > 0) {
      const int64_t k = std::min<int64_t>(left, chunk.size());
      if (auto st = stream->Append(std::string_view(chunk).substr(0, k)); !st.ok()) return st;
      left -= k;
    }
    if (auto st = stream->Close(); !st.ok()) return st;
    at += n;
  }
  return absl::OkStatus();
}

// 1 MiB of pseudo-random bytes (the same every run).
std::string RandomChunk() {
  std::mt19937 rng(1);
  std::string chunk(1 << 20, '\0');
  for (auto& c : chunk) c = static_cast<char>(rng());
  return chunk;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: gen_checkpoint many PREFIX N | tables PREFIX MIB N_TABLES SLICES | one-file PREFIX N_TABLES ROWS COLS SLICES | dense PREFIX N_LAYERS ROWS COLS FILES\n";
    return 2;
  }
  const std::string mode = argv[1], prefix = argv[2];
  tfckpt::BundleWriterOptions o;
  o.overwrite = true;
  if (mode == "many") {
    const long n = std::stol(argv[3]);
    auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix), o);
    if (!w.ok()) return Fail(w.status());
    const std::string payload(16, '\x01');
    for (long i = 0; i < n; ++i) {
      const std::string name = absl::StrFormat("model/layer_%06d/kernel/.ATTRIBUTES/VARIABLE_VALUE", i);
      if (auto s = (*w)->Add(name, 1, {4}, payload); !s.ok()) return Fail(s);
    }
    if (auto s = (*w)->Finish(); !s.ok()) return Fail(s);
    return 0;
  }
  if (mode == "tables" && argc == 6) {
    const long mib = std::stol(argv[3]), tables = std::stol(argv[4]), slices = std::stol(argv[5]);
    o.num_shards = static_cast<int32_t>(slices);
    auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix), o);
    if (!w.ok()) return Fail(w.status());
    const int64_t cols = 64;
    const int64_t rows = mib * 1024 * 1024 / (cols * 4);
    const std::string chunk = RandomChunk();
    for (long t = 0; t < tables; ++t) {
      const std::string name = absl::StrFormat("embedding_%d/embeddings", t);
      if (auto s = AddTable(**w, name, rows, cols, slices, slices, chunk); !s.ok()) return Fail(s);
    }
    for (int d = 0; d < 4; ++d) {
      const std::string name = absl::StrFormat("dense_%d/kernel", d);
      if (auto s = (*w)->Add(name, 1, {512, 512}, std::string_view(chunk).substr(0, 512 * 512 * 4)); !s.ok()) {
        return Fail(s);
      }
    }
    if (auto s = (*w)->Finish(); !s.ok()) return Fail(s);
    return 0;
  }
  if (mode == "one-file" && argc == 7) {
    const int64_t tables = std::stoll(argv[3]), rows = std::stoll(argv[4]), cols = std::stoll(argv[5]),
                  slices = std::stoll(argv[6]);
    auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix), o);
    if (!w.ok()) return Fail(w.status());
    const std::string chunk = RandomChunk();
    for (int64_t t = 0; t < tables; ++t) {
      const std::string name = absl::StrFormat("embedding_%d/embeddings", t);
      if (auto s = AddTable(**w, name, rows, cols, slices, 1, chunk); !s.ok()) return Fail(s);
    }
    if (auto s = (*w)->Finish(); !s.ok()) return Fail(s);
    return 0;
  }
  if (mode == "dense" && argc == 7) {
    const int64_t layers = std::stoll(argv[3]), rows = std::stoll(argv[4]), cols = std::stoll(argv[5]);
    o.num_shards = static_cast<int32_t>(std::stoll(argv[6]));
    auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix), o);
    if (!w.ok()) return Fail(w.status());
    const std::string chunk = RandomChunk();
    std::map<std::string, int64_t> layer_of;  // name -> layer: added in name order, as TF writes
    for (int64_t l = 0; l < layers; ++l) layer_of[absl::StrFormat("dense_%d", l)] = l;
    for (const auto& [name, l] : layer_of) {
      const int32_t file = static_cast<int32_t>(l % o.num_shards);
      std::string bias(static_cast<size_t>(cols * 4), '\0');
      for (size_t i = 0; i < bias.size(); ++i) bias[i] = chunk[(i + static_cast<size_t>(l)) % chunk.size()];
      if (auto s = (*w)->Add(name + "/bias", 1, {cols}, bias, file); !s.ok()) return Fail(s);
      auto stream = (*w)->BeginEntry(name + "/kernel", 1, {rows, cols}, std::nullopt, file);
      if (!stream.ok()) return Fail(stream.status());
      for (int64_t left = rows * cols * 4; left > 0;) {
        const int64_t k = std::min<int64_t>(left, static_cast<int64_t>(chunk.size()) - l);
        if (auto s = stream->Append(std::string_view(chunk).substr(static_cast<size_t>(l), static_cast<size_t>(k))); !s.ok()) {
          return Fail(s);
        }
        left -= k;
      }
      if (auto s = stream->Close(); !s.ok()) return Fail(s);
    }
    if (auto s = (*w)->Finish(); !s.ok()) return Fail(s);
    return 0;
  }
  if (mode == "index-only" && argc == 6) {
    const int64_t gib = std::stoll(argv[3]), tables = std::stoll(argv[4]), slices = std::stoll(argv[5]);
    const int64_t cols = 128;
    const int64_t rows = (gib << 30) / tables / (cols * 4);
    std::map<std::string, std::string> entries;  // key -> serialized entry, in key order
    std::vector<uint64_t> file_size(static_cast<size_t>(slices), 0);
    auto put = [&](const std::string& key, const tfckpt::pb::BundleEntryProto& e) {
      std::string v;
      e.SerializeToString(&v);
      entries[key] = std::move(v);
    };
    for (int64_t t = 0; t < tables; ++t) {
      const std::string name = absl::StrFormat("embedding_%05d/embeddings", t);
      const tfckpt::Shape full{rows, cols};
      auto meta = tfckpt::MakeEntry(1, full, 0, 0, 0, 0);
      int64_t at = 0;
      for (int64_t s = 0; s < slices; ++s) {
        const int64_t n = rows / slices + (s < rows % slices ? 1 : 0);
        const tfckpt::Region r{{at, 0}, {n, cols}};
        const auto ext = tfckpt::ExtentsOf(r, full);
        tfckpt::ExtentsToProto(ext, meta.add_slices());
        const uint64_t size = static_cast<uint64_t>(n * cols * 4);
        put(tfckpt::EncodeSliceKey(name, ext), tfckpt::MakeEntry(1, r.shape, static_cast<int32_t>(s), file_size[s], size, 0));
        file_size[s] += size;
        at += n;
      }
      put(name, meta);
    }
    auto index = tfckpt::Storage::Local().Create(prefix + ".index");
    if (!index.ok()) return Fail(index.status());
    tfckpt::TableWriter table(index->get());
    std::string header;
    tfckpt::MakeHeader(static_cast<int32_t>(slices)).SerializeToString(&header);
    if (auto s = table.Add("", header); !s.ok()) return Fail(s);
    for (const auto& [k, v] : entries) {
      if (auto s = table.Add(k, v); !s.ok()) return Fail(s);
    }
    if (auto s = table.Finish(); !s.ok()) return Fail(s);
    if (auto s = (*index)->Close(); !s.ok()) return Fail(s);
    if (auto s = (*index)->Commit(); !s.ok()) return Fail(s);
    for (int64_t s = 0; s < slices; ++s) {
      const std::string f = tfckpt::DataFileName(prefix, static_cast<int32_t>(s), static_cast<int32_t>(slices));
      const int fd = ::open(f.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(file_size[s])) != 0) {
        return Fail(tfckpt::ErrnoError(f, "cannot create sparse data file", errno));
      }
      ::close(fd);
    }
    return 0;
  }
  std::cerr << "gen_checkpoint: bad arguments\n";
  return 2;
}
