// Typed configuration of a training run.
//
// One struct per component; every field maps 1:1 to a YAML key (named in the
// comment where it differs from the field) and carries WeatherGenerator's
// name where WeatherGenerator has one. Values here are the fallbacks used only
// by tests that build structs directly; a run always starts from
// config/default_config.yml (compiled into the binary), overlaid by the
// user's files and --set overrides, so every key a run uses is visible there.
//
// This header is free of LibTorch and yaml-cpp on purpose: it is included
// everywhere.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace wg {

// Where a value came from: a file and 1-based line, or a --set argument.
struct Origin {
  std::string source;  // file path, or "--set" / "<default_config.yml>"
  int line = 0;        // 1-based; 0 when not applicable
  std::string str() const;  // "file:line" or "source"
};

// ---- streams -------------------------------------------------------------

// `embed:` block of a stream file: the stream's StreamEmbedTransformer.
struct EmbedNetConfig {
  std::string net = "transformer";  // only "transformer" (upstream's "linear" crashes there)
  int num_tokens = 1;               // latent tokens per input token; only 1 (the cell layout counts one row per token)
  int num_heads = 8;
  int dim_embed = 256;
  int num_blocks = 2;
};

// `embed_target_coords:` block: the coordinate embedding of the decoder.
struct TargetCoordsConfig {
  std::string net = "linear";  // only "linear" (upstream's "mlp" crashes there)
  int dim_embed = 256;
};

// `target_readout:` block: the decoder (target_token_engines). Its number
// of heads is read from the FIRST stream for every stream, as upstream.
struct TargetReadoutConfig {
  std::string type = "obs_value";  // only "obs_value"
  int num_layers = 2;
  int num_heads = 4;
  int mlp_hidden_factor = 2;
  int dim_head_proj = 0;           // 0 (upstream: None): embed_target_coords.dim_embed / num_heads
  double softcap = 0.0;            // only 0
};

// `pred_head:` block: the ensemble prediction head.
struct PredHeadConfig {
  int ens_size = 1;
  int num_layers = 1;
  std::string final_activation = "Identity";  // a torch.nn activation name
};

// Settings of the synthetic source (`synthetic:` block of a stream file).
struct SyntheticConfig {
  int num_channels = 16;      // C
  int grid_lat = 8;           // grid points along latitude
  int grid_lon = 16;          // grid points along longitude
  int num_waves = 6;          // moving waves summed per field
  double noise = 0.05;        // std of white noise added (in field units)
  double time_step_hours = 6; // spacing of consecutive time points
};

// One stream file entry (`<NAME>: {...}` in a file of streams_directory).
struct StreamConfig {
  std::string name;                     // the map key, e.g. "ERA5"
  std::string type = "synthetic";       // "anemoi" (anemoi-datasets Zarr v2) | "obs" (observation Zarr) | "synthetic"
  std::vector<std::string> filenames;   // the stores, relative to data_path unless absolute
  // Channel selection, substring rules on the store's variable names: a
  // channel is a source (model input) if some `source` entry occurs in its
  // name (every channel when `source` is absent or null; none for `[]`, as
  // upstream) and no `source_exclude` entry does; a target (in the loss)
  // likewise with `target` / `target_exclude`.
  std::optional<std::vector<std::string>> source;
  std::vector<std::string> source_exclude;
  std::optional<std::vector<std::string>> target;
  std::vector<std::string> target_exclude;
  std::vector<std::pair<std::string, double>> channel_weights;  // target channel -> loss weight (default 1)
  double loss_weight = 1.0;
  double masking_rate = -1.0;           // read, never used (as upstream); the global masking_rate applies
  double masking_rate_none = -1.0;      // read, never used (as upstream)
  int token_size = 8;                   // points per token
  bool tokenize_spacetime = false;
  bool diagnostic = false;              // no source tokens: the stream is only predicted
  double sampling_rate_target = -1.0;   // < 0: the global sampling_rate_target
  int64_t max_num_targets = -1;         // <= 0: no cap
  std::string location_weight;          // "" | cosine_latitude: per-point weights of the loss
  std::string frequency;                // anemoi: "HH:MM:SS", every k-th date; "": the store's
  std::string base_datetime;            // obs: origin of the hourly index ("": 1970-01-01T00:00:00)
  EmbedNetConfig embed;
  TargetCoordsConfig embed_target_coords;
  TargetReadoutConfig target_readout;
  PredHeadConfig pred_head;
  SyntheticConfig synthetic;
  Origin origin;                        // file and line of the stream entry
  // The channels a file-backed stream carries come from its store: the data
  // layer reports them (StreamShape, wg/data/stream_shape.h), the config does not.
};

