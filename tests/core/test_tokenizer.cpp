// core/tokenizer: llama.cpp's own test vectors for the Llama SentencePiece vocabulary (in full),
// llama2.c's encoder on its published prompts, byte-level BPE against Hugging Face `tokenizers`,
// decode round trips, and hostile tokenizer files.
#include <QtTest>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <sentencepiece_trainer.h>

#include "core/model/gguf_writer.h"
#include "core/model/model_file.h"
#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer_loaders.h"
#include "kernels/common/error.h"
#include "tests/core/python_fixture.h"
#include "tests/test_util.h"

using namespace qs;

namespace {

struct Vector {
  std::string text;
  std::vector<int32_t> ids;
};

// llama.cpp's test-tokenizer-0 format: inputs separated by "\n__ggml_vocab_test__\n", one line
// of space-separated ids per input.
std::vector<Vector> readLlamaCppVectors(const QString& base) {
  const std::string inp = test::readAll(base + ".inp").toStdString();
  const std::string out = test::readAll(base + ".out").toStdString();
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(inp.substr(pos));
      break;
    }
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<Vector> v;
  size_t line = 0, pos = 0;
  while (pos < out.size() && line < texts.size()) {
    size_t end = out.find('\n', pos);
    if (end == std::string::npos) end = out.size();
    Vector x{texts[line++], {}};
    std::istringstream ss(out.substr(pos, end - pos));
    for (int32_t id; ss >> id;) x.ids.push_back(id);
    v.push_back(std::move(x));
    pos = end + 1;
  }
  return v;
}

QString idsText(const std::vector<int32_t>& ids) {
  QStringList s;
  for (int32_t i : ids) s << QString::number(i);
  return s.join(' ');
}

std::unique_ptr<Tokenizer> vocabGgufTokenizer() {
  auto m = openModel(test::datasetPath("tokenizers/llama2/ggml-vocab-llama-spm.gguf").toStdString());
  return tokenizerFromGguf(*m);
}

void expectBadTokenizer(const QString& path, const char* fragment, int32_t vocabSize = -1) {
  try {
    openTokenizer(path.toStdString(), vocabSize);
    QFAIL(qPrintable("expected an error for " + path));
  } catch (const Error& e) {
    QVERIFY2(e.isUserError(), e.what());
    QVERIFY2(std::string(e.what()).find(fragment) != std::string::npos, e.what());
  }
}

// A serialized SentencePiece ModelProto written field by field (sentencepiece_model.proto):
// pieces (1: piece 1, score 2, type 3), trainer_spec (2: model_type 3 = BPE, byte_fallback 35,
// unk/bos/eos/pad ids 40–43), normalizer_spec (3: name 1 "identity", add_dummy_prefix 3,
// remove_extra_whitespaces 4, escape_whitespaces 5) — how Llama 2's tokenizer.model is set up.
struct Proto {
  std::string b;
  void varint(uint64_t v) {
    do {
      uint8_t c = v & 0x7F;
      v >>= 7;
      if (v) c |= 0x80;
      b += char(c);
    } while (v);
  }
  void tag(int field, int wire) { varint(uint64_t(field) << 3 | uint64_t(wire)); }
  void bytes(int field, const std::string& s) {
    tag(field, 2);
    varint(s.size());
    b += s;
  }
  void integer(int field, int64_t v) {
    tag(field, 0);
    varint(uint64_t(v));
  }
  void f32(int field, float v) {
    tag(field, 5);
    char c[4];
    std::memcpy(c, &v, 4);
    b.append(c, 4);
  }
};

