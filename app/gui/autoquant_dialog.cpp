#include "app/gui/autoquant_dialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDateTime>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QFutureWatcher>
#include <QGridLayout>
#include <QGroupBox>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QPointer>
#include <QProgressBar>
#include <QPushButton>
#include <QScreen>
#include <QSignalBlocker>
#include <QSlider>
#include <QSpinBox>
#include <QTableWidget>
#include <QVBoxLayout>
#include <QtConcurrent>
#include <algorithm>
#include <chrono>
#include <cmath>

#include "app/gui/job_runner.h"
#include "core/engine/engine.h"
#include "kernels/backend/backend.h"
#include "core/io/atomic_file.h"
#include "core/model/model_file.h"
#include "core/runtime/runtime.h"
#include "core/tokenizer/tokenizer.h"
#include "kernels/common/error.h"
#include "kernels/ggml/ggml_types.h"

namespace qs::app {

namespace {
const QString kTag = QStringLiteral("autoquant");
constexpr int kSliderSteps = 2000;     // slider positions between the smallest and the largest file
constexpr double kDefaultBpw = 4.85;   // about llama.cpp's Q4_K_M on Llama-like models: a first target
constexpr int64_t kCheckWindows = 2;   // the CLI's --check-windows default

// The types the dialog offers, in the order of defaultAutoquantCandidates (the options' order
// breaks ties in the choice: the default set makes the same plan as the CLI), then the rest of
// what the writer takes.
const DType kOffered[] = {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q4_0, DType::Q4_1,
                          DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::F16,  DType::BF16, DType::F32};

QString typeName(DType t) { return QString::fromStdString(std::string(dtypeName(t))); }
QString mib(uint64_t bytes) { return QString::number(double(bytes) / (1 << 20), 'f', 2); }
QString grouped(uint64_t n) { return QLocale(QLocale::English).toString(qulonglong(n)); }

double bitsPerWeight(DType t) {
  const ggml::GgmlTypeTraits* tr = ggml::ggmlTraitsForDType(t);
  return tr ? 8.0 * double(tr->blockBytes) / double(tr->blockElems) : 0.0;
}

// A table cell shown as text and sorted by a number.
class NumberItem : public QTableWidgetItem {
 public:
  void set(const QString& text, double key) {
    setText(text);
    setData(Qt::UserRole + 1, key);
  }
  bool operator<(const QTableWidgetItem& other) const override {
    return data(Qt::UserRole + 1).toDouble() < other.data(Qt::UserRole + 1).toDouble();
  }
};

enum Column { kTensor, kShape, kType, kSize, kKl, kBasis, kColumns };
}  // namespace

AutoquantDialog::AutoquantDialog(JobRunner* jobs, std::shared_ptr<Engine> engine, const QString& modelPath,
                                 const QString& calibrationText, QWidget* parent)
    : QDialog(parent), jobs_(jobs), modelPath_(modelPath) {
  setObjectName(QStringLiteral("autoquantDialog"));
  setWindowTitle(tr("Autoquant to GGUF — %1").arg(QFileInfo(modelPath).fileName()));
  buildUi(calibrationText);
  // Only this dialog's job: its id is the one submitted last.
  connect(jobs_, &JobRunner::jobStarted, this, [this](quint64 id, const QString&) {
    if (id != job_) return;
    clock_.start();
    progress_->setFormat(tr("started"));
  });
  connect(jobs_, &JobRunner::jobProgress, this, [this](quint64 id, double f, const QString& stage) {
    if (id != job_) return;
    progress_->setValue(int(std::lround(std::clamp(f, 0.0, 1.0) * 1000)));
    progress_->setFormat(clock_.format(f, stage));
  });
  connect(jobs_, &JobRunner::jobFinished, this, [this](quint64 id, const QString&) {
    if (id == job_) jobEnded();  // the result has been shown (its callable ends the job first)
  });
  connect(jobs_, &JobRunner::jobFailed, this, [this](quint64 id, const QString&, const QString& message) {
    if (id != job_) return;
    jobEnded();
    setStatus(message, true);
    emit failed(message);
  });
  connect(jobs_, &JobRunner::jobCancelled, this, [this](quint64 id, const QString&) {
    if (id != job_) return;
    const bool wasExport = jobIsExport_;
    jobEnded();
    if (!wasExport) {
      setStatus(plan_ ? tr("Measure cancelled: the previous measurement is kept.") : tr("Measure cancelled."));
    } else {
      // The job may have committed the file just before the cancel reached it: say what is on disk.
      const QFileInfo f(jobOutput_);
      const bool written = f.exists() && (jobOutputMtime_ < 0 || f.lastModified().toMSecsSinceEpoch() != jobOutputMtime_);
      setStatus(written ? tr("Cancelled after the file was complete: %1 was written.").arg(jobOutput_)
                        : jobOutputMtime_ < 0 ? tr("Export cancelled: nothing written.")
                                              : tr("Export cancelled: %1 is unchanged.").arg(jobOutput_));
    }
    emit cancelled();
  });
  setEngine(std::move(engine));
}

AutoquantDialog::~AutoquantDialog() {
  if (job_) jobs_->cancel(kTag);
}

void AutoquantDialog::buildUi(const QString& calibrationText) {
  reasonLabel_ = new QLabel;
  reasonLabel_->setObjectName(QStringLiteral("aqReason"));
  reasonLabel_->setWordWrap(true);
  reasonLabel_->setTextFormat(Qt::PlainText);
  reasonLabel_->setStyleSheet(QStringLiteral("QLabel { color: #b00020; font-weight: bold; }"));
  reasonLabel_->hide();

  // ---- 1. Measure ------------------------------------------------------------------------------
  measureBox_ = new QGroupBox(tr("1. Measure the model"));
  auto* mform = new QFormLayout(measureBox_);
  calibText_ = new QLineEdit(calibrationText);
  calibText_->setObjectName(QStringLiteral("aqCalibText"));
  calibText_->setToolTip(tr("UTF-8 text the model runs over: the importance of every input column and the "
                            "per-layer KL probes come from it. Keep it apart from the text you evaluate on."));
  auto* browseText = new QPushButton(tr("Browse…"));
  auto* textRow = new QHBoxLayout;
  textRow->addWidget(calibText_, 1);
  textRow->addWidget(browseText);
  mform->addRow(tr("Calibration text"), textRow);

  calibTokens_ = new QSpinBox;
  calibTokens_->setObjectName(QStringLiteral("aqCalibTokens"));
  calibTokens_->setRange(int(kAutoquantMinTokens), 1 << 20);
  calibTokens_->setSingleStep(512);
  calibTokens_->setValue(4096);
  calibTokens_->setSuffix(tr(" tokens"));
  calibTokens_->setToolTip(tr("Calibration tokens used at most (the CLI's --calib-tokens). Fewer measure faster "
                              "and less surely."));
  context_ = new QSpinBox;
  context_->setObjectName(QStringLiteral("aqContext"));
  context_->setRange(16, 1 << 16);
  context_->setValue(512);
  context_->setSuffix(tr(" tokens"));
  context_->setToolTip(tr("Calibration window length, BOS included (--ctx); the check pass uses windows of it too"));
  method_ = new QComboBox;
  method_->setObjectName(QStringLiteral("aqMethod"));
  method_->addItem(tr("imatrix (importance-weighted)"), QStringLiteral("imatrix"));
  method_->addItem(tr("rtn (ggml's reference rounding)"), QStringLiteral("rtn"));
  method_->addItem(tr("gptq (GPTQ on the chosen types' blocks)"), QStringLiteral("gptq"));
  method_->setToolTip(tr("How each type rounds: with the calibration importance (as llama-quantize --imatrix), "
                         "ggml's plain reference, or GPTQ's error feedback on the blocks the imatrix search scales "
                         "(at the export: one more pass over the calibration tokens; --method gptq)"));
  auto* settingsRow = new QHBoxLayout;
  settingsRow->addWidget(calibTokens_);
  settingsRow->addSpacing(12);
  settingsRow->addWidget(new QLabel(tr("Window")));
  settingsRow->addWidget(context_);
  settingsRow->addSpacing(12);
  settingsRow->addWidget(new QLabel(tr("Rounding")));
  settingsRow->addWidget(method_);
  settingsRow->addStretch(1);
  mform->addRow(tr("Calibration"), settingsRow);

  auto* typesGrid = new QGridLayout;
  typesGrid->setHorizontalSpacing(14);
  const std::vector<DType> defaults = defaultAutoquantCandidates();
  int column = 0, row = 0;
  for (DType t : kOffered) {
    auto* box = new QCheckBox(typeName(t));
    box->setObjectName(QStringLiteral("aqType_") + typeName(t));
    box->setChecked(std::find(defaults.begin(), defaults.end(), t) != defaults.end());
    const ggml::GgmlTypeTraits* traits = ggml::ggmlTraitsForDType(t);
    box->setToolTip(tr("%1 bits per weight; rows must be a multiple of %2 values (tensors whose rows are not "
                       "cannot take it)")
                        .arg(bitsPerWeight(t), 0, 'f', 4)
                        .arg(traits ? qulonglong(traits->blockElems) : 1ull));
    typeBoxes_.emplace_back(t, box);
    // Rows: the K-quants, the legacy block types, the floats.
    if (t == DType::Q4_0 || t == DType::F16) ++row, column = 0;
    typesGrid->addWidget(box, row, column++);
  }
  typesGrid->setColumnStretch(6, 1);
  mform->addRow(tr("Candidate types"), typesGrid);

  measureButton_ = new QPushButton(tr("Measure"));
  measureButton_->setObjectName(QStringLiteral("aqMeasure"));
  measuredLabel_ = new QLabel(tr("Not measured yet."));
  measuredLabel_->setTextFormat(Qt::RichText);  // the staleness note is coloured; the rest escaped
  measuredLabel_->setObjectName(QStringLiteral("aqMeasured"));
  measuredLabel_->setWordWrap(true);
  measuredLabel_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  auto* measureRow = new QHBoxLayout;
  measureRow->addWidget(measureButton_);
  measureRow->addWidget(measuredLabel_, 1);
  mform->addRow(measureRow);

  // ---- 2. Target size --------------------------------------------------------------------------
  sizeBox_ = new QGroupBox(tr("2. Choose the size"));
  auto* sl = new QVBoxLayout(sizeBox_);
  slider_ = new QSlider(Qt::Horizontal);
  slider_->setObjectName(QStringLiteral("aqSlider"));
  slider_->setRange(0, kSliderSteps);
  slider_->setPageStep(kSliderSteps / 20);
  slider_->setToolTip(tr("The file's size, from every tensor at its smallest candidate to every tensor at its largest"));
  minLabel_ = new QLabel;
  maxLabel_ = new QLabel;
  bpw_ = new QDoubleSpinBox;
  bpw_->setObjectName(QStringLiteral("aqBpw"));
  bpw_->setDecimals(3);
  bpw_->setSingleStep(0.05);
  bpw_->setSuffix(tr(" BPW"));
  bpw_->setKeyboardTracking(false);  // choose when the number is complete, not at every key
  bpw_->setToolTip(tr("Bits per weight as llama.cpp prints them: all tensor bits over all parameters"));
  matchButton_ = new QPushButton(tr("Match a GGUF…"));
  matchButton_->setObjectName(QStringLiteral("aqMatch"));
  matchButton_->setToolTip(tr("The same tensor bytes as another GGUF (e.g. llama.cpp's Q4_K_M of this model)"));
  auto* sliderRow = new QHBoxLayout;
  sliderRow->addWidget(minLabel_);
  sliderRow->addWidget(slider_, 1);
  sliderRow->addWidget(maxLabel_);
  sliderRow->addSpacing(12);
  sliderRow->addWidget(bpw_);
  sliderRow->addWidget(matchButton_);
  sl->addLayout(sliderRow);
  choiceLabel_ = new QLabel(tr("Measure first: the slider then spans every size the candidate types reach, from "
                                "each tensor at its smallest type to each at its largest."));
  choiceLabel_->setObjectName(QStringLiteral("aqChoice"));
  choiceLabel_->setTextFormat(Qt::RichText);
  choiceLabel_->setWordWrap(true);
  choiceLabel_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  typesLabel_ = new QLabel;
  typesLabel_->setObjectName(QStringLiteral("aqTypes"));
  typesLabel_->setWordWrap(true);
  typesLabel_->setTextFormat(Qt::PlainText);
  typesLabel_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  sl->addWidget(choiceLabel_);
  sl->addWidget(typesLabel_);
  table_ = new QTableWidget(0, kColumns);
  table_->setObjectName(QStringLiteral("aqTable"));
  table_->setHorizontalHeaderLabels({tr("Tensor"), tr("Shape"), tr("Type"), tr("Size (KiB)"), tr("Predicted KL"),
                                     tr("KL from")});
  table_->horizontalHeaderItem(kKl)->setToolTip(tr("This tensor's share of the predicted KL (nats/token)"));
  table_->horizontalHeaderItem(kBasis)->setToolTip(
      tr("measured: the chosen type's KL measured exactly; estimate: the layer's gain × the type's error; "
         "median gain: no linear layer to probe"));
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->verticalHeader()->hide();
  table_->verticalHeader()->setDefaultSectionSize(table_->fontMetrics().height() + 6);
  table_->horizontalHeader()->setSortIndicator(kTensor, Qt::AscendingOrder);  // the file's order first
  table_->horizontalHeader()->setSectionResizeMode(kTensor, QHeaderView::Stretch);
  for (int c = kShape; c < kColumns; ++c) table_->horizontalHeader()->setSectionResizeMode(c, QHeaderView::ResizeToContents);
  table_->setMinimumHeight(160);
  sl->addWidget(table_, 1);

  // ---- 3. Export -------------------------------------------------------------------------------
  exportBox_ = new QGroupBox(tr("3. Export"));
  auto* eform = new QFormLayout(exportBox_);
  output_ = new QLineEdit;
  output_->setObjectName(QStringLiteral("aqOutput"));
  auto* browseOut = new QPushButton(tr("Browse…"));
  overwrite_ = new QCheckBox(tr("Overwrite"));
  overwrite_->setObjectName(QStringLiteral("aqOverwrite"));
  auto* outRow = new QHBoxLayout;
  outRow->addWidget(output_, 1);
  outRow->addWidget(browseOut);
  outRow->addWidget(overwrite_);
  eform->addRow(tr("To"), outRow);
  refine_ = new QSpinBox;
  refine_->setObjectName(QStringLiteral("aqRefine"));
  refine_->setRange(0, 1000);
  refine_->setValue(10);
  refine_->setSuffix(tr(" forward passes"));
  refine_->setToolTip(tr("Before writing, measure exactly the types that decide the choice (those nearest the "
                         "budget's frontier) within this many forward passes over the probe window, and choose "
                         "again (--refine-passes; 0: none)"));
  check_ = new QCheckBox(tr("Check the file as llama.cpp runs it"));
  check_->setObjectName(QStringLiteral("aqCheck"));
  check_->setChecked(true);
  check_->setToolTip(tr("Every chosen type applied at once, activations rounded as llama.cpp's CPU products round "
                        "them; the KL against the unquantized model on %1 windows of held-out calibration tokens")
                         .arg(kCheckWindows));
  planJson_ = new QCheckBox(tr("Also save the plan (JSON)"));
  planJson_->setObjectName(QStringLiteral("aqPlanJson"));
  planJson_->setToolTip(tr("Every tensor's type, bytes, error, gain and predicted KL, beside the file (.plan.json)"));
  auto* optRow = new QHBoxLayout;
  optRow->addWidget(refine_);
  optRow->addSpacing(12);
  optRow->addWidget(check_);
  optRow->addSpacing(12);
  optRow->addWidget(planJson_);
  optRow->addStretch(1);
  eform->addRow(tr("Refine"), optRow);
  exportButton_ = new QPushButton(tr("Export"));
  exportButton_->setObjectName(QStringLiteral("aqExport"));
  openButton_ = new QPushButton(tr("Open the File"));
  openButton_->setObjectName(QStringLiteral("aqOpen"));
  openButton_->setToolTip(tr("Close this dialog and open the written GGUF in the main window"));
  openButton_->hide();
  auto* exportRow = new QHBoxLayout;
  exportRow->addWidget(exportButton_);
  exportRow->addWidget(openButton_);
  exportRow->addStretch(1);
  eform->addRow(exportRow);

  // ---- progress, status, close -----------------------------------------------------------------
  progress_ = new QProgressBar;
  progress_->setObjectName(QStringLiteral("aqProgress"));
  progress_->setRange(0, 1000);
  progress_->setTextVisible(true);
  cancelButton_ = new QPushButton(tr("Cancel"));
  cancelButton_->setObjectName(QStringLiteral("aqCancel"));
  auto* progressRow = new QHBoxLayout;
  progressRow->addWidget(progress_, 1);
  progressRow->addWidget(cancelButton_);
  status_ = new QLabel;
  status_->setObjectName(QStringLiteral("aqStatus"));
  status_->setWordWrap(true);
  status_->setTextFormat(Qt::PlainText);
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  status_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close);

