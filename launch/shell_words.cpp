#include "launch/shell_words.h"

#include <cctype>
#include <charconv>
#include <optional>

namespace llmplan::shell {

std::vector<std::string> split_blanks(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == ' ' || c == '\t' || c == '\n') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

namespace {

// ---------------------------------------------------------------- lexing

// One piece of a word as written: literal text, or an expansion bash would perform.
enum class PartKind { literal, variable, array_all, opaque };

struct Part {
  PartKind kind = PartKind::literal;
  std::string text;       // literal: the text; variable / array_all: the name; opaque: as written
  std::string written;    // variable / array_all: as written ("$NAME", "${NAME:-x}"), kept when unset
  bool quoted = false;    // inside quotes: never split
  bool joined = false;    // array_all: "${NAME[*]}", the elements joined by blanks in one word
  // ${NAME:-word} / ${NAME-word} / ${NAME:=word}: the default word's parts.
  bool has_default = false;
  bool default_if_empty = true;  // the ':' forms: also when set but empty
  std::vector<Part> default_parts;
};

struct RawWord {
  std::vector<Part> parts;
  int line = 0;
  bool is_literal(const char* s) const {
    return parts.size() == 1 && parts[0].kind == PartKind::literal && !parts[0].quoted && parts[0].text == s;
  }
};

enum class TokenKind { word, op, array };

struct Token {
  TokenKind kind = TokenKind::word;
  RawWord word;                   // word
  std::string op;                 // op: "\n" ";" "&&" "||" "|" "&" "(" ")"
  std::string array_name;         // array: NAME of NAME=( ... ) or NAME+=( ... )
  bool append = false;
  std::vector<RawWord> elements;  // array
  int line = 0;
};

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

class Lexer {
 public:
  Lexer(const std::string& text, const std::string& origin, int first_line = 1)
      : t_(text), origin_(origin), line_(first_line) {}

  Result<std::vector<Token>> lex() {
    std::vector<Token> out;
    if (Status st = lex_into(&out, false); !st) return st;
    return out;
  }

 private:
  Status error(const std::string& what, int line) const {
    return Status::bad_input(origin_ + ": line " + std::to_string(line) + ": " + what);
  }
  char at(size_t i) const { return i < t_.size() ? t_[i] : '\0'; }

  static void add_literal(RawWord* w, char c, bool quoted) {
    if (!w->parts.empty() && w->parts.back().kind == PartKind::literal && w->parts.back().quoted == quoted) {
      w->parts.back().text += c;
      return;
    }
    Part p;
    p.text = std::string(1, c);
    p.quoted = quoted;
    w->parts.push_back(std::move(p));
  }
  static void add_quoted_empty(RawWord* w) {
    Part p;
    p.quoted = true;
    w->parts.push_back(std::move(p));
  }

  // The word so far is `NAME=` or `NAME+=` (literal, unquoted): an array literal follows.
  static bool array_head(const RawWord& w, std::string* name, bool* append) {
    if (w.parts.size() != 1 || w.parts[0].kind != PartKind::literal || w.parts[0].quoted) return false;
    const std::string& s = w.parts[0].text;
    if (s.size() < 2 || s.back() != '=' || !is_name_start(s[0])) return false;
    size_t end = s.size() - 1;
    *append = s[end - 1] == '+';
    if (*append) --end;
    for (size_t i = 0; i < end; ++i)
      if (!is_name_char(s[i])) return false;
    *name = s.substr(0, end);
    return true;
  }

  // Skips to the ')' closing an opening '(' at pos_ - 1, minding quotes and nesting.
  Status skip_parens(int depth, int start_line) {
    while (pos_ < t_.size() && depth > 0) {
      const char c = t_[pos_];
      if (c == '\n') ++line_;
      if (c == '\\') {
        pos_ += 2;
        continue;
      }
      if (c == '\'' || c == '"') {
        const char q = c;
        ++pos_;
        while (pos_ < t_.size() && t_[pos_] != q) {
          if (t_[pos_] == '\\' && q == '"') ++pos_;
          if (at(pos_) == '\n') ++line_;
          ++pos_;
        }
        if (pos_ >= t_.size()) return error(std::string("unterminated ") + (q == '"' ? "double" : "single") + " quote inside $(...)", start_line);
      } else if (c == '(') {
        ++depth;
      } else if (c == ')') {
        --depth;
      }
      ++pos_;
    }
    if (depth > 0) return error("unterminated $( ... ) (expected a closing ')')", start_line);
    return Status::ok();
  }

