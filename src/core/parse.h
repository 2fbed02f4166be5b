// Numbers read from text (metadata fields, list flags): the whole text must be the number, and it
// must lie in the caller's range before it is narrowed. Errors say `what` and what was found.
#pragma once
#include <cstdint>
#include <string>

namespace fca {

int64_t parse_integer(const std::string& text, const std::string& what, int64_t low, int64_t high);
// Finite and in [low, high]; underflow and overflow are errors, not 0 or infinity.
double parse_number(const std::string& text, const std::string& what, double low, double high);
// A double for messages: the shortest text that reads back exactly ("-1e-09", "0.5", "inf"), never
// std::to_string's fixed six decimals, which print a small value as "-0.000000".
std::string number_text(double v);

}  // namespace fca
