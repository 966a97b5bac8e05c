#include "launch/shell_script.h"

#include <cctype>
#include <charconv>
#include <map>
#include <optional>
#include <set>

namespace llmplan::launch_formats {

namespace {

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

// "NAME=" or "NAME+=" at the start of `w`: the length of the name, else 0.
size_t assignment_name_length(const std::string& w) {
  if (w.empty() || !is_name_start(w[0])) return 0;
  size_t k = 1;
  while (k < w.size() && is_name_char(w[k])) ++k;
  if (k < w.size() && w[k] == '=') return k;
  if (k + 1 < w.size() && w[k] == '+' && w[k + 1] == '=') return k;
  return 0;
}

class ScriptReader {
 public:
  ScriptReader(const std::string& text, const std::string& origin) : s_(text), origin_(origin) {}

  Result<std::vector<ShellCommand>> read() {
    while (i_ < s_.size() && error_.is_ok()) step();
    if (!error_.is_ok()) return error_;
    if (in_array_) return fail("the array " + array_name_ + "=( is not closed");
    end_word();
    end_command();
    return std::move(out_);
  }

 private:
  Status fail(const std::string& what) {
    if (error_.is_ok()) error_ = Status::bad_input(origin_ + ": line " + std::to_string(line_) + ": " + what + " (expected a shell script)");
    return error_;
  }

  void append(const std::string& text) {
    if (!in_word_ && words_.empty() && !in_array_) command_line_ = line_;
    word_ += text;
    in_word_ = true;
  }
  void end_word() {
    if (!in_word_) return;
    (in_array_ ? array_words_ : words_).push_back(word_);
    word_.clear();
    in_word_ = false;
  }
  // A finished simple command: `if`/`elif`/`else`/`fi` steer which commands count; leading
  // assignments set variables (`export NAME=value` too); the rest, if any, is a command
  // (`VAR=x cmd ...` runs cmd).
  void end_command() {
    std::vector<std::string> w = std::move(words_);
    words_.clear();
    while (!w.empty()) {
      const std::string& k = w[0];
      if (k == "if" || k == "elif") {
        const std::optional<bool> r = test(std::vector<std::string>(w.begin() + 1, w.end()));
        if (k == "if") {
          const bool parent = active();
          conditions_.push_back({parent, parent && r.value_or(true), r.value_or(true), r.has_value(), r.value_or(false)});
        } else if (!conditions_.empty()) {
          Condition& c = conditions_.back();
          c.known = c.known && r.has_value();
          c.active = c.parent && !c.taken_known && r.value_or(true);
          c.taken_known = c.taken_known || (r.has_value() && *r);
          c.taken = c.taken || r.value_or(true);
        }
        return;
      }
      if (k == "else" && !conditions_.empty()) {
        Condition& c = conditions_.back();
        c.active = c.parent && (!c.taken || !c.known);
      } else if (k == "fi" && !conditions_.empty()) {
        conditions_.pop_back();
      } else if (k != "then" && k != "do" && k != "done" && k != "else" && k != "fi") {
        break;
      }
      w.erase(w.begin());
    }
    if (w.empty() || !active()) return;
    const bool declaration = w[0] == "export" || w[0] == "declare" || w[0] == "local" || w[0] == "readonly";
    size_t first = declaration ? 1 : 0;
    while (first < w.size()) {
      const size_t n = assignment_name_length(w[first]);
      if (n == 0) break;
      const std::string name = w[first].substr(0, n);
      const bool add = w[first][n] == '+';
      const std::string value = w[first].substr(n + (add ? 2 : 1));
      vars_[name] = add ? vars_[name] + value : value;
      ++first;
    }
    if (!declaration && first < w.size()) {
      ShellCommand c;
      c.words.assign(w.begin() + static_cast<std::ptrdiff_t>(first), w.end());
      c.line = command_line_;
      out_.push_back(std::move(c));
    }
  }