  auto* outer = new QVBoxLayout(this);
  outer->addWidget(reasonLabel_);
  outer->addWidget(measureBox_);
  outer->addWidget(sizeBox_, 1);
  outer->addWidget(exportBox_);
  outer->addLayout(progressRow);
  outer->addWidget(status_);
  outer->addWidget(buttons);

  QSize size(1040, 900);
  if (const QScreen* screen = QGuiApplication::primaryScreen()) size = size.boundedTo(screen->availableGeometry().size() * 0.92);
  resize(size);

  connect(browseText, &QPushButton::clicked, this, [this] {
    const QString p = QFileDialog::getOpenFileName(this, tr("Calibration text"), calibText_->text(),
                                                   tr("Text (*.txt);;All files (*)"));
    if (!p.isEmpty()) calibText_->setText(p);
  });
  connect(browseOut, &QPushButton::clicked, this, [this] {
    const QString p = QFileDialog::getSaveFileName(this, tr("Autoquant to"), output_->text(), tr("GGUF (*.gguf)"));
    if (!p.isEmpty()) setOutput(p);
  });
  // A change of what the measurement depends on: the Measure button and the staleness note follow.
  connect(calibText_, &QLineEdit::textChanged, this, &AutoquantDialog::refreshState);
  connect(calibTokens_, &QSpinBox::valueChanged, this, &AutoquantDialog::refreshState);
  connect(context_, &QSpinBox::valueChanged, this, &AutoquantDialog::refreshState);
  connect(method_, &QComboBox::currentIndexChanged, this, &AutoquantDialog::refreshState);
  for (auto& [t, box] : typeBoxes_) connect(box, &QCheckBox::toggled, this, &AutoquantDialog::refreshState);
  connect(output_, &QLineEdit::textEdited, this, [this] { outputEdited_ = true; });
  connect(output_, &QLineEdit::textChanged, this, &AutoquantDialog::refreshState);
  connect(measureButton_, &QPushButton::clicked, this, [this] { measure(); });
  connect(slider_, &QSlider::valueChanged, this, [this](int v) {
    if (!plan_) return;
    const double span = double(range_.maxBytes - range_.minBytes);
    choose(range_.minBytes + uint64_t(std::llround(span * double(v) / kSliderSteps)));
  });
  connect(bpw_, &QDoubleSpinBox::valueChanged, this, [this](double v) { setTargetBpw(v); });
  connect(matchButton_, &QPushButton::clicked, this, [this] {
    const QString p = QFileDialog::getOpenFileName(this, tr("Match the size of"), QFileInfo(modelPath_).absolutePath(),
                                                   tr("GGUF (*.gguf);;All files (*)"));
    if (!p.isEmpty()) matchFile(p);
  });
  connect(exportButton_, &QPushButton::clicked, this, [this] { exportNow(); });
  connect(openButton_, &QPushButton::clicked, this, [this] {
    const QString p = exportedPath_;
    accept();
    emit openRequested(p);
  });
  connect(cancelButton_, &QPushButton::clicked, this, &AutoquantDialog::cancel);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
}

