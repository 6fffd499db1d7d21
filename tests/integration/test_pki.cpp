// Test certificates with the OpenSSL 3 API (test_pki.hpp).
#include "test_pki.hpp"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>

namespace tenure::itest {

namespace {

struct key_free {
    void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct cert_free {
    void operator()(X509* c) const { X509_free(c); }
};
using key_ptr = std::unique_ptr<EVP_PKEY, key_free>;
using cert_ptr = std::unique_ptr<X509, cert_free>;

void check(bool ok, char const* what) {
    if (!ok) throw std::runtime_error(std::string("test_pki: ") + what + " failed");
}

key_ptr new_key() {
    key_ptr k{EVP_EC_gen("P-256")};
    check(k != nullptr, "EVP_EC_gen");
    return k;
}

void add_ext(X509* cert, X509* issuer, int nid, char const* value) {
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    check(ext != nullptr, "X509V3_EXT_conf_nid");
    X509_add_ext(cert, ext, -1);
    X509_EXTENSION_free(ext);
}

// A certificate for `key` named `cn`, signed by issuer (or self-signed when issuer is null).
cert_ptr make_cert(EVP_PKEY* key, char const* cn, X509* issuer, EVP_PKEY* issuer_key, bool ca, char const* san,
                   long serial) {
    cert_ptr c{X509_new()};
    check(c != nullptr, "X509_new");
    X509_set_version(c.get(), 2);
    ASN1_INTEGER_set(X509_get_serialNumber(c.get()), serial);
    X509_gmtime_adj(X509_getm_notBefore(c.get()), -3600);
    X509_gmtime_adj(X509_getm_notAfter(c.get()), 2 * 24 * 3600);
    X509_set_pubkey(c.get(), key);
    X509_NAME* name = X509_get_subject_name(c.get());
    X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<unsigned char const*>("tenure tests"), -1, -1, 0);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<unsigned char const*>(cn), -1, -1, 0);
    X509* const signer = issuer ? issuer : c.get();
    X509_set_issuer_name(c.get(), X509_get_subject_name(signer));
    if (ca) {
        add_ext(c.get(), signer, NID_basic_constraints, "critical,CA:TRUE");
        add_ext(c.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign");
    } else {
        add_ext(c.get(), signer, NID_basic_constraints, "critical,CA:FALSE");
        add_ext(c.get(), signer, NID_key_usage, "critical,digitalSignature");
        add_ext(c.get(), signer, NID_ext_key_usage, "serverAuth,clientAuth");
    }
    add_ext(c.get(), signer, NID_subject_key_identifier, "hash");
    if (san) add_ext(c.get(), signer, NID_subject_alt_name, san);
    check(X509_sign(c.get(), issuer_key ? issuer_key : key, EVP_sha256()) > 0, "X509_sign");
    return c;
}

void write_cert(std::string const& path, X509* c) {
    FILE* f = std::fopen(path.c_str(), "w");
    check(f != nullptr, "fopen");
    bool const ok = PEM_write_X509(f, c) == 1;
    std::fclose(f);
    check(ok, "PEM_write_X509");
}

void write_key(std::string const& path, EVP_PKEY* k) {
    FILE* f = std::fopen(path.c_str(), "w");
    check(f != nullptr, "fopen");
    bool const ok = PEM_write_PrivateKey(f, k, nullptr, nullptr, 0, nullptr, nullptr) == 1;
    std::fclose(f);
    check(ok, "PEM_write_PrivateKey");
}

}  // namespace

test_pki::test_pki() {
    char tmpl[] = "/tmp/tenure-itest-pki-XXXXXX";
    check(::mkdtemp(tmpl) != nullptr, "mkdtemp");
    dir = tmpl;

    auto ca_key = new_key();
    auto ca = make_cert(ca_key.get(), "tenure test CA A", nullptr, nullptr, true, nullptr, 1);
    auto other_ca_key = new_key();
    auto other_ca = make_cert(other_ca_key.get(), "tenure test CA B", nullptr, nullptr, true, nullptr, 2);
    auto server_k = new_key();
    auto server = make_cert(server_k.get(), "localhost", ca.get(), ca_key.get(), false,
                            "DNS:localhost,IP:127.0.0.1", 3);
    auto client_k = new_key();
    auto client = make_cert(client_k.get(), "tenure test client", ca.get(), ca_key.get(), false, nullptr, 4);
    auto other_client_k = new_key();
    auto other_client =
        make_cert(other_client_k.get(), "tenure test client B", other_ca.get(), other_ca_key.get(), false, nullptr, 5);

    ca_cert = dir + "/ca.pem";
    other_ca_cert = dir + "/other-ca.pem";
    server_cert = dir + "/server.pem";
    server_key = dir + "/server-key.pem";
    client_cert = dir + "/client.pem";
    client_key = dir + "/client-key.pem";
    other_client_cert = dir + "/other-client.pem";
    other_client_key = dir + "/other-client-key.pem";
    write_cert(ca_cert, ca.get());
    write_cert(other_ca_cert, other_ca.get());
    write_cert(server_cert, server.get());
    write_key(server_key, server_k.get());
    write_cert(client_cert, client.get());
    write_key(client_key, client_k.get());
    write_cert(other_client_cert, other_client.get());
    write_key(other_client_key, other_client_k.get());
}

test_pki::~test_pki() {
    if (!dir.empty()) std::system(("rm -rf '" + dir + "'").c_str());
}

}  // namespace tenure::itest
