// Reading JSON answers: see json.hpp.
#include "net/json.hpp"

#include <boost/json/parse.hpp>

namespace tenure::detail {

namespace json = boost::json;

json::object const& as_object(json::value const& v, std::string_view what) {
    if (auto const* o = v.if_object()) return *o;
    throw decode_failure{std::string(what) + " is not a JSON object"};
}

json::array const& as_array(json::value const& v, std::string_view what) {
    if (auto const* a = v.if_array()) return *a;
    throw decode_failure{std::string(what) + " is not a JSON array"};
}

std::string get_string(json::object const& o, std::string_view name) {
    auto const* v = o.if_contains(name);
    if (!v || v->is_null()) return {};
    if (auto const* s = v->if_string()) return std::string(*s);
    throw decode_failure{std::string(name) + " is not a string"};
}

std::vector<std::string> get_string_array(json::object const& o, std::string_view name) {
    std::vector<std::string> out;
    auto const* v = o.if_contains(name);
    if (!v || v->is_null()) return out;
    for (auto const& e : as_array(*v, name)) {
        auto const* s = e.if_string();
        if (!s) throw decode_failure{std::string(name) + " holds a value that is not a string"};
        out.emplace_back(*s);
    }
    return out;
}

json::value parse_json(std::string_view body, json::storage_ptr sp) {
    boost::system::error_code ec;
    json::value v = json::parse(body, ec, std::move(sp));
    if (ec) throw decode_failure{"invalid JSON: " + ec.message()};
    return v;
}

bool get_bool(json::object const& o, std::string_view name) {
    auto const* v = o.if_contains(name);
    if (!v || v->is_null()) return false;
    if (auto const* b = v->if_bool()) return *b;
    throw decode_failure{std::string(name) + " is not a boolean"};
}

}  // namespace tenure::detail
