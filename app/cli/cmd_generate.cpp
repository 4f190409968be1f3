// quantscope-cli generate MODEL [--tokenizer T] [--prompt TEXT] [--tokens N] [--json]
// Greedy, deterministic generation on the chosen backend's runtime (--backend).
#include <chrono>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/run_support.h"
#include "core/runtime/evaluate.h"
#include "kernels/common/error.h"

namespace qs::cli {

void registerGenerate(CLI::App& app, CliContext& ctx) {
  struct Args {
    std::string model, tokenizer, prompt;
    int tokens = 128;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("generate", "Generate text greedily (deterministic) from a prompt");
  cmd->add_option("MODEL", a->model, "Model file")->required();
  cmd->add_option("--tokenizer", a->tokenizer, "Tokenizer file (default: the model's own, or one next to it)");
  cmd->add_option("--prompt", a->prompt, "Prompt text (default: empty, i.e. BOS only)");
  cmd->add_option("--tokens", a->tokens, "New tokens to generate")->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--json", a->json, "Print JSON on stdout");
  cmd->callback([&ctx, a] {
    ctx.fieldFiles = {{"vocabulary", a->model}, {"context_length", a->model}};
    TerminalProgress progress;
    RunnableModel m = loadRunnable(ctx.backend(), a->model, a->tokenizer, true, progress);
    const Tokenizer& tok = *m.model.tokenizer;
    EncodeOptions eo;
    eo.addBos = tok.bos() >= 0;
    std::vector<int32_t> prompt = tok.encode(a->prompt, eo);
    if (prompt.empty()) {  // GPT-2 style vocabularies have no BOS: start from end-of-text
      if (tok.eos() < 0) throw Error(ErrorKind::BadInput, "empty prompt and the tokenizer has no BOS/EOS", a->model);
      prompt.push_back(tok.eos());
    }
    // llama2.c's run.c stops when the model emits BOS (a new story); EOS stops everywhere.
    const int32_t stop = tok.eos() >= 0 ? tok.eos() : tok.bos();
    const int32_t stop2 = tok.bos();
    std::string text = a->prompt;
    int32_t prev = prompt.back();
    std::vector<int32_t> produced;
    if (!a->json) ctx.out << a->prompt << std::flush;
    const auto t0 = std::chrono::steady_clock::now();
    bool stopped = false;
    generateGreedy(*m.runtime, prompt, a->tokens, stop, [&](int32_t id) {
      if (stopped || id == stop2) {
        stopped = true;
        return;
      }
      produced.push_back(id);
      const std::string piece = tok.decodeNext(prev, id);
      prev = id;
      text += piece;
      if (!a->json) ctx.out << piece << std::flush;
    });
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (a->json) {
      nlohmann::ordered_json j;
      j["model"] = a->model;
      j["tokenizer"] = m.model.tokenizerPath;
      j["backend"] = ctx.backend().kind() == BackendKind::Cuda ? "cuda" : "cpu";
      j["prompt"] = a->prompt;
      j["prompt_tokens"] = prompt;
      j["tokens"] = produced;
      j["text"] = text;
      j["seconds"] = secs;
      ctx.out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    } else {
      ctx.out << std::endl;
      ctx.err << produced.size() << " tokens in " << secs << " s (" << (produced.size() / std::max(secs, 1e-9))
              << " tokens/s, " << ctx.backend().name() << ")\n";
    }
  });
}

}  // namespace qs::cli
