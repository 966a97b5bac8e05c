// Training data for the executor: token files, a byte-level tokenizer for text, packing of
// documents into fixed-length sequences with document ids, a disjoint shard per
// data-parallel rank, and synthetic tokens for pure speed runs.
//
// Token files are raw little-endian arrays of token ids, documents separated by an EOT id:
// `*.u32.bin` holds uint32, any other `*.bin` uint16 (the nanoGPT / llm.c convention).
// Text (a `.txt` file, or a folder: every `*.txt` in name order, one document each) is
// tokenised byte-level: ids 0..255 are bytes, 256 is EOT (vocabulary 257).
//
// Packing: the stream is cut into windows of seq_len + 1 tokens (inputs = the first
// seq_len, targets = the last seq_len). A document id counts the EOTs before each input
// token within its sequence, so attention stays inside a document (the EOT belongs to
// the document it ends). Window w belongs to shard w % num_shards: shards are disjoint and
// each rank reads only its own; a shard wraps around when it reaches its end.
//
// Thread-safety: a DataLoader is used by one thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/spec/status.h"

namespace llmplan::exec {

inline constexpr int32_t kByteEot = 256;     // EOT of the byte-level tokenizer
inline constexpr int64_t kByteVocab = 257;   // 256 bytes + EOT

// Bytes of `text` as token ids 0..255.
std::vector<int32_t> byte_tokenize(const std::string& text);

struct TokenData {
  std::vector<int32_t> tokens;  // documents separated by eot
  int32_t eot = kByteEot;
  int64_t vocab = kByteVocab;   // ids are < vocab (text: 257; token files: max id + 1)
  std::string source;           // the file or folder read
};

// Reads a token file (.bin / .u32.bin), a text file (.txt) or a folder of .txt files.
// Errors (bad_input, naming the path): missing or unreadable, a size that is not a whole
// number of ids, no tokens, an empty folder. For token files `eot` is the separator id.
Result<TokenData> read_token_data(const std::string& path, int32_t eot = 50256);

// One packed micro-batch: (b, s) row-major each.
struct PackedBatch {
  std::vector<int32_t> tokens, targets, doc_ids;
};

class DataLoader {
 public:
  // REQUIRES: seq_len >= 1, 0 <= shard_id < num_shards. Error (bad_input) when the data
  // holds fewer than num_shards windows of seq_len + 1 tokens.
  static Result<DataLoader> create(TokenData data, int64_t seq_len, int num_shards = 1, int shard_id = 0);
  // The next b sequences of this shard.
  void next(int64_t b, PackedBatch* out);
  int64_t windows_in_shard() const;

 private:
  DataLoader() = default;
  TokenData data_;
  int64_t seq_len_ = 0, windows_ = 0, cursor_ = 0;
  int num_shards_ = 1, shard_id_ = 0;
};

// b sequences of uniform random ids in [0, vocab) (no documents), reproducible from seed.
void synthetic_batch(int64_t b, int64_t seq_len, int64_t vocab, uint64_t seed, PackedBatch* out);

}  // namespace llmplan::exec
