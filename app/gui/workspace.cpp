#include "app/gui/workspace.h"

#include <QComboBox>
#include <QDir>
#include <QFileInfo>
#include <QFutureWatcher>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QSpinBox>
#include <QUndoStack>
#include <QStandardPaths>
#include <QVBoxLayout>
#include <QtConcurrent>
#include <atomic>
#include <exception>
#include <fcntl.h>
#include <stdio.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>

#include "app/gui/job_runner.h"
#include "core/io/regular_file.h"
#include "core/analysis/accumulate.h"
#include "core/analysis/calibrate.h"
#include "core/analysis/sensitivity.h"
#include "core/analysis/speed.h"
#include "core/engine/engine.h"
#include "core/model/model_file.h"
#include "core/plan/frontier.h"
#include "core/plan/model_hash.h"
#include "core/plan/plan.h"
#include "core/plan/plan_editor.h"
#include "core/plan/plan_figures.h"
#include "core/plan/layer_names.h"
#include <QSettings>
#include <QGuiApplication>
#include <QScreen>
#include "core/runtime/loaded_model.h"
#include "core/runtime/runtime.h"
#include "core/runtime/throughput.h"
#include "core/tokenizer/tokenizer.h"
#include "kernels/backend/backend.h"
#include "kernels/common/error.h"
#include "widgets/plan_compare_view.h"
#include "widgets/plan_editor_view.h"
#include "widgets/run_view.h"
#include "widgets/sensitivity_view.h"

namespace qs::app {

namespace {
using Clock = std::chrono::steady_clock;
// Partial results reach the GUI at most this often (the views redraw whole plots).
constexpr auto kLiveInterval = std::chrono::milliseconds(250);
// Calibration tokens for plans with GPTQ / AWQ / SmoothQuant layers (run and export jobs).
constexpr int64_t kRoundingCalibrationTokens = 2048;

// The largest group size (of those plans offer) that divides every layer's K, so a layer view
// or a plan row that goes to INT is valid from the start (SmolLM2: K = 576 and 1536 → 64);
// 0 when none does (then per channel).
uint32_t groupForAllLayers(const ModelGraph& g) {
  for (uint32_t size : {128u, 64u, 32u}) {
    bool all = true;
    for (const PlanLayer& l : planLayers(g)) all = all && l.linear && l.linear->inFeatures % size == 0;
    if (all) return size;
  }
  return 0;
}
}  // namespace

struct Workspace::Prepared {
  // The engine the job runs on (its model, backend and one runtime): job thread only, beyond the
  // identity getters.
  std::shared_ptr<Engine> engine;
  const ModelGraph& graph() const { return engine->graph(); }
  Backend& backend() const { return engine->backend(); }
  // The engine's runtime (built by the first job), its KV cache reset.
  Runtime& runtime(const JobContext& ctx) const { return engine->runtime(ctx); }
  std::string modelPath, hash, textPath;
  int64_t tokens = 0;
  std::shared_ptr<const CalibrationResult> calibration;

