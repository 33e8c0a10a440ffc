// WeatherGenerator's model directory, both ways. Upstream keeps a run's
// weights in {model_path}/{run_id}/:
//   {run_id}_latest.chkpt            torch.save(state_dict) at each checkpoint
//   {run_id}_chkpt{NNNNN}.chkpt       at the end of mini-epoch NNNNN
//   model_{run_id}_{latest|chkptNNNNN}.json   the run's configuration
// This trainer writes the same files into its run directory
// (run_root/run_id), so upstream's tools read it with model_path = run_root;
// and it reads such a directory (or one .chkpt) with --init-weights.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace torch::nn {
class Module;
}

namespace wg {

// "latest" for -1, else "chkpt" and the mini-epoch in five digits.
std::string upstream_tag(int64_t mini_epoch);

// Writes {dir}/{run_id}_{tag}.chkpt (the module's parameters under their
// state_dict names) and {dir}/model_{run_id}_{tag}.json (`config_json`),
// each atomically.
void write_upstream_model(const std::filesystem::path& dir, const std::string& run_id, const std::string& tag,
                          const torch::nn::Module& model, const std::string& config_json);

// What --init-weights loads: a file as given; a directory is a model
// directory {model_path}/{run_id}/ (run_id = its name): its
// {run_id}_latest.chkpt, else its newest {run_id}_chkpt{NNNNN}.chkpt (or
// upstream's older _epoch{NNNNN}), else this trainer's weights.safetensors.
// Throws std::runtime_error naming the directory and what it looked for.
std::string weights_file_in(const std::string& path);

// The configuration saved beside a checkpoint file of a model directory
// (model_{run_id}_{tag}.json), or "" when there is none.
std::string saved_config_of(const std::string& weights_file);

}  // namespace wg