  // At '$' (pos_): appends the expansion to `w`.
  Status lex_dollar(RawWord* w, bool quoted) {
    const size_t start = pos_;
    const int start_line = line_;
    const char n = at(pos_ + 1);
    if (n == '(') {
      pos_ += 2;
      if (Status st = skip_parens(1, start_line); !st) return st;
      Part p;
      p.kind = PartKind::opaque;
      p.text = t_.substr(start, pos_ - start);
      p.quoted = quoted;
      w->parts.push_back(std::move(p));
      return Status::ok();
    }
    if (n == '{') {
      size_t i = pos_ + 2;
      int depth = 1;
      while (i < t_.size() && depth > 0) {
        if (t_[i] == '\\') {
          i += 2;
          continue;
        }
        if (t_[i] == '\'' && quoted == false) {
          const size_t close = t_.find('\'', i + 1);
          if (close == std::string::npos) break;
          i = close;
        } else if (t_[i] == '"') {
          size_t j = i + 1;
          while (j < t_.size() && t_[j] != '"') j += t_[j] == '\\' ? 2 : 1;
          i = j;
        } else if (t_[i] == '{') {
          ++depth;
        } else if (t_[i] == '}') {
          --depth;
          if (depth == 0) break;
        } else if (t_[i] == '\n') {
          ++line_;
        }
        ++i;
      }
      if (i >= t_.size() || depth != 0) return error("unterminated ${ ... } (expected a closing '}')", start_line);
      const std::string inner = t_.substr(pos_ + 2, i - pos_ - 2);
      pos_ = i + 1;
      return add_braced(w, inner, t_.substr(start, pos_ - start), quoted, start_line);
    }
    if (n == '\'' && !quoted) {  // $'...': ANSI-C quoting, the common escapes only
      size_t i = pos_ + 2;
      std::string s;
      while (i < t_.size() && t_[i] != '\'') {
        if (t_[i] == '\\' && i + 1 < t_.size()) {
          const char e = t_[i + 1];
          s += e == 'n' ? '\n' : e == 't' ? '\t' : e;
          i += 2;
          continue;
        }
        s += t_[i++];
      }
      if (i >= t_.size()) return error("unterminated $'...' quote", start_line);
      for (char c : s) add_literal(w, c, true);
      if (s.empty()) add_quoted_empty(w);
      pos_ = i + 1;
      return Status::ok();
    }
    Part p;
    p.quoted = quoted;
    if (is_name_start(n)) {
      size_t i = pos_ + 1;
      while (i < t_.size() && is_name_char(t_[i])) ++i;
      p.kind = PartKind::variable;
      p.text = t_.substr(pos_ + 1, i - pos_ - 1);
      pos_ = i;
    } else if (std::isdigit(static_cast<unsigned char>(n)) || (n != '\0' && std::string("@*#?$!-").find(n) != std::string::npos)) {
      p.kind = PartKind::variable;
      p.text = std::string(1, n);
      pos_ += 2;
    } else {  // a lone '$' is literal
      add_literal(w, '$', quoted);
      ++pos_;
      return Status::ok();
    }
    p.written = t_.substr(start, pos_ - start);
    w->parts.push_back(std::move(p));
    return Status::ok();
  }

  Status add_braced(RawWord* w, const std::string& inner, const std::string& as_written, bool quoted, int line) {
    Part p;
    p.quoted = quoted;
    p.written = as_written;
    size_t i = 0;
    if (!inner.empty() && std::isdigit(static_cast<unsigned char>(inner[0]))) {
      while (i < inner.size() && std::isdigit(static_cast<unsigned char>(inner[i]))) ++i;
    } else if (!inner.empty() && is_name_start(inner[0])) {
      while (i < inner.size() && is_name_char(inner[i])) ++i;
    }
    const std::string name = inner.substr(0, i);
    const std::string rest = inner.substr(i);
    if (name.empty()) {
      p.kind = PartKind::opaque;  // ${#NAME}, ${!NAME}, ...
      p.text = as_written;
    } else if (rest.empty()) {
      p.kind = PartKind::variable;
      p.text = name;
    } else if (rest == "[@]" || rest == "[*]") {
      p.kind = PartKind::array_all;
      p.text = name;
      p.joined = rest == "[*]";
    } else if (rest.rfind(":-", 0) == 0 || rest.rfind(":=", 0) == 0 || rest[0] == '-' || rest[0] == '=') {
      const bool colon = rest[0] == ':';
      p.kind = PartKind::variable;
      p.text = name;
      p.has_default = true;
      p.default_if_empty = colon;
      const std::string word = rest.substr(colon ? 2 : 1);
      Lexer sub(word, origin_, line);
      Result<std::vector<Token>> toks = sub.lex();
      if (!toks) return toks.status();
      bool first = true;
      for (const Token& tk : *toks) {
        if (tk.kind != TokenKind::word) continue;
        if (!first) {  // blanks between words of the default are kept
          Part blank;
          blank.text = " ";
          blank.quoted = true;
          p.default_parts.push_back(blank);
        }
        first = false;
        for (const Part& dp : tk.word.parts) p.default_parts.push_back(dp);
      }
    } else {
      p.kind = PartKind::opaque;  // ${NAME:+x}, ${NAME#x}, ${NAME[1]}, ...
      p.text = as_written;
    }
    w->parts.push_back(std::move(p));
    return Status::ok();
  }

  Status lex_double_quoted(RawWord* w) {
    const int start_line = line_;
    ++pos_;
    bool any = false;
    while (pos_ < t_.size() && t_[pos_] != '"') {
      const char c = t_[pos_];
      if (c == '\\' && pos_ + 1 < t_.size()) {
        const char e = t_[pos_ + 1];
        if (e == '\n') {
          ++line_;
          pos_ += 2;
          continue;
        }
        if (e == '"' || e == '\\' || e == '$' || e == '`') {
          add_literal(w, e, true);
          pos_ += 2;
          any = true;
          continue;
        }
      }
      if (c == '$') {
        if (Status st = lex_dollar(w, true); !st) return st;
        any = true;
        continue;
      }
      if (c == '`') {
        const size_t close = t_.find('`', pos_ + 1);
        if (close == std::string::npos) return error("unterminated backquote", line_);
        Part p;
        p.kind = PartKind::opaque;
        p.text = t_.substr(pos_, close - pos_ + 1);
        p.quoted = true;
        w->parts.push_back(std::move(p));
        pos_ = close + 1;
        any = true;
        continue;
      }
      if (c == '\n') ++line_;
      add_literal(w, c, true);
      any = true;
      ++pos_;
    }
    if (pos_ >= t_.size()) return error("unterminated double quote (expected a closing \")", start_line);
    ++pos_;
    if (!any) add_quoted_empty(w);
    return Status::ok();
  }

