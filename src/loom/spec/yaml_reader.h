// YamlMap reads one YAML mapping of a spec file and turns every problem into a
// loom::Error of the form "FILE:LINE:COL: FIELD: what is wrong; valid: ...".
// It remembers which keys were read so that RejectUnknownKeys() can name a key
// the format does not have (a typo must never be silently ignored).
//
// A YamlMap is a short-lived view used while loading one spec; not thread-safe.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "loom/error.h"
#include "loom/input_file.h"

namespace loom {

// Parses `text` as YAML; a syntax error becomes loom::Error naming `file` and the line.
YAML::Node ParseYaml(const std::string& text, const std::string& file);
// The whole content of a text file whose kind `what` names ("model YAML"),
// at most `max_bytes` (input_file.h); a missing, unreadable or oversized
// file is a loom::Error.
std::string ReadTextFile(const std::string& path, const std::string& what = "YAML",
                         int64_t max_bytes = kMaxSpecBytes);
// Reads and parses a YAML file; a missing file is a loom::Error.
YAML::Node LoadYamlFile(const std::string& path);
// "FILE:LINE:COL" of a node (1-based), or just FILE when the node has no mark.
std::string Where(const YAML::Node& node, const std::string& file);
// The text of a list item or other node that must be a plain string; a list
// or mapping there is a loom::Error naming `field` ("inputs[2]").
std::string ScalarText(const YAML::Node& node, const std::string& file, const std::string& field);

class YamlMap {
 public:
  // `path` is the dotted location of this map inside the document ("modules[2]"),
  // used in messages. Throws loom::Error when `node` is not a mapping.
  YamlMap(const YAML::Node& node, std::string file, std::string path);

  bool Has(const std::string& key) const;
  const YAML::Node& node() const { return node_; }
  const std::string& file() const { return file_; }
  // Dotted path of `key` inside the document ("modules[2].layers[0].hidden").
  std::string PathOf(const std::string& key) const;

  std::string String(const std::string& key);
  std::string String(const std::string& key, const std::string& default_value);
  // One of `allowed`; the error lists them.
  std::string Enum(const std::string& key, const std::vector<std::string>& allowed);
  std::string Enum(const std::string& key, const std::vector<std::string>& allowed, const std::string& default_value);
  // Integers and reals must be > 0 (sizes, counts, rates): zero or negative is an error.
  // Integers are at most `max` (default 2^31 - 1: every count Loom stores fits an
  // int), checked before any conversion, the message naming the limit.
  static constexpr int64_t kMaxInt = 2147483647;
  int64_t PositiveInt(const std::string& key) { return PositiveIntIn(key, kMaxInt); }
  int64_t PositiveInt(const std::string& key, int64_t default_value) {
    return PositiveIntAtMost(key, default_value, kMaxInt);
  }
  // Optional, at most `max` (a tighter limit where products of sizes must not overflow).
  int64_t PositiveIntAtMost(const std::string& key, int64_t default_value, int64_t max);
  int64_t NonNegativeInt(const std::string& key, int64_t default_value);
  double PositiveReal(const std::string& key);
  double PositiveReal(const std::string& key, double default_value);
  double NonNegativeReal(const std::string& key, double default_value);
  // Any finite number (fitted coefficients, which may be negative).
  double Real(const std::string& key, double default_value);
  bool Bool(const std::string& key, bool default_value);
  // The raw child node (marks it read). Throws when missing.
  YAML::Node Child(const std::string& key);
  std::optional<YAML::Node> OptionalChild(const std::string& key);

  // Throws naming the first key that was never asked for, listing the keys read.
  void RejectUnknownKeys() const;

  // Builds an Error located at `key` (or at the map when the key is absent).
  Error ErrorAt(const std::string& key, const std::string& message) const;

 private:
  int64_t PositiveIntIn(const std::string& key, int64_t max);
  YAML::Node Get(const std::string& key);  // marks read; throws if missing
  template <typename T>
  T Scalar(const std::string& key, const char* type_name);

  YAML::Node node_;
  std::string file_;
  std::string path_;
  std::set<std::string> known_;
};

}  // namespace loom
