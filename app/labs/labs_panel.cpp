#include "app/labs/labs_panel.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFile>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPointer>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QSplitter>
#include <QTableWidget>
#include <QTextBrowser>
#include <QTimer>
#include <QVBoxLayout>
#include <cmath>
#include <qcustomplot.h>

#include "app/gui/job_runner.h"
#include "app/labs/lab_env.h"
#include "widgets/histogram_plot.h"
#include "widgets/plot_export.h"
#include "widgets/plot_tickers.h"

static void initLabResources() { Q_INIT_RESOURCE(labs); }

namespace qs::labs {

namespace {

QString q(const std::string& s) { return QString::fromStdString(s); }

const QColor kColors[] = {QColor(31, 119, 180), QColor(255, 127, 14), QColor(44, 160, 44),
                          QColor(214, 39, 40), QColor(148, 103, 189), QColor(140, 86, 75)};

QString doneKey(int number) { return QStringLiteral("labs/done/%1").arg(number); }

void drawChart(QCustomPlot* plot, const LabChart& c) {
  plot->clearPlottables();
  plot->clearItems();
  if (plot->plotLayout()->rowCount() > 1) {
    plot->plotLayout()->removeAt(0);
    plot->plotLayout()->simplify();
  }
  plot->plotLayout()->insertRow(0);
  auto* title = new QCPTextElement(plot, q(c.title), QFont(plot->font().family(), 8, QFont::Bold));
  plot->plotLayout()->addElement(0, 0, title);
  plot->xAxis->setLabel(q(c.xLabel));
  plot->yAxis->setLabel(q(c.yLabel));
  for (QCPAxis* ax : {plot->xAxis, plot->yAxis}) {
    const bool log = ax == plot->xAxis ? c.logX : c.logY;
    ax->setScaleType(log ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
    if (log)
      ax->setTicker(qs::widgets::makeLogTicker());
    else
      ax->setTicker(QSharedPointer<QCPAxisTicker>::create());
    ax->ticker()->setTickCount(ax == plot->xAxis ? 4 : 5);  // readable in a narrow column
  }
  if (!c.xTickLabels.empty()) {
    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    for (size_t i = 0; i < c.xTickLabels.size(); ++i) ticker->addTick(double(i), q(c.xTickLabels[i]));
    ticker->setTickCount(int(c.xTickLabels.size()));  // every category labelled
    plot->xAxis->setTicker(ticker);
    plot->xAxis->setTickLabelRotation(c.xTickLabels.size() > 3 ? 25 : 0);
  } else {
    plot->xAxis->setTickLabelRotation(0);
  }
  int bars = 0;
  for (const auto& s : c.series) bars += s.style == ChartSeries::Style::Bars;
  int i = 0;
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
  for (const auto& s : c.series) {
    const QColor col = kColors[i++ % 6];
    QVector<double> x(s.x.begin(), s.x.end()), y(s.y.begin(), s.y.end());
    for (size_t k = 0; k < s.x.size(); ++k) {
      if (c.logY && !(s.y[k] > 0)) continue;
      if (c.logX && !(s.x[k] > 0)) continue;
      xmin = std::min(xmin, s.x[k]), xmax = std::max(xmax, s.x[k]);
      ymin = std::min(ymin, s.y[k]), ymax = std::max(ymax, s.y[k]);
    }
    if (s.style == ChartSeries::Style::Bars) {
      auto* b = new QCPBars(plot->xAxis, plot->yAxis);
      b->setName(q(s.name));
      b->setPen(QPen(col.darker(130)));
      b->setBrush(col);
      b->setWidth(s.x.size() > 64 ? 1.0 : 0.7);
      b->setData(x, y, true);
      if (bars > 1) b->setWidthType(QCPBars::wtPlotCoords);
    } else {
      QCPGraph* g = plot->addGraph();
      g->setName(q(s.name));
      g->setPen(QPen(col, 2));
      if (s.style == ChartSeries::Style::Points) {
        g->setLineStyle(QCPGraph::lsNone);
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, col, col, 8));
      }
      g->setData(x, y, true);
    }
  }
  if (std::isfinite(xmin)) {
    const bool anyBars = bars > 0;
    double padX = anyBars ? 0.6 : (xmax - xmin) * 0.03;
    if (c.logX) {
      plot->xAxis->setRange(xmin / 1.5, xmax * 1.5);
    } else {
      if (padX == 0) padX = 0.5;
      plot->xAxis->setRange(xmin - padX, xmax + padX);
    }
    if (c.logY) {
      plot->yAxis->setRange(ymin / 1.6, ymax * 1.6);
    } else {
      const double lo = anyBars ? std::min(0.0, ymin) : ymin;
      double pad = (ymax - lo) * 0.08;
      if (pad == 0) pad = std::fabs(ymax) * 0.1 + 1e-9;
      plot->yAxis->setRange(lo - (anyBars && lo == 0 ? 0 : pad), ymax + pad);
    }
  }
  plot->legend->setVisible(c.series.size() > 1);
  plot->replot();
}

}  // namespace

