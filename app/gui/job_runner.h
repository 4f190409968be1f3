#pragma once
// Runs long work off the GUI thread, one job at a time on one worker thread (the engine is owned
// by one thread, as in RenderDoc's ReplayManager). Jobs carry a tag: submitting a job whose tag
// matches a queued one replaces it, and cancels a running one with that tag, so a slider that
// fires faster than work completes never builds a backlog. Progress and results come back as
// queued calls on the GUI thread; a cancelled or superseded job delivers nothing, even one that
// had already finished when a newer job with its tag arrived.
#include <QObject>
#include <QHash>
#include <QString>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "core/util/progress.h"

namespace qs::app {

class JobRunner : public QObject {
  Q_OBJECT
 public:
  // `work` runs on the worker thread and returns a callable that runs on the GUI thread
  // (typically: store the result, update views). Exceptions are caught and reported.
  using Work = std::function<std::function<void()>(const JobContext& ctx)>;

  explicit JobRunner(QObject* parent = nullptr);
  ~JobRunner() override;  // cancels everything and joins the worker

  // Queues `work` under `tag` with a user-visible `title`. Returns the job id.
  quint64 submit(const QString& tag, const QString& title, Work work);
  void cancel(const QString& tag);  // cancel queued and running jobs with this tag
  void cancelAll();
  bool busy() const;
  // Waits up to `ms` for the queue to empty and the running job to end; false when it did not.
  bool waitIdle(int ms);

 signals:
  void jobStarted(quint64 id, const QString& title);
  void jobProgress(quint64 id, double fraction, const QString& stage);
  void jobFinished(quint64 id, const QString& title);  // success; the result callable has run
  void jobFailed(quint64 id, const QString& title, const QString& message);
  void jobCancelled(quint64 id, const QString& title);

 private:
  struct Job {
    quint64 id;
    QString tag, title;
    Work work;
    std::shared_ptr<std::atomic<bool>> cancel;
  };
  void loop();

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> queue_;
  std::shared_ptr<Job> running_;
  bool stopping_ = false;
  quint64 nextId_ = 1;
  QHash<QString, quint64> latest_;  // newest job id per tag: older results are dropped
  std::thread worker_;
};

}  // namespace qs::app
