// The training loop (see header).
#include "wg/train/trainer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "wg/model/flops.h"
#include "wg/model/model_options.h"
#include "wg/train/batch_tensors.h"
#include "wg/util/autocast.h"
#include "wg/util/failed_backward.h"
#include "wg/util/generator_state.h"
#include "wg/util/memory.h"
#include "wg/util/units.h"

namespace wg {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Clipping also measures the norm; without clipping it is asked for a bound
// no gradient norm reaches.
constexpr double kNoClipping = 1e30;

WeatherModel seeded_model(const Config& config, const ModelOptions& options, const torch::Device& device) {
  torch::manual_seed(config.seed);
  WeatherModel model(options);
  model->to(device);
  model->train();
  return model;
}

StepLossNames names_of(const Config& config, const std::vector<StreamShape>& shapes) {
  StepLossNames n;
  for (size_t s = 0; s < shapes.size(); ++s) {
    n.streams.push_back(shapes[s].name);
    for (const LossTerm& t : config.training_loss.loss_fcts) {
      n.channel_loss_keys.push_back(shapes[s].name + "." + t.name);
      n.channels.push_back(shapes[s].target_channels);
    }
  }
  return n;
}
}  // namespace

Trainer::Trainer(const Config& config, Dataset data, const RecomputePlan& plan, const torch::Device& device,
                 const DistContext* dist, Communicator* comm)
    : config_(config),
      dist_(dist),
      rank_(dist ? dist->rank() : 0),
      world_(dist ? dist->size() : 1),
      device_(device),
      device_name_(device.str()),
      dataset_(std::move(data)),
      model_options_(model_options(config_, dataset_.stream_shapes())),
      model_(seeded_model(config_, model_options_, device)),
      loader_(dataset_, config.loader_num_workers, config.loader_prefetch),
      loss_(config, config.training_loss, dataset_.stream_shapes(), true),
      validation_loss_(config, config.validation_loss, dataset_.stream_shapes(), false),
      loss_names_(names_of(config, dataset_.stream_shapes())),
      schedule_(config.lr, dataset_.total_steps(), int64_t(config.batch_size_per_gpu) * world_),
      adam_(adam_constants(int64_t(config.batch_size_per_gpu) * world_)),
      scaler_(loss_scaling_enabled(config.loss_scaling, device.is_cuda(), config.with_mixed_precision,
                                   config.attention_dtype)) {
  if (scaler_.enabled())
    spdlog::info("dynamic loss scaling from {} (loss_scaling: {})", scaler_.scale(), config.loss_scaling);
  set_plan(plan);
  auto policy = std::make_shared<OomPolicy>(config.auto_plan.oom_max_retries);
  oom_handler_ = [policy](const RecomputePlan& current, const OomEvent& e) {
    return policy->on_out_of_memory(current, e);
  };
  params_ = model_->parameters();
  if (comm && world_ > 1) {
    grad_sync_ = std::make_unique<GradSync>(params_, *comm, size_t(config.ddp_bucket_mb * kMiB),
                                            dist->threads_multiple());
    grad_sync_->broadcast_parameters(0);
  }
  optimizer_ = std::make_unique<FusedAdamW>(
      params_, torch::optim::AdamWOptions(schedule_.at(0))
                   .betas({schedule_.beta1_at(0), adam_.beta2})
                   .eps(adam_.eps)
                   .weight_decay(config.weight_decay));
  if (config.validate_with_ema)
    ema_ = std::make_unique<WeightAverage>(params_, int64_t(config.batch_size_per_gpu) * world_,
                                           config.ema_halflife_in_thousands, config.ema_ramp_up_ratio);
}

Trainer::~Trainer() = default;

int64_t Trainer::parameter_count() const {
  int64_t n = 0;
  for (const auto& p : params_) n += p.numel();
  return n;
}

ModelFlops Trainer::flops_of(const ModelBatch& batch) const {
  // Off the CPU (CUDA's attention; autocast runs only there) no joint pass.
  return model_flops(model_options_, flop_shape(batch), device_.is_cpu() ? CoreKernel::Cpu : CoreKernel::Other);
}