void AutoquantDialog::setEngine(std::shared_ptr<Engine> engine) {
  const bool sameModel = engine && engine_ && engine->modelPtr() == engine_->modelPtr();
  if (!sameModel && plan_) {
    // Another model: the measurement was of the previous one.
    if (job_) cancel();
    plan_.reset();
    tokens_.reset();
    measuredWith_.reset();
    exported_.reset();
    table_->setRowCount(0);
    measuredLabel_->setText(tr("Not measured yet (another model was opened)."));
    choiceLabel_->setText(tr("Measure first."));
    typesLabel_->clear();
    minLabel_->clear();
    maxLabel_->clear();
    openButton_->hide();
  }
  engine_ = std::move(engine);
  reason_.clear();
  if (!engine_) {
    reason_ = tr("The compute backend is still starting: this dialog is ready when it is.");
  } else if (engine_->model().format() != ModelFormat::Gguf) {
    reason_ = tr("Autoquant makes a GGUF from a GGUF: it keeps the source's tensor names and metadata, which only a "
                 "GGUF has. %1 is a %2 model — export it to GGUF first (File → Export…, Weights: GGUF) and open "
                 "that file.")
                  .arg(QFileInfo(modelPath_).fileName(), QString::fromStdString(std::string(modelFormatName(engine_->model().format()))));
  } else if (!engine_->canRun()) {
    reason_ = tr("This model opens as weights only: its architecture cannot run, and autoquant measures the model "
                 "running.");
  }
  refreshState();
}

