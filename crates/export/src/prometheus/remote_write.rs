//! `trace`/`record --remote-write URL`: the exporter's samples pushed at
//! every interval's close to a Prometheus remote-write receiver
//! (Prometheus with `--web.enable-remote-write-receiver`, Mimir, Thanos
//! Receive, VictoriaMetrics, the OpenTelemetry Collector), for hosts no
//! scraper reaches.
//!
//! The protocol is remote write 1.0 (prometheus.io/docs/specs/
//! remote_write_spec): a POST of a protobuf `WriteRequest`
//! (prompb/remote.proto, types.proto) compressed with snappy's block
//! format, with `Content-Encoding: snappy`, `Content-Type:
//! application/x-protobuf` and `X-Prometheus-Remote-Write-Version:
//! 0.1.0`; each series' labels sorted by name, `__name__` among them. A
//! 5xx or 429 answer is retried with backoff; any other 4xx is not (the
//! spec: the sender MUST NOT retry it), its samples are dropped and
//! counted.
//!
//! Bounded: snapshots wait in a queue of at most `queue_bytes` of
//! compressed requests. While the receiver is down the queue fills; once
//! full, the oldest snapshot is dropped for each new one, counted in
//! `wbscope_remote_write_samples_dropped_total{reason="queue_full"}` and
//! said when the receiver answers again. Memory is the queue and one
//! snapshot being built, whatever the length of the outage.
//!
//! The receiver's address is resolved and its credentials and
//! certificates are read at start, before the privileges are dropped;
//! after the drop the client can only open TCP connections
//! (tracer/seccomp.rs, `outbound`).
use std::{
    collections::VecDeque,
    net::{SocketAddr, ToSocketAddrs as _},
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use base64::Engine as _;
use http_body_util::Full;
use hyper::{
    Request, StatusCode, Uri,
    body::Bytes,
    header::{AUTHORIZATION, CONTENT_ENCODING, CONTENT_TYPE, HOST, HeaderValue, USER_AGENT},
};
use hyper_util::rt::TokioIo;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::{Registry, Unit},
};
use rustls::{
    ClientConfig, RootCertStore,
    pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject as _},
};
use serde::Deserialize;
use tokio::{net::TcpStream, sync::Notify, task::JoinHandle};

use super::samples::samples;