LabsPanel::LabsPanel(app::JobRunner* jobs, QWidget* parent) : QWidget(parent), jobs_(jobs) {
  initLabResources();
  setObjectName(QStringLiteral("labsPanel"));
  if (!jobs_) {
    ownJobs_ = std::make_unique<app::JobRunner>();
    jobs_ = ownJobs_.get();
  }
  buildUi();
  connect(jobs_, &app::JobRunner::jobProgress, this, [this](quint64 id, double f, const QString& stage) {
    if (id != runId_) return;
    progress_->setValue(int(f * 1000));
    progress_->setFormat(stage);
  });
  connect(jobs_, &app::JobRunner::jobStarted, this, [this](quint64 id, const QString&) {
    if (id == runId_) progress_->setValue(0);
  });
  connect(jobs_, &app::JobRunner::jobFailed, this, [this](quint64 id, const QString&, const QString& message) {
    if (id != runId_) return;
    run_->setEnabled(true);
    cancel_->setEnabled(false);
    progress_->hide();
    clearResult(tr("The experiment failed: %1").arg(message));
    emit experimentFailed(current_, message);
  });
  connect(jobs_, &app::JobRunner::jobCancelled, this, [this](quint64 id, const QString&) {
    if (id != runId_) return;
    run_->setEnabled(true);
    cancel_->setEnabled(false);
    progress_->hide();
    status_->setText(tr("Cancelled."));
  });
}

LabsPanel::~LabsPanel() {
  if (jobs_) jobs_->cancel(QStringLiteral("lab"));
  ownJobs_.reset();  // joins our own worker (if any) before the widgets go
}