  // An `if`'s condition when it is a test of literal words ([ a = b ], [[ a != b ]],
  // [ n -eq m ], [ -n a ], [ -z a ], negated with !); nullopt for anything else, and for a
  // variable the script does not set (both branches are then read).
  static std::optional<bool> test(std::vector<std::string> w) {
    if (w.size() < 2) return std::nullopt;
    const bool double_bracket = w.front() == "[[" && w.back() == "]]";
    if (!double_bracket && !(w.front() == "[" && w.back() == "]")) return std::nullopt;
    w.erase(w.begin());
    w.pop_back();
    // A variable the script does not set stays as written ("$X"): the environment decides.
    for (const std::string& x : w)
      if (x.find('$') != std::string::npos) return std::nullopt;
    bool negate = false;
    if (!w.empty() && w[0] == "!") {
      negate = true;
      w.erase(w.begin());
    }
    std::optional<bool> r;
    auto integer = [](const std::string& s) -> std::optional<int64_t> {
      int64_t v = 0;
      const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
      return v;
    };
    if (w.empty()) {
      r = false;
    } else if (w.size() == 1) {
      r = !w[0].empty();
    } else if (w.size() == 2 && (w[0] == "-n" || w[0] == "-z")) {
      r = (w[0] == "-n") != w[1].empty();
    } else if (w.size() == 3) {
      const std::string& op = w[1];
      if (op == "=" || op == "==") r = w[0] == w[2];
      else if (op == "!=") r = w[0] != w[2];
      else {
        const std::optional<int64_t> a = integer(w[0]), b = integer(w[2]);
        if (a && b) {
          if (op == "-eq") r = *a == *b;
          else if (op == "-ne") r = *a != *b;
          else if (op == "-lt") r = *a < *b;
          else if (op == "-le") r = *a <= *b;
          else if (op == "-gt") r = *a > *b;
          else if (op == "-ge") r = *a >= *b;
        }
      }
    }
    if (r && negate) r = !*r;
    return r;
  }

  bool active() const { return conditions_.empty() || conditions_.back().active; }

  // The words an expansion yields: quoted, appended to the word; unquoted, split on blanks
  // (an assignment's value is never split, as in a shell).
  void emit(const std::string& value, bool quoted) {
    const bool assigning = in_word_ && words_.empty() && !in_array_ && assignment_name_length(word_) > 0;
    if (quoted || assigning) {
      append(value);
      return;
    }
    auto blank = [](char c) { return is_blank(c) || c == '\n'; };
    if (!value.empty() && blank(value.front())) end_word();
    bool first = true;
    for (size_t p = 0; p < value.size();) {
      while (p < value.size() && blank(value[p])) ++p;
      const size_t b = p;
      while (p < value.size() && !blank(value[p])) ++p;
      if (p == b) break;
      if (!first) end_word();
      append(value.substr(b, p - b));
      first = false;
    }
    if (!value.empty() && blank(value.back())) end_word();
  }
  void emit_words(const std::vector<std::string>& elements) {
    for (size_t k = 0; k < elements.size(); ++k) {
      if (k > 0) end_word();
      append(elements[k]);
    }
  }

