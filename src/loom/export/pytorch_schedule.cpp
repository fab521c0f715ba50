#include "loom/export/pytorch_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <regex>
#include <set>

#include "loom/data/sample_source.h"
#include "loom/error.h"

namespace loom {

namespace {

// What Loom reads: enough for any pipeline a cluster holds, small enough that
// a malformed file cannot make it allocate without bound.
constexpr int kMaxRanks = 4096;
constexpr int kMaxStages = 4096;
constexpr int kMaxMicrobatches = 1 << 20;

const char* TypeName(PtActionType t) {
  switch (t) {
    case PtActionType::kF:
      return "F";
    case PtActionType::kB:
      return "B";
    case PtActionType::kI:
      return "I";
    case PtActionType::kW:
      return "W";
    case PtActionType::kSendF:
      return "SEND_F";
    case PtActionType::kRecvF:
      return "RECV_F";
    case PtActionType::kSendB:
      return "SEND_B";
    case PtActionType::kRecvB:
      return "RECV_B";
    case PtActionType::kReduceGrad:
      return "REDUCE_GRAD";
  }
  return "?";
}

bool IsCompute(PtActionType t) {
  return t == PtActionType::kF || t == PtActionType::kB || t == PtActionType::kI || t == PtActionType::kW;
}

// torchtitan builds a rank's stages by a placement style; name the one this
// mapping is, so the user knows which to ask for.
std::string PlacementNote(const std::vector<int>& stage_rank, int pp) {
  const int n = static_cast<int>(stage_rank.size());
  bool loop = true, vshape = n == 2 * pp;
  for (int v = 0; v < n; ++v) {
    loop = loop && stage_rank[v] == v % pp;
    vshape = vshape && stage_rank[v] == (v < pp ? v : 2 * pp - 1 - v);
  }
  if (loop) return fmt::format("stage v on rank v mod {} (torchtitan's \"loop\" style)", pp);
  if (vshape) return "stage v on rank v, then back down (torchtitan's \"v\" style)";
  std::string map;
  for (int v = 0; v < n; ++v) map += fmt::format("{}{}->{}", v == 0 ? "" : ", ", v, stage_rank[v]);
  return "stages on ranks " + map +
         " (neither torchtitan style: build each rank's stages by hand for _PipelineScheduleRuntime)";
}

}  // namespace

std::string PtActionName(const PtAction& a) {
  if (a.type == PtActionType::kReduceGrad) return fmt::format("{}{}", a.stage, TypeName(a.type));
  return fmt::format("{}{}{}", a.stage, TypeName(a.type), a.microbatch);
}

PytorchExport ExportPytorchSchedule(const ExecutionPlan& exec, bool with_comms) {
  PytorchExport out;
  const Schedule& s = exec.schedule;
  std::set<std::pair<int, int>> units;  // (unit, template)
  for (const auto& st : exec.stages) units.insert({st.unit, st.pipeline});
  if (units.size() != 1) {
    out.notes = fmt::format(
        "the plan runs {} pipelines (units or templates) side by side or in turn; PyTorch's "
        "pipeline schedules run one pipeline of one model",
        units.size());
    return out;
  }
  if (!exec.replicated) {
    out.notes =
        "its data-parallel replicas run different microbatches or orders (per-replica schedules, as "
        "Entrain's); PyTorch runs the same schedule on every replica";
    return out;
  }
  const int m = s.microbatches_of(0);
  for (int v = 0; v < s.num_stages(); ++v) {
    if (s.microbatches_of(v) != m) {
      out.notes = fmt::format(
          "stage {} runs {} microbatches and stage 0 runs {} (per-module sub-microbatches, as "
          "PipeWeaver's); PyTorch runs every stage on the same microbatches",
          v, s.microbatches_of(v), m);
      return out;
    }
  }
  for (const StageEdge& e : s.StageEdges()) {
    if (e.to != e.from + 1 || !e.first.empty() || !e.producers.empty()) {
      out.notes = fmt::format(
          "stage {} feeds stage {} other than one microbatch to the next stage; PyTorch's "
          "stages form a chain",
          e.from, e.to);
      return out;
    }
  }
  if (!s.extra_deps.empty()) {
    out.notes = "its ranks wait on each other between units (temporal phases); PyTorch has no such barrier";
    return out;
  }
  out.expressible = true;
  out.stage_rank = s.stage_rank;
  out.num_microbatches = m;
  out.order.assign(s.num_ranks, {});
  for (int r = 0; r < s.num_ranks; ++r) {
    for (const Action& a : s.ranks[r]) {
      const bool act = a.payload == Payload::kActivation;
      switch (a.kind) {
        case ActionKind::kForward:
          out.order[r].push_back({a.stage, PtActionType::kF, a.microbatch});
          break;
        case ActionKind::kBackward:
          out.order[r].push_back({a.stage, PtActionType::kB, a.microbatch});
          break;
        case ActionKind::kBackwardData:
          out.order[r].push_back({a.stage, PtActionType::kI, a.microbatch});
          break;
        case ActionKind::kBackwardWeight:
          out.order[r].push_back({a.stage, PtActionType::kW, a.microbatch});
          break;
        case ActionKind::kSend:
          if (with_comms) {
            out.order[r].push_back({a.stage, act ? PtActionType::kSendF : PtActionType::kSendB, a.microbatch});
          }
          break;
        case ActionKind::kRecv:
          // Loom names the sending stage, PyTorch the receiving one.
          if (with_comms) {
            const int to = a.peer_stage >= 0 ? a.peer_stage : (act ? a.stage + 1 : a.stage - 1);
            out.order[r].push_back({to, act ? PtActionType::kRecvF : PtActionType::kRecvB, a.microbatch});
          }
          break;
        default:
          break;  // gradient collectives, waits, the optimizer step: DDP/FSDP's, outside the schedule
      }
    }
  }
  if (with_comms) {
    // PyTorch's _add_reduce_grad: each stage's REDUCE_GRAD right after its last B or W on its rank.
    for (auto& row : out.order) {
      std::map<int, size_t> last;  // stage -> index of its last B or W
      for (size_t i = 0; i < row.size(); ++i) {
        if (row[i].type == PtActionType::kB || row[i].type == PtActionType::kW) last[row[i].stage] = i;
      }
      std::vector<PtAction> with_reduce;
      for (size_t i = 0; i < row.size(); ++i) {
        with_reduce.push_back(row[i]);
        if (auto it = last.find(row[i].stage); it != last.end() && it->second == i) {
          with_reduce.push_back({row[i].stage, PtActionType::kReduceGrad, 0});
        }
      }
      row = std::move(with_reduce);
    }
  }
  out.notes = fmt::format("{} ranks, {} stages, {} microbatches per replica; {}", s.num_ranks, s.num_stages(), m,
                          PlacementNote(s.stage_rank, s.num_ranks));
  return out;
}

std::string FormatPytorchCsv(const PtSchedule& order) {
  std::string out;
  for (const auto& row : order) {
    for (size_t i = 0; i < row.size(); ++i) {
      if (i > 0) out += ',';
      out += PtActionName(row[i]);
    }
    out += "\n";
  }
  return out;
}

PtSchedule ParsePytorchCsv(const std::string& text, const std::string& file) {
  static const std::regex cell(
      R"(^([0-9]{1,6})(SEND_F|RECV_F|SEND_B|RECV_B|UNSHARD|RESHARD|REDUCE_GRAD|F|I|B|W)([0-9]{0,8})$)");
  static const std::map<std::string, PtActionType> types = {
      {"F", PtActionType::kF},          {"B", PtActionType::kB},          {"I", PtActionType::kI},
      {"W", PtActionType::kW},          {"SEND_F", PtActionType::kSendF}, {"RECV_F", PtActionType::kRecvF},
      {"SEND_B", PtActionType::kSendB}, {"RECV_B", PtActionType::kRecvB}};
  PtSchedule order;
  size_t begin = 0;
  for (int line = 1; begin < text.size(); ++line) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string row = text.substr(begin, end - begin);
    begin = end + 1;
    if (!row.empty() && row.back() == '\r') row.pop_back();
    if (static_cast<int>(order.size()) == kMaxRanks) {
      throw Error(fmt::format("{}:{}: more than {} rows; a row is one pipeline rank", file, line, kMaxRanks));
    }
    order.emplace_back();
    size_t c0 = 0;
    for (int column = 1; c0 <= row.size(); ++column) {
      size_t c1 = row.find(',', c0);
      if (c1 == std::string::npos) c1 = row.size();
      const std::string raw = row.substr(c0, c1 - c0);
      c0 = c1 + 1;
      const size_t first = raw.find_first_not_of(" \t");
      if (first == std::string::npos) continue;  // a bubble
      const std::string v = raw.substr(first, raw.find_last_not_of(" \t") - first + 1);
      std::smatch mt;
      if (!std::regex_match(v, mt, cell)) {
        throw Error(
            fmt::format("{}:{}:{}: cell '{}': expected STAGE TYPE MICROBATCH, TYPE one of F, B, I, W, SEND_F, "
                        "RECV_F, SEND_B, RECV_B (e.g. 0F0, 1I3, 2SEND_F1)",
                        file, line, column, v.substr(0, 40)));
      }
      // FSDP's, and the gradients' scaling (PyTorch's lowering adds it; Loom prices it with the step).
      if (mt[2] == "UNSHARD" || mt[2] == "RESHARD" || mt[2] == "REDUCE_GRAD") continue;
      if (mt[3].length() == 0) {
        throw Error(fmt::format("{}:{}:{}: cell '{}': {} needs a microbatch (e.g. {}{}0)", file, line, column, v,
                                mt[2].str(), mt[1].str(), mt[2].str()));
      }
      const long stage = std::stol(mt[1]), mb = std::stol(mt[3]);
      if (stage >= kMaxStages || mb >= kMaxMicrobatches) {
        throw Error(fmt::format("{}:{}:{}: cell '{}': stage at most {}, microbatch at most {}", file, line, column, v,
                                kMaxStages - 1, kMaxMicrobatches - 1));
      }
      order.back().push_back({static_cast<int>(stage), types.at(mt[2]), static_cast<int>(mb)});
    }
  }
  if (order.empty()) throw Error(fmt::format("{}: no rows; expected one row of actions per pipeline rank", file));
  return order;
}

