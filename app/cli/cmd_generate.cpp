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
    bool plainSpecial = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("generate", "Generate text greedily (deterministic) from a prompt");
  cmd->add_option("MODEL", a->model, "Model file")->required();
  cmd->add_option("--tokenizer", a->tokenizer, "Tokenizer file (default: the model's own, or one next to it)");
  cmd->add_option("--prompt", a->prompt, "Prompt text (default: empty, i.e. BOS only)");
  cmd->add_option("--tokens", a->tokens, "New tokens to generate")->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--json", a->json, "Print JSON on stdout");
  cmd->add_flag("--plain-special", a->plainSpecial,
                "Treat special tokens written in the prompt (<bos>, <|im_start|>) as plain text");
  cmd->callback([&ctx, a] {
    ctx.fieldFiles = {{"vocabulary", a->model}, {"context_length", a->model}};
    TerminalProgress progress;
    RunnableModel m = loadRunnable(ctx.backend(), a->model, a->tokenizer, true, progress);
    const Tokenizer& tok = *m.model.tokenizer;
    // BOS as the tokenizer's files say (add_bos_token); special tokens written in the prompt
    // are matched, as llama.cpp's tools do, unless --plain-special.
    EncodeOptions eo;
    eo.addBos = tok.addsBosByDefault();
    eo.parseSpecial = !a->plainSpecial;
    std::vector<int32_t> prompt = tok.encode(a->prompt, eo);
    if (prompt.empty()) {  // empty prompt: BOS, or end-of-text for vocabularies without BOS
      const int32_t start = tok.bos() >= 0 ? tok.bos() : tok.eos();
      if (start < 0) throw Error(ErrorKind::BadInput, "empty prompt and the tokenizer has no BOS/EOS", a->model);
      prompt.push_back(start);
    }
    // Every end-of-sequence id stops (eos, eot, a config's eos_token_id list); llama2.c's run.c
    // also stops when the model emits BOS (a new story).
    std::vector<int32_t> stops = tok.stopIds();
    if (stops.empty() && tok.bos() >= 0) stops.push_back(tok.bos());
    const int32_t stop2 = tok.bos();
    std::string text = a->prompt;
    int32_t prev = prompt.back();
    std::vector<int32_t> produced;
    if (!a->json) ctx.out << a->prompt << std::flush;
    const auto t0 = std::chrono::steady_clock::now();
    bool stopped = false;
    generateGreedy(*m.runtime, prompt, a->tokens, std::span<const int32_t>(stops), [&](int32_t id) {
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
      // A token may end inside a UTF-8 character (byte-fallback pieces): invalid bytes become
      // U+FFFD instead of a serialisation error.
      ctx.out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    } else {
      ctx.out << std::endl;
      ctx.err << produced.size() << " tokens in " << secs << " s (" << (produced.size() / std::max(secs, 1e-9))
              << " tokens/s, " << ctx.backend().name() << ")\n";
    }
  });
}

}  // namespace qs::cli