AutoquantDialog::Inputs AutoquantDialog::inputs() const {
  Inputs in;
  in.text = calibText_->text().trimmed();
  in.tokens = calibTokens_->value();
  in.context = context_->value();
  // gptq measures and chooses as imatrix does: only the export differs (exportNow)
  in.importance = method_->currentData().toString() != QLatin1String("rtn");
  in.candidates = candidates();
  return in;
}

std::vector<DType> AutoquantDialog::candidates() const {
  std::vector<DType> out;
  for (const auto& [t, box] : typeBoxes_)
    if (box->isChecked()) out.push_back(t);
  return out;
}

void AutoquantDialog::refreshState() {
  const bool busyNow = job_ != 0;
  const bool usable = reason_.isEmpty();
  reasonLabel_->setText(reason_);
  reasonLabel_->setVisible(!usable);
  const Inputs in = inputs();
  measureBox_->setEnabled(usable && !busyNow);
  const bool stale = plan_ && measuredWith_ && !(*measuredWith_ == in);
  measureButton_->setText(plan_ ? tr("Measure Again") : tr("Measure"));
  measureButton_->setEnabled(usable && !busyNow && !in.candidates.empty() && !in.text.isEmpty());
  measureButton_->setToolTip(in.candidates.empty()
                                 ? tr("Tick at least one candidate type")
                                 : tr("Calibrate, then quantize every tensor to every candidate type and measure one "
                                      "exact KL probe per layer (minutes on a CPU for a 100M-parameter model)"));
  if (plan_ && measuredWith_)
    measuredLabel_->setText(
        stale ? QStringLiteral("%1 <span style='color:#b06000'>%2</span>")
                    .arg(measuredSummary_.toHtmlEscaped(),
                         tr("The settings above changed since: Measure Again to use them (or set them back) before "
                            "exporting."))
              : measuredSummary_.toHtmlEscaped());
  sizeBox_->setEnabled(usable && plan_ && !busyNow);
  exportBox_->setEnabled(usable && plan_ && !busyNow);
  exportButton_->setEnabled(usable && plan_ && !busyNow && !stale && !output_->text().trimmed().isEmpty());
  progress_->setEnabled(busyNow);
  cancelButton_->setEnabled(busyNow);
  if (!busyNow) {
    progress_->setValue(0);
    progress_->setFormat(tr("No job running"));
  }
}