void LabsPanel::buildUi() {
  list_ = new QListWidget;
  list_->setObjectName(QStringLiteral("labList"));
  list_->setMinimumWidth(220);
  for (const LabDef& d : labCatalog()) {
    auto* item = new QListWidgetItem(list_);
    item->setData(Qt::UserRole, d.number);
    item->setToolTip(q(d.keyIdea) + (d.fullyInteractive ? QString() : tr("\n(text, experiment and checker)")));
  }
  refreshList();

  text_ = new QTextBrowser;
  text_->setObjectName(QStringLiteral("labText"));
  text_->setOpenExternalLinks(false);
  text_->setMinimumWidth(220);

  // The experiment column.
  controlsBox_ = new QGroupBox(tr("Experiment"));
  auto* cv = new QVBoxLayout(controlsBox_);
  form_ = new QFormLayout;
  form2_ = new QFormLayout;
  auto* forms = new QHBoxLayout;
  forms->addLayout(form_, 1);
  forms->addLayout(form2_, 1);
  cv->addLayout(forms);
  auto* buttons = new QHBoxLayout;
  run_ = new QPushButton(tr("Run"));
  run_->setObjectName(QStringLiteral("labRun"));
  cancel_ = new QPushButton(tr("Cancel"));
  cancel_->setObjectName(QStringLiteral("labCancel"));
  cancel_->setEnabled(false);
  progress_ = new QProgressBar;
  progress_->setRange(0, 1000);
  progress_->setTextVisible(true);
  progress_->hide();
  status_ = new QLabel;
  status_->setWordWrap(true);
  buttons->addWidget(run_);
  buttons->addWidget(cancel_);
  buttons->addWidget(progress_, 1);
  cv->addLayout(buttons);
  cv->addWidget(status_);
  connect(run_, &QPushButton::clicked, this, &LabsPanel::runExperiment);
  connect(cancel_, &QPushButton::clicked, this, [this] {
    // A cancelled job delivers nothing, and one still queued is dropped without a signal:
    // the panel forgets it at once.
    jobs_->cancel(QStringLiteral("lab"));
    runId_ = 0;
    run_->setEnabled(true);
    cancel_->setEnabled(false);
    progress_->hide();
    status_->setText(tr("Cancelled."));
  });

  summary_ = new QTextBrowser;
  summary_->setObjectName(QStringLiteral("labSummary"));
  summary_->setMinimumHeight(70);
  auto* plots = new QWidget;
  plotGrid_ = new QGridLayout(plots);
  plotGrid_->setContentsMargins(0, 0, 0, 0);
  for (int i = 0; i < 2; ++i) {
    hist_[i] = new widgets::HistogramPlot;
    hist_[i]->setMinimumSize(220, 160);
  }
  for (int i = 0; i < 2; ++i) {
    chart_[i] = new QCustomPlot;
    chart_[i]->setMinimumSize(220, 160);
    chart_[i]->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    chart_[i]->legend->setFont(QFont(font().family(), 8));
    widgets::installPlotExportMenu(chart_[i]);
  }
  // Parented from the start (a shown widget without a parent would be a window of its own).
  plotGrid_->addWidget(hist_[0], 0, 0);
  plotGrid_->addWidget(hist_[1], 0, 1);
  plotGrid_->addWidget(chart_[0], 1, 0);
  plotGrid_->addWidget(chart_[1], 1, 1);
  table_ = new QTableWidget;
  table_->setObjectName(QStringLiteral("labTable"));
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->verticalHeader()->hide();
  table_->setAlternatingRowColors(true);
  table_->horizontalHeader()->setStretchLastSection(true);

  auto* exercise = new QGroupBox(tr("Exercise"));
  exercise->setObjectName(QStringLiteral("labExercise"));
  auto* ev = new QVBoxLayout(exercise);
  prompt_ = new QLabel;
  prompt_->setWordWrap(true);
  auto* answerRow = new QHBoxLayout;
  answerChoice_ = new QComboBox;
  answerChoice_->setObjectName(QStringLiteral("labAnswerChoice"));
  answerChoice_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  answerText_ = new QLineEdit;
  answerText_->setObjectName(QStringLiteral("labAnswerText"));
  answerText_->setPlaceholderText(tr("your answer"));
  checkButton_ = new QPushButton(tr("Check"));
  checkButton_->setObjectName(QStringLiteral("labCheck"));
  showAnswer_ = new QPushButton(tr("Show answer"));
  answerRow->addWidget(answerChoice_, 1);
  answerRow->addWidget(answerText_, 1);
  checkButton_->setSizePolicy(QSizePolicy::Maximum, QSizePolicy::Fixed);
  answerRow->addWidget(checkButton_);
  showAnswer_->setSizePolicy(QSizePolicy::Maximum, QSizePolicy::Fixed);
  answerRow->addWidget(showAnswer_);
  answerRow->addStretch(0);
  feedback_ = new QLabel;
  feedback_->setObjectName(QStringLiteral("labFeedback"));
  feedback_->setWordWrap(true);
  ev->addWidget(prompt_);
  ev->addLayout(answerRow);
  ev->addWidget(feedback_);
  connect(answerText_, &QLineEdit::returnPressed, checkButton_, &QPushButton::click);
  connect(checkButton_, &QPushButton::clicked, this, [this] {
    if (!answerText_->isVisible() && answerChoice_->isVisible() && answerChoice_->currentIndex() <= 0 &&
        result_ && !result_->settingsExercise) {
      feedback_->setText(tr("Pick an answer first."));
      return;
    }
    check(answerText_->isVisible() ? answerText_->text().toStdString() : answerChoice_->currentText().toStdString());
  });
  connect(showAnswer_, &QPushButton::clicked, this, [this] {
    if (!result_) return;
    if (result_->settingsExercise) {
      loadingControls_ = true;
      for (const auto& [k, v] : result_->answerParams) setParam(k, v);
      loadingControls_ = false;
      feedback_->setText(tr("The planner's settings are in the controls: run, then check."));
      runExperiment();
    } else if (answerText_->isVisible()) {
      answerText_->setText(q(result_->answerKey));
    } else {
      answerChoice_->setCurrentText(q(result_->answerKey));
    }
  });

  auto* results = new QSplitter(Qt::Vertical);
  results_ = results;
  results->addWidget(summary_);
  results->addWidget(plots);
  results->addWidget(table_);
  results->setStretchFactor(0, 1);
  results->setStretchFactor(1, 4);
  results->setStretchFactor(2, 2);
  results->setChildrenCollapsible(false);
  results->setSizes({90, 430, 180});

  auto* right = new QWidget;
  auto* rv = new QVBoxLayout(right);
  rv->setContentsMargins(0, 0, 0, 0);
  rv->addWidget(controlsBox_);
  rv->addWidget(results, 1);
  rv->addWidget(exercise);

  // Two columns: the list above the chapter's text, the experiment beside them.
  auto* left = new QSplitter(Qt::Vertical);
  left->addWidget(list_);
  left->addWidget(text_);
  left->setStretchFactor(0, 0);
  left->setStretchFactor(1, 1);
  left->setChildrenCollapsible(false);
  list_->setMinimumHeight(list_->sizeHintForRow(0) * 6);
  left->setSizes({list_->sizeHintForRow(0) * 18 + 6, 400});

  auto* split = new QSplitter(Qt::Horizontal);
  split->addWidget(left);
  split->addWidget(right);
  split->setStretchFactor(0, 0);
  split->setStretchFactor(1, 1);
  split->setChildrenCollapsible(false);
  split->setSizes({280, 1000});

  auto* h = new QHBoxLayout(this);
  h->setContentsMargins(4, 4, 4, 4);
  h->addWidget(split, 1);

  rerun_ = new QTimer(this);
  rerun_->setSingleShot(true);
  rerun_->setInterval(200);
  connect(rerun_, &QTimer::timeout, this, &LabsPanel::runExperiment);
  connect(list_, &QListWidget::currentRowChanged, this, &LabsPanel::showLab);
  clearResult(tr("Open a model to run the experiments."));
}

