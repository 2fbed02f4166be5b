#include "core/exec_counters.h"

namespace fca {
namespace {

std::vector<FamilyCounter>& registered() {
  static std::vector<FamilyCounter> counters;
  return counters;
}

}  // namespace

void add_family_counter(const FamilyCounter& counter) {
  for (const FamilyCounter& c : registered()) {
    if (c.name != counter.name) continue;
    if (c.description == counter.description) return;  // the same declaration again (idempotent installs)
    throw Error("family counter \"" + counter.name + "\" is declared twice, as \"" + c.description + "\" and as \"" +
                counter.description + "\"");
  }
  const size_t capacity = ExecCounters{}.family.size();
  if (registered().size() >= capacity)
    throw Error("family counter \"" + counter.name + "\": ExecCounters holds " + std::to_string(capacity) +
                " family counters, and every one is taken");
  if (counter.name.empty()) throw Error("a family counter needs a name");
  registered().push_back(counter);
}

const std::vector<FamilyCounter>& family_counters() { return registered(); }

int family_counter_index(const std::string& name) {
  std::string known;
  for (size_t i = 0; i < registered().size(); ++i) {
    if (registered()[i].name == name) return int(i);
    known += (known.empty() ? "" : ", ") + registered()[i].name;
  }
  throw Error("no family declares the counter \"" + name + "\" (declared: " + (known.empty() ? "none" : known) + ")");
}

}  // namespace fca