StepMetrics Trainer::step(int64_t step) {
  const BuiltBatch batch = loader_.next(step);
  StepMetrics m = step_on(batch, step);
  m.data_seconds = loader_.last_wait_seconds();
  m.skipped_samples = dataset_.skipped_samples();
  m.step_seconds += m.data_seconds;
  m.samples_per_second = double(batch.sample_ids.size()) / m.step_seconds;
  m.tokens_per_second = double(token_count(batch)) / m.step_seconds;
  return m;
}

bool Trainer::any_rank(bool flag) {
  if (!dist_ || world_ == 1) return flag;
  const auto t = Clock::now();
  const bool any = dist_->allreduce_max(flag ? 1.0 : 0.0) > 0.0;
  sync_wait_seconds_ += seconds_since(t);
  return any;
}

void Trainer::set_plan(const RecomputePlan& plan) {
  plan_ = plan;
  model_->set_plan(plan_);
}

torch::Tensor Trainer::training_loss(const ModelBatch& batch, StepMetrics* m) {
  ModelOutput out;
  {
    const AutocastGuard autocast(device_.is_cuda() && config_.with_mixed_precision, config_.attention_dtype);
    out = model_->forward(batch);
  }
  PhysicalLossResult r = loss_(batch, out.preds);  // outside autocast, as upstream
  if (m) {
    m->stream_losses = std::move(r.per_stream);
    m->channel_losses = std::move(r.per_channel);
  }
  // No stream left because their coordinate embeddings gave NaN: a
  // non-finite loss (nan_policy), not a batch without targets.
  if (!r.loss.defined() && out.nan_dropped > 0) return torch::full({}, std::numeric_limits<float>::quiet_NaN());
  return r.loss;
}

bool Trainer::attempt_step(const ModelBatch& batch, StepMetrics& m, std::string& oom_what) {
  torch::Tensor loss;
  bool no_data = false;
  try {
    loss = training_loss(batch, &m);
    m.activation_bytes = memory_snapshot(device_name_).current_bytes - m.start_bytes;
    no_data = !loss.defined();
    m.loss = no_data ? std::numeric_limits<double>::quiet_NaN() : loss.item<double>();
  } catch (const c10::OutOfMemoryError& e) {
    oom_what = e.what_without_backtrace();
    loss = torch::Tensor();  // frees the partial graph
  }
  if (any_rank(!oom_what.empty())) return true;
  // Every rank takes the same branch, or the gradient collectives would not match.
  if (any_rank(no_data)) {
    // Upstream divides by zero streams with data: a NaN loss, and its
    // gradient scaler skips the optimizer step on every rank.
    spdlog::warn("step {}: no stream has target data{}; optimizer step skipped (as upstream)", m.step,
                 no_data ? "" : " on some rank");
    m.skipped = true;
    return false;
  }
  m.nonfinite_loss = !std::isfinite(m.loss);
  if (any_rank(m.nonfinite_loss)) {
    skip_nonfinite(m,
                   "non-finite loss (" + std::to_string(m.loss) + " on rank " + std::to_string(rank_) +
                       ", or on another rank) at step " + std::to_string(m.step),
                   "non-finite loss, step skipped");
    return false;
  }
  if (grad_sync_) grad_sync_->begin();
  try {
    (scaler_.enabled() ? loss * scaler_.scale() : loss).backward();
  } catch (const c10::OutOfMemoryError& e) {
    oom_what = e.what_without_backtrace();
  }
  loss = torch::Tensor();
  if (!oom_what.empty()) release_failed_backward(device_);  // else the retry starts with this graph held
  // backward() returns once its kernels are queued; the rank's own backward
  // still running on the GPU is its work, not a wait for the other ranks
  // (sync_wait_seconds). The exchange waits for the device anyway.
  if (grad_sync_ && device_.is_cuda()) torch::cuda::synchronize(device_.index());
  if (grad_sync_) grad_sync_->finish();  // also after a failure: the other ranks wait for our buckets
  return any_rank(!oom_what.empty());
}

