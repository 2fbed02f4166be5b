// fca's one way to include nlohmann/json. The library's internal assertions (a const operator[] on
// a key that is not there, for one) are undefined behaviour in a release build; here they throw
// std::out_of_range, so that a malformed input file is reported as an error instead of crashing.
// (Inside the library's few noexcept functions a failed assertion still ends the program.) Every
// fca source includes this header rather than <nlohmann/json.hpp>, so all see one definition.
#pragma once

namespace fca::detail {
[[noreturn]] void json_assertion_failed(const char* condition);
}

#ifndef JSON_ASSERT
#define JSON_ASSERT(condition) ((condition) ? static_cast<void>(0) : ::fca::detail::json_assertion_failed(#condition))
#endif
#include <nlohmann/json.hpp>
