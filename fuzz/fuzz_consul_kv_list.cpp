// libFuzzer target: a Consul KV read's answer, or a transaction's, as
// tenure's client decodes it (consul::detail::decode_kv_list and
// decode_txn_result, streaming readers that build no JSON document), held
// against the parsed document read entry by entry with decode_kv. Input: the
// first byte picks what the rest is - bit 1 clear: a KV list, bit 0 picking the
// skip callback (set: entries whose key has an odd length are skipped, as the
// watch hub skips the ones it holds; clear: none); bit 1 set: a transaction's
// answer, committed when bit 2 is set. Both readings must refuse the same
// bodies, with decode_failure only, and read the others the same.
#include "../src/consul/codec.hpp"

#include <boost/json/parse.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <vector>

namespace cd = tenure::consul::detail;
namespace json = boost::json;

namespace {

// The document's reading: every entry through decode_kv, the skip asked as
// decode_kv_list asks it (a Key that is a string, then its ModifyIndex).
std::vector<tenure::consul::kv_pair> from_document(std::string_view body, cd::kv_list_skip const& skip) {
    std::vector<tenure::consul::kv_pair> out;
    auto const v = cd::parse_json(body);
    if (v.is_null()) return out;
    for (auto const& e : cd::as_array(v, "KV list")) {
        auto const& o = cd::as_object(e, "KV entry");
        auto const* key = o.if_contains("Key");
        auto const* k = key ? key->if_string() : nullptr;
        if (skip && k && skip(std::string_view(k->data(), k->size()), cd::get_u64(o, "ModifyIndex"))) continue;
        out.push_back(cd::decode_kv(e));
    }
    return out;
}

// The document's reading of a transaction's answer: the KV of each entry of
// Results when committed, each entry of Errors when not.
tenure::consul::txn_result txn_from_document(std::string_view body, bool committed) {
    tenure::consul::txn_result out;
    out.committed = committed;
    auto const v = cd::parse_json(body);
    auto const& o = cd::as_object(v, "txn answer");
    if (committed) {
        if (auto const* res = o.if_contains("Results"); res && !res->is_null()) {
            for (auto const& e : cd::as_array(*res, "Results")) {
                auto const& eo = cd::as_object(e, "Results entry");
                if (auto const* kv = eo.if_contains("KV"); kv && !kv->is_null()) out.results.push_back(cd::decode_kv(*kv));
            }
        }
    } else {
        if (auto const* errs = o.if_contains("Errors"); errs && !errs->is_null()) {
            for (auto const& e : cd::as_array(*errs, "Errors")) {
                auto const& eo = cd::as_object(e, "Errors entry");
                out.errors.push_back({static_cast<std::size_t>(cd::get_u64(eo, "OpIndex")), cd::get_string(eo, "What")});
            }
        }
        if (out.errors.empty()) throw cd::decode_failure{"409 without Errors"};
    }
    return out;
}

bool same(tenure::consul::kv_pair const& a, tenure::consul::kv_pair const& b) {
    return a.key == b.key && a.value == b.value && a.flags == b.flags && a.lock_index == b.lock_index &&
           a.session == b.session && a.create_index == b.create_index && a.modify_index == b.modify_index;
}

template <class F>
auto refused_or(F f) -> std::optional<decltype(f())> {
    try {
        return f();
    } catch (cd::decode_failure const&) {
        return std::nullopt;
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
    if (size == 0) return 0;
    std::string_view const body(reinterpret_cast<char const*>(data) + 1, size - 1);
    if (data[0] & 2) {
        bool const committed = data[0] & 4;
        auto const streamed = refused_or([&] { return cd::decode_txn_result(body, committed); });
        auto const parsed = refused_or([&] { return txn_from_document(body, committed); });
        if (streamed.has_value() != parsed.has_value()) std::abort();
        if (!streamed) return 0;
        if (streamed->results.size() != parsed->results.size() || streamed->errors.size() != parsed->errors.size())
            std::abort();
        for (std::size_t i = 0; i < streamed->results.size(); ++i)
            if (!same(streamed->results[i], parsed->results[i])) std::abort();
        for (std::size_t i = 0; i < streamed->errors.size(); ++i)
            if (streamed->errors[i].op_index != parsed->errors[i].op_index ||
                streamed->errors[i].what != parsed->errors[i].what)
                std::abort();
        return 0;
    }
    cd::kv_list_skip skip;
    if (data[0] & 1) skip = [](std::string_view key, std::uint64_t) { return key.size() % 2 == 1; };
    auto const streamed = refused_or([&] { return cd::decode_kv_list(body, skip); });
    auto const parsed = refused_or([&] { return from_document(body, skip); });
    if (streamed.has_value() != parsed.has_value()) std::abort();
    if (!streamed) return 0;
    if (streamed->size() != parsed->size()) std::abort();
    for (std::size_t i = 0; i < streamed->size(); ++i)
        if (!same((*streamed)[i], (*parsed)[i])) std::abort();
    return 0;
}
