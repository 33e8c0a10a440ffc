// Zarr v2 reader (see header). Sections: files (open/fstat/read with errno
// text), the LRU cache of decoded chunks, chunk loading (uncompressed or
// blosc, straight into the destination), box copies, and the Array and
// Group classes. .zarray parsing is in zarr_meta.cpp.
#include "wg/io/zarr.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <list>
#include <mutex>
#include <system_error>
#include <unordered_map>

#include "io/zarr_common.h"
#include "wg/io/blosc_codec.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the Zarr reader assumes a little-endian host");

namespace wg::zarr {

namespace {

using namespace detail;
namespace fs = std::filesystem;
using Chunk = std::shared_ptr<const std::vector<uint8_t>>;



std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }


// ---- Files ------------------------------------------------------------------

// A file opened for reading. Every error names `what` (the caller's context),
// the file and the errno text.
class File {
 public:
  File(std::string file, std::string what) : file_(std::move(file)), what_(std::move(what)) {}
  ~File() {
    if (fd_ >= 0) ::close(fd_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  // False when the file does not exist.
  bool open() {
    fd_ = ::open(file_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ >= 0) return true;
    if (errno == ENOENT) return false;
    fail(what_, "cannot open " + file_ + ": " + errno_text(errno));
  }

  size_t size() const {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail(what_, "cannot stat " + file_ + ": " + errno_text(errno));
    if (!S_ISREG(st.st_mode)) fail(what_, file_ + " is not a regular file");
    return static_cast<size_t>(st.st_size);
  }

  void read_exact(uint8_t* dst, size_t n) const {
    size_t done = 0;
    while (done < n) {
      const ssize_t r = ::read(fd_, dst + done, n - done);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) fail(what_, "cannot read " + file_ + ": " + errno_text(errno));
      if (r == 0) fail(what_, "cannot read " + file_ + ": it ended after " + std::to_string(done) + " of " +
                                  std::to_string(n) + " bytes");
      done += static_cast<size_t>(r);
    }
  }

 private:
  std::string file_, what_;
  int fd_ = -1;
};

// The whole text of a metadata file; `missing_ok` gives "" for a missing file.
std::string read_text(const std::string& file, const std::string& what, bool missing_ok) {
  File f(file, what);
  if (!f.open()) {
    if (missing_ok) return "";
    fail(what, "missing " + file);
  }
  std::string text(f.size(), '\0');
  f.read_exact(reinterpret_cast<uint8_t*>(text.data()), text.size());
  return text;
}


// ---- Chunk cache ------------------------------------------------------------

// LRU of decoded chunks keyed by linear chunk index; every method locks.
class ChunkCache {
 public:
  explicit ChunkCache(size_t capacity) : capacity_(capacity) {}

  Chunk get(int64_t key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }

  // Inserts `chunk` unless another thread got there first; returns the cached one.
  Chunk put(int64_t key, Chunk chunk) {
    std::lock_guard<std::mutex> lock(mu_);
    if (capacity_ == 0) return chunk;
    auto it = index_.find(key);
    if (it != index_.end()) return it->second->second;
    lru_.emplace_front(key, std::move(chunk));
    index_[key] = lru_.begin();
    while (lru_.size() > capacity_) {
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
    return lru_.front().second;
  }

 private:
  using Entry = std::pair<int64_t, Chunk>;
  size_t capacity_;
  std::mutex mu_;
  std::list<Entry> lru_;
  std::unordered_map<int64_t, std::list<Entry>::iterator> index_;
};

// ---- Box copies -------------------------------------------------------------

// Fills n elements of dst with `fill`.
void fill_elements(uint8_t* dst, int64_t n, const std::vector<uint8_t>& fill) {
  const size_t isz = fill.size();
  const size_t total = static_cast<size_t>(n) * isz;
  if (std::all_of(fill.begin(), fill.end(), [](uint8_t b) { return b == 0; })) {
    std::memset(dst, 0, total);
    return;
  }
  if (total == 0) return;
  std::memcpy(dst, fill.data(), isz);
  for (size_t done = isz; done < total; done *= 2) std::memcpy(dst + done, dst, std::min(done, total - done));
}

Shape byte_strides(const Shape& shape, size_t itemsize) {
  Shape st(shape.size());
  int64_t s = static_cast<int64_t>(itemsize);
  for (size_t d = shape.size(); d-- > 0;) {
    st[d] = s;
    s *= shape[d];
  }
  return st;
}

int64_t byte_offset(const Shape& at, const Shape& strides) {
  int64_t off = 0;
  for (size_t d = 0; d < at.size(); ++d) off += at[d] * strides[d];
  return off;
}

// Copies the box of extent `ext` at src_at in src (shape src_shape) to dst_at
// in dst (shape dst_shape): one memcpy per contiguous run.
void copy_box(const uint8_t* src, const Shape& src_shape, const Shape& src_at, uint8_t* dst, const Shape& dst_shape,
              const Shape& dst_at, const Shape& ext, size_t itemsize) {
  const size_t n = ext.size();
  if (n == 0) {
    std::memcpy(dst, src, itemsize);
    return;
  }
  const Shape ss = byte_strides(src_shape, itemsize), ds = byte_strides(dst_shape, itemsize);
  // Dims k..n-1 form one contiguous run in both buffers.
  size_t k = n - 1;
  size_t run = static_cast<size_t>(ext[k]) * itemsize;
  while (k > 0 && ext[k] == src_shape[k] && ext[k] == dst_shape[k]) run *= static_cast<size_t>(ext[--k]);
  const uint8_t* sp = src + byte_offset(src_at, ss);
  uint8_t* dp = dst + byte_offset(dst_at, ds);
  Shape i(k, 0);
  while (true) {
    std::memcpy(dp, sp, run);
    size_t d = k;
    for (; d-- > 0;) {
      sp += ss[d];
      dp += ds[d];
      if (++i[d] < ext[d]) break;
      sp -= ss[d] * ext[d];
      dp -= ds[d] * ext[d];
      i[d] = 0;
    }
    if (d == static_cast<size_t>(-1)) return;
  }
}

// True when a box of extent `ext` is one contiguous run inside an array of shape `outer`.
bool contiguous_in(const Shape& ext, const Shape& outer) {
  size_t d = ext.size();
  while (d > 0 && ext[d - 1] == outer[d - 1]) --d;
  // dims d..end are full; dim d-1 may be partial; all before it must be 1.
  for (size_t e = 0; e + 1 < d; ++e)
    if (ext[e] != 1) return false;
  return true;
}

}  // namespace

// ---- Array --------------------------------------------------------------------

struct Array::State {
  ArrayMeta meta;
  std::string name, path;  // path: store path + "/" + name, also the chunk directory
  Shape grid;              // chunks per dimension
  int blosc_threads = 1;
  mutable ChunkCache cache;

  State(ArrayMeta m, std::string n, std::string p, size_t cache_chunks, int threads)
      : meta(std::move(m)), name(std::move(n)), path(std::move(p)), blosc_threads(threads), cache(cache_chunks) {
    for (size_t d = 0; d < meta.shape.size(); ++d)
      grid.push_back((meta.shape[d] + meta.chunks[d] - 1) / meta.chunks[d]);
  }

  int64_t linear(const Shape& idx) const {
    int64_t k = 0;
    for (size_t d = 0; d < idx.size(); ++d) k = k * grid[d] + idx[d];
    return k;
  }

  std::string key(const Shape& idx) const {
    if (idx.empty()) return "0";
    std::string k;
    for (size_t d = 0; d < idx.size(); ++d) k += (d ? std::string(1, meta.separator) : "") + std::to_string(idx[d]);
    return k;
  }

  // Decodes chunk `idx` into dst (chunk_bytes); a missing file gives fill.
  void load(const Shape& idx, uint8_t* dst) const {
    const std::string k = key(idx);
    const std::string what = path + ": chunk " + k;
    File f(path + "/" + k, what);
    if (!f.open()) {
      fill_elements(dst, meta.chunk_elements(), meta.fill);
      return;
    }
    const size_t size = f.size(), want = static_cast<size_t>(meta.chunk_bytes());
    const std::string corrupt = "chunk " + k + " is corrupt";
    if (meta.compressor.empty()) {
      if (size != want)
        fail(path, corrupt + ": the file has " + std::to_string(size) + " bytes but an uncompressed chunk has " +
                       std::to_string(want));
      f.read_exact(dst, size);
      return;
    }
    try {
      read_blosc(f, size, dst, want);
    } catch (const blosc::BloscError& e) {
      fail(path, corrupt + ": " + e.what());
    }
  }

