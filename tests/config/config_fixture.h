#pragma once
// Shared fixture of the configuration loader tests: a temp directory per
// test holding a valid stream file, file writers, a warning capture, and a
// field-by-field dump.
//
// files() and sets() lay the test's sources over default_config.yml and a
// first file (base.yml) that points streams_directory at the test's own
// streams/ folder, so the loader's checks are tested independently of the
// shipped stream files; the shipped files have tests of their own
// (load_config({}) and the config/*.yml tests), which do not go through
// these helpers.
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "wg/config/loader.h"
#include "wg/config/recompute_sections.h"

namespace fs = std::filesystem;

namespace wg::config_test {

inline const std::string kSrc = WG_SOURCE_DIR;

// One valid stream: 3 embed blocks, 2 decoder layers (2 heads, coordinate
// embedding 16 wide). Line 3 is token_size, line 4 the embed block.
inline const char* kStream =
    "S1:\n"
    "  type: synthetic\n"
    "  token_size: 4\n"
    "  embed: {net: transformer, num_tokens: 1, num_heads: 2, dim_embed: 16, num_blocks: 3}\n"
    "  embed_target_coords: {net: linear, dim_embed: 16}\n"
    "  target_readout: {type: obs_value, num_layers: 2, num_heads: 2}\n"
    "  pred_head: {ens_size: 1, num_layers: 1}\n"
    "  synthetic: {num_channels: 5, grid_lat: 4, grid_lon: 6}\n";

class ConfigTest : public ::testing::Test {
 protected:
  fs::path dir;
  std::string base;  // dir/base.yml: streams_directory: streams/ (dir/streams/s.yml holds kStream)

  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir = fs::temp_directory_path() /
          ("wgcfg_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    write("streams/s.yml", kStream);
    base = write("base.yml", "streams_directory: streams/\n");
  }
  void TearDown() override { fs::remove_all(dir); }

  std::string write(const std::string& rel, const std::string& text) {
    const fs::path p = dir / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }

  // A config file whose streams come from dir/streams/ (holding `stream_text`).
  std::string with_streams(const std::string& rel, const std::string& text,
                           const std::string& stream_text = kStream) {
    write("streams/s.yml", stream_text);
    return write(rel, "streams_directory: streams/\n" + text);
  }

  // The defaults, base.yml, then `f` in order, then the --set arguments.
  ConfigSources files(std::vector<std::string> f, std::vector<std::string> set_args = {}) const {
    ConfigSources s;
    s.files = {base};
    s.files.insert(s.files.end(), f.begin(), f.end());
    s.overrides = std::move(set_args);
    return s;
  }
  ConfigSources sets(std::vector<std::string> s) const { return files({}, std::move(s)); }

  // The single problem of loading `s`; fails the test unless there is exactly one.
  std::string one_problem(const ConfigSources& s) {
    try {
      load_config(s);
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.problems().size(), 1u) << e.what();
      return e.problems().empty() ? "" : e.problems().front();
    }
    ADD_FAILURE() << "expected a ConfigError";
    return "";
  }

  // Every problem of loading `s` (none: a test failure).
  std::vector<std::string> problems(const ConfigSources& s) {
    try {
      load_config(s);
    } catch (const ConfigError& e) {
      return e.problems();
    }
    ADD_FAILURE() << "expected a ConfigError";
    return {};
  }
};

inline std::vector<std::string> warnings_of(const std::function<void()>& fn) {
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(32);
  sink->set_pattern("%v");
  sink->set_level(spdlog::level::warn);  // warnings and errors, not the info lines
  auto old = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  try {
    fn();
  } catch (...) {
    spdlog::set_default_logger(old);
    throw;
  }
  spdlog::set_default_logger(old);
  std::vector<std::string> lines = sink->last_formatted();
  for (auto& l : lines)
    while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.pop_back();
  return lines;
}

inline void dump_section(std::ostream& o, const SectionRecompute& s) {
  o << s.set << " " << static_cast<int>(s.mode) << " " << s.every_n;
  for (int b : s.blocks) o << " " << b;
}

