// The pickle machine (see io/pickle.h). Opcode values from CPython's
// Lib/pickle.py; BINFLOAT is big-endian, every other number little-endian.
#include "io/pickle.h"

#include <cstring>
#include <unordered_map>

namespace wg::pickle {

namespace {
enum Op : uint8_t {
  MARK = '(', STOP = '.', BINFLOAT = 'G', BININT = 'J', BININT1 = 'K', BININT2 = 'M', NONE = 'N',
  BINPERSID = 'Q', REDUCE = 'R', BINSTRING = 'T', SHORT_BINSTRING = 'U', BINUNICODE = 'X', APPEND = 'a',
  BUILD = 'b', GLOBAL = 'c', APPENDS = 'e', BINGET = 'h', LONG_BINGET = 'j', BINPUT = 'q', LONG_BINPUT = 'r',
  SETITEM = 's', TUPLE = 't', SETITEMS = 'u', EMPTY_DICT = '}', EMPTY_LIST = ']', EMPTY_TUPLE = ')',
  PROTO = 0x80, TUPLE1 = 0x85, TUPLE2 = 0x86, TUPLE3 = 0x87, NEWTRUE = 0x88, NEWFALSE = 0x89, LONG1 = 0x8a,
  SHORT_BINUNICODE = 0x8c, BINUNICODE8 = 0x8d, STACK_GLOBAL = 0x93, MEMOIZE = 0x94, FRAME = 0x95,
};

std::string hex(uint8_t b) {
  const char* digits = "0123456789abcdef";
  return std::string("0x") + digits[b >> 4] + digits[b & 15];
}

bool same_key(const Value& a, const Value& b) {
  if (a.kind != b.kind) return false;
  if (a.kind == Value::Kind::String) return a.s == b.s;
  if (a.kind == Value::Kind::Int || a.kind == Value::Kind::Bool) return a.i == b.i;
  return false;
}

void set_item(Value& dict, ValuePtr key, ValuePtr value) {
  if (dict.kind != Value::Kind::Dict)
    throw std::runtime_error(std::string("SETITEM(S) on a ") + kind_name(dict.kind) + ", not a dict");
  for (size_t k = 0; k < dict.items.size(); k += 2)
    if (same_key(*dict.items[k], *key)) {
      dict.items[k + 1] = std::move(value);
      return;
    }
  dict.items.push_back(std::move(key));
  dict.items.push_back(std::move(value));
}

class Machine {
 public:
  Machine(std::string_view bytes, const Hooks& hooks) : in_(bytes), hooks_(hooks) {}

  ValuePtr run() {
    while (pos_ < in_.size()) {
      op_pos_ = pos_;
      const uint8_t code = uint8_t(in_[pos_++]);
      try {
        if (code == STOP) return pop();
        step(code);
      } catch (const std::exception& e) {
        throw PickleError(std::string(e.what()) + " at byte " + std::to_string(op_pos_));
      }
    }
    throw PickleError("truncated pickle: no STOP before its end at byte " + std::to_string(in_.size()));
  }

