use super::*;

fn run(title: &str) -> Run {
    let samples = |gpu: usize| GpuSeries {
        gpu,
        samples: (0..60)
            .map(|i| Sample {
                t: f64::from(i) * 10.0,
                smact: (f64::from(i) / 60.0) * (gpu as f64 + 1.0) / 2.0,
                used_mib: 1024.0 * f64::from(i % 20),
                power_w: (gpu == 0).then_some(60.0 + 5.0 * f64::from(i)),
            })
            .collect(),
    };
    let bar = |gpu: usize, start: f64, end: f64, group: &str, crashed: bool| Bar {
        gpu,
        start,
        end,
        task: format!("{group}-{start}"),
        group: group.to_string(),
        crashed,
    };
    Run {
        title: title.to_string(),
        gpus: vec![samples(0), samples(1)],
        bars: vec![
            bar(0, 0.0, 300.0, "alice", false),
            bar(0, 100.0, 200.0, "bob", true),
            bar(0, 200.0, 590.0, "bob", false),
            bar(1, 50.0, 400.0, "alice", false),
        ],
        gpu_count: 3,
        span: 600.0,
    }
}

/// Every picture is written in both formats, and each file is what its
/// extension says: an SVG document naming the run, a PNG of the size
/// asked for.
#[test]
fn pictures_are_written_as_svg_and_png() {
    let dir = tempfile::tempdir().unwrap();
    let a = run("exclusive");
    let b = run("magm");
    for (kind, runs, name) in [
        (Kind::Timeline, vec![&a], "gpus"),
        (Kind::Gantt, vec![&a], "tasks"),
        (Kind::Gantt, vec![&a, &b], "compare"),
    ] {
        let [svg, png] = write(kind, &runs, &dir.path().join(name)).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.starts_with("<svg"), "{}", svg.display());
        for r in &runs {
            assert!(
                text.contains(&r.title),
                "{} lacks {}",
                svg.display(),
                r.title
            );
        }
        let bytes = std::fs::read(&png).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        let (w, h) = kind.size(runs.len());
        let width = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
        let height = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
        assert_eq!((width, height), (w, h));
    }
}

#[test]
fn an_empty_run_still_draws() {
    let dir = tempfile::tempdir().unwrap();
    let empty = Run::default();
    write(Kind::Timeline, &[&empty], &dir.path().join("t")).unwrap();
    write(Kind::Gantt, &[&empty], &dir.path().join("g")).unwrap();
}

#[test]
fn durations_read_in_the_unit_that_fits() {
    assert_eq!(duration_label(&90.0), "90 s");
    assert_eq!(duration_label(&720.0), "12 min");
    assert_eq!(duration_label(&12_600.0), "3.5 h");
}
