// A small Python pickle machine, private to io/: just what torch.save writes
// for a state_dict (protocols 2 to 5, no arbitrary objects). Reading is a
// stack machine whose two object-making opcodes, BINPERSID and REDUCE, are
// handed to the caller (io/chkpt.cpp makes storages and tensors there);
// writing emits protocol 2 opcodes one at a time. No LibTorch here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace wg::pickle {

struct Value;
using ValuePtr = std::shared_ptr<Value>;

struct Value {
  enum class Kind { None, Bool, Int, Float, String, Tuple, List, Dict, Global, Object };
  Kind kind = Kind::None;
  int64_t i = 0;                // Bool, Int; Object: the caller's handle
  double f = 0;                 // Float
  std::string s;                // String (also BINSTRING bytes); Global "module.name"; Object: the caller's tag
  std::vector<ValuePtr> items;  // Tuple, List; Dict: key, value, key, value... in insertion order

  static ValuePtr make(Kind k);
  static ValuePtr object(const std::string& tag, int64_t handle);
  bool is_object(const std::string& tag) const { return kind == Kind::Object && s == tag; }
};

// "int", "tuple", "dict", ... for error messages.
const char* kind_name(Value::Kind k);

class PickleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Hooks {
  // BINPERSID: the persistent id popped from the stack -> the object it names.
  std::function<ValuePtr(const Value& pid)> persistent_load;
  // REDUCE: callable (a GLOBAL's "module.name") applied to the args tuple.
  std::function<ValuePtr(const std::string& callable, const Value& args)> reduce;
};

// Runs the machine to STOP. Unknown opcodes, truncation, a broken stack:
// PickleError naming the opcode and its byte offset. A std::exception from a
// hook is rethrown as PickleError with the offset appended. BUILD on a dict
// (a state_dict's _metadata) is ignored; on anything else, an error.
ValuePtr unpickle(std::string_view bytes, const Hooks& hooks);

// Protocol 2, as Python's pickler writes it (no memo).
class Writer {
 public:
  Writer();                                                  // PROTO 2
  void global(const std::string& module, const std::string& name);
  void string(const std::string& s);                         // BINUNICODE
  void integer(int64_t v);                                   // BININT1/BININT2/BININT/LONG1
  void boolean(bool v);
  void mark();
  void tuple();  // TUPLE: the items since the last mark()
  void empty_tuple();
  void empty_dict();
  void reduce();
  void setitems();  // the pairs since the last mark()
  void persid();    // BINPERSID
  std::string finish();  // STOP; the bytes

 private:
  void op(uint8_t code) { out_.push_back(char(code)); }
  void le(uint64_t v, int bytes);
  std::string out_;
};

}  // namespace wg::pickle
