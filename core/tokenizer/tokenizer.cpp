#include "core/tokenizer/tokenizer.h"

#include <algorithm>

namespace qs {

int32_t Vocabulary::find(std::string_view text) const {
  auto it = index_.find(std::string(text));
  return it == index_.end() ? -1 : it->second;
}

void Vocabulary::buildIndex() {
  index_.clear();
  index_.reserve(tokens.size());
  for (int32_t i = 0; i < int32_t(tokens.size()); ++i) index_.insert_or_assign(tokens[size_t(i)], i);
  if (types.size() < tokens.size()) types.resize(tokens.size(), TokenType::Normal);
}

Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::stopIds() const {
  std::vector<int32_t> out;
  for (int32_t id : vocab_.stopIds)
    if (id >= 0 && id < vocab_.size() && std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  if (vocab_.eos >= 0 && std::find(out.begin(), out.end(), vocab_.eos) == out.end()) out.insert(out.begin(), vocab_.eos);
  return out;
}

void setAddsBos(Tokenizer& t, bool add) { t.addBosDefault_ = add; }

std::string Tokenizer::decode(std::span<const int32_t> ids, bool special) const {
  std::string out;
  bool atStart = true;  // until the first token that is not BOS
  for (int32_t id : ids) {
    std::string piece = tokenText(id, special);
    if (id == vocab_.bos) {
      out += piece;
      continue;
    }
    // Only the first token after the start carries the tokenizer's own prefix space.
    if (atStart && stripsLeadingSpace_ && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    atStart = false;
    out += piece;
  }
  return out;
}

std::string Tokenizer::decodeNext(int32_t prev, int32_t id) const {
  std::string piece = tokenText(id);
  if (stripsLeadingSpace_ && prev == vocab_.bos && !piece.empty() && piece[0] == ' ')
    piece.erase(0, 1);
  return piece;
}

std::vector<Tokenizer::Fragment> Tokenizer::splitSpecial(std::string_view text,
                                                         bool parseSpecial) const {
  std::vector<Fragment> frags{{text, -1}};
  for (int32_t id : specials_) {
    const TokenType t = vocab_.types[size_t(id)];
    if (t == TokenType::Control && !parseSpecial) continue;
    const std::string& tok = vocab_.tokens[size_t(id)];
    if (tok.empty()) continue;
    std::vector<Fragment> next;
    for (const Fragment& f : frags) {
      if (f.id >= 0) {
        next.push_back(f);
        continue;
      }
      size_t pos = 0;
      while (true) {
        const size_t hit = f.text.find(tok, pos);
        if (hit == std::string_view::npos) break;
        if (hit > pos) next.push_back({f.text.substr(pos, hit - pos), -1});
        next.push_back({{}, id});
        pos = hit + tok.size();
      }
      if (pos < f.text.size()) next.push_back({f.text.substr(pos), -1});
    }
    frags = std::move(next);
  }
  return frags;
}

uint64_t textBytesForTokens(const Tokenizer& tok, int64_t tokens) {
  if (tokens <= 0) return 0;
  size_t longest = 1;
  for (const std::string& t : tok.vocab().tokens) longest = std::max(longest, t.size());
  return (uint64_t(tokens) + 64) * uint64_t(longest);
}

}  // namespace qs
