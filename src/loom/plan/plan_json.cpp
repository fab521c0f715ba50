#include "loom/plan/plan_json.h"
#include "loom/input_file.h"
#include "loom/path_kind.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "loom/error.h"
#include "loom/spec/precision.h"

namespace loom {

using nlohmann::json;

namespace {

// A JSON object being read, with the path that names it in errors.
class Reader {
 public:
  Reader(const json& j, std::string file, std::string path, std::set<std::string> keys)
      : j_(j), file_(std::move(file)), path_(std::move(path)) {
    if (!j_.is_object())
      Fail(path_.empty() ? "the document" : path_, fmt::format("must be an object, got {}", j_.type_name()));
    for (const auto& [k, v] : j_.items()) {
      if (!keys.count(k)) {
        std::string valid;
        for (const auto& key : keys) valid += (valid.empty() ? "" : ", ") + key;
        Fail(Field(k), fmt::format("unknown key; valid keys: {}", valid));
      }
    }
  }
  [[noreturn]] void Fail(const std::string& field, const std::string& what) const {
    throw Error(fmt::format("{}: {}: {}", file_, field, what));
  }
  std::string Field(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  bool Has(const std::string& key) const { return j_.contains(key); }
  const json& Get(const std::string& key) const {
    if (!j_.contains(key)) Fail(Field(key), "missing");
    return j_.at(key);
  }
  std::string String(const std::string& key, const std::string& fallback = "", bool required = false) const {
    if (!Has(key)) {
      if (required) Fail(Field(key), "missing");
      return fallback;
    }
    if (!j_.at(key).is_string()) Fail(Field(key), "must be a string");
    return j_.at(key).get<std::string>();
  }
  int64_t Int(const std::string& key, int64_t fallback, bool required = false) const {
    if (!Has(key)) {
      if (required) Fail(Field(key), "missing");
      return fallback;
    }
    if (!j_.at(key).is_number_integer()) Fail(Field(key), "must be an integer");
    return InRange(Field(key), j_.at(key));
  }
  double Number(const std::string& key, double fallback) const {
    if (!Has(key)) return fallback;
    if (!j_.at(key).is_number()) Fail(Field(key), "must be a number");
    const double v = j_.at(key).get<double>();
    if (!std::isfinite(v)) Fail(Field(key), "must be a finite number");
    return v;
  }
  const json& Array(const std::string& key, bool required = true) const {
    static const json empty = json::array();
    if (!Has(key)) {
      if (required) Fail(Field(key), "missing");
      return empty;
    }
    if (!j_.at(key).is_array()) Fail(Field(key), "must be an array");
    return j_.at(key);
  }
  std::vector<int> Ints(const std::string& key, const json& arr) const {
    std::vector<int> out;
    for (size_t i = 0; i < arr.size(); ++i) {
      if (!arr[i].is_number_integer()) Fail(fmt::format("{}[{}]", Field(key), i), "must be an integer");
      out.push_back(static_cast<int>(InRange(fmt::format("{}[{}]", Field(key), i), arr[i])));
    }
    return out;
  }
  const std::string& file() const { return file_; }

 private:
  // Every integer of a plan is stored in an int: larger ones are errors, not truncated.
  int64_t InRange(const std::string& field, const json& v) const {
    const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= 2147483647ULL
                                             : v.get<int64_t>() >= -2147483648LL && v.get<int64_t>() <= 2147483647LL;
    // Past an int: the storage's limit is said; the field's own range (tp >= 1, ...) is the plan's validation's.
    if (!fits)
      Fail(field, fmt::format("{} is out of range: past a plan's integers (-2147483648..2147483647)", v.dump()));
    return v.get<int64_t>();
  }
  const json& j_;
  std::string file_;
  std::string path_;
};

json RangeToJson(const LayerRange& r) { return {{"module", r.module}, {"begin", r.begin}, {"end", r.end}}; }

}  // namespace

std::string RecomputeName(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
  }
  return "none";
}

char RecomputeLetter(Recompute r) { return r == Recompute::kFull ? 'f' : r == Recompute::kSelective ? 's' : 'n'; }

Recompute RecomputeFromLetter(char x) {
  return x == 'f' ? Recompute::kFull : x == 's' ? Recompute::kSelective : Recompute::kNone;
}

Recompute ParseRecompute(const std::string& name, const std::string& field) {
  if (name == "none") return Recompute::kNone;
  if (name == "selective") return Recompute::kSelective;
  if (name == "full") return Recompute::kFull;
  throw Error(fmt::format("{}: unknown recomputation '{}'; valid: none, selective, full", field, name));
}

json PlanToJson(const Plan& p) {
  json units = json::array();
  for (const Unit& u : p.units) {
    json pipelines = json::array();
    for (const PipelineSpec& ps : u.pipelines) {
      json stages = json::array();
      for (const StageSpec& st : ps.stages) {
        json layers = json::array();
        for (const LayerRange& r : st.layers) layers.push_back(RangeToJson(r));
        json js = {{"rank", st.rank}, {"layers", layers}};
        if (st.tp > 0) js["tp"] = st.tp;
        stages.push_back(std::move(js));
      }
      json jp = {{"replicas", ps.replicas},
                 {"pp", ps.pp},
                 {"microbatches", ps.microbatches},
                 {"schedule", ScheduleKindName(ps.schedule)},
                 {"stages", stages}};
      if (!ps.rank_groups.empty()) jp["rank_groups"] = ps.rank_groups;
      pipelines.push_back(std::move(jp));
    }
    units.push_back({{"name", u.name},
                     {"modules", u.modules},
                     {"first_group", u.first_group},
                     {"tp", u.tp},
                     {"cp", u.cp},
                     {"phase", u.phase},
                     {"sm_fraction", u.sm_fraction},
                     {"recompute", RecomputeName(u.recompute)},
                     {"zero_stage", u.zero_stage},
                     {"sequence_parallel", u.sequence_parallel},
                     {"pipelines", pipelines}});
    if (u.cp_split != CpSplit::kIdeal) units.back()["cp_split"] = CpSplitName(u.cp_split);  // omitted when ideal
  }
  json brokers = json::array();
  for (const Broker& b : p.brokers) brokers.push_back({{"from", b.from}, {"to", b.to}, {"count", b.count}});
  json out = {
      {"strategy", p.strategy},         {"model", p.model},           {"cluster", p.cluster}, {"workload", p.workload},
      {"global_batch", p.global_batch}, {"group_gpus", p.group_gpus}, {"units", units},       {"brokers", brokers},
      {"searched", p.searched}};
  if (p.phase_rounds != 1) out["phase_rounds"] = p.phase_rounds;  // omitted when 1 (every plan but Mosaic's)
  if (p.made_for) {
    out["made_for"] = {{"precision", p.made_for->precision},
                       {"seq_len", p.made_for->seq_len},
                       {"zero_stage", p.made_for->zero_stage},
                       {"seed", p.made_for->seed}};
  }
  return out;
}

namespace {

Plan::MadeFor MadeForFromJson(const json& j, const std::string& file) {
  Reader r(j, file, "made_for", {"precision", "seq_len", "zero_stage", "seed"});
  Plan::MadeFor m;
  m.precision = r.String("precision", "", true);
  if (!FindPrecision(m.precision)) r.Fail("made_for.precision", "'" + m.precision + "'; valid: bf16, fp16, tf32, fp32");
  m.seq_len = r.Int("seq_len", 0, true);
  if (m.seq_len < 1) r.Fail("made_for.seq_len", "must be >= 1");
  m.zero_stage = static_cast<int>(r.Int("zero_stage", 0, true));
  if (m.zero_stage < 0 || m.zero_stage > 3) r.Fail("made_for.zero_stage", "valid: 0, 1, 2, 3");
  const json& seed = r.Get("seed");
  if (!seed.is_number_unsigned() && !(seed.is_number_integer() && seed.get<int64_t>() >= 0)) {
    r.Fail("made_for.seed", "must be a whole number >= 0");
  }
  m.seed = seed.get<uint64_t>();
  return m;
}

}  // namespace

Plan PlanFromJson(const json& j, const std::string& file) {
  Reader r(j, file, "",
           {"strategy", "model", "cluster", "workload", "global_batch", "group_gpus", "phase_rounds", "units",
            "brokers", "searched", "made_for"});
  Plan p;
  p.strategy = r.String("strategy");
  p.model = r.String("model");
  p.cluster = r.String("cluster");
  p.workload = r.String("workload");
  p.global_batch = r.Int("global_batch", 0, true);
  p.group_gpus = static_cast<int>(r.Int("group_gpus", 1));
  p.phase_rounds = static_cast<int>(r.Int("phase_rounds", 1));
  p.searched = r.String("searched");
  if (r.Has("made_for")) p.made_for = MadeForFromJson(r.Get("made_for"), file);
  const json& units = r.Array("units");
  for (size_t i = 0; i < units.size(); ++i) {
    const std::string up = fmt::format("units[{}]", i);
    Reader ur(units[i], file, up,
              {"name", "modules", "first_group", "tp", "cp", "cp_split", "phase", "sm_fraction", "recompute",
               "zero_stage", "sequence_parallel", "pipelines"});
    Unit u;
    u.name = ur.String("name", "", true);
    const json& mods = ur.Array("modules");
    for (size_t k = 0; k < mods.size(); ++k) {
      if (!mods[k].is_string()) ur.Fail(fmt::format("{}.modules[{}]", up, k), "must be a string");
      u.modules.push_back(mods[k].get<std::string>());
    }
    u.first_group = static_cast<int>(ur.Int("first_group", 0));
    u.tp = static_cast<int>(ur.Int("tp", 1));
    u.cp = static_cast<int>(ur.Int("cp", 1));
    u.cp_split = ParseCpSplit(ur.String("cp_split", "ideal"), file + ": " + ur.Field("cp_split"));
    u.phase = static_cast<int>(ur.Int("phase", 0));
    u.sm_fraction = ur.Number("sm_fraction", 1.0);
    u.recompute = ParseRecompute(ur.String("recompute", "none"), file + ": " + ur.Field("recompute"));
    u.zero_stage = static_cast<int>(ur.Int("zero_stage", 1));
    if (ur.Has("sequence_parallel")) {
      if (!units[i].at("sequence_parallel").is_boolean())
        ur.Fail(ur.Field("sequence_parallel"), "must be true or false");
      u.sequence_parallel = units[i].at("sequence_parallel").get<bool>();
    }
    const json& pipes = ur.Array("pipelines");
    for (size_t k = 0; k < pipes.size(); ++k) {
      const std::string pp = fmt::format("{}.pipelines[{}]", up, k);
      Reader pr(pipes[k], file, pp, {"replicas", "pp", "microbatches", "schedule", "stages", "rank_groups"});
      PipelineSpec ps;
      ps.replicas = static_cast<int>(pr.Int("replicas", 1));
      ps.pp = static_cast<int>(pr.Int("pp", 1));
      ps.microbatches = static_cast<int>(pr.Int("microbatches", 1));
      try {
        ps.schedule = ParseScheduleKind(pr.String("schedule", "1f1b"), pr.Field("schedule"));
      } catch (const Error& e) {
        throw Error(fmt::format("{}: {}", pr.file(), e.what()));
      }
      ps.rank_groups = pr.Ints("rank_groups", pr.Array("rank_groups", false));
      const json& stages = pr.Array("stages");
      for (size_t s = 0; s < stages.size(); ++s) {
        const std::string sp = fmt::format("{}.stages[{}]", pp, s);
        Reader sr(stages[s], file, sp, {"rank", "layers", "tp"});
        StageSpec st;
        st.rank = static_cast<int>(sr.Int("rank", 0, true));
        st.tp = static_cast<int>(sr.Int("tp", 0));
        const json& layers = sr.Array("layers");
        for (size_t l = 0; l < layers.size(); ++l) {
          Reader lr(layers[l], file, fmt::format("{}.layers[{}]", sp, l), {"module", "begin", "end"});
          st.layers.push_back({lr.String("module", "", true), static_cast<int>(lr.Int("begin", 0, true)),
                               static_cast<int>(lr.Int("end", 0, true))});
        }
        ps.stages.push_back(std::move(st));
      }
      u.pipelines.push_back(std::move(ps));
    }
    p.units.push_back(std::move(u));
  }
  const json& brokers = r.Array("brokers", false);
  for (size_t i = 0; i < brokers.size(); ++i) {
    Reader br(brokers[i], file, fmt::format("brokers[{}]", i), {"from", "to", "count"});
    p.brokers.push_back({br.String("from", "", true), br.String("to", "", true), static_cast<int>(br.Int("count", 1))});
  }
  return p;
}

Plan LoadPlan(const std::string& path) { return LoadPlanFile(path).plan; }

PlanFile LoadPlanFile(const std::string& path, const std::string& strategy) {
  return ParsePlanFile(ReadInputFile(path, "plan JSON", kMaxPlanBytes), path, strategy);
}

namespace {

// Reads a plan or a batch's schedule nested at `root` of a `loom plan --json`
// output: the readers name fields from the object they read ("units[0].tp",
// "the document"), so the errors are re-rooted to name them in the file.
template <typename Read>
auto ReadNested(const std::string& path, const std::string& root, Read read) {
  try {
    return read();
  } catch (const Error& e) {
    const std::string lead = path + ": ", what = e.what();
    if (what.rfind(lead, 0) != 0) throw;
    const std::string rest = what.substr(lead.size());
    const std::string document = "the document";
    throw Error(lead + (rest.rfind(document, 0) == 0 ? root + rest.substr(document.size()) : root + "." + rest));
  }
}

}  // namespace

PlanFile ParsePlanFile(const std::string& text, const std::string& path, const std::string& strategy) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw Error(fmt::format("{}: malformed JSON at byte {}: {}", path, e.byte, e.what()));
  } catch (const json::exception& e) {  // a number too large for a double (out_of_range.406)
    throw Error(fmt::format("{}: malformed JSON: {}", path, e.what()));
  }
  // A `loom plan --json` output: take the named (or the best) strategy's plan and batches.
  if (j.is_object() && j.contains("strategies") && j.contains("best")) {
    const std::string want = strategy.empty() && j.at("best").is_string() ? j.at("best").get<std::string>() : strategy;
    std::vector<std::string> names;
    for (size_t i = 0; i < j.at("strategies").size(); ++i) {
      const json& s = j.at("strategies")[i];
      if (!s.contains("plan")) continue;
      names.push_back(s.value("name", ""));
      if (s.value("name", "") != want) continue;
      PlanFile out;
      out.plan =
          ReadNested(path, fmt::format("strategies[{}].plan", i), [&] { return PlanFromJson(s.at("plan"), path); });
      if (s.contains("batches")) {
        const json& bs = s.at("batches");
        if (!bs.is_array()) throw Error(fmt::format("{}: strategies[{}].batches: must be an array", path, i));
        for (size_t b = 0; b < bs.size(); ++b) {
          Reader r(bs[b], path, fmt::format("strategies[{}].batches[{}]", i, b),
                   {"iteration", "iteration_time_s", "schedule"});
          RecordedBatch rb;
          rb.iteration = r.Int("iteration", 0, true);
          const std::string where = fmt::format("{}: strategies[{}].batches[{}].iteration", path, i, b);
          if (rb.iteration < 0) {
            throw Error(fmt::format("{}: {}; valid: an iteration >= 0", where, rb.iteration));
          }
          for (const RecordedBatch& earlier : out.batches) {
            if (earlier.iteration == rb.iteration) {
              throw Error(fmt::format("{}: iteration {} is recorded twice; each batch once", where, rb.iteration));
            }
          }
          rb.iteration_time_s = r.Number("iteration_time_s", 0);
          if (bs[b].contains("schedule")) {
            rb.schedule = ReadNested(path, fmt::format("strategies[{}].batches[{}].schedule", i, b),
                                     [&] { return IterationScheduleFromJson(bs[b].at("schedule"), path); });
          }
          out.batches.push_back(std::move(rb));
        }
      }
      return out;
    }
    if (want.empty()) throw Error(fmt::format("{}: best: no strategy found a plan; nothing to simulate", path));
    if (names.empty()) throw Error(fmt::format("{}: no strategy in it has a plan; nothing to simulate", path));
    throw Error(fmt::format("{}: no strategy named '{}' with a plan; valid: {}", path, want, fmt::join(names, ", ")));
  }
  if (!strategy.empty()) {
    throw Error(fmt::format("{}: --strategy {}: the file holds one bare plan, not a `loom plan --json` output", path,
                            strategy));
  }
  return {PlanFromJson(j, path), {}};
}

