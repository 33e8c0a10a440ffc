// Training checkpoints (see header).
#include "wg/train/train_checkpoint.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "wg/dist/context.h"
#include "wg/io/safetensors.h"
#include "wg/io/training_state.h"
#include "wg/io/weights.h"
#include "wg/train/trainer.h"
#include "wg/util/atomic_file.h"
#include "wg/util/generator_state.h"

namespace wg {

namespace fs = std::filesystem;

namespace {
// The name in rng_rank<r>.safetensors of the state of the rank's GPU's
// generator (dropout draws there), beside "cpu".
constexpr const char* kDeviceGenerator = "device";

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%010lld", (long long)step);
  return buf;
}

std::vector<fs::path> checkpoints_newest_first(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory() && e.path().filename().string().rfind("step_", 0) == 0 &&
        e.path().filename().string().find('.') == std::string::npos)
      out.push_back(e.path());
  std::sort(out.rbegin(), out.rend());
  return out;
}
// The ranks and per-rank batch of the run that wrote a checkpoint: its step
// numbers (data order, learning-rate schedule, weight average) count global
// batches of their product, so only a run of the same layout continues it.
constexpr const char* kLayoutFile = "layout.json";

std::string layout_of(int ranks, int batch_per_rank) {
  return nlohmann::json{{"ranks", ranks}, {"batch_size_per_gpu", batch_per_rank}}.dump() + "\n";
}

// Rank 0: "" when `dir` was written with this layout (or before layouts
// were written), else why this run cannot continue it.
std::string layout_mismatch(const fs::path& dir, int ranks, int batch_per_rank) {
  std::ifstream in(dir / kLayoutFile);
  if (!in) return "";
  nlohmann::json saved;
  try {
    saved = nlohmann::json::parse(in);
    const int r = saved.at("ranks").get<int>(), b = saved.at("batch_size_per_gpu").get<int>();
    if (r == ranks && b == batch_per_rank) return "";
    return dir.string() + " was written by a run of " + std::to_string(r) + " rank(s) with batch_size_per_gpu " +
           std::to_string(b) + "; this run has " + std::to_string(ranks) + " and " + std::to_string(batch_per_rank) +
           ", and its step numbers (data order, learning-rate schedule, weight average) count batches of " +
           std::to_string(r * b) +
           " samples: resume it with that layout, or start a new run (another run_id) from "
           "its weights (--init-weights with the run's directory: its _latest.chkpt)";
  } catch (const nlohmann::json::exception& e) {
    return (dir / kLayoutFile).string() + ": not readable (" + e.what() + ")";
  }
}

// Rank 0, resuming from `from`: the newer checkpoints, which did not load,
// are renamed <name>.unloadable (kept for a look, no longer candidates), so
// that the checkpoints this run writes, at lower steps, are the newest and
// the pruning of old ones does not take them.
void set_aside_newer(const std::vector<fs::path>& newest_first, const fs::path& from) {
  for (const fs::path& dir : newest_first) {
    if (dir == from) return;
    fs::path aside = dir.string() + ".unloadable";
    for (int k = 2; fs::exists(aside); ++k) aside = dir.string() + ".unloadable." + std::to_string(k);
    std::error_code ec;
    fs::rename(dir, aside, ec);
    if (ec)
      spdlog::warn("could not set aside {}, which does not load: {}", dir.string(), ec.message());
    else
      spdlog::warn("{} does not load: moved to {}", dir.string(), aside.string());
  }
}
}  // namespace

void save_checkpoint(const std::string& run_dir, Trainer& trainer, int64_t next_step, const DistContext& dist,
                     int keep) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  const fs::path final_dir = root / step_name(next_step);
  const fs::path tmp = root / (step_name(next_step) + ".tmp");
  if (dist.rank() == 0) {
    fs::remove_all(tmp);
    fs::create_directories(tmp);
  }
  dist.barrier();
  {  // every rank's own generator states (dropout draws differ per rank): the CPU's, and its GPU's
    const GeneratorStates states = GeneratorStates::capture(trainer.device());
    SafetensorsFile f;
    f.tensors.push_back(to_record("cpu", states.states().front(), DType::U8));
    if (states.states().size() > 1) f.tensors.push_back(to_record(kDeviceGenerator, states.states()[1], DType::U8));
    write_safetensors((tmp / ("rng_rank" + std::to_string(dist.rank()) + ".safetensors")).string(), f);
  }
  if (dist.rank() == 0)  // what a step means: the samples it takes, and how they are shared
    write_file_atomically((tmp / kLayoutFile).string(), layout_of(dist.size(), trainer.dataset().batch_per_rank()));
  if (dist.rank() == 0)
    save_training_state((tmp / "state.safetensors").string(), *trainer.model(), trainer.optimizer(), next_step,
                        trainer.weight_average() ? trainer.weight_average()->averaged() : std::vector<torch::Tensor>{},
                        trainer.loss_scaler().enabled()
                            ? std::optional<LossScaleState>(
                                  LossScaleState{trainer.loss_scaler().scale(), trainer.loss_scaler().growth_tracker()})
                            : std::nullopt);
  dist.barrier();
  if (dist.rank() == 0) {
    fs::remove_all(final_dir);
    fs::rename(tmp, final_dir);  // the checkpoint exists only once complete (its files synced as written)
    sync_directory(root.string());
    // The newest `keep`, this one among them: a resume moves aside any newer
    // one that did not load, so steps only grow here.
    const auto all = checkpoints_newest_first(root);
    for (size_t i = size_t(std::max(1, keep)); i < all.size(); ++i)
      if (all[i] != final_dir) fs::remove_all(all[i]);
    spdlog::info("checkpoint written: {} (continues at step {})", final_dir.string(), next_step);
  }
  dist.barrier();
}

