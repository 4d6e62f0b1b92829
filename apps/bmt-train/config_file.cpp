#include "config_file.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <sstream>

namespace bmt_train {

namespace {

bool is_bare_key_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; }

// The number of single-character edits from a to b (for "did you mean").
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// TOML's decimal integers and floats (underscores between digits), inf and nan, with a sign.
bool is_toml_number(const std::string& t) {
  std::size_t i = 0;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
  const std::string rest = t.substr(i);
  if (rest == "inf" || rest == "nan") return true;
  // digits with single underscores between them; returns false when there are none
  auto digits = [&](bool leading_zero_alone) {
    const std::size_t begin = i;
    if (i >= t.size() || !std::isdigit(static_cast<unsigned char>(t[i]))) return false;
    while (i < t.size()) {
      if (std::isdigit(static_cast<unsigned char>(t[i]))) ++i;
      else if (t[i] == '_' && i + 1 < t.size() && std::isdigit(static_cast<unsigned char>(t[i + 1])) && i > begin) ++i;
      else break;
    }
    return !(leading_zero_alone && t[begin] == '0' && i - begin > 1);
  };
  if (!digits(true)) return false;
  if (i < t.size() && t[i] == '.') {
    ++i;
    if (!digits(false)) return false;
  }
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
    if (!digits(false)) return false;
  }
  return i == t.size();
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// One value as written in the file.
struct Value {
  enum Kind { string, boolean, number, word } kind = word;
  std::string text;  // the string's content, the number without underscores, or the word as written
};

class LineReader {
 public:
  LineReader(std::string where, const std::string& line) : where_(std::move(where)), line_(line) {}

  [[noreturn]] void refuse(const std::string& what) const { throw CLI::ConversionError(where_ + what); }

  void skip_blanks() {
    while (pos_ < line_.size() && (line_[pos_] == ' ' || line_[pos_] == '\t' || line_[pos_] == '\r')) ++pos_;
  }
  bool at_end_or_comment() {
    skip_blanks();
    return pos_ >= line_.size() || line_[pos_] == '#';
  }
  char peek() const { return pos_ < line_.size() ? line_[pos_] : '\0'; }

  std::string key() {
    if (peek() == '"' || peek() == '\'')
      refuse("expected a bare key (a long flag name without its dashes), found a quoted key");
    const std::size_t begin = pos_;
    while (pos_ < line_.size() && is_bare_key_char(line_[pos_])) ++pos_;
    if (pos_ == begin) refuse("expected key = value, found '" + line_.substr(begin) + "'");
    std::string k = line_.substr(begin, pos_ - begin);
    skip_blanks();
    if (peek() == '.') {
      std::string dotted = k + line_.substr(pos_, line_.find('=', pos_) - pos_);
      while (!dotted.empty() && (dotted.back() == ' ' || dotted.back() == '\t')) dotted.pop_back();
      refuse("expected a flag name, found the dotted key '" + dotted + "' (bmt-train's options have no sections)");
    }
    if (peek() != '=') refuse("expected '=' after the key '" + k + "', found " + found_here());
    ++pos_;
    skip_blanks();
    return k;
  }

  Value value(const std::string& key) {
    const char c = peek();
    if (c == '\0' || c == '#') refuse("expected a value for '" + key + "', found none");
    if (c == '[') refuse("expected one value for '" + key + "', found an array " + rest_of_value());
    if (c == '{') refuse("expected one value for '" + key + "', found an inline table " + rest_of_value());
    if (c == '"' || c == '\'') return {Value::string, quoted(key)};
    const std::size_t begin = pos_;
    while (pos_ < line_.size() && line_[pos_] != ' ' && line_[pos_] != '\t' && line_[pos_] != '#' &&
           line_[pos_] != '\r')
      ++pos_;
    std::string word = line_.substr(begin, pos_ - begin);
    if (word == "true" || word == "false") return {Value::boolean, word};
    if (is_toml_number(word)) {
      word.erase(std::remove(word.begin(), word.end(), '_'), word.end());
      return {Value::number, word};
    }
    return {Value::word, word};
  }

 private:
  std::string found_here() const {
    return pos_ >= line_.size() ? std::string("the end of the line") : "'" + line_.substr(pos_) + "'";
  }
  std::string rest_of_value() const {
    std::string r = line_.substr(pos_);
    while (!r.empty() && (r.back() == ' ' || r.back() == '\r')) r.pop_back();
    return r;
  }

