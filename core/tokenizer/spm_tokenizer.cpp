#include "core/tokenizer/spm_tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <functional>
#include <queue>

#include "kernels/common/error.h"

namespace qs {

SpmTokenizer::SpmTokenizer(Vocabulary v, SpmOptions o) : Tokenizer(std::move(v)), opt_(std::move(o)) {
  stripsLeadingSpace_ = opt_.addSpacePrefix;
  addBosDefault_ = opt_.addBos;
  // Byte fallback: "<0xXX>", else the single-byte token itself, else <unk> (llama.cpp's order).
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    int32_t id = vocab_.find(name);
    if (id < 0) id = vocab_.find(std::string(1, char(b)));
    byteTokens_[b] = id >= 0 ? id : vocab_.unk;
  }
  for (int32_t i = 0; i < vocab_.size(); ++i) {
    const TokenType t = vocab_.types[size_t(i)];
    if (t == TokenType::Control || t == TokenType::UserDefined) specials_.push_back(i);
  }
  std::stable_sort(specials_.begin(), specials_.end(), [&](int32_t a, int32_t b) {
    return vocab_.tokens[size_t(a)].size() > vocab_.tokens[size_t(b)].size();
  });
}

std::string SpmTokenizer::escape(std::string_view text) const {
  std::string out;
  out.reserve(text.size() + 8);
  for (char c : text) {
    if (c == ' ')
      out += opt_.spaceSymbol;
    else
      out += c;
  }
  return out;
}

std::vector<int32_t> SpmTokenizer::encode(std::string_view text, const EncodeOptions& opt) const {
  return encode(text, opt, opt_.mode);
}

std::vector<int32_t> SpmTokenizer::encode(std::string_view text, const EncodeOptions& opt,
                                          SpmEncodeMode mode) const {
  std::vector<int32_t> out;
  if (opt.addBos && vocab_.bos >= 0) out.push_back(vocab_.bos);
  if (mode == SpmEncodeMode::Llama2c) {
    encodeLlama2c(text, out);
  } else {
    // llama.cpp: a space is prefixed to raw text at the start and after each special token.
    bool prevSpecial = true;
    for (const Fragment& f : splitSpecial(text, opt.parseSpecial)) {
      if (f.id >= 0) {
        out.push_back(f.id);
        prevSpecial = true;
        continue;
      }
      if (f.text.empty()) continue;  // llama.cpp makes no fragment of empty text
      std::string raw;
      if (opt_.addSpacePrefix && prevSpecial) raw = " ";
      raw.append(f.text);
      encodeLlamaCpp(escape(raw), out);
      prevSpecial = false;
    }
  }
  if (opt.addEos && vocab_.eos >= 0) out.push_back(vocab_.eos);
  return out;
}

namespace {
struct Symbol {
  int prev, next;
  size_t start, n;  // byte range in the escaped text; n == 0 once merged away
};
struct Bigram {
  int left, right;
  float score;
  size_t size;
};
// Highest score on top; among equal scores the leftmost (llama.cpp's llm_bigram_spm order).
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};
}  // namespace

void SpmTokenizer::encodeLlamaCpp(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<Symbol> sym;
  for (size_t off = 0; off < text.size();) {
    const size_t n = std::min(utf8Length(uint8_t(text[off])), text.size() - off);
    const int idx = int(sym.size());
    sym.push_back({idx - 1, off + n == text.size() ? -1 : idx + 1, off, n});
    off += n;
  }
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  std::map<std::string, std::pair<int, int>, std::less<>> revMerge;
  auto tryAdd = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const std::string_view s = text.substr(sym[size_t(left)].start, sym[size_t(left)].n + sym[size_t(right)].n);
    const int32_t id = vocab_.find(s);
    if (id < 0) return;
    queue.push({left, right, vocab_.scores.empty() ? 0.0f : vocab_.scores[size_t(id)], s.size()});
    revMerge.insert_or_assign(std::string(s), std::make_pair(left, right));
  };
  for (int i = 1; i < int(sym.size()); ++i) tryAdd(i - 1, i);
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[size_t(b.left)];
    Symbol& r = sym[size_t(b.right)];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // stale
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[size_t(r.next)].prev = b.left;
    tryAdd(l.prev, b.left);
    tryAdd(b.left, l.next);
  }
  // A symbol that is a token is emitted; one that is not is split back along the merge that
  // made it, and single characters without a token fall back to their bytes.
  std::function<void(const Symbol&, int)> resegment = [&](const Symbol& s, int depth) {
    const std::string_view piece = text.substr(s.start, s.n);
    const int32_t id = vocab_.find(piece);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
    auto it = revMerge.find(piece);
    if (it == revMerge.end() || depth > 64) {
      for (char c : piece)
        if (byteTokens_[uint8_t(c)] >= 0) out.push_back(byteTokens_[uint8_t(c)]);  // else: no way to say it
      return;
    }
    resegment(sym[size_t(it->second.first)], depth + 1);
    resegment(sym[size_t(it->second.second)], depth + 1);
  };
  for (int i = sym.empty() ? -1 : 0; i != -1; i = sym[size_t(i)].next) resegment(sym[size_t(i)], 0);
}

