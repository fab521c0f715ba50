// TextTable renders aligned terminal tables: a header row, a rule, rows.
// Numeric-looking cells are right-aligned, text left-aligned.
#pragma once

#include "loom/human_bytes.h"

#include <string>
#include <vector>

namespace loom {

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header) : header_(std::move(header)) {}
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void AddRule() { rows_.push_back({}); }
  std::string Render() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;  // an empty row is a rule
};

// "8.03B", "632.0M", "48.2K"
std::string HumanCount(double n);

}  // namespace loom
