#include "app/gui/report.h"

#include <QAbstractItemModel>
#include <QBuffer>
#include <QDateTime>
#include <QFileInfo>
#include <QLabel>
#include <QTableView>
#include <QTableWidget>
#include <qcustomplot.h>

#include "app/gui/main_window.h"
#include "app/gui/workspace.h"
#include "core/model/model_file.h"
#include "widgets/pareto_plot.h"
#include "widgets/plan_editor_view.h"
#include "widgets/run_view.h"
#include "widgets/sensitivity_view.h"

namespace qs::app {

namespace {
// A plot as an <img> with its PNG inline (base64), at its size on screen (at least 640×360 so a
// hidden tab's plot still renders readably); empty plots are left out.
QString plotImage(QCustomPlot* plot, const QString& caption) {
  if (!plot || plot->plottableCount() == 0) return {};
  bool any = false;
  for (int i = 0; i < plot->plottableCount(); ++i) {
    QCPAbstractPlottable* p = plot->plottable(i);
    if (auto* g = qobject_cast<QCPGraph*>(p)) any = any || !g->data()->isEmpty();
    else if (auto* b = qobject_cast<QCPBars*>(p)) any = any || !b->data()->isEmpty();
    else any = true;
  }
  if (!any) return {};
  const int w = std::max(plot->width(), 640), h = std::max(plot->height(), 360);
  QBuffer png;
  png.open(QIODevice::WriteOnly);
  plot->toPixmap(w, h, 1.0).save(&png, "PNG");
  return QStringLiteral("<figure><img alt='%1' src='data:image/png;base64,%2' style='max-width:100%'>"
                        "<figcaption>%1</figcaption></figure>")
      .arg(caption.toHtmlEscaped(), QString::fromLatin1(png.data().toBase64()));
}

QString tableHtml(const QAbstractItemModel* m) {
  if (!m || m->rowCount() == 0) return {};
  QString html = QStringLiteral("<table><tr>");
  for (int c = 0; c < m->columnCount(); ++c)
    html += QStringLiteral("<th>%1</th>").arg(m->headerData(c, Qt::Horizontal).toString().toHtmlEscaped());
  html += QStringLiteral("</tr>");
  for (int r = 0; r < m->rowCount(); ++r) {
    html += QStringLiteral("<tr>");
    for (int c = 0; c < m->columnCount(); ++c)
      html += QStringLiteral("<td>%1</td>").arg(m->index(r, c).data().toString().toHtmlEscaped());
    html += QStringLiteral("</tr>");
  }
  return html + QStringLiteral("</table>");
}
}  // namespace

QString buildReportHtml(const MainWindow& w) {
  const ModelFile* m = w.model();
  Workspace* ws = w.workspace();
  const QString name = QFileInfo(w.modelPath()).fileName().toHtmlEscaped();
  QString html = QStringLiteral(
                     "<!DOCTYPE html><html><head><meta charset='utf-8'><title>Quantscope report — %1</title>"
                     "<style>body{font-family:sans-serif;margin:2em;max-width:1200px}"
                     "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px}"
                     "th{background:#eee}figure{margin:1em 0}figcaption{color:#555;font-size:12px}</style>"
                     "</head><body>")
                     .arg(name);
  html += QStringLiteral("<h1>Quantscope report — %1</h1><p>%2 · Quantscope %3</p>")
              .arg(name, QDateTime::currentDateTimeUtc().toString(Qt::ISODate), QStringLiteral(QS_VERSION));
  if (m) {
    html += QStringLiteral("<h2>Model</h2><table>");
    auto row = [&html](const QString& k, const QString& v) {
      html += QStringLiteral("<tr><th>%1</th><td>%2</td></tr>").arg(k, v.toHtmlEscaped());
    };
    row(QObject::tr("File"), w.modelPath());
    row(QObject::tr("Format"), QString::fromStdString(m->formatDescription()));
    row(QObject::tr("Architecture"), QString::fromStdString(m->config().architecture));
    row(QObject::tr("Parameters"), QString::number(m->parameterCount()));
    row(QObject::tr("Session"), ws->sessionPath());
    row(QObject::tr("Evaluation text"), QObject::tr("%1, %2 tokens").arg(ws->evalTextPath()).arg(ws->evalTokens()));
    html += QStringLiteral("</table>");
  }
  // The measured results first: what a reader wants to know.
  widgets::RunView* rv = ws->runView();
  if (rv->runCount() > 0) {
    html += QObject::tr("<h2>Measured runs</h2><p>Each plan run against the unquantized model on the evaluation "
                        "text: perplexity, KL (nats), top-1 agreement, weight size and measured speedup.</p>");
    html += tableHtml(rv->metricsTable()->model());
    html += plotImage(rv->errorPlot(), QObject::tr("Relative L2 error of the residual stream after each block"));
    html += plotImage(rv->cosinePlot(), QObject::tr("Cosine similarity of the residual stream per block"));
    html += plotImage(rv->speedPlot(), QObject::tr("Measured speedup per layer"));
  }
  widgets::PlanEditorView* pe = ws->planEditor();
  if (pe->plan()) {
    html += QObject::tr("<h2>Plan</h2><p>%1</p>").arg(pe->totalsText().toHtmlEscaped());
    html += plotImage(pe->pareto()->sizePlot(), QObject::tr("Pareto front: predicted error against size"));
    html += plotImage(pe->pareto()->speedPlot(), QObject::tr("Pareto front: predicted error against speedup"));
    html += tableHtml(pe->table()->model());
  }
  widgets::SensitivityView* sv = ws->sensitivityView();
  if (!sv->table().layers.empty()) {
    const SensitivityTable& t = sv->table();
    html += QObject::tr("<h2>Sensitivity</h2><p>%1 layers × %2 formats, %3 cells measured on %4 tokens of %5; "
                        "proxy-vs-KL Spearman ρ = %6.</p>")
                .arg(t.layers.size())
                .arg(t.formats.size())
                .arg(sv->measuredCells())
                .arg(t.tokens)
                .arg(QString::fromStdString(t.textSource).toHtmlEscaped())
                .arg(sv->spearman(), 0, 'f', 3);
    html += plotImage(sv->heatmapPlot(), QObject::tr("Sensitivity heatmap (grey: format not applicable)"));
    html += plotImage(sv->barPlot(), QObject::tr("Layers sorted by sensitivity"));
    html += plotImage(sv->scatterPlot(), QObject::tr("Proxy against end-to-end KL"));
  }
  return html + QStringLiteral("</body></html>");
}

}  // namespace qs::app