namespace {

// "F:3:12" is the forward of sub-microbatch 12 at stage 3; "B:..." its fused
// backward, "Bd:..." and "W:..." its zero-bubble halves.
std::string StepToString(const StageStep& step) {
  const char* kind = step.forward                         ? "F"
                     : step.part == BackwardPart::kData   ? "Bd"
                     : step.part == BackwardPart::kWeight ? "W"
                                                          : "B";
  return fmt::format("{}:{}:{}", kind, step.stage, step.microbatch);
}

StageStep StepFromString(const std::string& text, const Reader& r, const std::string& field) {
  StageStep step;
  char kind[3] = {0, 0, 0};
  int stage = -1, mb = -1, used = 0;
  const std::string k = std::sscanf(text.c_str(), "%2[A-Za-z]:%d:%d%n", kind, &stage, &mb, &used) == 3 ? kind : "";
  if (used != static_cast<int>(text.size()) || (k != "F" && k != "B" && k != "Bd" && k != "W") || stage < 0 || mb < 0) {
    r.Fail(field, fmt::format("'{}' is not a step; valid: F:STAGE:MICROBATCH, B:..., Bd:... or W:... (a "
                              "backward, or its data and weight halves)",
                              text));
  }
  step.forward = k == "F";
  step.part = k == "Bd" ? BackwardPart::kData : k == "W" ? BackwardPart::kWeight : BackwardPart::kFused;
  step.stage = stage;
  step.microbatch = mb;
  return step;
}

std::map<std::string, std::vector<int>> CountsFromJson(const Reader& r, const std::string& key,
                                                       const std::string& what) {
  std::map<std::string, std::vector<int>> out;
  if (!r.Has(key)) return out;
  const json& sub = r.Get(key);
  if (!sub.is_object()) r.Fail(key, "must be an object of " + what + " -> per-microbatch counts");
  for (const auto& [name, counts] : sub.items()) {
    if (!counts.is_array()) r.Fail(key + "." + name, "must be an array");
    out[name] = r.Ints(key + "." + name, counts);
  }
  return out;
}

}  // namespace

