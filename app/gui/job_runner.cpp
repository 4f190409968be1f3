#include "app/gui/job_runner.h"

#include <vector>

#include <QMetaObject>
#include <QPointer>
#include <chrono>

#include "kernels/common/error.h"

namespace qs::app {

JobRunner::JobRunner(QObject* parent) : QObject(parent), worker_([this] { loop(); }) {}

JobRunner::~JobRunner() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    for (auto& j : queue_) j.cancel->store(true);
    queue_.clear();
    if (running_) running_->cancel->store(true);
  }
  wake_.notify_all();
  worker_.join();
}

quint64 JobRunner::submit(const QString& tag, const QString& title, Work work) {
  std::lock_guard lock(mutex_);
  const quint64 id = nextId_++;
  latest_[tag] = id;
  // Replace a queued job with the same tag; cancel a running one.
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->tag == tag) {
      it->cancel->store(true);
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  if (running_ && running_->tag == tag) running_->cancel->store(true);
  queue_.push_back({id, tag, title, std::move(work), std::make_shared<std::atomic<bool>>(false)});
  wake_.notify_one();
  return id;
}

void JobRunner::cancel(const QString& tag) {
  std::vector<std::pair<quint64, QString>> dropped;
  {
    std::lock_guard lock(mutex_);
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (it->tag == tag) {
        it->cancel->store(true);
        dropped.emplace_back(it->id, it->title);
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
    if (running_ && running_->tag == tag) running_->cancel->store(true);
  }
  // A job dropped before it started ends too: listeners (status bar, panels) see it go.
  for (const auto& [id, title] : dropped) emit jobCancelled(id, title);
}

void JobRunner::cancelAll() {
  std::vector<std::pair<quint64, QString>> dropped;
  {
    std::lock_guard lock(mutex_);
    for (auto& j : queue_) {
      j.cancel->store(true);
      dropped.emplace_back(j.id, j.title);
    }
    queue_.clear();
    if (running_) running_->cancel->store(true);
  }
  for (const auto& [id, title] : dropped) emit jobCancelled(id, title);
}

bool JobRunner::busy() const {
  std::lock_guard lock(mutex_);
  return running_ || !queue_.empty();
}

bool JobRunner::waitIdle(int ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (busy()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

void JobRunner::loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = std::make_shared<Job>(std::move(queue_.front()));
      queue_.pop_front();
      running_ = job;
    }
    QPointer<JobRunner> self(this);
    const quint64 id = job->id;
    const QString title = job->title;
    QMetaObject::invokeMethod(this, [self, id, title] {
      if (self) emit self->jobStarted(id, title);
    }, Qt::QueuedConnection);

    JobContext ctx;
    ctx.cancelFlag = job->cancel.get();
    // Progress is throttled here so a chatty job cannot flood the GUI thread's event queue.
    auto lastReport = std::chrono::steady_clock::time_point{};
    ctx.onProgress = [self, id, &lastReport](double f, std::string_view stage) {
      const auto now = std::chrono::steady_clock::now();
      if (f < 1.0 && now - lastReport < std::chrono::milliseconds(40)) return;
      lastReport = now;
      const QString s = QString::fromUtf8(stage.data(), qsizetype(stage.size()));
      QMetaObject::invokeMethod(self, [self, id, f, s] {
        if (self) emit self->jobProgress(id, f, s);
      }, Qt::QueuedConnection);
    };

    std::function<void()> deliver;
    QString error;
    bool cancelled = false;
    try {
      deliver = job->work(ctx);
      cancelled = job->cancel->load();
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::Cancelled || job->cancel->load())
        cancelled = true;
      else
        error = QString::fromStdString(e.what());
    } catch (const std::bad_alloc&) {
      error = tr("out of memory");
    } catch (const std::exception& e) {
      error = QString::fromUtf8(e.what());
    }
    auto cancelFlag = job->cancel;
    const QString tag = job->tag;
    {
      // Not busy any more before the GUI thread hears the outcome (busy() is checked there).
      std::lock_guard lock(mutex_);
      running_.reset();
    }
    QMetaObject::invokeMethod(this, [self, id, tag, title, deliver = std::move(deliver), error, cancelled,
                                     cancelFlag] {
      if (!self) return;
      {
        std::lock_guard lock(self->mutex_);
        if (self->latest_.value(tag) != id) cancelFlag->store(true);  // superseded meanwhile
      }
      // A job cancelled after it finished (superseded while its result was in flight) is dropped.
      if (cancelled || cancelFlag->load()) {
        emit self->jobCancelled(id, title);
      } else if (!error.isEmpty()) {
        emit self->jobFailed(id, title, error);
      } else {
        if (deliver) deliver();
        emit self->jobFinished(id, title);
      }
    }, Qt::QueuedConnection);
  }
}

}  // namespace qs::app
