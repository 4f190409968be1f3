#pragma once
// The backend-ops harness (in the style of ggml's test-backend-ops): one table of op cases
// (backend_ops_table.h), each row an op × format × shape × input distribution with its own error
// bounds, run on a Backend and compared with an independent scalar reference (double precision
// where the op is plain arithmetic) and, on a machine with CUDA, with the CPU backend.
//
// What a run checks:
//   values      NMSE = Σ(a−b)²/Σb² and max |a−b| of every output against the row's bounds
//   non-finite  a NaN or ±Inf where the comparand holds a finite value fails (outputs start as
//               NaN, so an element the op never wrote fails here)
//   sentinels   every buffer the op sees sits between guard regions of a known byte pattern;
//               a guard byte that changed is a write out of bounds, an input that changed is a
//               write to a const input
//   exceptions  an op that throws fails its row with the message
// docs/testing.md describes the table and how to add a row.
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/backend/backend.h"
#include "kernels/quant/weight_codec.h"

namespace qs {
class GemmOps;
class TransformerOps;
}  // namespace qs

namespace qs::backend_ops {

enum class OpSet { Transformer, Stats, Gemm, Gptq };
const char* opSetName(OpSet s);  // "transformer", "stats", "gemm", "gptq"

// ---- inputs ---------------------------------------------------------------------------------

enum class Distribution {
  Normal,    // N(0, σ)
  Outliers,  // N(0, σ) with a few values (one in 256, at least two) 50–100× larger
};
const char* distributionName(Distribution d);  // "normal", "outliers"

// n values of the distribution, deterministic for a seed.
std::vector<float> randomValues(size_t n, uint64_t seed, Distribution d, float sigma = 1.0f);

// A row's inputs, by name, on the host. The same inputs feed the reference and every backend.
class Inputs {
 public:
  std::vector<float>& f32(const std::string& name) { return f32_[name]; }
  const std::vector<float>& f32(const std::string& name) const;
  std::vector<int32_t>& i32(const std::string& name) { return i32_[name]; }
  const std::vector<int32_t>& i32(const std::string& name) const;
  std::vector<uint16_t>& f16(const std::string& name) { return f16_[name]; }  // FP16 bits
  const std::vector<uint16_t>& f16(const std::string& name) const;
  QuantizedTensor& weight(const std::string& name) { return weights_[name]; }
  const QuantizedTensor& weight(const std::string& name) const;

 private:
  std::map<std::string, std::vector<float>> f32_;
  std::map<std::string, std::vector<int32_t>> i32_;
  std::map<std::string, std::vector<uint16_t>> f16_;
  std::map<std::string, QuantizedTensor> weights_;
};

// ---- outputs --------------------------------------------------------------------------------

// One output array as the comparison sees it: every element as a double (FP16 bits converted,
// counts and flags as numbers).
struct Output {
  std::string name;
  std::vector<double> values;
};

class Outputs {
 public:
  void add(const std::string& name, std::vector<double> values);
  void add(const std::string& name, const std::vector<float>& values);
  void addHalf(const std::string& name, const std::vector<uint16_t>& bits);
  void add(const std::string& name, const std::vector<uint64_t>& values);
  void add(const std::string& name, const std::vector<uint16_t>& values);  // integer values (scale bits)
  void add(const std::string& name, const std::vector<uint8_t>& values);
  void add(const std::string& name, double value) { add(name, std::vector<double>{value}); }
  const Output* find(const std::string& name) const;
  const std::vector<Output>& all() const { return arrays_; }

 private:
  std::vector<Output> arrays_;
};

// ---- backend memory with sentinels ----------------------------------------------------------

// A backend's memory as TransformerOps and GemmOps expose it.
struct MemorySpace {
  std::function<std::shared_ptr<void>(size_t)> allocate;
  std::function<void(void*, const void*, size_t)> upload, download;
  std::function<void()> synchronize;
};
MemorySpace memoryOf(TransformerOps& ops);
MemorySpace memoryOf(GemmOps& ops);

// Buffers in a backend's memory, each between two guard regions of kGuardByte; outputs start
// filled with kUnwrittenByte (NaN as FP32 and FP16). The interior of every buffer starts
// kGuardBytes into its allocation, so it keeps the allocation's 256-byte alignment.
class GuardedArena {
 public:
  static constexpr size_t kGuardBytes = 256;
  static constexpr uint8_t kGuardByte = 0xA7;
  static constexpr uint8_t kUnwrittenByte = 0xFF;

  explicit GuardedArena(MemorySpace memory) : memory_(std::move(memory)) {}

  // A copy of host data the op must only read; verify() checks it still holds that data.
  template <class T>
  const T* input(const std::vector<T>& host, const std::string& name) {
    return static_cast<const T*>(place(host.data(), host.size() * sizeof(T), name, Role::Input));
  }
  // n elements the op writes (filled with kUnwrittenByte first).
  template <class T>
  T* output(size_t n, const std::string& name) {
    return static_cast<T*>(place(nullptr, n * sizeof(T), name, Role::Output));
  }
  // Starts as `initial`; the op updates it in place.
  template <class T>
  T* inOut(const std::vector<T>& initial, const std::string& name) {
    return static_cast<T*>(place(initial.data(), initial.size() * sizeof(T), name, Role::Output));
  }
  // The interior of a buffer of this arena, downloaded (after synchronising the backend).
  template <class T>
  std::vector<T> read(const T* p) {
    const std::vector<uint8_t> bytes = readBytes(p);
    std::vector<T> out(bytes.size() / sizeof(T));
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
    return out;
  }