/// A queue's default bound, compressed bytes. A snapshot of a host's
/// 153 series compressed to 2,963 bytes (docs/prometheus.md), so this
/// holds about an hour and a half of 1-s intervals.
pub const DEFAULT_QUEUE_BYTES: usize = 16 << 20;
/// A request's whole life: connect, TLS, send, answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Retry waits: from 1 s (a push per interval needs no faster retry),
/// doubling to 5 s, the `max_backoff` of Prometheus's own remote-write
/// queue (its `queue_config` default): a receiver back from an outage
/// gets the queue within 5 s, at the cost of one refused connection
/// every 5 s while it is down.
const MIN_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// `WriteRequest` of prompb/remote.proto (fields 2 and 3, reserved and
/// metadata, left out as remote write 1.0 leaves them).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct WriteRequest {
    #[prost(message, repeated, tag = "1")]
    pub(crate) timeseries: Vec<TimeSeries>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TimeSeries {
    #[prost(message, repeated, tag = "1")]
    pub(crate) labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    pub(crate) samples: Vec<Sample>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Label {
    #[prost(string, tag = "1")]
    pub(crate) name: String,
    #[prost(string, tag = "2")]
    pub(crate) value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Sample {
    #[prost(double, tag = "1")]
    pub(crate) value: f64,
    /// Milliseconds since the epoch.
    #[prost(int64, tag = "2")]
    pub(crate) timestamp: i64,
}

/// What `--remote-write` asks for.
#[derive(Clone, Debug)]
pub struct PushConfig {
    pub url: String,
    /// `--remote-write-config FILE`: basic auth and TLS, in the style of
    /// Prometheus's own `remote_write` section.
    pub config_file: Option<PathBuf>,
    /// `--label NAME=VALUE`: on every series (`host`, `instance`, …).
    pub labels: Vec<(String, String)>,
    pub queue_bytes: usize,
}

/// `--remote-write-config FILE` as written (unknown keys refused):
///
/// ```yaml
/// basic_auth:
///   username: wbscope
///   password_file: /etc/wbscope/push.pw    # or password: …
/// tls_config:
///   ca_file: ca.crt          # else the system's roots
///   cert_file: client.crt    # a client certificate, optional
///   key_file: client.key
///   server_name: prom.example.com   # else the URL's host
/// ```
///
/// Relative paths are from the file's directory.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClientConfigFile {
    basic_auth: Option<BasicAuthConfig>,
    tls_config: Option<TlsClientConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BasicAuthConfig {
    username: String,
    password: Option<String>,
    password_file: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsClientConfig {
    ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    server_name: Option<String>,
}

/// Where and how to send: resolved and read at start.
struct Client {
    /// For messages: the URL as given.
    url: String,
    addr: SocketAddr,
    host: HeaderValue,
    /// Origin-form target of the request line (path and query).
    path: Uri,
    tls: Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
    auth: Option<HeaderValue>,
}

fn resolve_path(dir: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    }
}

impl Client {
    fn new(cfg: &PushConfig) -> anyhow::Result<Client> {
        let uri: Uri = cfg
            .url
            .parse()
            .with_context(|| format!("--remote-write {}: not a URL", cfg.url))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => bail!(
                "--remote-write {}: the URL must start with http:// or https://",
                cfg.url
            ),
        };
        let host = uri
            .host()
            .with_context(|| format!("--remote-write {}: no host", cfg.url))?
            .to_string();
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let bare_host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let addr = (bare_host.as_str(), port)
            .to_socket_addrs()
            .with_context(|| format!("--remote-write {}: resolving {host}", cfg.url))?
            .next()
            .with_context(|| format!("--remote-write {}: {host} has no address", cfg.url))?;
        let path: Uri = uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .parse()
            .context("the URL's path")?;
        let host_header = match uri.port_u16() {
            Some(p) => format!("{host}:{p}"),
            None => host.clone(),
        };
        let (file, dir) = match &cfg.config_file {
            Some(f) => {
                let text = std::fs::read_to_string(f)
                    .with_context(|| format!("--remote-write-config {}", f.display()))?;
                let parsed: ClientConfigFile = serde_norway::from_str(&text)
                    .with_context(|| format!("--remote-write-config {}", f.display()))?;
                let dir = f.parent().unwrap_or(Path::new(".")).to_path_buf();
                (parsed, dir)
            }
            None => (ClientConfigFile::default(), PathBuf::from(".")),
        };
        let auth = match &file.basic_auth {
            None => None,
            Some(b) => {
                let password = match (&b.password, &b.password_file) {
                    (Some(p), None) => p.clone(),
                    (None, Some(f)) => {
                        let f = resolve_path(&dir, f);
                        std::fs::read_to_string(&f)
                            .with_context(|| format!("basic_auth password_file {}", f.display()))?
                            .trim_end_matches(['\n', '\r'])
                            .to_string()
                    }
                    _ => bail!("basic_auth: give password or password_file, one of them"),
                };
                let token = base64::engine::general_purpose::STANDARD
                    .encode(format!("{}:{password}", b.username));
                let mut v = HeaderValue::from_str(&format!("Basic {token}"))
                    .context("basic_auth: a username or password that cannot be a header")?;
                v.set_sensitive(true);
                Some(v)
            }
        };
        if !tls && file.tls_config.is_some() {
            bail!(
                "--remote-write {}: tls_config needs an https:// URL",
                cfg.url
            );
        }
        let tls = if tls {
            let t = file.tls_config.unwrap_or_default();
            let name = t.server_name.clone().unwrap_or_else(|| bare_host.clone());
            let name = ServerName::try_from(name.clone())
                .with_context(|| format!("tls_config: `{name}` is not a server name"))?;
            Some((client_tls(&t, &dir)?, name))
        } else {
            None
        };
        Ok(Client {
            url: cfg.url.clone(),
            addr,
            host: HeaderValue::from_str(&host_header).context("the URL's host")?,
            path,
            tls,
            auth,
        })
    }

    /// One request; its status, or why there was none.
    async fn post(&self, body: Bytes) -> anyhow::Result<StatusCode> {
        let mut req = Request::post(self.path.clone())
            .header(HOST, self.host.clone())
            .header(CONTENT_ENCODING, "snappy")
            .header(CONTENT_TYPE, "application/x-protobuf")
            .header("X-Prometheus-Remote-Write-Version", "0.1.0")
            .header(USER_AGENT, concat!("wbscope/", env!("CARGO_PKG_VERSION")))
            .body(Full::new(body))
            .context("building the request")?;
        if let Some(a) = &self.auth {
            req.headers_mut().insert(AUTHORIZATION, a.clone());
        }
        let attempt = async {
            let tcp = TcpStream::connect(self.addr)
                .await
                .with_context(|| format!("connecting to {}", self.addr))?;
            match &self.tls {
                Some((connector, name)) => {
                    let stream = connector
                        .connect(name.clone(), tcp)
                        .await
                        .context("TLS handshake")?;
                    exchange(TokioIo::new(stream), req).await
                }
                None => exchange(TokioIo::new(tcp), req).await,
            }
        };
        tokio::time::timeout(REQUEST_TIMEOUT, attempt)
            .await
            .map_err(|_| anyhow::anyhow!("no answer within {} s", REQUEST_TIMEOUT.as_secs()))?
    }
}

/// HTTP/1.1 over `io`: the request, and the answer's status.
async fn exchange<T>(io: T, req: Request<Full<Bytes>>) -> anyhow::Result<StatusCode>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .context("HTTP handshake")?;
    let driver = tokio::spawn(conn);
    let answer = sender.send_request(req).await.context("sending");
    driver.abort();
    Ok(answer?.status())
}

