#pragma once
// Runs the fixture writers in tests/fixtures/*.py with QS_PYTHON (the interpreter that has the
// independent reference packages: gguf, safetensors, numpy). Tests skip only when QS_PYTHON is
// empty; a failing script is a test failure.
#include <QProcess>
#include <QtTest>
#include <cstring>
#include <vector>

namespace qs::test {

inline bool havePython() { return std::strlen(QS_PYTHON) > 0; }

#define QS_REQUIRE_PYTHON()                                                       \
  do {                                                                            \
    if (!qs::test::havePython()) QSKIP("QS_PYTHON is empty: no reference writer"); \
  } while (0)

// Runs tests/fixtures/<script> with `args`; returns true on exit code 0 (prints stderr otherwise).
inline bool runFixtureScript(const char* script, const QStringList& args) {
  QProcess p;
  p.setProcessChannelMode(QProcess::SeparateChannels);
  p.start(QStringLiteral(QS_PYTHON),
          QStringList{QStringLiteral(QS_SOURCE_DIR "/tests/fixtures/") + script} + args);
  if (!p.waitForFinished(120'000)) return false;
  if (p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0) {
    qWarning("%s failed: %s", script, p.readAllStandardError().constData());
    return false;
  }
  return true;
}

inline std::vector<float> readF32File(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return {};
  const QByteArray b = f.readAll();
  std::vector<float> v(size_t(b.size()) / 4);
  std::memcpy(v.data(), b.constData(), v.size() * 4);
  return v;
}

// Bit-level equality that treats any two NaNs as equal.
inline bool sameFloat(float a, float b) {
  if (a != a && b != b) return true;
  return std::memcmp(&a, &b, 4) == 0 || a == b;
}

}  // namespace qs::test
