//! The drill's charts: the client log bucketed into per-second series
//! (successes, errors by answer, latency percentiles) and drawn as SVG over
//! drill time — seconds since the load started, the same origin for every
//! chart — with the drill's moments marked on each: the fault, failback
//! requested and done, the end of the load as lines, detection and recovery
//! (from [`Measurements`](crate::measure::Measurements)) as shaded spans.
//!
//! Every attempt of the drill is bucketed by the second its answer (or its
//! failure to get one) came, the failback probes and final replays too; the
//! load's end is marked so the load's part stands out. The series are pure
//! functions of the log; only [`render`] draws.
//!
//! Read at a glance: the throughput chart's y-axis is scaled to the load
//! (the seconds up to its end), so the burst of final replays after it
//! cannot flatten the dip at the fault; a point above the axis is drawn at
//! its top with a triangle and its true value. Latency is on a log axis, so
//! a 10 s pause and 5 ms answers are both readable. Series and markers never
//! share a colour: successes are green and error classes take colours no
//! marker uses; the fault is red, the other moments dark and dashed.

use std::collections::BTreeMap;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::client_log::{Attempt, ClientLog, EpochMillis};
use crate::document::Chart;
use crate::report::Report;

pub const THROUGHPUT_SVG: &str = "throughput.svg";
pub const LATENCY_SVG: &str = "latency.svg";

/// The series' colours: successes first, then each error class (or p50,
/// p99). None of them is a marker's colour ([`moment_color`]).
const SERIES: [RGBColor; 8] = [
    RGBColor(26, 140, 60),   // green: successes
    RGBColor(240, 130, 0),   // orange
    RGBColor(0, 100, 210),   // blue
    RGBColor(150, 90, 40),   // brown
    RGBColor(230, 70, 190),  // pink
    RGBColor(0, 170, 170),   // teal
    RGBColor(140, 140, 0),   // olive
    RGBColor(100, 160, 240), // light blue
];
/// The latency chart's series: p50 blue, p99 orange (green would read as
/// "successes").
const LATENCY_SERIES: [RGBColor; 2] = [RGBColor(0, 100, 210), RGBColor(240, 130, 0)];

/// The throughput axis's headroom over the load's busiest second.
const HEADROOM: f64 = 1.15;
/// The marker of the moment the load ended: the throughput axis is scaled to
/// the seconds before it.
const LOAD_ENDED: &str = "load ended";

const SIZE: (u32, u32) = (1160, 440);
/// The legend's width, right of the plot: room for the longest error class.
const LEGEND_WIDTH: u32 = 420;

/// The 50th and 99th percentile latency of one second's attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Percentiles {
    pub p50_ms: u64,
    pub p99_ms: u64,
}

/// The log per second since the origin; index `i` is the second `[i, i+1)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PerSecond {
    pub successes: Vec<u64>,
    /// Attempts that were not successes, by `status errorCode` (`no answer`
    /// when none came), the classes of the report's error table.
    pub errors: BTreeMap<String, Vec<u64>>,
    /// Latency (answered − sent) of the second's attempts; `None` for a
    /// second in which no attempt ended.
    pub latency: Vec<Option<Percentiles>>,
}

impl PerSecond {
    /// Buckets `attempts` by the second after `origin` they were answered in.
    pub fn of(attempts: &[Attempt], origin: EpochMillis) -> Self {
        let second = |a: &Attempt| (a.answered_at.saturating_sub(origin) / 1000) as usize;
        let seconds = attempts.iter().map(|a| second(a) + 1).max().unwrap_or(0);
        let mut successes = vec![0; seconds];
        let mut errors = BTreeMap::new();
        let mut latencies = vec![Vec::new(); seconds];
        for attempt in attempts {
            let s = second(attempt);
            if attempt.is_success() {
                successes[s] += 1;
            } else {
                errors
                    .entry(attempt.error_class())
                    .or_insert_with(|| vec![0; seconds])[s] += 1;
            }
            latencies[s].push(attempt.answered_at.saturating_sub(attempt.sent_at));
        }
        let latency = latencies
            .into_iter()
            .map(|mut ms| {
                ms.sort_unstable();
                Some(Percentiles {
                    p50_ms: percentile(&ms, 50)?,
                    p99_ms: percentile(&ms, 99)?,
                })
            })
            .collect();
        PerSecond {
            successes,
            errors,
            latency,
        }
    }
}

