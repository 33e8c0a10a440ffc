// The training loop (see header).
#include "wg/train/trainer.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>

#include "wg/model/memory_planner.h"
#include "wg/train/batch_tensors.h"
#include "wg/util/memory.h"

namespace wg {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The config with every anemoi stream's channels read from its store.
Config with_resolved_streams(Config config) {
  resolve_anemoi_streams(config);
  return config;
}

WeatherModel seeded_model(const Config& config, const torch::Device& device) {
  torch::manual_seed(config.seed);
  WeatherModel model(config);
  model->to(device);
  model->train();
  return model;
}
}  // namespace

Trainer::Trainer(const Config& config, const CheckpointPlan& plan, const torch::Device& device,
                 const DistContext* dist, Communicator* comm)
    : config_(with_resolved_streams(config)),
      dist_(dist),
      rank_(dist ? dist->rank() : 0),
      world_(dist ? dist->size() : 1),
      device_(device),
      device_name_(device.str()),
      model_(seeded_model(config_, device)),
      dataset_(config_, rank_, world_),
      loader_(dataset_, config.loader_num_workers, config.loader_prefetch),
      loss_(config),
      schedule_(config.lr, dataset_.total_steps(), world_) {
  set_plan(plan);
  params_ = model_->parameters();
  if (comm && world_ > 1) {
    grad_sync_ = std::make_unique<GradSync>(params_, *comm, size_t(config.ddp_bucket_mb * (1 << 20)),
                                            dist->threads_multiple());
    grad_sync_->broadcast_parameters(0);
  }
  optimizer_ = std::make_unique<torch::optim::AdamW>(
      params_, torch::optim::AdamWOptions(schedule_.at(0)).weight_decay(config.weight_decay));
}

Trainer::~Trainer() = default;

StepMetrics Trainer::step(int64_t step) {
  const Batch batch = loader_.next(step);
  StepMetrics m = step_on(batch, step);
  m.data_seconds = loader_.last_wait_seconds();
  m.skipped_samples = dataset_.skipped_samples();
  m.step_seconds += m.data_seconds;
  m.samples_per_second = double(batch.sample_ids.size()) / m.step_seconds;
  m.tokens_per_second = double(token_count(batch)) / m.step_seconds;
  return m;
}

bool Trainer::any_rank(bool flag) const {
  if (!dist_ || world_ == 1) return flag;
  return dist_->allreduce_max(flag ? 1.0 : 0.0) > 0.0;
}

void Trainer::set_plan(const CheckpointPlan& plan) {
  plan_ = plan;
  model_->set_plan(plan_);
}

void Trainer::recompute_one_more_piece(int64_t step, const std::string& what) {
  const std::vector<std::string> keys = plan_.keys();
  std::string key;
  if (costs_) {  // the cheapest bytes first, as the planner measured them
    std::vector<bool> on;
    for (const auto& p : costs_->pieces) on.push_back(plan_.get(p.key));
    const int i = next_piece_to_recompute(*costs_, on);
    if (i >= 0) key = costs_->pieces[size_t(i)].key;
  } else {  // no measurements: attention layers (the largest activations) first, then the rest
    for (int pass = 0; pass < 2 && key.empty(); ++pass)
      for (const auto& k : keys)
        if (!plan_.get(k) && (pass == 1 || k.find(".attn") != std::string::npos)) { key = k; break; }
  }
  if (key.empty())
    throw std::runtime_error("out of memory at step " + std::to_string(step) + " on rank " + std::to_string(rank_) +
                             " with every piece already recomputed (" + plan_.summary() + "): " + what);
  plan_.set(key, true);
  model_->set_plan(plan_);
  ++oom_events_;
  spdlog::warn("rank {} step {}: out of memory ({}); now also recomputing {} ({}), retrying the step", rank_, step,
               what, key, plan_.summary());
}