inline void dump_losses(std::ostream& o, const char* name, const LossConfig& l) {
  o << name << " " << l.weight;
  for (const auto& t : l.loss_fcts) o << " " << t.name << ":" << t.weight;
  o << "\n";
}

// Every field of a Config except origins, grouped on lines.
inline std::string dump(const Config& c) {
  std::ostringstream o;
  o << c.run_id << "|" << c.run_root << "|" << c.seed << "\n";
  o << "model " << c.healpix_level << "|" << c.embed_orientation << "|" << c.embed_local_coords << "|"
    << c.embed_centroids_local_coords << "|" << c.embed_unembed_mode << "|" << c.embed_size_centroids << "|"
    << c.embed_dropout_rate << "|" << c.embed_dropout_final_rate << "|" << c.target_cell_local_prediction << "\n";
  o << "local " << c.ae_local_dim_embed << "|" << c.ae_local_num_blocks << "|" << c.ae_local_num_heads << "|"
    << c.ae_local_dropout_rate << "|" << c.ae_local_with_qk_lnorm << "|" << c.ae_local_num_queries << "|"
    << c.ae_local_queries_per_cell << "\n";
  o << "adapter " << c.ae_adapter_num_heads << "|" << c.ae_adapter_embed << "|" << c.ae_adapter_with_qk_lnorm << "|"
    << c.ae_adapter_with_residual << "|" << c.ae_adapter_dropout_rate << "\n";
  o << "global " << c.ae_global_dim_embed << "|" << c.ae_global_num_blocks << "|" << c.ae_global_num_heads << "|"
    << c.ae_global_dropout_rate << "|" << c.ae_global_with_qk_lnorm << "|" << c.ae_global_att_dense_rate << "|"
    << c.ae_global_block_factor << "|" << c.ae_global_mlp_hidden_factor << "\n";
  o << "aggregation " << c.ae_aggregation_num_blocks << "|" << c.ae_aggregation_num_heads << "|"
    << c.ae_aggregation_dropout_rate << "|" << c.ae_aggregation_with_qk_lnorm << "|"
    << c.ae_aggregation_att_dense_rate << "|" << c.ae_aggregation_block_factor << "|"
    << c.ae_aggregation_mlp_hidden_factor << "\n";
  o << "decoder " << c.decoder_type << "|" << c.pred_adapter_kv << "|" << c.pred_self_attention << "|"
    << c.pred_dyadic_dims << "|" << c.pred_mlp_adaln << "\n";
  o << "forecast " << c.forecast_offset << "|" << c.forecast_delta_hrs << "|" << c.forecast_steps << "|"
    << c.forecast_policy << "|" << c.forecast_att_dense_rate << "|" << c.fe_num_blocks << "|" << c.fe_num_heads
    << "|" << c.fe_dropout_rate << "|" << c.fe_with_qk_lnorm << "|" << c.impute_latent_noise_std << "\n";
  o << "norm " << c.norm_eps << "|" << c.mlp_norm_eps << "|" << c.norm_type << "|" << c.with_mixed_precision << "|"
    << c.with_flash_attention << "|" << c.attention_dtype << "|" << c.mixed_precision_dtype << "|"
    << c.latent_noise_kl_weight << "\n";
  o << "ema " << c.validate_with_ema << "|" << c.ema_ramp_up_ratio << "|" << c.ema_halflife_in_thousands << "\n";
  o << "mode " << c.training_mode << "|" << c.timestep_weight << "|" << c.timestep_weight_param << "\n";
  dump_losses(o, "training_loss", c.training_loss);
  dump_losses(o, "validation_loss", c.validation_loss);
  o << "data " << c.streams_directory << "|" << c.batch_size_per_gpu << "|" << c.batch_size_validation_per_gpu
    << "|" << c.masking_rate << "|" << c.masking_rate_sampling << "|" << c.sampling_rate_target << "|"
    << c.masking_strategy << "|" << c.shuffle << "|" << c.num_mini_epochs << "|" << c.samples_per_mini_epoch
    << "|" << c.samples_per_validation << "|" << c.data_path << "|" << c.start_date << "|" << c.end_date << "|"
    << c.start_date_val << "|" << c.end_date_val << "|" << c.len_hrs << "|" << c.step_hrs << "|"
    << c.loader_num_workers << "|" << c.loader_prefetch << "\n";
  const auto& m = c.masking_strategy_config;
  o << "masking";
  for (const auto& s : m.strategies) o << " " << s;
  for (double p : m.probabilities) o << " " << p;
  o << " " << m.hl_mask << " " << m.mode << " " << m.same_strategy_per_batch << "\n";
  const auto& l = c.lr;
  o << l.lr_start << "|" << l.lr_max << "|" << l.lr_final_decay << "|" << l.lr_final << "|" << l.lr_steps_warmup << "|"
    << l.lr_steps_cooldown << "|" << l.lr_policy_warmup << "|" << l.lr_policy_decay << "|" << l.lr_policy_cooldown
    << "|" << l.lr_scaling_policy << "|" << c.grad_clip << "|" << c.weight_decay << "|"
    << static_cast<int>(c.nan_policy) << "|" << c.max_consecutive_nan_skips << "|" << c.loss_scaling << "|" << c.device
    << "|" << c.num_threads << "|" << c.train_log_freq.terminal << "|" << c.train_log_freq.metrics << "|"
    << c.train_log_freq.checkpoint << "\n";
  for (const auto& sec : recompute_sections()) {
    o << "gc " << sec.name << " ";
    dump_section(o, c.gradient_checkpointing.*sec.field);
    o << "\n";
  }
  o << "auto " << c.auto_plan.enabled << " " << c.auto_plan.memory_budget_gib << " " << c.auto_plan.memory_margin_gib
    << " " << c.auto_plan.oom_max_retries << " " << c.auto_plan.cpu_memory_limit_gib << "\n";
  o << "ddp " << c.ddp_bucket_mb << " fault " << c.fault_injection.rank << " " << c.fault_injection.step << "\n";
  for (const auto& r : c.checkpoint_node_rules) {
    o << "rule '" << r.match.hostname << "' " << r.match.min_device_memory_gib << " "
      << r.match.max_device_memory_gib << " nodes";
    for (int n : r.match.nodes) o << " " << n;
    for (const auto& sec : recompute_sections()) {
      o << " | ";
      dump_section(o, r.set.*sec.field);
    }
    o << "\n";
  }
  for (const auto& s : c.streams) {
    o << "stream " << s.name << "|" << s.type << "|" << s.filenames.size() << "|" << s.loss_weight
      << "|" << s.masking_rate << "|" << s.masking_rate_none << "|" << s.token_size << "|" << s.tokenize_spacetime
      << "|" << s.diagnostic << "|" << s.sampling_rate_target << "|" << s.max_num_targets << "|"
      << s.location_weight << "|" << s.frequency << "|" << s.base_datetime << "|" << s.embed.net << "|"
      << s.embed.num_tokens << "|" << s.embed.num_heads << "|" << s.embed.dim_embed << "|" << s.embed.num_blocks
      << "|" << s.embed_target_coords.net << "|" << s.embed_target_coords.dim_embed << "|"
      << s.target_readout.type << "|" << s.target_readout.num_layers << "|" << s.target_readout.num_heads << "|"
      << s.target_readout.mlp_hidden_factor << "|" << s.target_readout.dim_head_proj << "|"
      << s.target_readout.softcap << "|" << s.pred_head.ens_size << "|" << s.pred_head.num_layers << "|"
      << s.pred_head.final_activation << "|" << s.synthetic.num_channels << "|" << s.synthetic.grid_lat << "|"
      << s.synthetic.grid_lon << "|" << s.synthetic.num_waves << "|" << s.synthetic.noise << "|"
      << s.synthetic.time_step_hours;
    for (const auto& [ch, w] : s.channel_weights) o << "|" << ch << "=" << w;
    o << "\n";
  }
  return o.str();
}

}  // namespace wg::config_test