  // Lexes tokens into `out` until the end, or (in_array) until the ')' closing an array.
  Status lex_into(std::vector<Token>* out, bool in_array) {
    RawWord cur;
    bool have = false;
    const int array_line = line_;
    auto flush = [&]() {
      if (!have) return;
      Token tk;
      tk.kind = TokenKind::word;
      tk.word = std::move(cur);
      tk.line = tk.word.line;
      out->push_back(std::move(tk));
      cur = RawWord();
      have = false;
    };
    auto start = [&]() {
      if (!have) {
        have = true;
        cur.line = line_;
      }
    };
    auto op = [&](const std::string& o) {
      Token tk;
      tk.kind = TokenKind::op;
      tk.op = o;
      tk.line = line_;
      out->push_back(std::move(tk));
    };
    while (pos_ < t_.size()) {
      const char c = t_[pos_];
      if (is_blank(c)) {
        flush();
        ++pos_;
      } else if (c == '\\' && at(pos_ + 1) == '\n') {
        pos_ += 2;
        ++line_;
      } else if (c == '\n') {
        flush();
        if (!in_array) op("\n");
        ++pos_;
        ++line_;
        skip_here_documents();
      } else if (c == '<' && at(pos_ + 1) == '<' && at(pos_ + 2) != '<') {
        flush();
        pos_ += 2;
        here_document();
      } else if (c == '#' && !have) {
        while (pos_ < t_.size() && t_[pos_] != '\n') ++pos_;
      } else if (c == ')' && in_array) {
        flush();
        ++pos_;
        return Status::ok();
      } else if (!in_array && (c == ';' || c == '&' || c == '|')) {
        flush();
        std::string o(1, c);
        if ((c == '&' || c == '|' || c == ';') && at(pos_ + 1) == c) o += c;
        pos_ += o.size();
        op(o);
      } else if (c == '<' || c == '>') {
        // A redirection: its target is no argument. "2>&1": the 2 is the descriptor.
        if (have && cur.parts.size() == 1 && cur.parts[0].kind == PartKind::literal && !cur.parts[0].quoted &&
            cur.parts[0].text.find_first_not_of("0123456789") == std::string::npos) {
          cur = RawWord();
          have = false;
        }
        flush();
        while (pos_ < t_.size() && (t_[pos_] == '<' || t_[pos_] == '>' || t_[pos_] == '&' || t_[pos_] == '|')) ++pos_;
        while (pos_ < t_.size() && is_blank(t_[pos_])) ++pos_;
        RawWord ignored;
        while (pos_ < t_.size() && !is_blank(t_[pos_]) && t_[pos_] != '\n' && t_[pos_] != ';' && t_[pos_] != '|' &&
               t_[pos_] != '&' && t_[pos_] != ')') {
          if (t_[pos_] == '"') {
            if (Status st = lex_double_quoted(&ignored); !st) return st;
          } else if (t_[pos_] == '\'') {
            const size_t close = t_.find('\'', pos_ + 1);
            if (close == std::string::npos) return error("unterminated single quote (expected a closing ')", line_);
            pos_ = close + 1;
          } else {
            ++pos_;
          }
        }
      } else if (c == '(') {
        std::string name;
        bool append = false;
        if (have && array_head(cur, &name, &append)) {
          const int line = cur.line;
          cur = RawWord();
          have = false;
          ++pos_;
          std::vector<Token> elems;
          if (Status st = lex_into(&elems, true); !st)
            return error("unterminated array " + name + "=( ... ) (expected a closing ')')", line);
          Token tk;
          tk.kind = TokenKind::array;
          tk.array_name = name;
          tk.append = append;
          tk.line = line;
          for (Token& e : elems)
            if (e.kind == TokenKind::word) tk.elements.push_back(std::move(e.word));
          out->push_back(std::move(tk));
        } else {
          flush();
          op("(");
          ++pos_;
        }
      } else if (c == ')') {
        flush();
        op(")");
        ++pos_;
      } else if (c == '\'') {
        start();
        const size_t close = t_.find('\'', pos_ + 1);
        if (close == std::string::npos) return error("unterminated single quote (expected a closing ')", line_);
        const std::string s = t_.substr(pos_ + 1, close - pos_ - 1);
        for (char q : s) {
          add_literal(&cur, q, true);
          if (q == '\n') ++line_;
        }
        if (s.empty()) add_quoted_empty(&cur);
        pos_ = close + 1;
      } else if (c == '"') {
        start();
        if (Status st = lex_double_quoted(&cur); !st) return st;
      } else if (c == '$') {
        start();
        if (Status st = lex_dollar(&cur, false); !st) return st;
      } else if (c == '`') {
        start();
        const size_t close = t_.find('`', pos_ + 1);
        if (close == std::string::npos) return error("unterminated backquote", line_);
        Part p;
        p.kind = PartKind::opaque;
        p.text = t_.substr(pos_, close - pos_ + 1);
        cur.parts.push_back(std::move(p));
        pos_ = close + 1;
      } else if (c == '\\') {
        start();
        if (pos_ + 1 < t_.size()) add_literal(&cur, t_[pos_ + 1], true);
        pos_ += 2;
      } else {
        start();
        add_literal(&cur, c, false);
        ++pos_;
      }
    }
    flush();
    if (in_array) return error("unterminated array literal (expected a closing ')')", array_line);
    return Status::ok();
  }