json IterationScheduleToJson(const IterationSchedule& s) {
  json j = {{"iteration", s.iteration},
            {"microbatch_samples", s.microbatch_samples},
            {"deferred", s.deferred},
            {"sub_microbatches", s.sub_microbatches}};
  if (!s.module_sub_microbatches.empty()) j["module_sub_microbatches"] = s.module_sub_microbatches;
  if (!s.unit_microbatch_samples.empty()) j["unit_microbatch_samples"] = s.unit_microbatch_samples;
  if (!s.replica_microbatch_samples.empty()) j["replica_microbatch_samples"] = s.replica_microbatch_samples;
  if (!s.unit_rank_orders.empty()) {
    json units = json::object();
    for (const auto& [unit, replicas] : s.unit_rank_orders) {
      json rs = json::array();
      for (const auto& ranks : replicas) {
        json ps = json::array();
        for (const auto& rank : ranks) {
          json steps = json::array();
          for (const auto& step : rank) steps.push_back(StepToString(step));
          ps.push_back(std::move(steps));
        }
        rs.push_back(std::move(ps));
      }
      units[unit] = std::move(rs);
    }
    j["unit_rank_orders"] = std::move(units);
  }
  if (!s.rank_orders.empty()) {
    json orders = json::array();
    for (const auto& rank : s.rank_orders) {
      json steps = json::array();
      for (const auto& step : rank) steps.push_back(StepToString(step));
      orders.push_back(std::move(steps));
    }
    j["rank_orders"] = std::move(orders);
  }
  if (s.recompute) j["recompute"] = RecomputeName(*s.recompute);
  if (!s.layer_recompute.empty()) {
    json rec = json::array();
    for (const auto& r : s.layer_recompute) {
      std::string letters;
      for (Recompute x : r.layers) letters += RecomputeLetter(x);
      rec.push_back({{"stage", r.stage}, {"microbatch", r.microbatch}, {"layers", letters}});
    }
    j["layer_recompute"] = std::move(rec);
  }
  return j;
}

