// quantscope-cli perplexity MODEL --text FILE [--tokens N] [--ctx C] [--tokenizer T] [--json]
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/run_support.h"
#include "core/runtime/evaluate.h"

namespace qs::cli {

void registerPerplexity(CLI::App& app, CliContext& ctx) {
  struct Args {
    std::string model, tokenizer, text;
    int64_t tokens = 0, context = 0;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("perplexity", "Perplexity of a model on a text file");
  cmd->add_option("MODEL", a->model, "Model file")->required();
  cmd->add_option("--text", a->text, "UTF-8 text file to score")->required();
  cmd->add_option("--tokens", a->tokens, "Score at most this many text tokens (default: all)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--ctx", a->context, "Window length in tokens, BOS included (default: min(context, 512))")->check(CLI::NonNegativeNumber);
  cmd->add_option("--tokenizer", a->tokenizer, "Tokenizer file (default: the model's own, or one next to it)");
  cmd->add_flag("--json", a->json, "Print JSON on stdout");
  cmd->callback([&ctx, a] {
    checkRegularFile(a->text, "text file");  // before the model loads: a bad path fails fast
    ctx.fieldFiles = {{"tokens", a->text}, {"context_length", a->model}, {"vocabulary", a->model}};
    TerminalProgress progress;
    RunnableModel m = loadRunnable(ctx.backend(), a->model, a->tokenizer, true, progress);
    const Tokenizer& tok = *m.model.tokenizer;
    const std::string text = readTextFile(a->text, textBytesForTokens(tok, a->tokens));
    progress.update(0, "tokenizing");
    const std::vector<int32_t> ids = tok.encode(text, {});
    PerplexityOptions o;
    o.context = a->context;
    o.maxTokens = a->tokens;
    o.bos = tok.sequenceStart();
    JobContext job;
    job.onProgress = [&progress](double f, std::string_view s) { progress.update(f, s); };
    const PerplexityResult r = evaluatePerplexity(*m.runtime, ids, o, &job);
    if (a->json) {
      nlohmann::ordered_json j;
      j["model"] = a->model;
      j["text"] = a->text;
      j["tokenizer"] = m.model.tokenizerPath;
      j["backend"] = ctx.backend().kind() == BackendKind::Cuda ? "cuda" : "cpu";
      j["perplexity"] = r.perplexity;
      j["mean_nll"] = r.meanNll;
      j["scored_tokens"] = r.scoredTokens;
      j["text_tokens"] = ids.size();
      j["windows"] = r.windows;
      j["context"] = r.context;
      j["protocol"] = r.protocol;
      ctx.out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    } else {
      ctx.out << "perplexity " << r.perplexity << " (mean NLL " << r.meanNll << " nats/token)\n"
              << "protocol: " << r.protocol << "\n"
              << "text: " << a->text << " (" << ids.size() << " tokens with " << m.model.tokenizerPath << ")\n";
    }
  });
}

}  // namespace qs::cli
