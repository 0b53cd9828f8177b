// schema.h: how typed config structs describe their fields, so one description drives parsing,
// validation, the resolved-config dump and the reference documentation.
//
// A config struct lists its fields in a visit() member:
//
//   struct TrainConfig {
//     int64_t global_batch = 64;  // samples per optimizer step
//     template <class V> void visit(V& v) {
//       v("global_batch", global_batch, "Samples per optimizer step, over all ranks.", cfg::at_least(1));
//     }
//   };
//
// Visitors (reader, writer, lister) overload operator() for each supported field type:
// int64_t, int, double, bool, std::string, std::vector<int64_t>, std::vector<std::string>, and an
// enum with a name table (enum_names.h), read and written as its names.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "runtime/core/config/enum_names.h"

namespace gtrain::cfg {

// Constraints a field value must satisfy; checked by the reader, described in error messages.
struct Spec {
  std::optional<double> min;
  std::optional<double> max;
  bool min_exclusive = false;
  std::vector<std::string> choices;  // for strings: allowed values (empty = any)
};

inline Spec at_least(double v) {
  Spec s;
  s.min = v;
  return s;
}
inline Spec greater_than(double v) {
  Spec s;
  s.min = v;
  s.min_exclusive = true;
  return s;
}
inline Spec range(double lo, double hi) {
  Spec s;
  s.min = lo;
  s.max = hi;
  return s;
}
inline Spec one_of(std::vector<std::string> c) {
  Spec s;
  s.choices = std::move(c);
  return s;
}

// One field as text: the key, its value rendered as TOML, and its documentation.
struct FieldText {
  std::string key;
  std::string value;  // TOML literal, e.g. 64, 0.001, "adamw", [256, 128]
  std::string doc;
};

// Renders values as TOML literals.
std::string toml_literal(int64_t v);
std::string toml_literal(double v);
std::string toml_literal(bool v);
std::string toml_literal(const std::string& v);
std::string toml_literal(const std::vector<int64_t>& v);
std::string toml_literal(const std::vector<std::string>& v);

// Arrays of tables (e.g. [[schedule.window]]) render as inline tables: [{days = "mon-fri", ...}].
template <class T, class = std::enable_if_t<std::is_class_v<T>>>
std::string toml_literal(const std::vector<T>& v);

// Visitor that renders every field of a struct as text (resolved config, reference, comparisons).
class FieldLister {
 public:
  std::vector<FieldText> fields;
  template <class T>
  void operator()(const char* key, T& value, const char* doc, const Spec& = {}) {
    if constexpr (std::is_same_v<T, int>) {
      fields.push_back({key, toml_literal(static_cast<int64_t>(value)), doc});
    } else if constexpr (std::is_enum_v<T>) {
      fields.push_back({key, toml_literal(std::string(name_of(value))), doc});
    } else {
      fields.push_back({key, toml_literal(value), doc});
    }
  }
};

template <class T, class>
std::string toml_literal(const std::vector<T>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    FieldLister l;
    const_cast<T&>(v[i]).visit(l);
    out += i ? ", {" : "{";
    for (size_t k = 0; k < l.fields.size(); ++k) out += (k ? ", " : "") + l.fields[k].key + " = " + l.fields[k].value;
    out += "}";
  }
  return out + "]";
}

template <class Config>
std::vector<FieldText> list_fields(const Config& c) {
  FieldLister lister;
  const_cast<Config&>(c).visit(lister);  // visit() only reads through FieldLister
  return lister.fields;
}

// Edit distance, for "did you mean" suggestions.
size_t edit_distance(const std::string& a, const std::string& b);
// The closest candidate within a small distance, or "" when none is close.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace gtrain::cfg
