#include "app/gui/workspace.h"

#include <QDir>
#include <QFileInfo>
#include <QFutureWatcher>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QSpinBox>
#include <QStandardPaths>
#include <QVBoxLayout>
#include <QtConcurrent>
#include <fcntl.h>
#include <stdio.h>

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
#include "core/model/model_file.h"
#include "core/plan/model_hash.h"
#include "core/plan/plan.h"
#include "core/plan/plan_editor.h"
#include "core/runtime/loaded_model.h"
#include "core/runtime/runtime.h"
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

QString shortName(const LayerRef& l) {
  return l.block >= 0 ? QStringLiteral("%1.%2").arg(l.block).arg(QString::fromStdString(l.role))
                      : QString::fromStdString(l.role.empty() ? l.weightName : l.role);
}
}  // namespace

struct Workspace::Prepared {
  std::shared_ptr<ModelFile> model;
  ModelGraph graph;
  std::shared_ptr<Backend> backend;
  std::string modelPath, hash, textPath;
  int64_t tokens = 0;
  std::shared_ptr<const CalibrationResult> calibration;

  // The evaluation text as token ids, and the BOS id the windows start with.
  std::vector<int32_t> tokenize(int32_t* bos) const {
    auto tok = findTokenizer(*model, {});
    if (!tok)
      throw Error(ErrorKind::BadInput, "no tokenizer found for the model (none inside it or beside it)", modelPath,
                  "tokenizer");
    *bos = tok->sequenceStart();
    // The one bounded text reader: only the bytes `tokens` tokens can need (never a FIFO).
    return tok->encode(readTextFile(textPath, textBytesForTokens(*tok, tokens)), {});
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
}

Workspace::~Workspace() = default;

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
  textLabel_ = new QLabel;
  textLabel_->setObjectName(QStringLiteral("evalTextLabel"));
  sbar->addWidget(calib);
  sbar->addWidget(sweep);
  sbar->addWidget(textLabel_, 1);
  sl->addLayout(sbar);
  sensitivityView_ = new widgets::SensitivityView;
  sl->addWidget(sensitivityView_, 1);
  connect(calib, &QPushButton::clicked, this, &Workspace::calibrate);
  connect(sweep, &QPushButton::clicked, this, &Workspace::runSensitivity);

  planEditor_ = new widgets::PlanEditorView;
  connect(planEditor_, &widgets::PlanEditorView::message, this, &Workspace::message);
  connect(planEditor_, &widgets::PlanEditorView::compareRequested, this, [this](const QString& p) { comparePlanWith(p); });
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
  rbar->addStretch(1);
  rl->addLayout(rbar);
  runView_ = new widgets::RunView;
  rl->addWidget(runView_, 1);
  connect(run, &QPushButton::clicked, this, [this] { runPlan(runName_->text().trimmed()); });
  connect(speed, &QPushButton::clicked, this, [this] { measureSpeed(speedTokens_->value()); });
  setEvalText(textPath_, textTokens_);
}

