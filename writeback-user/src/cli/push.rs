//! `--remote-write` (export/prometheus/remote_write.rs).
use clap::Args;

/// `--remote-write` and its options, on `trace` and `record` alike.
#[derive(Debug, Args)]
pub(crate) struct PushArgs {
    /// Push the exporter's metrics to a Prometheus remote-write receiver
    /// at every interval's close (Prometheus with
    /// --web.enable-remote-write-receiver, Mimir, Thanos, VictoriaMetrics),
    /// e.g. http://prom:9090/api/v1/write. The host is resolved once, at
    /// start (docs/prometheus.md, "Push").
    #[arg(long, value_name = "URL")]
    pub(crate) remote_write: Option<String>,

    /// With --remote-write: basic auth and TLS, YAML in the style of
    /// Prometheus's remote_write section (basic_auth: username,
    /// password_file; tls_config: ca_file, cert_file, key_file,
    /// server_name), read before privileges drop.
    #[arg(long, value_name = "FILE", requires = "remote_write")]
    pub(crate) remote_write_config: Option<std::path::PathBuf>,

    /// With --remote-write: the most compressed samples kept while the
    /// receiver cannot be reached; beyond it the oldest are dropped,
    /// counted and said [default: 16MiB].
    #[arg(long, value_name = "SIZE", requires = "remote_write", value_parser = super::parse_queue_size)]
    pub(crate) remote_write_queue: Option<u64>,

    /// With --remote-write: a label on every series pushed, NAME=VALUE
    /// (repeat for more), e.g. host=db1 or instance=db1:9464.
    #[arg(long = "label", value_name = "NAME=VALUE", requires = "remote_write", value_parser = super::parse_label)]
    pub(crate) labels: Vec<(String, String)>,
}

impl PushArgs {
    pub(crate) fn config(&self) -> Option<wbscope_export::prometheus::PushConfig> {
        self.remote_write
            .as_ref()
            .map(|url| wbscope_export::prometheus::PushConfig {
                url: url.clone(),
                config_file: self.remote_write_config.clone(),
                labels: self.labels.clone(),
                queue_bytes: self
                    .remote_write_queue
                    .map_or(wbscope_export::prometheus::DEFAULT_QUEUE_BYTES, |b| {
                        usize::try_from(b).unwrap_or(usize::MAX)
                    }),
            })
    }
}
