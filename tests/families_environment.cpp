// Every test runs with the families installed, as every program does at start-up (families/families.h),
// and with the toy family (toy_family/toy_family.h) after them.
#include <gtest/gtest.h>

#include "families/families.h"
#include "toy_family/toy_family.h"

namespace fca {
namespace {

class FamiliesEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    install_families();
    toy::install_toy_family();
  }
};

// Registered before main() runs (gtest_main), so SetUp runs before the first test.
[[maybe_unused]] ::testing::Environment* const families_environment =
    ::testing::AddGlobalTestEnvironment(new FamiliesEnvironment);

}  // namespace
}  // namespace fca
