#include "core/json.h"

#include <stdexcept>
#include <string>

namespace fca::detail {

void json_assertion_failed(const char* condition) {
  throw std::out_of_range(std::string("a JSON field or element that is not there (") + condition + ")");
}

}  // namespace fca::detail
