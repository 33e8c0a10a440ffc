// Training checkpoints (see header).
#include "wg/train/train_checkpoint.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "wg/dist/context.h"
#include "wg/io/safetensors.h"
#include "wg/io/training_state.h"
#include "wg/io/weights.h"
#include "wg/train/trainer.h"
#include "wg/util/generator_state.h"

namespace wg {

namespace fs = std::filesystem;

namespace {
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
  {  // every rank's own generator state (dropout draws differ per rank)
    const GeneratorStates cpu = GeneratorStates::capture(c10::Device(c10::DeviceType::CPU));
    SafetensorsFile f;
    f.tensors.push_back(to_record("cpu", cpu.states().front(), DType::U8));
    write_safetensors((tmp / ("rng_rank" + std::to_string(dist.rank()) + ".safetensors")).string(), f);
  }
  if (dist.rank() == 0)
    save_training_state((tmp / "state.safetensors").string(), *trainer.model(), trainer.optimizer(), next_step,
                        trainer.weight_average() ? trainer.weight_average()->averaged() : std::vector<torch::Tensor>{});
  dist.barrier();
  if (dist.rank() == 0) {
    fs::remove_all(final_dir);
    fs::rename(tmp, final_dir);  // the checkpoint exists only once complete
    const auto all = checkpoints_newest_first(root);
    for (size_t i = size_t(std::max(1, keep)); i < all.size(); ++i) fs::remove_all(all[i]);
    spdlog::info("checkpoint written: {} (continues at step {})", final_dir.string(), next_step);
  }
  dist.barrier();
}

std::optional<int64_t> resume_latest(const std::string& run_dir, Trainer& trainer, const DistContext& dist) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  const auto candidates = checkpoints_newest_first(root);
  if (candidates.empty()) return std::nullopt;
  for (const fs::path& dir : candidates) {
    std::string why;
    try {
      WeightAverage* ema = trainer.weight_average();
      const int64_t next = load_training_state((dir / "state.safetensors").string(), *trainer.model(), trainer.optimizer(),
                                               ema ? &ema->averaged() : nullptr);
      const fs::path rng = dir / ("rng_rank" + std::to_string(dist.rank()) + ".safetensors");
      if (fs::exists(rng)) {
        const SafetensorsFile f = read_safetensors(rng.string());
        const TensorRecord* r = f.find("cpu");
        if (!r || r->dtype != DType::U8) throw SafetensorsError(rng.string() + ": no U8 tensor 'cpu'");
        GeneratorStates::cpu_from(to_tensor(*r)).restore();
      } else {
        spdlog::warn("{}: no random generator state for rank {} (the job had fewer ranks); dropout draws will differ",
                     dir.string(), dist.rank());
      }
      // Every rank must resume from the same checkpoint.
      if (dist.allreduce_max(double(next)) != double(next) || -dist.allreduce_max(-double(next)) != double(next))
        throw std::runtime_error("ranks disagree on the checkpoint to resume from");
      if (dist.rank() == 0) spdlog::info("resuming from {} at step {}", dir.string(), next);
      return next;
    } catch (const std::exception& e) {
      why = e.what();
    }
    spdlog::warn("skipping checkpoint {}: {}", dir.string(), why);
  }
  throw std::runtime_error("the run directory " + root.string() + " has " + std::to_string(candidates.size()) +
                           " checkpoint(s) but none loads; refusing to train from scratch (move them away to start over)");
}

}  // namespace wg