  // From pos_ just after "<<": the delimiter of a here-document ("EOF", 'EOF', -EOF), whose
  // body the next newline skips. The body is the command's input, never its arguments.
  void here_document() {
    if (at(pos_) == '-') ++pos_;
    while (pos_ < t_.size() && is_blank(t_[pos_])) ++pos_;
    std::string delim;
    while (pos_ < t_.size() && !is_blank(t_[pos_]) && t_[pos_] != '\n' && t_[pos_] != ';' && t_[pos_] != '|' && t_[pos_] != '&' &&
           t_[pos_] != '<' && t_[pos_] != '>') {
      if (t_[pos_] != '\'' && t_[pos_] != '"' && t_[pos_] != '\\') delim += t_[pos_];
      ++pos_;
    }
    if (!delim.empty()) heredocs_.push_back(delim);
  }
  // At the start of the line after a command with here-documents: skips each body through
  // its delimiter line (leading tabs and blanks allowed, as <<- allows tabs).
  void skip_here_documents() {
    for (const std::string& delim : heredocs_) {
      while (pos_ < t_.size()) {
        size_t eol = t_.find('\n', pos_);
        if (eol == std::string::npos) eol = t_.size();
        std::string body_line = t_.substr(pos_, eol - pos_);
        while (!body_line.empty() && (body_line.front() == '\t' || body_line.front() == ' ')) body_line.erase(0, 1);
        while (!body_line.empty() && (body_line.back() == '\r' || body_line.back() == ' ')) body_line.pop_back();
        pos_ = eol < t_.size() ? eol + 1 : eol;
        ++line_;
        if (body_line == delim) break;
      }
    }
    heredocs_.clear();
  }

  const std::string& t_;
  const std::string& origin_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<std::string> heredocs_;  // delimiters of the here-documents the current line opens
};

// ---------------------------------------------------------------- expansion

struct Variable {
  std::string value;
  bool known = true;  // false: assigned from something not evaluated ($(...)); value = as written
};

struct Env {
  std::map<std::string, Variable> vars;
  std::map<std::string, std::vector<std::string>> arrays;
  std::vector<std::string> array_order;
  std::set<std::string> unexpanded;
};

bool is_special(const std::string& name) { return name == "@" || name == "*" || name == "#" || name == "?" || name == "$" || name == "!" || name == "-"; }

class Expander {
 public:
  explicit Expander(Env* env) : env_(env) {}

  // The fields of `w` (split: unquoted expansions split on blanks; else exactly one field).
  std::vector<std::string> expand(const RawWord& w, bool split) {
    fields_.clear();
    cur_.clear();
    has_ = false;
    split_ = split;
    for (const Part& p : w.parts) add_part(p);
    if (has_ || !split) fields_.push_back(cur_);
    return fields_;
  }

  // The single string of parts (defaults, assignment values); *known false when any part
  // was not evaluated.
  std::string join(const std::vector<Part>& parts, bool* known) {
    Expander sub(env_);
    sub.split_ = false;
    for (const Part& p : parts) sub.add_part(p);
    if (!sub.known_) *known = false;
    return sub.cur_;
  }
  bool known() const { return known_; }

 private:
  void append_text(const std::string& v, bool quoted) {
    if (quoted || !split_) {
      cur_ += v;
      has_ = true;
      return;
    }
    if (v.empty()) return;
    const std::vector<std::string> pieces = split_blanks(v);
    const bool lead = v.front() == ' ' || v.front() == '\t' || v.front() == '\n';
    const bool trail = v.back() == ' ' || v.back() == '\t' || v.back() == '\n';
    if (lead && has_) {
      fields_.push_back(cur_);
      cur_.clear();
      has_ = false;
    }
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (i > 0) {
        fields_.push_back(cur_);
        cur_.clear();
      }
      cur_ += pieces[i];
      has_ = true;
    }
    if (trail && has_) {
      fields_.push_back(cur_);
      cur_.clear();
      has_ = false;
    }
  }

