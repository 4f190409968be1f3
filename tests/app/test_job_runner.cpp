// app/JobRunner: jobs run off the GUI thread; a newer job with the same tag replaces a queued one
// and cancels a running one; errors and cancellations are reported, never delivered as results.
#include <QtTest>
#include <atomic>
#include <thread>

#include "app/gui/job_runner.h"

using qs::app::JobRunner;
using qs::JobContext;

class TestJobRunner : public QObject {
  Q_OBJECT
 private slots:
  void runsOffTheGuiThreadAndDelivers() {
    JobRunner runner;
    QSignalSpy finished(&runner, &JobRunner::jobFinished);
    std::thread::id workerId;
    int delivered = 0;
    runner.submit("t", "job", [&](const JobContext& ctx) -> std::function<void()> {
      workerId = std::this_thread::get_id();
      ctx.progress(0.5, "half");
      return [&] { delivered = 42; };
    });
    QVERIFY(finished.wait(5000));
    QCOMPARE(delivered, 42);
    QVERIFY(workerId != std::this_thread::get_id());
  }

  void staleRequestsAreReplaced() {
    JobRunner runner;
    QSignalSpy finished(&runner, &JobRunner::jobFinished);
    QSignalSpy cancelled(&runner, &JobRunner::jobCancelled);
    std::atomic<bool> release{false};
    // A blocker occupies the worker so the slider-like requests below queue up.
    runner.submit("block", "blocker", [&](const JobContext&) -> std::function<void()> {
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return {};
    });
    std::vector<int> ran;
    for (int i = 0; i < 50; ++i)
      runner.submit("slider", "value", [&ran, i](const JobContext&) -> std::function<void()> {
        return [&ran, i] { ran.push_back(i); };
      });
    release = true;
    QTRY_COMPARE_WITH_TIMEOUT(finished.size(), 2, 5000);
    QCOMPARE(ran, std::vector<int>{49});  // only the last request ran
    QTest::qWait(50);
    QCOMPARE(finished.size(), 2);
  }

  void runningJobIsCancelledBySupersedingOne() {
    JobRunner runner;
    QSignalSpy cancelled(&runner, &JobRunner::jobCancelled);
    QSignalSpy finished(&runner, &JobRunner::jobFinished);
    std::atomic<bool> started{false};
    runner.submit("tag", "long", [&](const JobContext& ctx) -> std::function<void()> {
      started = true;
      for (;;) {
        ctx.checkCancelled();  // throws Cancelled once superseded
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
    QTRY_VERIFY_WITH_TIMEOUT(started.load(), 5000);
    bool secondRan = false;
    runner.submit("tag", "short", [&](const JobContext&) -> std::function<void()> {
      return [&] { secondRan = true; };
    });
    QVERIFY(finished.wait(5000));
    QCOMPARE(cancelled.size(), 1);
    QVERIFY(secondRan);
  }

  void cancellingAQueuedJobReportsIt() {
    JobRunner runner;
    QSignalSpy cancelled(&runner, &JobRunner::jobCancelled);
    std::atomic<bool> release{false};
    runner.submit("block", "blocker", [&](const JobContext&) -> std::function<void()> {
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return {};
    });
    bool ran = false;
    const quint64 id = runner.submit("queued", "never runs", [&](const JobContext&) -> std::function<void()> {
      return [&] { ran = true; };
    });
    runner.cancel("queued");
    QCOMPARE(cancelled.size(), 1);
    QCOMPARE(cancelled.first().at(0).toULongLong(), id);
    release = true;
    QTRY_VERIFY_WITH_TIMEOUT(!runner.busy(), 5000);
    QVERIFY(!ran);
  }

  void errorsAreReported() {
    JobRunner runner;
    QSignalSpy failed(&runner, &JobRunner::jobFailed);
    runner.submit("e", "failing", [](const JobContext&) -> std::function<void()> {
      throw qs::Error(qs::ErrorKind::BadInput, "broken", "model.gguf", "header");
    });
    QVERIFY(failed.wait(5000));
    QCOMPARE(failed.first().at(2).toString(), QString("model.gguf: header: broken"));
  }

  void destructionCancelsCleanly() {
    std::atomic<bool> started{false};
    {
      JobRunner runner;
      runner.submit("x", "endless", [&](const JobContext& ctx) -> std::function<void()> {
        started = true;
        while (true) {
          ctx.checkCancelled();
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      });
      QTRY_VERIFY_WITH_TIMEOUT(started.load(), 5000);
    }  // must not hang
    QVERIFY(true);
  }
};

QTEST_MAIN(TestJobRunner)
#include "test_job_runner.moc"
