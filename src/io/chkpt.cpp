// torch.save's zip format (see wg/io/chkpt.h). The zip container is
// LibTorch's own PyTorchStreamReader/Writer (archive-name prefix, 64-byte
// alignment, zip64); the pickle is io/pickle.h's, not LibTorch's unpickler
// (torch::pickle_load fails on OrderedDict state_dicts in 1.13,
// pytorch#95362). A state_dict pickles as
//   OrderedDict: GLOBAL collections.OrderedDict, (), REDUCE, SETITEMS...
//   each tensor: torch._utils._rebuild_tensor_v2(storage, storage_offset,
//                size, stride, requires_grad, backward_hooks[, metadata])
//   each storage: BINPERSID ('storage', torch.FloatStorage, key, location, numel)
// and the storage's bytes are the record data/<key>.
#include "wg/io/chkpt.h"

#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>

#include "io/pickle.h"
#include "wg/util/atomic_file.h"

namespace wg {

namespace {
using pickle::Value;
using pickle::ValuePtr;
using Kind = Value::Kind;

struct StorageType {
  const char* name;         // torch.<name>
  const char* torch_dtype;  // for messages
  int64_t element_size;
  bool supported;
  DType dtype;
};

constexpr StorageType kStorageTypes[] = {
    {"FloatStorage", "torch.float32", 4, true, DType::F32},
    {"DoubleStorage", "torch.float64", 8, true, DType::F64},
    {"HalfStorage", "torch.float16", 2, true, DType::F16},
    {"BFloat16Storage", "torch.bfloat16", 2, true, DType::BF16},
    {"LongStorage", "torch.int64", 8, true, DType::I64},
    {"ByteStorage", "torch.uint8", 1, true, DType::U8},
    {"IntStorage", "torch.int32", 4, false, DType::F32},
    {"ShortStorage", "torch.int16", 2, false, DType::F32},
    {"CharStorage", "torch.int8", 1, false, DType::F32},
    {"BoolStorage", "torch.bool", 1, false, DType::F32},
    {"ComplexFloatStorage", "torch.complex64", 8, false, DType::F32},
    {"ComplexDoubleStorage", "torch.complex128", 16, false, DType::F32},
};

const char* storage_name(DType d) {
  for (const auto& t : kStorageTypes)
    if (t.supported && t.dtype == d) return t.name;
  return "FloatStorage";
}

struct Storage {
  std::string key;
  std::string type_name;             // "torch.FloatStorage"
  const StorageType* type = nullptr;  // null: unknown to this reader
  int64_t numel = 0;
};

struct Tensor {
  size_t storage = 0;
  int64_t offset = 0;
  std::vector<int64_t> size, stride;
};

std::string c10_message(const c10::Error& e) {
  std::string m = e.what_without_backtrace();
  const size_t nl = m.find('\n');
  return nl == std::string::npos ? m : m.substr(0, nl);
}

int64_t int_arg(const Value& v, const char* what) {
  if (v.kind != Kind::Int)
    throw std::runtime_error(std::string(what) + " is a " + pickle::kind_name(v.kind) + ", not an int");
  return v.i;
}

std::vector<int64_t> int_tuple(const Value& v, const char* what) {
  if (v.kind != Kind::Tuple)
    throw std::runtime_error(std::string(what) + " is a " + pickle::kind_name(v.kind) + ", not a tuple");
  std::vector<int64_t> out;
  for (const auto& item : v.items) out.push_back(int_arg(*item, what));
  return out;
}

// Unpickles data.pkl and assembles the records, reading each storage once.
class Loader {
 public:
  Loader(const std::string& path, caffe2::serialize::PyTorchStreamReader& zip) : path_(path), zip_(zip) {}

