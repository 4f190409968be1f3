#pragma once
// Exporting what the user sees: every plot to PNG, SVG or PDF (by file suffix), every table to
// CSV. Both render into memory and write through qs::AtomicFile (temporary, then rename), so a
// failed or killed export never leaves a
// half-written file behind.
#include <QString>

class QCustomPlot;
class QAbstractItemModel;
class QWidget;

namespace qs::widgets {

// Returns false and fills *error (naming the file) on failure.
bool exportPlot(QCustomPlot* plot, const QString& path, QString* error, int width = 0, int height = 0);
bool exportTableCsv(const QAbstractItemModel* model, const QString& path, QString* error);
// The data behind a plot as CSV: one row per point of every plottable — series name, x, y (and the
// text tick label of x or y where the axis has one: a layer or a format name); colour maps one row
// per cell (x, y, value). What the plot shows, not the pixels.
QString plotDataCsv(QCustomPlot* plot);
bool exportPlotData(QCustomPlot* plot, const QString& path, QString* error);

// Adds "Export plot…" and "Export data as CSV…" to the plot's right-click menu (asks for a file,
// reports errors).
void installPlotExportMenu(QCustomPlot* plot);
// File dialog + exportTableCsv + error box.
void exportTableInteractive(const QAbstractItemModel* model, QWidget* parent, const QString& suggestedName);

}  // namespace qs::widgets
