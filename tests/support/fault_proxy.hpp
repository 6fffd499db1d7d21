// A loopback fault-injection TCP proxy for tests.
//
// fault_proxy listens on 127.0.0.1:<ephemeral> and forwards every accepted
// connection to a fixed target endpoint (typically a `tenure agent`). Tests
// point a client at address() instead of the target and then inject faults
// that a real network produces, on existing and new connections alike:
//
//   pause()/resume()  a partition where TCP stays up: no byte moves in either
//                     direction and new connections are accepted but not
//                     connected upstream; nothing is lost, resume() delivers
//                     everything that was held.
//   set_delay(d)      every chunk waits d (from the moment it was read) before
//                     it is written on, in each direction.
//   reset_all()       every open connection is aborted with an RST on both
//                     sides (SO_LINGER 0, then close).
//   drop_new(true)    new connections are accepted and immediately closed.
//   blackhole(true)   a lossy partition: connections are accepted, but every
//                     byte read from either side is discarded.
//
// The proxy runs entirely on the caller's executor (one thread, C++20
// coroutines, no threads of its own). Per connection, two pump coroutines move
// bytes client->server and server->client with async_read_some/async_write;
// between a read and its write (and before the next read) a pump waits while
// the proxy is paused or the chunk's delay has not passed. An EOF on one side
// is passed on as a half-close (shutdown(send)) to the other side; an error on
// one side aborts the connection (RST to the other side). Both are passed on
// even under blackhole(); while paused nothing is read, so a peer's close is
// only noticed after resume(). A fault setting applies to the next chunk and
// also wakes a pump that is waiting, so it takes effect immediately (resume()
// or set_delay(0) release held chunks at once); only a write that had already
// started when pause() was called still completes. When the target refuses
// the upstream connection, the client's connection is reset.
//
// Threading: the fault controls (pause, resume, set_delay, reset_all,
// drop_new, blackhole), start(), stop(), the counters, endpoint() and
// address() may be called from any thread. The settings themselves are
// atomics and apply as soon as the call returns; the socket work they imply
// (waking pumps, closing sockets) runs on the executor — inline when the
// caller already runs on it, otherwise posted to it. reset_all() only aborts
// the connections that were accepted before the call.
//
// Lifetime: destroy the proxy before its io_context. The destructor calls
// stop(); coroutines still suspended hold the internal state alive until they
// have unwound, so stopping while bytes are being pumped is safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace tenure::test {

class fault_proxy {
public:
    // Opens the listening socket on 127.0.0.1:0 right away (endpoint() is valid
    // after construction; connections queue in the backlog until start()).
    // Throws boost::system::system_error when it cannot listen.
    fault_proxy(boost::asio::any_io_executor ex, boost::asio::ip::tcp::endpoint target);
    ~fault_proxy();  // stop()
    fault_proxy(fault_proxy const&) = delete;
    fault_proxy& operator=(fault_proxy const&) = delete;

    // Where clients connect (127.0.0.1 and the ephemeral port).
    boost::asio::ip::tcp::endpoint endpoint() const;
    // "http://127.0.0.1:PORT".
    std::string address() const;
    // The endpoint every connection is forwarded to.
    boost::asio::ip::tcp::endpoint target() const;

    // Starts accepting. Idempotent; a no-op after stop().
    void start();
    // Stops accepting and closes every connection (FIN to both sides). Final:
    // a stopped proxy cannot be restarted. Idempotent.
    void stop();

    // ---- faults (all take effect immediately, for existing and new connections)
    void pause();   // hold all bytes in both directions; new connections wait before connecting upstream
    void resume();  // deliver held bytes, connect waiting connections, continue
    void set_delay(std::chrono::milliseconds d);  // per chunk, each direction (0 = none)
    void reset_all();        // RST every open connection on both sides
    void drop_new(bool on);  // accept then immediately close new connections
    void blackhole(bool on); // accept, keep connections, silently discard every byte

    bool paused() const;
    std::chrono::milliseconds delay() const;

    // ---- observation
    // Open client connections (accepted and not yet closed; dropped ones are
    // never counted).
    std::size_t connection_count() const;
    // Bytes written on to the other side, both directions summed (discarded
    // bytes are not counted).
    std::uint64_t bytes_forwarded() const;
    // Connections accepted since construction (dropped ones included).
    std::uint64_t connections_accepted() const;

    struct impl;

private:
    std::shared_ptr<impl> impl_;
};

}  // namespace tenure::test
