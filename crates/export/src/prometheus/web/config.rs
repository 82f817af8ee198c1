//! The exporter's `--web-config FILE`, in the Prometheus exporter-toolkit
//! format (docs/web-configuration.md of prometheus/exporter-toolkit), so
//! that TLS and authentication are set up as for every other exporter of
//! a fleet:
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt        # relative paths: from the file's directory
//!   key_file: server.key
//!   client_ca_file: clients.crt  # optional
//!   client_auth_type: RequireAndVerifyClientCert
//!   min_version: TLS12           # optional: TLS12 or TLS13
//! basic_auth_users:
//!   prometheus: $2y$10$...       # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\n')
//! ```
//!
//! TLS is rustls (on ring), passwords bcrypt; the file and the
//! certificates are read at start, before the privileges are dropped
//! (keys usually readable by root only).
use std::{
    collections::{BTreeMap, HashSet},
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use base64::Engine as _;
use hyper::header::HeaderValue;
use rustls::{
    RootCertStore, ServerConfig,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _},
    server::WebPkiClientVerifier,
};
use serde::Deserialize;
use sha2::{Digest as _, Sha256};

/// The file as written (unknown keys refused, as exporter-toolkit's
/// strict YAML parsing does).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WebConfigFile {
    tls_server_config: Option<TlsServerConfig>,
    #[serde(default)]
    basic_auth_users: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsServerConfig {
    cert_file: PathBuf,
    key_file: PathBuf,
    client_ca_file: Option<PathBuf>,
    client_auth_type: Option<ClientAuth>,
    min_version: Option<TlsVersion>,
}

/// exporter-toolkit's `client_auth_type` values (Go's tls.ClientAuthType)
/// that verify what they accept. `RequestClientCert` and
/// `RequireAnyClientCert` take certificates nobody checked: refused.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
enum ClientAuth {
    #[default]
    NoClientCert,
    VerifyClientCertIfGiven,
    RequireAndVerifyClientCert,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
enum TlsVersion {
    #[serde(rename = "TLS12")]
    Tls12,
    #[serde(rename = "TLS13")]
    Tls13,
}

/// Verifications of credentials not seen to succeed before, per second at
/// most: one bcrypt check costs tens of ms of the one thread that also
/// drains the ring buffer, so a password-guessing client gets 401s
/// without checks beyond it rather than slowing the tracing down.
const VERIFICATIONS_PER_SECOND: u32 = 4;

/// Basic-auth users and their bcrypt hashes.
#[derive(Debug)]
pub(crate) struct BasicAuth {
    users: BTreeMap<String, String>,
    /// SHA-256 of `user:password:hash` of credentials that passed once,
    /// so a scraper's every scrape costs no bcrypt check (as
    /// exporter-toolkit caches them).
    passed: Mutex<HashSet<[u8; 32]>>,
    /// Start of the current second and the checks made in it.
    budget: Mutex<(Instant, u32)>,
}

/// Why a request was refused (the `reason` label of the failures metric).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// No `Authorization: Basic` header, or not decodable.
    NoCredentials,
    /// A user or password that does not match.
    WrongCredentials,
    /// More new credentials than [`VERIFICATIONS_PER_SECOND`].
    TooManyAttempts,
}

impl Refusal {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Refusal::NoCredentials => "no_credentials",
            Refusal::WrongCredentials => "wrong_credentials",
            Refusal::TooManyAttempts => "too_many_attempts",
        }
    }
}