const LabDef& LabsPanel::def() const {
  for (const LabDef& d : labCatalog())
    if (d.number == current_) return d;
  return labCatalog().front();
}

bool LabsPanel::isDone(int number) { return QSettings().value(doneKey(number), false).toBool(); }

void LabsPanel::resetProgress() { QSettings().remove(QStringLiteral("labs/done")); }

void LabsPanel::refreshList() {
  for (int i = 0; i < list_->count(); ++i) {
    QListWidgetItem* item = list_->item(i);
    const int n = item->data(Qt::UserRole).toInt();
    const LabDef& d = labCatalog()[size_t(i)];
    item->setText(QStringLiteral("%1 %2. %3").arg(isDone(n) ? QStringLiteral("✓") : QStringLiteral("   ")).arg(n).arg(q(d.title)));
    QFont f = item->font();
    f.setBold(isDone(n));
    item->setFont(f);
  }
}

void LabsPanel::setEngine(std::shared_ptr<Engine> engine) {
  jobs_->cancel(QStringLiteral("lab"));
  runId_ = 0;
  env_ = engine ? std::make_shared<LabEnv>(std::move(engine)) : nullptr;
  if (current_) {
    rebuildControls();
    runExperiment();
  } else {
    clearResult(env_ ? tr("Pick a lab on the left.") : tr("Open a model to run the experiments."));
  }
}

