// The wgtrain run as a story (see wg/train/run.h); the phases are in
// run_phases.cpp.
#include "wg/train/run.h"

#include "train/run_phases.h"

namespace wg {

int run_training(const CliOptions& options, const DistContext& dist) {
  const auto started = run::start_process(options, dist);
  const LoadedConfig loaded = run::load_configuration(options.sources);
  const Config& config = loaded.config;
  Dataset data = run::open_data(config, dist);
  const run::Placement place = run::place_rank(config, dist);
  const RankPlan plan = run::plan_rank(config, place, dist);
  if (options.print_plan && !plan.automatic) return 0;

  run::Training training = run::build_trainer(config, std::move(data), plan, place, options, dist);
  Trainer& trainer = *training.trainer;
  if (!options.dump_step.empty()) return run::dump_step(options, config, trainer, dist);

  const run::RunDir dir = run::make_run_dir(loaded, plan.plan, dist);
  const PlanPrediction prediction = run::plan_automatically(trainer, config, plan, place, dist);
  if (options.print_plan) return 0;
  if (plan.automatic) run::write_plan(dir, trainer.plan(), dist);

  run::Sinks sinks = run::attach_sinks(config, options, dir, place, prediction, trainer, dist);
  try {
    const Trainer::Control control = run::resume_and_control(config, dir, trainer, sinks, dist, started);
    const RunSummary summary = run::train(trainer, sinks, control);
    run::finish(dir, summary, trainer, sinks, dist);
  } catch (...) {
    run::report_failure(dir, trainer, sinks);
    throw;
  }
  return 0;
}

}  // namespace wg