  // The evaluation text as token ids, and the BOS id the windows start with.
  std::vector<int32_t> tokenize(int32_t* bos) const {
    const Tokenizer& tok = engine->tokenizer();
    *bos = tok.sequenceStart();
    // The one bounded text reader: only the bytes `tokens` tokens can need (never a FIFO).
    return tok.encode(readTextFile(textPath, textBytesForTokens(tok, tokens)), {});
  }
  EvalOptions eval(int32_t bos) const {
    EvalOptions o;
    o.maxTokens = tokens;
    o.bos = bos;
    return o;
  }
};

Workspace::Workspace(JobRunner* jobs, QObject* parent) : QObject(parent), jobs_(jobs) {
  autosave_.setSingleShot(true);
  autosave_.setInterval(1500);  // a burst of changes (a job's end, a few edits) saves once
  connect(&autosave_, &QTimer::timeout, this, &Workspace::autosaveNow);
  const QString d = datasetsTextDir();
  textPath_ = QDir(d).filePath(QStringLiteral("tinystories_validation_head.txt"));
  buildPages();
  // A cancelled sweep keeps what it measured: every finished row stays in the session (and the
  // heatmap), the cells not reached stay blank, and the next sweep measures only those. (A
  // 1.5-hour sweep cancelled at 80 % keeps 80 %.)
  connect(jobs_, &JobRunner::jobCancelled, this, [this](quint64 id, const QString&) {
    if (id != sweepJob_ || !partialSweep_) return;
    int measured = 0;
    for (const SensitivityEntry& e : partialSweep_->entries) measured += e.klSource == KlSource::Measured;
    if (measured > 0) {
      session_.sensitivity = *partialSweep_;
      sensitivityView_->setTable(*partialSweep_);
      planEditor_->setSensitivity(std::make_shared<SensitivityTable>(*partialSweep_));
      markDirty();
      updateTextLabel();
      emit sensitivityChanged();
      emit message(tr("Sweep cancelled: kept %1 measured cells (the next sweep resumes from them)").arg(measured));
    }
    partialSweep_.reset();
  });
}

Workspace::~Workspace() {
  // The view may outlive the workspace (the main window's tabs own the pages): let go of the
  // document first, then the commands that refer to it, then the document.
  if (planEditor_) planEditor_->setDocument(nullptr);
  planUndo_->clear();
}

void Workspace::replacePlanDocument(std::optional<Plan> plan) {
  planUndo_->clear();  // the commands refer to the document being replaced
  if (planEditor_) planEditor_->setDocument(nullptr);
  planDoc_.reset();
  if (!model_ || !plan) return;
  ResolveOptions ro;
  ro.modelName = QFileInfo(modelPath_).fileName().toStdString();
  ro.modelHash = hash_;
  planDoc_ = std::make_unique<PlanDocument>(graph_, std::move(*plan), ro);
  if (planEditor_) planEditor_->setDocument(planDoc_.get());
}

QWidget* Workspace::planPage() const { return planEditor_; }

QString Workspace::datasetsTextDir() {
  const QByteArray env = qgetenv("QS_DATASETS");
  if (!env.isEmpty()) return QDir(QString::fromLocal8Bit(env)).filePath(QStringLiteral("text"));
#ifdef QS_DATASETS_DIR
  return QStringLiteral(QS_DATASETS_DIR "/text");
#else
  return QDir::currentPath();
#endif
}

void Workspace::buildPages() {
  // Sensitivity: calibrate + sweep buttons over the view.
  sensitivityPage_ = new QWidget;
  sensitivityPage_->setObjectName(QStringLiteral("sensitivityPage"));
  auto* sl = new QVBoxLayout(sensitivityPage_);
  auto* sbar = new QHBoxLayout;
  auto* calib = new QPushButton(tr("Calibrate"));
  calib->setObjectName(QStringLiteral("calibrateButton"));
  calib->setToolTip(tr("Run the evaluation text through the model and collect activation statistics"));
  auto* sweep = new QPushButton(tr("Run sensitivity"));
  sweep->setObjectName(QStringLiteral("sensitivityButton"));
  sweep->setToolTip(tr("Every linear layer × candidate format: proxies and end-to-end KL with only that layer quantized"));
  sweepMode_ = new QComboBox;
  sweepMode_->setObjectName(QStringLiteral("sensitivityMode"));
  sweepMode_->addItem(tr("KL: automatic"), -1);
  sweepMode_->addItem(tr("KL: exact"), int(SensitivityMode::Exact));
  sweepMode_->addItem(tr("KL: estimate"), int(SensitivityMode::Estimate));
  sweepMode_->setToolTip(tr("How the sweep gets each cell's end-to-end KL.\n"
                            "Exact: every layer × format run with only that layer quantized.\n"
                            "Estimate: per layer one measured probe per error family (integer, floating point); the\n"
                            "layer's other weight-only formats are its gain × their activation-weighted error\n"
                            "(about 20 forward passes in all; Refine on the Plan tab measures the cells that decide\n"
                            "the plan at a budget, about 10 more).\n"
                            "The estimate needs Calibrate first.\n"
                            "Automatic: the estimate on the CPU once calibrated, else exact."));
  textLabel_ = new QLabel;
  textLabel_->setObjectName(QStringLiteral("evalTextLabel"));
  textLabel_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);  // long notes never widen the window
  textLabel_->setWordWrap(true);
  sbar->addWidget(calib);
  sbar->addWidget(sweep);
  sbar->addWidget(sweepMode_);
  sbar->addWidget(textLabel_, 1);
  sl->addLayout(sbar);
  sensitivityView_ = new widgets::SensitivityView;
  sl->addWidget(sensitivityView_, 1);
  connect(calib, &QPushButton::clicked, this, &Workspace::calibrate);
  connect(sensitivityView_, &widgets::SensitivityView::cellClicked, this, [this](int layer, int) {
    const SensitivityTable& t = sensitivityView_->table();
    if (layer >= 0 && layer < int(t.layers.size())) emit layerRequested(QString::fromStdString(t.layers[size_t(layer)].weightName));
  });
  connect(sweep, &QPushButton::clicked, this, &Workspace::runSensitivity);

  planUndo_ = new QUndoStack(this);
  planEditor_ = new widgets::PlanEditorView(planUndo_);
  connect(planEditor_, &widgets::PlanEditorView::message, this, &Workspace::message);
  connect(planEditor_, &widgets::PlanEditorView::compareRequested, this, [this](const QString& p) { comparePlanWith(p); });
  connect(planEditor_, &widgets::PlanEditorView::refineRequested, this, &Workspace::refineSensitivity);
  connect(planEditor_, &widgets::PlanEditorView::planChanged, this, [this] {
    if (planEditor_->plan() && model_) {
      session_.plans["current"] = planToJson(*planEditor_->plan());
      markDirty();
    }
  });