  // Guards of every buffer intact, inputs unchanged; one line per problem.
  std::vector<std::string> verify();

 private:
  enum class Role { Input, Output };
  struct Buffer {
    std::shared_ptr<void> memory;
    size_t bytes = 0;
    std::string name;
    Role role = Role::Output;
    std::vector<uint8_t> initial;  // inputs: what was uploaded
  };
  void* place(const void* host, size_t bytes, const std::string& name, Role role);
  std::vector<uint8_t> readBytes(const void* interior);
  std::vector<uint8_t> downloadWhole(const Buffer& b);

  MemorySpace memory_;
  std::vector<Buffer> buffers_;
};

// What a row's run() gets: the backend, the inputs, and guarded memory in the op-sets' spaces
// (created on first use; the harness verifies their sentinels after run() returns).
class OpRun {
 public:
  OpRun(Backend& backend, const Inputs& inputs) : backend(backend), in(inputs) {}
  Backend& backend;
  const Inputs& in;
  GuardedArena& transformerMemory();  // backend.transformer()'s memory
  GuardedArena& gemmMemory();         // backend.gemm()'s memory
  std::vector<std::string> verifyMemory();

 private:
  std::unique_ptr<GuardedArena> transformer_, gemm_;
};

// ---- bounds ---------------------------------------------------------------------------------

inline constexpr double kUnchecked = -1.0;

struct Tolerance {
  double nmse = 0;              // Σ(a−b)²/Σb² ≤ nmse; 0 demands equal values
  double maxAbs = kUnchecked;   // max |a−b| ≤ maxAbs, where meaningful
  // Values of magnitude below `floor` are normalised as if they were `floor` (Σb² becomes
  // Σ max(b², floor²)): for outputs that can be ≈ 0 (a KL of a one-hot softmax, an activation's
  // tail), whose relative error means nothing, the error then counts in absolute terms.
  double floor = 0;
};

// The limits for one output (a name, a prefix ending in '*', or empty: every output without a
// bound of its own), and why they are what they are.
struct Bound {
  std::string output;
  Tolerance vsReference;  // any backend against the scalar reference
  Tolerance vsCpu;        // the CUDA backend against the CPU backend
  std::string why;
};

// ---- the table's row ------------------------------------------------------------------------

struct OpCase {
  std::string op;      // the op-set's function: "rmsNorm", "run", "accumulateHistogram", …
  OpSet opSet = OpSet::Transformer;
  std::string format;  // the QuantFormat spelling where the op has one ("int4-g128-sym")
  std::string shape;   // "T=3 D=4099"
  Distribution distribution = Distribution::Normal;
  std::vector<Bound> bounds;
  std::function<Inputs(uint64_t seed)> makeInputs;
  std::function<Outputs(OpRun&)> run;
  std::function<Outputs(const Inputs&)> reference;

  std::string id() const;  // "transformer.rmsNorm T=3 D=4099 outliers" (format included)
  const Bound& boundFor(const std::string& output) const;
  uint64_t seed() const;   // from id() and QS_BACKEND_OPS_SEED
};

// ---- running and comparing ------------------------------------------------------------------

enum class FailureKind { Tolerance, NonFinite, Sentinel, Missing, Exception };
const char* failureKindName(FailureKind k);

struct Failure {
  FailureKind kind;
  std::string message;
};

struct Comparison {
  std::string output;
  std::string against;  // "reference" or "cpu"
  double nmse = 0, maxAbs = 0;
  double ratio = 0;  // nmse / bound (0 when the bound is 0 and the values are equal)
};

struct RunResult {
  Outputs outputs;
  std::vector<Failure> failures;
  std::vector<Comparison> comparisons;
  bool passed() const { return failures.empty(); }
  bool failedWith(FailureKind k) const;
  std::string report() const;  // the failures, one per line
};

// Runs the row on the backend: catches exceptions, verifies the sentinels.
RunResult runCase(const OpCase& c, Backend& backend, const Inputs& inputs);

enum class Against { Reference, Cpu };
// Compares a run's outputs with the comparand's by the row's bounds; appends to `result`.
void compare(const OpCase& c, const Outputs& comparand, Against against, const std::string& backendName,
             RunResult& result);

// One row on one backend against the reference (and, when `cpu` is given, against the CPU
// backend's outputs): the whole check of the harness.
RunResult checkCase(const OpCase& c, Backend& backend, const Inputs& inputs, const Outputs& reference,
                    const Outputs* cpu = nullptr);

// Every row of one op-set on a backend against the reference and, when `cpu` is given, against
// the CPU backend's outputs too.
struct SweepReport {
  int rows = 0, failed = 0;
  std::string failures;  // each failing row: its id, its seed and what failed
  std::string summary;   // per op (per format for GEMM): rows, and the largest NMSE / bound
};
SweepReport sweep(const std::vector<OpCase>& table, OpSet set, Backend& backend, Backend* cpu = nullptr);

bool quickRun();  // QS_TEST_QUICK=1: the builders shrink their largest shapes (compute-sanitizer)

}  // namespace qs::backend_ops