impl BasicAuth {
    /// Checks an `Authorization` header value.
    pub(crate) fn check(&self, header: Option<&HeaderValue>) -> Result<(), Refusal> {
        let (user, password) = header
            .and_then(|h| h.to_str().ok())
            .and_then(decode_basic)
            .ok_or(Refusal::NoCredentials)?;
        let hash = self.users.get(&user);
        let digest = Sha256::new()
            .chain_update(user.as_bytes())
            .chain_update(b":")
            .chain_update(password.as_bytes())
            .chain_update(b":")
            .chain_update(hash.map_or("", String::as_str).as_bytes())
            .finalize();
        let mut key = [0u8; 32];
        key.copy_from_slice(&digest);
        let mut passed = self.passed.lock().unwrap_or_else(|e| e.into_inner());
        if hash.is_some() && passed.contains(&key) {
            return Ok(());
        }
        {
            let mut budget = self.budget.lock().unwrap_or_else(|e| e.into_inner());
            if budget.0.elapsed() >= Duration::from_secs(1) {
                *budget = (Instant::now(), 0);
            }
            if budget.1 >= VERIFICATIONS_PER_SECOND {
                return Err(Refusal::TooManyAttempts);
            }
            budget.1 += 1;
        }
        // An unknown user is checked against a configured hash all the
        // same (and refused whatever the result), so that a wrong user
        // name takes as long as a wrong password: names cannot be probed.
        let against = hash.or_else(|| self.users.values().next());
        let ok = against.is_some_and(|h| bcrypt::verify(&password, h).unwrap_or(false));
        if ok && hash.is_some() {
            // Bounded: one entry per user and password that passed.
            if passed.len() >= 1024 {
                passed.clear();
            }
            passed.insert(key);
            Ok(())
        } else {
            Err(Refusal::WrongCredentials)
        }
    }
}

/// `Basic base64(user:password)` → (user, password).
fn decode_basic(value: &str) -> Option<(String, String)> {
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

/// A loaded `--web-config`.
pub(crate) struct WebConfig {
    pub(crate) tls: Option<Arc<ServerConfig>>,
    pub(crate) auth: Option<BasicAuth>,
}

impl WebConfig {
    /// Reads and checks `path` and every file it names.
    pub(crate) fn load(path: &Path) -> anyhow::Result<WebConfig> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--web-config {}", path.display()))?;
        let file: WebConfigFile = serde_norway::from_str(&text)
            .with_context(|| format!("--web-config {}", path.display()))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let tls = file
            .tls_server_config
            .map(|tls| tls_config(&tls, dir).map(Arc::new))
            .transpose()
            .with_context(|| format!("--web-config {}: tls_server_config", path.display()))?;
        for (user, hash) in &file.basic_auth_users {
            if user.contains(':') {
                bail!(
                    "--web-config {}: basic_auth_users: user {user:?} has a ':'",
                    path.display()
                );
            }
            // A plain password written where its hash belongs is refused
            // at start, not at every scrape.
            if let Err(e) = hash.parse::<bcrypt::HashParts>() {
                bail!(
                    "--web-config {}: basic_auth_users: {user}: not a bcrypt hash ({e})",
                    path.display()
                );
            }
        }
        let auth = (!file.basic_auth_users.is_empty()).then(|| BasicAuth {
            users: file.basic_auth_users,
            passed: Mutex::new(HashSet::new()),
            budget: Mutex::new((Instant::now(), 0)),
        });
        Ok(WebConfig { tls, auth })
    }
}

/// A path of the config, relative to the config file's directory when
/// not absolute (as exporter-toolkit resolves them).
fn resolve(dir: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        dir.join(path)
    }
}