void Workspace::setEvalText(const QString& path, qint64 tokens) {
  textPath_ = path;
  textTokens_ = tokens;
  textLabel_->setText(tr("text: %1, %2 tokens").arg(QFileInfo(path).fileName()).arg(tokens > 0 ? QString::number(tokens) : tr("all")));
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
  runView_->clear();
  sensitivityView_->setTable(SensitivityTable{});
  if (!model_) {
    planEditor_->clearModel();
    return;
  }
  graph_ = buildModelGraph(*model_);
  hash_ = sampledModelHash(*model_);
  // One session per model content: the data folder, keyed by the hash (a hash has no '/').
  QString safe = QString::fromStdString(hash_);
  safe.replace(QRegularExpression(QStringLiteral("[^A-Za-z0-9_.-]")), QStringLiteral("_"));
  const QString dir = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/sessions");
  QDir().mkpath(dir);
  sessionPath_ = dir + QLatin1Char('/') + safe + QStringLiteral(".qsession");
  try {
    session_ = openSessionFor(sessionPath_.toStdString(), path.toStdString(), hash_);
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
  planEditor_->setModel(&graph_, QFileInfo(path).fileName().toStdString(), hash_, plan);
  showSession();
}

void Workspace::showSession() {
  if (session_.sensitivity) {
    sensitivityView_->setTable(*session_.sensitivity);
    planEditor_->setSensitivity(std::make_shared<SensitivityTable>(*session_.sensitivity));
  }
  if (session_.speed && !session_.speed->tokenCounts.empty())
    planEditor_->setSpeed(std::make_shared<SpeedTable>(*session_.speed), session_.speed->tokenCounts[0]);
  for (const auto& [name, trace] : session_.runs) applyRun(QString::fromStdString(name), trace.result, true);
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
  p->model = model_;
  p->graph = graph_;
  p->backend = backend_;
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
    Runtime rt(*p->model, p->graph, *p->backend, {}, &ctx);
    CalibrationOptions o;
    o.eval = p->eval(bos);
    auto r = std::make_shared<CalibrationResult>(runCalibration(rt, p->backend->stats(), ids, o, ctx));
    r->textSource = QFileInfo(QString::fromStdString(p->textPath)).fileName().toStdString();
    return [this, r] {
      session_.calibration = *r;
      markDirty();
      emit calibrationChanged();
      emit message(tr("Calibrated on %1 tokens (%2 windows)").arg(r->tokens).arg(r->windows));
    };
  });
}

void Workspace::runSensitivity() {
  const std::shared_ptr<const Prepared> p = prepareOrSay(true);
  if (!p) return;
  QPointer<Workspace> self(this);
  jobs_->submit(QStringLiteral("sensitivity"), tr("Sensitivity sweep"), [p, self](const JobContext& ctx) -> std::function<void()> {
    int32_t bos = -1;
    ctx.progress(0, "tokenizing");
    const std::vector<int32_t> ids = p->tokenize(&bos);
    Runtime rt(*p->model, p->graph, *p->backend, {}, &ctx);
    SensitivityOptions o;
    o.eval = p->eval(bos);
    o.textSource = QFileInfo(QString::fromStdString(p->textPath)).fileName().toStdString();
    o.modelHash = p->hash;
    SensitivityCallbacks cb;
    auto last = std::make_shared<Clock::time_point>(Clock::now() - kLiveInterval);
    auto post = [self, last](const SensitivityTable& t, bool force) {
      if (!force && Clock::now() - *last < kLiveInterval) return;
      *last = Clock::now();
      auto copy = std::make_shared<SensitivityTable>(t);
      QMetaObject::invokeMethod(self.data(), [self, copy] {
        if (self) self->sensitivityView_->setTable(*copy);
      }, Qt::QueuedConnection);
    };
    cb.onProxies = [post](const SensitivityTable& t) { post(t, true); };
    cb.onRow = [post](const SensitivityTable& t, size_t) { post(t, false); };
    auto r = std::make_shared<SensitivityResult>(
        qs::runSensitivity(rt, p->backend->stats(), ids, p->calibration.get(), o, ctx, cb));
    return [self, r] {
      if (!self) return;
      self->session_.sensitivity = r->table;
      self->sensitivityView_->setTable(r->table);
      self->planEditor_->setSensitivity(std::make_shared<SensitivityTable>(r->table));
      self->markDirty();
      emit self->sensitivityChanged();
    };
  });
}

// The plan being edited as a format per layer of `layers` (runtime / speed-job order: allLinears
// plus a tied head, which is no plan layer and stays unquantized, as in every plan).
// (The rounding method does not change which kernel runs a layer: the speed job ignores it.)
static std::vector<std::optional<QuantFormat>> speedPlanFormats(const std::vector<LayerRef>& layers,
                                                               const ResolvedPlan& plan) {
  std::vector<std::string> names;
  for (const LayerRef& l : layers) names.push_back(l.weightName);
  return planFormats(quantizationPlan(names, plan));
}

