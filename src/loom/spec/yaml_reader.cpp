#include "loom/spec/yaml_reader.h"

#include <yaml-cpp/depthguard.h>
#include "loom/path_kind.h"

#include <fmt/format.h>
#include <cmath>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace loom {

namespace {

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    out += (i ? ", " : "") + items[i];
  }
  return out;
}

}  // namespace

YAML::Node ParseYaml(const std::string& text, const std::string& file) {
  try {
    return YAML::Load(text);
  } catch (const YAML::DeepRecursion& e) {
    // yaml-cpp stops its recursive parser at a fixed depth and says "bad file".
    throw Error(
        fmt::format("{}:{}:{}: malformed {}: nested too deeply: yaml-cpp's parser stops at depth {} "
                    "(no Loom file nests more than a few levels)",
                    file, e.mark.line + 1, e.mark.column + 1,
                    file.size() >= 5 && file.compare(file.size() - 5, 5, ".json") == 0 ? "JSON" : "YAML", e.depth()));
  } catch (const YAML::Exception& e) {
    // A .json file (config.json) is read as the YAML it also is; its error says JSON.
    const bool json = file.size() >= 5 && file.compare(file.size() - 5, 5, ".json") == 0;
    throw Error(fmt::format("{}:{}:{}: malformed {}: {}", file, e.mark.line + 1, e.mark.column + 1,
                            json ? "JSON" : "YAML", e.msg));
  }
}

std::string ScalarText(const YAML::Node& node, const std::string& file, const std::string& field) {
  if (!node.IsScalar()) {
    throw Error(fmt::format("{}: {}: expected a name, got a {}", Where(node, file), field,
                            node.IsMap()        ? "mapping"
                            : node.IsSequence() ? "list"
                                                : "null"));
  }
  return node.Scalar();
}

std::string ReadTextFile(const std::string& path, const std::string& what, int64_t max_bytes) {
  return ReadInputFile(path, what, max_bytes);
}

YAML::Node LoadYamlFile(const std::string& path) { return ParseYaml(ReadTextFile(path), path); }

std::string Where(const YAML::Node& node, const std::string& file) {
  if (!node.IsDefined() || node.Mark().is_null()) {
    return file;
  }
  return fmt::format("{}:{}:{}", file, node.Mark().line + 1, node.Mark().column + 1);
}

YamlMap::YamlMap(const YAML::Node& node, std::string file, std::string path)
    : node_(node), file_(std::move(file)), path_(std::move(path)) {
  if (!node_.IsMap()) {
    throw Error(fmt::format("{}: {}: expected a mapping (key: value lines)", Where(node_, file_),
                            path_.empty() ? "document" : path_));
  }
  // YAML forbids a key twice in one mapping; the parser keeps both and reads the first.
  std::set<std::string> seen;
  for (const auto& kv : node_) {
    if (!kv.first.IsScalar()) {  // `{a: 1}: x` or `[a]: x`; yaml-cpp would throw converting it
      throw Error(fmt::format("{}: {}: a key must be a plain name, not a {}", Where(kv.first, file_),
                              path_.empty() ? "document" : path_, kv.first.IsMap() ? "mapping" : "list"));
    }
    const std::string key = kv.first.Scalar();
    if (!seen.insert(key).second) {
      throw Error(fmt::format("{}: {}: duplicate key; give each key once", Where(kv.first, file_),
                              path_.empty() ? key : path_ + "." + key));
    }
  }
}

bool YamlMap::Has(const std::string& key) const {
  const_cast<YamlMap*>(this)->known_.insert(key);
  return node_[key].IsDefined() && !node_[key].IsNull();
}

std::string YamlMap::PathOf(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

Error YamlMap::ErrorAt(const std::string& key, const std::string& message) const {
  YAML::Node at = node_[key];
  const YAML::Node& where = at.IsDefined() ? at : node_;
  return Error(fmt::format("{}: {}: {}", Where(where, file_), PathOf(key), message));
}

YAML::Node YamlMap::Get(const std::string& key) {
  known_.insert(key);
  YAML::Node child = node_[key];
  if (!child.IsDefined() || child.IsNull()) {
    throw Error(fmt::format("{}: {}: missing required field", Where(node_, file_), PathOf(key)));
  }
  return child;
}

template <typename T>
T YamlMap::Scalar(const std::string& key, const char* type_name) {
  YAML::Node child = Get(key);
  if (!child.IsScalar()) {
    throw ErrorAt(key, fmt::format("expected {}", type_name));
  }
  try {
    return child.as<T>();
  } catch (const YAML::Exception&) {
    throw ErrorAt(key, fmt::format("expected {}, got '{}'", type_name, child.Scalar()));
  }
}

namespace {

// RFC 3629: YAML text is Unicode; names flow into JSON, which must be UTF-8.
bool IsValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = 0;                           // continuation bytes
    unsigned char lo = 0x80, hi = 0xBF;  // the first continuation byte's range (no overlongs, no surrogates)
    if (c < 0x80) {
      n = 0;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (i + n >= s.size() && n > 0) return false;
    for (int k = 1; k <= n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (b < lo || b > hi) : (b >> 6) != 0x2) return false;
    }
    i += n + 1;
  }
  return true;
}

}  // namespace

