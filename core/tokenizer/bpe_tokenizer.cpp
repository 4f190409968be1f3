#include "core/tokenizer/bpe_tokenizer.h"

#include <unicode/unorm2.h>
#include <unicode/uregex.h>
#include <unicode/ustring.h>
#include <unicode/utext.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <cstdio>
#include <queue>

#include "kernels/common/error.h"

namespace qs {

const char* const kGpt2SplitRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the other 68 bytes
// map to U+0100 upwards in byte order.
struct ByteTable {
  std::array<std::string, 256> toUnicode;
  std::unordered_map<uint32_t, uint8_t> fromCodepoint;
  ByteTable() {
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = printable(b) ? uint32_t(b) : uint32_t(256 + extra++);
      std::string s;
      if (cp < 0x80) {
        s += char(cp);
      } else {  // two UTF-8 bytes suffice: cp < 0x800
        s += char(0xC0 | (cp >> 6));
        s += char(0x80 | (cp & 0x3F));
      }
      toUnicode[size_t(b)] = s;
      fromCodepoint[cp] = uint8_t(b);
    }
  }
};
const ByteTable& table() {
  static const ByteTable t;
  return t;
}

struct Symbol {
  int prev, next;
  size_t start, n;
};
struct Bigram {
  int left, right;
  int rank;
  std::string text;
};
struct BigramOrder {  // lowest rank on top, then leftmost (llama.cpp's llm_bigram_bpe)
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

const std::string& byteToUnicode(uint8_t b) { return table().toUnicode[b]; }

// ICU's match-time limit, in its ticks of 10,000 pattern operations (a fraction of a millisecond
// each): a pre-tokenizer regex that backtracks catastrophically on some text ("(a|aa)+$" on
// "aaa…b") fails with U_REGEX_TIME_OUT after 80M operations (~2 s) instead of running for
// hours. It bounds one search (see preTokenize); the longest legitimate search, a pattern
// scanning a whole 8 MiB text without a match, takes ~2,500 ticks.
constexpr int32_t kRegexTimeLimit = 8000;
// ICU's backtracking stack, per search (its default is 8 MB as well; set so it is explicit).
constexpr int32_t kRegexStackLimit = 8 << 20;

struct BpeTokenizer::Impl {
  std::string source;                          // the tokenizer file, for errors
  std::unordered_map<std::string, int> ranks;  // "left right" → rank
  // Compiled patterns; a URegularExpression is not thread-safe, so each use clones under a lock.
  std::vector<URegularExpression*> regexes;
  mutable std::mutex mutex;
  ~Impl() {
    for (auto* r : regexes) uregex_close(r);
  }
};

BpeTokenizer::BpeTokenizer(Vocabulary v, const std::vector<std::string>& merges, BpeOptions o,
                           const std::string& source)
    : Tokenizer(std::move(v)), impl_(std::make_unique<Impl>()), opt_(std::move(o)) {
  addBosDefault_ = opt_.addBos;
  stripsLeadingSpace_ = opt_.stripLeadingSpace;
  impl_->source = source;
  impl_->ranks.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& m = merges[i];
    const size_t sp = m.find(' ', 1);  // a part may itself be a lone space-like char at 0
    if (sp == std::string::npos || sp + 1 >= m.size())
      throwBadInput(source, "merges[" + std::to_string(i) + "]",
                    "\"" + m.substr(0, 40) + "\" is not two space-separated parts");
    // Both parts and their merge must be tokens (HF tokenizers refuses the file otherwise:
    // a merge naming non-tokens can never apply, or makes a symbol no token stands for).
    const std::string_view left(m.data(), sp), right(m.data() + sp + 1, m.size() - sp - 1);
    const std::string merged = std::string(left) + std::string(right);
    const char* missing = vocab_.find(left) < 0 ? "its left part" : vocab_.find(right) < 0 ? "its right part"
                          : vocab_.find(merged) < 0 ? "the merged token" : nullptr;
    if (missing)
      throwBadInput(source, "merges[" + std::to_string(i) + "]",
                    "\"" + m.substr(0, 40) + "\": " + missing + " is not in the vocabulary");
    impl_->ranks.emplace(m, int(i));  // the first occurrence keeps its rank
  }
  for (const auto& pattern : opt_.splitRegexes) {
    UErrorCode err = U_ZERO_ERROR;
    UParseError pe{};
    URegularExpression* re = uregex_openC(pattern.c_str(), 0, &pe, &err);
    if (U_FAILURE(err))
      throwBadInput(source, "pre-tokenizer regex",
                    "does not compile (" + std::string(u_errorName(err)) + " at offset " +
                        std::to_string(pe.offset) + "): " + pattern.substr(0, 80));
    impl_->regexes.push_back(re);
  }
  for (int32_t i = 0; i < vocab_.size(); ++i) {
    const TokenType t = vocab_.types[size_t(i)];
    if (t == TokenType::Control || t == TokenType::UserDefined) specials_.push_back(i);
  }
  std::stable_sort(specials_.begin(), specials_.end(), [&](int32_t a, int32_t b) {
    return vocab_.tokens[size_t(a)].size() > vocab_.tokens[size_t(b)].size();
  });
  std::fill(std::begin(byteIds_), std::end(byteIds_), -1);
  if (!opt_.byteLevel)
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      byteIds_[b] = vocab_.find(name);
      if (byteIds_[b] >= 0 && opt_.byteFallback && vocab_.types[size_t(byteIds_[b])] == TokenType::Normal)
        vocab_.types[size_t(byteIds_[b])] = TokenType::Byte;
    }
}