  void add_part(const Part& p) {
    switch (p.kind) {
      case PartKind::literal:
        cur_ += p.text;
        has_ = true;
        return;
      case PartKind::opaque:
        env_->unexpanded.insert(p.text);
        known_ = false;
        cur_ += p.text;
        has_ = true;
        return;
      case PartKind::array_all: {
        auto a = env_->arrays.find(p.text);
        std::vector<std::string> elems;
        if (a != env_->arrays.end()) {
          elems = a->second;
        } else if (auto v = env_->vars.find(p.text); v != env_->vars.end()) {
          elems.push_back(v->second.value);
        }
        if (!split_ || (p.joined && p.quoted)) {  // in an assignment or a test, or "${A[*]}": joined by blanks
          for (size_t i = 0; i < elems.size(); ++i) cur_ += (i ? " " : "") + elems[i];
          has_ = true;
          return;
        }
        for (size_t i = 0; i < elems.size(); ++i) {
          if (p.quoted) {
            if (i > 0) {
              fields_.push_back(cur_);
              cur_.clear();
            }
            cur_ += elems[i];
            has_ = true;
          } else {
            if (i > 0 && has_) {
              fields_.push_back(cur_);
              cur_.clear();
              has_ = false;
            }
            append_text(elems[i], false);
          }
        }
        return;
      }
      case PartKind::variable: {
        // "$@" / "$*": the script's arguments, none when it is read as a file (and no word,
        // as "$@" gives none in bash).
        if (p.text == "@" || p.text == "*") return;
        std::optional<std::string> value;
        if (auto v = env_->vars.find(p.text); v != env_->vars.end()) {
          if (!v->second.known) {
            env_->unexpanded.insert("$" + p.text);
            known_ = false;
          }
          value = v->second.value;
        } else if (auto a = env_->arrays.find(p.text); a != env_->arrays.end()) {
          value = a->second.empty() ? std::string() : a->second.front();
        }
        if (p.has_default && (!value || (p.default_if_empty && value->empty()))) {
          value = join(p.default_parts, &known_);
        }
        if (!value) {
          if (is_special(p.text)) {
            value = p.text == "#" ? "0" : "";  // a script run without arguments
          } else {
            // Not set in the script (the environment, a positional parameter): as written.
            env_->unexpanded.insert("$" + p.text);
            known_ = false;
            cur_ += p.written;
            has_ = true;
            return;
          }
        }
        append_text(*value, p.quoted);
        return;
      }
    }
  }

  Env* env_;
  std::vector<std::string> fields_;
  std::string cur_;
  bool has_ = false;
  bool split_ = true;
  bool known_ = true;
};

// ---------------------------------------------------------------- commands

struct RawCommand {
  std::vector<Token> items;  // words and arrays
  std::string op;            // the operator that ended it ("\n", ";", "&&", "||", ...)
  int line = 0;
};

std::vector<RawCommand> group_commands(std::vector<Token>&& tokens) {
  std::vector<RawCommand> out;
  RawCommand cur;
  for (Token& tk : tokens) {
    if (tk.kind == TokenKind::op) {
      cur.op = tk.op;
      if (!cur.items.empty()) out.push_back(std::move(cur));
      cur = RawCommand();
      continue;
    }
    if (cur.items.empty()) cur.line = tk.line;
    cur.items.push_back(std::move(tk));
  }
  if (!cur.items.empty()) out.push_back(std::move(cur));
  return out;
}

// `NAME=...` / `NAME+=...` as the literal start of a word: the name and where the value
// starts in the first part.
bool assignment_head(const RawWord& w, std::string* name, bool* append, size_t* value_at) {
  if (w.parts.empty() || w.parts[0].kind != PartKind::literal || w.parts[0].quoted) return false;
  const std::string& s = w.parts[0].text;
  if (s.empty() || !is_name_start(s[0])) return false;
  size_t i = 0;
  while (i < s.size() && is_name_char(s[i])) ++i;
  if (i < s.size() && s[i] == '=') {
    *append = false;
  } else if (i + 1 < s.size() && s[i] == '+' && s[i + 1] == '=') {
    *append = true;
  } else {
    return false;
  }
  *name = s.substr(0, i);
  *value_at = i + (*append ? 2 : 1);
  return true;
}

enum class Tri { no, yes, unknown };

// One command of an `if` condition: a test of literal words (`[ a = b ]`, `[[ -n a ]]`,
// `test n -gt m`, negated with !) or `true` / `false`; unknown for any other command (its
// exit status is the command's), for a test of words the script does not set, and for a
// glob pattern on the right of ==.
Tri test_command(const std::vector<std::string>& words_in, bool known) {
  if (!known) return Tri::unknown;
  std::vector<std::string> w = words_in;
  bool negate = false;
  while (!w.empty() && w.front() == "!") {
    negate = !negate;
    w.erase(w.begin());
  }
  if (w.size() == 1 && (w[0] == "true" || w[0] == ":" || w[0] == "false")) {
    return (w[0] == "false") != negate ? Tri::no : Tri::yes;
  }
  if (w.empty()) return Tri::unknown;
  if (w.front() == "[[" || w.front() == "[") {
    const char* close = w.front() == "[[" ? "]]" : "]";
    if (w.back() != close) return Tri::unknown;
    w.pop_back();
  } else if (w.front() != "test") {
    return Tri::unknown;
  }
  w.erase(w.begin());
  while (!w.empty() && w.front() == "!") {
    negate = !negate;
    w.erase(w.begin());
  }
  auto integer = [](const std::string& s) -> std::optional<int64_t> {
    int64_t v = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
    return v;
  };
  Tri r = Tri::unknown;
  if (w.empty()) {
    r = Tri::no;  // `[ ]`
  } else if (w.size() == 1) {
    r = w[0].empty() ? Tri::no : Tri::yes;
  } else if (w.size() == 2 && (w[0] == "-z" || w[0] == "-n")) {
    r = (w[1].empty() == (w[0] == "-z")) ? Tri::yes : Tri::no;
  } else if (w.size() == 3 && (w[1] == "=" || w[1] == "==" || w[1] == "!=")) {
    if (w[2].find_first_of("*?[") != std::string::npos) return Tri::unknown;  // a glob pattern
    r = ((w[0] == w[2]) == (w[1] != "!=")) ? Tri::yes : Tri::no;
  } else if (w.size() == 3) {
    const std::optional<int64_t> a = integer(w[0]), b = integer(w[2]);
    if (!a || !b) return Tri::unknown;
    const std::string& op = w[1];
    bool v = false;
    if (op == "-eq") v = *a == *b;
    else if (op == "-ne") v = *a != *b;
    else if (op == "-lt") v = *a < *b;
    else if (op == "-le") v = *a <= *b;
    else if (op == "-gt") v = *a > *b;
    else if (op == "-ge") v = *a >= *b;
    else return Tri::unknown;  // file tests, regexes: not decided
    r = v ? Tri::yes : Tri::no;
  } else {
    return Tri::unknown;
  }
  if (negate) r = r == Tri::yes ? Tri::no : Tri::yes;
  return r;
}

Tri combine(Tri a, Tri b, const std::string& op) {
  if (op == "&&") {
    if (a == Tri::no || b == Tri::no) return Tri::no;
    if (a == Tri::yes && b == Tri::yes) return Tri::yes;
    return Tri::unknown;
  }
  if (a == Tri::yes || b == Tri::yes) return Tri::yes;
  if (a == Tri::no && b == Tri::no) return Tri::no;
  return Tri::unknown;
}

enum class Branch { inactive, active, maybe };

struct IfFrame {
  Branch parent = Branch::active;  // the state around the if
  Branch branch = Branch::inactive;
  bool collecting = true;          // reading the condition (after if / elif, before then)
  bool done_certain = false;       // an earlier branch certainly ran
  bool maybe_before = false;       // an earlier branch may have run
  std::vector<std::pair<RawCommand, std::string>> condition;  // commands and the op after each
  int line = 0;
  std::string text;                // the condition as written, for notes
  bool noted = false;
};

class Interpreter {
 public:
  Interpreter(const std::string& origin) : origin_(origin) {}

