//! Per-GPU SM activity, memory and power over a run, one line per GPU in
//! three stacked panels: where collocation filled the GPUs, and what it
//! cost in watts.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::{Run, Sample, colour, duration_label, text};

/// One panel: its title, unit and how a sample gives its value.
struct Panel {
    title: &'static str,
    unit: &'static str,
    value: fn(&Sample) -> Option<f64>,
}

const PANELS: [Panel; 3] = [
    Panel {
        title: "SM activity",
        unit: "%",
        value: |s| Some(100.0 * s.smact),
    },
    Panel {
        title: "memory used",
        unit: "GiB",
        value: |s| Some(s.used_mib / 1024.0),
    },
    Panel {
        title: "power",
        unit: "W",
        value: |s| s.power_w,
    },
];

pub(super) fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    run: &Run,
) -> Result<(), String> {
    let area = area
        .titled(&run.title, text(22))
        .map_err(|e| e.to_string())?;
    let x_end = run.x_end();
    for (panel, slot) in PANELS.iter().zip(area.split_evenly((PANELS.len(), 1))) {
        let top = run
            .gpus
            .iter()
            .flat_map(|g| g.samples.iter().filter_map(panel.value))
            .fold(0.0, f64::max);
        let y_end = if panel.unit == "%" {
            100.0
        } else {
            (top * 1.1).max(1.0)
        };
        let mut chart = ChartBuilder::on(&slot)
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(56)
            .caption(format!("{} ({})", panel.title, panel.unit), text(16))
            .build_cartesian_2d(0.0..x_end, 0.0..y_end)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_label_formatter(&duration_label)
            .label_style(text(12))
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(|e| e.to_string())?;
        for series in &run.gpus {
            let points: Vec<(f64, f64)> = series
                .samples
                .iter()
                .filter_map(|s| Some((s.t, (panel.value)(s)?)))
                .collect();
            if points.is_empty() {
                continue;
            }
            let style = colour(series.gpu).stroke_width(2);
            chart
                .draw_series(LineSeries::new(points, style))
                .map_err(|e| e.to_string())?
                .label(format!("GPU {}", series.gpu))
                .legend(move |(x, y)| {
                    PathElement::new(
                        vec![(x, y), (x + 16, y)],
                        colour(series.gpu).stroke_width(2),
                    )
                });
        }
        if !run.gpus.is_empty() {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .label_font(text(12))
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK.mix(0.3))
                .draw()
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}
