// The Prometheus client's metrics, families and registry, and the text
// exposition format 0.0.4 they render (see include/wg/telemetry/metrics.h).
#include "wg/telemetry/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <stdexcept>

namespace wg::telemetry {

namespace {

void atomic_add(std::atomic<double>& a, double v) {
  double cur = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(cur, cur + v, std::memory_order_relaxed)) {
  }
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string escape_help(const std::string& h) {
  std::string out;
  out.reserve(h.size());
  for (char c : h) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// {a="x",b="y"} with an optional extra label last (the histogram's le).
void append_labels(std::string& out, const Labels& labels, const char* extra_name = nullptr,
                   const std::string& extra_value = {}) {
  if (labels.empty() && !extra_name) return;
  out += '{';
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) out += ',';
    first = false;
    out += k;
    out += "=\"";
    out += escape_label_value(v);
    out += '"';
  }
  if (extra_name) {
    if (!first) out += ',';
    out += extra_name;
    out += "=\"";
    out += escape_label_value(extra_value);
    out += '"';
  }
  out += '}';
}

void append_sample(std::string& out, const std::string& name, const Labels& labels, double value,
                   const char* extra_name = nullptr, const std::string& extra_value = {}) {
  out += name;
  append_labels(out, labels, extra_name, extra_value);
  out += ' ';
  out += format_value(value);
  out += '\n';
}

const char* type_name(MetricType t) {
  switch (t) {
    case MetricType::Counter: return "counter";
    case MetricType::Gauge: return "gauge";
    case MetricType::Histogram: return "histogram";
  }
  return "untyped";
}

// The sample names a family of `type` called `name` produces.
std::vector<std::string> sample_names(const std::string& name, MetricType type) {
  if (type == MetricType::Histogram) return {name, name + "_bucket", name + "_sum", name + "_count"};
  return {name};
}

void check_bounds(const std::vector<double>& bounds) {
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]))
      throw std::invalid_argument("histogram bucket bounds must be finite (+Inf is implicit)");
    if (i > 0 && !(bounds[i] > bounds[i - 1]))
      throw std::invalid_argument("histogram bucket bounds must be strictly increasing");
  }
}

}  // namespace

// ---- values ----------------------------------------------------------------

