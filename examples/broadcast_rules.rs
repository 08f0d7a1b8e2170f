//! Flink's broadcast state pattern: spending limits broadcast to a keyed
//! stream of orders.
//!
//! Exists to show broadcast state. A rules stream sets a spending limit per
//! product category; every subtask of the checking operator gets every rule
//! and keeps them in a broadcast `MapState` (`process_broadcast_element`).
//! Orders are keyed by customer; `process_element` reads the limits
//! (read-only) and raises an alert for an order above its category's limit.
//!
//! The two inputs are not ordered with respect to each other, so an order
//! may arrive before its category's rule: such orders wait in keyed
//! `ListState` and an event-time timer at the end of time checks them once
//! both inputs are complete. The output therefore does not depend on the
//! interleaving; the program prints the alerts, checks them against a direct
//! computation with a `HashMap` and exits non-zero if they differ.
//!
//! Run with `cargo run --example broadcast_rules`.

use floe::StreamExecutionEnvironment;
use floe::operators::broadcast::{
    BroadcastContext, BroadcastStates, KeyedBroadcastProcessFunction, ReadOnlyContext,
};
use floe::operators::process::OnTimerContext;
use floe::state::{ListStateDescriptor, MapStateDescriptor};
use std::collections::HashMap;

/// (customer, category, amount in cents)
type Order = (String, String, u64);
/// (category, limit in cents)
type Limit = (String, u64);

/// An order above its category's limit.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Alert {
    customer: String,
    category: String,
    amount: u64,
    limit: u64,
}

const CATEGORIES: [&str; 5] = ["books", "games", "garden", "music", "tools"];

fn orders() -> Vec<Order> {
    (0..400u64)
        .map(|i| {
            let m = floe::text::mix64(i);
            (
                format!("c{:02}", m % 23),
                CATEGORIES[((m >> 8) % 5) as usize].to_string(),
                1_000 + (m >> 16) % 20_000,
            )
        })
        .collect()
}

/// Limits for every category but "tools", which has none.
fn limits() -> Vec<Limit> {
    CATEGORIES[..4]
        .iter()
        .enumerate()
        .map(|(i, c)| (c.to_string(), 8_000 + 3_000 * i as u64))
        .collect()
}

#[derive(Clone)]
struct CheckLimits {
    limits: MapStateDescriptor<String, u64>,
    waiting: ListStateDescriptor<Order>,
}

impl CheckLimits {
    fn check(order: Order, limit: Option<u64>) -> Option<Alert> {
        let (customer, category, amount) = order;
        let limit = limit?;
        (amount > limit).then_some(Alert {
            customer,
            category,
            amount,
            limit,
        })
    }
}

impl KeyedBroadcastProcessFunction<String, Order, Limit, Alert> for CheckLimits {
    fn process_element(
        &mut self,
        order: Order,
        ctx: &mut ReadOnlyContext<'_, '_, Alert, String>,
    ) -> floe::Result<()> {
        let (known, limit) = {
            let limits = ctx.broadcast_state(&self.limits)?;
            let limit = limits.get(&order.1).copied();
            (limit.is_some() || limits.len() == limits_expected(), limit)
        };
        if !known {
            // The limit may still come: check the order at the end.
            ctx.list_state(&self.waiting)?.add(order)?;
            ctx.register_event_time_timer(i64::MAX);
            return Ok(());
        }
        if let Some(alert) = Self::check(order, limit) {
            ctx.collect(alert);
        }
        Ok(())
    }

    fn process_broadcast_element(
        &mut self,
        (category, limit): Limit,
        ctx: &mut BroadcastContext<'_, '_, Alert, String>,
    ) -> floe::Result<()> {
        ctx.broadcast_state(&self.limits)?.put(category, limit);
        Ok(())
    }

    fn on_timer(
        &mut self,
        _: i64,
        ctx: &mut OnTimerContext<'_, '_, Alert, String>,
        broadcast: &mut BroadcastStates<'_>,
    ) -> floe::Result<()> {
        let waiting = ctx.list_state(&self.waiting)?.get()?;
        ctx.list_state(&self.waiting)?.clear()?;
        let limits = broadcast.get(&self.limits)?;
        let alerts: Vec<Alert> = waiting
            .into_iter()
            .filter_map(|o| {
                let limit = limits.get(&o.1).copied();
                Self::check(o, limit)
            })
            .collect();
        for a in alerts {
            ctx.collect(a);
        }
        Ok(())
    }
}

/// How many limits the rules stream sets (an order of a category without a
/// limit waits until all of them arrived or the input ended).
fn limits_expected() -> usize {
    limits().len()
}

fn direct_alerts() -> Vec<Alert> {
    let limits: HashMap<String, u64> = limits().into_iter().collect();
    let mut alerts: Vec<Alert> = orders()
        .into_iter()
        .filter_map(|o| {
            let limit = limits.get(&o.1).copied();
            CheckLimits::check(o, limit)
        })
        .collect();
    alerts.sort();
    alerts
}

fn main() -> floe::Result<()> {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    let rules = env.from_collection(limits()).broadcast_state();
    let alerts = env
        .from_collection(orders())
        .key_by(|o: &Order| o.0.clone())
        .connect(&rules)
        .process(CheckLimits {
            limits: MapStateDescriptor::new("limits"),
            waiting: ListStateDescriptor::new("waiting"),
        })
        .name("Check Limits")
        .collect();
    env.execute()?;

    let mut got = alerts.take();
    got.sort();
    for a in &got {
        println!(
            "ALERT {}: {} order of {}.{:02} over the limit of {}.{:02}",
            a.customer,
            a.category,
            a.amount / 100,
            a.amount % 100,
            a.limit / 100,
            a.limit % 100
        );
    }
    let want = direct_alerts();
    if got != want {
        eprintln!("alerts differ from the direct computation:\nwant {want:#?}\ngot {got:#?}");
        std::process::exit(1);
    }
    println!(
        "{} orders, {} limits: {} alerts; same as computed directly",
        orders().len(),
        limits().len(),
        got.len()
    );
    Ok(())
}