// ---- activation recomputation ("gradient checkpointing" in the keys) ------
//
// Words: "recompute" is activation recomputation in the backward pass (the
// keys keep WeatherGenerator's "gradient_checkpoint" spelling); "checkpoint"
// in code means saved training state.

enum class RecomputeMode { None, Full, Selective, EveryN };

// `gradient_checkpointing.<section>`: the structured form.
struct SectionRecompute {
  bool set = false;               // true when the structured form names this section
  RecomputeMode mode = RecomputeMode::None;
  int every_n = 1;                // for EveryN: blocks 0, n, 2n, ... (all their pieces)
  std::vector<int> blocks;        // additionally recompute these blocks fully
  Origin origin;
  // Additionally recompute these pieces fully: their labels as the plan
  // table gives them ("block1.attn", "input"), in every stream of a
  // per-stream section. Checked against the model's pieces when the plan
  // is resolved (wg/plan/recompute_plan.h).
  std::vector<std::string> pieces;
  Origin pieces_origin;

  // A section in `mode`, nothing else given.
  static SectionRecompute of(RecomputeMode mode, bool set = false) {
    SectionRecompute s;
    s.set = set;
    s.mode = mode;
    return s;
  }
};

// The settings of every section of the model, one field per section (the
// table of sections, with WeatherGenerator's key names, is
// wg/config/recompute_sections.h). WeatherGenerator's booleans
// (embed_gradient_checkpoint_mode, ...) are already folded in where the
// structured form does not name a section. Defaults: upstream's PR #1168
// family, its five switches off, the rest recomputed as there.
struct RecomputeConfig {
  SectionRecompute embed;
  SectionRecompute ae_local;
  SectionRecompute ae_adapter;
  SectionRecompute ae_aggregation = SectionRecompute::of(RecomputeMode::Full);
  SectionRecompute ae_global;
  SectionRecompute forecast = SectionRecompute::of(RecomputeMode::Full);
  SectionRecompute pred = SectionRecompute::of(RecomputeMode::EveryN);  // the decoder blocks
};

// A per-node rule (`checkpoint_node_rules`, a list, applied in order, later
// rules win): on the ranks that match every given condition, the sections
// named under `set` take the given settings instead of the global ones.
struct NodeRuleMatch {
  std::string hostname;            // glob (fnmatch), "" = any
  std::vector<int> nodes;          // node indices (0-based, hosts in sorted order), empty = any
  double min_device_memory_gib = -1;  // < 0: no lower bound
  double max_device_memory_gib = -1;  // < 0: no upper bound
};

struct NodeRule {
  NodeRuleMatch match;
  RecomputeConfig set;   // only sections with set == true change
  Origin origin;         // where the rule starts
};

// Test hook for the failure path of distributed runs: rank `rank` throws at
// step `step`. Off when rank < 0.
struct FaultInjection {
  int rank = -1;
  int64_t step = -1;
};

// The automatic planner (gradient_checkpointing.policy: auto, plus the
// out-of-memory fallback, which also serves manual plans).
struct AutoPlanConfig {
  bool enabled = false;             // gradient_checkpointing.policy: auto
  double memory_budget_gib = 0;     // gradient_checkpointing.memory_budget_gib; 0: device memory - margin
  double memory_margin_gib = 2;     // gradient_checkpointing.memory_margin_gib
  int oom_max_retries = 3;          // out-of-memory retries of one step before giving up
  double cpu_memory_limit_gib = 0;  // hard limit of the counting CPU allocator (0: none)
};

// Live telemetry: rank 0 serves Prometheus metrics and announces itself.
struct TelemetryConfig {
  bool enabled = true;
  std::string address = "0.0.0.0";  // listen address of /metrics on rank 0
  int port = 0;                      // 0: a free port, logged and written to the file_sd file
  std::string file_sd_dir;           // "" : no file_sd target file
  std::string pushgateway;           // "http://host:port", "": no push at the end
};

// ---- optimisation --------------------------------------------------------

struct LrConfig {
  double lr_start = 1e-6;
  double lr_max = 5e-5;
  double lr_final_decay = 1e-6;
  double lr_final = 0.0;
  int64_t lr_steps_warmup = 512;
  int64_t lr_steps_cooldown = 512;
  std::string lr_policy_warmup = "cosine";   // linear | cosine
  std::string lr_policy_decay = "constant";  // constant | linear | cosine
  std::string lr_policy_cooldown = "linear"; // linear | cosine
  std::string lr_scaling_policy = "sqrt";    // const | linear | sqrt
};

