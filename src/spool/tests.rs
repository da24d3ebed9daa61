use super::*;

fn spool() -> (tempfile::TempDir, Spool) {
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
fn dropped_files_become_task_directories() {
    let (_d, spool) = spool();
    let pending = spool.dir(State::Pending);
    fs::write(pending.join("a.rad"), "gpus: 1\necho a\n").unwrap();
    fs::write(pending.join("b c.rad"), "gpus: 1\necho b\n").unwrap();
    let listing = spool.list(State::Pending).unwrap();
    assert_eq!(listing.drops, ["a.rad", "b c.rad"]);
    let claimed = spool
        .claim(&["a.rad".into(), "gone.rad".into(), "b c.rad".into()])
        .unwrap();
    let names: Vec<_> = claimed.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["000001-a", "000003-b_c"]);
    let listing = spool.list(State::Pending).unwrap();
    assert!(listing.drops.is_empty());
    assert_eq!(listing.tasks.len(), 2);
    let dir = spool.task_dir(State::Pending, &claimed[1].name);
    assert_eq!(
        fs::read_to_string(dir.join("b c.rad")).unwrap(),
        "gpus: 1\necho b\n"
    );
    let record = spool.load_record(State::Pending, &claimed[1].name).unwrap();
    assert_eq!(record.rad, "b c.rad");
    assert!(fs::read_dir(spool.staging()).unwrap().next().is_none());
}

#[test]
fn claims_interrupted_by_a_crash_are_finished() {
    let (_d, spool) = spool();
    let name = TaskName::new(7, "x");
    let half = spool.staging().join(format!("claim-{name}"));
    fs::create_dir(&half).unwrap();
    fs::write(half.join("x.rad"), "gpus: 1\necho\n").unwrap();
    let empty = spool.staging().join("claim-000008-y");
    fs::create_dir(&empty).unwrap();
    let submit = spool.staging().join("submit-000009-z");
    fs::create_dir(&submit).unwrap();
    assert_eq!(spool.finish_claims().unwrap(), std::slice::from_ref(&name));
    assert!(spool.task_dir(State::Pending, &name).join("x.rad").exists());
    assert!(!empty.exists());
    assert!(submit.exists(), "a submission in progress is left alone");
    // Its task.json was never written: the record is rebuilt.
    let record = spool.load_record(State::Pending, &name).unwrap();
    assert_eq!(record.rad, "x.rad");
}

#[test]
fn submit_copies_the_job_and_its_summary() {
    let (d, spool) = spool();
    let jobs = d.path().join("jobs");
    fs::create_dir_all(jobs.join("models")).unwrap();
    fs::write(jobs.join("models/m.model"), "summary").unwrap();
    let rad = jobs.join("train.rad");
    fs::write(&rad, "model: models/m.model\ngpus: 1\npython train.py\n").unwrap();
    let spec = crate::rad::check_file(&rad).unwrap();
    let name = spool.submit(&rad, &spec).unwrap();
    assert_eq!(name.as_str(), "000001-train");
    let dir = spool.task_dir(State::Pending, &name);
    assert_eq!(
        fs::read_to_string(dir.join("models/m.model")).unwrap(),
        "summary"
    );
    let record = spool.load_record(State::Pending, &name).unwrap();
    assert_eq!(record.workdir, Some(fs::canonicalize(&jobs).unwrap()));
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
    assert_eq!(spool.find("000013").unwrap(), (State::Failed, b));
}

#[test]
fn a_submission_is_copied_into_a_directory_of_the_spools_own() {
    // What another user's `carma submit` leaves in pending/: a directory
    // with the .rad, its summary in a subdirectory, and a task.json whose
    // only trusted parts are workdir and submitted_at.
    let (d, spool) = spool();
    let incoming = d.path().join("000005-job");
    fs::create_dir_all(incoming.join("models")).unwrap();
    fs::write(
        incoming.join("job.rad"),
        "model: models/m.model\ngpus: 1\necho\n",
    )
    .unwrap();
    fs::write(incoming.join("models/m.model"), "summary").unwrap();
    fs::write(
        incoming.join("task.json"),
        r#"{"name":"000005-job","rad":"job.rad","submitted_at":7.5,"workdir":"/home/u","owner":0,"crashes":9}"#,
    )
    .unwrap();
    fs::rename(&incoming, spool.dir(State::Pending).join("000005-job")).unwrap();
    let c = spool.adopt_submission("000005-job", |_| false).unwrap();
    assert_eq!(c.name.as_str(), "000005-job");
    assert_eq!(c.record.submitted_at, 7.5);
    assert_eq!(c.record.workdir.as_deref(), Some(Path::new("/home/u")));
    assert_eq!(c.record.crashes, 0, "not taken from the user");
    let me = nix::unistd::Uid::effective().as_raw();
    assert_eq!(
        c.record.owner,
        Some(me),
        "the directory's owner, not the record's"
    );
    let dir = spool.task_dir(State::Pending, &c.name);
    assert_eq!(
        fs::read_to_string(dir.join("models/m.model")).unwrap(),
        "summary"
    );
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
        .adopt_submission("000006-bad", |_| false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("bad.rad"), "{err}");
    let failed = spool.task_dir(State::Failed, &TaskName::new(6, "bad"));
    assert!(
        fs::read_to_string(failed.join("reason"))
            .unwrap()
            .contains("bad.rad")
    );
    assert!(
        failed.join("submitted/bad.rad").is_symlink(),
        "kept as it came"
    );
    // A taken number gets a new one.
    let again = d.path().join("000006-bad");
    fs::create_dir(&again).unwrap();
    fs::write(again.join("x.rad"), "gpus: 1\necho\n").unwrap();
    fs::rename(&again, spool.dir(State::Pending).join("000006-bad")).unwrap();
    let c = spool
        .adopt_submission("000006-bad", |n| n.seq() == 6)
        .unwrap();
    assert_ne!(c.name.seq(), 6);
}

#[test]
fn a_submission_caught_mid_adoption_goes_back_to_pending() {
    let (_d, spool) = spool();
    let caught = spool.staging().join("incoming-000009-z");
    fs::create_dir(&caught).unwrap();
    spool.finish_claims().unwrap();
    assert!(spool.dir(State::Pending).join("000009-z").is_dir());
}