fn client_tls(t: &TlsClientConfig, dir: &Path) -> anyhow::Result<tokio_rustls::TlsConnector> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    match &t.ca_file {
        Some(ca) => {
            let ca = resolve_path(dir, ca);
            for cert in CertificateDer::pem_file_iter(&ca)
                .with_context(|| format!("tls_config ca_file {}", ca.display()))?
            {
                let cert = cert.with_context(|| format!("tls_config ca_file {}", ca.display()))?;
                roots
                    .add(cert)
                    .with_context(|| format!("tls_config ca_file {}", ca.display()))?;
            }
        }
        None => {
            // The system's roots; a certificate the platform store holds
            // but rustls cannot parse is skipped, as curl would.
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                bail!("tls_config: no ca_file and no system trust roots found");
            }
        }
    }
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS versions")?
        .with_root_certificates(roots);
    let config = match (&t.cert_file, &t.key_file) {
        (Some(cert), Some(key)) => {
            let (cert, key) = (resolve_path(dir, cert), resolve_path(dir, key));
            let certs = CertificateDer::pem_file_iter(&cert)
                .and_then(|c| c.collect::<Result<Vec<_>, _>>())
                .with_context(|| format!("tls_config cert_file {}", cert.display()))?;
            let key = PrivateKeyDer::from_pem_file(&key)
                .with_context(|| format!("tls_config key_file {}", key.display()))?;
            builder
                .with_client_auth_cert(certs, key)
                .context("tls_config: the client certificate and key")?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => bail!("tls_config: cert_file and key_file go together"),
    };
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// Labels of the dropped-samples counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DropLabels {
    /// `queue_full`: dropped for a newer snapshot while the receiver was
    /// unreachable; `rejected`: answered with a 4xx other than 429;
    /// `at_exit`: still queued when the run ended.
    reason: &'static str,
}

/// One snapshot, compressed, waiting.
struct Batch {
    seq: u64,
    body: Bytes,
    samples: u64,
}

#[derive(Default)]
struct Queue {
    batches: VecDeque<Batch>,
    bytes: usize,
    next_seq: u64,
}

