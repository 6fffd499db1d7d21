// libFuzzer target: one raw HTTP/1.1 request to the embedded agent's API.
// The bytes go through Beast's request parser (header), the API's
// check_header, then handle() with whatever follows the header as the body.
#include "agent_fixture.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
    fuzz::agent_fixture f;
    std::string input = f.with_session(std::string(reinterpret_cast<char const*>(data), size));

    namespace http = boost::beast::http;
    http::request_parser<http::string_body> parser;
    parser.header_limit(16 * 1024);
    parser.body_limit(f.api.max_body_size());
    boost::beast::error_code ec;
    std::size_t used = parser.put(boost::asio::buffer(input), ec);
    if (!parser.is_header_done()) return 0;
    if (auto refused = f.api.check_header(parser.get().base())) return 0;
    fuzz::agent::request req = parser.release();
    // The body is whatever follows the header, whatever Content-Length says.
    req.body() = input.substr(std::min(used, input.size()));
    f.serve(req);
    return 0;
}
