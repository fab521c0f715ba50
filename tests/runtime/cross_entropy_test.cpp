// The runtime's chunked language-model loss (runtime/cross_entropy.h) against
// autograd's own cross_entropy on fp32 logits (transformers' ForCausalLMLoss:
// upcast, sum, -100 ignored): the loss and the logits' gradient, in fp32 and
// in bf16, in one chunk and in several, and what its backward holds.
#include "loom/runtime/cross_entropy.h"

#include <gtest/gtest.h>

#include <vector>

#include "loom/cost/layer_work.h"
#include "loom/runtime/tensor_memory.h"
#include "loom/weights/checkpoint_parts.h"
#include "thread_tp_group.h"

namespace loom {
namespace {

namespace F = torch::nn::functional;

// Autograd's loss and gradient, from logits upcast to fp32; the gradient back in logits' dtype.
std::pair<torch::Tensor, torch::Tensor> AutogradCrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets,
                                                             double scale) {
  const torch::Tensor x = logits.detach().requires_grad_();
  const torch::Tensor loss =
      F::cross_entropy(x.to(torch::kFloat), targets, F::CrossEntropyFuncOptions().reduction(torch::kSum)) * scale;
  loss.backward();
  return {loss.detach(), x.grad()};
}

TEST(SummedCrossEntropy, EqualsAutogradsCrossEntropyInEveryChunking) {
  torch::manual_seed(5);
  const int64_t rows = 10, vocab = 37;
  const torch::Tensor targets = torch::tensor({3, -100, 0, 36, 12, -100, -100, 7, 7, 20}, torch::kLong);
  const double scale = 1.0 / 7;  // the batch's label tokens, as TextLoss divides
  for (torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
    const torch::Tensor logits = (torch::randn({rows, vocab}) * 3).to(dtype);
    const auto [want_loss, want_grad] = AutogradCrossEntropy(logits, targets, scale);
    for (int64_t chunk : {0, 1, 3, 10, 64}) {
      const torch::Tensor x = logits.detach().requires_grad_();
      const torch::Tensor loss = runtime::SummedCrossEntropy(x, targets, chunk) * scale;
      loss.backward();
      EXPECT_EQ(loss.scalar_type(), torch::kFloat);
      EXPECT_NEAR(loss.item<double>(), want_loss.item<double>(), 1e-6 * want_loss.item<double>()) << chunk;
      ASSERT_EQ(x.grad().scalar_type(), dtype);
      // fp32: to rounding; bf16: the same fp32 values rounded once, so equal
      // but for the last bit of values that fall on a rounding boundary.
      const double tol = dtype == torch::kFloat ? 1e-6 : 2e-3;
      EXPECT_TRUE(torch::allclose(x.grad().to(torch::kFloat), want_grad.to(torch::kFloat), tol, 1e-7))
          << "chunk " << chunk << " dtype " << dtype;
      // Ignored rows get no gradient.
      EXPECT_EQ(x.grad()[1].abs().sum().item<double>(), 0.0);
    }
  }
}

TEST(VocabParallelCrossEntropy, EachRanksColumnsMakeTheWholeLossAndGradient) {
  torch::manual_seed(6);
  const int64_t rows = 9, vocab = 37;  // 37 over 2 and 3 ranks: uneven slices (18/19, 12/12/13)
  const torch::Tensor targets = torch::tensor({3, -100, 0, 36, 12, 18, 19, 24, 25}, torch::kLong);
  for (torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
    const torch::Tensor logits = (torch::randn({rows, vocab}) * 3).to(dtype);
    const auto [want_loss, want_grad] = AutogradCrossEntropy(logits, targets, 0.25);
    for (int ranks : {1, 2, 3}) {
      for (int64_t chunk : {1, 4, 64}) {
        SCOPED_TRACE(testing::Message() << dtype << " ranks " << ranks << " chunk " << chunk);
        test::ThreadTpGroup group(ranks);
        std::vector<double> losses(ranks);
        std::vector<torch::Tensor> grads(ranks);
        group.Run([&](int r) {
          const weights::SliceSpan span = weights::SliceSpanOf(vocab, r, ranks);
          const torch::Tensor x = logits.slice(1, span.begin, span.begin + span.length).detach().requires_grad_();
          const runtime::TensorParallel tp = group.Rank(r);
          const torch::Tensor loss =
              runtime::VocabParallelCrossEntropy(x, targets, span.begin, r, ranks, tp.all_reduce, chunk) * 0.25;
          loss.backward();
          losses[r] = loss.item<double>();
          grads[r] = x.grad();
        });
        for (int r = 0; r < ranks; ++r) {
          EXPECT_NEAR(losses[r], want_loss.item<double>(), 1e-6 * want_loss.item<double>()) << "rank " << r;
          EXPECT_EQ(grads[r].scalar_type(), dtype);
          EXPECT_EQ(group.all_reduces(r), 1) << "one all-reduce a call, whatever the chunking";
        }
        const torch::Tensor grad = torch::cat(grads, 1).to(torch::kFloat);
        const double tol = dtype == torch::kFloat ? 1e-6 : 2e-3;
        EXPECT_TRUE(torch::allclose(grad, want_grad.to(torch::kFloat), tol, 1e-7));
        EXPECT_EQ(grad[1].abs().sum().item<double>(), 0.0) << "an ignored row gets no gradient";
      }
    }
  }
  // No rows: no all-reduce (every rank of the group has none alike).
  test::ThreadTpGroup group(1);
  const torch::Tensor none = torch::zeros({0, 5}).requires_grad_();
  EXPECT_EQ(
      runtime::VocabParallelCrossEntropy(none, torch::zeros({0}, torch::kLong), 0, 0, 1, group.Rank(0).all_reduce, 4)
          .item<double>(),
      0.0);
  EXPECT_EQ(group.all_reduces(0), 0);
}

TEST(SliceSpanOf, SplitsEvenlyWhereItDividesAndByOneRowWhereNot) {
  EXPECT_EQ(weights::SliceSpanOf(128, 1, 2).begin, 64);
  EXPECT_EQ(weights::SliceSpanOf(128, 1, 2).length, 64);
  int64_t at = 0;
  for (int i = 0; i < 4; ++i) {  // GPT-2's 50257 over 4: 12564, 12564, 12564, 12565
    const weights::SliceSpan s = weights::SliceSpanOf(50257, i, 4);
    EXPECT_EQ(s.begin, at);
    EXPECT_EQ(s.length, i < 3 ? 12564 : 12565);
    at += s.length;
  }
  EXPECT_EQ(at, 50257);
}

TEST(SummedCrossEntropy, ChunksAreSizedAsTheMemoryModelPricesThem) {
  EXPECT_EQ(LossChunkRows(128256), (int64_t{256} << 20) / (4 * 128256));  // Llama 3's vocabulary: 523 rows
  EXPECT_EQ(LossChunkRows(int64_t{1} << 40), 1);                          // never zero rows
  // What the backward holds beyond the kept logits: their gradient in the
  // compute dtype and one fp32 chunk, against the 8 B per entry autograd's
  // cross_entropy held (its log-probabilities' gradient and the logits').
  Layer head;
  head.kind = LayerKind::kLmHead;
  head.hidden = 64;
  head.vocab = 128256;
  TokenStats t;
  t.tokens = 4096;
  EXPECT_DOUBLE_EQ(BackwardWorkingBytes(head, t, 1, 2), (2.0 * 4096 + 8.0 * 523) * 128256);
  EXPECT_DOUBLE_EQ(BackwardWorkingBytes(head, t, 1, 4), (4.0 * 4096 + 4.0 * 523) * 128256);
}

// What the backward holds beyond the logits it keeps, measured: their
// gradient in their own dtype and one fp32 chunk of probabilities (in bf16
// also the chunk's fp32 copy of the logits, which softmax makes first), as
// BackwardWorkingBytes prices the LM head (with chunks of 64 rows here).
TEST(SummedCrossEntropy, TheBackwardHoldsTheGradientAndOneChunk) {
  const int64_t rows = 256, vocab = 4096, chunk = 64;
  for (torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
    const torch::Tensor logits = torch::randn({rows, vocab}).to(dtype).requires_grad_();
    const torch::Tensor targets = torch::randint(0, vocab, {rows});
    runtime::TensorMemoryCounter counter;
    const torch::Tensor loss = runtime::SummedCrossEntropy(logits, targets, chunk);
    const double kept = static_cast<double>(counter.live_bytes());
    EXPECT_LT(kept, 64) << "the forward keeps only the loss (the logits are the caller's)";
    counter.ResetPeak();
    loss.backward();
    const double working = static_cast<double>(counter.peak_bytes()) - kept;
    const double e = dtype == torch::kFloat ? 4 : 2;
    EXPECT_NEAR(working, (e * rows + (e < 4 ? 8.0 : 4.0) * chunk) * vocab, 0.01 * e * rows * vocab) << dtype;
  }
}

}  // namespace
}  // namespace loom
