#include "executor/data.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "executor/cpu/dropout.h"

namespace llmplan::exec {

namespace fs = std::filesystem;

std::vector<int32_t> byte_tokenize(const std::string& text) {
  std::vector<int32_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return out;
}

namespace {

Result<std::string> slurp(const fs::path& p) {
  // Regular files only: /dev/zero or a FIFO would read until memory runs out.
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return Status::bad_input(p.string() + ": not a regular file (expected a token or text file)");
  std::ifstream in(p, std::ios::binary);
  if (!in) return Status::bad_input(p.string() + ": cannot open");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

}  // namespace

Result<TokenData> read_token_data(const std::string& path, int32_t eot) {
  TokenData d;
  d.source = path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.is_regular_file() && e.path().extension() == ".txt") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    if (files.empty()) return Status::bad_input(path + ": no .txt files in this folder");
    for (const fs::path& f : files) {
      Result<std::string> t = slurp(f);
      if (!t) return t.status();
      const std::vector<int32_t> ids = byte_tokenize(*t);
      d.tokens.insert(d.tokens.end(), ids.begin(), ids.end());
      d.tokens.push_back(kByteEot);
    }
    return d;
  }
  if (!fs::exists(path, ec)) return Status::bad_input(path + ": no such file or folder");
  Result<std::string> raw = slurp(path);
  if (!raw) return raw.status();
  if (ends_with(path, ".txt")) {
    d.tokens = byte_tokenize(*raw);
    d.tokens.push_back(kByteEot);
  } else if (ends_with(path, ".bin")) {
    const bool wide = ends_with(path, ".u32.bin");
    const size_t w = wide ? 4 : 2;
    if (raw->size() % w != 0)
      return Status::bad_input(path + ": size " + std::to_string(raw->size()) + " bytes is not a whole number of " +
                               (wide ? "uint32" : "uint16") + " token ids");
    const auto* b = reinterpret_cast<const unsigned char*>(raw->data());
    d.tokens.resize(raw->size() / w);
    int64_t max_id = 0;
    for (size_t i = 0; i < d.tokens.size(); ++i) {  // little-endian, whatever the host
      uint32_t v = b[i * w] | (uint32_t{b[i * w + 1]} << 8);
      if (wide) v |= (uint32_t{b[i * w + 2]} << 16) | (uint32_t{b[i * w + 3]} << 24);
      if (v > 0x7FFFFFFFu) return Status::bad_input(path + ": token " + std::to_string(i) + " id " + std::to_string(v) + " too large");
      d.tokens[i] = static_cast<int32_t>(v);
      max_id = std::max<int64_t>(max_id, v);
    }
    d.eot = eot;
    d.vocab = max_id + 1;
  } else {
    return Status::bad_input(path + ": expected a .bin / .u32.bin token file, a .txt file or a folder of .txt files");
  }
  if (d.tokens.empty()) return Status::bad_input(path + ": no tokens");
  return d;
}

Result<DataLoader> DataLoader::create(TokenData data, int64_t seq_len, int num_shards, int shard_id) {
  DataLoader l;
  l.seq_len_ = seq_len;
  l.num_shards_ = num_shards;
  l.shard_id_ = shard_id;
  const int64_t total = static_cast<int64_t>(data.tokens.size());
  l.windows_ = total >= seq_len + 1 ? (total - 1) / seq_len : 0;  // windows overlap by the one target token
  if (l.windows_ < num_shards)
    return Status::bad_input(data.source + ": " + std::to_string(total) + " tokens make " + std::to_string(l.windows_) +
                             " sequences of " + std::to_string(seq_len) + "; need at least " + std::to_string(num_shards));
  l.data_ = std::move(data);
  return l;
}

int64_t DataLoader::windows_in_shard() const {
  return windows_ / num_shards_ + (shard_id_ < windows_ % num_shards_ ? 1 : 0);
}

void DataLoader::next(int64_t b, PackedBatch* out) {
  const int64_t s = seq_len_;
  out->tokens.resize(static_cast<size_t>(b * s));
  out->targets.resize(static_cast<size_t>(b * s));
  out->doc_ids.resize(static_cast<size_t>(b * s));
  for (int64_t r = 0; r < b; ++r) {
    const int64_t w = (cursor_ % windows_in_shard()) * num_shards_ + shard_id_;
    ++cursor_;
    const int32_t* src = data_.tokens.data() + w * s;
    int32_t doc = 0;
    for (int64_t i = 0; i < s; ++i) {
      const size_t o = static_cast<size_t>(r * s + i);
      out->tokens[o] = src[i];
      out->targets[o] = src[i + 1];
      out->doc_ids[o] = doc;
      if (src[i] == data_.eot) ++doc;  // the next token starts a new document
    }
  }
}

void synthetic_batch(int64_t b, int64_t s, int64_t vocab, uint64_t seed, PackedBatch* out) {
  out->tokens.resize(static_cast<size_t>(b * s));
  out->targets.resize(static_cast<size_t>(b * s));
  out->doc_ids.assign(static_cast<size_t>(b * s), 0);
  for (int64_t i = 0; i < b * s; ++i) {
    out->tokens[static_cast<size_t>(i)] = static_cast<int32_t>(cpu::splitmix64_at(seed, static_cast<uint64_t>(2 * i)) % static_cast<uint64_t>(vocab));
    out->targets[static_cast<size_t>(i)] = static_cast<int32_t>(cpu::splitmix64_at(seed, static_cast<uint64_t>(2 * i + 1)) % static_cast<uint64_t>(vocab));
  }
}

}  // namespace llmplan::exec
