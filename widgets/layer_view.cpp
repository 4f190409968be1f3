#include "widgets/layer_view.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QRegularExpression>
#include <QSplitter>
#include <QSpinBox>
#include <QVBoxLayout>
#include <cmath>
#include <limits>

#include "kernels/common/error.h"
#include "kernels/quant/activation_codec.h"
#include "widgets/channel_plot.h"
#include "widgets/histogram_plot.h"

namespace qs::widgets {

namespace {
// The formats offered in the combo box (any other valid format string can be typed in).
const char* const kPresets[] = {"int4-g32-sym",  "int4-g64-sym", "int4-g128-sym", "int4-g128-asym",
                                "int4-ch-sym",   "int8-g128-sym", "int8-ch-sym",  "int8-t-sym",
                                "fp8e4m3-ch",    "fp8e4m3-t",    "fp8e4m3-b128",  "fp8e5m2-ch",
                                "fp16",          "bf16",         "f32",           "q4_0",
                                "q4_1",          "q5_0",         "q5_1",          "q8_0",
                                "q2_k",          "q3_k",         "q4_k",          "q5_k",
                                "q6_k"};
const char* const kMethods[] = {"absmax", "mse", "p99.9", "p99", "kl"};

HistogramSeries toSeries(const Histogram& h, const QString& name, QColor color) {
  HistogramSeries s;
  s.name = name;
  s.lo = h.lo;
  s.hi = h.hi;
  s.color = color;
  s.counts.assign(h.counts.begin(), h.counts.end());
  return s;
}

QString bytesText(uint64_t b) { return QLocale().formattedDataSize(qint64(b)); }
}  // namespace

LayerView::LayerView(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("layerView"));
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(6, 6, 6, 6);

  title_ = new QLabel(tr("Select a layer in the model panel"));
  title_->setObjectName(QStringLiteral("layerTitle"));
  QFont tf = title_->font();
  tf.setPointSizeF(tf.pointSizeF() * 1.25);
  tf.setBold(true);
  title_->setFont(tf);
  outer->addWidget(title_);

  auto* controls = new QHBoxLayout;
  format_ = new QComboBox;
  format_->setObjectName(QStringLiteral("formatCombo"));
  format_->setEditable(true);
  format_->setInsertPolicy(QComboBox::NoInsert);
  format_->setMinimumContentsLength(16);
  for (const char* p : kPresets) format_->addItem(QString::fromLatin1(p));
  format_->setToolTip(tr("Weight format, e.g. int4-g128-sym, int8-ch-sym, fp8e4m3-ch (see docs/formats.md)"));
  method_ = new QComboBox;
  method_->setObjectName(QStringLiteral("methodCombo"));
  for (const char* m : kMethods) method_->addItem(QString::fromLatin1(m));
  method_->setToolTip(tr("Scale method: absmax, MSE-optimal clip search, percentile of |w|, KL (per-tensor only)"));
  bins_ = new QSpinBox;
  bins_->setObjectName(QStringLiteral("binsSpin"));
  bins_->setRange(8, 4096);
  bins_->setValue(256);
  bins_->setSuffix(tr(" bins"));
  log_ = new QCheckBox(tr("Log counts"));
  log_->setObjectName(QStringLiteral("logCheck"));
  cell_ = new QSpinBox;
  cell_->setObjectName(QStringLiteral("cellSpin"));
  cell_->setRange(0, 0);
  cell_->setPrefix(tr("cell "));
  cell_->setToolTip(tr("Which group / channel / block the detail plot shows"));
  controls->addWidget(new QLabel(tr("Format")));
  controls->addWidget(format_);
  controls->addWidget(new QLabel(tr("Scale")));
  controls->addWidget(method_);
  controls->addWidget(bins_);
  controls->addWidget(log_);
  controls->addStretch(1);
  controls->addWidget(cell_);
  outer->addLayout(controls);

  error_ = new QLabel;
  error_->setObjectName(QStringLiteral("layerError"));
  error_->setStyleSheet(QStringLiteral("color: #b00020"));
  error_->setWordWrap(true);
  error_->hide();
  outer->addWidget(error_);
  note_ = new QLabel;
  note_->setObjectName(QStringLiteral("layerFormatNote"));
  note_->setStyleSheet(QStringLiteral("color: #6b5300"));
  note_->setWordWrap(true);
  note_->hide();
  outer->addWidget(note_);

