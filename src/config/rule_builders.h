// The rule builders of the configuration's per-key rules (decode_rules.h):
// one builder per value type, each giving the rule's parser, whether the
// key is required, and the comparator `same` that default_disagreements()
// uses. Shared by the run's rules (decode_rules.cpp) and a stream entry's
// (stream_rules.cpp). Internal to src/config.
#pragma once

#include <functional>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "config/decode.h"
#include "config/decode_rules.h"

namespace wg::cfg::rules {

inline std::string num_text(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

struct Range {
  std::optional<double> lo, hi;
  bool lo_open = false, hi_open = false;
  bool ok(double v) const {
    return (!lo || (lo_open ? v > *lo : v >= *lo)) && (!hi || (hi_open ? v < *hi : v <= *hi));
  }
  std::string text() const {
    if (lo && hi)
      return std::string(" in ") + (lo_open ? "(" : "[") + num_text(*lo) + ", " + num_text(*hi) +
             (hi_open ? ")" : "]");
    if (lo) return std::string(lo_open ? " > " : " >= ") + num_text(*lo);
    return "";
  }
};
inline Range at_least(double lo) { return {lo, std::nullopt}; }
inline const Range kRate{0.0, 1.0, false, true};  // dropout: [0, 1)
inline const Range kOpenUnit{0.0, 1.0, true, true};

// ---- rule builders ---------------------------------------------------------

// Compares the field `get` selects.
template <class S, class Get>
std::function<bool(const S&, const S&)> same_as(Get get) {
  return [get](const S& a, const S& b) { return get(a) == get(b); };
}

template <class S, class Get>
Rule<S> integer(std::string key, Get get, Range r, bool required = true) {
  return {std::move(key),
          [get, r](const YAML::Node& n, S& s) -> Error {
            auto& ref = get(s);
            using T = std::decay_t<decltype(ref)>;
            const auto v = as_int(n);
            bool fits = v && r.ok(static_cast<double>(*v));
            if constexpr (std::is_unsigned_v<T>) {
              fits = fits && *v >= 0;
            } else {
              fits = fits && *v >= std::numeric_limits<T>::min() && *v <= std::numeric_limits<T>::max();
            }
            if (!fits) return "must be an integer" + r.text() + ", " + got(n);
            ref = static_cast<T>(*v);
            return std::nullopt;
          },
          required, same_as<S>(get)};
}

template <class S, class Get>
Rule<S> number(std::string key, Get get, Range r, bool required = true) {
  return {std::move(key),
          [get, r](const YAML::Node& n, S& s) -> Error {
            const auto v = as_number(n);
            if (!v || !r.ok(*v)) return "must be a number" + r.text() + ", " + got(n);
            get(s) = *v;
            return std::nullopt;
          },
          required, same_as<S>(get)};
}

template <class S, class Get>
Rule<S> boolean(std::string key, Get get, bool required = true) {
  return {std::move(key),
          [get](const YAML::Node& n, S& s) -> Error {
            const auto v = as_bool(n);
            if (!v) return "must be true or false, " + got(n);
            get(s) = *v;
            return std::nullopt;
          },
          required, same_as<S>(get)};
}

template <class S, class Get>
Rule<S> text(std::string key, Get get, bool may_be_empty = false) {
  return {std::move(key), [get, may_be_empty](const YAML::Node& n, S& s) -> Error {
            if (n.IsNull() && may_be_empty) return get(s) = "", std::nullopt;
            if (!n.IsScalar() || (n.Scalar().empty() && !may_be_empty))
              return std::string(may_be_empty ? "must be a string, " : "must be a non-empty string, ") + got(n);
            get(s) = n.Scalar();
            return std::nullopt;
          },
          true, same_as<S>(get)};
}

template <class S, class Get>
Rule<S> choice(std::string key, Get get, std::vector<std::string> options, bool required = true) {
  return {std::move(key), [get, options](const YAML::Node& n, S& s) -> Error {
            if (!n.IsScalar() || !contains(options, n.Scalar()))
              return "must be one of " + join(options, "|") + ", " + got(n);
            get(s) = n.Scalar();
            return std::nullopt;
          },
          required, same_as<S>(get)};
}

template <class S, class Get>
Rule<S> optional_text(std::string key, Get get) {
  return {std::move(key), [get](const YAML::Node& n, S& s) -> Error {
            if (n.IsNull()) return get(s) = "", std::nullopt;
            if (!n.IsScalar()) return "must be a string, " + got(n);
            get(s) = n.Scalar();
            return std::nullopt;
          },
          false, same_as<S>(get)};
}

// The strings of a sequence node (none for null); `expected` names the
// form in the error.
inline Error strings_of(const YAML::Node& n, const std::string& expected, std::vector<std::string>& out) {
  if (!n.IsNull() && !n.IsSequence()) return "must be " + expected + ", " + got(n);
  for (const auto& e : n) {
    if (!e.IsScalar()) return "must be " + expected + ", " + got(n);
    out.push_back(e.Scalar());
  }
  return std::nullopt;
}

// A list that may be absent or null (std::nullopt), which is not the empty list.
template <class S, class Get>
Rule<S> optional_string_list(std::string key, Get get) {
  return {std::move(key),
          [get](const YAML::Node& n, S& s) -> Error {
            if (n.IsNull()) return get(s) = std::nullopt, std::nullopt;
            std::vector<std::string> out;
            if (Error e = strings_of(n, "a list of strings or null", out)) return e;
            get(s) = out;
            return std::nullopt;
          },
          false, same_as<S>(get)};
}

template <class S, class Get>
Rule<S> string_list(std::string key, Get get) {
  return {std::move(key),
          [get](const YAML::Node& n, S& s) -> Error {
            std::vector<std::string> out;
            if (Error e = strings_of(n, "a list of strings", out)) return e;
            get(s) = out;
            return std::nullopt;
          },
          false, same_as<S>(get)};
}

// A WeatherGenerator key this trainer accepts with one value only: the
// others crash upstream (wg-model.md §13) or are not built here.
template <class S, class Get>
Rule<S> only(std::string key, Get get, bool value) {
  return {std::move(key),
          [get, value](const YAML::Node& n, S& s) -> Error {
            const auto v = as_bool(n);
            if (!v) return "must be true or false, " + got(n);
            if (*v != value)
              return std::string("is supported only as ") + (value ? "True" : "False") +
                     " here (the other setting does not run upstream either; docs/upstream-differences.md), " + got(n);
            get(s) = *v;
            return std::nullopt;
          },
          true, same_as<S>(get)};
}

template <class S, class Get>
Rule<S> number_list(std::string key, Get get) {
  return {std::move(key),
          [get](const YAML::Node& n, S& s) -> Error {
            std::vector<double> out;
            if (!n.IsSequence()) return "must be a list of numbers, " + got(n);
            for (const auto& e : n) {
              const auto v = as_number(e);
              if (!v) return "must be a list of numbers, " + got(n);
              out.push_back(*v);
            }
            get(s) = out;
            return std::nullopt;
          },
          true, same_as<S>(get)};
}

}  // namespace wg::cfg::rules