  // From i_ at '$': one expansion. Unknown names and command substitutions stay as written.
  void expand(bool quoted) {
    const size_t start = i_;
    if (i_ + 1 >= s_.size()) {
      append("$");
      ++i_;
      return;
    }
    const char c = s_[i_ + 1];
    if (c == '{') {
      const size_t close = s_.find('}', i_ + 2);
      if (close == std::string::npos) {
        fail("'${' is not closed");
        return;
      }
      const std::string inner = s_.substr(i_ + 2, close - i_ - 2);
      i_ = close + 1;
      size_t n = 0;
      while (n < inner.size() && is_name_char(inner[n])) ++n;
      const std::string name = inner.substr(0, n), rest = inner.substr(n);
      if (rest == "[@]" || rest == "[*]") {
        auto a = arrays_.find(name);
        if (a != arrays_.end()) {
          if (quoted && rest == "[@]") emit_words(a->second);
          else {
            std::string joined;
            for (const std::string& w : a->second) joined += (joined.empty() ? "" : " ") + w;
            emit(joined, quoted);
          }
          return;
        }
      } else if (rest.empty() || rest.rfind(":-", 0) == 0 || rest.rfind("-", 0) == 0) {
        auto v = vars_.find(name);
        const bool set = v != vars_.end() && (rest.rfind(":-", 0) != 0 || !v->second.empty());
        if (set) {
          emit(v->second, quoted);
          return;
        }
        if (!rest.empty()) {
          emit(rest.substr(rest[0] == ':' ? 2 : 1), quoted);
          return;
        }
      }
      append(s_.substr(start, i_ - start));
      return;
    }
    if (c == '(') {  // $( ... ) or $(( ... )): kept as written
      int depth = 0;
      size_t k = i_ + 1;
      for (; k < s_.size(); ++k) {
        if (s_[k] == '(') ++depth;
        else if (s_[k] == ')' && --depth == 0) break;
      }
      if (k >= s_.size()) {
        fail("'$(' is not closed");
        return;
      }
      append(s_.substr(start, k + 1 - start));
      i_ = k + 1;
      return;
    }
    if (c == '@' || c == '*') {  // the script's own arguments: none when read as a file
      i_ += 2;
      return;
    }
    if (is_name_start(c)) {
      size_t k = i_ + 1;
      while (k < s_.size() && is_name_char(s_[k])) ++k;
      const std::string name = s_.substr(i_ + 1, k - i_ - 1);
      i_ = k;
      auto v = vars_.find(name);
      if (v != vars_.end()) emit(v->second, quoted);
      else append(s_.substr(start, k - start));
      return;
    }
    append(s_.substr(i_, 2));  // $1, $#, $$, ...: kept
    i_ += 2;
  }

  void double_quoted() {
    ++i_;
    const int opened = line_;
    bool closed = false;
    append("");  // "" is an (empty) word
    while (i_ < s_.size() && error_.is_ok()) {
      const char c = s_[i_];
      if (c == '"') {
        ++i_;
        closed = true;
        break;
      }
      if (c == '\\' && i_ + 1 < s_.size()) {
        const char d = s_[i_ + 1];
        if (d == '\n') {
          ++line_;
        } else if (d == '"' || d == '\\' || d == '$' || d == '`') {
          append(std::string(1, d));
        } else {
          append(s_.substr(i_, 2));
        }
        i_ += 2;
        continue;
      }
      if (c == '$') {
        expand(true);
        continue;
      }
      if (c == '\n') ++line_;
      append(std::string(1, c));
      ++i_;
    }
    if (!closed && error_.is_ok()) {
      line_ = opened;
      fail("a double quote is not closed");
    }
  }

  // From i_ just after "<<": the delimiter of a here-document, whose body is skipped at the
  // end of the line.
  void here_document() {
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    while (i_ < s_.size() && is_blank(s_[i_])) ++i_;
    std::string delim;
    while (i_ < s_.size() && !is_blank(s_[i_]) && s_[i_] != '\n' && s_[i_] != ';') {
      if (s_[i_] != '\'' && s_[i_] != '"') delim += s_[i_];
      ++i_;
    }
    if (!delim.empty()) heredocs_.push_back(delim);
  }
  void skip_here_documents() {
    for (const std::string& delim : heredocs_) {
      while (i_ < s_.size()) {
        size_t eol = s_.find('\n', i_);
        if (eol == std::string::npos) eol = s_.size();
        std::string body_line = s_.substr(i_, eol - i_);
        while (!body_line.empty() && (body_line.front() == '\t' || body_line.front() == ' ')) body_line.erase(0, 1);
        while (!body_line.empty() && (body_line.back() == '\r' || body_line.back() == ' ')) body_line.pop_back();
        i_ = eol < s_.size() ? eol + 1 : eol;
        ++line_;
        if (body_line == delim) break;
      }
    }
    heredocs_.clear();
  }

