#include "core/model/synth_model.h"

#include <algorithm>
#include <array>
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif
#include <atomic>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <thread>

#include "core/io/atomic_file.h"
#include "core/model/safetensors_reader.h"
#include "kernels/common/error.h"
#include "kernels/common/half.h"

namespace qs {
namespace {

// ---- random numbers: splitmix64 seeds xoshiro256** ------------------------------------------
uint64_t splitmix(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
struct Rng {
  uint64_t s[4];
  explicit Rng(uint64_t seed) {
    for (auto& v : s) v = splitmix(seed);
  }
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t next() {
    const uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3], s[2] ^= t, s[3] = rotl(s[3], 45);
    return r;
  }
  // Uniform in the open interval (0, 1).
  float uniform() { return (float(next() >> 40) + 0.5f) * (1.0f / 16777216.0f); }
  // Uniform in (0, 1) with 53 bits, for the tails.
  double uniform53() { return (double(next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
};

// Student-t with 4 degrees of freedom has a closed-form quantile (Wikipedia, "Student's
// t-distribution"): with a = 4p(1 - p) and q = cos(acos(sqrt(a)) / 3) / sqrt(a),
// F^-1(p) = sign(p - 1/2) * 2 * sqrt(q - 1). Sampling is by inversion: the body
// (2^-10 < p < 1 - 2^-10) from a table with linear interpolation, the tails (0.2 % of draws)
// exactly. Var(t4) = 2, so values are divided by sqrt(2) for unit variance.
double t4Quantile(double p) {
  const double a = 4.0 * p * (1.0 - p);
  const double q = std::cos(std::acos(std::sqrt(a)) / 3.0) / std::sqrt(a);
  const double t = 2.0 * std::sqrt(std::max(0.0, q - 1.0));
  return p < 0.5 ? -t : t;
}

class StudentT4 {
 public:
  static constexpr double kTail = 1.0 / 1024.0;
  static constexpr int kSteps = 1 << 14;
  StudentT4() {
    for (int k = 0; k <= kSteps; ++k)
      table_[size_t(k)] = float(t4Quantile(kTail + (1.0 - 2 * kTail) * k / kSteps) * kInvSqrt2);
  }
  float operator()(Rng& rng) const {
    const uint64_t bits = rng.next();
    const double p = (double(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    if (p < kTail || p > 1.0 - kTail) return float(t4Quantile(p) * kInvSqrt2);
    const double x = (p - kTail) / (1.0 - 2 * kTail) * kSteps;
    const int k = std::min(kSteps - 1, int(x));
    const float f = float(x - k);
    return table_[size_t(k)] + f * (table_[size_t(k) + 1] - table_[size_t(k)]);
  }

 private:
  static constexpr double kInvSqrt2 = 0.70710678118654752;
  std::array<float, kSteps + 1> table_{};
};

// float → fp16 for finite values (all synth values are finite). The F16C instruction rounds to
// nearest even exactly like floatToHalfBits; it halves the time of a 1B-parameter model.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx,f16c"))) void toHalfF16c(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(in + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) out[i] = floatToHalfBits(in[i]);
}
bool haveF16c() {
  // CPUID leaf 1: ECX bit 29 F16C, bit 28 AVX, bit 27 OSXSAVE; XCR0 bits 1-2: the OS saves
  // SSE and AVX state. (clang-14's __builtin_cpu_supports does not know "f16c".)
  static const bool yes = [] {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    if (!(c & (1u << 29)) || !(c & (1u << 28)) || !(c & (1u << 27))) return false;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 6u) == 6u;
  }();
  return yes;
}
#else
void toHalfF16c(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = floatToHalfBits(in[i]);
}
bool haveF16c() { return false; }
#endif

void toHalf(const float* in, uint16_t* out, size_t n) {
  if (haveF16c()) {
    toHalfF16c(in, out, n);
    return;
  }
  for (size_t i = 0; i < n; ++i) out[i] = floatToHalfBits(in[i]);
}

enum class Kind { Embedding, Linear, NormWeight, NormBias, Bias };

struct SynthTensor {
  std::string name;
  std::vector<int64_t> shape;
  Kind kind;
  int layer = -1;           // -1 outside the blocks
  float gain = 1.0f;        // role gain
  bool readsStream = false; // input columns are residual-stream channels
  bool writesStream = false;
  bool conv1d = false;      // stored [in, out]
  uint64_t offset = 0;      // relative to the data section
  uint64_t bytes = 0;
  uint64_t elements() const {
    uint64_t n = 1;
    for (auto d : shape) n *= uint64_t(d);
    return n;
  }
};

std::vector<SynthTensor> layoutTensors(const ModelConfig& c, bool gpt2) {
  std::vector<SynthTensor> ts;
  const int64_t d = c.dim, ff = c.hiddenDim, V = c.vocabSize, hd = c.headDim();
  auto add = [&](std::string name, std::vector<int64_t> shape, Kind k, int layer = -1, float gain = 1,
                 bool reads = false, bool writes = false, bool conv = false) {
    ts.push_back({std::move(name), std::move(shape), k, layer, gain, reads, writes, conv});
  };
  if (!gpt2) {
    add("model.embed_tokens.weight", {V, d}, Kind::Embedding);
    for (int l = 0; l < c.nLayers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      add(p + "input_layernorm.weight", {d}, Kind::NormWeight, l);
      add(p + "self_attn.q_proj.weight", {c.nHeads * hd, d}, Kind::Linear, l, 1.0f, true);
      add(p + "self_attn.k_proj.weight", {c.nKvHeads * hd, d}, Kind::Linear, l, 1.0f, true);
      add(p + "self_attn.v_proj.weight", {c.nKvHeads * hd, d}, Kind::Linear, l, 0.6f, true);
      add(p + "self_attn.o_proj.weight", {d, c.nHeads * hd}, Kind::Linear, l, 0.5f, false, true);
      add(p + "post_attention_layernorm.weight", {d}, Kind::NormWeight, l);
      add(p + "mlp.gate_proj.weight", {ff, d}, Kind::Linear, l, 0.9f, true);
      add(p + "mlp.up_proj.weight", {ff, d}, Kind::Linear, l, 0.9f, true);
      add(p + "mlp.down_proj.weight", {d, ff}, Kind::Linear, l, 0.7f, false, true);
    }
    add("model.norm.weight", {d}, Kind::NormWeight);
    if (!c.tiedEmbeddings) add("lm_head.weight", {V, d}, Kind::Linear, -1, 0.8f, true);
  } else {
    add("wte.weight", {V, d}, Kind::Embedding);
    add("wpe.weight", {c.maxSeqLen, d}, Kind::Embedding);
    for (int l = 0; l < c.nLayers; ++l) {
      const std::string p = "h." + std::to_string(l) + ".";
      add(p + "ln_1.weight", {d}, Kind::NormWeight, l);
      add(p + "ln_1.bias", {d}, Kind::NormBias, l);
      add(p + "attn.c_attn.weight", {d, 3 * d}, Kind::Linear, l, 1.0f, true, false, true);
      add(p + "attn.c_attn.bias", {3 * d}, Kind::Bias, l);
      add(p + "attn.c_proj.weight", {d, d}, Kind::Linear, l, 0.5f, false, true, true);
      add(p + "attn.c_proj.bias", {d}, Kind::Bias, l);
      add(p + "ln_2.weight", {d}, Kind::NormWeight, l);
      add(p + "ln_2.bias", {d}, Kind::NormBias, l);
      add(p + "mlp.c_fc.weight", {d, ff}, Kind::Linear, l, 0.9f, true, false, true);
      add(p + "mlp.c_fc.bias", {ff}, Kind::Bias, l);
      add(p + "mlp.c_proj.weight", {ff, d}, Kind::Linear, l, 0.7f, false, true, true);
      add(p + "mlp.c_proj.bias", {d}, Kind::Bias, l);
    }
    add("ln_f.weight", {d}, Kind::NormWeight);
    add("ln_f.bias", {d}, Kind::NormBias);
  }
  return ts;
}

constexpr uint64_t kChunk = uint64_t(1) << 20;  // values per work item

}  // namespace

ModelConfig synthPresetConfig(const std::string& arch, const std::string& preset) {
  ModelConfig c;
  c.architecture = arch;
  c.sourceArchitecture = arch;
  auto set = [&](int64_t d, int64_t L, int64_t H, int64_t KV, int64_t ff, int64_t V, int64_t seq) {
    c.dim = d, c.nLayers = L, c.nHeads = H, c.nKvHeads = KV, c.hiddenDim = ff, c.vocabSize = V,
    c.maxSeqLen = seq;
  };
  if (arch == "llama") {
    c.normEps = 1e-5;
    c.ropeTheta = 10000.0;
    if (preset == "tiny") {
      set(128, 3, 4, 2, 320, 512, 64);  // for tests: seconds, not minutes
    } else if (preset == "110m") {
      set(768, 12, 12, 12, 2048, 32000, 1024);  // llama2.c stories110M
      c.tiedEmbeddings = true;
    } else if (preset == "1b") {
      set(2048, 22, 32, 4, 5632, 32000, 2048);  // TinyLlama 1.1B
    } else if (preset == "8b") {
      set(4096, 32, 32, 8, 14336, 128256, 8192);  // Llama 3 8B
      c.ropeTheta = 500000.0;
    } else {
      throwBadInput("", "--preset", "unknown preset \"" + preset + "\" (110m, 1b, 8b; tiny for tests)");
    }
  } else if (arch == "gpt2") {
    c.normEps = 1e-5;
    c.tiedEmbeddings = true;
    if (preset == "tiny")
      set(128, 3, 4, 4, 512, 500, 64);  // for tests
    else if (preset == "110m")
      set(768, 12, 12, 12, 3072, 50257, 1024);  // GPT-2 (124M)
    else if (preset == "1b")
      set(1600, 48, 25, 25, 6400, 50257, 1024);  // GPT-2 XL (1.56B)
    else if (preset == "8b")
      set(4096, 40, 32, 32, 16384, 50257, 2048);  // GPT-2 shape scaled to 8.3B
    else
      throwBadInput("", "--preset", "unknown preset \"" + preset + "\" (110m, 1b, 8b; tiny for tests)");
  } else {
    throwBadInput("", "--arch", "unknown architecture \"" + arch + "\" (llama, gpt2)");
  }
  return c;
}

SynthResult writeSynthModel(const SynthOptions& opt, const std::string& outPath,
                            const JobContext& ctx) {
  if (opt.dtype != DType::F16 && opt.dtype != DType::BF16 && opt.dtype != DType::F32)
    throwBadInput("", "--dtype", "must be f16, bf16 or f32");
  ModelConfig c = synthPresetConfig(opt.arch, opt.preset);
  if (opt.layers < 0 || opt.layers > 4096)
    throwBadInput("", "--layers", "must be in 1..4096, got " + std::to_string(opt.layers));
  if (opt.layers > 0) c.nLayers = opt.layers;
  const bool gpt2 = opt.arch == "gpt2";
  auto tensors = layoutTensors(c, gpt2);
  const uint32_t elemBytes = dtypeTraits(opt.dtype).blockBytes;
  const std::string dtypeName(safetensorsDTypeName(opt.dtype));

  // Header: tensors in order, contiguous, then the synthetic marker.
  nlohmann::ordered_json header;
  uint64_t offset = 0, params = 0;
  for (auto& t : tensors) {
    t.offset = offset;
    t.bytes = t.elements() * elemBytes;
    offset += t.bytes;
    params += t.elements();
    header[t.name] = {{"dtype", dtypeName}, {"shape", t.shape}, {"data_offsets", {t.offset, t.offset + t.bytes}}};
  }
  header["__metadata__"] = {{"format", "pt"},
                            {"quantscope.synthetic", "true"},
                            {"quantscope.synth.arch", opt.arch},
                            {"quantscope.synth.preset", opt.preset},
                            {"quantscope.synth.seed", std::to_string(opt.seed)}};
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // data starts 8-byte aligned, as the library writes it
  const uint64_t dataStart = 8 + h.size();

  // The outlier channels of the residual stream, and the per-layer scales.
  Rng meta(opt.seed ^ 0xA5A5A5A5ull);
  const int nOutliers = int(std::max<int64_t>(2, c.dim / 512));
  std::vector<char> outlier(size_t(c.dim), 0);
  for (int k = 0; k < nOutliers;) {
    const size_t ch = size_t(meta.next() % uint64_t(c.dim));
    if (!outlier[ch]) outlier[ch] = 1, ++k;
  }
  std::vector<float> layerScale(size_t(c.nLayers));
  for (int l = 0; l < c.nLayers; ++l) {
    const float depth = c.nLayers > 1 ? float(l) / float(c.nLayers - 1) : 0.0f;
    float s = 0.8f + 0.4f * depth;                        // a smooth ramp with depth
    if (l == 0 || l == c.nLayers - 1) s *= 1.3f;          // first and last blocks stand out
    s *= 1.0f + 0.15f * (2.0f * meta.uniform() - 1.0f);   // ±15 % per layer
    layerScale[size_t(l)] = s;
  }

  AtomicFile file(outPath);
  file.resize(dataStart + offset);
  const uint64_t n = h.size();
  file.writeAt(0, std::as_bytes(std::span(&n, 1)));
  file.writeAt(8, std::as_bytes(std::span(h.data(), h.size())));

  // Work items: (tensor, chunk); each seeds its own generator from (seed, tensor, chunk).
  struct Item {
    size_t tensor;
    uint64_t first, count;
  };
  std::vector<Item> items;
  for (size_t i = 0; i < tensors.size(); ++i)
    for (uint64_t f = 0; f < tensors[i].elements(); f += kChunk)
      items.push_back({i, f, std::min(kChunk, tensors[i].elements() - f)});
  std::atomic<size_t> next{0}, done{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex errorMutex;
  const int threads = opt.threads > 0 ? opt.threads : int(std::max(1u, std::thread::hardware_concurrency()));

  static const StudentT4 t4;
  auto worker = [&] {
    std::vector<float> vals(kChunk);
    std::vector<std::byte> bytes(kChunk * elemBytes);
    std::vector<uint16_t> halves(kChunk);
    try {
      for (size_t k; !failed && (k = next.fetch_add(1)) < items.size();) {
        const Item& it = items[k];
        const SynthTensor& t = tensors[it.tensor];
        uint64_t seed = opt.seed * 0x100000001B3ull ^ (uint64_t(it.tensor) << 32) ^ (it.first / kChunk);
        Rng rng(splitmix(seed));
        for (uint64_t j = 0; j < it.count; ++j) vals[j] = t4(rng);
        const float ls = t.layer >= 0 ? layerScale[size_t(t.layer)] : 1.0f;
        const uint64_t cols = uint64_t(t.shape.size() == 2 ? t.shape[1] : t.shape[0]);
        switch (t.kind) {
          case Kind::Embedding:
          case Kind::NormBias:
            for (uint64_t j = 0; j < it.count; ++j) vals[j] *= 0.02f;
            break;
          case Kind::Bias:
            for (uint64_t j = 0; j < it.count; ++j) vals[j] *= 0.02f * ls;
            break;
          case Kind::NormWeight:
            // Positive, around 1, larger where the residual stream has its outlier channels.
            for (uint64_t j = 0; j < it.count; ++j)
              vals[j] = std::fabs(1.0f + 0.1f * vals[j]) * (outlier[(it.first + j) % cols] ? 4.0f : 1.0f);
            break;
          case Kind::Linear: {
            // Row by row: [out, in] (Conv1D: [in, out]) tells which index is the input channel.
            const int64_t in = t.conv1d ? t.shape[0] : t.shape[1];
            const float base = t.gain * ls / std::sqrt(float(in));
            uint64_t row = it.first / cols, col = it.first % cols;
            for (uint64_t j = 0; j < it.count;) {
              const uint64_t n = std::min<uint64_t>(cols - col, it.count - j);
              const bool rowIsStream = row < outlier.size() && outlier[row];
              const float rowScale =
                  base * ((t.conv1d ? t.readsStream : t.writesStream) && rowIsStream ? (t.conv1d ? 6.0f : 3.0f) : 1.0f);
              const bool colsAreStream = t.conv1d ? t.writesStream : t.readsStream;
              const float colBoost = t.conv1d ? 3.0f : 6.0f;
              float* v = &vals[j];
              for (uint64_t k = 0; k < n; ++k) v[k] *= rowScale;
              if (colsAreStream)
                for (uint64_t k = 0; k < n; ++k)
                  if (col + k < outlier.size() && outlier[col + k]) v[k] *= colBoost;
              j += n;
              col = 0;
              ++row;
            }
            break;
          }
        }
        if (opt.dtype == DType::F32) {
          std::memcpy(bytes.data(), vals.data(), size_t(it.count) * 4);
        } else if (opt.dtype == DType::F16) {
          toHalf(vals.data(), halves.data(), size_t(it.count));
          std::memcpy(bytes.data(), halves.data(), size_t(it.count) * 2);
        } else {
          for (uint64_t j = 0; j < it.count; ++j) halves[j] = floatToBf16Bits(vals[j]);
          std::memcpy(bytes.data(), halves.data(), size_t(it.count) * 2);
        }
        file.writeAt(dataStart + t.offset + it.first * elemBytes,
                     std::span(bytes.data(), size_t(it.count * elemBytes)));
        const size_t d = done.fetch_add(1) + 1;
        if (ctx.onProgress && d % 16 == 0) {
          std::lock_guard lock(errorMutex);
          ctx.progress(double(d) / double(items.size()), "generating weights");
        }
        if (ctx.cancelled()) throw Error(ErrorKind::Cancelled, "cancelled by the user");
      }
    } catch (...) {
      std::lock_guard lock(errorMutex);
      if (!error) error = std::current_exception();
      failed = true;
    }
  };
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back(worker);
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
  file.commit();

  // config.json beside it, in Hugging Face's vocabulary.
  nlohmann::ordered_json cj;
  const char* torchDtype = opt.dtype == DType::F32 ? "float32" : opt.dtype == DType::BF16 ? "bfloat16" : "float16";
  if (gpt2) {
    cj = {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}, {"n_embd", c.dim},
          {"n_layer", c.nLayers}, {"n_head", c.nHeads}, {"n_inner", c.hiddenDim}, {"n_positions", c.maxSeqLen},
          {"vocab_size", c.vocabSize}, {"layer_norm_epsilon", c.normEps}, {"tie_word_embeddings", true}};
  } else {
    cj = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", c.dim},
          {"intermediate_size", c.hiddenDim}, {"num_hidden_layers", c.nLayers},
          {"num_attention_heads", c.nHeads}, {"num_key_value_heads", c.nKvHeads},
          {"vocab_size", c.vocabSize}, {"max_position_embeddings", c.maxSeqLen},
          {"rms_norm_eps", c.normEps}, {"rope_theta", c.ropeTheta},
          {"tie_word_embeddings", c.tiedEmbeddings}};
  }
  cj["torch_dtype"] = torchDtype;
  cj["quantscope_synthetic"] = true;
  cj["quantscope_synth"] = {{"preset", opt.preset}, {"seed", opt.seed}};
  SynthResult r;
  r.configPath = (std::filesystem::path(outPath).parent_path() / "config.json").string();
  if (r.configPath.rfind("config.json", 0) == 0 && std::filesystem::path(outPath).parent_path().empty())
    r.configPath = "config.json";
  writeFileAtomically(r.configPath, cj.dump(2) + "\n");
  r.config = c;
  r.parameters = params;
  r.fileBytes = dataStart + offset;
  return r;
}

}  // namespace qs
