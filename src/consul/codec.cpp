// Consul's JSON wire format, both ways (see codec.hpp).
#include "consul/codec.hpp"

#include "net/duration.hpp"
#include "net/wire.hpp"

#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/error.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/serializer.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>

namespace tenure::consul::detail {

namespace json = boost::json;
namespace http = boost::beast::http;

std::string_view trim(std::string_view s) {
    auto const ws = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
    while (!s.empty() && ws(s.front())) s.remove_prefix(1);
    while (!s.empty() && ws(s.back())) s.remove_suffix(1);
    return s;
}

namespace {

std::string b64_decode(std::string_view in) {
    auto out = tenure::detail::base64_decode(in);
    if (!out) throw decode_failure{"Value is not base64 (length " + std::to_string(in.size()) + ")"};
    return std::move(*out);
}

}  // namespace

// Integers only, never through a double (flags use all 64 bits).
std::uint64_t get_u64(json::object const& o, std::string_view name) {
    auto const* v = o.if_contains(name);
    if (!v || v->is_null()) return 0;
    if (auto const* u = v->if_uint64()) return *u;
    if (auto const* i = v->if_int64(); i && *i >= 0) return static_cast<std::uint64_t>(*i);
    throw decode_failure{std::string(name) + " is not an unsigned integer"};
}

std::int64_t get_i64(json::object const& o, std::string_view name) {
    auto const* v = o.if_contains(name);
    if (!v || v->is_null()) return 0;
    if (auto const* i = v->if_int64()) return *i;
    if (auto const* u = v->if_uint64(); u && *u <= static_cast<std::uint64_t>(INT64_MAX))
        return static_cast<std::int64_t>(*u);
    throw decode_failure{std::string(name) + " is not an integer"};
}

bool parse_bool(std::string_view body) {
    auto const t = trim(body);
    if (t == "true") return true;
    if (t == "false") return false;
    throw decode_failure{"expected true or false"};
}

kv_pair decode_kv(json::value const& v) {
    auto const& o = as_object(v, "KV entry");
    kv_pair p;
    p.key = get_string(o, "Key");
    if (auto const* val = o.if_contains("Value"); val && !val->is_null()) {
        auto const* s = val->if_string();
        if (!s) throw decode_failure{"Value is not a string"};
        p.value = b64_decode(*s);
    }
    p.flags = get_u64(o, "Flags");
    p.lock_index = get_u64(o, "LockIndex");
    p.session = get_string(o, "Session");
    p.create_index = get_u64(o, "CreateIndex");
    p.modify_index = get_u64(o, "ModifyIndex");
    return p;
}

namespace {

// One KV entry's fields as Boost.JSON's parser walks them (basic_parser's
// handler events), with no document built: a reader of a KV list and one of
// a transaction's answer hand it the events at the entry's own level, and it
// keeps each field's last value in buffers of its own. An entry
// reads as decode_kv reads the parsed object: the last of a field given twice
// counts, and its checks (a field of the wrong type, a negative or fractional
// number, bad base64 in Value) are made when the entry ends, in decode_kv's
// order and words.
class kv_entry_reader {
public:
    void begin() {
        entry_ = {};
        field_ = field::other;
    }
    void key_part(std::string_view s) { name_.append(s.data(), s.size()); }
    void key(std::string_view s) {
        name_.append(s.data(), s.size());
        field_ = field_of(name_);
        name_.clear();
    }
    void string_part(std::string_view s) {
        if (field_ == field::other) return;
        auto* t = text(field_);
        if (!t) return wrong_kind();
        if (!in_string_) {
            in_string_ = true;
            t->clear();
            entry_.present[index(field_)] = true;
            entry_.bad[index(field_)] = false;
        }
        t->append(s.data(), s.size());
    }
    void string_end() { in_string_ = false; }
    void number(std::uint64_t v) {
        if (!is_number(field_)) return wrong_kind();
        entry_.number[index(field_)] = v;
        entry_.bad[index(field_)] = false;
    }
    // Null reads as missing: an empty string, no Value, 0.
    void null() {
        if (field_ == field::other) return;
        auto const i = index(field_);
        entry_.bad[i] = false;
        entry_.present[i] = false;
        if (is_number(field_)) entry_.number[i] = 0;
    }
    // A value of a kind its field does not take (an object or array
    // included); for a field it does not read, nothing.
    void wrong_kind() {
        if (field_ != field::other) entry_.bad[index(field_)] = true;
    }