/// What the pushing did, for the run's last line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PushStats {
    pub sent: u64,
    pub dropped_queue_full: u64,
    pub dropped_rejected: u64,
    pub dropped_at_exit: u64,
    /// Times the receiver stopped answering and later answered again.
    pub outages: u64,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Notify,
    stopping: AtomicBool,
    limit: usize,
    sent: Counter,
    dropped: Family<DropLabels, Counter>,
    queued_bytes: Gauge,
    stats: Mutex<PushStats>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stats(&self) -> std::sync::MutexGuard<'_, PushStats> {
        self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn drop_samples(&self, reason: &'static str, n: u64) {
        self.dropped.get_or_create(&DropLabels { reason }).inc_by(n);
        let mut s = self.stats();
        match reason {
            "queue_full" => s.dropped_queue_full += n,
            "rejected" => s.dropped_rejected += n,
            _ => s.dropped_at_exit += n,
        }
    }

    /// Queues a batch, dropping the oldest while it would not fit.
    fn push(&self, body: Bytes, samples: u64) {
        let mut q = self.lock();
        if body.len() > self.limit {
            drop(q);
            self.drop_samples("queue_full", samples);
            return;
        }
        let mut dropped = 0;
        while q.bytes + body.len() > self.limit {
            match q.batches.pop_front() {
                Some(old) => {
                    q.bytes -= old.body.len();
                    dropped += old.samples;
                }
                None => break,
            }
        }
        let seq = q.next_seq;
        q.next_seq += 1;
        q.bytes += body.len();
        q.batches.push_back(Batch { seq, body, samples });
        self.queued_bytes
            .set(i64::try_from(q.bytes).unwrap_or(i64::MAX));
        drop(q);
        if dropped > 0 {
            self.drop_samples("queue_full", dropped);
        }
        self.wake.notify_one();
    }

    fn front(&self) -> Option<(u64, Bytes, u64)> {
        self.lock()
            .batches
            .front()
            .map(|b| (b.seq, b.body.clone(), b.samples))
    }

    /// Removes batch `seq` if still queued (the producer may have
    /// dropped it meanwhile); whether it was.
    fn remove(&self, seq: u64) -> bool {
        let mut q = self.lock();
        if q.batches.front().is_some_and(|b| b.seq == seq) {
            if let Some(b) = q.batches.pop_front() {
                q.bytes -= b.body.len();
            }
            self.queued_bytes
                .set(i64::try_from(q.bytes).unwrap_or(i64::MAX));
            true
        } else {
            false
        }
    }
}

/// A running push: [`Push::snapshot`] at each interval's close,
/// [`Push::finish`] at the end.
pub struct Push {
    shared: Arc<Shared>,
    /// `name="value",` labels of every series.
    labels: Vec<(String, String)>,
    task: JoinHandle<()>,
    url: String,
}

