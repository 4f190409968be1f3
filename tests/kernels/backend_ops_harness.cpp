#include "tests/kernels/backend_ops_harness.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <sstream>

#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/gemm/gemm_ops.h"
#include "kernels/ops/transformer_ops.h"

namespace qs::backend_ops {

const char* opSetName(OpSet s) {
  switch (s) {
    case OpSet::Transformer: return "transformer";
    case OpSet::Stats: return "stats";
    case OpSet::Gemm: return "gemm";
    case OpSet::Gptq: return "gptq";
  }
  return "?";
}

const char* distributionName(Distribution d) { return d == Distribution::Normal ? "normal" : "outliers"; }

std::vector<float> randomValues(size_t n, uint64_t seed, Distribution d, float sigma) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  if (d == Distribution::Outliers && n > 0) {
    std::uniform_real_distribution<float> factor(50.0f, 100.0f);
    const size_t count = std::min(n, std::max<size_t>(2, n / 256));
    std::vector<bool> picked(n, false);  // distinct positions: a value scaled twice would be ×10⁴
    for (size_t i = 0; i < count;) {
      const size_t at = rng() % n;
      if (picked[at]) continue;
      picked[at] = true;
      v[at] *= factor(rng);
      ++i;
    }
  }
  return v;
}

// ---- inputs ---------------------------------------------------------------------------------

namespace {
template <class Map>
const auto& lookup(const Map& m, const std::string& name, const char* what) {
  const auto it = m.find(name);
  if (it == m.end()) throw Error(ErrorKind::Internal, std::string("the row has no ") + what + " input '" + name + "'");
  return it->second;
}
}  // namespace

const std::vector<float>& Inputs::f32(const std::string& name) const { return lookup(f32_, name, "FP32"); }
const std::vector<int32_t>& Inputs::i32(const std::string& name) const { return lookup(i32_, name, "int32"); }
const std::vector<uint16_t>& Inputs::f16(const std::string& name) const { return lookup(f16_, name, "FP16"); }
const QuantizedTensor& Inputs::weight(const std::string& name) const { return lookup(weights_, name, "weight"); }

// ---- outputs --------------------------------------------------------------------------------

void Outputs::add(const std::string& name, std::vector<double> values) {
  arrays_.push_back({name, std::move(values)});
}
void Outputs::add(const std::string& name, const std::vector<float>& values) {
  add(name, std::vector<double>(values.begin(), values.end()));
}
void Outputs::addHalf(const std::string& name, const std::vector<uint16_t>& bits) {
  std::vector<double> v(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) v[i] = halfBitsToFloat(bits[i]);
  add(name, std::move(v));
}
void Outputs::add(const std::string& name, const std::vector<uint64_t>& values) {
  add(name, std::vector<double>(values.begin(), values.end()));
}
void Outputs::add(const std::string& name, const std::vector<uint16_t>& values) {
  add(name, std::vector<double>(values.begin(), values.end()));
}
void Outputs::add(const std::string& name, const std::vector<uint8_t>& values) {
  add(name, std::vector<double>(values.begin(), values.end()));
}
const Output* Outputs::find(const std::string& name) const {
  for (const auto& o : arrays_)
    if (o.name == name) return &o;
  return nullptr;
}

// ---- memory ---------------------------------------------------------------------------------

MemorySpace memoryOf(TransformerOps& ops) {
  return {[&ops](size_t n) { return ops.allocate(n); },
          [&ops](void* d, const void* s, size_t n) { ops.upload(d, s, n); },
          [&ops](void* d, const void* s, size_t n) { ops.download(d, s, n); },
          [&ops] { ops.synchronize(); }};
}

MemorySpace memoryOf(GemmOps& ops) {
  return {[&ops](size_t n) { return ops.allocate(n); },
          [&ops](void* d, const void* s, size_t n) { ops.upload(d, s, n); },
          [&ops](void* d, const void* s, size_t n) { ops.download(d, s, n); },
          [&ops] { ops.synchronize(); }};
}

