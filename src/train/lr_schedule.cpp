// Upstream's learning-rate schedule (see header). The scheduler classes
// below follow PyTorch's (torch/optim/lr_scheduler.py) for one parameter
// group: the same formulas, in the same order, in double precision.
#include "wg/train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

namespace wg {

namespace {
constexpr double kPi = 3.14159265358979323846;

// One optimizer parameter group, as the schedulers see it.
struct Group {
  double lr = 0, initial_lr = 0, max_lr = 0, min_lr = 0, beta1 = 0.9;
  bool has_initial_lr = false;
};

class Scheduler {
 public:
  virtual ~Scheduler() = default;
  void step() {  // LRScheduler.step(): last_epoch += 1, then the new value
    ++last_epoch_;
    update();
  }

 protected:
  explicit Scheduler(Group& g) : g_(g) {
    if (!g_.has_initial_lr) g_.initial_lr = g_.lr, g_.has_initial_lr = true;
  }
  // The constructor's _initial_step().
  void initial_step() { step(); }
  virtual void update() = 0;
  Group& g_;
  int64_t last_epoch_ = -1;
};

class OneCycle final : public Scheduler {
 public:
  OneCycle(Group& g, double max_lr, int64_t total, double pct_start, double div, double final_div)
      : Scheduler(prepare(g, max_lr, div, final_div)), total_(total) {
    end0_ = double(pct_start * double(total)) - 1.0;
    end1_ = double(total) - 1.0;
    initial_step();
  }

 private:
  static Group& prepare(Group& g, double max_lr, double div, double final_div) {
    g.initial_lr = max_lr / div;
    g.has_initial_lr = true;
    g.max_lr = max_lr;
    g.min_lr = g.initial_lr / final_div;
    g.beta1 = kMaxMomentum;  // cycle_momentum with Adam's betas
    return g;
  }
  static double anneal(double start, double end, double pct) { return end + (start - end) / 2.0 * (std::cos(kPi * pct) + 1); }
  void update() override {
    if (last_epoch_ > total_)
      throw std::logic_error("OneCycleLR stepped past its total steps");
    const double t = double(last_epoch_);
    // A phase of no length (a one-step warm-up: end0_ = 0) is at its end;
    // PyTorch divides 0 by 0 there and raises.
    const auto fraction = [](double done, double span) { return span > 0 ? done / span : 1.0; };
    if (t <= end0_) {
      const double pct = fraction(t, end0_);
      g_.lr = anneal(g_.initial_lr, g_.max_lr, pct);
      g_.beta1 = anneal(kMaxMomentum, kBaseMomentum, pct);
    } else {
      const double pct = fraction(t - end0_, end1_ - end0_);
      g_.lr = anneal(g_.max_lr, g_.min_lr, pct);
      g_.beta1 = anneal(kBaseMomentum, kMaxMomentum, pct);
    }
  }
  static constexpr double kMaxMomentum = 0.95, kBaseMomentum = 0.85;
  int64_t total_;
  double end0_, end1_;
};

class Linear final : public Scheduler {
 public:
  Linear(Group& g, double start, double end, int64_t iters) : Scheduler(g), start_(start), end_(end), iters_(iters) {
    initial_step();
  }

 private:
  void update() override {
    if (last_epoch_ == 0) {
      g_.lr *= start_;
    } else if (last_epoch_ <= iters_) {
      g_.lr *= 1.0 + (end_ - start_) / (double(iters_) * start_ + double(last_epoch_ - 1) * (end_ - start_));
    }
  }
  double start_, end_;
  int64_t iters_;
};

class Exponential final : public Scheduler {
 public:
  Exponential(Group& g, double gamma) : Scheduler(g), gamma_(gamma) { initial_step(); }

