// The one model behind the plan table and the charts: every plan of a sweep that passed
// the structural checks, the ranked ones first in the sweep's order (rank 1 = best by
// the objective, exactly `llmplan sweep`'s list), then the other evaluated plans (fitting,
// then not fitting, each by tokens/s). PlanFilterProxy sorts and filters it for the view;
// the scatter chart reads the same proxy, so filter and selection are shared.
//
// Thread-safety: GUI thread only (a Qt model).
#pragma once

#include <QAbstractTableModel>
#include <QSortFilterProxyModel>
#include <vector>

#include "gui/plan_details.h"
#include "planner/search/sweep.h"

namespace llmplan::gui {

class PlanTableModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column {
    kRank, kDp, kTp, kPp, kVpp, kCp, kSp, kMicroBatch, kAccum, kZero, kRecompute, kOffload, kFlash, kPrecision,
    kPeakGib, kTokensPerS, kMfu, kStepS, kFits, kEp, kBubble, kExposedComm, kRunsOn, kSchedule, kColumnCount
  };
  // Qt::UserRole: the raw value (number or string) the proxy sorts and filters on.
  static constexpr int kSortRole = Qt::UserRole + 1;
  static constexpr int kSourceRowRole = Qt::UserRole + 2;  // the row in this model

  struct Row {
    PlanResult result;
    int rank = 0;          // 1.. for ranked plans, 0 for the rest
    bool pareto = false;   // on the memory-throughput Pareto front
    bool fits() const { return result.reason == RejectReason::none; }
  };

  explicit PlanTableModel(QObject* parent = nullptr);

  // Replaces the rows with a sweep's plans. REQUIRES: r was run with keep_all.
  void set_sweep(const SweepContext& ctx, const SweepResult& r);
  // One plan (opened from a plan file), ranked 1.
  void set_single(const SweepContext& ctx, const PlanResult& r);
  void clear();

  bool has_context() const { return has_context_; }
  const SweepContext& context() const { return ctx_; }
  const Row& plan_row(int row) const { return rows_[static_cast<size_t>(row)]; }
  int plan_count() const { return static_cast<int>(rows_.size()); }
  // GPU memory minus headroom, bytes: plans above it do not fit.
  double budget_bytes() const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  std::vector<Row> rows_;
  SweepContext ctx_;
  bool has_context_ = false;
};

// Sorting on kSortRole and a filter over the rows: "fitting only" and a query of
// space-separated terms that must all match: a word of the plan's summary ("tp2",
// "zero1", "selective", "bf16", "fits", "nofit", "pareto", "ranked") or a comparison
// "field<value", "field>value", "field=value" on dp tp pp vpp cp mb ga zero peak
// (GiB) tps (tokens/s) mfu (%) step (s).
class PlanFilterProxy : public QSortFilterProxyModel {
  Q_OBJECT

 public:
  explicit PlanFilterProxy(QObject* parent = nullptr);
  void set_fits_only(bool on);
  // Returns an empty string when the query parses, else what is wrong (the filter is
  // then left as it was).
  QString set_query(const QString& query);
  // The source row of proxy row `row`.
  int source_row(int row) const;

 protected:
  bool filterAcceptsRow(int source_row, const QModelIndex& source_parent) const override;
  bool lessThan(const QModelIndex& left, const QModelIndex& right) const override;

 private:
  struct Term {
    QString word;        // a word to find, or the field of a comparison
    QChar op;            // 0 for a word, else '<', '>' or '='
    double value = 0;
  };
  bool fits_only_ = false;
  std::vector<Term> terms_;
};

// The rows of `model` in its order, as CSV with a header line (units in the header).
QString table_to_csv(const QAbstractItemModel& model);

}  // namespace llmplan::gui