  Result<Script> run(std::vector<RawCommand>&& commands) {
    for (RawCommand& c : commands) process(std::move(c));
    Script s;
    s.commands = std::move(out_);
    for (auto& [k, v] : env_.vars) s.variables[k] = v.value;
    s.arrays = env_.arrays;
    s.array_order = env_.array_order;
    s.unexpanded = env_.unexpanded;
    s.notes = std::move(notes_);
    return s;
  }

 private:
  Branch state() const {
    Branch b = Branch::active;
    for (const IfFrame& f : frames_) {
      if (f.collecting) {
        if (f.parent == Branch::inactive) return Branch::inactive;
        continue;
      }
      if (f.branch == Branch::inactive) return Branch::inactive;
      if (f.branch == Branch::maybe) b = Branch::maybe;
    }
    return b;
  }

  void note_undecided(const char* what, int line) {
    for (IfFrame& f : frames_) {
      if (f.branch != Branch::maybe || f.noted) continue;
      f.noted = true;
      notes_.push_back(origin_ + ": line " + std::to_string(f.line) + ": the condition '" + f.text +
                       "' cannot be decided without running the script; both branches read (" + what + " at line " +
                       std::to_string(line) + ")");
    }
  }

  std::string undecided_text() const {
    std::string s;
    for (const IfFrame& f : frames_)
      if (f.branch == Branch::maybe) s += (s.empty() ? "" : "; ") + std::string("line ") + std::to_string(f.line) + ": '" + f.text + "'";
    return s;
  }

  static bool keyword(const RawCommand& c, const char* kw) {
    return !c.items.empty() && c.items[0].kind == TokenKind::word && c.items[0].word.is_literal(kw);
  }
  static RawCommand rest(RawCommand c) {
    c.items.erase(c.items.begin());
    if (!c.items.empty()) c.line = c.items[0].line;
    return c;
  }

  Tri evaluate(const IfFrame& f) {
    Tri r = Tri::unknown;
    std::string op;
    bool first = true;
    for (const auto& [cmd, after] : f.condition) {
      std::vector<std::string> words;
      bool known = true;
      for (const Token& tk : cmd.items) {
        if (tk.kind != TokenKind::word) {
          known = false;
          continue;
        }
        Expander e(&env_);
        for (std::string& s : e.expand(tk.word, false)) words.push_back(std::move(s));
        known = known && e.known();
      }
      const Tri t = test_command(words, known);
      r = first ? t : combine(r, t, op);
      first = false;
      op = after;
    }
    return r;
  }

  std::string condition_text(const IfFrame& f) {
    std::string s;
    for (const auto& [cmd, after] : f.condition) {
      for (const Token& tk : cmd.items) {
        if (tk.kind != TokenKind::word) continue;
        Expander e(&env_);
        for (const std::string& w : e.expand(tk.word, false)) s += (s.empty() ? "" : " ") + w;
      }
      if (after == "&&" || after == "||") s += " " + after;
    }
    return s;
  }