  SafetensorsFile load() {
    if (zip_.hasRecord("byteorder")) {
      const std::string order = record("byteorder");
      if (order != "little")
        fail("the tensors are stored " + order + "-endian; only little-endian checkpoints are supported");
    }
    if (!zip_.hasRecord("data.pkl"))
      fail("no data.pkl in the archive: not a torch.save file (a TorchScript archive?)");
    const std::string pkl = record("data.pkl");
    pickle::Hooks hooks;
    hooks.persistent_load = [this](const Value& pid) { return persistent_load(pid); };
    hooks.reduce = [this](const std::string& f, const Value& args) { return reduce(f, args); };
    ValuePtr top;
    try {
      top = pickle::unpickle(pkl, hooks);
    } catch (const pickle::PickleError& e) {
      fail(std::string("data.pkl: ") + e.what());
    }
    if (top->kind != Kind::Dict)
      fail(std::string("data.pkl holds a ") + pickle::kind_name(top->kind) + ", not a state_dict (a dict of tensors)");

    SafetensorsFile out;
    for (size_t k = 0; k < top->items.size(); k += 2) {
      const Value& key = *top->items[k];
      const Value& value = *top->items[k + 1];
      if (key.kind != Kind::String)
        fail(std::string("a state_dict key is a ") + pickle::kind_name(key.kind) + ", not a name");
      if (!value.is_object("tensor"))
        fail("entry '" + key.s + "' is a " + (value.kind == Kind::Object ? value.s : pickle::kind_name(value.kind)) +
             ", not a tensor (only a flat state_dict of tensors is read)");
      out.tensors.push_back(to_record(key.s, tensors_.at(size_t(value.i))));
    }
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const { throw ChkptError(path_ + ": " + msg); }

  std::string record(const std::string& name) {
    try {
      auto [ptr, size] = zip_.getRecord(name);
      return std::string(static_cast<const char*>(ptr.get()), size);
    } catch (const c10::Error& e) {
      fail("cannot read " + name + " from the archive: " + c10_message(e));
    }
  }

  ValuePtr persistent_load(const Value& pid) {
    if (pid.kind != Kind::Tuple || pid.items.size() != 5 || pid.items[0]->kind != Kind::String ||
        pid.items[0]->s != "storage")
      throw std::runtime_error("a persistent id other than ('storage', type, key, location, numel)");
    const Value& type = *pid.items[1];
    const Value& key = *pid.items[2];
    if (type.kind != Kind::Global) throw std::runtime_error("a storage type that is not a global");
    if (key.kind != Kind::String) throw std::runtime_error("a storage key that is not a string");
    Storage s;
    s.key = key.s;
    s.type_name = type.s;
    s.numel = int_arg(*pid.items[4], "a storage's numel");
    if (s.numel < 0) throw std::runtime_error("storage '" + s.key + "' has a negative numel");
    for (const auto& t : kStorageTypes)
      if (type.s == std::string("torch.") + t.name) s.type = &t;
    auto it = storage_index_.find(s.key);
    if (it != storage_index_.end()) {
      if (storages_[it->second].type_name != s.type_name)
        throw std::runtime_error("storage '" + s.key + "' is read as two types");
      return Value::object("storage", int64_t(it->second));
    }
    storage_index_[s.key] = storages_.size();
    storages_.push_back(s);
    return Value::object("storage", int64_t(storages_.size() - 1));
  }

  ValuePtr reduce(const std::string& f, const Value& args) {
    const auto& a = args.items;
    if (f == "collections.OrderedDict") {
      if (!a.empty()) throw std::runtime_error("OrderedDict built from arguments is not supported");
      return Value::make(Kind::Dict);
    }
    if (f == "torch._utils._rebuild_parameter" || f == "torch._utils._rebuild_parameter_with_state") {
      if (a.empty() || !a[0]->is_object("tensor")) throw std::runtime_error(f + " without a tensor");
      return a[0];
    }
    if (f == "torch._utils._rebuild_tensor_v2" || f == "torch._utils._rebuild_tensor") {
      if (a.size() < 4) throw std::runtime_error(f + " with " + std::to_string(a.size()) + " arguments");
      if (!a[0]->is_object("storage")) throw std::runtime_error(f + " of something other than a storage");
      Tensor t;
      t.storage = size_t(a[0]->i);
      t.offset = int_arg(*a[1], "a tensor's storage offset");
      t.size = int_tuple(*a[2], "a tensor's size");
      t.stride = int_tuple(*a[3], "a tensor's stride");
      tensors_.push_back(std::move(t));
      return Value::object("tensor", int64_t(tensors_.size() - 1));
    }
    throw std::runtime_error("calling " + f + " is not supported (only OrderedDict and torch._utils._rebuild_*)");
  }

  TensorRecord to_record(const std::string& name, const Tensor& t) {
    const Storage& s = storages_[t.storage];
    if (!s.type || !s.type->supported)
      fail("tensor '" + name + "' has dtype " + (s.type ? s.type->torch_dtype : s.type_name) +
           ", which is not supported (supported: float32, float64, float16, bfloat16, int64, uint8)");
    const int64_t es = s.type->element_size;
    TensorRecord r;
    r.name = name;
    r.dtype = s.type->dtype;
    r.shape = t.size;
    if (t.stride.size() != t.size.size() || t.offset < 0)
      fail("tensor '" + name + "' has " + std::to_string(t.size.size()) + " sizes but " +
           std::to_string(t.stride.size()) + " strides, or a negative offset");
    int64_t numel = 1, last = t.offset;  // last: the storage element of the tensor's last element
    for (size_t d = 0; d < t.size.size(); ++d) {
      if (t.size[d] < 0 || t.stride[d] < 0) fail("tensor '" + name + "' has a negative size or stride");
      if (__builtin_mul_overflow(numel, t.size[d], &numel)) fail("tensor '" + name + "' is too large");
    }
    if (numel == 0) return r;
    for (size_t d = 0; d < t.size.size(); ++d) {
      int64_t reach = 0;
      if (__builtin_mul_overflow(t.size[d] - 1, t.stride[d], &reach) || __builtin_add_overflow(last, reach, &last))
        fail("tensor '" + name + "' reaches beyond any storage");
    }
    if (last >= s.numel)
      fail("tensor '" + name + "' reaches element " + std::to_string(last) + " of storage '" + s.key + "', which has " +
           std::to_string(s.numel));
    int64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, es, &nbytes)) fail("tensor '" + name + "' is too large");
    const std::string& data = storage_bytes(t.storage);
    const char* src = data.data();
    r.data.resize(size_t(nbytes));

