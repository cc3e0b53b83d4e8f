// A second thread for products worth splitting in two (included by gemv.cpp and qmatmul.cpp).
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace {

// One helper thread that takes the upper half of a large product's weight rows while the
// stream's thread sums the lower half (outputs are independent: the same bits). Decode steps of
// one row leave the second core idle, and a large LM head is memory-bound.
class Helper {
 public:
  static Helper& get() {
    static Helper* helper = new Helper();  // never destroyed: its thread lives with the process
    return *helper;
  }

  // JOB on the helper while CALLER runs here; false (nothing run) when the helper is busy
  bool split(const std::function<void()>& job, const std::function<void()>& caller) {
    std::unique_lock<std::mutex> busy(use_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &job;
      failed_ = nullptr;
    }
    wake_.notify_one();
    std::exception_ptr mine;
    try {
      caller();
    } catch (...) {
      mine = std::current_exception();
    }
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return job_ == nullptr; });
    if (mine) std::rethrow_exception(mine);
    if (failed_) std::rethrow_exception(failed_);
    return true;
  }

 private:
  Helper() { std::thread([this] { loop(); }).detach(); }

  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return job_ != nullptr; });
      const std::function<void()>* job = job_;
      lock.unlock();
      std::exception_ptr failed;
      try {
        (*job)();
      } catch (...) {
        failed = std::current_exception();
      }
      lock.lock();
      failed_ = failed;
      job_ = nullptr;
      done_.notify_all();
    }
  }

  std::mutex use_;  // one split at a time (another caller sums its product alone)
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void()>* job_ = nullptr;
  std::exception_ptr failed_;
};

}  // namespace