void ValidatePytorchSchedule(const PtSchedule& order, int pp, int num_stages, int num_microbatches,
                             const std::string& file) {
  if (static_cast<int>(order.size()) != pp) {
    throw Error(
        fmt::format("{}: {} rows for {} pipeline ranks; PyTorch needs one row per rank", file, order.size(), pp));
  }
  // [stage][type F, B, I, W] -> microbatches seen
  std::vector<std::array<std::set<int>, 4>> seen(num_stages);
  std::vector<int> rank_of(num_stages, -1);
  for (int r = 0; r < pp; ++r) {
    for (const PtAction& a : order[r]) {
      if (!IsCompute(a.type)) continue;
      const std::string where = fmt::format("{}: rank {}: {}", file, r, PtActionName(a));
      if (a.stage < 0 || a.stage >= num_stages) {
        throw Error(fmt::format("{}: stage {} is not one of the {} stages", where, a.stage, num_stages));
      }
      if (a.microbatch < 0 || a.microbatch >= num_microbatches) {
        throw Error(
            fmt::format("{}: microbatch {} is not one of the {} microbatches", where, a.microbatch, num_microbatches));
      }
      if (rank_of[a.stage] >= 0 && rank_of[a.stage] != r) {
        throw Error(fmt::format("{}: stage {} is on both rank {} and rank {}; a stage lives on one rank", where,
                                a.stage, rank_of[a.stage], r));
      }
      rank_of[a.stage] = r;
      auto& s = seen[a.stage];
      const int k = static_cast<int>(a.type);
      if (a.type != PtActionType::kF && !s[0].count(a.microbatch)) {
        throw Error(
            fmt::format("{}: a backward before the forward of stage {} microbatch {}", where, a.stage, a.microbatch));
      }
      if (a.type == PtActionType::kW && !s[2].count(a.microbatch)) {
        throw Error(fmt::format("{}: a weight gradient (W) before the input gradient (I) of stage {} microbatch {}",
                                where, a.stage, a.microbatch));
      }
      if (!s[k].insert(a.microbatch).second) {
        throw Error(
            fmt::format("{}: stage {} microbatch {} runs {} twice", where, a.stage, a.microbatch, TypeName(a.type)));
      }
    }
  }
  for (int v = 0; v < num_stages; ++v) {
    const auto& s = seen[v];
    const int f = static_cast<int>(s[0].size()), b = static_cast<int>(s[1].size()), i = static_cast<int>(s[2].size()),
              w = static_cast<int>(s[3].size());
    if (f != num_microbatches) {
      throw Error(fmt::format("{}: stage {} runs {} forwards (F) for {} microbatches", file, v, f, num_microbatches));
    }
    if (i != w) {
      throw Error(fmt::format("{}: stage {} runs {} input gradients (I) and {} weight gradients (W); they pair up",
                              file, v, i, w));
    }
    if (b + i != num_microbatches) {
      throw Error(fmt::format("{}: stage {} runs {} full backwards (B) and {} split ones (I + W) for {} microbatches",
                              file, v, b, i, num_microbatches));
    }
  }
}

