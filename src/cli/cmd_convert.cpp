// fca convert: a checkpoint whose weights are BF16 or F16 (the public MUDD folders) into one whose
// weights are F32, once, by its family's ModelFamily::convert.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/common.h"
#include "core/error.h"
#include "core/file_io.h"
#include "models/registry.h"

namespace fca::cli {

void add_convert_command(CLI::App& app) {
  struct Flags {
    std::string model, out;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("convert", "Write a MUDD folder's weights as F32 (model.safetensors), once");
  cmd->add_option("--model", f->model, "MUDD model folder (BF16, F16 or F32 weights; one file or shards)")->required();
  cmd->add_option("--out", f->out, "Output folder (config.json, model.safetensors, tokenizer.json when present)")->required();
  cmd->callback([f] {
    const ModelFamily& family = family_of(f->model);
    if (!family.convert)
      throw Error(f->model + ": a " + family.name + " checkpoint needs no conversion (convert takes a model folder whose weights are "
                  "BF16 or F16)");
    std::error_code same_error;
    if (std::filesystem::equivalent(f->model, f->out, same_error) && !same_error)
      throw Error("--out " + f->out + " is the model folder itself; give another folder");
    ensure_folder(f->out, "--out");
    std::printf("written: %s (%s)\n", f->out.c_str(), family.convert(f->model, f->out).c_str());
  });
}

}  // namespace fca::cli
