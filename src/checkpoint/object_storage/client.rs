//! One S3 bucket as the checkpoint storage sees it: the `object_store`
//! crate's client configured from the environment, its requests run on the
//! storage's own tokio runtime, retried with a line each, and their errors
//! put in words.
//!
//! The callers (a subtask's asynchronous snapshot part on a blocking pool,
//! the coordinator, a restore) are blocking code: each call spawns its
//! requests on the runtime and waits for them, so uploads of many subtasks
//! run in parallel there and never on a thread that processes records.
//! Waiting goes through `futures::executor::block_on`, which does not care
//! whether the caller is inside a tokio runtime itself (an actix arbiter).

use crate::checkpoint::CheckpointError;
use futures::{StreamExt, TryFutureExt, TryStreamExt};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as Key;
use object_store::{
    ClientOptions, ObjectMeta, ObjectStore, PutMode, PutOptions, PutPayload, RetryConfig,
};
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Attempts of a request that meets a transient error (the server
/// unreachable, a 5xx, a timeout) before it fails.
pub(crate) const ATTEMPTS: u32 = 4;
/// The first retry's delay; each next one doubles it.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);

/// The storage's runtime: two threads, shared by every bucket of the
/// process and never dropped (a runtime must not be dropped inside another
/// one, and storages are dropped wherever a job ends).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("floe-s3")
            .enable_all()
            .build()
            .expect("the object storage runtime starts (threads and an I/O driver)")
    })
}

