#include "gui/timeline_view.h"

#include <QFontMetricsF>
#include <QHBoxLayout>
#include <QHelpEvent>
#include <QLabel>
#include <QMouseEvent>
#include <QPainter>
#include <QPushButton>
#include <QToolTip>
#include <QVBoxLayout>
#include <QWheelEvent>
#include <algorithm>
#include <cmath>

#include "gui/chart_util.h"

namespace llmplan::gui {

namespace {

constexpr double kGutter = 130;   // row labels, px: at least; widened to the longest label
constexpr double kAxis = 34;      // time axis above the rows, px
constexpr double kLegend = 28;    // legend below the rows, px
constexpr double kRight = 12;
constexpr double kMaxRow = 40, kMinRow = 14;

QColor kind_color(SliceKind k) {
  switch (k) {
    case SliceKind::forward: return palette_color(0);
    case SliceKind::backward: return palette_color(2);
    case SliceKind::recompute: return palette_color(1);
    case SliceKind::weight_grad: return palette_color(5);
    case SliceKind::communication: return palette_color(4);
    case SliceKind::optimizer: return palette_color(3);
    case SliceKind::idle: return QColor(225, 225, 225);
  }
  return Qt::black;
}

int stream_order(const std::string& s) { return s == "compute" ? 0 : 1; }

// 1, 2 or 5 times a power of ten, about span / 8.
double nice_step(double span) {
  const double raw = span / 8;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

}  // namespace

TimelineView::TimelineView(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setBackgroundRole(QPalette::Base);
  setAutoFillBackground(true);
}

void TimelineView::set_timeline(Timeline t) {
  timeline_ = std::move(t);
  rows_.clear();
  for (const TimelineSlice& s : timeline_.slices) rows_.emplace_back(s.stage, s.stream);
  std::sort(rows_.begin(), rows_.end(), [](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first < b.first;
    if (stream_order(a.second) != stream_order(b.second)) return stream_order(a.second) < stream_order(b.second);
    return a.second < b.second;
  });
  rows_.erase(std::unique(rows_.begin(), rows_.end()), rows_.end());
  slice_row_.clear();
  for (const TimelineSlice& s : timeline_.slices) slice_row_.push_back(row_of(s));
  // The row labels never clip: the gutter is as wide as the longest one.
  gutter_ = kGutter;
  const QFontMetricsF fm(font());
  for (const auto& [stage, stream] : rows_) gutter_ = std::max(gutter_, fm.horizontalAdvance(row_label(stage, stream)) + 16);
  fit();
}

QString TimelineView::row_label(int stage, const std::string& stream) const {
  return tr("stage %1 %2").arg(stage).arg(QString::fromStdString(stream));
}

int TimelineView::row_of(const TimelineSlice& s) const {
  const auto it = std::lower_bound(rows_.begin(), rows_.end(), std::make_pair(s.stage, s.stream), [](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first < b.first;
    if (stream_order(a.second) != stream_order(b.second)) return stream_order(a.second) < stream_order(b.second);
    return a.second < b.second;
  });
  return static_cast<int>(it - rows_.begin());
}

QRectF TimelineView::plot_rect() const {
  return QRectF(gutter_, kAxis, std::max(10.0, width() - gutter_ - kRight), std::max(10.0, height() - kAxis - kLegend));
}

double TimelineView::x_of(double t) const {
  const QRectF r = plot_rect();
  return r.left() + (t - t0_) / (t1_ - t0_) * r.width();
}

double TimelineView::t_of(double x) const {
  const QRectF r = plot_rect();
  return t0_ + (x - r.left()) / r.width() * (t1_ - t0_);
}

void TimelineView::fit() {
  t0_ = 0;
  t1_ = timeline_.end_s > 0 ? timeline_.end_s * 1.01 : 1;
  y_offset_ = 0;
  update();
}

void TimelineView::clamp_view() {
  const double full = timeline_.end_s > 0 ? timeline_.end_s * 1.01 : 1;
  const double span = std::clamp(t1_ - t0_, full * 1e-6, full);
  t0_ = std::clamp(t0_, 0.0, full - span);
  t1_ = t0_ + span;
  const double row_h = std::clamp(plot_rect().height() / std::max<size_t>(1, rows_.size()), kMinRow, kMaxRow);
  const double max_y = std::max(0.0, rows_.size() * row_h - plot_rect().height());
  y_offset_ = std::clamp(y_offset_, 0.0, max_y);
}

void TimelineView::zoom(double factor, double anchor_x) {
  const double t = t_of(anchor_x);
  t0_ = t - (t - t0_) / factor;
  t1_ = t + (t1_ - t) / factor;
  clamp_view();
  update();
}

void TimelineView::pan_pixels(double dx, double dy) {
  const double dt = dx / plot_rect().width() * (t1_ - t0_);
  t0_ -= dt;
  t1_ -= dt;
  y_offset_ -= dy;
  clamp_view();
  update();
}

const TimelineSlice* TimelineView::slice_at(QPoint pos) const {
  const QRectF r = plot_rect();
  if (!r.contains(pos) || rows_.empty()) return nullptr;
  const double row_h = std::clamp(r.height() / rows_.size(), kMinRow, kMaxRow);
  const int row = static_cast<int>((pos.y() - r.top() + y_offset_) / row_h);
  const double t = t_of(pos.x()), slack = 2 * (t1_ - t0_) / r.width();
  const TimelineSlice* best = nullptr;
  for (size_t i = 0; i < timeline_.slices.size(); ++i) {
    const TimelineSlice& s = timeline_.slices[i];
    if (slice_row_[i] != row || t < s.start_s - slack || t > s.end_s + slack) continue;
    if (!best || (t >= s.start_s && t <= s.end_s)) best = &s;
  }
  return best;
}

void TimelineView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing, false);
  const QRectF r = plot_rect();
  const QFontMetrics fm(font());
  if (timeline_.slices.empty()) {
    p.drawText(rect(), Qt::AlignCenter, tr("Select a plan to see the timeline of one training step."));
    return;
  }
  const double row_h = std::clamp(r.height() / rows_.size(), kMinRow, kMaxRow);