namespace {

// The counts of an imported file are its largest stage and microbatch + 1,
// so a mistyped number ("9F3" for "1F3") makes a count that most stages or
// microbatches cannot fill. Name the action holding the largest number when
// the numbering has a gap, before the order's checks blame an action that is
// right. Rows are lines (a blank line is a rank with no actions); actions are
// counted without bubbles and FSDP's cells.
void RefuseNumberingGaps(const PtSchedule& order, int num_stages, int num_microbatches, const std::string& file) {
  std::vector<bool> stage_runs(num_stages), microbatch_runs(num_microbatches);
  for (const auto& row : order) {
    for (const PtAction& a : row) {
      if (!IsCompute(a.type)) continue;
      stage_runs[a.stage] = true;
      microbatch_runs[a.microbatch] = true;
    }
  }
  const auto check = [&](const std::vector<bool>& runs, const char* what, auto number) {
    const auto gap = std::find(runs.begin(), runs.end(), false);
    if (gap == runs.end()) return;
    for (size_t r = 0; r < order.size(); ++r) {
      for (size_t k = 0; k < order[r].size(); ++k) {
        const PtAction& a = order[r][k];
        if (!IsCompute(a.type) || number(a) + 1 != static_cast<int>(runs.size())) continue;
        throw Error(
            fmt::format("{}:{}: rank {}'s action {}, {}: {} {}, but {} {} never runs; number them from 0 "
                        "without a gap",
                        file, r + 1, r, k + 1, PtActionName(a), what, number(a), what, gap - runs.begin()));
      }
    }
  };
  check(stage_runs, "stage", [](const PtAction& a) { return a.stage; });
  check(microbatch_runs, "microbatch", [](const PtAction& a) { return a.microbatch; });
}

}  // namespace

