// Conversions between the protobuf messages of the index (docs/FORMAT.md §b) and our types.
#pragma once

#include "absl/status/statusor.h"
#include "tensor_bundle.pb.h"
#include "tfckpt/ordered_code.h"
#include "tfckpt/region.h"

namespace tfckpt {

// The shape of a TensorShapeProto; error for unknown rank or negative dims (TF rejects
// both in bundles) or an element count that overflows.
absl::StatusOr<Shape> ShapeFromProto(const pb::TensorShapeProto& p);
void ShapeToProto(const Shape& shape, pb::TensorShapeProto* p);

SliceExtents ExtentsFromProto(const pb::TensorSliceProto& p);
// A length of -1 becomes an Extent without length (TF's "full dimension").
void ExtentsToProto(const SliceExtents& e, pb::TensorSliceProto* p);

// The entry TensorFlow writes for a stored tensor: fields in order, zeros omitted, shape
// always present.
pb::BundleEntryProto MakeEntry(int32_t dtype, const Shape& shape, int32_t shard, uint64_t offset, uint64_t size,
                               uint32_t masked_crc);

// The header TensorFlow writes: {num_shards, endianness, version {producer: 1}}.
pb::BundleHeaderProto MakeHeader(int32_t num_shards, bool big_endian = false);

// TF's reader version check (docs/FORMAT.md §b.1).
absl::Status CheckVersion(const pb::VersionDef& v);

}  // namespace tfckpt
