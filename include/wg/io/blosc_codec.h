// Decoding of one blosc (c-blosc 1.x) buffer with libblosc, checked before
// libblosc touches it: the 16-byte header must be there, its compressed size
// must equal the buffer's size, and its decompressed size must equal what the
// caller expects. Errors say what is wrong, without context: the caller adds
// which file it was.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>

namespace wg::blosc {

class BloscError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

constexpr size_t kHeaderSize = 16;

// The largest valid blosc buffer holding `nbytes` (the header plus the data
// stored raw): a bigger chunk file is corrupt before it is read.
size_t max_compressed_size(size_t nbytes);

// Checks the sizes in a blosc header against the buffer's size and the
// expected decompressed size. Reads only header[0, kHeaderSize), which must
// be there when src_size >= kHeaderSize.
void check_sizes(const uint8_t* header, size_t src_size, size_t dst_size);

// Decompresses src[0, src_size) into dst, which must receive exactly
// dst_size bytes. `threads` is libblosc's number of internal threads.
void decode(const uint8_t* src, size_t src_size, uint8_t* dst, size_t dst_size, int threads);

}  // namespace wg::blosc
