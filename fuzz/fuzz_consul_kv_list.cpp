// libFuzzer target: a Consul KV read's answer as tenure's client decodes it
// (consul::detail::decode_kv_list, a streaming reader that builds no JSON
// document), held against the parsed document read entry by entry with
// decode_kv. Input: the first byte picks the skip callback (odd: entries whose
// key has an odd length are skipped, as the watch hub skips the ones it
// holds; even: none), the rest is the body. Both readings must refuse the
// same bodies, with decode_failure only, and read the others the same.
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

template <class F>
std::optional<std::vector<tenure::consul::kv_pair>> refused_or(F f) {
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
    cd::kv_list_skip skip;
    if (data[0] & 1) skip = [](std::string_view key, std::uint64_t) { return key.size() % 2 == 1; };
    auto const streamed = refused_or([&] { return cd::decode_kv_list(body, skip); });
    auto const parsed = refused_or([&] { return from_document(body, skip); });
    if (streamed.has_value() != parsed.has_value()) std::abort();
    if (!streamed) return 0;
    if (streamed->size() != parsed->size()) std::abort();
    for (std::size_t i = 0; i < streamed->size(); ++i) {
        auto const& a = (*streamed)[i];
        auto const& b = (*parsed)[i];
        if (a.key != b.key || a.value != b.value || a.flags != b.flags || a.lock_index != b.lock_index ||
            a.session != b.session || a.create_index != b.create_index || a.modify_index != b.modify_index)
            std::abort();
    }
    return 0;
}