/// The nearest-rank `p`th percentile of `sorted` (ascending): the smallest
/// value at least `p`% of the values are at or below. `None` when empty.
pub fn percentile(sorted: &[u64], p: u32) -> Option<u64> {
    let rank = (sorted.len() * p as usize).div_ceil(100).max(1);
    sorted.get(rank.min(sorted.len()).checked_sub(1)?).copied()
}

/// A moment marked with a vertical line, in seconds since the origin.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Moment {
    pub at: f64,
    pub what: &'static str,
}

/// A span shaded on the chart, in seconds since the origin.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub from: f64,
    pub to: f64,
    pub what: &'static str,
}

/// What every chart marks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Markers {
    pub moments: Vec<Moment>,
    pub intervals: Vec<Interval>,
}

impl Markers {
    /// The report's moments, against `origin`: the fault and the detection
    /// and recovery spans from it (only when a fault was injected), failback
    /// requested and done (when asked for), and the end of the load.
    pub fn of(report: &Report, origin: EpochMillis) -> Self {
        let seconds = |at: EpochMillis| at.saturating_sub(origin) as f64 / 1000.0;
        let m = &report.measurements;
        let mut moments = Vec::new();
        let mut intervals = Vec::new();
        if let Some(fault_at) = m.fault_at {
            moments.push(Moment {
                at: seconds(fault_at),
                what: "fault",
            });
            let spans = [
                (m.max_detection_ms, "detection (max)"),
                (m.max_recovery_ms, "recovery (max)"),
            ];
            for (ms, what) in spans {
                if let Some(ms) = ms {
                    intervals.push(Interval {
                        from: seconds(fault_at),
                        to: seconds(fault_at + ms),
                        what,
                    });
                }
            }
        }
        if let Some(failback) = &report.failback {
            moments.push(Moment {
                at: seconds(failback.requested_at),
                what: "failback requested",
            });
            if let Some(at) = failback.home_again_at {
                moments.push(Moment {
                    at: seconds(at),
                    what: "home again",
                });
            }
        }
        moments.push(Moment {
            at: seconds(m.load_ended_at),
            what: "load ended",
        });
        Markers { moments, intervals }
    }

    fn last(&self) -> f64 {
        let ends = self.moments.iter().map(|m| m.at);
        ends.chain(self.intervals.iter().map(|i| i.to))
            .fold(0.0, f64::max)
    }
}

/// One line on a chart: `(seconds, value)` points.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

impl Curve {
    /// A per-second series plotted at the middle of each second; `None`
    /// values are left out.
    fn of(label: impl Into<String>, values: impl IntoIterator<Item = Option<u64>>) -> Self {
        let points = values
            .into_iter()
            .enumerate()
            .filter_map(|(s, v)| Some((s as f64 + 0.5, v? as f64)))
            .collect();
        Curve {
            label: label.into(),
            points,
        }
    }
}

/// Successes and each error class per second.
pub fn throughput_curves(series: &PerSecond) -> Vec<Curve> {
    let counts = |values: &[u64]| values.iter().map(|&n| Some(n)).collect::<Vec<_>>();
    std::iter::once(Curve::of("successes", counts(&series.successes)))
        .chain(
            series
                .errors
                .iter()
                .map(|(class, values)| Curve::of(class.clone(), counts(values))),
        )
        .collect()
}

/// p50 and p99 latency per second.
pub fn latency_curves(series: &PerSecond) -> Vec<Curve> {
    let pick = |f: fn(&Percentiles) -> u64| series.latency.iter().map(move |p| p.as_ref().map(f));
    vec![
        Curve::of("p50", pick(|p| p.p50_ms)),
        Curve::of("p99", pick(|p| p.p99_ms)),
    ]
}

/// Draws the drill's charts from its report and client log.
pub fn render(report: &Report, log: &ClientLog) -> anyhow::Result<Vec<Chart>> {
    let origin = report.load_started_at.unwrap_or_else(|| {
        // Reports from before the load's start was recorded: its first attempt.
        log.attempts
            .iter()
            .map(|a| a.sent_at)
            .min()
            .unwrap_or(report.measurements.load_ended_at)
    });
    render_with(log, origin, &Markers::of(report, origin))
}

