//! Pictures of a run, real or simulated, like the research prototype's
//! figures: what each GPU did over time ([`timeline`]) and which task ran
//! where ([`gantt`]), each written as SVG (for pages, scalable) and PNG
//! (for chat and issue trackers), alone or two runs side by side.
//!
//! The drawing code knows nothing of spools or traces: callers hand it a
//! [`Run`], so `carma report` (the daemon's GPU log and task records) and
//! `carma simulate` (the simulator's timeline) draw the same pictures.

pub mod gantt;
pub mod timeline;

use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;

/// The font every picture uses, built in so that a PNG renders the same on
/// a server without fonts (DejaVu Sans; licence in `assets/fonts/`).
const FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");
const FAMILY: &str = "sans-serif";

/// One GPU's samples over a run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuSeries {
    pub gpu: usize,
    pub samples: Vec<Sample>,
}

/// What a GPU did at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Seconds since the run began.
    pub t: f64,
    /// SM activity, 0 to 1.
    pub smact: f64,
    pub used_mib: f64,
    /// Board power, when the source knows it.
    pub power_w: Option<f64>,
}

/// One run of one task on one GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub gpu: usize,
    /// Seconds since the run began.
    pub start: f64,
    pub end: f64,
    pub task: String,
    /// What colours the bar: the owner, or the outcome.
    pub group: String,
    /// The run ended in an OOM crash (drawn hatched in red outline).
    pub crashed: bool,
}

/// Everything the pictures show of one run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Run {
    pub title: String,
    pub gpus: Vec<GpuSeries>,
    pub bars: Vec<Bar>,
    /// GPUs the run had, drawn even when idle throughout.
    pub gpu_count: usize,
    /// Seconds from the start to the last event.
    pub span: f64,
}

impl Run {
    /// GPU rows to draw: every GPU the run had or a bar names.
    fn rows(&self) -> usize {
        let named = self.bars.iter().map(|b| b.gpu + 1).max().unwrap_or(0);
        let sampled = self.gpus.iter().map(|g| g.gpu + 1).max().unwrap_or(0);
        self.gpu_count.max(named).max(sampled).max(1)
    }

    /// The time axis' end: the span, at least one second.
    fn x_end(&self) -> f64 {
        let last_bar = self.bars.iter().map(|b| b.end).fold(0.0, f64::max);
        self.span.max(last_bar).max(1.0)
    }
}

/// Which picture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// SM activity, memory and power per GPU over time.
    Timeline,
    /// Tasks per GPU over time.
    Gantt,
}

impl Kind {
    fn size(self, runs: usize) -> (u32, u32) {
        let width = 1000 * runs as u32;
        match self {
            Kind::Timeline => (width, 780),
            Kind::Gantt => (width, 420),
        }
    }

    fn draw<DB: DrawingBackend>(
        self,
        area: &DrawingArea<DB, Shift>,
        run: &Run,
    ) -> Result<(), String> {
        match self {
            Kind::Timeline => timeline::draw(area, run),
            Kind::Gantt => gantt::draw(area, run),
        }
    }
}

/// Writes `STEM.svg` and `STEM.png` of `runs` side by side (one run: one
/// panel) and returns the two paths.
pub fn write(kind: Kind, runs: &[&Run], stem: &Path) -> Result<[PathBuf; 2], String> {
    let (w, h) = kind.size(runs.len().max(1));
    let svg = stem.with_extension("svg");
    let png = stem.with_extension("png");
    std::fs::write(&svg, self::svg(kind, runs)?).map_err(|e| format!("{}: {e}", svg.display()))?;
    {
        let root = BitMapBackend::new(&png, (w, h)).into_drawing_area();
        panels(kind, &root, runs)?;
        root.present()
            .map_err(|e| format!("{}: {e}", png.display()))?;
    }
    Ok([svg, png])
}

/// The SVG picture of `runs` side by side, as text: a file's content, or
/// a page's inline picture (the status page's GPUs over the last hour).
pub fn svg(kind: Kind, runs: &[&Run]) -> Result<String, String> {
    register_font();
    let mut text = String::new();
    {
        let root =
            SVGBackend::with_string(&mut text, kind.size(runs.len().max(1))).into_drawing_area();
        panels(kind, &root, runs)?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(text)
}

fn panels<DB: DrawingBackend>(
    kind: Kind,
    root: &DrawingArea<DB, Shift>,
    runs: &[&Run],
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let areas = root.split_evenly((1, runs.len().max(1)));
    for (area, run) in areas.iter().zip(runs) {
        kind.draw(area, run)?;
    }
    Ok(())
}

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is built in and known to parse (a test draws with it).
        let _ = plotters::style::register_font(FAMILY, FontStyle::Normal, FONT);
    });
}

/// Text style of `size` pixels.
fn text(size: u32) -> TextStyle<'static> {
    (FAMILY, size).into_font().into()
}

/// Colour `i` of a palette that tells ten groups apart (Tableau 10).
fn colour(i: usize) -> RGBColor {
    const PALETTE: [(u8, u8, u8); 10] = [
        (78, 121, 167),
        (242, 142, 43),
        (89, 161, 79),
        (225, 87, 89),
        (118, 183, 178),
        (237, 201, 72),
        (176, 122, 161),
        (255, 157, 167),
        (156, 117, 95),
        (186, 176, 172),
    ];
    let (r, g, b) = PALETTE[i % PALETTE.len()];
    RGBColor(r, g, b)
}

/// Seconds as an axis label: `90 s`, `12 min`, `3.5 h`.
fn duration_label(s: &f64) -> String {
    if *s < 120.0 {
        format!("{s:.0} s")
    } else if *s < 7200.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

#[cfg(test)]
mod tests;
