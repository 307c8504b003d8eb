#include "tfckpt/strings.h"
#include "format/bundle/bundle_proto.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tfckpt {

absl::StatusOr<Shape> ShapeFromProto(const pb::TensorShapeProto& p) {
  if (p.unknown_rank()) return absl::DataLossError("shape has unknown rank");
  if (p.dim_size() > 254) return absl::DataLossError(StrCat("shape has ", p.dim_size(), " dimensions"));
  Shape shape;
  shape.reserve(p.dim_size());
  for (const auto& d : p.dim()) shape.push_back(d.size());
  auto n = NumElements(shape);
  if (!n.ok()) return absl::DataLossError(n.status().message());
  return shape;
}

void ShapeToProto(const Shape& shape, pb::TensorShapeProto* p) {
  p->Clear();
  for (int64_t d : shape) p->add_dim()->set_size(d);
}

SliceExtents ExtentsFromProto(const pb::TensorSliceProto& p) {
  SliceExtents e;
  for (const auto& x : p.extent()) {
    const bool has_length = x.has_length_case() == pb::TensorSliceProto::Extent::kLength;
    e.starts.push_back(has_length ? x.start() : 0);
    e.lengths.push_back(has_length ? x.length() : -1);
  }
  return e;
}

void ExtentsToProto(const SliceExtents& e, pb::TensorSliceProto* p) {
  p->Clear();
  for (size_t d = 0; d < e.starts.size(); ++d) {
    auto* x = p->add_extent();
    if (e.lengths[d] >= 0) {
      x->set_start(e.starts[d]);
      x->set_length(e.lengths[d]);
    }
  }
}

pb::BundleEntryProto MakeEntry(int32_t dtype, const Shape& shape, int32_t shard, uint64_t offset, uint64_t size,
                               uint32_t masked_crc) {
  pb::BundleEntryProto e;
  e.set_dtype(static_cast<pb::DataType>(dtype));
  ShapeToProto(shape, e.mutable_shape());
  e.set_shard_id(shard);
  e.set_offset(static_cast<int64_t>(offset));
  e.set_size(static_cast<int64_t>(size));
  e.set_crc32c(masked_crc);
  return e;
}

pb::BundleHeaderProto MakeHeader(int32_t num_shards, bool big_endian) {
  pb::BundleHeaderProto h;
  h.set_num_shards(num_shards);
  h.set_endianness(big_endian ? pb::BundleHeaderProto::BIG : pb::BundleHeaderProto::LITTLE);
  h.mutable_version()->set_producer(1);
  return h;
}

absl::Status CheckVersion(const pb::VersionDef& v) {
  if (v.producer() < 0) return absl::FailedPreconditionError(StrCat("bundle producer version ", v.producer(), " is negative"));
  if (v.min_consumer() > 1) {
    return absl::FailedPreconditionError(
        StrCat("bundle needs a reader of version ", v.min_consumer(), " or newer (we are version 1)"));
  }
  if (std::find(v.bad_consumers().begin(), v.bad_consumers().end(), 1) != v.bad_consumers().end()) {
    return absl::FailedPreconditionError("bundle disallows reader version 1 (bad_consumers)");
  }
  return absl::OkStatus();
}

}  // namespace tfckpt