/// Draws the throughput and latency charts of `log` from `origin`, with
/// `markers` on both (the chaos drill marks each fault).
pub fn render_with(
    log: &ClientLog,
    origin: EpochMillis,
    markers: &Markers,
) -> anyhow::Result<Vec<Chart>> {
    let series = PerSecond::of(&log.attempts, origin);
    Ok(vec![
        Chart {
            file_name: THROUGHPUT_SVG,
            title: "Answers per second, successes and errors by answer",
            svg: draw(
                "Answers per second: successes and each error class",
                "attempts / s",
                &throughput_curves(&series),
                markers,
                Axis::ScaledToLoad,
                &SERIES,
            )?,
        },
        Chart {
            file_name: LATENCY_SVG,
            title: "Latency per second, p50 and p99 of the attempts answered in it",
            svg: draw(
                "Latency per second (answered − sent): p50 and p99, log scale",
                "ms (log)",
                &latency_curves(&series),
                markers,
                Axis::Log,
                &LATENCY_SERIES,
            )?,
        },
    ])
}

/// How a chart's y-axis is scaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Axis {
    /// Linear from zero to the busiest second of the load (to its end
    /// marker), with headroom; later points above it are clipped and marked.
    ScaledToLoad,
    /// Logarithmic from 1 to the largest value (values below 1 drawn at 1).
    Log,
}

/// The top of a load-scaled axis: the largest value up to `load_end`
/// (every value when there is no end marker, or none before it), with
/// headroom; at least 1.
pub fn load_scaled_top(curves: &[Curve], load_end: Option<f64>) -> f64 {
    let all = || curves.iter().flat_map(|c| c.points.iter());
    let during = all()
        .filter(|p| load_end.is_none_or(|end| p.0 <= end))
        .map(|p| p.1)
        .fold(0.0, f64::max);
    let top = if during > 0.0 {
        during
    } else {
        all().map(|p| p.1).fold(0.0, f64::max)
    };
    (top * HEADROOM).max(1.0)
}

/// Each run of clipped points one second apart, as its first second and
/// its largest value: where the chart writes a value.
pub fn clipped_runs(over: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut runs: Vec<(f64, f64, f64)> = Vec::new(); // (first x, last x, largest y)
    for &(x, y) in over {
        match runs.last_mut() {
            Some(run) if x - run.1 <= 1.0 + f64::EPSILON => {
                run.1 = x;
                run.2 = run.2.max(y);
            }
            _ => runs.push((x, x, y)),
        }
    }
    runs.into_iter().map(|(x, _, y)| (x, y)).collect()
}

/// The points of `curve` above `top`, which the chart clips.
pub fn clipped(curve: &Curve, top: f64) -> Vec<(f64, f64)> {
    curve.points.iter().copied().filter(|p| p.1 > top).collect()
}

/// One chart as an SVG document: the curves over drill time, the intervals
/// shaded behind them, the moments as vertical lines, and a legend to the
/// right of the plot (inside it, it would hide the data).
fn draw(
    caption: &str,
    y_desc: &str,
    curves: &[Curve],
    markers: &Markers,
    axis: Axis,
    colours: &[RGBColor],
) -> anyhow::Result<String> {
    let points = || curves.iter().flat_map(|c| c.points.iter());
    let x_max = points()
        .map(|p| p.0 + 0.5)
        .fold(markers.last(), f64::max)
        .max(1.0);
    let load_end = markers
        .moments
        .iter()
        .find(|m| m.what == LOAD_ENDED)
        .map(|m| m.at);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let (plot, legend_area) = root.split_horizontally(SIZE.0 - LEGEND_WIDTH);
        let mut builder = ChartBuilder::on(&plot);
        builder
            .caption(caption, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64);
        let legend = match axis {
            Axis::ScaledToLoad => {
                let y_max = load_scaled_top(curves, load_end);
                let mut chart = builder.build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
                chart
                    .configure_mesh()
                    .x_desc("seconds since the load started")
                    .y_desc(y_desc)
                    .axis_desc_style(("sans-serif", 17))
                    .label_style(("sans-serif", 15))
                    .light_line_style(WHITE.mix(0.0))
                    .draw()?;
                plot_on(
                    &mut chart,
                    curves,
                    markers,
                    colours,
                    0.0,
                    y_max,
                    Some(y_max),
                )?
            }
            Axis::Log => {
                let y_max = (points().map(|p| p.1).fold(1.0, f64::max) * 2.0).max(10.0);
                let mut chart = builder.build_cartesian_2d(0.0..x_max, (1.0..y_max).log_scale())?;
                chart
                    .configure_mesh()
                    .x_desc("seconds since the load started")
                    .y_desc(y_desc)
                    .axis_desc_style(("sans-serif", 17))
                    .label_style(("sans-serif", 15))
                    .light_line_style(WHITE.mix(0.0))
                    .draw()?;
                plot_on(&mut chart, curves, markers, colours, 1.0, y_max, None)?
            }
        };
        draw_legend(&legend_area, &legend)?;
        root.present()?;
    }
    Ok(svg)
}

