// A reader for Zarr format v2 stores (the layout anemoi-datasets writes;
// docs/configuration.md describes how the trainer reads them). No LibTorch.
//
// Supported: dtypes <f4 <f8 <i8 |b1 <M8[s] (little-endian), order "C", no
// filters, compressor null or blosc (any blosc codec and shuffle), both
// dimension separators, missing chunk files (read as fill_value). Anything
// else is rejected with a ZarrError naming the store, the array and what is
// unsupported. Chunks are read on demand, one file at a time; each Array
// keeps a small LRU cache of decoded chunks and is safe to use from several
// threads at once (decoding runs outside the cache lock).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace wg::zarr {

class ZarrError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class DType { F4, F8, I8, B1, M8s };  // "<f4" "<f8" "<i8" "|b1" "<M8[s]"

struct ArrayMeta {
  std::vector<int64_t> shape, chunks;
  DType dtype = DType::F4;
  int itemsize = 4;          // bytes per element
  std::string dtype_str;     // as in .zarray
  std::string compressor;    // "" (null) or "blosc"
  char separator = '.';      // dimension_separator
  std::vector<uint8_t> fill; // one element's bytes; all-zero bytes when fill_value is null
  int64_t chunk_elements() const;  // product(chunks)
  int64_t chunk_bytes() const;     // chunk_elements() * itemsize
};

// Parses the text of a .zarray; `where` (store path + "/" + name) prefixes
// every error message.
ArrayMeta parse_array_meta(const std::string& zarray_text, const std::string& where);

class Array {  // thread-safe; copyable handle (shared state)
 public:
  const ArrayMeta& meta() const;
  const std::string& name() const;  // e.g. "data"
  const std::string& path() const;  // store path + "/" + name
  // The chunk file name of chunk-grid index `idx`, e.g. "3.0.0.0" or "3/0/0/0".
  std::string chunk_key(const std::vector<int64_t>& idx) const;
  // The decoded chunk at chunk-grid index `idx` (C order, padded to the full
  // chunk shape, itemsize bytes each). A missing chunk file gives a chunk
  // filled with fill. Cached (LRU of cache_chunks decoded chunks).
  std::shared_ptr<const std::vector<uint8_t>> chunk(const std::vector<int64_t>& idx) const;
  // Copies the box [start, start+count) into out (C order, itemsize bytes
  // per element). A chunk that lies wholly inside the box and is contiguous
  // in `out` is decoded straight into `out` (and not cached).
  void read(const std::vector<int64_t>& start, const std::vector<int64_t>& count, void* out) const;
  // Whole array converted to double (F4, F8, I8, B1, M8s -> seconds; NaT ->
  // NaN). For small arrays (statistics, coordinates).
  std::vector<double> read_all_f64() const;
  std::vector<int64_t> read_all_i64() const;  // I8, M8s (and B1 as 0/1); ZarrError for floats

 private:
  friend class Group;
  struct State;
  explicit Array(std::shared_ptr<State> state);
  std::shared_ptr<State> s_;
};

class Group {
 public:
  // Opens a Zarr v2 group (checks .zgroup with zarr_format 2). A zarr.json at
  // the root is a Zarr v3 store: ZarrError. A missing path: ZarrError naming it.
  static Group open(const std::string& path);
  const std::string& path() const;
  const nlohmann::json& attrs() const;       // .zattrs, {} if absent
  bool has_array(const std::string& name) const;
  std::vector<std::string> arrays() const;  // array names directly under the group (sorted)
  Array array(const std::string& name, size_t cache_chunks = 4, int blosc_threads = 1) const;

 private:
  std::string path_;
  nlohmann::json attrs_;
  std::vector<std::string> arrays_;
};

// Python's json.dumps (zarr-python's attributes, .zattrs) writes NaN,
// Infinity and -Infinity bare, which JSON lacks: outside strings they become
// null here, so that such an attribute does not make a store unreadable.
std::string python_nonfinite_as_null(const std::string& json_text);

}  // namespace wg::zarr