void SpmTokenizer::encodeLlama2c(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::vector<int32_t> toks;
  // The dummy prefix: the token for a single space.
  const int32_t space = vocab_.find(opt_.spaceSymbol);
  if (opt_.addSpacePrefix && space >= 0) toks.push_back(space);
  for (size_t off = 0; off < text.size();) {
    // run.c groups any byte with up to three following continuation bytes (on the raw text,
    // where a space is still one byte).
    size_t n = 1;
    while (off + n < text.size() && n < 4 && (uint8_t(text[off + n]) & 0xC0) == 0x80) ++n;
    const std::string_view raw(text.data() + off, n);
    const int32_t id = vocab_.find(escape(raw));
    if (id >= 0) {
      toks.push_back(id);
    } else {
      for (char c : raw) toks.push_back(byteTokens_[uint8_t(c)]);
    }
    off += n;
  }
  // run.c merges, again and again, the adjacent pair with the best score anywhere in the
  // sequence (the leftmost on ties, scores <= -1e10 never). A priority queue ordered by (score
  // desc, left position asc) with stale entries skipped makes exactly the same choices in
  // O(n log n) instead of run.c's O(n²) rescans: positions keep their order as symbols merge.
  struct Sym {
    int32_t id;
    int prev, next;
    uint32_t version;
  };
  struct Cand {
    float score;
    int left, right;
    uint32_t vl, vr;
    int32_t merged;
  };
  struct CandOrder {
    bool operator()(const Cand& a, const Cand& b) const {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
  };
  std::vector<Sym> sym(toks.size());
  for (size_t i = 0; i < toks.size(); ++i)
    sym[i] = {toks[i], int(i) - 1, i + 1 < toks.size() ? int(i) + 1 : -1, 0};
  std::priority_queue<Cand, std::vector<Cand>, CandOrder> queue;
  std::string pair;
  auto push = [&](int l, int r) {
    if (l < 0 || r < 0 || sym[size_t(l)].id < 0 || sym[size_t(r)].id < 0) return;
    pair = vocab_.tokens[size_t(sym[size_t(l)].id)];
    pair += vocab_.tokens[size_t(sym[size_t(r)].id)];
    const int32_t id = vocab_.find(pair);
    if (id < 0) return;
    const float sc = vocab_.scores.empty() ? 0.0f : vocab_.scores[size_t(id)];
    if (!(sc > -1e10f)) return;
    queue.push({sc, l, r, sym[size_t(l)].version, sym[size_t(r)].version, id});
  };
  for (int i = 0; i + 1 < int(sym.size()); ++i) push(i, i + 1);
  std::vector<bool> alive(sym.size(), true);
  while (!queue.empty()) {
    const Cand c = queue.top();
    queue.pop();
    Sym& l = sym[size_t(c.left)];
    if (!alive[size_t(c.left)] || !alive[size_t(c.right)] || l.next != c.right || l.version != c.vl ||
        sym[size_t(c.right)].version != c.vr)
      continue;  // stale
    l.id = c.merged;
    ++l.version;
    alive[size_t(c.right)] = false;
    l.next = sym[size_t(c.right)].next;
    if (l.next >= 0) sym[size_t(l.next)].prev = c.left;
    push(l.prev, c.left);
    push(c.left, l.next);
  }
  toks.clear();
  for (int i = sym.empty() ? -1 : 0; i >= 0; i = sym[size_t(i)].next)
    if (sym[size_t(i)].id >= 0) toks.push_back(sym[size_t(i)].id);  // a byte the vocabulary cannot say is dropped
  out.insert(out.end(), toks.begin(), toks.end());
}

std::string SpmTokenizer::tokenText(int32_t id, bool special) const {
  if (id < 0 || id >= vocab_.size())
    throw Error(ErrorKind::BadInput,
                "token id " + std::to_string(id) + " is outside the vocabulary of " +
                    std::to_string(vocab_.size()));
  const std::string& t = vocab_.tokens[size_t(id)];
  switch (vocab_.types[size_t(id)]) {
    case TokenType::Control:
    case TokenType::Unknown:
      return special ? t : std::string();
    case TokenType::Byte: {
      unsigned v = 0;
      if (t.size() == 6 && std::sscanf(t.c_str(), "<0x%02X>", &v) == 1) return std::string(1, char(v));
      return t;
    }
    default: break;
  }
  // Unescape the space symbol.
  std::string out;
  const std::string& sp = opt_.spaceSymbol;
  for (size_t i = 0; i < t.size();) {
    if (!sp.empty() && t.compare(i, sp.size(), sp) == 0) {
      out += ' ';
      i += sp.size();
    } else {
      out += t[i++];
    }
  }
  return out;
}

}  // namespace qs