  void start_branch(IfFrame* f) {
    f->collecting = false;
    if (f->parent == Branch::inactive) {
      f->branch = Branch::inactive;
      return;
    }
    const Tri c = evaluate(*f);
    if (c == Tri::unknown && !f->done_certain) f->text = condition_text(*f);
    f->condition.clear();
    if (f->done_certain || c == Tri::no) {
      f->branch = Branch::inactive;
    } else if (c == Tri::yes) {
      f->branch = f->maybe_before ? Branch::maybe : Branch::active;
      f->done_certain = true;
    } else {
      f->branch = Branch::maybe;
      f->maybe_before = true;
    }
  }

  void process(RawCommand c) {
    if (c.items.empty()) return;
    if (!frames_.empty() && frames_.back().collecting) {
      if (keyword(c, "then")) {
        start_branch(&frames_.back());
        process(rest(std::move(c)));
        return;
      }
      frames_.back().condition.push_back({c, c.op});
      return;
    }
    if (keyword(c, "if")) {
      IfFrame f;
      f.parent = state();
      f.line = c.line;
      frames_.push_back(std::move(f));
      process(rest(std::move(c)));
      return;
    }
    if (keyword(c, "elif") && !frames_.empty()) {
      IfFrame& f = frames_.back();
      f.collecting = true;
      f.noted = false;
      f.line = c.line;
      process(rest(std::move(c)));
      return;
    }
    if (keyword(c, "else") && !frames_.empty()) {
      IfFrame& f = frames_.back();
      f.noted = false;
      if (f.parent == Branch::inactive || f.done_certain) {
        f.branch = Branch::inactive;
      } else {
        f.branch = f.maybe_before ? Branch::maybe : Branch::active;
        if (f.maybe_before) f.text = "else of " + f.text;
      }
      process(rest(std::move(c)));
      return;
    }
    if (keyword(c, "fi")) {
      if (!frames_.empty()) frames_.pop_back();
      process(rest(std::move(c)));
      return;
    }
    for (const char* kw : {"then", "do", "{", "!"})
      if (keyword(c, kw)) {
        process(rest(std::move(c)));
        return;
      }
    for (const char* kw : {"done", "}", "esac", "while", "until", "for", "case", "function"})
      if (keyword(c, kw)) return;  // loop heads and ends: read as straight-line code

    const Branch b = state();
    if (b == Branch::inactive) return;
    size_t i = 0;
    bool prefix_keyword = false;  // export / declare / local / readonly NAME=value
    if (c.items[0].kind == TokenKind::word) {
      for (const char* kw : {"export", "declare", "local", "readonly", "typeset"})
        if (c.items[0].word.is_literal(kw)) prefix_keyword = true;
      if (prefix_keyword) {
        i = 1;
        while (i < c.items.size() && c.items[i].kind == TokenKind::word && !c.items[i].word.parts.empty() &&
               c.items[i].word.parts[0].kind == PartKind::literal && !c.items[i].word.parts[0].quoted &&
               c.items[i].word.parts[0].text.rfind("-", 0) == 0)
          ++i;
      }
    }
    // Leading assignments (and array literals).
    std::vector<std::pair<std::string, std::pair<bool, Variable>>> assigns;
    bool assigned_arrays = false;
    for (; i < c.items.size(); ++i) {
      const Token& tk = c.items[i];
      if (tk.kind == TokenKind::array) {
        std::vector<std::string> elems;
        for (const RawWord& w : tk.elements) {
          Expander e(&env_);
          for (std::string& s : e.expand(w, true)) elems.push_back(std::move(s));
        }
        if (!env_.arrays.count(tk.array_name)) env_.array_order.push_back(tk.array_name);
        std::vector<std::string>& a = env_.arrays[tk.array_name];
        if (!tk.append) a.clear();
        a.insert(a.end(), elems.begin(), elems.end());
        env_.vars.erase(tk.array_name);
        assigned_arrays = true;
        continue;
      }
      std::string name;
      bool append = false;
      size_t value_at = 0;
      if (!assignment_head(tk.word, &name, &append, &value_at)) break;
      std::vector<Part> value_parts = tk.word.parts;
      value_parts[0].text = value_parts[0].text.substr(value_at);
      Expander e(&env_);
      bool known = true;
      Variable v;
      v.value = e.join(value_parts, &known);
      v.known = known;
      assigns.push_back({name, {append, v}});
    }
    // Only assignments, or a declaration (`export NAME`, `declare -a NAME`: names, no
    // command): they set shell variables.
    if (i >= c.items.size() || prefix_keyword) {
      for (auto& [name, av] : assigns) {
        auto& [append, v] = av;
        if (append && env_.vars.count(name)) {
          env_.vars[name].value += v.value;
          env_.vars[name].known = env_.vars[name].known && v.known;
        } else {
          env_.vars[name] = v;
        }
      }
      if (b == Branch::maybe && (!assigns.empty() || assigned_arrays)) note_undecided("an assignment", c.line);
      return;
    }
    // A command (assignments before it set its environment only).
    Command out;
    out.line = c.items[i].line;
    for (; i < c.items.size(); ++i) {
      const Token& tk = c.items[i];
      if (tk.kind == TokenKind::array) continue;
      Expander e(&env_);
      for (std::string& s : e.expand(tk.word, true)) out.words.push_back(std::move(s));
    }
    if (out.words.empty()) return;
    if (b == Branch::maybe) out.undecided = undecided_text();
    out_.push_back(std::move(out));
  }

  const std::string& origin_;
  Env env_;
  std::vector<IfFrame> frames_;
  std::vector<Command> out_;
  std::vector<std::string> notes_;
};

}  // namespace