/// Runs `fut` on the storage's runtime and waits for it.
pub(crate) fn block<T: Send + 'static>(fut: impl Future<Output = T> + Send + 'static) -> T {
    let task = runtime().spawn(fut);
    match futures::executor::block_on(task) {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// Spawns `fut` on the storage's runtime without waiting (the lease's
/// renewals).
pub(crate) fn spawn(fut: impl Future<Output = ()> + Send + 'static) {
    drop(runtime().spawn(fut));
}

/// A bucket and its client.
#[derive(Clone)]
pub(crate) struct Bucket {
    store: Arc<dyn ObjectStore>,
    name: String,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bucket").field("name", &self.name).finish()
    }
}

impl Bucket {
    /// The client of bucket `name`, configured from the environment:
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
    /// `AWS_ENDPOINT_URL` (path-style requests to it), `AWS_ALLOW_HTTP=true`
    /// for a plain `http://` endpoint. Sends no request.
    pub(crate) fn from_env(name: &str) -> Result<Bucket, CheckpointError> {
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(name)
            .with_virtual_hosted_style_request(false)
            // Retries are ours: each one prints a line.
            .with_retry(RetryConfig {
                max_retries: 0,
                ..RetryConfig::default()
            })
            .with_client_options(
                ClientOptions::new()
                    .with_allow_http(allow_http())
                    .with_connect_timeout(Duration::from_secs(5))
                    .with_timeout(Duration::from_secs(30)),
            );
        if std::env::var_os("AWS_REGION").is_none()
            && std::env::var_os("AWS_DEFAULT_REGION").is_none()
        {
            builder = builder.with_region("us-east-1");
        }
        let store = builder.build().map_err(|e| CheckpointError::Storage {
            location: format!("s3://{name}"),
            message: format!("cannot configure the S3 client: {}", innermost(&e)),
        })?;
        Ok(Bucket {
            store: Arc::new(store),
            name: name.to_string(),
        })
    }

    /// The URL of `key`, for messages.
    pub(crate) fn url(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.name)
    }

    /// The error of request `what` on `key`, in words.
    pub(crate) fn error(&self, what: &str, key: &str, e: &object_store::Error) -> CheckpointError {
        CheckpointError::Storage {
            location: self.url(key),
            message: format!("{what} failed: {}", describe(e)),
        }
    }

    /// Writes `bytes` as `key`; `mode` create-only refuses an existing
    /// object (`AlreadyExists`), update replaces the version it names only
    /// (`Precondition`). Returns the new object's ETag.
    pub(crate) fn put(
        &self,
        key: &str,
        bytes: Vec<u8>,
        mode: PutMode,
        attempts: u32,
    ) -> object_store::Result<Option<String>> {
        block(self.put_async(key, bytes, mode, attempts))
    }

    /// [`Bucket::put`], on the runtime.
    pub(crate) fn put_async(
        &self,
        key: &str,
        bytes: Vec<u8>,
        mode: PutMode,
        attempts: u32,
    ) -> impl Future<Output = object_store::Result<Option<String>>> + Send + 'static {
        let payload = PutPayload::from(bytes);
        let store = self.store.clone();
        let path = Key::from(key);
        retrying(self.url(key), "PUT", attempts, move || {
            let (store, path, payload) = (store.clone(), path.clone(), payload.clone());
            let opts = PutOptions {
                mode: mode.clone(),
                ..PutOptions::default()
            };
            async move { store.put_opts(&path, payload, opts).await }
        })
        .map_ok(|r| r.e_tag)
    }

    /// The bytes of `key` and its ETag.
    pub(crate) fn get(&self, key: &str) -> object_store::Result<(Vec<u8>, Option<String>)> {
        block(self.get_async(key))
    }

    /// [`Bucket::get`], on the runtime.
    pub(crate) fn get_async(
        &self,
        key: &str,
    ) -> impl Future<Output = object_store::Result<(Vec<u8>, Option<String>)>> + Send + 'static
    {
        let store = self.store.clone();
        let path = Key::from(key);
        retrying(self.url(key), "GET", ATTEMPTS, move || {
            let (store, path) = (store.clone(), path.clone());
            async move {
                let got = store.get(&path).await?;
                let etag = got.meta.e_tag.clone();
                Ok((got.bytes().await?.to_vec(), etag))
            }
        })
    }

    /// Many GETs at once; each result in the order of `keys`.
    pub(crate) fn get_many(
        &self,
        keys: Vec<String>,
    ) -> Vec<object_store::Result<(Vec<u8>, Option<String>)>> {
        let gets: Vec<_> = keys.iter().map(|k| self.get_async(k)).collect();
        block(futures::future::join_all(gets))
    }

    /// The size of each of `keys` (`NotFound` for a missing one), at once.
    pub(crate) fn sizes(&self, keys: Vec<String>) -> Vec<object_store::Result<u64>> {
        let heads: Vec<_> = keys.iter().map(|k| self.size_async(k, ATTEMPTS)).collect();
        block(futures::future::join_all(heads))
    }

    /// The size of `key` (`NotFound` when missing).
    pub(crate) fn size(&self, key: &str, attempts: u32) -> object_store::Result<u64> {
        block(self.size_async(key, attempts))
    }

    fn size_async(
        &self,
        key: &str,
        attempts: u32,
    ) -> impl Future<Output = object_store::Result<u64>> + Send + 'static {
        let store = self.store.clone();
        let path = Key::from(key);
        retrying(self.url(key), "HEAD", attempts, move || {
            let (store, path) = (store.clone(), path.clone());
            async move { store.head(&path).await.map(|m| m.size) }
        })
    }

    /// Every object under `prefix` (a "directory": ends with `/`).
    pub(crate) fn list(
        &self,
        prefix: &str,
        attempts: u32,
    ) -> object_store::Result<Vec<ObjectMeta>> {
        let store = self.store.clone();
        let path = Key::from(prefix);
        block(retrying(self.url(prefix), "LIST", attempts, move || {
            let (store, path) = (store.clone(), path.clone());
            async move { store.list(Some(&path)).try_collect::<Vec<_>>().await }
        }))
    }

    /// The "subdirectories" right under `prefix` (their names only).
    pub(crate) fn list_dirs(&self, prefix: &str) -> object_store::Result<Vec<String>> {
        let store = self.store.clone();
        let path = Key::from(prefix);
        block(retrying(self.url(prefix), "LIST", ATTEMPTS, move || {
            let (store, path) = (store.clone(), path.clone());
            async move {
                let listed = store.list_with_delimiter(Some(&path)).await?;
                Ok(listed
                    .common_prefixes
                    .iter()
                    .filter_map(|p| p.filename().map(str::to_string))
                    .collect())
            }
        }))
    }

    /// Deletes `keys` (missing ones are no error), in bulk requests.
    pub(crate) fn delete_many(&self, keys: Vec<String>) -> object_store::Result<()> {
        block(self.delete_many_async(keys))
    }

    /// [`Bucket::delete_many`], on the runtime.
    pub(crate) fn delete_many_async(
        &self,
        keys: Vec<String>,
    ) -> impl Future<Output = object_store::Result<()>> + Send + 'static {
        let store = self.store.clone();
        let what = self.url(keys.first().map_or("", String::as_str));
        retrying(what, "DELETE", ATTEMPTS, move || {
            let store = store.clone();
            let paths: Vec<object_store::Result<Key>> =
                keys.iter().map(|k| Ok(Key::from(k.as_str()))).collect();
            async move {
                if paths.is_empty() {
                    return Ok(());
                }
                let mut deleted = store.delete_stream(futures::stream::iter(paths).boxed());
                while let Some(r) = deleted.next().await {
                    match r {
                        Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            }
        })
    }
}