// Llama 2's vocabulary (llama2.c's tokenizer.bin: f32 score, i32 length, bytes; spaces stored
// as " ") as a tokenizer.model.
std::string llama2ModelProto() {
  const QByteArray bin = test::readAll(test::datasetPath("tokenizers/llama2/tokenizer.bin"));
  Proto m;
  size_t off = 4;
  for (int id = 0; off + 8 <= size_t(bin.size()); ++id) {
    float score;
    int32_t n;
    std::memcpy(&score, bin.data() + off, 4);
    std::memcpy(&n, bin.data() + off + 4, 4);
    std::string piece(bin.data() + off + 8, size_t(n));
    off += 8 + size_t(n);
    int type = 1;
    if (id == 0) piece = "<unk>", type = 2;
    if (id == 1) piece = "<s>", type = 3;
    if (id == 2) piece = "</s>", type = 3;
    if (id > 2 && piece.size() == 6 && piece.compare(0, 3, "<0x") == 0) type = 6;
    for (size_t p; (p = piece.find(' ')) != std::string::npos;) piece.replace(p, 1, "\xE2\x96\x81");
    Proto sp;
    sp.bytes(1, piece);
    sp.f32(2, score);
    sp.integer(3, type);
    m.bytes(1, sp.b);
  }
  Proto trainer;
  trainer.integer(3, 2);
  trainer.integer(35, 1);
  trainer.integer(40, 0);
  trainer.integer(41, 1);
  trainer.integer(42, 2);
  trainer.integer(43, -1);
  m.bytes(2, trainer.b);
  Proto norm;
  norm.bytes(1, "identity");
  norm.integer(3, 1);
  norm.integer(4, 0);
  norm.integer(5, 1);
  m.bytes(3, norm.b);
  return m.b;
}

}  // namespace

