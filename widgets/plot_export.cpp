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