void* GuardedArena::place(const void* host, size_t bytes, const std::string& name, Role role) {
  Buffer b;
  b.bytes = bytes;
  b.name = name;
  b.role = role;
  b.memory = memory_.allocate(bytes + 2 * kGuardBytes);
  std::vector<uint8_t> image(bytes + 2 * kGuardBytes, kGuardByte);
  if (host)
    std::memcpy(image.data() + kGuardBytes, host, bytes);
  else
    std::fill_n(image.begin() + kGuardBytes, bytes, kUnwrittenByte);
  if (role == Role::Input) b.initial.assign(image.begin() + kGuardBytes, image.begin() + kGuardBytes + bytes);
  memory_.upload(b.memory.get(), image.data(), image.size());
  buffers_.push_back(std::move(b));
  return static_cast<uint8_t*>(buffers_.back().memory.get()) + kGuardBytes;
}

std::vector<uint8_t> GuardedArena::readBytes(const void* interior) {
  for (const Buffer& b : buffers_)
    if (static_cast<const uint8_t*>(b.memory.get()) + kGuardBytes == interior) {
      memory_.synchronize();
      std::vector<uint8_t> out(b.bytes);
      memory_.download(out.data(), interior, b.bytes);
      return out;
    }
  throw Error(ErrorKind::Internal, "read() of a pointer that is no buffer of this arena");
}

std::vector<uint8_t> GuardedArena::downloadWhole(const Buffer& b) {
  std::vector<uint8_t> image(b.bytes + 2 * kGuardBytes);
  memory_.download(image.data(), b.memory.get(), image.size());
  return image;
}

std::vector<std::string> GuardedArena::verify() {
  std::vector<std::string> problems;
  memory_.synchronize();
  for (const Buffer& b : buffers_) {
    const std::vector<uint8_t> image = downloadWhole(b);
    // The guard byte nearest the data is the first one an off-by-one write hits: report that.
    for (size_t i = kGuardBytes; i-- > 0;)
      if (image[i] != kGuardByte) {
        problems.push_back("'" + b.name + "': guard byte " + std::to_string(kGuardBytes - i) +
                           " before the start was overwritten");
        break;
      }
    for (size_t i = kGuardBytes + b.bytes; i < image.size(); ++i)
      if (image[i] != kGuardByte) {
        problems.push_back("'" + b.name + "': guard byte " + std::to_string(i - kGuardBytes - b.bytes) +
                           " past the end was overwritten (" + std::to_string(b.bytes) + " bytes of data)");
        break;
      }
    if (b.role == Role::Input)
      for (size_t i = 0; i < b.bytes; ++i)
        if (image[kGuardBytes + i] != b.initial[i]) {
          problems.push_back("input '" + b.name + "' was written (byte " + std::to_string(i) + ")");
          break;
        }
  }
  return problems;
}

GuardedArena& OpRun::transformerMemory() {
  if (!transformer_) transformer_ = std::make_unique<GuardedArena>(memoryOf(backend.transformer()));
  return *transformer_;
}

GuardedArena& OpRun::gemmMemory() {
  if (!gemm_) gemm_ = std::make_unique<GuardedArena>(memoryOf(backend.gemm()));
  return *gemm_;
}

std::vector<std::string> OpRun::verifyMemory() {
  std::vector<std::string> all;
  for (GuardedArena* a : {transformer_.get(), gemm_.get()})
    if (a)
      for (auto& p : a->verify()) all.push_back(std::move(p));
  return all;
}

// ---- the row --------------------------------------------------------------------------------

std::string OpCase::id() const {
  std::string s = std::string(opSetName(opSet)) + "." + op;
  if (!format.empty()) s += " " + format;
  if (!shape.empty()) s += " " + shape;
  return s + " " + distributionName(distribution);
}

const Bound& OpCase::boundFor(const std::string& output) const {
  for (const Bound& b : bounds)
    if (b.output == output) return b;
  for (const Bound& b : bounds)  // "scales*": every output whose name starts with "scales"
    if (!b.output.empty() && b.output.back() == '*' && output.rfind(b.output.substr(0, b.output.size() - 1), 0) == 0)
      return b;
  for (const Bound& b : bounds)
    if (b.output.empty()) return b;
  throw Error(ErrorKind::Internal, id() + ": no bound for output '" + output + "'");
}

