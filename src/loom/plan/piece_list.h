// PieceList: the sample pieces of one (stage, microbatch), a vector of
// SamplePiece that keeps up to kInline pieces in place. A 16k-GPU plan has
// millions of (stage, microbatch) contents of one or two samples each; with a
// heap block each, compiling and freeing them was most of a simulated batch.
// Holds its pieces contiguously (data(), begin() and end() are pointers, so it
// converts to std::span<const SamplePiece>). Plain value: copies deep.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <span>

#include "loom/plan/sample_piece.h"

namespace loom {

class PieceList {
 public:
  static constexpr size_t kInline = 4;

  PieceList() = default;
  PieceList(std::initializer_list<SamplePiece> pieces) { Assign(pieces.begin(), pieces.size()); }
  explicit PieceList(std::span<const SamplePiece> pieces) { Assign(pieces.data(), pieces.size()); }
  PieceList(const PieceList& o) { Assign(o.data(), o.size_); }
  PieceList(PieceList&& o) noexcept { *this = std::move(o); }
  PieceList& operator=(const PieceList& o) {
    if (this != &o) Assign(o.data(), o.size_);
    return *this;
  }
  PieceList& operator=(PieceList&& o) noexcept {
    if (this == &o) return *this;
    heap_ = std::move(o.heap_);
    capacity_ = o.capacity_;
    size_ = o.size_;
    if (heap_ == nullptr) std::copy(o.inline_.begin(), o.inline_.begin() + size_, inline_.begin());
    o.capacity_ = kInline;
    o.size_ = 0;
    return *this;
  }

  void push_back(const SamplePiece& p) {
    if (size_ == capacity_) reserve(2 * capacity_);
    data()[size_++] = p;
  }
  void reserve(size_t n) {
    if (n <= capacity_) return;
    auto grown = std::make_unique<SamplePiece[]>(n);
    std::copy(data(), data() + size_, grown.get());
    heap_ = std::move(grown);
    capacity_ = n;
  }
  void clear() { size_ = 0; }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  SamplePiece* data() { return heap_ ? heap_.get() : inline_.data(); }
  const SamplePiece* data() const { return heap_ ? heap_.get() : inline_.data(); }
  SamplePiece* begin() { return data(); }
  SamplePiece* end() { return data() + size_; }
  const SamplePiece* begin() const { return data(); }
  const SamplePiece* end() const { return data() + size_; }
  SamplePiece& operator[](size_t i) { return data()[i]; }
  const SamplePiece& operator[](size_t i) const { return data()[i]; }

  bool operator==(const PieceList& o) const { return std::equal(begin(), end(), o.begin(), o.end()); }

 private:
  void Assign(const SamplePiece* p, size_t n) {
    size_ = 0;
    reserve(n);
    std::copy(p, p + n, data());
    size_ = n;
  }

  std::array<SamplePiece, kInline> inline_{};
  std::unique_ptr<SamplePiece[]> heap_;  // null: the pieces are in inline_
  size_t capacity_ = kInline;
  size_t size_ = 0;
};

}  // namespace loom
