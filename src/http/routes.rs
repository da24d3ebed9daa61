//! Which answer a request gets, from its method and target and the latest
//! snapshot: no sockets here, so every answer is tested without one.

use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use super::view::{Overview, TaskCard};
use super::{Board, page};
use crate::spool::TaskName;
use crate::spool::record::unix_now;

const HTML: &str = "text/html; charset=utf-8";
const JSON: &str = "application/json";

/// The status page as drawn from one snapshot, at one moment: its age on
/// the page is right to a second.
#[derive(Debug)]
pub struct Drawn {
    generation: u64,
    at: Instant,
    page: Arc<str>,
}

/// A page is drawn again after this long even from the same snapshot (so
/// a stuck daemon shows as stuck).
const REDRAW: Duration = Duration::from_secs(1);

/// An answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Arc<str>,
}

impl Response {
    fn new(status: u16, content_type: &'static str, body: impl Into<Arc<str>>) -> Response {
        Response {
            status,
            content_type,
            body: body.into(),
        }
    }

    /// An error page for `status`, saying `text`.
    pub fn error(status: u16, text: &str) -> Response {
        Response::new(status, HTML, page::message(reason_phrase(status), text))
    }
}

/// The reason phrase HTTP gives `status`.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        421 => "Misdirected Request",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

/// The answer to `method target`. HEAD gets GET's answer (the server
/// leaves the body out).
pub fn respond(method: &str, target: &str, board: &Board) -> Response {
    if method != "GET" && method != "HEAD" {
        return Response::error(405, "This server is read-only: it answers GET and HEAD.");
    }
    let path = target.split(['?', '#']).next().unwrap_or_default();
    match path {
        "/" => Response::new(200, HTML, overview(board)),
        "/api/status" => match api_status(board) {
            Ok(json) => Response::new(200, JSON, json),
            Err(e) => Response::error(500, &e.to_string()),
        },
        "/metrics" => {
            let latest = board.latest();
            let status = (latest.generation > 0).then_some(&latest.status);
            match board.metrics.text(status, latest.backlog) {
                Ok(text) => Response::new(200, crate::metrics::CONTENT_TYPE, text),
                Err(e) => Response::error(500, &e.to_string()),
            }
        }
        _ => match path.strip_prefix("/task/") {
            Some(name) => task(name, board),
            None => Response::error(404, "Nothing here: try / for the status page."),
        },
    }
}

/// The status page, drawn at most once a second whatever the requests.
fn overview(board: &Board) -> Arc<str> {
    let latest = board.latest();
    let mut drawn = board.page.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(d) = drawn
        .as_ref()
        .filter(|d| d.generation == latest.generation && d.at.elapsed() < REDRAW)
    {
        return Arc::clone(&d.page);
    }
    let now = unix_now();
    let picture = latest.history.svg(now, latest.status.gpus.len());
    let page: Arc<str> = page::overview(&Overview::of(&latest), picture, now).into();
    *drawn = Some(Drawn {
        generation: latest.generation,
        at: Instant::now(),
        page: Arc::clone(&page),
    });
    page
}

/// The status as JSON, written once per snapshot whatever the requests:
/// with many tasks it is megabytes, and each request wrote it anew.
fn api_status(board: &Board) -> serde_json::Result<Arc<str>> {
    let latest = board.latest();
    let mut written = board.json.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((generation, json)) = written.as_ref()
        && *generation == latest.generation
    {
        return Ok(Arc::clone(json));
    }
    let json: Arc<str> = serde_json::to_string(&Overview::of(&latest))?.into();
    *written = Some((latest.generation, Arc::clone(&json)));
    Ok(json)
}

/// `/task/NAME`: only a name carma would have made is looked up, and only
/// in the snapshot.
fn task(name: &str, board: &Board) -> Response {
    let Some(name) = canonical(name) else {
        return Response::error(404, "That is not a task's name (such as 000042-resnet50).");
    };
    match TaskCard::find(&board.latest(), &name) {
        Some(card) => Response::new(200, HTML, page::task(&card, unix_now())),
        None => Response::error(
            404,
            &format!(
                "No task {name} is waiting, running or ended lately. \
                 `carma show {name}` on the server looks further back."
            ),
        ),
    }
}