ImportedPytorchSchedule ImportPytorchSchedule(const PtSchedule& order, const std::string& file) {
  ImportedPytorchSchedule out;
  out.pp = static_cast<int>(order.size());
  for (const auto& row : order) {
    for (const PtAction& a : row) {
      if (!IsCompute(a.type)) continue;
      out.num_stages = std::max(out.num_stages, a.stage + 1);
      out.num_microbatches = std::max(out.num_microbatches, a.microbatch + 1);
    }
  }
  if (out.num_stages == 0) throw Error(fmt::format("{}: no compute actions (F, B, I, W)", file));
  RefuseNumberingGaps(order, out.num_stages, out.num_microbatches, file);
  ValidatePytorchSchedule(order, out.pp, out.num_stages, out.num_microbatches, file);
  out.stage_rank.assign(out.num_stages, -1);
  out.rank_orders.assign(out.pp, {});
  for (int r = 0; r < out.pp; ++r) {
    for (const PtAction& a : order[r]) {
      if (!IsCompute(a.type)) continue;
      out.stage_rank[a.stage] = r;
      StageStep step{a.type == PtActionType::kF, a.stage, a.microbatch, BackwardPart::kFused};
      if (a.type == PtActionType::kI) step.part = BackwardPart::kData;
      if (a.type == PtActionType::kW) step.part = BackwardPart::kWeight;
      out.rank_orders[r].push_back(step);
    }
  }
  for (int r = 0; r < out.pp; ++r) {
    if (out.rank_orders[r].empty()) {
      throw Error(fmt::format("{}: rank {} runs no stage; every pipeline rank holds at least one", file, r));
    }
  }
  return out;
}

