// The shared base of every model family (src/models/base/): one named parameter tensor inside a
// flat parameter buffer, the unit of every family's tensor layout (loading, saving, the optimizer,
// its state file, the gradient checks).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace fca {

// One named parameter tensor inside the flat parameter buffer.
struct TensorSlot {
  std::string name;
  std::vector<int64_t> shape;
  size_t offset;      // in elements from the start of the buffer
  size_t numel;
  bool weight_decay;  // AdamW decays rank-2 tensors only (docs/model.md's "2-D weight matrices")
};

}  // namespace fca