struct LossTerm {
  std::string name;  // "mse" | "mae"
  double weight = 1.0;
};

// One mode's losses (training_mode_config / validation_mode_config:
// `losses: {LossPhysical: {weight, loss_fcts}}`); LossPhysical is the one
// loss module here.
struct LossConfig {
  double weight = 1.0;
  std::vector<LossTerm> loss_fcts;
};

struct TrainLogFreq {
  int terminal = 10;     // progress line every N steps
  int metrics = 20;      // metrics record every N steps
  int checkpoint = 250;  // training checkpoint every N steps
};

enum class NanPolicy { Error, Skip };

// masking_strategy_config
struct MaskingStrategyConfig {
  std::vector<std::string> strategies = {"random", "healpix", "channel"};  // combination
  std::vector<double> probabilities = {0.34, 0.33, 0.33};                  // combination
  int hl_mask = 3;                                                         // healpix
  std::string mode = "per_cell";                                           // channel: per_cell | global
  bool same_strategy_per_batch = false;
};

// ---- the whole run -------------------------------------------------------

struct Config {
  // identity and output
  std::string run_id;             // empty: generated at start
  std::string run_root = "runs";  // run directory = run_root/run_id
  uint64_t seed = 42;
  // upstream's data_loader_rng_seed: the data pipeline's seed; unset (upstream's
  // `???`): `seed` (upstream takes the time, see docs/upstream-differences.md)
  std::optional<uint64_t> data_loader_rng_seed;
  uint64_t data_seed() const { return data_loader_rng_seed.value_or(seed); }

  // model (wg-model.md §1; per-stream nets in StreamConfig)
  int healpix_level = 5;
  std::string embed_orientation = "channels";  // only "channels"
  bool embed_local_coords = true;              // only true
  bool embed_centroids_local_coords = false;   // only false
  std::string embed_unembed_mode = "block";    // block | full
  int embed_size_centroids = 0;
  double embed_dropout_rate = 0.1;
  double embed_dropout_final_rate = 0.1;  // on the embed output (fixed 0.1 in WeatherGenerator)
  double pred_dropout_rate = 0.1;         // in the decoder's blocks (fixed 0.1 in WeatherGenerator)
  bool target_cell_local_prediction = true;  // only true

  int ae_local_dim_embed = 1024;
  int ae_local_num_blocks = 2;
  int ae_local_num_heads = 16;
  double ae_local_dropout_rate = 0.1;
  bool ae_local_with_qk_lnorm = true;
  int ae_local_num_queries = 1;
  bool ae_local_queries_per_cell = false;  // only false

  int ae_adapter_num_heads = 16;
  int ae_adapter_embed = 128;
  bool ae_adapter_with_qk_lnorm = true;
  bool ae_adapter_with_residual = true;
  double ae_adapter_dropout_rate = 0.1;

  int ae_global_dim_embed = 2048;
  int ae_global_num_blocks = 8;
  int ae_global_num_heads = 32;
  double ae_global_dropout_rate = 0.1;
  bool ae_global_with_qk_lnorm = true;
  double ae_global_att_dense_rate = 1.0;
  int ae_global_block_factor = 64;
  int ae_global_mlp_hidden_factor = 2;

  int ae_aggregation_num_blocks = 2;
  int ae_aggregation_num_heads = 32;
  double ae_aggregation_dropout_rate = 0.1;
  bool ae_aggregation_with_qk_lnorm = true;
  double ae_aggregation_att_dense_rate = 1.0;
  int ae_aggregation_block_factor = 64;
  int ae_aggregation_mlp_hidden_factor = 2;

  std::string decoder_type = "PerceiverIOCoordConditioning";  // only this one
  bool pred_adapter_kv = false;  // only false
  bool pred_self_attention = true;
  bool pred_dyadic_dims = false;  // only false
  bool pred_mlp_adaln = true;

  int forecast_offset = 0;
  int forecast_delta_hrs = 0;    // 0: len_hrs
  int forecast_steps = 0;
  std::string forecast_policy;   // "" (null) | fixed
  double forecast_att_dense_rate = 1.0;
  int fe_num_blocks = 0;
  int fe_num_heads = 16;
  double fe_dropout_rate = 0.1;
  bool fe_with_qk_lnorm = true;
  double impute_latent_noise_std = 0.0;

