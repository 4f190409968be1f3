#include "widgets/run_view.h"

#include <QComboBox>
#include <QScrollArea>
#include <QToolTip>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <qcustomplot.h>

#include "widgets/plot_export.h"
#include "widgets/plot_tickers.h"

namespace qs::widgets {

namespace {
// Distinguishable line colours for overlaid runs (Tableau 10 order).
QColor runColor(int i) {
  static const QColor palette[] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44}, {214, 39, 40},
                                   {148, 103, 189}, {140, 86, 75}, {227, 119, 194}, {127, 127, 127},
                                   {188, 189, 34}, {23, 190, 207}};
  return palette[i % 10];
}

QString fmt(double v, int prec, const QString& suffix = {}) {
  return std::isfinite(v) ? QString::number(v, 'g', prec) + suffix : QStringLiteral("–");
}

QString bytesText(double b) {
  if (!std::isfinite(b)) return QStringLiteral("–");
  if (b >= 1 << 30) return QString::number(b / double(1 << 30), 'f', 2) + QStringLiteral(" GiB");
  if (b >= 1 << 20) return QString::number(b / double(1 << 20), 'f', 2) + QStringLiteral(" MiB");
  return QString::number(b / 1024.0, 'f', 1) + QStringLiteral(" KiB");
}

void addTitle(QCustomPlot* p, const QString& text) {
  p->plotLayout()->insertRow(0);
  p->plotLayout()->addElement(0, 0, new QCPTextElement(p, text, QFont(p->font().family(), 10, QFont::Bold)));
}
QCPTextElement* title(QCustomPlot* p) { return qobject_cast<QCPTextElement*>(p->plotLayout()->element(0, 0)); }
}  // namespace

RunView::RunView(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("runView"));
  errPlot_ = new QCustomPlot;
  errPlot_->setObjectName(QStringLiteral("runErrorPlot"));
  errPlot_->xAxis->setLabel(tr("block"));
  errPlot_->yAxis->setLabel(tr("relative L2 error of the residual stream"));
  errPlot_->yAxis->setScaleType(QCPAxis::stLogarithmic);
  errPlot_->yAxis->setTicker(makeLogTicker());
  errPlot_->xAxis->setTicker(makeIntegerTicker());
  errPlot_->legend->setVisible(true);
  errPlot_->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignBottom | Qt::AlignRight);
  addTitle(errPlot_, tr("Error accumulation"));

  cosPlot_ = new QCustomPlot;
  cosPlot_->setObjectName(QStringLiteral("runCosinePlot"));
  cosPlot_->xAxis->setLabel(tr("block"));
  cosPlot_->xAxis->setTicker(makeIntegerTicker());
  cosPlot_->yAxis->setLabel(tr("cosine similarity"));

  speedPlot_ = new QCustomPlot;
  speedPlot_->setObjectName(QStringLiteral("runSpeedPlot"));
  speedPlot_->xAxis->setLabel(tr("speedup over baseline (×)"));
  speedPlot_->yAxis->setRangeReversed(true);  // first layer at the top
  addTitle(speedPlot_, tr("Speedup per layer"));

  for (QCustomPlot* p : {errPlot_, cosPlot_, speedPlot_}) {
    if (p != speedPlot_) p->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);  // the speed chart scrolls
    p->setMinimumHeight(160);
    installPlotExportMenu(p);
  }
  // The speed chart: one readable bar per layer (it grows and scrolls), a read-out on hover and
  // the layer on click.
  speedPlot_->setMouseTracking(true);
  speedPlot_->yAxis->setTickLabelFont(QFont(font().family(), 8));
  connect(speedPlot_, &QCustomPlot::mouseMove, this, [this](QMouseEvent* ev) {
    const QString text = speedBarText(speedBarAt(ev->pos()));
    if (text.isEmpty()) QToolTip::hideText();
    else QToolTip::showText(speedPlot_->mapToGlobal(ev->pos()), text, speedPlot_);
  });
  connect(speedPlot_, &QCustomPlot::mousePress, this, [this](QMouseEvent* ev) {
    const RunSpeed* s = shownSpeed();
    const int i = speedBarAt(ev->pos());
    if (s && ev->button() == Qt::LeftButton && i >= 0 && i < s->weightNames.size()) emit layerClicked(s->weightNames[i]);
  });

  speedRun_ = new QComboBox;
  speedRun_->setObjectName(QStringLiteral("speedRunCombo"));
  connect(speedRun_, &QComboBox::currentIndexChanged, this, [this] { rebuildSpeed(); });

  table_ = new QTableWidget(0, 8);
  table_->setObjectName(QStringLiteral("runMetricsTable"));
  table_->setHorizontalHeaderLabels({tr("plan"), tr("perplexity"), tr("Δ perplexity"), tr("KL (nats)"),
                                     tr("top-1 agreement"), tr("batches"), tr("weights"), tr("speedup")});
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->verticalHeader()->setVisible(false);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setMaximumHeight(150);

  auto* left = new QSplitter(Qt::Vertical);
  left->addWidget(errPlot_);
  left->addWidget(cosPlot_);
  left->setStretchFactor(0, 3);
  left->setStretchFactor(1, 2);
  auto* right = new QWidget;
  auto* rl = new QVBoxLayout(right);
  rl->setContentsMargins(0, 0, 0, 0);
  auto* pick = new QHBoxLayout;
  pick->addWidget(new QLabel(tr("Speed of")));
  pick->addWidget(speedRun_, 1);
  rl->addLayout(pick);
  auto* speedScroll = new QScrollArea;
  speedScroll->setWidget(speedPlot_);
  speedScroll->setWidgetResizable(true);
  speedScroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  speedScroll->setFrameShape(QFrame::NoFrame);
  rl->addWidget(speedScroll, 1);
  auto* split = new QSplitter(Qt::Horizontal);
  split->addWidget(left);
  split->addWidget(right);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  auto* outer = new QVBoxLayout(this);
  outer->addWidget(split, 1);
  outer->addWidget(table_);
  rebuildSpeed();
}

