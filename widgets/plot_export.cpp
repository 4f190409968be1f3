#include "widgets/plot_export.h"

#include <QAbstractItemModel>
#include <QBuffer>
#include <QFileDialog>
#include <QFileInfo>
#include <QMenu>
#include <QMessageBox>
#include <QPdfWriter>
#include <QSvgGenerator>
#include <qcustomplot.h>

#include <cmath>

#include "core/io/atomic_file.h"
#include "kernels/common/error.h"

namespace qs::widgets {

namespace {
// Every export goes through qs::AtomicFile, the one writer of the app (docs/reliability.md).
bool commitBytes(const QString& path, const QByteArray& bytes, QString* error) {
  try {
    qs::writeFileAtomically(path.toStdString(),
                            std::as_bytes(std::span(bytes.constData(), size_t(bytes.size()))));
    return true;
  } catch (const qs::Error& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

QString csvField(QString s) {
  if (s.contains(QLatin1Char(',')) || s.contains(QLatin1Char('"')) || s.contains(QLatin1Char('\n'))) {
    s.replace(QLatin1String("\""), QLatin1String("\"\""));
    s = QLatin1Char('"') + s + QLatin1Char('"');
  }
  return s;
}

void appendRows(const QAbstractItemModel* m, const QModelIndex& parent, QString& out) {
  for (int r = 0; r < m->rowCount(parent); ++r) {
    QStringList fields;
    for (int c = 0; c < m->columnCount(parent); ++c)
      fields << csvField(m->index(r, c, parent).data(Qt::DisplayRole).toString());
    out += fields.join(QLatin1Char(',')) + QLatin1Char('\n');
    const QModelIndex child = m->index(r, 0, parent);
    if (m->hasChildren(child)) appendRows(m, child, out);  // trees flatten depth-first
  }
}
}  // namespace

bool exportPlot(QCustomPlot* plot, const QString& path, QString* error, int width, int height) {
  const QString suffix = QFileInfo(path).suffix().toLower();
  const int w = width > 0 ? width : plot->width();
  const int h = height > 0 ? height : plot->height();
  if (suffix == QLatin1String("svg")) {
    QBuffer buffer;
    buffer.open(QIODevice::WriteOnly);
    QSvgGenerator gen;
    gen.setOutputDevice(&buffer);
    gen.setSize(QSize(w, h));
    gen.setViewBox(QRect(0, 0, w, h));
    gen.setTitle(plot->objectName());
    QCPPainter painter;
    painter.begin(&gen);
    plot->toPainter(&painter, w, h);
    painter.end();
    return commitBytes(path, buffer.data(), error);
  }
  if (suffix != QLatin1String("png") && suffix != QLatin1String("pdf")) {
    if (error) *error = QStringLiteral("%1: unknown plot format '%2' (use .png, .svg or .pdf)").arg(path, suffix);
    return false;
  }
  // Rendered into memory, then written atomically like every other file.
  QBuffer buffer;
  buffer.open(QIODevice::WriteOnly);
  bool ok = false;
  if (suffix == QLatin1String("png")) {
    ok = plot->toPixmap(w, h, 2.0).save(&buffer, "PNG");
  } else {
    QPdfWriter pdf(&buffer);
    pdf.setResolution(72);  // one device unit = one point: the plot's pixel size becomes the page size
    pdf.setPageSize(QPageSize(QSizeF(w, h), QPageSize::Point));
    pdf.setPageMargins(QMarginsF(0, 0, 0, 0));
    pdf.setCreator(QStringLiteral("Quantscope"));
    QCPPainter painter;
    ok = painter.begin(&pdf);
    if (ok) {
      plot->toPainter(&painter, w, h);
      painter.end();
    }
  }
  if (!ok || buffer.data().isEmpty()) {
    if (error) *error = QStringLiteral("%1: could not render the plot").arg(path);
    return false;
  }
  return commitBytes(path, buffer.data(), error);
}

namespace {
// The text label a text ticker puts at `coord`, if any (layer and format names).
QString tickLabel(const QCPAxis* axis, double coord) {
  auto text = axis->ticker().dynamicCast<QCPAxisTickerText>();
  if (!text) return {};
  const auto it = text->ticks().constFind(coord);
  return it == text->ticks().constEnd() ? QString() : it.value();
}
QString number(double v) { return std::isfinite(v) ? QString::number(v, 'g', 10) : QString(); }
}  // namespace

QString plotDataCsv(QCustomPlot* plot) {
  QString out = QStringLiteral("series,x,y,value,x_label,y_label\n");
  for (int i = 0; i < plot->plottableCount(); ++i) {
    QCPAbstractPlottable* p = plot->plottable(i);
    if (!p->visible()) continue;
    const QString name = csvField(p->name().isEmpty() ? QStringLiteral("series %1").arg(i) : p->name());
    QCPAxis* keyAxis = p->keyAxis();
    QCPAxis* valueAxis = p->valueAxis();
    // Bars drawn sideways (key on the y axis) still read as x = value, y = key.
    const bool sideways = keyAxis && keyAxis->orientation() == Qt::Vertical;
    auto row = [&](double key, double value) {
      const double x = sideways ? value : key, y = sideways ? key : value;
      QCPAxis* xa = sideways ? valueAxis : keyAxis;
      QCPAxis* ya = sideways ? keyAxis : valueAxis;
      out += QStringLiteral("%1,%2,%3,,%4,%5\n")
                 .arg(name, number(x), number(y), csvField(tickLabel(xa, x)), csvField(tickLabel(ya, y)));
    };
    if (auto* g = qobject_cast<QCPGraph*>(p)) {
      for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it) row(it->key, it->value);
    } else if (auto* b = qobject_cast<QCPBars*>(p)) {
      for (auto it = b->data()->constBegin(); it != b->data()->constEnd(); ++it) row(it->key, it->value);
    } else if (auto* m = qobject_cast<QCPColorMap*>(p)) {
      QCPColorMapData* d = m->data();
      for (int x = 0; x < d->keySize(); ++x)
        for (int y = 0; y < d->valueSize(); ++y) {
          double kx, vy;
          d->cellToCoord(x, y, &kx, &vy);
          out += QStringLiteral("%1,%2,%3,%4,%5,%6\n")
                     .arg(name, number(kx), number(vy), number(d->cell(x, y)),
                          csvField(tickLabel(keyAxis, kx)), csvField(tickLabel(valueAxis, vy)));
        }
    }
  }
  return out;
}

bool exportPlotData(QCustomPlot* plot, const QString& path, QString* error) {
  return commitBytes(path, plotDataCsv(plot).toUtf8(), error);
}

bool exportTableCsv(const QAbstractItemModel* model, const QString& path, QString* error) {
  QString out;
  QStringList header;
  for (int c = 0; c < model->columnCount(); ++c)
    header << csvField(model->headerData(c, Qt::Horizontal).toString());
  out += header.join(QLatin1Char(',')) + QLatin1Char('\n');
  appendRows(model, {}, out);
  return commitBytes(path, out.toUtf8(), error);
}

void installPlotExportMenu(QCustomPlot* plot) {
  plot->setContextMenuPolicy(Qt::CustomContextMenu);
  QObject::connect(plot, &QWidget::customContextMenuRequested, plot, [plot](const QPoint& pos) {
    QMenu menu(plot);
    menu.addAction(QObject::tr("Export plot…"), plot, [plot] {
      const QString path = QFileDialog::getSaveFileName(
          plot, QObject::tr("Export plot"), plot->objectName() + QStringLiteral(".png"),
          QObject::tr("PNG image (*.png);;SVG drawing (*.svg);;PDF document (*.pdf)"));
      if (path.isEmpty()) return;
      QString error;
      if (!exportPlot(plot, path, &error))
        QMessageBox::warning(plot, QObject::tr("Export failed"), error);
    });
    menu.addAction(QObject::tr("Export data as CSV…"), plot, [plot] {
      const QString path = QFileDialog::getSaveFileName(plot, QObject::tr("Export plot data"),
                                                        plot->objectName() + QStringLiteral(".csv"),
                                                        QObject::tr("CSV (*.csv)"));
      if (path.isEmpty()) return;
      QString error;
      if (!exportPlotData(plot, path, &error)) QMessageBox::warning(plot, QObject::tr("Export failed"), error);
    });
    menu.addAction(QObject::tr("Reset zoom"), plot, [plot] {
      plot->rescaleAxes();
      plot->replot();
    });
    menu.exec(plot->mapToGlobal(pos));
  });
}

void exportTableInteractive(const QAbstractItemModel* model, QWidget* parent, const QString& suggestedName) {
  const QString path = QFileDialog::getSaveFileName(parent, QObject::tr("Export table"), suggestedName,
                                                    QObject::tr("CSV (*.csv)"));
  if (path.isEmpty()) return;
  QString error;
  if (!exportTableCsv(model, path, &error))
    QMessageBox::warning(parent, QObject::tr("Export failed"), error);
}

}  // namespace qs::widgets