std::optional<int64_t> newest_checkpoint_step(const std::string& run_dir) {
  for (const fs::path& dir : checkpoints_newest_first(fs::path(run_dir) / "checkpoints")) {
    const std::string digits = dir.filename().string().substr(5);  // after "step_"
    if (!digits.empty() && digits.size() <= 18 &&
        std::all_of(digits.begin(), digits.end(), [](unsigned char ch) { return std::isdigit(ch) != 0; }))
      return std::stoll(digits);
  }
  return std::nullopt;
}

std::optional<int64_t> resume_latest(const std::string& run_dir, Trainer& trainer, const DistContext& dist) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  const auto candidates = checkpoints_newest_first(root);
  // Every rank goes through the same candidates and the same collectives for
  // each, whatever its own load did, so that a rank whose load fails (a file
  // it cannot read, memory) neither hangs the others nor resumes elsewhere.
  const int64_t count = int64_t(candidates.size());
  if (dist.allreduce_min(count) != -dist.allreduce_min(-count))
    throw std::runtime_error("the ranks see different numbers of checkpoints in " + root.string() + " (this rank " +
                             std::to_string(count) + "): is it on a shared filesystem?");
  if (candidates.empty()) return std::nullopt;
  for (const fs::path& dir : candidates) {
    std::string why;
    int64_t next = -1;
    std::optional<LossScaleState> scale;  // applied only once every rank accepted this checkpoint
    try {
      WeightAverage* ema = trainer.weight_average();
      next = load_training_state((dir / "state.safetensors").string(), *trainer.model(), trainer.optimizer(),
                                 ema ? &ema->averaged() : nullptr, &scale);
      if (scale && !trainer.loss_scaler().accepts(scale->scale, scale->growth_tracker))
        throw SafetensorsError((dir / "state.safetensors").string() + ": loss scale " + std::to_string(scale->scale) +
                               " with growth tracker " + std::to_string(scale->growth_tracker) + " cannot be restored");
      const fs::path rng = dir / ("rng_rank" + std::to_string(dist.rank()) + ".safetensors");
      if (fs::exists(rng)) {
        const SafetensorsFile f = read_safetensors(rng.string());
        const auto state = [&](const char* name) {
          const TensorRecord* r = f.find(name);
          if (r && r->dtype != DType::U8) throw SafetensorsError(rng.string() + ": tensor '" + name + "' is not U8");
          return r ? to_tensor(*r) : torch::Tensor();
        };
        const torch::Tensor cpu = state("cpu"), device = state(kDeviceGenerator);
        if (!cpu.defined()) throw SafetensorsError(rng.string() + ": no U8 tensor 'cpu'");
        const torch::Device on = trainer.device();
        if (on.is_cpu()) {
          GeneratorStates::from(on, {cpu}).restore();
        } else if (device.defined()) {
          GeneratorStates::from(on, {cpu, device}).restore();
        } else {  // written by a run on the CPU
          GeneratorStates::from(torch::kCPU, {cpu}).restore();
          spdlog::warn(
              "{}: no {} generator state (a checkpoint of a run on the CPU); the GPU's dropout draws will "
              "differ from an uninterrupted run's",
              rng.string(), on.str());
        }
      } else {
        spdlog::warn("{}: no random generator state for rank {} (the job had fewer ranks); dropout draws will differ",
                     dir.string(), dist.rank());
      }
    } catch (const std::exception& e) {
      why = e.what();
    }
    const bool failed_here = !why.empty();
    if (dist.allreduce_max(failed_here ? 1.0 : 0.0) > 0) {
      if (!failed_here) why = "another rank could not load it";
    } else if (dist.allreduce_max(double(next)) != double(next) || -dist.allreduce_max(-double(next)) != double(next)) {
      why = "the ranks read different steps from it";  // every rank must resume from the same checkpoint
    } else {
      const std::string mismatch = dist.broadcast_string(
          dist.rank() == 0 ? layout_mismatch(dir, dist.size(), trainer.dataset().batch_per_rank()) : "");
      if (!mismatch.empty()) throw std::runtime_error(mismatch);  // every rank, together
      // A run that scales its loss continues at the saved scale; a checkpoint
      // without one (written without scaling) starts the scaler afresh. The
      // same file on every rank: the same scale.
      if (scale)
        trainer.loss_scaler().restore(scale->scale, scale->growth_tracker);
      else
        trainer.loss_scaler().reset();
      if (dist.rank() == 0) {
        spdlog::info("resuming from {} at step {}", dir.string(), next);
        set_aside_newer(candidates, dir);
      }
      return next;
    }
    spdlog::warn("skipping checkpoint {}: {}", dir.string(), why);
  }
  throw std::runtime_error("the run directory " + root.string() + " has " + std::to_string(candidates.size()) +
                           " checkpoint(s) but none loads; refusing to train from scratch (move them away to start over)");
}

}  // namespace wg
