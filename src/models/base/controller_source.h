// The shared base of every model family (src/models/base/): the one design of a coefficient (or
// routing) source. Every family's controller record comes from one of three sources:
//   - live: the controller computes the record (and counts each evaluation,
//     count_controller_evaluation in batch_position.h);
//   - recording: live, and each record is also written to a CoefficientTensor (it derives from the
//     family's live source);
//   - replayed: each record is read from a CoefficientTensor; it holds no controller at all.
// A family's source interface derives from ControllerSource and adds the one call its forward pass
// makes per layer (gates, mixing weights, expert choices, selected tokens).
#pragma once

namespace fca {

class ControllerSource {
 public:
  virtual ~ControllerSource() = default;
  // Whether this source runs the controller (live and recording sources): the forward pass then
  // computes the controller's inputs, and backward reaches its parameters. A replayed source does
  // not. What a pass really evaluated is counted by the controller code, never taken from here.
  virtual bool evaluates_controller() const = 0;
};

}  // namespace fca
