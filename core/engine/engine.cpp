#include "core/engine/engine.h"

#include "core/runtime/loaded_model.h"
#include "kernels/common/error.h"

namespace qs {

Engine::Engine(std::shared_ptr<const ModelFile> model, ModelGraph graph, std::shared_ptr<Backend> backend)
    : model_(std::move(model)), graph_(std::move(graph)), backend_(std::move(backend)) {
  if (!model_) throw Error(ErrorKind::BadInput, "no model loaded", "engine");
  if (!backend_) throw Error(ErrorKind::BadInput, "no compute backend", model_->path(), "backend");
}

Engine::Engine(std::shared_ptr<const ModelFile> model, std::shared_ptr<Backend> backend)
    : Engine(model, model ? buildModelGraph(*model) : ModelGraph{}, std::move(backend)) {}

Engine::~Engine() = default;

Runtime& Engine::runtime(const JobContext& ctx) {
  if (!canRun())
    throw Error(ErrorKind::BadInput,
                "this model opens as weights only: its architecture cannot run, so work that runs it is "
                "not available (weight analysis is)",
                model_->path());
  if (!runtime_ || broken_) {
    runtime_.reset();
    broken_ = false;
    runtime_ = std::make_unique<Runtime>(*model_, graph_, *backend_, RuntimeOptions{}, &ctx);
    ++builds_;
  }
  runtime_->reset();
  return *runtime_;
}

bool Engine::hasTokenizer() {
  if (!tokenizerSearched_) {
    tokenizer_ = findTokenizer(*model_, {});
    tokenizerSearched_ = true;
  }
  return tokenizer_ != nullptr;
}

const Tokenizer& Engine::tokenizer() {
  if (!hasTokenizer())
    throw Error(ErrorKind::BadInput, "no tokenizer found for the model (none inside it or beside it)", model_->path(),
                "tokenizer");
  return *tokenizer_;
}

}  // namespace qs
