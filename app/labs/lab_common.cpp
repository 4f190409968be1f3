#include "app/labs/lab_common.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "core/runtime/evaluate.h"
#include "kernels/common/error.h"
#include "kernels/quant/weight_codec.h"
#include "kernels/stats/histogram.h"

namespace qs::labs {

std::string fmt(double v, int significant) {
  if (std::isnan(v)) return "n/a";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", significant, v);
  return buf;
}

std::string fmtFixed(double v, int decimals) {
  if (!std::isfinite(v)) return fmt(v);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string fmtBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (bytes >= 1024 && u < 3) {
    bytes /= 1024;
    ++u;
  }
  return fmtFixed(bytes, u == 0 ? 0 : 1) + " " + units[u];
}

static std::string trimmedLower(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  std::string out = s.substr(a, b - a);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

double parseAnswer(const std::string& answer) {
  std::string s = trimmedLower(answer);
  std::replace(s.begin(), s.end(), ',', '.');
  if (s.empty()) return std::nan("");
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  while (end && *end && std::isspace(static_cast<unsigned char>(*end))) ++end;
  if (!end || *end) return std::nan("");
  return v;
}

CheckResult checkNumber(const std::string& answer, double truth, double tolerance,
                        const std::string& what) {
  const double v = parseAnswer(answer);
  if (std::isnan(v)) return {false, "\"" + answer + "\" is not a number."};
  if (std::fabs(v - truth) <= tolerance)
    return {true, "Right: " + what + " is " + fmt(truth, 6) + "."};
  return {false, fmt(v, 6) + " is off: look again at " + what + "."};
}

CheckResult checkChoice(const std::string& answer, const std::vector<std::string>& correct,
                        const std::string& explanation) {
  const std::string a = trimmedLower(answer);
  for (const std::string& c : correct)
    if (trimmedLower(c) == a) return {true, "Right. " + explanation};
  if (a.empty()) return {false, "Pick an answer first."};
  return {false, "Not this one. Compare the numbers of the experiment again."};
}

const std::string& param(const LabParams& p, const std::string& key) {
  auto it = p.find(key);
  if (it == p.end()) throw Error(ErrorKind::BadInput, "missing lab setting", key);
  return it->second;
}

double paramNumber(const LabParams& p, const std::string& key) {
  const double v = parseAnswer(param(p, key));
  if (!std::isfinite(v)) throw Error(ErrorKind::BadInput, "lab setting is not a number: " + param(p, key), key);
  return v;
}

LabParam layerParam(const std::vector<std::string>& names, const std::string& prefer) {
  LabParam p;
  p.key = "layer";
  p.label = "Layer";
  p.kind = LabParam::Kind::Choice;
  p.choices = names;
  if (!prefer.empty())
    for (const auto& n : names)
      if (n.find(prefer) != std::string::npos) {
        p.initial = n;
        break;
      }
  return p;
}

LabHistogramSeries histogramSeries(const std::string& name, std::span<const float> x, int bins,
                                   double lo, double hi) {
  if (!(hi > lo)) hi = lo + 1e-6;
  Histogram h(bins, float(lo), float(hi));
  h.add(x);
  LabHistogramSeries s;
  s.name = name;
  s.lo = lo;
  s.hi = hi;
  s.counts.assign(h.counts.begin(), h.counts.end());
  return s;
}

std::vector<double> timesMicros(const std::function<void()>& fn, int reps) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    const auto b = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double, std::micro>(b - a).count());
  }
  return t;
}

double medianMicros(const std::function<void()>& fn, int reps, int warmup) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t = timesMicros(fn, std::max(reps, 1));
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

double meanKl(const std::vector<float>& ref, const std::vector<float>& approx, int64_t vocab) {
  const int64_t T = int64_t(ref.size()) / vocab;
  if (T == 0) return 0.0;
  std::vector<TransformerOps::LogitRowStats> rows(static_cast<size_t>(T));
  TransformerOps::compareLogitsHost(ref.data(), approx.data(), T, vocab, nullptr, rows.data());
  double sum = 0;
  for (const auto& r : rows) sum += r.kl;
  return sum / double(T);
}

double perplexityFromLogits(const std::vector<float>& logits, const std::vector<int32_t>& tokens,
                            int64_t vocab) {
  if (tokens.size() < 2) return std::nan("");
  const int64_t T = int64_t(tokens.size()) - 1;  // position t predicts token t + 1
  std::vector<TransformerOps::LogitRowStats> rows(static_cast<size_t>(T));
  TransformerOps::compareLogitsHost(logits.data(), logits.data(), T, vocab, tokens.data() + 1, rows.data());
  double nll = 0;
  for (const auto& r : rows) nll += r.nllTest;
  return std::exp(nll / double(T));
}

QuantFormat fittedFormat(const std::string& text, int64_t cols) {
  QuantFormat f = parseQuantFormat(text);
  if (f.weight.granularity == Granularity::Group && cols % int64_t(f.weight.groupSize) != 0) {
    f.weight.granularity = Granularity::Channel;
    f.weight.groupSize = 0;
  }
  return f;
}

uint64_t applyPlan(Runtime& rt, const std::function<std::string(const std::string&)>& formatFor,
                   std::vector<std::string>* fallbacks) {
  uint64_t bytes = 0;
  for (int i = 0; i < int(rt.linears().size()); ++i) {
    const LinearLayer* l = rt.linears()[size_t(i)];
    const int64_t rows = l->outFeatures, cols = l->inFeatures;
    const std::string text = formatFor(l->weightName);
    if (text.empty() || text == "fp16") {
      bytes += uint64_t(rows * cols) * 2;
      if (text == "fp16") rt.setLinearFormat(i, rt.checkLinearFormat(i, parseQuantFormat("fp16"), "format"));
      continue;
    }
    const QuantFormat f = fittedFormat(text, cols);
    if (fallbacks && formatToString(f) != formatToString(parseQuantFormat(text)))
      fallbacks->push_back(l->weightName);
    rt.setLinearFormat(i, rt.checkLinearFormat(i, f, "format"));
    bytes += quantStorage(f.weight, rows, cols).totalBytes();
  }
  return bytes;
}

std::vector<float> tileWeight(std::span<const float> w, int64_t rows, int64_t cols,
                              int64_t outRows, int64_t outCols) {
  std::vector<float> out(static_cast<size_t>(outRows * outCols));
  for (int64_t r = 0; r < outRows; ++r)
    for (int64_t c = 0; c < outCols; ++c)
      out[size_t(r * outCols + c)] = w[size_t((r % rows) * cols + (c % cols))];
  return out;
}

std::string deviceLine(LabEnv& env) {
  Backend& b = env.backend();
  return b.name();
}

}  // namespace qs::labs