BpeTokenizer::~BpeTokenizer() = default;

std::vector<std::string> BpeTokenizer::preTokenize(std::string_view text) const {
  std::vector<std::string> pieces{std::string(text)};
  for (size_t ri = 0; ri < impl_->regexes.size(); ++ri) {
    URegularExpression* proto = impl_->regexes[ri];
    UErrorCode err = U_ZERO_ERROR;
    URegularExpression* re;
    {
      std::lock_guard lock(impl_->mutex);
      re = uregex_clone(proto, &err);
    }
    if (U_FAILURE(err)) throw Error(ErrorKind::Internal, "ICU regex clone failed");
    uregex_setTimeLimit(re, kRegexTimeLimit, &err);
    uregex_setStackLimit(re, kRegexStackLimit, &err);
    std::vector<std::string> next;
    for (const std::string& p : pieces) {
      UText ut = UTEXT_INITIALIZER;
      err = U_ZERO_ERROR;
      utext_openUTF8(&ut, p.data(), int64_t(p.size()), &err);
      uregex_setUText(re, &ut, &err);
      int64_t last = 0;
      // Each search starts with uregex_find64(from), which resets the matcher and with it ICU's
      // time count: the limit bounds one search, not the whole text (findNext would add up
      // every search of an 8 MiB text and time out on ordinary prose). An empty match moves the
      // next search on by one character, as findNext does.
      int64_t from = 0;
      while (U_SUCCESS(err) && from <= int64_t(p.size()) && uregex_find64(re, from, &err)) {
        const int64_t s = uregex_start64(re, 0, &err), e = uregex_end64(re, 0, &err);
        if (U_FAILURE(err)) break;
        if (e <= s) {
          from = s + int64_t(s < int64_t(p.size()) ? std::min(utf8Length(uint8_t(p[size_t(s)])), p.size() - size_t(s)) : 1);
          continue;
        }
        if (s > last) next.push_back(p.substr(size_t(last), size_t(s - last)));
        next.push_back(p.substr(size_t(s), size_t(e - s)));
        last = e;
        from = e;
      }
      if (last < int64_t(p.size())) next.push_back(p.substr(size_t(last)));
      utext_close(&ut);
      if (U_FAILURE(err)) {
        uregex_close(re);
        if (err == U_REGEX_TIME_OUT || err == U_REGEX_STACK_OVERFLOW)
          throwBadInput(impl_->source, "pre_tokenizer",
                        std::string("a pre-tokenizer regex ") +
                            (err == U_REGEX_TIME_OUT ? "ran past its time limit" : "overflowed its backtracking stack") +
                            " on a piece of " + std::to_string(p.size()) +
                            " bytes (catastrophic backtracking): " + opt_.splitRegexes[ri].substr(0, 60));
        throw Error(ErrorKind::Internal, std::string("ICU regex failed: ") + u_errorName(err));
      }
    }
    uregex_close(re);
    pieces = std::move(next);
  }
  return pieces;
}