  // Reads and decodes the blosc chunk file f (size bytes) into dst (want bytes).
  void read_blosc(const File& f, size_t size, uint8_t* dst, size_t want) const {
    if (size > blosc::max_compressed_size(want)) {  // never read a huge bad file: its header says what is wrong
      uint8_t header[blosc::kHeaderSize];
      f.read_exact(header, sizeof header);
      blosc::check_sizes(header, size, want);
      throw blosc::BloscError("the file has " + std::to_string(size) + " bytes, more than a blosc chunk of " +
                              std::to_string(want) + " bytes can take");
    }
    // Reused between chunks (no fresh pages per read); keeps this thread's largest chunk file.
    thread_local std::vector<uint8_t> packed;
    packed.resize(size);
    f.read_exact(packed.data(), size);
    blosc::decode(packed.data(), size, dst, want, blosc_threads);
  }

  void check_chunk_index(const Shape& idx) const {
    bool ok = idx.size() == grid.size();
    for (size_t d = 0; ok && d < idx.size(); ++d) ok = idx[d] >= 0 && idx[d] < grid[d];
    if (!ok) fail(path, "chunk index " + shape_str(idx) + " outside the chunk grid " + shape_str(grid));
  }

  void check_box(const Shape& start, const Shape& count) const {
    bool ok = start.size() == meta.shape.size() && count.size() == meta.shape.size();
    for (size_t d = 0; ok && d < start.size(); ++d)
      ok = start[d] >= 0 && count[d] >= 0 && start[d] + count[d] <= meta.shape[d];
    if (!ok)
      fail(path, "box start " + shape_str(start) + " count " + shape_str(count) + " outside the array's shape " +
                     shape_str(meta.shape));
  }
};

Array::Array(std::shared_ptr<State> state) : s_(std::move(state)) {}

const ArrayMeta& Array::meta() const { return s_->meta; }
const std::string& Array::name() const { return s_->name; }
const std::string& Array::path() const { return s_->path; }

std::string Array::chunk_key(const std::vector<int64_t>& idx) const {
  s_->check_chunk_index(idx);
  return s_->key(idx);
}

std::shared_ptr<const std::vector<uint8_t>> Array::chunk(const std::vector<int64_t>& idx) const {
  s_->check_chunk_index(idx);
  const int64_t k = s_->linear(idx);
  if (Chunk hit = s_->cache.get(k)) return hit;
  auto fresh = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(s_->meta.chunk_bytes()));
  s_->load(idx, fresh->data());
  return s_->cache.put(k, std::move(fresh));
}

void Array::read(const std::vector<int64_t>& start, const std::vector<int64_t>& count, void* out) const {
  const State& s = *s_;
  s.check_box(start, count);
  if (product(count) == 0) return;
  const size_t n = start.size(), isz = static_cast<size_t>(s.meta.itemsize);
  const Shape& cs = s.meta.chunks;
  Shape first(n), last(n);
  for (size_t d = 0; d < n; ++d) {
    first[d] = start[d] / cs[d];
    last[d] = (start[d] + count[d] - 1) / cs[d];
  }
  const Shape out_strides = byte_strides(count, isz);
  Shape idx = first, at(n), ext(n), in_chunk(n), in_out(n);
  while (true) {
    for (size_t d = 0; d < n; ++d) {
      const int64_t lo = std::max(start[d], idx[d] * cs[d]);
      const int64_t hi = std::min(start[d] + count[d], (idx[d] + 1) * cs[d]);
      ext[d] = hi - lo;
      in_chunk[d] = lo - idx[d] * cs[d];
      in_out[d] = lo - start[d];
    }
    uint8_t* dst = static_cast<uint8_t*>(out) + byte_offset(in_out, out_strides);
    Chunk cached = s.cache.get(s.linear(idx));
    if (!cached && ext == cs && contiguous_in(ext, count)) {
      s.load(idx, dst);  // the whole chunk, straight into the output
    } else {
      if (!cached) cached = chunk(idx);
      copy_box(cached->data(), cs, in_chunk, dst, count, Shape(n, 0), ext, isz);
    }
    size_t d = n;
    while (d > 0 && ++idx[d - 1] > last[d - 1]) {
      idx[d - 1] = first[d - 1];
      --d;
    }
    if (d == 0) return;
  }
}

std::vector<double> Array::read_all_f64() const {
  const ArrayMeta& m = s_->meta;
  const size_t n = static_cast<size_t>(product(m.shape));
  std::vector<uint8_t> raw(n * m.itemsize);
  read(Shape(m.shape.size(), 0), m.shape, raw.data());
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = raw.data() + i * m.itemsize;
    float f;
    int64_t v;
    switch (m.dtype) {
      case DType::F4: std::memcpy(&f, p, 4); out[i] = f; break;
      case DType::F8: std::memcpy(&out[i], p, 8); break;
      case DType::I8: std::memcpy(&v, p, 8); out[i] = static_cast<double>(v); break;
      case DType::M8s:
        std::memcpy(&v, p, 8);
        out[i] = v == std::numeric_limits<int64_t>::min() ? std::nan("") : static_cast<double>(v);  // NaT
        break;
      case DType::B1: out[i] = *p ? 1.0 : 0.0; break;
    }
  }
  return out;
}