  tensorPlot_ = new HistogramPlot;
  tensorPlot_->setObjectName(QStringLiteral("tensorHistogram"));
  cellPlot_ = new HistogramPlot;
  cellPlot_->setObjectName(QStringLiteral("cellHistogram"));
  channelPlot_ = new ChannelPlot;
  channelPlot_->setObjectName(QStringLiteral("channelAbsmax"));

  // Layout: the tensor histogram on top (the main view); below it the cell detail and the
  // channel plot side by side; the figures on the right.
  auto* bottom = new QSplitter(Qt::Horizontal);
  bottom->addWidget(cellPlot_);
  bottom->addWidget(channelPlot_);
  bottom->setStretchFactor(0, 1);
  bottom->setStretchFactor(1, 1);
  bottom->setSizes({400, 400});
  // Activations (from calibration): the input histogram with the activation format's grid and
  // clip, and the per-input-channel absmax where SmoothQuant-style outlier channels stand out.
  actSection_ = new QWidget;
  auto* actLayout = new QVBoxLayout(actSection_);
  actLayout->setContentsMargins(0, 0, 0, 0);
  auto* actBar = new QHBoxLayout;
  actFormat_ = new QComboBox;
  actFormat_->setObjectName(QStringLiteral("activationFormatCombo"));
  actFormat_->setEditable(true);
  actFormat_->addItems({QStringLiteral("int8-t"), QStringLiteral("int8-t-p99.99"), QStringLiteral("int8-t-kl"),
                        QStringLiteral("fp8e4m3-t"), QStringLiteral("int8-tok"), QStringLiteral("fp8e4m3-tok")});
  actFormat_->setToolTip(tr("Activation format: static per-tensor scale (absmax, percentile or KL from "
                            "calibration) or dynamic per token"));
  actHint_ = new QLabel;
  actHint_->setObjectName(QStringLiteral("activationHint"));
  actBar->addWidget(new QLabel(tr("Activations as")));
  actBar->addWidget(actFormat_);
  actBar->addWidget(actHint_, 1);
  actLayout->addLayout(actBar);
  actPlot_ = new HistogramPlot;
  actPlot_->setObjectName(QStringLiteral("activationHistogram"));
  actChannels_ = new ChannelPlot;
  actChannels_->setObjectName(QStringLiteral("activationChannels"));
  auto* actSplit = new QSplitter(Qt::Horizontal);
  actSplit->addWidget(actPlot_);
  actSplit->addWidget(actChannels_);
  actLayout->addWidget(actSplit, 1);
  connect(actFormat_, &QComboBox::currentTextChanged, this, [this] { showActivations(); });

  auto* vsplit = new QSplitter(Qt::Vertical);
  vsplit->addWidget(tensorPlot_);
  vsplit->addWidget(bottom);
  vsplit->addWidget(actSection_);
  vsplit->setStretchFactor(0, 3);
  vsplit->setStretchFactor(1, 2);
  vsplit->setStretchFactor(2, 2);

  auto* side = new QVBoxLayout;
  metrics_ = new QLabel;
  metrics_->setObjectName(QStringLiteral("layerMetrics"));
  metrics_->setTextFormat(Qt::RichText);
  metrics_->setAlignment(Qt::AlignTop | Qt::AlignLeft);
  metrics_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  metrics_->setMinimumWidth(230);
  cellInfo_ = new QLabel;
  cellInfo_->setObjectName(QStringLiteral("cellInfo"));
  cellInfo_->setWordWrap(true);
  side->addWidget(metrics_);
  side->addWidget(cellInfo_);
  side->addStretch(1);

  auto* body = new QHBoxLayout;
  body->addWidget(vsplit, 1);
  body->addLayout(side);
  outer->addLayout(body, 1);

  auto changed = [this] { emit requestChanged(); };
  connect(format_, &QComboBox::currentTextChanged, this, changed);
  connect(method_, &QComboBox::currentTextChanged, this, changed);
  connect(bins_, &QSpinBox::valueChanged, this, changed);
  connect(cell_, &QSpinBox::valueChanged, this, changed);
  connect(log_, &QCheckBox::toggled, this, [this](bool on) {
    tensorPlot_->setLogScale(on);
    cellPlot_->setLogScale(on);
    actPlot_->setLogScale(on);
  });
  showActivations();
}