void BpeTokenizer::encodeWord(const std::string& w, std::vector<int32_t>& out) const {
  if (w.empty()) return;
  if (opt_.ignoreMerges) {
    if (const int32_t id = vocab_.find(w); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<Symbol> sym;
  for (size_t off = 0; off < w.size();) {
    const size_t n = std::min(utf8Length(uint8_t(w[off])), w.size() - off);
    const int idx = int(sym.size());
    sym.push_back({idx - 1, off + n == w.size() ? -1 : idx + 1, off, n});
    off += n;
  }
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  std::string key;
  auto tryAdd = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    key.assign(w, sym[size_t(l)].start, sym[size_t(l)].n);
    key += ' ';
    key.append(w, sym[size_t(r)].start, sym[size_t(r)].n);
    auto it = impl_->ranks.find(key);
    if (it == impl_->ranks.end()) return;
    queue.push({l, r, it->second, w.substr(sym[size_t(l)].start, sym[size_t(l)].n + sym[size_t(r)].n)});
  };
  for (int i = 1; i < int(sym.size()); ++i) tryAdd(i - 1, i);
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[size_t(b.left)];
    Symbol& r = sym[size_t(b.right)];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.text.size() ||
        w.compare(l.start, b.text.size(), b.text) != 0)
      continue;  // stale
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[size_t(r.next)].prev = b.left;
    tryAdd(l.prev, b.left);
    tryAdd(b.left, l.next);
  }
  bool lastUnk = false;  // the previous symbol of this word became unk (fuse_unk)
  for (int i = sym.empty() ? -1 : 0; i != -1; i = sym[size_t(i)].next) {
    const std::string_view piece(w.data() + sym[size_t(i)].start, sym[size_t(i)].n);
    const int32_t id = vocab_.find(piece);
    if (id >= 0) {
      out.push_back(id);
      lastUnk = false;
      continue;
    }
    if (!opt_.byteLevel) {
      // A character without a token (merges never touch it: both parts of a merge are tokens).
      // HF BPE: its bytes as <0xXX> tokens when byte_fallback and all of them exist, else unk
      // (one unk for a run of them with fuse_unk).
      for (size_t off = 0; off < piece.size();) {
        const size_t n = std::min(utf8Length(uint8_t(piece[off])), piece.size() - off);
        bool bytesOk = opt_.byteFallback;
        for (size_t k = 0; bytesOk && k < n; ++k) bytesOk = byteIds_[uint8_t(piece[off + k])] >= 0;
        if (bytesOk) {
          for (size_t k = 0; k < n; ++k) out.push_back(byteIds_[uint8_t(piece[off + k])]);
          lastUnk = false;
        } else if (vocab_.unk >= 0) {
          if (!(opt_.fuseUnk && lastUnk)) out.push_back(vocab_.unk);
          lastUnk = true;
        }
        off += n;
      }
      continue;
    }
    // No token: emit the piece character by character (each mapped byte is a GPT-2 token).
    for (size_t off = 0; off < piece.size();) {
      const size_t n = std::min(utf8Length(uint8_t(piece[off])), piece.size() - off);
      const int32_t c = vocab_.find(piece.substr(off, n));
      if (c >= 0)
        out.push_back(c);
      else if (vocab_.unk >= 0)
        out.push_back(vocab_.unk);
      off += n;
    }
  }
}

namespace {
void replaceAll(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out += to;
  }
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

// Unicode NFC through ICU (invalid UTF-8 becomes U+FFFD, as a Rust String would not hold it).
std::string nfc(const std::string& s) {
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* n = unorm2_getNFCInstance(&err);
  int32_t len16 = 0;
  u_strFromUTF8WithSub(nullptr, 0, &len16, s.data(), int32_t(s.size()), 0xFFFD, nullptr, &err);
  if (err != U_BUFFER_OVERFLOW_ERROR && U_FAILURE(err)) throw Error(ErrorKind::Internal, "ICU UTF-8 conversion failed");
  err = U_ZERO_ERROR;
  std::u16string u(size_t(len16), u'\0');
  u_strFromUTF8WithSub(u.data(), len16, nullptr, s.data(), int32_t(s.size()), 0xFFFD, nullptr, &err);
  std::u16string o(u.size() * 3 + 4, u'\0');
  const int32_t on = unorm2_normalize(n, u.data(), int32_t(u.size()), o.data(), int32_t(o.size()), &err);
  if (U_FAILURE(err)) throw Error(ErrorKind::Internal, std::string("ICU NFC failed: ") + u_errorName(err));
  std::string r(size_t(on) * 3 + 4, '\0');
  int32_t rn = 0;
  u_strToUTF8(r.data(), int32_t(r.size()), &rn, o.data(), on, &err);
  if (U_FAILURE(err)) throw Error(ErrorKind::Internal, std::string("ICU UTF-8 conversion failed: ") + u_errorName(err));
  r.resize(size_t(rn));
  return r;
}
}  // namespace