  // Run: run the plan being edited under a name; measure its speed.
  runPage_ = new QWidget;
  runPage_->setObjectName(QStringLiteral("runPage"));
  auto* rl = new QVBoxLayout(runPage_);
  auto* rbar = new QHBoxLayout;
  runName_ = new QLineEdit(QStringLiteral("plan"));
  runName_->setObjectName(QStringLiteral("runName"));
  runName_->setMaximumWidth(220);
  runName_->setMinimumWidth(120);  // the tokens/s text beside the buttons must not squeeze it
  auto* run = new QPushButton(tr("Run plan"));
  run->setObjectName(QStringLiteral("runPlanButton"));
  run->setToolTip(tr("Error accumulation of the plan against the unquantized model, block by block"));
  speedTokens_ = new QSpinBox;
  speedTokens_->setObjectName(QStringLiteral("speedTokens"));
  speedTokens_->setRange(1, 4096);
  speedTokens_->setValue(1);
  speedTokens_->setSuffix(tr(" tokens"));
  auto* speed = new QPushButton(tr("Measure speed"));
  speed->setObjectName(QStringLiteral("speedButton"));
  speed->setToolTip(tr("Each layer's kernel for the plan against cuBLAS FP16 on the device"));
  rbar->addWidget(new QLabel(tr("Run name")));
  rbar->addWidget(runName_);
  rbar->addWidget(run);
  rbar->addSpacing(24);
  rbar->addWidget(speedTokens_);
  rbar->addWidget(speed);
  rbar->addSpacing(24);
  auto* tps = new QPushButton(tr("Tokens/s"));
  tps->setObjectName(QStringLiteral("throughputButton"));
  tps->setToolTip(tr("The whole model with the plan against all-FP16, both through the kernels: "
                     "a prefill of 256 tokens, then 64 decode steps, the median of three runs"));
  throughput_ = new QLabel;
  throughput_->setObjectName(QStringLiteral("throughputLabel"));
  throughput_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  // A long result must not widen the window: the label takes the room left and wraps.
  throughput_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  throughput_->setWordWrap(true);
  rbar->addWidget(tps);
  rbar->addWidget(throughput_, 1);  // the rest of the row
  rl->addLayout(rbar);
  runView_ = new widgets::RunView;
  connect(runView_, &widgets::RunView::layerClicked, this, &Workspace::layerRequested);
  rl->addWidget(runView_, 1);
  connect(run, &QPushButton::clicked, this, [this] { runPlan(runName_->text().trimmed()); });
  connect(speed, &QPushButton::clicked, this, [this] { measureSpeed(speedTokens_->value()); });
  connect(tps, &QPushButton::clicked, this, &Workspace::measureTokensPerSecond);
  setEvalText(textPath_, textTokens_);
}

void Workspace::setEvalText(const QString& path, qint64 tokens) {
  textPath_ = path;
  textTokens_ = tokens;
  rememberEvalText();
  updateTextLabel();
}

// The text the next job uses, and — when they differ — what the results shown were measured on,
// so figures from 4,096 tokens never sit under a "256 tokens" label.
void Workspace::updateTextLabel() {
  QString text = tr("text: %1, %2 tokens").arg(QFileInfo(textPath_).fileName()).arg(textTokens_ > 0 ? QString::number(textTokens_) : tr("all"));
  if (session_.sensitivity && session_.sensitivity->tokens > 0) {
    const SensitivityTable& t = *session_.sensitivity;
    // An estimate sweep measures its probes on the first tokens of the text only (as many as its
    // forward-pass budget allows), so its table holds fewer tokens than were asked for.
    const bool estimate = std::any_of(t.entries.begin(), t.entries.end(),
                                      [](const SensitivityEntry& e) { return e.klSource == KlSource::Estimated; });
    const bool sameText = QString::fromStdString(t.textSource) == QFileInfo(textPath_).fileName();
    const bool same = sameText && (textTokens_ <= 0 || t.tokens == textTokens_ || (estimate && t.tokens < textTokens_));
    if (same && estimate && (textTokens_ <= 0 || t.tokens < textTokens_))
      text += tr(" (the sweep's KL probes ran on the first %1)").arg(t.tokens);
    if (!same)
      text += tr("  —  the results shown were measured on %1 tokens of %2; run the sweep again for this text")
                  .arg(t.tokens).arg(QString::fromStdString(t.textSource));
  }
  textLabel_->setText(text);
}

void Workspace::rememberEvalText() {
  if (hash_.empty() || !model_) return;
  QSettings st;
  st.setValue(QStringLiteral("evalText/%1/path").arg(QString::fromStdString(hash_)), textPath_);
  st.setValue(QStringLiteral("evalText/%1/tokens").arg(QString::fromStdString(hash_)), textTokens_);
}

void Workspace::runPlanFromUi() { runPlan(runName_->text().trimmed()); }
void Workspace::measureSpeedFromUi() { measureSpeed(speedTokens_->value()); }

void Workspace::flushSession() {
  if (!autosave_.isActive()) return;
  autosave_.stop();
  QString err;
  if (!saveSessionNow(&err)) emit message(tr("Session not saved: %1").arg(err));
}

int Workspace::runtimeBuilds() const { return retiredBuilds_ + (engine_ ? engine_->runtimeBuilds() : 0); }

void Workspace::setBackend(std::shared_ptr<Backend> backend) {
  backend_ = std::move(backend);
  makeEngine();  // a runtime lives on one backend
}

void Workspace::makeEngine() {
  if (engine_) retiredBuilds_ += engine_->runtimeBuilds();
  // Queued jobs keep the engine they were prepared with; the next ones get this one.
  engine_ = model_ && backend_ ? std::make_shared<Engine>(model_, graph_, backend_) : nullptr;
  emit engineChanged(engine_);
}

