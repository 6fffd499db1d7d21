// libFuzzer target: the etcd v3 JSON gateway's answers as tenure's etcd
// client reads them (src/etcd/codec.cpp). Input: the first line names the
// decoder ("range", "put", "delete", "txn", "lease_grant", "keepalive",
// "ttl", "status", "watch", "error <http status>", "ndjson <chunk size>"),
// the rest is the body. Decoders may refuse an answer only with
// decode_failure or an api_error / system_error; anything else escaping
// (or any memory or UB report) is a finding.
#include "../src/etcd/codec.hpp"

#include <boost/json/parse.hpp>
#include <boost/system/system_error.hpp>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ed = tenure::etcd::detail;

namespace {

unsigned number(std::string_view s, unsigned fallback) {
    unsigned v = fallback;
    std::from_chars(s.data(), s.data() + s.size(), v);
    return v;
}

void decode(std::string_view kind, std::string_view arg, std::string_view body) {
    if (kind == "keepalive") {
        (void)ed::decode_keepalive(body);
        return;
    }
    if (kind == "error") {
        auto e = ed::error_from_answer(number(arg, 400), body);
        (void)e.what();
        return;
    }
    if (kind == "ndjson") {
        // Cut the stream into chunks of `arg` bytes, decode each message.
        std::size_t chunk = std::max(1u, number(arg, 7));
        ed::ndjson_decoder d;
        for (std::size_t at = 0; at < body.size(); at += chunk) {
            d.feed(body.substr(at, chunk));
            while (d.has_value()) {
                auto v = d.pop();
                try {
                    (void)ed::decode_watch_message(v);
                } catch (ed::decode_failure const&) {
                } catch (boost::system::system_error const&) {
                }
            }
        }
        (void)d.mid_value();
        return;
    }
    auto v = ed::parse_json(body);
    if (kind == "range") (void)ed::decode_range(ed::as_object(v, "range"));
    else if (kind == "put") (void)ed::decode_put(ed::as_object(v, "put"));
    else if (kind == "delete") (void)ed::decode_delete(ed::as_object(v, "delete"));
    else if (kind == "txn") (void)ed::decode_txn(v);
    else if (kind == "lease_grant") (void)ed::decode_lease_grant(v);
    else if (kind == "ttl") (void)ed::decode_time_to_live(v);
    else if (kind == "status") (void)ed::decode_status(v);
    else if (kind == "watch") (void)ed::decode_watch_message(v);
    else if (auto err = ed::stream_error(v, 200)) (void)err->what();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
    std::string_view input(reinterpret_cast<char const*>(data), size);
    auto nl = input.find('\n');
    if (nl == std::string_view::npos) return 0;
    std::string_view line = input.substr(0, nl), body = input.substr(nl + 1);
    auto sp = line.find(' ');
    std::string_view kind = line.substr(0, sp), arg = sp == std::string_view::npos ? "" : line.substr(sp + 1);
    try {
        decode(kind, arg, body);
    } catch (ed::decode_failure const&) {
    } catch (boost::system::system_error const&) {  // api_error, Boost.JSON's errors
    }
    return 0;
}
