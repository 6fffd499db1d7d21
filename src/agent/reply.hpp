// The small pieces the agent's socket-free API answers with and reads JSON
// bodies by: shared by the endpoints (http_api.cpp), the ACL checks
// (acl.cpp) and the limits (limits.cpp).
#pragma once

#include "net/strings.hpp"

#include <boost/beast/http/field.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <string>
#include <string_view>

namespace tenure::detail::agent {

using response = boost::beast::http::response<boost::beast::http::string_body>;

inline constexpr std::string_view text_plain = "text/plain; charset=utf-8";
inline constexpr std::string_view app_json = "application/json";

// An HTTP/1.1 answer; no Content-Type when `content_type` is empty.
inline response make_response(boost::beast::http::status st, std::string body, std::string_view content_type) {
    response res{st, 11};
    if (!content_type.empty()) res.set(boost::beast::http::field::content_type, content_type);
    res.body() = std::move(body);
    return res;
}

inline response text(boost::beast::http::status st, std::string body) {
    return make_response(st, std::move(body), text_plain);
}

inline response json_answer(boost::beast::http::status st, boost::json::value const& v) {
    return make_response(st, boost::json::serialize(v), app_json);
}

// A member by case-insensitive name, as Go's encoding/json matches fields:
// the exact name first, else the first that differs only in case.
inline boost::json::value const* member(boost::json::object const& o, std::string_view name) {
    if (auto const* v = o.if_contains(name)) return v;
    for (auto const& kv : o)
        if (iequals(kv.key(), name)) return &kv.value();
    return nullptr;
}

}  // namespace tenure::detail::agent