    // Whether `skip` says the entry is held already (its Key a string, its
    // ModifyIndex a number, as decode_kv_list asks); a ModifyIndex of the
    // wrong kind is a failure then.
    bool skipped(kv_list_skip const& skip, std::string& failure) const {
        auto const ki = index(field::key), mi = index(field::modify_index);
        if (!skip || !entry_.present[ki] || entry_.bad[ki]) return false;
        if (entry_.bad[mi]) {
            failure = wrong_kind_message(field::modify_index);
            return false;
        }
        return skip(key_, entry_.number[mi]);
    }
    // The entry, or why it is not one (`failure`).
    std::optional<kv_pair> finish(std::string& failure) {
        field_ = field::other;
        kv_pair p;
        for (std::size_t i = 0; i < fields; ++i) {
            if (entry_.bad[i]) {
                failure = wrong_kind_message(static_cast<field>(i));
                return std::nullopt;
            }
            if (i == index(field::value) && entry_.present[i]) {
                p.value = tenure::detail::base64_decode(value_);
                if (!p.value) {
                    failure = "Value is not base64 (length " + std::to_string(value_.size()) + ")";
                    return std::nullopt;
                }
            }
        }
        // Moved, not copied: an entry costs one allocation per string either
        // way, and a transaction's single entry no more than that.
        if (entry_.present[index(field::key)]) p.key = std::move(key_);
        p.flags = entry_.number[index(field::flags)];
        p.lock_index = entry_.number[index(field::lock_index)];
        if (entry_.present[index(field::session)]) p.session = std::move(session_);
        p.create_index = entry_.number[index(field::create_index)];
        p.modify_index = entry_.number[index(field::modify_index)];
        return p;
    }

private:
    // decode_kv's order: the order of its checks.
    enum class field { key, value, flags, lock_index, session, create_index, modify_index, other };
    static constexpr std::size_t fields = 7;
    static std::size_t index(field f) { return static_cast<std::size_t>(f); }
    static bool is_number(field f) { return f != field::key && f != field::value && f != field::session && f != field::other; }
    struct entry {
        std::uint64_t number[fields] = {};  // the numeric fields' values, by index()
        bool present[fields] = {};          // a string was given (Key, Value, Session)
        bool bad[fields] = {};              // the last value given is of the wrong kind
    };

    static field field_of(std::string_view n) {
        if (n == "Key") return field::key;
        if (n == "Value") return field::value;
        if (n == "Flags") return field::flags;
        if (n == "LockIndex") return field::lock_index;
        if (n == "Session") return field::session;
        if (n == "CreateIndex") return field::create_index;
        if (n == "ModifyIndex") return field::modify_index;
        return field::other;
    }
    static std::string wrong_kind_message(field f) {
        static char const* const names[fields] = {"Key", "Value", "Flags", "LockIndex", "Session", "CreateIndex",
                                                  "ModifyIndex"};
        return std::string(names[index(f)]) + (is_number(f) ? " is not an unsigned integer" : " is not a string");
    }
    std::string* text(field f) {
        switch (f) {
            case field::key: return &key_;
            case field::value: return &value_;
            case field::session: return &session_;
            default: return nullptr;
        }
    }

    field field_ = field::other;
    bool in_string_ = false;
    entry entry_;
    std::string name_, key_, value_, session_;
};

// What every reader below does with the parser's events it has no use for.
struct json_reader_base {
    static constexpr std::size_t max_object_size = std::size_t(-1);
    static constexpr std::size_t max_array_size = std::size_t(-1);
    static constexpr std::size_t max_key_size = std::size_t(-1);
    static constexpr std::size_t max_string_size = std::size_t(-1);