  void step() {
    const char c = s_[i_];
    const char next = i_ + 1 < s_.size() ? s_[i_ + 1] : '\0';
    if (c == '\n') {
      end_word();
      ++i_;
      ++line_;
      if (!heredocs_.empty()) skip_here_documents();
      if (!in_array_) end_command();
      return;
    }
    if (is_blank(c)) {
      end_word();
      ++i_;
      return;
    }
    if (c == '#' && !in_word_) {
      while (i_ < s_.size() && s_[i_] != '\n') ++i_;
      return;
    }
    if (c == '\\') {
      if (next == '\n') {
        ++line_;
      } else if (next != '\0') {
        append(std::string(1, next));
      }
      i_ += next == '\0' ? 1 : 2;
      return;
    }
    if (c == '\'') {
      const size_t close = s_.find('\'', i_ + 1);
      if (close == std::string::npos) {
        fail("a single quote is not closed");
        return;
      }
      const std::string inner = s_.substr(i_ + 1, close - i_ - 1);
      append(inner);
      for (char d : inner) line_ += d == '\n';
      i_ = close + 1;
      return;
    }
    if (c == '"') return double_quoted();
    if (c == '$') return expand(false);
    if (c == ';' || c == '&' || c == '|') {
      end_word();
      while (i_ < s_.size() && (s_[i_] == ';' || s_[i_] == '&' || s_[i_] == '|')) ++i_;
      if (!in_array_) end_command();
      return;
    }
    if (c == '(' && in_word_ && !in_array_ && words_.empty()) {
      const size_t n = assignment_name_length(word_);
      if (n > 0 && (word_.size() == n + 1 || (word_.size() == n + 2 && word_[n] == '+'))) {
        array_name_ = word_.substr(0, n);
        array_words_.clear();
        if (word_[n] == '+') array_words_ = arrays_[array_name_];
        word_.clear();
        in_word_ = false;
        in_array_ = true;
        ++i_;
        return;
      }
    }
    if (c == ')' && in_array_) {
      end_word();
      if (active()) arrays_[array_name_] = array_words_;
      in_array_ = false;
      ++i_;
      return;
    }
    if (c == '<' && next == '<' && (i_ + 2 >= s_.size() || s_[i_ + 2] != '<')) {
      end_word();
      i_ += 2;
      here_document();
      return;
    }
    append(std::string(1, c));
    ++i_;
  }

  const std::string& s_;
  const std::string& origin_;
  size_t i_ = 0;
  int line_ = 1;
  Status error_;
  std::vector<ShellCommand> out_;
  std::vector<std::string> words_;
  int command_line_ = 1;
  std::string word_;
  bool in_word_ = false;
  bool in_array_ = false;
  std::string array_name_;
  std::vector<std::string> array_words_;
  std::vector<std::string> heredocs_;
  std::map<std::string, std::string> vars_;
  std::map<std::string, std::vector<std::string>> arrays_;
  // The enclosing `if`s: whether the current branch runs, given its parents.
  struct Condition {
    bool parent = true;       // the enclosing branch runs
    bool active = true;       // this branch runs (or may: an unknown condition reads both)
    bool taken = false;       // an earlier branch ran or may have
    bool known = true;        // every condition so far was evaluated
    bool taken_known = false; // an earlier branch surely ran
  };
  std::vector<Condition> conditions_;
};

}  // namespace

Result<std::vector<ShellCommand>> parse_shell_script(const std::string& text, const std::string& origin) {
  return ScriptReader(text, origin).read();
}

std::string shell_basename(const std::string& word) {
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

Result<std::optional<LaunchLine>> find_launch_line(const std::vector<ShellCommand>& commands, const std::string& origin) {
  for (const ShellCommand& c : commands) {
    if (c.words.empty()) continue;
    const std::string first = shell_basename(c.words[0]);
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

}  // namespace llmplan::launch_formats