std::vector<int64_t> Array::read_all_i64() const {
  const ArrayMeta& m = s_->meta;
  if (m.dtype == DType::F4 || m.dtype == DType::F8)
    fail(s_->path, "read_all_i64: dtype " + m.dtype_str + " is floating point (use read_all_f64)");
  const size_t n = static_cast<size_t>(product(m.shape));
  if (m.dtype == DType::B1) {
    std::vector<uint8_t> raw(n);
    read(Shape(m.shape.size(), 0), m.shape, raw.data());
    return std::vector<int64_t>(raw.begin(), raw.end());
  }
  std::vector<int64_t> out(n);
  read(Shape(m.shape.size(), 0), m.shape, out.data());
  return out;
}

// ---- Group --------------------------------------------------------------------

Group Group::open(const std::string& path) {
  Group g;
  g.path_ = path;
  while (g.path_.size() > 1 && g.path_.back() == '/') g.path_.pop_back();
  const std::string& p = g.path_;
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);
  if (!fs::exists(st)) fail(p, "no such Zarr store (the path does not exist)");
  if (!fs::is_directory(st)) fail(p, "not a Zarr store (not a directory)");
  if (fs::exists(p + "/zarr.json", ec))
    fail(p, "Zarr v3 store (zarr.json); only Zarr v2 (.zgroup/.zarray) is supported");
  if (!fs::exists(p + "/.zgroup", ec))
    fail(p, fs::exists(p + "/.zarray", ec) ? "a Zarr array, not a group (no .zgroup)"
                                           : "not a Zarr v2 group (no .zgroup)");
  const json zgroup = parse_json(read_text(p + "/.zgroup", p, false), ".zgroup", p);
  if (!zgroup.is_object() || zgroup.value("zarr_format", json()) != 2)
    fail(p, ".zgroup does not say zarr_format 2: " + zgroup.dump());
  const std::string attrs = read_text(p + "/.zattrs", p, true);
  g.attrs_ = attrs.empty() ? json::object() : parse_json(python_nonfinite_as_null(attrs), ".zattrs", p);
  // Listing errors only: a subfolder without .zarray (a group such as
  // anemoi's _build/) sets its own error code, which says nothing about the listing.
  fs::directory_iterator it(p, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code entry_ec;
    if (it->is_directory(entry_ec) && fs::is_regular_file(it->path() / ".zarray", entry_ec))
      g.arrays_.push_back(it->path().filename().string());
  }
  if (ec) fail(p, "cannot list the store: " + ec.message());
  std::sort(g.arrays_.begin(), g.arrays_.end());
  return g;
}

const std::string& Group::path() const { return path_; }
const nlohmann::json& Group::attrs() const { return attrs_; }

bool Group::has_array(const std::string& name) const {
  std::error_code ec;
  return !name.empty() && fs::is_regular_file(path_ + "/" + name + "/.zarray", ec);
}

std::vector<std::string> Group::arrays() const { return arrays_; }

Array Group::array(const std::string& name, size_t cache_chunks, int blosc_threads) const {
  if (!has_array(name)) {
    std::string known;
    for (const std::string& a : arrays_) known += (known.empty() ? "" : ", ") + a;
    fail(path_, "no array '" + name + "' (arrays here: " + (known.empty() ? "none" : known) + ")");
  }
  const std::string where = path_ + "/" + name;
  ArrayMeta meta = parse_array_meta(read_text(where + "/.zarray", where, false), where);
  return Array(std::make_shared<Array::State>(std::move(meta), name, where, cache_chunks, blosc_threads));
}

}  // namespace wg::zarr