  double norm_eps = 1e-4;
  double mlp_norm_eps = 1e-5;
  std::string norm_type = "LayerNorm";  // LayerNorm | RMSNorm
  bool with_mixed_precision = true;     // CUDA only: autocast in attention_dtype
  bool with_flash_attention = true;     // accepted; attention here is its own
  std::string attention_dtype = "bf16"; // bf16 | fp16 | fp32 (CUDA only)
  std::string mixed_precision_dtype = "bf16";
  double latent_noise_kl_weight = 0.0;  // only 0

  // EMA of the weights, used for validation
  bool validate_with_ema = true;
  double ema_ramp_up_ratio = 0.09;
  double ema_halflife_in_thousands = 1e-3;

  // what is trained
  std::string training_mode = "masking";  // masking | forecast
  LossConfig training_loss{0.7, {{"mse", 0.8}, {"mae", 0.2}}};  // training_mode_config.losses.LossPhysical
  LossConfig validation_loss{1.0, {{"mse", 1.0}}};              // validation_mode_config.losses.LossPhysical
  // timestep_weight: [gamma_decay, gamma] weighs forecast step i by gamma^i
  // (renormalised to sum to the number of steps); empty: 1 for every step.
  std::string timestep_weight;
  double timestep_weight_param = 1.0;

  // data
  std::string streams_directory = "streams/era5_1deg/";  // as written; the loader resolves it
  std::vector<StreamConfig> streams;  // loaded from streams_directory
  int batch_size_per_gpu = 1;
  int batch_size_validation_per_gpu = 1;
  double masking_rate = 0.6;
  bool masking_rate_sampling = true;
  double sampling_rate_target = 1.0;
  std::string masking_strategy = "random";  // random | block | healpix | channel | causal | combination
  MaskingStrategyConfig masking_strategy_config;
  bool shuffle = true;
  int num_mini_epochs = 32;
  int64_t samples_per_mini_epoch = 4096;
  int64_t samples_per_validation = 0;  // validated after every mini-epoch (all ranks together); 0: no validation
  // File-backed streams: where relative `filenames` live ("": the
  // environment variable WG_DATA_PATH), and the time windows of samples.
  // Dates are seconds since 1970-01-01 UTC, written YYYYMMDDHHMM in YAML.
  // Window k covers [start_date + k*step_hrs, + len_hrs); windows start no
  // later than end_date (their dates may run past it, as in WeatherGenerator).
  std::string data_path;
  int64_t start_date = 283996800;      // 197901010000
  int64_t end_date = 1609372800;       // 202012310000
  int64_t start_date_val = 1609459200; // 202101010000 (validation period, checked against the data)
  int64_t end_date_val = 1640995200;   // 202201010000
  int len_hrs = 6;
  int step_hrs = 6;
  // Batches prepared ahead by background threads (data/loader.h).
  int loader_num_workers = 2;  // worker threads (WeatherGenerator's name); 0: in the training thread
  int loader_prefetch = 2;     // finished batches held ahead per worker, >= 1

  // optimisation
  LrConfig lr;
  double grad_clip = 1.0;                 // 0: no clipping
  double weight_decay = 0.1;
  NanPolicy nan_policy = NanPolicy::Error;  // a non-finite loss or gradient norm: stop (error) or skip the step
  int max_consecutive_nan_skips = 10;
  // Dynamic loss scaling (upstream's GradScaler, wg/train/loss_scaler.h):
  // auto: under float16 autocast on a GPU, where it matters | on | off.
  std::string loss_scaling = "auto";

  // activation recomputation choices
  RecomputeConfig gradient_checkpointing;
  std::vector<NodeRule> checkpoint_node_rules;
  AutoPlanConfig auto_plan;

  // data parallelism
  double ddp_bucket_mb = 25;      // gradient allreduce bucket bound, MiB
  FaultInjection fault_injection;

  TelemetryConfig telemetry;

  // stopping and resuming (training checkpoints every train_log_freq.checkpoint steps)
  double time_limit_minutes = 0;   // 0: none; else stop, save and exit 0 before it runs out
  double stop_margin_seconds = 60; // how long before the limit to stop
  int checkpoint_keep = 3;         // training checkpoints kept in run_dir/checkpoints

  // execution
  std::string device = "auto";  // auto | cpu | cuda
  int num_threads = 0;          // 0: $OMP_NUM_THREADS if set, else cores of the node / ranks on the node
  int cpu_keep_freed_mib = 1024;  // freed CPU memory kept for the next step, per rank (0: glibc's defaults)
  double peak_tflops = 0;         // a rank's peak for MFU, TFLOP/s (0: detected, wg/util/peak_flops.h)

  TrainLogFreq train_log_freq;
};

}  // namespace wg