const RunCurve* RunView::run(const QString& name) const {
  for (const Entry& e : runs_)
    if (e.curve.name == name) return &e.curve;
  return nullptr;
}

QStringList RunView::runNames() const {
  QStringList n;
  for (const Entry& e : runs_) n << e.curve.name;
  return n;
}

void RunView::setRun(const RunCurve& run) {
  auto it = std::find_if(runs_.begin(), runs_.end(), [&](const Entry& e) { return e.curve.name == run.name; });
  if (it == runs_.end()) {
    runs_.push_back({run, {}, false});
  } else {
    it->curve = run;
  }
  rebuildCurves();
  rebuildTable();
}

void RunView::setSpeed(const QString& runName, const RunSpeed& speed) {
  auto it = std::find_if(runs_.begin(), runs_.end(), [&](const Entry& e) { return e.curve.name == runName; });
  if (it == runs_.end()) {
    RunCurve c;
    c.name = runName;
    runs_.push_back({c, {}, false});
    it = runs_.end() - 1;
    rebuildCurves();
  }
  it->speed = speed;
  it->hasSpeed = true;
  const QSignalBlocker block(speedRun_);
  const QString current = speedRun_->currentText();
  speedRun_->clear();
  for (const Entry& e : runs_)
    if (e.hasSpeed) speedRun_->addItem(e.curve.name);
  speedRun_->setCurrentIndex(std::max(0, speedRun_->findText(current.isEmpty() ? runName : current)));
  rebuildSpeed();
  rebuildTable();
}

void RunView::removeRun(const QString& name) {
  std::erase_if(runs_, [&](const Entry& e) { return e.curve.name == name; });
  if (int i = speedRun_->findText(name); i >= 0) speedRun_->removeItem(i);
  rebuildCurves();
  rebuildSpeed();
  rebuildTable();
}

const RunSpeed* RunView::shownSpeed() const {
  for (const Entry& r : runs_)
    if (r.hasSpeed && r.curve.name == speedRun_->currentText()) return &r.speed;
  return nullptr;
}

