// mdring/plan/text_line.hpp: one line of mdring's text files (profiles, wisdom),
// read strictly. Words are separated by blanks; a count is decimal digits only (no
// sign: ">> size_t" would take "-1" as 2^64 - 1); a real is a finite number >= 0;
// a name holds only a link name's characters; end() refuses anything left on the
// line. Each returns false (or an empty optional) on a bad token, for the caller
// to throw its own error naming the file and line.
#pragma once

#include "../config.hpp"
#include "../topology/link_registry.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

MDRING_NAMESPACE_BEGIN

namespace detail {

class text_line {
public:
  explicit text_line(std::string_view line) : s_(line) {}

  // The next word; empty at the end of the line.
  std::string_view word() {
    while (i_ < s_.size() && blank(s_[i_])) ++i_;
    const std::size_t start = i_;
    while (i_ < s_.size() && !blank(s_[i_])) ++i_;
    return s_.substr(start, i_ - start);
  }
  // The rest of the line without its outer blanks.
  std::string_view rest() {
    while (i_ < s_.size() && blank(s_[i_])) ++i_;
    std::size_t end = s_.size();
    while (end > i_ && blank(s_[end - 1])) --end;
    const std::string_view r = s_.substr(i_, end - i_);
    i_ = s_.size();
    return r;
  }
  bool count(std::size_t& out) {
    const std::string_view w = word();
    if (w.empty() || !std::all_of(w.begin(), w.end(), [](char c) { return c >= '0' && c <= '9'; })) return false;
    const auto r = std::from_chars(w.data(), w.data() + w.size(), out);
    return r.ec == std::errc() && r.ptr == w.data() + w.size();
  }
  bool real(double& out) {
    const std::string w(word());
    if (w.empty()) return false;
    char* end = nullptr;
    out = std::strtod(w.c_str(), &end);
    return *end == 0 && std::isfinite(out) && out >= 0;
  }
  bool name(std::string& out) {
    const std::string_view w = word();
    if (w.empty() || !std::all_of(w.begin(), w.end(), is_link_name_char)) return false;
    out = std::string(w);
    return true;
  }
  // Nothing but blanks left.
  bool end() { return word().empty(); }

private:
  static bool blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }
  std::string_view s_;
  std::size_t i_ = 0;
};

// The lines of a text, as std::getline gives them: split at '\n', the last one
// without it included, no empty line after a final '\n'. Calls f(line) for each.
template <class F>
void for_each_line(std::string_view text, F&& f) {
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t nl = std::min(text.find('\n', pos), text.size());
    f(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
}

// A whole file into `out` (false: it cannot be opened or read), and a text into a
// file (false: it cannot be written whole). Plain stdio: no iostreams compiled for
// the profile and wisdom files.
inline bool read_text_file(const std::string& path, std::string& out) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  out.clear();
  char buf[4096];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const bool ok = !std::ferror(f);
  std::fclose(f);
  return ok;
}
inline bool write_text_file(const std::string& path, std::string_view text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const bool wrote = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  return std::fclose(f) == 0 && wrote;
}

}  // namespace detail

MDRING_NAMESPACE_END