uint64_t OpCase::seed() const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the id: stable across runs and platforms
  for (unsigned char ch : id()) h = (h ^ ch) * 1099511628211ull;
  const char* extra = std::getenv("QS_BACKEND_OPS_SEED");
  if (extra) h ^= std::strtoull(extra, nullptr, 10) * 0x9E3779B97F4A7C15ull;
  return h;
}

// QS_BACKEND_OPS_FILTER=TEXT: only the rows whose id contains TEXT ("transformer.attention"), so
// that a compute-sanitizer run can cover one op's rows (read once).
static bool rowSelected(const OpCase& c) {
  static const std::string filter = [] {
    const char* f = std::getenv("QS_BACKEND_OPS_FILTER");
    return std::string(f ? f : "");
  }();
  return filter.empty() || c.id().find(filter) != std::string::npos;
}

bool quickRun() {
  const char* q = std::getenv("QS_TEST_QUICK");
  return q && std::string(q) == "1";
}

// ---- running and comparing ------------------------------------------------------------------

const char* failureKindName(FailureKind k) {
  switch (k) {
    case FailureKind::Tolerance: return "tolerance";
    case FailureKind::NonFinite: return "non-finite";
    case FailureKind::Sentinel: return "sentinel";
    case FailureKind::Missing: return "missing";
    case FailureKind::Exception: return "exception";
  }
  return "?";
}

bool RunResult::failedWith(FailureKind k) const {
  return std::any_of(failures.begin(), failures.end(), [k](const Failure& f) { return f.kind == k; });
}

std::string RunResult::report() const {
  std::string s;
  for (const auto& f : failures) s += std::string("  [") + failureKindName(f.kind) + "] " + f.message + "\n";
  return s;
}

namespace {

std::string formatNumber(double v) {
  std::ostringstream o;
  o.precision(3);
  o << v;
  return o.str();
}

// A NaN anywhere in an output is a failure of its own (outputs start as NaN: also "unwritten").
void checkNoNaN(const Outputs& outputs, const std::string& backendName, RunResult& result) {
  for (const Output& o : outputs.all())
    for (size_t i = 0; i < o.values.size(); ++i)
      if (std::isnan(o.values[i])) {
        result.failures.push_back({FailureKind::NonFinite, backendName + ": output '" + o.name + "' is NaN at [" +
                                                               std::to_string(i) + "] (never written, or computed NaN)"});
        break;
      }
}

}  // namespace

RunResult runCase(const OpCase& c, Backend& backend, const Inputs& inputs) {
  RunResult result;
  const std::string who = backend.name();
  OpRun run(backend, inputs);
  try {
    result.outputs = c.run(run);
    for (auto& p : run.verifyMemory()) result.failures.push_back({FailureKind::Sentinel, who + ": " + p});
  } catch (const std::exception& e) {
    result.failures.push_back({FailureKind::Exception, who + ": threw: " + e.what()});
    return result;
  }
  checkNoNaN(result.outputs, who, result);
  return result;
}

