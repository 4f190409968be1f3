#include "app/labs/lab_env.h"

#include <fstream>
#include <sstream>

#include "core/io/regular_file.h"
#include "core/util/datasets.h"
#include "kernels/common/error.h"

namespace qs::labs {

LabEnv::LabEnv(std::shared_ptr<Engine> engine) : engine_(std::move(engine)) {
  if (!engine_) throw Error(ErrorKind::BadInput, "no model loaded", "labs");
}

LabEnv::~LabEnv() = default;

std::vector<std::string> LabEnv::linearNames() const {
  std::vector<std::string> names;
  for (const LinearLayer* l : model().graph().allLinears())
    if (l->outFeatures > 0 && l->inFeatures > 0) names.push_back(l->weightName);
  return names;
}

std::vector<std::string> LabEnv::linearNamesDivisible(int64_t group) const {
  std::vector<std::string> names;
  for (const LinearLayer* l : model().graph().allLinears())
    if (l->outFeatures > 0 && l->inFeatures > 0 && l->inFeatures % group == 0)
      names.push_back(l->weightName);
  return names;
}

std::vector<float> LabEnv::weight(const std::string& name, int64_t& rows, int64_t& cols) const {
  const TensorInfo* t = model().findTensor(name);
  if (!t) throw Error(ErrorKind::BadInput, "no such tensor in the model", name);
  const LinearLayer* layer = nullptr;
  for (const LinearLayer* l : model().graph().allLinears())
    if (l->weightName == name) layer = l;
  std::vector<float> w = model().tensorToFloat(*t);
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

bool LabEnv::canRun() const { return engine_->canRun(); }

Runtime& LabEnv::runtime(const JobContext& ctx) {
  if (!engine_->canRun())
    throw Error(ErrorKind::BadInput,
                "this experiment runs the model, and the runtime cannot run a weights-only model",
                model().path());
  if (!engine_->hasTokenizer())
    throw Error(ErrorKind::BadInput, "this experiment runs the model on text, and no tokenizer was found for it",
                model().path(), "tokenizer");
  if (!engine_->runtimeBuilt()) ctx.progress(0.0, "loading the model for running");
  return engine_->runtime(ctx);
}

const Tokenizer& LabEnv::tokenizer(const JobContext& ctx) {
  runtime(ctx);
  return engine_->tokenizer();
}

Backend& LabEnv::backend() { return engine_->backend(); }

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
