// What the commands find and report about tensors, shared by the library's checks and the
// command reports (commands.h): statistics of a tensor's values, and how two tensors'
// values differ. (A problem found in a checkpoint is a Finding, status.h.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tfckpt {

struct TensorStats {
  bool numeric = false;   // false for string, variant and complex tensors
  int64_t count = 0;
  long double min = 0, max = 0;  // over finite values; NaN when there are none
  double mean = 0, std = 0;  // population standard deviation, over finite values
  int64_t nan = 0, inf = 0, zeros = 0;
};

// How the values of two tensors of one shape differ (validate --against --report).
struct ValueDifference {
  std::string tensor;      // its name
  int64_t elements = 0;    // elements compared: the tensors' size
  int64_t differing = 0;   // elements that differ: bitwise, or by more than the tolerance
  // A differing element: its index in the full tensor and both values as text.
  struct Element {
    std::vector<int64_t> index;
    std::string new_value, old_value;
  };
  Element first;           // the first differing element in row-major order
  // Numeric dtypes (floating-point, integer, bool), over the differing elements: the
  // largest |new - old| (infinite when one side is NaN) and the element where it is (the
  // first in row-major order on a tie), and the largest |new - old| / |old| (infinite
  // when old is 0).
  bool numeric = false;
  double max_abs = 0, max_rel = 0;
  Element max;
};

// A node of a TF2 object graph (inspect --tree).
struct ObjectGraphNode {
  std::string path;  // "model/layer-1/kernel", "" for the root
  struct Child {
    int node_id = 0;
    std::string local_name;
  };
  struct Attribute {
    std::string name, full_name, checkpoint_key;
  };
  struct SlotVariable {
    int original_variable_node_id = 0;
    std::string slot_name;
    int slot_variable_node_id = 0;
  };
  std::vector<Child> children;
  std::vector<Attribute> attributes;
  std::vector<SlotVariable> slot_variables;
};

}  // namespace tfckpt
