// How the audit spreads its window batches over the ranks of a distributed run (docs/cluster.md).
// Units are numbered the same on every rank; they run in rounds, unit units[k * N + r] on rank r in
// round k of N ranks, and after each round rank 0 receives the round's results and consumes them in
// unit order. Because every unit is computed the same way on whichever rank runs it (a window's
// results depend only on its batch and coefficients), the results are the bytes a single process
// would produce, whatever N. With one process it is a plain loop: compute, consume.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/communicator.h"

namespace fca {

// compute(unit) runs on the unit's rank and returns its result; consume(unit, result) runs on rank
// 0 in unit order and returns false to stop after this round (every rank then returns false; true
// once all units are done).
bool run_units(const Communicator& comm, const std::vector<int>& units, const std::function<std::string(int)>& compute,
               const std::function<bool(int, std::string&)>& consume);

// The first window of each batch of `batch` windows out of W: unit u covers [starts[u], starts[u] + batch).
std::vector<int> batch_starts(int W, int batch);

// A list of ints as bytes and back, for broadcasting unit lists.
std::string encode_ints(const std::vector<int>& values);
std::vector<int> decode_ints(const std::string& bytes);

}  // namespace fca
