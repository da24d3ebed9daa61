//! The lifecycle's stories, told against a world kept in memory: where
//! each task's directory is, what its record says, which runs were
//! started, stopped, noted and notified. No process, no file, no sleep:
//! time is what each test says it is.
//!
//! The world can be told to fail (a full disk for writes or moves, a
//! launch that cannot start, a supervisor not yet known), so every step
//! of a task's life is also told with the step failing.

mod closing;
mod requests;
mod restart;
mod runs;

use std::collections::HashMap;
use std::io;

use super::*;
use crate::estimate::EstimateInput;
use crate::rad::Syntax;
use crate::sched::{Gate, GpuSample, Need, Policy, Rules};
use crate::spool::request::Request;

const GIB: u64 = 1024;

/// The daemon's own user in these stories, and two users of its spool.
const DAEMON: u32 = 500;
const ALICE: u32 = 1001;
const BOB: u32 = 1002;

/// What the world was asked to do, in order, for the tests to read.
#[derive(Debug, Clone, PartialEq)]
enum Did {
    Started(String, u32, Vec<usize>),
    Stopped(String, u32),
    Moved(String, State, State),
    Remembered(String, u64),
    /// A failed run's time, seconds, recorded.
    RanFor(String, u64),
    Notified(String, State),
    TookIn(String, State),
    DroppedCopies(String, State),
}

/// A world in memory.
#[derive(Default)]
struct Memory {
    /// Where carma's directory of each task is.
    dirs: HashMap<String, State>,
    /// Each task's record as last written.
    records: HashMap<String, TaskRecord>,
    /// Reason files of ended tasks.
    reasons: HashMap<String, String>,
    /// The highest run directory of each task.
    runs: HashMap<String, u32>,
    did: Vec<Did>,
    /// Writes and moves fail while set (a full disk).
    disk_full: bool,
    /// Moves alone fail while set.
    moves_fail: bool,
    /// Launches fail this way while set.
    no_start: Option<String>,
    /// What asking a supervisor to stop comes to.
    stop: Option<Stop>,
    /// How often `pending/` was listed.
    listings: std::cell::Cell<usize>,
}

impl Memory {
    fn full() -> io::Error {
        io::Error::other("No space left on device")
    }

    fn did(&self) -> &[Did] {
        &self.did
    }

    fn started(&self) -> Vec<(String, u32, Vec<usize>)> {
        self.did
            .iter()
            .filter_map(|d| match d {
                Did::Started(n, r, g) => Some((n.clone(), *r, g.clone())),
                _ => None,
            })
            .collect()
    }

    fn at(&self, name: &str) -> Option<State> {
        self.dirs.get(name).copied()
    }
}

impl World for Memory {
    fn write_record(&mut self, at: State, name: &TaskName, record: &TaskRecord) -> io::Result<()> {
        if self.disk_full {
            return Err(Memory::full());
        }
        assert_eq!(
            self.at(name.as_str()),
            Some(at),
            "{name}: record written elsewhere"
        );
        self.records.insert(name.to_string(), record.clone());
        Ok(())
    }

    fn move_task(&mut self, name: &TaskName, from: State, to: State) -> io::Result<()> {
        if self.disk_full || self.moves_fail {
            return Err(Memory::full());
        }
        assert_eq!(
            self.at(name.as_str()),
            Some(from),
            "{name}: moved from elsewhere"
        );
        self.dirs.insert(name.to_string(), to);
        self.did.push(Did::Moved(name.to_string(), from, to));
        Ok(())
    }

    fn holds(&self, state: State, name: &TaskName) -> bool {
        self.at(name.as_str()) == Some(state)
    }

    fn write_ending(&mut self, at: State, name: &TaskName, record: &TaskRecord) -> io::Result<()> {
        if self.disk_full {
            return Err(Memory::full());
        }
        assert_eq!(self.at(name.as_str()), Some(at));
        if let Some(reason) = record.outcome.as_ref().and_then(|o| o.reason.clone()) {
            self.reasons.insert(name.to_string(), reason);
        }
        Ok(())
    }

    fn load_record(&self, _state: State, name: &TaskName) -> Result<TaskRecord, String> {
        self.records
            .get(name.as_str())
            .cloned()
            .ok_or_else(|| "no task.json".into())
    }

    fn remove_reason(&mut self, _state: State, name: &TaskName) -> io::Result<()> {
        self.reasons.remove(name.as_str());
        Ok(())
    }

    fn pending_from(&self, seq: u64) -> Vec<TaskName> {
        self.listings.set(self.listings.get() + 1);
        self.dirs
            .iter()
            .filter(|(_, state)| **state == State::Pending)
            .filter_map(|(name, _)| TaskName::parse(name))
            .filter(|name| name.seq() >= seq)
            .collect()
    }

    fn start(
        &mut self,
        task: &Task,
        gpus: &[usize],
        _limits: &Limits,
        _why: &str,
    ) -> Result<Started, NotStarted> {
        let name = task.name.to_string();
        let run = task.run.max(self.runs.get(&name).copied().unwrap_or(0)) + 1;
        if let Some(reason) = &self.no_start {
            return Err(NotStarted {
                at: task.state,
                reason: reason.clone(),
            });
        }
        self.runs.insert(name.clone(), run);
        if task.state != State::Running {
            self.move_task(&task.name, task.state, State::Running)
                .map_err(|e| NotStarted {
                    at: task.state,
                    reason: e.to_string(),
                })?;
        }
        self.records.insert(name.clone(), task.record.clone());
        self.did.push(Did::Started(name, run, gpus.to_vec()));
        Ok(Started {
            run,
            supervisor: None,
            launched_at: 1000.0,
            graces: Graces {
                cancel_s: 10.0,
                time_limit_s: 5.0,
            },
            reported: true,
        })
    }