void LayerView::setActivations(const std::optional<LayerActivations>& a) {
  activations_ = a;
  showActivations();
}

void LayerView::setActivationFormatText(const QString& text) { actFormat_->setCurrentText(text); }
QString LayerView::activationFormatText() const { return actFormat_->currentText().trimmed(); }

void LayerView::showActivations() {
  actClip_ = std::numeric_limits<double>::quiet_NaN();
  if (!activations_) {
    actPlot_->setSeries({});
    actPlot_->setGrid({}, 1, 0);
    actPlot_->setTitle(tr("Input activations: run Calibrate (Analysis menu) to see them"));
    actChannels_->setValues({}, tr("absmax"));
    actChannels_->setTitle(tr("Input channel absmax"));
    actHint_->clear();
    return;
  }
  const LayerActivations& a = *activations_;
  auto s = toSeries(a.hist, tr("inputs"), QColor(120, 60, 170));
  actPlot_->setSeries({s});
  actChannels_->setValues(a.channelAbsMax, tr("absmax"));
  actChannels_->setTitle(tr("Input absmax: %1 outliers / %2")
                             .arg(actChannels_->outlierCount())
                             .arg(a.channelAbsMax.size()));
  ActSpec spec;
  float scale = 0;
  try {
    spec = parseQuantFormat("f32:" + activationFormatText().toStdString()).act;
    if (spec.scaling == ActScaling::PerTensorStatic) scale = staticActivationScale(spec, a.absHist);
  } catch (const Error& e) {
    actPlot_->setGrid({}, 1, 0);
    actHint_->setText(QString::fromStdString(e.what()));
    actPlot_->setTitle(tr("Input activations (%1)").arg(a.source));
    return;
  }
  const double absmax = a.hist.hi;
  if (spec.scaling == ActScaling::PerTensorStatic) {
    const QuantKindTraits& tr_ = quantKindTraits(spec.kind);
    actClip_ = double(scale) * double(tr_.maxValue);
    WeightSpec grid{spec.kind, Granularity::Tensor, 0, true, ScaleMethod::AbsMax, 0};
    actPlot_->setGrid(cellGridLevels(grid, scale, 0), -actClip_, actClip_);
    uint64_t clipped = 0, total = 0;
    for (int b = 0; b < a.absHist.bins(); ++b) {
      total += a.absHist.counts[size_t(b)];
      if (double(a.absHist.binLower(b)) >= actClip_) clipped += a.absHist.counts[size_t(b)];
    }
    actHint_->setText(tr("static scale %1, clip ±%2 (absmax %3); %4 % of values clipped")
                          .arg(double(scale), 0, 'g', 4)
                          .arg(actClip_, 0, 'g', 4)
                          .arg(absmax, 0, 'g', 4)
                          .arg(total ? 100.0 * double(clipped) / double(total) : 0.0, 0, 'f', 3));
  } else {
    // Dynamic per token: each token has its own scale, so there is no single grid to draw.
    actPlot_->setGrid({}, -absmax, absmax);
    actHint_->setText(tr("per-token scales: each token is scaled by its own absmax (range ±%1 shown)")
                          .arg(absmax, 0, 'g', 4));
  }
  actPlot_->setTitle(tr("Input activations (%1)").arg(a.source));
}

QString LayerView::formatText() const { return format_->currentText().trimmed(); }
void LayerView::setFormatText(const QString& text) { format_->setCurrentText(text); }
int LayerView::bins() const { return bins_->value(); }
void LayerView::setBins(int bins) { bins_->setValue(bins); }
bool LayerView::logScale() const { return log_->isChecked(); }
void LayerView::setLogScale(bool log) { log_->setChecked(log); }

void LayerView::setTensor(const QString& name) {
  tensor_ = name;
  columns_ = 0;
  analysis_.reset();
  title_->setText(name.isEmpty() ? tr("Select a layer in the model panel") : name);
  metrics_->setText(name.isEmpty() ? QString() : tr("<i>computing…</i>"));
  error_->hide();
}

