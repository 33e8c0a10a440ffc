// WeatherGenerator's model directory, written and read (see
// wg/train/upstream_run.h).
#include "wg/train/upstream_run.h"

#include <torch/torch.h>

#include <cstdio>
#include <regex>
#include <stdexcept>

#include "wg/io/weights.h"
#include "wg/util/atomic_file.h"

namespace wg {
namespace fs = std::filesystem;

std::string upstream_tag(int64_t mini_epoch) {
  if (mini_epoch < 0) return "latest";
  char buf[32];
  std::snprintf(buf, sizeof buf, "chkpt%05lld", static_cast<long long>(mini_epoch));
  return buf;
}

void write_upstream_model(const fs::path& dir, const std::string& run_id, const std::string& tag,
                          const torch::nn::Module& model, const std::string& config_json) {
  fs::create_directories(dir);
  save_weights_chkpt(model, (dir / (run_id + "_" + tag + ".chkpt")).string());
  const fs::path json = dir / ("model_" + run_id + "_" + tag + ".json");
  write_file_atomically(json.string(), config_json);
}

std::string weights_file_in(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return path;
  const fs::path dir = fs::path(path).lexically_normal();
  const std::string run_id = (dir.has_filename() ? dir : dir.parent_path()).filename().string();
  const fs::path latest = dir / (run_id + "_latest.chkpt");
  if (fs::is_regular_file(latest, ec)) return latest.string();
  // Newest mini-epoch: {run_id}_chkpt{NNNNN}.chkpt, or upstream's older {run_id}_epoch{NNNNN}.chkpt.
  const std::regex numbered(std::regex_replace(run_id, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)") +
                            R"(_(chkpt|epoch)(\d{5})\.chkpt)");
  fs::path best;
  long best_epoch = -1;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, m, numbered) && std::stol(m[2]) > best_epoch) {
      best_epoch = std::stol(m[2]);
      best = entry.path();
    }
  }
  if (!best.empty()) return best.string();
  const fs::path own = dir / "weights.safetensors";
  if (fs::is_regular_file(own, ec)) return own.string();
  throw std::runtime_error(dir.string() + ": no weights in this run directory: looked for " + latest.filename().string() +
                           ", " + run_id + "_chkpt<NNNNN>.chkpt and weights.safetensors");
}

std::string saved_config_of(const std::string& weights_file) {
  const fs::path p(weights_file);
  const std::string stem = p.stem().string();  // {run_id}_{tag}
  const size_t cut = stem.rfind('_');
  if (p.extension() != ".chkpt" || cut == std::string::npos) return "";
  const fs::path json = p.parent_path() / ("model_" + stem + ".json");
  std::error_code ec;
  return fs::is_regular_file(json, ec) ? json.string() : "";
}

}  // namespace wg
