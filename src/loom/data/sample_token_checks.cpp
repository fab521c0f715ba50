#include "loom/data/sample_token_checks.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "loom/data/jsonl_source.h"
#include "loom/error.h"
#include "loom/input_file.h"

namespace loom {

namespace {

// The vocabularies the loss module reads and scores: its embedding's and its
// head's (Mllama's embedding reads 8 image tokens more than its head scores).
struct Vocabularies {
  int64_t input = 0, scored = 0;  // 0: the module has no such table
};

Vocabularies LossVocabularies(const Model& model) {
  const Layer& embedding = model.modules.back().layers.front();
  const Layer& head = model.modules.back().layers.back();
  Vocabularies v;
  v.input = embedding.kind == LayerKind::kEmbedding ? embedding.vocab : 0;
  v.scored = head.kind == LayerKind::kLmHead ? head.vocab : v.input;
  return v;
}

// The images stand as the model's image token: transformers' LLaVA finds
// them by config.image_token_id (LlavaModel.get_placeholder_mask), so a model
// trained on another id is one transformers cannot feed ("Image features and
// image tokens do not match"). A line without images holding that id is
// refused too: beside images in one batch transformers would count it as an
// image's place (loom prepare refuses such lines as well).
void CheckImageTokens(const Model& model, const SampleTokens& t) {
  if (model.image_token_id < 0) return;
  if (t.image_token_id >= 0 && t.image_token_id != model.image_token_id) {
    throw Error(
        fmt::format("{}: image_token_id is {}, but model {} stands an image feature as token {} (its "
                    "image_token_id, from {}): give that id",
                    t.where, t.image_token_id, model.name, model.image_token_id,
                    model.hf_config.empty() ? model.source : model.hf_config + "'s image_token_index"));
  }
  if (t.image_token_id >= 0) return;
  const auto at = std::find(t.input_ids.begin(), t.input_ids.end(), model.image_token_id);
  if (at != t.input_ids.end()) {
    throw Error(
        fmt::format("{}: input_ids[{}] is {}, model {}'s image token, but the line has no images "
                    "(image_token_id and pixel_values); valid: other ids, or the line's images",
                    t.where, at - t.input_ids.begin(), model.image_token_id, model.name));
  }
}

}  // namespace

void CheckSampleTokens(const Model& model, const SampleTokens& t) {
  const Vocabularies v = LossVocabularies(model);
  for (const auto* list : {&t.input_ids, &t.labels}) {
    const bool ids = list == &t.input_ids;
    const int64_t limit = ids ? v.input : v.scored;
    for (size_t i = 0; i < list->size(); ++i) {
      if ((*list)[i] >= limit) {
        throw Error(fmt::format("{}: {}[{}] is {}, past the {} vocabulary of {}", t.where, ids ? "input_ids" : "labels",
                                i, (*list)[i], ids ? "model's" : "LM head's", limit));
      }
    }
  }
  CheckImageTokens(model, t);
}

void CheckJsonlTokens(const Model& model, const std::string& path) {
  InputLines in(path, "JSONL sample");
  const std::string dir = std::filesystem::path(path).parent_path().string();
  std::string line;
  while (in.Next(line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const Sample s = ParseJsonlSample(line, fmt::format("{}:{}", path, in.line_number()), dir.empty() ? "." : dir);
    if (s.tokens) CheckSampleTokens(model, *s.tokens);
  }
}

}  // namespace loom
