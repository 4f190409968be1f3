#include "core/tokenizer/sentencepiece_model.h"

#include <sentencepiece_processor.h>

#include <algorithm>

#include "core/io/mapped_file.h"
#include "kernels/common/error.h"

namespace qs {

namespace {
constexpr uint64_t kMaxModelBytes = uint64_t(64) << 20;  // Llama 2's is 0.5 MB, Gemma's 4 MB

// A protobuf varint at `p` (advances it); false when it runs past `end` or past 10 bytes.
bool readVarint(const std::byte*& p, const std::byte* end, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && p < end; shift += 7) {
    const auto b = uint8_t(*p++);
    v |= uint64_t(b & 0x7F) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}
}  // namespace

bool looksLikeSentencePieceModel(std::span<const std::byte> head) {
  const std::byte* p = head.data();
  const std::byte* end = p + head.size();
  uint64_t len = 0, inner = 0;
  if (p >= end || uint8_t(*p++) != 0x0A) return false;  // ModelProto.pieces (1, length-delimited)
  if (!readVarint(p, end, len) || len < 2) return false;
  if (p >= end || uint8_t(*p++) != 0x0A) return false;  // SentencePiece.piece (1, string)
  return readVarint(p, end, inner) && inner < len;
}

SentencePieceModelTokenizer::SentencePieceModelTokenizer(Vocabulary v,
                                                         std::unique_ptr<sentencepiece::SentencePieceProcessor> sp)
    : Tokenizer(std::move(v)), sp_(std::move(sp)) {
  addBosDefault_ = vocab_.bos >= 0;  // sentencepiece models are used with BOS (Llama, Mistral, Gemma)
  stripsLeadingSpace_ = true;
  for (int32_t i = 0; i < vocab_.size(); ++i)
    if (vocab_.types[size_t(i)] == TokenType::Control) specials_.push_back(i);
  std::stable_sort(specials_.begin(), specials_.end(), [&](int32_t a, int32_t b) {
    return vocab_.tokens[size_t(a)].size() > vocab_.tokens[size_t(b)].size();
  });
}

SentencePieceModelTokenizer::~SentencePieceModelTokenizer() = default;

std::vector<int32_t> SentencePieceModelTokenizer::encode(std::string_view text, const EncodeOptions& opt) const {
  std::vector<int32_t> out;
  if (opt.addBos && vocab_.bos >= 0) out.push_back(vocab_.bos);
  std::vector<int> ids;
  for (const Fragment& f : splitSpecial(text, opt.parseSpecial)) {
    if (f.id >= 0) {
      out.push_back(f.id);
      continue;
    }
    ids.clear();
    const auto st = sp_->Encode(f.text, &ids);
    if (!st.ok()) throw Error(ErrorKind::BadInput, std::string("sentencepiece could not encode the text: ") + st.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  }
  if (opt.addEos && vocab_.eos >= 0) out.push_back(vocab_.eos);
  return out;
}

std::string SentencePieceModelTokenizer::tokenText(int32_t id, bool special) const {
  if (id < 0 || id >= vocab_.size())
    throw Error(ErrorKind::BadInput,
                "token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(vocab_.size()));
  const std::string& t = vocab_.tokens[size_t(id)];
  const TokenType type = vocab_.types[size_t(id)];
  if (type == TokenType::Control || type == TokenType::Unknown || type == TokenType::Unused)
    return special || type == TokenType::Unknown ? (type == TokenType::Unknown ? std::string(" \xE2\x81\x87 ") : t)
                                                 : std::string();
  if (type == TokenType::Byte && t.size() == 6) return std::string(1, char(std::stoi(t.substr(3, 2), nullptr, 16)));
  std::string out;
  for (size_t pos = 0; pos < t.size();) {  // "▁" → " "
    if (t.compare(pos, 3, "\xE2\x96\x81") == 0) {
      out += ' ';
      pos += 3;
    } else {
      out += t[pos++];
    }
  }
  return out;
}

std::string SentencePieceModelTokenizer::decode(std::span<const int32_t> ids, bool special) const {
  if (special) return Tokenizer::decode(ids, true);
  std::vector<int> v;
  v.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_.size())
      throw Error(ErrorKind::BadInput,
                  "token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(vocab_.size()));
    v.push_back(id);
  }
  std::string out;
  const auto st = sp_->Decode(v, &out);
  if (!st.ok()) throw Error(ErrorKind::BadInput, std::string("sentencepiece could not decode: ") + st.ToString());
  return out;
}

std::unique_ptr<SentencePieceModelTokenizer> loadSentencePieceModel(const std::string& path) {
  MappedFile f(path, "tokenizer file");
  if (f.size() > kMaxModelBytes)
    throwBadInput(path, "", "a SentencePiece model of " + std::to_string(f.size()) + " bytes is implausibly large");
  const auto bytes = f.bytes();
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto st = sp->LoadFromSerializedProto(
      std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  if (!st.ok()) throwBadInput(path, "ModelProto", "sentencepiece refuses the model: " + st.ToString());
  const int n = sp->GetPieceSize();
  if (n <= 0 || n > (1 << 22)) throwBadInput(path, "pieces", std::to_string(n) + " pieces (1 to 2^22)");
  Vocabulary v;
  v.tokens.resize(size_t(n));
  v.scores.resize(size_t(n));
  v.types.resize(size_t(n));
  for (int i = 0; i < n; ++i) {
    v.tokens[size_t(i)] = sp->IdToPiece(i);
    v.scores[size_t(i)] = sp->GetScore(i);
    v.types[size_t(i)] = sp->IsControl(i)   ? TokenType::Control
                         : sp->IsUnknown(i) ? TokenType::Unknown
                         : sp->IsByte(i)    ? TokenType::Byte
                         : sp->IsUnused(i)  ? TokenType::Unused
                                            : TokenType::Normal;
  }
  auto id = [&](int x) { return x >= 0 && x < n ? int32_t(x) : -1; };
  v.bos = id(sp->bos_id());
  v.eos = id(sp->eos_id());
  v.unk = id(sp->unk_id());
  v.pad = id(sp->pad_id());
  return std::unique_ptr<SentencePieceModelTokenizer>(new SentencePieceModelTokenizer(std::move(v), std::move(sp)));
}

}  // namespace qs
