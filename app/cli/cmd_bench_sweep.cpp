// quantscope-cli bench sweep MODEL [--tokens 512] [--format F ...] [--mode fake|kernel]
//                                  [--layers N] [--json]
// The sensitivity sweep's work on the runtime (the equivalent of [analysis] job 2's end-to-end
// part, for timing): per linear layer × format, quantize only that layer, rerun the model from
// that layer's block on T tokens starting from the cached residual stream, and compare the
// next-token distributions with the unquantized run (mean KL, perplexity, top-1 agreement), all
// on the backend (compute memory; nothing but per-row figures comes back to the host).
// Baseline in the same run: one full unquantized forward pass of the same T tokens; the sweep is
// reported in those units next to its ideal (the blocks it must rerun).
// Tokens are random ids (seeded): a timing run, not an accuracy claim (synthetic models anyway).
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "app/cli/commands.h"
#include "app/cli/terminal_progress.h"
#include "app/cli/text_table.h"
#include "core/runtime/loaded_model.h"
#include "core/runtime/runtime.h"

namespace qs::cli {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

const char* const kSweepFormats[] = {"int4-g32-sym", "int4-g64-sym", "int4-g128-sym", "int8-ch-sym",
                                     "fp8e4m3-ch",   "fp8e5m2-ch",   "fp16"};

struct FormatStats {
  double klSum = 0, klMax = 0, top1Sum = 0, seconds = 0;
  int measured = 0, skipped = 0;
};
}  // namespace

