// Internal: one HTTP answer as the transports hand it up - the status, the
// body and only the header fields their owner reads.
#pragma once

#include <boost/beast/http/fields.hpp>

#include <string>

namespace tenure::detail {

struct http_answer {
    unsigned status = 0;
    std::string body;
    boost::beast::http::fields headers;  // the fields the pool was asked to keep (http_pool_options)
};

}  // namespace tenure::detail