void LabsPanel::openLab(int number) {
  for (int i = 0; i < list_->count(); ++i)
    if (list_->item(i)->data(Qt::UserRole).toInt() == number) {
      if (list_->currentRow() == i)
        showLab(i);
      else
        list_->setCurrentRow(i);
      return;
    }
}

void LabsPanel::showLab(int index) {
  if (index < 0 || index >= int(labCatalog().size())) return;
  jobs_->cancel(QStringLiteral("lab"));
  runId_ = 0;
  const LabDef& d = labCatalog()[size_t(index)];
  current_ = d.number;
  QFile f(q(labTextResource(d.number)));
  if (f.open(QIODevice::ReadOnly))
    text_->setMarkdown(QString::fromUtf8(f.readAll()));
  else
    text_->setPlainText(tr("The text of chapter %1 is missing from the resources.").arg(d.number));
  controlsBox_->setTitle(tr("Experiment — chapter %1%2").arg(d.number).arg(d.fullyInteractive ? QString() : tr(" (text, experiment and checker)")));
  rebuildControls();
  clearResult(env_ ? tr("Running…") : tr("Open a model to run the experiments."));
  if (env_) runExperiment();
}

void LabsPanel::rebuildControls() {
  while (form_->rowCount() > 0) form_->removeRow(0);
  while (form2_->rowCount() > 0) form2_->removeRow(0);
  controls_.clear();
  if (!env_ || !current_) return;
  const LabDef& d = def();
  QSettings settings;
  loadingControls_ = true;
  const std::vector<LabParam> all = d.params(*env_);
  for (const LabParam& p : all) {
    const QString saved = settings.value(QStringLiteral("labs/params/%1/%2").arg(d.number).arg(q(p.key))).toString();
    QWidget* w = nullptr;
    if (p.kind == LabParam::Kind::Choice) {
      auto* c = new QComboBox;
      for (const auto& s : p.choices) c->addItem(q(s));
      c->setCurrentIndex(std::max(0, c->findText(q(p.initial))));
      if (!saved.isEmpty() && c->findText(saved) >= 0) c->setCurrentText(saved);
      connect(c, &QComboBox::currentTextChanged, this, &LabsPanel::paramsChanged);
      w = c;
    } else {
      auto* s = new QDoubleSpinBox;
      s->setRange(p.min, p.max);
      s->setSingleStep(p.step);
      s->setDecimals(p.decimals);
      s->setValue(p.value);
      bool ok = false;
      const double v = saved.toDouble(&ok);
      if (ok) s->setValue(v);
      connect(s, &QDoubleSpinBox::valueChanged, this, &LabsPanel::paramsChanged);
      w = s;
    }
    w->setObjectName(QStringLiteral("labParam_") + q(p.key));
    // Many controls: two columns, so the results keep their room.
    (all.size() > 4 && controls_.size() >= (all.size() + 1) / 2 ? form2_ : form_)->addRow(q(p.label), w);
    controls_.emplace_back(p, w);
  }
  loadingControls_ = false;
}

LabParams LabsPanel::params() const {
  LabParams p;
  for (const auto& [param, w] : controls_) {
    if (auto* c = qobject_cast<QComboBox*>(w))
      p[param.key] = c->currentText().toStdString();
    else if (auto* s = qobject_cast<QDoubleSpinBox*>(w))
      p[param.key] = QString::number(s->value(), 'f', param.decimals).toStdString();
  }
  return p;
}

