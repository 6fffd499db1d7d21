// tenure::etcd::watch_stream: one POST /v3/watch on a connection of its own,
// whose chunked answer never ends while the watch lives.
//
// The body is read with a Beast response_parser<buffer_body> into a fixed
// buffer, and the bytes go through ndjson_decoder, which cuts them into JSON
// values whatever the chunk and newline boundaries. Closing the socket is the
// only way to end a watch through the gateway (it ignores the request
// body's end), so close(), the destructor and a cancelled next() all close it.
#include <tenure/etcd/client.hpp>

#include "etcd/client_impl.hpp"
#include "etcd/codec.hpp"
#include "etcd/transport.hpp"

// g++ 12 false positive on Asio's coroutine frame allocator (fixed in g++ 13).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json/serialize.hpp>

#include <array>
#include <limits>
#include <optional>
#include <utility>

namespace tenure::etcd {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);
// An error answer's body is kept up to this size.
constexpr std::size_t max_error_body = 64 * 1024;

bool cancelled(asio::cancellation_state const& cs) { return cs.cancelled() != asio::cancellation_type::none; }

}  // namespace

struct watch_stream::impl {
    explicit impl(std::unique_ptr<detail::connection> c) : conn(std::move(c)) {
        parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    }

    std::unique_ptr<detail::connection> conn;
    http::response_parser<http::buffer_body> parser;
    std::array<char, 16 * 1024> buf{};
    detail::ndjson_decoder decoder;
    response_header created;
    std::int64_t watch_id = 0;
    std::string endpoint;
    std::string what;  // "watch on 127.0.0.1:2379"
    bool open = true;
    std::optional<api_error> pending_error;  // a failure to report once the messages before it are out
    std::string* raw_sink = nullptr;  // set while reading an error answer: bytes go here, not to the decoder

    void close() noexcept {
        if (!open) return;
        open = false;
        conn->aborted = true;
        conn->stream.close();  // a pending read completes with operation_aborted
    }

    // Reads more of the body and feeds it to the decoder. Returns false at
    // the end of the body. Throws api_error (transport) on failure.
    asio::awaitable<bool> read_more() {
        if (parser.is_done()) co_return false;
        auto& body = parser.get().body();
        body.data = buf.data();
        body.size = buf.size();
        auto [ec, n] = co_await http::async_read_some(conn->stream, conn->buffer, parser, tuple_awaitable);
        if (ec == http::error::need_buffer) ec = {};
        std::size_t const got = buf.size() - parser.get().body().size;
        // What arrived is used even if the connection failed right after:
        // complete messages are delivered before the error.
        if (got > 0 && raw_sink) {
            if (raw_sink->size() < max_error_body) raw_sink->append(buf.data(), got);
        } else if (got > 0) {
            try {
                decoder.feed(std::string_view(buf.data(), got));
            } catch (detail::decode_failure const& e) {
                throw api_error(tenure::error::unexpected_response, 0, 0, what + ": " + e.what);
            }
        }
        if (ec) {
            bool const aborted = conn->aborted || cancelled(co_await asio::this_coro::cancellation_state);
            if (ec == http::error::end_of_stream || ec == http::error::partial_message)
                ec = asio::error::eof;  // the member went away
            detail::throw_transport(ec, aborted, what);
        }
        co_return true;
    }

    // The next stream message. Throws api_error at the end of the stream.
    asio::awaitable<detail::watch_message> next_message() {
        while (!decoder.has_value()) {
            if (pending_error) throw *pending_error;
            try {
                if (!co_await read_more()) throw api_error(asio::error::eof, 0, 0, what + ": the stream ended");
            } catch (api_error const& e) {
                // Messages that arrived with the failure go first (not on an abort).
                if (!decoder.has_value() || e.code() == asio::error::operation_aborted) throw;
                pending_error = e;
            }
        }
        boost::json::value const v = decoder.pop();
        try {
            co_return detail::decode_watch_message(v);
        } catch (detail::decode_failure const& e) {
            throw api_error(tenure::error::unexpected_response, 0, 0,
                            what + ": unexpected message (" + e.what + "): " + boost::json::serialize(v).substr(0, 200));
        }
    }

    // The whole (error) body of a non-200 answer, bounded, as raw bytes (it
    // may not be JSON: "404 page not found"). If the connection fails or the
    // deadline passes after some of it arrived, that part is the answer.
    asio::awaitable<std::string> read_error_body() {
        std::string body;
        raw_sink = &body;
        std::optional<api_error> failure;
        try {
            while (co_await read_more()) {
            }
        } catch (api_error const& e) {
            failure = e;
        }
        raw_sink = nullptr;
        if (failure && (body.empty() || failure->code() == asio::error::operation_aborted)) throw *failure;
        co_return body;
    }
};

namespace {

[[noreturn]] void throw_canceled(detail::watch_message const& m, std::string const& what) {
    if (m.compact_revision > 0)
        throw api_error(tenure::error::etcd_compacted, 200, 11,
                        what + ": canceled: revision compacted (history starts at revision " +
                            std::to_string(m.compact_revision) + ")",
                        m.compact_revision);
    std::string reason = m.cancel_reason.empty() ? std::string("canceled by the server") : m.cancel_reason;
    throw api_error(tenure::error::watch_canceled, 200, 0, what + ": " + reason);
}

}  // namespace

