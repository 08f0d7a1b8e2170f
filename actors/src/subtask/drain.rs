//! Async code of a chain (async sources and sinks, see `crate::wake`) wakes
//! its subtask with a message; a subtask whose chain committed its final
//! checkpoint finishes only once every writer and async sink gate drained.

use super::{Phase, SubtaskActor};
use actix::prelude::*;

impl<IN: Send + 'static> SubtaskActor<IN> {
    /// [`finish`](Self::finish)es once every writer (and async sink gate,
    /// still committing) is drained; a [`WakeSubtask`](crate::wake::WakeSubtask)
    /// checks again.
    pub(super) fn finish_when_drained(&mut self, ctx: &mut Context<Self>) {
        self.finish_on_drain = true;
        if self.drained() {
            self.finish(ctx);
        }
    }
}

impl<IN: Send + 'static> Handler<crate::wake::WakeSubtask> for SubtaskActor<IN> {
    type Result = ();

    /// Async code of the chain made progress (or failed): go on as after a
    /// credit grant.
    fn handle(&mut self, msg: crate::wake::WakeSubtask, ctx: &mut Context<Self>) {
        if let Some(e) = msg.failure {
            self.fail(e, ctx);
            return;
        }
        if self.finish_on_drain {
            self.finish_when_drained(ctx);
            return;
        }
        match self.phase {
            Phase::Finishing => self.check_finished(ctx),
            Phase::Running => self.schedule(ctx),
            _ => {}
        }
        self.update_wait();
    }
}