StepMetrics Trainer::step_on(const Batch& batch, int64_t step) {
  if (config_.fault_injection.rank == rank_ && config_.fault_injection.step == step)
    throw std::runtime_error("fault injection: rank " + std::to_string(rank_) + " fails at step " + std::to_string(step));
  const auto t_input = Clock::now();
  const ModelInput input = to_model_input(batch, device_);
  const auto t0 = Clock::now();
  StepMetrics m;
  m.start_bytes = memory_snapshot(device_name_).current_bytes;
  m.step = step;
  m.total_steps = total_steps();
  m.lr = schedule_.at(std::min(step, total_steps() - 1));

  // Out of memory: the rank recomputes one more piece and every rank retries
  // the step together. Every rank runs the same collectives in every
  // attempt (flag agreement, gradient buckets), failed or not.
  for (int attempt = 0;; ++attempt) {
    reset_peak_memory(device_name_);
    optimizer_->zero_grad();
    std::string oom_what;
    torch::Tensor loss;
    try {
      loss = masked_loss(input);
      m.activation_bytes = memory_snapshot(device_name_).current_bytes - m.start_bytes;
      m.loss = loss.item<double>();
    } catch (const c10::OutOfMemoryError& e) {
      oom_what = e.what_without_backtrace();
      loss = torch::Tensor();  // frees the partial graph
    }
    bool retry = any_rank(!oom_what.empty());
    if (!retry) {
      // Every rank takes the same branch, or the gradient collectives would not match.
      if (any_rank(!std::isfinite(m.loss))) {
        if (config_.nan_policy == NanPolicy::Error)
          throw NonFiniteLossError("non-finite loss (" + std::to_string(m.loss) + " on rank " + std::to_string(rank_) +
                                   ", or on another rank) at step " + std::to_string(step) +
                                   "; nan_policy is 'error' (set nan_policy: skip to skip such steps)");
        if (++consecutive_skips_ >= config_.max_consecutive_nan_skips)
          throw NonFiniteLossError("non-finite loss in " + std::to_string(consecutive_skips_) +
                                   " consecutive steps (max_consecutive_nan_skips), last at step " +
                                   std::to_string(step));
        spdlog::warn("step {}: non-finite loss, step skipped (nan_policy: skip, {} in a row)", step, consecutive_skips_);
        m.skipped = true;
        break;
      }
      consecutive_skips_ = 0;
      if (grad_sync_) grad_sync_->begin();
      try {
        loss.backward();
      } catch (const c10::OutOfMemoryError& e) {
        oom_what = e.what_without_backtrace();
      }
      loss = torch::Tensor();
      if (grad_sync_) grad_sync_->finish();  // also after a failure: the other ranks wait for our buckets
      retry = any_rank(!oom_what.empty());
    }
    if (!retry) break;
    if (attempt >= config_.auto_plan.oom_max_retries)
      throw std::runtime_error("out of memory in step " + std::to_string(step) + " after " + std::to_string(attempt + 1) +
                               " attempts (oom_max_retries " + std::to_string(config_.auto_plan.oom_max_retries) +
                               "); budget " + budget_text_ + "; smallest plan tried: " + plan_.summary() +
                               (oom_what.empty() ? "" : "; rank " + std::to_string(rank_) + ": " + oom_what));
    if (!oom_what.empty()) recompute_one_more_piece(step, oom_what);
    ++m.oom_retries;
  }
  if (!m.skipped) {
    m.grad_norm = config_.grad_clip > 0 ? torch::nn::utils::clip_grad_norm_(params_, config_.grad_clip)
                                        : torch::nn::utils::clip_grad_norm_(params_, 1e30);
    for (auto& group : optimizer_->param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(m.lr);
    optimizer_->step();
  }
  m.peak_bytes = memory_snapshot(device_name_).peak_bytes;
  m.compute_seconds = seconds_since(t0);
  m.step_seconds = seconds_since(t_input);
  m.samples_per_second = double(batch.sample_ids.size()) / m.step_seconds;
  m.tokens_per_second = double(token_count(batch)) / m.step_seconds;
  return m;
}

int64_t Trainer::probe(const Batch& batch, PieceObserver* observer) {
  optimizer_->zero_grad();
  const int64_t start = memory_snapshot(device_name_).current_bytes;
  reset_peak_memory(device_name_);
  model_->set_observer(observer);
  try {
    ModelInput input = to_model_input(batch, device_);
    torch::Tensor loss = masked_loss(input);
    model_->set_observer(nullptr);
    loss.backward();  // GradSync is not begun: no exchange
  } catch (...) {
    model_->set_observer(nullptr);
    throw;
  }
  const int64_t peak = memory_snapshot(device_name_).peak_bytes - start;
  optimizer_->zero_grad();
  return peak;
}

int64_t Trainer::steady_base_bytes() const {
  int64_t params = 0, grads_missing = 0;
  for (const auto& p : params_) {
    params += p.numel() * p.element_size();
    if (!p.grad().defined()) grads_missing += p.numel() * p.element_size();
  }
  // AdamW keeps two moments per parameter from its first step on.
  const int64_t moments_missing = optimizer_->state().empty() ? 2 * params : 0;
  return memory_snapshot(device_name_).current_bytes + grads_missing + moments_missing;
}

torch::Tensor Trainer::masked_loss(const ModelInput& input) {
  return loss_(model_->forward(input), masked_targets(input), masked_valid(input));
}

double Trainer::validate() {
  const int64_t n = dataset_.validation_steps();
  if (n == 0) return -1;
  auto generator = at::detail::getDefaultCPUGenerator();
  const torch::Tensor rng_state = generator.get_state();
  double sum = 0;
  {
    torch::NoGradGuard no_grad;
    model_->eval();
    for (int64_t i = 0; i < n; ++i) {
      const ModelInput input = to_model_input(dataset_.validation_batch(i), device_);
      sum += masked_loss(input).item<double>();
    }
    model_->train();
  }
  generator.set_state(rng_state);
  double batches = double(n);
  if (dist_ && world_ > 1) {
    sum = dist_->allreduce_sum(sum);
    batches = dist_->allreduce_sum(batches);
  }
  return sum / batches;
}

RunSummary Trainer::train(const std::vector<MetricsSink*>& sinks, const Control& control) {
  RunSummary s;
  const auto t0 = Clock::now();
  int64_t samples = 0;
  bool have_first = false;
  int64_t k = control.first_step;
  for (; k < total_steps(); ++k) {
    StepMetrics m = step(k);
    samples += config_.batch_size_per_gpu;
    s.skipped_steps += m.skipped;
    s.oom_retries += m.oom_retries;
    s.peak_bytes = std::max(s.peak_bytes, m.peak_bytes);
    if (k > control.first_step) s.steady_peak_bytes = std::max(s.steady_peak_bytes, m.peak_bytes);
    if ((k + 1) % dataset_.steps_per_epoch() == 0 && dataset_.validation_steps() > 0)
      s.last_validation_loss = m.validation_loss = validate();
    const bool logged = (k + 1) % config_.train_log_freq.terminal == 0 || k + 1 == total_steps();
    if (logged && !m.skipped) {
      if (!have_first) s.first_loss = m.loss;
      have_first = true;
      s.last_loss = m.loss;
    }
    for (MetricsSink* sink : sinks) sink->on_step(m);
    ++s.steps;
    if (k + 1 < total_steps() && control.stop && control.stop()) {
      s.stopped_early = true;
      ++k;
      break;
    }
    if (control.checkpoint && control.checkpoint_every > 0 && (k + 1) % control.checkpoint_every == 0 &&
        k + 1 < total_steps())
      control.checkpoint(k + 1);
  }
  s.next_step = std::min(k, total_steps());
  // Stopping early, or done (a rerun then finds nothing left to do).
  if (control.checkpoint && s.steps > 0) control.checkpoint(s.next_step);
  s.seconds = seconds_since(t0);
  s.mean_samples_per_second = s.seconds > 0 ? double(samples) / s.seconds : 0;
  s.planned_peak_bytes = planned_peak_bytes_;
  s.planned_added_seconds = planned_added_seconds_;
  for (MetricsSink* sink : sinks) sink->on_end(s);
  return s;
}

}  // namespace wg