void Workspace::setModel(std::shared_ptr<ModelFile> model, const QString& path) {
  jobs_->cancel(QStringLiteral("calibrate"));
  jobs_->cancel(QStringLiteral("sensitivity"));
  jobs_->cancel(QStringLiteral("run"));
  jobs_->cancel(QStringLiteral("speed"));
  if (autosave_.isActive()) {
    autosave_.stop();
    autosaveNow();  // the previous model's session first
  }
  model_ = std::move(model);
  modelPath_ = path;
  session_ = Session{};
  partialSweep_.reset();
  sweepJob_ = 0;
  // Nothing of the previous model's results may show on this one (issue 27 item 6): its runs,
  // speed bars, sensitivity cells, and the plan editor's tables behind the budget and Pareto.
  runView_->clear();
  sensitivityView_->setTable(SensitivityTable{});
  replacePlanDocument(std::nullopt);  // before the graph it refers to changes
  planEditor_->setSensitivity(nullptr);
  planEditor_->setSpeed(nullptr, 1);
  if (!model_) {
    makeEngine();
    return;
  }
  graph_ = buildModelGraph(*model_);
  makeEngine();  // the next job builds the new model's runtime
  hash_ = sampledModelHash(*model_);
  {
    // The evaluation text chosen for this model last time (kept per model, like its session).
    QSettings st;
    const QString key = QStringLiteral("evalText/%1/").arg(QString::fromStdString(hash_));
    const QString saved = st.value(key + QStringLiteral("path")).toString();
    if (!saved.isEmpty() && QFileInfo::exists(saved)) {
      textPath_ = saved;
      textTokens_ = st.value(key + QStringLiteral("tokens"), textTokens_).toLongLong();
    } else {
      // None chosen yet: a text of the model's domain. A held-out text shipped beside the model
      // (datasets/models/shakespeare-gpt2/heldout.txt); llama2.c checkpoints are TinyStories
      // models; anything else is a general LLM: WikiText-2.
      const QDir here = QFileInfo(path).isDir() ? QDir(path) : QFileInfo(path).dir();
      const QDir texts(datasetsTextDir());
      QString pick = here.filePath(QStringLiteral("heldout.txt"));
      if (!QFileInfo::exists(pick))
        pick = texts.filePath(model_->format() == ModelFormat::Llama2c ? QStringLiteral("tinystories_validation_head.txt")
                                                                       : QStringLiteral("wikitext2_raw_test.txt"));
      if (QFileInfo::exists(pick)) textPath_ = pick;
    }
  }
  // One session per model content: the data folder, keyed by the hash (a hash has no '/').
  QString safe = QString::fromStdString(hash_);
  safe.replace(QRegularExpression(QStringLiteral("[^A-Za-z0-9_.-]")), QStringLiteral("_"));
  const QString dir = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/sessions");
  QDir().mkpath(dir);
  sessionPath_ = dir + QLatin1Char('/') + safe + QStringLiteral(".qsession");
  try {
    session_ = openSessionFor(sessionPath_.toStdString(), path.toStdString(), hash_, graph_);
  } catch (const Error& e) {
    // The model opens with a fresh session; the unreadable file is kept aside, never overwritten
    // by the next autosave: renamed to NAME.corrupt-N (docs/reliability.md).
    const QString error = QString::fromStdString(e.what());
    session_ = Session{};
    session_.modelPath = path.toStdString();
    session_.modelHash = hash_;
    QString aside;
    for (int n = 1; n < 1000 && aside.isEmpty(); ++n) {
      const QString candidate = sessionPath_ + QStringLiteral(".corrupt-%1").arg(n);
      if (QFileInfo::exists(candidate)) continue;
      // RENAME_NOREPLACE: never replace a file of that name created in the meantime (plain rename
      // where the file system cannot do that).
      const QByteArray from = QFile::encodeName(sessionPath_), to = QFile::encodeName(candidate);
      int rc = ::renameat2(AT_FDCWD, from.constData(), AT_FDCWD, to.constData(), RENAME_NOREPLACE);
      if (rc != 0 && errno == EINVAL) rc = ::rename(from.constData(), to.constData());
      if (rc == 0) aside = candidate;
      else if (errno != EEXIST) break;
    }
    if (aside.isEmpty()) sessionPath_.clear();  // could not move it: no autosave over it either
    emit sessionUnreadable(error, aside);
  }
  std::optional<Plan> plan;
  if (auto it = session_.plans.find("current"); it != session_.plans.end()) {
    try {
      plan = planFromJson(it->second, sessionPath_.toStdString() + ": plans/current");
    } catch (const Error& e) {
      emit message(QString::fromStdString(e.what()));
    }
  }
  // An untouched plan saved with the old built-in group (128) that does not fit this model gets
  // the group that does (a plan with entries is the user's: kept as it is).
  if (plan && plan->entries.empty() && plan->defaults.group == builtinPlanDefaults().group) {
    const uint32_t g = groupForAllLayers(graph_);
    if (g != builtinPlanDefaults().group->size)
      plan->defaults.group = g ? GroupChoice{Granularity::Group, g} : GroupChoice{Granularity::Channel, 0};
  }
  replacePlanDocument(plan ? std::move(plan)
                            : newPlanFor(QFileInfo(path).fileName().toStdString(), hash_, groupForAllLayers(graph_)));
  showSession();
  updateTextLabel();
}

void Workspace::showSession() {
  if (session_.sensitivity) {
    sensitivityView_->setTable(*session_.sensitivity);
    planEditor_->setSensitivity(std::make_shared<SensitivityTable>(*session_.sensitivity));
  }
  for (const auto& [name, trace] : session_.runs)
    applyRun(QString::fromStdString(name), trace.result, true, &trace.planJson);
  if (session_.speed && !session_.speed->tokenCounts.empty()) {
    planEditor_->setSpeed(std::make_shared<SpeedTable>(*session_.speed), session_.speed->tokenCounts[0]);
    // The speed bars of the plan being edited, as measured (the runs' names: the last one).
    const QString name = runName_->text().trimmed().isEmpty() ? QStringLiteral("plan") : runName_->text().trimmed();
    showSpeed(session_.runs.empty() || session_.runs.count(name.toStdString()) ? name
                                                                               : QString::fromStdString(session_.runs.rbegin()->first),
              *session_.speed);
  }
  if (session_.calibration) emit calibrationChanged();
}

