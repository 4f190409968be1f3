#pragma once
// The labs: one per chapter of the course "Custom Quantization and Kernels". A lab is a text
// (Markdown in resources/labs), an experiment that runs on the loaded model through the app's
// own machinery (formats, statistics, runtime, GEMM ops) and an exercise whose answer is checked
// against what the experiment computed. These are the plain structs the experiments fill in on
// the worker thread; the panel (labs_panel.h) turns them into plots, tables and text.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/util/progress.h"

namespace qs::labs {

class LabEnv;

// One control of an experiment. Values travel as text (LabParams) so every kind is alike.
struct LabParam {
  enum class Kind { Choice, Number };
  std::string key, label;
  Kind kind = Kind::Choice;
  std::vector<std::string> choices;  // Choice
  std::string initial;               // Choice: the initial choice (first when empty)
  double min = 0, max = 1, step = 0.1, value = 0;  // Number
  int decimals = 3;
};
using LabParams = std::map<std::string, std::string>;

struct ChartSeries {
  enum class Style { Line, Points, Bars };
  std::string name;
  std::vector<double> x, y;
  Style style = Style::Line;
};

// A chart of lines, points or bars. Bars over categories use xTickLabels (x = 0, 1, …).
struct LabChart {
  std::string title, xLabel, yLabel;
  bool logX = false, logY = false;
  std::vector<ChartSeries> series;
  std::vector<std::string> xTickLabels;
};

struct LabHistogramSeries {
  std::string name;
  double lo = 0, hi = 1;
  std::vector<double> counts;
};
// Histograms with an optional quantization grid and clip range drawn over them.
struct LabHistogram {
  std::string title;
  std::vector<LabHistogramSeries> series;
  std::vector<double> grid;    // representable values; empty = none
  double clipLo = 1, clipHi = 0;  // clipLo > clipHi: no clip lines
  bool logScale = false;
};

struct LabTable {
  std::vector<std::string> headers;
  std::vector<std::vector<std::string>> rows;
};

struct CheckResult {
  bool correct = false;
  std::string message;  // why, in one or two sentences
};

// What one run of an experiment produced.
struct LabResult {
  std::string summary;  // Markdown: what was measured, on what, and on which device
  std::vector<LabHistogram> histograms;  // shown side by side (at most 2)
  std::vector<LabChart> charts;          // shown side by side (at most 2)
  LabTable table;
  // The exercise as this run poses it (it may name the layer, the target or the options).
  std::string exercisePrompt;
  std::vector<std::string> exerciseOptions;  // empty: a numeric (or free text) answer
  // Judges an answer against this run's computation. Runs on the GUI thread: keep it cheap.
  std::function<CheckResult(const std::string& answer)> check;
  // A correct answer and a wrong one by this run's numbers (the "Show answer" button and tests).
  std::string answerKey, wrongAnswer;
  // Settings exercises ("reach a budget with the lowest KL"): the answer is the experiment's own
  // settings. check() then judges the settings this run used (the text is ignored);
  // answerParams are settings that pass, wrongParams settings that do not.
  bool settingsExercise = false;
  LabParams answerParams, wrongParams;
};

struct LabDef {
  int number = 0;
  std::string title;
  std::string keyIdea;      // one line, shown under the title in the list's tooltip
  bool fullyInteractive = false;
  bool rerunOnChange = true;  // re-run when a control changes (cheap experiments)
  // The controls, given the environment (layer choices come from the model).
  std::function<std::vector<LabParam>(const LabEnv&)> params;
  // Runs on the worker thread. Throws qs::Error (BadInput for bad settings, Cancelled).
  std::function<LabResult(LabEnv&, const LabParams&, const JobContext&)> run;
};

// All 18 labs in chapter order.
const std::vector<LabDef>& labCatalog();
// ":/labs/ch01.md" …
std::string labTextResource(int number);

}  // namespace qs::labs