impl Push {
    /// Reads the config, resolves the receiver, registers the push's own
    /// metrics in `registry` (so that they are served and pushed too) and
    /// starts the sender on the current tokio runtime.
    pub fn start(cfg: &PushConfig, registry: &mut Registry) -> anyhow::Result<Push> {
        for (name, _) in &cfg.labels {
            super::check_label_name(name).map_err(|e| anyhow::anyhow!("--label {name}: {e}"))?;
        }
        let client = Client::new(cfg)?;
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            wake: Notify::new(),
            stopping: AtomicBool::new(false),
            limit: cfg.queue_bytes,
            sent: Counter::default(),
            dropped: Family::default(),
            queued_bytes: Gauge::default(),
            stats: Mutex::new(PushStats::default()),
        });
        registry.register(
            "remote_write_samples_sent",
            "Samples the remote-write receiver accepted",
            shared.sent.clone(),
        );
        registry.register(
            "remote_write_samples_dropped",
            "Samples never delivered: reason=\"queue_full\" (dropped for newer ones while the receiver was unreachable), \"rejected\" (a 4xx answer), \"at_exit\"",
            shared.dropped.clone(),
        );
        registry.register_with_unit(
            "remote_write_queue",
            "Compressed requests waiting for the receiver",
            Unit::Bytes,
            shared.queued_bytes.clone(),
        );
        let url = client.url.clone();
        let task = tokio::spawn(send_loop(shared.clone(), client));
        Ok(Push {
            shared,
            labels: cfg.labels.clone(),
            task,
            url,
        })
    }

    /// The registry's samples now, stamped `wall_ms`, queued to be sent.
    pub fn snapshot(&self, registry: &Registry, wall_ms: i64) -> anyhow::Result<()> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry)
            .map_err(|_| anyhow::anyhow!("encoding the metrics"))?;
        let request = write_request(&text, &self.labels, wall_ms).map_err(anyhow::Error::msg)?;
        let n = request.timeseries.len() as u64;
        let raw = prost::Message::encode_to_vec(&request);
        let body = snap::raw::Encoder::new()
            .compress_vec(&raw)
            .context("snappy")?;
        self.shared.push(Bytes::from(body), n);
        Ok(())
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Sends what is queued for at most `grace`, then stops; what is
    /// left is counted as dropped at exit.
    pub async fn finish(self, grace: Duration) -> PushStats {
        self.shared.stopping.store(true, Ordering::Relaxed);
        self.shared.wake.notify_one();
        let mut task = self.task;
        if tokio::time::timeout(grace, &mut task).await.is_err() {
            task.abort();
        }
        let left: u64 = {
            let mut q = self.shared.lock();
            let n = q.batches.iter().map(|b| b.samples).sum();
            q.batches.clear();
            q.bytes = 0;
            n
        };
        if left > 0 {
            self.shared.drop_samples("at_exit", left);
        }
        *self.shared.stats()
    }
}

/// The samples of an encoded registry as one series each, stamped.
pub(crate) fn write_request(
    text: &str,
    extra: &[(String, String)],
    wall_ms: i64,
) -> Result<WriteRequest, String> {
    let mut timeseries = Vec::new();
    for (name, own, value) in samples(text)? {
        let mut labels: Vec<Label> = std::iter::once(("__name__".to_string(), name.to_string()))
            .chain(extra.iter().cloned())
            .chain(own)
            .map(|(name, value)| Label { name, value })
            .collect();
        labels.sort_by(|a, b| a.name.cmp(&b.name));
        timeseries.push(TimeSeries {
            labels,
            samples: vec![Sample {
                value,
                timestamp: wall_ms,
            }],
        });
    }
    Ok(WriteRequest { timeseries })
}

/// Sends the queue's batches in order, one request each; retries what
/// the receiver may take later, drops what it refuses; says when it
/// stops answering and when it answers again.
async fn send_loop(shared: Arc<Shared>, client: Client) {
    let mut backoff = MIN_BACKOFF;
    let mut down: Option<(Instant, u64)> = None;
    let mut refused_said = false;
    loop {
        let waiting = shared.wake.notified();
        let Some((seq, body, samples)) = shared.front() else {
            if shared.stopping.load(Ordering::Relaxed) {
                return;
            }
            waiting.await;
            continue;
        };
        match client.post(body).await {
            Ok(status) if status.is_success() => {
                if shared.remove(seq) {
                    shared.sent.inc_by(samples);
                    shared.stats().sent += samples;
                }
                if let Some((since, dropped_before)) = down.take() {
                    shared.stats().outages += 1;
                    let dropped = shared.stats().dropped_queue_full - dropped_before;
                    eprintln!(
                        "wbscope: remote write: {} answers again after {:.0} s; {}",
                        client.url,
                        since.elapsed().as_secs_f64(),
                        if dropped == 0 {
                            "nothing was dropped".to_string()
                        } else {
                            format!("{dropped} samples were dropped, the queue being full")
                        }
                    );
                }
                backoff = MIN_BACKOFF;
            }
            Ok(status) if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() => {
                retry(
                    &shared,
                    &client,
                    &mut down,
                    &mut backoff,
                    &format!("answered {status}"),
                )
                .await;
            }
            Ok(status) => {
                if shared.remove(seq) {
                    shared.drop_samples("rejected", samples);
                }
                if !refused_said {
                    refused_said = true;
                    eprintln!(
                        "wbscope: remote write: {} answered {status}; its samples are dropped, not retried (counted in wbscope_remote_write_samples_dropped_total{{reason=\"rejected\"}})",
                        client.url
                    );
                }
            }
            Err(e) => {
                retry(&shared, &client, &mut down, &mut backoff, &format!("{e:#}")).await;
            }
        }
    }
}

