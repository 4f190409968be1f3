#pragma once
// What the experiments work on: the app's engine (core/engine/engine.h) — the loaded model, its
// tokenizer, the compute backend (CUDA when a device works, else the CPU reference) and the one
// Runtime the analysis jobs also use, so an experiment runs the same kernels as the Run tab. All
// lab jobs run on the one JobRunner worker thread, so the runtime is never used by two jobs at
// once; a job that replaces weights or sets formats undoes it before it returns
// (RuntimeWeightsGuard).
#include <memory>
#include <string>
#include <vector>

#include "core/engine/engine.h"
#include "core/model/model_file.h"
#include "core/runtime/runtime.h"
#include "kernels/backend/backend.h"

namespace qs::labs {

class LabEnv {
 public:
  explicit LabEnv(std::shared_ptr<Engine> engine);
  ~LabEnv();

  Engine& engine() const { return *engine_; }
  const ModelFile& model() const { return engine_->model(); }
  const std::shared_ptr<const ModelFile>& modelPtr() const { return engine_->modelPtr(); }
  // Every quantisable linear layer's weight name, execution order (the head last).
  std::vector<std::string> linearNames() const;
  // 2-D linear weights whose input width is a multiple of `group` (for grouped formats).
  std::vector<std::string> linearNamesDivisible(int64_t group) const;
  // The weight as float [out, in] (GPT-2 Conv1D turned around), with its shape.
  std::vector<float> weight(const std::string& name, int64_t& rows, int64_t& cols) const;

  // Worker thread only.
  bool canRun() const;  // the architecture is one the runtime runs
  Runtime& runtime(const JobContext& ctx);
  const Tokenizer& tokenizer(const JobContext& ctx);
  Backend& backend();
  // Tokens of a bundled text (datasets/text/<file>), at most `maxTokens`, BOS first when the
  // tokenizer has one.
  std::vector<int32_t> textTokens(const std::string& file, int64_t maxTokens, int64_t skipChars,
                                  const JobContext& ctx);
  // Runs `tokens` through the runtime from position 0 and returns the logits [T, vocab].
  std::vector<float> logits(const std::vector<int32_t>& tokens, const JobContext& ctx);

 private:
  std::shared_ptr<Engine> engine_;
};

// Puts the runtime back as the engine's other jobs expect it when it goes out of scope: every
// layer unquantized (applyPlan sets formats) with its loaded weight.
class RuntimeWeightsGuard {
 public:
  explicit RuntimeWeightsGuard(Runtime& rt) : rt_(rt) {}
  ~RuntimeWeightsGuard() {
    rt_.clearPlan();
    rt_.restoreAllWeights();
  }
  RuntimeWeightsGuard(const RuntimeWeightsGuard&) = delete;
  RuntimeWeightsGuard& operator=(const RuntimeWeightsGuard&) = delete;

 private:
  Runtime& rt_;
};

// Removes a tap when it goes out of scope.
class TapGuard {
 public:
  TapGuard(Runtime& rt, Tap tap) : rt_(rt), id_(rt.addTap(std::move(tap))) {}
  ~TapGuard() { rt_.removeTap(id_); }
  TapGuard(const TapGuard&) = delete;
  TapGuard& operator=(const TapGuard&) = delete;

 private:
  Runtime& rt_;
  int id_;
};

}  // namespace qs::labs