std::optional<LayerAnalysisRequest> LayerView::request() const {
  if (tensor_.isEmpty()) return std::nullopt;
  QString text = formatText();
  const QString method = method_->currentText();
  // The method applies to quantised kinds only; append it unless the text names one already.
  // ggml block types (q4_0 … q6_k) choose their scales themselves: no method is appended.
  const bool plain = text == QLatin1String("fp16") || text == QLatin1String("bf16") || text == QLatin1String("f32") ||
                     text.startsWith(QLatin1Char('q')) || text.startsWith(QLatin1Char('Q'));
  if (!plain && method != QLatin1String("absmax") && !text.contains(QLatin1String("-mse")) &&
      !text.contains(QLatin1String("-kl")) && !text.contains(QRegularExpression(QStringLiteral("-p[0-9]"))))
    text += QLatin1Char('-') + method;
  LayerAnalysisRequest r;
  try {
    r.format = parseQuantFormat(text.toStdString());
  } catch (const Error& e) {
    const_cast<LayerView*>(this)->setError(QString::fromStdString(e.what()));
    return std::nullopt;
  }
  // A group that does not divide this layer's K: the largest group that does, else per channel.
  QString note;
  WeightSpec& w = r.format.weight;
  if (w.granularity == Granularity::Group && columns_ > 0 && columns_ % w.groupSize != 0) {
    const QString asked = QString::fromStdString(formatToString(r.format));
    const uint32_t was = w.groupSize;
    w.groupSize = 0;
    for (uint32_t g : {256u, 128u, 64u, 32u})
      if (g < was && columns_ % g == 0) {
        w.groupSize = g;
        break;
      }
    if (w.groupSize == 0) {
      w.granularity = Granularity::Channel;
      note = tr("%1 does not fit this layer: K = %2 is not a multiple of %3, nor of 32; showing %4 (one scale per row).")
                 .arg(asked).arg(columns_).arg(was).arg(QString::fromStdString(formatToString(r.format)));
    } else {
      note = tr("%1 does not fit this layer: K = %2 is not a multiple of %3; showing %4, the largest group that divides K.")
                 .arg(asked).arg(columns_).arg(was).arg(QString::fromStdString(formatToString(r.format)));
    }
  }
  note_->setText(note);
  note_->setVisible(!note.isEmpty());
  r.tensorName = tensor_.toStdString();
  r.bins = bins_->value();
  r.cellIndex = cell_->value();
  return r;
}

void LayerView::setError(const QString& message) {
  error_->setText(message);
  error_->show();
  metrics_->clear();
  // No stale plots or legends under the error.
  analysis_.reset();
  tensorPlot_->setSeries({});
  tensorPlot_->setGrid({}, 1, 0);
  tensorPlot_->setTitle(QString());
  cellPlot_->setSeries({});
  cellPlot_->setGrid({}, 1, 0);
  cellPlot_->setTitle(QString());
  channelPlot_->setValues({}, tr("absmax"));
  channelPlot_->setTitle(QString());
  cellInfo_->clear();
}

QString LayerView::formatNote() const { return note_->text(); }

