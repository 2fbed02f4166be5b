// Every test runs with the families installed, as every program does at start-up (families/families.h),
// and with the test binary's families after them: the toy (toy_family/toy_family.h) and skip
// (toy_family/skip_family.h).
#include <gtest/gtest.h>

#include "families/families.h"
#include "toy_family/skip_family.h"
#include "toy_family/toy_family.h"

namespace fca {
namespace {

class FamiliesEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    install_families();
    toy::install_toy_family();
    toy::install_skip_family();
  }
};

// Registered before main() runs (gtest_main), so SetUp runs before the first test.
[[maybe_unused]] ::testing::Environment* const families_environment =
    ::testing::AddGlobalTestEnvironment(new FamiliesEnvironment);

}  // namespace
}  // namespace fca