  // ---- time axis
  const double span = t1_ - t0_;
  const Unit tu = time_unit_for(span);
  const double unit = tu.size;
  const double step = nice_step(span / unit) * unit;
  p.setPen(palette().color(QPalette::Text));
  p.drawText(QRectF(4, 0, gutter_ - 8, kAxis - 4), Qt::AlignRight | Qt::AlignVCenter, tr("time (%1)").arg(QLatin1String(tu.name)));
  for (double t = std::ceil(t0_ / step) * step; t <= t1_; t += step) {
    const double x = x_of(t);
    p.setPen(QColor(200, 200, 200));
    p.drawLine(QPointF(x, r.top()), QPointF(x, r.bottom()));
    p.setPen(palette().color(QPalette::Text));
    p.drawLine(QPointF(x, r.top() - 5), QPointF(x, r.top()));
    const QString label = QString::number(t / unit, 'g', 6);
    p.drawText(QRectF(x - 50, 0, 100, kAxis - 6), Qt::AlignHCenter | Qt::AlignBottom, label);
  }

  // ---- rows and slices (clipped to the plot)
  p.save();
  p.setClipRect(QRectF(0, r.top(), width(), r.height()));
  for (size_t i = 0; i < rows_.size(); ++i) {
    const double y = r.top() + i * row_h - y_offset_;
    if (y + row_h < r.top() || y > r.bottom()) continue;
    if (rows_[i].first % 2 == 1) p.fillRect(QRectF(0, y, width(), row_h), QColor(246, 248, 252));
    p.setPen(palette().color(QPalette::Text));
    p.drawText(QRectF(4, y, gutter_ - 10, row_h), Qt::AlignRight | Qt::AlignVCenter, row_label(rows_[i].first, rows_[i].second));
    if (i + 1 == rows_.size() || rows_[i + 1].first != rows_[i].first) {
      p.setPen(QColor(170, 170, 170));
      p.drawLine(QPointF(0, y + row_h), QPointF(width(), y + row_h));
    }
  }
  p.setClipRect(r);
  for (size_t i = 0; i < timeline_.slices.size(); ++i) {
    const TimelineSlice& s = timeline_.slices[i];
    if (s.end_s < t0_ || s.start_s > t1_) continue;
    const double y = r.top() + slice_row_[i] * row_h - y_offset_;
    if (y + row_h < r.top() || y > r.bottom()) continue;
    const double x0 = x_of(s.start_s), x1 = std::max(x_of(s.end_s), x0 + 1);
    const QRectF box(x0, y + 2, x1 - x0, row_h - 4);
    const QColor c = kind_color(s.kind);
    p.fillRect(box, c);
    if (s.kind == SliceKind::idle) p.fillRect(box, QBrush(QColor(170, 170, 170), Qt::BDiagPattern));
    if (box.width() > 8) {
      p.setPen(c.darker(140));
      p.drawRect(box);
    }
    if (box.width() > 40) {
      p.setPen(s.kind == SliceKind::idle ? QColor(90, 90, 90) : QColor(Qt::white));
      p.drawText(box.adjusted(3, 0, -3, 0), Qt::AlignVCenter | Qt::AlignLeft,
                 fm.elidedText(QString::fromStdString(s.name), Qt::ElideRight, static_cast<int>(box.width() - 6)));
    }
  }
  p.restore();
  p.setPen(QColor(150, 150, 150));
  p.drawRect(r);