bool LabsPanel::setParam(const std::string& key, const std::string& value) {
  for (const auto& [param, w] : controls_) {
    if (param.key != key) continue;
    if (auto* c = qobject_cast<QComboBox*>(w)) {
      const int i = c->findText(q(value));
      if (i < 0) return false;
      c->setCurrentIndex(i);
    } else if (auto* s = qobject_cast<QDoubleSpinBox*>(w)) {
      bool ok = false;
      const double v = q(value).toDouble(&ok);
      if (!ok) return false;
      s->setValue(v);
    }
    return true;
  }
  return false;
}

void LabsPanel::saveParams() const {
  QSettings settings;
  for (const auto& [k, v] : params()) settings.setValue(QStringLiteral("labs/params/%1/%2").arg(current_).arg(q(k)), q(v));
}

void LabsPanel::paramsChanged() {
  if (loadingControls_) return;
  dirty_ = true;
  saveParams();
  if (def().rerunOnChange)
    rerun_->start();
  else
    status_->setText(tr("Settings changed: press Run."));
}

void LabsPanel::runExperiment() {
  rerun_->stop();
  if (!env_ || !current_) return;
  const LabDef& d = def();
  const LabParams p = params();
  std::shared_ptr<LabEnv> env = env_;
  const int number = d.number;
  auto run = d.run;
  run_->setEnabled(false);
  cancel_->setEnabled(true);
  progress_->setValue(0);
  progress_->setFormat(tr("starting"));
  progress_->show();
  status_->setText(tr("Running…"));
  runId_ = jobs_->submit(QStringLiteral("lab"), tr("Lab %1: %2").arg(number).arg(q(d.title)),
                         [this, env, p, number, run](const JobContext& ctx) -> std::function<void()> {
                           const Engine::Use use{env->engine()};  // a failed lab gets the next job a fresh runtime
                           auto result = std::make_shared<LabResult>(run(*env, p, ctx));
                           return [this, self = QPointer<LabsPanel>(this), result, p, number, env] {
                             if (!self || number != current_ || env != env_) return;
                             result_ = std::move(*result);
                             resultParams_ = p;
                             dirty_ = params() != p;
                             run_->setEnabled(true);
                             cancel_->setEnabled(false);
                             progress_->hide();
                             showResult();
                             emit experimentFinished(number);
                           };
                         });
}

void LabsPanel::clearResult(const QString& status) {
  result_.reset();
  status_->setText(status);
  summary_->clear();
  for (auto* h : hist_) h->hide();
  for (auto* c : chart_) c->hide();
  table_->clear();
  table_->setRowCount(0);
  table_->setColumnCount(0);
  prompt_->setText(QString());
  feedback_->clear();
  answerChoice_->hide();
  answerText_->hide();
  checkButton_->setEnabled(false);
  showAnswer_->setEnabled(false);
}

