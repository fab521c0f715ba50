// JSON form of Plan and IterationSchedule (schema: docs/plan-format.md).
// Reading checks types and rejects unknown keys, naming the file and the field
// path ("units[1].pipelines[0].pp"); the plan's own rules are checked by
// ValidatePlan.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "loom/plan/plan.h"

namespace loom {

nlohmann::json PlanToJson(const Plan& plan);
Plan PlanFromJson(const nlohmann::json& json, const std::string& file);
// Reads a plan file (the plan itself, or a `loom plan --json` output, whose best
// strategy's plan is taken). Throws loom::Error naming the file.
Plan LoadPlan(const std::string& path);

// One batch a `loom plan` run simulated: its iteration (the batch drawn), the
// strategy's schedule for it (strategies that schedule batches) and the time
// the simulator gave it.
struct RecordedBatch {
  int64_t iteration = 0;
  std::optional<IterationSchedule> schedule;
  double iteration_time_s = 0;
};

// A plan file: the plan and, for a `loom plan --json` output, the batches it
// was measured on. `strategy` empty takes the best strategy's entry.
struct PlanFile {
  Plan plan;
  std::vector<RecordedBatch> batches;  // empty for a bare plan
};
PlanFile LoadPlanFile(const std::string& path, const std::string& strategy = "");
// The same from the file's text; `path` names it in errors.
PlanFile ParsePlanFile(const std::string& text, const std::string& path, const std::string& strategy = "");

nlohmann::json IterationScheduleToJson(const IterationSchedule& schedule);
IterationSchedule IterationScheduleFromJson(const nlohmann::json& json, const std::string& file);

std::string RecomputeName(Recompute r);
// The one-letter form per-layer choices take in JSON: n, s, f.
char RecomputeLetter(Recompute r);
// 'n', 's' or 'f' (REQUIRES: one of them).
Recompute RecomputeFromLetter(char letter);
// "none" | "selective" | "full"; throws loom::Error naming `field` otherwise.
Recompute ParseRecompute(const std::string& name, const std::string& field);

}  // namespace loom