    fn stop(&mut self, name: &TaskName, run: u32) -> Stop {
        self.did.push(Did::Stopped(name.to_string(), run));
        self.stop.clone().unwrap_or(Stop::Asked)
    }

    fn remember_peak(&mut self, name: &TaskName, record: &TaskRecord) {
        self.did.push(Did::Remembered(
            name.to_string(),
            record.peak_mib.unwrap_or(0),
        ));
    }

    fn remember_run_time(&mut self, name: &TaskName, record: &TaskRecord) {
        let run_s = record.run_s.unwrap_or_default();
        self.did.push(Did::RanFor(name.to_string(), run_s as u64));
    }

    fn notify(&mut self, closing: &Closing) {
        if closing.notify.is_some() {
            self.did
                .push(Did::Notified(closing.name.to_string(), closing.to));
        }
    }

    fn take_in(&mut self, name: &TaskName, state: State) {
        self.did.push(Did::TookIn(name.to_string(), state));
    }

    fn drop_copies(&mut self, state: State, name: &TaskName) -> io::Result<()> {
        self.did.push(Did::DroppedCopies(name.to_string(), state));
        Ok(())
    }
}

/// A daemon's lifecycle and its world, at a time the test moves on.
struct Story {
    life: Lifecycle,
    world: Memory,
    now: Moment,
}

fn secs(x: f64) -> Time {
    Time::from_secs_f64(x)
}

/// A one-line job of `owner`'s, waiting in `pending/`, needing `gib`.
fn task(seq: u64, stem: &str, owner: u32, gib: u64) -> Task {
    let name = TaskName::new(seq, stem);
    let mut record = TaskRecord::new(&name, "job.rad", 0.0);
    record.owner = Some(owner);
    let mut demand = Demand::new(Need::Mib(gib * GIB));
    demand.user = Some(owner);
    Task {
        name,
        state: State::Pending,
        job: TaskSpec::new(Syntax::Keyed, vec!["train".into()]).into(),
        record,
        owner: demand.user,
        priority: demand.priority,
        demand: Some(Box::new(demand)),
        run_as: None,
        user: format!("uid {owner}").into(),
        run: 0,
        gpus: Vec::new(),
        supervisor: None,
        adopted: false,
        since: 0.0,
        time_limit_s: None,
        deadlines: Default::default(),
        start_failures: 0,
        peak_mib: 0,
        run_s: None,
        fingerprint: EstimateInput::default().fingerprint(),
        bytes: 100,
    }
}

/// First-fit, no idle-first step: where a task goes is plain.
fn rules() -> Rules {
    let mut rules = Rules::defaults();
    rules.placement.policy = Policy::FirstFit;
    rules.placement.idle_first = false;
    rules.placement.gate = Gate::Smact;
    // Tasks join a GPU at once here, as the expectations say.
    rules.placement.await_activity_s = crate::wall_time::Seconds::ZERO;
    rules
}

impl Story {
    /// Two idle 40 GiB GPUs, first-fit: where a task goes is plain.
    fn new() -> Story {
        Story::with_gpus(2)
    }

    fn with_gpus(n: usize) -> Story {
        let core = Scheduler::new(rules(), &vec![40 * GIB; n]);
        let mut story = Story {
            life: Lifecycle::new(core, DAEMON),
            world: Memory::default(),
            now: Moment {
                at: secs(1.0),
                unix: 1_000.0,
            },
        };
        let samples = (0..n).map(GpuSample::idle).collect();
        story.step_with(vec![Event::Sample(samples)]);
        story
    }

    /// Moves time on by `s` seconds.
    fn later(&mut self, s: f64) -> &mut Story {
        self.now.at += secs(s);
        self.now.unix += s;
        self
    }

    fn step(&mut self) {
        self.step_with(Vec::new());
    }

    fn step_with(&mut self, events: Vec<Event>) {
        self.life.step(self.now, events, &mut self.world);
    }

    /// `task` is taken in (its directory where its state says) and the
    /// core steps.
    fn submit(&mut self, task: Task) -> TaskName {
        let name = task.name.clone();
        self.world.dirs.insert(name.to_string(), task.state);
        self.world
            .records
            .insert(name.to_string(), task.record.clone());
        self.life.admit(task);
        self.step();
        name
    }

    /// Task `name`'s current run ended with `exit` (peak `peak_gib`).
    fn exits(&mut self, name: &TaskName, exit: Exit, peak_gib: u64) {
        let end = RunEnd::Exited {
            exit,
            peak_mib: Some(peak_gib * GIB),
            run_s: Some(60.0),
        };
        self.life
            .run_ended(self.now, name.seq(), end, &mut self.world);
        self.step();
    }

    /// User `uid` leaves request file `file` (`hold.000001-a`, ...).
    fn asks(&mut self, uid: u32, file: &str) -> Answer {
        let request = Request::parse(file).expect("a request");
        let refusal =
            |p: i32| (p > 0).then(|| "users may give priorities from -1000 to 0".to_string());
        let answer = self
            .life
            .request(self.now, &request, uid, refusal, &mut self.world);
        self.step();
        answer
    }

    fn state(&self, name: &TaskName) -> Option<State> {
        self.world.at(name.as_str())
    }

    fn record(&self, name: &TaskName) -> &TaskRecord {
        &self.world.records[name.as_str()]
    }

    fn running(&self, name: &TaskName) -> bool {
        self.life
            .tasks
            .get(&name.seq())
            .is_some_and(|t| t.state == State::Running)
    }

    fn outcome(&self, name: &TaskName) -> Option<(String, Option<String>)> {
        self.record(name)
            .outcome
            .as_ref()
            .map(|o| (o.state.clone(), o.reason.clone()))
    }
}
