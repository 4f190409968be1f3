#include "app/gui/export_dialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPointer>
#include <QPushButton>
#include <QTextBrowser>
#include <QVBoxLayout>

#include <optional>

#include "app/gui/job_runner.h"
#include "core/analysis/calibrate.h"
#include "core/io/atomic_file.h"
#include "core/export/model_export.h"
#include "core/model/model_file.h"
#include "core/model/model_graph.h"
#include "core/plan/plan.h"
#include "core/plan/plan_export.h"
#include "core/rounding/quantize_model.h"
#include "kernels/backend/backend.h"
#include "core/runtime/loaded_model.h"
#include "kernels/common/error.h"

namespace qs::app {

namespace {
const char* kTargets[] = {"gguf", "safetensors", "hdf5", "json", "llama-quantize", "llm-compressor", "gptqmodel"};
const char* kSuffix[] = {".gguf", "", ".h5", ".json", ".txt", ".yaml", ".json"};
}  // namespace

struct ExportDialog::State {
  std::shared_ptr<const ModelFile> model;
  ModelGraph graph;
  Plan plan;
  ResolvedPlan resolved;
  std::string planProblem;  // non-empty: the plan cannot be exported
  std::shared_ptr<Tokenizer> tokenizer;
  std::shared_ptr<CalibrationStats> calibration;  // the session's calibration, as export takes it
  QString modelPath;
  std::shared_ptr<Backend> roundingBackend;  // GPTQ / AWQ / SmoothQuant layers (setRounding)
  std::function<std::vector<int32_t>(int32_t*, int64_t)> roundingTokens;
};

void ExportDialog::setRounding(std::shared_ptr<Backend> backend,
                               std::function<std::vector<int32_t>(int32_t* bos, int64_t maxSeq)> calibrationTokens) {
  s_->roundingBackend = std::move(backend);
  s_->roundingTokens = std::move(calibrationTokens);
}

ExportDialog::ExportDialog(JobRunner* jobs, std::shared_ptr<const ModelFile> model, const ModelGraph& graph,
                           const Plan& plan, const CalibrationResult* calibration, const QString& modelPath,
                           QWidget* parent)
    : QDialog(parent), s_(std::make_unique<State>()), jobs_(jobs) {
  setObjectName(QStringLiteral("exportDialog"));
  setWindowTitle(tr("Export"));
  s_->model = std::move(model);
  s_->graph = graph;
  s_->plan = plan;
  s_->modelPath = modelPath;
  try {
    s_->resolved = resolvePlanStrict(plan, s_->graph);
  } catch (const Error& e) {
    s_->planProblem = e.what();
  }
  try {
    s_->tokenizer = std::shared_ptr<Tokenizer>(findTokenizer(*s_->model, {}).release());
  } catch (const Error&) {
  }
  if (calibration) s_->calibration = std::make_shared<CalibrationStats>(exportCalibrationStats(*calibration, s_->graph));

  auto* form = new QFormLayout;
  target_ = new QComboBox;
  target_->setObjectName(QStringLiteral("exportTarget"));
  target_->addItem(tr("Weights: GGUF (llama.cpp)"), QStringLiteral("gguf"));
  target_->addItem(tr("Weights: safetensors, compressed-tensors (vLLM)"), QStringLiteral("safetensors"));
  target_->addItem(tr("Weights: HDF5 archive"), QStringLiteral("hdf5"));
  target_->addItem(tr("Plan: JSON"), QStringLiteral("json"));
  target_->addItem(tr("Plan: llama-quantize arguments"), QStringLiteral("llama-quantize"));
  target_->addItem(tr("Plan: llm-compressor recipe"), QStringLiteral("llm-compressor"));
  target_->addItem(tr("Plan: GPTQModel dynamic"), QStringLiteral("gptqmodel"));
  output_ = new QLineEdit;
  output_->setObjectName(QStringLiteral("exportOutput"));
  auto* browse = new QPushButton(tr("Browse…"));
  auto* row = new QHBoxLayout;
  row->addWidget(output_, 1);
  row->addWidget(browse);
  nearest_ = new QCheckBox(tr("Map what the target cannot express to its nearest type (else refuse)"));
  nearest_->setObjectName(QStringLiteral("exportNearest"));
  force_ = new QCheckBox(tr("Overwrite an existing file"));
  force_->setObjectName(QStringLiteral("exportForce"));
  form->addRow(tr("Export"), target_);
  form->addRow(tr("To"), row);
  form->addRow(QString(), nearest_);
  form->addRow(QString(), force_);
  preview_ = new QTextBrowser;
  preview_->setObjectName(QStringLiteral("exportPreview"));
  preview_->setMinimumSize(640, 260);
  status_ = new QLabel;
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close);
  exportButton_ = buttons->addButton(tr("Export"), QDialogButtonBox::AcceptRole);
  exportButton_->setObjectName(QStringLiteral("exportButton"));
  auto* outer = new QVBoxLayout(this);
  outer->addLayout(form);
  outer->addWidget(new QLabel(tr("What will be written (warnings and refusals first):")));
  outer->addWidget(preview_, 1);
  outer->addWidget(status_);
  outer->addWidget(buttons);