bool valid_metric_name(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

bool valid_label_name(const std::string& name) {
  if (name.empty() || name.rfind("__", 0) == 0) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[40];
  for (int precision : {15, 16, 17}) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string escape_label_value(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

void Counter::add(double v) {
  if (!(v >= 0)) return;  // negative or NaN: a counter never goes down
  atomic_add(value_, v);
}

void Gauge::inc(double v) { atomic_add(value_, v); }

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {
  check_bounds(bounds_);
  counts_.assign(bounds_.size() + 1, 0);
}

void Histogram::observe(double v) {
  // First bound >= v ("le"); NaN and values above every bound go to +Inf.
  size_t i = std::isnan(v) ? bounds_.size()
                           : size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[i];
  sum_ += v;
  ++count_;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t acc = 0;
  s.cumulative.reserve(counts_.size());
  for (uint64_t c : counts_) s.cumulative.push_back(acc += c);
  s.sum = sum_;
  s.count = count_;
  return s;
}

// ---- families --------------------------------------------------------------

template <typename T>
Family<T>::Family(std::string name, std::string help, std::vector<double> bounds)
    : name_(std::move(name)), help_(std::move(help)), bounds_(std::move(bounds)) {}

template <typename T>
T& Family<T>::with(const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = children_.find(labels);
  if (it != children_.end()) return *it->second;
  for (const auto& kv : labels) {
    if (!valid_label_name(kv.first))
      throw std::invalid_argument("metric " + name_ + ": invalid label name '" + kv.first + "'");
    if (type() == MetricType::Histogram && kv.first == "le")
      throw std::invalid_argument("metric " + name_ + ": a histogram cannot have a label 'le'");
  }
  std::unique_ptr<T> child;
  if constexpr (std::is_same_v<T, Histogram>) child = std::make_unique<T>(bounds_);
  else child = std::make_unique<T>();
  T& ref = *child;
  children_.emplace(labels, std::move(child));
  return ref;
}

template <typename T>
bool Family<T>::remove(const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  return children_.erase(labels) > 0;
}

template <typename T>
void Family<T>::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  children_.clear();
}

template <typename T>
size_t Family<T>::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return children_.size();
}

template <typename T>
void Family<T>::render(std::string& out) const {
  out += "# HELP " + name_ + ' ' + escape_help(help_) + '\n';
  out += "# TYPE " + name_ + ' ' + type_name(type()) + '\n';
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [labels, child] : children_) {
    if constexpr (std::is_same_v<T, Histogram>) {
      Histogram::Snapshot s = child->snapshot();
      for (size_t i = 0; i < s.cumulative.size(); ++i) {
        std::string le = i < s.bounds.size() ? format_value(s.bounds[i]) : "+Inf";
        append_sample(out, name_ + "_bucket", labels, double(s.cumulative[i]), "le", le);
      }
      append_sample(out, name_ + "_sum", labels, s.sum);
      append_sample(out, name_ + "_count", labels, double(s.count));
    } else {
      append_sample(out, name_, labels, child->value());
    }
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

// ---- registry --------------------------------------------------------------

struct Registry::Entry {
  MetricType type;
  std::unique_ptr<Family<Counter>> counter;
  std::unique_ptr<Family<Gauge>> gauge;
  std::unique_ptr<Family<Histogram>> histogram;
  const std::string& name() const {
    return counter ? counter->name() : gauge ? gauge->name() : histogram->name();
  }
};

Registry::Registry() = default;
Registry::~Registry() = default;

Registry::Entry* Registry::find_locked(const std::string& name) const {
  for (const auto& e : families_)
    if (e->name() == name) return e.get();
  return nullptr;
}

void Registry::check_new_name_locked(const std::string& name) const {
  if (!valid_metric_name(name)) throw std::invalid_argument("invalid metric name '" + name + "'");
  if (find_locked(name)) throw std::invalid_argument("metric '" + name + "' is registered with another type");
}

namespace {
void check_no_clash(const std::string& name, MetricType type, const std::vector<std::string>& taken) {
  for (const auto& n : sample_names(name, type))
    if (std::find(taken.begin(), taken.end(), n) != taken.end())
      throw std::invalid_argument("metric '" + name + "' clashes with the samples of another family ('" + n + "')");
}
}  // namespace

Family<Counter>& Registry::counter(const std::string& name, const std::string& help) {
  std::lock_guard<std::mutex> lock(mu_);
  if (Entry* e = find_locked(name); e && e->counter) return *e->counter;
  check_new_name_locked(name);
  if (!ends_with(name, "_total"))
    throw std::invalid_argument("counter '" + name + "' must end in _total");
  std::vector<std::string> taken;
  for (const auto& e : families_)
    for (auto& n : sample_names(e->name(), e->type)) taken.push_back(n);
  check_no_clash(name, MetricType::Counter, taken);
  auto e = std::make_unique<Entry>();
  e->type = MetricType::Counter;
  e->counter = std::make_unique<Family<Counter>>(name, help);
  families_.push_back(std::move(e));
  return *families_.back()->counter;
}

Family<Gauge>& Registry::gauge(const std::string& name, const std::string& help) {
  std::lock_guard<std::mutex> lock(mu_);
  if (Entry* e = find_locked(name); e && e->gauge) return *e->gauge;
  check_new_name_locked(name);
  if (ends_with(name, "_total"))
    throw std::invalid_argument("gauge '" + name + "' must not end in _total (reserved for counters)");
  std::vector<std::string> taken;
  for (const auto& e : families_)
    for (auto& n : sample_names(e->name(), e->type)) taken.push_back(n);
  check_no_clash(name, MetricType::Gauge, taken);
  auto e = std::make_unique<Entry>();
  e->type = MetricType::Gauge;
  e->gauge = std::make_unique<Family<Gauge>>(name, help);
  families_.push_back(std::move(e));
  return *families_.back()->gauge;
}

Family<Histogram>& Registry::histogram(const std::string& name, const std::string& help,
                                       const std::vector<double>& bounds) {
  check_bounds(bounds);
  std::vector<double> b = bounds;
  std::lock_guard<std::mutex> lock(mu_);
  if (Entry* e = find_locked(name); e && e->histogram) {
    if (e->histogram->bounds() != b)
      throw std::invalid_argument("histogram '" + name + "' is registered with other bucket bounds");
    return *e->histogram;
  }
  check_new_name_locked(name);
  if (ends_with(name, "_total"))
    throw std::invalid_argument("histogram '" + name + "' must not end in _total (reserved for counters)");
  std::vector<std::string> taken;
  for (const auto& e : families_)
    for (auto& n : sample_names(e->name(), e->type)) taken.push_back(n);
  check_no_clash(name, MetricType::Histogram, taken);
  auto e = std::make_unique<Entry>();
  e->type = MetricType::Histogram;
  e->histogram = std::make_unique<Family<Histogram>>(name, help, std::move(b));
  families_.push_back(std::move(e));
  return *families_.back()->histogram;
}

std::string Registry::serialize() const {
  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& e : families_) {
    if (e->counter) e->counter->render(out);
    else if (e->gauge) e->gauge->render(out);
    else e->histogram->render(out);
  }
  return out;
}

}  // namespace wg::telemetry
