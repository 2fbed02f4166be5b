#include "families/families.h"

#include <utility>

#include "core/error.h"

#include "models/exit/auditable.h"
#include "models/exit/exec/measure.h"
#include "models/exit/train/trainable.h"
#include "models/gated/auditable.h"
#include "models/gated/exec/measure.h"
#include "models/gated/train/trainable.h"
#include "models/hyper/auditable.h"
#include "models/hyper/exec/measure.h"
#include "models/hyper/train/trainable.h"
#include "models/mod/auditable.h"
#include "models/mod/exec/measure.h"
#include "models/mod/train/trainable.h"
#include "models/moe/auditable.h"
#include "models/moe/exec/measure.h"
#include "models/moe/train/trainable.h"
#include "models/mudd/auditable.h"
#include "models/mudd/exec/measure.h"
#include "models/mudd/train/trainable.h"

namespace fca {

void install_family(Family family) {
  if (family.train.name != family.model.name || family.exec.name != family.model.name)
    throw Error("a family's entries name different families: \"" + family.model.name + "\" (model), \"" + family.train.name +
                "\" (train), \"" + family.exec.name + "\" (exec)");
  add_model_family(std::move(family.model));
  add_train_family(std::move(family.train));
  add_exec_family(std::move(family.exec));
}

void install_families() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  // The order is the order of --arch's help and of messages listing the families; the first is the
  // default of `fca train --arch` and of a study variant's "arch".
  install_family({gated_model_family(), gated_train_family(), gated_exec_family()});
  install_family({mudd_model_family(), mudd_train_family(), mudd_exec_family()});
  install_family({moe_model_family(), moe_train_family(), moe_exec_family()});
  install_family({mod_model_family(), mod_train_family(), mod_exec_family()});
  install_family({hyper_model_family(), hyper_train_family(), hyper_exec_family()});
  install_family({exit_model_family(), exit_train_family(), exit_exec_family()});
}

}  // namespace fca
