// enum_names.h: the one name table of each config enum (train.lr_schedule, train.device,
// train.fused_loss, data.kind), and the lookups that the config reader, the resolved-config writer,
// the reference and every message share, so a value's spelling lives in one place.
//
// An enum gets its table from a constexpr function next to it, found by argument-dependent lookup:
//
//   enum class LrSchedule { cosine, linear, constant };
//   constexpr std::array<EnumName<LrSchedule>, 3> enum_names(LrSchedule) {
//     return {{{LrSchedule::cosine, "cosine"}, {LrSchedule::linear, "linear"}, {LrSchedule::constant, "constant"}}};
//   }
//
// A config field of such a type is read from its name (an unknown one is an error listing the names,
// with a "did you mean"), written as its name, and printed by `<<` and gtrain::str() as its name.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace gtrain {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

template <class E, class = void>
struct has_enum_names : std::false_type {};
template <class E>
struct has_enum_names<E, std::void_t<decltype(enum_names(E{}))>> : std::true_type {};
// True for an enum with a name table.
template <class E>
inline constexpr bool has_enum_names_v = std::conjunction_v<std::is_enum<E>, has_enum_names<E>>;

// The name of `value` in its table ("?" for a value outside it, which no reader produces).
template <class E, class = std::enable_if_t<has_enum_names_v<E>>>
constexpr const char* name_of(E value) {
  for (const auto& entry : enum_names(E{}))
    if (entry.value == value) return entry.name;
  return "?";
}

// The value named `name`; nullopt for any other string.
template <class E, class = std::enable_if_t<has_enum_names_v<E>>>
std::optional<E> enum_from_name(std::string_view name) {
  for (const auto& entry : enum_names(E{}))
    if (name == entry.name) return entry.value;
  return std::nullopt;
}

// Every name, in table order (the reader's choices).
template <class E, class = std::enable_if_t<has_enum_names_v<E>>>
std::vector<std::string> enum_name_list() {
  std::vector<std::string> out;
  for (const auto& entry : enum_names(E{})) out.emplace_back(entry.name);
  return out;
}

template <class E, class = std::enable_if_t<has_enum_names_v<E>>>
std::ostream& operator<<(std::ostream& out, E value) {
  return out << name_of(value);
}

}  // namespace gtrain
