// fca convert: a MUDD folder whose weights are BF16 or F16 (the public checkpoints) into one whose
// weights are F32, once, so that inference can use them in place from the mapped file
// (MuddModel::load in place) instead of upcasting a copy in every process.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/common.h"
#include "core/error.h"
#include "core/file_io.h"
#include "models/mudd/model.h"
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
    if (family_of(f->model).name != "mudd") throw Error(f->model + ": convert takes a MUDD model folder");
    std::error_code same_error;
    if (std::filesystem::equivalent(f->model, f->out, same_error) && !same_error)
      throw Error("--out " + f->out + " is the model folder itself; give another folder");
    ensure_folder(f->out, "--out");
    const MuddModel<float> model = MuddModel<float>::load(f->model);  // every tensor upcast into one F32 buffer
    model.save(f->out, {{"converted_from_sha256", model.content_hash()}});
    const std::string tokenizer = f->model + "/tokenizer.json";
    if (file_exists(tokenizer)) {
      std::error_code ec;
      std::filesystem::copy_file(tokenizer, f->out + "/tokenizer.json", std::filesystem::copy_options::overwrite_existing, ec);
      if (ec) throw Error(f->out + "/tokenizer.json: cannot copy " + tokenizer + " there (" + ec.message() + ")");
    }
    std::printf("written: %s (F32, %zu parameters; from %s, sha256 %s)\n", f->out.c_str(), model.parameter_count(),
                f->model.c_str(), model.content_hash().c_str());
  });
}

}  // namespace fca::cli
