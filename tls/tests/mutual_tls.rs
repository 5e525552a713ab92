//! The CA, the issued certificates and the rustls configurations, over
//! real TCP handshakes on port 0.

use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use once_tls::{Identity, LocalCa, Role, Tls, TlsFiles};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn identity(region: &str, role: Role) -> Identity {
    Identity::new(region, role).unwrap()
}

fn issue(ca: &LocalCa, dir: &Path, name: &str, who: &Identity) -> Tls {
    let files = TlsFiles::named(dir, name);
    ca.issue_to(who, &["localhost".into()], &[LOCALHOST], &files)
        .unwrap();
    Tls::load_polling(&files, Duration::from_secs(3600)).unwrap()
}

/// Serves one handshake at a time; answers with the client's identity URI.
async fn server(tls: &Tls) -> std::net::SocketAddr {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.server_config());
    let listener = TcpListener::bind((LOCALHOST, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(mut stream) = acceptor.accept(tcp).await {
                    let peer = stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| Identity::of_certificate(&c[0]))
                        .map(|i| i.uri())
                        .unwrap_or_default();
                    let _ = stream.write_all(peer.as_bytes()).await;
                    let _ = stream.shutdown().await;
                }
            });
        }
    });
    addr
}

/// Connects with `config`; the identity the server saw, or the error.
async fn call(config: rustls::ClientConfig, addr: std::net::SocketAddr) -> Result<String, String> {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let mut stream = connector
        .connect(ServerName::IpAddress(LOCALHOST.into()), tcp)
        .await
        .map_err(|e| e.to_string())?;
    let mut seen = String::new();
    stream
        .read_to_string(&mut seen)
        .await
        .map_err(|e| e.to_string())?;
    if seen.is_empty() {
        return Err("the server closed without answering".into());
    }
    Ok(seen)
}

#[tokio::test]
async fn a_client_with_a_certificate_of_the_ca_is_seen_as_its_identity() {
    let dir = tempfile::tempdir().unwrap();
    let ca = LocalCa::create(&dir.path().join("ca"), "test CA").unwrap();
    let member = issue(
        &ca,
        dir.path(),
        "store",
        &identity("eu-west", Role::StoreMember),
    );
    let node = issue(&ca, dir.path(), "node", &identity("us-east", Role::Node));
    assert_eq!(
        node.identity(),
        Some(identity("us-east", Role::Node)),
        "the certificate names its identity"
    );
    let addr = server(&member).await;
    assert_eq!(
        call(node.client_config(), addr).await.unwrap(),
        "spiffe://once/us-east/node"
    );
}

#[tokio::test]
async fn a_client_without_a_certificate_or_from_another_ca_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ca = LocalCa::create(&dir.path().join("ca"), "test CA").unwrap();
    let member = issue(
        &ca,
        dir.path(),
        "store",
        &identity("eu-west", Role::StoreMember),
    );
    let addr = server(&member).await;

    // Trusts the CA but presents nothing.
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(dir.path().join("ca.pem")).unwrap())
        .unwrap();
    let anonymous = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    assert!(
        call(anonymous, addr).await.is_err(),
        "no client certificate"
    );

    // A certificate with a valid identity, from another CA.
    let other = tempfile::tempdir().unwrap();
    let foreign_ca = LocalCa::create(&other.path().join("ca"), "foreign CA").unwrap();
    let foreign = issue(
        &foreign_ca,
        other.path(),
        "op",
        &identity("eu-west", Role::Operator),
    );
    assert!(
        call(foreign.client_config(), addr).await.is_err(),
        "a foreign CA's certificate"
    );
}

#[tokio::test]
async fn a_client_refuses_a_server_of_another_ca() {
    let dir = tempfile::tempdir().unwrap();
    let ca = LocalCa::create(&dir.path().join("ca"), "test CA").unwrap();
    let node = issue(&ca, dir.path(), "node", &identity("eu-west", Role::Node));
    let other = tempfile::tempdir().unwrap();
    let foreign_ca = LocalCa::create(&other.path().join("ca"), "foreign CA").unwrap();
    let impostor = issue(
        &foreign_ca,
        other.path(),
        "store",
        &identity("eu-west", Role::StoreMember),
    );
    let addr = server(&impostor).await;
    assert!(call(node.client_config(), addr).await.is_err());
}

