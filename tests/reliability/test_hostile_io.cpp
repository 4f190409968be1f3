// Issue 28 (docs/reliability.md, "The second hostile corpus"): the defences below the CLI, each
// tested where it lives. The corpus (tests/data/bad2, ctest bad_corpus2.*) checks them end to end.
//  - RegularFile: a FIFO, a device or a directory is refused without blocking (a forked child
//    would hang forever on the old open(); the parent gives it 5 s);
//  - readTextFile: reads only the budget of a 1 GB sparse file; refuses a whole text past 8 MiB;
//    cuts at a UTF-8 boundary;
//  - the HDF5 open policy: external storage, external and soft links refused in a session;
//  - checkJsonShape / parseJsonGuardedUniqueKeys: value counts, duplicate keys;
//  - the BPE pre-tokenizer's regex time limit (catastrophic backtracking fails in well under 10 s);
//  - BPE merges naming non-tokens; the CPU attention refuses heads that do not divide.
#include <fcntl.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <QTemporaryDir>
#include <QtTest>
#include <chrono>
#include <fstream>

#include "core/io/json_guard.h"
#include "core/io/regular_file.h"
#include "core/session/session.h"
#include "core/tokenizer/bpe_tokenizer.h"
#include "kernels/common/error.h"
#include "kernels/ops/cpu_transformer_ops.h"

