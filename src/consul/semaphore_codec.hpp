// The Go api.Semaphore's wire encodings (internal; defined in
// src/consul/semaphore.cpp, exercised by tests/unit/semaphore_codec_test.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace tenure::detail {

// api/semaphore.go's DefaultSemaphoreKey.
inline constexpr std::string_view semaphore_key = ".lock";

// The value of `prefix/.lock`: Go's semaphoreLock{Limit int; Holders map[string]bool}.
struct semaphore_lock {
    std::int64_t limit = 0;
    std::map<std::string, bool> holders;  // byte order, as Go sorts map keys
};

// Go's encoding/json string encoding (json.Marshal, HTML-safe escaping,
// invalid UTF-8 as \ufffd, U+2028/U+2029 escaped, \b and \f as in Go >= 1.22).
std::string go_json_quote(std::string_view s);

// json.Marshal(semaphoreLock): {"Limit":N,"Holders":{"a":true,...}}, keys
// sorted, no spaces.
std::string encode_semaphore_lock(semaphore_lock const& l);

// json.Unmarshal into a fresh semaphoreLock (field names matched
// case-insensitively, unknown fields ignored, Limit an integer, Holders
// values booleans); nullopt when Go would fail.
std::optional<semaphore_lock> decode_semaphore_lock(std::string_view text);

}  // namespace tenure::detail