void AutoquantDialog::setStatus(const QString& text, bool error) {
  status_->setStyleSheet(error ? QStringLiteral("QLabel { color: #b00020; }") : QString());
  status_->setText(text);
}

QString AutoquantDialog::statusText() const { return status_->text(); }
QString AutoquantDialog::choiceText() const { return choiceLabel_->text(); }
QString AutoquantDialog::typesText() const { return typesLabel_->text(); }

void AutoquantDialog::setCalibrationText(const QString& path) { calibText_->setText(path); }
void AutoquantDialog::setCalibrationTokens(int tokens) { calibTokens_->setValue(tokens); }
void AutoquantDialog::setContext(int tokens) { context_->setValue(tokens); }
void AutoquantDialog::setMethod(const QString& method) { method_->setCurrentIndex(method_->findData(method)); }
void AutoquantDialog::setCandidates(const std::vector<DType>& types) {
  for (auto& [t, box] : typeBoxes_) box->setChecked(std::find(types.begin(), types.end(), t) != types.end());
}
void AutoquantDialog::setOutput(const QString& path) {
  outputEdited_ = true;
  output_->setText(path);
}
void AutoquantDialog::setOverwrite(bool on) { overwrite_->setChecked(on); }
void AutoquantDialog::setRefinePasses(int passes) { refine_->setValue(passes); }
void AutoquantDialog::setCheck(bool on) { check_->setChecked(on); }

void AutoquantDialog::submit(const QString& title, JobRunner::Work work, bool isExport) {
  jobIsExport_ = isExport;
  openButton_->hide();
  const bool queued = jobs_->busy();  // behind another job (a sweep, a lab): it starts after it
  job_ = jobs_->submit(kTag, title, std::move(work));
  clock_.start();
  refreshState();
  progress_->setValue(0);
  progress_->setFormat(queued ? tr("waiting for the running job to end…") : tr("starting…"));
}

void AutoquantDialog::jobEnded() {
  job_ = 0;
  refreshState();
}

void AutoquantDialog::cancel() {
  if (!job_) return;
  progress_->setFormat(tr("cancelling…"));
  jobs_->cancel(kTag);
}

void AutoquantDialog::done(int r) {
  if (job_) cancel();  // nothing of a closed dialog's job is wanted
  QDialog::done(r);
}

