//! `once certs` and what `once store` does with its output: a member
//! starts only with a store certificate of a CA, or in plaintext when told
//! so in as many words (`--insecure-plaintext`).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::helpers::ONCE;

fn once(args: &[&str]) -> std::process::Output {
    std::process::Command::new(ONCE)
        .args(args)
        .env_remove("ONCE_TLS_CA")
        .env_remove("ONCE_TLS_CERT")
        .env_remove("ONCE_TLS_KEY")
        .output()
        .expect("running once")
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn once_certs_issues_what_a_member_starts_with_and_plaintext_needs_saying() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca");
    let store = dir.path().join("store");
    let node = dir.path().join("node");
    let data = dir.path().join("data");
    assert!(
        once(&["certs", "init", "--dir", path(&ca)])
            .status
            .success()
    );
    assert!(
        !once(&["certs", "init", "--dir", path(&ca)])
            .status
            .success(),
        "a CA in use is never replaced"
    );
    let issued = once(&[
        "certs",
        "issue",
        "--ca",
        path(&ca),
        "--region",
        "eu-west",
        "--role",
        "store",
        "--dns",
        "store.eu-west.once.internal",
        "--ip",
        "10.0.0.7",
        "--out",
        path(&store),
    ]);
    assert!(issued.status.success(), "{issued:?}");
    assert!(
        once(&[
            "certs",
            "issue",
            "--ca",
            path(&ca),
            "--region",
            "eu-west",
            "--role",
            "node",
            "--out",
            path(&node),
        ])
        .status
        .success()
    );
    for key in [ca.join("ca-key.pem"), store.join("key.pem")] {
        let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", key.display());
    }

    let member = |tls: &Path, extra: &[&str]| {
        let (ca, cert, key) = (
            tls.join("ca.pem"),
            tls.join("cert.pem"),
            tls.join("key.pem"),
        );
        let mut args = vec![
            "store",
            "--check-config",
            "--id",
            "1",
            "--data-dir",
            path(&data),
        ];
        args.extend([
            "--tls-ca",
            path(&ca),
            "--tls-cert",
            path(&cert),
            "--tls-key",
            path(&key),
        ]);
        args.extend(extra);
        once(&args)
    };
    let checked = member(&store, &[]);
    assert!(checked.status.success(), "{checked:?}");
    let config: serde_json::Value = serde_json::from_slice(&checked.stdout).unwrap();
    assert_eq!(config["tls"], "spiffe://once/eu-west/store");

    // A node's certificate is not a member's.
    let wrong = member(&node, &[]);
    assert_eq!(wrong.status.code(), Some(64), "{wrong:?}");

    // No certificate: refused, unless plaintext is asked for, loudly.
    let bare = once(&[
        "store",
        "--check-config",
        "--id",
        "1",
        "--data-dir",
        path(&data),
    ]);
    assert_eq!(bare.status.code(), Some(64), "{bare:?}");
    assert!(String::from_utf8_lossy(&bare.stderr).contains("mutual TLS is required"));
    let plaintext = once(&[
        "store",
        "--check-config",
        "--insecure-plaintext",
        "--id",
        "1",
        "--data-dir",
        path(&data),
    ]);
    assert!(plaintext.status.success(), "{plaintext:?}");
    assert!(String::from_utf8_lossy(&plaintext.stderr).contains("INSECURE"));
}
