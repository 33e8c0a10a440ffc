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
  std::string net = "transformer";  // only "transformer" is supported
  int num_tokens = 1;               // latent tokens produced per input token
  int num_heads = 8;
  int dim_embed = 256;
  int num_blocks = 2;
};

// Settings of the synthetic source (`synthetic:` block of a stream file).
struct SyntheticConfig {
  int num_channels = 16;      // C
  int grid_lat = 8;           // cells along latitude  (tokens per sample = lat*lon)
  int grid_lon = 16;          // cells along longitude
  int num_waves = 6;          // moving waves summed per field
  double noise = 0.05;        // std of white noise added (in field units)
  double time_step_hours = 6; // spacing of consecutive time points
};

// One stream file entry (`<NAME>: {...}` in a file of streams_directory).
struct StreamConfig {
  std::string name;                     // the map key, e.g. "ERA5"
  std::string type = "synthetic";       // "synthetic" | "anemoi" (an anemoi-datasets Zarr v2 store)
  std::vector<std::string> filenames;   // anemoi: the store, relative to data_path unless absolute
  // anemoi channel selection, substring rules on the store's variable names:
  // a channel is a source (model input) if some `source` entry occurs in its
  // name (or `source` is empty) and no `source_exclude` entry does; a target
  // (in the loss) likewise with `target` / `target_exclude`.
  std::vector<std::string> source;
  std::vector<std::string> source_exclude;
  std::vector<std::string> target;
  std::vector<std::string> target_exclude;
  double loss_weight = 1.0;
  double masking_rate = -1.0;           // < 0: use the global masking_rate
  int token_size = 8;                   // points per token
  bool tokenize_spacetime = false;
  EmbedNetConfig embed;
  SyntheticConfig synthetic;
  Origin origin;                        // file and line of the stream entry
  // The channels an anemoi stream carries come from its store: the data
  // layer reports them (StreamShape, wg/data/batch.h), the config does not.
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
};

// The settings of every section of the model, one field per section (the
// table of sections, with WeatherGenerator's key names, is
// wg/config/recompute_sections.h). WeatherGenerator's booleans
// (embed_gradient_checkpoint_mode, ...) are already folded in as Full/None
// where the structured form does not name a section.
struct RecomputeConfig {
  SectionRecompute embed{false, RecomputeMode::Full, 1, {}, {}};  // embed_gradient_checkpoint_mode: true
  SectionRecompute latent;
  SectionRecompute pred;
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
  std::string lr_scaling_policy = "sqrt";    // none | linear | sqrt
};

struct LossTerm {
  std::string name;  // "mse" | "mae"
  double weight = 1.0;
};

struct TrainLogFreq {
  int terminal = 10;     // progress line every N steps
  int metrics = 20;      // metrics record every N steps
  int checkpoint = 250;  // training checkpoint every N steps
};

enum class NanPolicy { Error, Skip };

// ---- the whole run -------------------------------------------------------

struct Config {
  // identity and output
  std::string run_id;             // empty: generated at start
  std::string run_root = "runs";  // run directory = run_root/run_id
  uint64_t seed = 42;

  // model: embed section (per-stream nets in StreamConfig::embed)
  std::string embed_orientation = "channels";  // only "channels"
  std::string embed_unembed_mode = "block";    // block | full
  int embed_size_centroids = 0;
  double embed_dropout_rate = 0.1;
  double embed_dropout_final_rate = 0.1;  // on the embed output (fixed 0.1 in WeatherGenerator)
  int ae_local_dim_embed = 1024;  // dim_out of every embed transformer

  // model: latent section (WeatherGenerator's global assimilation engine)
  int ae_global_dim_embed = 2048;
  int ae_global_num_blocks = 8;
  int ae_global_num_heads = 32;
  double ae_global_dropout_rate = 0.1;
  int ae_global_mlp_hidden_factor = 2;

  // model: prediction heads
  int pred_mlp_hidden_factor = 2;  // hidden width = factor * latent width

  std::string norm_type = "LayerNorm";  // LayerNorm | RMSNorm
  bool with_mixed_precision = true;     // CUDA only: bf16 autocast of attention
  std::string attention_dtype = "bf16"; // bf16 | fp32 (CUDA only)

  // data
  std::string streams_directory = "streams/era5_1deg/";  // as written; the loader resolves it
  std::vector<StreamConfig> streams;  // loaded from streams_directory
  int batch_size_per_gpu = 1;
  double masking_rate = 0.6;
  bool masking_rate_sampling = true;
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
  std::vector<LossTerm> loss_fcts = {{"mse", 1.0}};
  NanPolicy nan_policy = NanPolicy::Error;
  int max_consecutive_nan_skips = 10;

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
  int num_threads = 0;          // 0: cores of the node / ranks on the node

  TrainLogFreq train_log_freq;
};

}  // namespace wg
