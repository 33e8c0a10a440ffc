// Checked blosc decoding (see header): header length and format version,
// compressed size against the buffer, decompressed size against the expected
// size, blosc_cbuffer_validate, then blosc_decompress_ctx (which keeps no
// global state, so threads may decode concurrently).
#include "wg/io/blosc_codec.h"

#include <blosc.h>

#include <string>

namespace wg::blosc {

namespace {

[[noreturn]] void fail(const std::string& msg) { throw BloscError(msg); }

}  // namespace

static_assert(kHeaderSize == BLOSC_MIN_HEADER_LENGTH, "c-blosc 1.x header size");

void check_sizes(const uint8_t* header, size_t src_size, size_t dst_size) {
  if (src_size < kHeaderSize)
    fail("the file has " + std::to_string(src_size) + " bytes, less than the " + std::to_string(kHeaderSize) +
         "-byte blosc header");
  if (header[0] > BLOSC_VERSION_FORMAT)
    fail("not a blosc buffer (header format version " + std::to_string(header[0]) + "; libblosc " +
         BLOSC_VERSION_STRING + " reads up to " + std::to_string(BLOSC_VERSION_FORMAT) + ")");
  size_t nbytes = 0, cbytes = 0, blocksize = 0;
  blosc_cbuffer_sizes(header, &nbytes, &cbytes, &blocksize);
  if (cbytes != src_size)
    fail("blosc header says " + std::to_string(cbytes) + " bytes compressed but the file has " +
         std::to_string(src_size));
  if (nbytes != dst_size)
    fail("blosc header says " + std::to_string(nbytes) + " bytes decompressed but the chunk has " +
         std::to_string(dst_size) + " bytes (chunk elements x itemsize)");
}

size_t max_compressed_size(size_t nbytes) { return nbytes + BLOSC_MAX_OVERHEAD; }

void decode(const uint8_t* src, size_t src_size, uint8_t* dst, size_t dst_size, int threads) {
  check_sizes(src, src_size, dst_size);
  size_t validated = 0;
  if (blosc_cbuffer_validate(src, src_size, &validated) != 0 || validated != dst_size)
    fail("not a valid blosc buffer (blosc_cbuffer_validate failed)");
  const int n = blosc_decompress_ctx(src, dst, dst_size, threads < 1 ? 1 : threads);
  if (n <= 0) fail("blosc decompression failed (libblosc returned " + std::to_string(n) + ")");
  if (static_cast<size_t>(n) != dst_size)
    fail("blosc decompressed " + std::to_string(n) + " bytes, expected " + std::to_string(dst_size));
}

}  // namespace wg::blosc