Result<std::vector<Command>> split_shell_lines(const std::string& text, const std::string& origin) {
  Lexer lx(text, origin);
  Result<std::vector<Token>> toks = lx.lex();
  if (!toks) return toks.status();
  std::vector<Command> out;
  Command cur;
  auto literal = [](const RawWord& w) {
    std::string s;
    for (const Part& p : w.parts) s += p.kind == PartKind::literal || p.kind == PartKind::opaque ? p.text : p.written;
    return s;
  };
  for (const Token& tk : *toks) {
    if (tk.kind == TokenKind::op) {
      if (!cur.words.empty()) out.push_back(std::move(cur));
      cur = Command();
      continue;
    }
    if (cur.words.empty()) cur.line = tk.line;
    if (tk.kind == TokenKind::word) {
      cur.words.push_back(literal(tk.word));
    } else {
      for (const RawWord& w : tk.elements) cur.words.push_back(literal(w));
    }
  }
  if (!cur.words.empty()) out.push_back(std::move(cur));
  return out;
}

Result<Script> read_shell_script(const std::string& text, const std::string& origin) {
  Lexer lx(text, origin);
  Result<std::vector<Token>> toks = lx.lex();
  if (!toks) return toks.status();
  Interpreter in(origin);
  return in.run(group_commands(std::move(*toks)));
}

std::string quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./:=+,-@%") == std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string file_name(const std::string& word) {
  const size_t slash = word.find_last_of('/');
  return slash == std::string::npos ? word : word.substr(slash + 1);
}

OptionWord split_option_word(const std::string& word) {
  const size_t eq = word.find('=');
  if (word.rfind("-", 0) != 0 || eq == std::string::npos) return {word, "", false};
  return {word.substr(0, eq), word.substr(eq + 1), true};
}

Result<int64_t> parse_integer_word(const std::string& word, int64_t min, int64_t max, const std::string& key, const std::string& origin,
                                   int line) {
  int64_t v = 0;
  const char* end = word.data() + word.size();
  const auto [p, ec] = std::from_chars(word.data(), end, v);
  if (word.empty() || ec != std::errc() || p != end || v < min || v > max)
    return Status::bad_input(origin + ": line " + std::to_string(line) + ": " + key + ": expected an integer in [" + std::to_string(min) +
                             ", " + std::to_string(max) + "], got '" + word + "'");
  return v;
}

namespace {

// Launcher options that take no value; every other option takes one (as `--opt v` or
// `--opt=v`). DeepSpeed v0.16.4 deepspeed/launcher/runner.py L141-197 (action="store_true");
// torch/distributed/run.py (--standalone, --no-python, -m/--module, --run-path).
const std::set<std::string> kLauncherFlags = {
    "--module", "--no_python", "--no_local_rank", "--no_ssh", "--no_ssh_check", "--force_multi", "--save_pid", "--elastic_training",
    "--bind_cores_to_rank", "--standalone", "--no-python", "-m", "--run-path", "--run_path"};

bool is_python(const std::string& w) { return w.rfind("python", 0) == 0; }

}  // namespace

Result<std::optional<LaunchLine>> find_launch_line(const std::vector<Command>& commands, const std::string& origin) {
  for (const Command& c : commands) {
    if (c.words.empty()) continue;
    const std::string first = file_name(c.words[0]);
    size_t k = 1;
    LaunchLine l;
    if (first == "deepspeed") {
      l.launcher = "deepspeed";
    } else if (first == "torchrun") {
      l.launcher = "torchrun";
    } else if (is_python(first) && c.words.size() > 2 && c.words[1] == "-m" &&
               (c.words[2] == "torch.distributed.run" || c.words[2] == "torch.distributed.launch")) {
      l.launcher = "torchrun";
      k = 3;
    } else {
      continue;
    }
    l.line = c.line;
    for (; k < c.words.size(); ++k) {
      const std::string& w = c.words[k];
      if (w.empty() || w[0] != '-') break;  // the program
      OptionWord o = split_option_word(w);
      if (kLauncherFlags.count(o.name)) {
        if (o.name != "-m" && o.name != "--module") l.unused.push_back(w);
        continue;
      }
      if (!o.has_value) {
        if (k + 1 >= c.words.size()) return Status::bad_input(origin + ": line " + std::to_string(c.line) + ": " + o.name + ": expected a value");
        o.value = c.words[++k];
      }
      const bool nodes = o.name == "--num_nodes" || o.name == "--nnodes";
      const bool gpus = o.name == "--num_gpus" || o.name == "--num_accelerators" || o.name == "--nproc_per_node" || o.name == "--nproc-per-node";
      if (nodes || gpus) {
        Result<int64_t> v = parse_integer_word(o.value, 1, 1000000, o.name, origin, c.line);
        if (!v) return v.status();
        (nodes ? l.nodes : l.gpus_per_node) = static_cast<int>(*v);
      } else {
        l.unused.push_back(o.name);
      }
    }
    if (k < c.words.size()) {
      l.program = c.words[k];
      l.args.assign(c.words.begin() + static_cast<std::ptrdiff_t>(k) + 1, c.words.end());
    }
    return std::optional<LaunchLine>(std::move(l));
  }
  return std::optional<LaunchLine>();
}

}  // namespace llmplan::shell