#[tokio::test]
async fn a_reissued_certificate_is_presented_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let ca = LocalCa::create(&dir.path().join("ca"), "test CA").unwrap();
    let member = issue(
        &ca,
        dir.path(),
        "store",
        &identity("eu-west", Role::StoreMember),
    );
    let client = issue(&ca, dir.path(), "client", &identity("eu-west", Role::Node));
    let addr = server(&member).await;
    let config = client.client_config();
    assert_eq!(
        call(config.clone(), addr).await.unwrap(),
        "spiffe://once/eu-west/node"
    );

    // Rotated in place: same files, a new key and certificate.
    let files = TlsFiles::named(dir.path(), "client");
    std::thread::sleep(Duration::from_millis(20));
    ca.issue_to(
        &identity("eu-west", Role::Operator),
        &[],
        &[LOCALHOST],
        &files,
    )
    .unwrap();
    assert!(client.key().reload_if_changed());
    assert_eq!(client.identity(), Some(identity("eu-west", Role::Operator)));
    assert_eq!(
        call(config, addr).await.unwrap(),
        "spiffe://once/eu-west/operator",
        "the same ClientConfig presents the new certificate"
    );
    assert!(!client.key().reload_if_changed(), "nothing changed since");
}

#[test]
fn keys_are_written_for_their_owner_only() {
    let dir = tempfile::tempdir().unwrap();
    let ca = LocalCa::create(&dir.path().join("ca"), "test CA").unwrap();
    let files = TlsFiles::in_dir(&dir.path().join("out"));
    ca.issue_to(&identity("eu-west", Role::Router), &[], &[], &files)
        .unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&files.key), 0o600);
    assert_eq!(mode(&dir.path().join("ca").join("ca-key.pem")), 0o600);
    assert!(
        LocalCa::create(&dir.path().join("ca"), "again").is_err(),
        "a CA is never replaced"
    );
    let reopened = LocalCa::open(&dir.path().join("ca")).unwrap();
    assert_eq!(reopened.cert_pem(), ca.cert_pem());
}

/// A CA confined to `localhost` and 127.0.0.0/8 (what `once up` makes): a
/// leaf it signed for those names is accepted; one naming anything else —
/// a stolen CA key aside, what a careless `once certs issue` could make —
/// is refused by the peer, as a client and as a server.
#[tokio::test]
async fn a_leaf_naming_what_its_ca_does_not_permit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut policy = once_tls::ca::CaPolicy::new("confined CA");
    policy.permitted_dns = vec!["localhost".into()];
    policy.permitted_ips = vec![(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0)), 8)];
    let ca = LocalCa::create_with(&dir.path().join("ca"), &policy).unwrap();
    let member = issue(
        &ca,
        dir.path(),
        "store",
        &identity("eu-west", Role::StoreMember),
    );
    let addr = server(&member).await;
    let node = issue(&ca, dir.path(), "node", &identity("us-east", Role::Node));
    assert_eq!(
        call(node.client_config(), addr).await.unwrap(),
        "spiffe://once/us-east/node",
        "within its names"
    );

    let files = TlsFiles::named(dir.path(), "outside");
    ca.issue_to(
        &identity("us-east", Role::Node),
        // Its own names too: only the constraints can refuse it.
        &["localhost".into(), "payments.example".into()],
        &[LOCALHOST, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 5))],
        &files,
    )
    .unwrap();
    let outside = Tls::load_polling(&files, Duration::from_secs(3600)).unwrap();
    assert!(
        call(outside.client_config(), addr).await.is_err(),
        "a client naming what the CA does not permit"
    );
    let outside_server = server(&outside).await;
    assert!(
        call(node.client_config(), outside_server).await.is_err(),
        "a server naming what the CA does not permit"
    );
}