void compare(const OpCase& c, const Outputs& comparand, Against against, const std::string& backendName,
             RunResult& result) {
  const char* what = against == Against::Reference ? "the reference" : "the CPU backend";
  for (const Output& want : comparand.all()) {
    const Output* got = result.outputs.find(want.name);
    if (!got || got->values.size() != want.values.size()) {
      result.failures.push_back({FailureKind::Missing, backendName + ": output '" + want.name + "' " +
                                                           (got ? "has " + std::to_string(got->values.size()) + " values, "
                                                                : std::string("is missing, ")) +
                                                           what + " " + std::to_string(want.values.size())});
      continue;
    }
    const Bound& bound = c.boundFor(want.name);
    const Tolerance& tol = against == Against::Reference ? bound.vsReference : bound.vsCpu;
    double num = 0, den = 0, maxAbs = 0;
    bool reportedNonFinite = false;
    for (size_t i = 0; i < want.values.size(); ++i) {
      const double a = got->values[i], b = want.values[i];
      if (std::isnan(a)) continue;  // reported by checkNoNaN
      if (!std::isfinite(a) || !std::isfinite(b)) {
        if (a != b && !reportedNonFinite) {
          result.failures.push_back({FailureKind::NonFinite, backendName + ": output '" + want.name + "' [" +
                                                                 std::to_string(i) + "] is " + formatNumber(a) +
                                                                 ", " + what + " has " + formatNumber(b)});
          reportedNonFinite = true;
        }
        continue;
      }
      num += (a - b) * (a - b);
      den += std::max(b * b, tol.floor * tol.floor);
      maxAbs = std::max(maxAbs, std::fabs(a - b));
    }
    const double nmse = den > 0 ? num / den : (num == 0 ? 0.0 : INFINITY);
    const double ratio = tol.nmse > 0 ? nmse / tol.nmse : (nmse == 0 ? 0.0 : INFINITY);
    result.comparisons.push_back({want.name, against == Against::Reference ? "reference" : "cpu", nmse, maxAbs, ratio});
    const bool nmseOk = nmse <= tol.nmse;
    const bool maxOk = tol.maxAbs < 0 || maxAbs <= tol.maxAbs;
    if (!nmseOk || !maxOk)
      result.failures.push_back(
          {FailureKind::Tolerance,
           backendName + " vs " + what + ": output '" + want.name + "' NMSE " + formatNumber(nmse) +
               (nmseOk ? " ≤ " : " > ") + formatNumber(tol.nmse) + ", max|Δ| " + formatNumber(maxAbs) +
               (tol.maxAbs < 0 ? std::string() : (maxOk ? " ≤ " : " > ") + formatNumber(tol.maxAbs)) +
               " (bound: " + bound.why + ")"});
  }
}

RunResult checkCase(const OpCase& c, Backend& backend, const Inputs& inputs, const Outputs& reference,
                    const Outputs* cpu) {
  RunResult result = runCase(c, backend, inputs);
  if (result.failedWith(FailureKind::Exception)) return result;
  compare(c, reference, Against::Reference, backend.name(), result);
  if (cpu) compare(c, *cpu, Against::Cpu, backend.name(), result);
  return result;
}

namespace {

struct OpSummary {
  int rows = 0;
  double worstRatio = 0, worstMaxAbs = 0;
  std::string worstWhere;
};

std::string summaryKey(const OpCase& c) {
  return std::string(opSetName(c.opSet)) + "." + c.op + (c.opSet == OpSet::Gemm ? " " + c.format : "");
}

}  // namespace

SweepReport sweep(const std::vector<OpCase>& table, OpSet set, Backend& backend, Backend* cpu) {
  SweepReport report;
  std::map<std::string, OpSummary> perOp;
  for (const OpCase& c : table) {
    if (c.opSet != set || !rowSelected(c)) continue;
    ++report.rows;
    const Inputs inputs = c.makeInputs(c.seed());
    const Outputs reference = c.reference(inputs);
    RunResult result;
    if (cpu) {
      const RunResult onCpu = runCase(c, *cpu, inputs);
      result = checkCase(c, backend, inputs, reference, onCpu.passed() ? &onCpu.outputs : nullptr);
      if (!onCpu.passed())
        result.failures.push_back({FailureKind::Missing, "no CPU outputs to compare with:\n" + onCpu.report()});
    } else {
      result = checkCase(c, backend, inputs, reference);
    }
    OpSummary& s = perOp[summaryKey(c)];
    ++s.rows;
    for (const Comparison& k : result.comparisons) {
      s.worstMaxAbs = std::max(s.worstMaxAbs, k.maxAbs);
      if (k.ratio > s.worstRatio) {
        s.worstRatio = k.ratio;
        s.worstWhere = c.shape + " " + distributionName(c.distribution) + " '" + k.output + "' vs " + k.against;
      }
    }
    if (!result.passed()) {
      ++report.failed;
      report.failures += c.id() + " (seed " + std::to_string(c.seed()) + "):\n" + result.report();
    }
  }
  for (const auto& [key, s] : perOp)
    report.summary += "  " + key + ": " + std::to_string(s.rows) + " rows, largest NMSE/bound " +
                      formatNumber(s.worstRatio) + (s.worstWhere.empty() ? "" : " (" + s.worstWhere + ")") +
                      ", largest max|Δ| " + formatNumber(s.worstMaxAbs) + "\n";
  return report;
}

}  // namespace qs::backend_ops