bool AutoquantDialog::measure() {
  if (!reason_.isEmpty()) {
    setStatus(reason_, true);
    return false;
  }
  if (job_) return false;
  const Inputs in = inputs();
  if (in.candidates.empty() || in.text.isEmpty()) {
    setStatus(in.text.isEmpty() ? tr("Choose a calibration text.") : tr("Tick at least one candidate type."), true);
    return false;
  }
  AutoquantOptions o;
  o.candidates = in.candidates;
  o.importance = in.importance;
  o.context = in.context;
  auto engine = engine_;
  QPointer<AutoquantDialog> self(this);
  setStatus(tr("Measuring: the time left shows once the rate is known. Cancel (or Close) stops it; the measurement "
               "writes nothing."));
  submit(tr("Autoquant: measuring %1").arg(QFileInfo(modelPath_).fileName()),
         [engine, o, in, self](const JobContext& ctx) -> std::function<void()> {
           const auto start = std::chrono::steady_clock::now();
           ctx.progress(0, "reading the calibration text");
           const Tokenizer& tok = engine->tokenizer();
           auto tokens = std::make_shared<const AutoquantTokens>(readAutoquantTokens(
               tok, in.text.toStdString(), in.tokens, in.context, kCheckWindows, "calibration text"));
           Runtime& rt = engine->runtime(ctx);
           const Engine::Use use{*engine};
           AutoquantOptions opt = o;
           opt.bos = tok.sequenceStart();
           auto plan = std::make_shared<AutoquantPlan>(measureAutoquant(engine->model(), rt, tokens->calibration, opt, ctx));
           const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
           return [self, plan, tokens, opt, in, seconds] {
             if (self) self->onMeasured(plan, tokens, opt, in, seconds);
           };
         },
         false);
  return true;
}

void AutoquantDialog::onMeasured(std::shared_ptr<AutoquantPlan> plan, std::shared_ptr<const AutoquantTokens> tokens,
                                 const AutoquantOptions& options, const Inputs& in, double seconds) {
  jobEnded();
  plan_ = std::move(plan);
  tokens_ = std::move(tokens);
  options_ = options;
  measuredWith_ = in;
  exported_.reset();
  range_ = autoquantSizeRange(*plan_);
  int quantizable = 0, measuredGains = 0;
  for (const auto& t : plan_->tensors) {
    quantizable += t.quantizable && !t.options.empty();
    measuredGains += t.gainMeasured;
  }
  const QString took = seconds >= 90 ? tr("%1 min").arg(seconds / 60, 0, 'f', 1) : tr("%1 s").arg(seconds, 0, 'f', 1);
  const QString summary =
      tr("Measured in %1: %2 calibration tokens of %3, %4 of %5 tensors quantizable, %6 layers probed exactly; "
         "the unquantized model's perplexity on the probe window %7.")
          .arg(took)
          .arg(plan_->calibrationTokens)
          .arg(QFileInfo(in.text).fileName())
          .arg(quantizable)
          .arg(plan_->tensors.size())
          .arg(measuredGains)
          .arg(plan_->referencePerplexity, 0, 'f', 2);
  measuredSummary_ = summary;
  measuredLabel_->setText(summary.toHtmlEscaped());
  measuredLabel_->setToolTip(QString::fromStdString(plan_->basis));
  {
    const QSignalBlocker b(bpw_);
    bpw_->setRange(std::floor(range_.minBpw * 1000) / 1000, std::ceil(range_.maxBpw * 1000) / 1000);
  }
  minLabel_->setText(tr("%1 BPW").arg(range_.minBpw, 0, 'f', 2));
  minLabel_->setToolTip(tr("Every tensor at its smallest candidate: %1 MiB").arg(mib(range_.minBytes)));
  maxLabel_->setText(tr("%1 BPW").arg(range_.maxBpw, 0, 'f', 2));
  maxLabel_->setToolTip(tr("Every tensor at its largest candidate: %1 MiB").arg(mib(range_.maxBytes)));
  fillTable();
  // The target: the previous one when it is still reachable, else about Q4_K_M's size.
  uint64_t target = targetBytes_;
  if (target < range_.minBytes || target > range_.maxBytes) target = autoquantBytesForBpw(*plan_, kDefaultBpw);
  refreshState();
  choose(target);
  setStatus(tr("Move the slider to choose the size, then Export."));
  emit measured();
}

void AutoquantDialog::setTargetBpw(double bpw) {
  if (plan_) choose(autoquantBytesForBpw(*plan_, bpw));
}

void AutoquantDialog::setTargetBytes(uint64_t bytes) {
  if (plan_) choose(bytes);
}

void AutoquantDialog::choose(uint64_t bytes) {
  bytes = std::clamp(bytes, range_.minBytes, range_.maxBytes);
  AutoquantOptions o = options_;
  o.targetBpw.reset();
  o.targetBytes = bytes;
  try {
    chooseAutoquantTypes(*plan_, o);  // only the choice changes: the measured figures stay as they are
  } catch (const Error& e) {
    setStatus(QString::fromStdString(e.what()), true);
    return;
  }
  targetBytes_ = bytes;
  {
    const QSignalBlocker a(slider_), b(bpw_);
    const double span = double(range_.maxBytes - range_.minBytes);
    slider_->setValue(span > 0 ? int(std::lround(double(bytes - range_.minBytes) / span * kSliderSteps)) : kSliderSteps);
    bpw_->setValue(8.0 * double(bytes) / double(std::max<uint64_t>(plan_->parameters, 1)));
  }
  showChoice();
  if (!outputEdited_) output_->setText(suggestedOutput());
  emit choiceChanged();
}

QString AutoquantDialog::suggestedOutput() const {
  const QFileInfo src(modelPath_);
  const double bpw = plan_ ? plan_->bpw() : kDefaultBpw;
  return src.absolutePath() + QLatin1Char('/') + src.completeBaseName() +
         QStringLiteral("-aq%1.gguf").arg(bpw, 0, 'f', 2);
}