    bool on_document_begin(boost::system::error_code&) { return true; }
    bool on_document_end(boost::system::error_code&) { return true; }
    bool on_comment_part(std::string_view, boost::system::error_code&) { return true; }
    bool on_comment(std::string_view, boost::system::error_code&) { return true; }
    bool on_number_part(std::string_view, boost::system::error_code&) { return true; }

    std::string const& failure() const noexcept { return failure_; }

protected:
    bool fail(boost::system::error_code& ec, std::string why) {
        failure_ = std::move(why);
        ec = make_error_code(boost::json::error::syntax);  // stops the parser; failure_ says why
        return false;
    }
    std::string failure_;
};

// Runs `Reader` over the whole body: its failure, or the parser's.
template <class Reader, class... Args>
void read_json(std::string_view body, Args&&... args) {
    json::basic_parser<Reader> p(json::parse_options{}, std::forward<Args>(args)...);
    boost::system::error_code ec;
    auto const n = p.write_some(false, body.data(), body.size(), ec);
    if (!p.handler().failure().empty()) throw decode_failure{p.handler().failure()};
    if (ec) throw decode_failure{"invalid JSON: " + ec.message()};
    if (n < body.size()) throw decode_failure{"invalid JSON: " + make_error_code(json::error::extra_data).message()};
}

// Reads a KV list with kv_entry_reader. A 10,000-key snapshot of the watch
// hub's prefix is a couple of MB, read again after every few writes under
// it; the tree of such an answer cost more than the decode, and a fresh arena
// for it each time touched new memory. An entry the reader holds already
// (`skip`) costs its parse only.
class kv_list_reader : public json_reader_base {
public:
    kv_list_reader(kv_list_skip const* skip, std::vector<kv_pair>* out) : skip_(skip), out_(out) {}

    bool on_array_begin(boost::system::error_code& ec) {
        if (depth_ == 0) {
            depth_ = 1;  // the list
            return true;
        }
        return nested(ec);
    }
    bool on_array_end(std::size_t, boost::system::error_code&) {
        --depth_;
        return true;
    }
    bool on_object_begin(boost::system::error_code& ec) {
        if (depth_ == 0) return not_an_entry(ec);
        if (depth_ == 1) {
            depth_ = 2;
            entry_.begin();
            return true;
        }
        return nested(ec);
    }
    bool on_object_end(std::size_t, boost::system::error_code& ec) {
        if (--depth_ == 1) return finish_entry(ec);
        return true;
    }
    bool on_key_part(std::string_view s, std::size_t, boost::system::error_code&) {
        if (depth_ == 2) entry_.key_part(s);
        return true;
    }
    bool on_key(std::string_view s, std::size_t, boost::system::error_code&) {
        if (depth_ == 2) entry_.key(s);
        return true;
    }
    bool on_string_part(std::string_view s, std::size_t, boost::system::error_code& ec) {
        if (depth_ < 2) return not_an_entry(ec);
        if (depth_ == 2) entry_.string_part(s);
        return true;
    }
    bool on_string(std::string_view s, std::size_t n, boost::system::error_code& ec) {
        if (!on_string_part(s, n, ec)) return false;
        if (depth_ == 2) entry_.string_end();
        return true;
    }
    bool on_int64(std::int64_t v, std::string_view, boost::system::error_code& ec) {
        if (v < 0) return other_kind(ec);
        return on_uint64(static_cast<std::uint64_t>(v), {}, ec);
    }
    bool on_uint64(std::uint64_t v, std::string_view, boost::system::error_code& ec) {
        if (depth_ < 2) return not_an_entry(ec);
        if (depth_ == 2) entry_.number(v);
        return true;
    }
    bool on_double(double, std::string_view, boost::system::error_code& ec) { return other_kind(ec); }
    bool on_bool(bool, boost::system::error_code& ec) { return other_kind(ec); }
    bool on_null(boost::system::error_code& ec) {
        if (depth_ == 1) return not_an_entry(ec);
        if (depth_ == 2) entry_.null();  // (the list itself may be null: no entries)
        return true;
    }

private:
    // An object or array: inside an entry, wrong for a field it reads and
    // skipped for any other.
    bool nested(boost::system::error_code& ec) {
        if (depth_ == 1) return not_an_entry(ec);
        if (depth_ == 2) entry_.wrong_kind();
        ++depth_;
        return true;
    }
    // A value of the kind its field does not take (or not an entry at all).
    bool other_kind(boost::system::error_code& ec) {
        if (depth_ < 2) return not_an_entry(ec);
        if (depth_ == 2) entry_.wrong_kind();
        return true;
    }
    // A value where the list (depth 0) or one of its entries (depth 1) should be.
    bool not_an_entry(boost::system::error_code& ec) {
        return fail(ec, depth_ == 0 ? "KV list is not a JSON array" : "KV entry is not a JSON object");
    }
    bool finish_entry(boost::system::error_code& ec) {
        std::string why;
        if (entry_.skipped(*skip_, why)) return true;
        if (!why.empty()) return fail(ec, std::move(why));
        auto p = entry_.finish(why);
        if (!p) return fail(ec, std::move(why));
        out_->push_back(std::move(*p));
        return true;
    }