std::string YamlMap::String(const std::string& key) {
  std::string s = Scalar<std::string>(key, "a string");
  if (!IsValidUtf8(s)) throw ErrorAt(key, "is not valid UTF-8");
  return s;
}

std::string YamlMap::String(const std::string& key, const std::string& default_value) {
  return Has(key) ? String(key) : default_value;
}

std::string YamlMap::Enum(const std::string& key, const std::vector<std::string>& allowed) {
  std::string value = String(key);
  for (const auto& a : allowed) {
    if (a == value) {
      return value;
    }
  }
  throw ErrorAt(key, fmt::format("unknown value '{}'; valid: {}", value, Join(allowed)));
}

std::string YamlMap::Enum(const std::string& key, const std::vector<std::string>& allowed,
                          const std::string& default_value) {
  return Has(key) ? Enum(key, allowed) : default_value;
}

int64_t YamlMap::PositiveIntIn(const std::string& key, int64_t max) {
  YAML::Node child = Get(key);
  const double as_real = Scalar<double>(key, "a positive integer");
  if (as_real > static_cast<double>(max)) {  // before the cast: a huge double does not convert
    throw ErrorAt(key, fmt::format("must be at most {}, got {}", max, child.Scalar()));
  }
  if (!(as_real > 0)) {
    throw ErrorAt(key, fmt::format("must be > 0, got {}", child.Scalar()));
  }
  const int64_t value = static_cast<int64_t>(as_real);
  if (static_cast<double>(value) != as_real) {
    throw ErrorAt(key, fmt::format("expected a positive integer, got '{}'", child.Scalar()));
  }
  return value;
}

int64_t YamlMap::PositiveIntAtMost(const std::string& key, int64_t default_value, int64_t max) {
  return Has(key) ? PositiveIntIn(key, max) : default_value;
}

int64_t YamlMap::NonNegativeInt(const std::string& key, int64_t default_value) {
  const int64_t max = kMaxInt;
  if (!Has(key)) {
    return default_value;
  }
  YAML::Node child = Get(key);
  const double as_real = Scalar<double>(key, "an integer >= 0");
  if (as_real > static_cast<double>(max)) {
    throw ErrorAt(key, fmt::format("must be at most {}, got {}", max, child.Scalar()));
  }
  if (!(as_real >= 0) || static_cast<double>(static_cast<int64_t>(as_real)) != as_real) {
    throw ErrorAt(key, fmt::format("expected an integer >= 0, got '{}'", child.Scalar()));
  }
  return static_cast<int64_t>(as_real);
}

double YamlMap::PositiveReal(const std::string& key) {
  double value = Scalar<double>(key, "a positive number");
  if (!(value > 0)) {
    throw ErrorAt(key, fmt::format("must be > 0, got {}", value));
  }
  if (!std::isfinite(value)) throw ErrorAt(key, fmt::format("must be a finite number, got {}", value));
  return value;
}

double YamlMap::PositiveReal(const std::string& key, double default_value) {
  return Has(key) ? PositiveReal(key) : default_value;
}

double YamlMap::NonNegativeReal(const std::string& key, double default_value) {
  if (!Has(key)) {
    return default_value;
  }
  double value = Scalar<double>(key, "a number >= 0");
  if (!(value >= 0)) {
    throw ErrorAt(key, fmt::format("must be >= 0, got {}", value));
  }
  if (!std::isfinite(value)) throw ErrorAt(key, fmt::format("must be a finite number, got {}", value));
  return value;
}

double YamlMap::Real(const std::string& key, double default_value) {
  if (!Has(key)) return default_value;
  const double value = Scalar<double>(key, "a number");
  if (!std::isfinite(value)) throw ErrorAt(key, fmt::format("must be a finite number, got {}", value));
  return value;
}

bool YamlMap::Bool(const std::string& key, bool default_value) {
  return Has(key) ? Scalar<bool>(key, "true or false") : default_value;
}

YAML::Node YamlMap::Child(const std::string& key) { return Get(key); }

std::optional<YAML::Node> YamlMap::OptionalChild(const std::string& key) {
  if (!Has(key)) {
    return std::nullopt;
  }
  return Get(key);
}

void YamlMap::RejectUnknownKeys() const {
  for (const auto& kv : node_) {
    const std::string key = kv.first.Scalar();  // a plain name: the constructor checked
    if (known_.count(key) == 0) {
      std::vector<std::string> valid(known_.begin(), known_.end());
      throw Error(fmt::format("{}: {}: unknown field; valid fields here: {}", Where(kv.first, file_), PathOf(key),
                              Join(valid)));
    }
  }
}

}  // namespace loom
