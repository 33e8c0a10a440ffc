#pragma once
// Shared fixture of the configuration loader tests: a temp directory per
// test, file writers, a warning capture, and a field-by-field dump.
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "wg/config/loader.h"

namespace fs = std::filesystem;

namespace wg::config_test {

inline const std::string kSrc = WG_SOURCE_DIR;

// One valid stream with 3 embed blocks.
inline const char* kStream =
    "S1:\n"
    "  type: synthetic\n"
    "  token_size: 4\n"
    "  embed: {net: transformer, num_tokens: 1, num_heads: 2, dim_embed: 16, num_blocks: 3}\n"
    "  synthetic: {num_channels: 5, grid_lat: 4, grid_lon: 6}\n";

class ConfigTest : public ::testing::Test {
 protected:
  fs::path dir;

  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir = fs::temp_directory_path() /
          ("wgcfg_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }

  std::string write(const std::string& rel, const std::string& text) {
    const fs::path p = dir / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }

  // A config file whose streams come from dir/streams/ (holding kStream).
  std::string with_streams(const std::string& rel, const std::string& text,
                           const std::string& stream_text = kStream) {
    write("streams/s.yml", stream_text);
    return write(rel, "streams_directory: streams/\n" + text);
  }

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
};

inline ConfigSources files(std::vector<std::string> f, std::vector<std::string> sets = {}) {
  ConfigSources s;
  s.files = std::move(f);
  s.overrides = std::move(sets);
  return s;
}

inline ConfigSources sets(std::vector<std::string> s) { return files({}, std::move(s)); }

inline std::vector<std::string> warnings_of(const std::function<void()>& fn) {
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(32);
  sink->set_pattern("%v");
  auto old = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  fn();
  spdlog::set_default_logger(old);
  return sink->last_formatted();
}

// Every field of a Config except origins, one per line.
inline std::string dump(const Config& c) {
  std::ostringstream o;
  o << c.run_id << "|" << c.run_root << "|" << c.seed << "|" << c.embed_orientation << "|"
    << c.embed_unembed_mode << "|" << c.embed_size_centroids << "|" << c.embed_dropout_rate << "|" << c.embed_dropout_final_rate << "|"
    << c.ae_local_dim_embed << "|" << c.ae_global_dim_embed << "|" << c.ae_global_num_blocks << "|"
    << c.ae_global_num_heads << "|" << c.ae_global_dropout_rate << "|" << c.ae_global_mlp_hidden_factor
    << "|" << c.pred_mlp_hidden_factor << "|" << c.norm_type << "|" << c.with_mixed_precision << "|"
    << c.attention_dtype << "|" << c.streams_directory << "|" << c.batch_size_per_gpu << "|"
    << c.masking_rate << "|" << c.masking_rate_sampling << "|" << c.num_mini_epochs << "|"
    << c.samples_per_mini_epoch << "\n";
  const auto& l = c.lr;
  o << l.lr_start << "|" << l.lr_max << "|" << l.lr_final_decay << "|" << l.lr_final << "|"
    << l.lr_steps_warmup << "|" << l.lr_steps_cooldown << "|" << l.lr_policy_warmup << "|"
    << l.lr_policy_decay << "|" << l.lr_policy_cooldown << "|" << l.lr_scaling_policy << "|"
    << c.grad_clip << "|" << c.weight_decay << "|" << static_cast<int>(c.nan_policy) << "|"
    << c.max_consecutive_nan_skips << "|" << c.device << "|" << c.num_threads << "|"
    << c.train_log_freq.terminal << "|" << c.train_log_freq.metrics << "|"
    << c.train_log_freq.checkpoint << "\n";
  for (const auto& t : c.loss_fcts) o << "loss " << t.name << " " << t.weight << "\n";
  for (const auto* s : {&c.gradient_checkpointing.embed, &c.gradient_checkpointing.latent,
                        &c.gradient_checkpointing.pred}) {
    o << "gc " << s->set << " " << static_cast<int>(s->mode) << " " << s->every_n;
    for (int b : s->blocks) o << " " << b;
    o << "\n";
  }
  o << "ddp " << c.ddp_bucket_mb << " fault " << c.fault_injection.rank << " " << c.fault_injection.step << "\n";
  for (const auto& r : c.checkpoint_node_rules) {
    o << "rule '" << r.match.hostname << "' " << r.match.min_device_memory_gib << " "
      << r.match.max_device_memory_gib << " nodes";
    for (int n : r.match.nodes) o << " " << n;
    for (const auto* s : {&r.set.embed, &r.set.latent, &r.set.pred}) {
      o << " | " << s->set << " " << static_cast<int>(s->mode) << " " << s->every_n;
      for (int b : s->blocks) o << " " << b;
    }
    o << "\n";
  }
  for (const auto& s : c.streams) {
    o << "stream " << s.name << "|" << s.type << "|" << s.filenames.size() << "|" << s.loss_weight
      << "|" << s.masking_rate << "|" << s.token_size << "|" << s.tokenize_spacetime << "|"
      << s.embed.net << "|" << s.embed.num_tokens << "|" << s.embed.num_heads << "|"
      << s.embed.dim_embed << "|" << s.embed.num_blocks << "|" << s.synthetic.num_channels << "|"
      << s.synthetic.grid_lat << "|" << s.synthetic.grid_lon << "|" << s.synthetic.num_waves << "|"
      << s.synthetic.noise << "|" << s.synthetic.time_step_hours << "\n";
  }
  return o.str();
}

}  // namespace wg::config_test