 private:
  void update() override {
    if (last_epoch_ > 0) g_.lr *= gamma_;
  }
  double gamma_;
};

double scaling(const std::string& policy, int64_t kappa) {
  if (policy == "const") return 1.0;
  if (policy == "sqrt") return std::sqrt(double(kappa));
  if (policy == "linear") return double(kappa);
  throw std::invalid_argument("lr_scaling_policy must be const, sqrt or linear, got '" + policy + "'");
}
}  // namespace

LrPhases lr_phases(const LrConfig& c, int64_t total) {
  LrPhases p{c.lr_steps_warmup, 0, c.lr_steps_cooldown};
  p.decay = total - p.warmup - p.cooldown;
  if (p.decay < int64_t(0.2 * double(total))) {
    p.warmup = int64_t(0.1 * double(total));
    p.cooldown = int64_t(0.05 * double(total));
    p.decay = total - p.warmup - p.cooldown;
  }
  return p;
}

AdamConstants adam_constants(int64_t kappa) {
  if (kappa > 80)
    throw std::invalid_argument("batch_size_per_gpu times ranks is " + std::to_string(kappa) +
                                ": above 80 AdamW's beta2 = 1 - 0.0125 * that would be negative (as upstream)");
  const double k = double(kappa);
  return {std::max(0.5, 1.0 - 0.025 * k), 1.0 - 0.0125 * k, 2e-8 / std::sqrt(k)};
}

LrSchedule::LrSchedule(const LrConfig& c, int64_t total, int64_t kappa) {
  if (total < 1) throw std::invalid_argument("the run has no optimizer step");
  if (c.lr_final_decay < c.lr_final)
    throw std::invalid_argument("lr_final_decay must be >= lr_final (as upstream asserts)");
  scale_ = scaling(c.lr_scaling_policy, kappa);
  phases_ = lr_phases(c, total);
  const int64_t W = phases_.warmup, D = phases_.decay, Cd = phases_.cooldown;
  const double lr_max = scale_ * c.lr_max, lr_fd = scale_ * c.lr_final_decay;

  Group g;
  g.lr = c.lr_start;
  g.beta1 = adam_constants(kappa).beta1;
  std::unique_ptr<Scheduler> warmup, decay_owned, cooldown;
  Scheduler* decay = nullptr;
  if (c.lr_policy_warmup == "linear") {
    warmup = std::make_unique<Linear>(g, c.lr_start / lr_max, 1.0, W);
  } else if (c.lr_policy_warmup == "cosine") {
    const int64_t n = W + D + 1;
    warmup = std::make_unique<OneCycle>(g, lr_max, n, double(W) / double(n), lr_max / c.lr_start, lr_fd / c.lr_start);
  } else {
    throw std::invalid_argument("lr_policy_warmup must be linear or cosine, got '" + c.lr_policy_warmup + "'");
  }
  const std::string& dp = c.lr_policy_decay;
  if (dp == "linear") {
    decay = (decay_owned = std::make_unique<Linear>(g, 1.0, c.lr_final_decay / lr_max, D)).get();
  } else if (dp == "exponential") {
    decay = (decay_owned = std::make_unique<Exponential>(g, std::pow(c.lr_final_decay / lr_max, 1.0 / double(D)))).get();
  } else if (dp == "cosine") {
    if (c.lr_policy_warmup != "cosine")
      throw std::invalid_argument("lr_policy_decay cosine needs lr_policy_warmup cosine (as upstream)");
    decay = warmup.get();
  } else if (dp != "sqrt" && dp != "constant") {
    throw std::invalid_argument("lr_policy_decay must be constant, linear, exponential, sqrt or cosine, got '" + dp + "'");
  }
  if (c.lr_policy_cooldown != "linear")
    throw std::invalid_argument("lr_policy_cooldown must be linear (upstream's only cool-down), got '" +
                                c.lr_policy_cooldown + "'");
  // The cool-down's start and end factors; the lr it starts from ends times cool_to / cool_from.
  const double cool_from = c.lr_start / lr_max, cool_to = c.lr_final_decay > 0 ? c.lr_final / c.lr_final_decay : 0.0;
  cooldown = std::make_unique<Linear>(g, cool_from, cool_to, Cd);
  const double sqrt_factor = lr_max * std::sqrt(double(W));

  Scheduler* current = W > 0 ? warmup.get() : decay;
  double lr = g.lr;  // the scheduler's own record (self.lr)
  for (int64_t i = 0; i < total; ++i) {
    lr_.push_back(g.lr);  // what optimizer step i uses
    beta1_.push_back(g.beta1);
    // LearningRateScheduler.step() after optimizer step i
    if (i >= W + D + Cd) continue;
    const bool phase_decay = i > W && i <= W + D;
    if (dp == "sqrt" && phase_decay) {
      lr = i > 0 ? sqrt_factor / std::sqrt(double(i)) : lr_max;
      g.lr = lr;
    } else if (dp == "constant" && phase_decay) {
      const double cur = lr;
      lr = lr_max;
      if (cur < lr) g.lr = lr;
    } else if (current) {
      current->step();
      lr = g.lr;
    }  // else no scheduler (no warm-up before a constant or sqrt decay): the lr stays; upstream crashes here
    if (i == W) current = decay;
    if (i == W + D) current = cooldown.get();
  }
  // The cool-down's LinearLR takes over after step W + D: step W + D + 1
  // uses the lr it starts from, later steps its chained factors, which end
  // at that lr times e / s (s = lr_start / lr_max', e = lr_final /
  // lr_final_decay), whatever the decay before it: with e >= s the lr does
  // not fall, and lr_final is never reached.
  const int64_t cool_start = W + D + 1, last = int64_t(lr_.size()) - 1;
  const double factor = cool_to / cool_from;
  if (Cd > 0 && cool_start < last && factor >= 1 - 1e-12) {
    std::ostringstream m;
    m.precision(4);
    if (factor > 1 + 1e-12)
      m << "the cool-down raises the learning rate from " << lr_[size_t(cool_start)] << " to " << lr_[size_t(last)]
        << " over the run's last " << last - cool_start << " steps";
    else
      m << "the cool-down keeps the learning rate at " << lr_[size_t(cool_start)] << " over the run's last "
        << last - cool_start << " steps, never lowering it to lr_final";
    m << ", as upstream's scheduler does with these values (its chained LinearLR takes the lr it starts from times "
      << "(lr_final / lr_final_decay) / (lr_start / lr_max') = " << factor << ", lr_max' = " << lr_max
      << "); for a falling cool-down set lr_final below " << c.lr_final_decay * c.lr_start / lr_max
      << " (lr_final_decay * lr_start / lr_max'), e.g. 0 as upstream's default";
    cooldown_warning_ = m.str();
  }
  for (size_t i = 0; i < lr_.size(); ++i)
    if (!std::isfinite(lr_[i]) || lr_[i] < 0)
      throw std::invalid_argument("the learning-rate schedule gives " + std::to_string(lr_[i]) + " at step " +
                                  std::to_string(i) + " (lr_start, lr_max, lr_final_decay must be > 0)");
}

double LrSchedule::at(int64_t step) const { return lr_[size_t(std::clamp<int64_t>(step, 0, int64_t(lr_.size()) - 1))]; }
double LrSchedule::beta1_at(int64_t step) const {
  return beta1_[size_t(std::clamp<int64_t>(step, 0, int64_t(beta1_.size()) - 1))];
}

}  // namespace wg