void LabsPanel::showResult() {
  const LabResult& r = *result_;
  status_->setText(tr("Done."));
  summary_->setMarkdown(q(r.summary));
  for (int i = 0; i < 2; ++i) {
    if (size_t(i) < r.histograms.size()) {
      const LabHistogram& h = r.histograms[size_t(i)];
      std::vector<widgets::HistogramSeries> s;
      int c = 0;
      for (const auto& hs : h.series)
        s.push_back({q(hs.name), hs.lo, hs.hi, hs.counts, kColors[c++ % 6], true});
      hist_[i]->setTitle(q(h.title));
      hist_[i]->setLogScale(h.logScale);
      hist_[i]->setSeries(std::move(s));
      hist_[i]->setGrid(h.grid, h.clipLo, h.clipHi);
      hist_[i]->resetView();
      hist_[i]->show();
    } else {
      hist_[i]->hide();
    }
    if (size_t(i) < r.charts.size()) {
      drawChart(chart_[i], r.charts[size_t(i)]);
      chart_[i]->show();
    } else {
      chart_[i]->hide();
    }
  }
  // One row of plots when there are one or two, a 2 × 2 grid for more (the last one spanning).
  std::vector<QWidget*> shown;
  for (QWidget* w : {static_cast<QWidget*>(hist_[0]), static_cast<QWidget*>(hist_[1]),
                     static_cast<QWidget*>(chart_[0]), static_cast<QWidget*>(chart_[1])}) {
    plotGrid_->removeWidget(w);
    if (!w->isHidden()) shown.push_back(w);
  }
  const int columns = shown.size() <= 2 ? int(shown.size()) : 2;
  for (size_t i = 0; i < shown.size(); ++i) {
    const bool last = i + 1 == shown.size();
    plotGrid_->addWidget(shown[i], int(i) / std::max(columns, 1), int(i) % std::max(columns, 1), 1,
                         last && columns == 2 && i % 2 == 0 ? 2 : 1);
  }
  // The summary gets the height its text needs (within limits); plots take most of the rest.
  summary_->document()->setTextWidth(summary_->viewport()->width());
  const int need = std::clamp(int(summary_->document()->size().height()) + 16, 50, 220);
  const int total = std::max(results_->height(), 500);
  const int plotsH = (total - need) * (shown.size() > 2 ? 80 : 68) / 100;
  results_->widget(1)->setVisible(!shown.empty());
  if (shown.empty())
    results_->setSizes({need, 0, total - need});
  else
    results_->setSizes({need, plotsH, std::max(total - need - plotsH, 80)});

  table_->clear();
  table_->setColumnCount(int(r.table.headers.size()));
  table_->setRowCount(int(r.table.rows.size()));
  QStringList headers;
  for (const auto& h : r.table.headers) headers << q(h);
  table_->setHorizontalHeaderLabels(headers);
  for (size_t row = 0; row < r.table.rows.size(); ++row)
    for (size_t col = 0; col < r.table.rows[row].size() && col < r.table.headers.size(); ++col)
      table_->setItem(int(row), int(col), new QTableWidgetItem(q(r.table.rows[row][col])));
  table_->resizeColumnsToContents();
  table_->resizeRowsToContents();

  prompt_->setText(QStringLiteral("<b>%1</b> %2").arg(isDone(current_) ? tr("✓ Solved.") : QString(), q(r.exercisePrompt).toHtmlEscaped()));
  // Another lab's answer never carries over, and no option is pre-selected (the first one may be
  // the right answer): the list starts at a placeholder.
  QString previous = answerChoice_->currentIndex() > 0 ? answerChoice_->currentText() : QString();
  if (answerLab_ != current_) {
    previous.clear();
    answerText_->clear();
    feedback_->clear();
    answerLab_ = current_;
  }
  answerChoice_->clear();
  answerChoice_->addItem(tr("— choose an answer —"));
  for (const auto& o : r.exerciseOptions) answerChoice_->addItem(q(o));
  answerChoice_->setCurrentIndex(std::max(0, previous.isEmpty() ? 0 : answerChoice_->findText(previous)));
  answerChoice_->setVisible(!r.settingsExercise && !r.exerciseOptions.empty());
  answerText_->setVisible(!r.settingsExercise && r.exerciseOptions.empty());
  checkButton_->setText(r.settingsExercise ? tr("Check my settings") : tr("Check"));
  checkButton_->setEnabled(true);
  showAnswer_->setEnabled(true);
}

CheckResult LabsPanel::check(const std::string& answer) {
  if (!result_) return {false, "Run the experiment first."};
  CheckResult c;
  if (result_->settingsExercise && dirty_)
    c = {false, "The settings changed since the last run: run the experiment with them first."};
  else
    c = result_->check ? result_->check(answer) : CheckResult{false, "This run has no exercise."};
  feedback_->setText(QStringLiteral("<span style='color:%1'><b>%2</b></span> %3")
                         .arg(c.correct ? QStringLiteral("#2a7d2a") : QStringLiteral("#b03030"),
                              c.correct ? tr("Correct.") : tr("Not yet."), q(c.message).toHtmlEscaped()));
  if (c.correct && !isDone(current_)) {
    QSettings().setValue(doneKey(current_), true);
    refreshList();
    emit labCompleted(current_);
  }
  return c;
}

}  // namespace qs::labs
