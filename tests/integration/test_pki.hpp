// Throwaway certificates for the TLS tests, made at test time with the
// OpenSSL API in a fresh temporary directory (no keys are committed): two
// unrelated CAs, a server certificate for localhost / 127.0.0.1 and a client
// certificate signed by the first, and a client certificate signed by the
// second. EC P-256 keys, valid from an hour ago for two days.
#pragma once

#include <string>

namespace tenure::itest {

struct test_pki {
    std::string dir;
    std::string ca_cert;                         // CA A
    std::string server_cert, server_key;         // signed by A: DNS:localhost, IP:127.0.0.1
    std::string client_cert, client_key;         // signed by A
    std::string other_ca_cert;                   // CA B
    std::string other_client_cert, other_client_key;  // signed by B

    test_pki();  // throws std::runtime_error when OpenSSL fails
    ~test_pki();
    test_pki(test_pki const&) = delete;
    test_pki& operator=(test_pki const&) = delete;
};

}  // namespace tenure::itest