void registerBenchSweep(CLI::App& bench, CliContext& ctx) {
  struct Args {
    std::string model;
    int64_t tokens = 512;
    std::vector<std::string> formats;
    std::string mode = "fake";
    int layers = 0;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = bench.add_subcommand("sweep", "Sensitivity-sweep work on the runtime: every linear x format, "
                                            "rerun from its block, KL vs the reference");
  cmd->add_option("MODEL", a->model, "Model file")->required();
  cmd->add_option("--tokens", a->tokens, "Evaluation tokens (one sequence)")->check(CLI::Range(2, 1 << 16));
  cmd->add_option("--format", a->formats, "Candidate format (repeatable; default: the seven of issue 8)");
  cmd->add_option("--mode", a->mode, "fake: fake-quantized weights, FP32 linear (on the device); kernel: the "
                                     "GEMM kernels (host quantization and packing per layer)")
      ->check(CLI::IsMember({"fake", "kernel"}));
  cmd->add_option("--layers", a->layers, "Only the first N linear layers (0 = all)")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--json", a->json, "Print JSON on stdout");
  cmd->callback([&ctx, a] {
    if (a->formats.empty()) a->formats.assign(std::begin(kSweepFormats), std::end(kSweepFormats));
    std::vector<QuantFormat> formats;
    for (const auto& f : a->formats) formats.push_back(parseQuantFormat(f));
    const LinearMode mode = a->mode == "kernel" ? LinearMode::Kernel : LinearMode::FakeQuant;
    Backend& backend = ctx.backend();
    TerminalProgress progress;
    JobContext job;
    job.onProgress = [&progress](double f, std::string_view s) { progress.update(f, s); };

    auto t0 = Clock::now();
    LoadedModel m = loadModel(a->model);
    Runtime rt(*m.file, m.graph, backend, {}, &job);
    const double loadSeconds = since(t0);
    const int64_t T = std::min<int64_t>(a->tokens, rt.maxSeq());
    const int nBlocks = int(m.graph.blocks.size());
    std::mt19937_64 rng(42);
    std::vector<int32_t> tokens(static_cast<size_t>(T));
    for (auto& t : tokens) t = int32_t(rng() % uint64_t(rt.vocabSize()));
    const std::vector<int32_t> targets(tokens.begin() + 1, tokens.end());  // next tokens (T - 1 rows scored)

    // Reference: the residual stream before every block (and after the last), the logits.
    std::vector<RuntimeTensor> cache;
    for (int b = 0; b <= nBlocks; ++b) cache.push_back(rt.allocate(T, rt.dim()));
    RuntimeTensor work = rt.allocate(T, rt.dim()), ref = rt.allocate(T, rt.vocabSize()),
                  logits = rt.allocate(T, rt.vocabSize());
    auto referencePass = [&] {
      rt.embed(tokens, 0, cache[0]);
      for (int b = 0; b < nBlocks; ++b) {
        rt.copy(cache[size_t(b) + 1], cache[size_t(b)]);
        rt.runBlock(b, cache[size_t(b) + 1], T, 0);
      }
      rt.head(cache[size_t(nBlocks)], T, ref);
      rt.ops().synchronize();
    };
    referencePass();  // warm-up (workspaces, cuBLAS heuristics)
    std::vector<double> refTimes;
    for (int r = 0; r < 3; ++r) {
      t0 = Clock::now();
      referencePass();
      refTimes.push_back(since(t0));
    }
    std::sort(refTimes.begin(), refTimes.end());
    const double forwardSeconds = refTimes[1];
    // Rows scored: T - 1 (the last position has no next token).
    auto score = [&](const RuntimeTensor& test) {
      return rt.compareLogits(ref, test, T - 1, targets);
    };
    double baseNll = 0;
    for (const auto& r : score(ref)) baseNll += r.nllRef;
    const double basePpl = std::exp(baseNll / double(T - 1));

    // Which block each linear belongs to (the head after the last block).
    const int L = a->layers > 0 ? std::min<int>(a->layers, int(rt.linears().size())) : int(rt.linears().size());
    std::vector<int> blockOf(rt.linears().size(), nBlocks);
    for (int b = 0; b < nBlocks; ++b)
      for (const LinearLayer& l : m.graph.blocks[size_t(b)].linears) {
        const int i = rt.linearIndex(l.weightName);
        if (i >= 0) blockOf[size_t(i)] = b;
      }

    std::vector<FormatStats> stats(formats.size());
    double idealBlocks = 0;
    int measurements = 0;
    const auto sweep0 = Clock::now();
    for (int i = 0; i < L; ++i) {
      const int b = blockOf[size_t(i)];
      const int64_t k = rt.linears()[size_t(i)]->inFeatures;
      for (size_t f = 0; f < formats.size(); ++f) {
        job.checkCancelled();
        const WeightSpec& w = formats[f].weight;
        if (w.granularity == Granularity::Group && k % int64_t(w.groupSize) != 0) {
          ++stats[f].skipped;
          continue;
        }
        const auto m0 = Clock::now();
        rt.setLinearFormat(i, rt.checkLinearFormat(i, formats[f], "--format"), mode);
        rt.copy(work, cache[size_t(b)]);
        for (int bb = b; bb < nBlocks; ++bb) rt.runBlock(bb, work, T, 0);
        rt.head(work, T, logits);
        const auto rows = score(logits);  // synchronizes (the figures come back to the host)
        rt.setLinearFormat(i, std::nullopt);
        double kl = 0, top1 = 0;
        for (const auto& r : rows) {
          kl += r.kl;
          top1 += r.top1Same ? 1 : 0;
        }
        kl /= double(rows.size());
        FormatStats& s = stats[f];
        s.klSum += kl;
        s.klMax = std::max(s.klMax, kl);
        s.top1Sum += top1 / double(rows.size());
        s.seconds += since(m0);
        ++s.measured;
        ++measurements;
        idealBlocks += double(nBlocks - b);
      }
      progress.update(double(i + 1) / L, "sweep");
    }
    const double sweepSeconds = since(sweep0);
    // The ideal: the blocks the sweep must rerun (and one head per measurement), at the reference
    // pass's speed; the head's share estimated as one block's.
    const double perBlock = forwardSeconds / double(nBlocks + 1);
    const double idealSeconds = (idealBlocks + measurements) * perBlock;

    if (a->json) {
      nlohmann::ordered_json j;
      j["model"] = a->model;
      j["backend"] = backend.name();
      j["mode"] = a->mode;
      j["tokens"] = T;
      j["linear_layers"] = L;
      j["measurements"] = measurements;
      j["load_seconds"] = loadSeconds;
      j["reference_forward_seconds"] = forwardSeconds;
      j["sweep_seconds"] = sweepSeconds;
      j["sweep_in_forward_passes"] = sweepSeconds / forwardSeconds;
      j["ideal_seconds"] = idealSeconds;
      j["base_perplexity"] = basePpl;
      for (size_t f = 0; f < formats.size(); ++f) {
        const FormatStats& s = stats[f];
        j["formats"].push_back({{"format", formatToString(formats[f])},
                                {"measured", s.measured},
                                {"skipped", s.skipped},
                                {"seconds", s.seconds},
                                {"mean_kl", s.measured ? s.klSum / s.measured : 0.0},
                                {"max_kl", s.klMax},
                                {"mean_top1", s.measured ? s.top1Sum / s.measured : 0.0}});
      }
      ctx.out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
      return;
    }
    ctx.out << "sensitivity sweep work: " << a->model << ", " << backend.name() << ", mode " << a->mode << ", " << T
            << " tokens, " << L << " linear layers x " << formats.size() << " formats = " << measurements
            << " measurements\n";
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "load %.2f s; reference forward (baseline, same run) %.1f ms; sweep %.2f s = %.1f forward passes "
                  "(ideal %.2f s: the blocks it must rerun); %.2f ms per measurement\n",
                  loadSeconds, forwardSeconds * 1e3, sweepSeconds, sweepSeconds / forwardSeconds, idealSeconds,
                  measurements ? sweepSeconds * 1e3 / measurements : 0.0);
    ctx.out << buf;
    TextTable t({"format", "layers", "skipped", "seconds", "mean KL (nats)", "max KL", "top-1 agreement"},
                {false, true, true, true, true, true, true});
    for (size_t f = 0; f < formats.size(); ++f) {
      const FormatStats& s = stats[f];
      char c[4][32];
      std::snprintf(c[0], 32, "%.2f", s.seconds);
      std::snprintf(c[1], 32, "%.3g", s.measured ? s.klSum / s.measured : 0.0);
      std::snprintf(c[2], 32, "%.3g", s.klMax);
      std::snprintf(c[3], 32, "%.4f", s.measured ? s.top1Sum / s.measured : 0.0);
      t.addRow({formatToString(formats[f]), std::to_string(s.measured), std::to_string(s.skipped), c[0], c[1], c[2], c[3]});
    }
    t.print(ctx.out);
    std::snprintf(buf, sizeof buf, "base perplexity on the random tokens: %.2f (synthetic tokens: timing only)\n", basePpl);
    ctx.out << buf;
  });
}

}  // namespace qs::cli
