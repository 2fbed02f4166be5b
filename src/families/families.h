// The one registration of the model families: install_families() puts each family's entry into
// the table of every layer that has one (models/registry.h, train/train_family.h,
// exec/exec_family.h). Programs, tests, benchmarks and fuzzers call it once at start-up, before
// any command looks a family up.
// Adding a family adds its lines to families.cpp (docs/adding-a-family.md).
#pragma once

namespace fca {

// Idempotent; not thread-safe (call it before starting threads).
void install_families();

}  // namespace fca
