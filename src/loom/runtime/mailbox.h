// The messages of one step that a worker process holds: activations received
// from producer stages (as the consumer's autograd leaves), gradients
// received from consumer stages, and messages between two schedule ranks of
// this same process (handed over without a send). Cleared with the step.
// Only runtime translation units include this header (it includes libtorch).
#pragma once

#include <torch/torch.h>

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "loom/runtime/message_routing.h"
#include "loom/runtime/packing.h"

namespace loom::runtime {

// What producer (stage, microbatch) handed to one consumer microbatch, as the
// consumer holds it: one leaf per handed module (requires_grad, so the
// consumer's backward leaves the gradient to send back in .grad), the
// producer's packing (where each sequence lies in it), and how many consumer
// microbatches read it and have finished their backward (its gradient goes
// back only when all have).
struct Message {
  std::vector<int> modules;
  std::vector<torch::Tensor> leaves;
  const MicrobatchPacking* packing = nullptr;
  int users = 0, finished = 0;
  // module -> (sample, doc, image, clip) -> offset of that sequence in the leaf
  using Key = std::tuple<int, int, int, int>;
  std::map<int, std::map<Key, int64_t>> where;

  const std::map<Key, int64_t>& Where(int module);
  // The index of `module`'s leaf (-1: the message does not carry it).
  int Slot(int module) const;
  // The gradients of its leaves to send back (zeros where none flowed).
  // Throws loom::Error naming `key` if a consumer microbatch that read it has
  // not finished its backward: the schedule sends it too early.
  std::vector<torch::Tensor> Gradient(const MessageKey& key) const;
};

// A message of `modules` cut out of `flat` in the shapes of `shapes`, each a
// fresh leaf, packed as `packing`.
Message MakeMessage(const std::vector<int>& modules, const torch::Tensor& flat,
                    const std::vector<torch::Tensor>& shapes, const MicrobatchPacking& packing);

// What a message that carries only some of a producer's sequences (Carried,
// message_routing.h; an MMScale broker edge's share) holds of the producer's
// handed tensors `outputs` (one per `handed` module, each [1, tokens, width] in
// the producer's packing): the carried rows of each, in order.
std::vector<torch::Tensor> CarriedRows(const std::vector<torch::Tensor>& outputs,
                                       const std::vector<BoundaryTensor>& handed, const Carried& carried);

// The gradient such a message brings back (`flat`, the carried rows of each
// handed tensor in turn) spread over tensors shaped like `outputs`: zero on
// the rows it did not carry (no consumer of it read them).
std::vector<torch::Tensor> SpreadRows(const torch::Tensor& flat, const std::vector<torch::Tensor>& outputs,
                                      const std::vector<BoundaryTensor>& handed, const Carried& carried);

// Consumer microbatch `consumer`'s tensor of `module`, its sequences in its own
// packing order, cut out of the messages that carry them: first `own` (the
// producer microbatches its edges give it), then any other message of the same
// edges (a consumer sub-microbatch that shares its producers with an earlier
// one, PipeWeaver's woven edges). Autograd routes each row's gradient back to
// the message it came from. Marks the messages it reads as used.
torch::Tensor Assemble(int module, int64_t width, const MicrobatchPacking& consumer, const std::vector<Message*>& own,
                       const std::vector<Message*>& pool, std::set<Message*>& used, const std::string& where,
                       const torch::TensorOptions& options);

struct Mailbox {
  std::map<MessageKey, Message> activations;      // received (or cut from a local producer), by message
  std::map<MessageKey, torch::Tensor> gradients;  // received, flat, by message
  // Between schedule ranks of this process, flat: put by the send, taken by the receive.
  std::map<MessageKey, torch::Tensor> local_activations, local_gradients;

  std::map<MessageKey, torch::Tensor>& Local(bool activation) {
    return activation ? local_activations : local_gradients;
  }
};

}  // namespace loom::runtime