std::shared_ptr<const Workspace::Prepared> Workspace::prepare(bool needText) const {
  if (!model_) throw Error(ErrorKind::BadInput, "open a model first");
  if (!backend_) throw Error(ErrorKind::BadInput, "the compute backend is still starting; try again in a moment");
  if (graph_.family == GraphFamily::WeightsOnly)
    throw Error(ErrorKind::Unsupported, "this model opens as weights only: its architecture cannot run, so the "
                                        "analysis jobs that run it are not available (weight analysis is)",
                modelPath_.toStdString());
  auto p = std::make_shared<Prepared>();
  p->engine = engine_;
  p->modelPath = modelPath_.toStdString();
  p->hash = hash_;
  p->textPath = textPath_.toStdString();
  p->tokens = textTokens_;
  if (needText && !QFileInfo::exists(textPath_))
    throw Error(ErrorKind::BadInput, "the evaluation text does not exist", p->textPath, "text");
  if (session_.calibration) p->calibration = std::make_shared<CalibrationResult>(*session_.calibration);
  return p;
}

std::shared_ptr<const Workspace::Prepared> Workspace::prepareOrSay(bool needText) {
  try {
    return prepare(needText);
  } catch (const Error& e) {
    emit message(QString::fromStdString(e.what()));
    return nullptr;
  }
}

void Workspace::calibrate() {
  const std::shared_ptr<const Prepared> p = prepareOrSay(true);
  if (!p) return;
  jobs_->submit(QStringLiteral("calibrate"), tr("Calibrating"), [p, this](const JobContext& ctx) -> std::function<void()> {
    int32_t bos = -1;
    ctx.progress(0, "tokenizing");
    const std::vector<int32_t> ids = p->tokenize(&bos);
    Runtime& rt = p->runtime(ctx);
    const Engine::Use use{*p->engine};
    CalibrationOptions o;
    o.eval = p->eval(bos);
    auto r = std::make_shared<CalibrationResult>(runCalibration(rt, p->backend().stats(), ids, o, ctx));
    r->textSource = QFileInfo(QString::fromStdString(p->textPath)).fileName().toStdString();
    return [this, r] {
      session_.calibration = *r;
      markDirty();
      emit calibrationChanged();
      emit message(tr("Calibrated on %1 tokens (%2 windows)").arg(r->tokens).arg(r->windows));
    };
  });
}

void Workspace::runSensitivity() { runSweep(std::nullopt); }

void Workspace::refineSensitivity(double bitsPerWeight) { runSweep(bitsPerWeight); }

void Workspace::runSweep(std::optional<double> refineBits) {
  const std::shared_ptr<const Prepared> p = prepareOrSay(true);
  if (!p) return;
  QPointer<Workspace> self(this);
  partialSweep_.reset();
  const int modeChoice = sweepMode_->currentData().toInt();
  // Automatic: the estimate where an exact sweep is slow (the CPU) and it can rest on something
  // (the estimate prices formats by their activation-weighted error, from the calibration).
  SensitivityMode mode = modeChoice >= 0 ? SensitivityMode(modeChoice)
                         : p->backend().kind() == BackendKind::Cpu && p->calibration ? SensitivityMode::Estimate
                                                                                     : SensitivityMode::Exact;
  // A cancelled sweep (the session's table has cells left to measure) resumes: the cells it
  // measured are kept when the tokens, text and model are the same (runSensitivity checks).
  // A refinement resumes from the whole table: its probes and measured cells are kept.
  std::shared_ptr<const SensitivityTable> resume;
  if (session_.sensitivity && (refineBits || cellsWithoutKl(*session_.sensitivity) > 0))
    resume = std::make_shared<SensitivityTable>(*session_.sensitivity);
  if (refineBits) {
    if (!resume) {
      emit message(tr("Refine: run the sensitivity sweep first"));
      return;
    }
    mode = SensitivityMode::Estimate;
  }
  sweepJob_ = jobs_->submit(QStringLiteral("sensitivity"), refineBits ? tr("Refining the sensitivity at %1 bits/weight").arg(*refineBits, 0, 'f', 2) : tr("Sensitivity sweep"), [p, self, mode, resume, refineBits, formats = sweepFormats_](const JobContext& ctx) -> std::function<void()> {
    int32_t bos = -1;
    ctx.progress(0, "tokenizing");
    const std::vector<int32_t> ids = p->tokenize(&bos);
    Runtime& rt = p->runtime(ctx);
    const Engine::Use use{*p->engine};
    SensitivityOptions o;
    o.eval = p->eval(bos);
    o.textSource = QFileInfo(QString::fromStdString(p->textPath)).fileName().toStdString();
    o.modelHash = p->hash;
    o.formats = formats;
    o.mode = mode;
    o.resume = resume.get();
    // The estimate's probes take 20 forward passes, so that they and a refinement at the chosen
    // budget (10) stay within 30 (docs/analysis.md, "One default for both models").
    o.probeForwardBudget = 20;
    if (refineBits) {
      o.formats = resume->formats;
      o.probeTokens = resume->tokens;  // the table's own probe tokens: every measured cell is kept
      const ModelGraph& graph = rt.graph();
      o.refine = [&graph, bits = *refineBits](const SensitivityTable& table) {
        std::vector<std::pair<size_t, size_t>> cells;
        for (const TableCell& c : frontierCells(graph, table, {bits})) cells.emplace_back(c.layer, c.format);
        return cells;
      };
    }
    SensitivityTable partial;
    o.partial = &partial;
    SensitivityCallbacks cb;
    auto last = std::make_shared<Clock::time_point>(Clock::now() - kLiveInterval);
    auto post = [self, last](const SensitivityTable& t, bool force) {
      if (!force && Clock::now() - *last < kLiveInterval) return;
      *last = Clock::now();
      auto copy = std::make_shared<SensitivityTable>(t);
      QMetaObject::invokeMethod(self.data(), [self, copy] {
        if (!self || copy->modelHash != self->hash_) return;  // a sweep of the previous model
        self->partialSweep_ = *copy;  // kept if the sweep is cancelled
        self->sensitivityView_->setTable(*copy);
      }, Qt::QueuedConnection);
    };
    cb.onProxies = [post](const SensitivityTable& t) { post(t, true); };
    // Every finished row reaches the GUI (force): a Cancel keeps all of them, not the last drawn.
    cb.onRow = [post](const SensitivityTable& t, size_t) { post(t, true); };
    std::shared_ptr<SensitivityResult> r;
    try {
      r = std::make_shared<SensitivityResult>(
          qs::runSensitivity(rt, p->backend().stats(), ids, p->calibration.get(), o, ctx, cb));
    } catch (const Error& e) {
      // Every measured cell, not only the finished rows, reaches the GUI before the job's
      // cancellation does (both are queued to the GUI thread, in this order).
      if (e.kind() == ErrorKind::Cancelled && !partial.entries.empty()) post(partial, true);
      throw;
    }
    return [self, r, resumed = resume != nullptr, refineBits] {
      if (!self) return;
      if (refineBits)
        emit self->message(tr("Refined at %1 bits/weight: %2 estimated cells measured (%3 forward passes)")
                               .arg(*refineBits, 0, 'f', 2)
                               .arg(r->refinedCells)
                               .arg(r->refineForwardEquivalents, 0, 'f', 1));
      else if (r->resumedCells > 0)
        emit self->message(tr("Sweep resumed: %1 cells kept from the cancelled sweep, %2 measured now")
                               .arg(r->resumedCells)
                               .arg(r->cells));
      else if (resumed && !r->resumeNote.empty())
        emit self->message(tr("Measured every cell: the cancelled sweep could not be resumed (%1)")
                               .arg(QString::fromStdString(r->resumeNote)));
      self->partialSweep_.reset();
      self->session_.sensitivity = r->table;
      self->sensitivityView_->setTable(r->table);
      self->planEditor_->setSensitivity(std::make_shared<SensitivityTable>(r->table));
      if (refineBits) {
        QString err;
        if (!self->planEditor_->autoPlanBudgetBits(*refineBits, &err)) emit self->message(err);
      }
      self->markDirty();
      self->updateTextLabel();
      emit self->sensitivityChanged();
    };
  });
}