/// Draws the intervals, curves and moments on `chart`, whose y-axis runs
/// from `y_min` to `y_max`; with `clip_at`, points above it are drawn at it
/// with a triangle and their value. Answers the legend's entries.
fn plot_on<'a, X, Y>(
    chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<X, Y>>,
    curves: &'a [Curve],
    markers: &'a Markers,
    colours: &[RGBColor],
    y_min: f64,
    y_max: f64,
    clip_at: Option<f64>,
) -> anyhow::Result<Vec<(String, Swatch)>>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    let mut legend: Vec<(String, Swatch)> = Vec::new();
    {
        // One shade per kind of interval (the failover drill's detection
        // and recovery; the chaos drill's nemeses), one legend entry each.
        let shades = [
            RGBColor(255, 160, 0),
            RGBColor(0, 160, 220),
            RGBColor(220, 40, 60),
            RGBColor(120, 80, 200),
            RGBColor(40, 170, 90),
            RGBColor(150, 110, 60),
            RGBColor(230, 90, 200),
            RGBColor(110, 110, 110),
        ];
        let mut kinds: Vec<&str> = Vec::new();
        for interval in &markers.intervals {
            let kind = match kinds.iter().position(|k| *k == interval.what) {
                Some(i) => i,
                None => {
                    kinds.push(interval.what);
                    kinds.len() - 1
                }
            };
            let fill = shades[kind % shades.len()].mix(0.18).filled();
            chart.draw_series(std::iter::once(Rectangle::new(
                [(interval.from, y_min), (interval.to, y_max)],
                fill,
            )))?;
            if !legend.iter().any(|(label, _)| label == interval.what) {
                legend.push((interval.what.to_owned(), Swatch::Shade(fill)));
            }
        }
        let mut any_clipped = false;
        for (i, curve) in curves.iter().enumerate() {
            let style = colours[i % colours.len()].stroke_width(2);
            let top = clip_at.unwrap_or(f64::INFINITY);
            chart.draw_series(LineSeries::new(
                curve.points.iter().map(|&(x, y)| (x, y.clamp(y_min, top))),
                style,
            ))?;
            legend.push((curve.label.clone(), Swatch::Line(style)));
            if let Some(top) = clip_at {
                let over = clipped(curve, top);
                any_clipped |= !over.is_empty();
                let colour = colours[i % colours.len()];
                chart.draw_series(
                    over.iter()
                        .map(|&(x, _)| TriangleMarker::new((x, top), 6, colour.filled())),
                )?;
                // One value per run of neighbouring seconds above the axis
                // (its largest): a label per second would overprint.
                let font = TextStyle::from(("sans-serif", 12).into_font())
                    .pos(Pos::new(HPos::Left, VPos::Top))
                    .color(&colour);
                for (x, y) in clipped_runs(&over) {
                    chart.draw_series(std::iter::once(Text::new(
                        format!("↑{y:.0}"),
                        (x, top),
                        font.clone(),
                    )))?;
                }
            }
        }
        if any_clipped {
            legend.push((
                "above the axis (scaled to the load): ↑ largest value".to_owned(),
                Swatch::Triangle,
            ));
        }
        for moment in &markers.moments {
            let style = moment_color(moment.what).stroke_width(2);
            chart.draw_series(DashedLineSeries::new(
                [(moment.at, y_min), (moment.at, y_max)],
                6,
                4,
                style,
            ))?;
            legend.push((moment.what.to_owned(), Swatch::Line(style)));
        }
    }
    Ok(legend)
}

