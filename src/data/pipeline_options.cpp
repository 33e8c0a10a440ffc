// Opening a stream's readers from its options (see pipeline_options.h).
#include "wg/data/pipeline_options.h"

#include "wg/data/anemoi_reader.h"
#include "wg/data/obs_reader.h"

namespace wg {

std::vector<std::shared_ptr<const StreamReader>> open_stream_readers(const StreamOptions& stream,
                                                                     const TimeWindowHandler& windows, uint64_t seed) {
  std::vector<std::shared_ptr<const StreamReader>> out;
  if (stream.type == StreamType::Synthetic) {
    out.push_back(std::make_shared<SyntheticReader>(stream.name, stream.synthetic, stream.channels, seed));
    return out;
  }
  if (stream.filenames.empty())
    throw ReaderError(stream.name, "(no file)", "filenames", "names no store for this stream");
  for (const std::string& f : stream.filenames) {
    if (stream.type == StreamType::Anemoi)
      out.push_back(std::make_shared<AnemoiReader>(stream.name, f, stream.channels, windows, stream.frequency_seconds));
    else
      out.push_back(std::make_shared<ObsReader>(stream.name, f, stream.channels, stream.base_datetime));
  }
  for (size_t i = 1; i < out.size(); ++i) {
    if (out[i]->source_channels() != out[0]->source_channels() ||
        out[i]->target_channels() != out[0]->target_channels() || out[i]->num_geoinfos() != out[0]->num_geoinfos())
      throw ReaderError(stream.name, out[i]->file(), "filenames",
                        "selects other channels or geoinfos than the stream's first file " + out[0]->file() +
                            ": the files of a stream must have the same columns");
  }
  return out;
}

}  // namespace wg