void LayerView::setAnalysis(const LayerAnalysis& a) {
  analysis_ = a;
  error_->hide();
  const QLocale loc;
  QStringList dims;
  for (int64_t d : a.shape) dims << QString::number(d);
  title_->setText(QStringLiteral("%1  [%2]").arg(QString::fromStdString(a.tensorName), dims.join(QStringLiteral(", "))));
  const QString fmt = QString::fromStdString(formatToString(a.format));

  std::vector<HistogramSeries> series{toSeries(a.weights, tr("weights"), QColor(40, 100, 200))};
  if (a.quantized) series.push_back(toSeries(a.fakeQuant, tr("after %1").arg(fmt), QColor(230, 120, 20)));
  tensorPlot_->setSeries(std::move(series));
  // A ggml block type has no clip of its own: each block picks its scale (and minimum) inside.
  const bool ggml = quantKindTraits(a.format.weight.kind).cls == QuantClass::Ggml;
  const bool clipped = a.quantized && !ggml;
  tensorPlot_->setGrid(a.tensorLevels, clipped ? a.clipLo : 1, clipped ? a.clipHi : 0);
  tensorPlot_->setTitle(tr("Whole tensor (%1 values)").arg(loc.toString(qlonglong(a.rows * a.cols))));

  channelPlot_->setValues(std::vector<double>(a.channelAbsmax.begin(), a.channelAbsmax.end()),
                          tr("absmax"));
  channelPlot_->setTitle(tr("Channel absmax (%1)").arg(a.rows));

  {
    const QSignalBlocker block(cell_);
    cell_->setRange(0, int(std::max<int64_t>(0, a.cellCount - 1)));
    cell_->setValue(int(a.cellIndex));
    cell_->setEnabled(a.cellCount > 1);
  }
  showCell();

  QString m = QStringLiteral("<table cellspacing='2'>");
  auto row = [&m](const QString& k, const QString& v) {
    m += QStringLiteral("<tr><td><b>%1</b></td><td align='right'>%2</td></tr>").arg(k, v);
  };
  row(tr("Format"), fmt);
  row(tr("MSE"), QString::number(a.metrics.mse, 'g', 4));
  row(tr("SQNR"), std::isinf(a.metrics.sqnrDb) ? tr("∞ (exact)") : tr("%1 dB").arg(a.metrics.sqnrDb, 0, 'f', 2));
  row(tr("Max |error|"), QString::number(a.metrics.maxAbsError, 'g', 4));
  row(tr("Cosine"), QString::number(a.metrics.cosine, 'f', 6));
  row(tr("Bytes (file)"), bytesText(a.originalBytes));
  row(tr("Bytes (quantised)"), bytesText(a.storage.totalBytes()));
  if (a.storage.scaleBytes) row(tr("  of which scales"), bytesText(a.storage.scaleBytes + a.storage.zeroBytes));
  row(tr("Bits / weight"), QString::number(a.bitsPerWeight, 'f', 3));
  if (a.storage.totalBytes())
    row(tr("Compression"), QStringLiteral("%1×").arg(double(a.originalBytes) / double(a.storage.totalBytes()), 0, 'f', 2));
  row(tr("Outlier channels"), QString::number(channelPlot_->outlierCount()));
  m += QStringLiteral("</table>");
  metrics_->setText(m);
}

void LayerView::showCell() {
  const LayerAnalysis& a = *analysis_;
  if (!a.quantized || a.cellCount == 0) {
    cellPlot_->setSeries({});
    cellPlot_->setGrid({}, 1, 0);
    const QString fmt = QString::fromStdString(formatToString(a.format));
    cellPlot_->setTitle(!a.quantized ? tr("No quantization grid (unquantised format)")
                        : quantKindTraits(a.format.weight.kind).cls == QuantClass::Ggml
                            ? tr("No grid shown: %1 keeps a scale per ggml block").arg(fmt)
                            : tr("No scale grid: %1 is a plain cast").arg(fmt));
    cellInfo_->clear();
    return;
  }
  // The cell's values on a histogram whose range covers its clip range and its values.
  double lo = a.cellClipLo, hi = a.cellClipHi;
  for (float v : a.cellValues) {
    lo = std::min(lo, double(v));
    hi = std::max(hi, double(v));
  }
  if (!(hi > lo)) hi = lo + 1;
  const int bins = std::clamp(int(a.cellValues.size() / 2), 16, 256);
  Histogram h(bins, float(lo), float(hi));
  h.add(a.cellValues);
  auto s = toSeries(h, tr("cell values"), QColor(40, 140, 60));
  s.normalise = false;
  cellPlot_->setSeries({s});
  cellPlot_->setGrid(a.cellLevels, a.cellClipLo, a.cellClipHi);
  cellPlot_->setTitle(tr("Cell %1 of %2: its grid and clip").arg(a.cellIndex).arg(a.cellCount));
  cellInfo_->setText(tr("Cell %1: rows %2–%3, columns %4–%5\nscale %6%7\n%8 grid levels")
                         .arg(a.cellIndex)
                         .arg(a.cellRow0)
                         .arg(a.cellRow0 + a.cellRows - 1)
                         .arg(a.cellCol0)
                         .arg(a.cellCol0 + a.cellCols - 1)
                         .arg(double(a.cellScale), 0, 'g', 5)
                         .arg(a.format.weight.symmetric ? QString() : tr(", zero point %1").arg(a.cellZero))
                         .arg(a.cellLevels.size()));
}

}  // namespace qs::widgets