void AutoquantDialog::showChoice() {
  const AutoquantPlan& p = *plan_;
  const uint64_t source = engine_ ? engine_->model().tensorDataBytes() : 0;
  QString line = tr("<b>%1 BPW</b> · %2 MiB (%3 tensor bytes; target %4)")
                     .arg(p.bpw(), 0, 'f', 4)
                     .arg(mib(p.totalBytes), grouped(p.totalBytes), grouped(p.targetBytes));
  if (source > 0)
    line += tr(" · %1 % of %2")
                .arg(100.0 * double(p.totalBytes) / double(source), 0, 'f', 1)
                .arg(QFileInfo(modelPath_).fileName().toHtmlEscaped());
  line += tr(" · <b>predicted KL %1</b> nats/token").arg(p.predictedKl, 0, 'f', 5);
  choiceLabel_->setText(line);
  QStringList types;
  for (const auto& [name, count] : autoquantTypeCounts(p))
    types << QStringLiteral("%1 ×%2").arg(QString::fromStdString(name)).arg(count);
  int kept = 0;
  for (const auto& t : p.tensors) kept += t.chosen < 0;
  typesLabel_->setText(tr("Types: %1%2").arg(types.join(QStringLiteral(", ")),
                                             kept ? tr("; %1 tensors kept as they are (norms and the like)").arg(kept)
                                                  : QString()));
  // The table: each row knows its tensor (rows move when sorted).
  table_->setSortingEnabled(false);
  for (int r = 0; r < table_->rowCount(); ++r) {
    const size_t ti = size_t(table_->item(r, kTensor)->data(Qt::UserRole).toInt());
    const AutoquantTensor& t = p.tensors[ti];
    auto* type = static_cast<NumberItem*>(table_->item(r, kType));
    auto* size = static_cast<NumberItem*>(table_->item(r, kSize));
    auto* kl = static_cast<NumberItem*>(table_->item(r, kKl));
    auto* basis = table_->item(r, kBasis);
    if (t.chosen < 0) {
      type->set(tr("kept"), -1);
      size->set(QString::number(double(t.keptBytes) / 1024, 'f', 1), double(t.keptBytes));
      kl->set(QStringLiteral("—"), -1);
      basis->setText(QString());
      continue;
    }
    const AutoquantOption& o = t.options[size_t(t.chosen)];
    type->set(typeName(o.type), bitsPerWeight(o.type));
    size->set(QString::number(double(o.bytes) / 1024, 'f', 1), double(o.bytes));
    kl->set(QString::number(o.predictedKl, 'g', 3), o.predictedKl);
    basis->setText(o.measured ? tr("measured") : t.gainMeasured ? tr("estimate") : tr("median gain"));
  }
  table_->setSortingEnabled(true);
}

void AutoquantDialog::fillTable() {
  table_->setSortingEnabled(false);
  table_->setRowCount(0);
  const AutoquantPlan& p = *plan_;
  table_->setRowCount(int(p.tensors.size()));
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const AutoquantTensor& t = p.tensors[i];
    const int r = int(i);
    auto* name = new NumberItem;
    name->set(QString::fromStdString(t.name), double(i));  // sorts back to the file's order
    name->setData(Qt::UserRole, int(i));
    table_->setItem(r, kTensor, name);
    QStringList dims;
    for (int64_t d : t.shape) dims << QString::number(d);
    table_->setItem(r, kShape, new QTableWidgetItem(dims.join(QStringLiteral(" × "))));
    for (int c : {kType, kSize, kKl}) table_->setItem(r, c, new NumberItem);
    table_->setItem(r, kBasis, new QTableWidgetItem);
  }
  table_->sortItems(kTensor);
  table_->setSortingEnabled(true);
}

void AutoquantDialog::matchFile(const QString& path) {
  if (!plan_) return;
  setStatus(tr("Reading %1…").arg(QFileInfo(path).fileName()));
  // Off the GUI thread: the file may be on a slow disk.
  auto* watcher = new QFutureWatcher<std::pair<uint64_t, QString>>(this);
  connect(watcher, &QFutureWatcher<std::pair<uint64_t, QString>>::finished, this, [this, watcher, path] {
    watcher->deleteLater();
    const auto [bytes, error] = watcher->result();
    if (!error.isEmpty()) return setStatus(error, true);
    if (!plan_) return;
    if (bytes < range_.minBytes || bytes > range_.maxBytes)
      return setStatus(tr("%1 holds %2 tensor bytes (%3 BPW of this model): outside what the candidates reach, "
                          "%4 … %5 BPW.")
                           .arg(QFileInfo(path).fileName(), grouped(bytes))
                           .arg(8.0 * double(bytes) / double(std::max<uint64_t>(plan_->parameters, 1)), 0, 'f', 3)
                           .arg(range_.minBpw, 0, 'f', 3)
                           .arg(range_.maxBpw, 0, 'f', 3),
                       true);
    choose(bytes);
    setStatus(tr("Target: the tensor bytes of %1.").arg(QFileInfo(path).fileName()));
  });
  watcher->setFuture(QtConcurrent::run([p = path.toStdString()]() -> std::pair<uint64_t, QString> {
    try {
      return {openModel(p)->tensorDataBytes(), QString()};
    } catch (const std::exception& e) {
      return {0, QString::fromUtf8(e.what())};
    }
  }));
}

