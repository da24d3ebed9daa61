use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use super::*;
use crate::gpu::ProcessMemory;

fn reading(index: usize) -> GpuReading {
    GpuReading {
        index,
        used_mib: 12034,
        total_mib: 40960,
        smact: 0.812,
        occupancy: Some(0.456),
        dram: Some(0.123),
        power_w: Some(250.06),
        energy_j: Some(123456.74),
        temperature_c: Some(65),
        sm_clock_mhz: Some(1410),
        processes: vec![
            ProcessMemory {
                pid: 4242,
                used_mib: 11000,
            },
            ProcessMemory {
                pid: 4300,
                used_mib: 500,
            },
        ],
        source: Some(MetricSource::Dcgm),
        error: None,
    }
}

#[test]
fn rows_have_every_column_and_leave_out_unknowns_and_broken_gpus() {
    let owners = HashMap::from([(4242, "000042-resnet50".to_owned())]);
    let mut broken = reading(1);
    broken.error = Some("lost".into());
    let bare = GpuReading {
        smact: 0.5,
        source: Some(MetricSource::Utilization),
        ..GpuReading::unknown(2)
    };
    let text = rows(1718000000.0, &[reading(0), broken, bare], &owners);
    assert_eq!(
        text,
        "1718000000.000,0,dcgm,0.8120,0.4560,0.1230,12034,40960,250.1,123456.7,65,1410,\
         4242:11000:000042-resnet50 4300:500\n\
         1718000000.000,2,utilization,0.5000,,,0,0,,,,,\n"
    );
    assert_eq!(
        HEADER.split(',').count(),
        text.lines().next().unwrap().split(',').count()
    );
}

#[test]
fn the_report_reads_the_old_samples_the_rotated_files_and_the_current_one() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join(LEGACY),
        "time,gpu,used_mib,smact,power_w,energy_j\n1,0,100,0.5,200,\n",
    )
    .unwrap();
    let row = |time: f64| rows(time, &[reading(0)], &HashMap::new());
    fs::write(
        dir.path().join(rotated(2)),
        format!("{HEADER}\n{}", row(2.0)),
    )
    .unwrap();
    fs::write(
        dir.path().join(rotated(1)),
        format!("{HEADER}\n{}", row(3.0)),
    )
    .unwrap();
    // A crash tore the last row.
    fs::write(
        dir.path().join(CURRENT),
        format!("{HEADER}\n{}4.000,0,dcgm,0.5", row(4.0 - 0.5)),
    )
    .unwrap();
    fs::write(dir.path().join("gpu-log.x.csv"), "not ours").unwrap();
    let rows = read(dir.path());
    let times: Vec<f64> = rows.iter().map(|r| r.time).collect();
    assert_eq!(times, [1.0, 2.0, 3.0, 3.5]);
    assert_eq!((rows[0].occupancy, rows[0].energy_j), (None, None));
    assert_eq!(
        rows[1],
        Row {
            time: 2.0,
            gpu: 0,
            smact: 0.812,
            power_w: Some(250.1),
            energy_j: Some(123456.7),
            used_mib: 12034,
            occupancy: Some(0.456),
            dram: Some(0.123),
        }
    );
}

#[test]
fn rotation_keeps_the_log_bounded_and_every_file_readable() {
    let dir = tempfile::tempdir().unwrap();
    let one = rows(0.0, &[reading(0)], &HashMap::new());
    let max = 4 * one.len() as u64;
    let mut log = RotatingLog::new(dir.path(), max, 2);
    for i in 0..40 {
        log.append(&rows(f64::from(i), &[reading(0)], &HashMap::new()))
            .unwrap();
    }
    let mut names: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["gpu-log.1.csv", "gpu-log.2.csv", "gpu-log.csv"]);
    for name in &names {
        let text = fs::read_to_string(dir.path().join(name)).unwrap();
        assert!(text.starts_with(HEADER), "{name}");
        assert!(text.len() as u64 <= max + HEADER.len() as u64 + 1, "{name}");
    }
    // The newest rows survive, in order.
    let times: Vec<f64> = read(dir.path()).iter().map(|r| r.time).collect();
    assert_eq!(times.last(), Some(&39.0));
    assert!(times.windows(2).all(|w| w[1] == w[0] + 1.0), "{times:?}");
    // A reload that keeps fewer drops the extra old files at the next
    // rotation; none keeps only the current file.
    log.set_limits(max, 0);
    for i in 40..50 {
        log.append(&rows(f64::from(i), &[reading(0)], &HashMap::new()))
            .unwrap();
    }
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn the_log_is_the_daemons_own_file_and_nothing_planted_is_written_through() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = RotatingLog::new(dir.path(), 1 << 20, 1);
    log.append("1\n").unwrap();
    let meta = fs::metadata(dir.path().join(CURRENT)).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o644);
    // A link in its place: refused, its target untouched.
    fs::remove_file(dir.path().join(CURRENT)).unwrap();
    let target = dir.path().join("target");
    fs::write(&target, "secret\n").unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join(CURRENT)).unwrap();
    let mut log = RotatingLog::new(dir.path(), 1 << 20, 1);
    assert!(log.append("2\n").is_err());
    assert_eq!(fs::read_to_string(&target).unwrap(), "secret\n");
    // A hard link to another file: refused.
    fs::remove_file(dir.path().join(CURRENT)).unwrap();
    fs::hard_link(&target, dir.path().join(CURRENT)).unwrap();
    assert!(log.append("3\n").is_err());
    assert_eq!(fs::read_to_string(&target).unwrap(), "secret\n");
    // A FIFO: refused at once, never waited on.
    fs::remove_file(dir.path().join(CURRENT)).unwrap();
    nix::unistd::mkfifo(&dir.path().join(CURRENT), nix::sys::stat::Mode::S_IRWXU).unwrap();
    assert!(log.append("4\n").is_err());
    // Group- or world-writable from before: made 0644.
    fs::remove_file(dir.path().join(CURRENT)).unwrap();
    fs::write(dir.path().join(CURRENT), "").unwrap();
    fs::set_permissions(dir.path().join(CURRENT), fs::Permissions::from_mode(0o666)).unwrap();
    log.append("5\n").unwrap();
    let meta = fs::metadata(dir.path().join(CURRENT)).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o644);
}