    // Contiguous (strides of size-1 dimensions do not matter): one copy.
    bool contiguous = true;
    for (int64_t d = int64_t(t.size.size()) - 1, expect = 1; d >= 0; --d) {
      if (t.size[d] != 1 && t.stride[d] != expect) contiguous = false;
      expect *= t.size[d];
    }
    if (contiguous) {
      std::memcpy(r.data.data(), src + t.offset * es, size_t(nbytes));
      return r;
    }
    std::vector<int64_t> index(t.size.size(), 0);
    int64_t at = t.offset;
    for (int64_t n = 0; n < numel; ++n) {
      std::memcpy(r.data.data() + n * es, src + at * es, size_t(es));
      for (int64_t d = int64_t(index.size()) - 1; d >= 0; --d) {  // odometer, last dimension fastest
        at += t.stride[d];
        if (++index[d] < t.size[d]) break;
        at -= t.stride[d] * t.size[d];
        index[d] = 0;
      }
    }
    return r;
  }

  const std::string& storage_bytes(size_t k) {
    const Storage& s = storages_[k];
    auto it = bytes_.find(s.key);
    if (it != bytes_.end()) return it->second;
    const std::string name = "data/" + s.key;
    if (!zip_.hasRecord(name)) fail("storage '" + s.key + "' has no record " + name + " in the archive");
    std::string data = record(name);
    if (s.numel > int64_t(data.size()) / s.type->element_size)
      fail("record " + name + " has " + std::to_string(data.size()) + " bytes, too few for its " + s.type_name +
           " of " + std::to_string(s.numel) + " elements");
    return bytes_[s.key] = std::move(data);
  }