 private:
  void step(uint8_t code) {
    using K = Value::Kind;
    switch (code) {
      case PROTO: take(1); break;
      case FRAME: take(8); break;  // frames only group opcodes; the bytes follow inline
      case EMPTY_DICT: push(Value::make(K::Dict)); break;
      case EMPTY_LIST: push(Value::make(K::List)); break;
      case EMPTY_TUPLE: push(Value::make(K::Tuple)); break;
      case MARK: marks_.push_back(stack_.size()); break;
      case TUPLE: push(sequence(K::Tuple, pop_mark())); break;
      case TUPLE1: case TUPLE2: case TUPLE3: push(sequence(K::Tuple, pop_n(code - TUPLE1 + 1))); break;
      case BINUNICODE: case BINSTRING: push(string(take(uint32(4)))); break;
      case SHORT_BINUNICODE: case SHORT_BINSTRING: push(string(take(uint32(1)))); break;
      case BINUNICODE8: push(string(take(number(8)))); break;
      case BININT: push(integer(int32_t(uint32(4)))); break;
      case BININT1: push(integer(uint32(1))); break;
      case BININT2: push(integer(uint32(2))); break;
      case LONG1: push(integer(long1(uint32(1)))); break;
      case BINFLOAT: push(binfloat()); break;
      case NEWTRUE: case NEWFALSE: {
        auto v = Value::make(K::Bool);
        v->i = code == NEWTRUE;
        push(v);
        break;
      }
      case NONE: push(Value::make(K::None)); break;
      case GLOBAL: {
        const std::string module = line(), name = line();
        push(global(module, name));
        break;
      }
      case STACK_GLOBAL: {
        const ValuePtr name = pop(), module = pop();
        if (name->kind != K::String || module->kind != K::String)
          throw std::runtime_error("STACK_GLOBAL of non-strings");
        push(global(module->s, name->s));
        break;
      }
      case REDUCE: {
        const ValuePtr args = pop(), callable = pop();
        if (callable->kind != K::Global) throw std::runtime_error("REDUCE of a non-global callable");
        if (args->kind != K::Tuple) throw std::runtime_error("REDUCE of " + callable->s + " without an args tuple");
        if (!hooks_.reduce) throw std::runtime_error("REDUCE of " + callable->s + " is not supported");
        push(hooks_.reduce(callable->s, *args));
        break;
      }
      case BUILD: {
        pop();  // the state
        const Value& target = *top();
        if (target.kind != K::Dict)
          throw std::runtime_error(std::string("BUILD on a ") + kind_name(target.kind) + " is not supported");
        break;  // an OrderedDict's attributes, such as a state_dict's _metadata: not needed
      }
      case BINPERSID: {
        const ValuePtr pid = pop();
        if (!hooks_.persistent_load) throw std::runtime_error("BINPERSID is not supported");
        push(hooks_.persistent_load(*pid));
        break;
      }
      case BINPUT: memo_[uint32(1)] = top(); break;
      case LONG_BINPUT: memo_[uint32(4)] = top(); break;
      case MEMOIZE: memo_[memo_.size()] = top(); break;
      case BINGET: push(memo(uint32(1))); break;
      case LONG_BINGET: push(memo(uint32(4))); break;
      case SETITEM: {
        ValuePtr value = pop(), key = pop();
        set_item(*top(), std::move(key), std::move(value));
        break;
      }
      case SETITEMS: {
        std::vector<ValuePtr> kv = pop_mark();
        if (kv.size() % 2) throw std::runtime_error("SETITEMS with an odd number of items");
        for (size_t k = 0; k < kv.size(); k += 2) set_item(*top(), kv[k], kv[k + 1]);
        break;
      }
      case APPEND: case APPENDS: {
        std::vector<ValuePtr> items = code == APPEND ? pop_n(1) : pop_mark();
        Value& list = *top();
        if (list.kind != K::List) throw std::runtime_error(std::string("APPEND(S) on a ") + kind_name(list.kind));
        list.items.insert(list.items.end(), items.begin(), items.end());
        break;
      }
      default: throw std::runtime_error("unsupported pickle opcode " + hex(code));
    }
  }