PlanRun SimulatePytorchSchedule(const Model& model, const Cluster& cluster, const Workload& workload,
                                ParallelConfig config, const ImportedPytorchSchedule& schedule, const std::string& file,
                                int64_t iteration) {
  if (schedule.num_stages % schedule.pp != 0) {
    throw Error(
        fmt::format("{}: {} stages over {} ranks; Loom cuts the layers into the same number of stages per "
                    "rank (pp x vpp)",
                    file, schedule.num_stages, schedule.pp));
  }
  config.pp = schedule.pp;
  config.vpp = schedule.num_stages / schedule.pp;
  config.microbatches = schedule.num_microbatches;
  // Only to cut the stages (Validate wants interleaving for several per rank); the order is the file's.
  config.schedule = config.vpp > 1 ? ScheduleKind::kInterleaved : ScheduleKind::kOneFOneB;
  const Batch batch = DrawBatch(workload, iteration);
  StrategyContext ctx{model, cluster, workload, batch, {}};
  Plan plan = MegatronConfigPlan(ctx, config);
  plan.strategy = "pytorch-csv";
  Unit& unit = plan.units[0];
  PipelineSpec& pipe = unit.pipelines[0];
  pipe.schedule = ScheduleKind::kCustom;
  for (int v = 0; v < schedule.num_stages; ++v) pipe.stages[v].rank = schedule.stage_rank[v];
  plan.searched = fmt::format("{}: {} ranks, {} stages, {} microbatches; tp {} dp {} cp {}", file, schedule.pp,
                              schedule.num_stages, schedule.num_microbatches, config.tp, config.dp, config.cp);
  IterationSchedule it;
  it.iteration = iteration;
  const int per = static_cast<int>(plan.global_batch / schedule.num_microbatches);
  for (int k = 0; k < schedule.num_microbatches; ++k) {
    it.microbatch_samples.emplace_back();
    for (int x = k * per; x < (k + 1) * per; ++x) it.microbatch_samples.back().push_back(x);
  }
  it.unit_rank_orders[unit.name].assign(unit.num_replicas(), schedule.rank_orders);
  PlanRun run = RunPlan(model, cluster, workload, plan, batch, &it, config.sim);
  CheckFits(run, fmt::format("{} on {} (tp {} pp {} dp {} cp {})", file, cluster.name, config.tp, config.pp, config.dp,
                             config.cp));
  return run;
}

}  // namespace loom
