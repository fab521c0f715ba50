#include "loom/runtime/mailbox.h"

#include <fmt/format.h>

#include "loom/error.h"
#include "loom/runtime/tensor_buckets.h"

namespace loom::runtime {

const std::map<Message::Key, int64_t>& Message::Where(int module) {
  auto [it, inserted] = where.try_emplace(module);
  if (inserted) {
    int64_t offset = 0;
    for (const auto& s : packing->modules[module]) {
      it->second.emplace(Key{s.sample, s.doc, s.image, s.clip}, offset);
      offset += s.tokens;
    }
  }
  return it->second;
}

int Message::Slot(int module) const {
  for (size_t i = 0; i < modules.size(); ++i) {
    if (modules[i] == module) return static_cast<int>(i);
  }
  return -1;
}

std::vector<torch::Tensor> Message::Gradient(const MessageKey& key) const {
  if (finished != users) {
    throw Error(
        fmt::format("runtime: the gradient of stage {} microbatch {} goes back to stage {} before every "
                    "consumer microbatch that read it finished its backward ({} of {}); the schedule "
                    "sends it too early",
                    key.to, key.consumer, key.from, finished, users));
  }
  std::vector<torch::Tensor> parts;
  for (const auto& t : leaves) parts.push_back(t.grad().defined() ? t.grad() : torch::zeros_like(t));
  return parts;
}

Message MakeMessage(const std::vector<int>& modules, const torch::Tensor& flat,
                    const std::vector<torch::Tensor>& shapes, const MicrobatchPacking& packing) {
  Message m;
  m.modules = modules;
  for (auto& t : SplitLike(flat, shapes)) m.leaves.push_back(t.clone().requires_grad_(true));
  m.packing = &packing;
  return m;
}

std::vector<torch::Tensor> CarriedRows(const std::vector<torch::Tensor>& outputs,
                                       const std::vector<BoundaryTensor>& handed, const Carried& carried) {
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const RowRuns& runs = carried.rows.at(handed[i].module);
    std::vector<torch::Tensor> pieces;
    for (const auto& [offset, rows] : runs) pieces.push_back(outputs[i].narrow(1, offset, rows));
    if (pieces.empty()) {
      out.push_back(outputs[i].narrow(1, 0, 0));  // none of its samples: an empty message
    } else {
      out.push_back(pieces.size() == 1 ? pieces[0] : torch::cat(pieces, 1));
    }
  }
  return out;
}

std::vector<torch::Tensor> SpreadRows(const torch::Tensor& flat, const std::vector<torch::Tensor>& outputs,
                                      const std::vector<BoundaryTensor>& handed, const Carried& carried) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> out;
  int64_t at = 0;  // into flat
  for (size_t i = 0; i < outputs.size(); ++i) {
    const int64_t width = handed[i].width;
    const int64_t rows = carried.packing->Tokens(handed[i].module);
    const torch::Tensor part = flat.slice(0, at, at + rows * width).view({1, rows, width});
    at += rows * width;
    // (outputs[i] may hold no values any more: a meta tensor of its shape, StepExecutor's ReadOutput.)
    torch::Tensor g = torch::zeros(outputs[i].sizes(), outputs[i].options().device(flat.device()));
    int64_t from = 0;
    for (const auto& [offset, n] : carried.rows.at(handed[i].module)) {
      g.narrow(1, offset, n).copy_(part.narrow(1, from, n));
      from += n;
    }
    out.push_back(g);
  }
  if (at != flat.numel()) {
    throw Error(fmt::format("runtime: a gradient message of {} values for {} carried ones", flat.numel(), at));
  }
  return out;
}

torch::Tensor Assemble(int module, int64_t width, const MicrobatchPacking& consumer, const std::vector<Message*>& own,
                       const std::vector<Message*>& pool, std::set<Message*>& used, const std::string& where,
                       const torch::TensorOptions& options) {
  std::vector<torch::Tensor> runs;
  Message* run_msg = nullptr;
  int64_t run_begin = 0, run_end = 0;
  auto flush = [&]() {
    if (run_msg != nullptr)
      runs.push_back(run_msg->leaves[run_msg->Slot(module)].narrow(1, run_begin, run_end - run_begin));
    run_msg = nullptr;
  };
  for (const auto& s : consumer.modules[module]) {
    const Message::Key key{s.sample, s.doc, s.image, s.clip};
    Message* found = nullptr;
    int64_t offset = 0;
    for (const auto* list : {&own, &pool}) {
      for (Message* m : *list) {
        if (found != nullptr || m->Slot(module) < 0) continue;
        const auto& w = m->Where(module);
        if (auto f = w.find(key); f != w.end()) {
          found = m;
          offset = f->second;
        }
      }
    }
    if (found == nullptr) {
      throw Error(
          fmt::format("runtime: {}: no message carries module {}'s sequence of sample {} (document {}, "
                      "image {}, clip {})",
                      where, module, s.sample, s.doc, s.image, s.clip));
    }
    used.insert(found);
    if (found == run_msg && offset == run_end) {
      run_end += s.tokens;
      continue;
    }
    flush();
    run_msg = found;
    run_begin = offset;
    run_end = offset + s.tokens;
  }
  flush();
  if (runs.empty()) return torch::zeros({1, 0, width}, options);
  if (runs.size() == 1) return runs[0];
  return torch::cat(runs, 1);
}

}  // namespace loom::runtime
