//! `EXPLAIN`: a statement's plan as a tree (Flink's shape: the sink at the
//! top, an `Exchange` where rows are repartitioned), then the job graph
//! floe would deploy for it: its chains of operators, their parallelism
//! and how each edge partitions.

use super::planner::{GroupItem, Plan, Window};
use super::table::Table;
use super::upsert::SinkUpdates;
use crate::runtime::status::JobGraphInfo;
use std::fmt::Write as _;

/// The plan tree of a statement writing to `sink` (`None`: a query), as
/// `updates` go into it.
pub fn plan_text(plan: &Plan, sink: Option<&Table>, updates: &SinkUpdates) -> String {
    let mut out = String::from("== Physical Plan ==\n");
    let mut depth = 0;
    if let Some(t) = sink {
        let kind = t.connector.kind();
        let fields: Vec<&str> = t.columns.iter().map(|c| c.name.as_str()).collect();
        line(
            &mut out,
            0,
            &format!(
                "Sink(table=[{}], connector=[{kind}], fields=[{}]{})",
                t.name,
                fields.join(", "),
                match updates.upsert_materialize {
                    true => ", upsertMaterialize=[true]",
                    false => "",
                }
            ),
        );
        depth = 1;
    }
    node(&mut out, plan, depth);
    out
}

fn line(out: &mut String, depth: usize, text: &str) {
    if depth > 0 {
        out.push_str(&"   ".repeat(depth - 1));
        out.push_str("+- ");
    }
    out.push_str(text);
    out.push('\n');
}

fn node(out: &mut String, plan: &Plan, depth: usize) {
    match plan {
        Plan::Scan(t) => {
            let mut d = depth;
            // A `kafka` table's watermark is made in its source (Flink
            // pushes it down there, and shows it in the scan).
            let in_source = matches!(t.connector, super::table::Connector::Kafka(_))
                || t.watermark.as_ref().is_some_and(|w| w.from_source);
            if let Some(w) = t.watermark.as_ref().filter(|_| !in_source) {
                let emit = match w.emit {
                    super::table::WatermarkEmit::OnEvent => "on-event",
                    super::table::WatermarkEmit::OnPeriodic => "on-periodic",
                };
                line(
                    out,
                    d,
                    &format!(
                        "WatermarkAssigner(rowtime=[{}], watermark=[{}], emit=[{emit}])",
                        t.columns[w.column].name, w.text
                    ),
                );
                d += 1;
            }
            if !t.computed.is_empty() {
                let names: Vec<&str> = t
                    .computed
                    .iter()
                    .map(|(i, _)| t.columns[*i].name.as_str())
                    .collect();
                line(out, d, &format!("Calc(computed=[{}])", names.join(", ")));
                d += 1;
            }
            let fields: Vec<&str> = t
                .physical
                .iter()
                .map(|&i| t.columns[i].name.as_str())
                .collect();
            line(
                out,
                d,
                &match t.watermark.as_ref().filter(|_| in_source) {
                    Some(w) => format!(
                        "TableSourceScan(table=[{}, watermark=[{}]], fields=[{}])",
                        t.name,
                        w.text,
                        fields.join(", ")
                    ),
                    None => format!(
                        "TableSourceScan(table=[{}], fields=[{}])",
                        t.name,
                        fields.join(", ")
                    ),
                },
            );
        }
        Plan::Calc { input, text, .. } => {
            line(out, depth, &format!("Calc({text})"));
            node(out, input, depth + 1);
        }
        Plan::WindowAgg(w) => {
            let in_cols = w.input.columns();
            let keys: Vec<&str> = w.keys.iter().map(|&k| in_cols[k].name.as_str()).collect();
            let window = match w.window {
                Window::Tumble { size } => {
                    format!("TUMBLE(time_col=[{}], size=[{size} ms])", w.time_col)
                }
                Window::Cumulate { step, size } => format!(
                    "CUMULATE(time_col=[{}], max_size=[{size} ms], step=[{step} ms])",
                    w.time_col
                ),
                Window::Session { gap } => {
                    format!("SESSION(time_col=[{}], gap=[{gap} ms])", w.time_col)
                }
                Window::Hop { size, slide } => format!(
                    "HOP(time_col=[{}], size=[{size} ms], slide=[{slide} ms])",
                    w.time_col
                ),
            };
            let mut select: Vec<String> = w
                .group
                .iter()
                .map(|g| match g {
                    GroupItem::Start => "window_start".to_string(),
                    GroupItem::End => "window_end".to_string(),
                    GroupItem::Time => "window_time".to_string(),
                    GroupItem::Key(k) => keys[*k].to_string(),
                })
                .collect();
            select.extend(w.calls.iter().map(|c| c.text.clone()));
            line(
                out,
                depth,
                &format!(
                    "WindowAggregate(groupBy=[{}], window=[{window}], select=[{}])",
                    keys.join(", "),
                    select.join(", ")
                ),
            );
            let distribution = match keys.is_empty() {
                true => "single".to_string(),
                false => format!("hash[{}]", keys.join(", ")),
            };
            line(
                out,
                depth + 1,
                &format!("Exchange(distribution=[{distribution}])"),
            );
            node(out, &w.input, depth + 2);
        }
        Plan::GroupAgg(g) => {
            let in_cols = g.input.columns();
            let keys: Vec<&str> = g.keys.iter().map(|&k| in_cols[k].name.as_str()).collect();
            let mut select: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
            select.extend(g.calls.iter().map(|c| c.text.clone()));
            line(
                out,
                depth,
                &format!(
                    "GroupAggregate(groupBy=[{}], select=[{}])",
                    keys.join(", "),
                    select.join(", ")
                ),
            );
            let distribution = match keys.is_empty() {
                true => "single".to_string(),
                false => format!("hash[{}]", keys.join(", ")),
            };
            line(
                out,
                depth + 1,
                &format!("Exchange(distribution=[{distribution}])"),
            );
            node(out, &g.input, depth + 2);
        }
        Plan::Union(inputs) => {
            line(out, depth, "Union(all=[true])");
            for i in inputs {
                node(out, i, depth + 1);
            }
        }
    }
}

/// The job graph: one line per chain of operators, with its parallelism
/// and the edges into it.
pub fn graph_text(graph: &JobGraphInfo) -> String {
    let mut out = String::from("== Job Graph ==\n");
    for v in &graph.vertices {
        let names: Vec<&str> = v
            .operators
            .iter()
            .filter_map(|id| graph.operators.iter().find(|o| o.id == *id))
            .map(|o| o.name.as_str())
            .collect();
        let _ = write!(
            out,
            "[{}] {} (parallelism {})",
            v.id,
            names.join(" -> "),
            v.parallelism
        );
        let inputs: Vec<String> = graph
            .edges
            .iter()
            .filter(|e| !e.chained && v.operators.contains(&e.to))
            .filter_map(|e| {
                let from = graph.operators.iter().find(|o| o.id == e.from)?;
                Some(format!("[{}] {}", from.vertex, e.partitioner))
            })
            .collect();
        if !inputs.is_empty() {
            let _ = write!(out, " <- {}", inputs.join(", "));
        }
        out.push('\n');
    }
    out
}