    kv_list_skip const* skip_;
    std::vector<kv_pair>* out_;
    std::size_t depth_ = 0;  // 1: in the list, 2: in an entry, more: inside one of its fields
    kv_entry_reader entry_;
};

// Reads a transaction's answer as a parsed document was read before it, with
// no document built: committed, the KV of each entry of Results (other kinds
// of result are passed over); rolled back, each entry of Errors (OpIndex and
// What). The other list is not looked at. As in a parsed document, the last
// of a field given twice counts - the list, an entry's KV, OpIndex or What -
// so what is wrong with the list is said when the answer ends (the first
// thing wrong with its last occurrence), not where it is seen.
class txn_reader : public json_reader_base {
public:
    explicit txn_reader(txn_result* out) : out_(out) {}

    bool on_object_begin(boost::system::error_code& ec) {
        if (skip_) return deeper();
        switch (at_) {
            case place::start: at_ = place::answer; return true;
            case place::answer:
                if (answer_field_ == answer_field::list) wrong_list();
                return deeper();
            case place::list: return enter_entry();
            case place::entry:
                if (entry_field_ == entry_field::kv) {
                    at_ = place::kv;
                    kv_.begin();
                    return true;
                }
                entry_wrong_kind();
                return deeper();
            case place::kv: kv_.wrong_kind(); return deeper();
        }
        return fail(ec, "txn answer: unexpected object");
    }
    bool on_object_end(std::size_t, boost::system::error_code&) {
        if (skip_) return shallower();
        switch (at_) {
            case place::kv: {
                at_ = place::entry;
                std::string why;
                auto p = kv_.finish(why);
                entry_kv_ = p ? kv_state{std::move(*p), {}} : kv_state{std::nullopt, std::move(why)};
                return true;
            }
            case place::entry: at_ = place::list; return finish_entry();
            default: at_ = place::start; return true;  // the answer
        }
    }
    bool on_array_begin(boost::system::error_code& ec) {
        if (skip_) return deeper();
        switch (at_) {
            case place::start: return fail(ec, "txn answer is not a JSON object");
            case place::answer:
                if (answer_field_ == answer_field::other) return deeper();
                at_ = place::list;
                return true;
            case place::list:
                note(list_name() + " entry is not a JSON object");
                return deeper();
            case place::entry: entry_wrong_kind(); return deeper();
            case place::kv: kv_.wrong_kind(); return deeper();
        }
        return true;
    }
    bool on_array_end(std::size_t, boost::system::error_code&) {
        if (skip_) return shallower();
        at_ = place::answer;  // the end of the list
        return true;
    }
    bool on_key_part(std::string_view s, std::size_t, boost::system::error_code&) {
        if (skip_) return true;
        if (at_ == place::kv) kv_.key_part(s);
        else name_.append(s.data(), s.size());
        return true;
    }
    bool on_key(std::string_view s, std::size_t, boost::system::error_code&) {
        if (skip_) return true;
        if (at_ == place::kv) {
            kv_.key(s);
            return true;
        }
        name_.append(s.data(), s.size());
        if (at_ == place::answer) {
            answer_field_ = name_ == list_name() ? answer_field::list : answer_field::other;
            if (answer_field_ == answer_field::list) {  // again: this one counts
                out_->results.clear();
                out_->errors.clear();
                list_failure_.clear();
            }
        } else if (at_ == place::entry) {
            if (out_->committed) entry_field_ = name_ == "KV" ? entry_field::kv : entry_field::other;
            else entry_field_ = name_ == "OpIndex" ? entry_field::op_index
                                : name_ == "What"  ? entry_field::what
                                                   : entry_field::other;
        }
        name_.clear();
        return true;
    }
    bool on_string_part(std::string_view s, std::size_t, boost::system::error_code& ec) {
        if (skip_) return true;
        if (at_ == place::kv) {
            kv_.string_part(s);
            return true;
        }
        if (at_ == place::entry && entry_field_ == entry_field::what) {
            if (!in_string_) {
                in_string_ = true;
                error_.what.clear();
                what_bad_ = false;
            }
            error_.what.append(s.data(), s.size());
            return true;
        }
        return scalar(ec);
    }
    bool on_string(std::string_view s, std::size_t n, boost::system::error_code& ec) {
        if (!on_string_part(s, n, ec)) return false;
        in_string_ = false;
        if (!skip_ && at_ == place::kv) kv_.string_end();
        return true;
    }
    bool on_int64(std::int64_t v, std::string_view, boost::system::error_code& ec) {
        if (v >= 0) return on_uint64(static_cast<std::uint64_t>(v), {}, ec);
        return other_kind(ec);
    }
    bool on_uint64(std::uint64_t v, std::string_view, boost::system::error_code& ec) {
        if (skip_) return true;
        if (at_ == place::kv) {
            kv_.number(v);
            return true;
        }
        if (at_ == place::entry && entry_field_ == entry_field::op_index) {
            error_.op_index = static_cast<std::size_t>(v);
            op_index_bad_ = false;
            return true;
        }
        return scalar(ec);
    }
    bool on_double(double, std::string_view, boost::system::error_code& ec) { return other_kind(ec); }
    bool on_bool(bool, boost::system::error_code& ec) { return other_kind(ec); }
    bool on_null(boost::system::error_code& ec) {
        if (skip_) return true;
        switch (at_) {
            case place::kv: kv_.null(); return true;
            case place::entry:  // a null reads as missing
                if (entry_field_ == entry_field::kv) entry_kv_ = {};
                if (entry_field_ == entry_field::op_index) {
                    error_.op_index = 0;
                    op_index_bad_ = false;
                }
                if (entry_field_ == entry_field::what) {
                    error_.what.clear();
                    what_bad_ = false;
                }
                return true;
            case place::answer: return true;  // a null list: no entries
            default: return scalar(ec);
        }
    }
    bool on_document_end(boost::system::error_code& ec) {
        if (!list_failure_.empty()) return fail(ec, std::move(list_failure_));
        return true;
    }

private:
    enum class place { start, answer, list, entry, kv };
    enum class answer_field { list, other };
    enum class entry_field { kv, op_index, what, other };
    // An entry's KV as read: the pair, or what is wrong with it (neither: none, or null).
    struct kv_state {
        std::optional<kv_pair> pair;
        std::string failure;
    };