  const QString base = QFileInfo(modelPath).absolutePath() + QLatin1Char('/') + QFileInfo(modelPath).completeBaseName() +
                       QStringLiteral("-") + QString::fromStdString(plan.name.empty() ? "plan" : plan.name);
  auto suggest = [this, base] {
    const int i = target_->currentIndex();
    output_->setText(base + QString::fromLatin1(kSuffix[i]));
  };
  connect(target_, &QComboBox::currentIndexChanged, this, [this, suggest] {
    suggest();
    refreshPreview();
  });
  connect(output_, &QLineEdit::textChanged, this, [this] { refreshPreview(); });
  connect(nearest_, &QCheckBox::toggled, this, [this] { refreshPreview(); });
  connect(force_, &QCheckBox::toggled, this, [this] { refreshPreview(); });
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString p = isWeights() && target_->currentData().toString() == QLatin1String("safetensors")
                          ? QFileDialog::getExistingDirectory(this, tr("Output folder"))
                          : QFileDialog::getSaveFileName(this, tr("Export to"), output_->text());
    if (!p.isEmpty()) output_->setText(p);
  });
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  connect(exportButton_, &QPushButton::clicked, this, [this] { exportNow(); });
  suggest();
  refreshPreview();
}

ExportDialog::~ExportDialog() = default;

bool ExportDialog::isWeights() const { return target_->currentIndex() < 3; }

void ExportDialog::setTarget(const QString& name) { target_->setCurrentIndex(target_->findData(name)); }
void ExportDialog::setOutput(const QString& path) { output_->setText(path); }
void ExportDialog::setNearest(bool n) { nearest_->setChecked(n); }
void ExportDialog::setForce(bool f) { force_->setChecked(f); }
QString ExportDialog::previewText() const { return preview_->toPlainText(); }

void ExportDialog::refreshPreview() {
  QString html;
  canWrite_ = false;
  auto list = [&html](const QString& title, const std::vector<std::string>& items, const char* colour) {
    if (items.empty()) return;
    html += QStringLiteral("<p><b style='color:%1'>%2 (%3)</b></p><ul>").arg(QLatin1String(colour), title).arg(items.size());
    for (const auto& i : items) html += QStringLiteral("<li>%1</li>").arg(QString::fromStdString(i).toHtmlEscaped());
    html += QStringLiteral("</ul>");
  };
  if (!s_->planProblem.empty()) {
    list(tr("Refused: the plan is not valid for this model"), {s_->planProblem}, "#b00020");
    preview_->setHtml(html);
    exportButton_->setEnabled(false);
    return;
  }
  const QString target = target_->currentData().toString();
  const std::string out = output_->text().toStdString();
  try {
    if (isWeights()) {
      ModelExportOptions o;
      o.format = *modelExportFormatFromName(target.toStdString());
      o.inexpressible = nearest_->isChecked() ? Inexpressible::Nearest : Inexpressible::Refuse;
      o.force = force_->isChecked();
      o.calibration = s_->calibration.get();
      const ExportSource src{*s_->model, s_->graph, s_->tokenizer.get(), s_->plan, s_->resolved};
      const ExportPreview p = previewModelExport(src, out, o);
      list(tr("Refusals"), p.refusals, "#b00020");
      list(tr("Warnings"), p.warnings, "#b06000");
      html += QStringLiteral("<p><b>%1</b> — %2 tensors, about %3 MiB of tensor data</p><ul>")
                  .arg(tr("Files"))
                  .arg(p.tensors.size())
                  .arg(double(p.estimatedBytes) / (1 << 20), 0, 'f', 2);
      for (const auto& f : p.files) html += QStringLiteral("<li>%1</li>").arg(QString::fromStdString(f).toHtmlEscaped());
      // The target's tensor name beside the layer's one name (the Plan tab's, the model tree's).
      html += QStringLiteral("</ul><table cellpadding='2'><tr><th align='left'>layer</th><th align='left'>tensor</th>"
                             "<th align='left'>stored as</th><th align='left'>note</th></tr>");
      for (const auto& t : p.tensors)
        if (t.planLayer >= 0 && size_t(t.planLayer) < s_->resolved.layers.size())
          html += QStringLiteral("<tr><td>%1</td><td>%2</td><td>%3</td><td>%4</td></tr>")
                      .arg(QString::fromStdString(s_->resolved.layers[size_t(t.planLayer)].name).toHtmlEscaped(),
                           QString::fromStdString(t.outputName).toHtmlEscaped(),
                           QString::fromStdString(t.storage).toHtmlEscaped(),
                           QString::fromStdString(t.note).toHtmlEscaped());
      html += QStringLiteral("</table>");
      canWrite_ = p.canWrite();
    } else {
      ExportOptions o;
      o.inexpressible = nearest_->isChecked() ? Inexpressible::Nearest : Inexpressible::Refuse;
      const ExportResult r = exportPlan(s_->plan, s_->resolved, s_->graph, *exportTargetFromName(target.toStdString()), o);
      list(tr("Warnings"), r.warnings, "#b06000");
      html += QStringLiteral("<pre>%1</pre>").arg(QString::fromStdString(r.text.substr(0, 20000)).toHtmlEscaped());
      canWrite_ = !out.empty() && (force_->isChecked() || !QFileInfo::exists(output_->text()));
      if (!canWrite_ && !out.empty())
        list(tr("Refusals"), {out + ": exists (tick Overwrite to replace it)"}, "#b00020");
    }
  } catch (const Error& e) {
    list(tr("Refused"), {e.what()}, "#b00020");
  }
  preview_->setHtml(html);
  exportButton_->setEnabled(canWrite_);
}