Workspace::RoundingSource Workspace::roundingSource() const {
  std::shared_ptr<const Prepared> p = prepare(true);
  RoundingSource r;
  r.backend = p->engine->backendPtr();
  r.calibrationTokens = [p](int32_t* bos, int64_t maxSeq) {
    const std::vector<int32_t> ids = p->tokenize(bos);
    const auto cal = calibrationAfterEvaluation(ids, p->eval(*bos), maxSeq, kRoundingCalibrationTokens);
    return std::vector<int32_t>(cal.begin(), cal.end());
  };
  return r;
}

void Workspace::runPlan(const QString& runName) {
  std::shared_ptr<const Prepared> p;
  QString name = runName.isEmpty() ? QStringLiteral("plan") : runName;
  try {
    checkSessionName(name.toStdString(), "run name");
    p = prepare(true);
  } catch (const Error& e) {
    emit message(QString::fromStdString(e.what()));
    return;
  }
  if (!planEditor_->document()) return;
  runName_->setText(name);  // Measure speed attaches to this run
  auto resolved = std::make_shared<ResolvedPlan>(planEditor_->document()->resolved());
  auto planJson = std::make_shared<std::string>(planToJson(*planEditor_->plan()));
  QPointer<Workspace> self(this);
  jobs_->submit(QStringLiteral("run"), tr("Running plan %1").arg(name),
                [p, self, name, resolved, planJson](const JobContext& ctx) -> std::function<void()> {
    int32_t bos = -1;
    ctx.progress(0, "tokenizing");
    const std::vector<int32_t> ids = p->tokenize(&bos);
    Runtime& rt = p->runtime(ctx);
    const Engine::Use use{*p->engine};
    const LayerQuants formats = resolved->quants(rt.linears().size());
    AccumulationOptions o;
    o.eval = p->eval(bos);
    if (needsRounding(formats)) {  // GPTQ / AWQ / SmoothQuant: calibrated on the text after the evaluated part
      o.rounding.calibration = calibrationAfterEvaluation(ids, o.eval, rt.maxSeq(), kRoundingCalibrationTokens);
      o.rounding.gptq = &p->backend().gptq();
      o.rounding.options.bos = bos;
    }
    auto last = std::make_shared<Clock::time_point>(Clock::now() - kLiveInterval);
    auto r = std::make_shared<AccumulationResult>(runAccumulation(
        rt, ids, formats, p->calibration.get(), o, ctx,
        [self, name, last, model = p->engine->modelPtr()](const AccumulationResult& soFar, int64_t, int block) {
          if (block >= 0 && Clock::now() - *last < kLiveInterval) return;  // batch ends always show
          *last = Clock::now();
          auto copy = std::make_shared<AccumulationResult>(soFar);
          QMetaObject::invokeMethod(self.data(), [self, name, copy, model] {
            if (self && self->model_ == model) self->applyRun(name, *copy, false);  // not a previous model's
          }, Qt::QueuedConnection);
        }));
    r->layerFormats.resize(rt.linears().size());
    return [self, name, r, planJson] {
      if (!self) return;
      self->session_.runs[name.toStdString()] = RunTrace{*planJson, *r};
      self->applyRun(name, *r, true, planJson.get());
      self->markDirty();
      emit self->runChanged(name);
    };
  });
}

