#include "loom/data/jsonl_source.h"
#include "loom/path_kind.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "loom/data/rng.h"
#include "loom/error.h"
#include "loom/input_file.h"
#include "loom/weights/safetensors.h"

namespace loom {

namespace {

using nlohmann::json;

// Per-sample sizes far past any real input (a 65,536-pixel side, 100,000
// frames, 2^24 text tokens in one document, a day of audio) are typos: with
// them one sample alone would hold more tokens than any cluster trains.
constexpr int64_t kMaxSidePx = 65536, kMaxFrames = 100000, kMaxTextTokens = int64_t{1} << 24;
constexpr double kMaxAudioS = 86400;

int64_t PositiveIntAt(const json& j, const std::string& where, const std::string& field, int64_t max) {
  if (!j.is_number_integer() || j.get<int64_t>() <= 0) {
    throw Error(fmt::format("{}: {}: expected an integer > 0, got {}", where, field, j.dump()));
  }
  if (j.is_number_unsigned() ? j.get<uint64_t>() > static_cast<uint64_t>(max) : j.get<int64_t>() > max) {
    throw Error(fmt::format("{}: {}: at most {}, got {}", where, field, max, j.dump()));
  }
  return j.get<int64_t>();
}

void ReadDoc(const json& d, const std::string& where, const std::string& path, Sample& s) {
  static const std::vector<std::string> kKeys = {"text_tokens", "images", "videos", "audio_s", "docs"};
  if (!d.is_object()) {
    throw Error(fmt::format("{}: {}: expected a document object ({{\"text_tokens\": ..., \"images\": ...}}), got {}",
                            where, path.empty() ? "sample" : path.substr(0, path.size() - 1), d.dump()));
  }
  for (auto it = d.begin(); it != d.end(); ++it) {
    if (std::find(kKeys.begin(), kKeys.end(), it.key()) == kKeys.end()) {
      throw Error(
          fmt::format("{}: {}{}: unknown field; valid: text_tokens, images ([[w, h], ...]), "
                      "videos ([[frames, w, h], ...]), audio_s ([seconds, ...]), docs",
                      where, path, it.key()));
    }
  }
  int64_t text = 0;
  if (d.contains("text_tokens")) {
    const json& t = d["text_tokens"];
    if (!t.is_number_integer() || t.get<int64_t>() < 0) {
      throw Error(fmt::format("{}: {}text_tokens: expected an integer >= 0, got {}", where, path, t.dump()));
    }
    if (t.get<int64_t>() > kMaxTextTokens) {
      throw Error(
          fmt::format("{}: {}text_tokens: at most {} in one document, got {}", where, path, kMaxTextTokens, t.dump()));
    }
    text = t.get<int64_t>();
  }
  int doc = s.AddDoc(text);
  if (d.contains("images")) {
    if (!d["images"].is_array()) {
      throw Error(fmt::format("{}: {}images: expected a list [[width_px, height_px], ...], got {}", where, path,
                              d["images"].dump()));
    }
    for (size_t i = 0; i < d["images"].size(); ++i) {
      const json& im = d["images"][i];
      std::string f = fmt::format("{}images[{}]", path, i);
      if (!im.is_array() || im.size() != 2) {
        throw Error(fmt::format("{}: {}: expected [width_px, height_px]", where, f));
      }
      s.images.push_back({PositiveIntAt(im[0], where, f + "[0]", kMaxSidePx),
                          PositiveIntAt(im[1], where, f + "[1]", kMaxSidePx), doc});
    }
  }
  if (d.contains("videos")) {
    if (!d["videos"].is_array()) {
      throw Error(fmt::format("{}: {}videos: expected a list [[frames, width_px, height_px], ...], got {}", where, path,
                              d["videos"].dump()));
    }
    for (size_t i = 0; i < d["videos"].size(); ++i) {
      const json& v = d["videos"][i];
      std::string f = fmt::format("{}videos[{}]", path, i);
      if (!v.is_array() || v.size() != 3) {
        throw Error(fmt::format("{}: {}: expected [frames, width_px, height_px]", where, f));
      }
      s.videos.push_back({PositiveIntAt(v[0], where, f + "[0]", kMaxFrames),
                          PositiveIntAt(v[1], where, f + "[1]", kMaxSidePx),
                          PositiveIntAt(v[2], where, f + "[2]", kMaxSidePx), doc});
    }
  }
  if (d.contains("audio_s")) {
    if (!d["audio_s"].is_array()) {
      throw Error(
          fmt::format("{}: {}audio_s: expected a list [seconds, ...], got {}", where, path, d["audio_s"].dump()));
    }
    for (size_t i = 0; i < d["audio_s"].size(); ++i) {
      const json& a = d["audio_s"][i];
      if (!a.is_number() || !(a.get<double>() > 0) || !(a.get<double>() <= kMaxAudioS)) {
        throw Error(fmt::format("{}: {}audio_s[{}]: expected seconds > 0 and at most {}, got {}", where, path, i,
                                kMaxAudioS, a.dump()));
      }
      s.audios.push_back({a.get<double>(), doc});
    }
  }
}

}  // namespace

namespace {

constexpr int64_t kMaxTokenId = (int64_t{1} << 31) - 1;

// A list of token ids (labels: also -100, not scored).
std::vector<int64_t> TokenList(const json& v, const std::string& where, const std::string& field, bool labels) {
  if (!v.is_array() || v.empty()) {
    throw Error(fmt::format("{}: {}: expected a non-empty list of token ids", where, field));
  }
  std::vector<int64_t> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const json& t = v[i];
    const bool ok = t.is_number_integer() && t.get<int64_t>() <= kMaxTokenId &&
                    (t.get<int64_t>() >= 0 || (labels && t.get<int64_t>() == -100));
    if (!ok) {
      throw Error(fmt::format("{}: {}[{}]: expected a token id from 0 to {}{}, got {}", where, field, i, kMaxTokenId,
                              labels ? " or -100 (not scored)" : "", t.dump().substr(0, 40)));
    }
    out.push_back(t.get<int64_t>());
  }
  return out;
}

// The images of a tokenized sample (SampleTokens): the runs of image_token_id
// in its input ids, and the pixel_values tensor's header, one image per run.
void ReadTokenizedImages(const json& j, const std::string& where, const std::string& dir, SampleTokens& tokens,
                         Sample& s) {
  if (!j.contains("image_token_id") || !j.contains("pixel_values")) {
    throw Error(
        fmt::format("{}: {}: give image_token_id and pixel_values together (the id standing for an image "
                    "feature in input_ids, the safetensors file of the images' pixels)",
                    where, j.contains("image_token_id") ? "pixel_values" : "image_token_id"));
  }
  const json& id = j["image_token_id"];
  if (!id.is_number_integer() || id.get<int64_t>() < 0) {
    throw Error(fmt::format("{}: image_token_id: expected a token id >= 0, got {}", where, id.dump().substr(0, 40)));
  }
  tokens.image_token_id = id.get<int64_t>();
  for (size_t p = 0; p < tokens.input_ids.size(); ++p) {
    if (tokens.input_ids[p] != tokens.image_token_id) continue;
    if (p > 0 && tokens.input_ids[p - 1] == tokens.image_token_id) {
      ++tokens.image_runs.back().second;
    } else {
      tokens.image_runs.push_back({static_cast<int64_t>(p), 1});
    }
  }
  if (!j["pixel_values"].is_string() || j["pixel_values"].get<std::string>().empty()) {
    throw Error(fmt::format("{}: pixel_values: expected the path of a safetensors file", where));
  }
  const std::filesystem::path file(j["pixel_values"].get<std::string>());
  tokens.pixel_values_file = file.is_absolute() ? file.string() : (std::filesystem::path(dir) / file).string();
  const weights::SafetensorsFile pixels(tokens.pixel_values_file);  // the header only
  const weights::TensorInfo* t = pixels.Find("pixel_values");
  if (!t || t->shape.size() != 4 || t->shape[0] != static_cast<int64_t>(tokens.image_runs.size())) {
    throw Error(fmt::format(
        "{}: pixel_values: {} holds {}; expected a tensor 'pixel_values' [images, channels, height, width] of {} "
        "images, one per run of image_token_id {} in input_ids",
        where, tokens.pixel_values_file,
        t ? fmt::format("'pixel_values' of {} dimensions, first {}", t->shape.size(),
                        t->shape.empty() ? 0 : t->shape[0])
          : "no tensor 'pixel_values'",
        tokens.image_runs.size(), tokens.image_token_id));
  }
  // What the runtime reads (batch_loader.cpp): found here, at the line,
  // not by whichever worker draws the sample steps later.
  if (t->dtype != weights::DType::kF32 && t->dtype != weights::DType::kBF16 && t->dtype != weights::DType::kF16) {
    throw Error(fmt::format("{}: pixel_values: {} holds 'pixel_values' as {}; expected F32, BF16 or F16", where,
                            tokens.pixel_values_file, weights::DTypeName(t->dtype)));
  }
  tokens.pixel_channels = t->shape[1];
  for (size_t i = 0; i < tokens.image_runs.size(); ++i) {
    s.images.push_back({t->shape[3], t->shape[2], 0});
  }
}

// A tokenized sample: {"input_ids": [...], "labels": [...]} (labels optional:
// the input ids), one document; with images, also image_token_id and
// pixel_values (ReadTokenizedImages): the document's text is its input ids
// less the image tokens, which the model's image features take the place of.
Sample ParseTokenizedSample(const json& j, const std::string& where, const std::string& dir) {
  for (const auto& [key, value] : j.items()) {
    if (key != "input_ids" && key != "labels" && key != "image_token_id" && key != "pixel_values") {
      throw Error(
          fmt::format("{}: {}: not read beside input_ids (a tokenized sample has input_ids, labels, "
                      "image_token_id and pixel_values; documents with token ids are not read yet)",
                      where, key));
    }
  }
  auto tokens = std::make_shared<SampleTokens>();
  tokens->input_ids = TokenList(j["input_ids"], where, "input_ids", false);
  tokens->labels = j.contains("labels") ? TokenList(j["labels"], where, "labels", true) : tokens->input_ids;
  if (tokens->labels.size() != tokens->input_ids.size()) {
    throw Error(fmt::format("{}: labels: {} entries for {} input_ids; give one label per token (-100: not scored)",
                            where, tokens->labels.size(), tokens->input_ids.size()));
  }
  tokens->length = static_cast<int64_t>(tokens->input_ids.size());
  tokens->scored = std::count_if(tokens->labels.begin() + 1, tokens->labels.end(), [](int64_t l) { return l != -100; });
  tokens->where = where;
  Sample s;
  if (j.contains("image_token_id") || j.contains("pixel_values")) ReadTokenizedImages(j, where, dir, *tokens, s);
  int64_t image_tokens = 0;
  for (const auto& run : tokens->image_runs) image_tokens += run.second;
  s.AddDoc(static_cast<int64_t>(tokens->input_ids.size()) - image_tokens);
  s.tokens = std::move(tokens);
  return s;
}

}  // namespace

