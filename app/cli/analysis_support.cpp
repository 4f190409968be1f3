#include "app/cli/analysis_support.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "core/plan/model_hash.h"
#include "core/util/datasets.h"
#include "kernels/common/error.h"
#include "kernels/ops/cpu_transformer_ops.h"

namespace qs::cli {

void addAnalysisOptions(CLI::App* cmd, AnalysisArgs& a, int64_t defaultTokens) {
  a.tokens = defaultTokens;
  cmd->add_option("--session", a.session,
                  "Session file (.qsession, HDF5) to read and update; created when missing");
  cmd->add_option("--text", a.text,
                  "UTF-8 text to run (default: datasets/text/tinystories_validation_head.txt)");
  cmd->add_option("--tokens", a.tokens, "Text tokens to use (0: the whole text)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--ctx", a.context, "Window length in tokens, BOS included (default: min(context, 512))")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--protocol", a.protocol,
                  "Which positions are scored: quantscope (default: BOS + ctx-1 text tokens per window, every "
                  "position) or llama.cpp (llama-perplexity's chunks, the second half of each scored)");
  cmd->add_option("--tokenizer", a.tokenizer, "Tokenizer file (default: the model's own, or one next to it)");
  cmd->add_flag("--json", a.json, "Print JSON on stdout");
}

JobContext progressContext(TerminalProgress& progress) {
  JobContext job;
  job.onProgress = [&progress](double f, std::string_view s) { progress.update(f, s); };
  return job;
}

AnalysisSetup setUpAnalysis(CliContext& ctx, const AnalysisArgs& a, TerminalProgress& progress) {
  AnalysisSetup s;
  s.textSource = a.text.empty() ? datasetsDir() + "/text/tinystories_validation_head.txt" : a.text;
  checkRegularFile(s.textSource, "text file");  // before the model loads: a bad path fails fast
  s.eval.protocol = parseEvalProtocol(a.protocol);
  ctx.fieldFiles = {{"tokens", s.textSource}, {"context_length", a.model}, {"vocabulary", a.model}};
  Backend& backend = ctx.backend();
  s.stats = &backend.stats();
  s.backendName = backend.name();
  s.run = loadRunnable(backend, a.model, a.tokenizer, true, progress);
  s.onHost = backend.kind() == BackendKind::Cpu;
  // The model's hash always: tables made from this run name their model (a table without one
  // was accepted for any model with the same layer names).
  progress.update(0, "hashing the model");
  s.modelHash = sampledModelHash(*s.run.model.file);
  if (!a.session.empty()) s.session = openSessionFor(a.session, a.model, s.modelHash, s.run.model.graph);
  progress.update(0, "tokenizing");
  const Tokenizer& tok = *s.run.model.tokenizer;
  s.tokens = tok.encode(readTextFile(s.textSource, textBytesForTokens(tok, a.tokens)), {});
  s.eval.context = a.context;
  s.eval.maxTokens = a.tokens;
  s.eval.bos = tok.sequenceStart();
  return s;
}

const CalibrationResult& calibrationFor(CliContext& ctx, AnalysisSetup& s, TerminalProgress& progress) {
  std::optional<CalibrationResult>& slot = s.calibrationSlot();
  if (slot) {
    ctx.err << "calibration: from the session (" << slot->tokens << " tokens of " << slot->textSource << ")\n";
    return *slot;
  }
  CalibrationOptions o;
  o.eval = s.eval;
  JobContext job = progressContext(progress);
  slot = runCalibration(*s.run.runtime, *s.stats, s.tokens, o, job);
  slot->textSource = s.textSource;
  ctx.err << "calibration: " << slot->tokens << " tokens of " << s.textSource << "\n";
  return *slot;
}

std::vector<Runtime*> WorkerRuntimes::pointers() const {
  std::vector<Runtime*> p;
  for (const auto& r : runtimes) p.push_back(r.get());
  return p;
}

WorkerRuntimes makeWorkerRuntimes(AnalysisSetup& s, int count, TerminalProgress& progress) {
  if (!s.onHost) return {};  // one device runtime: the device is the parallelism
  if (count <= 0) {
    constexpr uint64_t kExtraWeightBudget = uint64_t(2) << 30;
    uint64_t weightBytes = 0;
    for (const LinearLayer* l : s.run.runtime->linears()) weightBytes += uint64_t(l->outFeatures * l->inFeatures) * 4;
    const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
    count = 1;
    while (count < hw && uint64_t(count) * weightBytes <= kExtraWeightBudget) ++count;
  }
  WorkerRuntimes w;
  JobContext job = progressContext(progress);
  for (int k = 1; k < count; ++k) {
    w.ops.push_back(createCpuTransformerOps());
    w.runtimes.push_back(std::make_unique<Runtime>(*s.run.model.file, s.run.model.graph, *w.ops.back(),
                                                   RuntimeOptions{s.run.runtime->maxSeq()}, &job));
  }
  return w;
}

void saveIfSession(const AnalysisArgs& a, const AnalysisSetup& s) {
  if (s.session) saveSession(*s.session, a.session);
}

nlohmann::ordered_json jsonNumber(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}

nlohmann::ordered_json analysisJsonHeader(const char* command, const AnalysisArgs& a,
                                          const AnalysisSetup& s) {
  nlohmann::ordered_json j;
  j["command"] = command;
  j["model"] = a.model;
  j["model_hash"] = s.modelHash.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(s.modelHash);
  j["backend"] = s.backendName;  // the forward pass, the statistics and the comparisons
  j["session"] = a.session.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(a.session);
  j["text"] = s.textSource;
  return j;
}

}  // namespace qs::cli