    bool deeper() {
        ++skip_;
        return true;
    }
    bool shallower() {
        --skip_;
        return true;
    }
    std::string list_name() const { return out_->committed ? "Results" : "Errors"; }
    // The first thing wrong with the list's occurrence being read.
    void note(std::string why) {
        if (list_failure_.empty()) list_failure_ = std::move(why);
    }
    void wrong_list() { note(list_name() + " is not a JSON array"); }
    bool enter_entry() {
        at_ = place::entry;
        entry_field_ = entry_field::other;
        entry_kv_ = {};
        error_ = {};
        op_index_bad_ = what_bad_ = false;
        return true;
    }
    // An entry's field given a value of a kind it does not take.
    void entry_wrong_kind() {
        switch (entry_field_) {
            case entry_field::kv: entry_kv_ = kv_state{std::nullopt, "KV entry is not a JSON object"}; break;
            case entry_field::op_index: op_index_bad_ = true; break;
            case entry_field::what: what_bad_ = true; break;
            case entry_field::other: break;
        }
    }
    bool finish_entry() {
        if (out_->committed) {
            if (!entry_kv_.failure.empty()) note(std::move(entry_kv_.failure));
            else if (entry_kv_.pair) out_->results.push_back(std::move(*entry_kv_.pair));
        } else if (op_index_bad_) {
            note("OpIndex is not an unsigned integer");
        } else if (what_bad_) {
            note("What is not a string");
        } else {
            out_->errors.push_back(std::move(error_));
        }
        return true;
    }
    // A string, number, boolean or null where the answer, the list or an
    // entry should be, or as a field's value.
    bool scalar(boost::system::error_code& ec) {
        switch (at_) {
            case place::start: return fail(ec, "txn answer is not a JSON object");
            case place::answer:
                if (answer_field_ == answer_field::list) wrong_list();
                return true;
            case place::list: note(list_name() + " entry is not a JSON object"); return true;
            case place::entry: entry_wrong_kind(); return true;
            case place::kv: kv_.wrong_kind(); return true;
        }
        return true;
    }
    bool other_kind(boost::system::error_code& ec) {
        if (skip_) return true;
        return scalar(ec);
    }

