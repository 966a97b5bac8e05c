// The timeline of one step: one row per pipeline stage and stream, slices coloured by
// kind (forward, backward, recompute, communication, optimizer, idle = the bubble), a
// time axis in s / ms, a legend. Wheel zooms around the cursor, dragging pans, double
// click (or Fit) shows the whole step; hovering a slice shows its name and times.
// TimelinePanel adds the toolbar and the source note under the view.
//
// Thread-safety: GUI thread only.
#pragma once

#include <QWidget>
#include <utility>
#include <vector>

#include "gui/timeline.h"

class QLabel;

namespace llmplan::gui {

class TimelineView : public QWidget {
  Q_OBJECT

 public:
  explicit TimelineView(QWidget* parent = nullptr);
  void set_timeline(Timeline t);
  const Timeline& timeline() const { return timeline_; }

  // The visible time window, s.
  double view_start() const { return t0_; }
  double view_end() const { return t1_; }
  // Zoom by `factor` (> 1 zooms in) keeping the time under pixel x fixed.
  void zoom(double factor, double anchor_x);
  void pan_pixels(double dx, double dy);
  void fit();
  // Rows as drawn: (stage, stream), stage-major.
  const std::vector<std::pair<int, std::string>>& rows() const { return rows_; }
  double label_width() const { return gutter_; }  // px kept for the row labels
  // The slice under widget point `pos` (nullptr when none).
  const TimelineSlice* slice_at(QPoint pos) const;

  QSize sizeHint() const override { return {900, 400}; }
  QSize minimumSizeHint() const override { return {300, 150}; }

 protected:
  void paintEvent(QPaintEvent* e) override;
  void wheelEvent(QWheelEvent* e) override;
  void mousePressEvent(QMouseEvent* e) override;
  void mouseMoveEvent(QMouseEvent* e) override;
  void mouseReleaseEvent(QMouseEvent* e) override;
  void mouseDoubleClickEvent(QMouseEvent* e) override;
  bool event(QEvent* e) override;

 private:
  QRectF plot_rect() const;
  double x_of(double t) const;
  double t_of(double x) const;
  int row_of(const TimelineSlice& s) const;
  void clamp_view();

  Timeline timeline_;
  std::vector<std::pair<int, std::string>> rows_;
  double gutter_ = 130;  // px of row labels: the longest label's width
  QString row_label(int stage, const std::string& stream) const;
  std::vector<int> slice_row_;  // row index of each slice
  double t0_ = 0, t1_ = 1;      // visible window, s
  double y_offset_ = 0;         // rows scrolled, pixels
  bool dragging_ = false;
  QPointF last_mouse_;
};

class TimelinePanel : public QWidget {
  Q_OBJECT

 public:
  explicit TimelinePanel(QWidget* parent = nullptr);
  void set_timeline(Timeline t, const QString& title);
  QString title() const;
  void clear();
  TimelineView* view() const { return view_; }

 private:
  TimelineView* view_;
  QLabel* title_;
  QLabel* note_;
};

}  // namespace llmplan::gui
