#include "gui/explain_panel.h"

#include <QLocale>

#include "planner/spec/units.h"

namespace llmplan::gui {

namespace {

QString gib(double bytes) { return QStringLiteral("%1 GiB").arg(bytes / kGiB, 0, 'f', 2); }

}  // namespace

ExplainPanel::ExplainPanel(QWidget* parent) : QTextBrowser(parent) {
  setOpenLinks(false);
  setMinimumWidth(380);
  clear_plan();
}

void ExplainPanel::clear_plan() { setHtml(tr("<p><i>Select a plan to see why it does or does not fit, and the cheapest fixes.</i></p>")); }

void ExplainPanel::show_plan(const PlanDetails& d, const FitAdvice* advice) {
  setHtml(advice ? explanation_html(d) + fit_advice_html(*advice) : explanation_html(d));
}

QString fit_advice_html(const FitAdvice& a) {
  const QLocale loc;
  QString h = QStringLiteral("<h3>No plan fits. What would make one fit</h3><p>Each change alone; its best plan found by a sweep (%1 sweeps).</p>")
                  .arg(a.sweeps);
  if (a.changes.empty()) return h + QStringLiteral("<p>Nothing tried does: more GPUs, a shorter sequence, LoRA, QLoRA, FP8, offload.</p>");
  h += QStringLiteral("<table cellspacing='4'><tr><th align='left'>change</th><th align='left'>best plan</th><th>peak</th><th>tokens/s</th></tr>");
  for (const JobChange& c : a.changes)
    h += QStringLiteral("<tr><td>%1</td><td>%2</td><td align='right'>%3</td><td align='right'>%4</td></tr>")
             .arg(QString::fromStdString(c.description).toHtmlEscaped(), QString::fromStdString(plan_summary(c.plan)).toHtmlEscaped(),
                  gib(c.peak_bytes), loc.toString(c.tokens_per_s, 'f', 0));
  return h + QStringLiteral("</table>");
}

QString explanation_html(const PlanDetails& d) {
  const Explanation& e = d.explanation;
  const StageMemory& w = e.memory.worst;
  const QLocale loc;
  QString h;
  h += QStringLiteral("<h3>%1</h3>").arg(QString::fromStdString(plan_summary(d.file.plan)).toHtmlEscaped());
  h += QStringLiteral("<p>%1 on %2 × %3, %4 %5, seq %6, global batch %7.</p>")
           .arg(QString::fromStdString(d.file.model.name).toHtmlEscaped())
           .arg(d.file.gpus)
           .arg(QString::fromStdString(d.file.cluster.gpu.name).toHtmlEscaped())
           .arg(to_string(d.file.job.precision), to_string(d.file.job.amp))
           .arg(d.file.job.seq_len)
           .arg(d.file.job.global_batch);
  if (e.fits) {
    h += QStringLiteral("<p style='color:#1b7a35'><b>Fits.</b> Peak %1 of the %2 budget on stage %3 (%4 phase), %5 to spare.</p>")
             .arg(gib(w.total), gib(e.budget_bytes))
             .arg(w.stage)
             .arg(to_string(w.peak_phase), gib(-e.shortfall_bytes));
  } else {
    h += QStringLiteral("<p style='color:#b00020'><b>Does not fit.</b> Peak %1 exceeds the %2 budget by %3 on stage %4 of %5, in the %6 "
                        "phase; the largest component is %7 (%8).</p>")
             .arg(gib(w.total), gib(e.budget_bytes), gib(e.shortfall_bytes))
             .arg(w.stage)
             .arg(d.file.plan.pp)
             .arg(to_string(w.peak_phase), label(e.largest_item), gib(w.bytes[static_cast<size_t>(e.largest_item)]));
  }
  h += QStringLiteral("<p>Step %1 s, %2 tokens/s, MFU %3%.</p>")
           .arg(e.time.total, 0, 'f', 3)
           .arg(loc.toString(e.time.tokens_per_s, 'f', 0))
           .arg(100 * e.time.mfu, 0, 'f', 1);
  if (e.changes.empty()) {
    h += QStringLiteral("<p>No single change of the plan lowers its memory.</p>");
    return h;
  }
  h += e.fits ? QStringLiteral("<p><b>Memory-saving single changes</b> (memory and throughput from the model):</p>")
              : QStringLiteral("<p><b>Cheapest fixes</b>, fitting changes first, by throughput (memory and throughput from the model):</p>");
  h += QStringLiteral(
      "<table cellspacing='0' cellpadding='3' border='1' style='border-collapse:collapse'>"
      "<tr><th align='left'>change</th><th align='right'>Δ GiB</th><th align='right'>peak GiB</th><th align='right'>tokens/s</th>"
      "<th align='right'>Δ tokens/s</th><th>fits</th></tr>");
  for (const PlanChange& c : e.changes) {
    h += QStringLiteral("<tr><td>%1</td><td align='right'>%2</td><td align='right'>%3</td><td align='right'>%4</td>"
                        "<td align='right'>%5%</td><td align='center' style='color:%6'>%7</td></tr>")
             .arg(QString::fromStdString(c.description).toHtmlEscaped())
             .arg(c.delta_bytes / kGiB, 0, 'f', 2)
             .arg(c.peak_bytes / kGiB, 0, 'f', 2)
             .arg(loc.toString(c.tokens_per_s, 'f', 0))
             .arg(100 * c.throughput_change, 0, 'f', 1)
             .arg(c.fits ? "#1b7a35" : "#b00020", c.fits ? "yes" : "no");
  }
  h += QStringLiteral("</table>");
  return h;
}

}  // namespace llmplan::gui
