// A small Prometheus client shaped like prometheus-cpp: a Registry owns metric
// families (Counter, Gauge, Histogram), each family owns its labelled children,
// and Registry::serialize() renders the text exposition format 0.0.4.
// No LibTorch. Thread-safe: training threads update while HTTP threads scrape.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

namespace wg::telemetry {

// Label name -> value. Sorted, so a label set has one rendering.
using Labels = std::map<std::string, std::string>;

enum class MetricType { Counter, Gauge, Histogram };

// A monotonically increasing value. Negative or NaN increments are ignored
// (telemetry never throws into the training loop once a family exists).
class Counter {
 public:
  Counter() = default;
  void inc() { add(1.0); }
  void add(double v);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  Gauge() = default;
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void inc(double v = 1.0);
  void dec(double v = 1.0) { inc(-v); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Fixed upper bounds (strictly increasing, finite; +Inf is implicit).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);

  struct Snapshot {
    std::vector<double> bounds;             // without +Inf
    std::vector<uint64_t> cumulative;       // one per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// True if `name` matches [a-zA-Z_:][a-zA-Z0-9_:]*.
bool valid_metric_name(const std::string& name);
// True if `name` matches [a-zA-Z_][a-zA-Z0-9_]* and does not start with "__".
bool valid_label_name(const std::string& name);
// A sample value as the text format spells it: NaN, +Inf, -Inf, or the
// shortest decimal that reads back to the same double.
std::string format_value(double v);
// Label value escaping: backslash, double quote and newline.
std::string escape_label_value(const std::string& v);

// One metric family: name, help, type, and its children by label set.
// References returned by with() stay valid until remove() of that label set
// or the registry's destruction.
template <typename T>
class Family {
 public:
  Family(std::string name, std::string help, std::vector<double> bounds = {});
  Family(const Family&) = delete;
  Family& operator=(const Family&) = delete;

  // The child for `labels`, created on first use. Throws std::invalid_argument
  // for an invalid label name (or "le" on a histogram).
  T& with(const Labels& labels = {});
  // Drops the child for `labels` (a rank or a piece that went away); its
  // reference dangles afterwards. Returns whether there was one.
  bool remove(const Labels& labels);
  // Drops every child.
  void clear();
  size_t size() const;

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<double>& bounds() const { return bounds_; }
  static constexpr MetricType type() {
    if constexpr (std::is_same_v<T, Counter>) return MetricType::Counter;
    else if constexpr (std::is_same_v<T, Gauge>) return MetricType::Gauge;
    else return MetricType::Histogram;
  }

  // Appends this family in text format to `out` (HELP, TYPE, samples).
  void render(std::string& out) const;

 private:
  std::string name_;
  std::string help_;
  std::vector<double> bounds_;  // histograms only
  mutable std::mutex mu_;
  std::map<Labels, std::unique_ptr<T>> children_;
};

extern template class Family<Counter>;
extern template class Family<Gauge>;
extern template class Family<Histogram>;

class Registry {
 public:
  Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;
  ~Registry();

  // Registers a family, or returns the existing one of the same name, type
  // (and bounds). Throws std::invalid_argument for an invalid name, a counter
  // not ending in "_total", a non-counter ending in "_total", a name taken by
  // another type, or bad histogram bounds.
  Family<Counter>& counter(const std::string& name, const std::string& help);
  Family<Gauge>& gauge(const std::string& name, const std::string& help);
  Family<Histogram>& histogram(const std::string& name, const std::string& help,
                               const std::vector<double>& bounds);

  // Every family in registration order, text exposition format 0.0.4.
  std::string serialize() const;

 private:
  struct Entry;
  Entry* find_locked(const std::string& name) const;
  void check_new_name_locked(const std::string& name) const;

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Entry>> families_;
};

// The Content-Type of serialize()'s output.
inline constexpr const char* kTextContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace wg::telemetry
