//! TLS for the write listener (rustls): the certificate chain and key from PEM files, client
//! certificates verified against a CA file when one is set, and all three read again when their
//! bytes change (cert-manager and a rotated Secret replace the files in place), without a
//! restart. A file that fails to load leaves the configuration before it in force.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::http::write::config::{ClientAuth, WriteTlsConfig};

/// Why a TLS configuration could not be built. Names files, never shows key material.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {0}: {1}")]
    Read(String, #[source] std::io::Error),
    /// A file holds no usable PEM item of the kind wanted.
    #[error("{0}: {1}")]
    Pem(String, String),
    /// rustls refused the certificate, key or CA.
    #[error("{0}")]
    Rustls(String),
}

/// Where a TLS configuration is read from.
#[derive(Debug)]
struct Files {
    cert: PathBuf,
    key: PathBuf,
    client_ca: Option<PathBuf>,
    client_auth: ClientAuth,
}

/// The files of a TLS listener and the configuration built from their current bytes.
#[derive(Debug)]
pub(crate) struct ReloadingTls {
    files: Files,
    /// The bytes the current configuration was built from (or last failed to build from).
    seen: Mutex<Vec<Vec<u8>>>,
    current: RwLock<Arc<ServerConfig>>,
}

impl ReloadingTls {
    /// Builds the configuration of `[write.tls]`; `None` when TLS is off (no `cert_file`).
    pub fn load(config: &WriteTlsConfig) -> Result<Option<ReloadingTls>, TlsError> {
        let (Some(cert), Some(key)) = (&config.cert_file, &config.key_file) else {
            return Ok(None);
        };
        let files = Files {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: config.client_ca_file.clone(),
            client_auth: config.client_auth,
        };
        let bytes = files.read()?;
        let built = files.build(&bytes)?;
        Ok(Some(ReloadingTls {
            files,
            seen: Mutex::new(bytes),
            current: RwLock::new(Arc::new(built)),
        }))
    }

    /// Whether a verified client certificate is a credential here.
    pub(crate) fn verifies_clients(&self) -> bool {
        self.files.client_ca.is_some()
    }

    /// An acceptor with the configuration in force now.
    pub(crate) fn acceptor(&self) -> TlsAcceptor {
        let config = Arc::clone(&self.current.read().unwrap_or_else(|p| p.into_inner()));
        TlsAcceptor::from(config)
    }

    /// Builds the configuration again when a file's bytes changed: `None` when none did.
    pub(crate) fn reload(&self) -> Option<Result<(), TlsError>> {
        let bytes = match self.files.read() {
            Ok(b) => b,
            Err(e) => return Some(Err(e)),
        };
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if *seen == bytes {
            return None;
        }
        // A certificate and its key are replaced one after the other: a mismatch in between fails
        // here, and the next check (with both new) succeeds.
        let result = self.files.build(&bytes).map(|config| {
            *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(config);
        });
        *seen = bytes;
        Some(result)
    }
}

impl Files {
    fn paths(&self) -> Vec<&Path> {
        let mut p = vec![self.cert.as_path(), self.key.as_path()];
        p.extend(self.client_ca.as_deref());
        p
    }

    fn read(&self) -> Result<Vec<Vec<u8>>, TlsError> {
        self.paths()
            .into_iter()
            .map(|p| std::fs::read(p).map_err(|e| TlsError::Read(p.display().to_string(), e)))
            .collect()
    }

    fn build(&self, bytes: &[Vec<u8>]) -> Result<ServerConfig, TlsError> {
        let shown = |p: &Path| p.display().to_string();
        let certs = certificates(&bytes[0]).map_err(|e| TlsError::Pem(shown(&self.cert), e))?;
        let key = PrivateKeyDer::from_pem_slice(&bytes[1])
            .map_err(|e| TlsError::Pem(shown(&self.key), format!("no private key: {e}")))?;
        let builder = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Rustls(e.to_string()))?;
        let builder = match (&self.client_ca, bytes.get(2)) {
            (Some(path), Some(ca)) => {
                let mut roots = rustls::RootCertStore::empty();
                for c in certificates(ca).map_err(|e| TlsError::Pem(shown(path), e))? {
                    roots
                        .add(c)
                        .map_err(|e| TlsError::Pem(shown(path), e.to_string()))?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
                let verifier = match self.client_auth {
                    ClientAuth::Optional => verifier.allow_unauthenticated(),
                    ClientAuth::Required => verifier,
                };
                let verifier = verifier
                    .build()
                    .map_err(|e| TlsError::Rustls(format!("{}: {e}", shown(path))))?;
                builder.with_client_cert_verifier(verifier)
            }
            _ => builder.with_no_client_auth(),
        };
        let mut config = builder
            .with_single_cert(certs, key)
            .map_err(|e| TlsError::Rustls(format!("{}: {e}", shown(&self.cert))))?;
        // HTTP/2 for OTLP/gRPC, HTTP/1.1 for the rest.
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(config)
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no certificate".into());
    }
    Ok(certs)
}
