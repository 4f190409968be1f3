#include "app/labs/lab_env.h"

#include <fstream>
#include <sstream>

#include "core/io/regular_file.h"
#include "core/util/datasets.h"
#include "kernels/common/error.h"
#include "kernels/ops/cpu_transformer_ops.h"

namespace qs::labs {

LabEnv::LabEnv(std::shared_ptr<const ModelFile> model) : model_(std::move(model)) {
  if (!model_) throw Error(ErrorKind::BadInput, "no model loaded", "labs");
}

LabEnv::~LabEnv() = default;

std::vector<std::string> LabEnv::linearNames() const {
  std::vector<std::string> names;
  for (const LinearLayer* l : model_->graph().allLinears())
    if (l->outFeatures > 0 && l->inFeatures > 0) names.push_back(l->weightName);
  return names;
}

std::vector<std::string> LabEnv::linearNamesDivisible(int64_t group) const {
  std::vector<std::string> names;
  for (const LinearLayer* l : model_->graph().allLinears())
    if (l->outFeatures > 0 && l->inFeatures > 0 && l->inFeatures % group == 0)
      names.push_back(l->weightName);
  return names;
}

std::vector<float> LabEnv::weight(const std::string& name, int64_t& rows, int64_t& cols) const {
  const TensorInfo* t = model_->findTensor(name);
  if (!t) throw Error(ErrorKind::BadInput, "no such tensor in the model", name);
  const LinearLayer* layer = nullptr;
  for (const LinearLayer* l : model_->graph().allLinears())
    if (l->weightName == name) layer = l;
  std::vector<float> w = model_->tensorToFloat(*t);
  if (t->shape.size() == 2) {
    rows = t->shape[0];
    cols = t->shape[1];
  } else {
    rows = 1;
    cols = int64_t(w.size());
  }
  if (layer && layer->transposed) {  // stored [in, out]: analyse as [out, in]
    std::vector<float> tr(w.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) tr[size_t(c * rows + r)] = w[size_t(r * cols + c)];
    std::swap(rows, cols);
    w.swap(tr);
  }
  return w;
}

bool LabEnv::canRun() const {
  return model_->graph().family != GraphFamily::WeightsOnly;
}

void LabEnv::ensureRunnable(const JobContext& ctx) {
  if (runtime_) return;
  if (!canRun())
    throw Error(ErrorKind::BadInput,
                "this experiment runs the model, and the runtime cannot run a weights-only model",
                model_->path());
  ctx.progress(0.0, "loading the model for running");
  auto loaded = std::make_unique<LoadedModel>(loadModel(model_->path(), {}, true));
  ops_ = createCpuTransformerOps();
  runtime_ = std::make_unique<Runtime>(*loaded->file, loaded->graph, *ops_, RuntimeOptions{}, &ctx);
  loaded_ = std::move(loaded);
}

Runtime& LabEnv::runtime(const JobContext& ctx) {
  ensureRunnable(ctx);
  return *runtime_;
}

const Tokenizer& LabEnv::tokenizer(const JobContext& ctx) {
  ensureRunnable(ctx);
  return *loaded_->tokenizer;
}

Backend& LabEnv::backend() {
  if (!backend_) {
    try {
      backend_ = createBackend(BackendChoice::Auto);
    } catch (const std::exception&) {  // a broken GPU must not stop the labs: CPU it is
      backend_ = createCpuBackend();
    }
  }
  return *backend_;
}

std::vector<int32_t> LabEnv::textTokens(const std::string& file, int64_t maxTokens,
                                        int64_t skipChars, const JobContext& ctx) {
  const Tokenizer& tok = tokenizer(ctx);
  const std::string path = datasetsDir() + "/text/" + file;
  // A generous slice of characters is enough for maxTokens tokens (≥ 1 character per token).
  const size_t chars = size_t(std::max<int64_t>(maxTokens, 1) * 8);
  std::string text = readTextFile(path, uint64_t(std::max<int64_t>(skipChars, 0)) + chars);
  if (skipChars > 0 && size_t(skipChars) < text.size()) text = text.substr(size_t(skipChars));
  if (text.size() > chars) text = text.substr(0, chars);
  EncodeOptions opt;
  opt.addBos = tok.addsBosByDefault();
  std::vector<int32_t> ids = tok.encode(text, opt);
  const int64_t cap = std::min<int64_t>(maxTokens, runtime(ctx).maxSeq());
  if (int64_t(ids.size()) > cap) ids.resize(size_t(cap));
  return ids;
}

std::vector<float> LabEnv::logits(const std::vector<int32_t>& tokens, const JobContext& ctx) {
  Runtime& rt = runtime(ctx);
  rt.reset();
  std::vector<float> out;
  rt.forward(tokens, 0, out, true);
  return out;
}

}  // namespace qs::labs
