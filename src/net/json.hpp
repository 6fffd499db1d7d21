// Internal: reading JSON answers with Boost.JSON, the way both backends' codecs
// do - a missing or null field reads as empty, anything else of the wrong type
// is a decode_failure that the caller turns into api_error
// (error::unexpected_response) with the request's description.
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/storage_ptr.hpp>
#include <boost/json/value.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace tenure::detail {

// An answer this client cannot make sense of.
struct decode_failure {
    std::string what;
};

boost::json::object const& as_object(boost::json::value const& v, std::string_view what);
boost::json::array const& as_array(boost::json::value const& v, std::string_view what);
// Missing or null: empty / false.
std::string get_string(boost::json::object const& o, std::string_view name);
bool get_bool(boost::json::object const& o, std::string_view name);
std::vector<std::string> get_string_array(boost::json::object const& o, std::string_view name);
// The whole body as one JSON value, on `sp` (default: the heap).
boost::json::value parse_json(std::string_view body, boost::json::storage_ptr sp = {});

}  // namespace tenure::detail