  std::string quoted(const std::string& key) {
    const char quote = line_[pos_];
    if (line_.compare(pos_, 3, std::string(3, quote)) == 0)
      refuse("expected a one-line string for '" + key + "', found a multi-line string");
    ++pos_;
    std::string out;
    while (true) {
      if (pos_ >= line_.size()) refuse("expected the closing " + std::string(1, quote) + " of the string for '" + key +
                                       "', found the end of the line (unterminated string)");
      const char c = line_[pos_++];
      if (c == quote) return out;
      if (c != '\\' || quote == '\'') {
        out += c;
        continue;
      }
      if (pos_ >= line_.size()) continue;  // reported as unterminated above
      const char e = line_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case 'b': out += '\b'; break;
        case 't': out += '\t'; break;
        case 'n': out += '\n'; break;
        case 'f': out += '\f'; break;
        case 'r': out += '\r'; break;
        case 'u':
        case 'U': {
          const std::size_t n = e == 'u' ? 4 : 8;
          const std::string hex = line_.substr(pos_, n);
          if (hex.size() != n || !std::all_of(hex.begin(), hex.end(), [](char h) { return std::isxdigit(static_cast<unsigned char>(h)); }))
            refuse("expected " + std::to_string(n) + " hex digits after \\" + std::string(1, e) + " in the string for '" +
                   key + "', found '" + hex + "'");
          const unsigned long cp = std::stoul(hex, nullptr, 16);
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            refuse("expected a Unicode scalar value after \\" + std::string(1, e) + " in the string for '" + key +
                   "', found " + hex);
          append_utf8(out, static_cast<std::uint32_t>(cp));
          pos_ += n;
          break;
        }
        default:
          refuse("expected an escape of \\\" \\\\ \\b \\t \\n \\f \\r \\u or \\U in the string for '" + key + "', found \\" +
                 std::string(1, e));
      }
    }
  }

  std::string where_;
  const std::string& line_;
  std::size_t pos_ = 0;
};

}  // namespace

std::vector<CLI::ConfigItem> StrictConfig::from_config(std::istream& input) const {
  std::vector<CLI::ConfigItem> items;
  std::map<std::string, int> seen;  // key -> its line
  std::string line;
  for (int number = 1; std::getline(input, line); ++number) {
    if (number == 1 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);  // a UTF-8 byte order mark
    LineReader r("--config '" + path_ + "' line " + std::to_string(number) + ": ", line);
    if (r.at_end_or_comment()) continue;
    if (r.peek() == '[')
      r.refuse("expected key = value lines (bmt-train's options have no sections), found the section header '" +
               line.substr(line.find('[')) + "'");
    const std::string key = r.key();
    const auto known = keys_.find(key);
    if (known == keys_.end()) {
      std::string closest;
      std::size_t best = 3;  // suggest only names within two edits
      for (const auto& [name, kind] : keys_)
        if (const std::size_t d = edit_distance(key, name); d < best) best = d, closest = name;
      r.refuse("unknown key '" + key + "': expected a long flag name without its dashes (bmt-train --help lists them)" +
               (closest.empty() ? std::string() : ", such as '" + closest + "'"));
    }
    if (const auto it = seen.find(key); it != seen.end())
      r.refuse("'" + key + "' is set twice (lines " + std::to_string(it->second) + " and " + std::to_string(number) +
               "): expected each key once");
    seen[key] = number;
    const Value v = r.value(key);
    if (!r.at_end_or_comment())
      r.refuse("expected one value for '" + key + "' and then the end of the line or a # comment, found more after it");
    const auto text_of = [&] { return v.kind == Value::string ? "the string \"" + v.text + "\"" : v.text; };
    switch (known->second) {
      case ConfigValue::number:
        if (v.kind != Value::number)
          r.refuse("'" + key + "' takes a number, found " + text_of() +
                   (v.kind == Value::string ? " (write " + key + " = " + v.text + ")" : std::string()));
        break;
      case ConfigValue::text:
        if (v.kind != Value::string)
          r.refuse("'" + key + "' takes a quoted string, found " + v.text + " (write " + key + " = \"" + v.text + "\")");
        break;
      case ConfigValue::flag:
        if (v.kind != Value::boolean) r.refuse("'" + key + "' is a switch: expected true or false, found " + text_of());
        break;
    }
    CLI::ConfigItem item;
    item.name = key;
    item.inputs = {v.text};
    items.push_back(std::move(item));
  }
  return items;
}

std::string StrictConfig::to_config(const CLI::App* app, bool default_also, bool write_description,
                                    std::string prefix) const {
  return CLI::ConfigTOML().to_config(app, default_also, write_description, std::move(prefix));
}

}  // namespace bmt_train