bool AutoquantDialog::exportNow() {
  refreshState();
  auto refuse = [this](const QString& why) {
    setStatus(why, true);
    return false;
  };
  if (!plan_) return refuse(tr("Measure first."));
  if (job_) return false;
  if (!(*measuredWith_ == inputs()))
    return refuse(tr("The measure settings changed since the measure: Measure Again (or set them back) first."));
  const QString out = output_->text().trimmed();
  if (out.isEmpty()) return refuse(tr("Choose the output file."));
  const QFileInfo outInfo(out);
  if (outInfo.absoluteFilePath() == QFileInfo(modelPath_).absoluteFilePath() ||
      (outInfo.exists() && outInfo.canonicalFilePath() == QFileInfo(modelPath_).canonicalFilePath()))
    return refuse(tr("%1 is the model being read: choose another file.").arg(out));
  if (outInfo.isDir()) return refuse(tr("%1 is a folder: the output must be a file name.").arg(out));
  if (outInfo.exists() && !overwrite_->isChecked()) return refuse(tr("%1 exists: tick Overwrite to replace it.").arg(out));
  auto plan = std::make_shared<AutoquantPlan>(*plan_);  // refined on a copy: the measured plan stays
  AutoquantOptions o = options_;
  o.targetBpw.reset();
  o.targetBytes = targetBytes_;
  o.refinePasses = refine_->value();
  o.checkWindows = check_->isChecked() ? kCheckWindows : 0;
  o.gptq = method_->currentData().toString() == QLatin1String("gptq");
  const bool json = planJson_->isChecked();
  QString jsonPath = out;
  if (jsonPath.endsWith(QLatin1String(".gguf"), Qt::CaseInsensitive)) jsonPath.chop(5);
  jsonPath += QStringLiteral(".plan.json");
  jobOutput_ = out;
  jobOutputMtime_ = outInfo.exists() ? outInfo.lastModified().toMSecsSinceEpoch() : -1;
  auto engine = engine_;
  auto tokens = tokens_;
  QPointer<AutoquantDialog> self(this);
  setStatus(tr("Exporting to %1: refine, check, write. Cancel leaves no file (the file appears only when it is "
               "complete).").arg(out));
  submit(tr("Autoquant: exporting %1").arg(outInfo.fileName()),
         [engine, tokens, plan, o, out, json, jsonPath, self](const JobContext& ctx) -> std::function<void()> {
           Runtime& rt = engine->runtime(ctx);
           const Engine::Use use{*engine};
           const std::optional<RoundedTensors> gptq = refineAndCheckAutoquant(
               engine->model(), rt, *tokens, *plan, o, progressRange(ctx, 0.0, o.gptq ? 0.6 : 0.35),
               &engine->backend().gptq());
           writeAutoquantGguf(engine->model(), *plan, out.toStdString(), progressRange(ctx, o.gptq ? 0.6 : 0.35, 1.0),
                              gptq ? &*gptq : nullptr);
           if (json) {
             try {
               writeFileAtomically(jsonPath.toStdString(), autoquantPlanJson(*plan) + "\n");
             } catch (const Error& e) {
               throw Error(e.kind(), "wrote " + out.toStdString() + ", but not the plan: " + e.what());
             }
           }
           return [self, plan, out] {
             if (self) self->onExported(plan, out);
           };
         },
         true);
  return true;
}

void AutoquantDialog::onExported(std::shared_ptr<const AutoquantPlan> plan, const QString& out) {
  jobEnded();
  exported_ = plan;
  exportedPath_ = out;
  const AutoquantPlan& p = *plan;
  QString text = tr("Wrote %1: %2 BPW (%3 tensor bytes, %4 MiB; target %5), predicted KL %6 nats/token")
                     .arg(out)
                     .arg(p.bpw(), 0, 'f', 4)
                     .arg(grouped(p.totalBytes), mib(p.totalBytes), grouped(p.targetBytes))
                     .arg(p.predictedKl, 0, 'f', 5);
  if (p.checkedKl >= 0 && p.predictedKl == p.checkedKl)  // the prediction is the held-out check
    text += tr(" — the file checked as llama.cpp runs it on held-out text (top-1 agreement %1 % on %2 positions); "
               "the choice's additive estimate was %3")
                .arg(100.0 * p.checkedTop1, 0, 'f', 2)
                .arg(p.checkedPositions)
                .arg(p.additiveKl, 0, 'f', 5);
  else if (p.checkedKl >= 0)
    text += tr(", checked KL %1 nats/token (top-1 agreement %2 % on %3 positions)")
                .arg(p.checkedKl, 0, 'f', 5)
                .arg(100.0 * p.checkedTop1, 0, 'f', 2)
                .arg(p.checkedPositions);
  // The refinement measured the options that decide the choice and chose again: its figures are
  // the file's, the slider's line above is the estimate before it.
  if (p.refinedOptions > 0 && plan_)
    text += tr("; before writing, %1 deciding options were measured exactly and the types chosen again (the "
               "slider's estimate at this size: %2 BPW, predicted KL %3)")
                .arg(p.refinedOptions)
                .arg(plan_->bpw(), 0, 'f', 4)
                .arg(plan_->predictedKl, 0, 'f', 5);
  text += QLatin1Char('.');
  setStatus(text);
  status_->setToolTip(QString::fromStdString(p.basis + (p.checkBasis.empty() ? "" : "\ncheck: " + p.checkBasis)));
  openButton_->show();
  emit exported(out);
}

}  // namespace qs::app
