#include "gui/sweep_runner.h"

#include <QMetaObject>

namespace llmplan::gui {

SweepRunner::SweepRunner(QObject* parent) : QObject(parent) {}

SweepRunner::~SweepRunner() {
  cancel_ = true;
  if (thread_.joinable()) thread_.join();
}

bool SweepRunner::start(const SweepRequest& req) {
  if (running_) return false;
  if (thread_.joinable()) thread_.join();
  running_ = true;
  cancel_ = false;
  request_ = req;
  SweepOptions opt = req.options;
  opt.keep_all = true;  // the chart and table show every costed plan
  opt.cancel = &cancel_;
  // Called from the sweep's threads: hop to the GUI thread (the event is dropped if this
  // object is gone by then; the destructor joins the thread first).
  opt.progress = [this](int64_t done, int64_t total) {
    QMetaObject::invokeMethod(this, [this, done, total] { emit progress(done, total); }, Qt::QueuedConnection);
  };
  thread_ = std::thread([this, req, opt] {
    auto r = std::make_shared<const SweepResult>(run_sweep(req.base.model, req.base.cluster, req.base.job, req.base.gpus, req.space, opt));
    QMetaObject::invokeMethod(this, [this, r] { on_done(r); }, Qt::QueuedConnection);
  });
  return true;
}

void SweepRunner::cancel() { cancel_ = true; }

void SweepRunner::on_done(std::shared_ptr<const SweepResult> r) {
  if (thread_.joinable()) thread_.join();
  running_ = false;
  result_ = std::move(r);
  emit finished(result_->cancelled);
}

}  // namespace llmplan::gui
