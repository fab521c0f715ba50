// A Model is a named DAG of modules. Invariants after loading (LoadModel):
// module names are unique, every module has at least one layer, `inputs`
// point to existing modules, and modules are stored in a topological order
// (every input index is smaller than the module's own), so a forward pass is
// a walk from front to back. Plain value type; safe to share read-only.
#pragma once

#include <string>
#include <vector>

#include "loom/spec/module.h"

namespace loom {

struct Model {
  std::string name;
  std::string description;
  std::string source;     // "zoo:NAME.yaml" or the file path it was loaded from
  std::string hf_config;  // the Hugging Face config.json it was translated from; "" for Loom YAML
  // Non-empty: why Loom's runtime cannot compute this model as its original
  // does (a Hugging Face family read for planning only: Gemma 3's norms,
  // window attention, tilings); `loom run` refuses it naming this.
  std::string planning_only;
  std::vector<Module> modules;
  // The token id that stands in input_ids for one image feature (LLaVA's
  // config.json `image_token_index`; LlavaModel.get_placeholder_mask finds
  // the images by it), or -1 where the model names none. `loom run` refuses
  // a sample whose image_token_id is another.
  int64_t image_token_id = -1;
  // The files its modules' `from:` read, at any depth: inputs too, which no
  // output of a command may overwrite (cli/output_file.h).
  std::vector<std::string> inherited_files;

  // Index of the module called `name`, or -1.
  int FindModule(const std::string& name) const;
  int num_layers() const;
};

// Loads a model from a built-in zoo name or a YAML file path. Throws loom::Error
// naming the file, line and field of any problem, or listing the zoo names
// when `name_or_path` is neither.
// The most layers a model may have (a layer entry's `count` included): real
// models have a few hundred; past a few thousand a search takes minutes.
inline constexpr int64_t kMaxModelLayers = 4096;

Model LoadModel(const std::string& name_or_path);
// Parses model YAML text; `file` names it in errors. `from:` references are
// resolved as zoo names or as paths relative to `file`'s folder.
Model ParseModel(const std::string& yaml_text, const std::string& file);

}  // namespace loom
