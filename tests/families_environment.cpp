// Every test runs with the families installed, as every program does at start-up (families/families.h).
#include <gtest/gtest.h>

#include "families/families.h"

namespace fca {
namespace {

class FamiliesEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { install_families(); }
};

// Registered before main() runs (gtest_main), so SetUp runs before the first test.
[[maybe_unused]] ::testing::Environment* const families_environment =
    ::testing::AddGlobalTestEnvironment(new FamiliesEnvironment);

}  // namespace
}  // namespace fca