void Workspace::applyRun(const QString& name, const AccumulationResult& r, bool finished, const std::string* planJson) {
  widgets::RunCurve c;
  c.name = name;
  for (const BlockError& b : r.blocks) {
    c.relL2.push_back(b.relL2);
    c.cosine.push_back(b.cosine);
  }
  c.batchesDone = int(r.batchesDone);
  c.batchesTotal = int(r.windows);
  c.perplexity = r.perplexity;
  c.basePerplexity = r.basePerplexity;
  c.kl = r.kl;
  c.top1 = r.top1Agreement;
  if (finished && planJson && model_) {
    // The weights column: the size of the plan this run ran (also for runs restored from the
    // session, whatever plan is being edited now).
    try {
      ResolveOptions ro;
      ro.modelHash = hash_;
      PlanDocument doc(graph_, planFromJson(*planJson, "run " + name.toStdString()), ro);
      c.weightBytes = double(doc.figures().weightBytes);
      c.baseWeightBytes = double(doc.figures().fp16Bytes);
    } catch (const Error&) {
      // a plan this build cannot read: the column stays empty
    }
  }
  if (const widgets::RunCurve* old = runView_->run(name); old && !std::isfinite(c.weightBytes)) {
    c.weightBytes = old->weightBytes;
    c.baseWeightBytes = old->baseWeightBytes;
  }
  runView_->setRun(c);
}

// The speed bars of the plan being edited from a speed table (a measurement or the session's).
void Workspace::showSpeed(const QString& name, const SpeedTable& t, double wholeModel) {
  if (!planEditor_->document() || t.tokenCounts.empty()) return;
  // The speed table's layers are the runtime's (plan layers, then a tied head left as loaded).
  LayerQuants plan;
  try {
    plan = planEditor_->document()->resolved().quants(t.layers.size());
  } catch (const Error&) {
    return;
  }
  widgets::RunSpeed s;
  double base = 0, kern = 0;
  for (size_t l = 0; l < t.layers.size() && l < plan.size(); ++l) {
    s.layers << QString::fromStdString(t.layers[l].name);  // row l is plan (and runtime) layer l
    s.weightNames << QString::fromStdString(t.layers[l].weightName);
    double v = widgets::RunCurve::nan;
    for (size_t f = 0; f < t.formats.size(); ++f)
      if (!isUnquantized(plan[l].format) && t.formats[f] == plan[l].format && std::isfinite(t.at(l, f, 0).kernelMicros)) {
        v = t.at(l, f, 0).speedup();
        base += t.at(l, f, 0).baselineMicros;
        kern += t.at(l, f, 0).kernelMicros;
      }
    if (isUnquantized(plan[l].format)) v = 1.0;  // FP16 baseline itself
    s.speedup.push_back(v);
  }
  // The job's whole-model figure when there is one; from a stored table: its quantized layers.
  s.wholeModel = std::isfinite(wholeModel) ? wholeModel : kern > 0 ? base / kern : widgets::RunCurve::nan;
  const bool cpu = QString::fromStdString(t.device).startsWith(QLatin1String("CPU"));
  s.baseline = cpu ? tr("the CPU reference (fake-quant GEMM, not kernels), %1 tok").arg(t.tokenCounts[0])
                   : tr("cuBLAS FP16 on %1, %2 tok").arg(QString::fromStdString(t.device)).arg(t.tokenCounts[0]);
  runView_->setSpeed(name, s);
}

void Workspace::measureSpeed(qint64 tokens) {
  const std::shared_ptr<const Prepared> p = prepareOrSay(false);
  if (!p) return;
  if (!planEditor_->document()) return;
  LayerQuants plan;
  try {
    plan = planEditor_->document()->resolved().quants(linearLayerRows(graph_).size());
  } catch (const Error& e) {
    emit message(tr("The plan cannot run: %1").arg(QString::fromStdString(e.what())));
    return;
  }
  const QString name = runName_->text().trimmed().isEmpty() ? QStringLiteral("plan") : runName_->text().trimmed();
  QPointer<Workspace> self(this);
  jobs_->submit(QStringLiteral("speed"), tr("Measuring speed"), [p, self, plan, tokens, name](const JobContext& ctx) -> std::function<void()> {
    SpeedOptions o;
    o.plan = plan;
    o.tokenCounts = {int64_t(tokens)};
    auto r = std::make_shared<SpeedResult>(qs::measureSpeed(p->backend(), p->graph(), o, ctx));
    return [self, r, name, tokens, model = p->engine->modelPtr()] {
      if (!self || self->model_ != model) return;
      self->session_.speed = r->table;
      self->showSpeed(name, r->table, r->planTotals.empty() ? widgets::RunCurve::nan : r->planTotals[0].speedup());
      self->planEditor_->setSpeed(std::make_shared<SpeedTable>(r->table), int64_t(tokens));
      self->markDirty();
      emit self->speedChanged();
    };
  });
}

