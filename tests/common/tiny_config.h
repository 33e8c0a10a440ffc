// A tiny, fully specified configuration built in code, so model and trainer
// tests do not depend on config files (config loading has its own tests).
#pragma once

#include "wg/config/config.h"

namespace wg::testing {

inline StreamConfig tiny_stream(const std::string& name, int channels, int token_size, int blocks) {
  StreamConfig s;
  s.name = name;
  s.token_size = token_size;
  s.embed.num_tokens = 1;
  s.embed.num_heads = 2;
  s.embed.dim_embed = 16;
  s.embed.num_blocks = blocks;
  s.synthetic.num_channels = channels;
  s.synthetic.grid_lat = 4;
  s.synthetic.grid_lon = 6;
  s.synthetic.num_waves = 4;
  s.synthetic.noise = 0.05;
  return s;
}

inline Config tiny_config() {
  Config c;
  c.seed = 7;
  c.ae_local_dim_embed = 16;
  c.ae_global_dim_embed = 32;
  c.ae_global_num_blocks = 2;
  c.ae_global_num_heads = 2;
  c.embed_dropout_rate = 0.1;
  c.ae_global_dropout_rate = 0.1;
  c.with_mixed_precision = false;
  c.masking_rate_sampling = false;
  c.batch_size_per_gpu = 2;
  c.num_mini_epochs = 1;
  c.samples_per_mini_epoch = 40;
  c.lr.lr_start = 1e-4;
  c.lr.lr_max = 2e-3;
  c.lr.lr_final_decay = 1e-3;
  c.lr.lr_final = 1e-4;
  c.lr.lr_steps_warmup = 2;
  c.lr.lr_steps_cooldown = 5;
  c.lr.lr_scaling_policy = "none";
  c.device = "cpu";
  c.gradient_checkpointing.embed.mode = RecomputeMode::None;  // nothing recomputed unless a test says so
  c.streams = {tiny_stream("ERA5", 5, 4, 4), tiny_stream("SYNOP", 3, 2, 2)};
  return c;
}

// Dropout off everywhere (the embed's final dropout too): runs that must
// match another run step for step.
inline Config without_dropout(Config c) {
  c.embed_dropout_rate = 0.0;
  c.embed_dropout_final_rate = 0.0;
  c.ae_global_dropout_rate = 0.0;
  return c;
}

}  // namespace wg::testing
