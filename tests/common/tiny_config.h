// A tiny, fully specified configuration built in code, so model and trainer
// tests do not depend on config files (config loading has its own tests).
// Every section of the model is there, narrow: healpix level 1 (48 cells),
// two synthetic streams on coarse grids, so some cells have no token and
// some no target.
#pragma once

#include "wg/config/config.h"

namespace wg::testing {

inline StreamConfig tiny_stream(const std::string& name, int channels, int token_size, int blocks) {
  StreamConfig s;
  s.name = name;
  s.type = "synthetic";
  s.token_size = token_size;
  s.tokenize_spacetime = true;
  s.embed.num_tokens = 1;
  s.embed.num_heads = 2;
  s.embed.dim_embed = 16;
  s.embed.num_blocks = blocks;
  s.embed_target_coords.dim_embed = 8;
  s.target_readout.num_layers = 1;
  s.target_readout.num_heads = 2;
  s.synthetic.num_channels = channels;
  s.synthetic.grid_lat = 6;
  s.synthetic.grid_lon = 8;
  s.synthetic.num_waves = 4;
  s.synthetic.noise = 0.05;
  return s;
}

inline Config tiny_config() {
  Config c;
  c.seed = 7;
  c.healpix_level = 1;
  c.ae_local_dim_embed = 16;
  c.ae_local_num_blocks = 1;
  c.ae_local_num_heads = 2;
  c.ae_adapter_num_heads = 2;
  c.ae_adapter_embed = 8;
  c.ae_global_dim_embed = 32;
  c.ae_aggregation_num_blocks = 1;
  c.ae_aggregation_num_heads = 2;
  c.ae_global_num_blocks = 2;
  c.ae_global_num_heads = 2;
  c.with_mixed_precision = false;
  c.masking_rate_sampling = false;
  c.batch_size_per_gpu = 2;
  c.num_mini_epochs = 1;
  c.samples_per_mini_epoch = 40;
  c.start_date = 1577836800;  // 2020-01-01
  c.end_date = 1583020800;    // 2020-03-01
  c.lr.lr_start = 1e-4;
  c.lr.lr_max = 2e-3;
  c.lr.lr_final_decay = 1e-3;
  c.lr.lr_final = 0.0;  // the cool-down falls (as upstream's default; above lr_final_decay · lr_start / lr_max' it would rise)
  c.lr.lr_steps_warmup = 2;
  c.lr.lr_steps_cooldown = 5;
  c.lr.lr_scaling_policy = "const";
  c.device = "cpu";
  c.loader_num_workers = 0;
  c.gradient_checkpointing = RecomputeConfig{};
  // nothing recomputed unless a test says so
  for (SectionRecompute* s : {&c.gradient_checkpointing.ae_aggregation, &c.gradient_checkpointing.forecast,
                              &c.gradient_checkpointing.pred})
    s->mode = RecomputeMode::None;
  c.streams = {tiny_stream("ERA5", 5, 4, 2), tiny_stream("SYNOP", 3, 2, 1)};
  return c;
}

// Dropout off everywhere: runs that must match another run step for step.
inline Config without_dropout(Config c) {
  c.embed_dropout_rate = 0.0;
  c.embed_dropout_final_rate = 0.0;
  c.pred_dropout_rate = 0.0;
  c.ae_local_dropout_rate = 0.0;
  c.ae_adapter_dropout_rate = 0.0;
  c.ae_aggregation_dropout_rate = 0.0;
  c.ae_global_dropout_rate = 0.0;
  c.fe_dropout_rate = 0.0;
  return c;
}

}  // namespace wg::testing