int RunView::speedBarAt(const QPoint& pos) const {
  const RunSpeed* s = shownSpeed();
  if (!s || !speedPlot_->axisRect()->rect().contains(pos)) return -1;
  const int i = int(std::lround(speedPlot_->yAxis->pixelToCoord(pos.y())));
  return i >= 0 && i < s->layers.size() ? i : -1;
}

QString RunView::speedBarText(int i) const {
  const RunSpeed* s = shownSpeed();
  if (!s || i < 0 || i >= s->layers.size()) return {};
  const double v = i < int(s->speedup.size()) ? s->speedup[size_t(i)] : RunCurve::nan;
  return tr("<b>%1</b><br>%2<br>speedup %3 over %4<br><small>click: open the layer</small>")
      .arg(s->layers[i].toHtmlEscaped(), i < s->weightNames.size() ? s->weightNames[i].toHtmlEscaped() : QString(),
           fmt(v, 3, QStringLiteral("×")), s->baseline.toHtmlEscaped());
}

void RunView::clear() {
  runs_.clear();
  speedRun_->clear();
  rebuildCurves();
  rebuildSpeed();
  rebuildTable();
}

int RunView::drawnPoints(const QString& name) const {
  const RunCurve* c = run(name);
  if (!c) return 0;
  return int(std::count_if(c->relL2.begin(), c->relL2.end(), [](double v) { return std::isfinite(v) && v > 0; }));
}

void RunView::rebuildCurves() {
  errPlot_->clearGraphs();
  cosPlot_->clearGraphs();
  double lo = 1e300, hi = 0, cosLo = 1.0;
  size_t blocks = 1;
  for (size_t r = 0; r < runs_.size(); ++r) {
    const RunCurve& c = runs_[r].curve;
    QPen pen(runColor(int(r)), 2);
    QCPGraph* g = errPlot_->addGraph();
    g->setName(c.name);
    g->setPen(pen);
    g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 5));
    QCPGraph* gc = cosPlot_->addGraph();
    gc->setPen(pen);
    gc->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 5));
    blocks = std::max({blocks, c.relL2.size(), c.cosine.size()});
    for (size_t b = 0; b < c.relL2.size(); ++b) {
      const double v = c.relL2[b];
      if (!std::isfinite(v) || v <= 0) continue;  // not yet measured (log axis: no zeros)
      g->addData(double(b), v);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    for (size_t b = 0; b < c.cosine.size(); ++b) {
      if (!std::isfinite(c.cosine[b])) continue;
      gc->addData(double(b), c.cosine[b]);
      cosLo = std::min(cosLo, c.cosine[b]);
    }
  }
  errPlot_->xAxis->setRange(-0.5, double(blocks) - 0.5);
  cosPlot_->xAxis->setRange(-0.5, double(blocks) - 0.5);
  if (hi > 0) errPlot_->yAxis->setRange(lo / 2, hi * 2);
  else errPlot_->yAxis->setRange(1e-4, 1);
  cosPlot_->yAxis->setRange(std::min(cosLo, 0.999) - (1 - std::min(cosLo, 0.999)) * 0.2, 1.0 + 1e-4);
  errPlot_->legend->setVisible(!runs_.empty());
  errPlot_->replot();
  cosPlot_->replot();
}

