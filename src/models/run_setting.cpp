#include "models/run_setting.h"

#include <algorithm>

namespace fca {

std::string run_setting_flag(const std::string& key) {
  std::string flag = "--" + key;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

}  // namespace fca
