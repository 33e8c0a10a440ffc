// The wgtrain command line (see header).
#include "wg/train/cli.h"

#include <CLI/CLI.hpp>

#include "wg/train/run_error.h"

namespace wg {

namespace {
const char* const kHelpHint = "\nRun 'wgtrain --help' for the options.";
}

CliOptions parse_cli(int argc, const char* const* argv) {
  CliOptions o;
  std::string data_path;
  CLI::App app{"wgtrain: trains WeatherGenerator's model data-parallel over MPI/NCCL ranks, with recomputation "
               "chosen per section, block and node.",
               "wgtrain"};
  app.allow_extras();  // reported below as "unknown option", in one line
  app.add_option("--config", o.sources.files,
                 "overlay a YAML file on the built-in default_config.yml (repeatable, in order)")
      ->type_name("FILE")
      ->allow_extra_args(false);
  app.add_option("--set", o.sources.overrides,
                 "override one key, dotted for nested keys, the value as YAML (repeatable, applied last)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  app.add_option("--data-path", data_path, "root of relative anemoi filenames (beats data_path and $WG_DATA_PATH)")
      ->type_name("DIR");
  app.add_option("--log-level", o.log_level, "log level")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->capture_default_str();
  app.add_flag("--print-plan", o.print_plan, "print the resolved recomputation plan and exit");
  auto* weights = app.add_option("--init-weights", o.init_weights,
                                 "initialise the model from a safetensors file, a .chkpt (torch.save, e.g. "
                                 "WeatherGenerator's) or a run directory {model_path}/{run_id}/ (its "
                                 "{run_id}_latest.chkpt, else its newest {run_id}_chkpt<N>.chkpt)")
                      ->type_name("PATH");
  app.add_option("--init-weights-prefix", o.init_weights_prefix,
                 "only tensors named P...; they load into parameters Q... (default Q = P), e.g. "
                 "embed_engine.embeds.ERA5. to take one stream's embed transformer")
      ->type_name("P[=Q]")
      ->needs(weights);
  app.add_option("--dump-step", o.dump_step,
                 "run one training step (dropout off) on step 0's batch of rank 0, write it as safetensors for the "
                 "PyTorch twin (docs/step-dump.md), and exit")
      ->type_name("FILE");
  app.add_option("--dump-step-dtype", o.dump_step_dtype,
                 "precision of --dump-step: f32 (the run's) or f64 (checks the logic free of float32 rounding)")
      ->check(CLI::IsMember({"f32", "f64"}))
      ->capture_default_str();
  app.set_version_flag("--version", "wgtrain " WG_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    o.exit_now = true;
    o.output = app.help();
    return o;
  } catch (const CLI::CallForVersion& e) {
    o.exit_now = true;
    o.output = std::string(e.what()) + "\n";
    return o;
  } catch (const CLI::ParseError& e) {
    throw RunError(2, std::string("command line: ") + e.what() + kHelpHint);
  }
  for (const std::string& extra : app.remaining())
    throw RunError(2, std::string("command line: ") +
                          (extra.rfind("-", 0) == 0 ? "unknown option '" : "unexpected argument '") + extra + "'" +
                          kHelpHint);
  if (!data_path.empty()) o.sources.overrides.push_back("data_path=" + data_path);
  return o;
}

}  // namespace wg