IterationSchedule IterationScheduleFromJson(const json& j, const std::string& file) {
  Reader r(j, file, "",
           {"iteration", "microbatch_samples", "deferred", "sub_microbatches", "module_sub_microbatches",
            "unit_microbatch_samples", "replica_microbatch_samples", "unit_rank_orders", "rank_orders", "recompute",
            "layer_recompute"});
  IterationSchedule s;
  s.iteration = r.Int("iteration", 0);
  const json& mbs = r.Array("microbatch_samples");
  for (size_t k = 0; k < mbs.size(); ++k) {
    if (!mbs[k].is_array()) r.Fail(fmt::format("microbatch_samples[{}]", k), "must be an array");
    s.microbatch_samples.push_back(r.Ints(fmt::format("microbatch_samples[{}]", k), mbs[k]));
  }
  s.deferred = r.Ints("deferred", r.Array("deferred", false));
  s.sub_microbatches = CountsFromJson(r, "sub_microbatches", "unit");
  s.module_sub_microbatches = CountsFromJson(r, "module_sub_microbatches", "module");
  if (r.Has("unit_microbatch_samples")) {
    const json& u = r.Get("unit_microbatch_samples");
    if (!u.is_object()) r.Fail("unit_microbatch_samples", "must be an object of unit -> [[sample, ...], ...]");
    for (const auto& [name, mbs] : u.items()) {
      const std::string f = "unit_microbatch_samples." + name;
      if (!mbs.is_array()) r.Fail(f, "must be an array of microbatches");
      for (size_t k = 0; k < mbs.size(); ++k) {
        if (!mbs[k].is_array()) r.Fail(fmt::format("{}[{}]", f, k), "must be an array of sample indices");
        s.unit_microbatch_samples[name].push_back(r.Ints(fmt::format("{}[{}]", f, k), mbs[k]));
      }
    }
  }
  if (r.Has("replica_microbatch_samples")) {
    const json& u = r.Get("replica_microbatch_samples");
    if (!u.is_object())
      r.Fail("replica_microbatch_samples", "must be an object of unit -> [[[sample, ...], ...], ...]");
    for (const auto& [name, replicas] : u.items()) {
      const std::string f = "replica_microbatch_samples." + name;
      if (!replicas.is_array()) r.Fail(f, "must be an array of replicas");
      auto& out = s.replica_microbatch_samples[name];
      for (size_t d = 0; d < replicas.size(); ++d) {
        const std::string fd = fmt::format("{}[{}]", f, d);
        if (!replicas[d].is_array()) r.Fail(fd, "must be an array of microbatches");
        out.emplace_back();
        for (size_t k = 0; k < replicas[d].size(); ++k) {
          if (!replicas[d][k].is_array()) r.Fail(fmt::format("{}[{}]", fd, k), "must be an array of sample indices");
          out.back().push_back(r.Ints(fmt::format("{}[{}]", fd, k), replicas[d][k]));
        }
      }
    }
  }
  if (r.Has("unit_rank_orders")) {
    const json& u = r.Get("unit_rank_orders");
    if (!u.is_object()) r.Fail("unit_rank_orders", "must be an object of unit -> [replica][rank] -> steps");
    for (const auto& [name, replicas] : u.items()) {
      const std::string f = "unit_rank_orders." + name;
      if (!replicas.is_array()) r.Fail(f, "must be an array of replicas");
      auto& out = s.unit_rank_orders[name];
      for (size_t d = 0; d < replicas.size(); ++d) {
        const std::string fd = fmt::format("{}[{}]", f, d);
        if (!replicas[d].is_array()) r.Fail(fd, "must be an array of pipeline ranks");
        out.emplace_back();
        for (size_t p = 0; p < replicas[d].size(); ++p) {
          const std::string fp = fmt::format("{}[{}]", fd, p);
          if (!replicas[d][p].is_array()) r.Fail(fp, "must be an array of steps");
          out.back().emplace_back();
          for (size_t i = 0; i < replicas[d][p].size(); ++i) {
            const std::string fi = fmt::format("{}[{}]", fp, i);
            if (!replicas[d][p][i].is_string()) r.Fail(fi, "must be a string F:STAGE:MICROBATCH or B:STAGE:MICROBATCH");
            out.back().back().push_back(StepFromString(replicas[d][p][i].get<std::string>(), r, fi));
          }
        }
      }
    }
  }
  const json& orders = r.Array("rank_orders", false);
  for (size_t p = 0; p < orders.size(); ++p) {
    const std::string field = fmt::format("rank_orders[{}]", p);
    if (!orders[p].is_array()) r.Fail(field, "must be an array of steps");
    s.rank_orders.emplace_back();
    for (size_t i = 0; i < orders[p].size(); ++i) {
      const std::string f = fmt::format("{}[{}]", field, i);
      if (!orders[p][i].is_string()) r.Fail(f, "must be a string F:STAGE:MICROBATCH or B:STAGE:MICROBATCH");
      s.rank_orders.back().push_back(StepFromString(orders[p][i].get<std::string>(), r, f));
    }
  }
  const std::string recompute = r.String("recompute");
  if (!recompute.empty() && recompute != "none" && recompute != "selective" && recompute != "full") {
    r.Fail("recompute", fmt::format("'{}'; valid: none, selective, full", recompute));
  }
  if (!recompute.empty()) s.recompute = ParseRecompute(recompute, "recompute");
  const json& rec = r.Array("layer_recompute", false);
  for (size_t i = 0; i < rec.size(); ++i) {
    Reader rr(rec[i], file, fmt::format("layer_recompute[{}]", i), {"stage", "microbatch", "layers"});
    StageRecompute sr;
    sr.stage = static_cast<int>(rr.Int("stage", 0, true));
    sr.microbatch = static_cast<int>(rr.Int("microbatch", 0, true));
    const std::string letters = rr.String("layers", "", true);
    if (letters.find_first_not_of("nsf") != std::string::npos) {
      rr.Fail(rr.Field("layers"),
              fmt::format("'{}': one letter per layer, n (none), s (selective) or f (full)", letters));
    }
    for (char x : letters) {
      sr.layers.push_back(RecomputeFromLetter(x));
    }
    s.layer_recompute.push_back(std::move(sr));
  }
  return s;
}

}  // namespace loom
