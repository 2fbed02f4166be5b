// fca's one error type. Library code throws fca::Error with a message that names the file, tensor
// or flag and says what was expected and what was found; only main() turns it into an exit code.
#pragma once
#include <stdexcept>
#include <string>

namespace fca {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throws Error(message) when the condition does not hold. For input validation, never asserts.
inline void check(bool condition, const std::string& message) {
  if (!condition) throw Error(message);
}

}  // namespace fca
