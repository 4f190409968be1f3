#pragma once
// Small helpers shared by the Qt Test programs.
#include <QByteArray>
#include <QFile>
#include <QString>
#include <QTemporaryDir>
#include <QtTest>

namespace qs::test {

inline QString datasetPath(const char* rel) {
  return QStringLiteral(QS_DATASETS_DIR) + QLatin1Char('/') + QLatin1String(rel);
}
inline QString stories260K() { return datasetPath("models/stories260K/stories260K.bin"); }

inline QByteArray readAll(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return {};
  return f.readAll();
}

inline QString writeFile(const QTemporaryDir& dir, const QString& name, const QByteArray& bytes) {
  const QString p = dir.filePath(name);
  QFile f(p);
  if (!f.open(QIODevice::WriteOnly)) return {};
  f.write(bytes);
  return p;
}

}  // namespace qs::test