  // -- input
  std::string_view take(uint64_t n) {
    if (n > in_.size() - pos_)
      throw std::runtime_error("truncated pickle: opcode " + hex(uint8_t(in_[op_pos_])) + " needs " +
                               std::to_string(n) + " more bytes, " + std::to_string(in_.size() - pos_) + " left");
    const std::string_view s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  uint64_t number(int bytes) {  // unsigned little-endian
    const std::string_view b = take(bytes);
    uint64_t v = 0;
    for (int k = bytes - 1; k >= 0; --k) v = (v << 8) | uint8_t(b[k]);
    return v;
  }
  uint32_t uint32(int bytes) { return uint32_t(number(bytes)); }
  int64_t long1(uint32_t n) {
    if (n > 8) throw std::runtime_error("LONG1 of " + std::to_string(n) + " bytes does not fit in 64 bits");
    if (n == 0) return 0;
    uint64_t v = number(int(n));
    if (n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t(0) << (8 * n);  // sign-extend
    return int64_t(v);
  }
  ValuePtr binfloat() {
    const std::string_view b = take(8);
    uint64_t bits = 0;
    for (int k = 0; k < 8; ++k) bits = (bits << 8) | uint8_t(b[k]);
    auto v = Value::make(Value::Kind::Float);
    std::memcpy(&v->f, &bits, 8);
    return v;
  }
  std::string line() {
    const size_t end = in_.find('\n', pos_);
    if (end == std::string_view::npos) throw std::runtime_error("truncated pickle: GLOBAL without a newline");
    std::string s(in_.substr(pos_, end - pos_));
    for (char c : s)
      if (c < 0x20 || c > 0x7e) throw std::runtime_error("GLOBAL with a non-printable byte in its name");
    pos_ = end + 1;
    return s;
  }

  // -- values
  static ValuePtr string(std::string_view s) {
    auto v = Value::make(Value::Kind::String);
    v->s = std::string(s);
    return v;
  }
  static ValuePtr integer(int64_t i) {
    auto v = Value::make(Value::Kind::Int);
    v->i = i;
    return v;
  }
  static ValuePtr global(const std::string& module, const std::string& name) {
    auto v = Value::make(Value::Kind::Global);
    v->s = module + "." + name;
    return v;
  }
  static ValuePtr sequence(Value::Kind k, std::vector<ValuePtr> items) {
    auto v = Value::make(k);
    v->items = std::move(items);
    return v;
  }
  ValuePtr memo(uint32_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) throw std::runtime_error("memo key " + std::to_string(key) + " was never stored");
    return it->second;
  }

  // -- the stack; items below the innermost MARK belong to the enclosing frame
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(ValuePtr v) { stack_.push_back(std::move(v)); }
  const ValuePtr& top() const {
    if (stack_.size() <= floor()) throw std::runtime_error("stack underflow");
    return stack_.back();
  }
  ValuePtr pop() { return pop_n(1)[0]; }
  std::vector<ValuePtr> pop_n(size_t n) {
    if (stack_.size() - floor() < n) throw std::runtime_error("stack underflow");
    std::vector<ValuePtr> out(stack_.end() - long(n), stack_.end());
    stack_.resize(stack_.size() - n);
    return out;
  }
  std::vector<ValuePtr> pop_mark() {
    if (marks_.empty()) throw std::runtime_error("no MARK on the stack");
    std::vector<ValuePtr> out(stack_.begin() + long(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return out;
  }

  std::string_view in_;
  const Hooks& hooks_;
  size_t pos_ = 0, op_pos_ = 0;
  std::vector<ValuePtr> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, ValuePtr> memo_;
};
}  // namespace

ValuePtr Value::make(Kind k) {
  auto v = std::make_shared<Value>();
  v->kind = k;
  return v;
}

ValuePtr Value::object(const std::string& tag, int64_t handle) {
  auto v = make(Kind::Object);
  v->s = tag;
  v->i = handle;
  return v;
}

const char* kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return "str";
    case Value::Kind::Tuple: return "tuple";
    case Value::Kind::List: return "list";
    case Value::Kind::Dict: return "dict";
    case Value::Kind::Global: return "global";
    case Value::Kind::Object: return "object";
  }
  return "?";
}

ValuePtr unpickle(std::string_view bytes, const Hooks& hooks) { return Machine(bytes, hooks).run(); }

// -- Writer
Writer::Writer() {
  op(PROTO);
  op(2);
}

void Writer::le(uint64_t v, int bytes) {
  for (int k = 0; k < bytes; ++k) out_.push_back(char((v >> (8 * k)) & 0xff));
}

void Writer::global(const std::string& module, const std::string& name) {
  op(GLOBAL);
  out_ += module + "\n" + name + "\n";
}

void Writer::string(const std::string& s) {
  op(BINUNICODE);
  le(s.size(), 4);
  out_ += s;
}

void Writer::integer(int64_t v) {
  if (v >= 0 && v < 256) {
    op(BININT1);
    le(uint64_t(v), 1);
  } else if (v >= 0 && v < 65536) {
    op(BININT2);
    le(uint64_t(v), 2);
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    op(BININT);
    le(uint64_t(uint32_t(int32_t(v))), 4);
  } else {  // two's complement, without redundant sign bytes
    int n = 8;
    while (n > 1 && (int64_t(uint64_t(v) << (8 * (9 - n))) >> (8 * (9 - n))) == v) --n;
    op(LONG1);
    le(uint64_t(n), 1);
    le(uint64_t(v), n);
  }
}

void Writer::boolean(bool v) { op(v ? NEWTRUE : NEWFALSE); }
void Writer::mark() { op(MARK); }
void Writer::tuple() { op(TUPLE); }
void Writer::empty_tuple() { op(EMPTY_TUPLE); }
void Writer::empty_dict() { op(EMPTY_DICT); }
void Writer::reduce() { op(REDUCE); }
void Writer::setitems() { op(SETITEMS); }
void Writer::persid() { op(BINPERSID); }

std::string Writer::finish() {
  op(STOP);
  return std::move(out_);
}

}  // namespace wg::pickle
