#include "src/backends/interpret/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "pallas/error.h"
#include "pallas/pallas_call.h"

namespace pallas::interp {
namespace {

std::atomic<int> g_threads{0};  // 0: not chosen yet

int default_threads() {
  if (const char* e = std::getenv("PALLAS_NUM_THREADS"); e && *e) {
    char* end = nullptr;
    long v = std::strtol(e, &end, 10);
    if (end && *end == 0 && v >= 1 && v <= 4096) return static_cast<int>(v);
    throw Error("PALLAS_NUM_THREADS='" + std::string(e) + "' is not a thread count (a whole number from 1 to 4096)");
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

struct Job {
  const std::function<void(int64_t)>* fn;
  int64_t n;
  std::atomic<int64_t> next{0};
  int max_helpers = 0;  // workers that may join (the caller is not counted)
  int helpers = 0;      // workers that joined and have not left (under the pool's mutex)
  std::mutex err_mu;
  int64_t err_item = -1;
  std::exception_ptr err;

  void work() {
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) {
      try {
        (*fn)(i);
      } catch (...) {
        std::lock_guard<std::mutex> g(err_mu);
        if (err_item < 0 || i < err_item) err_item = i, err = std::current_exception();
        next.store(n, std::memory_order_relaxed);  // skip the items not started
      }
    }
  }
};

class Pool {
 public:
  static Pool& get() {
    static Pool* p = new Pool;  // never destroyed: workers may outlive static destructors
    return *p;
  }

  void run(int64_t n, const std::function<void(int64_t)>& fn, int threads) {
    Job job;
    job.fn = &fn;
    job.n = n;
    job.max_helpers = static_cast<int>(std::min<int64_t>(threads, n)) - 1;
    if (job.max_helpers > 0) {
      std::lock_guard<std::mutex> g(mu_);
      while (static_cast<int>(workers_.size()) < threads - 1) workers_.emplace_back([this] { loop(); });
      jobs_.push_back(&job);
    }
    if (job.max_helpers > 0) cv_.notify_all();
    job.work();
    if (job.max_helpers > 0) {
      std::unique_lock<std::mutex> l(mu_);
      jobs_.erase(std::find(jobs_.begin(), jobs_.end(), &job));  // no worker joins from now on
      done_cv_.wait(l, [&] { return job.helpers == 0; });
    }
    if (job.err) std::rethrow_exception(job.err);
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> l(mu_);
    while (true) {
      Job* j = nullptr;
      cv_.wait(l, [&] {
        for (Job* c : jobs_)
          if (c->helpers < c->max_helpers && c->next.load(std::memory_order_relaxed) < c->n) return (j = c) != nullptr;
        return false;
      });
      ++j->helpers;
      l.unlock();
      j->work();
      l.lock();
      if (--j->helpers == 0) done_cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<Job*> jobs_;
  std::vector<std::thread> workers_;  // detached in effect: the pool lives until exit
};

}  // namespace

int num_threads() {
  int t = g_threads.load(std::memory_order_relaxed);
  if (t > 0) return t;
  static const int d = default_threads();
  return d;
}

void parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  int t = num_threads();
  if (t <= 1 || n == 1) {
    Job job;
    job.fn = &fn;
    job.n = n;
    job.work();
    if (job.err) std::rethrow_exception(job.err);
    return;
  }
  Pool::get().run(n, fn, t);
}

}  // namespace pallas::interp

namespace pallas {
void set_interpret_num_threads(int n) {
  if (n < 0) throw Error("set_interpret_num_threads: " + std::to_string(n) + " threads; give 1 or more, or 0 for the default");
  interp::g_threads.store(n, std::memory_order_relaxed);
}
int interpret_num_threads() { return interp::num_threads(); }
}  // namespace pallas
