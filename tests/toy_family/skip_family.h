// The skip family (skip_model.h) in fca's family tables, with its record kind (skip_kind.h), its
// audit setting (--skip-gate-threshold), its exec sweep (--skip-gate-thresholds) and its counter
// (skipped_rows). Idempotent; called by the test binary's environment after install_toy_family.
#pragma once

namespace fca::toy {

void install_skip_family();

}  // namespace fca::toy
