// A strict parser of the Prometheus text exposition format 0.0.4, for tests:
// anything the format does not allow (or that Prometheus would reject, such
// as a sample before its TYPE, a family split in two, a duplicate series, a
// histogram whose buckets are not cumulative or lack +Inf) throws
// std::runtime_error naming the line. Shared by the unit and integration tests.
#pragma once

#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tenure::test {

struct prom_sample {
    std::string name;
    std::map<std::string, std::string> labels;
    double value = 0;
};

struct prom_family {
    std::string name, type, help;
    std::vector<prom_sample> samples;
};

struct prom_text {
    std::map<std::string, prom_family> families;

    // The value of one series; throws when absent.
    double value(std::string const& name, std::map<std::string, std::string> const& labels = {}) const {
        for (auto const& [fname, f] : families)
            for (auto const& s : f.samples)
                if (s.name == name && s.labels == labels) return s.value;
        throw std::runtime_error("no series " + name);
    }
    bool has(std::string const& name) const {
        for (auto const& [fname, f] : families)
            for (auto const& s : f.samples)
                if (s.name == name) return true;
        return false;
    }
};

inline prom_text parse_prometheus(std::string_view text) {
    static std::regex const metric_name("[a-zA-Z_:][a-zA-Z0-9_:]*");
    static std::regex const label_name("[a-zA-Z_][a-zA-Z0-9_]*");
    prom_text out;
    std::set<std::string> closed;  // families whose samples ended
    std::string current;           // family of the previous sample
    std::set<std::string> series;  // name + labels, for duplicates
    int line_no = 0;
    auto fail = [&](std::string const& why) -> std::runtime_error {
        return std::runtime_error("prometheus text line " + std::to_string(line_no) + ": " + why);
    };
    if (!text.empty() && text.back() != '\n') throw std::runtime_error("prometheus text: no final newline");

    auto parse_value = [&](std::string const& v) -> double {
        if (v == "+Inf") return INFINITY;
        if (v == "-Inf") return -INFINITY;
        if (v == "NaN") return NAN;
        if (v.empty()) throw fail("empty value");
        char* end = nullptr;
        double d = std::strtod(v.c_str(), &end);
        if (end != v.c_str() + v.size() || v.find_first_of("iInN") != std::string::npos)
            throw fail("bad value '" + v + "'");
        return d;
    };
    auto family_of = [&](std::string const& name) -> prom_family& {
        if (auto it = out.families.find(name); it != out.families.end()) return it->second;
        for (std::string suffix : {"_bucket", "_sum", "_count"}) {
            if (name.size() > suffix.size() && name.ends_with(suffix)) {
                auto base = name.substr(0, name.size() - suffix.size());
                auto it = out.families.find(base);
                if (it != out.families.end() &&
                    (it->second.type == "histogram" || (it->second.type == "summary" && suffix != "_bucket")))
                    return it->second;
            }
        }
        throw fail("sample " + name + " before its # TYPE");
    };

    std::size_t pos = 0;
    while (pos < text.size()) {
        ++line_no;
        std::size_t nl = text.find('\n', pos);
        std::string line(text.substr(pos, nl - pos));
        pos = nl + 1;
        if (line.empty()) throw fail("empty line");
        if (line[0] == '#') {
            std::smatch m;
            static std::regex const meta("# (HELP|TYPE) ([^ ]+) ?(.*)");
            if (!std::regex_match(line, m, meta)) continue;  // a plain comment
            std::string name = m[2];
            if (!std::regex_match(name, metric_name)) throw fail("bad metric name " + name);
            auto& f = out.families[name];
            f.name = name;
            if (closed.count(name) || (!f.samples.empty())) throw fail("metadata after samples of " + name);
            if (m[1] == "TYPE") {
                if (!f.type.empty()) throw fail("second TYPE for " + name);
                std::string t = m[3];
                if (t != "counter" && t != "gauge" && t != "histogram" && t != "summary" && t != "untyped")
                    throw fail("bad type " + t);
                f.type = t;
            } else {
                if (!f.help.empty()) throw fail("second HELP for " + name);
                f.help = m[3];
                if (f.help.empty()) f.help = " ";
            }
            continue;
        }
        // name{labels} value [timestamp]
        prom_sample s;
        std::size_t i = 0;
        while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
        s.name = line.substr(0, i);
        if (!std::regex_match(s.name, metric_name)) throw fail("bad metric name '" + s.name + "'");
        if (i < line.size() && line[i] == '{') {
            ++i;
            while (true) {
                if (i >= line.size()) throw fail("unterminated labels");
                if (line[i] == '}') {
                    ++i;
                    break;
                }
                std::size_t eq = line.find('=', i);
                if (eq == std::string::npos) throw fail("label without '='");
                std::string lname = line.substr(i, eq - i);
                if (!std::regex_match(lname, label_name)) throw fail("bad label name '" + lname + "'");
                i = eq + 1;
                if (i >= line.size() || line[i] != '"') throw fail("label value not quoted");
                ++i;
                std::string v;
                while (true) {
                    if (i >= line.size()) throw fail("unterminated label value");
                    char c = line[i++];
                    if (c == '"') break;
                    if (c == '\\') {
                        if (i >= line.size()) throw fail("dangling escape");
                        char e = line[i++];
                        if (e == 'n') v += '\n';
                        else if (e == '\\' || e == '"') v += e;
                        else throw fail("bad escape");
                    } else {
                        v += c;
                    }
                }
                if (!s.labels.emplace(lname, v).second) throw fail("duplicate label " + lname);
                if (i < line.size() && line[i] == ',') ++i;
                else if (i < line.size() && line[i] != '}') throw fail("expected ',' or '}'");
            }
        }
        if (i >= line.size() || line[i] != ' ') throw fail("expected a space before the value");
        ++i;
        std::string rest = line.substr(i);
        std::string value = rest.substr(0, rest.find(' '));
        if (rest.find(' ') != std::string::npos) {
            std::string ts = rest.substr(rest.find(' ') + 1);
            if (ts.empty() || ts.find_first_not_of("-0123456789") != std::string::npos) throw fail("bad timestamp");
        }
        s.value = parse_value(value);

        prom_family& f = family_of(s.name);
        if (f.type.empty()) throw fail("sample " + s.name + " before its # TYPE");
        if (closed.count(f.name)) throw fail("family " + f.name + " is not contiguous");
        if (!current.empty() && current != f.name) closed.insert(current);
        current = f.name;
        std::string key = s.name + "{";
        for (auto const& [k, v] : s.labels) key += k + "=\"" + v + "\",";
        if (!series.insert(key).second) throw fail("duplicate series " + key + "}");
        if (f.type == "histogram" && s.name == f.name) throw fail("histogram sample without a suffix");
        if ((f.type == "counter" || f.type == "histogram") && !std::isnan(s.value) && s.value < 0 &&
            !s.name.ends_with("_sum"))
            throw fail("negative counter");
        f.samples.push_back(std::move(s));
    }

    // Histograms: per label set, le increasing, cumulative, ending in +Inf == _count, with a _sum.
    for (auto const& [name, f] : out.families) {
        if (f.type != "histogram") continue;
        std::map<std::map<std::string, std::string>, std::vector<std::pair<double, double>>> buckets;
        std::map<std::map<std::string, std::string>, double> counts;
        std::set<std::map<std::string, std::string>> sums;
        for (auto const& s : f.samples) {
            auto labels = s.labels;
            if (s.name == name + "_bucket") {
                auto le = labels.find("le");
                if (le == labels.end()) throw std::runtime_error(name + ": bucket without le");
                double bound = le->second == "+Inf" ? INFINITY : std::strtod(le->second.c_str(), nullptr);
                labels.erase(le);
                buckets[labels].emplace_back(bound, s.value);
            } else if (s.name == name + "_count") {
                counts[labels] = s.value;
            } else if (s.name == name + "_sum") {
                sums.insert(labels);
            }
        }
        for (auto const& [labels, bs] : buckets) {
            for (std::size_t k = 1; k < bs.size(); ++k) {
                if (!(bs[k].first > bs[k - 1].first)) throw std::runtime_error(name + ": le not increasing");
                if (bs[k].second < bs[k - 1].second) throw std::runtime_error(name + ": buckets not cumulative");
            }
            if (bs.empty() || !std::isinf(bs.back().first)) throw std::runtime_error(name + ": no +Inf bucket");
            if (!counts.count(labels) || counts[labels] != bs.back().second)
                throw std::runtime_error(name + ": _count differs from the +Inf bucket");
            if (!sums.count(labels)) throw std::runtime_error(name + ": no _sum");
        }
    }
    return out;
}

}  // namespace tenure::test
