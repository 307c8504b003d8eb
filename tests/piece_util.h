// Test helper over an opened checkpoint (doctest assertions).
#pragma once

#include <doctest/doctest.h>

#include <string>

#include "tfckpt/checkpoint.h"

namespace tfckpt::testing {

// The bytes of tensor `name` of `c`, stored as one piece (its only slice), CRC-checked.
inline std::string OnlyPiece(const tfckpt::Checkpoint& c, const std::string& name) {
  const tfckpt::TensorEntry* t = c.Find(name);
  REQUIRE(t != nullptr);
  REQUIRE(t->slices.size() == 1);
  auto b = c.Read(*t, t->slices[0]);
  REQUIRE(b.ok());
  return std::string(b->data);
}

}  // namespace tfckpt::testing
