#include "app/gui/help_text.h"

#include <QObject>

namespace qs::app {

namespace {
QString tabHelp(const QString& tab) {
  if (tab == QLatin1String("Model"))
    return QObject::tr("<p>The file's format, the architecture read from it, its configuration and (GGUF, "
                       "safetensors) its metadata. The panel on the left lists every tensor by block; linear "
                       "layers carry their layer name (<tt>blocks.0.attn.q</tt>), the same name the Plan and "
                       "Sensitivity tabs use, with the file's own tensor name in the tooltip. Type in the filter "
                       "box to find a layer by either name (Ctrl+F).</p>");
  if (tab == QLatin1String("Layer"))
    return QObject::tr("<p>Click a weight in the model panel. Top: the weight histogram with the chosen format's "
                       "fake-quantized distribution, its grid and its clip (red dashes). Bottom: one scale cell "
                       "(group / channel / block) with its own grid, and the absmax of every output channel "
                       "(outliers in red). A format whose group does not divide the layer's K is shown with the "
                       "largest group that does, and a note says so. After <i>Calibrate</i> the layer's input "
                       "activations appear below. Right-click a plot to save it (PNG/SVG/PDF) or its data (CSV).</p>");
  if (tab == QLatin1String("Sensitivity"))
    return QObject::tr("<p><i>Calibrate</i> collects activation statistics on the evaluation text (Analysis → "
                       "Evaluation Text…). <i>Run sensitivity</i> quantizes one layer at a time to each candidate "
                       "format and measures the end-to-end KL: the heatmap (layers × formats; grey = the format "
                       "cannot apply to the layer), the layers sorted by sensitivity, and the proxy-vs-KL scatter. "
                       "Hover a cell, bar or point for its figures; click it to open the layer. A cancelled sweep "
                       "keeps the rows it finished.</p>");
  if (tab == QLatin1String("Plan"))
    return QObject::tr("<p>Every linear layer's format. Edit a cell (the edit applies to all selected rows), or set "
                       "a field for a pattern such as <tt>blocks.*.mlp.down</tt> or <tt>blocks.0-3.attn.{q,k}</tt> "
                       "(a pattern that names no layer is refused). With sensitivity figures: <i>Auto "
                       "(thresholds)</i>, the budget slider (bits per weight) and the Pareto fronts — click a point "
                       "to load its plan. Every edit can be undone (Ctrl+Z, Ctrl+Shift+Z).</p>");
  if (tab == QLatin1String("Run"))
    return QObject::tr("<p><i>Run plan</i> runs the plan against the unquantized model: the relative error and "
                       "cosine of the residual stream after each block, perplexity, KL and top-1 agreement. "
                       "<i>Measure speed</i> times each layer's kernel against cuBLAS FP16 (on the CPU backend: the "
                       "reference, and the chart says so). Hover a bar for its figures, click it to open the "
                       "layer.</p>");
  if (tab == QLatin1String("Labs"))
    return QObject::tr("<p>The course's chapters: a text, an experiment on the loaded model and an exercise the "
                       "app checks. Pick a lab on the left.</p>");
  return {};
}
}  // namespace

QString helpHtml(const QString& tabTitle) {
  QString html = QObject::tr("<h2>%1</h2>").arg(tabTitle.toHtmlEscaped()) + tabHelp(tabTitle);
  html += QObject::tr(
      "<h3>Keyboard</h3><table cellpadding='2'>"
      "<tr><td>Ctrl+O</td><td>Open a model</td></tr>"
      "<tr><td>Ctrl+E / Ctrl+Shift+E</td><td>Export the plan or weights / Export Report (HTML)</td></tr>"
      "<tr><td>Ctrl+Shift+A</td><td>Autoquant to GGUF: measure, choose the size, write</td></tr>"
      "<tr><td>Ctrl+Z / Ctrl+Shift+Z</td><td>Undo / redo a plan edit</td></tr>"
      "<tr><td>Ctrl+F</td><td>Find a layer (the model panel's filter)</td></tr>"
      "<tr><td>Ctrl+1 … Ctrl+6</td><td>Model, Layer, Sensitivity, Plan, Run, Labs</td></tr>"
      "<tr><td>Ctrl+Shift+C</td><td>Calibrate</td></tr>"
      "<tr><td>Ctrl+Shift+N</td><td>Sensitivity sweep</td></tr>"
      "<tr><td>Ctrl+R / Ctrl+Shift+R</td><td>Run the plan / measure its speed</td></tr>"
      "<tr><td>Shift+Esc</td><td>Cancel the running job</td></tr>"
      "<tr><td>F1</td><td>This help</td></tr></table>"
      "<p>The README and <tt>docs/</tt> describe every format, method and file in detail.</p>");
  return html;
}

}  // namespace qs::app
