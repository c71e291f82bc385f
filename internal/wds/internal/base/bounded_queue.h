// BoundedQueue: a blocking FIFO of at most `capacity` items between producer
// and consumer threads, with a Close() that releases every waiter and a
// CloseInput() that lets consumers drain what is queued.
//
//   BoundedQueue<int> q(2);
//   std::thread producer([&] { for (int i = 0; q.Push(i); ++i) {} });
//   std::optional<int> first = q.Pop();
//   q.Close();            // the producer's Push returns false; it exits
//   producer.join();
//
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <utility>

namespace wds {

template <typename T>
class BoundedQueue {
 public:
  // REQUIRES: capacity >= 1.
  explicit BoundedQueue(size_t capacity) : capacity_(capacity) {}
  BoundedQueue(const BoundedQueue&) = delete;
  BoundedQueue& operator=(const BoundedQueue&) = delete;

  // Push waits for room, then appends `item`. Returns false, dropping `item`,
  // once the queue or its input is closed (also when that happens while
  // waiting).
  bool Push(T item) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      not_full_.wait(lock,
                     [this] { return closed_ || input_closed_ || items_.size() < capacity_; });
      if (closed_ || input_closed_) return false;
      items_.push_back(std::move(item));
    }
    not_empty_.notify_one();
    return true;
  }

  // Pop waits for an item and removes it. Returns nullopt once the queue is
  // closed (items still queued are discarded with the queue), or once its
  // input is closed and every queued item was taken.
  std::optional<T> Pop() {
    std::optional<T> item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      not_empty_.wait(lock, [this] { return closed_ || input_closed_ || !items_.empty(); });
      if (closed_ || items_.empty()) return std::nullopt;
      item.emplace(std::move(items_.front()));
      items_.pop_front();
    }
    not_full_.notify_one();
    return item;
  }

  // PopFor is Pop that waits at most `timeout`: when the time runs out first
  // it returns nullopt and sets *timed_out (which is false otherwise).
  std::optional<T> PopFor(std::chrono::milliseconds timeout, bool* timed_out) {
    std::optional<T> item;
    *timed_out = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!not_empty_.wait_for(lock, timeout,
                               [this] { return closed_ || input_closed_ || !items_.empty(); })) {
        *timed_out = true;
        return std::nullopt;
      }
      if (closed_ || items_.empty()) return std::nullopt;
      item.emplace(std::move(items_.front()));
      items_.pop_front();
    }
    not_full_.notify_one();
    return item;
  }

  // Close wakes every waiter; later Push and Pop calls return at once.
  void Close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
    }
    not_full_.notify_all();
    not_empty_.notify_all();
  }

  // CloseInput ends the input: later Pushes return false; Pops return the
  // queued items, then nullopt.
  void CloseInput() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      input_closed_ = true;
    }
    not_full_.notify_all();
    not_empty_.notify_all();
  }

  bool closed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_;
  }

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable not_full_;
  std::condition_variable not_empty_;
  std::deque<T> items_;
  bool closed_ = false;
  bool input_closed_ = false;
};

}  // namespace wds
