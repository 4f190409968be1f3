#pragma once
// The engine: one open model and what runs it — its graph, the compute backend, its tokenizer
// and one Runtime. The runtime is built by the first job that runs the model and re-planned,
// never rebuilt, by the jobs after it (the GUI's analysis jobs and the labs alike, so a lab's
// experiment runs on the same backend and kernels as the Run tab).
//
// Thread rule (RenderDoc's ReplayManager is the model): the identity getters (model, graph,
// backend kind, runtimeBuilds) may be read from any thread; everything that runs the model —
// runtime(), tokenizer(), Use — only from the one job thread (app/gui/job_runner.h has one
// worker). Every job leaves the runtime as it found it (the analysis jobs restore plans, taps and
// weights however they end; the labs hold RuntimeWeightsGuard); one that leaves by an exception
// marks it for a rebuild through Use.
#include <atomic>
#include <memory>

#include "core/model/model_file.h"
#include "core/model/model_graph.h"
#include "core/runtime/runtime.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/progress.h"
#include "kernels/backend/backend.h"

namespace qs {

class Engine {
 public:
  // `graph`: the model's graph (buildModelGraph), passed in by a caller that already built it.
  Engine(std::shared_ptr<const ModelFile> model, ModelGraph graph, std::shared_ptr<Backend> backend);
  Engine(std::shared_ptr<const ModelFile> model, std::shared_ptr<Backend> backend);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // ---- any thread ---------------------------------------------------------------------------
  const ModelFile& model() const { return *model_; }
  const std::shared_ptr<const ModelFile>& modelPtr() const { return model_; }
  const ModelGraph& graph() const { return graph_; }
  Backend& backend() const { return *backend_; }
  const std::shared_ptr<Backend>& backendPtr() const { return backend_; }
  // False for a weights-only graph (an architecture the runtime cannot run).
  bool canRun() const { return graph_.family != GraphFamily::WeightsOnly; }
  // How many times a Runtime of this model was built (1 for any number of jobs, unless a job
  // failed inside it).
  int runtimeBuilds() const { return builds_.load(); }

  // ---- job thread only ------------------------------------------------------------------------
  // The runtime, built on first use (or after a failed job), its KV cache reset. Throws BadInput
  // naming the model for a weights-only graph, Cancelled when ctx is cancelled while building.
  Runtime& runtime(const JobContext& ctx);
  bool runtimeBuilt() const { return runtime_ && !broken_; }  // runtime() will not build one
  // The model's tokenizer (findTokenizer: its own, or one beside it); BadInput naming the model
  // when there is none.
  const Tokenizer& tokenizer();
  bool hasTokenizer();

  // Held by a job while it uses the runtime: leaving by an exception marks the runtime for a
  // rebuild (a device error can leave it unusable; a cancelled job restores it, but rebuilding is
  // the safe side).
  class Use {
   public:
    explicit Use(Engine& e) : engine_(e), uncaught_(std::uncaught_exceptions()) {}
    ~Use() {
      if (std::uncaught_exceptions() > uncaught_) engine_.broken_ = true;
    }
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;

   private:
    Engine& engine_;
    int uncaught_;
  };

 private:
  // Declared before the runtime: destroyed after it.
  std::shared_ptr<const ModelFile> model_;
  ModelGraph graph_;
  std::shared_ptr<Backend> backend_;
  std::unique_ptr<Tokenizer> tokenizer_;
  bool tokenizerSearched_ = false;
  std::unique_ptr<Runtime> runtime_;
  bool broken_ = false;
  std::atomic<int> builds_{0};
};

}  // namespace qs