/// `AWS_ALLOW_HTTP`: `true` (any case) or `1` allow a plain `http://`
/// endpoint.
fn allow_http() -> bool {
    std::env::var("AWS_ALLOW_HTTP").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// Runs `op` until it succeeds, fails for good, or `attempts` ran out:
/// a transient error (unreachable, 5xx, timeout) is retried after a delay,
/// with one line saying so.
async fn retrying<T, F, Fut>(
    url: String,
    what: &'static str,
    attempts: u32,
    op: F,
) -> object_store::Result<T>
where
    F: Fn() -> Fut,
    Fut: Future<Output = object_store::Result<T>>,
{
    let mut attempt = 1;
    let mut delay = FIRST_BACKOFF;
    loop {
        match op().await {
            Err(e) if attempt < attempts && transient(&e) => {
                tracing::warn!(
                    target: crate::RECOVERY_LOG_TARGET,
                    "object storage: {what} {url} failed ({}); retry {attempt} of {} in {} ms",
                    describe(&e),
                    attempts - 1,
                    delay.as_millis()
                );
                tokio::time::sleep(delay).await;
                delay *= 2;
                attempt += 1;
            }
            Err(e) if attempts > 1 && transient(&e) => {
                tracing::warn!(
                    target: crate::RECOVERY_LOG_TARGET,
                    "object storage: {what} {url} failed after {attempts} attempts: {}",
                    describe(&e)
                );
                return Err(e);
            }
            r => return r,
        }
    }
}

/// Whether a retry may help: the server was not reached, answered 5xx, or
/// timed out. Refusals (credentials, not found, preconditions) are final.
fn transient(e: &object_store::Error) -> bool {
    matches!(e, object_store::Error::Generic { .. })
}

/// An `object_store` error in a few words: the server's error code when it
/// gave one, else the innermost cause ("Connection refused", "operation
/// timed out").
pub(crate) fn describe(e: &object_store::Error) -> String {
    let code = server_code(e);
    let code = code.map(|c| format!(" ({c})")).unwrap_or_default();
    match e {
        object_store::Error::NotFound { .. } => format!("not found{code}"),
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => {
            format!("access denied{code}: check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
        }
        object_store::Error::AlreadyExists { .. } => "the object already exists".into(),
        object_store::Error::Precondition { .. } => {
            format!("the object changed meanwhile{code}")
        }
        _ => match code.is_empty() {
            true => innermost(e),
            false => format!("{}{code}", innermost(e)),
        },
    }
}

/// The last error of `e`'s source chain, in words.
fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last: &dyn std::error::Error = e;
    while let Some(next) = last.source() {
        last = next;
    }
    last.to_string()
}

/// The S3 error code (`<Code>…</Code>`) in an error's text, if any.
fn server_code(e: &object_store::Error) -> Option<String> {
    let text = format!("{e:?}");
    let start = text.find("<Code>")? + "<Code>".len();
    let end = text[start..].find("</Code>")? + start;
    Some(text[start..end].to_string())
}
