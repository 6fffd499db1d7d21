// libFuzzer target: request bodies (JSON of /v1/session/create, /v1/txn,
// /v1/agent/check/register, /v1/catalog/*, raw KV values with ?acquire= and
// friends) reaching the embedded agent's API. Input: the first line is
// "<METHOD> <target>", the rest is the body.
#include "agent_fixture.hpp"

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
    namespace http = boost::beast::http;
    fuzz::agent_fixture f;
    std::string input = f.with_session(std::string(reinterpret_cast<char const*>(data), size));
    auto nl = input.find('\n');
    if (nl == std::string::npos) return 0;
    std::string_view line(input.data(), nl);
    auto sp = line.find(' ');
    if (sp == std::string_view::npos) return 0;
    auto method = http::string_to_verb(line.substr(0, sp));
    if (method == http::verb::unknown) return 0;
    std::string target(line.substr(sp + 1));
    if (target.empty() || target.find_first_of("\r\n") != std::string::npos) return 0;

    fuzz::agent::request req{method, target, 11};
    req.set(http::field::host, "127.0.0.1:8500");
    req.body() = input.substr(nl + 1);
    try {
        req.prepare_payload();
    } catch (std::invalid_argument const&) {
        return 0;  // Beast refuses such a message (a body on TRACE): it cannot reach the agent
    }
    if (f.api.check_header(req.base())) return 0;
    f.serve(req);
    return 0;
}
