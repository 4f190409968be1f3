#pragma once
// What the experiments work on: the loaded model, and — built lazily on the worker thread, then
// kept — a runnable copy (tokenizer + Runtime on the CPU transformer ops) and the compute backend
// (CUDA when a device works, else the CPU reference). All lab jobs run on the one JobRunner
// worker thread, so the runtime is never used by two jobs at once; a job that replaces weights
// restores them before it returns (RuntimeWeightsGuard).
#include <memory>
#include <string>
#include <vector>

#include "core/model/model_file.h"
#include "core/runtime/loaded_model.h"
#include "core/runtime/runtime.h"
#include "kernels/backend/backend.h"
#include "kernels/ops/transformer_ops.h"

namespace qs::labs {

class LabEnv {
 public:
  explicit LabEnv(std::shared_ptr<const ModelFile> model);
  ~LabEnv();

  const ModelFile& model() const { return *model_; }
  std::shared_ptr<const ModelFile> modelPtr() const { return model_; }
  // Every quantisable linear layer's weight name, execution order (the head last).
  std::vector<std::string> linearNames() const;
  // 2-D linear weights whose input width is a multiple of `group` (for grouped formats).
  std::vector<std::string> linearNamesDivisible(int64_t group) const;
  // The weight as float [out, in] (GPT-2 Conv1D turned around), with its shape.
  std::vector<float> weight(const std::string& name, int64_t& rows, int64_t& cols) const;

  // Worker thread only.
  bool canRun() const;  // the architecture is one the runtime runs and a tokenizer was found
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
  void ensureRunnable(const JobContext& ctx);
  std::shared_ptr<const ModelFile> model_;
  std::unique_ptr<LoadedModel> loaded_;
  std::unique_ptr<TransformerOps> ops_;
  std::unique_ptr<Runtime> runtime_;
  std::unique_ptr<Backend> backend_;
};

// Restores every replaced weight of the runtime when it goes out of scope.
class RuntimeWeightsGuard {
 public:
  explicit RuntimeWeightsGuard(Runtime& rt) : rt_(rt) {}
  ~RuntimeWeightsGuard() { rt_.restoreAllWeights(); }
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
