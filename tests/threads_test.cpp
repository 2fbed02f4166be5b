// UnitRuns (core/threads.h): every unit taken exactly once, whatever the team's size against the
// runs' count and however the units divide.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <vector>

#include "core/error.h"
#include "core/threads.h"

namespace fca {
namespace {

TEST(UnitRuns, EveryUnitIsTakenExactlyOnce) {
  for (const int runs_for : {1, 2, 3, 4})
    for (int team = 1; team <= runs_for; ++team)
      for (const int units : {0, 1, 2, 3, 5, 7, 64, 1000, 100003}) {
        SCOPED_TRACE(std::to_string(runs_for) + " runs, a team of " + std::to_string(team) + ", " +
                     std::to_string(units) + " units");
        UnitRuns runs(runs_for);
        runs.reset(units);
        std::vector<std::atomic<int>> taken(static_cast<size_t>(units));
#pragma omp parallel num_threads(team)
        run_units(runs, omp_get_thread_num(), [&](int unit) { taken[size_t(unit)].fetch_add(1); });
        int wrong = 0;
        for (const auto& t : taken) wrong += t.load() != 1;
        EXPECT_EQ(wrong, 0);
        // Drained: nothing is left for anyone.
        int unit = -1;
        for (int me = 0; me < runs_for; ++me) EXPECT_FALSE(runs.next(me, unit));
      }
}

TEST(UnitRuns, ANegativeCountIsRefused) {
  UnitRuns runs(2);
  EXPECT_THROW(runs.reset(-1), Error);
}

}  // namespace
}  // namespace fca