Sample ParseJsonlSample(const std::string& line, const std::string& where, const std::string& dir) {
  json j;
  // A key given twice in one object would be last-wins in silence (YAML's
  // reader refuses it): the parser's callback sees each key of each object.
  std::vector<std::set<std::string>> keys;  // per open object
  std::string repeated;
  const json::parser_callback_t once = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) keys.emplace_back();
    if (event == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (event == json::parse_event_t::key && !keys.empty() && !keys.back().insert(parsed.get<std::string>()).second &&
        repeated.empty()) {
      repeated = parsed.get<std::string>();
    }
    return true;
  };
  try {
    j = json::parse(line, once);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number past a double
    throw Error(fmt::format("{}: malformed JSON: {}", where, e.what()));
  }
  if (!repeated.empty()) {
    throw Error(fmt::format("{}: {}: given twice in one object; give each field once", where, repeated));
  }
  if (!j.is_object()) {
    throw Error(fmt::format("{}: expected one JSON object per line", where));
  }
  if (j.contains("input_ids")) return ParseTokenizedSample(j, where, dir);
  for (const char* key : {"labels", "image_token_id", "pixel_values"}) {  // a tokenized sample's, without its ids
    if (j.contains(key)) {
      throw Error(
          fmt::format("{}: input_ids: missing; a tokenized sample (this line has {}) is {{\"input_ids\": "
                      "[...], \"labels\": [...]}}, labels, image_token_id and pixel_values optional",
                      where, key));
    }
  }
  Sample s;
  if (j.contains("docs")) {
    if (!j["docs"].is_array() || j["docs"].empty()) {
      throw Error(fmt::format("{}: docs: expected a non-empty list of documents", where));
    }
    if (j.size() != 1) {
      throw Error(fmt::format("{}: give either `docs` or the fields of one document, not both", where));
    }
    for (size_t i = 0; i < j["docs"].size(); ++i) {
      ReadDoc(j["docs"][i], where, fmt::format("docs[{}].", i), s);
    }
  } else {
    ReadDoc(j, where, "", s);
  }
  if (s.text_tokens == 0 && s.images.empty() && s.videos.empty() && s.audios.empty()) {
    throw Error(fmt::format("{}: empty sample: no text tokens, images, videos or audio", where));
  }
  return s;
}