std::string BpeTokenizer::normalize(std::string_view text, bool atInputStart) const {
  std::string s(text);
  for (const NormalizerStep& st : opt_.normalizer) {
    if (st.kind == NormalizerStep::Nfc)
      s = nfc(s);
    else if (st.kind == NormalizerStep::Prepend && !s.empty())
      s.insert(0, st.a);
    else if (st.kind == NormalizerStep::Replace)
      replaceAll(s, st.a, st.b);
  }
  if (!opt_.metaspace.empty()) {
    replaceAll(s, " ", opt_.metaspace);
    const bool prepend = opt_.prepend == BpeOptions::Prepend::Always ||
                         (opt_.prepend == BpeOptions::Prepend::First && atInputStart);
    if (prepend && !s.empty() && s.compare(0, opt_.metaspace.size(), opt_.metaspace) != 0) s.insert(0, opt_.metaspace);
  }
  return s;
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, const EncodeOptions& opt) const {
  std::vector<int32_t> out;
  if (opt.addBos && vocab_.bos >= 0) out.push_back(vocab_.bos);
  if (!opt_.byteLevel) {
    // SentencePiece-style: each run of raw text normalised, the Metaspace rules, optionally
    // split before each space symbol; no byte mapping.
    for (const Fragment& f : splitSpecial(text, opt.parseSpecial)) {
      if (f.id >= 0) {
        out.push_back(f.id);
        continue;
      }
      const std::string s = normalize(f.text, f.text.data() == text.data());
      if (!opt_.metaspaceSplit || opt_.metaspace.empty()) {
        encodeWord(s, out);
        continue;
      }
      size_t start = 0;
      for (size_t hit = s.find(opt_.metaspace, 1); hit != std::string::npos; hit = s.find(opt_.metaspace, hit + 1)) {
        encodeWord(s.substr(start, hit - start), out);
        start = hit;
      }
      encodeWord(s.substr(start), out);
    }
    if (opt.addEos && vocab_.eos >= 0) out.push_back(vocab_.eos);
    return out;
  }
  bool first = true;
  for (const Fragment& f : splitSpecial(text, opt.parseSpecial)) {
    if (f.id >= 0) {
      out.push_back(f.id);
      first = false;
      continue;
    }
    std::string raw = opt_.normalizer.empty() ? std::string(f.text) : normalize(f.text, first);
    if (first && opt_.addPrefixSpace && !raw.empty() && raw[0] != ' ') raw.insert(raw.begin(), ' ');
    first = false;
    for (const std::string& piece : preTokenize(raw)) {
      std::string mapped;
      mapped.reserve(piece.size() * 2);
      for (char c : piece) mapped += byteToUnicode(uint8_t(c));
      encodeWord(mapped, out);
    }
  }
  if (opt.addEos && vocab_.eos >= 0) out.push_back(vocab_.eos);
  return out;
}

std::string BpeTokenizer::tokenText(int32_t id, bool special) const {
  if (id < 0 || id >= vocab_.size())
    throw Error(ErrorKind::BadInput,
                "token id " + std::to_string(id) + " is outside the vocabulary of " +
                    std::to_string(vocab_.size()));
  const std::string& t = vocab_.tokens[size_t(id)];
  const TokenType type = vocab_.types[size_t(id)];
  if (type == TokenType::Control || type == TokenType::Unknown) return special ? t : std::string();
  if (type == TokenType::UserDefined) return t;
  if (!opt_.byteLevel) {
    if (type == TokenType::Byte) return std::string(1, char(std::stoi(t.substr(3, 2), nullptr, 16)));
    std::string out = t;
    if (!opt_.metaspace.empty()) replaceAll(out, opt_.metaspace, " ");
    for (const NormalizerStep& st : opt_.normalizer)
      if (st.kind == NormalizerStep::Replace && st.b.size()) replaceAll(out, st.b, st.a);
    return out;
  }
  // Map each character back to its byte; characters outside the table stay as they are.
  std::string out;
  for (size_t off = 0; off < t.size();) {
    const size_t n = std::min(utf8Length(uint8_t(t[off])), t.size() - off);
    uint32_t cp = uint8_t(t[off]);
    if (n == 2) cp = ((cp & 0x1Fu) << 6) | (uint8_t(t[off + 1]) & 0x3Fu);
    auto it = n <= 2 ? table().fromCodepoint.find(cp) : table().fromCodepoint.end();
    if (it != table().fromCodepoint.end())
      out += char(it->second);
    else
      out.append(t, off, n);
    off += n;
  }
  return out;
}

}  // namespace qs