void Workspace::measureTokensPerSecond() {
  const std::shared_ptr<const Prepared> p = prepareOrSay(false);
  if (!p || !planEditor_->document()) return;
  auto resolved = std::make_shared<ResolvedPlan>(planEditor_->document()->resolved());
  const QString name = planEditor_->plan() && !planEditor_->plan()->name.empty()
                           ? QString::fromStdString(planEditor_->plan()->name)
                           : QStringLiteral("plan");
  throughput_->setText(tr("measuring…"));
  QPointer<Workspace> self(this);
  jobs_->submit(QStringLiteral("throughput"), tr("Measuring tokens/s"),
                [p, self, resolved, name](const JobContext& ctx) -> std::function<void()> {
    Runtime& rt = p->runtime(ctx);
    const Engine::Use use{*p->engine};
    const LayerQuants formats = resolved->quants(rt.linears().size());
    ThroughputOptions o;
    o.decodeTokens = 64;
    o.promptTokens = std::min<int64_t>(256, rt.maxSeq() - o.decodeTokens);
    o.repeat = 3;  // the median of three: one run of a small model is at the mercy of the scheduler
    auto r = std::make_shared<ThroughputComparison>(qs::measureThroughput(rt, formats, name.toStdString(), o, ctx));
    return [self, r, model = p->engine->modelPtr(), device = QString::fromStdString(p->backend().name())] {
      if (!self || self->model_ != model) return;
      self->throughput_->setText(
          tr("%1: prefill %2 tok/s (%3× FP16), decode %4 tok/s (%5× FP16) — %6 tokens then %7 steps on %8, median of 3")
              .arg(QString::fromStdString(r->plan.name))
              .arg(r->plan.prefillTokensPerSecond, 0, 'f', 0)
              .arg(r->prefillRatio(), 0, 'f', 2)
              .arg(r->plan.decodeTokensPerSecond, 0, 'f', 1)
              .arg(r->decodeRatio(), 0, 'f', 2)
              .arg(r->options.promptTokens)
              .arg(r->options.decodeTokens)
              .arg(device));
      self->throughput_->setToolTip(tr("FP16: prefill %1 tok/s, decode %2 tok/s\nkernels, FP16: %3\nkernels, plan: %4")
                                        .arg(r->baseline.prefillTokensPerSecond, 0, 'f', 0)
                                        .arg(r->baseline.decodeTokensPerSecond, 0, 'f', 1)
                                        .arg(QString::fromStdString(r->baseline.kernels))
                                        .arg(QString::fromStdString(r->plan.kernels)));
    };
  });
}

QWidget* Workspace::comparePlanWith(const QString& path) {
  if (!model_ || !planEditor_->plan()) return nullptr;
  Plan other;
  try {
    other = loadPlan(path.toStdString());
  } catch (const Error& e) {
    emit message(QString::fromStdString(e.what()));
    return nullptr;
  }
  // A run of a plan: the session's run whose plan JSON is this plan's, if any.
  auto runOf = [this](const Plan& p) -> std::optional<widgets::PlanRunFigures> {
    const std::string j = planToJson(p);
    for (const auto& [name, trace] : session_.runs)
      if (trace.planJson == j) return widgets::PlanRunFigures{trace.result.kl, trace.result.perplexity, trace.result.top1Agreement};
    return std::nullopt;
  };
  auto* view = new widgets::PlanCompareView;
  view->setAttribute(Qt::WA_DeleteOnClose);
  view->setWindowTitle(tr("Plans side by side — %1").arg(QFileInfo(path).fileName()));
  // Named by where they come from, and never taller than the screen.
  view->setPlanTitles(tr("%1 (edited)").arg(QString::fromStdString(planEditor_->plan()->name)),
                      tr("%1 (%2)").arg(QString::fromStdString(other.name), QFileInfo(path).fileName()));
  QSize size(1100, 700);
  if (const QScreen* screen = QGuiApplication::primaryScreen())
    size = size.boundedTo(screen->availableGeometry().size() * 0.9);
  view->resize(size);
  std::shared_ptr<const SensitivityTable> sens;
  if (session_.sensitivity) sens = std::make_shared<SensitivityTable>(*session_.sensitivity);
  view->setPlans(graph_, *planEditor_->plan(), other, sens, runOf(*planEditor_->plan()), runOf(other));
  view->show();
  return view;
}

std::optional<widgets::LayerActivations> Workspace::activationsFor(const QString& weightName) const {
  if (!session_.calibration) return std::nullopt;
  const LayerCalibration* l = session_.calibration->find(weightName.toStdString());
  if (!l) return std::nullopt;
  widgets::LayerActivations a;
  a.hist = l->activationHist;
  a.absHist = l->activationAbsHist;
  for (int64_t c = 0; c < l->activations.channels(); ++c) a.channelAbsMax.push_back(l->activations.absMax(c));
  a.source = tr("%1, %2 tokens").arg(QString::fromStdString(session_.calibration->textSource)).arg(session_.calibration->tokens);
  return a;
}

void Workspace::markDirty() { autosave_.start(); }

void Workspace::autosaveNow() {
  if (!model_ || sessionPath_.isEmpty()) return;
  // A snapshot saved on a pool thread: the GUI never waits for HDF5 (saveSession is atomic).
  auto snapshot = std::make_shared<Session>(session_);
  const std::string path = sessionPath_.toStdString();
  auto* watcher = new QFutureWatcher<QString>(this);
  ++saving_;
  connect(watcher, &QFutureWatcher<QString>::finished, this, [this, watcher, path] {
    --saving_;
    const QString err = watcher->result();
    if (err.isEmpty()) emit sessionSaved(QString::fromStdString(path));
    else emit message(tr("Autosave failed: %1").arg(err));
    watcher->deleteLater();
  });
  watcher->setFuture(QtConcurrent::run([snapshot, path]() -> QString {
    try {
      saveSession(*snapshot, path);
      return {};
    } catch (const std::exception& e) {
      return QString::fromStdString(e.what());
    }
  }));
}

bool Workspace::saveSessionNow(QString* error) {
  autosave_.stop();
  try {
    saveSession(session_, sessionPath_.toStdString());
    emit sessionSaved(sessionPath_);
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

bool Workspace::saveSessionAs(const QString& path, QString* error) {
  try {
    saveSession(session_, path.toStdString());
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

}  // namespace qs::app
