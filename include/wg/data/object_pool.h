// A small pool of reusable scratch objects for loader threads (read
// buffers, point sets): acquire() lends a free object, or a new one when
// none is free, and the lease gives it back when it ends. Reusing the
// objects keeps their capacity, so a warm loader does not page-fault tens
// of MB of fresh memory per sample.
//
// Invariants: an object is lent to one lease at a time; its contents on
// acquire are whatever the last user left (callers overwrite them); the pool
// keeps at most as many objects as were ever lent at once. Thread-safe.
// No LibTorch.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

namespace wg {

template <typename T>
class ObjectPool {
 public:
  class Lease {
   public:
    Lease(ObjectPool* pool, std::unique_ptr<T> obj) : pool_(pool), obj_(std::move(obj)) {}
    Lease(Lease&&) noexcept = default;
    Lease& operator=(Lease&&) = delete;
    Lease(const Lease&) = delete;
    ~Lease() {
      if (obj_) pool_->give_back(std::move(obj_));
    }
    T& operator*() const { return *obj_; }
    T* operator->() const { return obj_.get(); }

   private:
    ObjectPool* pool_;
    std::unique_ptr<T> obj_;
  };

  ObjectPool() = default;
  ObjectPool(const ObjectPool&) = delete;
  ObjectPool& operator=(const ObjectPool&) = delete;

  Lease acquire() {
    std::unique_ptr<T> obj;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!free_.empty()) {
        obj = std::move(free_.back());
        free_.pop_back();
      }
    }
    if (!obj) obj = std::make_unique<T>();
    return Lease(this, std::move(obj));
  }

 private:
  void give_back(std::unique_ptr<T> obj) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(std::move(obj));
  }
  std::mutex mutex_;
  std::vector<std::unique_ptr<T>> free_;
};

}  // namespace wg
