// Opening shards for Python, and what a fork must not inherit.
//
// PythonOpener opens local paths and file: URLs itself (descriptors it keeps
// track of) and hands "-" and pipe: URLs to wds::OpenUrl; http:// and https://
// URLs are read through curl, as the reference package does. A file that
// cannot be opened is an errno error (FileNotFoundError in Python) naming it.
//
// Fork safety (torch DataLoader workers are forked): no native thread exists
// unless a webdataset_cpp.Loader is being iterated, and a forked child must
// not use, destroy or keep what the parent's native objects own. So the
// child closes every shard descriptor this module opened, and every native
// object made before the fork (ProcessLocal) is abandoned in the child, never
// destroyed there: destroying it could kill the parent's pipe: commands or
// join threads that do not exist in the child.
#pragma once

#include <unistd.h>

#include <memory>
#include <utility>

#include "wds/byte_stream.h"

namespace wdspy {

wds::Opener PythonOpener();

// Fork handlers (os.register_at_fork): before takes the descriptor registry's
// lock so that no other thread holds it across the fork.
void BeforeFork();
void AfterForkInParent();
void AfterForkInChild();

// OpenShardDescriptors counts descriptors this module holds open (tests).
size_t OpenShardDescriptors();

// ProcessLocal owns a native object that belongs to the process that made
// it: in a forked child its destructor abandons the object (leaks it).
template <typename T>
class ProcessLocal {
 public:
  ProcessLocal() = default;
  explicit ProcessLocal(std::unique_ptr<T> object) : object_(std::move(object)), pid_(getpid()) {}
  ~ProcessLocal() { reset(); }
  ProcessLocal(ProcessLocal&&) = default;
  ProcessLocal& operator=(ProcessLocal&& other) {
    reset();
    object_ = std::move(other.object_);
    pid_ = other.pid_;
    return *this;
  }

  T* get() const { return inherited() ? nullptr : object_.get(); }
  T* operator->() const { return get(); }
  explicit operator bool() const { return get() != nullptr; }
  // inherited is true in a forked child of the process that made the object.
  bool inherited() const { return object_ != nullptr && pid_ != getpid(); }

  void reset() {
    if (inherited()) {
      (void)object_.release();
    } else {
      object_.reset();
    }
  }
  // take moves the object out (to destroy it elsewhere, e.g. without the GIL).
  std::unique_ptr<T> take() {
    if (inherited()) {
      (void)object_.release();
      return nullptr;
    }
    return std::move(object_);
  }

 private:
  std::unique_ptr<T> object_;
  pid_t pid_ = 0;
};

}  // namespace wdspy