  // ---- legend
  double x = gutter_;
  const double ly = height() - kLegend + 7;
  for (int k = 0; k < kSliceKinds; ++k) {
    const auto kind = static_cast<SliceKind>(k);
    const QRectF sw(x, ly, 14, 14);
    p.fillRect(sw, kind_color(kind));
    if (kind == SliceKind::idle) p.fillRect(sw, QBrush(QColor(170, 170, 170), Qt::BDiagPattern));
    p.setPen(palette().color(QPalette::Text));
    const QString name = to_string(kind);
    p.drawText(QPointF(x + 18, ly + 12), name);
    x += 18 + fm.horizontalAdvance(name) + 18;
  }
}

void TimelineView::wheelEvent(QWheelEvent* e) {
  const double steps = e->angleDelta().y() / 120.0;
  if (e->modifiers() & Qt::ShiftModifier) pan_pixels(0, steps * 40);
  else zoom(std::pow(1.25, steps), e->position().x());
  e->accept();
}

void TimelineView::mousePressEvent(QMouseEvent* e) {
  if (e->button() == Qt::LeftButton) {
    dragging_ = true;
    last_mouse_ = e->position();
    setCursor(Qt::ClosedHandCursor);
  }
}

void TimelineView::mouseMoveEvent(QMouseEvent* e) {
  if (!dragging_) return;
  const QPointF d = e->position() - last_mouse_;
  last_mouse_ = e->position();
  pan_pixels(d.x(), d.y());
}

void TimelineView::mouseReleaseEvent(QMouseEvent*) {
  dragging_ = false;
  unsetCursor();
}

void TimelineView::mouseDoubleClickEvent(QMouseEvent*) { fit(); }

bool TimelineView::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip) {
    auto* help = static_cast<QHelpEvent*>(e);
    if (const TimelineSlice* s = slice_at(help->pos())) {
      const Unit tu = time_unit_for(s->end_s);
      const double u = 1 / tu.size;
      const QString unit = QLatin1String(tu.name);
      QToolTip::showText(help->globalPos(), tr("%1\nstage %2 %3, %4\n%5 – %6 %7 (%8 %7)")
                                                .arg(QString::fromStdString(s->name))
                                                .arg(s->stage)
                                                .arg(QString::fromStdString(s->stream), to_string(s->kind))
                                                .arg(s->start_s * u, 0, 'f', 3)
                                                .arg(s->end_s * u, 0, 'f', 3)
                                                .arg(unit)
                                                .arg((s->end_s - s->start_s) * u, 0, 'f', 3));
    } else {
      QToolTip::hideText();
    }
    return true;
  }
  return QWidget::event(e);
}

// ---------------------------------------------------------------- panel

TimelinePanel::TimelinePanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  title_ = new QLabel;
  QFont f = title_->font();
  f.setBold(true);
  title_->setFont(f);
  bar->addWidget(title_, 1);
  auto* zoom_in = new QPushButton(tr("Zoom in"));
  auto* zoom_out = new QPushButton(tr("Zoom out"));
  auto* fit = new QPushButton(tr("Fit"));
  bar->addWidget(zoom_in);
  bar->addWidget(zoom_out);
  bar->addWidget(fit);
  layout->addLayout(bar);
  view_ = new TimelineView;
  layout->addWidget(view_, 1);
  note_ = new QLabel;
  note_->setWordWrap(true);
  note_->setStyleSheet(QStringLiteral("color: #555"));
  layout->addWidget(note_);
  connect(zoom_in, &QPushButton::clicked, this, [this] { view_->zoom(1.5, view_->width() / 2.0); });
  connect(zoom_out, &QPushButton::clicked, this, [this] { view_->zoom(1 / 1.5, view_->width() / 2.0); });
  connect(fit, &QPushButton::clicked, view_, &TimelineView::fit);
  clear();
}

QString TimelinePanel::title() const { return title_->text(); }

void TimelinePanel::set_timeline(Timeline t, const QString& title) {
  title_->setText(title);
  QString note = tr("Source: %1. Wheel: zoom, drag: pan, shift+wheel: scroll rows, double click: fit.")
                     .arg(QString::fromStdString(t.source));
  if (!t.note.empty()) note += ' ' + QString::fromStdString(t.note) + '.';
  note_->setText(note);
  view_->set_timeline(std::move(t));
}

void TimelinePanel::clear() {
  title_->setText(tr("Timeline of one training step"));
  note_->clear();
  view_->set_timeline(Timeline{});
}

}  // namespace llmplan::gui