class TestTokenizer : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;

 private slots:
  void llamaCppTestVectorsPassInFull() {
    auto tok = vocabGgufTokenizer();
    QCOMPARE(tok->kindName(), std::string_view("sentencepiece-bpe"));
    QCOMPARE(tok->vocabSize(), 32000);
    const auto vectors = readLlamaCppVectors(test::datasetPath("tokenizers/llama2/ggml-vocab-llama-spm.gguf"));
    QCOMPARE(vectors.size(), size_t(46));
    int failed = 0;
    for (const auto& v : vectors) {
      const auto ids = tok->encode(v.text);  // add_special = false, as test-tokenizer-0 runs it
      if (ids != v.ids) {
        ++failed;
        qWarning("text %s\n  want %s\n  have %s", QByteArray::fromStdString(v.text).toPercentEncoding().constData(),
                 qPrintable(idsText(v.ids)), qPrintable(idsText(ids)));
      }
    }
    QCOMPARE(failed, 0);
  }

  void llamaCppDecodeRoundTrips() {
    auto tok = vocabGgufTokenizer();
    for (const auto& v : readLlamaCppVectors(test::datasetPath("tokenizers/llama2/ggml-vocab-llama-spm.gguf"))) {
      QVERIFY2(tok->decode(v.ids) == v.text,
               qPrintable(QByteArray::fromStdString(v.text).toPercentEncoding() + " decoded as " +
                          QByteArray::fromStdString(tok->decode(v.ids)).toPercentEncoding()));
      std::vector<int32_t> withBos{tok->bos()};
      withBos.insert(withBos.end(), v.ids.begin(), v.ids.end());
      QCOMPARE(tok->decode(withBos), v.text);
    }
    QCOMPARE(tok->decode(std::vector<int32_t>{1}, true), std::string("<s>"));
    QCOMPARE(tok->encode("", {.addBos = true}), std::vector<int32_t>{1});
    QCOMPARE(tok->encode("<s>Hi", {.addBos = false, .parseSpecial = true}),
             (std::vector<int32_t>{1, tok->encode("Hi")[0]}));
    QVERIFY(tok->addsBosByDefault());
  }

  void llama2cEncoderMatchesRunC() {
    // llama2.c's test.c vectors (Meta's example prompts), BOS on, on llama2.c's tokenizer.bin.
    auto tok = loadLlama2cTokenizer(test::datasetPath("tokenizers/llama2/tokenizer.bin").toStdString(), 32000);
    const std::vector<Vector> vectors = {
        {"", {1}},
        {"I believe the meaning of life is", {1, 306, 4658, 278, 6593, 310, 2834, 338}},
        {"Simply put, the theory of relativity states that ",
         {1, 3439, 17632, 1925, 29892, 278, 6368, 310, 14215, 537, 5922, 393, 29871}},
        {"A brief message congratulating the team on the launch:\n\n        Hi everyone,\n\n        I just ",
         {1, 319, 11473, 2643, 378, 629, 271, 18099, 278, 3815, 373, 278, 6826, 29901, 13, 13, 4706, 6324,
          14332, 29892, 13, 13, 4706, 306, 925, 29871}},
        {"Translate English to French:\n\n        sea otter => loutre de mer\n        peppermint => menthe "
         "poivrée\n        plush girafe => girafe peluche\n        cheese =>",
         {1,    4103, 9632, 4223,  304,  5176, 29901, 13,   13,   4706,  7205, 4932, 357,  1149, 301,  449,  276,
          316,  2778, 13,   4706,  1236, 407,  837,   524,  1149, 6042,  354,  772,  440,  29878, 1318, 13,  4706,
          715,  1878, 330,  3055,  1725, 1149, 330,   3055, 1725, 4639,  28754, 13,  4706, 923,  968,  1149}},
    };
    for (const auto& v : vectors) {
      const auto ids = tok->encode(v.text, {.addBos = true});
      QVERIFY2(ids == v.ids, qPrintable(QString::fromStdString(v.text) + "\n have " + idsText(ids) +
                                        "\n want " + idsText(v.ids)));
      // decode drops BOS and the dummy-prefix space
      QCOMPARE(tok->decode(ids), v.text);
    }
    // run.c's streaming decode: after BOS the leading space goes.
    QCOMPARE(tok->decodeNext(1, 306), std::string("I"));
    QCOMPARE(tok->decodeNext(306, 4658), std::string(" believe"));
    QCOMPARE(tok->decodeNext(-1, 13), std::string("\n"));  // a byte token
  }

  void bothSpmModesAgreeOnOrdinaryText() {
    // The two encoders differ in corner cases only; on running English text they agree, and the
    // llama2.c file and the GGUF vocabulary (the same Llama 2 vocabulary) agree in llama.cpp mode.
    auto bin = loadLlama2cTokenizer(test::datasetPath("tokenizers/llama2/tokenizer.bin").toStdString(), 32000);
    auto gguf = vocabGgufTokenizer();
    const QString text = QString::fromUtf8(test::readAll(test::datasetPath("text/tinystories_validation_head.txt")));
    const QStringList lines = text.split('\n', Qt::SkipEmptyParts).mid(0, 60);
    for (const QString& l : lines) {
      const std::string s = l.toStdString();
      const auto a = bin->encode(s, {}, SpmEncodeMode::Llama2c);
      const auto b = bin->encode(s, {}, SpmEncodeMode::LlamaCpp);
      const auto c = gguf->encode(s);
      QVERIFY2(a == b, qPrintable(l));
      QVERIFY2(b == c, qPrintable(l));
      QCOMPARE(bin->decode(a), s);
    }
  }

  void llama2cModeMakesRunCsChoices() {
    // run.c's encode() written out literally (rescan for the best pair after every merge) as the
    // reference for the O(n log n) implementation, on real text and on random Unicode.
    auto tok = loadLlama2cTokenizer(test::datasetPath("models/stories260K/tok512.bin").toStdString(), 512);
    const Vocabulary& v = tok->vocab();
    auto literal = [&](const std::string& text) {
      std::vector<int32_t> t{1};
      if (text.empty()) return t;
      t.push_back(v.find(" "));
      for (size_t off = 0; off < text.size();) {
        size_t n = 1;
        while (off + n < text.size() && n < 4 && (uint8_t(text[off + n]) & 0xC0) == 0x80) ++n;
        const int32_t id = v.find(text.substr(off, n));
        if (id >= 0) t.push_back(id);
        else for (size_t k = 0; k < n; ++k) t.push_back(uint8_t(text[off + k]) + 3);
        off += n;
      }
      while (true) {
        float best = -1e10f;
        int32_t bestId = -1;
        size_t bestIdx = 0;
        for (size_t i = 0; i + 1 < t.size(); ++i) {
          const int32_t id = v.find(v.tokens[size_t(t[i])] + v.tokens[size_t(t[i + 1])]);
          if (id >= 0 && v.scores[size_t(id)] > best) best = v.scores[size_t(id)], bestId = id, bestIdx = i;
        }
        if (bestId < 0) break;
        t[bestIdx] = bestId;
        t.erase(t.begin() + std::ptrdiff_t(bestIdx) + 1);
      }
      return t;
    };
    const QString text = QString::fromUtf8(test::readAll(test::datasetPath("text/tinystories_validation_head.txt")));
    std::vector<std::string> samples;
    for (const QString& l : text.split('\n', Qt::SkipEmptyParts).mid(0, 40)) samples.push_back(l.toStdString());
    std::mt19937 rng(9);
    const char* pieces[] = {"a", "the ", "é", "🦙", "  ", "\n", "ing", "x", "日本", "\t", "aaaa", "<0x41>"};
    for (int i = 0; i < 300; ++i) {
      std::string s;
      for (int k = int(rng() % 25); k > 0; --k) s += pieces[rng() % std::size(pieces)];
      samples.push_back(s);
    }
    for (const auto& s : samples) {
      const auto have = tok->encode(s, {.addBos = true}, SpmEncodeMode::Llama2c);
      QVERIFY2(have == literal(s), qPrintable(QString::fromStdString(s)));
    }
  }

  void stories260KTokenizer() {
    auto tok = loadLlama2cTokenizer(test::datasetPath("models/stories260K/tok512.bin").toStdString(), 512);
    QCOMPARE(tok->vocabSize(), 512);
    QCOMPARE(tok->bos(), 1);
    const std::string s = "Once upon a time, there was a little girl named Lily. She loved to play outside.";
    const auto ids = tok->encode(s, {.addBos = true});
    QCOMPARE(ids.front(), 1);
    QVERIFY(ids.size() < s.size());  // merges happened
    QCOMPARE(tok->decode(ids), s);
    // Characters outside the 512-token vocabulary fall back to bytes and round-trip.
    const std::string u = "naïve 🦙 ok";
    QCOMPARE(tok->decode(tok->encode(u)), u);
    // The file alone (size read to the end) gives the same vocabulary.
    auto whole = loadLlama2cTokenizer(test::datasetPath("models/stories260K/tok512.bin").toStdString());
    QCOMPARE(whole->vocabSize(), 512);
  }

  void byteLevelBpeMatchesHuggingFace_data() {
    QTest::addColumn<QString>("style");
    QTest::addColumn<QString>("file");
    for (const char* style : {"gpt2", "llama3"})
      for (const char* file : {"tokenizer.json", "vocab.gguf"})
        QTest::newRow(qPrintable(QString("%1 %2").arg(style, file))) << style << file;
  }
  void byteLevelBpeMatchesHuggingFace() {
    QS_REQUIRE_PYTHON();
    QFETCH(QString, style);
    QFETCH(QString, file);
    const QString dir = tmp_.filePath("hf");
    if (!QFileInfo::exists(dir))
      QVERIFY(test::runFixtureScript("make_tokenizer_fixture.py",
                                     {dir, test::datasetPath("text/tinyshakespeare.txt")}));
    auto tok = openTokenizer((dir + "/" + style + "/" + file).toStdString());
    QCOMPARE(tok->kindName(), std::string_view("byte-level-bpe"));
    const auto expected = nlohmann::json::parse(test::readAll(dir + "/" + style + "/expected.json").toStdString());
    QVERIFY(expected.size() > 10);
    for (const auto& e : expected) {
      const std::string text = e["text"];
      const auto want = e["ids"].get<std::vector<int32_t>>();
      const auto have = tok->encode(text, {.parseSpecial = true});  // HF always splits specials
      QVERIFY2(have == want, qPrintable(QString::fromStdString(text) + "\n have " + idsText(have) +
                                        "\n want " + idsText(want)));
      QCOMPARE(tok->decode(have, true), text);
    }
  }

  // SentencePiece-style tokenizer.json (Llama 2, Mistral, TinyLlama) against transformers:
  // tests/data/spm_ref (scripts/reference/make_spm_tokenizer_fixtures.py) holds a BPE with byte
  // fallback in three layouts — transformers 5's Metaspace(prepend first, no split), transformers
  // 4's Prepend+Replace normalizer, Metaspace(always, split) — and the ids and decoded text
  // transformers gives for texts with spaces, tabs, newlines, unknown characters and special
  // tokens. The live `reference` test (QS_SPM_REF_DIR) adds Llama 2's 32,000-token vocabulary.
  void metaspaceTokenizerJsonMatchesTransformers() {
    const char* env = std::getenv("QS_SPM_REF_DIR");
    const QString root = env && *env ? QString(env) : QString(QS_SOURCE_DIR) + "/tests/data/spm_ref";
    const QStringList cases = QDir(root).entryList(QDir::Dirs | QDir::NoDotAndDotDot);
    QVERIFY(cases.size() >= 3);
    for (const QString& c : cases) {
      auto tok = openTokenizer((root + "/" + c + "/tokenizer.json").toStdString());
      QCOMPARE(tok->kindName(), std::string_view("metaspace-bpe"));
      QVERIFY(tok->addsBosByDefault());
      const auto e = nlohmann::json::parse(test::readAll(root + "/" + c + "/expected.json").toStdString());
      const auto& texts = e["texts"];
      QVERIFY(texts.size() >= 10);
      for (size_t i = 0; i < texts.size(); ++i) {
        const std::string text = texts[i];
        const auto want = e["ids"][i].get<std::vector<int32_t>>();
        const auto have = tok->encode(text, {.addBos = tok->addsBosByDefault(), .parseSpecial = true});
        QVERIFY2(have == want, qPrintable(c + ": \"" + QString::fromStdString(text) + "\"\n have " + idsText(have) +
                                          "\n want " + idsText(want)));
        QCOMPARE(tok->decode(have), e["decoded"][i].get<std::string>());
      }
    }
  }

  // tokenizer.model through libsentencepiece. Llama 2's vocabulary written as a ModelProto gives
  // llama.cpp's ids on all of its test vectors (llama.cpp's SPM tokenizer reproduces
  // sentencepiece); a BPE model trained by the library on Shakespeare gives the same ids from
  // the library and from our own SpmTokenizer over the same pieces and scores.
  void sentencePieceModelFiles() {
    const QString llama = test::writeFile(tmp_, "llama2.model", QByteArray::fromStdString(llama2ModelProto()));
    auto tok = openTokenizer(llama.toStdString());
    QCOMPARE(tok->kindName(), std::string_view("sentencepiece-model"));
    QCOMPARE(tok->vocabSize(), 32000);
    QCOMPARE(tok->bos(), 1);
    QCOMPARE(tok->eos(), 2);
    QVERIFY(tok->addsBosByDefault());
    const auto vectors = readLlamaCppVectors(test::datasetPath("tokenizers/llama2/ggml-vocab-llama-spm.gguf"));
    QVERIFY(vectors.size() > 40);
    for (const Vector& v : vectors) {
      const auto have = tok->encode(v.text);
      QVERIFY2(have == v.ids, qPrintable(QString::fromStdString(v.text) + "\n have " + idsText(have) +
                                         "\n want " + idsText(v.ids)));
    }
    QCOMPARE(tok->decode(tok->encode("Hello world\n  two", {.addBos = true})), std::string("Hello world\n  two"));
    QCOMPARE(tok->encode("<s>x", {.parseSpecial = true}).front(), 1);
    QVERIFY(tok->encode("<s>x").front() != 1);
    // Trained by the library; our SpmTokenizer (llama.cpp's algorithm) on its pieces agrees.
    const std::string prefix = tmp_.filePath("trained").toStdString();
    const auto st = sentencepiece::SentencePieceTrainer::Train(
        "--input=" + test::datasetPath("text/tinyshakespeare.txt").toStdString() + " --model_prefix=" + prefix +
        " --vocab_size=600 --model_type=bpe --byte_fallback=true --normalization_rule_name=identity"
        " --remove_extra_whitespaces=false --input_sentence_size=4000 --minloglevel=2");
    QVERIFY2(st.ok(), st.ToString().c_str());
    auto trained = openTokenizer(prefix + ".model");
    QCOMPARE(trained->kindName(), std::string_view("sentencepiece-model"));
    QCOMPARE(trained->vocabSize(), 600);
    Vocabulary v = trained->vocab();
    SpmTokenizer ours(v, SpmOptions{});
    for (const char* text : {"First Citizen:\nBefore we proceed any further, hear me speak.", "  two  spaces",
                             "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\xA6\x99", "tab\there", "", "x"}) {
      const auto lib = trained->encode(text), mine = ours.encode(text, {});
      QVERIFY2(lib == mine, qPrintable(QString(text) + "\n lib  " + idsText(lib) + "\n ours " + idsText(mine)));
      QCOMPARE(trained->decode(lib), std::string(text));
    }
    // Not a model: the library's refusal, named.
    const QString bad = test::writeFile(tmp_, "bad.model", QByteArray("\x0A\x05\x0A\x03" "abc\xFF\xFF", 9));
    expectBadTokenizer(bad, "bad.model");
  }

  // Chat templates through minja against transformers' Jinja environment
  // (tests/data/chat_ref, scripts/reference/make_chat_template_fixtures.py): SmolLM2's, Llama 2
  // chat's, Llama 3's and Gemma 3's templates on five conversations with and without the
  // generation prompt; a template's raise_exception (roles not alternating) is a BadInput.
  void chatTemplatesMatchTransformers() {
    const char* env = std::getenv("QS_CHAT_REF_DIR");
    const QString root = env && *env ? QString(env) : QString(QS_SOURCE_DIR) + "/tests/data/chat_ref";
    const auto cases = nlohmann::json::parse(test::readAll(root + "/cases.json").toStdString());
    QVERIFY(cases.size() >= 40);
    int errors = 0;
    for (const auto& c : cases) {
      const ChatTemplate t{c["template"].get<std::string>(), c["name"].get<std::string>()};
      std::vector<ChatMessage> msgs;
      for (const auto& m : c["messages"]) msgs.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
      const auto render = [&] {
        return applyChatTemplate(t, msgs, c["add_generation_prompt"].get<bool>(), c["bos"].get<std::string>(),
                                 c["eos"].get<std::string>());
      };
      if (c.value("error", false)) {
        ++errors;
        try {
          render();
          QFAIL(qPrintable("no error for " + QString::fromStdString(t.origin)));
        } catch (const Error& e) {
          QVERIFY2(e.isUserError() && std::string(e.what()).find(t.origin) != std::string::npos, e.what());
        }
        continue;
      }
      const std::string have = render();
      QVERIFY2(have == c["expected"].get<std::string>(),
               qPrintable(QString::fromStdString(t.origin + "\n have: " + have + "\n want: " + c["expected"].get<std::string>())));
    }
    QCOMPARE(errors, 4);
    // A template that does not parse names where it came from.
    try {
      applyChatTemplate({"{% for m in messages %}", "broken.jinja"}, {{"user", "x"}}, true, "<s>", "</s>");
      QFAIL("no error for a broken template");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("broken.jinja") != std::string::npos, e.what());
    }
  }

  void tokenizerForModelFindsTheModelsOwn() {
    auto gguf = openModel(test::datasetPath("tokenizers/llama2/ggml-vocab-llama-spm.gguf").toStdString());
    auto t = tokenizerForModel(*gguf);
    QVERIFY(t);
    QCOMPARE(t->vocabSize(), 32000);
    auto l2c = openModel(test::stories260K().toStdString());
    QVERIFY(!tokenizerForModel(*l2c));  // llama2.c keeps its tokenizer in a separate file
    auto byPath = openTokenizer(test::datasetPath("models/stories260K/tok512.bin").toStdString(), 512);
    QCOMPARE(byPath->vocabSize(), 512);
    QS_REQUIRE_PYTHON();
    const QString dir = tmp_.filePath("hf");
    if (!QFileInfo::exists(dir))
      QVERIFY(test::runFixtureScript("make_tokenizer_fixture.py",
                                     {dir, test::datasetPath("text/tinyshakespeare.txt")}));
    QVERIFY(test::runFixtureScript("make_safetensors_fixture.py", {"gpt2", dir + "/gpt2"}));
    auto st = openModel((dir + "/gpt2/model.safetensors").toStdString());
    auto bpe = tokenizerForModel(*st);  // tokenizer.json beside the weights
    QVERIFY(bpe);
    QCOMPARE(bpe->kindName(), std::string_view("byte-level-bpe"));
  }

  // BOS / EOS rules of Hugging Face tokenizer files: a Llama-3 style post-processor (a Sequence
  // holding the TemplateProcessing) names BOS; tokenizer_config.json's add_bos_token = false
  // wins (SmolLM2); config.json's eos_token_id list ends generation; special tokens written in
  // the text are matched only when asked.
  void hfBosEosRules() {
    QDir(tmp_.path()).mkpath("bos");
    const QByteArray tokJson = R"({
      "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "<|begin_of_text|>": 3, "<|im_start|>": 4, "<|eot_id|>": 5},
                "merges": ["a b"]},
      "added_tokens": [{"id": 3, "content": "<|begin_of_text|>", "special": true},
                       {"id": 4, "content": "<|im_start|>", "special": true},
                       {"id": 5, "content": "<|eot_id|>", "special": true}],
      "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
      "post_processor": {"type": "Sequence", "processors": [
          {"type": "ByteLevel"},
          {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                                                    {"Sequence": {"id": "A", "type_id": 0}}]}]}
    })";
    const QString path = test::writeFile(tmp_, "bos/tokenizer.json", tokJson);
    {
      auto tok = openTokenizer(path.toStdString());
      QCOMPARE(tok->bos(), 3);
      QVERIFY(tok->addsBosByDefault());
      QCOMPARE(tok->sequenceStart(), 3);
      const auto ids = tok->encode("ab<|im_start|>", {.addBos = true, .parseSpecial = true});
      QCOMPARE(ids, (std::vector<int32_t>{3, 2, 4}));
      const auto plain = tok->encode("<|im_start|>", {.parseSpecial = false});
      QVERIFY(std::find(plain.begin(), plain.end(), 4) == plain.end());  // plain text, not the id
    }
    test::writeFile(tmp_, "bos/tokenizer_config.json", R"({"add_bos_token": false, "bos_token": "<|im_start|>"})");
    test::writeFile(tmp_, "bos/config.json", R"({"eos_token_id": [5, 4]})");
    auto tok = openTokenizer(path.toStdString());
    QCOMPARE(tok->bos(), 4);
    QVERIFY(!tok->addsBosByDefault());
    QCOMPARE(tok->sequenceStart(), -1);  // has a BOS, told not to add it
    const auto stops = tok->stopIds();
    QVERIFY(std::find(stops.begin(), stops.end(), 5) != stops.end());
    QVERIFY(std::find(stops.begin(), stops.end(), 4) != stops.end());
  }

  void ggufAddBosFalseIsHonoured() {
    auto gguf = openModel(test::datasetPath("tokenizers/llama2/ggml-vocab-llama-spm.gguf").toStdString());
    auto t = tokenizerForModel(*gguf);
    QVERIFY(t->addsBosByDefault());  // the llama vocabulary adds BOS (no key: llama.cpp's default)
    QCOMPARE(t->sequenceStart(), t->bos());
    // The same vocabulary with tokenizer.ggml.add_bos_token = false (and an eot id).
    GgufWriter w;
    for (const MetaEntry& e : gguf->metadata())
      if (e.key != "tokenizer.ggml.add_bos_token") w.addMeta(e);
    w.addMeta({"tokenizer.ggml.add_bos_token", "bool", false});
    w.addMeta({"tokenizer.ggml.eot_token_id", "u32", 7});
    const QString path = test::writeFile(tmp_, "nobos.gguf", QByteArray::fromStdString(w.header()));
    auto nobos = openTokenizer(path.toStdString());
    QVERIFY(!nobos->addsBosByDefault());
    QCOMPARE(nobos->sequenceStart(), -1);
    const auto stops = nobos->stopIds();
    QVERIFY(std::find(stops.begin(), stops.end(), 7) != stops.end());
    QVERIFY(std::find(stops.begin(), stops.end(), nobos->eos()) != stops.end());
  }

  void bpeHandlesArbitraryBytes() {
    QS_REQUIRE_PYTHON();
    const QString dir = tmp_.filePath("hf");
    if (!QFileInfo::exists(dir))
      QVERIFY(test::runFixtureScript("make_tokenizer_fixture.py",
                                     {dir, test::datasetPath("text/tinyshakespeare.txt")}));
    auto tok = openTokenizer((dir + "/gpt2/tokenizer.json").toStdString());
    std::mt19937 rng(5);
    for (int round = 0; round < 200; ++round) {
      std::string s(size_t(rng() % 40), '\0');
      for (char& c : s) c = char(rng() & 0xFF);
      const auto ids = tok->encode(s);  // invalid UTF-8 included: must not crash
      for (int32_t id : ids) QVERIFY(id >= 0 && id < tok->vocabSize());
    }
  }

  void spmHandlesArbitraryBytes() {
    auto tok = vocabGgufTokenizer();
    auto& spm = static_cast<SpmTokenizer&>(*tok);
    std::mt19937 rng(6);
    auto utf8 = [](uint32_t cp) {
      std::string s;
      if (cp < 0x80) s += char(cp);
      else if (cp < 0x800) s += char(0xC0 | (cp >> 6)), s += char(0x80 | (cp & 0x3F));
      else if (cp < 0x10000) s += char(0xE0 | (cp >> 12)), s += char(0x80 | ((cp >> 6) & 0x3F)), s += char(0x80 | (cp & 0x3F));
      else s += char(0xF0 | (cp >> 18)), s += char(0x80 | ((cp >> 12) & 0x3F)), s += char(0x80 | ((cp >> 6) & 0x3F)), s += char(0x80 | (cp & 0x3F));
      return s;
    };
    for (int round = 0; round < 300; ++round) {
      // Arbitrary bytes (invalid UTF-8 included): ids stay in range, nothing crashes.
      std::string bytes(size_t(rng() % 40), '\0');
      for (char& c : bytes) c = char(rng() & 0xFF);
      // Valid UTF-8 from every plane: exact round trip through byte fallback, in both modes.
      std::string text;
      for (int k = int(rng() % 20); k > 0; --k) {
        uint32_t cp = rng() % 4 == 0 ? uint32_t(' ') : uint32_t(rng() % 0x10FFFF + 1);
        if (cp >= 0xD800 && cp < 0xE000) cp = 'x';
        text += utf8(cp);
      }
      for (auto mode : {SpmEncodeMode::LlamaCpp, SpmEncodeMode::Llama2c}) {
        for (int32_t id : spm.encode(bytes, {}, mode)) QVERIFY(id >= 0 && id < tok->vocabSize());
        const auto ids = spm.encode(text, {}, mode);
        QVERIFY2(tok->decode(ids) == text,
                 qPrintable(QByteArray::fromStdString(text).toPercentEncoding() + " decoded as " +
                            QByteArray::fromStdString(tok->decode(ids)).toPercentEncoding()));
      }
      // llama2.c's grouping works on raw bytes, so even invalid UTF-8 round-trips there.
      QCOMPARE(tok->decode(spm.encode(bytes, {}, SpmEncodeMode::Llama2c)), bytes);
    }
    QVERIFY_THROWS_EXCEPTION(Error, tok->tokenText(32000));
  }

  void hostileTokenizerFiles() {
    const QByteArray good = test::readAll(test::datasetPath("models/stories260K/tok512.bin"));
    expectBadTokenizer(test::writeFile(tmp_, "t1.bin", good.left(100)), "cannot fit", 512);
    expectBadTokenizer(test::writeFile(tmp_, "t1c.bin", good.left(6000)), "truncated", 512);
    expectBadTokenizer(test::writeFile(tmp_, "t1b.bin", good.left(103)), "truncated");
    expectBadTokenizer(test::writeFile(tmp_, "t2.bin", good), "cannot fit", 1 << 20);
    QByteArray longLen = good;
    const int32_t huge = 1 << 30;
    std::memcpy(longLen.data() + 4 + 4, &huge, 4);  // first token's length
    expectBadTokenizer(test::writeFile(tmp_, "t3.bin", longLen), "outside [0, max_token_length");
    QByteArray badMax = good;
    const int32_t zero = 0;
    std::memcpy(badMax.data(), &zero, 4);
    expectBadTokenizer(test::writeFile(tmp_, "t4.bin", badMax), "max_token_length");
    expectBadTokenizer(test::writeFile(tmp_, "t5.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -3}}}"),
                       "model.vocab");
    expectBadTokenizer(test::writeFile(tmp_, "t6.json", "{\"model\": "), "invalid JSON");
    try {
      openTokenizer(test::writeFile(tmp_, "t7.json", "{\"model\": {\"type\": \"Unigram\"}}").toStdString());
      QFAIL("expected Unsupported");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::Unsupported);
    }
    // A GGUF whose scores do not match its tokens.
    QByteArray g;
    auto put32 = [&](uint32_t v) { g.append(reinterpret_cast<const char*>(&v), 4); };
    auto put64 = [&](uint64_t v) { g.append(reinterpret_cast<const char*>(&v), 8); };
    auto str = [&](const std::string& s) { put64(s.size()); g.append(s.data(), qsizetype(s.size())); };
    g.append("GGUF", 4);
    put32(3);
    put64(0);
    put64(3);
    str("tokenizer.ggml.model"); put32(8); str("llama");
    str("tokenizer.ggml.tokens"); put32(9); put32(8); put64(2); str("a"); str("b");
    str("tokenizer.ggml.scores"); put32(9); put32(6); put64(1); put32(0);
    expectBadTokenizer(test::writeFile(tmp_, "t8.gguf", g), "tokenizer.ggml.scores");
  }
};

QTEST_GUILESS_MAIN(TestTokenizer)
#include "test_tokenizer.moc"