  const std::string& path_;
  caffe2::serialize::PyTorchStreamReader& zip_;
  std::vector<Storage> storages_;
  std::map<std::string, size_t> storage_index_;
  std::vector<Tensor> tensors_;
  std::map<std::string, std::string> bytes_;
};

// The state_dict as torch.save pickles it (protocol 2; one storage per tensor, keys "0", "1", ...).
std::string state_dict_pickle(const SafetensorsFile& file) {
  pickle::Writer w;
  auto ordered_dict = [&w] {
    w.global("collections", "OrderedDict");
    w.empty_tuple();
    w.reduce();
  };
  auto int_tuple = [&w](const std::vector<int64_t>& v) {
    if (v.empty()) return w.empty_tuple();
    w.mark();
    for (int64_t x : v) w.integer(x);
    w.tuple();
  };
  ordered_dict();
  const size_t batch = 1000;  // as Python's pickler batches SETITEMS
  for (size_t first = 0; first < file.tensors.size(); first += batch) {
    w.mark();
    for (size_t k = first; k < std::min(first + batch, file.tensors.size()); ++k) {
      const TensorRecord& r = file.tensors[k];
      std::vector<int64_t> stride(r.shape.size(), 1);
      for (int64_t d = int64_t(r.shape.size()) - 2; d >= 0; --d)  // as torch: sizes of 0 count as 1
        stride[d] = stride[d + 1] * std::max<int64_t>(r.shape[d + 1], 1);
      w.string(r.name);
      w.global("torch._utils", "_rebuild_tensor_v2");
      w.mark();
      w.mark();  // the storage's persistent id
      w.string("storage");
      w.global("torch", storage_name(r.dtype));
      w.string(std::to_string(k));
      w.string("cpu");
      w.integer(r.numel());
      w.tuple();
      w.persid();
      w.integer(0);  // storage offset
      int_tuple(r.shape);
      int_tuple(stride);
      w.boolean(false);  // requires_grad
      ordered_dict();    // backward hooks
      w.tuple();
      w.reduce();
    }
    w.setitems();
  }
  return w.finish();
}
}  // namespace

bool is_chkpt_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "PK\x03\x04", 4) == 0;
}

SafetensorsFile read_chkpt(const std::string& path) {
  if (!std::ifstream(path, std::ios::binary)) throw ChkptError(path + ": cannot open (" + std::strerror(errno) + ")");
  if (!is_chkpt_file(path))
    throw ChkptError(path + ": not a torch.save zip archive (no zip signature; the legacy format of "
                            "_use_new_zipfile_serialization=False is not supported)");
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> zip;
  try {
    zip = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
  } catch (const c10::Error& e) {
    throw ChkptError(path + ": not a readable torch.save zip archive (truncated or damaged?): " + c10_message(e));
  }
  return Loader(path, *zip).load();
}

void write_chkpt(const std::string& path, const SafetensorsFile& file) {
  std::map<std::string, int> names;
  for (const auto& r : file.tensors) {
    if (names[r.name]++) throw ChkptError(path + ": cannot write: tensor name '" + r.name + "' twice");
    for (int64_t s : r.shape)
      if (s < 0) throw ChkptError(path + ": cannot write tensor '" + r.name + "': a negative size");
    if (r.data.size() != size_t(r.numel()) * dtype_size(r.dtype))
      throw ChkptError(path + ": cannot write tensor '" + r.name + "': data size does not match its shape");
  }
  const std::string pkl = state_dict_pickle(file);
  try {
    write_file_atomically(path, [&](std::ostream& out) {
      caffe2::serialize::PyTorchStreamWriter zip([&out](const void* buf, size_t n) -> size_t {
        out.write(static_cast<const char*>(buf), std::streamsize(n));
        return out ? n : 0;
      });
      static const uint8_t nothing = 0;
      zip.writeRecord("data.pkl", pkl.data(), pkl.size());
      zip.writeRecord("byteorder", "little", 6);
      for (size_t k = 0; k < file.tensors.size(); ++k) {
        const auto& d = file.tensors[k].data;
        zip.writeRecord("data/" + std::to_string(k), d.empty() ? &nothing : d.data(), d.size());
      }
      zip.writeEndOfFile();
    });
  } catch (const c10::Error& e) {
    throw ChkptError(path + ": cannot write: " + c10_message(e));
  } catch (const ChkptError&) {
    throw;
  } catch (const std::runtime_error& e) {
    throw ChkptError(e.what());
  }
}

}  // namespace wg
