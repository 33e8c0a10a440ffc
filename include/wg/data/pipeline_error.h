// The one exception type of the tokeniser / masking / target pipeline
// (healpix, tokenizer, masking, targets, stream_sample, batch_layout). Every
// message names the stream and the configuration key (or input field) at
// fault, so a bad config or bad input is diagnosed from the message alone.
#pragma once

#include <stdexcept>
#include <string>

namespace wg {

class PipelineError : public std::runtime_error {
 public:
  PipelineError(const std::string& stream, const std::string& key, const std::string& message)
      : std::runtime_error("stream '" + stream + "', " + key + ": " + message), stream_(stream), key_(key) {}
  const std::string& stream() const { return stream_; }
  const std::string& key() const { return key_; }

 private:
  std::string stream_;
  std::string key_;
};

}  // namespace wg