namespace {

// Runs `fn` in a forked child; true when it exited 0 within `seconds` (a hang is killed).
bool childFinishes(const std::function<int()>& fn, int seconds, int* status = nullptr) {
  const pid_t pid = fork();
  if (pid == 0) _exit(fn());
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int st = 0;
  while (std::chrono::steady_clock::now() < end) {
    if (waitpid(pid, &st, WNOHANG) == pid) {
      if (status) *status = st;
      return WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    usleep(10'000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  return false;
}

// The message of the BadInput `fn` throws ("" when it throws nothing or something else).
template <typename F>
QString badInput(F&& fn) {
  try {
    fn();
  } catch (const qs::Error& e) {
    return e.kind() == qs::ErrorKind::BadInput ? QString::fromStdString(e.what()) : QString("(not BadInput) ") + e.what();
  }
  return {};
}

}  // namespace

class TestHostileIo : public QObject {
  Q_OBJECT
 private slots:
  void fifoRefusedWithoutBlocking() {
    QTemporaryDir dir;
    const std::string fifo = dir.filePath("pipe").toStdString();
    QCOMPARE(mkfifo(fifo.c_str(), 0600), 0);
    // In a child: with the old open() it would wait for a writer forever.
    const bool ok = childFinishes([&] {
      try {
        qs::RegularFile f(fifo, "model file");
      } catch (const qs::Error& e) {
        const std::string w = e.what();
        return w.find("pipe") != std::string::npos && w.find("FIFO") != std::string::npos ? 0 : 2;
      }
      return 3;  // opened: wrong
    }, 5);
    QVERIFY2(ok, "opening a FIFO blocked or was not refused naming it");
    // The readers built on it: a text, a whole file.
    QVERIFY(badInput([&] { qs::readTextFile(fifo, 100); }).contains("FIFO"));
    QVERIFY(badInput([&] { qs::readRegularFile(fifo, "plan file", 1000); }).contains("not a regular plan file"));
  }

  void deviceAndDirectoryRefused() {
    QVERIFY(badInput([] { qs::RegularFile f("/dev/zero", "text file"); }).contains("/dev/zero: is a character device"));
    QTemporaryDir dir;
    const QString msg = badInput([&] { qs::readRegularFile(dir.path().toStdString(), "plan file", 1 << 20); });
    QVERIFY2(msg.contains("is a directory, not a regular plan file"), qPrintable(msg));
    QVERIFY(!msg.contains("bytes"));  // not "9223372036854775807 bytes"
    QVERIFY(badInput([&] { qs::RegularFile f(dir.filePath("missing").toStdString(), "model file"); })
                .contains("cannot open the model file"));
  }

  void sizeLimitBeforeReading() {
    QTemporaryDir dir;
    const std::string p = dir.filePath("big").toStdString();
    { std::ofstream(p) << std::string(2000, 'x'); }
    QVERIFY(badInput([&] { qs::readRegularFile(p, "plan file", 1000); }).contains("2000 bytes, over the limit of 1000"));
    QCOMPARE(qs::readRegularFile(p, "plan file", 2000).size(), size_t(2000));
  }

  void textReaderReadsOnlyItsBudget() {
    QTemporaryDir dir;
    const std::string p = dir.filePath("sparse.txt").toStdString();
    {
      std::ofstream f(p);
      f << "h\xC3\xA9llo";  // "héllo": é is 2 bytes at offsets 1-2
    }
    QVERIFY(truncate(p.c_str(), off_t(1) << 30) == 0);  // 1 GB, sparse
    // The budget is what is read: 2 bytes would end inside é, which is dropped.
    QCOMPARE(qs::readTextFile(p, 2), std::string("h"));
    QCOMPARE(qs::readTextFile(p, 3), std::string("h"));  // a complete é at the end is dropped too (harmless)
    QCOMPARE(qs::readTextFile(p, 6), std::string("h\xC3\xA9llo"));
    QCOMPARE(qs::readTextFile(p, 4096).size(), size_t(4096));
    // No budget: the whole text, refused past kMaxTextBytes without reading it.
    const auto t0 = std::chrono::steady_clock::now();
    const QString msg = badInput([&] { qs::readTextFile(p); });
    QVERIFY2(msg.contains("sparse.txt") && msg.contains("over the limit"), qPrintable(msg));
    QVERIFY(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  }

  void hdf5ExternalStorageRefused() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("s.qsession").toStdString();
    // A sensitivity table whose first dataset keeps its 64 bytes in /etc/passwd.
    writeSessionWith(path, [](hid_t f) {
      const hid_t g = H5Gcreate2(f, "/sensitivity", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      for (const char* k : {"tokens", "context"}) setIntAttr(g, k, 8);
      setDoubleAttr(g, "base_perplexity", 1.0);
      setStrAttr(g, "model_hash", "x");
      setStrAttr(g, "text_source", "t");
      const hid_t l = H5Gcreate2(g, "layers", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
      H5Pset_external(dcpl, "/etc/passwd", 0, 64);
      const hsize_t n = 64;
      const hid_t space = H5Screate_simple(1, &n, nullptr);
      const hid_t type = H5Tcopy(H5T_C_S1);
      H5Tset_size(type, 1);
      const hid_t d = H5Dcreate2(l, "weight_name", type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
      H5Dclose(d), H5Tclose(type), H5Sclose(space), H5Pclose(dcpl), H5Gclose(l), H5Gclose(g);
    });
    const QString msg = badInput([&] { qs::loadSession(path); });
    QVERIFY2(msg.contains("s.qsession") && msg.contains("/sensitivity/layers/weight_name") &&
                 msg.contains("external files"),
             qPrintable(msg));
  }

  void hdf5LinksRefused() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("s.qsession").toStdString();
    writeSessionWith(path, [](hid_t f) { H5Lcreate_external("/tmp/elsewhere.h5", "/plans", f, "/plans", H5P_DEFAULT, H5P_DEFAULT); });
    QString msg = badInput([&] { qs::loadSession(path); });
    QVERIFY2(msg.contains("/plans") && msg.contains("external link"), qPrintable(msg));
    writeSessionWith(path, [](hid_t f) { H5Lcreate_soft("/nowhere", f, "/plans", H5P_DEFAULT, H5P_DEFAULT); });
    msg = badInput([&] { qs::loadSession(path); });
    QVERIFY2(msg.contains("/plans") && msg.contains("soft"), qPrintable(msg));
  }

  void jsonShapeCountsBeforeParsing() {
    std::string arr = "[";
    for (int i = 0; i < 1000; ++i) arr += i ? ",0" : "0";
    arr += "]";
    QVERIFY(badInput([&] { qs::parseJsonGuarded("f.json", "plan", arr, qs::kMaxJsonDepth, 500); })
                .contains("f.json: plan: JSON holds more than 500 values"));
    QCOMPARE(qs::parseJsonGuarded("f.json", "plan", arr, qs::kMaxJsonDepth, 1001).size(), size_t(1000));
    const qs::JsonShape s = qs::checkJsonShape("f", "", R"({"a": [1, 2], "b": {"c": "x,y"}, "d": 3})");
    QCOMPARE(s.topMembers, uint64_t(3));
    QCOMPARE(qs::checkJsonShape("f", "", "{}").topMembers, uint64_t(0));
    QCOMPARE(qs::checkJsonShape("f", "", R"({"a":1})").topMembers, uint64_t(1));
  }

  void duplicateKeysRefused() {
    QVERIFY(badInput([] { qs::parseJsonGuardedUniqueKeys("h.st", "header", R"({"a": {"x": 1}, "a": 2})"); })
                .contains("h.st: a: the key occurs twice"));
    // The same key in different objects is fine.
    QCOMPARE(qs::parseJsonGuardedUniqueKeys("h.st", "header", R"({"a": {"x": 1}, "b": {"x": 2}})").size(), size_t(2));
  }

  void regexBacktrackingIsBounded() {
    qs::Vocabulary v;
    for (int c = 0; c < 128; ++c) v.tokens.push_back(std::string(1, char(c)));
    v.types.assign(v.tokens.size(), qs::TokenType::Normal);
    qs::BpeOptions o;
    o.splitRegexes = {"(a|aa)+$"};
    const qs::BpeTokenizer tok(v, {}, o, "tok.json");
    const auto t0 = std::chrono::steady_clock::now();
    const QString msg = badInput([&] { tok.encode(std::string(80, 'a') + "b"); });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    QVERIFY2(msg.contains("tok.json: pre_tokenizer") && msg.contains("time limit"), qPrintable(msg));
    QVERIFY2(s < 10, qPrintable(QString::number(s)));
    // Ordinary text through the same pattern still works.
    QVERIFY(!tok.encode("aaaa").empty());
  }

  // The limit is per search, not per text: 8 MiB (the whole-text limit) through GPT-2's pattern,
  // and a Digits split that scans 8 MiB without a single match, both finish without a time-out.
  void regexLimitSparesLongTexts() {
    qs::Vocabulary v;
    for (int c = 0; c < 128; ++c) v.tokens.push_back(std::string(1, char(c)));
    v.types.assign(v.tokens.size(), qs::TokenType::Normal);
    std::string words;
    while (words.size() < (size_t(8) << 20)) words += "hello world, it's 42 ";
    qs::BpeOptions gpt2;
    const qs::BpeTokenizer a(v, {}, gpt2, "gpt2.json");
    // "hello", " world", ",", " it", "'s", " 42" per repetition (the space joins the next word), and the last " ".
    QCOMPARE(a.preTokenize(words).size(), words.size() / 21 * 6 + 1);
    qs::BpeOptions digits;
    digits.splitRegexes = {R"(\p{N}+)"};
    const qs::BpeTokenizer b(v, {}, digits, "digits.json");
    QCOMPARE(b.preTokenize(std::string(size_t(8) << 20, 'x')).size(), size_t(1));
  }

  void mergesMustNameTokens() {
    qs::Vocabulary v;
    v.tokens = {"a", "b", "ab"};
    v.types.assign(3, qs::TokenType::Normal);
    QVERIFY(badInput([&] { qs::BpeTokenizer t(v, {"a b", "a zz"}, {}, "tok.json"); })
                .contains("tok.json: merges[1]: \"a zz\": its right part is not in the vocabulary"));
    QVERIFY(badInput([&] { qs::BpeTokenizer t(v, {"b a"}, {}, "tok.json"); }).contains("the merged token"));
    qs::BpeTokenizer ok(v, {"a b"}, {}, "tok.json");
    QCOMPARE(ok.encode("ab").size(), size_t(1));
  }

  void cpuAttentionRefusesBadHeads() {
    auto ops = qs::createCpuTransformerOps();
    qs::AttentionShape s;
    s.nHeads = 4, s.nKvHeads = 3, s.headDim = 4, s.maxSeq = 4;
    std::vector<float> q(16), k(12), v(12), cache(64), out(16);
    const int32_t pos = 0;
    QVERIFY(badInput([&] { ops->attention(q.data(), k.data(), v.data(), &pos, 1, s, cache.data(), cache.data(), out.data()); })
                .contains("head_count_kv"));
    s.nKvHeads = 0;
    QVERIFY(badInput([&] { ops->attention(q.data(), k.data(), v.data(), &pos, 1, s, cache.data(), cache.data(), out.data()); })
                .contains("head_count_kv"));
  }

 private:
  static void setIntAttr(hid_t obj, const char* name, int64_t v) {
    const hid_t sp = H5Screate(H5S_SCALAR);
    const hid_t a = H5Acreate2(obj, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a), H5Sclose(sp);
  }
  static void setDoubleAttr(hid_t obj, const char* name, double v) {
    const hid_t sp = H5Screate(H5S_SCALAR);
    const hid_t a = H5Acreate2(obj, name, H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_DOUBLE, &v);
    H5Aclose(a), H5Sclose(sp);
  }
  static void setStrAttr(hid_t obj, const char* name, const std::string& v) {
    const hid_t sp = H5Screate(H5S_SCALAR);
    const hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, v.size());
    const hid_t a = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, t, v.data());
    H5Aclose(a), H5Tclose(t), H5Sclose(sp);
  }
  // A session file with the root attributes and whatever `fill` adds.
  template <typename F>
  static void writeSessionWith(const std::string& path, F&& fill) {
    const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    setStrAttr(f, "format", "quantscope-session");
    setIntAttr(f, "schema_version", 1);
    setStrAttr(f, "model_path", "m.bin");
    setStrAttr(f, "model_hash", "h");
    fill(f);
    H5Fclose(f);
  }
};

QTEST_GUILESS_MAIN(TestHostileIo)
#include "test_hostile_io.moc"
