#include "kernels/quant/quant_format.h"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <vector>

#include "kernels/common/error.h"
#include "kernels/ggml/ggml_blocks.h"

namespace qs {
namespace {

// One row per QuantKind, in enum order (checked by quantKindTraits).
constexpr std::array kKindTraits = {
    QuantKindTraits{QuantKind::F32, "f32", QuantClass::Float, 32, 1, 4, 0, 0, 0, 0.0f, DType::F32},
    QuantKindTraits{QuantKind::FP16, "fp16", QuantClass::Float, 16, 1, 2, 0, 0, 0, 0.0f,
                    DType::F16},
    QuantKindTraits{QuantKind::BF16, "bf16", QuantClass::Float, 16, 1, 2, 0, 0, 0, 0.0f,
                    DType::BF16},
    QuantKindTraits{QuantKind::FP8_E4M3, "fp8e4m3", QuantClass::Fp8, 8, 1, 1, 0, 0, 0, 448.0f,
                    DType::F8_E4M3},
    QuantKindTraits{QuantKind::FP8_E5M2, "fp8e5m2", QuantClass::Fp8, 8, 1, 1, 0, 0, 0, 57344.0f,
                    DType::F8_E5M2},
    QuantKindTraits{QuantKind::INT8, "int8", QuantClass::Int, 8, 1, 1, -128, 127, 255, 127.0f,
                    DType::I8},
    QuantKindTraits{QuantKind::INT4, "int4", QuantClass::Int, 4, 2, 1, -8, 7, 15, 7.0f, DType::I8},
    // ggml block types: one block (its scales included) of blockElems values in blockBytes bytes
    // (kernels/ggml/ggml_blocks.h, whose structs are checked against these sizes below).
    QuantKindTraits{QuantKind::Q4_0, "q4_0", QuantClass::Ggml, 4, 32, 18, 0, 0, 0, 0.0f, DType::Q4_0},
    QuantKindTraits{QuantKind::Q4_1, "q4_1", QuantClass::Ggml, 4, 32, 20, 0, 0, 0, 0.0f, DType::Q4_1},
    QuantKindTraits{QuantKind::Q5_0, "q5_0", QuantClass::Ggml, 5, 32, 22, 0, 0, 0, 0.0f, DType::Q5_0},
    QuantKindTraits{QuantKind::Q5_1, "q5_1", QuantClass::Ggml, 5, 32, 24, 0, 0, 0, 0.0f, DType::Q5_1},
    QuantKindTraits{QuantKind::Q8_0, "q8_0", QuantClass::Ggml, 8, 32, 34, 0, 0, 0, 0.0f, DType::Q8_0},
    QuantKindTraits{QuantKind::Q2_K, "q2_k", QuantClass::Ggml, 2, 256, 84, 0, 0, 0, 0.0f, DType::Q2_K},
    QuantKindTraits{QuantKind::Q3_K, "q3_k", QuantClass::Ggml, 3, 256, 110, 0, 0, 0, 0.0f, DType::Q3_K},
    QuantKindTraits{QuantKind::Q4_K, "q4_k", QuantClass::Ggml, 4, 256, 144, 0, 0, 0, 0.0f, DType::Q4_K},
    QuantKindTraits{QuantKind::Q5_K, "q5_k", QuantClass::Ggml, 5, 256, 176, 0, 0, 0, 0.0f, DType::Q5_K},
    QuantKindTraits{QuantKind::Q6_K, "q6_k", QuantClass::Ggml, 6, 256, 210, 0, 0, 0, 0.0f, DType::Q6_K},
};
static_assert(kKindTraits[size_t(QuantKind::Q4_0)].blockBytes == sizeof(ggml::BlockQ4_0));
static_assert(kKindTraits[size_t(QuantKind::Q4_1)].blockBytes == sizeof(ggml::BlockQ4_1));
static_assert(kKindTraits[size_t(QuantKind::Q5_0)].blockBytes == sizeof(ggml::BlockQ5_0));
static_assert(kKindTraits[size_t(QuantKind::Q5_1)].blockBytes == sizeof(ggml::BlockQ5_1));
static_assert(kKindTraits[size_t(QuantKind::Q8_0)].blockBytes == sizeof(ggml::BlockQ8_0));
static_assert(kKindTraits[size_t(QuantKind::Q2_K)].blockBytes == sizeof(ggml::BlockQ2_K));
static_assert(kKindTraits[size_t(QuantKind::Q3_K)].blockBytes == sizeof(ggml::BlockQ3_K));
static_assert(kKindTraits[size_t(QuantKind::Q4_K)].blockBytes == sizeof(ggml::BlockQ4_K));
static_assert(kKindTraits[size_t(QuantKind::Q5_K)].blockBytes == sizeof(ggml::BlockQ5_K));
static_assert(kKindTraits[size_t(QuantKind::Q6_K)].blockBytes == sizeof(ggml::BlockQ6_K));
static_assert(kKindTraits[size_t(QuantKind::Q6_K)].blockElems == ggml::kQK_K);

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

[[noreturn]] void badFormat(std::string_view text, const std::string& message) {
  throw Error(ErrorKind::BadInput, message, {}, "quantization format " + quoted(text));
}

std::vector<std::string_view> splitOn(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t pos = s.find(sep, start);
    parts.push_back(s.substr(start, pos == std::string_view::npos ? s.npos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return parts;
}

std::string percentileText(float p) {
  char buf[32];
  const auto res = std::to_chars(buf, buf + sizeof buf, p);  // shortest round-trip form
  return std::string(buf, res.ptr);
}

std::string methodSuffix(ScaleMethod m, float p) {
  switch (m) {
    case ScaleMethod::AbsMax: return {};
    case ScaleMethod::Percentile: return "-p" + percentileText(p);
    case ScaleMethod::MseClip: return "-mse";
    case ScaleMethod::KlEntropy: return "-kl";
    case ScaleMethod::Importance: return "-imatrix";
  }
  return {};
}

// Parses a method token into (method, percentile); false if the token is not a method.
bool parseMethod(std::string_view tok, std::string_view text, ScaleMethod& m, float& p) {
  if (tok == "absmax") { m = ScaleMethod::AbsMax; p = 0; return true; }
  if (tok == "mse") { m = ScaleMethod::MseClip; p = 0; return true; }
  if (tok == "kl") { m = ScaleMethod::KlEntropy; p = 0; return true; }
  if (tok == "imatrix") { m = ScaleMethod::Importance; p = 0; return true; }
  if (tok.size() > 1 && tok[0] == 'p' && (std::isdigit(static_cast<unsigned char>(tok[1])))) {
    float v = 0;
    const auto res = std::from_chars(tok.data() + 1, tok.data() + tok.size(), v);
    if (res.ec != std::errc() || res.ptr != tok.data() + tok.size())
      badFormat(text, "bad percentile token " + quoted(tok) + " (expected e.g. p99.9)");
    m = ScaleMethod::Percentile;
    p = v;
    return true;
  }
  return false;
}

void checkMethodPercentile(ScaleMethod m, float p, const std::string& where) {
  if (m == ScaleMethod::Percentile) {
    if (!(p >= 50.0f && p <= 100.0f))
      throw Error(ErrorKind::BadInput,
                  "percentile " + percentileText(p) + " is outside [50, 100]", {}, where);
  } else if (p != 0.0f) {
    throw Error(ErrorKind::BadInput, "a percentile is set but the method is not percentile", {},
                where);
  }
}

WeightSpec parseWeight(std::string_view part, std::string_view text) {
  const auto toks = splitOn(part, '-');
  WeightSpec w;
  const auto kind = quantKindFromName(toks[0]);
  if (!kind)
    badFormat(text, "unknown weight kind " + quoted(toks[0]) +
                        " (int4, int8, fp8e4m3, fp8e5m2, fp16, bf16, f32, or a ggml type: q4_0 q4_1 "
                        "q5_0 q5_1 q8_0 q2_k q3_k q4_k q5_k q6_k)");
  w.kind = *kind;
  bool haveGran = false, haveSym = false, haveMethod = false;
  for (size_t i = 1; i < toks.size(); ++i) {
    const std::string_view t = toks[i];
    auto once = [&](bool& seen) {
      if (seen) badFormat(text, "token " + quoted(t) + " repeats a setting given before");
      seen = true;
    };
    if (t == "t" || t == "ch" || (t.size() > 1 && (t[0] == 'g' || t[0] == 'b') &&
                                  std::isdigit(static_cast<unsigned char>(t[1])))) {
      once(haveGran);
      if (t == "t") {
        w.granularity = Granularity::Tensor;
      } else if (t == "ch") {
        w.granularity = Granularity::Channel;
      } else {
        uint32_t g = 0;
        const auto res = std::from_chars(t.data() + 1, t.data() + t.size(), g);
        if (res.ec != std::errc() || res.ptr != t.data() + t.size())
          badFormat(text, "bad granularity token " + quoted(t));
        w.granularity = t[0] == 'g' ? Granularity::Group : Granularity::Block;
        w.groupSize = g;
      }
    } else if (t == "sym" || t == "asym") {
      once(haveSym);
      w.symmetric = t == "sym";
    } else {
      ScaleMethod m;
      float p;
      if (!parseMethod(t, text, m, p))
        badFormat(text, "unknown token " + quoted(t) +
                            " (granularity t/ch/g32/g64/g128/g256/b128, sym/asym, mse/kl/pNN)");
      once(haveMethod);
      w.method = m;
      w.percentile = p;
    }
  }
  const auto cls = quantKindTraits(w.kind).cls;
  if (cls == QuantClass::Ggml) {
    if (haveGran || haveSym)
      badFormat(text, std::string(toks[0]) + " is a ggml block type: its block and symmetry are the "
                                             "type's own (no granularity or sym/asym token)");
    if (haveMethod && w.method != ScaleMethod::AbsMax && w.method != ScaleMethod::Importance)
      badFormat(text, std::string(toks[0]) + " takes no scale method but imatrix (llama-quantize's "
                                             "importance-weighted search)");
    return w;
  }
  if (cls != QuantClass::Float && !haveGran)
    badFormat(text, std::string(toks[0]) +
                        " needs a granularity: t, ch, g32, g64, g128, g256 (FP8 also b128)");
  if (cls == QuantClass::Float && (haveGran || haveSym || haveMethod))
    badFormat(text, std::string(toks[0]) + " is a plain cast: it takes no granularity, "
                                           "symmetry or scale method");
  if (cls == QuantClass::Fp8 && haveSym && !w.symmetric)
    badFormat(text, "FP8 is symmetric only (no zero point)");
  return w;
}

ActSpec parseAct(std::string_view part, std::string_view text) {
  const auto toks = splitOn(part, '-');
  ActSpec a;
  const auto kind = quantKindFromName(toks[0]);
  if (!kind || *kind == QuantKind::INT4 || isGgmlKind(*kind))
    badFormat(text, "unknown activation kind " + quoted(toks[0]) +
                        " (fp16, bf16, int8, fp8e4m3, fp8e5m2)");
  a.kind = *kind;
  const auto cls = quantKindTraits(a.kind).cls;
  if (cls == QuantClass::Float) {
    if (toks.size() > 1)
      badFormat(text, "activation " + std::string(toks[0]) + " is a plain cast: no more tokens");
    return a;
  }
  if (toks.size() < 2)
    badFormat(text, "activation " + std::string(toks[0]) +
                        " needs its scaling: -tok (dynamic per token) or -t (static per tensor)");
  if (toks[1] == "tok") {
    a.scaling = ActScaling::PerTokenDynamic;
  } else if (toks[1] == "t") {
    a.scaling = ActScaling::PerTensorStatic;
  } else {
    badFormat(text, "unknown activation scaling " + quoted(toks[1]) + " (tok or t)");
  }
  if (toks.size() > 3) badFormat(text, "too many activation tokens in " + quoted(part));
  if (toks.size() == 3) {
    if (!parseMethod(toks[2], text, a.method, a.percentile))
      badFormat(text, "unknown activation scale method " + quoted(toks[2]) + " (kl, pNN)");
  }
  return a;
}

const char* kindLabel(QuantKind k) {
  switch (k) {
    case QuantKind::F32: return "FP32";
    case QuantKind::FP16: return "FP16";
    case QuantKind::BF16: return "BF16";
    case QuantKind::FP8_E4M3: return "FP8 E4M3";
    case QuantKind::FP8_E5M2: return "FP8 E5M2";
    case QuantKind::INT8: return "INT8";
    case QuantKind::INT4: return "INT4";
    case QuantKind::Q4_0: return "ggml Q4_0";
    case QuantKind::Q4_1: return "ggml Q4_1";
    case QuantKind::Q5_0: return "ggml Q5_0";
    case QuantKind::Q5_1: return "ggml Q5_1";
    case QuantKind::Q8_0: return "ggml Q8_0";
    case QuantKind::Q2_K: return "ggml Q2_K";
    case QuantKind::Q3_K: return "ggml Q3_K";
    case QuantKind::Q4_K: return "ggml Q4_K";
    case QuantKind::Q5_K: return "ggml Q5_K";
    case QuantKind::Q6_K: return "ggml Q6_K";
  }
  return "?";
}

std::string methodLabel(ScaleMethod m, float p) {
  switch (m) {
    case ScaleMethod::AbsMax: return "absmax";
    case ScaleMethod::Percentile: return "percentile " + percentileText(p);
    case ScaleMethod::MseClip: return "MSE clip search";
    case ScaleMethod::KlEntropy: return "KL/entropy";
    case ScaleMethod::Importance: return "importance-weighted (imatrix)";
  }
  return "?";
}

}  // namespace

const QuantKindTraits& quantKindTraits(QuantKind kind) {
  const auto i = size_t(kind);
  if (i >= kKindTraits.size() || kKindTraits[i].kind != kind)
    throw Error(ErrorKind::Internal, "quantKindTraits: unknown kind " + std::to_string(i));
  return kKindTraits[i];
}

std::optional<QuantKind> quantKindFromName(std::string_view name) {
  for (const auto& t : kKindTraits)
    if (t.name == name) return t.kind;
  // ggml kinds in any case: "Q4_K" as llama.cpp writes it.
  std::string lower(name);
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& t : kKindTraits)
    if (t.cls == QuantClass::Ggml && t.name == lower) return t.kind;
  return std::nullopt;
}

std::optional<QuantKind> quantKindOfGgmlType(DType type) {
  for (const auto& t : kKindTraits)
    if (t.cls == QuantClass::Ggml && t.dtype == type) return t.kind;
  return std::nullopt;
}

void validateWeightSpec(const WeightSpec& w) {
  const std::string where = "weight format";
  auto bad = [&](const std::string& msg) { throw Error(ErrorKind::BadInput, msg, {}, where); };
  if (size_t(w.kind) >= kKindTraits.size()) bad("unknown weight kind " + std::to_string(int(w.kind)));
  const auto& tr = quantKindTraits(w.kind);
  if (tr.cls == QuantClass::Float) {
    if (w.granularity != Granularity::None || w.groupSize != 0 || !w.symmetric ||
        w.method != ScaleMethod::AbsMax || w.percentile != 0)
      bad(std::string(tr.name) + " is a plain cast: no granularity, symmetry or scale method");
    return;
  }
  if (tr.cls == QuantClass::Ggml) {
    if (w.granularity != Granularity::None || w.groupSize != 0 || !w.symmetric)
      bad(std::string(tr.name) + " is a ggml block type: no granularity or symmetry of its own");
    if (w.method != ScaleMethod::AbsMax && w.method != ScaleMethod::Importance)
      bad(std::string(tr.name) + " takes no scale method but imatrix");
    if (w.percentile != 0) bad("a percentile is set but the method is not percentile");
    return;
  }
  if (w.method == ScaleMethod::Importance)
    bad("the imatrix method is for the ggml types (q4_0 … q6_k) only");
  switch (w.granularity) {
    case Granularity::None: bad(std::string(tr.name) + " needs a granularity"); break;
    case Granularity::Tensor:
    case Granularity::Channel:
      if (w.groupSize != 0) bad("a group size is set but the granularity is not groups");
      break;
    case Granularity::Group:
      if (w.groupSize != 32 && w.groupSize != 64 && w.groupSize != 128 && w.groupSize != 256)
        bad("group size " + std::to_string(w.groupSize) + " is not one of 32, 64, 128, 256");
      break;
    case Granularity::Block:
      if (tr.cls != QuantClass::Fp8) bad("128x128 blocks are for FP8 weights only");
      if (w.groupSize != kFp8BlockEdge)
        bad("block edge " + std::to_string(w.groupSize) + " is not 128");
      break;
    default: bad("unknown granularity " + std::to_string(int(w.granularity)));
  }
  if (tr.cls == QuantClass::Fp8 && !w.symmetric) bad("FP8 is symmetric only (no zero point)");
  if (w.method == ScaleMethod::KlEntropy && w.granularity != Granularity::Tensor)
    bad("the KL/entropy method needs a whole-tensor histogram: use granularity t");
  if (w.method == ScaleMethod::KlEntropy && tr.cls != QuantClass::Int)
    bad("the KL/entropy method is for INT formats (it merges the histogram into uniform levels)");
  if (int(w.method) > int(ScaleMethod::KlEntropy))
    bad("unknown scale method " + std::to_string(int(w.method)));
  checkMethodPercentile(w.method, w.percentile, where);
}

void validateQuantFormat(const QuantFormat& f) {
  validateWeightSpec(f.weight);
  const ActSpec& a = f.act;
  const std::string where = "activation format";
  auto bad = [&](const std::string& msg) { throw Error(ErrorKind::BadInput, msg, {}, where); };
  if (size_t(a.kind) >= kKindTraits.size()) bad("unknown activation kind " + std::to_string(int(a.kind)));
  const auto& tr = quantKindTraits(a.kind);
  if (a.kind == QuantKind::INT4) bad("INT4 activations are not supported");
  if (tr.cls == QuantClass::Ggml) bad("ggml block types are for weights, not activations");
  if (tr.cls == QuantClass::Float) {
    if (a.scaling != ActScaling::None || a.method != ScaleMethod::AbsMax || a.percentile != 0)
      bad(std::string(tr.name) + " activations are a plain cast: no scaling or method");
    return;
  }
  if (a.scaling != ActScaling::PerTokenDynamic && a.scaling != ActScaling::PerTensorStatic)
    bad(std::string(tr.name) + " activations need per-token or per-tensor scaling");
  if (a.scaling == ActScaling::PerTokenDynamic && a.method != ScaleMethod::AbsMax)
    bad("dynamic per-token scales are always absmax");
  if (a.method == ScaleMethod::Importance) bad("the imatrix method is for weights");
  if (a.method == ScaleMethod::MseClip)
    bad("the MSE clip search is for weights; static activation scales use absmax, pNN or kl");
  if (a.method == ScaleMethod::KlEntropy && tr.cls != QuantClass::Int)
    bad("the KL/entropy method is for INT activations");
  if (int(a.method) > int(ScaleMethod::KlEntropy)) bad("unknown scale method");
  checkMethodPercentile(a.method, a.percentile, where);
}

CheckedFormat checkFormat(const QuantFormat& f, int64_t rows, int64_t cols, std::string_view field,
                          std::string_view tensorName) {
  auto fail = [&](const std::string& msg) -> CheckedFormat { throw Error(ErrorKind::BadInput, msg, {}, std::string(field)); };
  try {
    validateQuantFormat(f);
  } catch (const Error& e) {
    return fail(e.message());
  }
  try {
    (void)scaleGrid(f.weight, rows, cols, tensorName);  // positive shape, K a multiple of the group or block
  } catch (const Error& e) {
    return fail(tensorName.empty() ? e.message() : quoted(tensorName) + " " + e.message());
  }
  return CheckedFormat(f, rows, cols);
}

CheckedFormat CheckedFormat::weightOnly() const {
  CheckedFormat w = *this;
  w.act = ActSpec{};
  return w;
}

std::string weightSpecToString(const WeightSpec& w) {
  const auto& tr = quantKindTraits(w.kind);
  std::string s(tr.name);
  switch (w.granularity) {
    case Granularity::None: break;
    case Granularity::Tensor: s += "-t"; break;
    case Granularity::Channel: s += "-ch"; break;
    case Granularity::Group: s += "-g" + std::to_string(w.groupSize); break;
    case Granularity::Block: s += "-b" + std::to_string(w.groupSize); break;
  }
  if (tr.cls == QuantClass::Int) s += w.symmetric ? "-sym" : "-asym";
  s += methodSuffix(w.method, w.percentile);
  return s;
}

std::string formatToString(const QuantFormat& f) {
  std::string s = weightSpecToString(f.weight);
  if (f.act.kind == QuantKind::F32) return s;
  s += ':';
  s += quantKindTraits(f.act.kind).name;
  if (f.act.scaling == ActScaling::PerTokenDynamic) s += "-tok";
  if (f.act.scaling == ActScaling::PerTensorStatic)
    s += "-t" + methodSuffix(f.act.method, f.act.percentile);
  return s;
}

QuantFormat parseQuantFormat(std::string_view text) {
  if (text.empty()) badFormat(text, "empty");
  const auto parts = splitOn(text, ':');
  if (parts.size() > 2) badFormat(text, "more than one ':'");
  for (auto p : parts)
    for (auto t : splitOn(p, '-'))
      if (t.empty()) badFormat(text, "empty token");
  QuantFormat f;
  f.weight = parseWeight(parts[0], text);
  if (parts.size() == 2) f.act = parseAct(parts[1], text);
  try {
    validateQuantFormat(f);
  } catch (const Error& e) {
    badFormat(text, e.message());
  }
  return f;
}

std::string describeFormat(const QuantFormat& f) {
  const WeightSpec& w = f.weight;
  std::string s = kindLabel(w.kind);
  switch (w.granularity) {
    case Granularity::None: break;
    case Granularity::Tensor: s += ", one scale per tensor"; break;
    case Granularity::Channel: s += ", one scale per output channel"; break;
    case Granularity::Group: s += ", groups of " + std::to_string(w.groupSize) + " along K"; break;
    case Granularity::Block: s += ", 128x128 blocks"; break;
  }
  if (quantKindTraits(w.kind).cls == QuantClass::Int)
    s += w.symmetric ? ", symmetric" : ", asymmetric";
  if (w.granularity != Granularity::None) s += ", " + methodLabel(w.method, w.percentile);
  if (isGgmlKind(w.kind))
    s += ", blocks of " + std::to_string(quantKindTraits(w.kind).blockElems) + " along K, " +
         (w.method == ScaleMethod::Importance ? std::string("llama-quantize's importance-weighted (imatrix) search")
                                              : std::string("llama-quantize's search without imatrix"));
  s += "; activations ";
  if (f.act.kind == QuantKind::F32) return s + "unchanged";
  s += kindLabel(f.act.kind);
  if (f.act.scaling == ActScaling::PerTokenDynamic) s += " per token (dynamic)";
  if (f.act.scaling == ActScaling::PerTensorStatic)
    s += " per tensor (static, " + methodLabel(f.act.method, f.act.percentile) + ")";
  return s;
}

bool weightFitsShape(const WeightSpec& w, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return false;
  if (isGgmlKind(w.kind)) return cols % int64_t(quantKindTraits(w.kind).blockElems) == 0;
  return w.granularity != Granularity::Group || (w.groupSize > 0 && cols % int64_t(w.groupSize) == 0);
}

ScaleGrid scaleGrid(const WeightSpec& w, int64_t rows, int64_t cols, std::string_view tensorName) {
  const std::string field = tensorName.empty() ? std::string("weight")
                                               : "tensor " + quoted(tensorName);
  const std::string shape = "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
  if (rows <= 0 || cols <= 0)
    throw Error(ErrorKind::BadInput, "shape " + shape + " is empty or negative", {}, field);
  ScaleGrid g;
  if (isGgmlKind(w.kind)) {  // one cell per block of the type
    const int64_t b = quantKindTraits(w.kind).blockElems;
    if (cols % b != 0)
      throw Error(ErrorKind::BadInput,
                  "shape " + shape + ": K = " + std::to_string(cols) + " is not a multiple of the " +
                      std::to_string(b) + "-value block of " + weightSpecToString(w),
                  {}, field);
    g = {rows, cols / b, 1, b};
    return g;
  }
  switch (w.granularity) {
    case Granularity::None:  // no scales; the grid is empty
      return g;
    case Granularity::Tensor:
      g = {1, 1, rows, cols};
      return g;
    case Granularity::Channel:
      g = {rows, 1, 1, cols};
      return g;
    case Granularity::Group:
      if (cols % int64_t(w.groupSize) != 0)
        throw Error(ErrorKind::BadInput,
                    "shape " + shape + ": K = " + std::to_string(cols) +
                        " is not a multiple of the group size " + std::to_string(w.groupSize) +
                        " (" + weightSpecToString(w) + ")",
                    {}, field);
      g = {rows, cols / w.groupSize, 1, int64_t(w.groupSize)};
      return g;
    case Granularity::Block: {
      const int64_t b = w.groupSize;
      g = {(rows + b - 1) / b, (cols + b - 1) / b, b, b};
      return g;
    }
  }
  throw Error(ErrorKind::BadInput, "unknown granularity", {}, field);
}

uint64_t payloadRowBytes(QuantKind kind, int64_t cols) {
  const auto& tr = quantKindTraits(kind);
  return (uint64_t(cols) + tr.blockElems - 1) / tr.blockElems * tr.blockBytes;
}

QuantStorage quantStorage(const WeightSpec& w, int64_t rows, int64_t cols) {
  const ScaleGrid g = scaleGrid(w, rows, cols);
  QuantStorage s;
  s.payloadBytes = uint64_t(rows) * payloadRowBytes(w.kind, cols);
  if (isGgmlKind(w.kind)) return s;  // the blocks hold their scales: exactly the GGUF bytes
  s.scaleBytes = uint64_t(g.count()) * 2;
  const auto& tr = quantKindTraits(w.kind);
  if (tr.cls == QuantClass::Int && !w.symmetric)
    s.zeroBytes = (uint64_t(g.count()) * tr.bits + 7) / 8;
  return s;
}

double effectiveBitsPerWeight(const WeightSpec& w, int64_t rows, int64_t cols) {
  return double(quantStorage(w, rows, cols).totalBytes()) * 8.0 / (double(rows) * double(cols));
}

}  // namespace qs