void Trainer::skip_nonfinite(StepMetrics& m, const std::string& what, const char* skipped) {
  if (config_.nan_policy == NanPolicy::Error)
    throw NonFiniteLossError(what + "; nan_policy is 'error' (set nan_policy: skip to skip such steps)");
  if (++consecutive_skips_ >= config_.max_consecutive_nan_skips)
    throw NonFiniteLossError("non-finite loss or gradient in " + std::to_string(consecutive_skips_) +
                             " consecutive steps (max_consecutive_nan_skips), last at step " + std::to_string(m.step));
  spdlog::warn("step {}: {} (nan_policy: skip, {} in a row)", m.step, skipped, consecutive_skips_);
  m.skipped = true;
}

void Trainer::optimizer_step(StepMetrics& m) {
  for (auto& group : optimizer_->param_groups())
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(m.lr).betas({schedule_.beta1_at(m.step), adam_.beta2});
  if (scaler_.enabled()) optimizer_->unscale_gradients(scaler_.scale());
  m.grad_norm = optimizer_->gradient_norm();
  m.nonfinite_grad = !std::isfinite(m.grad_norm);
  // The gradients were exchanged, so the ranks' norms agree; asking all
  // keeps them together should an exchange ever differ.
  const bool nonfinite = any_rank(m.nonfinite_grad);
  if (scaler_.enabled()) {
    // The scaler's business, not nan_policy's: a float16 gradient overflowed
    // at this scale. Skip the step, as upstream's GradScaler does, and back off.
    const double was = scaler_.scale();
    scaler_.update(nonfinite);
    if (nonfinite) {
      if (scaler_.exhausted())
        throw NonFiniteLossError("non-finite gradients at step " + std::to_string(m.step) +
                                 " with the loss scale down to " + std::to_string(scaler_.scale()) +
                                 ": they are not finite at any scale (the loss was " + std::to_string(m.loss) + ")");
      spdlog::warn("step {}: non-finite gradient at loss scale {}, optimizer step skipped, scale now {}", m.step, was,
                   scaler_.scale());
      m.skipped = true;
      return;
    }
  } else if (nonfinite) {
    // Upstream's GradScaler skips the optimizer step on an inf/NaN gradient
    // (wg-model.md §10.4); nan_policy decides here, as for the loss.
    skip_nonfinite(m,
                   "non-finite gradient norm (" + std::to_string(m.grad_norm) + " on rank " + std::to_string(rank_) +
                       ") at step " + std::to_string(m.step) + " from a finite loss (" + std::to_string(m.loss) + ")",
                   "non-finite gradient norm, optimizer step skipped");
    return;
  }
  consecutive_skips_ = 0;
  optimizer_->step_clipped(m.grad_norm, config_.grad_clip > 0 ? config_.grad_clip : kNoClipping);
}

StepMetrics Trainer::step_on(const BuiltBatch& batch, int64_t step) {
  if (config_.fault_injection.rank == rank_ && config_.fault_injection.step == step)
    throw std::runtime_error("fault injection: rank " + std::to_string(rank_) + " fails at step " + std::to_string(step));
  const auto t_input = Clock::now();
  const ModelBatch input = to_model_batch(batch, device_);
  const auto t0 = Clock::now();
  StepMetrics m;
  m.step = step;
  m.total_steps = total_steps();
  m.lr = schedule_.at(step);
  m.loss_scale = scaler_.scale();  // what a backward in this step multiplies the loss by

  // Out of memory: every rank asks the handler for the plan to retry with
  // (a rank that ran out recomputes more) and all retry the step together,
  // running the same collectives in every attempt, failed or not. Each
  // attempt draws the same random numbers (dropout), so a retried step is
  // the step a run with memory enough takes.
  sync_wait_seconds_ = 0;
  const double exposed_before = grad_sync_ ? grad_sync_->stats().exposed_seconds : 0.0;
  const GeneratorStates rng = GeneratorStates::capture(device_);
  for (int attempt = 0;; ++attempt) {
    if (attempt > 0) rng.restore();
    optimizer_->clear_gradients();
    // Held when the compute begins: parameters, AdamW's moments, the input;
    // not the last step's gradients (set to none), so the step's peak above
    // it counts the activations and the gradients backward makes.
    m.start_bytes = memory_snapshot(device_name_).current_bytes;
    reset_peak_memory(device_name_);
    std::string oom_what;
    if (!attempt_step(input, m, oom_what)) break;
    const RecomputePlan next = oom_handler_(plan_, OomEvent{step, attempt, rank_, oom_what});
    if (!(next == plan_)) {
      set_plan(next);
      ++oom_events_;
    }
    ++m.oom_retries;
  }
  if (!m.skipped) optimizer_step(m);
  const ModelFlops flops = flops_of(input);
  // A skipped step ran its backward where its gradient was not finite.
  m.model_flops = m.skipped && !m.nonfinite_grad ? flops.forward() : flops.step(plan_);
  m.peak_flops = peak_flops_;
  if (ema_) ema_->update(params_, step);  // also after a skipped step, as upstream
  // The kernels still queued (AdamW's, the average's) belong to this step's time.
  if (device_.is_cuda()) torch::cuda::synchronize(device_.index());
  const MemorySnapshot mem = memory_snapshot(device_name_);
  m.peak_bytes = mem.peak_bytes;
  m.peak_reserved_bytes = mem.reserved_peak_bytes;
  m.compute_seconds = seconds_since(t0);
  m.sync_wait_seconds = sync_wait_seconds_ + (grad_sync_ ? grad_sync_->stats().exposed_seconds - exposed_before : 0.0);
  m.step_seconds = seconds_since(t_input);
  m.samples_per_second = double(batch.sample_ids.size()) / m.step_seconds;
  m.tokens_per_second = double(token_count(batch)) / m.step_seconds;
  return m;
}

