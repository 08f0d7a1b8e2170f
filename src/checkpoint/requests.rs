//! The job handle's requests to its checkpoint coordinator, answered with
//! [`crate::Error`]s.
//!
//! [`JobHandle::trigger_savepoint`](crate::JobHandle::trigger_savepoint)
//! and `stop_with_checkpoint` send these; each hands the coordinator the
//! protocol's own request ([`msg::TriggerSavepoint`],
//! [`msg::StopWithCheckpoint`]) and maps its [`CheckpointError`]: a refusal
//! is a configuration error of the request, any other failure the
//! checkpoint's.

use super::CheckpointError;
use actix::prelude::*;
use floe_actors::checkpoint::coordinator::CheckpointCoordinator;
use floe_actors::checkpoint::messages as msg;
use std::path::PathBuf;

/// A refusal is a configuration error of the request; any other failure
/// is the checkpoint's.
fn to_error(e: CheckpointError) -> crate::Error {
    match e {
        CheckpointError::Refused { message } => crate::Error::Config(message),
        e => e.into(),
    }
}

/// Asks for a savepoint in `dir`; the reply is its path.
pub(crate) struct TriggerSavepoint {
    pub dir: PathBuf,
    pub reply: futures::channel::oneshot::Sender<crate::Result<PathBuf>>,
}

impl Message for TriggerSavepoint {
    type Result = ();
}

impl Handler<TriggerSavepoint> for CheckpointCoordinator {
    type Result = ();

    fn handle(&mut self, m: TriggerSavepoint, ctx: &mut Context<Self>) {
        let reply = m.reply;
        let request = msg::TriggerSavepoint {
            dir: m.dir,
            reply: Box::new(move |r| {
                let _ = reply.send(r.map_err(to_error));
            }),
        };
        Handler::<msg::TriggerSavepoint>::handle(self, request, ctx);
    }
}

/// Stops the job with a final checkpoint, or a savepoint into `dir` (see
/// [`msg::StopWithCheckpoint`]). The reply: the savepoint's path (none for
/// a checkpoint), or why the checkpoint failed (the job then runs on).
pub(crate) struct StopWithCheckpoint {
    pub savepoint_dir: Option<PathBuf>,
    pub reply: futures::channel::oneshot::Sender<crate::Result<Option<PathBuf>>>,
}

impl Message for StopWithCheckpoint {
    type Result = ();
}

impl Handler<StopWithCheckpoint> for CheckpointCoordinator {
    type Result = ();

    fn handle(&mut self, m: StopWithCheckpoint, ctx: &mut Context<Self>) {
        let reply = m.reply;
        let request = msg::StopWithCheckpoint {
            savepoint_dir: m.savepoint_dir,
            reply: Box::new(move |r| {
                let _ = reply.send(r.map_err(to_error));
            }),
        };
        Handler::<msg::StopWithCheckpoint>::handle(self, request, ctx);
    }
}
