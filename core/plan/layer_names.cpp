#include "core/plan/layer_names.h"

#include <cctype>
#include <charconv>

#include "kernels/common/error.h"

namespace qs {
namespace {

std::string withoutWeightSuffix(const std::string& name) {
  const std::string suffix = ".weight";
  if (name.size() > suffix.size() &&
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
    return name.substr(0, name.size() - suffix.size());
  return name;
}

bool isDigit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

}  // namespace

std::string_view canonicalRoleName(LinearRole role) {
  switch (role) {
    case LinearRole::Q: return "attn.q";
    case LinearRole::K: return "attn.k";
    case LinearRole::V: return "attn.v";
    case LinearRole::O: return "attn.o";
    case LinearRole::QkvFused: return "attn.qkv";
    case LinearRole::AttnOut: return "attn.o";
    case LinearRole::Gate: return "mlp.gate";
    case LinearRole::Up: return "mlp.up";
    case LinearRole::MlpIn: return "mlp.up";
    case LinearRole::Down: return "mlp.down";
    case LinearRole::MlpOut: return "mlp.down";
    case LinearRole::Head: return "head";
    case LinearRole::Generic: return "";
    case LinearRole::GateUpFused: return "mlp.gate_up";
  }
  return "";
}

std::vector<PlanLayer> planLayers(const ModelGraph& graph) {
  std::vector<PlanLayer> out;
  for (const auto& b : graph.blocks) {
    for (const auto& l : b.linears) {
      PlanLayer p;
      p.linear = &l;
      p.block = b.index;
      const std::string_view role = canonicalRoleName(l.role);
      p.name = "blocks." + std::to_string(b.index) + "." +
               (role.empty() ? withoutWeightSuffix(l.weightName) : std::string(role));
      out.push_back(std::move(p));
    }
  }
  for (const auto& l : graph.looseLinears) {
    PlanLayer p;
    p.linear = &l;
    p.name = "other." + withoutWeightSuffix(l.weightName);
    out.push_back(std::move(p));
  }
  if (graph.head.weight >= 0 && !graph.tiedHead) {
    PlanLayer p;
    p.linear = &graph.head;
    p.name = "head";
    out.push_back(std::move(p));
  }
  for (size_t i = 0; i < out.size(); ++i) {
    PlanLayer& p = out[i];
    p.index = int(i);
    p.weightName = p.linear->weightName;
    p.role = std::string(linearRoleName(p.linear->role));
    p.outFeatures = p.linear->outFeatures;
    p.inFeatures = p.linear->inFeatures;
    p.parameters = uint64_t(p.outFeatures) * uint64_t(p.inFeatures);
  }
  return out;
}

std::vector<LayerRef> linearLayerRows(const ModelGraph& graph) {
  std::vector<LayerRef> out;
  for (const PlanLayer& p : planLayers(graph)) out.push_back(p);
  if (graph.tiedHead && graph.head.weight >= 0) {  // the runtime runs it: the embedding as the head
    LayerRef r;
    r.name = "head";
    r.weightName = graph.head.weightName;
    r.role = std::string(linearRoleName(graph.head.role));
    r.outFeatures = graph.head.outFeatures;
    r.inFeatures = graph.head.inFeatures;
    r.parameters = uint64_t(r.outFeatures) * uint64_t(r.inFeatures);
    out.push_back(r);
  }
  return out;
}

void nameLayerRows(std::vector<LayerRef>& rows, const ModelGraph& graph, const std::string& file,
                   const std::string& field, bool otherModel) {
  const std::vector<LayerRef> model = linearLayerRows(graph);
  std::vector<char> taken(model.size(), 0);  // a model row named twice (by name and by weight name)
  for (size_t i = 0; i < rows.size(); ++i) {
    LayerRef& r = rows[i];
    const std::string where = field + "[" + std::to_string(i) + "]";
    // Rows written since session 10 carry their canonical name: it is the key, so a table
    // measured on one file of a model (a GGUF) names the layers of another file of it (the
    // safetensors checkpoint), whose tensor names differ. Older rows key by weight name. Tables
    // list the model's rows in order: row i is nearly always layer i.
    const std::string fileName = std::move(r.name);
    r.name.clear();
    auto find = [&](auto same) -> const LayerRef* {
      if (i < model.size() && same(model[i])) return &model[i];
      for (const LayerRef& x : model)
        if (same(x)) return &x;
      return nullptr;
    };
    const LayerRef* m = fileName.empty() ? nullptr : find([&](const LayerRef& x) { return x.name == fileName; });
    if (!m) m = find([&](const LayerRef& x) { return x.weightName == r.weightName; });
    if (!m && otherModel) continue;
    if (!m)
      throwBadInput(file, where, "'" + (fileName.empty() ? r.weightName : fileName) + "' is no linear layer of this " +
                                     graph.architecture + " model (the table was made for another model)");
    if (r.outFeatures == 0 && r.inFeatures == 0) {  // a JSON table may leave the shape out
      r.outFeatures = m->outFeatures;
      r.inFeatures = m->inFeatures;
      r.parameters = m->parameters;
    }
    if (!otherModel && (m->outFeatures != r.outFeatures || m->inFeatures != r.inFeatures))
      throwBadInput(file, where, "'" + r.weightName + "' is [" + std::to_string(r.outFeatures) + ", " +
                                     std::to_string(r.inFeatures) + "] in the table, [" + std::to_string(m->outFeatures) +
                                     ", " + std::to_string(m->inFeatures) + "] in the model");
    if (taken[size_t(m - model.data())]++)
      throwBadInput(file, where, "'" + m->name + "' (" + m->weightName + ") is listed twice");
    r.name = m->name;
    r.weightName = m->weightName;  // this model's tensor: what the runtime and the exports look up
  }
}

std::string hfModuleName(const ModelGraph& graph, const PlanLayer& layer) {
  const LinearLayer& l = *layer.linear;
  if (l.role == LinearRole::Head) return "lm_head";
  const std::string b = std::to_string(layer.block);
  if (graph.family == GraphFamily::Llama && layer.block >= 0) {
    const std::string p = "model.layers." + b + ".";
    switch (l.role) {
      case LinearRole::Q: return p + "self_attn.q_proj";
      case LinearRole::K: return p + "self_attn.k_proj";
      case LinearRole::V: return p + "self_attn.v_proj";
      case LinearRole::O: return p + "self_attn.o_proj";
      case LinearRole::Gate: return p + "mlp.gate_proj";
      case LinearRole::Up: return p + "mlp.up_proj";
      case LinearRole::Down: return p + "mlp.down_proj";
      case LinearRole::QkvFused: return p + "self_attn.qkv_proj";
      case LinearRole::GateUpFused: return p + "mlp.gate_up_proj";
      default: break;
    }
  }
  if (graph.family == GraphFamily::Gpt2 && layer.block >= 0) {
    const std::string p = "transformer.h." + b + ".";
    switch (l.role) {
      case LinearRole::QkvFused: return p + "attn.c_attn";
      case LinearRole::AttnOut: return p + "attn.c_proj";
      case LinearRole::MlpIn: return p + "mlp.c_fc";
      case LinearRole::MlpOut: return p + "mlp.c_proj";
      default: break;
    }
  }
  return withoutWeightSuffix(l.weightName);
}

std::string ggufTensorName(const ModelGraph& graph, const PlanLayer& layer) {
  const LinearLayer& l = *layer.linear;
  if (l.role == LinearRole::Head) return "output.weight";
  if (graph.family == GraphFamily::WeightsOnly || layer.block < 0) return l.weightName;
  const std::string p = "blk." + std::to_string(layer.block) + ".";
  switch (l.role) {
    case LinearRole::Q: return p + "attn_q.weight";
    case LinearRole::K: return p + "attn_k.weight";
    case LinearRole::V: return p + "attn_v.weight";
    case LinearRole::O: return p + "attn_output.weight";
    case LinearRole::QkvFused: return p + "attn_qkv.weight";
    case LinearRole::AttnOut: return p + "attn_output.weight";
    case LinearRole::Gate: return p + "ffn_gate.weight";
    case LinearRole::Up: return p + "ffn_up.weight";
    case LinearRole::MlpIn: return p + "ffn_up.weight";
    case LinearRole::GateUpFused: return p + "ffn_up.weight";  // llama.cpp's phi3 keeps gate|up there
    case LinearRole::Down: return p + "ffn_down.weight";
    case LinearRole::MlpOut: return p + "ffn_down.weight";
    default: return l.weightName;
  }
}

// ------------------------------------------------------------------------------------------------
// Selectors

LayerSelector LayerSelector::parse(std::string_view text, const std::string& where) {
  LayerSelector s;
  s.text_ = std::string(text);
  if (text.empty()) throwBadInput({}, where, "empty layer selector");
  auto bad = [&](const std::string& msg) {
    throwBadInput({}, where, "layer selector '" + std::string(text) + "': " + msg);
  };
  auto addLiteral = [&](char c) {
    if (s.tokens_.empty() || s.tokens_.back().kind != Token::Literal) s.tokens_.push_back({});
    s.tokens_.back().literal += c;
  };
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    const bool segmentStart = i == 0 || text[i - 1] == '.';
    if (segmentStart && isDigit(c)) {
      // A whole segment of the form N-M is a range.
      size_t end = text.find('.', i);
      if (end == std::string_view::npos) end = text.size();
      const std::string_view seg = text.substr(i, end - i);
      const size_t dash = seg.find('-');
      if (dash != std::string_view::npos && dash > 0 && dash + 1 < seg.size()) {
        long long lo = 0, hi = 0;
        const auto r1 = std::from_chars(seg.data(), seg.data() + dash, lo);
        const auto r2 = std::from_chars(seg.data() + dash + 1, seg.data() + seg.size(), hi);
        if (r1.ec == std::errc() && r1.ptr == seg.data() + dash && r2.ec == std::errc() &&
            r2.ptr == seg.data() + seg.size()) {
          if (lo > hi) bad("range " + std::string(seg) + " is empty (start after end)");
          Token t;
          t.kind = Token::Range;
          t.lo = lo;
          t.hi = hi;
          s.tokens_.push_back(t);
          s.pattern_ = true;
          i = end;
          continue;
        }
      }
    }
    if (c == '*') {
      if (s.tokens_.empty() || s.tokens_.back().kind != Token::Star) {
        Token t;
        t.kind = Token::Star;
        s.tokens_.push_back(t);
      }
      s.pattern_ = true;
      ++i;
    } else if (c == '?') {
      Token t;
      t.kind = Token::AnyChar;
      s.tokens_.push_back(t);
      s.pattern_ = true;
      ++i;
    } else if (c == '{') {
      const size_t close = text.find('}', i);
      if (close == std::string_view::npos) bad("'{' without a closing '}'");
      const std::string_view body = text.substr(i + 1, close - i - 1);
      if (body.find('{') != std::string_view::npos) bad("nested '{'");
      Token t;
      t.kind = Token::Alternatives;
      size_t start = 0;
      while (true) {
        const size_t comma = body.find(',', start);
        const std::string_view alt = body.substr(start, comma == std::string_view::npos ? body.size() - start : comma - start);
        if (alt.empty()) bad("empty alternative in {" + std::string(body) + "}");
        t.alternatives.emplace_back(alt);
        if (comma == std::string_view::npos) break;
        start = comma + 1;
      }
      s.tokens_.push_back(std::move(t));
      s.pattern_ = true;
      i = close + 1;
    } else if (c == '}') {
      bad("'}' without an opening '{'");
    } else {
      addLiteral(c);
      ++i;
    }
  }
  return s;
}

// Backtracking with memoisation over (token, position): a hostile selector with many stars stays
// O(tokens × length²) instead of exponential.
bool LayerSelector::matchFrom(size_t token, std::string_view name, size_t pos,
                              std::vector<signed char>& memo) const {
  if (token == tokens_.size()) return pos == name.size();
  signed char& m = memo[token * (name.size() + 1) + pos];
  if (m >= 0) return m != 0;
  m = matchToken(token, name, pos, memo) ? 1 : 0;
  return m != 0;
}

bool LayerSelector::matchToken(size_t token, std::string_view name, size_t pos,
                               std::vector<signed char>& memo) const {
  const Token& t = tokens_[token];
  switch (t.kind) {
    case Token::Literal:
      return name.substr(pos, t.literal.size()) == t.literal &&
             matchFrom(token + 1, name, pos + t.literal.size(), memo);
    case Token::AnyChar: return pos < name.size() && matchFrom(token + 1, name, pos + 1, memo);
    case Token::Star:
      for (size_t p = pos; p <= name.size(); ++p)
        if (matchFrom(token + 1, name, p, memo)) return true;
      return false;
    case Token::Alternatives:
      for (const auto& a : t.alternatives)
        if (name.substr(pos, a.size()) == a && matchFrom(token + 1, name, pos + a.size(), memo))
          return true;
      return false;
    case Token::Range: {
      size_t end = pos;
      while (end < name.size() && isDigit(name[end])) ++end;
      if (end == pos || end - pos > 9) return false;
      long long v = 0;
      std::from_chars(name.data() + pos, name.data() + end, v);
      if (v < t.lo || v > t.hi) return false;
      if (end < name.size() && name[end] != '.') return false;  // a whole segment
      return matchFrom(token + 1, name, end, memo);
    }
  }
  return false;
}

bool LayerSelector::matches(std::string_view name) const {
  std::vector<signed char> memo((tokens_.size() + 1) * (name.size() + 1), -1);
  return matchFrom(0, name, 0, memo);
}

bool LayerSelector::matches(const PlanLayer& layer) const {
  return matches(layer.name) || matches(layer.linear->weightName);
}

}  // namespace qs
