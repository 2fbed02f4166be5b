// Writes a MUDD folder with random weights of the shapes a config.json describes (e.g. the real
// MUDDPythia-1.4B config), for load and speed measurements where the real checkpoint cannot be
// downloaded. Usage: fca_make_random_mudd CONFIG_DIR OUT_DIR [SEED]
// The weights follow the training initialisation (models/mudd/model.h); a forward pass costs the
// same as with trained weights.
#include <cstdio>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "models/mudd/model.h"

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: %s CONFIG_DIR OUT_DIR [SEED]\n", argv[0]);
    return 2;
  }
  try {
    const fca::MuddConfig config = fca::MuddConfig::load(argv[1]);
    const uint64_t seed = argc == 4 ? std::stoull(argv[3]) : 1;
    const auto model = fca::MuddModel<float>::initialized(config, seed);
    std::printf("%zu parameters; writing %s\n", model.parameter_count(), argv[2]);
    model.save(argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
