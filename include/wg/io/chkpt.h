// PyTorch's own checkpoint files: what torch.save(model.state_dict(), path)
// writes (WeatherGenerator's .chkpt), a zip archive
//   <archive>/data.pkl     the pickled (Ordered)dict: name -> tensor
//   <archive>/data/<key>   each storage's raw little-endian bytes
//   <archive>/version, <archive>/byteorder
// Reading takes any dict of tensors torch.save wrote (any storage offsets,
// strides, storages shared between tensors) and returns each tensor
// contiguous; writing gives a file torch.load(path, weights_only=True)
// reads as an OrderedDict, ready for load_state_dict(strict=True). The
// records are the safetensors ones (io/safetensors.h); no LibTorch here.
#pragma once

#include <stdexcept>
#include <string>

#include "wg/io/safetensors.h"

namespace wg {

class ChkptError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The tensors in the state_dict's order, metadata empty. Everything is
// checked before anything is returned; one ChkptError names the file and
// what is wrong (not a zip, an unsupported pickle opcode and its offset, a
// tensor of a dtype other than F32 F64 F16 BF16 I64 U8, ...).
SafetensorsFile read_chkpt(const std::string& path);

// Atomically (a temporary file beside `path`, then rename). file.metadata
// is not written (a state_dict has none).
void write_chkpt(const std::string& path, const SafetensorsFile& file);

// Whether `path` starts with a zip signature ("PK\x03\x04"), as torch.save's
// files do and safetensors files never do.
bool is_chkpt_file(const std::string& path);

}  // namespace wg