    txn_result* out_;
    place at_ = place::start;
    std::size_t skip_ = 0;  // inside a value no reader looks at, this many levels deep
    answer_field answer_field_ = answer_field::other;
    entry_field entry_field_ = entry_field::other;
    bool in_string_ = false;
    std::string name_;
    std::string list_failure_;
    kv_state entry_kv_;
    txn_error error_;
    bool op_index_bad_ = false, what_bad_ = false;
    kv_entry_reader kv_;
};

}  // namespace

std::vector<kv_pair> decode_kv_list(std::string_view body, kv_list_skip const& skip) {
    std::vector<kv_pair> out;
    read_json<kv_list_reader>(body, &skip, &out);
    return out;
}

session_behavior decode_behavior(std::string_view b) {
    if (b.empty() || b == "release") return session_behavior::release;
    if (b == "delete") return session_behavior::delete_keys;
    throw decode_failure{"unknown session Behavior \"" + std::string(b) + "\""};
}

session_info decode_session(json::value const& v) {
    auto const& o = as_object(v, "session");
    session_info s;
    s.id = get_string(o, "ID");
    s.name = get_string(o, "Name");
    s.node = get_string(o, "Node");
    s.lock_delay = std::chrono::nanoseconds{get_i64(o, "LockDelay")};
    s.behavior = decode_behavior(get_string(o, "Behavior"));
    if (auto const ttl = get_string(o, "TTL"); !ttl.empty()) {
        auto d = tenure::detail::parse_go_duration(ttl);
        if (!d.value) throw decode_failure{"session TTL: " + d.error};
        s.ttl = *d.value;
    }
    s.node_checks = get_string_array(o, "NodeChecks");
    if (auto const* sc = o.if_contains("ServiceChecks"); sc && !sc->is_null()) {
        for (auto const& e : as_array(*sc, "ServiceChecks"))
            s.service_checks.push_back(get_string(as_object(e, "ServiceChecks entry"), "ID"));
    }
    s.create_index = get_u64(o, "CreateIndex");
    s.modify_index = get_u64(o, "ModifyIndex");
    return s;
}

std::vector<session_info> decode_session_list(json::value const& v) {
    std::vector<session_info> out;
    if (v.is_null()) return out;
    for (auto const& e : as_array(v, "session list")) out.push_back(decode_session(e));
    return out;
}

std::string encode_session_request(session_request const& r) {
    json::object o;
    o["Name"] = r.name;
    if (!r.node.empty()) o["Node"] = r.node;
    if (r.ttl.count() > 0) o["TTL"] = tenure::detail::format_go_duration(r.ttl);
    // Always sent, 0 included (the Go api omits 0 and so gets the 15s default).
    // Milliseconds as the Go api writes them; a positive sub-millisecond delay
    // rounds up to 1ms rather than disabling the delay.
    std::int64_t ms = 0;
    if (r.lock_delay.count() > 0) {
        ms = std::chrono::duration_cast<std::chrono::milliseconds>(r.lock_delay).count();
        if (ms == 0) ms = 1;
    }
    o["LockDelay"] = std::to_string(ms) + "ms";
    o["Behavior"] = r.behavior == session_behavior::delete_keys ? "delete" : "release";
    if (r.node_checks) {
        json::array a;
        for (auto const& c : *r.node_checks) a.emplace_back(c);
        o["NodeChecks"] = std::move(a);
    }
    if (!r.service_checks.empty()) {
        json::array a;
        for (auto const& c : r.service_checks) a.emplace_back(json::object{{"ID", c}});
        o["ServiceChecks"] = std::move(a);
    }
    return json::serialize(o);
}

namespace {

// `s` as a JSON string, appended: quoted and escaped by Boost.JSON's
// serializer, in pieces through a buffer on the stack.
void append_json_string(std::string& out, json::serializer& sr, std::string_view s) {
    sr.reset(s);
    char buf[256];
    while (!sr.done()) {
        auto const part = sr.read(buf, sizeof buf);
        out.append(part.data(), part.size());
    }
}

void append_u64(std::string& out, std::uint64_t v) {
    char buf[20];
    auto const end = std::to_chars(buf, buf + sizeof buf, v).ptr;
    out.append(buf, end);
}

}  // namespace

// Written straight into the body, in json::serialize's shape and field order:
// a json::array of objects built first and then serialized cost about 6,000
// instructions for a one-operation lock, a third of the client's JSON work
// per acquire at 10,000 elections.
std::string encode_txn(std::vector<txn_op> const& ops) {
    std::size_t size = 2;
    for (auto const& op : ops)
        size += 96 + op.verb.size() + op.key.size() + op.session.size() + (op.value ? op.value->size() * 4 / 3 + 4 : 0);
    std::string out;
    out.reserve(size);
    json::serializer sr;
    out += '[';
    for (std::size_t i = 0; i < ops.size(); ++i) {
        auto const& op = ops[i];
        if (i != 0) out += ',';
        out += R"({"KV":{"Verb":)";
        append_json_string(out, sr, op.verb);
        out += R"(,"Key":)";
        append_json_string(out, sr, op.key);
        if (op.value) {
            out += R"(,"Value":")";  // base64: nothing to escape
            tenure::detail::append_base64(out, *op.value);
            out += '"';
        }
        out += R"(,"Flags":)";
        append_u64(out, op.flags);
        out += R"(,"Index":)";
        append_u64(out, op.index);
        out += R"(,"Session":)";
        append_json_string(out, sr, op.session);
        out += "}}";
    }
    out += ']';
    return out;
}

