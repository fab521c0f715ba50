// Oobleck §2.4.1.1 (App. A.1): how many nodes each pipeline template has.
// Templates take every node count n0, n0 + 1, ..., N - f·n0 (consecutive
// sizes, as many as fit: the Frobenius argument), so that any surviving node
// count N' in [(f+1)·n0, N] is a non-negative integer combination of template
// sizes with at least f + 1 pipelines (Theorem 1). The thesis' Eq. A.2 is
// garbled (notes/oobleck-cornstarch-entrain.md §2.4.1); Roberts' formula for
// consecutive integers gives the Frobenius number n0 - 1, which is what the
// theorem needs, and the property test checks the conclusion exhaustively.
#pragma once

#include <vector>

namespace loom::oobleck {

struct TemplateSizes {
  int min_nodes = 1;        // n0: the fewest nodes that hold the model's training state
  std::vector<int> nodes;   // n0, n0 + 1, ..., N - f·n0 (increasing, consecutive)
  int fault_tolerance = 0;  // f
  int max_nodes() const { return nodes.empty() ? 0 : nodes.back(); }
  bool Has(int n) const { return !nodes.empty() && n >= nodes.front() && n <= nodes.back(); }
};

// Throws loom::Error when f < 0, n0 < 1 or N < (f + 1)·n0 (naming what
// would be needed: "f + 1 = 3 pipelines of at least 2 nodes need 6 nodes").
TemplateSizes TemplateNodeCounts(int nodes, int fault_tolerance, int min_nodes);

// Whether `nodes` splits into template sizes with at least `pipelines`
// pipelines (exhaustive; for tests of Theorem 1).
bool SplitsIntoTemplates(int nodes, const std::vector<int>& sizes, int pipelines);

}  // namespace loom::oobleck