fn tls_config(tls: &TlsServerConfig, dir: &Path) -> anyhow::Result<ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cert_file = resolve(dir, &tls.cert_file);
    let certs = CertificateDer::pem_file_iter(&cert_file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("cert_file {}", cert_file.display()))?;
    if certs.is_empty() {
        bail!("cert_file {}: no certificate", cert_file.display());
    }
    let key_file = resolve(dir, &tls.key_file);
    let key = PrivateKeyDer::from_pem_file(&key_file)
        .with_context(|| format!("key_file {}", key_file.display()))?;
    let auth = tls.client_auth_type.unwrap_or_default();
    let verifier = match (&tls.client_ca_file, auth) {
        (_, ClientAuth::NoClientCert) => WebPkiClientVerifier::no_client_auth(),
        (None, _) => bail!("client_auth_type {auth:?} needs client_ca_file"),
        (Some(ca), _) => {
            let ca = resolve(dir, ca);
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(&ca)
                .with_context(|| format!("client_ca_file {}", ca.display()))?
            {
                let cert = cert.with_context(|| format!("client_ca_file {}", ca.display()))?;
                roots
                    .add(cert)
                    .with_context(|| format!("client_ca_file {}", ca.display()))?;
            }
            let builder =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
            let builder = if auth == ClientAuth::VerifyClientCertIfGiven {
                builder.allow_unauthenticated()
            } else {
                builder
            };
            builder
                .build()
                .with_context(|| format!("client_ca_file {}", ca.display()))?
        }
    };
    let versions: &[&rustls::SupportedProtocolVersion] = match tls.min_version {
        Some(TlsVersion::Tls13) => &[&rustls::version::TLS13],
        None | Some(TlsVersion::Tls12) => &[&rustls::version::TLS12, &rustls::version::TLS13],
    };
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .context("TLS versions")?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .context("cert_file and key_file do not make a usable pair")?;
    // One request per connection, HTTP/1.1 only (web.rs).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(users: &[(&str, &str)]) -> BasicAuth {
        BasicAuth {
            users: users
                .iter()
                .map(|(u, p)| (u.to_string(), bcrypt::hash(p, 4).expect("hash")))
                .collect(),
            passed: Mutex::new(HashSet::new()),
            budget: Mutex::new((Instant::now(), 0)),
        }
    }

    fn basic(user: &str, password: &str) -> HeaderValue {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        HeaderValue::from_str(&format!("Basic {token}")).expect("header")
    }

    #[test]
    fn basic_auth_accepts_only_the_right_password() {
        let a = auth(&[("prom", "s3cret:with colon")]);
        assert_eq!(a.check(None), Err(Refusal::NoCredentials));
        let bearer = HeaderValue::from_static("Bearer abc");
        assert_eq!(a.check(Some(&bearer)), Err(Refusal::NoCredentials));
        let junk = HeaderValue::from_static("Basic !!!");
        assert_eq!(a.check(Some(&junk)), Err(Refusal::NoCredentials));
        assert_eq!(
            a.check(Some(&basic("prom", "wrong"))),
            Err(Refusal::WrongCredentials)
        );
        assert_eq!(
            a.check(Some(&basic("other", "s3cret:with colon"))),
            Err(Refusal::WrongCredentials)
        );
        assert_eq!(a.check(Some(&basic("prom", "s3cret:with colon"))), Ok(()));
        // Cached: passes again with the budget spent.
        *a.budget.lock().expect("lock") = (Instant::now(), VERIFICATIONS_PER_SECOND);
        assert_eq!(a.check(Some(&basic("prom", "s3cret:with colon"))), Ok(()));
        assert_eq!(
            a.check(Some(&basic("prom", "guess"))),
            Err(Refusal::TooManyAttempts)
        );
    }

    fn load(yaml: &str) -> anyhow::Result<WebConfig> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("web.yml");
        std::fs::write(&path, yaml).expect("write");
        WebConfig::load(&path)
    }

    #[test]
    fn bad_files_are_refused_with_what_is_wrong() {
        let err = load("tls_server_config:\n  cert_file: a\n  key_file: b\n  colour: red\n")
            .err()
            .expect("unknown key");
        assert!(
            format!("{err:#}").contains("unknown field `colour`"),
            "{err:#}"
        );
        let err = load("basic_auth_users:\n  prom: plaintext\n")
            .err()
            .expect("not a hash");
        assert!(format!("{err:#}").contains("not a bcrypt hash"), "{err:#}");
        let err = load("tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n")
            .err()
            .expect("missing files");
        assert!(format!("{err:#}").contains("missing.crt"), "{err:#}");
        let err = load("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAnyClientCert\n")
            .err()
            .expect("unverified client certs");
        assert!(
            format!("{err:#}").contains("RequireAnyClientCert"),
            "{err:#}"
        );
        let ok = load("basic_auth_users:\n  prom: $2b$04$abcdefghijklmnopqrstuu5Vtt4V1G7pEd5u7wWqDrdl1Ah8X7Ug6\n")
            .expect("a hash");
        assert!(ok.tls.is_none() && ok.auth.is_some());
    }
}