/// `text` as a task name, if it is one exactly as carma makes them: a
/// number and a stem of letters, digits, `-`, `_` and `.`.
fn canonical(text: &str) -> Option<TaskName> {
    let name = TaskName::parse(text)?;
    (TaskName::new(name.seq(), name.stem()) == name).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::Published;
    use crate::lifecycle::Ending;
    use crate::metrics::Metrics;
    use crate::spool::State;
    use crate::spool::status::{GpuStatus, RunningTask, Status, WaitingTask};

    /// A board with one GPU, a running task, a waiting one and a failure,
    /// each named or owned with markup.
    fn board() -> Board {
        let board = Board::new(Arc::new(Metrics::default()));
        let hostile = "000002-x.<script>";
        let failed = TaskName::new(3, "boom");
        let status = Status {
            updated_at: unix_now(),
            backend: "1 simulated GPU".into(),
            gpus: vec![GpuStatus {
                index: 0,
                uuid: "GPU-1".into(),
                name: "Sim <b>".into(),
                total_mib: 40_960,
                mig: false,
                used_mib: 4096,
                reserved_mib: 0,
                smact: 0.3,
                occupancy: None,
                dram: None,
                source: None,
                power_w: Some(100.0),
                error: None,
                tasks: vec!["000001-train".into()],
            }],
            running: vec![RunningTask {
                name: "000001-train".into(),
                run: 1,
                gpus: vec![0],
                since: unix_now() - 60.0,
                time_limit_s: Some(3600.0),
                array: None,
                peak_mib: 4000,
                user: "alice\"><img src=x onerror=alert(1)>".into(),
            }],
            pending: vec![hostile.into()],
            waiting: vec![WaitingTask {
                name: hostile.into(),
                user: "bob".into(),
                priority: 0,
                held: false,
                array: None,
                why: "behind <i>000001-train</i>".into(),
                estimate: None,
            }],
            ..Status::default()
        };
        let endings = [Ending {
            name: failed.clone(),
            state: State::Failed,
            user: Some("bob".into()),
            at: Some(unix_now()),
            why: Some("out of GPU memory 3 times; giving up".into()),
        }];
        board.publish(Published {
            status,
            endings: Arc::new(endings.into_iter().collect()),
            failed: 1,
            latest_failed: vec![failed],
            generation: 1,
            ..Published::default()
        });
        board
    }

    fn body(r: &Response) -> &str {
        &r.body
    }

    #[test]
    fn the_page_shows_gpus_tasks_and_failures_with_every_name_escaped() {
        let board = board();
        let r = respond("GET", "/", &board);
        assert_eq!((r.status, r.content_type), (200, HTML));
        let page = body(&r);
        for seen in [
            "000001-train",
            "000002-x.&lt;script&gt;",
            "alice&quot;&gt;&lt;img src=x onerror=alert(1)&gt;",
            "behind &lt;i&gt;000001-train&lt;/i&gt;",
            "Sim &lt;b&gt;",
            "000003-boom",
            "out of GPU memory 3 times",
            "<svg",
        ] {
            assert!(page.contains(seen), "no {seen} in the page");
        }
        for unescaped in ["<script>", "<img", "<i>", "<b>"] {
            assert!(!page.contains(unescaped), "{unescaped} reached the page");
        }
    }

    #[test]
    fn a_task_is_shown_by_its_name_and_only_by_a_name() {
        let board = board();
        let r = respond("GET", "/task/000001-train", &board);
        assert_eq!(r.status, 200);
        assert!(body(&r).contains("running") && body(&r).contains("run 1 on GPU 0"));
        let r = respond("GET", "/task/000003-boom", &board);
        assert!(body(&r).contains("failed") && body(&r).contains("giving up"));
        for bad in [
            "/task/../../etc/passwd",
            "/task/000002-x.<script>",
            "/task/000002-x.%3Cscript%3E",
            "/task/",
            "/task/42",
            "/task/000001-train/run-1/stderr",
        ] {
            let r = respond("GET", bad, &board);
            assert_eq!(r.status, 404, "{bad}");
            assert!(!body(&r).contains("<script>"), "{bad}");
        }
        assert_eq!(respond("GET", "/task/000009-gone", &board).status, 404);
    }

    #[test]
    fn only_get_and_head_are_answered_and_unknown_paths_are_not_found() {
        let board = board();
        for method in ["POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "get"] {
            assert_eq!(respond(method, "/", &board).status, 405, "{method}");
        }
        assert_eq!(respond("HEAD", "/", &board).status, 200);
        for path in ["/index.html", "/metrics/x", "//", "/api", "http://x/"] {
            assert_eq!(respond("GET", path, &board).status, 404, "{path}");
        }
        assert_eq!(respond("GET", "/?refresh=1", &board).status, 200);
    }

    #[test]
    fn the_json_and_the_metrics_say_what_the_page_says() {
        let board = board();
        let r = respond("GET", "/api/status", &board);
        assert_eq!((r.status, r.content_type), (200, JSON));
        let json: serde_json::Value = serde_json::from_str(body(&r)).unwrap();
        assert_eq!(json["running"][0]["name"], "000001-train");
        assert_eq!(json["waiting"][0]["why"], "behind <i>000001-train</i>");
        assert_eq!(json["recent_failures"][0]["name"], "000003-boom");
        for private in ["verdicts", "adopted", "lock", "daemon_pid"] {
            assert!(json.get(private).is_none(), "{private}");
        }
        // Written once per snapshot.
        let again = respond("GET", "/api/status", &board);
        assert!(Arc::ptr_eq(&r.body, &again.body));
        let r = respond("GET", "/metrics", &board);
        assert_eq!(r.content_type, crate::metrics::CONTENT_TYPE);
        assert!(body(&r).contains(
            "carma_gpu_memory_used_bytes{gpu=\"0\",uuid=\"GPU-1\",name=\"Sim <b>\"} 4294967296.0"
        ));
        // And again for the next snapshot.
        board.publish(Published {
            generation: 2,
            ..Published::default()
        });
        let next = respond("GET", "/api/status", &board);
        assert!(!body(&next).contains("000001-train"), "{}", body(&next));
    }

    #[test]
    fn only_names_carma_makes_are_task_names() {
        assert!(canonical("000042-resnet50").is_some());
        assert!(canonical("1000000-a.b_c-d").is_some());
        for bad in [
            "000042-",
            "42",
            "000042-a/b",
            "000042-a b",
            "000042-.x",
            "0042-x",
        ] {
            assert!(canonical(bad).is_none(), "{bad}");
        }
    }
}