int64_t Trainer::probe(const BuiltBatch& batch, PieceObserver* observer) {
  optimizer_->clear_gradients();
  const int64_t start = memory_snapshot(device_name_).current_bytes;
  reset_peak_memory(device_name_);
  model_->set_observer(observer);
  try {
    const ModelBatch input = to_model_batch(batch, device_);
    torch::Tensor loss = training_loss(input);
    model_->set_observer(nullptr);
    if (loss.defined()) loss.backward();  // GradSync is not begun: no exchange
  } catch (...) {
    model_->set_observer(nullptr);
    throw;
  }
  const int64_t peak = memory_snapshot(device_name_).peak_bytes - start;
  optimizer_->clear_gradients();
  return peak;
}

int64_t Trainer::steady_base_bytes() const {
  // A step starts by setting every gradient to none (FusedAdamW::clear_gradients),
  // so gradients are not held at its start: backward allocates them, and a
  // probe's step peak counts them. Any held now (a probe's, a step's) are left out.
  int64_t params = 0, grads_held = 0;
  for (const auto& p : params_) {
    params += p.numel() * p.element_size();
    if (p.grad().defined()) grads_held += p.grad().numel() * p.grad().element_size();
  }
  // AdamW keeps two moments per parameter from its first step on.
  const int64_t moments_missing = optimizer_->state().empty() ? 2 * params : 0;
  return memory_snapshot(device_name_).current_bytes - grads_held + moments_missing;
}

double Trainer::validate(int64_t pass) {
  const int64_t n = dataset_.validation_steps();
  if (n == 0) return -1;
  double sum = 0, batches = 0;
  {
    const GeneratorStatesGuard keep(c10::Device(c10::DeviceType::CPU));
    torch::NoGradGuard no_grad;
    if (ema_) ema_->swap_with(params_);
    model_->eval();
    try {
      for (int64_t i = 0; i < n; ++i) {
        const ModelBatch input = to_model_batch(dataset_.validation_batch(i, pass), device_);
        ModelOutput out;
        {
          const AutocastGuard autocast(device_.is_cuda() && config_.with_mixed_precision, config_.attention_dtype);
          out = model_->forward(input);
        }
        const PhysicalLossResult r = validation_loss_(input, out.preds);
        if (!r.loss.defined()) continue;  // no data in this batch
        sum += r.loss.item<double>();
        batches += 1;
      }
    } catch (...) {
      model_->train();
      if (ema_) ema_->swap_with(params_);
      throw;
    }
    model_->train();
    if (ema_) ema_->swap_with(params_);
  }
  if (dist_ && world_ > 1) {
    sum = dist_->allreduce_sum(sum);
    batches = dist_->allreduce_sum(batches);
  }
  return batches > 0 ? sum / batches : std::numeric_limits<double>::quiet_NaN();
}

