// The toy family (toy_model.h): installed by the test binary after fca's own families
// (families_environment.cpp), so that every suite over model_families() runs it too.
#pragma once

namespace fca::toy {

// Adds the toy family's entries to the model, train and exec tables; idempotent. Call it after
// install_families(): the first family installed is the default --arch.
void install_toy_family();

}  // namespace fca::toy
