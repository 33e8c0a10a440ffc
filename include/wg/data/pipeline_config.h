// A run's configuration as the data pipeline's options (wg/data/
// pipeline_options.h): one place that knows both the YAML keys and the
// pipeline's structs. Throws PipelineError naming the key for a value the
// pipeline cannot use.
#pragma once

#include <string>

#include "wg/config/config.h"
#include "wg/data/pipeline_options.h"

namespace wg {

// The training (or, `validation`, the validation) period's options.
PipelineOptions pipeline_options(const Config& config, bool validation);

// One stream's options; relative filenames resolved under config.data_path
// (which the loader has resolved: the key, --data-path or $WG_DATA_PATH).
StreamOptions stream_options(const Config& config, const StreamConfig& stream);

}  // namespace wg
