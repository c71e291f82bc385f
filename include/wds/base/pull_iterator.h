// PullIterator: range-for over a source that yields items one at a time.
//
//   class Source {
//    public:
//     using Iterator = wds::PullIterator<Item>;
//     Iterator begin() { return Iterator([this] { return Next(); }); }
//     Iterator end() { return Iterator(); }
//     std::optional<Item> Next();   // nullopt at the end; throws on errors
//   };
//
// The Loader and the DevicePrefetcher are iterated this way. The iterator
// holds the current item; advancing pulls the next one (an exception thrown
// by the pull leaves the iterator at its end and propagates).
// Thread safety: one thread, like the source.
#pragma once

#include <cstddef>
#include <functional>
#include <iterator>
#include <optional>
#include <utility>

namespace wds {

template <typename T>
class PullIterator {
 public:
  using value_type = T;
  using reference = const T&;
  using pointer = const T*;
  using difference_type = std::ptrdiff_t;
  using iterator_category = std::input_iterator_tag;
  using Pull = std::function<std::optional<T>()>;

  // PullIterator() is the end.
  PullIterator() = default;
  // PullIterator(pull) pulls the first item at once.
  explicit PullIterator(Pull pull) : pull_(std::move(pull)) { ++*this; }

  reference operator*() const { return *current_; }
  pointer operator->() const { return &*current_; }
  PullIterator& operator++() {
    Pull pull = std::exchange(pull_, nullptr);
    current_.reset();
    current_ = pull();
    if (current_.has_value()) pull_ = std::move(pull);
    return *this;
  }
  // Iterators compare equal when both are at the end, or are the same one.
  bool operator==(const PullIterator& other) const {
    return current_.has_value() == other.current_.has_value() &&
           (!current_.has_value() || this == &other);
  }
  bool operator!=(const PullIterator& other) const { return !(*this == other); }

 private:
  Pull pull_;
  std::optional<T> current_;
};

}  // namespace wds
