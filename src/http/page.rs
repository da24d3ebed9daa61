//! The pages, as HTML made on the server: readable without JavaScript
//! (they refresh themselves with a `<meta>` tag), with no asset from
//! elsewhere (the style is inline, the picture is inline SVG), and narrow
//! enough for a phone (tables scroll sideways on their own).
//!
//! Names of tasks, jobs and users are hostile input: every string that is
//! not this file's own goes through [`escape`] on its way into the page.

use std::fmt::Write;
use std::time::Duration;

use super::view::{Overview, TaskCard};
use crate::size::format_mib;
use crate::wall_time::{length, utc};

/// Seconds between the page's own refreshes.
const REFRESH_S: u32 = 10;

/// Waiting tasks listed; the JSON has them all.
const WAITING_SHOWN: usize = 100;

/// A status this much older than its 1 s refresh is stale: the daemon is
/// stuck or overloaded (as `carma status` says).
const STALE_S: f64 = 5.0;

/// `text` with the characters that mean something in HTML replaced by
/// their entities: safe between tags and in quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "\
body{font:15px/1.4 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:0 12px;color:#222}\
h1{font-size:1.4em;margin:.6em 0 .2em}h2{font-size:1.15em;margin:1.4em 0 .4em;border-bottom:1px solid #ddd}\
h3{font-size:1em;margin:.8em 0 .3em}.scroll{overflow-x:auto}\
table{border-collapse:collapse;width:100%;min-width:640px}th,td{text-align:left;padding:3px 8px;border-bottom:1px solid #eee;vertical-align:top}\
th{background:#f6f6f6;font-weight:600}.n{text-align:right;white-space:nowrap}\
.muted{color:#666}.warn{background:#fff3cd;padding:6px 10px;border-radius:4px}\
.state{font-weight:600}.failed{color:#b00020}.running{color:#0a6}.done{color:#06c}\
meter{width:7em}figure{margin:0}figure svg{width:100%;height:auto;border:1px solid #eee}\
dl{display:grid;grid-template-columns:max-content 1fr;gap:4px 16px}dt{font-weight:600}dd{margin:0}\
footer{margin:2em 0 1em;color:#666;font-size:.9em}code{font-size:.95em}";

/// The frame every page shares.
fn frame(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_S}\">\
         <title>{}</title><style>{STYLE}</style></head><body>\n{body}\n\
         <footer>carma, read-only. It refreshes every {REFRESH_S} s. \
         <a href=\"/\">Status</a> · <a href=\"/api/status\">JSON</a> · \
         <a href=\"/metrics\">Prometheus metrics</a></footer></body></html>\n",
        escape(title)
    )
}

/// A page that only says something (not found, not allowed).
pub fn message(title: &str, text: &str) -> String {
    frame(
        title,
        &format!("<h1>{}</h1><p>{}</p>", escape(title), escape(text)),
    )
}

fn task_link(name: &str) -> String {
    let name = escape(name);
    format!("<a href=\"/task/{name}\">{name}</a>")
}

fn fraction(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_owned(), |v| format!("{:.0}%", 100.0 * v))
}

/// How long ago, or for how long, from `since` to `now`.
fn age(since: f64, now: f64) -> String {
    length(now - since)
}

/// The status page: `overview` at `now`, with `picture` (the GPUs' last
/// hour as SVG, or why it could not be drawn).
pub fn overview(o: &Overview, picture: Result<String, String>, now: f64) -> String {
    let mut b = String::new();
    let running = o.running.len();
    let waiting = o.waiting.len();
    let _ = write!(
        b,
        "<h1>carma</h1><p class=\"muted\">{} · {running} running · {waiting} waiting \
         ({} recovering from an OOM crash) · done {} · failed {} · status of {} ({} old)</p>",
        escape(o.backend),
        o.recovering,
        o.done,
        o.failed,
        utc(o.updated_at),
        age(o.updated_at, now),
    );
    if now - o.updated_at > STALE_S {
        let _ = write!(
            b,
            "<p class=\"warn\">The daemon's status is {} old (it is refreshed every second): \
             the daemon may be stuck or stopped.</p>",
            age(o.updated_at, now)
        );
    }
    if o.intake_backlog > 0 {
        let _ = write!(
            b,
            "<p class=\"muted\">{} entries in pending/ are not taken in yet.</p>",
            o.intake_backlog
        );
    }
    gpus(&mut b, o);
    running_per_gpu(&mut b, o, now);
    queue(&mut b, o);
    failures(&mut b, o);
    b.push_str("<h2>The last hour</h2>");
    match picture {
        Ok(svg) => {
            let _ = write!(
                b,
                "<figure>{svg}<figcaption class=\"muted\">SM activity, memory used and power of \
                 each GPU, a sample every 10 s since the daemon started.</figcaption></figure>"
            );
        }
        Err(why) => {
            let _ = write!(b, "<p class=\"muted\">(no picture: {})</p>", escape(&why));
        }
    }
    frame("carma status", &b)
}

fn gpus(b: &mut String, o: &Overview) {
    b.push_str(
        "<h2>GPUs</h2><div class=\"scroll\"><table><tr><th class=\"n\">GPU</th><th>name</th>\
         <th>memory used + reserved / total</th><th>SM activity</th><th class=\"n\">occupancy</th>\
         <th class=\"n\">DRAM</th><th class=\"n\">power</th><th class=\"n\">tasks</th></tr>",
    );
    for g in o.gpus {
        let booked = g.used_mib + g.reserved_mib;
        let _ = write!(
            b,
            "<tr><td class=\"n\">{}</td><td>{}{}</td><td><meter min=\"0\" max=\"{}\" value=\"{}\">\
             </meter> {} + {} / {}</td><td><meter min=\"0\" max=\"1\" value=\"{:.3}\"></meter> {}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            g.index,
            escape(&g.name),
            if g.mig { " (MIG instance)" } else { "" },
            g.total_mib.max(1),
            booked.min(g.total_mib),
            format_mib(g.used_mib),
            format_mib(g.reserved_mib),
            format_mib(g.total_mib),
            g.smact,
            fraction(Some(g.smact)),
            fraction(g.occupancy),
            fraction(g.dram),
            g.power_w
                .map_or_else(|| "–".to_owned(), |w| format!("{w:.0} W")),
            g.tasks.len(),
        );
        if let Some(e) = &g.error {
            let _ = write!(
                b,
                "<tr><td></td><td colspan=\"7\" class=\"failed\">error: {}</td></tr>",
                escape(e)
            );
        }
    }
    b.push_str("</table></div>");
}

fn running_per_gpu(b: &mut String, o: &Overview, now: f64) {
    b.push_str("<h2>Running</h2>");
    for g in o.gpus {
        let here: Vec<_> = o
            .running
            .iter()
            .filter(|t| t.gpus.contains(&g.index))
            .collect();
        let _ = write!(b, "<h3>GPU {} · {}</h3>", g.index, escape(&g.name));
        if here.is_empty() {
            b.push_str("<p class=\"muted\">no carma task</p>");
            continue;
        }
        b.push_str(
            "<div class=\"scroll\"><table><tr><th>task</th><th>user</th><th class=\"n\">run</th>\
             <th class=\"n\">for</th><th class=\"n\">time limit</th><th class=\"n\">peak memory</th><th>GPUs</th></tr>",
        );
        for t in here {
            let limit = t
                .time_limit_s
                .and_then(|s| Duration::try_from_secs_f64(s).ok())
                .map_or_else(|| "–".to_owned(), crate::wall_time::format);
            let _ = write!(
                b,
                "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
                 <td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
                task_link(&t.name),
                escape(&t.user),
                t.run,
                age(t.since, now),
                limit,
                format_mib(t.peak_mib),
                gpu_list(&t.gpus),
            );
        }
        b.push_str("</table></div>");
    }
    let elsewhere = o
        .running
        .iter()
        .filter(|t| !t.gpus.iter().any(|i| o.gpus.iter().any(|g| g.index == *i)))
        .count();
    if elsewhere > 0 {
        let _ = write!(
            b,
            "<p class=\"muted\">{elsewhere} running task(s) on GPUs this server no longer has.</p>"
        );
    }
}

fn queue(b: &mut String, o: &Overview) {
    let _ = write!(
        b,
        "<h2>Waiting, in dispatch order ({})</h2>",
        o.waiting.len()
    );
    if let Some(why) = o.head_waits_for {
        let _ = write!(b, "<p>Next: {}</p>", escape(why));
    }
    if o.waiting.is_empty() {
        b.push_str("<p class=\"muted\">nothing waits</p>");
        return;
    }
    b.push_str(
        "<div class=\"scroll\"><table><tr><th class=\"n\">#</th><th>task</th><th>user</th>\
         <th class=\"n\">priority</th><th>estimate</th><th>why it waits</th></tr>",
    );
    for (i, w) in o.waiting.iter().take(WAITING_SHOWN).enumerate() {
        let estimate = w
            .estimate
            .as_ref()
            .map_or_else(|| "–".to_owned(), |e| format!("{} ({})", e.need, e.source));
        let array = w.array.as_ref().map_or_else(String::new, |a| {
            format!(" <span class=\"muted\">array {}</span>", escape(a))
        });
        let _ = write!(
            b,
            "<tr><td class=\"n\">{}</td><td>{}{array}</td><td>{}</td><td class=\"n\">{}{}</td>\
             <td>{}</td><td>{}</td></tr>",
            i + 1,
            task_link(&w.name),
            escape(&w.user),
            w.priority,
            if w.held { ", held" } else { "" },
            escape(&estimate),
            escape(&w.why),
        );
    }
    b.push_str("</table></div>");
    if o.waiting.len() > WAITING_SHOWN {
        let _ = write!(
            b,
            "<p class=\"muted\">… and {} more (<a href=\"/api/status\">the JSON</a> lists them all)</p>",
            o.waiting.len() - WAITING_SHOWN
        );
    }
}

fn failures(b: &mut String, o: &Overview) {
    b.push_str("<h2>Recent failures</h2>");
    if o.recent_failures.is_empty() {
        b.push_str("<p class=\"muted\">none</p>");
        return;
    }
    b.push_str(
        "<div class=\"scroll\"><table><tr><th>task</th><th>user</th><th>ended</th>\
         <th>why</th></tr>",
    );
    for f in &o.recent_failures {
        let _ =
            write!(
                b,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                task_link(&f.name),
                escape(f.user.as_deref().unwrap_or("–")),
                f.ended_at.map_or_else(|| "–".to_owned(), utc),
                escape(f.reason.as_deref().unwrap_or(
                    "(it ended before this daemon started: carma show tells its owner)"
                )),
            );
    }
    b.push_str("</table></div>");
}

fn gpu_list(gpus: &[usize]) -> String {
    gpus.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// One task's page at `now`.
pub fn task(t: &TaskCard, now: f64) -> String {
    let mut b = String::new();
    let state = t.state;
    let _ = write!(
        b,
        "<p><a href=\"/\">← status</a></p><h1>{}</h1><dl><dt>state</dt>\
         <dd class=\"state {state}\">{state}</dd><dt>owner</dt><dd>{}</dd>",
        escape(&t.name),
        escape(t.user.as_deref().unwrap_or("–")),
    );
    let mut field = |label: &str, value: Option<String>| {
        if let Some(value) = value {
            let _ = write!(b, "<dt>{label}</dt><dd>{}</dd>", escape(&value));
        }
    };
    field(
        "place",
        t.position.map(|p| format!("{p} in dispatch order")),
    );
    field("waiting", t.why.clone());
    field(
        "priority",
        t.priority
            .map(|p| format!("{p}{}", if t.held { ", held" } else { "" })),
    );
    field(
        "estimate",
        t.estimate
            .as_ref()
            .map(|e| format!("{} per GPU, from {}", e.need, e.source)),
    );
    field("array", t.array.clone());
    field(
        "running",
        t.run.map(|run| {
            format!(
                "run {run} on GPU {} since {} ({})",
                gpu_list(&t.gpus),
                t.since.map_or_else(|| "–".to_owned(), utc),
                t.since.map_or_else(String::new, |s| age(s, now)),
            )
        }),
    );
    field(
        "time limit",
        t.time_limit_s
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .map(crate::wall_time::format),
    );
    field("peak", t.peak_mib.map(format_mib));
    field("ended", t.ended_at.map(utc));
    field("reason", t.reason.clone());
    b.push_str(
        "</dl><p class=\"muted\">Its job file, output and the full reason of a failure \
                are its owner's: <code>carma show</code> on the server tells them.</p>",
    );
    frame(&t.name, &b)
}