bool ExportDialog::exportNow() {
  refreshPreview();
  if (!canWrite_) {
    status_->setText(tr("Nothing written: see the refusals above."));
    return false;
  }
  const QString target = target_->currentData().toString();
  const QString out = output_->text();
  if (!isWeights()) {
    try {
      ExportOptions o;
      o.inexpressible = nearest_->isChecked() ? Inexpressible::Nearest : Inexpressible::Refuse;
      const ExportResult r = exportPlan(s_->plan, s_->resolved, s_->graph, *exportTargetFromName(target.toStdString()), o);
      writeFileAtomically(out.toStdString(), r.text);  // temporary file, then rename
      status_->setText(tr("Wrote %1").arg(out));
      emit exported(out);
      return true;
    } catch (const Error& e) {
      status_->setText(QString::fromStdString(e.what()));
      emit failed(QString::fromStdString(e.what()));
      return false;
    }
  }
  ModelExportOptions o;
  o.format = *modelExportFormatFromName(target.toStdString());
  o.inexpressible = nearest_->isChecked() ? Inexpressible::Nearest : Inexpressible::Refuse;
  o.force = force_->isChecked();
  auto calib = s_->calibration;
  auto model = s_->model;
  auto graph = std::make_shared<ModelGraph>(s_->graph);
  auto plan = std::make_shared<Plan>(s_->plan);
  auto resolved = std::make_shared<ResolvedPlan>(s_->resolved);
  auto tok = s_->tokenizer;
  auto roundingBackend = s_->roundingBackend;
  auto roundingTokens = s_->roundingTokens;
  QPointer<ExportDialog> self(this);
  // The job owns copies of everything it reads: closing the dialog does not stop it.
  const QString title = tr("Exporting %1").arg(QFileInfo(out).fileName());
  connect(jobs_, &JobRunner::jobFailed, this, [this, title](quint64, const QString& t, const QString& message) {
    if (t != title) return;
    status_->setText(message);
    exportButton_->setEnabled(true);
    emit failed(message);
  });
  status_->setText(tr("Exporting…"));
  exportButton_->setEnabled(false);
  jobs_->submit(QStringLiteral("export"), title,
                [=](const JobContext& ctx) -> std::function<void()> {
                  ModelExportOptions opt = o;
                  opt.calibration = calib.get();
                  // GPTQ / AWQ / SmoothQuant: round on the calibration tokens first, then write that.
                  std::optional<QuantizeReport> rounding;
                  if (needsRounding(*resolved)) {
                    if (!roundingBackend || !roundingTokens)
                      throw Error(ErrorKind::BadInput, "the plan rounds layers with GPTQ, AWQ or SmoothQuant and no "
                                                       "calibration text is set (Sensitivity tab)", opt.planSource, "method");
                    Runtime rt(*model, *graph, *roundingBackend, {}, &ctx);
                    int32_t bos = -1;
                    ctx.progress(0, "tokenizing the calibration text");
                    const std::vector<int32_t> ids = roundingTokens(&bos, rt.maxSeq());
                    rounding = quantizeResolvedPlan(rt, *roundingBackend, *resolved, ids, bos, &ctx);
                  }
                  const ExportSource src{*model, *graph, tok.get(), *plan, *resolved,
                                         rounding ? &rounding->rounded : nullptr};
                  const ModelExportResult r = exportModel(src, out.toStdString(), opt, &ctx);
                  const uint64_t bytes = r.bytes;
                  return [self, out, bytes] {
                    if (!self) return;
                    self->status_->setText(tr("Wrote %1 (%2 MiB)").arg(out).arg(double(bytes) / (1 << 20), 0, 'f', 2));
                    self->exportButton_->setEnabled(true);
                    emit self->exported(out);
                  };
                });
  return true;
}

}  // namespace qs::app
