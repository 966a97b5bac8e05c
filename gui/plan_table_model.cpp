#include "gui/plan_table_model.h"

#include <QBrush>
#include <QColor>
#include <QRegularExpression>
#include <algorithm>
#include <set>
#include <tuple>

#include "planner/spec/units.h"

namespace llmplan::gui {

namespace {

// Identity of a plan within one sweep (dp follows from the rest).
auto plan_key(const PlanResult& r) {
  const ParallelPlan& p = r.plan;
  return std::make_tuple(static_cast<int>(r.precision), p.tp, p.pp, p.cp, p.vpp, p.ep, p.sp, p.flash_attention, p.micro_batch,
                         static_cast<int>(p.recompute), p.zero, p.offload_optimizer, p.dp, static_cast<int>(p.schedule));
}
using PlanKey = decltype(plan_key(PlanResult{}));

const char* kHeaders[PlanTableModel::kColumnCount] = {
    "rank", "dp", "tp", "pp", "vpp", "cp", "sp", "mb", "accum", "ZeRO", "recompute", "offload", "flash", "precision",
    "peak (GiB)", "tokens/s", "MFU (%)", "step (s)", "fits", "ep", "bubble (%)", "exposed comm (s)", "runs on", "schedule"};
const char* kHeaderTips[PlanTableModel::kColumnCount] = {
    "rank by the objective (blank: not among the ranked plans)",
    "data-parallel degree", "tensor-parallel degree", "pipeline-parallel degree", "virtual pipeline stages per rank",
    "context-parallel degree", "Megatron sequence parallel", "micro-batch, sequences per DP rank",
    "gradient accumulation: micro-batches per optimizer step", "ZeRO stage", "activation recompute policy",
    "optimizer states offloaded to host memory", "fused (flash) attention", "precision and AMP level",
    "peak memory per GPU on the most loaded pipeline stage, GiB", "throughput of the whole job, tokens per second",
    "model FLOPs utilisation, percent", "time of one optimizer step, seconds", "fits in GPU memory minus headroom",
    "expert-parallel degree (MoE), inside dp x cp", "pipeline bubble: percent of the step a stage waits for the pipeline to fill and drain",
    "communication not hidden behind compute per step (TP + PP + DP + CP + EP), seconds",
    "training frameworks that can run the plan (data/frameworks): one letter each, '-' where it cannot",
    "pipeline schedule (pp > 1): 1f1b, interleaved, gpipe, or zero-bubble zb-h1, zbv, dualpipev, dualpipe"};

QString on_off(bool b) { return b ? QStringLiteral("on") : QStringLiteral("-"); }

}  // namespace

PlanTableModel::PlanTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void PlanTableModel::set_sweep(const SweepContext& ctx, const SweepResult& r) {
  beginResetModel();
  ctx_ = ctx;
  has_context_ = true;
  rows_.clear();
  std::set<PlanKey> ranked, front;
  for (const PlanResult& x : r.pareto) front.insert(plan_key(x));
  for (size_t i = 0; i < r.top.size(); ++i) {
    rows_.push_back({r.top[i], static_cast<int>(i + 1), front.count(plan_key(r.top[i])) > 0});
    ranked.insert(plan_key(r.top[i]));
  }
  std::vector<Row> rest;
  for (const PlanResult& x : r.all) {
    if (x.reason != RejectReason::none && x.reason != RejectReason::does_not_fit && x.reason != RejectReason::host_does_not_fit) continue;  // not costed
    if (ranked.count(plan_key(x))) continue;
    rest.push_back({x, 0, front.count(plan_key(x)) > 0});
  }
  std::sort(rest.begin(), rest.end(), [](const Row& a, const Row& b) {
    if (a.fits() != b.fits()) return a.fits();
    if (a.result.tokens_per_s != b.result.tokens_per_s) return a.result.tokens_per_s > b.result.tokens_per_s;
    if (a.result.peak_bytes != b.result.peak_bytes) return a.result.peak_bytes < b.result.peak_bytes;
    return plan_key(a.result) < plan_key(b.result);
  });
  rows_.insert(rows_.end(), rest.begin(), rest.end());
  endResetModel();
}

void PlanTableModel::set_single(const SweepContext& ctx, const PlanResult& r) {
  beginResetModel();
  ctx_ = ctx;
  has_context_ = true;
  rows_ = {Row{r, 1, true}};
  endResetModel();
}

void PlanTableModel::clear() {
  beginResetModel();
  rows_.clear();
  has_context_ = false;
  endResetModel();
}

double PlanTableModel::budget_bytes() const {
  return has_context_ ? ctx_.base.cluster.gpu.memory_bytes - ctx_.headroom_bytes : 0;
}

int PlanTableModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : plan_count(); }
int PlanTableModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : kColumnCount; }