std::string encode_check(check_registration const& c) {
    json::object o;
    if (!c.id.empty()) o["ID"] = c.id;
    o["Name"] = c.name;
    if (c.ttl.count() > 0) o["TTL"] = tenure::detail::format_go_duration(c.ttl);
    if (!c.status.empty()) o["Status"] = c.status;
    if (!c.notes.empty()) o["Notes"] = c.notes;
    return json::serialize(o);
}

query_meta decode_meta(http::fields const& h) {
    query_meta m;
    m.index = tenure::detail::parse_u64(trim(h["X-Consul-Index"])).value_or(0);
    if (m.index < 1) m.index = 1;
    m.known_leader = trim(h["X-Consul-KnownLeader"]) == "true";
    m.last_contact_ms = tenure::detail::parse_u64(trim(h["X-Consul-LastContact"])).value_or(0);
    return m;
}

txn_result decode_txn_result(std::string_view body, bool committed, std::size_t ops) {
    txn_result out;
    out.committed = committed;
    if (committed) out.results.reserve(std::min<std::size_t>(ops, 64));  // (Consul takes 64 at most)
    read_json<txn_reader>(body, &out);
    if (!committed && out.errors.empty()) throw decode_failure{"409 without Errors"};
    return out;
}

}  // namespace tenure::consul::detail
