// A study config as `fca study` reads it, before any work: every key, type, range and name.
#include "core/json.h"

#include "fuzz_util.h"
#include "study/study.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (j.is_discarded()) return 0;  // fca study reports malformed JSON itself (tested)
  fca::fuzz::expect_ok_or_error([&] { (void)fca::parse_study_config(j, "input"); });
  return 0;
}