QVariant PlanTableModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= plan_count()) return {};
  const Row& row = rows_[static_cast<size_t>(index.row())];
  const PlanResult& r = row.result;
  const ParallelPlan& p = r.plan;
  const int col = index.column();
  if (role == kSourceRowRole) return index.row();
  if (role == Qt::ForegroundRole) return row.fits() ? QVariant() : QVariant(QBrush(QColor(140, 140, 140)));
  if (role == Qt::TextAlignmentRole) {
    const bool text = col == kRecompute || col == kPrecision || col == kFits || col == kRunsOn || col == kSchedule;
    return QVariant(int((text ? Qt::AlignLeft : Qt::AlignRight) | Qt::AlignVCenter));
  }
  if (role == Qt::ToolTipRole) {
    QString tip = QString::fromStdString(plan_summary(p)) + QStringLiteral(", %1 %2").arg(to_string(r.precision), to_string(r.amp));
    tip += row.fits() ? QStringLiteral("\nfits: peak %1 GiB on stage %2 (%3)").arg(r.peak_bytes / kGiB, 0, 'f', 2).arg(r.peak_stage).arg(to_string(r.peak_phase))
                      : QStringLiteral("\ndoes not fit: peak %1 GiB on stage %2 (%3), budget %4 GiB")
                            .arg(r.peak_bytes / kGiB, 0, 'f', 2).arg(r.peak_stage).arg(to_string(r.peak_phase)).arg(budget_bytes() / kGiB, 0, 'f', 2);
    if (row.pareto) tip += QStringLiteral("\non the memory-throughput Pareto front");
    if (!ctx_.frameworks.empty()) {
      QStringList runs;
      for (size_t k = 0; k < ctx_.frameworks.size(); ++k)
        if (r.frameworks >> k & 1u) runs << QString::fromStdString(ctx_.frameworks[k].name);
      tip += QStringLiteral("\nruns on: %1").arg(runs.isEmpty() ? QStringLiteral("none of the known frameworks") : runs.join(QStringLiteral(", ")));
    }
    return tip;
  }
  if (role != Qt::DisplayRole && role != kSortRole) return {};
  const bool sort = role == kSortRole;
  switch (col) {
    case kRank: return sort ? QVariant(row.rank > 0 ? row.rank : 1 << 30) : (row.rank > 0 ? QVariant(row.rank) : QVariant(QString()));
    case kDp: return p.dp;
    case kTp: return p.tp;
    case kPp: return p.pp;
    case kVpp: return p.vpp;
    case kCp: return p.cp;
    case kSp: return sort ? QVariant(int(p.sp)) : QVariant(on_off(p.sp));
    case kMicroBatch: return p.micro_batch;
    case kAccum: return p.grad_accum;
    case kZero: return p.zero;
    case kRecompute: return QString::fromStdString(recompute_text(p));
    case kOffload:
      return sort ? QVariant(int(p.offload_optimizer) + int(p.offload_params))
                  : QVariant(p.offload_params ? QStringLiteral("params") : on_off(p.offload_optimizer));
    case kFlash: return sort ? QVariant(int(p.flash_attention)) : QVariant(p.flash_attention ? QStringLiteral("on") : QStringLiteral("off"));
    case kPrecision: return QStringLiteral("%1 %2").arg(to_string(r.precision), to_string(r.amp));
    case kPeakGib: return sort ? QVariant(r.peak_bytes / kGiB) : QVariant(QString::number(r.peak_bytes / kGiB, 'f', 2));
    case kTokensPerS: return sort ? QVariant(r.tokens_per_s) : QVariant(QString::number(r.tokens_per_s, 'f', 0));
    case kMfu: return sort ? QVariant(100 * r.mfu) : QVariant(QString::number(100 * r.mfu, 'f', 1));
    case kStepS: return sort ? QVariant(r.step_time_s) : QVariant(QString::number(r.step_time_s, 'f', 3));
    case kFits: return sort ? QVariant(int(row.fits())) : QVariant(row.fits() ? QStringLiteral("yes") : QStringLiteral("no"));
    case kEp: return p.ep;
    case kBubble: return sort ? QVariant(100 * r.bubble_fraction) : QVariant(QString::number(100 * r.bubble_fraction, 'f', 1));
    case kExposedComm: return sort ? QVariant(r.exposed_comm_s) : QVariant(QString::number(r.exposed_comm_s, 'f', 3));
    case kRunsOn: return QString::fromStdString(framework_letters(r.frameworks, ctx_.frameworks));
    case kSchedule: return p.pp > 1 ? QString(to_string(p.schedule)) : QStringLiteral("-");
    default: return {};
  }
}

QVariant PlanTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || section < 0 || section >= kColumnCount) return QAbstractTableModel::headerData(section, orientation, role);
  if (role == Qt::DisplayRole) return QString(kHeaders[section]);
  if (role == Qt::ToolTipRole) return QString(kHeaderTips[section]);
  return {};
}

// ---------------------------------------------------------------- filter proxy

PlanFilterProxy::PlanFilterProxy(QObject* parent) : QSortFilterProxyModel(parent) {
  setSortRole(PlanTableModel::kSortRole);
  setDynamicSortFilter(true);
}

