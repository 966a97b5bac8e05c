// Runs one sweep at a time off the GUI thread. The planner's progress callback (called on
// the sweep's worker threads) is marshalled to the GUI thread as progress(); cancel()
// sets the std::atomic<bool> the sweep polls. finished() is emitted on the GUI thread,
// after which result() holds the sweep's result.
//
// Thread-safety: call from the GUI thread only; signals arrive on the GUI thread.
#pragma once

#include <QObject>
#include <atomic>
#include <memory>
#include <thread>

#include "gui/sweep_request.h"

namespace llmplan::gui {

class SweepRunner : public QObject {
  Q_OBJECT

 public:
  explicit SweepRunner(QObject* parent = nullptr);
  ~SweepRunner() override;  // cancels and waits for a running sweep

  // Starts `req` on a worker thread; false (nothing started) while one is running.
  bool start(const SweepRequest& req);
  void cancel();
  bool running() const { return running_; }
  // The last finished sweep (null before the first); keep_all is always on.
  std::shared_ptr<const SweepResult> result() const { return result_; }
  const SweepRequest& request() const { return request_; }

 signals:
  void progress(qint64 evaluated, qint64 total_estimate);
  void finished(bool cancelled);

 private:
  void on_done(std::shared_ptr<const SweepResult> r);

  std::thread thread_;
  std::atomic<bool> cancel_{false};
  bool running_ = false;
  SweepRequest request_;
  std::shared_ptr<const SweepResult> result_;
};

}  // namespace llmplan::gui
