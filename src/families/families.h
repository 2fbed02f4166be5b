// The one registration of the model families: install_families() puts each family's entry into
// the table of every layer that has one (models/registry.h, train/train_family.h,
// exec/exec_family.h). Programs, tests, benchmarks and fuzzers call it once at start-up, before
// any command looks a family up.
// Adding a family adds its line to families.cpp (docs/adding-a-family.md).
#pragma once
#include "exec/exec_family.h"
#include "models/registry.h"
#include "train/train_family.h"

namespace fca {

// A family's entry in every table: how it opens (and what it declares for the audit: its settings),
// how it trains, how it is measured (and its counters and exec settings). A family folder supplies
// the three; families.cpp, or a program that brings a family of its own (the test binary's toy and
// skip), installs them with one call.
struct Family {
  ModelFamily model;
  TrainFamily train;
  ExecFamily exec;
};
// Installs the three entries; refuses entries whose names differ (naming them), and a name used
// twice.
void install_family(Family family);

// Idempotent; not thread-safe (call it before starting threads).
void install_families();

}  // namespace fca