void PlanFilterProxy::set_fits_only(bool on) {
  if (on == fits_only_) return;
  fits_only_ = on;
  invalidateFilter();
}

QString PlanFilterProxy::set_query(const QString& query) {
  static const QStringList kFields = {"dp", "tp", "pp", "vpp", "cp", "mb", "ga", "zero", "peak", "tps", "mfu", "step"};
  static const QRegularExpression kCompare(QStringLiteral("^([a-z]+)([<>=])([0-9.eE+-]+)$"));
  std::vector<Term> terms;
  for (const QString& t : query.toLower().split(QRegularExpression(QStringLiteral("\\s+")), Qt::SkipEmptyParts)) {
    const QRegularExpressionMatch m = kCompare.match(t);
    if (t.contains('<') || t.contains('>') || t.contains('=')) {
      bool ok = false;
      const double v = m.hasMatch() ? m.captured(3).toDouble(&ok) : 0;
      if (!m.hasMatch() || !ok || !kFields.contains(m.captured(1)))
        return QStringLiteral("'%1': expected field<value with field one of %2").arg(t, kFields.join(QStringLiteral(", ")));
      terms.push_back({m.captured(1), m.captured(2).at(0), v});
    } else {
      terms.push_back({t, QChar(), 0});
    }
  }
  terms_ = std::move(terms);
  invalidateFilter();
  return {};
}

int PlanFilterProxy::source_row(int row) const { return mapToSource(index(row, 0)).row(); }

bool PlanFilterProxy::filterAcceptsRow(int source_row, const QModelIndex&) const {
  const auto* m = static_cast<const PlanTableModel*>(sourceModel());
  if (!m || source_row >= m->plan_count()) return false;
  const PlanTableModel::Row& row = m->plan_row(source_row);
  if (fits_only_ && !row.fits()) return false;
  if (terms_.empty()) return true;
  const PlanResult& r = row.result;
  const ParallelPlan& p = r.plan;
  QStringList words = QString::fromStdString(plan_summary(p)).toLower().split(' ', Qt::SkipEmptyParts);
  words << QString(to_string(r.precision)) << QString(to_string(r.amp)).toLower() << (row.fits() ? "fits" : "nofit");
  words << QStringLiteral("vpp%1").arg(p.vpp) << QStringLiteral("cp%1").arg(p.cp) << (p.flash_attention ? "flash" : "no-flash");
  if (row.pareto) words << QStringLiteral("pareto");
  if (row.rank > 0) words << QStringLiteral("ranked");
  for (const Term& t : terms_) {
    if (t.op.isNull()) {
      if (!words.contains(t.word)) return false;
      continue;
    }
    double v = 0;
    if (t.word == "dp") v = p.dp;
    else if (t.word == "tp") v = p.tp;
    else if (t.word == "pp") v = p.pp;
    else if (t.word == "vpp") v = p.vpp;
    else if (t.word == "cp") v = p.cp;
    else if (t.word == "mb") v = p.micro_batch;
    else if (t.word == "ga") v = p.grad_accum;
    else if (t.word == "zero") v = p.zero;
    else if (t.word == "peak") v = r.peak_bytes / kGiB;
    else if (t.word == "tps") v = r.tokens_per_s;
    else if (t.word == "mfu") v = 100 * r.mfu;
    else if (t.word == "step") v = r.step_time_s;
    const bool ok = t.op == '<' ? v < t.value : (t.op == '>' ? v > t.value : v == t.value);
    if (!ok) return false;
  }
  return true;
}

bool PlanFilterProxy::lessThan(const QModelIndex& left, const QModelIndex& right) const {
  const QVariant a = left.data(PlanTableModel::kSortRole), b = right.data(PlanTableModel::kSortRole);
  if (a.typeId() == QMetaType::QString || b.typeId() == QMetaType::QString) {
    const int c = QString::compare(a.toString(), b.toString());
    if (c != 0) return c < 0;
  } else if (a.toDouble() != b.toDouble()) {
    return a.toDouble() < b.toDouble();
  }
  return left.row() < right.row();  // stable: ties keep the model's (ranked) order
}

// ---------------------------------------------------------------- CSV

QString table_to_csv(const QAbstractItemModel& model) {
  auto quote = [](QString s) {
    if (s.contains(',') || s.contains('"') || s.contains('\n')) s = '"' + s.replace('"', QStringLiteral("\"\"")) + '"';
    return s;
  };
  QString out;
  for (int c = 0; c < model.columnCount(); ++c) out += (c ? "," : "") + quote(model.headerData(c, Qt::Horizontal).toString());
  out += '\n';
  for (int r = 0; r < model.rowCount(); ++r) {
    for (int c = 0; c < model.columnCount(); ++c) out += (c ? "," : "") + quote(model.index(r, c).data().toString());
    out += '\n';
  }
  return out;
}

}  // namespace llmplan::gui