/// The legend, right of the plot (inside it, it would hide the data).
fn draw_legend(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    legend: &[(String, Swatch)],
) -> anyhow::Result<()> {
    let font =
        TextStyle::from(("sans-serif", 14).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    for (i, (label, swatch)) in legend.iter().enumerate() {
        let y = 48 + 22 * i as i32;
        match *swatch {
            Swatch::Line(style) => area.draw(&PathElement::new(vec![(0, y), (24, y)], style))?,
            Swatch::Shade(style) => area.draw(&Rectangle::new([(0, y - 6), (24, y + 6)], style))?,
            Swatch::Triangle => area.draw(&TriangleMarker::new((12, y), 6, BLACK.filled()))?,
        }
        area.draw(&Text::new(label.as_str(), (32, y), font.clone()))?;
    }
    Ok(())
}

/// How a legend entry shows what it names.
#[derive(Debug, Clone, Copy)]
enum Swatch {
    Line(ShapeStyle),
    Shade(ShapeStyle),
    /// The clipped points' marker.
    Triangle,
}

/// The moments' colours: red for the fault, dark ones for the rest; none
/// is a series' colour ([`SERIES`]).
fn moment_color(what: &str) -> RGBColor {
    match what {
        "fault" => RGBColor(210, 0, 0),
        LOAD_ENDED => RGBColor(60, 60, 60),
        "failback requested" => RGBColor(110, 0, 150),
        _ => RGBColor(0, 0, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failback::FailbackResult;
    use crate::fault::FaultMode;
    use crate::measure::measure;
    use crate::report::{EvidenceSummary, FaultReport, Timeline};

    /// The text of every `<text>` element of `svg`, trimmed.
    fn texts(svg: &str) -> Vec<&str> {
        svg.split("<text")
            .skip(1)
            .filter_map(|element| {
                let content = &element[element.find('>')? + 1..];
                Some(content[..content.find("</text>")?].trim())
            })
            .collect()
    }

    /// A report of a drill whose load ran from 10 s to 40 s (epoch millis),
    /// with a fault at `fault_at` if any.
    fn report(log: &ClientLog, fault_at: Option<EpochMillis>) -> Report {
        Report {
            cluster: "cluster.json".into(),
            region: "eu-west".into(),
            duration_seconds: 30,
            rate: 10,
            load_started_at: Some(10_000),
            timeline: Timeline::default(),
            fault: FaultReport {
                mode: FaultMode::Kill,
                injected: fault_at.is_some(),
                at: fault_at,
                steps: Vec::new(),
                error: None,
            },
            measurements: measure(log, fault_at, &["acme".into()], 40_000),
            failback: None,
            evidence: EvidenceSummary {
                payment_rows_by_region: BTreeMap::new(),
                ledger_entries: 0,
                store_records: None,
                store_member: None,
                gaps: Vec::new(),
            },
            checks: Vec::new(),
            invariants_held: true,
            homecoming: Default::default(),
            verdict: String::new(),
            passed: false,
        }
        .with_verdict()
    }

    fn attempt(sent_at: u64, answered_at: u64, status: Option<u16>, code: Option<&str>) -> Attempt {
        Attempt {
            op: sent_at,
            tenant: "acme".into(),
            key: format!("k{sent_at}"),
            body_sha256: String::new(),
            sent_at,
            answered_at,
            status,
            error_code: code.map(str::to_owned),
            transport_error: status.is_none().then(|| "connection refused".to_owned()),
            response_body: None,
            region: None,
            replayed: false,
        }
    }

    #[test]
    fn attempts_are_bucketed_by_the_second_they_were_answered_in() {
        let origin = 10_000;
        let series = PerSecond::of(
            &[
                attempt(10_000, 10_100, Some(201), None),
                attempt(10_500, 10_999, Some(201), None),
                attempt(10_900, 11_000, Some(503), Some("SERVICE_UNAVAILABLE")),
                attempt(11_000, 13_500, None, None),
                attempt(13_000, 13_200, Some(202), None),
                attempt(13_100, 13_300, Some(201), None),
            ],
            origin,
        );
        assert_eq!(series.successes, vec![2, 0, 0, 1]);
        assert_eq!(
            series.errors,
            BTreeMap::from([
                ("202".to_owned(), vec![0, 0, 0, 1]),
                ("503 SERVICE_UNAVAILABLE".to_owned(), vec![0, 1, 0, 0]),
                ("no answer".to_owned(), vec![0, 0, 0, 1]),
            ])
        );
        assert_eq!(
            series.latency[0],
            Some(Percentiles {
                p50_ms: 100,
                p99_ms: 499
            })
        );
        assert_eq!(series.latency[2], None);
        assert_eq!(
            series.latency[3],
            Some(Percentiles {
                p50_ms: 200,
                p99_ms: 2500
            })
        );
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let ms: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&ms, 50), Some(50));
        assert_eq!(percentile(&ms, 99), Some(99));
        assert_eq!(percentile(&ms, 100), Some(100));
        let with_tail: Vec<u64> = std::iter::repeat_n(10, 990).chain([5000; 10]).collect();
        assert_eq!(percentile(&with_tail, 99), Some(10));
        assert_eq!(percentile(&[7], 99), Some(7));
        assert_eq!(percentile(&[], 50), None);
    }

    #[test]
    fn curves_put_each_second_at_its_middle_and_skip_silent_seconds() {
        let series = PerSecond::of(
            &[
                attempt(0, 100, Some(201), None),
                attempt(2000, 2300, Some(201), None),
            ],
            0,
        );
        let throughput = throughput_curves(&series);
        assert_eq!(throughput.len(), 1);
        assert_eq!(
            throughput[0].points,
            vec![(0.5, 1.0), (1.5, 0.0), (2.5, 1.0)]
        );
        let latency = latency_curves(&series);
        assert_eq!(latency[0].label, "p50");
        assert_eq!(latency[1].points, vec![(0.5, 100.0), (2.5, 300.0)]);
    }

    #[test]
    fn a_fault_and_a_failback_are_marked_against_the_loads_start() {
        let log = ClientLog {
            operations: Vec::new(),
            attempts: vec![
                attempt(20_000, 20_500, Some(503), Some("SERVICE_UNAVAILABLE")),
                attempt(22_000, 23_000, Some(201), None),
            ],
        };
        let mut report = report(&log, Some(20_000));
        report.failback = Some(FailbackResult {
            requested_at: 41_000,
            router_status: Some(200),
            router_body: None,
            home_again_at: Some(43_500),
            not_home: Vec::new(),
        });
        let markers = Markers::of(&report, 10_000);
        let moment = |what, at| Moment { at, what };
        assert_eq!(
            markers.moments,
            vec![
                moment("fault", 10.0),
                moment("failback requested", 31.0),
                moment("home again", 33.5),
                moment("load ended", 30.0),
            ]
        );
        let interval = |what, to| Interval {
            from: 10.0,
            to,
            what,
        };
        assert_eq!(
            markers.intervals,
            vec![
                interval("detection (max)", 10.5),
                interval("recovery (max)", 13.0)
            ]
        );
    }

    #[test]
    fn a_drill_without_a_fault_marks_only_the_end_of_the_load() {
        let report = report(&ClientLog::default(), None);
        let markers = Markers::of(&report, 10_000);
        assert_eq!(
            markers.moments,
            vec![Moment {
                at: 30.0,
                what: "load ended"
            }]
        );
        assert_eq!(markers.intervals, Vec::new());
    }

    #[test]
    fn an_empty_log_still_draws_both_charts() {
        let charts = render(&report(&ClientLog::default(), None), &ClientLog::default()).unwrap();
        let names: Vec<_> = charts.iter().map(|c| c.file_name).collect();
        assert_eq!(names, [THROUGHPUT_SVG, LATENCY_SVG]);
        for chart in &charts {
            assert!(chart.svg.starts_with("<svg"), "{}", chart.svg);
            assert!(chart.svg.trim_end().ends_with("</svg>"), "{}", chart.svg);
            let texts = texts(&chart.svg);
            assert!(texts.contains(&"load ended"), "{texts:?}");
            assert!(!texts.contains(&"fault"), "{texts:?}");
        }
    }

    #[test]
    fn the_charts_label_their_axes_series_and_markers_as_svg_text() {
        let log = ClientLog {
            operations: Vec::new(),
            attempts: vec![
                attempt(19_000, 19_200, Some(201), None),
                attempt(20_000, 20_500, Some(503), Some("SERVICE_UNAVAILABLE")),
                attempt(22_000, 23_000, Some(201), None),
            ],
        };
        let charts = render(&report(&log, Some(20_000)), &log).unwrap();
        let [throughput, latency] = &charts[..] else {
            panic!("{charts:#?}")
        };
        let texts = texts(&throughput.svg);
        for text in [
            "seconds since the load started",
            "attempts / s",
            "successes",
            "503 SERVICE_UNAVAILABLE",
            "fault",
            "detection (max)",
            "recovery (max)",
            "load ended",
        ] {
            assert!(texts.contains(&text), "{text}: {texts:?}");
        }
        let texts = self::texts(&latency.svg);
        for text in ["ms (log)", "p50", "p99", "fault", "load ended"] {
            assert!(texts.contains(&text), "{text}: {texts:?}");
        }
        // Each chart says what it shows.
        assert!(
            texts
                .iter()
                .any(|t| t.starts_with("Latency per second") && t.contains("log scale")),
            "{texts:?}"
        );
        // A log axis: its ticks are powers of ten.
        for tick in ["1.0", "10.0", "100.0", "1000.0"] {
            assert!(texts.contains(&tick), "{tick}: {texts:?}");
        }
    }

    #[test]
    fn the_throughput_axis_is_scaled_to_the_load_and_the_final_replays_are_clipped_and_marked() {
        // 10 answers a second during the load, a dip to 2 at the fault, and
        // a burst of 400 final replays after the load ended at 6 s.
        let curve = Curve {
            label: "successes".into(),
            points: vec![(0.5, 10.0), (1.5, 2.0), (2.5, 10.0), (7.5, 400.0)],
        };
        let top = load_scaled_top(std::slice::from_ref(&curve), Some(6.0));
        assert!((11.0..12.0).contains(&top), "{top}");
        assert_eq!(clipped(&curve, top), [(7.5, 400.0)]);
        assert_eq!(
            clipped_runs(&[(7.5, 40.0), (8.5, 90.0), (9.5, 30.0), (12.5, 20.0)]),
            [(7.5, 90.0), (12.5, 20.0)],
            "one label per run of neighbouring seconds, its largest value"
        );
        assert_eq!(
            load_scaled_top(std::slice::from_ref(&curve), None),
            400.0 * HEADROOM,
            "without an end marker every point counts"
        );

        let mut attempts = Vec::new();
        for s in 0..6u64 {
            for i in 0..10 {
                attempts.push(attempt(
                    10_000 + s * 1000 + i,
                    10_000 + s * 1000 + 50 + i,
                    Some(201),
                    None,
                ));
            }
        }
        for i in 0..300 {
            attempts.push(attempt(47_000, 47_100 + i, Some(201), None));
        }
        let log = ClientLog {
            operations: Vec::new(),
            attempts,
        };
        let charts = render(&report(&log, Some(12_000)), &log).unwrap();
        let texts = texts(&charts[0].svg);
        assert!(
            texts.contains(&"↑300"),
            "the clipped burst's value: {texts:?}"
        );
        assert!(
            texts.iter().any(|t| t.contains("above the axis")),
            "{texts:?}"
        );
        // The axis tops out near the load's 10/s, not near the burst's 300.
        assert!(
            !texts.contains(&"300.0") && !texts.contains(&"100.0"),
            "{texts:?}"
        );
    }

    #[test]
    fn series_and_markers_never_share_a_colour() {
        for moment in ["fault", LOAD_ENDED, "failback requested", "home again"] {
            let marker = moment_color(moment);
            for colour in SERIES.iter().chain(&LATENCY_SERIES) {
                assert_ne!(*colour, marker, "{moment}");
            }
        }
        let mut distinct = SERIES.to_vec();
        distinct.sort_by_key(|c| (c.0, c.1, c.2));
        distinct.dedup();
        assert_eq!(distinct.len(), SERIES.len());
    }
}
