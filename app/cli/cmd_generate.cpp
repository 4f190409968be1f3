// quantscope-cli generate MODEL [--tokenizer T] [--prompt TEXT] [--tokens N] [--json]
//                               [--plan PLAN [--fake-quant] [--allow-other-model]]
//                               [--temperature T --top-k K --top-p P --seed S]
//                               [--chat [--system TEXT] [--chat-template FILE]] [--plain-special]
// Generation on the chosen backend's runtime (--backend): greedy by default (deterministic),
// sampled with --temperature > 0 (deterministic for a given --seed). With --plan the linear
// layers run the plan's formats (through the GEMM kernels, or fake-quantized with --fake-quant
// or where no kernel exists) and the tokens/s are those of the quantized model.
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/run_support.h"
#include "core/runtime/evaluate.h"
#include "core/tokenizer/chat_template.h"
#include "kernels/common/error.h"

namespace qs::cli {

void registerGenerate(CLI::App& app, CliContext& ctx) {
  struct Args {
    std::string model, tokenizer, prompt, plan, system, chatTemplate;
    int tokens = 128;
    bool json = false;
    bool plainSpecial = false;
    bool fakeQuant = false, allowOtherModel = false;
    bool chat = false;
    SamplingOptions sampling;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("generate", "Generate text from a prompt (greedy, or sampled with --temperature)");
  cmd->add_option("MODEL", a->model, "Model file")->required();
  cmd->add_option("--tokenizer", a->tokenizer, "Tokenizer file (default: the model's own, or one next to it)");
  cmd->add_option("--prompt", a->prompt, "Prompt text (default: empty, i.e. BOS only); with --chat the user message");
  cmd->add_option("--tokens", a->tokens, "New tokens to generate")->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--json", a->json, "Print JSON on stdout");
  cmd->add_flag("--plain-special", a->plainSpecial,
                "Treat special tokens written in the prompt (<bos>, <|im_start|>) as plain text");
  auto* plan = cmd->add_option("--plan", a->plan,
                               "Run a plan: a Quantscope plan (quantscope-cli plan …) or a JSON object tensor name → "
                               "format, \"*\" for the rest");
  cmd->add_flag("--fake-quant", a->fakeQuant, "With --plan: fake-quantize every layer instead of the GEMM kernels")
      ->needs(plan);
  cmd->add_flag("--allow-other-model", a->allowOtherModel, "Accept a plan made for a model with another hash")
      ->needs(plan);
  cmd->add_option("--temperature", a->sampling.temperature, "Sampling temperature (0 = greedy, the default)");
  cmd->add_option("--top-k", a->sampling.topK, "Sample from the k most likely tokens (0 = all)");
  cmd->add_option("--top-p", a->sampling.topP, "Sample from the smallest set of tokens whose probability reaches p");
  cmd->add_option("--seed", a->sampling.seed, "Seed of the sampler (same seed, same tokens)");
  auto* chat = cmd->add_flag("--chat", a->chat,
                             "Wrap the prompt as a user message in the model's chat template (Jinja, via minja)");
  cmd->add_option("--system", a->system, "With --chat: a system message before the user's")->needs(chat);
  cmd->add_option("--chat-template", a->chatTemplate,
                  "With --chat: a template file (.jinja, or a tokenizer_config.json) instead of the model's")
      ->needs(chat);
  cmd->callback([&ctx, a] {
    validateSampling(a->sampling);
    ctx.fieldFiles = {{"vocabulary", a->model}, {"context_length", a->model}};
    TerminalProgress progress;
    RunnableModel m = loadRunnable(ctx.backend(), a->model, a->tokenizer, true, progress);
    const Tokenizer& tok = *m.model.tokenizer;
    Runtime& rt = *m.runtime;
    // The plan: its formats on the runtime's linear layers, through the kernels or fake-quant.
    std::string planKernels;
    if (!a->plan.empty()) {
      const LayerQuants lp =
          planFormatsFromFile(a->plan, m.model, rt.linears().size(), a->allowOtherModel, "generate", ctx.err);
      rt.setPlan(lp, a->fakeQuant ? LinearMode::FakeQuant : LinearMode::Kernel);
      std::map<std::string, int> kernels;  // what runs the layers for one token
      for (int i = 0; i < int(rt.linears().size()); ++i) ++kernels[rt.linearKernel(i, 1)];
      for (const auto& [k, n] : kernels) planKernels += (planKernels.empty() ? "" : ", ") + std::to_string(n) + "× " + k;
    }
    // The prompt: BOS as the tokenizer's files say (add_bos_token); special tokens written in
    // it are matched, as llama.cpp's tools do, unless --plain-special. With --chat the
    // template's text (its special tokens matched, BOS only where the template writes it, as
    // transformers' apply_chat_template tokenizes).
    std::string promptText = a->prompt;
    EncodeOptions eo;
    eo.addBos = tok.addsBosByDefault();
    eo.parseSpecial = !a->plainSpecial;
    if (a->chat) {
      const ChatTemplate t = a->chatTemplate.empty() ? findChatTemplate(*m.model.file, m.model.tokenizerPath)
                                                     : readChatTemplate(a->chatTemplate);
      if (t.source.empty())
        throw Error(ErrorKind::BadInput, "the model has no chat template (give one with --chat-template)", a->model,
                    "chat_template");
      std::vector<ChatMessage> msgs;
      if (!a->system.empty()) msgs.push_back({"system", a->system});
      msgs.push_back({"user", a->prompt});
      auto tokenString = [&](int32_t id) { return id >= 0 ? tok.vocab().tokens[size_t(id)] : std::string(); };
      promptText = applyChatTemplate(t, msgs, true, tokenString(tok.bos()), tokenString(tok.eos()));
      eo.addBos = false;
      eo.parseSpecial = true;
    }
    std::vector<int32_t> prompt = tok.encode(promptText, eo);
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
    std::string text;
    int32_t prev = prompt.back();
    std::vector<int32_t> produced;
    if (!a->json) ctx.out << (a->chat ? std::string() : a->prompt) << std::flush;
    const auto t0 = std::chrono::steady_clock::now();
    bool stopped = false;
    GenerateStats stats;
    generate(rt, prompt, a->tokens, std::span<const int32_t>(stops), a->sampling, [&](int32_t id) {
      if (stopped || id == stop2) {
        stopped = true;
        return;
      }
      produced.push_back(id);
      const std::string piece = tok.decodeNext(prev, id);
      prev = id;
      text += piece;
      if (!a->json) ctx.out << piece << std::flush;
    }, &stats);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double decodeRate = stats.decodeSeconds > 0 ? double(stats.decodeSteps) / stats.decodeSeconds : 0.0;
    const char* backend = ctx.backend().kind() == BackendKind::Cuda ? "cuda" : "cpu";
    if (a->json) {
      nlohmann::ordered_json j;
      j["model"] = a->model;
      j["tokenizer"] = m.model.tokenizerPath;
      j["backend"] = backend;
      j["plan"] = a->plan.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(a->plan);
      if (!a->plan.empty()) {
        j["linear_mode"] = a->fakeQuant ? "fake-quant" : "kernel";
        j["kernels"] = planKernels;
      }
      j["sampling"] = a->sampling.greedy()
                          ? nlohmann::ordered_json{{"method", "greedy"}}
                          : nlohmann::ordered_json{{"method", "sample"},
                                                   {"temperature", a->sampling.temperature},
                                                   {"top_k", a->sampling.topK},
                                                   {"top_p", a->sampling.topP},
                                                   {"seed", a->sampling.seed}};
      j["prompt"] = a->prompt;
      if (a->chat) j["chat_prompt"] = promptText;
      j["prompt_tokens"] = prompt;
      j["tokens"] = produced;
      // `text` is the concatenation of the tokens' bytes; a token may end inside a UTF-8
      // character (byte-fallback pieces, or the last token): bytes that are not valid UTF-8
      // become U+FFFD instead of a serialisation error. `tokens` keeps the exact ids.
      j["text"] = text;
      j["seconds"] = secs;
      j["prefill_seconds"] = stats.prefillSeconds;
      j["decode_tokens_per_second"] = decodeRate;
      ctx.out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    } else {
      ctx.out << std::endl;
      ctx.err << produced.size() << " tokens in " << secs << " s (" << (produced.size() / std::max(secs, 1e-9))
              << " tokens/s; decode " << decodeRate << " tokens/s, prompt of " << prompt.size() << " tokens in "
              << stats.prefillSeconds << " s; " << ctx.backend().name() << ")\n";
      if (!a->plan.empty())
        ctx.err << "plan " << a->plan << " (" << (a->fakeQuant ? "fake-quant" : "kernels") << "): " << planKernels
                << "\n";
    }
  });
}

}  // namespace qs::cli
