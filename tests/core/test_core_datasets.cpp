// datasets/manifest.json against the files it lists: every entry exists with the size and the
// SHA-256 the manifest states (so a changed or truncated bundled file fails here), exactly one
// default model (the one defaultModelPath() opens), every model's tokenizer is itself listed,
// and a malformed manifest is BadInput naming the field.
#include <QCryptographicHash>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/util/datasets.h"
#include "kernels/common/error.h"

using namespace qs;

class TestCoreDatasets : public QObject {
  Q_OBJECT
 private slots:
  void everyListedFileMatchesItsSizeAndHash() {
    const auto files = bundledFiles();
    QVERIFY(files.size() >= 10);
    for (const BundledFile& b : files) {
      QFile f(QString::fromStdString(b.path));
      QVERIFY2(f.open(QIODevice::ReadOnly), b.path.c_str());
      QCOMPARE(uint64_t(f.size()), b.bytes);
      QCryptographicHash h(QCryptographicHash::Sha256);
      QVERIFY(h.addData(&f));
      QCOMPARE(h.result().toHex().toStdString(), b.sha256);
    }
  }

  // Every file under datasets/ is listed (so a stray file there fails too), but for the three
  // pages about the list itself.
  void everyBundledFileIsListed() {
    namespace fs = std::filesystem;
    std::set<std::string> listed;
    for (const BundledFile& b : bundledFiles()) listed.insert(b.relative);
    const fs::path root(datasetsDir());
    int seen = 0;
    for (const auto& e : fs::recursive_directory_iterator(root)) {
      if (!e.is_regular_file()) continue;
      const std::string rel = fs::relative(e.path(), root).generic_string();
      if (rel == "README.md" || rel == "PROVENANCE.md" || rel == "manifest.json") continue;
      ++seen;
      QVERIFY2(listed.count(rel), ("not in datasets/manifest.json: " + rel).c_str());
    }
    QCOMPARE(size_t(seen), listed.size());
  }

  void oneDefaultModelAndListedTokenizers() {
    const auto files = bundledFiles();
    std::set<std::string> tokenizers;
    for (const BundledFile& b : files)
      if (b.kind == "tokenizer") tokenizers.insert(b.path);
    int defaults = 0;
    for (const BundledFile& b : files) {
      if (b.kind == "model") {
        QVERIFY2(!b.tokenizer.empty(), b.relative.c_str());
        QVERIFY2(tokenizers.count(b.tokenizer), b.tokenizer.c_str());
      }
      if (b.isDefault) {
        ++defaults;
        QCOMPARE(b.kind, std::string("model"));
        QCOMPARE(std::filesystem::weakly_canonical(b.path), std::filesystem::weakly_canonical(defaultModelPath()));
        QCOMPARE(std::filesystem::weakly_canonical(b.tokenizer), std::filesystem::weakly_canonical(defaultTokenizerPath()));
      }
    }
    QCOMPARE(defaults, 1);
  }

  void malformedManifestsNameTheField() {
    QTemporaryDir dir;
    const std::string root = dir.path().toStdString();
    const std::string old = datasetsDir();
    qputenv("QS_DATASETS", QByteArray::fromStdString(root));
    auto expect = [&](const std::string& text, const std::string& field) {
      std::ofstream(root + "/manifest.json") << text;
      try {
        (void)bundledFiles();
        QFAIL(("accepted: " + text).c_str());
      } catch (const Error& e) {
        QCOMPARE(e.kind(), ErrorKind::BadInput);
        QVERIFY2(std::string(e.what()).find(field) != std::string::npos, e.what());
        QVERIFY2(std::string(e.what()).find("manifest.json") != std::string::npos, e.what());
      }
    };
    const std::string ok = "{\"path\": \"a.txt\", \"kind\": \"text\", \"title\": \"t\", \"license\": \"l\", \"bytes\": 1, \"sha256\": \"" +
                           std::string(64, 'a') + "\"";
    expect("{", "JSON");
    expect("{\"schema\": 1}", "files");
    expect("{\"schema\": 2, \"files\": []}", "schema");
    expect("{\"schema\": \"1\", \"files\": []}", "schema");
    expect("{\"schema\": 1, \"files\": [" + ok + "}, " + ok + "}]}", "files[1].path");
    expect("{\"schema\": 1, \"files\": [{\"path\": \"../x\", \"kind\": \"text\"}]}", "files[0].path");
    expect("{\"schema\": 1, \"files\": [{\"path\": \"a\", \"kind\": \"text\", \"title\": \"t\", \"license\": \"l\", \"bytes\": -1, \"sha256\": \"" +
               std::string(64, 'a') + "\"}]}",
           "files[0].bytes");
    expect("{\"schema\": 1, \"files\": [{\"path\": \"a\", \"kind\": \"text\", \"title\": \"t\", \"license\": \"l\", \"bytes\": 1, \"sha256\": \"xyz\"}]}",
           "files[0].sha256");
    std::ofstream(root + "/manifest.json") << "{\"schema\": 1, \"files\": [" + ok + "}]}";
    QCOMPARE(bundledFiles().size(), size_t(1));
    qputenv("QS_DATASETS", QByteArray::fromStdString(old));
  }
};

QTEST_GUILESS_MAIN(TestCoreDatasets)
#include "test_core_datasets.moc"