Workspace::RoundingSource Workspace::roundingSource() const {
  std::shared_ptr<const Prepared> p = prepare(true);
  RoundingSource r;
  r.backend = p->backend;
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
    Runtime rt(*p->model, p->graph, *p->backend, {}, &ctx);
    const LayerFormats formats = layerFormatsFromPlan(rt, *resolved);
    AccumulationOptions o;
    o.eval = p->eval(bos);
    if (formats.needsRounding()) {  // GPTQ / AWQ / SmoothQuant: calibrated on the text after the evaluated part
      o.rounding.calibration = calibrationAfterEvaluation(ids, o.eval, rt.maxSeq(), kRoundingCalibrationTokens);
      o.rounding.gptq = &p->backend->gptq();
      o.rounding.options.bos = bos;
    }
    auto last = std::make_shared<Clock::time_point>(Clock::now() - kLiveInterval);
    auto r = std::make_shared<AccumulationResult>(runAccumulation(
        rt, ids, formats, p->calibration.get(), o, ctx,
        [self, name, last](const AccumulationResult& soFar, int64_t, int block) {
          if (block >= 0 && Clock::now() - *last < kLiveInterval) return;  // batch ends always show
          *last = Clock::now();
          auto copy = std::make_shared<AccumulationResult>(soFar);
          QMetaObject::invokeMethod(self.data(), [self, name, copy] {
            if (self) self->applyRun(name, *copy, false);
          }, Qt::QueuedConnection);
        }));
    r->layerFormats.resize(rt.linears().size());
    return [self, name, r, planJson] {
      if (!self) return;
      self->session_.runs[name.toStdString()] = RunTrace{*planJson, *r};
      self->applyRun(name, *r, true);
      self->markDirty();
      emit self->runChanged(name);
    };
  });
}

void Workspace::applyRun(const QString& name, const AccumulationResult& r, bool finished) {
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
  if (planEditor_->document()) {
    const PlanFigures& f = planEditor_->document()->figures();
    if (finished && name == runName_->text().trimmed()) {
      c.weightBytes = double(f.weightBytes);
      c.baseWeightBytes = double(f.fp16Bytes);
    }
  }
  if (const widgets::RunCurve* old = runView_->run(name); old && !std::isfinite(c.weightBytes)) {
    c.weightBytes = old->weightBytes;
    c.baseWeightBytes = old->baseWeightBytes;
  }
  runView_->setRun(c);
}

void Workspace::measureSpeed(qint64 tokens) {
  const std::shared_ptr<const Prepared> p = prepareOrSay(false);
  if (!p) return;
  if (!planEditor_->document()) return;
  std::vector<std::optional<QuantFormat>> plan;
  try {
    plan = speedPlanFormats(speedLayers(graph_), planEditor_->document()->resolved());
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
    auto r = std::make_shared<SpeedResult>(qs::measureSpeed(*p->backend, p->graph, o, ctx));
    return [self, r, plan, name, tokens] {
      if (!self) return;
      widgets::RunSpeed s;
      const SpeedTable& t = r->table;
      for (size_t l = 0; l < t.layers.size(); ++l) {
        s.layers << shortName(t.layers[l]);
        double v = widgets::RunCurve::nan;
        for (size_t f = 0; f < t.formats.size(); ++f)
          if (plan[l] && t.formats[f] == *plan[l] && std::isfinite(t.at(l, f, 0).kernelMicros)) v = t.at(l, f, 0).speedup();
        if (!plan[l]) v = 1.0;  // FP16 baseline itself
        s.speedup.push_back(v);
      }
      s.wholeModel = r->planTotals.empty() ? widgets::RunCurve::nan : r->planTotals[0].speedup();
      s.baseline = r->reference ? tr("the CPU reference (fake-quant GEMM, not kernels), %1 tok").arg(tokens)
                                : tr("cuBLAS FP16, %1 tok").arg(tokens);
      self->runView_->setSpeed(name, s);
      self->session_.speed = t;
      self->planEditor_->setSpeed(std::make_shared<SpeedTable>(t), int64_t(tokens));
      self->markDirty();
      emit self->speedChanged();
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
  view->resize(1100, 700);
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
