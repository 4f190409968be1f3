// quantscope-cli bench open [--dir DIR] [--repeat N] [--keep]
// How fast a 7B-parameter model's tensor table opens. Writes two sparse files of Llama 2 7B's
// shapes (safetensors F16 with config.json; GGUF Q4_0 with the Llama 2 vocabulary in its
// metadata, as real GGUF files carry it), then times openModel (headers, tensor table, graph)
// against a baseline measured in the same run on the same file: reading the header bytes and
// parsing them with nlohmann::json alone (safetensors) / reading the header bytes (GGUF).
// Target: under 1 second each.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <random>

#include "app/cli/commands.h"
#include "app/cli/text_table.h"
#include "core/io/atomic_file.h"
#include "core/model/gguf_writer.h"
#include "core/model/model_file.h"
#include "core/util/datasets.h"
#include "kernels/common/error.h"

namespace qs::cli {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Shape7B {
  int64_t d = 4096, ff = 11008, L = 32, V = 32000;
};

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

template <typename Fn>
double median(int repeat, Fn fn) {
  fn();  // warm-up: page cache, allocator
  std::vector<double> t;
  for (int i = 0; i < repeat; ++i) {
    const auto a = Clock::now();
    fn();
    t.push_back(seconds(a, Clock::now()));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<std::pair<std::string, std::vector<int64_t>>> llamaTensors(const Shape7B& s, bool gguf) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> t;
  t.push_back({gguf ? "token_embd.weight" : "model.embed_tokens.weight", {s.V, s.d}});
  for (int l = 0; l < s.L; ++l) {
    const std::string p = gguf ? "blk." + std::to_string(l) + "." : "model.layers." + std::to_string(l) + ".";
    if (gguf) {
      t.push_back({p + "attn_norm.weight", {s.d}});
      for (const char* n : {"attn_q", "attn_k", "attn_v", "attn_output"}) t.push_back({p + n + ".weight", {s.d, s.d}});
      t.push_back({p + "ffn_norm.weight", {s.d}});
      t.push_back({p + "ffn_gate.weight", {s.ff, s.d}});
      t.push_back({p + "ffn_up.weight", {s.ff, s.d}});
      t.push_back({p + "ffn_down.weight", {s.d, s.ff}});
    } else {
      t.push_back({p + "input_layernorm.weight", {s.d}});
      for (const char* n : {"q_proj", "k_proj", "v_proj", "o_proj"})
        t.push_back({p + "self_attn." + n + ".weight", {s.d, s.d}});
      t.push_back({p + "post_attention_layernorm.weight", {s.d}});
      t.push_back({p + "mlp.gate_proj.weight", {s.ff, s.d}});
      t.push_back({p + "mlp.up_proj.weight", {s.ff, s.d}});
      t.push_back({p + "mlp.down_proj.weight", {s.d, s.ff}});
    }
  }
  t.push_back({gguf ? "output_norm.weight" : "model.norm.weight", {s.d}});
  t.push_back({gguf ? "output.weight" : "lm_head.weight", {s.V, s.d}});
  return t;
}

// Sparse safetensors: the real header, then a hole of the data's size.
uint64_t writeSafetensors7B(const std::string& path, const Shape7B& s) {
  nlohmann::ordered_json h;
  uint64_t off = 0;
  for (const auto& [name, shape] : llamaTensors(s, false)) {
    uint64_t n = 2;
    for (auto d : shape) n *= uint64_t(d);
    h[name] = {{"dtype", "F16"}, {"shape", shape}, {"data_offsets", {off, off + n}}};
    off += n;
  }
  h["__metadata__"] = {{"format", "pt"}, {"quantscope.synthetic", "true"}};
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  AtomicFile f(path);
  const uint64_t n = text.size();
  f.writeAt(0, std::as_bytes(std::span(&n, 1)));
  f.writeAt(8, std::as_bytes(std::span(text.data(), text.size())));
  f.resize(8 + n + off);
  f.commit();
  nlohmann::json cfg = {{"model_type", "llama"}, {"hidden_size", s.d}, {"intermediate_size", s.ff},
                        {"num_hidden_layers", s.L}, {"num_attention_heads", 32}, {"num_key_value_heads", 32},
                        {"vocab_size", s.V}, {"max_position_embeddings", 4096}, {"rms_norm_eps", 1e-5},
                        {"quantscope_synthetic", true}};
  writeFileAtomically((fs::path(path).parent_path() / "config.json").string(), cfg.dump(2));
  return 8 + n + off;
}

// Sparse GGUF: Llama metadata with the real Llama 2 vocabulary, Q4_0 weights, F32 norms.
uint64_t writeGguf7B(const std::string& path, const Shape7B& s) {
  GgufWriter w;
  auto vocab = openModel(datasetsDir() + "/tokenizers/llama2/ggml-vocab-llama-spm.gguf");
  for (const auto& e : vocab->metadata()) {
    if (e.key.rfind("llama.", 0) == 0 || e.key == "general.architecture") continue;
    w.addMeta(e);
  }
  w.addMeta({"general.architecture", "string", "llama"});
  w.addMeta({"llama.embedding_length", "u32", s.d});
  w.addMeta({"llama.feed_forward_length", "u32", s.ff});
  w.addMeta({"llama.block_count", "u32", s.L});
  w.addMeta({"llama.attention.head_count", "u32", 32});
  w.addMeta({"llama.attention.head_count_kv", "u32", 32});
  w.addMeta({"llama.context_length", "u32", 4096});
  w.addMeta({"llama.attention.layer_norm_rms_epsilon", "f32", 1e-5});
  w.addMeta({"general.synthetic", "bool", true});
  for (const auto& [name, shape] : llamaTensors(s, true)) w.addTensor(name, shape, shape.size() == 1 ? 0 : 2);
  const std::string h = w.header();
  AtomicFile f(path);
  f.writeAt(0, std::as_bytes(std::span(h.data(), h.size())));
  f.resize(w.fileSize());
  f.commit();
  return w.fileSize();
}

// Baselines: what any reader must do at least.
double baselineSafetensors(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  uint64_t n = 0;
  if (fd < 0 || ::pread(fd, &n, 8, 0) != 8) throw Error(ErrorKind::Internal, "cannot read", path);
  std::string text(n, '\0');
  if (::pread(fd, text.data(), n, 8) != ssize_t(n)) throw Error(ErrorKind::Internal, "cannot read", path);
  ::close(fd);
  return double(nlohmann::json::parse(text).size());
}
double baselineRead(const std::string& path, uint64_t bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  std::string buf(bytes, '\0');
  if (fd < 0 || ::pread(fd, buf.data(), bytes, 0) != ssize_t(bytes)) throw Error(ErrorKind::Internal, "cannot read", path);
  ::close(fd);
  return double(buf[bytes / 2]);
}

}  // namespace

void registerBenchOpen(CLI::App& bench, CliContext& ctx) {
  auto* cmd = bench.add_subcommand("open", "Time opening a 7B-parameter model's tensor table (sparse files)");
  auto dir = std::make_shared<std::string>();
  auto repeat = std::make_shared<int>(5);
  auto keep = std::make_shared<bool>(false);
  cmd->add_option("--dir", *dir, "Where to write the sparse test files (default: a temporary folder)");
  cmd->add_option("--repeat", *repeat, "Timed runs per measurement (median reported)")->check(CLI::Range(1, 100));
  cmd->add_flag("--keep", *keep, "Keep the generated files");
  cmd->callback([&ctx, dir, repeat, keep] {
    fs::path root = dir->empty() ? fs::temp_directory_path() / ("qs-bench-open-" + std::to_string(::getpid()))
                                 : fs::path(*dir);
    fs::create_directories(root / "safetensors");
    fs::create_directories(root / "gguf");
    struct Cleanup {
      fs::path p;
      bool keep;
      ~Cleanup() {
        std::error_code ec;
        if (!keep) fs::remove_all(p, ec);
      }
    } cleanup{root, *keep || !dir->empty()};
    const Shape7B s;
    const std::string st = (root / "safetensors" / "model.safetensors").string();
    const std::string gg = (root / "gguf" / "llama-7b-q4_0.gguf").string();
    const uint64_t stBytes = writeSafetensors7B(st, s);
    const uint64_t ggBytes = writeGguf7B(gg, s);

    TextTable t({"file", "size", "tensors", "parameters", "open (s)", "baseline (s)", "ratio"},
                {false, true, true, true, true, true, true});
    double worst = 0, worstRatio = 0;
    auto row = [&](const char* label, const std::string& path, uint64_t bytes, double base) {
      std::unique_ptr<ModelFile> m;
      const double open = median(*repeat, [&] { m = openModel(path); });
      if (m->graph().family != GraphFamily::Llama || m->parameterCount() < 6'000'000'000ull)
        throw Error(ErrorKind::Internal, "the 7B test file did not open as a 7B Llama", path);
      char o[32], b[32], r[32];
      std::snprintf(o, sizeof o, "%.4f", open);
      std::snprintf(b, sizeof b, "%.6f", base);
      std::snprintf(r, sizeof r, "%.1fx", open / base);
      t.addRow({label, humanBytes(bytes), withThousands(m->tensors().size()),
                withThousands(m->parameterCount()), o, b, r});
      worst = std::max(worst, open);
      worstRatio = std::max(worstRatio, open / base);
    };
    const double stBase = median(*repeat, [&] { (void)baselineSafetensors(st); });
    row("safetensors F16 (sparse)", st, stBytes, stBase);
    auto probe = openModel(gg);
    const uint64_t ggHeader = probe->tensors().front().offset;
    probe.reset();
    const double ggBase = median(*repeat, [&] { (void)baselineRead(gg, ggHeader); });
    row("GGUF Q4_0 + vocab (sparse)", gg, ggBytes, ggBase);
    ctx.out << "bench open: Llama 2 7B shapes; open = openModel (header, tensor table, graph), median of "
            << *repeat << "\n  baseline: safetensors = read the header + nlohmann::json::parse alone; "
               "GGUF = read the header bytes\n";
    t.print(ctx.out, "  ");
    char line[160];
    std::snprintf(line, sizeof line, "headline: 7B tensor table in %.3f s at worst (target < 1 s: %s), %.1fx its baseline\n",
                  worst, worst < 1.0 ? "met" : "MISSED", worstRatio);
    ctx.out << line;
  });
}

}  // namespace qs::cli
