#include "models/capabilities.h"

#include "core/error.h"

namespace fca {

void set_controller_setting(AuditableModel& model, const std::string& key, double value) {
  ControllerSetting* setting = capability<ControllerSetting>(model);
  if (setting == nullptr) throw Error(model.family() + " models have no controller setting \"" + key + "\"");
  setting->set_controller_setting(key, value);
}

std::string controller_setting_of(const AuditableModel& model) {
  const ControllerSetting* setting = capability<ControllerSetting>(model);
  return setting != nullptr ? setting->controller_setting() : std::string();
}

}  // namespace fca