RunSummary Trainer::train(const std::vector<MetricsSink*>& sinks, const Control& control) {
  RunSummary s;
  const auto t0 = Clock::now();
  int64_t samples = 0;
  bool have_first = false;
  int64_t k = control.first_step;
  next_step_ = k;
  for (; k < total_steps(); ++k) {
    StepMetrics m = step(k);
    samples += config_.batch_size_per_gpu;
    s.skipped_steps += m.skipped;
    s.oom_retries += m.oom_retries;
    s.peak_bytes = std::max(s.peak_bytes, m.peak_bytes);
    if (k > control.first_step) s.steady_peak_bytes = std::max(s.steady_peak_bytes, m.peak_bytes);
    if ((k + 1) % dataset_.steps_per_epoch() == 0 && dataset_.validation_steps() > 0)
      s.last_validation_loss = m.validation_loss = validate((k + 1) / dataset_.steps_per_epoch() - 1);
    const bool logged = (k + 1) % config_.train_log_freq.terminal == 0 || k + 1 == total_steps();
    if (logged && !m.skipped) {
      if (!have_first) s.first_loss = m.loss;
      have_first = true;
      s.last_loss = m.loss;
    }
    for (MetricsSink* sink : sinks) sink->on_step(m);
    ++s.steps;
    next_step_ = k + 1;
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
  for (MetricsSink* sink : sinks) sink->on_end(s);
  return s;
}

namespace {
// The first of those with the most tokens.
size_t most_tokens(const std::vector<BuiltBatch>& batches) {
  size_t best = 0;
  for (size_t i = 1; i < batches.size(); ++i)
    if (token_count(batches[i]) > token_count(batches[best])) best = i;
  return best;
}
}  // namespace

std::vector<BuiltBatch> Trainer::planning_candidates() const {
  std::vector<BuiltBatch> out;
  for (int64_t i = 0; i < planning_batch_count(); ++i) out.push_back(dataset_.batch(i));
  return out;
}

std::pair<int64_t, BuiltBatch> Trainer::planning_choice() const {
  std::vector<BuiltBatch> candidates = planning_candidates();
  const size_t i = most_tokens(candidates);
  return {int64_t(i), std::move(candidates[i])};
}

int64_t Trainer::probe_peak_or_oom(const std::vector<BuiltBatch>& batches) {
  int64_t highest = 0;
  for (const BuiltBatch& b : batches) {
    try {
      highest = std::max(highest, probe(b, nullptr));
    } catch (const c10::OutOfMemoryError&) {
      release_failed_backward(device_);
      optimizer_->clear_gradients();
      return -1;
    }
  }
  return highest;
}

TrainerProbe::TrainerProbe(Trainer& trainer)
    : trainer_(trainer), candidates_(trainer.planning_candidates()), batch_(candidates_[most_tokens(candidates_)]) {
  const ModelFlops f = trainer.flops_of(to_model_batch(batch_, torch::kCPU));
  for (const PieceFlops& p : f.pieces)
    if (p.forward > 0) {
      rerun_share_[p.key.str()] = p.rerun() / p.forward;
      lean_share_[p.key.str()] = p.lean_rerun / p.forward;
    }
}

double TrainerProbe::rerun_share(const PieceKey& key) const {
  const auto it = rerun_share_.find(key.str());
  return it == rerun_share_.end() ? 1.0 : it->second;  // a piece without products (none here)
}

double TrainerProbe::lean_share(const PieceKey& key) const {
  const auto it = lean_share_.find(key.str());
  return it == lean_share_.end() ? 0.0 : it->second;
}

int64_t TrainerProbe::current_bytes() const { return memory_snapshot(trainer_.device_name()).current_bytes; }

AutoPlan apply_auto_plan(Trainer& trainer, int64_t budget_bytes, const RankPlan& rules, int oom_max_retries) {
  TrainerProbe probe(trainer);
  AutoPlan a = choose_auto_plan(probe, budget_bytes, rules);
  trainer.set_plan(a.plan);
  auto policy = std::make_shared<OomPolicy>(oom_max_retries, a.costs, a.budget_text());
  trainer.on_out_of_memory([policy](const RecomputePlan& current, const OomEvent& e) {
    return policy->on_out_of_memory(current, e);
  });
  return a;
}

}  // namespace wg
