#include "runtime/config_caf_options.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <utility>

#include <caf/config_option.hpp>
#include <caf/config_option_set.hpp>
#include <caf/settings.hpp>
#include <caf/uri.hpp>

#include "runtime/config_text.hpp"

namespace egress::config_detail {

namespace {

using caf::config_value;
using dict = config_value::dictionary;
using list = config_value::list;

// custom_options_ is protected and 0.17.6 has no public accessor; a pointer to
// member formed through a derived class may legally read it from any config.
struct option_access : caf::actor_system_config {
  static const caf::config_option_set& of(const caf::actor_system_config& cfg) {
    return cfg.*(&option_access::custom_options_);
  }
};

bool contains(const std::vector<std::string>& xs, const std::string& x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

// -- unknown sections and keys ------------------------------------------------

// CAF's options are "category.name"; top-level keys are category "global".
bool is_category(const caf::config_option_set& opts, const std::string& name) {
  return std::any_of(opts.begin(), opts.end(), [&](auto& o) {
    auto c = std::string{o.category().begin(), o.category().end()};
    return c == name || c.starts_with(name + ".");
  });
}

std::vector<std::string> names_in(const caf::config_option_set& opts,
                                  const std::string& category) {
  std::vector<std::string> out;
  for (auto& o : opts)
    if (std::string{o.category().begin(), o.category().end()} == category)
      out.emplace_back(o.long_name().begin(), o.long_name().end());
  return out;
}

std::vector<std::string> sections(const caf::config_option_set& opts) {
  std::vector<std::string> out{"engine"};
  for (auto& o : opts) {
    std::string c{o.category().begin(), o.category().end()};
    if (c != "global" && !contains(out, c))
      out.push_back(c);
  }
  return out;
}

// Every key outside `engine` must be an option the config declares. CAF
// itself keeps unknown keys silently.
void check_keys(std::vector<key_problem>& out, const caf::config_option_set& opts,
                const dict& d, const std::string& path) {
  for (auto& [key, value] : d) {
    if (path.empty() && key == "engine")
      continue;
    auto full = at(path, key);
    auto category = path.empty() ? std::string{"global"} : path;
    if (caf::holds_alternative<dict>(value) && is_category(opts, full))
      check_keys(out, opts, *caf::get_if<dict>(&value), full);
    else if (caf::holds_alternative<dict>(value) && path.empty())
      out.push_back({full, "unknown section (known sections: "
                             + join(sections(opts)) + ")"});
    else if (caf::holds_alternative<dict>(value)
             || !opts.qualified_name_lookup(category, key))
      out.push_back({full, "unknown key (known keys: "
                             + join(names_in(opts, category)) + ")"});
  }
}

// -- values of the wrong type -------------------------------------------------

// The types an option declares are named by CAF 0.17.6's config_value_access:
// "boolean", "atom", "string", "timespan", "uint64", "list of atom", ...

struct int_range {
  int64_t lo;
  int64_t hi;
  bool unbounded_above; // uint64: every non-negative integer fits
};

// "int8" ... "uint64"; nullopt for any other type.
std::optional<int_range> integer_range(std::string_view type) {
  bool is_unsigned = type.starts_with("uint");
  if (!is_unsigned && !type.starts_with("int"))
    return std::nullopt;
  auto bits_text = type.substr(is_unsigned ? 4 : 3);
  int bits = bits_text == "8" ? 8 : bits_text == "16" ? 16 : bits_text == "32" ? 32
             : bits_text == "64" ? 64 : 0;
  if (bits == 0)
    return std::nullopt;
  if (bits == 64)
    return is_unsigned ? int_range{0, std::numeric_limits<int64_t>::max(), true}
                       : int_range{std::numeric_limits<int64_t>::min(),
                                   std::numeric_limits<int64_t>::max(), false};
  if (is_unsigned)
    return int_range{0, (int64_t{1} << bits) - 1, false};
  return int_range{-(int64_t{1} << (bits - 1)), (int64_t{1} << (bits - 1)) - 1, false};
}

constexpr std::string_view list_of = "list of ";
constexpr std::string_view dict_of = "dictionary of ";

// Whether `x` has the type `type` names; nullopt if the name is not known
// here. Used only to point at the wrong elements of a list: whether a value
// is acceptable at all is the option's own check().
std::optional<bool> matches(std::string_view type, const config_value& x) {
  if (type == "boolean")
    return caf::holds_alternative<bool>(x);
  if (type == "atom")
    return caf::holds_alternative<caf::atom_value>(x);
  if (type == "string")
    return caf::holds_alternative<std::string>(x);
  if (type == "timespan")
    return caf::holds_alternative<caf::timespan>(x);
  if (type == "real64" || type == "real32")
    return caf::holds_alternative<double>(x);
  if (type == "uri")
    return caf::holds_alternative<caf::uri>(x);
  if (auto r = integer_range(type)) {
    auto v = caf::get_if<config_value::integer>(&x);
    return v && *v >= r->lo && *v <= r->hi;
  }
  if (type == "list")
    return caf::holds_alternative<list>(x);
  if (type == "dictionary")
    return caf::holds_alternative<dict>(x);
  auto all = [](auto first, auto last, auto f) -> std::optional<bool> {
    bool result = true;
    for (; first != last; ++first) {
      auto m = f(*first);
      if (!m)
        return std::nullopt;
      result = result && *m;
    }
    return result;
  };
  if (type.starts_with(list_of)) {
    auto xs = caf::get_if<list>(&x);
    if (!xs)
      return false;
    return all(xs->begin(), xs->end(),
               [&](auto& y) { return matches(type.substr(list_of.size()), y); });
  }
  if (type.starts_with(dict_of)) {
    auto xs = caf::get_if<dict>(&x);
    if (!xs)
      return false;
    return all(xs->begin(), xs->end(), [&](auto& kvp) {
      return matches(type.substr(dict_of.size()), kvp.second);
    });
  }
  return std::nullopt;
}

// "atoms" for "atom": the elements of "a list of ...".
std::string plural(std::string_view type) {
  if (type == "boolean")
    return "booleans";
  if (type == "atom" || type == "string")
    return std::string{type} + "s";
  if (type == "timespan")
    return "durations";
  if (type == "real64" || type == "real32")
    return "numbers";
  if (type == "uri")
    return "URIs";
  if (integer_range(type))
    return "integers";
  return "values of type " + std::string{type};
}

// The "expected ..." part: what the option takes, worded for the value found.
std::string expected(std::string_view type, const config_value& x) {
  if (type == "boolean")
    return "true or false";
  if (type == "atom")
    return "an atom";
  if (type == "string")
    return "a string";
  if (type == "timespan")
    return "a duration like 2s or 250ms";
  if (type == "real64" || type == "real32")
    return "a number";
  if (type == "uri")
    return "a URI";
  if (auto r = integer_range(type)) {
    // An integer that failed the check is out of the type's range.
    if (!caf::holds_alternative<config_value::integer>(x))
      return "an integer";
    if (r->unbounded_above)
      return "a non-negative integer";
    return "an integer between " + std::to_string(r->lo) + " and "
           + std::to_string(r->hi);
  }
  if (type == "list")
    return "a list";
  if (type == "dictionary")
    return "a dict";
  if (type.starts_with(list_of))
    return "a list of " + plural(type.substr(list_of.size()));
  if (type.starts_with(dict_of))
    return "a dict of " + plural(type.substr(dict_of.size()));
  return "a value of type " + std::string{type};
}

// Single quotes make an atom in CAF's INI dialect, double quotes a string:
// the likely slip when one is found where the other is expected.
std::string quote_hint(std::string_view type, const config_value& x) {
  if (type == "string" && caf::holds_alternative<caf::atom_value>(x))
    return " (strings take double quotes)";
  if (type == "atom" && caf::holds_alternative<std::string>(x))
    return " (atoms take single quotes)";
  return {};
}

// Reports `x` at `path`, which the option's check() refused. In a list, the
// wrong elements are named one by one, like the [engine] lists; if none can
// be singled out, the whole value is.
void report(std::vector<key_problem>& out, const std::string& path,
            std::string_view type, const config_value& x) {
  if (type.starts_with(list_of)) {
    if (auto xs = caf::get_if<list>(&x)) {
      auto element = type.substr(list_of.size());
      auto before = out.size();
      for (size_t j = 0; j < xs->size(); ++j)
        if (matches(element, (*xs)[j]) == false)
          report(out, at(path, j), element, (*xs)[j]);
      if (out.size() > before)
        return;
    }
  }
  out.push_back({path, "expected " + expected(type, x) + ", got " + describe(x)
                         + quote_hint(type, x)});
}

// Every value in the raw file that an option declares, checked against it.
// Unknown keys are check_keys' business: they are in content(cfg) as well.
void check_types(std::vector<key_problem>& out, const caf::config_option_set& opts,
                 const dict& d, const std::string& path) {
  for (auto& [key, value] : d) {
    if (path.empty() && key == "engine")
      continue;
    auto full = at(path, key);
    // CAF declares these as options, but in a file they would make caf-run
    // print help or a dump and exit 0 without validating anything, or
    // silently switch to another file.
    if (path.empty()
        && (key == "help" || key == "long-help" || key == "dump-config"
            || key == "config-file")) {
      out.push_back({full, "only valid on the command line"});
      continue;
    }
    auto category = path.empty() ? std::string{"global"} : path;
    bool is_dict = caf::holds_alternative<dict>(value);
    // CAF's INI reader takes a dict at the top as a section, never as the
    // value of a global option.
    auto opt = path.empty() && is_dict ? nullptr
                                       : opts.qualified_name_lookup(category, key);
    if (opt != nullptr) {
      if (opt->check(value))
        report(out, full, std::string_view{opt->type_name().data(),
                                           opt->type_name().size()},
               value);
    } else if (is_dict) {
      check_types(out, opts, *caf::get_if<dict>(&value), full);
    }
  }
}

// The file CAF read, parsed again without any options: CAF's INI reader
// type-checks declared options against the set it is given and drops a
// mismatch silently, so only an empty set keeps every value. nullopt if the
// file cannot be read (or parsed) now: CAF reported that already, if it
// mattered, and content(cfg) is all there is to check.
std::optional<caf::settings> read_raw(const std::string& file) {
  if (file.empty())
    return std::nullopt;
  auto text = load_config_text(file); // never an ifstream on a FIFO
  if (!text)
    return std::nullopt;
  std::istringstream in{*text};
  caf::settings raw;
  caf::config_option_set no_options;
  if (caf::actor_system_config::parse_config(in, no_options, raw))
    return std::nullopt;
  return raw;
}

} // namespace

std::vector<key_problem> check_caf_options(const caf::actor_system_config& cfg) {
  std::vector<key_problem> out;
  auto& opts = option_access::of(cfg);
  check_keys(out, opts, caf::content(cfg), "");
  if (auto raw = read_raw(cfg.config_file_path))
    check_types(out, opts, *raw, "");
  return out;
}

} // namespace egress::config_detail