/// Says the receiver is down (once per outage) and waits the backoff,
/// or less when the run is ending.
async fn retry(
    shared: &Shared,
    client: &Client,
    down: &mut Option<(Instant, u64)>,
    backoff: &mut Duration,
    why: &str,
) {
    if down.is_none() {
        *down = Some((Instant::now(), shared.stats().dropped_queue_full));
        eprintln!(
            "wbscope: remote write: {}: {why}; retrying, holding up to {} KiB of samples meanwhile",
            client.url,
            shared.limit >> 10
        );
    }
    if shared.stopping.load(Ordering::Relaxed) {
        // At exit: one more try after a short wait, within the grace.
        tokio::time::sleep(MIN_BACKOFF).await;
        return;
    }
    tokio::select! {
        () = tokio::time::sleep(*backoff) => {}
        () = shared.wake.notified(), if shared.stopping.load(Ordering::Relaxed) => {}
    }
    *backoff = (*backoff * 2).min(MAX_BACKOFF);
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;

    const TEXT: &str = "# TYPE wbscope_pages_written counter\n\
        wbscope_pages_written_total{dev=\"8:1\",cause=\"sync\"} 42\n\
        # TYPE wbscope_dirty_pages gauge\n\
        wbscope_dirty_pages 7\n# EOF\n";

    #[test]
    fn a_snapshot_is_one_series_per_sample_labels_sorted_with_the_name() {
        let req = write_request(TEXT, &[("host".into(), "a".into())], 1_700_000_000_123)
            .expect("request");
        assert_eq!(req.timeseries.len(), 2);
        let names: Vec<(&str, &str)> = req.timeseries[0]
            .labels
            .iter()
            .map(|l| (l.name.as_str(), l.value.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("__name__", "wbscope_pages_written_total"),
                ("cause", "sync"),
                ("dev", "8:1"),
                ("host", "a")
            ]
        );
        assert_eq!(
            req.timeseries[0].samples,
            vec![Sample {
                value: 42.0,
                timestamp: 1_700_000_000_123
            }]
        );
        // The wire form decodes back to the same request.
        let wire = req.encode_to_vec();
        let body = snap::raw::Encoder::new()
            .compress_vec(&wire)
            .expect("snappy");
        let back = WriteRequest::decode(
            snap::raw::Decoder::new()
                .decompress_vec(&body)
                .expect("unsnappy")
                .as_slice(),
        )
        .expect("decode");
        assert_eq!(back, req);
    }

    fn shared(limit: usize) -> Shared {
        Shared {
            queue: Mutex::new(Queue::default()),
            wake: Notify::new(),
            stopping: AtomicBool::new(false),
            limit,
            sent: Counter::default(),
            dropped: Family::default(),
            queued_bytes: Gauge::default(),
            stats: Mutex::new(PushStats::default()),
        }
    }

    #[test]
    fn a_full_queue_drops_its_oldest_and_counts_their_samples() {
        let s = shared(250);
        for i in 0..5u8 {
            s.push(Bytes::from(vec![i; 100]), 10);
        }
        let q = s.lock();
        // Two of 100 bytes fit in 250: the last two.
        assert_eq!(q.batches.len(), 2);
        assert_eq!(q.bytes, 200);
        assert_eq!(q.batches[0].body[0], 3);
        drop(q);
        assert_eq!(s.stats().dropped_queue_full, 30);
        assert_eq!(
            s.dropped
                .get_or_create(&DropLabels {
                    reason: "queue_full"
                })
                .get(),
            30
        );
        assert_eq!(s.queued_bytes.get(), 200);
        // A batch removed after the producer dropped it is not counted
        // twice.
        assert!(!s.remove(0));
        assert!(s.remove(3));
        // One larger than the whole bound is dropped at once.
        s.push(Bytes::from(vec![9; 300]), 7);
        assert_eq!(s.stats().dropped_queue_full, 37);
    }

    fn config(url: &str, file: Option<&Path>) -> PushConfig {
        PushConfig {
            url: url.into(),
            config_file: file.map(Path::to_path_buf),
            labels: Vec::new(),
            queue_bytes: DEFAULT_QUEUE_BYTES,
        }
    }

    #[test]
    fn urls_and_configs_that_cannot_work_are_refused_with_their_reason() {
        let err = |url: &str, file: Option<&Path>| {
            Client::new(&config(url, file))
                .err()
                .map(|e| format!("{e:#}"))
                .unwrap_or_default()
        };
        assert!(err("ftp://x/api", None).contains("http:// or https://"));
        assert!(err("not a url at all", None).contains("not a URL"));
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("c.yml");
        std::fs::write(&file, "basic_auth:\n  username: u\n").expect("write");
        assert!(err("http://127.0.0.1:1/w", Some(&file)).contains("password or password_file"));
        std::fs::write(&file, "basic_auth:\n  username: u\n  pasword: x\n").expect("write");
        assert!(err("http://127.0.0.1:1/w", Some(&file)).contains("unknown field"));
        std::fs::write(&file, "tls_config:\n  ca_file: ca.pem\n").expect("write");
        assert!(err("http://127.0.0.1:1/w", Some(&file)).contains("needs an https"));
        assert!(err("https://127.0.0.1:1/w", Some(&file)).contains("ca.pem"));
        std::fs::write(&file, "basic_auth:\n  username: u\n  password_file: pw\n").expect("write");
        std::fs::write(dir.path().join("pw"), "s3cret\n").expect("write");
        let c = Client::new(&config("http://127.0.0.1:9/api/v1/write?x=1", Some(&file)))
            .expect("client");
        assert_eq!(c.path, "/api/v1/write?x=1");
        assert_eq!(c.host, "127.0.0.1:9");
        let auth = c.auth.expect("auth");
        assert!(auth.is_sensitive());
        // "u:s3cret", the file's newline left out.
        assert_eq!(auth, "Basic dTpzM2NyZXQ=");
    }

    /// A receiver on loopback that answers each request with the next
    /// status of `answers` (the last one from then on) and hands over
    /// what it decoded.
    async fn receiver(
        answers: Vec<u16>,
    ) -> (
        SocketAddr,
        tokio::sync::mpsc::UnboundedReceiver<(WriteRequest, Vec<String>)>,
    ) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut n = 0;
            loop {
                let Ok((mut s, _)) = listener.accept().await else {
                    return;
                };
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                // Headers, then Content-Length bytes of body.
                let (head, body) = loop {
                    let k = s.read(&mut chunk).await.expect("read");
                    assert!(k > 0, "closed before the request");
                    buf.extend_from_slice(&chunk[..k]);
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..i]).to_string();
                        let len: usize = head
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length: ")
                                    .map(|v| v.trim().parse().expect("len"))
                            })
                            .expect("content-length");
                        while buf.len() < i + 4 + len {
                            let k = s.read(&mut chunk).await.expect("read");
                            buf.extend_from_slice(&chunk[..k]);
                        }
                        break (head, buf[i + 4..i + 4 + len].to_vec());
                    }
                };
                let status = answers[n.min(answers.len() - 1)];
                n += 1;
                let raw = snap::raw::Decoder::new()
                    .decompress_vec(&body)
                    .expect("snappy body");
                let req = WriteRequest::decode(raw.as_slice()).expect("protobuf body");
                let headers = head.lines().map(str::to_ascii_lowercase).collect();
                let _ = tx.send((req, headers));
                let _ = s
                    .write_all(
                        format!("HTTP/1.1 {status} X\r\ncontent-length: 0\r\n\r\n").as_bytes(),
                    )
                    .await;
            }
        });
        (addr, rx)
    }

    fn registry_with(value: u64) -> (Registry, Counter) {
        let mut r = Registry::with_prefix("wbscope");
        let c = Counter::default();
        c.inc_by(value);
        r.register("pages_written", "p", c.clone());
        (r, c)
    }

    #[tokio::test]
    async fn snapshots_reach_the_receiver_in_order_with_the_protocol_headers() {
        let (addr, mut rx) = receiver(vec![204]).await;
        let (mut registry, pages) = registry_with(5);
        let mut cfg = config(&format!("http://{addr}/api/v1/write"), None);
        cfg.labels = vec![("host".into(), "h1".into())];
        let push = Push::start(&cfg, &mut registry).expect("push");
        push.snapshot(&registry, 1000).expect("snapshot");
        pages.inc_by(3);
        push.snapshot(&registry, 2000).expect("snapshot");
        let stats = push.finish(Duration::from_secs(5)).await;
        let mut got = Vec::new();
        while let Ok((req, headers)) = rx.try_recv() {
            for h in [
                "content-encoding: snappy",
                "content-type: application/x-protobuf",
                "x-prometheus-remote-write-version: 0.1.0",
            ] {
                assert!(headers.iter().any(|l| l == h), "{h}: {headers:?}");
            }
            assert!(headers[0].starts_with("post /api/v1/write "), "{headers:?}");
            let pages = req
                .timeseries
                .iter()
                .find(|t| {
                    t.labels
                        .iter()
                        .any(|l| l.value == "wbscope_pages_written_total")
                })
                .expect("the pages series");
            assert!(
                pages
                    .labels
                    .iter()
                    .any(|l| l.name == "host" && l.value == "h1")
            );
            got.push((pages.samples[0].timestamp, pages.samples[0].value));
        }
        assert_eq!(got, [(1000, 5.0), (2000, 8.0)]);
        assert_eq!(stats.dropped_at_exit + stats.dropped_rejected, 0);
        // Each request carries the pages series and the push's own four
        // (sent, queue bytes, and no dropped series yet).
        assert!(stats.sent >= 4, "{stats:?}");
    }

    #[tokio::test]
    async fn a_503_is_retried_and_a_400_dropped_and_counted() {
        let (addr, mut rx) = receiver(vec![503, 204, 400]).await;
        let (mut registry, _) = registry_with(1);
        let push =
            Push::start(&config(&format!("http://{addr}/w"), None), &mut registry).expect("push");
        push.snapshot(&registry, 1000).expect("snapshot");
        push.snapshot(&registry, 2000).expect("snapshot");
        let stats = push.finish(Duration::from_secs(10)).await;
        let mut stamps = Vec::new();
        while let Ok((req, _)) = rx.try_recv() {
            stamps.push(req.timeseries[0].samples[0].timestamp);
        }
        // The first snapshot twice (503, then accepted), the second once
        // (400: dropped).
        assert_eq!(stamps, [1000, 1000, 2000]);
        assert!(stats.sent > 0 && stats.dropped_rejected > 0, "{stats:?}");
        assert_eq!(stats.outages, 1, "{stats:?}");
    }

    #[tokio::test]
    async fn an_unreachable_receiver_leaves_the_queue_bounded_and_says_what_was_lost() {
        // A port nobody listens on: every connect is refused.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        let (mut registry, _) = registry_with(1);
        let mut cfg = config(&format!("http://{addr}/w"), None);
        cfg.queue_bytes = 4096;
        let push = Push::start(&cfg, &mut registry).expect("push");
        for t in 0..200 {
            push.snapshot(&registry, t).expect("snapshot");
            let q = push.shared.lock();
            assert!(q.bytes <= 4096, "{} queued", q.bytes);
        }
        let stats = push.finish(Duration::from_millis(100)).await;
        assert_eq!(stats.sent, 0);
        assert!(
            stats.dropped_queue_full > 0 && stats.dropped_at_exit > 0,
            "{stats:?}"
        );
    }
}