void RunView::rebuildSpeed() {
  speedPlot_->clearPlottables();
  const Entry* e = nullptr;
  for (const Entry& r : runs_)
    if (r.hasSpeed && r.curve.name == speedRun_->currentText()) e = &r;
  if (!e) {
    // No labels of a previous model or run may stay behind (issue 27: GPT-2 with SmolLM2's names).
    speedPlot_->yAxis->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
    speedPlot_->yAxis->setRange(0, 1);
    speedPlot_->setMinimumHeight(160);
    title(speedPlot_)->setText(tr("Speedup per layer (no measurement yet)"));
    speedPlot_->replot();
    return;
  }
  auto* bars = new QCPBars(speedPlot_->yAxis, speedPlot_->xAxis);  // horizontal bars
  bars->setPen(Qt::NoPen);
  QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
  double maxS = 1.0;
  for (int i = 0; i < e->speed.layers.size(); ++i) {
    const double s = i < int(e->speed.speedup.size()) ? e->speed.speedup[size_t(i)] : RunCurve::nan;
    ticker->addTick(i, e->speed.layers[i]);
    if (!std::isfinite(s)) continue;
    bars->addData(i, s);
    maxS = std::max(maxS, s);
  }
  // Green where the layer got faster, red where slower than the baseline.
  bars->setBrush(QColor(60, 150, 90));
  auto* slower = new QCPBars(speedPlot_->yAxis, speedPlot_->xAxis);
  slower->setPen(Qt::NoPen);
  slower->setBrush(QColor(200, 70, 50));
  for (int i = 0; i < e->speed.layers.size() && i < int(e->speed.speedup.size()); ++i)
    if (std::isfinite(e->speed.speedup[size_t(i)]) && e->speed.speedup[size_t(i)] < 1.0)
      slower->addData(i, e->speed.speedup[size_t(i)]);
  // Grey where the layer stays FP16 (exactly the baseline, 1×): neither faster nor slower.
  auto* same = new QCPBars(speedPlot_->yAxis, speedPlot_->xAxis);
  same->setPen(Qt::NoPen);
  same->setBrush(QColor(160, 160, 160));
  for (int i = 0; i < e->speed.layers.size() && i < int(e->speed.speedup.size()); ++i)
    if (e->speed.speedup[size_t(i)] == 1.0) same->addData(i, 1.0);
  speedPlot_->yAxis->setTicker(ticker);
  speedPlot_->yAxis->setRange(-0.7, e->speed.layers.size() - 0.3);
  speedPlot_->setMinimumHeight(std::max(160, int(e->speed.layers.size()) * kRowPixels + 100));
  speedPlot_->xAxis->setRange(0, maxS * 1.1);
  auto* one = new QCPItemStraightLine(speedPlot_);  // the baseline: 1×
  one->point1->setCoords(1, 0);
  one->point2->setCoords(1, 1);
  one->setPen(QPen(Qt::gray, 1, Qt::DashLine));
  title(speedPlot_)->setText(tr("Speedup per layer — whole model %1×").arg(fmt(e->speed.wholeModel, 3)));
  speedPlot_->xAxis->setLabel(e->speed.baseline.isEmpty() ? tr("speedup over baseline (×)")
                                                          : tr("speedup over %1 (×)").arg(e->speed.baseline));
  speedPlot_->replot();
}

void RunView::rebuildTable() {
  table_->setRowCount(int(runs_.size()));
  for (int r = 0; r < int(runs_.size()); ++r) {
    const Entry& e = runs_[size_t(r)];
    const RunCurve& c = e.curve;
    const double dppl = std::isfinite(c.basePerplexity) && c.basePerplexity > 0
                            ? 100.0 * (c.perplexity / c.basePerplexity - 1.0)
                            : RunCurve::nan;
    QString weights = bytesText(c.weightBytes);
    if (std::isfinite(c.weightBytes) && std::isfinite(c.baseWeightBytes) && c.weightBytes > 0)
      weights += QStringLiteral(" (%1×)").arg(c.baseWeightBytes / c.weightBytes, 0, 'f', 2);
    const QStringList cells = {
        c.name,
        fmt(c.perplexity, 6),
        std::isfinite(dppl) ? QStringLiteral("%1%2 %").arg(dppl >= 0 ? "+" : "").arg(dppl, 0, 'f', 2)
                            : QStringLiteral("–"),
        fmt(c.kl, 4),
        std::isfinite(c.top1) ? QStringLiteral("%1 %").arg(100 * c.top1, 0, 'f', 2) : QStringLiteral("–"),
        c.batchesTotal > 0 ? QStringLiteral("%1 / %2").arg(c.batchesDone).arg(c.batchesTotal) : QStringLiteral("–"),
        weights,
        e.hasSpeed ? fmt(e.speed.wholeModel, 3, QStringLiteral("×")) : QStringLiteral("–")};
    for (int col = 0; col < cells.size(); ++col) {
      auto* item = new QTableWidgetItem(cells[col]);
      if (col == 0) item->setForeground(runColor(r));
      table_->setItem(r, col, item);
    }
  }
}

}  // namespace qs::widgets
