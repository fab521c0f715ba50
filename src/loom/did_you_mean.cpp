#include "loom/did_you_mean.h"

#include <algorithm>
#include <cctype>

namespace loom {

namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Optimal string alignment distance (Damerau-Levenshtein without repeated
// edits of one substring): "h1000" -> "h100" is 1, "lamma" -> "llama" is 1.
size_t EditDistance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

}  // namespace

std::string ClosestName(const std::string& given, const std::vector<std::string>& valid) {
  if (given.empty() || given.size() > 200) return "";
  const std::string g = Lower(given);
  const size_t limit = std::max<size_t>(1, g.size() / 3);
  std::string best;
  size_t best_distance = limit + 1;
  for (const std::string& v : valid) {
    const size_t d = EditDistance(g, Lower(v));
    if (d < best_distance) {
      best = v;
      best_distance = d;
    }
  }
  if (!best.empty()) return best;
  // A prefix of exactly one name ("llama3" of "llama3-8b" alone).
  std::string only;
  for (const std::string& v : valid) {
    if (Lower(v).rfind(g, 0) == 0) {
      if (!only.empty()) return "";
      only = v;
    }
  }
  return g.size() >= 3 ? only : "";
}

std::string DidYouMean(const std::string& given, const std::vector<std::string>& valid) {
  const std::string close = ClosestName(given, valid);
  return close.empty() ? "" : "; did you mean '" + close + "'?";
}

}  // namespace loom