JsonlSource::JsonlSource(const std::string& path) {
  InputLines in(path, "JSONL sample");
  std::string line;
  while (in.Next(line)) {
    const int line_no = in.line_number();
    if (line.find_first_not_of(" \t\r") == std::string::npos) {
      continue;
    }
    const std::string dir = std::filesystem::path(path).parent_path().string();
    Sample sample = ParseJsonlSample(line, fmt::format("{}:{}", path, line_no), dir.empty() ? "." : dir);
    if (sample.tokens) {  // checked whole; kept without its ids (LoadTokenIds reads them again)
      auto meta = std::make_shared<SampleTokens>(*sample.tokens);
      meta->input_ids = {};
      meta->labels = {};
      meta->has_ids = false;
      meta->file = path;
      meta->offset = in.line_offset();
      sample.tokens = std::move(meta);
    }
    samples_.push_back(std::move(sample));
  }
  if (samples_.empty()) {
    throw Error(fmt::format("{}: no samples (expected one JSON object per line)", path));
  }
}

Batch JsonlSource::Draw(int64_t count, uint64_t seed, int64_t iteration) const {
  const int64_t n = static_cast<int64_t>(samples_.size());
  Batch batch;
  int64_t cached_epoch = -1;
  std::vector<int64_t> perm;
  for (int64_t k = 0; k < count; ++k) {
    int64_t global = iteration * count + k;
    int64_t epoch = global / n;
    if (epoch != cached_epoch) {
      // Fisher-Yates with the run's Rng: the order of epoch e depends only on (seed, e).
      perm.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        perm[i] = i;
      }
      Rng rng(Rng::Mix(seed, static_cast<uint64_t>(epoch)));
      for (int64_t i = n - 1; i > 0; --i) {
        std::swap(perm[i], perm[rng.UniformInt(0, i)]);
      }
      cached_epoch = epoch;
    }
    batch.samples.push_back(samples_[perm[global % n]]);
  }
  return batch;
}

std::shared_ptr<const SampleTokens> LoadTokenIds(const SampleTokens& meta) {
  if (meta.has_ids) return std::make_shared<SampleTokens>(meta);
  std::ifstream in(meta.file, std::ios::binary);
  in.seekg(meta.offset);
  std::string line;
  if (!in || !std::getline(in, line)) {
    throw Error(
        fmt::format("{}: cannot be read again for its token ids (the file changed or went away since the run "
                    "started)",
                    meta.where));
  }
  const std::string dir = std::filesystem::path(meta.file).parent_path().string();
  const Sample s = ParseJsonlSample(line, meta.where, dir.empty() ? "." : dir);
  if (!s.tokens || s.tokens->length != meta.length || s.tokens->scored != meta.scored) {
    throw Error(fmt::format("{}: the line changed since the run started (its token ids were {} long)", meta.where,
                            meta.length));
  }
  return s.tokens;
}

}  // namespace loom