// ---- watch_stream -----------------------------------------------------------------------

watch_stream::watch_stream(std::shared_ptr<impl> p) noexcept
    : ex_(p ? p->conn->stream.get_executor() : asio::any_io_executor{}), impl_(std::move(p)) {}

watch_stream::~watch_stream() { close(); }

// A moved-from stream keeps its executor (as an Asio socket does): next() on
// it completes with not_connected.
watch_stream::watch_stream(watch_stream&& other) noexcept : ex_(other.ex_), impl_(std::move(other.impl_)) {}

watch_stream& watch_stream::operator=(watch_stream&& other) noexcept {
    if (this != &other) {
        close();
        ex_ = other.ex_;
        impl_ = std::move(other.impl_);
    }
    return *this;
}

void watch_stream::close() noexcept {
    if (impl_) impl_->close();
}

bool watch_stream::is_open() const noexcept { return impl_ && impl_->open; }

namespace {
response_header const empty_header{};
std::string const empty_string;
}  // namespace

response_header const& watch_stream::created_header() const noexcept { return impl_ ? impl_->created : empty_header; }

std::int64_t watch_stream::watch_id() const noexcept { return impl_ ? impl_->watch_id : 0; }

std::string const& watch_stream::endpoint() const noexcept { return impl_ ? impl_->endpoint : empty_string; }

// `self` by value: the stream may be moved or destroyed while we wait.
asio::awaitable<watch_response> watch_stream::next_impl(std::shared_ptr<impl> self) {
    if (!self || !self->open)
        throw api_error(asio::error::not_connected, 0, 0, self ? self->what + ": closed" : "watch: not open");
    try {
        for (;;) {
            detail::watch_message m = co_await self->next_message();
            if (m.canceled) throw_canceled(m, self->what);
            if (m.created) continue;  // only the first one is expected, consumed by watch()
            watch_response r;
            r.header = m.header;
            r.watch_id = m.watch_id;
            r.events = std::move(m.events);
            co_return r;
        }
    } catch (...) {
        self->close();
        throw;
    }
}

// ---- client::watch ----------------------------------------------------------------------

asio::awaitable<watch_stream> client::coroutines::watch(std::string key, std::string range_end,
                                                       watch_options opts) const {
    auto const self = state;
    auto const transport = self->transport;
    std::string const body = detail::encode_watch_create(key, range_end, opts);
    std::optional<api_error> last_error;
    std::size_t const n = transport->size();
    std::size_t const first = transport->current();

    for (std::size_t k = 0; k < n; ++k) {
        std::size_t const i = (first + k) % n;
        auto const& ep = transport->at(i);
        std::string const what = "watch on " + ep.host_header;
        auto const deadline = detail::clock::now() + self->config.request_timeout;
        std::shared_ptr<watch_stream::impl> w;
        try {
            auto conn = co_await transport->connect(i, deadline, what);
            w = std::make_shared<watch_stream::impl>(std::move(conn));
            w->endpoint = ep.url;
            w->what = what;

            http::request<http::string_body> req{http::verb::post, "/v3/watch", 11};
            req.set(http::field::host, ep.host_header);
            req.set(http::field::user_agent, detail::user_agent);
            req.set(http::field::content_type, "application/json");
            // Without it a member that lost its leader keeps the watch open, silent.
            req.set("Grpc-Metadata-hasleader", "true");
            req.body() = body;
            req.prepare_payload();
            auto [wec, wn] = co_await http::async_write(w->conn->stream, req, tuple_awaitable);
            if (wec) detail::throw_transport(wec, cancelled(co_await asio::this_coro::cancellation_state), what);

            auto [hec, hn] = co_await http::async_read_header(w->conn->stream, w->conn->buffer, w->parser,
                                                              tuple_awaitable);
            if (hec) {
                if (hec == http::error::end_of_stream || hec == http::error::partial_message) hec = asio::error::eof;
                detail::throw_transport(hec, cancelled(co_await asio::this_coro::cancellation_state), what);
            }
            unsigned const status = w->parser.get().result_int();
            if (status != 200) {
                std::string const err = co_await w->read_error_body();
                throw detail::error_from_answer(status, err);
            }

            // Up to `created`: the watch is registered once it arrives.
            for (;;) {
                detail::watch_message m = co_await w->next_message();
                if (m.created) {
                    if (m.canceled) throw_canceled(m, what);
                    w->created = m.header;
                    w->watch_id = m.watch_id;
                    break;
                }
                if (m.canceled) throw_canceled(m, what);
                // Nothing else comes before `created`; ignore it if it does.
            }
            w->conn->stream.expires_never();
            transport->good(i);
            co_return watch_stream(std::move(w));
        } catch (api_error const& e) {
            if (w) w->close();
            if (!detail::fail_over_on(e)) throw;
            last_error = e;
        }
        transport->bad(i);
    }
    throw *last_error;
}

}  // namespace tenure::etcd
