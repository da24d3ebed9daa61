//! Tasks per GPU over a run: one row per GPU, one bar per run of a task,
//! coloured by group (owner or outcome). Collocated tasks overlap in
//! time, so each GPU's row is split into lanes and a bar takes the first
//! lane free at its start.

use std::collections::BTreeMap;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::{Bar, Run, colour, duration_label, text};

/// Lanes of each GPU row, and each bar's lane: the first lane whose last
/// bar ended by this bar's start.
fn lanes(bars: &[Bar]) -> (BTreeMap<usize, usize>, Vec<usize>) {
    let mut order: Vec<usize> = (0..bars.len()).collect();
    order.sort_by(|&a, &b| bars[a].start.total_cmp(&bars[b].start));
    let mut free_at: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    let mut lane_of = vec![0; bars.len()];
    for i in order {
        let ends = free_at.entry(bars[i].gpu).or_default();
        let lane = match ends.iter().position(|&end| end <= bars[i].start) {
            Some(lane) => lane,
            None => {
                ends.push(f64::NEG_INFINITY);
                ends.len() - 1
            }
        };
        ends[lane] = bars[i].end;
        lane_of[i] = lane;
    }
    let counts = free_at
        .into_iter()
        .map(|(g, ends)| (g, ends.len()))
        .collect();
    (counts, lane_of)
}

pub(super) fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    run: &Run,
) -> Result<(), String> {
    let rows = run.rows();
    let (counts, lane_of) = lanes(&run.bars);
    let mut groups: Vec<&str> = run.bars.iter().map(|b| b.group.as_str()).collect();
    groups.sort_unstable();
    groups.dedup();
    let mut chart = ChartBuilder::on(area)
        .margin(10)
        .caption(format!("{}: tasks per GPU", run.title), text(20))
        .x_label_area_size(30)
        .y_label_area_size(60)
        // GPU rows centred on whole numbers, so the axis labels sit on them.
        .build_cartesian_2d(0.0..run.x_end(), -0.5..rows as f64 - 0.5)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_label_formatter(&duration_label)
        .y_labels(rows)
        .y_label_formatter(&|y| {
            let row = y.round();
            if (y - row).abs() < 1e-6 && row >= 0.0 && (row as usize) < rows {
                format!("GPU {}", rows - 1 - row as usize)
            } else {
                String::new()
            }
        })
        .label_style(text(12))
        .disable_y_mesh()
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, bar) in run.bars.iter().enumerate() {
        let lanes = counts.get(&bar.gpu).copied().unwrap_or(1).max(1) as f64;
        // GPU 0 on top: row 0 of the chart is the last GPU.
        let base = (rows - 1 - bar.gpu.min(rows - 1)) as f64 - 0.45;
        let height = 0.9 / lanes;
        let y0 = base + height * lane_of[i] as f64;
        let group = groups.binary_search(&bar.group.as_str()).unwrap_or(0);
        let fill = colour(group).mix(0.85).filled();
        let corners = [
            (bar.start, y0),
            (bar.end.max(bar.start), y0 + height * 0.92),
        ];
        chart
            .draw_series(std::iter::once(Rectangle::new(corners, fill)))
            .map_err(|e| e.to_string())?;
        let edge = if bar.crashed {
            RED.stroke_width(2)
        } else {
            BLACK.mix(0.4).stroke_width(1)
        };
        chart
            .draw_series(std::iter::once(Rectangle::new(corners, edge)))
            .map_err(|e| e.to_string())?;
    }
    for (i, group) in groups.iter().enumerate() {
        chart
            .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())
            .map_err(|e| e.to_string())?
            .label(group.to_string())
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 14, y + 5)], colour(i).filled())
            });
    }
    if run.bars.iter().any(|b| b.crashed) {
        chart
            .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())
            .map_err(|e| e.to_string())?
            .label("OOM crash")
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], RED.stroke_width(2)));
    }
    if !groups.is_empty() {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font(text(12))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .draw()
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bar(gpu: usize, start: f64, end: f64) -> Bar {
        Bar {
            gpu,
            start,
            end,
            task: String::new(),
            group: String::new(),
            crashed: false,
        }
    }

    #[test]
    fn overlapping_runs_on_a_gpu_take_separate_lanes() {
        let bars = [
            bar(0, 0.0, 10.0),
            bar(0, 5.0, 20.0),
            bar(0, 10.0, 15.0),
            bar(1, 0.0, 30.0),
        ];
        let (counts, lane_of) = lanes(&bars);
        assert_eq!(lane_of, [0, 1, 0, 0]);
        assert_eq!(counts.get(&0), Some(&2));
        assert_eq!(counts.get(&1), Some(&1));
    }
}
